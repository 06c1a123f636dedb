"""The job lifecycle without the command line: which jobs a target names, their status, their output.

Why apart from the CLI: ``status``, ``cancel``, ``logs`` and ``report`` all
need the same answers (the jobs of a run, each one's state reconciled from
the scheduler's job list and the run directory), and a command module importing
another's private helpers tied them into a cycle.

Status asks the run's scheduler for all jobs of a host at once (LSF: one
batched ``-json`` call), then reads each job's ``exitcode.<id>`` file in the
run directory: that file, not the scheduler, says how a job ended. A job that
has dropped out of the scheduler's list without such a file is unknown, never
done; a row says where its state came from in the scheduler's own word (its
``status_command``). A row's ``state`` is one of the scheduler interface's words
(summit_jobs.schedulers.STATES), the scheduler's own in ``native_state``. A job
killed by its owner or an operator (cancel, bkill: LSF's EXIT with TERM_OWNER
or TERM_ADMIN, scancel: Slurm's CANCELLED) is cancelled even when the trainer
checkpointed and exited 0 on the kill's TERM.

``state`` arguments are the CLI's state object (profile, machine, config, ssh_options).
"""
from __future__ import annotations

import re
import shlex
import sys
import time
from typing import Callable, Dict, List, Optional, Tuple, TypeVar

from summit_jobs.errors import UserError
from summit_jobs.schedulers import CANCELLED as CANCELLED_STATE, DONE, FAILED, FINISHED, OPEN, UNKNOWN
from trainer import rundir

#: The states in which status has nothing more to wait for, but for an unknown job the scheduler still lists
#: (``ended`` tells them apart).
FINAL = FINISHED + (UNKNOWN,)


def ended(row: Dict[str, object]) -> bool:
    """Whether a status row's job has ended for good: a final state, but not unknown while the scheduler
    still lists the job under a word of its own (LSF's UNKWN or ZOMBI, a host it cannot reach; Slurm's REVOKED;
    a word this tool does not know): that job may still run, write into its run directory and end."""
    return row.get("state") in FINAL and not (row.get("state") == UNKNOWN and row.get("native_state"))
RECENT_RUNS = 20
CANCELLED = "CANCELLED"
#: How often in a row status --watch and logs --follow open a new SSH connection after one dropped.
RECONNECTS = 3
T = TypeVar("T")


def targets(state, target: Optional[str]) -> List[Tuple[Optional[Dict], List[str]]]:
    """(run record or None, job ids) pairs for TARGET, or for the most recent runs without one."""
    from summit_jobs.runs import records as runs
    if not target:
        records = runs.indexed()[-RECENT_RUNS:]
        if not records:
            raise UserError("no runs recorded yet on this machine; submit one with `summit-jobs submit`, or "
                            "name a job id.")
        return [(r, [str(j) for j in r.get("job_ids") or []]) for r in records]
    if target.isdecimal() and runs._job_id(target) is None:
        raise UserError(f"{target!r} is not a job id (a whole number from 1 to {runs.MAX_JOB_ID}); give a run "
                        "directory, a run name or a job id.")
    found = runs.find(target)
    if found:
        jid = runs._job_id(target, found[-1])
        if jid is not None and jid in [str(j) for j in found[-1].get("job_ids") or []]:
            return [(r, [jid]) for r in found[-1:]]        # a job id (opaque: each scheduler says what it holds)
        if len(found) > 1:
            where = "; ".join(f"{r.get('host')}:{r.get('run_dir')}" for r in found)
            raise UserError(f"{len(found)} runs are named {target!r} ({where}); give the run directory instead.")
        return [(found[0], [str(j) for j in found[0].get("job_ids") or []])]
    if target.isdecimal():
        return [(None, [target])]
    known = ", ".join(sorted({str(r.get('name')) for r in runs.indexed()})[-10:]) or "none"
    raise UserError(f"no run named {target!r} and no run directory there. Give a run directory, a run name "
                    f"(recent: {known}) or a job id.")


def host_key(record: Optional[Dict]) -> str:
    ssh = (record or {}).get("ssh")
    if not ssh:
        home = (record or {}).get("lsf_home")
        return f"local:{home}" if home else "local"
    return f"{ssh.get('user')}@{ssh['host']}:{ssh.get('port')}"


