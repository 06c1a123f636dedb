"""Embedded ``bjobs``: LSF's default table, ``-o "fields"``, ``-json``, ``-l``, ``-u USER``, the state
filters ``-a -r -p -d -s`` and ``-J NAME``.

Without job ids it lists unfinished jobs (``-a``: finished ones too; ``-r`` the running, ``-p`` the
pending with their pending reasons under each row, ``-d`` the recently finished, ``-s`` the suspended,
of which this LSF has none; several of them list the union); ``-J`` keeps the jobs of that name (``*``
matches any characters). With ids it shows those jobs in any state and says ``Job <N> is not found``
for unknown ids (in ``-json``: a record with an ``ERROR`` key). Finished jobs drop out after
SUMMIT_JOBS_LSF_CLEAN_PERIOD seconds, as after LSF's CLEAN_PERIOD, so tools must not read "gone from
bjobs" as success.

Exit status, as IBM's lsf.conf page for LSB_BJOBS_CONSISTENT_EXIT_CODE describes it
(https://www.ibm.com/docs/en/SSWRJV_10.1.0/lsf_config_ref/lsf.conf.lsb_bjobs_consistent_exit_code.5.html):
by default (N) 255 only when a job asked for by id (or by ``-J`` name) is not found, and 0 when a listing
finds nothing (``No unfinished job found``); with ``LSB_BJOBS_CONSISTENT_EXIT_CODE=Y`` in the environment
(standing for lsf.conf) 0 only when jobs are shown, 255 when none is or an id is not found. The messages
for an empty listing are LSF's (OpenLava's lsbatch/cmd/cmd.err.c, the open-source LSF 7 code: ``No job
found``, ``No unfinished job found``, ``No DONE/EXIT job found``, ``No pending job found``, ``No suspended
job found``, ``No running job found``, ``Job <name> is not found``).
"""
from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from typing import Dict, List, Optional, Tuple

from summit_jobs.schedulers.lsf.embedded import jobenv, state
from summit_jobs.schedulers.lsf.embedded.commands.bkill import parse_target
from summit_jobs.errors import describe_os_error

#: IBM's ``bjobs -o`` fields that mean something on one machine (IBM Docs, "bjobs -o",
#: https://www.ibm.com/docs/en/SSWRJV_10.1.0/lsf_command_ref/bjobs.o.1.html), with IBM's aliases.
FIELDS = ("jobid", "jobindex", "stat", "user", "user_group", "queue", "job_name", "job_description", "proj_name",
          "application", "service_class", "job_group", "job_priority", "dependency", "pend_reason",
          "kill_reason", "suspend_reason", "resume_reason", "kill_issue_host", "suspend_issue_host",
          "resume_issue_host", "command", "pids", "exit_code", "exit_reason", "interactive", "from_host",
          "first_host", "exec_host", "nexec_host", "alloc_slot", "nalloc_slot", "host_file", "exclusive",
          "nreq_slot", "submit_time", "start_time", "finish_time", "time_left", "runtimelimit", "run_time",
          "cpu_used", "mem", "max_mem", "avg_mem", "memlimit", "slots", "input_file", "output_file",
          "error_file", "sub_cwd", "exec_home", "exec_cwd", "pend_time", "effective_resreq",
          "combined_resreq", "gpu_num", "gpu_mode", "j_exclusive", "gpu_mps", "gpu_alloc", "warning_action",
          "action_warning_time")
ALIASES = {"id": "jobid", "ugroup": "user_group", "name": "job_name", "description": "job_description",
           "proj": "proj_name", "project": "proj_name", "app": "application", "sla": "service_class",
           "group": "job_group", "priority": "job_priority", "cmd": "command", "ask_hosts": "exec_host",
           "eresreq": "effective_resreq", "cresreq": "combined_resreq", "cpu": "cpu_used",
           "runtime": "run_time"}
