"""`summit-jobs status` as people use it: a table on a terminal, plain lines in logs, `--watch` redrawn in
place (driven in tmux), and the facts of each row (link, epoch and step, clips/s, ETA, last event) computed
from the files a real chained run of the trainer left on the embedded LSF.

One real run serves the whole file: a 2-link chain of a tiny TSM whose first link the walltime warning
stops (LSF minute of 8 s: the warning comes 16 s after a link starts), the second resuming and usually
finishing. The tmux test watches it while it runs (or a new one, when it has already ended); the other
tests read it once it has ended. Assertions hold however far each link got on a loaded machine.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import termios
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from helpers import slowdown
from lsf_jobs import cli, gated, lsf_environment, run, run_recorded_ended, submitted_id, wait_for
from trainer_utils import REPO, make_dataset

sys.path.insert(0, str(REPO))
from summit_jobs.runs import statusview  # noqa: E402
from trainer import rundir  # noqa: E402

#: A long run name: the terminal table cuts it in the middle with an ellipsis.
LONG_NAME = "status-table-of-a-chained-run-with-a-rather-long-name-0001"
EPOCHS, STEPS_PER_EPOCH = 8, 32          # 128 clips, 2 ranks x 2 clips per step
ESC = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
T0 = 1_700_000_000.0


@dataclass
class Chain:
    env: Dict[str, str]
    run_dir: Path
    ids: List[str]
    plain_watch: subprocess.Popen
    plain_log: Path


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("status-data") / "data", train=128, val=8, frames=4, size=32)


def submit_chain(base: Path, data: Path, name: str = LONG_NAME) -> Chain:
    """``submit --chain 2`` of the real trainer; a plain ``status --watch`` (a pipe, as in a log) follows it
    from the start, for the test of what a log gets."""
    # The LSF minute grows with the machine's measured slowness: the tests below need each link to train
    # through an epoch, and a busy machine trains slower (at load 8, 8-second minutes left one epoch unfinished).
    factor = slowdown()
    env = lsf_environment(base, minute=8.0 * factor)
    env["SUMMIT_JOBS_TEST_SLOWDOWN"] = str(factor)
    env["OMP_NUM_THREADS"] = "1"
    for var in ("COLUMNS", "LINES", "NO_COLOR"):
        env.pop(var, None)
    run_dir = base / name
    res = cli(["submit", "--nodes", "1", "--epochs", str(EPOCHS), "--num-classes", "4", "--clips-per-gpu", "2",
               "--engine", "ddp", "--arch", "resnet18", "--lr", "0.1", "--warmup-epochs", "0",
               "--walltime", "0:03", "--warning-minutes", "1", "--chain", "2", "--job-name", "sv",
               "--run-dir", str(run_dir), "--json", "--", "--data", str(data), "--width", "0.125",
               "--num-segments", "4", "--frame-stride", "2", "--input-size", "32", "--workers", "0",
               "--log-every", "4", "--threads", "1", "--no-test"], env, timeout=120)
    assert res.returncode == 0, res.stderr
    log = base / "plain-watch.log"
    with open(log, "wb") as out:
        watch = subprocess.Popen([sys.executable, "-m", "summit_jobs", "status", "--watch", "--interval", "0.5",
                                  str(run_dir)], env=env, stdout=out, stderr=subprocess.STDOUT)
    return Chain(env, run_dir, json.loads(res.stdout)["job_ids"], watch, log)


def status_json(chain: Chain, *target: str) -> List[Dict]:
    res = cli(["status", "--json", *(target or [str(chain.run_dir)])], chain.env, timeout=60)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def ended(chain: Chain) -> Optional[List[Dict]]:
    rows = status_json(chain)
    return rows if rows and all(r["state"] in statusview.FINISHED + ("unknown",) for r in rows) else None


def finish(chain: Chain) -> None:
    """Kill what is left of the chain and of its plain watch (teardown: a failed test must leave no job)."""
    if chain.plain_watch.poll() is None:
        chain.plain_watch.kill()
        chain.plain_watch.wait()
    if ended(chain) is None:
        cli(["cancel", str(chain.run_dir)], chain.env, timeout=60)


@pytest.fixture(scope="module")
def chain(tmp_path_factory, data):
    c = submit_chain(tmp_path_factory.mktemp("status-run"), data)
    yield c
    finish(c)


@pytest.fixture(scope="module")
def finished(chain) -> Chain:
    wait_for(gated(lambda: run_recorded_ended(chain.run_dir, chain.env), lambda: ended(chain)),
             timeout=240 * float(chain.env["SUMMIT_JOBS_TEST_SLOWDOWN"]),
             what="the chain to end")
    chain.plain_watch.wait(timeout=60)
    return chain


def run_files(run_dir: Path, ids: List[str]) -> statusview.RunFiles:
    """The run's files as lifecycle.RunReader hands them to statusview (read here without a host)."""
    def text(name: str) -> str:
        path = run_dir / name
        return path.read_text() if path.exists() else ""
    return statusview.RunFiles(
        records=rundir.json_records(text(rundir.METRICS), statusview.keep_record),
        events=rundir.json_records(text(rundir.EVENTS), statusview.keep_event),
        checkpoints=statusview.checkpoint_steps(os.listdir(run_dir / rundir.CHECKPOINTS)),
        plan=json.loads(text(rundir.PLAN)), chain_ids=list(ids), complete=(run_dir / rundir.COMPLETE).exists())


