"""submit --data: a manifest at fault is named as such, before anything is queued and inside the job.

Before anything is queued: a manifest readable from the submitting machine is
parsed and checked (dry run too): truncated, malformed, or a partition over
more nodes than it has training shards is refused in one line naming it.

Inside the job: the manifest can change between submission and the job's start
(or be readable only there). The job script checks it alone before the staging
ranks start, and its message names the manifest, not a shard.
"""
from __future__ import annotations

import json
import subprocess

import pytest
from lsf_jobs import bjobs_state, cli, limit, run, stretched, submitted_id, wait_for, wait_state
from test_data_faults import blobs

from badinput import assert_refused

CLI = "summit-jobs: error:"


def _submit(env, template_dir, run_dir, data, *extra):
    return cli(["--machine", "local", "submit", "--nodes", "2", "--template-dir", str(template_dir), "--run-dir",
                str(run_dir), "--job-name", "stg", "--data", str(data), "--json", *extra], env, timeout=60)


def _no_job_queued(env) -> None:
    r = run(["bjobs", "-a", "-o", "jobid", "-json"], env)
    assert json.loads(r.stdout)["RECORDS"] == [], r.stdout


def _one_train_shard(root):
    """A valid manifest with one training shard (and one validation shard)."""
    m = blobs(root, 1, 0.01, seed=3)
    return root / "manifest.json", m


# (case id, how the manifest is spoilt, extra submit options, needles)
CASES = [
    ("truncated", lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]), [],
     ["manifest {m} cannot be read as JSON", "Nothing was submitted", "whole manifest.json"]),
    ("not-a-manifest", lambda p: p.write_text('{"format": "summit-jobs-shards/1", "classes": []}\n'), [],
     ["manifest {m}: missing key 'shards'", "Nothing was submitted"]),
    ("too-few-train-shards", None, ["--nodes", "3"],
     ["manifest {m}: partition over 3 nodes needs at least 3 training shards", "the manifest has 2",
      "--stage-policy replicate", "Nothing was submitted"]),
]


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "submit"])
@pytest.mark.parametrize("spoil, extra, needles", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_manifest_at_fault_is_refused_before_anything_is_queued(tmp_path, lsf_env, template_dir, spoil, extra,
                                                                   needles, dry_run):
    blobs(tmp_path / "pfs", 2, 0.01, seed=1)
    m = tmp_path / "pfs" / "manifest.json"
    if spoil:
        spoil(m)
    r = _submit(lsf_env, template_dir, tmp_path / "run", m, *extra, *(["--dry-run"] if dry_run else []))
    assert_refused(r, [n.replace("{m}", str(m)) for n in needles], prefix=CLI)
    assert r.stderr.count("\n") == 1 and r.stdout == "", r.stderr
    assert not (tmp_path / "run").exists()
    _no_job_queued(lsf_env)


def test_a_manifest_that_checks_out_or_is_not_here_is_accepted(tmp_path, lsf_env, template_dir):
    """The check changes nothing for a whole manifest, and a path not on this machine is the job's to read."""
    blobs(tmp_path / "pfs", 2, 0.01, seed=1)
    for data in (tmp_path / "pfs" / "manifest.json", tmp_path / "pfs", tmp_path / "elsewhere" / "manifest.json"):
        r = _submit(lsf_env, template_dir, tmp_path / "run", data, "--dry-run")
        assert r.returncode == 0, r.stderr
        assert f"trainer.stage check --manifest {data}" in json.loads(r.stdout)["script"]


def _spoil_truncate(manifest, _root):
    manifest.write_bytes(manifest.read_bytes()[:100])
    return ["trainer.stage check: error: manifest", "cannot be read as JSON"]


def _spoil_fewer_shards(manifest, root):
    other, _ = _one_train_shard(root / "other")
    manifest.write_bytes(other.read_bytes())
    return ["trainer.stage check: error: manifest", "partition over 2 nodes needs at least 2 training shards"]


@pytest.mark.parametrize("spoil", [_spoil_truncate, _spoil_fewer_shards], ids=["truncated", "too-few-train-shards"])
def test_a_manifest_spoilt_after_submission_fails_the_job_naming_the_manifest(tmp_path, lsf_env, template_dir,
                                                                               spoil):
    blobs(tmp_path / "pfs", 2, 0.01, seed=2)
    manifest = tmp_path / "pfs" / "manifest.json"
    # Occupy every virtual node, so the job waits in the queue while its manifest is spoilt (the blocker's run
    # limit, 10 LSF minutes stretched, outlasts a busy machine's submit; the test releases it long before).
    blocker = tmp_path / "blocker.sh"
    blocker.write_text("#!/bin/bash\nwhile [ ! -e release ]; do sleep 0.1; done\n")
    jb = submitted_id(run(["bsub", "-nnodes", "4", "-W", f"{stretched(10):.0f}", "-o", "blocker.%J.out",
                           str(blocker)], lsf_env, cwd=tmp_path).stdout)
    try:
        wait_for(lambda: bjobs_state(jb, lsf_env)["STAT"] == "RUN", 20, "the blocker to run")
        r = _submit(lsf_env, template_dir, tmp_path / "run", manifest)
        assert r.returncode == 0, r.stderr
        job = json.loads(r.stdout)["job_ids"][0]
        assert bjobs_state(job, lsf_env)["STAT"] == "PEND"
        needles = spoil(manifest, tmp_path)
    finally:
        (tmp_path / "release").write_text("")
    state = wait_state(job, lsf_env, timeout=90)
    err = (tmp_path / "run" / f"stg.{job}.err").read_text()
    assert state["STAT"] == "EXIT", (state, err[-3000:])
    for needle in needles + [f"the data manifest {manifest} cannot be staged by this job", "Nothing was copied"]:
        assert needle in err, (needle, err[-3000:])
    assert "a shard is missing or corrupt" not in err and "Traceback" not in err, err[-3000:]
    assert not list((tmp_path / "lsf").rglob("nvme/summit-jobs/data/*.tar"))


def test_stage_check_alone_copies_nothing_and_names_the_manifest(tmp_path):
    """The job's check step as a command: 0 for a whole manifest, one line naming the manifest otherwise."""
    blobs(tmp_path / "pfs", 2, 0.01, seed=4)
    manifest = tmp_path / "pfs" / "manifest.json"
    base = [__import__("sys").executable, "-m", "trainer.stage", "check", "--manifest", str(manifest)]
    ok = subprocess.run(base + ["--nodes", "2"], capture_output=True, text=True, timeout=limit(60))
    assert ok.returncode == 0 and ok.stderr == "", ok.stderr
    bad = subprocess.run(base + ["--nodes", "3"], capture_output=True, text=True, timeout=limit(60))
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1, bad.stderr
    assert bad.stderr.startswith(f"trainer.stage check: error: manifest {manifest}: partition over 3 nodes")
    assert sorted(p.name for p in (tmp_path / "pfs").iterdir()) == ["manifest.json", "train-00000.tar",
                                                                   "train-00001.tar", "val-00000.tar"]