#: One ``-o`` item, IBM's ``field_name[:[-][output_width]][:unit_prefix]`` (bjobs -o); a unit may also stand
#: in the width's place (``mem:MB``).
_UNIT = r"(?:[KMGTPEZ]B?|S)"
FIELD_RE = re.compile(rf"([A-Za-z_]+)(?::(?:-?[0-9]{{0,4}}|{_UNIT}))?(?::{_UNIT})?", re.IGNORECASE)
DEFAULT_TABLE = ("jobid", "user", "stat", "queue", "from_host", "exec_host", "job_name", "submit_time")
WIDTH = {"jobid": 7, "user": 7, "stat": 5, "queue": 10, "from_host": 11, "exec_host": 11, "job_name": 10,
         "submit_time": 12}


def _seconds(value: float) -> str:
    return f"{int(value)} second(s)"


def _mbytes(kb: Optional[float]) -> str:
    return "" if kb is None else f"{int(kb) // 1024} Mbytes"


def _times(job: Dict) -> Dict[str, str]:
    """The time-valued fields, in LSF's short form."""
    out = {k: state.fmt_time(job[k]) if job.get(k) else "" for k in ("submit_time", "start_time", "finish_time")}
    start, now = job.get("start_time"), time.time()
    out["run_time"] = _seconds((job.get("finish_time") or now) - start) if start else "0 second(s)"
    out["pend_time"] = _seconds((start or job.get("finish_time") or now) - job["submit_time"])
    limit = job.get("limit_s")
    out["runtimelimit"] = f"{float(job['limit_minutes']):.1f} min" if limit else ""
    left = (start + limit - now) if (limit and start and job["state"] == "RUN") else None
    out["time_left"] = "" if left is None else f"{int(max(left, 0)) // 3600}:{int(max(left, 0)) % 3600 // 60:02d} L"
    return out


def _hosts(job: Dict) -> Dict[str, str]:
    """The host-valued fields (empty until the job starts)."""
    if not job.get("hosts"):
        return {k: "" for k in ("exec_host", "nexec_host", "first_host", "alloc_slot", "nalloc_slot", "slots",
                                "host_file", "exec_home", "exec_cwd")}
    pairs = jobenv.host_slots(job)
    return {"exec_host": ":".join(f"{n}*{h}" for h, n in pairs), "nexec_host": str(len(pairs)),
            "first_host": pairs[0][0], "alloc_slot": " ".join(f"{n}*{h}" for h, n in pairs),
            "nalloc_slot": str(sum(n for _, n in pairs)), "slots": str(sum(n for _, n in pairs)),
            "host_file": "", "exec_home": os.path.expanduser("~"), "exec_cwd": str(job.get("subcwd") or "")}


def _gpu(job: Dict) -> Dict[str, str]:
    gpu = job.get("gpu") or {}
    alloc = ";".join(f"{h}:{jobenv.gpu_list(job, h)}" for h in job.get("hosts") or []) if gpu else ""
    return {"gpu_num": str(gpu.get("num", "")), "gpu_mode": str(gpu.get("mode", "")),
            "j_exclusive": str(gpu.get("j_exclusive", "")), "gpu_mps": str(gpu.get("mps", "")),
            "gpu_alloc": alloc}


def _command_text(job: Dict) -> str:
    """The job's command as bjobs shows it: as typed, or a script's lines joined with ``;`` (bsub.job_name)."""
    return str(job.get("command_line") or job["name"])


