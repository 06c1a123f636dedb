"""Faults of the embedded LSF with real processes: a killed supervisor, a deleted state folder,
killed writers' leftovers, an unwritable state folder, and what a job's environment file holds."""
from __future__ import annotations

import json
import os
import signal
import stat
import sys
import textwrap
import time
from pathlib import Path
from typing import Dict, List

import pytest

from lsf_jobs import bjobs_state, run, stretched, submitted_id, wait_for, wait_state

#: A rank that records its pid (and the job's process group) and then sleeps far past any limit.
RANK = r'''
import os, sys, time
folder = sys.argv[1]
rank = os.environ["JSM_NAMESPACE_RANK"]
with open(os.path.join(folder, f"rank.{rank}.tmp"), "w") as fh:
    fh.write(f"{os.getpid()} {os.getpgrp()}\n")
os.replace(os.path.join(folder, f"rank.{rank}.tmp"), os.path.join(folder, f"rank.{rank}"))
while True:
    time.sleep(0.1)
'''


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def job_record(env: Dict[str, str], job_id: str) -> Dict:
    return json.loads((Path(env["SUMMIT_JOBS_LSF_HOME"]) / "jobs" / job_id / "job.json").read_text())


def start_long_job(tmp_path: Path, env: Dict[str, str]) -> tuple:
    """A 4-node job (every virtual node): script -> jsrun -> 4 sleeping ranks; returns (id, pids). Its run limit
    (30 LSF minutes, stretched) outlasts the test on a busy machine too."""
    pids = tmp_path / "pids"
    pids.mkdir()
    (tmp_path / "rank.py").write_text(RANK)
    script = tmp_path / "long.lsf"
    script.write_text(textwrap.dedent(f"""\
        #!/bin/bash
        #BSUB -nnodes 4
        #BSUB -W {stretched(30):.0f}
        #BSUB -o long.%J.out
        echo $$ > {pids}/script
        jsrun -n 4 -r 1 -c 1 {sys.executable} {tmp_path / 'rank.py'} {pids}
        """))
    jid = submitted_id(run(["bsub", str(script)], env, cwd=tmp_path).stdout)
    wait_for(lambda: all((pids / f"rank.{r}").exists() for r in range(4)), 30, "4 ranks to start")
    found = [int((pids / "script").read_text())]
    found += [int((pids / f"rank.{r}").read_text().split()[0]) for r in range(4)]
    return jid, found


def start_checker(tmp_path: Path, env: Dict[str, str], pids: List[int]) -> str:
    """A job that needs every node: when it starts it writes which of ``pids`` are still alive."""
    check = tmp_path / "check.py"
    check.write_text(textwrap.dedent(f"""\
        import os
        pids = {pids!r}
        def alive(pid):
            try:
                with open(f"/proc/{{pid}}/stat") as fh:
                    return fh.read().rsplit(")", 1)[-1].split()[0] not in ("Z", "X")
            except OSError:
                return False
        print("alive at start:", [p for p in pids if alive(p)], flush=True)
        """))
    return submitted_id(run(["bsub", "-nnodes", "4", "-o", "check.%J.out", sys.executable, str(check)], env,
                            cwd=tmp_path).stdout)


@pytest.mark.parametrize("also_kill_watchdog", [False, True], ids=["supervisor", "supervisor+watchdog"])
def test_killed_supervisor_takes_the_whole_job_with_it(tmp_path, lsf_env, also_kill_watchdog):
    """kill -9 of a running job's supervisor ends the script, jsrun and every rank; the nodes go to the
    next job only after that. With the watchdog killed too, bjobs' reconciliation does it."""
    env = dict(lsf_env, SUMMIT_JOBS_LSF_KILL_GRACE="1")
    jid, pids = start_long_job(tmp_path, env)
    pgids = {int((tmp_path / "pids" / f"rank.{r}").read_text().split()[1]) for r in range(4)}
    assert pgids == {pids[0]}                    # the script leads the job's process group
    checker = start_checker(tmp_path, env, pids)
    assert bjobs_state(checker, env)["STAT"] == "PEND"
    record = job_record(env, jid)
    if also_kill_watchdog and record.get("watchdog_pid"):
        os.kill(record["watchdog_pid"], signal.SIGKILL)
    os.kill(record["supervisor_pid"], signal.SIGKILL)
    t0 = time.time()
    if also_kill_watchdog:
        bjobs_state(jid, env)          # the reconciliation runs in bjobs
    wait_for(lambda: not any(alive(p) for p in pids), 10, "every process of the job to end")
    assert time.time() - t0 < stretched(8)
    rec = wait_state(jid, env, timeout=10)
    assert rec["STAT"] == "EXIT" and "supervisor process is gone" in rec["EXIT_REASON"]
    assert wait_state(checker, env, timeout=20)["STAT"] == "DONE"
    out = (tmp_path / f"check.{checker}.out").read_text()
    assert "alive at start: []" in out, out


