"""CLI commands of the job lifecycle: status, cancel, logs (submit lives in cli.py).

A job is named by its run (directory path or name, as printed by submit) or by
its job id. Runs remember their host, so these commands reach the same login
node (one SSH connection per invocation) without repeating options.

Status asks the run's scheduler for all jobs of a host at once (LSF: one
batched ``-json`` call), then reads each job's ``exitcode.<id>`` file in the
run directory: that file, not the scheduler's job list, says how a job ended. A
job that has dropped out of that list without such a file is shown as unknown,
never as done. A job killed by its owner or an operator (cancel, bkill: LSF's
EXIT with TERM_OWNER or TERM_ADMIN, scancel: Slurm's CANCELLED) is cancelled even when the trainer
checkpointed and exited 0 on the kill's TERM.

Cancel kills only jobs that still belong to the run: LSF must report the run
directory as the job's submission folder (or, where it gives none, the run's
job name). An id LSF has since given to another job is refused, never killed.
"""
from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import sys
import time
from typing import Dict, List, Optional, Tuple

import click

from summit_jobs import schedulers
from summit_jobs.runs import lifecycle
from summit_jobs.cli.submit import State, cli  # noqa: F401
from summit_jobs.cli.types import complete_runs, refuse_empty_argument
from summit_jobs.errors import UserError

def _seconds(ctx: click.Context, param: click.Parameter, value: float) -> float:
    """--interval: a finite, positive number of seconds (nan or a negative would poll without pause)."""
    if value is None:
        return value
    if not math.isfinite(value) or value <= 0:
        raise UserError(f"--interval {value!r} is not a number of seconds: give a positive number such as 10.")
    return value


@cli.command("status")
@click.argument("target", required=False, metavar="[RUN|JOBID]", shell_complete=complete_runs,
                callback=refuse_empty_argument("RUN|JOBID", "a run directory, a run name or a job id, or leave it "
                                               "out for the recent runs"))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per job instead of the table.")
@click.option("--watch", is_flag=True,
              help="Repeat until every job has ended: on a terminal the table is redrawn in place, elsewhere "
                   "a new set of lines is printed when a job's state or last event changes. Exit status 0 "
                   "when all jobs are done, 1 otherwise, 130 on Ctrl-C.")
@click.option("--interval", type=float, default=10.0, show_default=True, metavar="SECONDS", callback=_seconds,
              help="Seconds between checks with --watch (keep it polite on a shared login node).")
@click.pass_obj
def status_cmd(state: State, target: Optional[str], as_json: bool, watch: bool, interval: float) -> None:
    """Show the state of a run's jobs (or of the recent runs).

    \b
    One row per job: run, job id, link of the chain, state, epoch and step
    out of the total, clips/s and ETA from the run's own metrics, and the
    last event (warning signal, checkpoint, resume, end) with its age. For
    your own program (submit --command): the step of its metrics.jsonl
    records, steps/s from records with a "time", and out of --total-steps.
    States are the same words for every scheduler: pending, held, running,
    suspended, done, failed (with its exit code), cancelled, timed out, node
    failure, preempted, unknown; --json also gives the scheduler's own word
    (native_state). A finished job's exit code comes from the exit-code file
    the job script writes in the run directory; a job that the scheduler no
    longer lists and that left no such file is unknown.
    """
    pairs = lifecycle.targets(state, target)
    hosts_ = lifecycle.Hosts(state)
    view = _StatusView(as_json, watch, interval)
    try:
        rows = _watch(state, pairs, hosts_, view, watch, interval)
    except KeyboardInterrupt:
        view.interrupted()
        sys.exit(130)
    finally:
        hosts_.close()
    if watch and not all(r["state"] == lifecycle.DONE for r in rows):
        cancelled = [str(r["job_id"]) for r in rows if r.get("cancelled")]
        if cancelled:
            click.echo(f"summit-jobs: job(s) {', '.join(cancelled)} of this run were cancelled.", err=True)
        sys.exit(1)


