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
A preemption the same way, on a cluster that preempts (a partition of a higher priority tier): the link ends
PREEMPTED, never requeued, and the chain resumes once the preemptor is done.
"""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
import pytest

from lsf_jobs import cli, lsf_environment, wait_for
from slurm_cluster import cluster_job_processes, required, squeue_job, stretched, unavailable_reason
from summit_jobs.schedulers.slurm import localcluster
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


def _own_cluster(prefix: str):
    reason = unavailable_reason()
    if reason:
        if required():
            pytest.fail(f"SUMMIT_JOBS_REQUIRE_SLURM=1 but {reason}")
        pytest.skip(reason)
    # A short folder: slurmstepd's sockets live in it, and a socket path has at most 107 bytes.
    root = Path(tempfile.mkdtemp(prefix=prefix))
    own = LocalSlurmCluster(root, cpus=2)
    own.start(timeout=stretched(30))
    try:
        yield own
    finally:
        own.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def cluster():
    yield from _own_cluster("sj-nodefail-")


#: The partition whose jobs preempt the default partition's (a higher PriorityTier, preempt/partition_prio).
URGENT = "urgent"


@pytest.fixture
def preempting_cluster(monkeypatch):
    """A cluster as a site that preempts configures it: PreemptType=preempt/partition_prio with the most common
    PreemptMode, REQUEUE (slurm.conf(5): "preempts jobs by requeuing them (if possible) or canceling them"),
    and a partition of a higher priority tier on the same nodes."""
    real = localcluster.slurm_conf

    def with_preemption(cluster: LocalSlurmCluster) -> str:
        text = real(cluster).replace("SchedulerParameters=", "PreemptType=preempt/partition_prio\n"
                                     "PreemptMode=REQUEUE\nSchedulerParameters=", 1)
        return text + (f"PartitionName={URGENT} Nodes={','.join(cluster.nodes)} PriorityTier=10 "
                       "MaxTime=INFINITE State=UP\n")
    monkeypatch.setattr(localcluster, "slurm_conf", with_preemption)
    yield from _own_cluster("sj-preempt-")


def _chain_with_a_checkpoint(cluster: LocalSlurmCluster, tmp_path: Path):
    """A chain of the PROGRAM on both nodes, submitted as a user would; (env, run dir, first job) once its 4
    ranks run and rank 0 has checkpointed."""
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
    return env, run_dir, first


def _ended_by_the_scheduler(cluster: LocalSlurmCluster, run_dir: Path, first: str, state: str, reason: str) -> str:
    """Link 1 ended ``state`` without a requeue, its output intact and saying why (``reason``), after queueing
    link 2; link 2's id."""
    chain = run_dir / "chain.jobs"
    try:
        wait_for(lambda: chain.exists() and chain.read_text().strip(), 60, "link 1 to queue link 2")
    except AssertionError as late:
        logs = {p.name: p.read_text(errors="replace")[-3000:] for p in run_dir.glob(f"*.{first}.*")}
        raise AssertionError(f"{late}\njob {first}: {squeue_job(cluster, first)}\nlogs: {logs}") from None
    (second,) = chain.read_text().split()
    job = wait_for(lambda: (lambda j: j if j and j["job_state"] == state else None)(squeue_job(cluster, first)),
                   30, f"job {first} to end {state}")
    assert job["restart_cnt"] == 0 and not job["requeue"], job
    wait_for(lambda: not cluster_job_processes(cluster, first), 30, f"every process of job {first} to end")
    outs = list(run_dir.glob(f"*.{first}.out"))
    assert len(outs) == 1, outs
    text = outs[0].read_text()
    assert "rank 0: training" in text and f"the scheduler ended link 1 ({reason}" in text, text
    return second


def _resumed_to_complete(cluster: LocalSlurmCluster, env, run_dir: Path, first: str, second: str, state: str,
                         says: str) -> None:
    """Link 2 resumed and completed; status shows link 1's end (``state``, its event text with ``says``) and
    no restart; nothing of link 2 is left."""
    wait_for(lambda: (run_dir / f"exitcode.{second}").exists(), 90, f"link 2 (job {second}) to end")
    assert (run_dir / "COMPLETE").exists()
    assert (run_dir / f"exitcode.{second}").read_text().strip() == "0"
    res = cli(["status", "--json", str(run_dir)], env, timeout=60)
    assert res.returncode == 0, res.stderr
    rows = {r["job_id"]: r for r in json.loads(res.stdout)}
    assert rows[first]["native_state"] == state and rows[first]["restarts"] == 0, rows[first]
    assert says in rows[first]["last_event"]["text"], rows[first]
    assert rows[second]["state"] == "done", rows[second]
    wait_for(lambda: not cluster_job_processes(cluster, second), 30, f"every process of job {second} to end")


def test_a_failed_node_ends_the_link_unrequeued_and_the_chain_resumes(cluster, tmp_path):
    env, run_dir, first = _chain_with_a_checkpoint(cluster, tmp_path)
    down = cluster.run(["scontrol", "update", "NodeName=node2", "State=DOWN", "Reason=summit-jobs-test"])
    assert down.returncode == 0, down.stderr
    second = _ended_by_the_scheduler(cluster, run_dir, first, "NODE_FAIL", "NodeDown")
    cluster.run(["scontrol", "update", "NodeName=node2", "State=RESUME"])
    _resumed_to_complete(cluster, env, run_dir, first, second, "NODE_FAIL", "a node failure")


def test_a_preempted_link_is_not_requeued_and_the_chain_resumes_after_the_preemptor(preempting_cluster, tmp_path):
    """A job of the urgent partition takes both nodes from a chain's running link: Slurm cannot requeue it
    (--no-requeue), so it ends PREEMPTED; the link's script saw the preemption (its PreemptTime) and queued
    link 2, which runs once the urgent job is done, resumes from the checkpoint and completes. Status shows
    the preemption."""
    env, run_dir, first = _chain_with_a_checkpoint(preempting_cluster, tmp_path)
    urgent = preempting_cluster.run(["sbatch", "--parsable", "-p", URGENT, "-N2", "-o", "/dev/null", "--wrap",
                                     "sleep 3"], cwd=tmp_path)
    assert urgent.returncode == 0, urgent.stderr
    second = _ended_by_the_scheduler(preempting_cluster, run_dir, first, "PREEMPTED", "PREEMPTED")
    _resumed_to_complete(preempting_cluster, env, run_dir, first, second, "PREEMPTED", "a preemption")
