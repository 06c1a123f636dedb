"""Embedded ``bjobs``: LSF's default table, ``-o "fields"`` and ``-json``.

Without job ids it lists unfinished jobs (``-a``: finished ones too); with ids it
shows those jobs in any state and says ``Job <N> is not found`` for unknown ids
(in ``-json``: a record with an ``ERROR`` key). Finished jobs drop out after
SUMMIT_JOBS_LSF_CLEAN_PERIOD seconds, as after LSF's CLEAN_PERIOD, so tools must
not read "gone from bjobs" as success.
"""
from __future__ import annotations

import json
import sys
import time
from typing import Dict, List, Optional

from summit_jobs.embedded import jobenv, state
from summit_jobs.errors import describe_os_error

FIELDS = ("jobid", "stat", "user", "queue", "job_name", "from_host", "exec_host", "nexec_host",
          "submit_time", "start_time", "finish_time", "exit_code", "exit_reason", "pend_reason",
          "dependency", "run_time", "project", "sub_cwd")
DEFAULT_TABLE = ("jobid", "user", "stat", "queue", "from_host", "exec_host", "job_name", "submit_time")
WIDTH = {"jobid": 7, "user": 7, "stat": 5, "queue": 10, "from_host": 11, "exec_host": 11, "job_name": 10,
         "submit_time": 12}


def field_value(job: Dict, name: str) -> str:
    hosts = job.get("hosts") or []
    if name == "jobid":
        return str(job["id"])
    if name == "stat":
        return job["state"]
    if name == "user":
        return job["user"]
    if name == "queue":
        return job["queue"]
    if name == "job_name":
        return job["name"]
    if name == "from_host":
        return job["from_host"]
    if name == "exec_host":
        return ":".join(f"{n}*{h}" for h, n in jobenv.host_slots(job)) if hosts else ""
    if name == "nexec_host":
        return str(len(jobenv.host_slots(job))) if hosts else ""
    if name in ("submit_time", "start_time", "finish_time"):
        value = job.get(name)
        return state.fmt_time(value) if value else ""
    if name == "exit_code":
        code = job.get("exit_code")
        return "" if code in (None, 0) else str(code)
    if name == "exit_reason":
        return job.get("exit_reason") or ""
    if name == "pend_reason":
        return (job.get("pend_reason") or "") if job["state"] == "PEND" else ""
    if name == "dependency":
        return job.get("dependency") or ""
    if name == "run_time":
        start = job.get("start_time")
        if not start:
            return "0 second(s)"
        end = job.get("finish_time") or time.time()
        return f"{int(end - start)} second(s)"
    if name == "project":
        return str(job.get("project") or "default")
    if name == "sub_cwd":
        return str(job.get("subcwd") or "")
    raise KeyError(name)


def parse_fields(text: str) -> List[str]:
    names = []
    for token in text.replace(",", " ").split():
        name = token.split(":")[0].lower()   # LSF allows width suffixes (jobid:10)
        if name not in FIELDS:
            raise SystemExit(f"bjobs: unknown field {token!r} in -o; known fields: {' '.join(FIELDS)}")
        names.append(name)
    return names


def parse_args(args: List[str]):
    """(show all, json, no header, fields, ids) from bjobs' arguments; SystemExit with LSF's words otherwise."""
    show_all = as_json = noheader = False
    fields: Optional[List[str]] = None
    ids: List[int] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "-a":
            show_all = True
        elif a == "-json":
            as_json = True
        elif a == "-noheader":
            noheader = True
        elif a == "-w":
            pass
        elif a == "-o":
            if i + 1 >= len(args):
                raise SystemExit("bjobs: -o needs a field list")
            fields = parse_fields(args[i + 1])
            i += 1
        elif a.isascii() and a.isdecimal():
            ids.append(int(a))
        else:
            raise SystemExit(f"bjobs: illegal option or job id {a!r}")
        i += 1
    return show_all, as_json, noheader, fields, ids


def main(argv: Optional[List[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        show_all, as_json, noheader, fields, ids = parse_args(args)
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        return 255
    try:
        lsf_home = state.home()
        with state.locked(lsf_home):
            jobs = state.all_jobs(lsf_home)
            state.reap_lost(lsf_home, jobs)
    except OSError as exc:
        print(f"bjobs: embedded LSF state: {describe_os_error(exc)}", file=sys.stderr)
        return 255
    horizon = time.time() - state.clean_period()
    visible = {j["id"]: j for j in jobs
               if not (j["state"] in state.FINISHED and (j.get("finish_time") or 0) < horizon)}
    missing: List[int] = []
    if ids:
        selected = []
        for jid in ids:
            if jid in visible:
                selected.append(visible[jid])
            else:
                missing.append(jid)
    else:
        selected = [j for j in visible.values() if show_all or j["state"] not in state.FINISHED]
    names = fields or list(DEFAULT_TABLE)
    if as_json:
        records: List[Dict[str, str]] = [{n.upper(): field_value(j, n) for n in names} for j in selected]
        records += [{"JOBID": str(m), "ERROR": f"Job <{m}> is not found"} for m in missing]
        print(json.dumps({"COMMAND": "bjobs", "JOBS": len(records), "RECORDS": records}, indent=2))
        return 0
    for m in missing:
        print(f"Job <{m}> is not found", file=sys.stderr)
    if not selected:
        if not ids:
            print("No job found" if show_all else "No unfinished job found", file=sys.stderr)
        return 255 if missing or not ids else 0
    rows = [[field_value(j, n) for n in names] for j in selected]
    widths = [max([WIDTH.get(n, len(n))] + [len(r[k]) for r in rows]) for k, n in enumerate(names)]
    if not noheader:
        print(" ".join(n.upper().ljust(w) for n, w in zip(names, widths)).rstrip())
    for row in rows:
        print(" ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())
    return 0 if not missing else 255


if __name__ == "__main__":
    sys.exit(main())
