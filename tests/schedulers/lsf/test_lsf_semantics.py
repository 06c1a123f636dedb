"""The embedded LSF behaves as IBM LSF does: run limit, bkill's signals, dependency expressions, job ids.

IBM LSF sends SIGUSR2 at a job's run limit (-W) and terminates the job if it is
still running ten minutes later; bkill's TERMINATE action is SIGINT, SIGTERM and
SIGKILL, one JOB_TERMINATE_INTERVAL apart; ``-w`` takes logical expressions of
conditions, and ``-ti`` ends a job whose dependency can never be satisfied.
Each test runs real jobs with scaled LSF minutes (SUMMIT_JOBS_LSF_MINUTE), so
each takes seconds; the programs record the signals they get. An upper bound on how late something comes is
a quiet machine's seconds stretched by the measured slowdown (lsf_jobs.stretched), and so is a grace
that such a bound must stay below (a grace costs nothing: the job ends before it); lower bounds are the
scheduler's own and stay.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

from lsf_jobs import bjobs_state, lsf_environment, run, stretched, submitted_id, wait_for, wait_state
from summit_jobs.schedulers.lsf.embedded import deps

PY = sys.executable

#: Records every USR2/INT/TERM it gets ("NAME time" lines in argv[1]); argv[2] says what it does with them:
#: ignore-all (carries on), ignore-usr2 (default action for INT/TERM), exit0-on-usr2, exit3-on-usr2,
#: save-on-usr2 (writes a checkpoint slowly after the first USR2, then exits 0), none (default actions).
RECORDER = r'''
import os, signal, sys, time
log, mode = sys.argv[1], sys.argv[2]
save_s = float(os.environ.get("SAVE_S", "4"))
stop = []
def record(signum, frame):
    with open(log, "a") as fh:
        fh.write(f"{signal.Signals(signum).name} {time.time():.3f}\n")
    if mode == "exit0-on-usr2" and signum == signal.SIGUSR2:
        sys.exit(0)
    if mode == "exit3-on-usr2" and signum == signal.SIGUSR2:
        sys.exit(3)
    stop.append(signum)
if mode != "none":
    signal.signal(signal.SIGUSR2, record)
if mode in ("ignore-all", "save-on-usr2"):
    signal.signal(signal.SIGINT, record)
    signal.signal(signal.SIGTERM, record)
with open(log, "a") as fh:
    fh.write(f"READY {time.time():.3f}\n")
deadline = time.time() + 60
while time.time() < deadline:
    if mode == "save-on-usr2" and stop:
        with open("ckpt.tmp", "w") as fh:        # a slow save: the run limit's USR2 comes in the middle
            for i in range(int(save_s * 10)):
                fh.write(f"block {i}\n")
                fh.flush()
                time.sleep(0.1)
        os.replace("ckpt.tmp", "ckpt")
        with open(log, "a") as fh:
            fh.write(f"SAVED {time.time():.3f}\n")
        sys.exit(0)
    time.sleep(0.05)
'''


@pytest.fixture
def recorder(tmp_path) -> Path:
    path = tmp_path / "recorder.py"
    path.write_text(RECORDER)
    return path


def env_for(tmp_path: Path, minute: float, **settings: str) -> Dict[str, str]:
    env = lsf_environment(tmp_path, minute=minute)
    for key in ("SUMMIT_JOBS_LSF_KILL_GRACE", "SUMMIT_JOBS_LSF_RUNLIMIT_GRACE"):
        env.pop(key, None)
    env.update(settings)
    return env


def bsub(env: Dict[str, str], cwd: Path, *args: str) -> str:
    res = run(["bsub", *args], env, cwd=cwd)
    assert res.returncode == 0, res.stderr
    return submitted_id(res.stdout)


def record(env: Dict[str, str], jid: str) -> Dict:
    return json.loads((Path(env["SUMMIT_JOBS_LSF_HOME"]) / "jobs" / jid / "job.json").read_text())


def signals(log: Path) -> List[Tuple[str, float]]:
    lines = [line.split() for line in log.read_text().splitlines()] if log.exists() else []
    return [(name, float(t)) for name, t in lines]


def first(events: List[Tuple[str, float]], name: str) -> Optional[float]:
    return next((t for n, t in events if n == name), None)


# -- 1. the run limit: SIGUSR2, a grace of LSF minutes, then the TERMINATE action -----------------------

def test_a_job_that_dies_of_the_run_limits_usr2_ends_at_once_with_140(tmp_path, recorder):
    factor = stretched(1.0)                      # the grace (1 s minutes) stays longer than the bound below
    env = env_for(tmp_path, 1.0, SUMMIT_JOBS_LSF_RUNLIMIT_GRACE=f"{5 * factor:.2f}")
    jid = bsub(env, tmp_path, "-W", "1", PY, str(recorder), str(tmp_path / "log"), "none")
    rec = wait_state(jid, env, timeout=30)
    job = record(env, jid)
    assert rec["STAT"] == "EXIT" and rec["EXIT_CODE"] == "140", rec
    assert rec["EXIT_REASON"].startswith("TERM_RUNLIMIT"), rec
    # at the limit, not after the grace
    assert 0.9 <= job["finish_time"] - job["start_time"] < 4.0 * factor, job


@pytest.mark.parametrize("mode,code,seen", [("ignore-all", "137", ["SIGUSR2", "SIGINT", "SIGTERM"]),
                                            ("ignore-usr2", "130", ["SIGUSR2"])])
def test_a_job_that_ignores_usr2_is_terminated_only_after_the_grace(tmp_path, recorder, mode, code, seen):
    """1 LSF minute = 2 s (time for the program to install its handlers on a loaded machine): USR2 at 2 s;
    the grace of 1 LSF minute passes; then INT, TERM 0.5 s later, KILL 0.5 s after that. The exit code is
    the job's own: 128 + the signal that ended it (IBM reports it so)."""
    env = env_for(tmp_path, 2.0, SUMMIT_JOBS_LSF_RUNLIMIT_GRACE="1", SUMMIT_JOBS_LSF_KILL_GRACE="0.5")
    log = tmp_path / "log"
    jid = bsub(env, tmp_path, "-W", "1", PY, str(recorder), str(log), mode)
    rec = wait_state(jid, env, timeout=30)
    job = record(env, jid)
    assert rec["STAT"] == "EXIT" and rec["EXIT_CODE"] == code, rec
    assert rec["EXIT_REASON"].startswith("TERM_RUNLIMIT"), rec
    events = signals(log)
    assert [n for n, _ in events if n.startswith("SIG")] == seen, events
    usr2 = first(events, "SIGUSR2")
    assert usr2 is not None and 1.9 <= usr2 - job["start_time"] < 2.0 + stretched(1.5), (usr2, job)
    ended = job["finish_time"]
    # The grace counts from the run limit itself (a USR2 sent late by a busy supervisor does not extend it).
    grace_ends = job["start_time"] + job["limit_s"] + 2.0
    assert ended >= grace_ends - 0.01 and job["runlimit_signal_sent"] < grace_ends, (ended, job)
    if mode == "ignore-all":
        gap_int_term = first(events, "SIGTERM") - first(events, "SIGINT")
        assert 0.4 <= gap_int_term < 0.5 + stretched(1.0), events
        assert ended - first(events, "SIGTERM") >= 0.4, (ended, events)
        assert first(events, "SIGINT") >= grace_ends - 0.01, (events, job)


