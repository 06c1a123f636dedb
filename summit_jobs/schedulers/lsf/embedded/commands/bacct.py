"""Embedded ``bacct``: accounting of finished jobs (DONE or EXIT), in IBM's layouts.

Why: LSF clients ask ``bacct -l JOBID`` how a job ended once ``bjobs`` no
longer knows it (toil looks for ``Completed <done>`` / ``Completed <exit>``),
and people read its CPU time, run time and memory. IBM's page ("bacct", IBM
Spectrum LSF 10.1 Command Reference,
https://www.ibm.com/docs/en/SSWRJV_10.1.0/lsf_command_ref/bacct.1.html):
by default a summary of every finished job of the user; ``bacct JOBID ...``
the summary of those jobs; ``-l`` a block per job before the summary (the
``Job <N>, User <U>, ...`` line, the Submitted, Dispatched and Completed
events, and ``CPU_T WAIT TURNAROUND STATUS HOG_FACTOR MEM SWAP``). All times
are in seconds. A job LSF ended shows its termination reason after
``Completed <exit>;`` (IBM: "Termination reasons displayed by bacct, bhist,
and bjobs"); the exit code of a job that exited non-zero is given in the
words of ``bjobs -l`` and ``bhist -l``, ``Exited with exit code N.``.

What is accounted is recorded by the job's supervisor when the job ends
(the same ``cpu_s`` bjobs shows, and peak_rss_kb): the CPU time (user + system) and the largest resident size
of the job's processes that ended within it (the kernel's rusage of the
supervisor's children), and, for a job ended at its ``-M`` limit, the memory
it was ended with when that is larger. A peak no larger than the supervisor's
own resident size (about 20 MB) cannot be told from the fork's copy of the
supervisor and shows as 0M. Finished jobs stay accountable for as
long as their records are kept (bjobs stops showing them after CLEAN_PERIOD;
bacct still shows them). SWAP is not measured and shows 0M.

Options: ``-l``, ``-u USER|all`` and job ids; any other option is refused.
"""
from __future__ import annotations

import getpass
import re
import resource
import sys
import time
from typing import Dict, List, Optional, Tuple

from summit_jobs.schedulers.lsf.embedded import jobenv, state

USAGE = "Usage: bacct [-l] [-u user_name | -u all] [job_ID ...]"
RULE = "-" * 78


def peak_rss_kb(children: "resource.struct_rusage") -> float:
    """Peak resident KB of the job's processes, from its supervisor's RUSAGE_CHILDREN at the job's end.

    The supervisor's only reaped children by then are the job's script and, through it, everything the
    script waited for (ranks of jsrun and blaunch included): the kernel keeps the largest of their peaks.
    A child's peak includes the copy of the supervisor it was forked as (the high-water mark survives
    exec), so a peak no larger than the supervisor's own says nothing about the job: 0.
    """
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return float(children.ru_maxrss) if children.ru_maxrss > own else 0.0      # KB on Linux


def job_memory_kb(job: Dict) -> float:
    """MEM of a finished job: its processes' peak, or the memory it was ended with at its ``-M`` limit (its
    processes on one host added up) when that is larger."""
    at_kill = job.get("memory_kb_at_kill") or {}
    killed = float(max(at_kill.values())) if isinstance(at_kill, dict) and at_kill else 0.0
    return max(float(job.get("peak_rss_kb") or 0.0), killed)


# -- what each job shows ------------------------------------------------------------------------------------
def _when(ts: float) -> str:
    """IBM's event time, ``Mon Oct  8 17:07:54``."""
    return time.strftime("%a %b %e %H:%M:%S", time.localtime(ts))


def memory_text(kb: Optional[float]) -> str:
    """MEM as bacct prints it: whole MB with ``M`` (``5M``), or GB with one decimal above 1024 MB (``3.2G``)."""
    mb = (kb or 0) / 1024.0
    return f"{mb / 1024.0:.1f}G" if mb >= 1024 else f"{int(round(mb))}M"


