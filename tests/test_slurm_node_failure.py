"""A node failure never leaves two trainings in one run directory: a job of summit-jobs is never requeued
by Slurm (--no-requeue), and a chain goes on after the failure with a new link that resumes.

Slurm's default (JobRequeue=1) requeues a batch job whose node fails, and starts it again in the same run
directory, truncating the first execution's output, while that execution's ranks may still run. Here a real
Slurm cluster of its own (the session's cluster is shared with other tests, and this one takes a node down):
a chain's first link runs on both nodes, `scontrol update State=DOWN` fails node2 (Slurm ends the job as it
does when a node stops answering: NODE_FAIL, Reason=NodeDown), and then:
- the job ends NODE_FAIL with Slurm's restart count 0 (never requeued) and its output intact;
- the chain queued link 2 (its script saw Slurm's NodeDown), which waits for the node, resumes from the
  checkpoint and completes;
- status shows the node failure as the link's own event, and no process of either job is left.
"""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
import pytest

from conftest_lsf import cli, lsf_environment, wait_for
from slurm_cluster import cluster_job_processes, required, squeue_job, stretched, unavailable_reason
from summit_jobs.schedulers.slurm.localcluster import LocalSlurmCluster

#: Each rank: on a run that holds a checkpoint, write COMPLETE (rank 0) and end; else checkpoint and wait.
PROGRAM = r'''
import os, pathlib, sys, time
rank = int(os.environ["RANK"])
run = pathlib.Path.cwd()
ckpt = run / "checkpoints" / "ckpt-000000001.pt"
if ckpt.exists():
    if rank == 0:
        (run / "COMPLETE").write_text("done\n")
    print(f"rank {rank}: resumed from {ckpt.name}", flush=True)
    sys.exit(0)
job = os.environ["SLURM_JOB_ID"]
(run / f"started.{job}.{rank}").write_text("")
print(f"rank {rank}: training", flush=True)
if rank == 0:   # once every rank has looked for it
    while len(list(run.glob(f"started.{job}.*"))) < int(os.environ["WORLD_SIZE"]):
        time.sleep(0.05)
    ckpt.parent.mkdir(exist_ok=True)
    (run / "ckpt.tmp").write_bytes(b"weights")
    (run / "ckpt.tmp").rename(ckpt)
time.sleep(3600)
'''


@pytest.fixture
def cluster(tmp_path):
    reason = unavailable_reason()
    if reason:
        if required():
            pytest.fail(f"SUMMIT_JOBS_REQUIRE_SLURM=1 but {reason}")
        pytest.skip(reason)
    # A short folder: slurmstepd's sockets live in it, and a socket path has at most 107 bytes.
    root = Path(tempfile.mkdtemp(prefix="sj-nodefail-"))
    own = LocalSlurmCluster(root, cpus=2)
    own.start(timeout=stretched(30))
    try:
        yield own
    finally:
        own.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_a_failed_node_ends_the_link_unrequeued_and_the_chain_resumes(cluster, tmp_path):
    env = cluster.env(dict(lsf_environment(tmp_path, minute=60), OMP_NUM_THREADS="1"))
    (tmp_path / "prog.py").write_text(PROGRAM)
    run_dir = tmp_path / "run"
    res = cli(["--machine", "local-slurm", "submit", "--nodes", "2", "--run-dir", str(run_dir), "--json",
               "--until-complete", "--walltime", "0:30", "--command", f"{sys.executable} {tmp_path / 'prog.py'}"],
              env, timeout=120)
    assert res.returncode == 0, res.stderr
    (first,) = json.loads(res.stdout)["job_ids"]
    wait_for(lambda: (run_dir / "checkpoints" / "ckpt-000000001.pt").exists(), 60,
             "the 4 ranks of link 1 to start and rank 0 to checkpoint")

    down = cluster.run(["scontrol", "update", "NodeName=node2", "State=DOWN", "Reason=summit-jobs-test"])
    assert down.returncode == 0, down.stderr
    chain = run_dir / "chain.jobs"
    wait_for(lambda: chain.exists() and chain.read_text().strip(), 60, "link 1 to queue link 2")
    (second,) = chain.read_text().split()
    job = wait_for(lambda: (lambda j: j if j and j["job_state"] == "NODE_FAIL" else None)(squeue_job(cluster, first)),
                   30, f"job {first} to end NODE_FAIL")
    assert job["restart_cnt"] == 0 and not job["requeue"], job
    assert not cluster_job_processes(cluster, first) or wait_for(
        lambda: not cluster_job_processes(cluster, first), 30, f"every process of job {first} to end")
    outs = list(run_dir.glob(f"*.{first}.out"))
    assert len(outs) == 1, outs
    text = outs[0].read_text()
    assert "rank 0: training" in text and "the scheduler ended link 1 (NodeDown" in text, text

    cluster.run(["scontrol", "update", "NodeName=node2", "State=RESUME"])
    wait_for(lambda: (run_dir / f"exitcode.{second}").exists(), 90, f"link 2 (job {second}) to end")
    assert (run_dir / "COMPLETE").exists()
    assert (run_dir / f"exitcode.{second}").read_text().strip() == "0"

    res = cli(["status", "--json", str(run_dir)], env, timeout=60)
    assert res.returncode == 0, res.stderr
    rows = {r["job_id"]: r for r in json.loads(res.stdout)}
    assert rows[first]["lsf_state"] == "NODE_FAIL" and rows[first]["restarts"] == 0, rows[first]
    assert "node failure" in rows[first]["last_event"]["text"], rows[first]
    assert rows[second]["state"] == "DONE", rows[second]
    wait_for(lambda: not cluster_job_processes(cluster, second), 30, f"every process of job {second} to end")
