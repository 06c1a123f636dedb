"""Slurm command lines and the parsing of their output: small pure functions.

Like the LSF client, every parser either understands its input or raises
SlurmOutputError carrying the raw text; a state Slurm does not document is
UNKNOWN with Slurm's word kept. What the commands of Slurm 22.05 (Debian 12)
print is in tests/data/slurm/, and three of its quirks decide the readers:

- ``squeue --json`` lists every job the controller knows whatever ``-j`` and
  ``-t`` say, so its answer is filtered here; its ``exit_code`` is the raw
  wait status (768 for exit 3, 15 for SIGTERM), later releases wrap numbers in
  ``{"set", "infinite", "number"}`` (23.02) or split the code (23.11 and on).
- ``sacct --json`` reports every exit as 0 (its dbv0.0.38 parser reads
  WIFEXITED only), so ended jobs are read from ``sacct -P -n -X``, whose
  ExitCode ``code:signal`` is right.
- ``scancel`` says nothing about a job that has ended or that it does not
  know unless it is verbose, and exits 0 either way.

Job names are the user's: they may hold spaces, quotes, ``|``, ``%`` and even
newlines, so the delimited readers put JobName second and take whatever lies
between the first ``|`` and the fixed fields after it as the name.
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence

from summit_jobs.errors import UserError
from summit_jobs import schedulers
from summit_jobs.schedulers import FINISHED, STATES, UNKNOWN, JobStatus, Owner

#: Slurm's job states (squeue(1) and sacct(1) "JOB STATE CODES", https://slurm.schedmd.com/squeue.html and
#: https://slurm.schedmd.com/job_state_codes.html) onto the interface's (summit_jobs.schedulers.STATES):
#:
#: - waiting for resources, or put back in the queue to wait again (REQUEUED and the federation's REQUEUE_FED),
#:   or its nodes allocated but booting (CONFIGURING, the REST flag POWER_UP_NODE): pending.
#: - held while pending (REQUEUE_HOLD, SPECIAL_EXIT "requeued in a special state", RESV_DEL_HOLD; a PENDING job
#:   whose reason is JobHeldUser or JobHeldAdmin): held.
#: - holding its allocation and not over: running. That includes COMPLETING (some processes may still be
#:   active), SIGNALING, RESIZING and STAGE_OUT (its burst buffer is written back): the job has not ended.
#: - STOPPED (SIGSTOP, e.g. ``scancel -s STOP`` by its owner; CPUs kept) and SUSPENDED (scontrol suspend by an
#:   operator, or gang scheduling and preemption): suspended.
#: - COMPLETED (exit 0 on all nodes): done; FAILED, OUT_OF_MEMORY and BOOT_FAIL: failed; CANCELLED: cancelled;
#:   TIMEOUT and DEADLINE: timed_out; NODE_FAIL: node_failure; PREEMPTED: preempted.
#: - REVOKED (a federation's sibling removed because another cluster started the job): unknown; this cluster
#:   cannot say how the job that runs elsewhere fares.
STATE_MAP: Dict[str, str] = {
    "PENDING": schedulers.PENDING, "REQUEUED": schedulers.PENDING, "REQUEUE_FED": schedulers.PENDING,
    "CONFIGURING": schedulers.PENDING, "POWER_UP_NODE": schedulers.PENDING,
    "REQUEUE_HOLD": schedulers.HELD, "SPECIAL_EXIT": schedulers.HELD, "RESV_DEL_HOLD": schedulers.HELD,
    "RUNNING": schedulers.RUNNING, "COMPLETING": schedulers.RUNNING, "SIGNALING": schedulers.RUNNING,
    "RESIZING": schedulers.RUNNING, "STAGE_OUT": schedulers.RUNNING,
    "STOPPED": schedulers.SUSPENDED, "SUSPENDED": schedulers.SUSPENDED,
    "COMPLETED": schedulers.DONE,
    "FAILED": schedulers.FAILED, "OUT_OF_MEMORY": schedulers.FAILED, "BOOT_FAIL": schedulers.FAILED,
    "CANCELLED": schedulers.CANCELLED, "TIMEOUT": schedulers.TIMED_OUT, "DEADLINE": schedulers.TIMED_OUT,
    "NODE_FAIL": schedulers.NODE_FAILURE, "PREEMPTED": schedulers.PREEMPTED,
    "REVOKED": UNKNOWN,
}
#: Why a job in a documented state is unknown, for status's note.
UNKNOWN_WHY = {"REVOKED": "Slurm reports REVOKED: another cluster of the federation runs the job"}
assert set(STATE_MAP.values()) <= set(STATES)
#: The flags squeue and sacct show instead of the base state (job_state_codes.html: "If a recognized flag is
#: present, it will be reported instead of the base state"), in the order Slurm's job_state_string
#: (src/common/slurm_protocol_defs.c) tries them, with the REST flag POWER_UP_NODE (nodes still booting) next
#: to CONFIGURING; the REST answers of 23.11 and later list the base state and its flags, read the same way.
FLAG_ORDER = ("COMPLETING", "STAGE_OUT", "CONFIGURING", "POWER_UP_NODE", "RESIZING", "REQUEUED", "REQUEUE_FED",
              "REQUEUE_HOLD", "SPECIAL_EXIT", "STOPPED", "REVOKED", "RESV_DEL_HOLD", "SIGNALING")
#: Pending reasons of a held job (https://slurm.schedmd.com/job_reason_codes.html).
HELD_REASONS = ("JobHeldUser", "JobHeldAdmin")
#: Job ids per squeue, sacct call: a whole chain or run list at once, bounded for the command line.
BATCH = 200
#: Columns of ``sacct -P -n -X``; JobName second (see the module's docstring), WorkDir for owners.
SACCT_FIELDS = ("JobID", "JobName", "Partition", "State", "ExitCode", "Submit", "Start", "End", "NodeList",
                "WorkDir")
#: The same columns from a squeue without --json (before 21.08, or without its openapi plugin), by its
#: ``--format`` letters (squeue(1)); it gives a reason but no exit code.
SQUEUE_COLUMNS = (("JobID", "%i"), ("JobName", "%j"), ("Partition", "%P"), ("State", "%T"), ("Reason", "%r"),
                  ("Submit", "%V"), ("Start", "%S"), ("End", "%e"), ("NodeList", "%N"), ("WorkDir", "%Z"))
INVALID_JOB_ID = "Invalid job id specified"
ACCOUNTING_DISABLED = "accounting storage is disabled"
#: How a record of sacct -P or squeue --format begins: a job id (or a step's, an array task's) and a ``|``.
RECORD_START_RE = re.compile(r"^\d[\w.+\[\]-]*\|")
ISO_TIME_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}$")


class SlurmOutputError(UserError):
    """Slurm printed something this tool does not understand; the raw text is in the message."""


@dataclass(frozen=True)
class SlurmJob:
    """One job as squeue or sacct shows it, before it becomes the interface's JobStatus or owner record."""
    job_id: str
    state: str
    name: str = ""
    partition: str = ""
    reason: str = ""
    #: Decoded (see ``exit_from_wait_status``); None when the answer did not say.
    exit_code: Optional[int] = None
    submit: str = ""
    start: str = ""
    end: str = ""
    nodes: str = ""
    work_dir: str = ""
    #: How often Slurm started the job again (a requeue after a node failure or a preemption, or scontrol
    #: requeue): squeue --json's restart_cnt; 0 where the answer does not say.
    restarts: int = 0


