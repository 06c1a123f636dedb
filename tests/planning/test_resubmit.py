"""`submit --force` into an existing run: resuming is allowed only under the plan that made its checkpoints."""
from __future__ import annotations

import json

from badinput import assert_refused
from lsf_jobs import cli, wait_state


def _submit(env, template_dir, run_dir, *extra):
    return cli(["submit", "--nodes", "1", "--json", "--template-dir", str(template_dir), "--run-dir", str(run_dir),
                *extra, "--", "--data", "/nowhere"], env, timeout=60)


def test_force_with_another_schedule_is_refused(lsf_env, template_dir, tmp_path):
    run = tmp_path / "run"
    first = _submit(lsf_env, template_dir, run, "--epochs", "2")
    assert first.returncode == 0, first.stderr
    (jid,) = json.loads(first.stdout)["job_ids"]
    wait_state(jid, lsf_env)
    (run / "checkpoints").mkdir()          # the run has trained: its weights follow the 2-epoch schedule
    (run / "checkpoints" / "ckpt-000000010.pt").write_bytes(b"weights")
    refused = _submit(lsf_env, template_dir, run, "--epochs", "5", "--force")
    assert_refused(refused, ["epochs 2 -> 5", str(run)])
    assert json.loads((run / "plan.json").read_text())["epochs"] == 2
    again = _submit(lsf_env, template_dir, run, "--epochs", "2", "--force")
    assert again.returncode == 0, again.stderr


def test_force_without_checkpoints_may_change_the_plan(lsf_env, template_dir, tmp_path):
    run = tmp_path / "run"
    assert _submit(lsf_env, template_dir, run, "--epochs", "2").returncode == 0
    res = _submit(lsf_env, template_dir, run, "--epochs", "5", "--force")
    assert res.returncode == 0, res.stderr
    assert json.loads((run / "plan.json").read_text())["epochs"] == 5