def figures(job: Dict) -> Dict[str, float]:
    """CPU time, wait, turnaround, run time and hog factor of a finished job, in seconds."""
    submit, finish = float(job["submit_time"]), float(job.get("finish_time") or job["submit_time"])
    start = float(job.get("start_time") or finish)
    cpu = float(job.get("cpu_s") or 0.0)
    turnaround = max(0.0, finish - submit)
    return {"cpu": cpu, "wait": max(0.0, start - submit), "turnaround": turnaround,
            "run": max(0.0, finish - start) if job.get("start_time") else 0.0,
            "hog": cpu / turnaround if turnaround > 0 else 0.0}


def _wrap(text: str, indent: int = 21, width: int = 79) -> List[str]:
    """IBM's long-format wrapping: lines of ``width`` characters, continued under ``indent`` spaces."""
    lines, rest, first = [], text, True
    while rest:
        room = width if first else width - indent
        lines.append(("" if first else " " * indent) + rest[:room])
        rest, first = rest[room:], False
    return lines


def _completed(job: Dict) -> List[str]:
    """The lines of how the job ended: ``Completed <done>.`` or ``Completed <exit>[; REASON].``."""
    at = _when(float(job.get("finish_time") or job["submit_time"]))
    if job["state"] == "DONE":
        return [f"{at}: Completed <done>."]
    out = []
    code, reason = job.get("exit_code"), job.get("exit_reason") or ""
    if code:
        out.append(f"{at}: Exited with exit code {code}. The CPU time used is "
                   f"{float(job.get('cpu_s') or 0.0):.1f} seconds.")
    term = reason.split(":", 1)[0] if reason.startswith("TERM_") else ""
    out.append(f"{at}: Completed <exit>; {reason}." if term else f"{at}: Completed <exit>.")
    return out


def long_block(job: Dict) -> List[str]:
    """One job of ``bacct -l``: its identity, its events and its accounting line."""
    # A command job shows its command line; a script job the name it was given (by default its bsub line).
    command = job["name"] if job.get("is_script") else " ".join(job.get("command") or []) or job["name"]
    head = (f"Job <{job['id']}>, Job Name <{job['name']}>, User <{job['user']}>, Project "
            f"<{job.get('project') or 'default'}>, Status <{job['state']}>, Queue <{job['queue']}>, "
            f"Command <{command}>")
    lines = [""] + _wrap(head)
    lines += _wrap(f"{_when(float(job['submit_time']))}: Submitted from host <{job.get('from_host', '')}>, "
                   f"CWD <{job.get('subcwd', '')}>;")
    if job.get("start_time") and job.get("hosts"):
        places = ", ".join(f"<{h}>" if n == 1 else f"<{n}*{h}>" for h, n in jobenv.host_slots(job))
        lines += _wrap(f"{_when(float(job['start_time']))}: Dispatched to {places};")
    lines += _completed(job)
    f = figures(job)
    lines += ["", "Accounting information about this job:",
              "     CPU_T     WAIT     TURNAROUND   STATUS     HOG_FACTOR    MEM    SWAP",
              f"{f['cpu']:>10.2f}{f['wait']:>9.0f}{f['turnaround']:>15.0f}{job['state'].lower():>9}"
              f"{f['hog']:>15.4f}{memory_text(job_memory_kb(job)):>7}{'0M':>8}",
              RULE]
    return lines


def header(users: str) -> List[str]:
    """The lines that say which jobs are accounted."""
    return ["Accounting information about jobs that are: ", f"  - submitted by {users}.",
            "  - accounted on all projects.", "  - completed normally or exited", "  - executed on all hosts.",
            "  - submitted to all queues.", "  - accounted on all service classes.", RULE]


