"""Embedded LSF latencies, and why `summit-jobs status` batches its bjobs calls.

Prints: bsub latency, time from bsub to the job running (dispatch), and the
status query for N jobs as one batched `bjobs -o ... -json ID...` call versus
N calls of one id each (what a naive per-job status loop would do). The two
status queries run interleaved, in alternating order, for --rounds rounds after
one untimed warm-up of each (the first call after the submissions also pays for
cold caches); the figures are medians with their min-max, and the ratio is
taken round by round. Uses a throw-away LSF state folder.

    .venv/bin/python bench/lsf_latency.py [--jobs 20] [--rounds 7]
    .venv/bin/python bench/lsf_latency.py --smoke      # 2 jobs, 2 rounds: checks that it runs
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
from typing import Dict, List

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from summit_jobs.schedulers.lsf import client as lsf  # noqa: E402
from summit_jobs.hosts.host import embedded_environment  # noqa: E402
from benchstats import spread


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=7, help="Timed rounds of both status queries.")
    ap.add_argument("--smoke", action="store_true", help="2 jobs, 2 rounds: checks that it runs.")
    args = ap.parse_args()
    if args.smoke:
        args.jobs, args.rounds = 2, 2
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

        def batched() -> Dict[str, object]:
            return bjobs(ids)

        def per_job() -> Dict[str, object]:
            single: Dict[str, object] = {}
            for jid in ids:
                single.update(bjobs([jid]))
            return single

        assert set(batched()) == set(per_job()) == set(ids)     # warm-up, and both see every job
        times: Dict[str, List[float]] = {"batched": [], "per_job": []}
        for r in range(args.rounds):
            for name in (("batched", "per_job") if r % 2 == 0 else ("per_job", "batched")):
                t0 = time.perf_counter()
                (batched if name == "batched" else per_job)()
                times[name].append(time.perf_counter() - t0)
        ratios = [p / b for b, p in zip(times["batched"], times["per_job"])]
        out = {
            "jobs": args.jobs,
            "rounds": args.rounds,
            "bsub_latency_ms": dict(spread(submit_s, 1, 1000), n=len(submit_s)),
            "bsub_to_running_ms": dict(spread(dispatch_s, 1, 1000), n=len(dispatch_s)),
            "status_batched_one_call_ms": dict(spread(times["batched"], 1, 1000), n=len(times["batched"])),
            "status_one_call_per_job_ms": dict(spread(times["per_job"], 1, 1000), n=len(times["per_job"])),
            "per_job_over_batched_ratio": {"median": round(statistics.median(ratios), 1),
                                           "min": round(min(ratios), 1), "max": round(max(ratios), 1)},
        }
        for key in ("bsub_latency_ms", "bsub_to_running_ms", "status_batched_one_call_ms",
                    "status_one_call_per_job_ms"):
            v = out[key]
            print(f"{key:28s} median {v['median']:8.1f} ms  (min {v['min']:.1f}, max {v['max']:.1f}, n={v['n']})")
        v = out["per_job_over_batched_ratio"]
        print(f"per-job / batched, paired by round: {v['median']:.1f}x (min {v['min']:.1f}x, max {v['max']:.1f}x), "
              f"{args.jobs} jobs, {args.rounds} rounds, load average {os.getloadavg()[0]:.1f}")
        print(json.dumps(out))


if __name__ == "__main__":
    main()
