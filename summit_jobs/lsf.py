"""LSF command lines and the parsing of their output: small pure functions.

Sites have changed LSF's messages before, so every parser either understands
its input or raises LsfOutputError carrying the raw text; nothing guesses.
Fixed-width ``bjobs`` tables truncate long job ids and names, so status goes
through ``bjobs -o ... -json``; the plain parser exists for reading what a
user pastes and for sites whose bjobs lacks ``-json``.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from summit_jobs.errors import UserError

BSUB_RE = re.compile(r"Job <(\d+)> is submitted to (?:default )?queue <([^>]+)>")
STATES = ("PEND", "RUN", "DONE", "EXIT", "PSUSP", "USUSP", "SSUSP", "UNKWN", "WAIT", "ZOMBI")
FINISHED = ("DONE", "EXIT")
STATUS_FIELDS = ("jobid", "stat", "queue", "job_name", "exit_code", "exit_reason", "pend_reason",
                 "submit_time", "start_time", "finish_time", "exec_host")
#: What cancel asks before it kills: whose job an id names now (LSF 10.1 ``-o`` fields).
OWNER_FIELDS = ("jobid", "stat", "job_name", "sub_cwd")
#: Job ids per bjobs call: one call for a whole chain or run list, bounded for the command line.
BATCH = 200


class LsfOutputError(UserError):
    """LSF printed something this tool does not understand; the raw text is in the message."""


@dataclass(frozen=True)
class JobStatus:
    job_id: str
    state: str
    queue: str = ""
    name: str = ""
    exit_code: Optional[int] = None
    reason: str = ""
    submit_time: str = ""
    start_time: str = ""
    finish_time: str = ""
    exec_host: str = ""

    @property
    def finished(self) -> bool:
        return self.state in FINISHED

    def to_dict(self) -> Dict[str, object]:
        return asdict(self)


def parse_bsub_output(text: str) -> Tuple[str, str]:
    """(job id, queue) from bsub's answer, e.g. ``Job <779469> is submitted to default queue <batch>.``"""
    m = BSUB_RE.search(text or "")
    if not m:
        raise LsfOutputError("bsub's answer did not say which job it submitted (expected "
                             f"'Job <N> is submitted to queue <Q>.'); it printed:\n{(text or '').strip()}")
    return m.group(1), m.group(2)


def bsub_argv(script_name: str, submit_mode: str, depends_on: Optional[str] = None) -> Tuple[List[str], bool]:
    """The bsub command line and whether the script goes on stdin (``bsub < script``)."""
    argv = ["bsub"]
    if depends_on:
        if not str(depends_on).isdecimal():
            raise ValueError(f"job id {depends_on!r} is not a number")
        argv += ["-w", f"ended({depends_on})"]
    if submit_mode == "file":
        return argv + [script_name], False
    if submit_mode == "stdin":
        return argv, True
    raise ValueError(f"submit mode {submit_mode!r}")


def bjobs_argv(job_ids: Sequence[str], fields: Sequence[str] = STATUS_FIELDS) -> List[str]:
    for j in job_ids:
        if not str(j).isdecimal():
            raise ValueError(f"job id {j!r} is not a number")
    return ["bjobs", "-a", "-o", " ".join(fields), "-json", *[str(j) for j in job_ids]]


def bkill_argv(job_ids: Iterable[str]) -> List[str]:
    ids = [str(j) for j in job_ids]
    for j in ids:
        if not j.isdecimal():
            raise ValueError(f"job id {j!r} is not a number")
    return ["bkill", *ids]


def batches(job_ids: Sequence[str], size: int = BATCH) -> List[List[str]]:
    return [list(job_ids[i:i + size]) for i in range(0, len(job_ids), size)]


def _exit_code(text: str) -> Optional[int]:
    text = (text or "").strip()
    if not text or text == "-":
        return None
    try:
        return int(text)
    except ValueError:
        return None


