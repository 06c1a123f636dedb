"""What watching for the warning costs a training step: the trainer's StopFlag and the user helper Chain.

The trainer reads its stop flag once per optimiser step; the flag looks for the job's warning file
(``.warning.<job>``) at most once a second, so a step pays a clock read, and one stat a second.
``Chain.should_stop`` looks for the file at each decision. Figures: ns per call, best of --rounds.

Usage: python bench/stop_poll.py [--calls 200000] [--rounds 5] [--dir DIR]
(--dir: a folder on the file system to measure, e.g. the parallel file system's run directory)
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from trainer import rundir  # noqa: E402
from trainer.loop.chain import Chain  # noqa: E402


def per_call(fn, calls: int, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best * 1e9


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--calls", type=int, default=200000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--dir", default=None)
    a = p.parse_args()
    os.environ["LSB_JOBID"] = "12345"
    with tempfile.TemporaryDirectory(dir=a.dir) as d:
        from trainer.loop.train import StopFlag       # imports torch: the trainer's own flag
        flag = StopFlag(Path(d))
        chain = Chain(run_dir=d)
        rows = [("StopFlag (trainer, per step)", lambda: bool(flag)),
                ("rundir.warned (one stat)", lambda: rundir.warned(d, "12345")),
                ("Chain.should_stop, one rank", lambda: chain.should_stop(1))]
        for name, fn in rows:
            print(f"{name:32s} {per_call(fn, a.calls, a.rounds):9.1f} ns/call")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
