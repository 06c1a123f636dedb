"""Site profiles that would run: Summit's modules, queues and read-only file systems; a module that
does not load ends the job with a message instead of starting ranks with another Python."""
from __future__ import annotations

import json

import pytest
import yaml

from helpers import REPO
from lsf_jobs import cli, wait_state
from summit_jobs.planning import render
from summit_jobs.errors import UserError
from summit_jobs.planning.plan import JobOptions, make_plan


def _plan(profile, **kw):
    kw.setdefault("run_dir", "/gpfs/alpine/abc123/scratch/u/run")
    return make_plan(profile, JobOptions(project="ABC123", **kw))


@pytest.mark.parametrize("run_dir", ["/ccs/home/u/runs/r1", "/ccs/proj/abc123/r1", "/ccs/home"])
def test_run_directory_on_a_compute_read_only_file_system_is_refused(summit, run_dir):
    with pytest.raises(UserError, match="cannot write") as err:
        _plan(summit, nodes=2, run_dir=run_dir)
    assert run_dir in str(err.value) and "$MEMBERWORK" in str(err.value)


@pytest.mark.parametrize("run_dir", ["/gpfs/alpine/abc123/scratch/u/r", "/ccs/homework/r"])
def test_other_folders_are_accepted(summit, run_dir):
    assert _plan(summit, nodes=2, run_dir=run_dir).run_dir == run_dir


def test_batch_hm_caps_queued_jobs_at_25(summit):
    assert _plan(summit, nodes=2, queue="batch-hm", chain=25).chain == 25
    with pytest.raises(UserError, match="at most 25 queued jobs"):
        _plan(summit, nodes=2, queue="batch-hm", chain=26)


def test_summit_script_loads_olcf_module_first_and_disables_gpu_hooks(summit):
    script = render.render(_plan(summit, nodes=2))
    module = script.index("module load open-ce/1.10.0-py39-ibm ||")
    assert module < script.index("\nset -u\n")
    assert "--smpiargs=-disable_gpu_hooks" in script
    assert "HOROVOD_GROUPED_ALLREDUCES" not in script


def test_a_module_that_does_not_load_fails_the_job(lsf_env, template_dir, tmp_path):
    """The embedded machine has no `module` command: the job must stop there, exit code file and all."""
    folder = tmp_path / "machines"
    folder.mkdir()
    doc = yaml.safe_load((REPO / "envs" / "local.yaml").read_text())
    doc["name"] = "withmodules"
    doc["environment"]["modules"] = ["pytorch/9.9"]
    (folder / "withmodules.yaml").write_text(yaml.safe_dump(doc))
    env = dict(lsf_env, SUMMIT_JOBS_MACHINES_PATH=str(folder))
    run = tmp_path / "run"
    res = cli(["--machine", "withmodules", "submit", "--nodes", "1", "--json", "--template-dir", str(template_dir),
               "--run-dir", str(run), "--", "--data", "/nowhere"], env, timeout=60)
    assert res.returncode == 0, res.stderr
    (jid,) = json.loads(res.stdout)["job_ids"]
    assert wait_state(jid, env)["STAT"] == "EXIT"
    assert (run / f"exitcode.{jid}").read_text() == "1\n"
    err = "".join(p.read_text() for p in run.glob("*.err"))
    assert "module load pytorch/9.9 failed" in err
    assert not list(run.glob("argv*")) and "starting" not in "".join(p.read_text() for p in run.glob("*.out"))