def check_ids(job_ids: Sequence[str]) -> List[str]:
    """The ids as strings; a job id that is not a number never reaches a command line."""
    ids = [str(j) for j in job_ids]
    for j in ids:
        if not (j.isascii() and j.isdecimal()):
            raise ValueError(f"job id {j!r} is not a number")
    return ids


def batches(job_ids: Sequence[str], size: int = BATCH) -> List[List[str]]:
    return [list(job_ids[i:i + size]) for i in range(0, len(job_ids), size)]


# -- states and exit codes ---------------------------------------------------------------------------------

def state_word(raw) -> str:
    """Slurm's one state word from squeue's or sacct's text (``CANCELLED by 1000`` is CANCELLED) or from a
    REST answer's list of base state and flags (a known flag wins, as in squeue)."""
    if isinstance(raw, list):
        words = [str(w).strip().upper() for w in raw]
        return next((f for f in FLAG_ORDER if f in words), words[0] if words else "")
    words = str(raw or "").split()
    return words[0].upper() if words else ""


def interface_state(word: str, reason: str = "") -> str:
    """The interface's word for Slurm's (STATE_MAP); a pending job its owner or an operator holds is held; an
    unknown word UNKNOWN."""
    if word == "PENDING" and reason in HELD_REASONS:
        return schedulers.HELD
    return STATE_MAP.get(word, UNKNOWN)