@pytest.mark.parametrize("mode,stat,code", [("exit0-on-usr2", "DONE", ""), ("exit3-on-usr2", "EXIT", "3")])
def test_a_job_that_exits_on_the_run_limits_usr2_ends_as_it_exits(tmp_path, recorder, mode, stat, code):
    """1 LSF minute = 2 s, so the program has its handler in place when the limit's USR2 comes."""
    factor = stretched(1.0)                      # the grace stays longer than the bound below
    env = env_for(tmp_path, 2.0, SUMMIT_JOBS_LSF_RUNLIMIT_GRACE=f"{3 * factor:.2f}")
    jid = bsub(env, tmp_path, "-W", "1", PY, str(recorder), str(tmp_path / "log"), mode)
    rec = wait_state(jid, env, timeout=30)
    job = record(env, jid)
    assert rec["STAT"] == stat and rec["EXIT_CODE"] == code, rec
    assert rec["EXIT_REASON"].startswith("TERM_RUNLIMIT") == (stat == "EXIT"), rec
    # at the limit, long before the grace (6 s on a quiet machine) ends
    assert job["finish_time"] - job["start_time"] < 5.0 * factor, job


def test_the_run_limits_usr2_during_a_checkpoint_save_does_not_lose_it(tmp_path, recorder):
    """-W 2 -wa USR2 -wt 1 with 1 LSF minute = 2 s: the warning at 2 s starts a 4 s save; the run limit's
    USR2 arrives at 4 s in the middle of it; the save finishes (6 s) and the job ends DONE, since the
    TERMINATE action would only come after the grace (3 LSF minutes)."""
    env = env_for(tmp_path, 2.0, SUMMIT_JOBS_LSF_RUNLIMIT_GRACE="3", SUMMIT_JOBS_LSF_KILL_GRACE="0.5",
                  SAVE_S="4")
    log = tmp_path / "log"
    jid = bsub(env, tmp_path, "-W", "2", "-wa", "USR2", "-wt", "1", "-o", "save.%J.out",
               PY, str(recorder), str(log), "save-on-usr2")
    rec = wait_state(jid, env, timeout=40)
    job = record(env, jid)
    events = signals(log)
    assert rec["STAT"] == "DONE", (rec, events, (tmp_path / f"save.{jid}.out").read_text())
    assert [n for n, _ in events if n.startswith("SIG")] == ["SIGUSR2", "SIGUSR2"], events
    assert first(events, "SAVED") > job["runlimit_signal_sent"], (events, job)   # the limit came mid-save
    assert (tmp_path / "ckpt").read_text().count("block") == 40
    assert not (tmp_path / "ckpt.tmp").exists()