def _watch(state: State, pairs, hosts_: lifecycle.Hosts, view: "_StatusView", watch: bool, interval: float):
    """Show the rows (again at each look, with --watch) until every job has ended; the last rows.

    With --watch a dropped SSH connection is opened again (lifecycle.Reconnect:
    a new login, one line each time, up to lifecycle.RECONNECTS times in a row).
    """
    reconnect = lifecycle.Reconnect(hosts_, max(0.2, interval), limit=lifecycle.RECONNECTS if watch else 0)
    reader = lifecycle.RunReader()
    while True:
        rows = reconnect.run(lambda: _rows(state, pairs, hosts_, reader))
        if watch and all(lifecycle.ended(r) for r in rows):
            # A link queues the next one (chain.jobs) before it ends, so a look that read chain.jobs before
            # that line and the scheduler after the end knows too few jobs: look once more, links read after the end.
            again = reconnect.run(lambda: _rows(state, pairs, hosts_, reader))
            if [r["job_id"] for r in again] != [r["job_id"] for r in rows]:
                rows = again
        view.show(rows)
        if not watch or (all(lifecycle.ended(r) for r in rows) and not any(r.get("chain") == "between links" for r in rows)):
            return rows
        time.sleep(max(0.2, interval))


def _rows(state: State, pairs, hosts_: lifecycle.Hosts, reader: lifecycle.RunReader) -> List[Dict[str, object]]:
    """lifecycle.collect's rows with the facts of each run's files added (statusview.add_facts)."""
    from summit_jobs.runs import statusview
    rows = lifecycle.collect(state, pairs, hosts_)
    for row in rows:
        statusview.blank_facts(row)
    done = set()
    for record, _ids in pairs:
        if record is None or str(record["run_dir"]) in done:
            continue
        done.add(str(record["run_dir"]))
        host = hosts_.get(record)
        mine = [r for r in rows if r.get("run_dir") == record["run_dir"] and r.get("host") == host.label]
        if mine:
            statusview.add_facts(mine, reader.files(host, record))
    return rows


class _StatusView:
    """How status shows its rows: JSON; a table fitted to the terminal (redrawn in place with --watch);
    or plain lines for logs and pipes (no escape code, no carriage return), a new set only on a change."""

    def __init__(self, as_json: bool, watch: bool, interval: float):
        self.as_json, self.watch, self.interval = as_json, watch, interval
        term = os.environ.get("TERM", "")
        self.tty = not as_json and _isatty(sys.stdout) and term != "dumb"
        self.colour = self.tty and "NO_COLOR" not in os.environ
        encoding = getattr(sys.stdout, "encoding", None) or "ascii"
        self.ellipsis = "\u2026" if _encodes("\u2026", encoding) else "..."
        self.last: object = None
        self.drawn = False

    def show(self, rows: List[Dict[str, object]]) -> None:
        from summit_jobs.runs import statusview
        now = time.time()
        if self.tty and self.watch:
            self._draw(rows, now)
            return
        if self.tty:
            width = shutil.get_terminal_size().columns - 1
            click.echo("\n".join(statusview.table(rows, now, width, self.colour, self.ellipsis)))
            return
        mark = statusview.signature(rows)
        if mark == self.last:
            return
        if self.as_json:
            self.last = mark
            click.echo(json.dumps(rows, indent=2))
            return
        if self.watch and self.last is not None:
            # a log or a pipe: after the first table, one line for each job whose state or event changed (and
            # each note once), not the whole table again
            click.echo("\n".join(statusview.changes(self.last, rows, now, time.strftime("%H:%M:%S"))))
            self.last = mark
            return
        self.last = mark
        if self.watch:
            click.echo(time.strftime("%H:%M:%S"))
        click.echo("\n".join(statusview.table(rows, now)))

    def _draw(self, rows: List[Dict[str, object]], now: float) -> None:
        """The whole screen again from its top-left corner: each line cleared to its end, the rest of the
        screen below the table cleared, never more lines than the terminal has (no scrolling, so no copies
        of the table pile up in the scrollback)."""
        from summit_jobs.runs import statusview
        size = shutil.get_terminal_size()
        clock = time.strftime("%H:%M:%S")
        head = (f"summit-jobs status: all jobs ended, {clock}" if all(lifecycle.ended(r) for r in rows)
                else f"summit-jobs status: every {self.interval:g} s, {clock}; Ctrl-C to stop")
        lines = [statusview.shorten(head, size.columns - 1, self.ellipsis), ""]
        lines += statusview.table(rows, now, size.columns - 1, self.colour, self.ellipsis)
        room = max(size.lines - 1, 3)
        if len(lines) > room:
            lines = lines[:room - 1] + [f"({len(lines) - room + 1} more lines: a taller terminal shows them)"]
        start = "\x1b[H" if self.drawn else "\x1b[H\x1b[2J"
        sys.stdout.write(start + "".join(line + "\x1b[K\n" for line in lines) + "\x1b[J")
        sys.stdout.flush()
        self.drawn = True

    def interrupted(self) -> None:
        """Ctrl-C: leave the terminal as the table left it, the cursor on a line of its own."""
        if self.tty and self.watch and self.drawn:
            sys.stdout.write("\x1b[K")
            sys.stdout.flush()


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _encodes(text: str, encoding: str) -> bool:
    try:
        text.encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return False
    return True