def exit_from_wait_status(status: Optional[int]) -> Optional[int]:
    """A job's exit code from the wait status squeue --json gives: the exit code, or 128 + the signal that
    killed it (as a shell reports it). None stays None."""
    if status is None:
        return None
    signal = status & 0x7F
    return 128 + signal if signal else (status >> 8) & 0xFF


def exit_from_sacct(text: str) -> Optional[int]:
    """sacct's ExitCode ``code:signal`` (https://slurm.schedmd.com/job_exit_code.html) as one number: the code,
    or 128 + the signal; None for anything else."""
    m = re.fullmatch(r"\s*(\d+):(\d+)\s*", text or "")
    if not m:
        return None
    code, signal = int(m.group(1)), int(m.group(2))
    return 128 + signal if signal else code


def _number(value) -> Optional[int]:
    """An integer of squeue --json: plain (22.05) or ``{"set": true, "number": N}`` (23.02 and later)."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def json_exit_code(value) -> Optional[int]:
    """squeue --json's exit_code: a wait status (22.05: a number; 23.02: a set/number object), or from 23.11
    an object with ``return_code`` and ``signal``."""
    if isinstance(value, dict) and "return_code" in value:
        signal = value.get("signal")
        number = _number(signal.get("id")) if isinstance(signal, dict) else None
        return 128 + number if number else _number(value.get("return_code"))
    return exit_from_wait_status(_number(value))


def epoch_text(value) -> str:
    """An epoch of squeue --json as sacct prints times (``2026-11-27T21:07:11``), in this machine's local time
    (sacct's are the login node's); "" for none."""
    seconds = _number(value)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(seconds)) if seconds else ""


def time_text(text: str) -> str:
    """A time column of sacct or squeue as it is; "" for ``Unknown``, ``None``, ``N/A``."""
    text = (text or "").strip()
    return text if ISO_TIME_RE.match(text) else ""


def status(job: SlurmJob) -> JobStatus:
    """The interface's record of a job: its state word mapped, Slurm's word kept in ``native_state``, the exit
    code and finish time only once the job has ended, the start time once it has started."""
    state = interface_state(job.state, job.reason)
    reason = "" if job.reason in ("", "None") else job.reason
    if state == UNKNOWN:
        note = (UNKNOWN_WHY.get(job.state) or f"Slurm reports state {job.state!r}, which this tool does not know"
                if job.state else "Slurm gave no state")
        reason = note + (f"; {reason}" if reason else "")
    ended = state in FINISHED
    exit_code = job.exit_code if ended else None
    if state == schedulers.DONE and exit_code is None:
        exit_code = 0
    return JobStatus(job_id=job.job_id, state=state, queue=job.partition, name=job.name, exit_code=exit_code,
                     reason=reason, submit_time=job.submit,
                     start_time=job.start if state not in (schedulers.PENDING, schedulers.HELD) else "",
                     finish_time=job.end if ended else "", exec_host=job.nodes, work_dir=job.work_dir,
                     restarts=job.restarts, native_state=job.state)


def owner(job: SlurmJob) -> Owner:
    """What cancel checks before it kills: the job's name and its working folder (Slurm's WorkDir: where
    sbatch ran unless the script moved it with --chdir), and when it was submitted."""
    return Owner(job_id=job.job_id, name=job.name, work_dir=job.work_dir, submit_time=job.submit)


# -- sbatch ------------------------------------------------------------------------------------------------

def sbatch_argv(script_name: str, depends_on: Optional[str] = None) -> List[str]:
    """``sbatch --parsable [--dependency=afterany:ID] SCRIPT``: afterany starts the next link of a chain once
    the previous one has ended, whatever its exit (sbatch(1), --dependency)."""
    argv = ["sbatch", "--parsable"]
    if depends_on:
        argv.append(f"--dependency=afterany:{check_ids([depends_on])[0]}")
    # A name starting with '-' would be read as an option.
    return argv + [f"./{script_name}" if script_name.startswith("-") else script_name]


#: sbatch's answers: ``--parsable``'s ``ID`` or ``ID;CLUSTER`` (sbatch(1)), and the plain
#: ``Submitted batch job ID`` (`` on cluster NAME`` with -M) that a site's wrapper may print though it was given
#: --parsable.
SBATCH_ANSWER_RES = (re.compile(r"\s*(\d+)(?:;\S+)?\s*"),
                     re.compile(r"\s*Submitted batch job (\d+)(?: on cluster \S+)?\s*"))


def parse_sbatch(text: str) -> str:
    """The job id of sbatch's answer, the last line that is one of SBATCH_ANSWER_RES's."""
    for line in reversed((text or "").splitlines()):
        m = next((m for m in (r.fullmatch(line) for r in SBATCH_ANSWER_RES) if m), None)
        if m:
            return m.group(1)
    raise SlurmOutputError("sbatch --parsable did not print a job id; it printed:\n" + (text or "").strip())


def squeue_partition_argv(job_id: str) -> List[str]:
    """The partition a job went to (sbatch --parsable does not say)."""
    return ["squeue", "--noheader", f"--jobs={check_ids([job_id])[0]}", "--states=all", "--format=%P"]


# -- squeue and sacct --------------------------------------------------------------------------------------

def squeue_json_argv(job_ids: Sequence[str]) -> List[str]:
    """squeue --json for the ids (22.05 lists every job anyway; later releases filter)."""
    return ["squeue", "--json", "--states=all", f"--jobs={','.join(check_ids(job_ids))}"]


def squeue_plain_argv(job_ids: Sequence[str]) -> List[str]:
    fmt = "|".join(code for _, code in SQUEUE_COLUMNS)
    return ["squeue", "--noheader", "--states=all", f"--jobs={','.join(check_ids(job_ids))}", f"--format={fmt}"]


def sacct_argv(job_ids: Sequence[str]) -> List[str]:
    """One line per job allocation (-X), no header (-n), ``|`` between columns (-P)."""
    return ["sacct", "-P", "-n", "-X", f"--jobs={','.join(check_ids(job_ids))}",
            f"--format={','.join(SACCT_FIELDS)}"]


def _json_object(text: str, command: str) -> dict:
    """The JSON object of a command's answer, after whatever a login shell printed before it."""
    start = re.search(r"^[ \t]*\{", text or "", re.MULTILINE)
    try:
        if start is None:
            raise ValueError("no JSON object in it")
        data, _ = json.JSONDecoder().raw_decode(text, start.end() - 1)
        if not isinstance(data, dict) or not isinstance(data.get("jobs"), list):
            raise TypeError("no list of jobs in it")
    except (ValueError, TypeError) as exc:
        raise SlurmOutputError(f"{command} printed something that is not Slurm's JSON ({exc}):\n"
                               f"{(text or '').strip()[:2000]}") from None
    return data


