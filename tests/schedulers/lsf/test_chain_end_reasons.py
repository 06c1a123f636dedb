"""A chain's stop names how the scheduler ended the link: the run limit's TERMINATE (exit 143 after SIGTERM) is
never reported as a cancel.

A real chain on the embedded LSF whose program ignores the warning signal: LSF's run limit ends its first
link with the TERMINATE sequence; the job script cannot tell that TERM from a bkill's, so status adds LSF's
own end reason (TERM_RUNLIMIT).
"""
from __future__ import annotations

import json
import sys

from lsf_jobs import cli, lsf_environment, wait_for, wait_state

#: A program that ignores USR2 (the warning) and runs past the run limit.
STUBBORN = "import signal, time; signal.signal(signal.SIGUSR2, signal.SIG_IGN); time.sleep(600)"


def test_a_link_ended_by_the_run_limit_is_said_to_be_so(tmp_path, stretch):
    # The program must have set its handler before the warning comes, one LSF minute in: the minute is a
    # quiet machine's 2 seconds stretched by the machine's measured slowdown.
    env = lsf_environment(tmp_path, minute=stretch(2.0))
    run_dir = tmp_path / "run"
    res = cli(["submit", "--nodes", "1", "--run-dir", str(run_dir), "--json", "--until-complete", "--walltime", "2",
               "--command", f"{sys.executable} -c '{STUBBORN}'"], env)
    assert res.returncode == 0, res.stderr
    (jid,) = json.loads(res.stdout)["job_ids"]
    record = wait_state(jid, env, timeout=60)
    assert record["STAT"] == "EXIT", record
    wait_for(lambda: (run_dir / f"exitcode.{jid}").exists(), 30, "the job script's exit-code file")
    rows = json.loads(cli(["status", "--json", str(run_dir)], env).stdout)
    assert [r["job_id"] for r in rows] == [jid], rows
    stop = rows[0]["chain_stopped"]
    assert stop and "cancelled" not in stop and "run limit" in stop and "TERM_RUNLIMIT" in stop, rows[0]
    table = cli(["status", str(run_dir)], env)
    assert "TERM_RUNLIMIT" in table.stdout, table.stdout