class Hosts:
    """One host object (one SSH connection) per distinct host for this invocation."""

    def __init__(self, state):
        self.state = state
        self.open: Dict[str, object] = {}

    def get(self, record: Optional[Dict]):
        from summit_jobs import schedulers
        from summit_jobs.hosts import host as hosts
        key = host_key(record)
        if key not in self.open:
            if record is None:
                login = schedulers.for_profile(self.state.profile).submit_command
                self.open[key] = hosts.for_profile(self.state.profile, self.state.ssh_options, login_command=login)
            else:
                self.open[key] = _in_own_lsf(hosts.from_record(record, self.state.ssh_options,
                                                                self._vouched(record)), record)
        return self.open[key]

    def _vouched(self, record: Dict) -> List[str]:
        """known_hosts files named in the user's own profiles: the selected machine's and the run's."""
        from summit_jobs.profiles import config
        out: List[str] = []
        for name in {self.state.machine, record.get("machine")}:
            if not isinstance(name, str):
                continue
            try:
                prof = config.profile(self.state.config, name)
            except UserError:
                continue
            if prof.ssh.known_hosts:
                out.append(str(prof.ssh.known_hosts))
        return out

    def close(self) -> None:
        for h in self.open.values():
            h.close()


def _in_own_lsf(host, record: Dict):
    """``host`` set to ask the embedded LSF the run was submitted to (its recorded home), whichever
    SUMMIT_JOBS_LSF_HOME this invocation has: another home may have a job of the same id."""
    home = record.get("lsf_home")
    if home and not host.is_remote and getattr(host, "embedded", False):
        host.env["SUMMIT_JOBS_LSF_HOME"] = str(home)
    return host


class Reconnect:
    """Keeps ``status --watch`` and ``logs --follow`` going when the SSH connection drops.

    Why: a laptop's network drops, it sleeps, a login node reboots, and a
    watch that died with the connection would lose its place. A drop closes
    the connections, says so in one line, waits and opens them again: a new
    login, so a site with token codes asks for a new one. Up to RECONNECTS
    times in a row (each success resets the count), then the error stands. A
    failure before the first success is not retried: the options are more
    likely wrong than the network (a drop in the middle of the first round is
    retried: that connection had worked).
    """

    def __init__(self, hosts_: Hosts, pause: float, limit: int = RECONNECTS):
        self.hosts = hosts_
        self.pause = pause
        self.limit = limit
        self.drops = 0
        self.connected = False

    def run(self, step: Callable[[], T]) -> T:
        """``step()``, again after each reconnect, until it runs through."""
        from summit_jobs.hosts.host import ConnectionLost, Unreachable
        while True:
            try:
                out = step()
            except ConnectionLost as exc:
                if (isinstance(exc, Unreachable) and not self.connected) or self.drops >= self.limit:
                    raise
                self.drops += 1
                print(f"summit-jobs: connection to {exc.host or 'the login node'} lost; reconnecting... "
                      f"({self.drops}/{self.limit})", file=sys.stderr, flush=True)
                self.hosts.close()
                time.sleep(self.pause)
                continue
            self.connected = True
            self.drops = 0
            return out


def query(host, ids: List[str], record: Optional[Dict] = None):
    """(status of each job the run's scheduler still knows, the ids it no longer knows)."""
    from summit_jobs import schedulers
    return schedulers.for_record(record).query(host, ids)


#: How much of an exit-code file that holds something other than a number a message shows.
SHOWN_CHARS = 40


def exit_code_of(text: Optional[str], name: str) -> Tuple[Optional[int], Optional[str]]:
    """The code an exit-code file ``name`` holds (None when absent); else None and what the file holds instead.

    The job script writes the number as its last act, so a file that exists
    but holds no number (empty: the node died mid-write; garbage: something
    else wrote it) tells a different story from no file at all, and the
    message says which, with the start of what is there.
    """
    if text is None:
        return None, None
    value = text.strip()
    if value.lstrip("-").isdecimal():
        return int(value), None
    if not value:
        return None, f"its exit-code file {name} is empty"
    shown = value if len(value) <= SHOWN_CHARS else value[:SHOWN_CHARS] + "..."
    return None, f"its exit-code file {name} holds garbage, not an exit code: {shown!r}"