def _json_job(rec: Mapping) -> SlurmJob:
    word = state_word(rec.get("job_state"))
    return SlurmJob(
        job_id=str(rec.get("job_id")), state=word, name=str(rec.get("name") or ""),
        partition=str(rec.get("partition") or ""), reason=str(rec.get("state_reason") or ""),
        exit_code=json_exit_code(rec.get("exit_code")), submit=epoch_text(rec.get("submit_time")),
        start=epoch_text(rec.get("start_time")), end=epoch_text(rec.get("end_time")),
        nodes=str(rec.get("nodes") or ""), work_dir=str(rec.get("current_working_directory") or ""),
        restarts=_number(rec.get("restart_cnt")) or 0)


def parse_squeue_json(text: str, asked: Sequence[str]) -> Dict[str, SlurmJob]:
    """The asked jobs of ``squeue --json`` by id (the others it lists are dropped); an error Slurm reports
    with no job in the answer is raised with its words."""
    data = _json_object(text, "squeue --json")
    wanted = set(str(j) for j in asked)
    found = {}
    for rec in data["jobs"]:
        if isinstance(rec, dict) and str(rec.get("job_id")) in wanted:
            found[str(rec["job_id"])] = _json_job(rec)
    errors = [e for e in data.get("errors") or [] if e]
    if errors and not found:
        said = "; ".join(str(e.get("error") or e.get("description") or e) if isinstance(e, dict) else str(e)
                         for e in errors)
        if INVALID_JOB_ID.lower() in said.lower():
            return {}
        raise SlurmOutputError(f"squeue --json reported errors: {said}")
    return found


def split_records(text: str, width: int, name_at: int = 1) -> List[List[str]]:
    """The records of a ``|``-separated answer of ``width`` columns whose column ``name_at`` is the job name:
    a name may hold ``|`` (the extra pieces are its) and newlines (a record goes on over the next lines until
    it has its columns). Lines that do not start like a record where one should start (a header, a banner
    a login shell printed) are skipped."""
    records: List[List[str]] = []
    pending = ""
    for line in (text or "").split("\n"):     # not splitlines: a name may hold \r, \f, \x1c, ...
        if not pending and not RECORD_START_RE.match(line):
            continue
        pending = line if not pending else pending + "\n" + line
        if pending.count("|") < width - 1:
            continue
        parts = pending.split("|")
        extra = len(parts) - width
        records.append(parts[:name_at] + ["|".join(parts[name_at:name_at + extra + 1])]
                       + parts[name_at + extra + 1:])
        pending = ""
    return records


