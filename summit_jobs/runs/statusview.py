"""What ``summit-jobs status`` shows for each job, computed from the run's own files, and how it is drawn.

Why a pure module: the facts (which link of the chain a job is, how far it
trained, how fast, when it will be done, what it last did) are read from
``metrics.jsonl``, ``events.jsonl`` and the checkpoint names that any run
directory holds, and a reader of those files that also draws a terminal is
hard to test. Everything here takes parsed records and ``now`` and returns
values or text; nothing reads a file, a clock or the terminal.

Which job a metrics record belongs to: training records carry no job id, so
the trainer's ``launch`` events (one per start, with the job id and the time)
cut the records into one stretch per job. The ETA is the steps left divided
by the steps per second over the newest records of the newest stretch (a
stretch never spans the pause between two links).

A user's own program (``submit --command``) writes no ``launch`` event and
records as little as ``{"kind": "train", "step": ..., "loss": ...}``, with no
job id and maybe no time. The job script frames every job's step with its own
events (``link_start`` with the size metrics.jsonl had then, ``link_end``
with how the step ended), so its records are cut into links by their place in
the file; a rate needs records with a ``time``, and the total is the one
declared at submit (``--total-steps``, in plan.json). Runs written before the
script wrote those events give all their records to the newest job that has
started.
"""
from __future__ import annotations

import bisect
import calendar
import math
import re
import shlex
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from summit_jobs.schedulers import (DONE, FAILED, FINISHED, OPEN, PENDING, RUNNING as RUNNING_STATE, SUSPENDED,
                                     UNKNOWN)
from trainer import rundir

#: Records the steps-per-second rate is measured over (the newest of the job's stretch).
RATE_WINDOW = 20
#: A pause between two records longer than this many of their usual intervals (plus a minute) is a queue
#: wait between two links: the rate is measured after it.
PAUSE_FACTOR, PAUSE_SLACK_S = 3.0, 60.0
#: States of a job whose program runs (or is suspended while running).
RUNNING = (RUNNING_STATE, SUSPENDED)
#: Columns of the table, in order; the optional ones are dropped first on a narrow terminal.
COLUMNS = ("RUN", "JOB", "LINK", "STATE", "EPOCH", "STEP", "CLIPS/S", "ETA", "LAST EVENT")
OPTIONAL = ("CLIPS/S", "EPOCH", "ETA")
GAP = "  "
COLOURS = {RUNNING_STATE: "32", DONE: "32", PENDING: "33", UNKNOWN: "35", **{s: "31" for s in FINISHED if s != DONE}}
_LSF_TIME = re.compile(r"^([A-Z][a-z]{2})\s+(\d{1,2})\s+(\d{1,2}):(\d{2})(?::(\d{2}))?")
_MONTHS = {m: i for i, m in enumerate(calendar.month_abbr) if m}


@dataclass
class RunFiles:
    """A run directory's files as status needs them (parsed; the reader lives in lifecycle)."""
    records: List[Dict] = field(default_factory=list)    # train and eval records, in file order
    record_offsets: List[int] = field(default_factory=list)  # the byte offset of each record's line (or none)
    events: List[Dict] = field(default_factory=list)     # events.jsonl records, in file order
    checkpoints: List[int] = field(default_factory=list)  # steps of checkpoints/ckpt-<step>.pt
    plan: Dict = field(default_factory=dict)             # plan.json (chain, until_complete, max_links)
    chain_ids: List[str] = field(default_factory=list)   # every job id of the run, links queued by it too
    complete: bool = False


