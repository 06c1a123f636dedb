"""Embedded ``bkill [-s SIGNAL] [-C REASON] ID...``.

Without ``-s`` the job is killed: a pending job ends at once (EXIT), a running
one gets IBM's TERMINATE action on every process of the job: SIGINT, SIGTERM
one JOB_TERMINATE_INTERVAL later (SUMMIT_JOBS_LSF_KILL_GRACE), SIGKILL one
more interval later (the job's supervisor does it). Either way it ends EXIT
with TERM_OWNER, even if the job exits 0 on one of the signals. ``-s SIG``
delivers SIG to every process of the job (state.job_processes), as LSF's
process tracking does.
Finished jobs get LSF's ``Job has already finished`` and exit status 255, so
callers must tolerate it.
"""
from __future__ import annotations

import sys
import time
from typing import List, Optional

from summit_jobs.embedded import state
from summit_jobs.embedded.bsub import BsubError, signal_number
from summit_jobs.errors import describe_os_error


def main(argv: Optional[List[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    sig: Optional[int] = None
    reason: Optional[str] = None
    ids: List[int] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "-C" and i + 1 < len(args):
            reason = args[i + 1]            # IBM's bkill -C kill_reason, shown by bjobs -o kill_reason
            i += 2
            continue
        if a == "-s" and i + 1 < len(args):
            try:
                sig = signal_number(args[i + 1])
            except BsubError as exc:
                print(f"bkill: {exc}", file=sys.stderr)
                return 255
            i += 2
            continue
        if not a.isdecimal():
            print(f"bkill: illegal option or job id {a!r}", file=sys.stderr)
            return 255
        ids.append(int(a))
        i += 1
    if not ids:
        print("bkill: give the job id(s) to kill", file=sys.stderr)
        return 255
    try:
        lsf_home = state.home()
        return max(_kill_one(lsf_home, jid, sig, reason) for jid in ids)
    except OSError as exc:
        print(f"bkill: embedded LSF state: {describe_os_error(exc)}", file=sys.stderr)
        return 255


def _kill_one(lsf_home, jid: int, sig: Optional[int], reason: Optional[str] = None) -> int:
    """Kill (or signal) one job under the lock; LSF's answer line, and 0 or 255."""
    with state.locked(lsf_home):
        job = state.load_job(lsf_home, jid)
        if job is not None:
            state.reap_lost(lsf_home, [job])       # a job whose supervisor died is ended here
        if job is None:
            print(f"Job <{jid}>: No matching job found", file=sys.stderr)
            return 255
        if job["state"] in state.FINISHED:
            print(f"Job <{jid}>: Job has already finished", file=sys.stderr)
            return 255
        if sig is not None:
            if job["state"] != "RUN" or not job.get("pid"):
                print(f"Job <{jid}>: Job is not running; signal not sent", file=sys.stderr)
                return 255
            state.signal_job(dict(job, pgid=job.get("pgid") or job["pid"]), sig, lsf_home)
            print(f"Job <{jid}> is being signaled")
            return 0
        if reason is not None:
            job["kill_reason"] = reason
        if job["state"] == "PEND":
            job.update(state="EXIT", exit_code=None, finish_time=time.time(), pend_reason=None,
                       exit_reason="TERM_OWNER: job killed by owner", kill_requested=time.time())
        else:
            job["kill_requested"] = time.time()
        state.save_job(lsf_home, job)
        print(f"Job <{jid}> is being terminated")
        return 0


if __name__ == "__main__":
    sys.exit(main())