def test_state_folder_deleted_mid_job_then_supervisor_killed(tmp_path, lsf_env):
    """The watchdog knows the job's process group without the state: the job still ends with its supervisor."""
    import shutil
    env = dict(lsf_env, SUMMIT_JOBS_LSF_KILL_GRACE="1")
    jid, pids = start_long_job(tmp_path, env)
    record = job_record(env, jid)
    shutil.rmtree(env["SUMMIT_JOBS_LSF_HOME"])
    time.sleep(0.5)
    assert alive(record["supervisor_pid"]) and all(alive(p) for p in pids)
    os.kill(record["supervisor_pid"], signal.SIGKILL)
    wait_for(lambda: not any(alive(p) for p in pids), 10, "every process of the job to end")
    # The watchdog leaves once the rest of the group (jsrun) is gone too, a moment after the ranks.
    wait_for(lambda: not alive(record["watchdog_pid"]), 5, "the watchdog to leave")


def test_ids_are_not_reused_after_the_state_folder_is_deleted(tmp_path, lsf_env):
    """Job ids survive the state folder: a new job never gets an old id."""
    env = dict(lsf_env)
    script = tmp_path / "quick.lsf"
    script.write_text("#!/bin/bash\n#BSUB -o q.%J.out\ntrue\n")
    first = int(submitted_id(run(["bsub", str(script)], env, cwd=tmp_path).stdout))
    wait_state(str(first), env)
    home = Path(env["SUMMIT_JOBS_LSF_HOME"])
    import shutil
    shutil.rmtree(home)
    second = int(submitted_id(run(["bsub", str(script)], env, cwd=tmp_path).stdout))
    assert second > first
    wait_state(str(second), env)


@pytest.mark.parametrize("value", ["abc", "-5", "0", "99999999999", "1.5"])
def test_bad_first_id_is_one_clean_line(tmp_path, lsf_env, value):
    env = dict(lsf_env, SUMMIT_JOBS_LSF_FIRST_ID=value)
    script = tmp_path / "quick.lsf"
    script.write_text("#!/bin/bash\ntrue\n")
    res = run(["bsub", str(script)], env, cwd=tmp_path)
    assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr
    assert f"SUMMIT_JOBS_LSF_FIRST_ID={value!r}" in res.stderr and "Job not submitted" in res.stderr


def test_first_id_is_honoured_and_ids_still_grow(tmp_path, lsf_env):
    env = dict(lsf_env, SUMMIT_JOBS_LSF_FIRST_ID="500")
    script = tmp_path / "quick.lsf"
    script.write_text("#!/bin/bash\ntrue\n")
    a = int(submitted_id(run(["bsub", str(script)], env, cwd=tmp_path).stdout))
    b = int(submitted_id(run(["bsub", str(script)], env, cwd=tmp_path).stdout))
    assert (a, b) == (500, 501)


def test_env_file_is_private_and_holds_no_secrets(tmp_path, lsf_env):
    env = dict(lsf_env, MY_API_TOKEN="tok-123", AWS_SECRET_ACCESS_KEY="aws-456", OPENAI_API_KEY="sk-789",
               SSH_AUTH_SOCK="/tmp/agent.sock", DB_PASSWORD="pw", JOB_SETTING="kept",
               WANDB_API_KEY="wandb-1", SUMMIT_JOBS_LSF_PASS_ENV="WANDB_API_KEY")
    script = tmp_path / "env.lsf"
    script.write_text("#!/bin/bash\n#BSUB -o env.%J.out\nenv\n")
    jid = submitted_id(run(["bsub", str(script)], env, cwd=tmp_path).stdout)
    assert wait_state(jid, env)["STAT"] == "DONE"
    path = Path(env["SUMMIT_JOBS_LSF_HOME"]) / "jobs" / jid / "env.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    saved = json.loads(path.read_text())
    out = (tmp_path / f"env.{jid}.out").read_text()
    for secret in ("tok-123", "aws-456", "sk-789", "/tmp/agent.sock"):
        assert secret not in path.read_text() and secret not in out
    assert "DB_PASSWORD" not in saved and "SSH_AUTH_SOCK" not in saved
    for name in ("PATH", "HOME", "SUMMIT_JOBS_LSF_MINUTE", "JOB_SETTING", "WANDB_API_KEY"):
        assert name in saved, name
        assert f"{name}=" in out, name