def is_time(value: object) -> bool:
    """A finite number of seconds (JSON allows NaN and Infinity; a damaged file may hold text)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def is_count(value: object) -> bool:
    """A whole number of at least 0 (not a bool: JSON's true would pass for 1)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def keep_record(rec: Dict) -> bool:
    """A metrics record status can use: a train or eval record with a whole step. Every other figure is
    optional (a user's program may write only the step and loss) and read only where it is a number: a
    record without a usable time counts for the step, not for the rate."""
    return rec.get("kind") in ("train", "eval") and is_count(rec.get("step"))


def keep_event(rec: Dict) -> bool:
    """An event record status can use: a known kind, a job id as text and a time."""
    return rec.get("event") in rundir.EVENT_KINDS and isinstance(rec.get("job", ""), str) and is_time(rec.get("time"))


def checkpoint_steps(names: Sequence[str]) -> List[int]:
    """Steps of the checkpoint files among ``names`` (``ckpt-<step:09d>.pt``), in order."""
    out = []
    for name in names:
        m = re.fullmatch(r"ckpt-(\d{9})\.pt", name)
        if m:
            out.append(int(m.group(1)))
    return sorted(out)


# -- which records belong to which job -------------------------------------------------------------
def train_launches(events: Sequence[Dict]) -> List[Dict]:
    """The trainer's training starts (not --test-only), oldest first."""
    out = [e for e in events if e.get("event") == "launch" and e.get("mode", "train") == "train"
           and is_time(e.get("time"))]
    return sorted(out, key=lambda e: e["time"])


def link_starts(events: Sequence[Dict]) -> List[Dict]:
    """The job script's ``link_start`` events that say where their job's records begin, oldest first."""
    out = [e for e in events if e.get("event") == "link_start" and is_count(e.get("metrics_offset"))]
    return sorted(out, key=lambda e: (e["metrics_offset"], e["time"]))


def stretches(files: RunFiles, newest_job: Optional[str] = None) -> Dict[str, List[Dict]]:
    """Records by the job that wrote them, in file order: each record goes to the newest launch before it (a
    record without a time to the same job as the record before it). A run without launch events (a user's
    own program) cuts its records at the ``link_start`` events' offsets (records before the first one belong
    to no link that said so); a run without either gives all its records to ``newest_job``, the newest job of
    the run that has started."""
    starts = train_launches(files.events)
    if not starts:
        links = link_starts(files.events)
        if links and len(files.record_offsets) == len(files.records):
            return _by_offset(files, links)
        return {newest_job: list(files.records)} if newest_job and files.records else {}
    times = [s["time"] for s in starts]
    out: Dict[str, List[Dict]] = {}
    job: Optional[str] = None
    for rec in files.records:
        if is_time(rec.get("time")):
            i = bisect.bisect_right(times, rec["time"]) - 1
            job = str(starts[i].get("job", "")) if i >= 0 else None
        if job is not None:
            out.setdefault(job, []).append(rec)
    return out


def _by_offset(files: RunFiles, links: Sequence[Dict]) -> Dict[str, List[Dict]]:
    """Records by the link whose ``link_start`` offset is the newest at or before the record's line."""
    offsets = [e["metrics_offset"] for e in links]
    out: Dict[str, List[Dict]] = {}
    for rec, at in zip(files.records, files.record_offsets):
        i = bisect.bisect_right(offsets, at) - 1
        if i >= 0:
            out.setdefault(str(links[i].get("job", "")), []).append(rec)
    return out


def newest_started(rows: Sequence[Dict], chain_ids: Sequence[str]) -> Optional[str]:
    """The job id of the newest link that has started: a running one, else the newest that ended."""
    order = {jid: i for i, jid in enumerate(chain_ids)}
    ordered = sorted(rows, key=lambda r: order.get(str(r.get("job_id")), len(order)))
    for states in (RUNNING, FINISHED + (UNKNOWN,)):
        found = [r for r in ordered if r.get("state") in states]
        if found:
            return str(found[-1].get("job_id"))
    return None


def total_steps(files: RunFiles) -> Optional[int]:
    """The run's last step: the newest launch's ``total_steps``, else the total a user's command declared
    (``--total-steps``, in plan.json), else (runs written before launches said it) the first finished epoch's
    length times the epochs; at most ``--max-steps``."""
    starts = train_launches(files.events)
    newest = starts[-1] if starts else {}
    options = newest.get("options") if isinstance(newest.get("options"), dict) else {}
    total = newest.get("total_steps")
    if not isinstance(total, int) or isinstance(total, bool) or total <= 0:
        total = files.plan.get("total_steps")
    if not isinstance(total, int) or isinstance(total, bool) or total <= 0:
        total = _total_from_epochs(files.records, epochs_of(files))
    limit = options.get("max_steps")
    if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
        total = min(total, limit) if total else limit
    return total


def _total_from_epochs(records: Sequence[Dict], epochs: Optional[int]) -> Optional[int]:
    """Steps of the first epoch (its last train record's step) times the epochs, once that epoch ended."""
    train = [r for r in records if r.get("kind") == "train" and is_count(r.get("epoch"))]
    if not epochs or not any(r["epoch"] > 0 for r in train):
        return None
    first = max(r["step"] for r in train if r["epoch"] == 0) if any(r["epoch"] == 0 for r in train) else 0
    return first * epochs if first > 0 else None


def epochs_of(files: RunFiles) -> Optional[int]:
    """The run's epochs: the newest launch's ``--epochs``, else the plan's (not for a user's own command:
    the plan's epochs are then the built-in recipe's, not the program's)."""
    starts = train_launches(files.events)
    options = starts[-1].get("options") if starts else None
    value = options.get("epochs") if isinstance(options, dict) else None
    if not isinstance(value, int) and not files.plan.get("user_command"):
        value = files.plan.get("epochs")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


# -- rate and ETA ------------------------------------------------------------------------------------
def steps_per_second(train: Sequence[Dict], window: int = RATE_WINDOW) -> Optional[float]:
    """Steps per second over the newest ``window`` train records of one job that have a time (None below two
    records)."""
    recent = [r for r in train if is_time(r.get("time"))][-window:]
    if len(recent) < 2:
        return None
    steps = recent[-1]["step"] - recent[0]["step"]
    seconds = recent[-1]["time"] - recent[0]["time"]
    return steps / seconds if steps > 0 and seconds > 0 else None


def since_pause(train: Sequence[Dict]) -> List[Dict]:
    """The records with times after the last pause much longer than their usual interval: the queue wait
    between two links, when one job's records span both (a user's program writes no launch event to cut
    them, and a rate across the wait would be far too low)."""
    timed = [r for r in train if is_time(r.get("time"))]
    gaps = [b["time"] - a["time"] for a, b in zip(timed, timed[1:])]
    if len(gaps) < 2:
        return timed
    usual = sorted(gaps)[len(gaps) // 2]
    cuts = [i + 1 for i, g in enumerate(gaps) if g > PAUSE_FACTOR * usual + PAUSE_SLACK_S]
    return timed[cuts[-1]:] if cuts else timed


def eta_seconds(train: Sequence[Dict], total: Optional[int]) -> Optional[float]:
    """Seconds of training left after the newest record: steps left over the recent rate."""
    if not train or not total:
        return None
    rate = steps_per_second(train)
    left = total - train[-1]["step"]
    if rate is None or left < 0:
        return None
    return left / rate


# -- the job's last event ----------------------------------------------------------------------------
def event_text(e: Dict) -> str:
    """An event record in words."""
    kind, step = e.get("event"), e.get("step")
    if kind == "launch":
        if e.get("already_complete"):
            return "started; the run was already complete"
        return f"started at step {step}" if not e.get("resumed_from") else f"started from step {step}"
    if kind == "resumed":
        return f"resumed from step {step}" + (f" ({e['checkpoint']})" if e.get("checkpoint") else "")
    if kind == "stopped":
        return f"{_stop_reason(str(e.get('reason') or ''))}: checkpoint at step {step}, stopped"
    if kind == "complete":
        return f"training complete at step {step}"
    if kind == "already_complete":
        return "nothing to do: the run was already complete"
    if kind == "checkpoint":
        return f"checkpoint at step {step}"
    if kind == "exit":
        native = SCHEDULER_ENDS.get(str(e.get("native") or ""))
        if native:
            return native
        return f"ended with exit code {e.get('code')}" if e.get("code") is not None else "ended"
    if kind == "ended_by_scheduler":
        reason = str(e.get("reason") or "")
        what = ("a node failure" if reason in ("NodeDown", "NODE_FAIL") else "a preemption" if "preempt" in reason.lower()
                else "a node failure or a preemption")
        return (f"ended by the scheduler ({reason}: {what}); the next link resumes from the newest "
                "checkpoint")
    if kind == "chain_stopped":
        return f"chain stopped before COMPLETE: {e.get('reason') or 'no reason recorded'}"
    if kind == "link_start":
        ckpt = checkpoint_steps([str(e.get("checkpoint") or "")])
        return f"started from the checkpoint at step {ckpt[0]}" if ckpt else "started"
    if kind == "link_end":
        return link_end_text(e)
    return str(kind)


def link_end_text(e: Dict, native: str = "") -> str:
    """How a job's step ended, from the job script's ``link_end`` event (and the scheduler's own end word,
    ``native``, for a stop signal, which the script cannot tell apart: a cancel, the run limit)."""
    code = e.get("exit")
    new = checkpoint_steps([str(e.get("checkpoint") or "")])
    fresh = bool(new) and e.get("checkpoint") != e.get("start_checkpoint")
    saved = f": checkpoint at step {new[0]}" if fresh else ": no new checkpoint"
    if e.get("complete") is True and code == 0:
        return "training complete" + (f" (checkpoint at step {new[0]})" if new else "")
    if e.get("cancelled") is True:
        if native in ("TERM_RUNLIMIT", "TIMEOUT"):
            return f"run limit reached ({native}; exit {code})" + saved
        if native in ("TERM_OWNER", "TERM_ADMIN", "CANCELLED") or native.startswith("CANCELLED"):
            return f"cancelled (exit {code})" + saved
        return f"ended by a stop signal (cancel or run limit; exit {code})" + saved
    if e.get("warned") is True and code == 0:
        return "stopped by the warning" + saved
    if e.get("warned") is True:
        return f"warned, then failed with exit code {code}" + saved
    if code == 0:
        return "ended with exit code 0 before any warning, without COMPLETE"
    return f"failed with exit code {code}"


def _stop_reason(reason: str) -> str:
    if reason == "signal SIGUSR2":
        return "warning signal (USR2)"
    if reason.startswith("signal "):
        return reason[len("signal "):]
    return f"{reason} reached" if reason else "stopped"


#: Events that say how a job ended, kept over the bare "ended with exit code" once LSF reports the end.
FINAL_EVENTS = ("stopped", "complete", "already_complete", "chain_stopped", "ended_by_scheduler", "link_end")
#: The built-in trainer's own ends: they say more than the job script's ``link_end`` written after them.
TRAINER_ENDS = ("stopped", "complete", "already_complete")
#: Ends a scheduler reports in its own state word (Slurm's), each an event of its own: no exit code tells them.
SCHEDULER_ENDS = {"NODE_FAIL": "ended by a node failure (NODE_FAIL)", "PREEMPTED": "preempted (PREEMPTED)",
                  "BOOT_FAIL": "a node failed to boot (BOOT_FAIL)", "DEADLINE": "ended at its deadline (DEADLINE)",
                  "OUT_OF_MEMORY": "out of memory (OUT_OF_MEMORY)"}


def last_event(job: str, files: RunFiles, mine: Sequence[Dict], row: Dict) -> Optional[Dict]:
    """The newest thing this job did, as ``{"event", "text", "time"}`` (time in seconds, or None).

    Events come from events.jsonl; a checkpoint newer than the job's last event is one too (its time is
    that of the job's record at the checkpoint's step), and so is the end of a job whose trainer recorded
    no end (killed, failed): its exit code, at LSF's finish time where LSF gives one.
    """
    found = [e for e in rundir.job_events(files.events, job) if is_time(e.get("time"))]
    newest = max(found, key=lambda e: e["time"]) if found else None
    ckpt = _checkpoint_event(files.checkpoints, mine)
    if ckpt is not None and (newest is None or (is_time(ckpt["time"]) and ckpt["time"] > newest["time"])):
        newest = ckpt
    ended = row.get("state") in FINISHED
    if ended and (newest is None or newest.get("event") not in FINAL_EVENTS):
        # No event says how it ended (killed before its script could): the exit-code file's time, which the
        # scheduler's finish time (LSF's to the minute, Slurm's none at all) only stands in for.
        when = row.get("ended_at") if is_time(row.get("ended_at")) else parse_lsf_time(row.get("finish_time"))
        newest = {"event": "exit", "code": row.get("exit_code"), "time": when, "native": row.get("native_state")}
    if newest is None:
        return None
    kind, text = newest.get("event"), event_text(newest)
    if kind == "link_end":
        trainer = [e for e in found if e.get("event") in TRAINER_ENDS]
        # The scheduler's word for the end: a cancel (lifecycle.mark_cancelled), LSF's TERM_* reason, Slurm's state.
        reason = str(row.get("reason") or "")
        native = ("CANCELLED" if row.get("cancelled") else reason.split()[0].rstrip(":;,") if reason.startswith("TERM_")
                  else str(row.get("native_state") or ""))
        if trainer:   # the trainer said how it ended; the script's link_end after it only confirms that
            kind, text = trainer[-1]["event"], event_text(trainer[-1])
        else:
            text = link_end_text(newest, native)
    return {"event": kind, "text": text, "time": newest.get("time")}


def _checkpoint_event(checkpoints: Sequence[int], mine: Sequence[Dict]) -> Optional[Dict]:
    """The newest checkpoint, when this job wrote it: the job's newest record at that step gives its time
    (None when that record has none)."""
    if not checkpoints or not mine:
        return None
    step = max(checkpoints)
    at = [r for r in mine if r["step"] == step]
    when = at[-1].get("time") if at else None
    return {"event": "checkpoint", "step": step, "time": when if is_time(when) else None} if at else None


def parse_lsf_time(text: object, now: Optional[float] = None) -> Optional[float]:
    """Seconds since the epoch from LSF's ``Nov 21 17:30`` (local time, no year: the last such date not
    in the future), or None when the text is not in that form."""
    m = _LSF_TIME.match(str(text or "").strip())
    if not m or m.group(1) not in _MONTHS:
        return None
    now = time.time() if now is None else now
    year = time.localtime(now).tm_year
    for y in (year, year - 1):
        try:
            t = time.mktime((y, _MONTHS[m.group(1)], int(m.group(2)), int(m.group(3)), int(m.group(4)),
                             int(m.group(5) or 0), 0, 0, -1))
        except (OverflowError, ValueError):
            return None
        if t <= now + 86400:
            return t
    return None


# -- the facts added to each row (the JSON keys) -----------------------------------------------------
def add_facts(rows: Sequence[Dict], files: RunFiles) -> None:
    """Add to each row of one run: ``link``, ``links``, ``more_links``, ``epoch``, ``epochs``, ``step``,
    ``total_steps``, ``clips_per_s``, ``steps_per_s``, ``eta_s`` and ``last_event`` (None where unknown)."""
    ids = list(files.chain_ids)
    by_job = stretches(files, newest_started(rows, ids))
    total, epochs = total_steps(files), epochs_of(files)
    launched = bool(train_launches(files.events)) or bool(link_starts(files.events))
    last_open = any(r.get("state") in OPEN for r in rows
                    if ids and r.get("job_id") == ids[-1])
    more = bool(files.plan.get("until_complete")) and not files.complete and last_open
    for row in rows:
        jid = str(row.get("job_id"))
        mine = by_job.get(jid, [])
        train = [r for r in mine if r.get("kind") == "train"]
        newest = train[-1] if train else None
        row["link"] = ids.index(jid) + 1 if jid in ids else None
        row["links"] = len(ids) if jid in ids else None
        row["more_links"] = more if jid in ids else False
        epoch = newest.get("epoch") if newest else None
        row["epoch"] = epoch + 1 if is_count(epoch) else None
        row["epochs"] = epochs
        row["step"] = newest["step"] if newest else None
        row["total_steps"] = total
        rate = newest.get("clips_per_s") if newest else None
        row["clips_per_s"] = round(float(rate), 2) if is_time(rate) else None
        paced = train if launched else since_pause(train)   # the newest link's records, without link events
        steps = steps_per_second(paced)
        row["steps_per_s"] = round(steps, 3) if steps is not None else None
        row["last_event"] = last_event(jid, files, mine, row)
        row["chain_stopped"] = chain_stop_reason(jid, files, row)
        row["eta_s"] = _eta(row, paced, total, files.complete)
    state = chain_state(rows, files)
    for row in rows:
        row["chain"] = state


def chain_state(rows: Sequence[Dict], files: RunFiles) -> str:
    """The run as one word that is never wrong between two looks: ``complete``, ``running`` (a job of it is
    pending or running), ``between links`` (its last link ended through its script and queued the next, which
    the scheduler's answer did not list yet), ``stopped: WHY`` (a chain that will not go on), or ``ended``
    (a run that is no chain until complete, every job ended).

    Why the files decide: the job script writes the next link into chain.jobs, then its exit-code file; the
    rows were read first, the run's files after, so a link the files know and the rows do not was queued."""
    if files.complete:
        return "complete"
    if any(r.get("state") in OPEN for r in rows):     # a link the scheduler may still run (and queue the next)
        return "running"
    known = {str(r.get("job_id")) for r in rows}
    queued = [j for j in files.chain_ids if j not in known]
    if queued:
        return "between links"
    if not files.plan.get("until_complete"):
        return "ended"
    last = next((r for r in reversed(rows) if str(r.get("job_id")) in files.chain_ids[-1:]), None)
    if last is None:
        return "stopped: the chain's last link is unknown to the scheduler and to the run's files"
    if last.get("chain_stopped"):
        return f"stopped: {last['chain_stopped']}"
    if last.get("source") != "exit-code file" or last.get("exit_code") is None:
        why = last.get("reason") or last.get("state")
        return (f"stopped: link {last.get('link')} (job {last.get('job_id')}) ended without its script finishing "
                f"({why}), so no next link was queued")
    return (f"stopped: link {last.get('link')} (job {last.get('job_id')}) ended with exit code {last['exit_code']} "
            "and queued no next link, without saying why (its output may)")


def chain_stop_reason(job: str, files: RunFiles, row: Optional[Dict] = None) -> Optional[str]:
    """Why the chain ended at this link before COMPLETE (its ``chain_stopped`` event), or None: a chain
    that stops early must never look like one that finished.

    A link ended by a signal cannot tell from inside who sent it (a cancel, the run limit's TERMINATE, Slurm's
    time limit): the scheduler's own end (``row``: its state word and reason, e.g. LSF's TERM_RUNLIMIT or
    TERM_OWNER, Slurm's TIMEOUT) is added to the job script's words."""
    stops = [e for e in rundir.job_events(files.events, job) if e.get("event") == "chain_stopped"]
    if not stops or files.complete:
        return None
    reason = str(stops[-1].get("reason") or "no reason recorded")
    row = row or {}
    native = str(row.get("native_state") or "")
    plain = native in ("", "DONE", "EXIT", "COMPLETED", "FAILED")     # words that say no more than the exit code
    said = " ".join(w for w in ("" if plain else native, str(row.get("reason") or "")) if w)
    if said and row.get("state") in FINISHED and said not in reason:
        reason += f"; the scheduler says: {said}"
    return reason


def _eta(row: Dict, train: Sequence[Dict], total: Optional[int], complete: bool) -> Optional[float]:
    """The ETA of a job that is training (a finished, waiting or stopping one has none)."""
    ended = (row.get("last_event") or {}).get("event") in FINAL_EVENTS
    if row.get("state") != RUNNING_STATE or complete or ended:
        return None
    eta = eta_seconds(train, total)
    return None if eta is None else round(eta, 1)


def blank_facts(row: Dict) -> None:
    """The keys add_facts gives, for a job of no known run (named by its id alone)."""
    for key in ("link", "links", "epoch", "epochs", "step", "total_steps", "clips_per_s", "steps_per_s", "eta_s",
                "last_event", "chain_stopped"):
        row.setdefault(key, None)
    row.setdefault("more_links", False)
    row.setdefault("chain", None)


def signature(rows: Sequence[Dict]) -> Tuple:
    """What makes a new set of lines in a log: a change a reader of the table sees in a job's state (with
    a failed job's exit code), reason, link count or last event; not its step count or an age, which change
    at every look, nor an exit code read while LSF still says RUN (the job script writes it last)."""
    return tuple((r.get("run"), r.get("job_id"), state_text(r), r.get("reason"), r.get("links"),
                  r.get("more_links"), (r.get("last_event") or {}).get("text")) for r in rows)


def changes(before: Tuple, rows: Sequence[Dict], now: float, clock: str) -> List[str]:
    """The lines a plain ``status --watch`` prints after its first table: one per job whose part of the
    ``signature`` differs from ``before`` (or that is new), then the notes the table gives those jobs (a
    chain that stopped, a job that went missing, with the command that goes on)."""
    old = {(part[0], part[1]): part for part in before}
    changed = [row for row, part in zip(rows, signature(rows)) if old.get((part[0], part[1])) != part]
    lines = []
    for row in changed:
        c = cells(row, now, units=True)
        facts = [c["STATE"]] + [f"{name.lower()} {c[name]}" for name in ("LINK", "EPOCH", "STEP") if c[name] != "-"]
        rate = rate_cell(row, units=True)
        facts += [rate] if rate != "-" else []
        lines.append(f"{clock} job {row.get('job_id')} ({row.get('run')}): {', '.join(facts)}: {event_cell(row, now)}")
    return lines + [f"{clock} {line}" for line in notes(changed)]


# -- words and cells -----------------------------------------------------------------------------------
def age(seconds: Optional[float]) -> str:
    """``8s``, ``4m05s``, ``3h11m``, ``2d04h``: short, for a column."""
    if seconds is None:
        return "-"
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def _of(value: Optional[int], total: Optional[int]) -> str:
    if value is None:
        return "-"
    return f"{value}/{total}" if total else str(value)


def state_text(row: Dict) -> str:
    """The job's state in words (``timed out``), with the exit code of a failed job (``failed 3``)."""
    state = str(row.get("state")).replace("_", " ")
    code = row.get("exit_code")
    return f"{state} {code}" if row.get("state") == FAILED and isinstance(code, int) and code != 0 else state


def event_cell(row: Dict, now: float) -> str:
    """The last event in words after its age (``12s ago: checkpoint at step 40``); a waiting job's reason."""
    ev = row.get("last_event")
    if row.get("state") == PENDING and not ev:
        return f"waiting: {row.get('reason')}" if row.get("reason") else "waiting"
    if not ev:
        if row.get("state") != RUNNING_STATE:
            return "-"
        # a user's program writes metrics and no events: its step is in the STEP column
        return "running; no events recorded" if row.get("step") is not None else \
            "running; nothing recorded yet"
    when = ev.get("time")
    # the age first: on a narrow terminal the cell is cut at its end, and the age is the short part
    return (f"{age(now - when)} ago: " if is_time(when) else "") + ev["text"]


def rate_header(rows: Sequence[Dict]) -> str:
    """The rate column's heading: CLIPS/S (the built-in trainer's records say it), STEPS/S (a user's program
    whose records say no clips/s), or RATE when the table holds both kinds, each cell then with its unit."""
    kinds = {"clips" if r.get("clips_per_s") is not None else "steps" for r in rows if r.get("step") is not None}
    return "RATE" if len(kinds) > 1 else "STEPS/S" if kinds == {"steps"} else "CLIPS/S"


def rate_cell(row: Dict, units: bool = False) -> str:
    """Clips per second where the records say it, else steps per second (``units``: with the unit)."""
    clips, steps = row.get("clips_per_s"), row.get("steps_per_s")
    if clips is not None:
        return f"{clips:.1f}" + (" clips/s" if units else "")
    if steps is not None:
        return (f"{steps:.1f}" if steps >= 1 else f"{steps:.2g}") + (" steps/s" if units else "")
    return "-"


def cells(row: Dict, now: float, units: bool = False) -> Dict[str, str]:
    """One row's text per column (``units``: the rate with its unit, for a table of both kinds)."""
    link = "-" if row.get("link") is None else f"{row['link']}/{row['links']}" + ("+" if row.get("more_links") else "")
    return {"RUN": str(row.get("run")), "JOB": str(row.get("job_id")), "LINK": link, "STATE": state_text(row),
            "EPOCH": _of(row.get("epoch"), row.get("epochs")), "STEP": _of(row.get("step"), row.get("total_steps")),
            "CLIPS/S": rate_cell(row, units), "ETA": age(row.get("eta_s")), "LAST EVENT": event_cell(row, now)}


def notes(rows: Sequence[Dict]) -> List[str]:
    """A line per job whose state has an explanation (a failure, a cancel, unknown): the scheduler's or this tool's
    reason, which the table has no room for. A waiting job's reason is in its event column instead."""
    lines = [f"job {r.get('job_id')}: {r.get('reason')}" for r in rows
             if r.get("reason") and r.get("state") != PENDING]
    lines += [f"job {r.get('job_id')}: the scheduler started it again {r['restarts']} time"
              f"{'s' if r['restarts'] > 1 else ''} (a requeue after a node failure or a preemption)"
              for r in rows if (r.get("restarts") or 0) > 0]
    return lines + [f"job {r.get('job_id')}: the chain stopped before COMPLETE: {r['chain_stopped']}; "
                    "to go on from the newest checkpoint (the same job script, --max-links counted afresh): "
                    f"summit-jobs resume {shlex.quote(str(r.get('target') or r.get('run_dir') or r.get('run')))}"
                    for r in rows if r.get("chain_stopped")]


# -- the table -----------------------------------------------------------------------------------------
def shorten(text: str, width: int, ellipsis: str = "\u2026", middle: bool = False) -> str:
    """``text`` in at most ``width`` characters, an ellipsis where it is cut (in the ``middle`` for run
    names: two runs of one job name differ only in their last characters, the timestamp)."""
    if len(text) <= width:
        return text
    room = max(width - len(ellipsis), 0)
    if not middle or room < 4:
        return (text[:room] + ellipsis)[:width]
    head = room // 2
    return text[:head] + ellipsis + text[len(text) - (room - head):]


def fit(natural: Dict[str, int], width: int) -> Dict[str, int]:
    """Column widths that fit ``width``: the event column and the run name shrink first (to 24 and 10),
    then the optional columns go, then both shrink further; room an optional column left goes back to the
    event and the run name. What still does not fit is cut by the caller."""
    widths = dict(natural)

    def over() -> int:
        return sum(widths.values()) + len(GAP) * (len(widths) - 1) - width

    for col, least in (("LAST EVENT", 24), ("RUN", 10)):
        widths[col] = min(widths[col], max(least, widths[col] - over()))
    for col in OPTIONAL:
        if over() > 0:
            del widths[col]
    for col, least in (("LAST EVENT", 10), ("RUN", 6)):
        widths[col] = min(widths[col], max(least, widths[col] - over()))
    for col in ("LAST EVENT", "RUN"):
        widths[col] = min(natural[col], widths[col] + max(-over(), 0))
    return widths


def table(rows: Sequence[Dict], now: float, width: Optional[int] = None, colour: bool = False,
          ellipsis: str = "\u2026") -> List[str]:
    """The table's lines: a header, a line per job, then the notes. ``width``: fit a terminal that wide
    (no line longer; the run name and the event cut with an ellipsis); None: every value whole (logs)."""
    heads = dict({c: c for c in COLUMNS}, **{"CLIPS/S": rate_header(rows)})
    body = [cells(r, now, heads["CLIPS/S"] == "RATE") for r in rows]
    natural = {c: max([len(heads[c])] + [len(b[c]) for b in body]) for c in COLUMNS}
    widths = natural if width is None else fit(natural, width)
    if width is not None and sum(widths.values()) + len(GAP) * (len(widths) - 1) > width:
        colour = False   # the lines are cut at the width: no escape code may be cut in half
    lines = [_line({c: heads[c] for c in widths}, widths, ellipsis, None)]
    lines += [_line(b, widths, ellipsis, COLOURS.get(str(r.get("state"))) if colour else None)
              for b, r in zip(body, rows)]
    lines += notes(rows)
    if width is not None:
        lines = [shorten(line, width, ellipsis) if len(line) > width and "\x1b" not in line else line
                 for line in lines]
    return lines


def _line(values: Dict[str, str], widths: Dict[str, int], ellipsis: str, colour: Optional[str]) -> str:
    """One line of the table; the state cell coloured (after padding, so widths count only the text)."""
    parts = []
    for col, w in widths.items():
        text = shorten(values[col], w, ellipsis, middle=(col == "RUN"))
        last = col == list(widths)[-1]
        cell = text if last else text.ljust(w)
        if col == "STATE" and colour:
            cell = f"\x1b[{colour}m{text}\x1b[0m" + cell[len(text):]
        parts.append(cell)
    return GAP.join(parts).rstrip()