def exit_code_file(host, record: Optional[Dict], jid: str) -> Tuple[Optional[int], Optional[str]]:
    """The job's exit code and what is wrong with its exit-code file (exit_code_of); nothing without a record."""
    if record is None:
        return None, None
    name = rundir.exitcode_name(jid)
    return exit_code_of(host.read_text(host.join(str(record["run_dir"]), name)), name)


def collect(state, pairs, hosts_: Hosts) -> List[Dict[str, object]]:
    """One row per job: the scheduler's view corrected by the exit-code files."""
    from summit_jobs import schedulers
    groups: Dict[str, List[Tuple[Optional[Dict], str]]] = {}
    for record, ids in with_links(pairs, hosts_):
        for jid in ids:
            groups.setdefault(host_key(record), []).append((record, jid))
    rows: List[Dict[str, object]] = []
    failed: List[UserError] = []
    disks: Dict[str, Optional[str]] = {}
    targets_: Dict[str, str] = {}
    for key, items in groups.items():
        try:
            host = hosts_.get(items[0][0])
            found, _missing = query(host, [jid for _, jid in items], items[0][0])
        except UserError as exc:
            # One scheduler that cannot answer (a Slurm run looked at from a shell without SLURM_CONF, an LSF
            # home gone) must not hide the other runs: its jobs are shown with why.
            failed.append(exc)
            rows += [_unasked(record, jid, schedulers.for_record(record), exc) for record, jid in items]
            continue
        scheduler = schedulers.for_record(items[0][0])
        listed_by = scheduler.status_command
        for record, jid in items:
            code, problem = exit_code_file(host, record, jid)
            st = found.get(jid)
            other = _another_job(host, record, st, scheduler.label)
            row = job_row(record, jid, host.label, None if other else st, code, problem, listed_by)
            if code is not None and record is not None:
                row["ended_at"] = _tolerant(lambda: host.mtime(host.join(str(record["run_dir"]),
                                                                         rundir.exitcode_name(jid))), None)
            if other:
                _lost(row, other)
            elif record is not None and ended(row) and code is None:
                where = str(record["run_dir"])
                if where not in disks:      # one df a run directory
                    disks[where] = full_disk(host, where)
                full = disks[where]
                if full:
                    row["reason"] = f"{full}; {row.get('reason') or ''}".rstrip("; ")
            mark_cancelled(row, None if other else st, record)
            if record is not None:
                # how the hints under the table name the run (statusview.notes): as a command that runs
                if str(record["run_dir"]) not in targets_:
                    from summit_jobs.runs import records as runs
                    targets_[str(record["run_dir"])] = runs.follow_target(record)
                row["target"] = targets_[str(record["run_dir"])]
            rows.append(row)
    if failed and len(failed) == len(groups):
        raise failed[0]
    return rows


def _unasked(record: Optional[Dict], jid: str, scheduler, exc: UserError) -> Dict[str, object]:
    """The row of a job whose scheduler could not be asked: UNKNOWN, with the scheduler's answer as why."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return {"run": (record or {}).get("name", "-"), "job_id": jid, "host": host_key(record),
            "run_dir": (record or {}).get("run_dir"), "exit_code": None, "source": "none", "cancelled": False,
            "lost": False, "restarts": 0, "native_state": None, "finish_time": None, "state": UNKNOWN,
            "reason": f"{scheduler.label} could not be asked about this run's jobs: {first}"}


#: Free space below which a run directory's file system counts as full (a job's last writes need a few KiB).
FULL_BELOW_KIB = 64


def full_disk(host, run_dir: str) -> Optional[str]:
    """"no space left on ..." where the run directory's file system is full, else None.

    Why: a job whose disk filled up cannot write its exit-code file, its events or even its output there, so
    status has nothing else to say why it ended; ``df -Pk`` (POSIX output) on the run's host tells."""
    res = host.run(["df", "-Pk", run_dir])
    lines = res.stdout.strip().splitlines() if res.rc == 0 else []
    words = lines[-1].split() if len(lines) >= 2 else []
    if len(words) < 6 or not words[3].isdecimal() or int(words[3]) >= FULL_BELOW_KIB:
        return None
    return (f"no space left on {words[5]} (the run directory's file system: {words[3]} KiB free), so the job "
            "could not record how it ended")


