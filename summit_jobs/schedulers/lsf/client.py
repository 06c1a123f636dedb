"""LSF command lines and the parsing of their output: small pure functions.

Sites have changed LSF's messages before, so every parser either understands
its input or raises LsfOutputError carrying the raw text; nothing guesses. Real
machines also print things a clean reading would choke on, and one bad record
must never cost the others: banner lines (``Cannot connect to LSF. Please wait
...``) before an answer are skipped, a state LSF does not document is UNKNOWN
with LSF's word kept, and an error record's job id is read from its text.
Fixed-width ``bjobs`` tables truncate long job ids and names, so status goes
through ``bjobs -o ... -json``; the plain parser exists for reading what a
user pastes and for sites whose bjobs lacks ``-json``.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from summit_jobs.errors import UserError
from summit_jobs import schedulers
from summit_jobs.schedulers import FINISHED, STATES, UNKNOWN, JobStatus  # noqa: F401

BSUB_RE = re.compile(r"Job <(\d+)> is submitted to (?:default )?queue <([^>]+)>")
STATUS_FIELDS = ("jobid", "stat", "queue", "job_name", "exit_code", "exit_reason", "pend_reason",
                 "submit_time", "start_time", "finish_time", "exec_host", "sub_cwd")
#: What cancel asks before it kills: whose job an id names now (LSF 10.1 ``-o`` fields).
OWNER_FIELDS = ("jobid", "stat", "job_name", "sub_cwd", "submit_time")
#: Job ids per bjobs call: one call for a whole chain or run list, bounded for the command line.
BATCH = 200
#: Lines LSF's commands print while its master daemon is busy or out of reach, before the real answer.
BANNER_RE = re.compile(r"^\s*(?:Cannot connect to LSF|LSF is processing your request)\b.*Please wait\b")
JOB_IN_TEXT_RE = re.compile(r"Job <(\d+)>")


class LsfOutputError(UserError):
    """LSF printed something this tool does not understand; the raw text is in the message."""


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


@dataclass
class _Records:
    """bjobs -json records sorted by what they say: one bad record must not cost the others."""
    good: Dict[str, Dict[str, object]] = field(default_factory=dict)
    missing: List[str] = field(default_factory=list)
    errors: Dict[str, str] = field(default_factory=dict)
    stray: List[str] = field(default_factory=list)


def _json_records(text: str) -> list:
    """RECORDS of bjobs' JSON, after whatever LSF printed before it (``Cannot connect to LSF. Please wait ...``).

    Busy sites print such lines on stdout ahead of the JSON; the JSON itself is
    still read exactly, and anything else is an error carrying the raw text.
    """
    start = re.search(r"^[ \t]*\{", text or "", re.MULTILINE)
    try:
        if start is None:
            raise ValueError("no JSON object in it")
        data, _ = json.JSONDecoder().raw_decode(text, start.end() - 1)
        records = data["RECORDS"]
        if not isinstance(records, list):
            raise TypeError("RECORDS is not a list of records")
    except (ValueError, KeyError, TypeError) as exc:
        raise LsfOutputError(f"bjobs -json printed something that is not LSF's JSON ({exc}):\n"
                             f"{(text or '').strip()[:2000]}") from None
    return records


def _record_id(rec: Dict[str, object]) -> str:
    """The record's job id: its JOBID, or the id its ERROR text names (LSF leaves JOBID out of some errors)."""
    jid = str(rec.get("JOBID", "")).strip()
    if jid.isascii() and jid.isdecimal():
        return jid
    m = JOB_IN_TEXT_RE.search(str(rec.get("ERROR", "")))
    return m.group(1) if m else ""


def _sort_records(text: str, asked: Sequence[str]) -> _Records:
    """Good records by id, ids LSF does not know, errors by id; errors naming no job go to the asked ids
    that got no record at all (without asked ids they cannot be placed, and that is an error)."""
    out = _Records()
    for rec in _json_records(text):
        if not isinstance(rec, dict):
            out.stray.append(f"a record that is not an object: {rec!r}")
            continue
        jid = _record_id(rec)
        error = str(rec.get("ERROR", "")).strip() if "ERROR" in rec else None
        if not jid:
            out.stray.append(error if error is not None else f"a record without a job id: {rec}")
        elif error is None:
            out.good[jid] = rec
        elif "not found" in error.lower():
            out.missing.append(jid)
        else:
            out.errors[jid] = f"bjobs: {error}"
    if out.stray:
        said = "; ".join(out.stray)
        if not asked:
            raise LsfOutputError(f"bjobs -json printed records this tool cannot tie to a job: {said}")
        for jid in (str(j) for j in asked):
            if jid not in out.good and jid not in out.missing and jid not in out.errors:
                out.errors[jid] = f"bjobs printed no record for this job; it said: {said}"
    return out