# -- 2. bkill: SIGINT, SIGTERM, SIGKILL one JOB_TERMINATE_INTERVAL apart --------------------------------

def test_bkill_sends_int_then_term_then_kill_one_interval_apart(tmp_path, recorder):
    """No SUMMIT_JOBS_LSF_KILL_GRACE: the interval is IBM's 10 s scaled like the minute (6 s -> 1 s)."""
    env = env_for(tmp_path, 6.0)
    log = tmp_path / "log"
    jid = bsub(env, tmp_path, PY, str(recorder), str(log), "ignore-all")
    wait_for(lambda: first(signals(log), "READY"), 20, "the program to start")
    t0 = time.time()
    res = run(["bkill", jid], env)
    assert res.stdout.strip() == f"Job <{jid}> is being terminated", res.stderr
    rec = wait_state(jid, env, timeout=20)
    job = record(env, jid)
    assert rec["STAT"] == "EXIT" and rec["EXIT_CODE"] == "137", rec
    assert rec["EXIT_REASON"].startswith("TERM_OWNER"), rec
    events = [(n, t) for n, t in signals(log) if n.startswith("SIG")]
    assert [n for n, _ in events] == ["SIGINT", "SIGTERM"], events
    late = stretched(1.0)
    assert t0 <= job["kill_requested"] and first(events, "SIGINT") - job["kill_requested"] < late, (events, job)
    # One interval (1 s) apart, not IBM's unscaled 10 s; the lower bounds leave room for a signal handler that
    # runs late, the upper ones for a busy supervisor.
    apart = min(1.0 + stretched(1.5), 9.0)
    assert 0.5 <= first(events, "SIGTERM") - first(events, "SIGINT") < apart, events
    assert 0.5 <= job["finish_time"] - first(events, "SIGTERM") < apart, (job, events)


