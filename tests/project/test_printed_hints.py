"""Every command the tool prints as a hint runs as printed: the hint is cut out of the real output and run
word for word (``summit-jobs`` is this checkout's CLI), never retyped by the test.

- submit's "follow it with: summit-jobs status RUN --watch";
- status's note under a chain that stopped before COMPLETE (here: its --max-links cap), "summit-jobs resume
  RUN", which then trains the run to COMPLETE from its checkpoint, the cap counted afresh;
- report's "check `summit-jobs status RUN`" for a run that wrote no metrics yet;
- status's "check its output with `summit-jobs logs JOB`" for a job that left no exit-code file.

On the embedded LSF, with docs/examples/user_train.py (the chain contract) as the user's program.
"""
from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

from lsf_jobs import cli, newest_step, recorded_state, wait_for, wait_state, warn_job
from trainer_utils import REPO

PROGRAM = REPO / "docs" / "examples" / "user_train.py"
#: Steps of the run: the warning is checked every 5 steps (Chain(every=5)), so a warning that arrives late on a
#: busy machine still stops the first link long before its last step.
STEPS = 30


def run_hint(hint: str, env: Dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    """The printed command, word for word, with ``summit-jobs`` this checkout's CLI."""
    words = shlex.split(hint)
    assert words[0] == "summit-jobs", hint
    return cli(words[1:], env, cwd=cwd, timeout=120)


def hints(text: str, lead: str) -> List[str]:
    """The commands after ``lead`` (up to the end of the line), or in backquotes after it."""
    found = []
    for line in text.splitlines():
        if lead in line:
            rest = line.split(lead, 1)[1]
            quoted = re.search(r"`(summit-jobs [^`]+)`", rest)
            found.append(quoted.group(1) if quoted else rest.strip())
    return found


def test_the_hints_of_a_chain_that_stopped_at_its_cap_run_and_resume_it_to_complete(tmp_path, lsf_env):
    env = dict(lsf_env, OMP_NUM_THREADS="1", SUMMIT_JOBS_LSF_MINUTE="60")
    run_dir = tmp_path / "capped"
    res = cli(["submit", "--nodes", "1", "--request", "slots", "--launcher", "blaunch", "--run-dir", str(run_dir),
               "--walltime", "30", "--warning-minutes", "1", "--until-complete", "--max-links", "1", "--command",
               f"{sys.executable} {PROGRAM} --steps {STEPS} --step-seconds 0.2"], env, cwd=tmp_path, timeout=60)
    assert res.returncode == 0, res.stderr
    (follow,) = hints(res.stdout, "follow it with: ")
    jid = re.search(r"^job (\d+) submitted", res.stdout, re.M).group(1)
    wait_for(lambda: recorded_state(jid, env) not in (None, "PEND") and newest_step(run_dir) >= 0, 120,
             f"job {jid} to start")
    wait_for(lambda: (run_dir / "metrics.jsonl").exists(), 120, f"job {jid} to train a step")
    warn_job(jid, env)
    wait_state(jid, env, timeout=120)
    watched = run_hint(follow, env, tmp_path)
    assert watched.returncode == 0 and jid in watched.stdout, (follow, watched.stdout, watched.stderr)
    status = cli(["status", str(run_dir)], env, timeout=60)
    assert "the --max-links cap" in status.stdout, status.stdout
    (resume,) = hints(status.stdout, "counted afresh): ")
    resumed = run_hint(resume, env, tmp_path)
    assert resumed.returncode == 0, (resume, resumed.stderr)
    second = re.search(r"^job (\d+) submitted", resumed.stdout, re.M).group(1)
    assert second != jid
    assert wait_state(second, env, timeout=180)["STAT"] == "DONE"
    assert (run_dir / "COMPLETE").read_text().startswith(f"step {STEPS} "), (run_dir / "events.jsonl").read_text()
    rows = json.loads(cli(["status", "--json", str(run_dir)], env, timeout=60).stdout)
    assert [r["job_id"] for r in rows] == [jid, second] and rows[-1]["chain"] == "complete", rows
    assert rows[-1]["last_event"]["text"].startswith("training complete"), rows[-1]
    again = run_hint(resume, env, tmp_path)
    assert again.returncode == 2 and "is complete" in again.stderr and "Traceback" not in again.stderr


def test_the_hints_for_a_run_without_metrics_and_a_job_without_an_exit_code_file_run(tmp_path, lsf_env):
    run_dir = tmp_path / "quiet"
    res = cli(["submit", "--nodes", "1", "--run-dir", str(run_dir), "--walltime", "10", "--json", "--command",
               "true"], lsf_env, cwd=tmp_path, timeout=60)
    assert res.returncode == 0, res.stderr
    (jid,) = [str(j) for j in json.loads(res.stdout)["job_ids"]]
    wait_state(jid, lsf_env, timeout=60)
    report = cli(["report", str(run_dir)], lsf_env, timeout=60)
    assert report.returncode != 0 and "Traceback" not in report.stderr
    (check,) = hints(report.stderr, "check ")
    assert run_hint(check, lsf_env, tmp_path).returncode == 0, check
    (run_dir / f"exitcode.{jid}").unlink()          # as a job killed before its script's end leaves it
    forgetful = dict(lsf_env, SUMMIT_JOBS_LSF_CLEAN_PERIOD="0.01")    # LSF no longer lists the finished job
    rows = cli(["status", str(run_dir)], forgetful, timeout=60)
    (logs,) = hints(rows.stdout, "check its output with ")
    shown = run_hint(logs, forgetful, tmp_path)
    assert shown.returncode == 0 and "summit-jobs: training step ended with exit code 0" in shown.stdout, \
        (logs, shown.stdout, shown.stderr)
