"""An exit-code file that exists but holds no number is reported as such, with what it holds (shortened),
not as a missing file: on the `local` profile (embedded LSF, real job script, real run directory)."""
from __future__ import annotations

import json
import re
import time

from lsf_jobs import cli, run, wait_state


def _finished_run(env, template_dir, runs_dir):
    """A job submitted, run to its end by the embedded LSF; (job id, run directory)."""
    res = cli(["submit", "--nodes", "1", "--template-dir", str(template_dir), "--runs-dir", str(runs_dir),
               "--job-name", "garbage"], env)
    assert res.returncode == 0, res.stderr
    jid = re.search(r"^job (\d+) submitted", res.stdout, re.M).group(1)
    run_dir = re.search(r"^run directory: (.+)$", res.stdout, re.M).group(1)
    assert wait_state(jid, env)["STAT"] == "DONE"
    return jid, run_dir


def test_garbage_in_the_exit_code_file_is_named_not_called_missing(tmp_path, lsf_env, template_dir):
    jid, run_dir = _finished_run(lsf_env, template_dir, tmp_path / "runs")
    forgetful = dict(lsf_env, SUMMIT_JOBS_LSF_CLEAN_PERIOD="0.01")   # LSF no longer knows the job
    time.sleep(0.1)
    assert "is not found" in run(["bjobs", jid], forgetful).stderr
    exit_file = f"{run_dir}/exitcode.{jid}"
    with open(f"{run_dir}/metrics.jsonl", "w") as f:    # one step, as any program may log it, for `report`
        f.write(json.dumps({"kind": "train", "step": 1, "loss": 1.0, "time": time.time()}) + "\n")
    cases = {"ok\x1b[31m" + "x" * 80: "holds garbage, not an exit code: 'ok\\x1b[31m" + "x" * 33 + "...'",
             "  \n": "is empty"}
    for text, words in cases.items():
        with open(exit_file, "w") as f:
            f.write(text)
        res = cli(["status", "--json", jid], forgetful)
        assert res.returncode == 0, res.stderr
        row = json.loads(res.stdout)[0]
        assert row["state"] == "unknown" and row["exit_code"] is None
        assert f"its exit-code file exitcode.{jid} {words}" in row["reason"], row["reason"]
        assert "no exit-code file" not in row["reason"]
        res = cli(["report", "--json", "--quiet", "--out", str(tmp_path / f"report-{len(text)}"), run_dir],
                  forgetful)
        assert res.returncode == 0, res.stderr
        jobs = json.loads(res.stdout)["summary"]["jobs"]
        assert [j["state"] for j in jobs if j["job_id"] == jid] == [f"its exit-code file exitcode.{jid} {words}"]