def summary(jobs: List[Dict]) -> List[str]:
    """IBM's SUMMARY block over the accounted jobs."""
    figs = [figures(j) for j in jobs]

    def stats(key: str) -> Tuple[float, float, float, float]:
        values = [f[key] for f in figs]
        return sum(values), sum(values) / len(values), max(values), min(values)

    done = sum(1 for j in jobs if j["state"] == "DONE")
    cpu, wait, turn, hog, run = (stats(k) for k in ("cpu", "wait", "turnaround", "hog", "run"))
    return ["", "SUMMARY:      ( time unit: second ) ",
            f" Total number of done jobs: {done:>7}      Total number of exited jobs: {len(jobs) - done:>5}",
            f" Total CPU time consumed: {cpu[0]:>9.1f}      Average CPU time consumed: {cpu[1]:>7.1f}",
            f" Maximum CPU time of a job: {cpu[2]:>7.1f}      Minimum CPU time of a job: {cpu[3]:>7.1f}",
            f" Total wait time in queues: {wait[0]:>7.1f}",
            f" Average wait time in queue: {wait[1]:>6.1f}",
            f" Maximum wait time in queue: {wait[2]:>6.1f}      Minimum wait time in queue: {wait[3]:>6.1f}",
            f" Average turnaround time: {turn[1]:>9.0f} (seconds/job)",
            f" Maximum turnaround time: {turn[2]:>9.0f}      Minimum turnaround time: {turn[3]:>9.0f}",
            f" Average hog factor of a job: {hog[1]:>5.2f} ( cpu time / turnaround time )",
            f" Maximum hog factor of a job: {hog[2]:>5.2f}      Minimum hog factor of a job: {hog[3]:>5.2f}",
            f" Total Run time consumed: {run[0]:>9.0f}      Average Run time consumed: {run[1]:>9.0f}",
            f" Maximum Run time of a job: {run[2]:>7.0f}      Minimum Run time of a job: {run[3]:>9.0f}"]


# -- the command ----------------------------------------------------------------------------------------------
def _parse(args: List[str]):
    """(long, user or 'all', job ids), or None after printing the usage for what it does not offer."""
    long, user, ids, i = False, getpass.getuser(), [], 0
    while i < len(args):
        a = args[i]
        if a == "-l":
            long = True
        elif a == "-u":
            if i + 1 >= len(args) or not args[i + 1].strip():
                given = f" {args[i + 1]!r}" if i + 1 < len(args) else ""
                print(f"bacct: -u{given}: give a user name, or all. {USAGE}", file=sys.stderr)
                return None
            user, i = args[i + 1], i + 1
        elif re.fullmatch(r"[0-9]{1,18}", a):
            ids.append(int(a))
        else:
            what = f"option {a!r}" if a.startswith("-") else f"job id {a!r}"
            print(f"bacct: {what} is not offered by the embedded LSF. {USAGE}", file=sys.stderr)
            return None
        i += 1
    return long, user, ids


def select(jobs: List[Dict], user: str, ids: List[int]) -> List[Dict]:
    """The finished jobs asked for: the ids given (of any user, as IBM's bacct JOBID), else the user's."""
    finished = [j for j in jobs if j["state"] in state.FINISHED]
    if ids:
        return [j for j in finished if j["id"] in ids]
    return [j for j in finished if user == "all" or j.get("user") == user]


def main(argv: Optional[List[str]] = None) -> int:
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="surrogateescape")     # a job's name is its script's bytes, any encoding
    parsed = _parse(list(sys.argv[1:] if argv is None else argv))
    if parsed is None:
        return 255
    long, user, ids = parsed
    jobs = state.jobs_for_report("bacct")
    if jobs is None:
        return 255
    chosen = select(jobs, user, ids)
    out = header("all users" if user == "all" or ids else f"users {user}")
    if not chosen:
        print("\n".join(out + ["No matching job found"]))
        return 0
    if long:
        for job in chosen:
            out += long_block(job)
    print("\n".join(out + summary(chosen)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