@cli.command("cancel")
@click.argument("target", metavar="RUN|JOBID", shell_complete=complete_runs,
                callback=refuse_empty_argument("RUN|JOBID", "a run directory, a run name or a job id"))
@click.pass_obj
def cancel_cmd(state: State, target: str) -> None:
    """Kill a run's jobs (all links of a chain) or one job.

    The last links of a chain are killed first, so that killing a running link
    does not release the next one. Jobs that already finished are fine. A whole
    run gets a CANCELLED file first: a link that queues the next one while the
    cancel runs kills it, and a link queued anyway ends when it starts.
    Submitting into the run directory again (--force) removes the file.
    """
    from summit_jobs.runs import records as runs
    pairs = lifecycle.targets(state, target)
    hosts_ = lifecycle.Hosts(state)
    refused: List[str] = []
    refused_in: Optional[Dict] = None       # the run record of a refused job: its scheduler names the way out
    try:
        for record, ids in pairs:
            host = hosts_.get(record)
            whole_run = record is not None and ids == [str(j) for j in record.get("job_ids") or []]
            if whole_run:
                # before the chain's links are read: a link that queues the next one after this kills it, and a
                # link queued all the same ends when it starts (the chain's job script checks the marker)
                _mark_cancelled(host, record)
            seen: List[str] = []
            while True:        # links a dying link queued while this ran are read again, until none is new
                every = runs.with_chain_links(host, record, ids) if whole_run else ids
                todo = [j for j in every if j not in seen]
                if not todo:
                    break
                seen += todo
                mine, skipped = (todo, []) if record is None else _owned(host, record, todo)
                refused += skipped
                refused_in = record if skipped else refused_in
                if mine:
                    _kill(host, record, mine)
    finally:
        hosts_.close()
    if refused:
        scheduler = schedulers.for_record(refused_in)
        raise UserError(f"job(s) {', '.join(refused)} were not killed: {scheduler.label} now gives those ids to "
                        "other jobs, or could not say whose they are (see above). Nothing of another run is "
                        f"touched; kill a job by its id with {scheduler.cancel_command} if you are sure.")


def _mark_cancelled(host, record: Dict) -> None:
    """Write the run's cancel marker (trainer.rundir.CANCELLED); a run directory that cannot take it is said,
    and the jobs are killed all the same."""
    from trainer import rundir
    path = host.join(str(record["run_dir"]), rundir.CANCELLED)
    try:
        host.write_file(path, f"summit-jobs cancel at {time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n", force=True)
    except (OSError, UserError) as exc:
        click.echo(f"summit-jobs: warning: could not write {path} ({exc}); a link the chain queues while its jobs "
                   "are killed may run", err=True)


