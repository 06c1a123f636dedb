"""`make demo`: the whole workflow on the embedded LSF of this machine.

Each step prints what it does; the steps grow with the product: render and
check job scripts for the reference machine and the local one, then (where
available) synth -> pack -> stage-data -> submit -> simulate -> report.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def step(title: str) -> None:
    print(f"\n== {title}", flush=True)


def run(args, **kw) -> subprocess.CompletedProcess:
    print("$ summit-jobs " + " ".join(args), flush=True)
    proc = subprocess.run([sys.executable, "-m", "summit_jobs", *args], text=True, **kw)
    if proc.returncode != 0:
        sys.exit(f"demo: step failed (exit {proc.returncode})")
    return proc


def main() -> None:
    out = Path(os.environ.get("SUMMIT_JOBS_DEMO_DIR", "demo-out")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    step("Machines this installation knows")
    run(["machines"])
    step("The paper's 256-node Summit job, checked against Summit's policy (dry run)")
    run(["--machine", "summit", "submit", "--nodes", "256", "--project", "ABC123", "--dry-run",
         "--output", str(out / "summit-256.lsf"), "--force"], stdout=subprocess.DEVNULL)
    print(f"script written to {out / 'summit-256.lsf'}")
    step("A 2-node job on the embedded LSF of this machine (dry run)")
    run(["--machine", "local", "submit", "--nodes", "2", "--epochs", "2", "--dry-run",
         "--output", str(out / "local-2.lsf"), "--force"], stdout=subprocess.DEVNULL)
    print(f"script written to {out / 'local-2.lsf'}")


if __name__ == "__main__":
    main()