#: LSF's job states (IBM LSF 10.1, "About job states") as the interface's: pending (PEND; PROV while its hosts
#: are provisioned; WAIT, a chunk job's member waiting), held (PSUSP: suspended while pending), running (RUN),
#: suspended (USUSP by its owner, SSUSP by the system), done (DONE), an end that EXIT's reason places, or unknown
#: (UNKWN: its host cannot be reached; ZOMBI: killed while its host could not be reached, not yet confirmed).
STATE_MAP: Dict[str, str] = {
    "PEND": schedulers.PENDING, "PROV": schedulers.PENDING, "WAIT": schedulers.PENDING,
    "PSUSP": schedulers.HELD, "RUN": schedulers.RUNNING,
    "USUSP": schedulers.SUSPENDED, "SSUSP": schedulers.SUSPENDED,
    "DONE": schedulers.DONE, "EXIT": schedulers.FAILED,
    "UNKWN": UNKNOWN, "ZOMBI": UNKNOWN,
}
#: How an EXIT ended, by the exit reason's TERM_ word (IBM LSF 10.1, "Termination reasons"); any other is failed.
EXIT_REASONS: Dict[str, str] = {
    "TERM_OWNER": schedulers.CANCELLED, "TERM_ADMIN": schedulers.CANCELLED,
    "TERM_FORCE_OWNER": schedulers.CANCELLED, "TERM_FORCE_ADMIN": schedulers.CANCELLED,
    "TERM_RUNLIMIT": schedulers.TIMED_OUT, "TERM_DEADLINE": schedulers.TIMED_OUT,
    "TERM_PREEMPT": schedulers.PREEMPTED,
}
assert set(STATE_MAP.values()) | set(EXIT_REASONS.values()) <= set(STATES)
#: Why a job in a documented state is unknown, for status's note (bjobs gives no reason with these words).
UNKNOWN_WHY = {"UNKWN": "LSF reports UNKWN: the job's host cannot be reached; the job may still run",
               "ZOMBI": "LSF reports ZOMBI: the job was killed while its host could not be reached, and LSF has "
                        "not seen it end"}


def _state(raw: str, reason: str) -> Tuple[str, str]:
    """(state, reason): the interface's state for LSF's word (an EXIT by its reason's TERM_ word); UNKNOWN for a
    word IBM does not document, the word kept in the reason."""
    if raw == "EXIT":
        term = reason.split(":", 1)[0].split()[0] if reason.strip() else ""
        return EXIT_REASONS.get(term, schedulers.FAILED), reason
    if raw in STATE_MAP:
        why = UNKNOWN_WHY.get(raw, "")
        return STATE_MAP[raw], "; ".join(w for w in (why, reason) if w)
    note = f"LSF reports state {raw!r}, which this tool does not know" if raw else "bjobs gave no state"
    return UNKNOWN, note + (f"; {reason}" if reason else "")


def _status(jid: str, rec: Dict[str, object]) -> JobStatus:
    raw = str(rec.get("STAT", "")).strip()
    reason = str((rec.get("PEND_REASON") if raw == "PEND" else rec.get("EXIT_REASON")) or "").strip()
    state, reason = _state(raw, reason)
    exit_code = _exit_code(str(rec.get("EXIT_CODE", "")))
    if state == schedulers.DONE and exit_code is None:
        exit_code = 0
    return JobStatus(
        job_id=jid, state=state, queue=str(rec.get("QUEUE", "")), name=str(rec.get("JOB_NAME", "")),
        exit_code=exit_code, reason=reason, submit_time=str(rec.get("SUBMIT_TIME", "")),
        start_time=str(rec.get("START_TIME", "")), finish_time=str(rec.get("FINISH_TIME", "")),
        exec_host=str(rec.get("EXEC_HOST", "")), work_dir=str(rec.get("SUB_CWD", "") or ""), native_state=raw)


