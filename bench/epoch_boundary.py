"""Epoch-boundary cost: how long a rank waits for the first batch of an epoch (and of a validation)
with worker pools kept for the whole run (--persistent-workers on) and started anew for every pass
(off: what the trainer did before).

The data is real: JPEG frames (340x256, Kinetics' usual storage size) in tar
shards read by the trainer's own TrainClips/EvalClips through its Pipeline,
forkserver workers as in training. Epoch 0 starts the pools in both modes;
the figure is the median over the later epochs.

Usage:
  .venv/bin/python bench/epoch_boundary.py                 # 2 workers, 6 epochs
  .venv/bin/python bench/epoch_boundary.py --workers 4 --epochs 8
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.input_pipeline import make_frames  # noqa: E402
from trainer.clips import ClipSpec  # noqa: E402
from trainer.data import EvalClips, Pipeline, TrainClips  # noqa: E402
from trainer.sampler import MicroBatchSampler  # noqa: E402
from trainer.shards import ShardWriter, write_manifest  # noqa: E402


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


def one_mode(root: Path, persistent: bool, a: argparse.Namespace) -> Dict[str, List[float]]:
    spec = ClipSpec(num_segments=8, stride=4, size=112, scale_size=128, test_crops=1, test_size=112)
    train = TrainClips(str(root), spec, 0)
    val = EvalClips(str(root), spec, 1, "val")
    pipe = Pipeline(train, {"val": val}, a.workers, False, 2, persistent)
    out: Dict[str, List[float]] = {"train": [], "val": []}
    try:
        for epoch in range(a.epochs):
            sampler = MicroBatchSampler(len(train), 0, 1, 1, a.batch, 0, epoch)
            t0 = time.perf_counter()
            it = pipe.train_batches(sampler)
            next(it)
            out["train"].append(time.perf_counter() - t0)
            for _ in it:   # the rest of the epoch
                pass
            t0 = time.perf_counter()
            ev = pipe.eval_batches(val, list(range(len(val))), a.batch)
            next(ev)
            out["val"].append(time.perf_counter() - t0)
            for _ in ev:
                pass
    finally:
        pipe.close()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--videos", type=int, default=16)
    p.add_argument("--frames", type=int, default=40)
    p.add_argument("--batch", type=int, default=4)
    a = p.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_shards(root, a.videos, a.frames)
        print(f"{a.workers} forkserver workers, {a.videos} videos per split, batch {a.batch}, {a.epochs} epochs")
        print(f"{'pools':<22}{'epoch start (s)':>18}{'validation start (s)':>24}")
        res = {}
        for persistent in (False, True):
            r = one_mode(root, persistent, a)
            tr, va = statistics.median(r["train"][1:]), statistics.median(r["val"][1:])
            res[persistent] = tr + va
            name = "kept for the run" if persistent else "started every pass"
            print(f"{name:<22}{tr:>18.3f}{va:>24.3f}   (first epoch {r['train'][0]:.3f} s)")
        print(f"per epoch boundary (epoch + validation start): {res[False]:.3f} s -> {res[True]:.3f} s "
              f"({res[False] / max(res[True], 1e-9):.1f}x)")


if __name__ == "__main__":
    main()