def test_leftover_temporaries_of_a_killed_writer_are_cleaned(tmp_path, lsf_env):
    home = Path(lsf_env["SUMMIT_JOBS_LSF_HOME"])
    script = tmp_path / "quick.lsf"
    script.write_text("#!/bin/bash\ntrue\n")
    jid = submitted_id(run(["bsub", str(script)], lsf_env, cwd=tmp_path).stdout)
    wait_state(jid, lsf_env)
    leftovers = [home / ".next_id.tmp99999", home / "jobs" / jid / ".job.json.tmp4242",
                 home / "jobs" / jid / ".env.json.tmp777"]
    for p in leftovers:
        p.write_text("half a record")
    jid2 = submitted_id(run(["bsub", str(script)], lsf_env, cwd=tmp_path).stdout)
    assert not [p for p in leftovers if p.exists()]
    assert wait_state(jid2, lsf_env)["STAT"] == "DONE"
    assert bjobs_state(jid, lsf_env)["STAT"] == "DONE"


@pytest.mark.parametrize("command", ["bsub", "bjobs", "bkill"])
def test_unwritable_state_folder_is_one_clean_line(tmp_path, lsf_env, command):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the state folder's parent should be")
    env = dict(lsf_env, SUMMIT_JOBS_LSF_HOME=str(blocker / "lsf"))
    script = tmp_path / "quick.lsf"
    script.write_text("#!/bin/bash\ntrue\n")
    argv = {"bsub": ["bsub", str(script)], "bjobs": ["bjobs", "-a"], "bkill": ["bkill", "1"]}[command]
    res = run(argv, env, cwd=tmp_path)
    assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr
    assert str(blocker) in res.stderr and "Not a directory" in res.stderr


def _no_room() -> None:
    """In the child: every write past 0 bytes fails as on a full disk (EFBIG instead of the SIGXFSZ kill)."""
    import resource
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))


def test_full_disk_is_one_clean_line_and_leaves_nothing_behind(tmp_path, lsf_env):
    import subprocess
    script = tmp_path / "quick.lsf"
    script.write_text("#!/bin/bash\ntrue\n")
    res = subprocess.run(["bsub", str(script)], env=lsf_env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=60, preexec_fn=_no_room)
    assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr
    assert "File too large" in res.stderr and "Job not submitted" in res.stderr
    home = Path(lsf_env["SUMMIT_JOBS_LSF_HOME"])
    assert not [p for p in home.rglob(".*.tmp*")]
    jid = submitted_id(run(["bsub", str(script)], lsf_env, cwd=tmp_path).stdout)
    assert wait_state(jid, lsf_env)["STAT"] == "DONE"


# -- the lifecycle commands on top of the embedded LSF ------------------------------------------------

#: A rank like the trainer: on the kill's INT (bkill's first signal) or TERM it checkpoints and exits 0.
CLEAN_ON_TERM = r'''
import os, signal, sys, time
def on_term(signum, frame):
    os.write(1, f"{signal.Signals(signum).name}: checkpoint saved, exiting 0\n".encode())  # one write a line
    # As the trainer does: the same signal comes again (bkill reaches every process of the job, and jsrun
    # forwards it), and Python restores the default action while it exits, so it must stay ignored.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
signal.signal(signal.SIGINT, on_term)
os.write(1, f"RANK {os.environ.get('JSM_NAMESPACE_RANK')}\n".encode())
deadline = time.time() + float(os.environ.get("PROG_SLEEP", "0"))
while time.time() < deadline:
    time.sleep(0.05)
'''