def parse_bjobs_json(text: str, asked: Sequence[str] = ()) -> Tuple[Dict[str, JobStatus], List[str]]:
    """Statuses by job id, and the ids bjobs reported as not found.

    ``asked``: the ids bjobs was asked about, so that an error naming no job
    marks the asked jobs it left without a record UNKNOWN instead of losing
    every other record. A state LSF documents is mapped (STATE_MAP); any
    other is UNKNOWN with the word in ``native_state`` and the reason.
    """
    recs = _sort_records(text, asked)
    found = {jid: _status(jid, rec) for jid, rec in recs.good.items()}
    for jid, error in recs.errors.items():
        found[jid] = JobStatus(job_id=jid, state=UNKNOWN, reason=error)
    return found, recs.missing


def parse_bjobs_owner(text: str, asked: Sequence[str] = ()) -> Dict[str, Dict[str, str]]:
    """The records of ``bjobs -o "jobid stat job_name sub_cwd submit_time" -json`` by job id (not-found ids left out).

    A job bjobs answered with an error instead is ``{"JOBID": id, "ERROR": text}``:
    cancel must not kill what it cannot check, nor give up on the others.
    """
    recs = _sort_records(text, asked)
    out = {jid: {str(k): str(v) for k, v in rec.items()} for jid, rec in recs.good.items()}
    for jid, error in recs.errors.items():
        out[jid] = {"JOBID": jid, "ERROR": error}
    return out


NOT_FOUND_RE = re.compile(r"Job <(\d+)> is not found")
#: LSF's default table, for output without its header line (``bjobs -noheader``).
DEFAULT_HEADER = "JOBID   USER    STAT  QUEUE      FROM_HOST   EXEC_HOST   JOB_NAME   SUBMIT_TIME"
#: LSF's short time (``Nov 10 12:01``, day space-padded), a trailing flag letter allowed, or ``-`` for none.
TIME = r"(?:[A-Z][a-z]{2} +\d{1,2} +\d{1,2}:\d{2}(?: [A-Z](?=\s|$))?|-)"
TIME_COLUMNS = ("SUBMIT_TIME", "START_TIME", "FINISH_TIME")
#: Columns never left blank in a row; any other may be (EXEC_HOST of a pending job).
FILLED_COLUMNS = ("JOBID", "USER", "STAT", "QUEUE")
SKIPPED_LINES = ("No unfinished job found", "No job found")


def _header_columns(header: str) -> List[Tuple[str, int]]:
    """(column name, where its title starts) from a bjobs header line."""
    return [(m.group(0), m.start()) for m in re.finditer(r"\S+", header)]


def _tail_values(line: str, columns: List[Tuple[str, int]]) -> Tuple[Dict[str, str], int]:
    """Values of the columns after JOB_NAME, read from the line's end (the name may hold spaces); where they begin."""
    values: Dict[str, str] = {}
    end = len(line.rstrip())
    for name, _ in reversed(columns):
        m = re.search(r"(?<!\S)(" + (TIME if name in TIME_COLUMNS else r"\S+") + r")\s*$", line[:end])
        if not m:
            raise ValueError(f"no {name} at the end")
        values[name] = m.group(1)
        end = m.start(1)
    return values, end


def _head_values(line: str, columns: List[Tuple[str, int]], stop: int) -> Tuple[Dict[str, str], int]:
    """Values of the columns up to JOB_NAME, left to right; where the last one ended.

    A blank column (EXEC_HOST of a pending job) is told from a job name with
    spaces by position: a value starts where its title does, moved right by as
    much as the values before it overflowed their columns.
    """
    values: Dict[str, str] = {}
    pos = shift = 0
    for i, (name, start) in enumerate(columns[:-1]):
        following = columns[i + 1][1]
        m = re.compile(r"\s*(" + (TIME if name in TIME_COLUMNS else r"\S+") + r")(?!\S)").match(line, pos, stop)
        if name not in FILLED_COLUMNS and (m is None or m.start(1) >= following + shift):
            values[name] = ""
            continue
        if m is None:
            raise ValueError(f"no {name}")
        values[name] = m.group(1)
        shift = max(m.start(1) - start, m.end(1) + 1 - following)
        pos = m.end(1)
    return values, pos


def _plain_row(line: str, columns: List[Tuple[str, int]]) -> Dict[str, str]:
    """One table row as {column: value}; ValueError when the line does not fit the header."""
    names = [n for n, _ in columns]
    cut = names.index("JOB_NAME") if "JOB_NAME" in names else len(names)
    tail, stop = _tail_values(line, columns[cut + 1:])
    head_columns = columns[:cut] + [("JOB_NAME", columns[cut][1] if cut < len(columns) else len(line) + 1)]
    values, pos = _head_values(line, head_columns, stop)
    if cut < len(columns):
        values["JOB_NAME"] = line[pos:stop].strip()
    values.update(tail)
    for needed in ("JOBID", "STAT"):
        if not values.get(needed):
            raise ValueError(f"no {needed}")
    return values