def test_bkill_of_a_job_that_exits_0_on_int_is_still_exit_by_owner(tmp_path):
    factor = stretched(1.0)                      # the TERM stays later than the bound below
    env = env_for(tmp_path, 2.0, SUMMIT_JOBS_LSF_KILL_GRACE=f"{5 * factor:.2f}")
    prog = tmp_path / "int0.py"
    prog.write_text("import signal, sys, time\nsignal.signal(signal.SIGINT, lambda *a: sys.exit(0))\n"
                    "open('up', 'w').close()\ntime.sleep(60)\n")
    jid = bsub(env, tmp_path, PY, str(prog))
    wait_for(lambda: (tmp_path / "up").exists(), 20, "the program to start")
    t0 = time.time()
    run(["bkill", jid], env)
    rec = wait_state(jid, env, timeout=20)
    assert rec["STAT"] == "EXIT" and rec["EXIT_REASON"].startswith("TERM_OWNER") and rec["EXIT_CODE"] == "", rec
    assert time.time() - t0 < 4.0 * factor              # ended by the INT, long before the TERM (5 s quiet)


# -- 3. dependency expressions --------------------------------------------------------------------------

P, R, D = ("PEND", None), ("RUN", None), ("DONE", 0)


def X(code: Optional[int]) -> Tuple[str, Optional[int]]:
    return ("EXIT", code)


#: (expression, job states by id, verdict: True holds, False not yet, None never).
VERDICTS = [
    ("done(1) || done(2) && done(3)", {1: D, 2: X(1), 3: P}, True),        # && binds tighter than ||
    ("(done(1) || done(2)) && done(3)", {1: D, 2: X(1), 3: P}, False),
    ("(done(1) || done(2)) && done(3)", {1: D, 2: X(1), 3: X(2)}, None),
    ("done(1) || done(2) && done(3)", {1: X(1), 2: X(1), 3: P}, None),
    ("!done(1)", {1: R}, True),
    ("!started(1)", {1: R}, None),
    ("ended(1) && !done(1)", {1: R}, False),
    ("ended(1) && !done(1)", {1: X(2)}, True),
    ("ended(1) && !done(1)", {1: D}, None),
    ("!!done(1)", {1: D}, True),
    ("1", {1: D}, True),
    ("1 && 2", {1: D, 2: X(1)}, None),
    ("exit(1)", {1: X(0)}, True),
    ("exit(1, >0)", {1: X(3)}, True),
    ("exit(1, >0)", {1: X(0)}, None),
    ("exit(1,==3)", {1: X(3)}, True),
    ("exit(1, 3)", {1: X(3)}, True),                                       # no operator means ==
    ("exit(1, 3)", {1: X(4)}, None),
    ("exit(1, >3)", {1: X(3)}, None),
    ("exit(1, >3)", {1: R}, False),
    ("exit(1, <0)", {1: R}, None),                                         # no exit code is below 0
    ("exit(1, !=0)", {1: D}, None),
    ("exit(1) && !exit(1, !=0)", {1: R}, False),                           # exit code 0 is still possible
    ("started(1) && !ended(1)", {1: P}, False),
    ("started(1) && !ended(1)", {1: D}, None),
    ("numdone(1, ==1)", {1: D}, True),
    ("numdone(1, == *)", {1: D}, True),
    ("numdone(1, >= 1)", {1: X(1)}, None),
    ("numended(1, ==1)", {1: X(1)}, True),
    ("numexit(1, >0)", {1: R}, False),
    ("numrun(1, ==1)", {1: R}, True),
    ("numrun(1, ==1)", {1: D}, None),
    ("numpend(1, ==0)", {1: P}, False),
    ("numstart(1, >0)", {1: R}, True),
    ("numhold(1, >0)", {1: P}, None),                                      # nothing is ever held here
    ("done(1) && started(2)", {1: D}, None),                               # job 2 is gone
]


@pytest.mark.parametrize("text,jobs,verdict", VERDICTS, ids=[f"{t} {j}" for t, j, _ in VERDICTS])
def test_dependency_expressions_evaluate_as_in_lsf(text, jobs, verdict):
    assert deps.evaluate(text, jobs.get) is verdict


