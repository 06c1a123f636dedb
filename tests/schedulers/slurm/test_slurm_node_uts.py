"""A job of the local Slurm cluster that renames its host renames only its own step's copy: the node keeps its
name for every later job.

Why: the cluster's jobs run as root, and slurmd's job steps used to share their node's UTS namespace, so one
``hostname x`` renamed node1 for every job after it (srun, the batch host, MASTER_ADDR lookups by name). Each
step now takes a UTS namespace of its own (localcluster's slurmstepd script), while staying in its node's
mount namespace, where ``stop`` finds it.
"""
from __future__ import annotations

import socket
from collections import Counter
from pathlib import Path

import pytest

from slurm_cluster import sbatch, wait_job
from summit_jobs.schedulers.slurm import localcluster
from summit_jobs.schedulers.slurm.localcluster import ClusterError, LocalSlurmCluster

#: Renames the host of the task's step after its node index, then prints the name the step now sees.
RENAME = 'hostname "renamed-$SLURM_NODEID" && echo "SEEN $(hostname)"'


def node_names(cluster: LocalSlurmCluster) -> Counter:
    """The host name one task on each node sees, from a job of its own."""
    out = cluster.run(["srun", "-N2", "--ntasks-per-node=1", "hostname"])
    assert out.returncode == 0, out.stderr
    return Counter(out.stdout.split())


@pytest.fixture
def renaming_allowed(slurm_cluster):
    """The cluster, given back with its nodes' names whatever the test did: without per-step namespaces a
    rename would outlive the test and fail every later test of this worker that reads a node's name."""
    yield slurm_cluster
    restore = 'hostname "node$((SLURM_NODEID + 1))"'
    slurm_cluster.run(["srun", "-N2", "--ntasks-per-node=1", "bash", "-c", restore])


def test_a_renamed_host_is_the_jobs_own_and_the_next_job_sees_the_nodes_name(renaming_allowed, tmp_path):
    cluster = renaming_allowed
    renamed = cluster.run(["srun", "-N2", "--ntasks-per-node=1", "bash", "-c", RENAME])
    assert renamed.returncode == 0, renamed.stderr
    # The rename took effect inside the job (root may rename a host): what follows is not a no-op.
    assert sorted(renamed.stdout.split()) == ["SEEN", "SEEN", "renamed-0", "renamed-1"], renamed.stdout
    assert node_names(cluster) == {"node1": 1, "node2": 1}
    # A batch script's rename stays its own too: the next job's batch host is still node1.
    first = sbatch(cluster, "-N1", "-w", "node1", f"--output={tmp_path}/first.out", "--wrap",
                   "hostname batch-renamed && hostname", cwd=tmp_path)
    assert wait_job(cluster, first)["job_state"] == "COMPLETED"
    assert Path(tmp_path / "first.out").read_text().split() == ["batch-renamed"]
    second = sbatch(cluster, "-N1", "-w", "node1", f"--output={tmp_path}/second.out", "--wrap", "hostname",
                    cwd=tmp_path)
    assert wait_job(cluster, second)["job_state"] == "COMPLETED"
    assert Path(tmp_path / "second.out").read_text().split() == ["node1"]
    assert socket.gethostname() not in ("renamed-0", "renamed-1", "batch-renamed")


def test_each_step_runs_slurmstepd_through_the_clusters_script(slurm_cluster):
    """slurmd was started with ``-d`` naming the script, and the script execs the real slurmstepd under
    ``unshare --uts``."""
    script = slurm_cluster.stepd.read_text().splitlines()
    assert script[-1] == (f'exec {localcluster.find_program("unshare")} --uts -- '
                          f'{localcluster.find_program("slurmstepd")} "$@"'), script
    node1 = next(d for d in slurm_cluster.daemons() if d.name == "node1")
    cmdline = Path(f"/proc/{node1.pid}/cmdline").read_bytes().split(b"\0")
    assert cmdline[-3:] == [b"-d", str(slurm_cluster.stepd).encode(), b""], cmdline


def test_a_machine_without_unshare_is_told_which_package(short_dir, monkeypatch):
    real = localcluster.find_program
    monkeypatch.setattr(localcluster.os, "geteuid", lambda: 0)
    monkeypatch.setattr(localcluster, "find_program",
                        lambda name: None if name == "unshare" else real(name) or f"/usr/sbin/{name}")
    with pytest.raises(ClusterError, match=r"^unshare is not installed .*apt-get install -y util-linux$"):
        LocalSlurmCluster(short_dir / "c").start()
    assert not (short_dir / "c").exists()
