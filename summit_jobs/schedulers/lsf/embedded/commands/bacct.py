"""Embedded ``bacct``: accounting of finished jobs (DONE or EXIT), in IBM's layouts.

Why: LSF clients ask ``bacct -l JOBID`` how a job ended once ``bjobs`` no
longer knows it (toil looks for ``Completed <done>`` / ``Completed <exit>``),
and people read its CPU time, run time and memory. IBM's page ("bacct", IBM
Spectrum LSF 10.1 Command Reference,
https://www.ibm.com/docs/en/SSWRJV_10.1.0/lsf_command_ref/bacct.1.html):
by default a summary of every finished job of the user; ``bacct JOBID ...``
the summary of those jobs; ``-l`` a block per job before the summary (the
``Job <N>, [Job Name <name>, ]User <U>, ...`` line, the Submitted, Dispatched and
Completed events, and ``CPU_T WAIT TURNAROUND STATUS HOG_FACTOR MEM SWAP``). All
times are in seconds. A job LSF ended shows its termination reason after
``Completed <exit>;`` (IBM: "Termination reasons displayed by bacct, bhist,
and bjobs"); a job that simply exited non-zero shows ``Completed <exit>.`` and
nothing more (its exit code is bjobs' and bhist's to tell).

The layout follows real ``bacct -l`` outputs (tests/data/lsf/bacct_l_*.txt,
each with its .source): ``Job Name <...>`` only for a job given a name (``-J``,
or an element of an array, shown as ``ID[i]``); ``Command <...>`` the command as
typed on the bsub line, or for a script read from stdin its non-blank lines
joined with ``;`` (``#!/bin/bash;#BSUB -J t;...``); the Submitted line with
``Output File`` / ``Error File`` (``(overwrite)`` for ``-oo`` / ``-eo``) as
given; LSF 10.1's ``Dispatched N Task(s) on Host(s) ..., Allocated N Slot(s) on
Host(s) ..., Effective RES_REQ <...>;``; event times in ctime's form (``Mon Oct
 8 17:07:54``: the day padded with a space), and the SUMMARY's expansion factor,
throughput and ``Beginning time`` / ``Ending time`` lines (``Oct  8 17:07``).

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
    """CPU time, wait, turnaround, run time, hog factor and expansion factor of a finished job, in seconds;
    when it began (its dispatch, else its end) and ended, for the SUMMARY's throughput.

    The expansion factor is turnaround / run time with a run time under a second counted as one: in a real
    SUMMARY a job that never ran (run time 0) gives its whole turnaround as its factor, and one with both 0
    gives 0.00."""
    submit, finish = float(job["submit_time"]), float(job.get("finish_time") or job["submit_time"])
    start = float(job.get("start_time") or finish)
    cpu = float(job.get("cpu_s") or 0.0)
    turnaround = max(0.0, finish - submit)
    run = max(0.0, finish - start) if job.get("start_time") else 0.0
    # LSF accounts whole seconds (lsb.acct): the expansion factor is a ratio of whole seconds, as printed.
    return {"cpu": cpu, "wait": max(0.0, start - submit), "turnaround": turnaround, "run": run,
            "hog": cpu / turnaround if turnaround > 0 else 0.0,
            "expansion": round(turnaround) / max(round(run), 1), "began": start, "ended": finish}


def _wrap(text: str, indent: int = 21, width: int = 79) -> List[str]:
    """IBM's long-format wrapping: lines of ``width`` characters, continued under ``indent`` spaces."""
    lines, rest, first = [], text, True
    while rest:
        room = width if first else width - indent
        lines.append(("" if first else " " * indent) + rest[:room])
        rest, first = rest[room:], False
    return lines


def _completed(job: Dict) -> List[str]:
    """The line of how the job ended: ``Completed <done>.`` or ``Completed <exit>[; REASON].`` (a reason only
    where LSF ended the job, as IBM's; no exit code: bacct -l prints none)."""
    at = _when(float(job.get("finish_time") or job["submit_time"]))
    if job["state"] == "DONE":
        return [f"{at}: Completed <done>."]
    reason = job.get("exit_reason") or ""
    return [f"{at}: Completed <exit>; {reason}." if reason.startswith("TERM_") else f"{at}: Completed <exit>."]