def done_rows(ids: List[str], state: str = "done") -> List[Dict]:
    return [{"run": LONG_NAME, "job_id": j, "state": state, "exit_code": 0, "reason": ""} for j in ids]


# -- the watch in a real terminal (tmux) ----------------------------------------------------------------
class Tmux:
    """A tmux server of its own (own socket, no configuration file) with one 160x40 window."""

    def __init__(self, env: Dict[str, str]):
        self.base = ["tmux", "-L", f"sj-status-{os.getpid()}-{uuid.uuid4().hex[:8]}", "-f", "/dev/null"]
        self.env = env
        self.socket = ""

    def __call__(self, *args: str) -> str:
        res = subprocess.run([*self.base, *args], env=self.env, capture_output=True, text=True, timeout=30)
        assert res.returncode == 0, res.stderr
        return res.stdout

    def start(self, command: List[str]) -> None:
        """Run ``command`` in the window; when it ends, a line under it says its exit status (the shell
        then sleeps, so the pane and its screen stay until the server is killed)."""
        import shlex
        self("new-session", "-d", "-s", "w", "-x", "160", "-y", "40",
             f'{shlex.join(command)}; echo "watch ended: $?"; sleep 600')
        self.socket = self("display-message", "-p", "#{socket_path}").strip()

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "w")

    def history(self) -> str:
        """Lines scrolled off the top of the pane (the scrollback)."""
        return self("capture-pane", "-p", "-t", "w", "-S", "-", "-E", "-1") if self.value("history_size") else ""

    def value(self, name: str) -> str:
        return self("display-message", "-p", "-t", "w", f"#{{{name}}}").strip()

    def kill(self) -> None:
        """End the server and remove its socket file (tmux leaves it behind)."""
        subprocess.run([*self.base, "kill-server"], env=self.env, capture_output=True, timeout=30)
        if self.socket:
            Path(self.socket).unlink(missing_ok=True)


def job_lines(screen: str, ids: List[str]) -> Dict[str, str]:
    """The table line of each job (its JOB cell; a waiting link's line names the link before it too)."""
    out = {}
    for line in screen.splitlines():
        cells = cells_of(line)
        if len(cells) > 1 and cells[1] in ids:
            out[cells[1]] = line
    return out


def cells_of(line: str) -> List[str]:
    """A table line's cells (RUN, JOB, LINK, STATE, EPOCH, STEP, CLIPS/S, ETA, LAST EVENT): columns are
    two or more spaces apart, and no cell holds two spaces in a row."""
    return re.split(r"\s{2,}", line.strip())


