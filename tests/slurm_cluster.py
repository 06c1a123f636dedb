"""A real Slurm cluster for the Slurm tests, started once per test session and stopped at its end.

tests/conftest.py's ``slurm_cluster`` fixture starts it, so every test module of a session shares one cluster. It is
summit_jobs.schedulers.slurm.localcluster's cluster: MUNGE, MariaDB and slurmdbd (so that sacct answers),
slurmctld and two slurmd nodes (node1, node2, 4 CPUs each, so that two jobs of 2 ranks a node run side by
side) in their own UTS and mount namespaces. It needs root and Debian's slurm-wlm, munge, mariadb-server-core and slurmdbd; without them the tests skip with the reason,
except in CI (CI=true, SUMMIT_JOBS_REQUIRE_SLURM=1), where they fail.

The helpers read a job the way the Slurm scheduler will: ``squeue --json`` while Slurm's controller keeps the
job (22.05's squeue --json lists every job whatever -j says, so the helper picks the id), ``sacct --json``
once slurmdbd has its final record (sent a moment after the job ends). Their time limits are a quiet
machine's seconds stretched by the measured slowdown (``stretched``, helpers.slowdown).
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Dict, Iterable, List, Optional

from helpers import slowdown
from summit_jobs.schedulers.slurm.localcluster import ClusterError, LocalSlurmCluster, check_can_run, members

#: How long a slowdown measurement serves ``stretched``: the helpers run many times in a test, and each
#: measurement costs three interpreter starts.
SLOWDOWN_TTL = 30.0
_measured = {"at": float("-inf"), "factor": 1.0}


def stretched(seconds: float) -> float:
    """``seconds`` on the quiet reference machine, stretched by helpers.slowdown() as measured within the
    last SLOWDOWN_TTL seconds, so that a busy machine gets the time its daemons and jobs need there."""
    if time.monotonic() - _measured["at"] > SLOWDOWN_TTL:
        _measured.update(factor=slowdown(), at=time.monotonic())
    return seconds * _measured["factor"]


#: The states after which a job does not run again (squeue's and sacct's words).
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE",
         "PREEMPTED")


def unavailable_reason() -> Optional[str]:
    """Why the cluster cannot start here (not root, a package missing), or None."""
    try:
        check_can_run(accounting=True)
    except ClusterError as exc:
        return str(exc)
    return None


def required() -> bool:
    """CI demands the Slurm tests run (it installs the packages and runs as root)."""
    return os.environ.get("CI") == "true" and os.environ.get("SUMMIT_JOBS_REQUIRE_SLURM") == "1"


def squeue_job(cluster: LocalSlurmCluster, job_id: str) -> Optional[Dict]:
    """The job's record in ``squeue --json`` (None when the controller no longer knows it)."""
    out = cluster.run(["squeue", "--json", "--states=all"], timeout=stretched(15))
    assert out.returncode == 0, out.stderr
    return next((j for j in json.loads(out.stdout)["jobs"] if str(j["job_id"]) == str(job_id)), None)


def wait_job(cluster: LocalSlurmCluster, job_id: str, states: Iterable[str] = ENDED,
             timeout: Optional[float] = None) -> Dict:
    """Poll squeue until the job is in one of ``states``; its record. Fails with the last state seen after
    ``timeout`` seconds (default: 60 on a quiet machine, stretched)."""
    states = tuple(states)
    timeout = stretched(60) if timeout is None else timeout
    deadline = time.monotonic() + timeout
    job = None
    while time.monotonic() < deadline:
        job = squeue_job(cluster, job_id)
        if job and job["job_state"] in states:
            return job
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} not in {states} after {timeout} s: "
                         f"{job and (job['job_state'], job['state_reason'])}")


def sacct_job(cluster: LocalSlurmCluster, job_id: str, timeout: Optional[float] = None) -> Dict:
    """The job's record in ``sacct --json`` once slurmdbd has its final one: the ended state, name and nodes
    that squeue shows. Until then sacct may show nothing, or a placeholder that slurmdbd made from a step's
    record that came first (seen on 22.05: name "allocation", the batch host only, PENDING, then COMPLETED).
    ``timeout``: for each of the two (default: 30 s on a quiet machine, stretched)."""
    timeout = stretched(30) if timeout is None else timeout
    final = wait_job(cluster, job_id, timeout=timeout)
    want = (final["job_state"], final["name"], final["nodes"])
    deadline = time.monotonic() + timeout
    seen = None
    while time.monotonic() < deadline:
        out = cluster.run(["sacct", "--json", "-j", str(job_id)], timeout=stretched(15))
        assert out.returncode == 0, out.stderr
        jobs = [j for j in json.loads(out.stdout)["jobs"] if str(j["job_id"]) == str(job_id)]
        seen = jobs and (jobs[0]["state"]["current"], jobs[0]["name"], jobs[0]["nodes"])
        if seen == want:
            return jobs[0]
        time.sleep(0.2)
    raise AssertionError(f"sacct's record of job {job_id} is {seen}, not {want}, after {timeout} s")


def sbatch(cluster: LocalSlurmCluster, *args: str, cwd=None) -> str:
    """Submit with ``sbatch --parsable``; the job id."""
    out = cluster.run(["sbatch", "--parsable", *args], cwd=cwd, timeout=stretched(15))
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().split(";")[0]


def job_processes(job_id: str, pids: Optional[Iterable[str]] = None) -> List[str]:
    """Every process of a job among ``pids`` (default: every process of this machine): its tasks and batch
    script (SLURM_JOB_ID in their environment) and its slurmstepd's ("slurmstepd: [ID.step]"), each as
    "PID command line"."""
    mark, stepd = f"SLURM_JOB_ID={job_id}".encode(), f"slurmstepd: [{job_id}.".encode()
    found = []
    for entry in (filter(str.isdigit, os.listdir("/proc")) if pids is None else pids):
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmdline.startswith(stepd) or mark in environ:
            found.append(f"{entry} " + cmdline.replace(b"\0", b" ").decode(errors="replace"))
    return found


def cluster_job_processes(cluster: LocalSlurmCluster, job_id: str) -> List[str]:
    """The job's processes in this cluster's namespaces only: job ids start at 1 in every cluster, and a test
    process of another worker may run a cluster of its own."""
    pids = [str(pid) for d in cluster.daemons() if d.namespace for pid in members(d.namespace)]
    return job_processes(job_id, pids)