def values(job: Dict) -> Dict[str, str]:
    """Every field's value for one job; empty where the job has none (IBM prints ``-`` in tables)."""
    code = job.get("exit_code")
    req = job.get("resreq") or ""
    out = {
        "jobid": str(state.lsf_id(job)), "jobindex": str(job.get("index") or 0), "stat": job["state"],
        "user": job["user"], "user_group": "", "queue": job["queue"], "job_name": job["name"],
        "job_description": "", "proj_name": str(job.get("project") or "default"),
        "application": str(job.get("app") or ""), "service_class": "", "job_group": "", "job_priority": "",
        "dependency": job.get("dependency") or "",
        "pend_reason": (job.get("pend_reason") or "") if job["state"] == "PEND" else "",
        "kill_reason": str(job.get("kill_reason") or ""), "suspend_reason": "", "resume_reason": "",
        "kill_issue_host": job.get("from_host", "") if job.get("kill_requested") else "",
        "suspend_issue_host": "", "resume_issue_host": "", "command": _command_text(job),
        "pids": str(job.get("pid") or "") if job["state"] == "RUN" else "",
        "exit_code": "" if code in (None, 0) else str(code), "exit_reason": job.get("exit_reason") or "",
        "interactive": "", "from_host": job["from_host"], "exclusive": "Y",
        "nreq_slot": str(job.get("slots_asked") or sum(job.get("slots") or [1])),
        "cpu_used": "" if job.get("cpu_s") is None else f"{float(job['cpu_s']):.1f} second(s)",
        "mem": _mbytes(job.get("mem_kb")), "max_mem": _mbytes(job.get("max_mem_kb")),
        "avg_mem": _mbytes(job.get("avg_mem_kb")), "memlimit": _mbytes(job.get("mem_limit_kb")),
        "input_file": "", "output_file": str(job.get("out_given") or ""),
        "error_file": str(job.get("err_given") or ""), "sub_cwd": str(job.get("subcwd") or ""),
        "effective_resreq": req, "combined_resreq": req,
        "warning_action": _signal_text(job.get("warn_signal")),
        "action_warning_time": f"{job['warn_s'] / state.seconds_per_minute():.0f} min" if job.get("warn_s") else "",
    }
    out.update(_times(job))
    out.update(_hosts(job))
    out.update(_gpu(job))
    return out


def _signal_text(number: object) -> str:
    """The -wa signal as IBM shows it (``SIGUSR2``); a number with no signal (a record an older bsub took
    it into) as the number, never a failure of every bjobs of the home."""
    if not number:
        return ""
    try:
        return signal.Signals(int(str(number))).name
    except ValueError:
        return str(number)


def field_value(job: Dict, name: str) -> str:
    return values(job)[ALIASES.get(name, name)]


class FormatError(Exception):
    """An ``-o`` string bjobs cannot read."""


def parse_fields(text: str) -> Tuple[List[str], Optional[str]]:
    """(field names as typed, lower-cased; the delimiter or None) of an ``-o`` string.

    IBM's form: ``field[:[-][width]][:unit] ... [delimiter='c']``; widths and
    units are accepted and not applied (values are never cut here). ``all``
    stands for every field.
    """
    names: List[str] = []
    delimiter = None
    body = text
    m = re.search(r"delimiter\s*=\s*'([^']*)'", body)
    if m:
        delimiter, body = m.group(1), body[:m.start()] + body[m.end():]
    for token in body.replace(",", " ").split():
        name = token.split(":")[0].lower()
        if name != "all" and name not in FIELDS and name not in ALIASES:
            raise FormatError(f"{token!r}: Illegal field name in -o (the fields of this embedded LSF: "
                              f"{' '.join(FIELDS)})")
        if FIELD_RE.fullmatch(token) is None:
            raise FormatError(f"{token!r}: Illegal field format in -o: give field[:[-][width]][:unit], e.g. "
                              "jobid:10 or max_mem:12:MB (width in digits 0-9; unit KB, MB, GB, TB, PB, EB or ZB)")
        names += list(FIELDS) if name == "all" else [name]
    if not names:
        raise FormatError("-o names no field")
    return names, delimiter