def _delimited_job(values: Mapping[str, str]) -> SlurmJob:
    """A job from the named columns of sacct -P or squeue --format."""
    raw = values.get("State", "")
    word = state_word(raw)
    reason = values.get("Reason", "")
    by = re.fullmatch(r"\s*CANCELLED\s+by\s+(\S+)\s*", raw)
    if by:
        reason = f"cancelled by uid {by.group(1)}"
    return SlurmJob(job_id=values["JobID"].strip(), state=word, name=values.get("JobName", ""),
                    partition=values.get("Partition", ""), reason=reason,
                    exit_code=exit_from_sacct(values.get("ExitCode", "")), submit=time_text(values.get("Submit", "")),
                    start=time_text(values.get("Start", "")), end=time_text(values.get("End", "")),
                    nodes=_nodes(values.get("NodeList", "")), work_dir=values.get("WorkDir", ""))


def _nodes(text: str) -> str:
    """A node list, "" for sacct's "None assigned" (a job that ended before it started)."""
    return "" if text.strip() in ("None assigned", "(null)") else text


def parse_delimited(text: str, asked: Sequence[str], fields: Sequence[str]) -> Dict[str, SlurmJob]:
    """The asked jobs of a ``|``-separated answer whose columns are ``fields`` (JobName among them); rows of
    job steps (``1.batch``), array tasks and other jobs are dropped; of two rows of one id the later wins."""
    wanted = set(str(j) for j in asked)
    found: Dict[str, SlurmJob] = {}
    name_at = list(fields).index("JobName")
    for parts in split_records(text, len(fields), name_at):
        values = dict(zip(fields, parts))
        if values["JobID"].strip() in wanted:
            job = _delimited_job(values)
            found[job.job_id] = job
    return found


def parse_sacct(text: str, asked: Sequence[str], fields: Sequence[str] = SACCT_FIELDS) -> Dict[str, SlurmJob]:
    """The asked jobs of ``sacct -P -n -X --format=FIELDS`` (the default columns are SACCT_FIELDS)."""
    return parse_delimited(text, asked, fields)


def parse_squeue_plain(text: str, asked: Sequence[str]) -> Dict[str, SlurmJob]:
    """The asked jobs of ``squeue --noheader --format=...`` (squeue_plain_argv); no exit codes."""
    return parse_delimited(text, asked, [name for name, _ in SQUEUE_COLUMNS])


def says_invalid_job_id(text: str) -> bool:
    """squeue of one unknown id fails with "Invalid job id specified" (it asks the controller for that job
    alone); for this tool that is an answer: the controller no longer knows the job."""
    return INVALID_JOB_ID.lower() in (text or "").lower()


# -- scancel -----------------------------------------------------------------------------------------------

def scancel_argv(job_id: str) -> List[str]:
    """``scancel --verbose ID``: only a verbose scancel says that a job had ended or is not known."""
    return ["scancel", "--verbose", check_ids([job_id])[0]]


def scancel_outcome(text: str, job_id: str) -> Optional[str]:
    """``terminating``, ``finished`` or ``not found`` from a verbose scancel's words about the job, or None
    when they say something else (permission denied, the controller out of reach)."""
    jid = re.escape(str(job_id))
    error = re.search(rf"Kill job error on job id {jid}: (.*)", text or "")
    if error:
        said = error.group(1).lower()
        if "already completing or completed" in said:
            return "finished"
        if INVALID_JOB_ID.lower() in said:
            return "not found"
        return None
    if re.search(rf"Terminating job {jid}\b", text or ""):
        return "terminating"
    return None


# -- the output files of a script --------------------------------------------------------------------------

def _arguments(body: str) -> List[str]:
    """The words of one ``#SBATCH`` line as sbatch reads them (src/sbatch/opt.c, _get_argument): quotes group
    characters, a backslash takes the next character as it is (also inside quotes), an unquoted ``#`` ends
    the line. An unmatched quote, which sbatch refuses, ends the word here."""
    words: List[str] = []
    word: Optional[str] = None
    quote, escaped = "", False
    for ch in body:
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped, word = True, word or ""
            continue
        elif quote:
            if ch == quote:
                quote = ""
                continue
        elif ch in "\"'":
            quote, word = ch, word or ""
            continue
        elif ch == "#":
            break
        elif ch.isspace():
            if word is not None:
                words.append(word)
            word = None
            continue
        word = (word or "") + ch
    if word is not None:
        words.append(word)
    return words


