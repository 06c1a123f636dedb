"""Status never shows another run's job as the run's own: a scheduler that lost its state hands the run's ids
to new jobs, and status, status --watch and cancel of the old run must see that.

The embedded LSF is the scheduler: a home with a numbering of its own (SUMMIT_JOBS_LSF_FIRST_ID) that is
wiped between two runs is a controller restarted without its state, and hands out the same ids again.
Run alpha is a chain of 2 links: the first is killed while it runs (its script writes its exit-code file),
the second while it pends (it never ran: its link is lost). Run beta, submitted after the wipe, gets both
ids and ends DONE with exit 0.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from summit_jobs.schedulers.lsf.embedded import state
from lsf_jobs import PROGRAM, cli, job_processes, lsf_environment, run, wait_for, wait_state, write_template


def _submit(env, tmp_path: Path, name: str, *args: str) -> list:
    prog = tmp_path / "prog.py"
    if not prog.exists():
        prog.write_text(PROGRAM)
    templates = write_template(tmp_path / "templates", prog)
    res = cli(["submit", "--nodes", "1", "--template-dir", str(templates), "--run-dir",
               str(tmp_path / "runs" / name), "--job-name", name, "--json", *args], env)
    assert res.returncode == 0, res.stderr
    return [str(j) for j in json.loads(res.stdout)["job_ids"]]


def test_ids_a_wiped_scheduler_gave_to_another_run_are_never_shown_as_this_runs(tmp_path):
    env = dict(lsf_environment(tmp_path), SUMMIT_JOBS_LSF_FIRST_ID="700", PROG_SLEEP="300")
    alpha = _submit(env, tmp_path, "alpha", "--chain", "2")
    assert alpha == ["700", "701"]
    out = tmp_path / "runs" / "alpha" / "alpha.700.out"
    try:
        wait_for(lambda: out.exists() and "RANK" in out.read_text(), 60, "alpha's first link to start")
    except AssertionError as late:       # what LSF and the job said, for a start that never came
        shown = run(["bjobs", "-l", "700"], env)
        logs = {p.name: p.read_text(errors="replace")[-2000:] for p in out.parent.glob("alpha.700.*")}
        raise AssertionError(f"{late}\nbjobs -l 700: {shown.stdout}{shown.stderr}\nlogs: {logs}") from None
    assert run(["bkill", "701"], env).returncode == 0       # pending: it never runs
    assert run(["bkill", "700"], env).returncode == 0
    for jid in alpha:
        assert wait_state(jid, env, timeout=40)["STAT"] == "EXIT"
    assert not (tmp_path / "runs" / "alpha" / "exitcode.701").exists()
    for jid in alpha:        # nothing of alpha's jobs is left to see its home go
        wait_for(lambda j=jid: not job_processes(j, env["SUMMIT_JOBS_LSF_HOME"]), 30,
                 f"every process of job {jid} to end")

    home = Path(env["SUMMIT_JOBS_LSF_HOME"])
    shutil.rmtree(home)                                     # the controller's state is gone, its marks too
    state.high_water_path(home).unlink(missing_ok=True)
    beta = _submit(env | {"PROG_SLEEP": "0"}, tmp_path, "beta", "--chain", "2")
    assert beta == alpha
    for jid in beta:
        assert wait_state(jid, env, timeout=40)["STAT"] == "DONE"

    res = cli(["status", "--json", str(tmp_path / "runs" / "alpha")], env)
    assert res.returncode == 0, res.stderr
    rows = {r["job_id"]: r for r in json.loads(res.stdout)}
    assert set(rows) == {"700", "701"}, rows
    lost = rows["701"]
    assert (lost["state"], lost["exit_code"], lost["lost"]) == ("unknown", None, True), lost
    assert "job 701 is now another job; this run's link was lost" in lost["reason"], lost
    assert "beta" in lost["reason"] and "runs/beta" in lost["reason"], lost
    killed = rows["700"]     # its own exit-code file tells how alpha's link ended, never beta's DONE
    assert killed["lost"] and killed["state"] == "failed" and killed["exit_code"] != 0, killed

    table = cli(["status", str(tmp_path / "runs" / "alpha")], env)
    assert "job 701 is now another job" in table.stdout + table.stderr, table.stdout
    watch = cli(["status", "--watch", "--interval", "0.2", str(tmp_path / "runs" / "alpha")], env)
    assert watch.returncode == 1, watch.stdout + watch.stderr

    res = cli(["cancel", str(tmp_path / "runs" / "alpha")], env)
    assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr
    assert "LSF's job 701 (beta) was submitted from" in res.stderr and "NOT killed" in res.stderr, res.stderr

    for jid in beta:
        wait_for(lambda j=jid: not job_processes(j, env["SUMMIT_JOBS_LSF_HOME"]), 30,
                 f"every process of job {jid} to end")
    rows = json.loads(cli(["status", "--json", str(tmp_path / "runs" / "beta")], env).stdout)
    assert [(r["job_id"], r["state"], r["lost"]) for r in rows] == [("700", "done", False), ("701", "done", False)]
