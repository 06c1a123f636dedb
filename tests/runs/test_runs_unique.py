"""Runs never collide or vanish: back-to-back submissions of one job name each get a run directory of their
own, and `status` of the recent runs shows every run when one run's scheduler cannot answer.

Real submissions through `summit-jobs submit` to the embedded LSF.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from lsf_jobs import PROGRAM, cli, lsf_environment, wait_state, write_template


def _submit(env, tmp_path: Path, *args: str) -> dict:
    prog = tmp_path / "prog.py"
    if not prog.exists():
        prog.write_text(PROGRAM)
    templates = write_template(tmp_path / "templates", prog)
    res = cli(["submit", "--nodes", "1", "--template-dir", str(templates), "--json", *args], env)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_back_to_back_submissions_of_one_name_get_a_run_directory_each(tmp_path):
    env = dict(lsf_environment(tmp_path), PROG_SLEEP="0")
    runs = tmp_path / "runs"
    answers = [_submit(env, tmp_path, "--job-name", "sweep", "--runs-dir", str(runs)) for _ in range(6)]
    dirs = [a["run_dir"] for a in answers]
    assert len(set(dirs)) == 6, dirs
    assert all(Path(d).parent == runs and Path(d).name.startswith("sweep-") for d in dirs), dirs
    for a in answers:
        (jid,) = a["job_ids"]
        assert wait_state(jid, env, timeout=40)["STAT"] == "DONE"
        record = json.loads((Path(a["run_dir"]) / "run.json").read_text())
        assert record["job_ids"] == [jid]


def test_status_of_the_recent_runs_shows_them_all_when_one_scheduler_cannot_answer(tmp_path):
    base = dict(lsf_environment(tmp_path), PROG_SLEEP="0")
    env_a = dict(base, SUMMIT_JOBS_LSF_HOME=str(tmp_path / "lsf-a"))
    env_b = dict(base, SUMMIT_JOBS_LSF_HOME=str(tmp_path / "lsf-b"))
    (good,) = _submit(env_a, tmp_path, "--job-name", "good", "--run-dir", str(tmp_path / "runs" / "good"))["job_ids"]
    (bad,) = _submit(env_b, tmp_path, "--job-name", "bad", "--run-dir", str(tmp_path / "runs" / "bad"))["job_ids"]
    assert wait_state(good, env_a, timeout=40)["STAT"] == "DONE" and wait_state(bad, env_b, timeout=40)["STAT"] == "DONE"
    home_b = tmp_path / "lsf-b"
    shutil.rmtree(home_b)
    home_b.write_text("not an LSF home any more\n")     # bjobs of that home now fails

    res = cli(["status", "--json"], env_a)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    rows = {r["run"]: r for r in json.loads(res.stdout)}
    assert rows["good"]["state"] == "done", rows
    assert rows["bad"]["state"] == "unknown" and "could not be asked" in rows["bad"]["reason"], rows
    table = cli(["status"], env_a)
    assert table.returncode == 0 and "good" in table.stdout and "could not be asked" in table.stdout, table

    # The one run alone: the scheduler's refusal is the answer, as before.
    alone = cli(["status", str(tmp_path / "runs" / "bad")], env_a)
    assert alone.returncode != 0 and "Traceback" not in alone.stderr, alone.stderr