def _plain_status(values: Dict[str, str]) -> JobStatus:
    jid = values["JOBID"]
    if jid.startswith("*"):
        raise LsfOutputError(f"bjobs truncated a job id ({jid}); use bjobs -o ... -json for long ids.")
    if not jid.isascii() or not jid.isdecimal():
        raise ValueError(f"job id {jid!r} is not a number")
    state, reason = _state(values["STAT"], "")
    times = {k: "" if values.get(k, "-") == "-" else values[k] for k in TIME_COLUMNS}   # '-': none, as -json's ""
    return JobStatus(job_id=jid, state=state, queue=values.get("QUEUE", ""), name=values.get("JOB_NAME", ""),
                     reason=reason, submit_time=times["SUBMIT_TIME"], start_time=times["START_TIME"],
                     finish_time=times["FINISH_TIME"], exec_host=values.get("EXEC_HOST", ""),
                     native_state=values["STAT"])


def _skipped(line: str) -> bool:
    """Lines of bjobs' plain output that are not job rows: blanks, banners, not-found notes, host continuations."""
    bare = line.strip()
    return (not bare or bool(BANNER_RE.match(line)) or bool(NOT_FOUND_RE.search(line)) or bare in SKIPPED_LINES
            # Continuation lines of multi-host jobs (e.g. "                         42*h22n08").
            or (line[:1].isspace() and len(bare.split()) == 1))


def parse_bjobs_plain(text: str) -> Tuple[Dict[str, JobStatus], List[str]]:
    """LSF's plain table, columns read from its header line (sites reorder them with LSB_BJOBS_FORMAT).

    Without a header the default layout (JOBID USER STAT QUEUE FROM_HOST
    EXEC_HOST JOB_NAME SUBMIT_TIME) is assumed. Job names may hold spaces and
    may be cut to their last characters behind a ``*``; a job id LSF truncated
    (shown with a leading ``*``) cannot be trusted and is refused.
    """
    found: Dict[str, JobStatus] = {}
    missing = NOT_FOUND_RE.findall(text or "")
    columns = _header_columns(DEFAULT_HEADER)
    for line in (text or "").splitlines():
        if line.split()[:1] == ["JOBID"]:
            columns = _header_columns(line)
            continue
        if _skipped(line):
            continue
        try:
            st = _plain_status(_plain_row(line, columns))
        except ValueError as exc:
            raise LsfOutputError(f"cannot read this bjobs line ({exc}): {line!r}; full output:\n"
                                 f"{(text or '').strip()}") from None
        found[st.job_id] = st
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


#: bsub options whose value names the job's output (``-oo``/``-eo`` overwrite, ``-o``/``-e`` append).
OUTPUT_OPTIONS = ("-oo", "-o", "-eo", "-e")


def directive_words(script: str) -> List[str]:
    """The words of a script's ``#BSUB`` lines, up to its first command, as LSF reads them.

    Tolerant by design: this reads a user's own template or a hand-edited
    script to find its output files, so a line it cannot split is taken word
    by word and an option it does not know (``-core_isolation 2``, ``-csm y``)
    is simply another word, never a reason to find nothing.
    """
    import shlex
    out: List[str] = []
    for line in script.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if not stripped.startswith("#"):
            break
        if not stripped.startswith("#BSUB"):
            continue
        body = stripped[len("#BSUB"):]
        try:
            out += shlex.split(body, comments=False)
        except ValueError:
            out += body.split()
    return out


def output_files(script: str, job_id: str) -> List[str]:
    """The ``-o``/``-e`` files a job of ``script`` writes (``%J`` = job id, ``%I`` = 0), as written in the
    script (relative to its working folder unless absolute); the last value of each option wins, as in bsub."""
    words = directive_words(script)
    values: Dict[str, str] = {}
    for i, word in enumerate(words[:-1]):
        if word in OUTPUT_OPTIONS:
            values[word] = words[i + 1]
    files: List[str] = []
    for key in (("-oo", "-o"), ("-eo", "-e")):
        value = values.get(key[0]) or values.get(key[1])
        if value:
            name = value.replace("%J", str(job_id)).replace("%I", "0")
            if name not in files:
                files.append(name)
    return files