def _another_job(host, record: Optional[Dict], st, label: str) -> Optional[str]:
    """Why the job ``st`` the scheduler lists under a run's id is another job (foreign), or None."""
    if record is None or st is None or not (st.work_dir or st.name):
        return None
    return foreign(host, record, st.job_id, st.name, st.work_dir.strip(), label, st.submit_time)


def _lost(row: Dict[str, object], why: str) -> None:
    """A run's job whose id the scheduler now gives to another job: its state is the exit-code file's, or
    UNKNOWN without one, never the other job's."""
    jid = row["job_id"]
    if row.get("exit_code") is None:
        row["reason"] = (f"job {jid} is now another job; this run's link was lost ({why}); check its output with "
                         f"`summit-jobs logs {shlex.quote(str(row['run_dir'] or jid))}`")
    else:
        row["reason"] = f"job {jid} is now another job ({why}); its exit-code file says {row['exit_code']}"
    row["lost"] = True


def job_row(record: Optional[Dict], jid: str, where: str, st, code: Optional[int], problem: Optional[str],
            listed_by: str) -> Dict[str, object]:
    """A job's row from the scheduler's status ``st`` (None: no longer listed) and its exit-code file's ``code``
    (and ``problem``); ``listed_by`` is the scheduler's status command, which rows and reasons name."""
    row: Dict[str, object] = {"run": (record or {}).get("name", "-"), "job_id": jid, "host": where,
                              "run_dir": (record or {}).get("run_dir"), "exit_code": code,
                              "source": "exit-code file", "cancelled": False, "lost": False, "restarts": 0,
                              "native_state": None, "finish_time": None, "ended_at": None}
    if st is not None:
        row.update(state=st.state, native_state=st.native_state or None, reason=st.reason, finish_time=st.finish_time or None,
                   restarts=st.restarts)
        if st.finished and code is None:
            row.update(exit_code=st.exit_code, source=listed_by,
                       reason="; ".join(r for r in (st.reason, problem) if r))
        elif st.finished or (st.state == UNKNOWN and code is not None):
            # the exit-code file is written at the job's end: it says how a job ended that the scheduler still
            # lists under a word of its own (LSF's ZOMBI, Slurm's REVOKED for good in sacct)
            row["state"] = ended_state(code, st.state)
        elif code is None:
            row["source"] = listed_by
    elif code is not None:
        row.update(state=ended_state(code), reason=f"gone from {listed_by}; exit-code file says {code}")
    else:
        row["state"] = UNKNOWN
        row["reason"] = (f"gone from {listed_by}, and {problem}: how the job ended is unknown" if problem else
                         f"gone from {listed_by} and no exit-code file: the job did not finish normally (killed, "
                         "or never started)") + f"; check its output with `summit-jobs logs {jid}`"
        row["source"] = "none"
    return row


def ended_state(code: Optional[int], said: str = FAILED) -> str:
    """How a job ended by its exit-code file's ``code``: done for 0; otherwise the scheduler's word for the end
    (``said``: timed_out, node_failure, preempted, cancelled tell more than the code), failed where it said done
    or nothing more."""
    if code == 0:
        return DONE
    return said if said in FINISHED and said != DONE else FAILED


#: How much earlier than the run's record a job of the run may say it was submitted: the scheduler's clock is
#: the controller's and LSF shows minutes only, the record's clock the submitting machine's.
SUBMIT_SKEW = 300


def foreign(host, record: Dict, jid: str, name: str, work_dir: str, label: str,
            submit_time: str = "") -> Optional[str]:
    """Why the job the scheduler (``label``) lists under ``jid`` is not the run's, or None when it is.

    Why: ids repeat (a controller restarted without its state, an id counter wrapped around, a site's id range
    reused), so an id alone does not make a job the run's. A job submitted before the run's record was
    written is not the run's (submit_time, where the scheduler and the record both say when). The job's
    submission folder must be the run directory (every job script of a run is submitted from there); where
    the scheduler does not say, its name must be the run's job name.
    """
    run_dir = str(record["run_dir"]).rstrip("/") or "/"
    began = str(record.get("first_created") or record.get("created") or "")
    created = record_time(began)
    submitted = scheduler_time(submit_time, time.time())
    if created is not None and submitted is not None and submitted < created - SUBMIT_SKEW:
        return (f"{label}'s job {jid} ({name or 'no name'}) was submitted {submit_time.strip()}, before this run "
                f"was created ({began})")
    if work_dir:
        if _same_folder(host, work_dir, run_dir):
            return None
        return (f"{label}'s job {jid} ({name or 'no name'}) was submitted from {work_dir}, not from this run's "
                f"directory {run_dir}")
    mine = str(record.get("job_name") or "")
    if mine and name == mine:
        return None
    return (f"{label}'s job {jid} is named {name!r}, not {mine!r}, and {label} does not say where it was "
            "submitted from")


