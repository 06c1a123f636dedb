"""The watchdog of one running embedded-LSF job: ends the job if its supervisor dies.

The supervisor starts the job's script in a process group of its own and then
this small process (a fork of itself), handing it the read end of a pipe whose
write end only the supervisor holds. When the supervisor finishes normally it writes one byte and
the watchdog leaves. When the supervisor dies any other way (kill -9, a crash)
the pipe closes without that byte: the watchdog then ends every process of
the job (state.job_processes: TERM, KILL after the kill grace), and only once no process of
the job is left marks the job EXIT, which is what frees its virtual nodes, and removes the job's
per-node temporary folders (state.remove_job_tmp), as the supervisor does at a job's end.
Without it a killed supervisor would leave the script, jsrun and the ranks
running past the run limit on nodes that bjobs hands to the next job.

If the watchdog itself is killed as well, bjobs does the same (state.reap_lost).
"""
from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from summit_jobs.schedulers.lsf.embedded import state

#: The byte a supervisor writes when the job ended under its control.
FINISHED = b"f"


def watch(lsf_home: Path, job_id: int, fd: int, pgid: int, grace: float) -> int:
    """Block until the supervisor finishes or dies; in the second case end the job.

    The process group and grace come from the command line, not the state, so
    the job is ended even when the state folder was deleted under it.
    """
    try:
        word = os.read(fd, 1)
    except OSError:
        word = b""
    if word == FINISHED:
        return 0
    ended = state.end_job_group({"id": job_id, "pgid": pgid}, grace, lsf_home)
    job = None
    try:
        with state.locked(lsf_home):
            job = state.load_job(lsf_home, job_id)
            if job is not None and job.get("state") == "RUN" and ended:
                state.mark_lost(lsf_home, job, "; its processes were killed")
    except OSError:
        pass                             # the state folder is gone: nothing left to record
    if ended:
        # What the supervisor would have removed at the job's end: its virtual nodes' TMPDIR folders,
        # which would otherwise stay in /tmp for good. Without the record, the job's own id names them.
        state.remove_job_tmp(lsf_home, job if job is not None else {"id": job_id})
    return 0 if ended else 1


def run(lsf_home: Path, job_id: int, fd: int, pgid: int, grace: float) -> int:
    """The watchdog's life, as a process of its own (main) or a fork of the supervisor: a hang-up or an
    interrupt of the terminal the job came from does not end it."""
    for sig in (signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    return watch(lsf_home, job_id, fd, pgid, grace)


def main() -> int:
    return run(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]))


if __name__ == "__main__":
    sys.exit(main())