def test_watch_redraws_in_place_in_tmux_until_the_chain_ends(chain, data, tmp_path):
    if not shutil.which("tmux"):
        pytest.skip("tmux is not installed (apt install tmux; .ci/run installs it)")
    live = chain if ended(chain) is None else submit_chain(tmp_path, data, "watched-in-tmux")
    tmux = Tmux(live.env)
    screens: List[str] = []
    try:
        tmux.start([sys.executable, "-m", "summit_jobs", "status", "--watch", "--interval", "1", str(live.run_dir)])
        deadline = time.time() + 240 * float(live.env["SUMMIT_JOBS_TEST_SLOWDOWN"])
        ended_line = None
        while time.time() < deadline and ended_line is None:
            screen = tmux.screen()
            if not screens or screen != screens[-1]:
                screens.append(screen)
            ended_line = re.search(r"^watch ended: (\d+)$", screen, re.M)
            time.sleep(0.3)
        assert ended_line, "the watch did not end:\n" + screens[-1]
        final, history, rc = screens[-1], tmux.history(), int(ended_line.group(1))
    finally:
        tmux.kill()
        if live is not chain:
            finish(live)
    rows = status_json(live)
    with_rows = [s for s in screens if len(job_lines(s, live.ids)) == 2]
    assert with_rows, "no screen showed both jobs:\n" + "\n----\n".join(screens[-3:])
    first = job_lines(with_rows[0], live.ids)
    assert "1/2" in first[live.ids[0]] and "2/2" in first[live.ids[1]], with_rows[0]
    assert re.search(r"\b(pending|running|done)\b", first[live.ids[0]])
    # The screen changed as the run trained: step counts (of either link) moved on between redraws.
    steps = {(j, cells_of(line)[5]) for s in with_rows for j, line in job_lines(s, live.ids).items()}
    assert len({s for s in steps if re.fullmatch(rf"\d+/{EPOCHS * STEPS_PER_EPOCH}", s[1])}) >= 2, steps
    # Redrawn in place: every screen holds one table, and nothing scrolled into the scrollback.
    for s in screens:
        assert s.count("LAST EVENT") <= 1, s
    assert "LAST EVENT" not in history and live.ids[0] not in history, history
    # The chain ended: the watch drew the final table and ended with it, 0 when every job is DONE.
    assert "all jobs ended" in final and all(r["state"] in final for r in rows), final
    assert rc == (0 if all(r["state"] == "done" for r in rows) else 1), final
    assert "Traceback" not in final


# -- the row facts, from the real run's files -----------------------------------------------------------
def test_rows_of_a_real_chained_run(finished):
    files = run_files(finished.run_dir, finished.ids)
    first, second = finished.ids
    rows = done_rows(finished.ids)
    statusview.add_facts(rows, files)
    total = EPOCHS * STEPS_PER_EPOCH
    assert [(r["link"], r["links"], r["more_links"]) for r in rows] == [(1, 2, False), (2, 2, False)]
    assert all(r["total_steps"] == total and r["epochs"] == EPOCHS and r["eta_s"] is None for r in rows)
    stopped = [e for e in files.events if e["event"] == "stopped" and e["job"] == first]
    one = rows[0]
    if stopped:   # the warning stopped link 1 at a metrics record: the row shows that record and the stop
        assert one["step"] == stopped[-1]["step"] and one["last_event"]["event"] == "stopped"
        assert one["last_event"]["text"] == f"warning signal (USR2): checkpoint at step {one['step']}, stopped"
    train1 = [r for r in statusview.stretches(files)[first] if r["kind"] == "train"]
    assert one["step"] == train1[-1]["step"] and one["epoch"] == train1[-1]["epoch"] + 1
    assert one["clips_per_s"] == round(train1[-1]["clips_per_s"], 2) > 0
    # Link 2 starts where link 1 stopped: every record of its stretch is after link 1's last.
    train2 = [r for r in statusview.stretches(files).get(second, []) if r["kind"] == "train"]
    assert all(r["step"] > one["step"] and r["time"] > train1[-1]["time"] for r in train2)
    if files.complete:   # by link 2, or already by link 1 on an idle machine (link 2 then finds it done)
        last = [r for r in rows if r["step"] is not None][-1]
        assert last["step"] == total and last["last_event"]["text"] == f"training complete at step {total}"
        assert rows[1]["last_event"]["event"] in ("complete", "already_complete")
    # Every trainer start says the run's total, so the ETA is known from the first record on.
    launches = statusview.train_launches(files.events)
    assert launches and [e["total_steps"] for e in launches] == [total] * len(launches)
    # A run written before launch events said total_steps: the first epoch's length times the epochs.
    old = [{k: v for k, v in e.items() if k != "total_steps"} for e in files.events]
    assert statusview.total_steps(statusview.RunFiles(records=files.records, events=old, plan=files.plan)) == total


