"""Epoch-boundary cost: how long a rank waits for the first batch of an epoch (and of a validation)
with worker pools kept for the whole run (--persistent-workers on) and started anew for every pass
(off: what the trainer did before).

The data is real: JPEG frames (340x256, Kinetics' usual storage size) in tar
shards read by the trainer's own TrainClips/EvalClips through its Pipeline,
forkserver workers as in training. Both modes live side by side and run
interleaved: epoch by epoch, one epoch (and its validation) of each, the mode
that goes first alternating, so that other work on a shared machine falls on
both alike. Epoch 0 starts the pools in both modes; the figures are the
medians (and min-max) over the later epochs.

Usage:
  .venv/bin/python bench/epoch_boundary.py                 # 2 workers, 6 epochs
  .venv/bin/python bench/epoch_boundary.py --workers 4 --epochs 8
  .venv/bin/python bench/epoch_boundary.py --smoke         # tiny: checks that it runs
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.input_pipeline import make_frames  # noqa: E402
from trainer.data.clips import ClipSpec  # noqa: E402
from trainer.data.datasets import EvalClips, Pipeline, TrainClips  # noqa: E402
from trainer.data.sampler import MicroBatchSampler  # noqa: E402
from trainer.shards import ShardWriter, write_manifest  # noqa: E402
from benchstats import spread


def make_shards(root: Path, videos: int, frames: int) -> None:
    rng = np.random.default_rng(0)
    entries = []
    for split in ("train", "val"):
        w = ShardWriter(root / f"{split}-000.tar", split)
        for i in range(videos):
            w.add(f"{split}{i:04d}", i % 4, make_frames(frames, 340, 256, rng))
        entries.append(w.close())
    write_manifest(root / "manifest.json", {"format": "summit-jobs-shards/1", "name": "bench",
                                            "classes": ["a", "b", "c", "d"], "shards": entries})


def first_batch(it) -> float:
    t0 = time.perf_counter()
    next(it)
    return time.perf_counter() - t0


class Mode:
    """One way of running the pools (kept for the run, or started every pass) over the shared data."""

    def __init__(self, root: Path, persistent: bool, a: argparse.Namespace):
        spec = ClipSpec(num_segments=8, stride=4, size=112, scale_size=128, test_crops=1, test_size=112)
        self.persistent, self.batch = persistent, a.batch
        self.train = TrainClips(str(root), spec, 0)
        self.val = EvalClips(str(root), spec, 1, "val")
        self.pipe = Pipeline(self.train, {"val": self.val}, a.workers, False, 2, persistent)
        self.waits: Dict[str, List[float]] = {"train": [], "val": []}

    def epoch(self, epoch: int) -> None:
        """One epoch and one validation; records the wait for the first batch of each."""
        sampler = MicroBatchSampler(len(self.train), 0, 1, 1, self.batch, 0, epoch)
        t0 = time.perf_counter()
        it = self.pipe.train_batches(sampler)
        next(it)
        self.waits["train"].append(time.perf_counter() - t0)
        for _ in it:   # the rest of the epoch
            pass
        t0 = time.perf_counter()
        ev = self.pipe.eval_batches(self.val, list(range(len(self.val))), self.batch)
        next(ev)
        self.waits["val"].append(time.perf_counter() - t0)
        for _ in ev:
            pass

    def close(self) -> None:
        self.pipe.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--videos", type=int, default=16)
    p.add_argument("--frames", type=int, default=40)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--smoke", action="store_true", help="1 worker, 2 epochs of 4 videos: checks that it runs.")
    a = p.parse_args()
    if a.smoke:
        a.workers, a.epochs, a.videos, a.frames, a.batch = 1, 2, 4, 16, 2
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_shards(root, a.videos, a.frames)
        print(f"{a.workers} forkserver workers, {a.videos} videos per split, batch {a.batch}, {a.epochs} epochs "
              "of each mode, interleaved")
        modes = {False: Mode(root, False, a), True: Mode(root, True, a)}
        order: List[List[str]] = []
        try:
            for epoch in range(a.epochs):
                firsts = (False, True) if epoch % 2 == 0 else (True, False)
                for persistent in firsts:
                    modes[persistent].epoch(epoch)
                order.append(["kept" if m else "every pass" for m in firsts])
        finally:
            for m in modes.values():
                m.close()
        print(f"{'pools':<22}{'epoch start (s)':>26}{'validation start (s)':>26}   median (min-max) of epochs 1-"
              f"{a.epochs - 1}")
        res, out = {}, {"workers": a.workers, "epochs": a.epochs, "videos": a.videos, "order": order}
        for persistent, m in modes.items():
            tr, va = spread(m.waits["train"][1:], 3), spread(m.waits["val"][1:], 3)
            both = spread([t + v for t, v in zip(m.waits["train"][1:], m.waits["val"][1:])], 3)
            res[persistent] = both["median"]
            name = "kept for the run" if persistent else "started every pass"
            out[name] = {"epoch_start_s": tr, "validation_start_s": va, "boundary_s": both,
                         "first_epoch_start_s": round(m.waits["train"][0], 3)}
            print(f"{name:<22}{tr['median']:>8.3f} ({tr['min']:.3f}-{tr['max']:.3f}){va['median']:>10.3f} "
                  f"({va['min']:.3f}-{va['max']:.3f})   (first epoch {m.waits['train'][0]:.3f} s)")
        print(f"per epoch boundary (epoch + validation start): {res[False]:.3f} s -> {res[True]:.3f} s "
              f"({res[False] / max(res[True], 1e-9):.1f}x)")
        print(json.dumps(out))

if __name__ == "__main__":
    main()
