"""Embedded ``bkill [-s SIGNAL] [-C REASON] ID...``; an ID may be ``12[3]``, one element of a job array
(``12`` alone names the whole array).

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

import re
import sys
import time
from typing import Dict, List, Optional, Tuple

from summit_jobs.schedulers.lsf.embedded import state
from summit_jobs.schedulers.lsf.embedded.commands.bsub import BsubError, signal_number
from summit_jobs.errors import describe_os_error


def main(argv: Optional[List[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    sig: Optional[int] = None
    reason: Optional[str] = None
    ids: List[Tuple[int, Optional[int]]] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "-C" and i + 1 < len(args):
            reason = args[i + 1]            # IBM's bkill -C kill_reason, shown by bjobs -o kill_reason
            i += 2
            continue
        if a == "-s" and i + 1 < len(args):
            try:
                sig = signal_number(args[i + 1], "-s")
            except BsubError as exc:
                print(f"bkill: {exc}", file=sys.stderr)
                return 255
            i += 2
            continue
        target = parse_target(a)
        if target is None:
            print(f"bkill: illegal option or job id {a!r}", file=sys.stderr)
            return 255
        ids.append(target)
        i += 1
    if not ids:
        print("bkill: give the job id(s) to kill", file=sys.stderr)
        return 255
    try:
        lsf_home = state.home()
        return max(_kill_target(lsf_home, target, sig, reason) for target in ids)
    except OSError as exc:
        print(f"bkill: embedded LSF state: {describe_os_error(exc)}", file=sys.stderr)
        return 255


def parse_target(text: str) -> Optional[Tuple[int, Optional[int]]]:
    """``12`` (a job, or a whole job array) or ``12[3]`` (one element of an array): (id, index or None)."""
    m = re.fullmatch(r"([0-9]{1,18})(?:\[([0-9]{1,18})\])?", text)
    if not m or not text.isascii():
        return None
    return int(m.group(1)), (int(m.group(2)) if m.group(2) else None)


def records(lsf_home, jid: int, index: Optional[int]) -> List[Dict]:
    """The records a job id names (caller holds the lock): the job, every element of an array, or one."""
    job = state.load_job(lsf_home, jid)
    if job is None or state.lsf_id(job) != jid:
        return []
    if not job.get("array_id"):
        return [job] if index is None else []
    elements = [j for j in state.all_jobs(lsf_home) if j.get("array_id") == jid]
    return [j for j in elements if index is None or j.get("index") == index]


def _kill_target(lsf_home, target: Tuple[int, Optional[int]], sig: Optional[int],
                 reason: Optional[str] = None) -> int:
    """Kill (or signal) a job, an array or one element under the lock; LSF's answer lines, and 0 or 255."""
    jid, index = target
    shown = f"{jid}[{index}]" if index is not None else str(jid)
    with state.locked(lsf_home):
        jobs = records(lsf_home, jid, index)
        state.reap_lost(lsf_home, jobs)           # a job whose supervisor died is ended here
        if not jobs:
            print(f"Job <{shown}>: No matching job found", file=sys.stderr)
            return 255
        live = [j for j in jobs if j["state"] not in state.FINISHED]
        if not live:
            print(f"Job <{shown}>: Job has already finished", file=sys.stderr)
            return 255
        if sig is not None:
            running = [j for j in live if j["state"] == "RUN" and j.get("pid")]
            if not running:
                print(f"Job <{shown}>: Job is not running; signal not sent", file=sys.stderr)
                return 255
            for job in running:
                state.signal_job(dict(job, pgid=job.get("pgid") or job["pid"]), sig, lsf_home)
            print(f"Job <{shown}> is being signaled")
            return 0
        for job in live:
            _terminate(lsf_home, job, reason)
        print(f"Job <{shown}> is being terminated")
        return 0


def _terminate(lsf_home, job: Dict, reason: Optional[str]) -> None:
    """A pending job ends at once; a running one is marked for its supervisor's TERMINATE action."""
    if reason is not None:
        job["kill_reason"] = reason
    if job["state"] == "PEND":
        job.update(state="EXIT", exit_code=None, finish_time=time.time(), pend_reason=None,
                   exit_reason="TERM_OWNER: job killed by owner", kill_requested=time.time())
    else:
        job["kill_requested"] = time.time()
    state.save_job(lsf_home, job)


if __name__ == "__main__":
    sys.exit(main())
