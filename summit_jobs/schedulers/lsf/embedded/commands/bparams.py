"""Embedded ``bparams``: the lsb.params values the embedded LSF works by, in IBM's layouts.

Why: LSF clients read cluster parameters from ``bparams`` before they submit.
Toil, for one, runs ``bparams -a`` and reads ``NAME = value`` lines for
RESOURCE_RESERVE_PER_TASK (whether ``rusage[mem=]`` is per task or per job)
and LSF_UNIT_FOR_LIMITS (the unit of ``-M``); a missing ``bparams`` made it
fall back to guesses. IBM's page for the command ("bparams", IBM Spectrum LSF
10.1 Command Reference,
https://www.ibm.com/docs/en/SSWRJV_10.1.0/lsf_command_ref/bparams.1.html)
documents ``bparams [-a] [-l]`` and ``bparams [-h | -V]``: by default the
default queues, MBD_SLEEP_TIME, the job checking interval and the job
accepting interval; ``-a`` every configurable parameter; ``-l`` each with a
line saying what it is.

The values are the ones this LSF really uses: its default queue (bsub.py),
its largest job id (state.MAX_JOB_ID; ids above a cluster's default
MAX_JOB_ID of 999999 are handed out here), CLEAN_PERIOD and
JOB_TERMINATE_INTERVAL from their settings (state.py), and IBM's defaults for
what it does as IBM does (RESOURCE_RESERVE_PER_TASK=N: ``rusage[mem=]`` is
the job's on each host). LSF_UNIT_FOR_LIMITS and LSB_JOB_MEMLIMIT are lsf.conf
parameters, not lsb.params ones, so they are not listed; a client that looks
for the unit here then takes LSF's default, KB, which is what ``-M`` takes.
"""
from __future__ import annotations

import math
import sys
from typing import List, Optional, Tuple

from summit_jobs.schedulers.lsf.embedded.commands import lsid
from summit_jobs.schedulers.lsf.embedded import state

USAGE = "Usage: bparams [-a] [-l]\n       bparams [-h | -V]"


def _seconds(value: float) -> int:
    """A time setting in whole seconds, as lsb.params takes them (at least 1)."""
    return max(1, int(math.ceil(value)))


def parameters() -> List[Tuple[str, str, str]]:
    """(name, value, what it means) of each parameter, in the order ``-a`` and ``-l`` print them."""
    from summit_jobs.schedulers.lsf.embedded.commands import bsub           # its default queue; imported late (bsub is larger)
    return [
        ("DEFAULT_QUEUE", bsub.DEFAULT_QUEUE, "System default queues for automatic queue selection"),
        ("MBD_SLEEP_TIME", "1", "Amount of time in seconds used for calculating parameter values"),
        ("SBD_SLEEP_TIME", "1", "The interval for checking jobs by slave batch daemon"),
        ("JOB_ACCEPT_INTERVAL", "0", "The interval for a host to accept two batch jobs subsequently"),
        ("MAX_JOB_ID", str(state.MAX_JOB_ID), "The maximum job ID"),
        ("CLEAN_PERIOD", str(_seconds(state.clean_period())),
         "The amount of time that finished jobs are kept in memory"),
        ("JOB_TERMINATE_INTERVAL", str(_seconds(state.kill_grace())),
         "The interval between the signals of the TERMINATE action (SIGINT, SIGTERM, SIGKILL)"),
        ("RESOURCE_RESERVE_PER_TASK", "N", "Resource reservation (rusage) is per task"),
    ]


def default_lines() -> List[str]:
    """IBM's default output: default queues, MBD_SLEEP_TIME, job checking and job accepting intervals."""
    values = {name: value for name, value, _ in parameters()}
    return [f"Default Queues:  {values['DEFAULT_QUEUE']}",
            f"MBD_SLEEP_TIME used for calculations:  {values['MBD_SLEEP_TIME']} seconds",
            f"Job Checking Interval:  {values['SBD_SLEEP_TIME']} seconds",
            f"Job Accepting Interval:  {values['JOB_ACCEPT_INTERVAL']} seconds"]


def all_lines() -> List[str]:
    """``-a``: every parameter as ``NAME = value``, one a line."""
    return [f"\t{name} = {value}" for name, value, _ in parameters()]


def long_lines() -> List[str]:
    """``-l``: each parameter under a line saying what it is."""
    out: List[str] = []
    for name, value, meaning in parameters():
        out += [f"{meaning}:", f"    {name} = {value}", ""]
    return out[:-1]


def main(argv: Optional[List[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args in (["-h"], ["-V"]):
        print(USAGE if args == ["-h"] else lsid.lines()[0], file=sys.stderr)   # IBM: both go to stderr
        return 0
    unknown = [a for a in args if a not in ("-a", "-l")]
    if unknown:
        print(f"bparams: option {unknown[0]!r} is not offered by the embedded LSF.\n{USAGE}", file=sys.stderr)
        return 255
    try:
        text = long_lines() if "-l" in args else all_lines() if "-a" in args else default_lines()
    except (state.LsfError, SystemExit) as exc:
        print(f"bparams: {exc}", file=sys.stderr)
        return 255
    print("\n".join(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
