"""Epoch-boundary cost at the paper's epoch length: how long a rank waits for each batch, and for an epoch's
first batch above all, with the training pool reading into the next epoch (now) and with one pool pass per
epoch (before: the next pass started with an empty queue).

The data is real: JPEG frames (340x256, Kinetics' usual storage size) in tar shards, read by the trainer's
own TrainClips through its Pipeline, forkserver workers as in training. The consumer stands in for the
GPU: it takes a fixed time per step (a sleep, so the CPU is the workers'), chosen from the workers' measured
steady-state rate so that they keep up (``--headroom`` x the time they need for a batch). Epochs are 19
steps (the paper's 1,536 GPUs); a step is one batch. Each mode runs whole runs of ``--epochs`` epochs; the
order alternates (before, now, now, before, ...) so that other work on a shared machine falls on both alike.

Figures per mode, pooled over the repeats: the wait for an epoch's first batch (epochs 2 on; epoch 1 starts
the pool) against the median wait of the other steps, and the total data wait as a share of the run (with
and without the pool's start).

Usage:
  .venv/bin/python bench/epoch_boundary.py                 # 2 workers, 19 steps x 6 epochs, 2 repeats
  .venv/bin/python bench/epoch_boundary.py --steps 12 --repeats 3
  .venv/bin/python bench/epoch_boundary.py --smoke         # tiny: checks that it runs
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench.input_pipeline import make_frames  # noqa: E402
from benchstats import spread  # noqa: E402
from trainer.data.clips import ClipSpec  # noqa: E402
from trainer.data.datasets import Pipeline, TrainClips  # noqa: E402
from trainer.data.sampler import MicroBatchSampler  # noqa: E402
from trainer.shards import ShardWriter, write_manifest  # noqa: E402

SPEC = ClipSpec(num_segments=8, stride=4, size=112, scale_size=128, test_crops=1, test_size=112)
MODES = {"before": "one pass per epoch (before)", "now": "read into the next epoch (now)"}


def make_shards(root: Path, videos: int, frames: int) -> None:
    rng = np.random.default_rng(0)
    w = ShardWriter(root / "train-000.tar", "train")
    for i in range(videos):
        w.add(f"train{i:04d}", i % 4, make_frames(frames, 340, 256, rng))
    write_manifest(root / "manifest.json", {"format": "summit-jobs-shards/1", "name": "bench",
                                            "classes": ["a", "b", "c", "d"], "shards": [w.close()]})


def sampler(n: int, batch: int, epoch: int) -> MicroBatchSampler:
    return MicroBatchSampler(n, 0, 1, 1, batch, 0, epoch)


def steady_batch_seconds(root: Path, a: argparse.Namespace) -> Tuple[float, List[float]]:
    """(seconds per batch the workers deliver when nobody waits on anything else: a read-ahead pass over
    epochs 1-2 after epoch 0 started the pool; the seconds ``next`` takes for a batch that is surely ready,
    after a pause long enough for the workers to fill their queue: the cost of receiving a batch, which
    every step pays however far ahead the workers are)."""
    train = TrainClips(str(root), SPEC, 0)
    pipe = Pipeline(train, {}, a.workers, False, a.prefetch)
    try:
        ahead = lambda e: sampler(len(train), a.batch, e) if e < 4 else None   # noqa: E731
        for b in pipe.train_batches(sampler(len(train), a.batch, 0), ahead=ahead):
            pass
        t0, count = time.perf_counter(), 0
        for epoch in (1, 2):
            for _ in pipe.train_batches(sampler(len(train), a.batch, epoch), ahead=ahead):
                count += 1
        per_batch = (time.perf_counter() - t0) / count
        ready = []
        it = pipe.train_batches(sampler(len(train), a.batch, 3), ahead=ahead)
        for _ in range(min(5, len(sampler(len(train), a.batch, 3)))):
            time.sleep(2 * a.workers * a.prefetch * per_batch + 0.05)
            t0 = time.perf_counter()
            next(it)
            ready.append(time.perf_counter() - t0)
        return per_batch, ready
    finally:
        pipe.close()


def one_run(root: Path, mode: str, step_s: float, a: argparse.Namespace) -> Dict[str, object]:
    """A run of ``a.epochs`` epochs: every step's wait for its batch, by epoch, and the run's wall time."""
    train = TrainClips(str(root), SPEC, 0)
    pipe = Pipeline(train, {}, a.workers, False, a.prefetch)
    n = len(train)
    ahead = (lambda e: sampler(n, a.batch, e) if e < a.epochs else None) if mode == "now" else None
    waits: List[List[float]] = []
    t_run = time.perf_counter()
    try:
        for epoch in range(a.epochs):
            it = pipe.train_batches(sampler(n, a.batch, epoch), ahead=ahead)
            row = []
            for _ in range(a.steps):
                t0 = time.perf_counter()
                next(it)
                row.append(time.perf_counter() - t0)
                time.sleep(step_s)          # the step: the GPU's time, the CPU left to the workers
            waits.append(row)
            del it
        return {"waits": waits, "run_s": time.perf_counter() - t_run, "passes": pipe.train_pool.passes}
    finally:
        pipe.close()


def summary(runs: List[Dict[str, object]]) -> Dict[str, object]:
    firsts = [w for r in runs for w in [row[0] for row in r["waits"][1:]]]
    others = [w for r in runs for row in r["waits"] for w in row[1:]]
    total = sum(sum(sum(row) for row in r["waits"]) for r in runs)
    start = sum(r["waits"][0][0] for r in runs)
    run_s = sum(r["run_s"] for r in runs)
    median_other = statistics.median(others)
    return {"epoch_first_wait_ms": spread(firsts, 3, 1000), "other_step_wait_ms": spread(others, 3, 1000),
            "first_over_other": round(statistics.median(firsts) / max(median_other, 1e-9), 2),
            "wait_share_pct": round(100 * total / run_s, 2),
            "wait_share_after_start_pct": round(100 * (total - start) / (run_s - start), 2),
            "pool_start_s": round(start / len(runs), 3), "passes_per_run": runs[0]["passes"],
            "run_s": round(run_s / len(runs), 2)}


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--prefetch", type=int, default=2, help="batches each worker holds ready (the trainer's "
                                                            "--prefetch)")
    p.add_argument("--steps", type=int, default=19, help="steps per epoch (19: the paper's 1,536 GPUs)")
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--frames", type=int, default=40, help="frames per stored video")
    p.add_argument("--repeats", type=int, default=2, help="runs of each mode, in alternating order")
    p.add_argument("--headroom", type=float, default=1.5,
                   help="the step's time over the workers' steady-state time per batch (> 1: they keep up)")
    p.add_argument("--json", help="write the figures to this file as well")
    p.add_argument("--smoke", action="store_true", help="1 worker, 3 steps x 2 epochs: checks that it runs.")
    a = p.parse_args(argv)
    if a.smoke:
        a.workers, a.steps, a.epochs, a.frames, a.batch, a.repeats = 1, 3, 2, 16, 2, 2
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_shards(root, a.steps * a.batch, a.frames)
        per_batch, ready = steady_batch_seconds(root, a)
        step_s = a.headroom * per_batch
        print(f"{a.workers} forkserver workers, batch {a.batch} of 8x112 clips from 340x256 JPEGs, {a.steps} steps "
              f"x {a.epochs} epochs, {a.repeats} runs of each mode; workers' steady state {1000 * per_batch:.1f} ms "
              f"per batch, step {1000 * step_s:.1f} ms ({a.headroom:g}x); receiving a ready batch "
              f"{1000 * statistics.median(ready):.2f} ms")
        order = [m for i in range(a.repeats) for m in (("before", "now") if i % 2 == 0 else ("now", "before"))]
        runs: Dict[str, List[Dict[str, object]]] = {m: [] for m in MODES}
        for mode in order:
            runs[mode].append(one_run(root, mode, step_s, a))
        out = {"workers": a.workers, "prefetch": a.prefetch, "steps": a.steps, "epochs": a.epochs,
               "batch": a.batch, "repeats": a.repeats, "order": order, "steady_batch_ms": round(1000 * per_batch, 2),
               "step_ms": round(1000 * step_s, 2), "headroom": a.headroom,
               "ready_batch_ms": spread(ready, 3, 1000)}
        print(f"{'training pool':<32}{'epoch first batch (ms)':>26}{'other steps (ms)':>22}{'ratio':>7}"
              f"{'data wait':>11}{'after start':>13}{'passes':>8}")
        for mode, name in MODES.items():
            s = summary(runs[mode])
            out[mode] = s
            f, o = s["epoch_first_wait_ms"], s["other_step_wait_ms"]
            print(f"{name:<32}{f['median']:>9.2f} ({f['min']:.2f}-{f['max']:.2f}){o['median']:>9.2f} "
                  f"({o['min']:.2f}-{o['max']:.2f}){s['first_over_other']:>7.1f}x{s['wait_share_pct']:>9.2f}%"
                  f"{s['wait_share_after_start_pct']:>12.2f}%{s['passes_per_run']:>8}")
        print("epoch first batch: the wait for the first batch of epochs 2 on, median (min-max); other steps: "
              "every other step's wait; data wait: all waits over the run's time, and without the pool's start")
        print(json.dumps(out))
        if a.json:
            Path(a.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