#: The state filters (IBM: bjobs -r, -p, -d, -s) and the states each lists.
STATE_FLAGS = {"-r": ("RUN",), "-p": ("PEND",), "-d": state.FINISHED, "-s": ()}
#: LSF's line for an empty listing, by the filters asked, in LSF's order of precedence (cmd.err.c's jobInfoErr).
EMPTY = (("-d", "No DONE/EXIT job found"), ("-p", "No pending job found"), ("-s", "No suspended job found"),
         ("-r", "No running job found"))


def parse_args(args: List[str]) -> Dict:
    """bjobs' options and job ids; FormatError / SystemExit with LSF's words otherwise."""
    opts: Dict = {"all": False, "json": False, "noheader": False, "long": False, "fields": None,
                  "delimiter": None, "user": None, "ids": [], "states": set(), "name": None}
    i = 0
    while i < len(args):
        a = args[i]
        if a == "-a":
            opts["all"] = True
        elif a in STATE_FLAGS or re.fullmatch(r"-p[0-3]", a):
            # -p0 to -p3 choose IBM's level of detail of the pending reasons; this LSF has one reason per job.
            opts["states"].add(a[:2])
        elif a == "-json":
            opts["json"] = True
        elif a == "-noheader":
            opts["noheader"] = True
        elif a == "-l":
            opts["long"] = True
        elif a == "-w":
            pass
        elif a in ("-o", "-u", "-J"):
            if i + 1 >= len(args):
                raise SystemExit(f"bjobs: {a} needs a value")
            if a == "-o":
                opts["fields"], opts["delimiter"] = parse_fields(args[i + 1])
            elif not args[i + 1].strip():
                raise SystemExit(f"bjobs: {a} '': give a " + ("user name, or all" if a == "-u" else "job name"))
            elif a == "-u":
                opts["user"] = args[i + 1]
            else:
                opts["name"] = args[i + 1]
            i += 1
        elif parse_target(a) is not None:
            opts["ids"].append(parse_target(a))
        else:
            raise SystemExit(f"bjobs: illegal option or job id {a!r}")
        i += 1
    if opts["long"] and (opts["fields"] or opts["json"]):
        raise SystemExit("bjobs: -l cannot be used with -o or -json")
    return opts


def _long_time(ts: float) -> str:
    """The time stamp of ``bjobs -l`` lines, ctime's form as LSF prints it: ``Fri Nov 27 15:48:06``, the day
    padded with a space (``Mon Dec  7 09:05:01``)."""
    return time.strftime("%a %b %e %H:%M:%S", time.localtime(ts))


def long_form(job: Dict) -> str:
    """One job in IBM's ``bjobs -l`` layout (IBM Docs, "bjobs -l"), lines not wrapped at 80 columns.

    Clients read these phrases: ``Job <id>``, ``Status <STAT>``, ``Started ... on Host(s)``, ``Done
    successfully``, ``Exited with exit code N``, ``Completed <exit>; REASON``, ``PENDING REASONS``.
    """
    v = values(job)
    head = [f"Job <{state.shown_id(job)}>"]
    head += [f"Job Name <{job['name']}>"] if job.get("name_given") else []
    head += [f"User <{v['user']}>", f"Project <{v['proj_name']}>", f"Status <{v['stat']}>", f"Queue <{v['queue']}>",
             f"Command <{v['command']}>"]
    lines = ["", ", ".join(head)]
    where = f"Submitted from host <{v['from_host']}>, CWD <{v['sub_cwd']}>"
    where += f", Output File <{v['output_file']}>" if v["output_file"] else ""
    where += f", Error File <{v['error_file']}>" if v["error_file"] else ""
    lines.append(f"{_long_time(job['submit_time'])}: {where};")
    if v["runtimelimit"]:
        lines += ["", " RUNLIMIT", f" {v['runtimelimit']}"]
    if job.get("start_time") and job.get("hosts"):
        hosts = "".join(f"<{n}*{h}>" if n > 1 else f"<{h}>" for h, n in jobenv.host_slots(job))
        lines.append(f"{_long_time(job['start_time'])}: Started {v['nalloc_slot']} Task(s) on Host(s) {hosts}, "
                     f"Allocated {v['nalloc_slot']} Slot(s) on Host(s) {hosts}, Execution Home <{v['exec_home']}>, "
                     f"Execution CWD <{v['exec_cwd']}>;")
    lines += _ending(job, v)
    if job["state"] == "PEND":
        lines += ["", " PENDING REASONS:", f" {v['pend_reason'] or 'New job is waiting for scheduling'};"]
    if v["max_mem"]:
        lines += ["", " MEMORY USAGE:", f" MAX MEM: {v['max_mem']};  AVG MEM: {v['avg_mem'] or v['max_mem']}"]
    if v["dependency"]:
        lines += ["", " DEPENDENCY CONDITION:", f" {v['dependency']}"]
    return "\n".join(lines) + "\n"