def parse_bjobs_json(text: str) -> Tuple[Dict[str, JobStatus], List[str]]:
    """Statuses by job id, and the ids bjobs reported as not found."""
    try:
        data = json.loads(text)
        records = data["RECORDS"]
        if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
            raise TypeError("RECORDS is not a list of records")
    except (ValueError, KeyError, TypeError) as exc:
        raise LsfOutputError(f"bjobs -json printed something that is not LSF's JSON ({exc}):\n"
                             f"{text.strip()[:2000]}") from None
    found: Dict[str, JobStatus] = {}
    missing: List[str] = []
    for rec in records:
        jid = str(rec.get("JOBID", "")).strip()
        if "ERROR" in rec:
            if "not found" in str(rec["ERROR"]).lower() and jid:
                missing.append(jid)
                continue
            raise LsfOutputError(f"bjobs reported an error for job {jid or '?'}: {rec['ERROR']}")
        stat = str(rec.get("STAT", "")).strip()
        if not jid or stat not in STATES:
            raise LsfOutputError(f"bjobs -json record without a job id or a known state: {rec}")
        exit_code = _exit_code(str(rec.get("EXIT_CODE", "")))
        if stat == "DONE" and exit_code is None:
            exit_code = 0
        reason = rec.get("PEND_REASON") if stat == "PEND" else rec.get("EXIT_REASON")
        found[jid] = JobStatus(
            job_id=jid, state=stat, queue=str(rec.get("QUEUE", "")), name=str(rec.get("JOB_NAME", "")),
            exit_code=exit_code, reason=str(reason or "").strip(), submit_time=str(rec.get("SUBMIT_TIME", "")),
            start_time=str(rec.get("START_TIME", "")), finish_time=str(rec.get("FINISH_TIME", "")),
            exec_host=str(rec.get("EXEC_HOST", "")))
    return found, missing


def parse_bjobs_owner(text: str) -> Dict[str, Dict[str, str]]:
    """The records of ``bjobs -o "jobid stat job_name sub_cwd" -json`` by job id (not-found ids left out)."""
    try:
        records = json.loads(text)["RECORDS"]
        if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
            raise TypeError("RECORDS is not a list of records")
    except (ValueError, KeyError, TypeError) as exc:
        raise LsfOutputError(f"bjobs -json printed something that is not LSF's JSON ({exc}):\n"
                             f"{text.strip()[:2000]}") from None
    out: Dict[str, Dict[str, str]] = {}
    for rec in records:
        jid = str(rec.get("JOBID", "")).strip()
        if "ERROR" in rec:
            if "not found" in str(rec["ERROR"]).lower() and jid:
                continue
            raise LsfOutputError(f"bjobs reported an error for job {jid or '?'}: {rec['ERROR']}")
        if not jid.isdecimal():
            raise LsfOutputError(f"bjobs -json record without a job id: {rec}")
        out[jid] = {str(k): str(v) for k, v in rec.items()}
    return out


PLAIN_ROW = re.compile(r"^(?P<jobid>\*?\d+)\s+(?P<user>\S+)\s+(?P<stat>" + "|".join(STATES) +
                       r")\s+(?P<queue>\S+)\s+(?P<rest>.*)$")
NOT_FOUND_RE = re.compile(r"Job <(\d+)> is not found")


def parse_bjobs_plain(text: str) -> Tuple[Dict[str, JobStatus], List[str]]:
    """LSF's default table (JOBID USER STAT QUEUE FROM_HOST EXEC_HOST JOB_NAME SUBMIT_TIME).

    Columns are read by words, not positions: a job id longer than the column
    pushes the rest right, and EXEC_HOST is empty for pending jobs. A job id
    LSF truncated (shown with a leading ``*``) cannot be trusted and is refused.
    """
    found: Dict[str, JobStatus] = {}
    missing = NOT_FOUND_RE.findall(text or "")
    for line in (text or "").splitlines():
        if not line.strip() or line.startswith("JOBID") or NOT_FOUND_RE.search(line) \
                or line.strip() in ("No unfinished job found", "No job found"):
            continue
        m = PLAIN_ROW.match(line.strip())
        if not m:
            # Continuation lines of multi-host jobs (e.g. "                         42*h22n08").
            if re.match(r"^\s+\S+$", line):
                continue
            raise LsfOutputError(f"cannot read this bjobs line: {line!r}; full output:\n{text.strip()}")
        jid = m.group("jobid")
        if jid.startswith("*"):
            raise LsfOutputError(f"bjobs truncated a job id ({jid}); use bjobs -o ... -json for long ids.")
        rest = m.group("rest").split()
        # rest = FROM_HOST [EXEC_HOST] JOB_NAME MON DAY HH:MM
        name = rest[-4] if len(rest) >= 4 else ""
        submit = " ".join(rest[-3:]) if len(rest) >= 4 else ""
        exec_host = rest[1] if len(rest) >= 6 else ""
        found[jid] = JobStatus(job_id=jid, state=m.group("stat"), queue=m.group("queue"), name=name,
                               submit_time=submit, exec_host=exec_host)
    return found, missing


def bkill_outcome(text: str) -> Dict[str, str]:
    """Per job id: ``terminating``, ``finished`` (already ended: fine) or ``not found``."""
    out: Dict[str, str] = {}
    for m in re.finditer(r"Job <(\d+)>(?::)? ?(is being terminated|is being signaled|Job has already finished"
                         r"|No matching job found)", text or ""):
        word = m.group(2)
        out[m.group(1)] = ("terminating" if word.startswith("is being") else
                           "finished" if "finished" in word else "not found")
    return out
