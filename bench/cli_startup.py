"""CLI start-up cost: a full dry-run render against a bare interpreter start, in the same run.

    python bench/cli_startup.py [--repeat 20]

Prints the median wall time of each and their ratio. The CLI never imports
torch, so a dry run should cost a small multiple of `python -c pass`.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time


def timed(cmd, env, cwd) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    cwd = tempfile.mkdtemp()
    env = dict(os.environ, XDG_CONFIG_HOME=cwd)
    cases = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "summit-jobs --help": [sys.executable, "-m", "summit_jobs", "--help"],
        "dry-run render (summit, 256 nodes)": [sys.executable, "-m", "summit_jobs", "--machine", "summit", "submit",
                                               "--nodes", "256", "--project", "ABC123", "--dry-run"],
        "python -c 'import torch'": [sys.executable, "-c", "import torch"],
    }
    times = {name: [] for name in cases}
    for _ in range(args.repeat):  # interleaved, so machine noise hits every case alike
        for name, cmd in cases.items():
            times[name].append(timed(cmd, env, cwd))
    base = statistics.median(times["python -c pass"])
    print(f"{'case':40s} {'median s':>9s} {'ratio':>7s}")
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"{name:40s} {m:9.3f} {m / base:7.2f}")


if __name__ == "__main__":
    main()
