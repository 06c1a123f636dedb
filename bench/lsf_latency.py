"""Embedded LSF latencies, and why `summit-jobs status` batches its bjobs calls.

Prints: bsub latency, time from bsub to the job running (dispatch), and the
status query for N jobs as one batched `bjobs -o ... -json ID...` call versus
N calls of one id each (what a naive per-job status loop would do), measured
in the same run. Uses a throw-away LSF state folder.

    .venv/bin/python bench/lsf_latency.py [--jobs 20]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from summit_jobs import lsf  # noqa: E402
from summit_jobs.hosts import embedded_environment  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = embedded_environment(dict(os.environ), 4, 2)
        env["SUMMIT_JOBS_LSF_HOME"] = str(Path(tmp) / "lsf")
        script = Path(tmp) / "job.lsf"
        script.write_text("#!/bin/bash\n#BSUB -nnodes 1\n#BSUB -o /dev/null\necho $LSB_JOBID > started.$LSB_JOBID\n")
        ids, submit_s, dispatch_s = [], [], []
        for i in range(args.jobs):
            t0 = time.perf_counter()
            out = subprocess.run(["bsub", str(script)], env=env, cwd=tmp, capture_output=True, text=True,
                                 timeout=60).stdout
            submit_s.append(time.perf_counter() - t0)
            jid = re.search(r"Job <(\d+)>", out).group(1)
            ids.append(jid)
            while not (Path(tmp) / f"started.{jid}").exists():
                time.sleep(0.005)
            dispatch_s.append(time.perf_counter() - t0)
            print(f"\rsubmitted {i + 1}/{args.jobs}", end="", file=sys.stderr)
        print(file=sys.stderr)
        time.sleep(0.5)

        def bjobs(id_list):
            res = subprocess.run(lsf.bjobs_argv(id_list), env=env, capture_output=True, text=True, timeout=60)
            return lsf.parse_bjobs_json(res.stdout)[0]

        t0 = time.perf_counter()
        batched = bjobs(ids)
        batched_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        single = {}
        for jid in ids:
            single.update(bjobs([jid]))
        single_s = time.perf_counter() - t0
        assert set(batched) == set(single) == set(ids)
        print(json.dumps({
            "jobs": args.jobs,
            "bsub_latency_ms_median": round(statistics.median(submit_s) * 1000, 1),
            "bsub_to_running_ms_median": round(statistics.median(dispatch_s) * 1000, 1),
            "status_batched_one_call_ms": round(batched_s * 1000, 1),
            "status_one_call_per_job_ms": round(single_s * 1000, 1),
            "per_job_over_batched_ratio": round(single_s / batched_s, 1),
        }, indent=2))


if __name__ == "__main__":
    main()