def test_eta_is_steps_left_over_the_recent_rate(finished):
    """Cut the real files at a record in the middle of a link (the one with the most records), as a look at
    that moment would find them: the running row's ETA is steps left over steps per second of the newest
    records, and it is close to the training time the run then really took (within a factor of 3)."""
    files = run_files(finished.run_dir, finished.ids)
    stretches = statusview.stretches(files)
    job = max(stretches, key=lambda j: len([r for r in stretches[j] if r["kind"] == "train"]))
    train = [r for r in stretches[job] if r["kind"] == "train"]
    assert len(train) >= 4, train
    cut = train[len(train) // 2]["time"]
    seen = statusview.RunFiles(records=[r for r in files.records if r["time"] <= cut],
                               events=[e for e in files.events if e["time"] <= cut], plan=files.plan,
                               checkpoints=[s for s in files.checkpoints if s <= train[len(train) // 2]["step"]],
                               chain_ids=finished.ids)
    rows = [{"run": LONG_NAME, "job_id": job, "state": "running", "exit_code": None, "reason": ""}]
    statusview.add_facts(rows, seen)
    window = [r for r in train if r["time"] <= cut][-statusview.RATE_WINDOW:]
    rate = (window[-1]["step"] - window[0]["step"]) / (window[-1]["time"] - window[0]["time"])
    left = EPOCHS * STEPS_PER_EPOCH - window[-1]["step"]
    assert rows[0]["eta_s"] == pytest.approx(left / rate, abs=0.1)
    if files.complete:
        after = [r for r in stretches[job] if r["time"] > cut]
        spent = (after[-1]["time"] - cut if after else 0.0) + sum(
            s[-1]["time"] - s[0]["time"] for j, s in stretches.items() if s[0]["time"] > cut and len(s) > 1)
        assert spent / 3 <= rows[0]["eta_s"] <= spent * 3, (rows[0]["eta_s"], spent)
    assert statusview.eta_seconds(window[:1], 256) is None      # one record: no rate yet
    for state in ("pending", "done"):                                 # only a job that trains has an ETA
        other = [{"job_id": job, "state": state, "exit_code": 0, "reason": "dep"}]
        statusview.add_facts(other, seen)
        assert other[0]["eta_s"] is None
    assert statusview.event_cell({"state": "pending", "reason": "dep", "last_event": None}, cut) == "waiting: dep"


def test_checkpoint_and_exit_events(finished):
    """An epoch's checkpoint is the job's last event until it does something else; a job that ended with
    no end recorded by the trainer shows its exit code at LSF's finish time."""
    files = run_files(finished.run_dir, finished.ids)
    ends = [(j, r) for j, recs in statusview.stretches(files).items() for r in recs if r["kind"] == "eval"]
    assert ends, "no link finished an epoch"
    job, at = ends[0]                       # the eval record at an epoch's end: its checkpoint follows
    launch = [e for e in files.events if e["event"] == "launch" and e["job"] == job]
    seen = statusview.RunFiles(records=[r for r in files.records if r["time"] <= at["time"]], events=launch,
                               checkpoints=[at["step"]], plan=files.plan, chain_ids=finished.ids)
    row = {"job_id": job, "state": "running", "exit_code": None}
    statusview.add_facts([row], seen)
    assert row["last_event"] == {"event": "checkpoint", "text": f"checkpoint at step {at['step']}",
                                 "time": at["time"]}
    assert statusview.event_cell(row, at["time"] + 75) == f"1m15s ago: checkpoint at step {at['step']}"
    # The job failed with no end recorded by the trainer: its exit code, at LSF's finish time.
    row = {"job_id": job, "state": "failed", "exit_code": 3, "finish_time": "Nov 24 04:02"}
    statusview.add_facts([row], seen)
    assert row["last_event"]["text"] == "ended with exit code 3"
    assert time.localtime(row["last_event"]["time"])[1:5] == (11, 24, 4, 2)
    assert statusview.state_text(row) == "failed 3"


def test_a_chain_until_complete_may_have_more_links_while_its_last_one_is_open():
    rows = [{"job_id": "1", "state": "done", "exit_code": 0}, {"job_id": "2", "state": "running", "exit_code": None}]
    files = statusview.RunFiles(plan={"until_complete": True, "max_links": 20}, chain_ids=["1", "2"])
    statusview.add_facts(rows, files)
    assert [statusview.cells(r, T0)["LINK"] for r in rows] == ["1/2+", "2/2+"]
    rows[1]["state"] = "done"                   # the last link ended without queueing another: the chain ended
    statusview.add_facts(rows, files)
    assert [statusview.cells(r, T0)["LINK"] for r in rows] == ["1/2", "2/2"]
    rows[1]["state"] = "running"
    statusview.add_facts(rows, statusview.RunFiles(plan={"until_complete": True}, chain_ids=["1", "2"],
                                                   complete=True))
    assert not any(r["more_links"] for r in rows)
    blank = {"job_id": "9", "state": "running"}     # a job named by its id, of no run recorded here
    statusview.blank_facts(blank)
    assert statusview.cells(blank, T0)["LINK"] == "-" and blank["more_links"] is False


def test_the_chain_state_is_never_wrong_between_two_looks():
    """A look whose scheduler answer listed links 1-2, both ended, while the run's files (read after) already
    name link 3, which link 2's script queued before it finished: between links, never stopped or ended."""
    plan = {"until_complete": True, "max_links": 20}

    def state(rows, ids, events=(), complete=False):
        rows = [dict(r) for r in rows]
        statusview.add_facts(rows, statusview.RunFiles(plan=plan, chain_ids=list(ids), events=list(events),
                                                       complete=complete))
        assert len({r["chain"] for r in rows}) == 1
        return rows[0]["chain"]

    ended = [{"job_id": "1", "state": "done", "exit_code": 0, "source": "exit-code file"},
             {"job_id": "2", "state": "done", "exit_code": 0, "source": "exit-code file"}]
    assert state(ended, ["1", "2", "3"]) == "between links"
    assert state(ended[:1] + [dict(ended[1], state="running", exit_code=None)], ["1", "2"]) == "running"
    assert state(ended, ["1", "2"], complete=True) == "complete"
    stop = {"event": "chain_stopped", "job": "2", "reason": "link 2 ended (exit 1) before the warning signal",
            "time": T0}
    assert state(ended, ["1", "2"], [stop]) == "stopped: link 2 ended (exit 1) before the warning signal"
    gone = ended[:1] + [{"job_id": "2", "state": "unknown", "exit_code": None, "source": "none",
                         "reason": "gone from bjobs and no exit-code file"}]
    assert state(gone, ["1", "2"]).startswith("stopped: link 2 (job 2) ended without its script finishing")
    assert state(ended, ["1", "2"]).startswith("stopped: link 2 (job 2) ended with exit code 0 and queued no next")
    plan.pop("until_complete")
    assert state(ended, ["1", "2"]) == "ended"


def test_lsf_times_and_ages():
    now = time.mktime((2026, 1, 3, 12, 0, 0, 0, 0, -1))
    assert statusview.parse_lsf_time("Jan  3 11:58", now) == now - 120
    assert time.localtime(statusview.parse_lsf_time("Dec 31 23:00 L", now)).tm_year == 2025
    assert statusview.parse_lsf_time("-", now) is None and statusview.parse_lsf_time(None, now) is None
    assert [statusview.age(s) for s in (None, 8.4, 245, 3 * 3600 + 660, 2 * 86400 + 4 * 3600)] == \
        ["-", "8s", "4m05s", "3h11m", "2d04h"]


def test_a_log_gets_a_new_set_of_lines_only_for_a_change_the_table_shows():
    base = {"run": "r", "job_id": "5", "state": "running", "exit_code": None, "reason": "", "links": 2, "step": 40,
            "last_event": {"event": "checkpoint", "text": "checkpoint at step 32", "time": T0}}
    same = [dict(base, step=44), dict(base, exit_code=0),   # progress; the exit-code file written before LSF's end
            dict(base, last_event=dict(base["last_event"], time=T0 + 5)), dict(base, eta_s=3.0)]
    moved = [dict(base, state="done", exit_code=0), dict(base, state="failed", exit_code=3), dict(base, links=3),
             dict(base, last_event={"event": "stopped", "text": "stopped", "time": T0}), dict(base, reason="x")]
    assert all(statusview.signature([r]) == statusview.signature([base]) for r in same)
    assert all(statusview.signature([r]) != statusview.signature([base]) for r in moved)


def test_the_table_fits_the_width_and_cuts_the_run_name_in_the_middle(finished):
    files = run_files(finished.run_dir, finished.ids)
    rows = done_rows(finished.ids)
    statusview.add_facts(rows, files)
    now = time.time()
    wide = statusview.table(rows, now)
    assert LONG_NAME in wide[1] and "/2" in wide[1]
    for width in (100, 72, 50):
        lines = statusview.table(rows, now, width, colour=True)
        assert all(len(ESC.sub("", line)) <= width for line in lines), (width, lines)
        name = cells_of(lines[1])[0]
        assert LONG_NAME not in "\n".join(lines) and "\u2026" in name, lines
        head, tail = name.split("\u2026")
        assert LONG_NAME.startswith(head) and LONG_NAME.endswith(tail) and tail, name   # both ends kept
    short = [dict(r, run="r1") for r in rows]            # a short name keeps its width; the event gets the room
    lines = statusview.table(short, now, 80)
    assert lines[1].startswith(f"r1   {finished.ids[0]}  ") and max(len(line) for line in lines[1:3]) == 80, lines
    assert all(re.search(r"\d+s ago: ", line) for line in lines[1:3]), lines   # the age is never cut off
    coloured = statusview.table(rows, now, 100, colour=True)[1]
    assert "\x1b[32mdone\x1b[0m" in coloured and ESC.sub("", coloured) == statusview.table(rows, now, 100)[1]


# -- the command on a terminal and through a pipe -------------------------------------------------------
def in_pty(args: List[str], env: Dict[str, str], columns: int = 100, rows: int = 30,
           timeout: float = 60) -> tuple:
    """``python -m summit_jobs ARGS`` with stdout on a pseudo-terminal of the given size; (rc, output)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "summit_jobs", *args], env=env, stdin=subprocess.DEVNULL,
                            stdout=slave, stderr=subprocess.PIPE)
    os.close(slave)
    out = b""
    deadline = time.time() + timeout
    try:
        while time.time() < deadline:
            if select.select([master], [], [], 0.2)[0]:
                try:
                    chunk = os.read(master, 65536)
                except OSError as exc:       # EIO: the command closed its end
                    if exc.errno != errno.EIO:
                        raise
                    break
                if not chunk:
                    break
                out += chunk
            elif proc.poll() is not None:
                break
        rc = proc.wait(timeout=max(1.0, deadline - time.time()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    err = proc.stderr.read().decode()
    proc.stderr.close()
    return rc, out.decode(errors="replace"), err


def test_status_on_a_terminal_prints_a_fitted_table(finished):
    rc, out, err = in_pty(["status", str(finished.run_dir)], finished.env, columns=100)
    assert rc == 0, err
    text = ESC.sub("", out).replace("\r\n", "\n")
    lines = text.splitlines()
    assert lines[0].split() == ["RUN", "JOB", "LINK", "STATE", "EPOCH", "STEP", "CLIPS/S", "ETA", "LAST", "EVENT"]
    body = job_lines(text, finished.ids)
    assert "1/2" in body[finished.ids[0]] and "2/2" in body[finished.ids[1]]
    assert all(len(line) <= 99 for line in lines) and "\u2026" in lines[1] and LONG_NAME not in text
    assert re.search(rf"\d+/{EPOCHS}\s+\d+/{EPOCHS * STEPS_PER_EPOCH}", body[finished.ids[0]])
    assert "\x1b[32m" in out                       # coloured state
    rc, out, _ = in_pty(["status", str(finished.run_dir)], dict(finished.env, NO_COLOR="1"), columns=100)
    assert rc == 0 and "\x1b" not in out


def test_status_through_a_pipe_is_plain_lines_with_the_same_facts(finished):
    res = cli(["status", str(finished.run_dir)], finished.env, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "\x1b" not in res.stdout and "\r" not in res.stdout
    body = job_lines(res.stdout, finished.ids)
    assert LONG_NAME in body[finished.ids[0]] and "1/2" in body[finished.ids[0]] and "2/2" in body[finished.ids[1]]
    rows = status_json(finished)
    for row in rows:
        line = body[row["job_id"]]
        assert row["state"] in line and row["last_event"]["text"] in line
        assert f"{row['step']}/{row['total_steps']}" in line if row["step"] is not None else True
    # --json keeps every key it had, and says the new facts.
    for key in ("run", "job_id", "host", "run_dir", "exit_code", "source", "cancelled", "native_state", "state",
                "reason", "link", "links", "more_links", "epoch", "epochs", "step", "total_steps", "clips_per_s",
                "eta_s", "last_event", "finish_time"):
        assert all(key in r for r in rows), key


def test_plain_watch_prints_a_set_of_lines_per_change_not_per_look(finished):
    """The watch that followed the run through a pipe since its submission: no escape codes, the table once,
    then one line for each change of a job's state or last event (it looked every 0.5 s for half a minute),
    never the table again."""
    assert finished.plain_watch.returncode in (0, 1)
    log = finished.plain_log.read_text()
    assert "\x1b" not in log and "\r" not in log and "Traceback" not in log
    assert re.match(r"^\d\d:\d\d:\d\d\n", log) and log.count("LAST EVENT") == 1, log
    changes = [line for line in log.splitlines() if re.match(r"^\d\d:\d\d:\d\d job \d+ ", line)]
    assert 1 <= len(changes) <= 30, log
    by_job: Dict[str, List[str]] = {}
    for line in changes:
        jid = line.split()[2]
        assert jid in finished.ids, line
        by_job.setdefault(jid, []).append(re.sub(r"\S+ ago: ", "", line.split(" ", 1)[1]))
    for jid, seen in by_job.items():
        assert all(a != b for a, b in zip(seen, seen[1:])), (jid, seen)
    assert "done" in by_job[finished.ids[-1]][-1], log


def test_ctrl_c_ends_a_watch_on_a_terminal_quietly(tmp_path):
    env = lsf_environment(tmp_path)
    env.pop("COLUMNS", None)
    jid = submitted_id(run(["bsub", "-o", "/dev/null", "sleep", "30"], env, cwd=tmp_path).stdout)
    master, slave = os.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "summit_jobs", "status", "--watch", "--interval", "0.3", jid],
                            env=env, stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.PIPE,
                            start_new_session=True)
    os.close(slave)
    try:
        seen = b""
        deadline = time.time() + 30
        while jid.encode() not in seen and time.time() < deadline:
            if select.select([master], [], [], 0.2)[0]:
                seen += os.read(master, 65536)
        assert jid.encode() in seen, seen
        os.killpg(proc.pid, signal.SIGINT)
        # A terminal keeps reading: the watch's redraws and its last line must not block on a full pty.
        deadline = time.time() + 20
        while proc.poll() is None and time.time() < deadline:
            if select.select([master], [], [], 0.1)[0]:
                try:
                    seen += os.read(master, 65536)
                except OSError:  # the watch closed its end
                    break
        rc = proc.wait(timeout=max(1.0, deadline - time.time()))
        err = proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
        proc.stderr.close()
        run(["bkill", jid], env)
    assert rc == 130 and "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert b"running" in seen or b"pending" in seen


# -- damaged run files: status shows less, never fails ----------------------------------------------------
GOOD_EVENTS = [{"event": "launch", "job": "7", "time": T0, "mode": "train", "step": 0, "total_steps": 64,
                "options": {"epochs": 4, "max_steps": 0}},
               {"event": "stopped", "job": "7", "time": T0 + 9, "step": 8, "reason": "signal SIGUSR2"}]
GOOD_METRICS = [{"kind": "train", "step": s, "epoch": 0, "time": T0 + s, "clips_per_s": 50.0} for s in (4, 8)]


def _lines(records) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


#: (file, what it holds instead of its good content): a torn or foreign line, values of the wrong type,
#: NaN and Infinity (JSON allows them), a folder where a file should be, a file where the folder should be.
DAMAGED = [
    ("metrics.jsonl", b"\x00\xff garbage\n{\"kind\": \"train\", \"step\": 4"),
    ("metrics.jsonl", _lines([{"kind": "train", "step": "4", "epoch": "zero", "time": "now", "clips_per_s": "x"}])),
    ("metrics.jsonl", b'{"kind": "train", "step": 4, "epoch": true, "time": NaN, "clips_per_s": Infinity}\n'),
    ("metrics.jsonl", _lines([{"kind": "train", "step": 4, "epoch": 0, "time": T0 + 4, "clips_per_s": [1]}])),
    ("metrics.jsonl", None),
    ("events.jsonl", _lines([{"event": "launch", "job": 7, "time": "yesterday", "options": [1],
                              "total_steps": "many"}])),
    ("events.jsonl", _lines([{"event": "launch", "job": "7", "time": T0, "options": {"epochs": "4",
                                                                                    "max_steps": True},
                              "total_steps": True}, {"event": "stopped", "job": "7", "time": 1e308,
                                                     "reason": ["x"]}])),
    ("events.jsonl", b'{"event": "complete", "job": "7", "time": -Infinity}\n[1, 2]\n"text"\n'),
    ("events.jsonl", None),
    ("plan.json", b"[1, 2, 3]"),
    ("plan.json", b"{not json"),
    ("chain.jobs", b"0\nabc\n-5\n99999999999999\n"),
    ("checkpoints", b"a file, not a folder"),
]


@pytest.mark.parametrize("name,content", DAMAGED, ids=[f"{n}-{i}" for i, (n, _) in enumerate(DAMAGED)])
def test_damaged_run_files_leave_status_showing_every_job(tmp_path, name, content):
    env = lsf_environment(tmp_path)
    run_dir = tmp_path / "damaged"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "ckpt-000000008.pt").write_bytes(b"")
    (run_dir / "run.json").write_text(json.dumps({"name": "damaged", "run_dir": str(run_dir), "machine": "local",
                                                  "job_name": "d", "job_ids": ["7"]}))
    (run_dir / "exitcode.7").write_text("0\n")
    (run_dir / "plan.json").write_text(json.dumps({"epochs": 4, "chain": 1}))
    (run_dir / "metrics.jsonl").write_text(_lines(GOOD_METRICS))
    (run_dir / "events.jsonl").write_text(_lines(GOOD_EVENTS))
    path = run_dir / name
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
    if content is None:
        path.mkdir()                               # a folder where the file should be
    else:
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    plain = cli(["status", str(run_dir)], env, timeout=60)
    assert plain.returncode == 0 and "Traceback" not in plain.stderr, plain.stderr
    assert re.search(r"^damaged\s+7\s+1/1\s+done\b", plain.stdout, re.M), plain.stdout
    rows = json.loads(cli(["status", "--json", str(run_dir)], env, timeout=60).stdout)
    assert [(r["job_id"], r["state"], r["link"]) for r in rows] == [("7", "done", 1)]