_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_LSF_TIME_RE = re.compile(r"^([A-Za-z]{3})\s+(\d{1,2})\s+(\d{1,2}):(\d{2})(?::(\d{2}))?(?:\s+(\d{4}))?(?:\s+[A-Z])?$")
_ISO_TIME_RE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})$")


def record_time(text: str) -> Optional[float]:
    """The epoch of a run record's ``created`` (``2026-12-07T12:01:02+0000``); None when it is not one."""
    import datetime
    try:
        return datetime.datetime.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S%z").timestamp()
    except ValueError:
        return None


def scheduler_time(text: str, now: float) -> Optional[float]:
    """The epoch of a submit time as the schedulers print it, in this machine's local time: Slurm's
    ``2026-12-07T12:01:02``, LSF's ``Dec  7 12:01`` (with ``:SS``, a year under LSB_DISPLAY_YEAR, or a one-letter
    mark after it). LSF's form without a year is taken in the year that does not put it more than a day after
    ``now``. None for anything else (``-``, empty, another format): no time, no check."""
    text = (text or "").strip()
    m = _ISO_TIME_RE.match(text)
    if m:
        fields = [int(g) for g in m.groups()]
        year = None
    else:
        m = _LSF_TIME_RE.match(text)
        if not m or m.group(1).lower() not in _MONTHS:
            return None
        year = int(m.group(6)) if m.group(6) else None
        fields = [year or time.localtime(now).tm_year, _MONTHS.index(m.group(1).lower()) + 1, int(m.group(2)),
                  int(m.group(3)), int(m.group(4)), int(m.group(5) or 0)]
    try:
        when = time.mktime((*fields, 0, 0, -1))
        if m.re is _LSF_TIME_RE and year is None and when > now + 86400:
            fields[0] -= 1
            when = time.mktime((*fields, 0, 0, -1))
    except (OverflowError, ValueError):
        return None
    return when


def _same_folder(host, cwd: str, run_dir: str) -> bool:
    """Whether the scheduler's submission folder is the run directory (``$HOME/...`` forms and symbolic links
    allowed)."""
    import os
    cwd = cwd.rstrip("/") or "/"
    for prefix in ("$HOME/", "~/"):
        if cwd.startswith(prefix):
            return run_dir.endswith("/" + cwd[len(prefix):])
    if cwd == run_dir:
        return True
    if not host.is_remote:
        return os.path.realpath(cwd) == os.path.realpath(run_dir)
    res = host.run(["pwd", "-P"], cwd=run_dir)
    return res.rc == 0 and res.stdout.strip() == cwd


def with_links(pairs, hosts_: Hosts):
    """A whole run's ids include the links its chain queued itself; a single job id stays alone."""
    from summit_jobs.runs import records as runs
    out = []
    for record, ids in pairs:
        whole_run = record is not None and ids == [str(j) for j in record.get("job_ids") or []]
        out.append((record, runs.with_chain_links(hosts_.get(record), record, ids) if whole_run else ids))
    return out


def mark_cancelled(row: Dict[str, object], st, record: Optional[Dict]) -> None:
    """A job its owner or an operator killed is cancelled, whatever exit code the trainer left.

    LSF reports a bkilled job as EXIT with TERM_OWNER or TERM_ADMIN (Slurm:
    CANCELLED, whoever ran scancel) even when the job's processes exited 0 (the
    trainer checkpoints on the kill's TERM and exits cleanly), so the exit-code
    file must not turn it into done.
    """
    by_owner = st is not None and st.state == CANCELLED_STATE
    recorded = record is not None and row["job_id"] in [str(j) for j in record.get("cancelled") or []]
    if not (by_owner or recorded) or row["state"] in OPEN:
        return
    row["state"] = CANCELLED_STATE
    row["cancelled"] = True
    why = (st.reason or f"the scheduler says {st.native_state or 'cancelled'}") if by_owner else \
        "killed with `summit-jobs cancel`"
    row["reason"] = f"{CANCELLED}: {why}"


