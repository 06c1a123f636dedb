"""Embedded ``bhosts``: IBM LSF's default host table over the embedded LSF's virtual nodes.

Why: LSF clients and people size jobs by ``bhosts`` (how many slots each host
has and how many are taken). IBM's page ("bhosts", IBM Spectrum LSF 10.1
Command Reference,
https://www.ibm.com/docs/en/SSWRJV_10.1.0/lsf_command_ref/bhosts.1.html)
prints by default ``HOST_NAME STATUS JL/U MAX NJOBS RUN SSUSP USUSP RSV``, one
row per host, ``-`` for no limit; ``-w`` prints the same columns without
cutting host names or statuses. Here the hosts are the virtual nodes
(state.node_names), MAX is their cores (SUMMIT_JOBS_LSF_CORES), NJOBS and RUN
count the slots of the running jobs on each (a CSM job holds every core of
its nodes), and a node is ``closed`` while a job runs on it, ``ok`` when free:
the embedded LSF gives each job its nodes exclusively, as IBM's bhosts shows
a host ``closed`` (closed_Excl, closed_Full) that takes no more jobs. Nothing
is suspended or reserved here, so SSUSP, USUSP and RSV are 0.

Options: ``-w`` and host names (``NAME: Host name, host group name or cluster
name is not used by the batch system`` on stderr and exit 255 for an unknown
one); any other option is refused.
"""
from __future__ import annotations

import sys
from typing import Dict, List, Optional

from summit_jobs.schedulers.lsf.embedded import jobenv, state

HEADER = ("HOST_NAME", "STATUS", "JL/U", "MAX", "NJOBS", "RUN", "SSUSP", "USUSP", "RSV")
USAGE = "Usage: bhosts [-w] [host_name ...]"


def row(name: str, status: str, cores: int, slots: int, wide: bool) -> str:
    """One row in the columns of IBM's table (``hostA              ok              -      2      1 ...``)."""
    if not wide and len(name) > 18:
        name = name[:17] + "*"                      # IBM marks a cut name with '*'
    values = ("-", cores, slots, slots, 0, 0, 0)
    return f"{name:<18} {status:<11}" + "".join(f"{v:>{6 if i == 0 else 7}}" for i, v in enumerate(values))


def header() -> str:
    return f"{HEADER[0]:<18} {HEADER[1]:<11}{HEADER[2]:>6}" + "".join(f"{h:>7}" for h in HEADER[3:])


def slots_by_host(jobs: List[Dict]) -> Dict[str, int]:
    """Slots of the running jobs on each host (jobenv.host_slots: the slots each job has there)."""
    used: Dict[str, int] = {}
    for job in jobs:
        if job["state"] == "RUN" and job.get("hosts"):
            for host, n in jobenv.host_slots(job):
                used[host] = used.get(host, 0) + int(n)
    return used


def _parse(args: List[str]):
    """(wide, host names asked for), or None after printing the usage for an option it does not offer."""
    wide, asked = False, []
    for a in args:
        if a == "-w":
            wide = True
        elif a.startswith("-"):
            print(f"bhosts: option {a!r} is not offered by the embedded LSF. {USAGE}", file=sys.stderr)
            return None
        else:
            asked.append(a)
    return wide, asked


def main(argv: Optional[List[str]] = None) -> int:
    parsed = _parse(list(sys.argv[1:] if argv is None else argv))
    if parsed is None:
        return 255
    wide, asked = parsed
    try:
        names, cores = state.node_names(state.virtual_nodes()), state.cores_per_node()
    except (state.LsfError, SystemExit) as exc:
        print(f"bhosts: {exc}", file=sys.stderr)
        return 255
    jobs = state.jobs_for_report("bhosts")
    if jobs is None:
        return 255
    shown, missing = state.asked_among(asked, names, "Host name, host group name or cluster name is not used "
                                                     "by the batch system")
    if shown:
        used = slots_by_host(jobs)
        rows = [row(n, "closed" if used.get(n) else "ok", cores, used.get(n, 0), wide) for n in shown]
        print("\n".join([header()] + rows))
    return 255 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
