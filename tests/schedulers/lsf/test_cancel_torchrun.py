"""`summit-jobs cancel` of a torchrun link on the embedded LSF, as a user meets it: the ranks of
docs/examples/user_train.py (the chain contract: bkill's INT and TERM save a checkpoint and exit 0) stop, the
agent between them and the job script ends with one line and the signal's status, not a traceback, status
says the link was cancelled, and no process of the job is left. (The same under Slurm's torchrun:
test_slurm_jobs.py, test_status_and_cancel_of_a_running_slurm_job.)
"""
from __future__ import annotations

import json
import sys

from lsf_jobs import cli, job_processes, wait_for, wait_state
from trainer_utils import REPO


def test_a_cancelled_torchrun_link_ends_quietly_and_status_says_cancelled(tmp_path, lsf_env):
    env = dict(lsf_env, OMP_NUM_THREADS="1", SUMMIT_JOBS_LSF_MINUTE="60", SUMMIT_JOBS_LSF_KILL_GRACE="10")
    run_dir = tmp_path / "run"
    program = REPO / "docs" / "examples" / "user_train.py"
    res = cli(["submit", "--nodes", "1", "--request", "slots", "--launcher", "torchrun", "--run-dir", str(run_dir),
               "--walltime", "30", "--json", "--command",
               f"{sys.executable} {program} --steps 100000 --step-seconds 0.1"], env, timeout=60)
    assert res.returncode == 0, res.stderr
    (jid,) = [str(j) for j in json.loads(res.stdout)["job_ids"]]

    def training():
        rows = json.loads(cli(["status", "--json", str(run_dir)], env, timeout=60).stdout)
        return rows[0] if rows[0]["state"] == "running" and (rows[0]["step"] or 0) >= 2 else None
    wait_for(training, timeout=120, what=f"job {jid} to train two steps")
    res = cli(["cancel", str(run_dir)], env, timeout=60)
    assert res.returncode == 0, res.stderr
    assert wait_state(jid, env, timeout=120)["STAT"] == "EXIT"
    logs = "".join(p.read_text(errors="replace") for p in sorted(run_dir.glob("user_train.*")))
    assert "Traceback" not in logs, logs[-4000:]
    assert "trainer.agent: torchrun stopped by SIG" in logs, logs[-4000:]
    assert sorted(run_dir.glob("checkpoints/ckpt-*.pt")), logs[-4000:]     # the ranks saved on the way out
    (row,) = json.loads(cli(["status", "--json", str(run_dir)], env, timeout=60).stdout)
    assert row["cancelled"] is True and row["last_event"]["text"].startswith("cancelled (exit "), row
    assert "checkpoint at step" in row["last_event"]["text"], row
    wait_for(lambda: not job_processes(jid, env["SUMMIT_JOBS_LSF_HOME"], run_dir), timeout=30,
             what=f"every process of job {jid} to end")
