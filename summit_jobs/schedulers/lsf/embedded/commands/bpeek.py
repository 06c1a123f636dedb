"""Embedded ``bpeek``: the output an unfinished job has written so far.

Why: people and scripts look at a running job's output with ``bpeek`` (``bpeek -f`` to follow it), and a
test double without it sends them to the embedded LSF's own folders. IBM's page ("bpeek", IBM Spectrum LSF
10.1 Command Reference, https://www.ibm.com/docs/en/SSWRJV_10.1.0/lsf_command_ref/bpeek.1.html):

``bpeek [-f] [-q queue_name | -m host_name | -J job_name | job_ID | "job_ID[index_list]"]``

shows the standard output and standard error a job of yours has produced up to now, with ``cat`` (``-f``:
``tail -f``, until the job is done). Without a job id it takes your most recently submitted unfinished job,
of the queue (``-q``), on the host (``-m``) or of the name (``-J``) given. The layout and the refusals are
those of LSF's own bpeek (OpenLava's lsbatch/cmd/bpeek.c, the open-source LSF 7 code, and IBM's "View job
output" page): ``<< output from stdout >>`` before the output, ``<< output from stderr >>`` before a
separate error file (``-e``), ``Job <N> : Not yet started.`` for a pending job, ``Job <N> : Already
finished.`` for a finished one, ``Job <N> is not found``, ``bpeek: Cannot operate on job array`` for an
array's id without an index; each of these exits 255.

The job's output is where the embedded LSF writes it: the ``-o`` file, else ``<LSF home>/jobs/<id>/output``.
"""
from __future__ import annotations

import getpass
import re
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from summit_jobs.schedulers.lsf.embedded import state

USAGE = 'Usage: bpeek [-h] [-f] [-m host_name | -q queue_name | -J job_name | jobId | "jobId[index]"]'
ONE_OF = "Command syntax error: more than one of -m , -q, -J or jobId are specified"
#: Seconds between two looks at the output while ``-f`` follows it.
FOLLOW_POLL = 0.2


class PeekError(Exception):
    """A line for stderr; bpeek exits 255."""


def parse(args: List[str]) -> Tuple[bool, Dict[str, str]]:
    """(follow, the one selector given: {"id"|"queue"|"host"|"name": value}, or none)."""
    follow, chosen = False, {}
    i = 0
    while i < len(args):
        a = args[i]
        if a == "-f":
            follow = True
        elif a in ("-q", "-m", "-J"):
            if i + 1 >= len(args) or not args[i + 1].strip():
                raise PeekError(f"bpeek: {a} needs a value. {USAGE}")
            if chosen:
                raise PeekError(f"{ONE_OF}. {USAGE}")
            chosen = {{"-q": "queue", "-m": "host", "-J": "name"}[a]: args[i + 1]}
            i += 1
        elif re.fullmatch(r"[0-9]{1,18}(\[[0-9]{1,18}\])?", a):
            if chosen:
                raise PeekError(f"{ONE_OF}. {USAGE}")
            chosen = {"id": a}
        else:
            raise PeekError(f"bpeek: illegal option or job id {a!r}. {USAGE}")
        i += 1
    return follow, chosen


def choose(jobs: List[Dict], chosen: Dict[str, str]) -> Dict:
    """The job bpeek shows; PeekError with LSF's words when there is none."""
    if "id" in chosen:
        m = re.fullmatch(r"([0-9]+)(?:\[([0-9]+)\])?", chosen["id"])
        jid, index = int(m.group(1)), (int(m.group(2)) if m.group(2) else None)
        found = [j for j in jobs if state.lsf_id(j) == jid and (index is None or j.get("index") == index)]
        if not found or (index is not None and not found[0].get("array_id")):
            raise PeekError(f"Job <{chosen['id']}> is not found")
        if index is None and found[0].get("array_id"):
            raise PeekError("bpeek: Cannot operate on job array")
        return found[0]
    me = getpass.getuser()
    mine = [j for j in jobs if j.get("user") == me and j["state"] in state.ACTIVE]
    if "queue" in chosen:
        mine = [j for j in mine if j["queue"] == chosen["queue"]]
    if "host" in chosen:
        mine = [j for j in mine if chosen["host"] in (j.get("hosts") or [])]
    if "name" in chosen:
        mine = [j for j in mine if j["name"] == chosen["name"]]
    if not mine:
        if "name" in chosen:
            raise PeekError(f"Job <{chosen['name']}> is not found")
        where = f" in queue <{chosen['queue']}>" if "queue" in chosen else \
            f" on host/group <{chosen['host']}>" if "host" in chosen else ""
        raise PeekError(f"No unfinished job found{where}")
    return max(mine, key=lambda j: (float(j["submit_time"]), int(j["id"])))


def output_files(lsf_home: Path, job: Dict) -> Tuple[Optional[Path], Optional[Path]]:
    """(the job's stdout file, its separate stderr file or None); a /dev/null of either is not shown."""
    out = Path(job["out"]) if job.get("out") else state.job_dir(lsf_home, job["id"]) / "output"
    err = Path(job["err"]) if job.get("err") else None
    shown_out = None if str(out) == "/dev/null" else out
    shown_err = None if err is None or str(err) == "/dev/null" or err == out else err
    return shown_out, shown_err


def _copy(path: Path, offset: int) -> int:
    """Write ``path``'s bytes from ``offset`` to stdout; the offset reached (a file not there yet: nothing)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except OSError:
        return offset
    if data:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    return offset + len(data)


def show(lsf_home: Path, job: Dict, follow: bool) -> int:
    """The job's output so far (``follow``: and what it writes until it ends, from its stdout file)."""
    out, err = output_files(lsf_home, job)
    offset = 0
    if out is not None:
        print("<< output from stdout >>", flush=True)
        offset = _copy(out, 0)
    if err is not None:
        print("\n<< output from stderr >>", flush=True)
        _copy(err, 0)
    if not follow or out is None:
        return 0
    try:
        while True:
            rec = state.load_job(lsf_home, job["id"])
            offset = _copy(out, offset)
            if rec is None or rec["state"] in state.FINISHED:
                return 0
            time.sleep(FOLLOW_POLL)
    except KeyboardInterrupt:
        return 130


def main(argv: Optional[List[str]] = None) -> int:
    try:
        follow, chosen = parse(list(sys.argv[1:] if argv is None else argv))
    except PeekError as exc:
        print(exc, file=sys.stderr)
        return 255
    jobs = state.jobs_for_report("bpeek")
    if jobs is None:
        return 255
    try:
        job = choose(jobs, chosen)
    except PeekError as exc:
        print(exc, file=sys.stderr)
        return 255
    if job["state"] == "PEND":
        print(f"Job <{state.shown_id(job)}> : Not yet started.", file=sys.stderr)
        return 255
    if job["state"] in state.FINISHED:
        print(f"Job <{state.shown_id(job)}> : Already finished.", file=sys.stderr)
        return 255
    return show(state.home(), job, follow)


if __name__ == "__main__":
    sys.exit(main())