@pytest.mark.parametrize("text,words", [
    ("done(1", "expected ')'"), ("done(1) &&", "the end"), ("done(1) done(2)", "join conditions"),
    ("exit(1, !3)", "exit code"), ("numdone(1, 1)", "needs an operator"), ("foo(1)", "unknown condition"),
    ("done(abc)", "job names"), ('"a" || 1', "job names"), ("post_done(1)", "not supported"),
    ("1[2]", "array"), ("", "empty"), ("()", "expected a condition"), ("done(1))", "unexpected ')'"),
])
def test_dependency_expressions_that_cannot_be_read_say_why(text, words):
    with pytest.raises(deps.DependencyError, match=words.replace("(", r"\(").replace(")", r"\)")):
        deps.parse(text)


def test_ti_ends_an_orphan_at_once_while_exit_codes_and_not_decide(tmp_path):
    env = env_for(tmp_path, 2.0, SUMMIT_JOBS_LSF_KILL_GRACE="1")
    go = tmp_path / "go"                                     # the parent runs until the test releases it
    parent = bsub(env, tmp_path, "-o", "parent.%J.out", "/bin/sh", "-c",
                  f"while [ ! -e '{go}' ]; do sleep 0.05; done; exit 3")
    orphan = bsub(env, tmp_path, "-w", f"done({parent})", "-ti", "-o", "orphan.%J.out", "/bin/echo", "ran")
    waiting = bsub(env, tmp_path, "-w", f"done({parent})", "-o", "waiting.%J.out", "/bin/echo", "ran")
    code3 = bsub(env, tmp_path, "-w", f"exit({parent}, ==3)", "-o", "code3.%J.out", "/bin/echo", "ran")
    above3 = bsub(env, tmp_path, "-w", f"exit({parent}, >3)", "-o", "above3.%J.out", "/bin/echo", "ran")
    failed = bsub(env, tmp_path, "-w", f"ended({parent}) && !done({parent})", "-o", "failed.%J.out",
                  "/bin/echo", "ran")
    assert bjobs_state(orphan, env)["STAT"] == "PEND"        # not an orphan while the parent runs
    go.touch()
    assert wait_state(parent, env)["EXIT_CODE"] == "3"
    rec = wait_state(orphan, env, timeout=10)
    assert rec["STAT"] == "EXIT" and rec["EXIT_REASON"].startswith("TERM_ORPHAN_SYSTEM"), rec
    assert record(env, orphan)["start_time"] is None and not (tmp_path / f"orphan.{orphan}.out").exists()
    for jid in (code3, failed):
        assert wait_state(jid, env)["STAT"] == "DONE"
    for jid in (waiting, above3):                            # without -ti: pending, with LSF's reason
        rec = wait_for(lambda j=jid: (lambda r: r if "never satisfied" in r["PEND_REASON"] else None)(
            bjobs_state(j, env)), 10, "the never-satisfied reason")
        assert rec["STAT"] == "PEND"
        run(["bkill", jid], env)


def test_a_refused_bsub_uses_up_no_job_id(tmp_path):
    env = env_for(tmp_path, 2.0, SUMMIT_JOBS_LSF_FIRST_ID="500")
    assert bsub(env, tmp_path, "/bin/true") == "500"
    for args in (["-w", "done(999)"], ["-w", "done(500"], ["-nnodes", "99"], ["-ti"], ["-W", "0"],
                 ["-wa", "USR2"], ["-q", "no queue"]):
        res = run(["bsub", *args, "/bin/true"], env, cwd=tmp_path)
        assert res.returncode != 0 and "Job not submitted" in res.stderr, (args, res.stderr)
    assert bsub(env, tmp_path, "/bin/true") == "501"
    assert sorted(p.name for p in (Path(env["SUMMIT_JOBS_LSF_HOME"]) / "jobs").iterdir()) == ["500", "501"]