def directive_words(script: str) -> List[str]:
    """The words of a script's ``#SBATCH`` lines (from the line's first column) up to its first command, as
    sbatch reads them: blank lines and other comments are passed over, and the first line that is neither
    ends the directives (sbatch(1): "once the first non-comment non-whitespace line has been reached")."""
    words: List[str] = []
    for line in (script or "").split("\n"):
        if line.startswith("#SBATCH"):
            words += _arguments(line[len("#SBATCH"):])
        elif line.strip() and not line.lstrip().startswith("#"):
            break
    return words


#: The options output_files reads, by their short and long names (sbatch(1)).
OPTIONS = {"output": ("-o", "--output"), "error": ("-e", "--error"), "job_name": ("-J", "--job-name"),
           "chdir": ("-D", "--chdir"), "partition": ("-p", "--partition")}


def directive_values(script: str) -> Dict[str, str]:
    """The last value of each of OPTIONS in the script's directives (the last one wins, as in sbatch), written
    ``-o X``, ``-oX``, ``--output X`` or ``--output=X`` (getopt's abbreviations, ``--out=X``, are not read)."""
    words = directive_words(script)
    values: Dict[str, str] = {}
    for i, word in enumerate(words):
        for key, (short, long) in OPTIONS.items():
            if word in (short, long) and i + 1 < len(words):
                values[key] = words[i + 1]
            elif word.startswith(long + "="):
                values[key] = word[len(long) + 1:]
            elif word.startswith(short) and len(word) > len(short) and not word.startswith("--"):
                values[key] = word[len(short):]
    return values


#: Zero-padding of a number in a file name pattern is at most this wide (as slurmstepd pads ``%12j``).
MAX_PAD = 10
#: ``%a`` of a job that is not an array task: Slurm's NO_VAL, as slurmstepd writes it.
NO_ARRAY_INDEX = "4294967294"


def expand_pattern(pattern: str, job_id: str, job_name: str, user: Optional[str] = None,
                   node: Optional[str] = None) -> str:
    """A batch job's file name from an sbatch filename pattern (sbatch(1) "filename pattern",
    https://slurm.schedmd.com/sbatch.html#SECTION_FILENAME-PATTERN), as slurmstepd expands it for the batch
    step: %j, %J and %A the job id, %x the job name, %u the user, %N the (first) node, %s ``batch``, %n and
    %t 0, %a 4294967294, %% a percent sign; a width (``%4j``) zero-pads numbers. A pattern with a backslash
    is taken as it is, less its backslashes. %u and %N stay as they are when ``user``/``node`` are not given,
    and so does an unknown letter."""
    if "\\" in pattern:
        return pattern.replace("\\", "")
    values = {"j": job_id, "J": job_id, "A": job_id, "a": NO_ARRAY_INDEX, "s": "batch", "n": "0", "t": "0",
              "x": job_name, "u": user, "N": node}

    def one(m: "re.Match[str]") -> str:
        width, letter = m.group(1), m.group(2)
        if letter == "%":
            return width + "%"
        value = values.get(letter)
        if value is None:
            return m.group(0)
        return value.zfill(min(int(width), MAX_PAD)) if width and value.isdecimal() else value

    return re.sub(r"%(\d*)([A-Za-z%])", one, pattern)


def output_files(script: str, job_id: str, *, script_name: str = "job.sbatch", user: Optional[str] = None,
                 node: Optional[str] = None) -> List[str]:
    """The files a batch job of ``script`` writes its output and errors to: ``--output`` (default
    ``slurm-%j.out``) and ``--error`` (default: the output's file), expanded by ``expand_pattern``; the job's
    name is ``--job-name`` or the script's file name (sbatch(1) --job-name). Relative names are relative to
    the job's folder, under ``--chdir`` when the script gives one."""
    values = directive_values(script)
    name = values.get("job_name", script_name.rsplit("/", 1)[-1])
    files: List[str] = []
    for pattern in (values.get("output", "slurm-%j.out"), values.get("error")):
        if pattern is None:
            continue
        path = expand_pattern(pattern, str(job_id), name, user=user, node=node)
        if values.get("chdir") and not path.startswith("/"):
            path = values["chdir"].rstrip("/") + "/" + path
        if path not in files:
            files.append(path)
    return files