def outputs(host, record: Dict, job_id: str) -> List[str]:
    from summit_jobs.runs import records as runs
    script = runs.read_script(host, str(record["run_dir"]), record)
    return [host.join(str(record["run_dir"]), f) for f in runs.output_files(script, job_id, record)]


def each_link(host, record: Dict, ids: List[str], call: Callable[[Callable[[], T]], T] = lambda f: f()):
    """The jobs in order, reading the chain file again after the last: a followed link may queue the next.

    ``call`` runs each read of the chain file (Reconnect.run, to read again over a new connection).
    """
    from summit_jobs.runs import records as runs
    whole_run = ids == [str(j) for j in record.get("job_ids") or []]
    done: List[str] = []
    while True:
        links = call(lambda: runs.with_chain_links(host, record, ids)) if whole_run else ids
        todo = [j for j in links if j not in done]
        if not todo:
            return
        for jid in todo:
            done.append(jid)
            yield jid


class RunReader:
    """Reads what status shows of a run (metrics, events, checkpoint names, plan, chain) from its host.

    Why it keeps state: ``status --watch`` looks again every few seconds, and
    a long run's metrics.jsonl grows to megabytes; each look reads only what
    the files gained since the last (over SSH too), and a torn last line is
    kept until its end arrives.
    """

    def __init__(self) -> None:
        self.tails: Dict[str, Tuple[int, bytes, list, List[int]]] = {}
        self.plans: Dict[str, Dict] = {}

    def records(self, host, path: str, keep: Callable[[Dict], bool]) -> list:
        """The JSON-lines records of ``path`` that ``keep`` accepts, reading only what is new."""
        return self.records_at(host, path, keep)[0]

    def records_at(self, host, path: str, keep: Callable[[Dict], bool]) -> Tuple[list, List[int]]:
        """:meth:`records`, with the byte offset of each record's line in the file."""
        key = f"{host_key_of(host)}:{path}"
        offset, partial, found, at = self.tails.get(key, (0, b"", [], []))
        data = _tolerant(lambda: host.read_from(path, offset), None)
        if data:
            text, _, rest = (partial + data).rpartition(b"\n")
            new, new_at = rundir.json_records_at(text, keep, offset - len(partial))
            found, at = found + new, at + new_at
            offset, partial = offset + len(data), rest
        self.tails[key] = (offset, partial, found, at)
        return found, at

    def files(self, host, record: Dict):
        """statusview.RunFiles of the run ``record`` names."""
        from summit_jobs.runs import records as runs, statusview
        run_dir = str(record["run_dir"])
        if run_dir not in self.plans:
            self.plans[run_dir] = _json_object(_tolerant(lambda: host.read_text(host.join(run_dir, rundir.PLAN)),
                                                         None))
        records, offsets = self.records_at(host, host.join(run_dir, rundir.METRICS), statusview.keep_record)
        return statusview.RunFiles(
            records=records, record_offsets=offsets,
            events=self.records(host, host.join(run_dir, rundir.EVENTS), statusview.keep_event),
            checkpoints=statusview.checkpoint_steps(
                _tolerant(lambda: host.listdir(host.join(run_dir, rundir.CHECKPOINTS)), [])),
            plan=self.plans[run_dir],
            chain_ids=runs.with_chain_links(host, record, [str(j) for j in record.get("job_ids") or []]),
            complete=host.exists(host.join(run_dir, rundir.COMPLETE)))


def _tolerant(read: Callable[[], T], default: T) -> T:
    """``read()``, or ``default`` when the file cannot be read (a folder where a file should be, no
    permission): these files add facts to status, and a damaged one must not hide the jobs' states. A
    lost connection is no OSError and still reaches Reconnect."""
    try:
        return read()
    except OSError:
        return default


def host_key_of(host) -> str:
    return str(getattr(host, "label", "local"))


def _json_object(text: Optional[str]) -> Dict:
    """A JSON object from ``text``, or {} (absent, damaged: status shows less, it does not fail)."""
    import json
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