def submit_run(tmp_path: Path, env: Dict[str, str], program: str, name: str, *extra: str) -> tuple:
    from lsf_jobs import cli, write_template
    import re
    prog = tmp_path / f"{name}.py"
    prog.write_text(program)
    templates = write_template(tmp_path / f"templates-{name}", prog)
    res = cli(["submit", "--nodes", "1", "--template-dir", str(templates), "--runs-dir", str(tmp_path / "runs"),
               "--job-name", name, *extra], env)
    assert res.returncode == 0, res.stderr
    ids = re.search(r"^job ([\d ]+) submitted", res.stdout, re.M).group(1).split()
    run_dir = Path(re.search(r"^run directory: (.+)$", res.stdout, re.M).group(1))
    return ids, run_dir


def test_cancelled_job_is_exit_and_cancelled_even_when_the_trainer_exits_0(tmp_path, lsf_env):
    from lsf_jobs import cli
    # A kill interval long enough that the INT's clean exit reaches the script before any TERM or KILL.
    # Its walltime (10 LSF minutes, stretched) brings no warning before the cancel, on a busy machine too.
    env = dict(lsf_env, PROG_SLEEP="60", SUMMIT_JOBS_LSF_KILL_GRACE="10",
               SUMMIT_JOBS_LSF_MINUTE=f"{stretched(2.0):.2f}")
    ids, run_dir = submit_run(tmp_path, env, CLEAN_ON_TERM, "gentle", "--walltime", "10")
    jid = ids[0]
    out = run_dir / f"gentle.{jid}.out"
    wait_for(lambda: out.exists() and "RANK" in out.read_text(), 30, "the ranks to start")
    res = cli(["cancel", run_dir.name], env)
    assert res.returncode == 0 and f"job {jid}: being killed" in res.stdout, res.stderr
    wait_for(lambda: (run_dir / f"exitcode.{jid}").exists(), 20, "the exit-code file")
    assert wait_state(jid, env)["STAT"] == "EXIT"
    assert "SIGINT: checkpoint saved, exiting 0" in out.read_text()
    assert (run_dir / f"exitcode.{jid}").read_text().strip() == "0", out.read_text()   # the trainer's clean exit
    res = cli(["status", "--json", run_dir.name], env)
    row = json.loads(res.stdout)[0]
    assert row["state"] == "cancelled" and row["cancelled"] is True and row["reason"].startswith("CANCELLED")
    assert row["native_state"] == "EXIT"
    table = cli(["status", run_dir.name], env).stdout
    assert " cancelled " in table and "CANCELLED" in table and " done " not in table
    watch = cli(["status", "--watch", "--interval", "0.2", run_dir.name], env)
    assert watch.returncode == 1 and "cancelled" in watch.stderr
    # Once LSF has forgotten the job, the run record still says it was cancelled.
    forgetful = dict(env, SUMMIT_JOBS_LSF_CLEAN_PERIOD="0.01")
    row = json.loads(cli(["status", "--json", jid], forgetful).stdout)[0]
    assert row["state"] == "cancelled" and row["cancelled"] is True


def test_cancel_never_kills_another_runs_job_that_got_the_same_id(tmp_path, lsf_env):
    """The state folder (and the id high-water mark beside it) deleted: LSF hands an old run's id to a new,
    unrelated job. Cancelling the old run must refuse, and the new job keeps running."""
    from lsf_jobs import cli
    import shutil
    env = dict(lsf_env, PROG_SLEEP="0", SUMMIT_JOBS_LSF_FIRST_ID="300")
    ids, run_dir = submit_run(tmp_path, env, CLEAN_ON_TERM, "old")
    assert wait_state(ids[0], env)["STAT"] == "DONE"
    home = Path(env["SUMMIT_JOBS_LSF_HOME"])
    shutil.rmtree(home)
    for mark in home.parent.glob(f".{home.name}.last-job-id"):
        mark.unlink()
    other = tmp_path / "elsewhere"
    other.mkdir()
    new = submitted_id(run(["bsub", "-J", "old", "-o", "new.%J.out", "sleep", "60"], env, cwd=other).stdout)
    assert new == ids[0]
    res = cli(["cancel", run_dir.name], env)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert f"job(s) {new} were not killed" in res.stderr and str(other) in res.stderr
    time.sleep(stretched(0.5))                     # a kill, had there been one, has landed by now
    assert bjobs_state(new, env)["STAT"] == "RUN"
    run(["bkill", new], env)
