"""A rank's start-up and a tiny run, in CPU seconds: ``python -m trainer`` as shipped (the cyclic collector
paused during the imports, then what they made frozen: trainer.loop.startup) against the same command with the
collector left on throughout (``gc.disable`` made a no-op before the trainer's first line: what it did before).

Each repeat runs both, the order alternating, one rank, one epoch of 4 steps of the tiny model on 8 synthetic
clips (4 frames of 32x32), no DataLoader workers: nearly all of its time is start-up (importing torch and
torch._dynamo), as in the many short runs of the test suite and in the first seconds of every rank of a real
job. The figure is the child's user+system CPU time (resource.getrusage), so other work on a shared machine
weighs less than on wall time.

Usage:
  .venv/bin/python bench/rank_startup.py               # 7 repeats
  .venv/bin/python bench/rank_startup.py --repeat 3
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from benchstats import spread  # noqa: E402
from trainer_utils import free_jobid, make_dataset, rank_env, tiny_args  # noqa: E402

#: The command with the collector left on: gc.disable is a no-op, so startup.pause pauses nothing and
#: startup.imports_done (which acts only on a paused collector) freezes nothing.
COLLECTOR_ON = ("import gc, runpy, sys; gc.disable = lambda: None; sys.argv[0] = 'trainer'; "
                "runpy.run_module('trainer', run_name='__main__', alter_sys=True)")


def child_cpu(argv: List[str], env: Dict[str, str]) -> float:
    """CPU seconds (user + system) of one run of ``argv``, which must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(argv, env=env, cwd=str(ROOT), capture_output=True, text=True, timeout=300)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:4])} failed ({out.returncode}):\n{out.stderr[-2000:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = make_dataset(root / "data", train=8, val=4, frames=4, size=32)
        env = rank_env(0, 1, free_jobid())
        modes = {"shipped": [sys.executable, "-m", "trainer"], "collector on": [sys.executable, "-c", COLLECTOR_ON]}
        cpu: Dict[str, List[float]] = {m: [] for m in modes}
        for i in range(args.repeat):
            order = list(modes) if i % 2 == 0 else list(reversed(modes))
            for mode in order:
                run_dir = root / f"run-{mode.replace(' ', '-')}-{i}"
                cpu[mode].append(child_cpu(modes[mode] + tiny_args(run_dir, data), env))
    result = {m: spread(v) for m, v in cpu.items()}
    result["ratio"] = round(result["collector on"]["median"] / result["shipped"]["median"], 2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