def _ending(job: Dict, v: Dict[str, str]) -> List[str]:
    """The lines of a finished job: how it ended, its CPU time, and LSF's termination reason if any."""
    if job["state"] not in state.FINISHED or not job.get("finish_time"):
        return []
    when = _long_time(job["finish_time"])
    cpu = f" The CPU time used is {float(job.get('cpu_s') or 0.0):.1f} seconds." if job.get("start_time") else ""
    if job["state"] == "DONE":
        return [f"{when}: Done successfully.{cpu}"]
    out = [f"{when}: Exited with exit code {job['exit_code']}.{cpu}"] if job.get("exit_code") is not None \
        else [f"{when}: Exited.{cpu}"]
    reason = f"; {v['exit_reason']}" if v["exit_reason"] else ""
    return out + [f"{when}: Completed <exit>{reason}."]


def listed_states(opts: Dict) -> Tuple[str, ...]:
    """The states a listing without job ids shows: all (``-a``), the union of the filters asked, or the
    unfinished ones."""
    if opts["all"]:
        return state.ACTIVE + state.FINISHED
    if opts["states"]:
        return tuple(s for flag in sorted(opts["states"]) for s in STATE_FLAGS[flag])
    return state.ACTIVE


def name_matches(pattern: str, job: Dict) -> bool:
    """Whether ``-J pattern`` names the job: its name, or for an element of a job array the array's name too;
    ``*`` matches any characters, as in IBM's bjobs -J."""
    regex = re.compile(".*".join(re.escape(part) for part in pattern.split("*")), re.S)
    names = [str(job["name"])]
    if job.get("array_id"):
        names.append(str(job["name"]).rsplit("[", 1)[0])
    return any(regex.fullmatch(n) for n in names)


def empty_listing(opts: Dict) -> str:
    """LSF's line when a listing without job ids finds nothing."""
    if opts["name"] is not None:
        return f"Job <{opts['name']}> is not found"
    if opts["all"]:
        return "No job found"
    if not opts["states"]:
        return "No unfinished job found"
    return next(line for flag, line in EMPTY if flag in opts["states"])


def consistent_exit_code() -> bool:
    """lsf.conf's LSB_BJOBS_CONSISTENT_EXIT_CODE (here: the environment); IBM's default is N."""
    return os.environ.get("LSB_BJOBS_CONSISTENT_EXIT_CODE", "").strip().upper() == "Y"


def _select(opts: Dict, jobs: List[Dict]) -> Tuple[List[Dict], List[str]]:
    """(the jobs to show, the ids asked for that bjobs does not know)."""
    horizon = time.time() - state.clean_period()
    visible = {j["id"]: j for j in jobs
               if not (j["state"] in state.FINISHED and (j.get("finish_time") or 0) < horizon)}
    user = opts["user"]
    if user is not None and user != "all":
        visible = {k: j for k, j in visible.items() if j.get("user") == user}
    if opts["name"] is not None:
        visible = {k: j for k, j in visible.items() if name_matches(opts["name"], j)}
    if not opts["ids"]:
        wanted = listed_states(opts)
        return [j for j in visible.values() if j["state"] in wanted], []
    selected: List[Dict] = []
    missing: List[str] = []
    for jid, index in opts["ids"]:
        found = [j for j in visible.values() if state.lsf_id(j) == jid and (index is None or
                                                                          j.get("index") == index)]
        if found and (index is None or found[0].get("array_id")):
            selected += found
        else:
            missing.append(f"{jid}[{index}]" if index is not None else str(jid))
    return selected, missing