#: The effective resource requirement bacct shows for a job that gave no ``-R``: the default selection and order
#: that lead every Effective RES_REQ of the captures (tests/data/lsf/bacct_l_ebi_*.txt).
DEFAULT_RES_REQ = "select[type == local] order[r15s:pg] "


def effective_resreq(given: str) -> str:
    """Effective RES_REQ as bacct shows it: the job's ``-R`` after the default selection and order unless it
    names a selection of its own, with LSF's trailing space."""
    given = " ".join(given.split())
    if not given:
        return DEFAULT_RES_REQ
    return f"{given} " if "select[" in given else f"{DEFAULT_RES_REQ}{given} "


def _files(job: Dict) -> str:
    """``, Output File <f>, Error File <g>`` of the Submitted line, as given to bsub (``%J`` unexpanded)."""
    text = ""
    for word, key, overwrite in (("Output", "out_given", "out_overwrite"), ("Error", "err_given", "err_overwrite")):
        if job.get(key):
            text += f", {word} File{' (overwrite)' if job.get(overwrite) else ''} <{job[key]}>"
    return text


def long_block(job: Dict) -> List[str]:
    """One job of ``bacct -l``: its identity, its events and its accounting line."""
    # The command as bjobs -l shows it: as typed, or a stdin script's lines joined with ';' (bsub.job_name).
    command = str(job.get("command_line") or job["name"])
    named = f"Job Name <{job['name']}>, " if job.get("name_given") or job.get("array_id") else ""
    head = (f"Job <{state.shown_id(job)}>, {named}User <{job['user']}>, Project "
            f"<{job.get('project') or 'default'}>, Status <{job['state']}>, Queue <{job['queue']}>, "
            f"Command <{command}>")
    lines = [""] + _wrap(head)
    lines += _wrap(f"{_when(float(job['submit_time']))}: Submitted from host <{job.get('from_host', '')}>, "
                   f"CWD <{job.get('subcwd', '')}>{_files(job)};")
    if job.get("start_time") and job.get("hosts"):
        pairs = jobenv.host_slots(job)
        places = " ".join(f"<{h}>" if n == 1 else f"<{n}*{h}>" for h, n in pairs)
        slots = sum(n for _, n in pairs)
        resreq = effective_resreq(str(job.get("resreq") or ""))
        lines += _wrap(f"{_when(float(job['start_time']))}: Dispatched {slots} Task(s) on Host(s) {places}, "
                       f"Allocated {slots} Slot(s) on Host(s) {places}, Effective RES_REQ <{resreq}>;")
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
    cpu, wait, turn, hog, run, grow = (stats(k) for k in ("cpu", "wait", "turnaround", "hog", "run", "expansion"))
    began, ended = min(f["began"] for f in figs), max(f["ended"] for f in figs)
    hours = (ended - began) / 3600.0
    # IBM: throughput = jobs / (ET - BT), BT the first job's start, ET the last job's end. A span of no time
    # (one job that ended as it started) has no throughput: 0.00, never a division by zero.
    throughput = len(jobs) / hours if hours > 0 else 0.0
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
            f" Average expansion factor of a job:  {grow[1]:.2f} ( turnaround time / run time )",
            f" Maximum expansion factor of a job:  {grow[2]:.2f}",
            f" Minimum expansion factor of a job:  {grow[3]:.2f}",
            f" Total Run time consumed: {run[0]:>9.0f}      Average Run time consumed: {run[1]:>9.0f}",
            f" Maximum Run time of a job: {run[2]:>7.0f}      Minimum Run time of a job: {run[3]:>9.0f}",
            f" Total throughput: {throughput:16.2f} (jobs/hour)  during {hours:7.2f} hours",
            f" Beginning time:       {_short(began)}      Ending time:          {_short(ended)}"]


def _short(ts: float) -> str:
    """LSF's short time, ctime's month, day (padded with a space) and minute: ``Oct  8 17:07``."""
    return time.strftime("%b %e %H:%M", time.localtime(ts))


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
        return [j for j in finished if state.lsf_id(j) in ids]      # an array's id: every element
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
