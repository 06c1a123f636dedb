"""The embedded LSF cleans up after itself and keeps to its home: a job whose supervisor was killed leaves no
per-node temporary folders in /tmp, and a home holds everything the embedded LSF writes (nothing in the
folder above it), while a folder of other things (``--home /``, ``--home ~``) is refused, never adopted."""
from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Dict

import pytest

from badinput import assert_refused
from lsf_jobs import bjobs_state, job_processes, lsf_environment, run, submitted_id, wait_for

#: Two hosts, one blaunch task on each: both virtual nodes get a temporary folder of the job.
TWO_HOSTS = "#!/bin/bash\n#BSUB -n 2 -R \"span[ptile=1]\"\n#BSUB -o two.%J.out\nblaunch sleep 300\n"


@pytest.mark.parametrize("killed", ["supervisor", "supervisor+watchdog"])
def test_a_killed_supervisor_leaves_no_node_tmp_folders(tmp_path, monkeypatch, killed):
    """SIGKILL to the supervisor of a two-host job: its watchdog ends the job's processes and removes the
    ``<hash>.<id>/vnodeN`` folders the supervisor would have removed (before, they stayed in /tmp for good).
    With the watchdog killed too, the next bjobs does both."""
    from summit_jobs.schedulers.lsf.embedded import state
    env = dict(lsf_environment(tmp_path), SUMMIT_JOBS_LSF_TMP=str(tmp_path / "t"))
    monkeypatch.setenv("SUMMIT_JOBS_LSF_TMP", env["SUMMIT_JOBS_LSF_TMP"])       # for job_tmp_root here
    script = tmp_path / "two.lsf"
    script.write_text(TWO_HOSTS)
    jid = submitted_id(run(["bsub", str(script)], env, cwd=tmp_path).stdout)
    home = Path(env["SUMMIT_JOBS_LSF_HOME"])
    root = state.job_tmp_root(home, jid)
    wait_for(lambda: root.is_dir() and len(list(root.iterdir())) == 2 and len(job_processes(jid, str(home))) >= 3
             and (state.load_job(home, int(jid)) or {}).get("watchdog_pid"), 60,
             "both hosts' temporary folders, the blaunch tasks and the watchdog")
    record = state.load_job(home, int(jid))
    pids = [record["supervisor_pid"]] + ([record["watchdog_pid"]] if killed == "supervisor+watchdog" else [])
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    if killed == "supervisor+watchdog":
        wait_for(lambda: not any(state.pid_alive(p) for p in pids), 10, "the supervisor and watchdog to die")
        with state.locked(home):                         # past the 5 s bjobs gives a supervisor to start
            state.save_job(home, dict(state.load_job(home, int(jid)), submit_time=record["submit_time"] - 60))
        res = run(["bjobs", "-a", jid], env)             # bjobs finds the lost job (state.reap_lost)
        assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    wait_for(lambda: not root.exists(), 30, f"the job's temporary folders {root} to be removed")
    assert not list(root.parent.iterdir()), list(root.parent.iterdir())
    wait_for(lambda: not job_processes(jid, str(home)), 15, f"the processes of job {jid} to end")
    row = bjobs_state(jid, env)
    assert row["STAT"] == "EXIT" and state.LOST in row["EXIT_REASON"], row


@pytest.fixture
def user_env(tmp_path) -> Dict[str, str]:
    """A user's environment with no embedded LSF chosen (no SUMMIT_JOBS_LSF_HOME)."""
    env = lsf_environment(tmp_path)
    env.pop("SUMMIT_JOBS_LSF_HOME")
    return env


def lsf_env_cli(home: Path, env: Dict[str, str]):
    return run([sys.executable, "-m", "summit_jobs", "lsf", "env", "--json", "--home", str(home)], env)


def test_a_folder_of_other_things_is_refused_as_a_home(tmp_path, user_env):
    """``lsf env --home`` and bsub (SUMMIT_JOBS_LSF_HOME) refuse a folder that holds other things, naming it,
    and write nothing into it: before, it was adopted (``--home /`` made ``/jobs``)."""
    mine = tmp_path / "project"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    res = lsf_env_cli(mine, user_env)
    assert_refused(res, [f"--home {mine}", "not an embedded-LSF home", "notes.txt", "new or empty folder"])
    assert res.returncode == 2
    script = tmp_path / "quick.lsf"
    script.write_text("#!/bin/sh\ntrue\n")
    res = run(["bsub", str(script)], dict(user_env, SUMMIT_JOBS_LSF_HOME=str(mine)), cwd=tmp_path)
    assert_refused(res, [str(mine), "not an embedded-LSF home", "Job not submitted."])
    assert res.returncode == 255
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]


def test_a_home_holds_all_it_writes_and_is_taken_again(tmp_path, user_env):
    """An empty folder is taken; a job run in it writes nothing beside it (the last id handed out was kept
    as ``.NAME.last-job-id`` in the parent); the home is taken again, by ``lsf env`` and by bsub, and so
    is a home of an older version (no mark, its files only)."""
    parent = tmp_path / "above"
    home = parent / "lsf"
    home.mkdir(parents=True)
    res = lsf_env_cli(home, user_env)
    assert res.returncode == 0 and json.loads(res.stdout)["home"] == str(home), res.stderr
    env = dict(user_env, SUMMIT_JOBS_LSF_HOME=str(home))
    script = tmp_path / "quick.lsf"
    script.write_text("#!/bin/sh\n#BSUB -o quick.%J.out\ntrue\n")
    jid = submitted_id(run(["bsub", str(script)], env, cwd=tmp_path).stdout)
    wait_for(lambda: bjobs_state(jid, env)["STAT"] == "DONE", 30, f"job {jid} to end")
    assert [p.name for p in parent.iterdir()] == ["lsf"]
    assert (home / "last-job-id").read_text() == jid
    wait_for(lambda: not job_processes(jid, str(home)), 15, f"the processes of job {jid} to end")
    # An older home: its own files, no mark. Taken, and marked.
    from summit_jobs.schedulers.lsf import home as lsf_home
    (home / lsf_home.MARK).unlink()
    (home / ".next_id.tmp4242").write_text("")                  # a killed writer's leftover is the home's too
    res = lsf_env_cli(home, user_env)
    assert res.returncode == 0 and (home / lsf_home.MARK).is_file(), res.stderr
    second = submitted_id(run(["bsub", str(script)], env, cwd=tmp_path).stdout)
    assert int(second) > int(jid)
    wait_for(lambda: bjobs_state(second, env)["STAT"] == "DONE", 30, f"job {second} to end")
    wait_for(lambda: not job_processes(second, str(home)), 15, f"the processes of job {second} to end")
    assert [p.name for p in parent.iterdir()] == ["lsf"]
