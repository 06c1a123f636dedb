"""Embedded ``bqueues``: IBM LSF's default queue table for the embedded LSF's queues.

Why: ``summit-jobs doctor`` checks that a profile's queues exist and are
``Open:Active`` by reading ``bqueues`` on every site, so the embedded LSF
answers in IBM's layout (``QUEUE_NAME PRIO STATUS MAX JL/U JL/P JL/H NJOBS
PEND RUN SUSP``, one row per queue, ``-`` for no limit). Its queues are the
``local`` profile's (with the user's config overrides), or the names in
``SUMMIT_JOBS_LSF_QUEUES`` (comma-separated). Every queue is ``Open:Active``
with priority 30 and no limits; NJOBS, PEND, RUN and SUSP count the tasks
(slots) of the jobs in each queue, as LSF 10.1 does.

Options: ``-w`` (names never cut: the embedded table never cuts them anyway)
and queue names (``NAME: No such queue`` for one it does not have, exit 255).
"""
from __future__ import annotations

import os
import re
import sys
from typing import Dict, List, Optional

from summit_jobs.schedulers.lsf.embedded import state
from summit_jobs.errors import UserError

HEADER = ("QUEUE_NAME", "PRIO", "STATUS", "MAX", "JL/U", "JL/P", "JL/H", "NJOBS", "PEND", "RUN", "SUSP")
PRIORITY = 30
STATUS = "Open:Active"
QUEUE_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
SUSPENDED = ("PSUSP", "USUSP", "SSUSP")


def queue_names() -> List[str]:
    """SUMMIT_JOBS_LSF_QUEUES, else the queues of the ``local`` profile as the user's config leaves them."""
    raw = os.environ.get("SUMMIT_JOBS_LSF_QUEUES")
    if raw is not None:
        names = [n.strip() for n in raw.split(",") if n.strip()]
        bad = [n for n in names if not QUEUE_RE.fullmatch(n)]
        if bad or not names:
            raise state.LsfError(f"SUMMIT_JOBS_LSF_QUEUES={raw!r} must be comma-separated queue names "
                                 "(letters, digits, . _ -)")
        return names
    from summit_jobs.profiles import config
    return list(config.profile(config.load(None), "local").queues)


def row(name: str, counts: Dict[str, int], width: int = 15) -> str:
    """One row in the columns of IBM's table (``priority         43  Open:Active       -    -    -    -  ...``)."""
    njobs = counts["PEND"] + counts["RUN"] + counts["SUSP"]
    return (f"{name:<{width}} {PRIORITY:>3}  {STATUS:<11}{'-':>8}{'-':>5}{'-':>5}{'-':>5}{njobs:>6}{counts['PEND']:>6}"
            f"{counts['RUN']:>6}{counts['SUSP']:>6}")


def header(width: int = 15) -> str:
    return f"{'QUEUE_NAME':<{width}} PRIO STATUS          MAX JL/U JL/P JL/H NJOBS  PEND   RUN  SUSP"


def task_counts(jobs: List[Dict], names: List[str]) -> Dict[str, Dict[str, int]]:
    """PEND, RUN and SUSP tasks (slots) per queue, from the job records."""
    counts = {n: {"PEND": 0, "RUN": 0, "SUSP": 0} for n in names}
    for job in jobs:
        key = "SUSP" if job["state"] in SUSPENDED else job["state"]
        if job["queue"] in counts and key in counts[job["queue"]]:
            counts[job["queue"]][key] += sum(int(s) for s in job.get("slots") or [1])
    return counts


def _parse(args: List[str]) -> Optional[List[str]]:
    """The queue names asked for ([] for all), or None after printing LSF's usage for an unknown option."""
    asked = []
    for a in args:
        if a == "-w":
            continue
        if a.startswith("-"):
            print(f"bqueues: option {a!r} is not offered by the embedded LSF. Usage: bqueues [-w] [queue_name ...]",
                  file=sys.stderr)
            return None
        asked.append(a)
    return asked


def main(argv: Optional[List[str]] = None) -> int:
    asked = _parse(list(sys.argv[1:] if argv is None else argv))
    if asked is None:
        return 255
    try:
        names = queue_names()
    except (UserError, state.LsfError) as exc:
        print(f"bqueues: {exc}", file=sys.stderr)
        return 255
    jobs = state.jobs_for_report("bqueues")
    if jobs is None:
        return 255
    shown, missing = state.asked_among(asked, names, "No such queue")
    if shown:
        counts = task_counts(jobs, shown)
        width = max([15] + [len(n) for n in shown])
        print("\n".join([header(width)] + [row(n, counts[n], width) for n in shown]))
    return 255 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