def _kill(host, record: Optional[Dict], ids: List[str]) -> None:
    """Cancel the jobs, last link first (so a killed link does not release the next), and note it in run.json."""
    from summit_jobs.runs import records as runs
    scheduler = schedulers.for_record(record)
    outcome = scheduler.cancel(host, list(reversed(ids)))
    for jid in ids:
        word = {"terminating": "being killed", "finished": "had already finished",
                "not found": f"is not known to {scheduler.label} any more"}[outcome[jid]]
        click.echo(f"job {jid}: {word}")
    killed = [j for j in ids if outcome[j] == "terminating"]
    if record is not None and killed:
        record["cancelled"] = sorted({*[str(j) for j in record.get("cancelled") or []], *killed}, key=schedulers.id_order)
        try:
            runs.save(host, record)
        except (OSError, UserError) as exc:
            click.echo(f"summit-jobs: warning: could not note the cancellation in the run record: {exc}", err=True)


def _owned(host, record: Dict, ids: List[str]) -> Tuple[List[str], List[str]]:
    """(ids that still belong to the run, ids the scheduler has given to other jobs), after asking it.

    Ids the scheduler no longer knows are left out of both: there is nothing to kill.
    """
    scheduler = schedulers.for_record(record)
    found = scheduler.owners(host, ids)
    mine, others = [], []
    for jid in ids:
        if jid not in found:
            click.echo(f"job {jid}: is not known to {scheduler.label} any more")
            continue
        job = found[jid]
        why = job.error or lifecycle.foreign(host, record, jid, job.name, job.work_dir.strip(), scheduler.label,
                                             job.submit_time)
        if why:
            click.echo(f"job {jid}: NOT killed: {why}", err=True)
            others.append(jid)
        else:
            mine.append(jid)
    return mine, others


@cli.command("logs")
@click.argument("target", metavar="RUN|JOBID", shell_complete=complete_runs,
                callback=refuse_empty_argument("RUN|JOBID", "a run directory, a run name or a job id"))
@click.option("--follow", "-f", is_flag=True,
              help="Keep printing new output until the job (every link of a chain) has ended.")
@click.option("--interval", type=float, default=2.0, show_default=True, metavar="SECONDS", callback=_seconds,
              help="Seconds between reads with --follow.")
@click.pass_obj
def logs_cmd(state: State, target: str, follow: bool, interval: float) -> None:
    """Print a run's job output (the -o and -e files), locally or over SSH.

    Each file is introduced by a '==> FILE <==' line on stderr. With --follow
    it works like `tail -f` and moves on to the next link of a chain.
    """
    pairs = [(r, ids) for r, ids in lifecycle.targets(state, target)]
    if any(r is None for r, _ in pairs):
        raise UserError(f"job {target} belongs to no run recorded here, so its output files are unknown; "
                        "give the run directory or name instead.")
    hosts_ = lifecycle.Hosts(state)
    reconnect = lifecycle.Reconnect(hosts_, max(0.2, interval), limit=lifecycle.RECONNECTS if follow else 0)
    try:
        for record, ids in pairs:
            host = hosts_.get(record)
            for jid in lifecycle.each_link(host, record, ids, reconnect.run):
                files = reconnect.run(lambda: lifecycle.outputs(host, record, jid))  # noqa: B023 - called now
                if follow:
                    _follow(state, hosts_, reconnect, record, jid, files, interval)
                else:
                    _print_outputs(host, files)
    except KeyboardInterrupt:
        sys.exit(130)
    finally:
        hosts_.close()


def _print_outputs(host, files: List[str]) -> None:
    for path in files:
        data = host.read_from(path, 0)
        if data is None:
            continue
        click.echo(f"==> {path} <==", err=True)
        click.echo(data.decode("utf-8", "replace"), nl=False)