def _table(names: List[str], selected: List[Dict], noheader: bool, delimiter: Optional[str],
           reasons: bool = False) -> None:
    """The rows; with ``reasons`` (``-p`` in the default table) a pending job's reason under its row, as LSF
    prints it (`` New job is waiting for scheduling;``)."""
    rows = [[field_value(j, n) for n in names] for j in selected]
    if delimiter is not None:
        lines = ([delimiter.join(n.upper() for n in names)] if not noheader else []) + \
            [delimiter.join(r) for r in rows]
        print("\n".join(lines))
        return
    widths = [max([WIDTH.get(n, len(n))] + [len(r[k]) for r in rows]) for k, n in enumerate(names)]
    if not noheader:
        print(" ".join(n.upper().ljust(w) for n, w in zip(names, widths)).rstrip())
    for job, row in zip(selected, rows):
        print(" ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())
        if reasons and job["state"] == "PEND":
            print(f" {job.get('pend_reason') or 'New job is waiting for scheduling'};")


def _readable(jobs: List[Dict], lsf_home: object) -> List[Dict]:
    """The records bjobs can show; one line on stderr for each it cannot (left out), never a traceback.

    Why: every bjobs of a home reads every record of it, so one record no bjobs can show (damaged, or
    written by a supervisor that died halfway) would otherwise break every listing of the home for as
    long as it is kept, and every client that polls (psij's list()).
    """
    shown = []
    for job in jobs:
        try:
            values(job)
            long_form(job)
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            print(f"bjobs: job {job.get('id')}: its record in {lsf_home} cannot be shown "
                  f"({type(exc).__name__}: {exc}); it is left out", file=sys.stderr)
            continue
        shown.append(job)
    return shown


def main(argv: Optional[List[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if hasattr(sys.stdout, "reconfigure"):
        # A job's name and command are the script's bytes (any encoding): written back as they came.
        sys.stdout.reconfigure(errors="surrogateescape")
    try:
        opts = parse_args(args)
    except (SystemExit, FormatError) as exc:
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
    except state.LsfError as exc:
        print(f"bjobs: {exc}", file=sys.stderr)
        return 255
    jobs = _readable(jobs, lsf_home)
    selected, missing = _select(opts, jobs)
    names = opts["fields"] or list(DEFAULT_TABLE)
    if opts["json"]:
        records: List[Dict[str, str]] = [{n.upper(): field_value(j, n) for n in names} for j in selected]
        records += [{"JOBID": str(m), "ERROR": f"Job <{m}> is not found"} for m in missing]
        print(json.dumps({"COMMAND": "bjobs", "JOBS": len(records), "RECORDS": records}, indent=2))
        return 0
    for m in missing:
        print(f"Job <{m}> is not found", file=sys.stderr)
    named_none = not selected and not opts["ids"] and opts["name"] is not None
    if not selected and not opts["ids"]:
        print(empty_listing(opts), file=sys.stderr)
    if selected and opts["long"]:
        print(("-" * 78 + "\n").join(long_form(j) for j in selected), end="")
    elif selected:
        _table(names, selected, opts["noheader"], opts["delimiter"],
               reasons="-p" in opts["states"] and opts["fields"] is None)
    if missing or named_none or (consistent_exit_code() and not selected):
        return 255
    return 0


if __name__ == "__main__":
    sys.exit(main())
