"""The embedded LSF cleans up after itself: a job whose supervisor was killed leaves no per-node temporary
folders in /tmp."""
from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from conftest_lsf import (bjobs_state, job_processes, lsf_environment, run, submitted_id, wait_for)

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