def _follow(state: State, hosts_: lifecycle.Hosts, reconnect: lifecycle.Reconnect, record: Dict, jid: str,
            files: List[str], interval: float) -> None:
    """Print the job's new output until it has ended. A dropped connection is opened again (lifecycle.Reconnect)
    and the output goes on from where it was: nothing is printed twice."""
    host = hosts_.get(record)
    offsets = {p: 0 for p in files}
    announced: set = set()
    while True:
        finished = reconnect.run(lambda: _follow_once(state, hosts_, host, record, jid, offsets, announced))
        if finished:
            return
        time.sleep(max(0.1, interval))


def _follow_once(state: State, hosts_: lifecycle.Hosts, host, record: Dict, jid: str, offsets: Dict[str, int],
                 announced: set) -> bool:
    """One round of --follow: print what the files gained; whether the job had ended before they were read."""
    finished = lifecycle.ended(lifecycle.collect(state, [(record, [jid])], hosts_)[0])
    for path in offsets:
        data = host.read_from(path, offsets[path])
        if data:
            if path not in announced:
                click.echo(f"==> {path} <==", err=True)
                announced.add(path)
            offsets[path] += len(data)
            sys.stdout.write(data.decode("utf-8", "replace"))
            sys.stdout.flush()
    return finished


@cli.command("resume")
@click.argument("target", metavar="RUN", shell_complete=complete_runs,
                callback=refuse_empty_argument("RUN", "a run directory or a run name"))
@click.pass_obj
def resume_cmd(state: State, target: str) -> None:
    """Queue a run's job script again: its next job resumes from the newest checkpoint.

    For a chain that stopped before COMPLETE (a failed link, a cancel, the
    --max-links cap: status says why), or a run whose job ended early. The
    run's own job script is submitted as it is (the options it was planned
    with, nothing to repeat); a chain counts --max-links afresh from here. A
    run that is complete, or that has a job still pending or running, is left
    as it is.
    """
    from summit_jobs.runs import records as runs
    from trainer import rundir
    pairs = lifecycle.targets(state, target)
    record, _ids = pairs[0]
    if record is None or len(pairs) != 1:
        raise UserError(f"{target!r} names no run: give the run directory or the run name (status lists them).")
    hosts_ = lifecycle.Hosts(state)
    try:
        host = hosts_.get(record)
        run_dir = str(record["run_dir"])
        if host.exists(host.join(run_dir, rundir.COMPLETE)):
            raise UserError(f"the run in {run_dir} is complete (COMPLETE is there): nothing to resume.")
        rows = lifecycle.collect(state, pairs, hosts_)
        busy = [r for r in rows if not lifecycle.ended(r)]
        if busy:
            raise UserError(f"job {busy[0]['job_id']} of {run_dir} is still {busy[0]['state']}: the run goes on by "
                            f"itself (or stop it first: summit-jobs cancel {shlex.quote(target)}).")
        scheduler = schedulers.for_record(record)
        name = str(record.get("script") or rundir.SCRIPT)
        script = host.read_text(host.join(run_dir, name))
        if script is None:
            raise UserError(f"{run_dir} has no job script {name}: submit the run again with `summit-jobs submit "
                            f"--run-dir {shlex.quote(run_dir)} --force` and its options.")
        runs.restart_chain(host, run_dir)
        job_id, queue = scheduler.submit(host, name, cwd=run_dir, script=script,
                                         submit_mode=str(record.get("submit_mode") or "stdin"))
        record["job_ids"] = [str(j) for j in record.get("job_ids") or []] + [str(job_id)]
        runs.save(host, record)
    finally:
        hosts_.close()
    click.echo(f"job {job_id} submitted to queue {queue} on {host.label}: it resumes {run_dir} from its newest "
               "checkpoint")
    click.echo(f"follow it with: summit-jobs status {shlex.quote(runs.follow_target(record))} --watch")
