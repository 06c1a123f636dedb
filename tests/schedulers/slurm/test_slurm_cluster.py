"""The local Slurm cluster is a real one: srun spans two nodes with their own host names, batch jobs write
their output, the task variables are Slurm's, --signal arrives before the time limit, scancel leaves no
process, squeue --json and sacct --json show jobs, dependencies hold, and stop() leaves nothing behind.

Slurm 22.05's controller checks time limits (and sends --signal warnings) every 30 s (PERIODIC_TIMEOUT,
fixed at build time, no slurm.conf knob), so the --signal test takes up to about 30 s.
"""
from __future__ import annotations

import os
import re
import socket
import time
from collections import Counter
from pathlib import Path
from typing import List, Tuple

import pytest

from slurm_cluster import job_processes, sacct_job, sbatch, squeue_job, stretched, unavailable_reason, wait_job
from summit_jobs.schedulers.slurm import localcluster
from summit_jobs.schedulers.slurm.localcluster import ClusterError, LocalSlurmCluster

#: One line per task: its host and the variables srun documents for each task.
TASK_LINE = 'echo "TASK $(hostname) $SLURM_PROCID $SLURM_LOCALID $SLURM_NODEID $SLURM_NTASKS $SLURM_JOB_NODELIST"'


def tasks(text: str) -> List[Tuple[str, ...]]:
    """(host, procid, localid, nodeid, ntasks, nodelist) of each TASK line, by procid."""
    rows = [tuple(line.split()[1:]) for line in text.splitlines() if line.startswith("TASK ")]
    return sorted(rows, key=lambda r: int(r[1]))


def write_script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(0o755)
    return path


def processes_mentioning(folder: Path) -> List[str]:
    """Processes whose command line names the folder (every daemon of a cluster names its folder)."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(folder) in cmdline:
            found.append(f"{entry} {cmdline}")
    return found


def wait_for(done, quiet_seconds: float, what: str) -> None:
    """Poll ``done`` for ``quiet_seconds`` on a quiet machine, stretched by the measured slowdown."""
    timeout = stretched(quiet_seconds)
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"{what} not within {timeout} s"
        time.sleep(0.1)


def test_srun_spans_two_nodes_with_two_tasks_each(slurm_cluster):
    out = slurm_cluster.run(["srun", "-N2", "-n4", "--ntasks-per-node=2", "hostname"])
    assert out.returncode == 0, out.stderr
    assert Counter(out.stdout.split()) == {"node1": 2, "node2": 2}
    assert socket.gethostname() not in out.stdout.split()


def test_task_variables_are_as_slurm_documents(slurm_cluster):
    """srun(1): SLURM_PROCID is the task's rank in the step, SLURM_LOCALID its rank on its node,
    SLURM_NODEID its node's index in the allocation, SLURM_NTASKS the step's tasks; the default distribution
    is block (consecutive ranks on a node)."""
    out = slurm_cluster.run(["srun", "-N2", "-n4", "--ntasks-per-node=2", "bash", "-c", TASK_LINE])
    assert out.returncode == 0, out.stderr
    assert tasks(out.stdout) == [("node1", "0", "0", "0", "4", "node[1-2]"), ("node1", "1", "1", "0", "4", "node[1-2]"),
                                 ("node2", "2", "0", "1", "4", "node[1-2]"), ("node2", "3", "1", "1", "4", "node[1-2]")]


def test_sbatch_runs_a_two_node_script_and_writes_its_output_where_asked(slurm_cluster, tmp_path):
    outdir = tmp_path / "logs"
    outdir.mkdir()
    script = write_script(tmp_path / "two.sh", f"""#SBATCH -N 2
#SBATCH --ntasks-per-node=2
#SBATCH -J two-nodes
echo "BATCH $(hostname) $SLURM_JOB_NUM_NODES $SLURM_NTASKS $SLURM_JOB_NODELIST $SLURM_NODEID $SLURM_PROCID"
srun bash -c '{TASK_LINE}'
""")
    job_id = sbatch(slurm_cluster, f"--output={outdir}/job-%j.out", str(script), cwd=tmp_path)
    job = wait_job(slurm_cluster, job_id)
    assert (job["job_state"], job["exit_code"], job["nodes"]) == ("COMPLETED", 0, "node[1-2]")
    text = (outdir / f"job-{job_id}.out").read_text()
    # The batch script runs once, on the first node of the allocation.
    assert "BATCH node1 2 4 node[1-2] 0 0" in text
    assert [t[:4] for t in tasks(text)] == [("node1", "0", "0", "0"), ("node1", "1", "1", "0"),
                                           ("node2", "2", "0", "1"), ("node2", "3", "1", "1")]


def test_signal_reaches_the_batch_shell_before_the_time_limit(slurm_cluster, tmp_path):
    """--signal=B:USR2@50 with --time=1: slurmctld sends the warning at its first time-limit check at which
    the job has less than 50 + 30 s left, which for a 1-minute job is the first check after it starts: within
    30 s (and the moment the busy machine takes the shell to run its trap), well before the limit. The
    shell's trap ends the job, so it completes instead of timing out."""
    script = write_script(tmp_path / "warned.sh", """#SBATCH --time=1
#SBATCH --signal=B:USR2@50
started=$(date +%s)
trap 'echo "USR2 after $(( $(date +%s) - started )) s"; exit 0' USR2
echo started
while true; do sleep 0.2; done
""")
    job_id = sbatch(slurm_cluster, f"--output={tmp_path}/warned.out", str(script), cwd=tmp_path)
    job = wait_job(slurm_cluster, job_id, timeout=60 + stretched(60))
    text = (tmp_path / "warned.out").read_text()
    found = re.search(r"USR2 after (\d+) s", text)
    assert found, f"no USR2 in the job's output:\n{text}"
    assert int(found.group(1)) <= 30 + stretched(2), text
    assert job["job_state"] == "COMPLETED", job["state_reason"]


def test_scancel_ends_a_running_job_and_leaves_no_process_of_it(slurm_cluster, tmp_path):
    job_id = sbatch(slurm_cluster, "-N2", f"--output={tmp_path}/cancelled.out", "--wrap", "srun sleep 300",
                    cwd=tmp_path)
    wait_job(slurm_cluster, job_id, states=("RUNNING",))
    wait_for(lambda: sum(" sleep 300" in p for p in job_processes(job_id)) == 2, 30,
             "a sleep of the job on each node")
    out = slurm_cluster.run(["scancel", job_id])
    assert out.returncode == 0, out.stderr
    assert wait_job(slurm_cluster, job_id)["job_state"] == "CANCELLED"
    wait_for(lambda: not job_processes(job_id), 20, f"the end of every process of job {job_id}")


def test_squeue_json_and_sacct_show_the_job(slurm_cluster, tmp_path):
    release = tmp_path / "release"
    job_id = sbatch(slurm_cluster, "-N2", "-J", "shown", f"--output={tmp_path}/shown.out", "--wrap",
                    f"while [ ! -e {release} ]; do sleep 0.1; done", cwd=tmp_path)
    running = wait_job(slurm_cluster, job_id, states=("RUNNING",))
    assert (running["name"], running["partition"], running["nodes"], running["batch_host"],
            running["user_name"]) == ("shown", "debug", "node[1-2]", "node1", "root")
    plain = slurm_cluster.run(["squeue", "-h", "-j", job_id, "-o", "%i %j %T %D %N"])
    assert plain.stdout.split() == [job_id, "shown", "RUNNING", "2", "node[1-2]"]
    release.touch()
    wait_job(slurm_cluster, job_id)
    record = sacct_job(slurm_cluster, job_id)
    assert (record["name"], record["state"]["current"], record["exit_code"]["return_code"],
            record["nodes"], record["cluster"]) == ("shown", "COMPLETED", 0, "node[1-2]", "summitlocal")
    assert record["time"]["end"] >= record["time"]["start"] >= record["time"]["submission"] > 0
    rows = slurm_cluster.run(["sacct", "-P", "-n", "-X", "-j", job_id,
                              "--format=JobID,JobName,State,ExitCode,NodeList"]).stdout.split()
    assert rows == [f"{job_id}|shown|COMPLETED|0:0|node[1-2]"]


def test_a_dependent_job_starts_after_the_first_ends_whatever_its_exit(slurm_cluster, tmp_path):
    release = tmp_path / "release"
    first = sbatch(slurm_cluster, f"--output={tmp_path}/first.out", "--wrap",
                   f"while [ ! -e {release} ]; do sleep 0.1; done; exit 3", cwd=tmp_path)
    wait_job(slurm_cluster, first, states=("RUNNING",))
    second = sbatch(slurm_cluster, f"--dependency=afterany:{first}", f"--output={tmp_path}/second.out",
                    "--wrap", "echo second ran", cwd=tmp_path)
    waiting = squeue_job(slurm_cluster, second)
    assert (waiting["job_state"], waiting["state_reason"]) == ("PENDING", "Dependency")
    release.touch()
    ended = wait_job(slurm_cluster, first)
    # 22.05's squeue --json gives the raw wait status (exit 3 is 3 << 8); sacct --json splits it.
    assert (ended["job_state"], ended["exit_code"]) == ("FAILED", 3 << 8)
    # sacct --json of 22.05 writes any exit as {"status": "SUCCESS", "return_code": 0} (its dbv0.0.38
    # parser looks at WIFEXITED, not at the status); the state and sacct -P's ExitCode are right.
    assert sacct_job(slurm_cluster, first)["state"]["current"] == "FAILED"
    exit_code = slurm_cluster.run(["sacct", "-P", "-n", "-X", "-j", first, "--format=State,ExitCode"]).stdout
    assert exit_code.split() == ["FAILED|3:0"]
    after = wait_job(slurm_cluster, second)
    assert after["job_state"] == "COMPLETED"
    assert after["start_time"] >= ended["end_time"]
    assert (tmp_path / "second.out").read_text() == "second ran\n"


def test_a_second_start_in_the_same_folder_is_refused(slurm_cluster):
    with pytest.raises(ClusterError, match="already runs"):
        LocalSlurmCluster(slurm_cluster.root).start()
    assert set(slurm_cluster.node_states()) == {"node1", "node2"}   # the running cluster still answers


needs_slurm = pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))


@needs_slurm
def test_stop_leaves_no_process_mount_or_namespace(tmp_path, short_dir):
    """A cluster of its own (no accounting), stopped while a job runs on both nodes."""
    cluster = LocalSlurmCluster(short_dir / "c")
    began = time.monotonic()
    cluster.start(timeout=stretched(30))
    started = time.monotonic() - began
    job_id = sbatch(cluster, "-N2", "--wrap", "srun sleep 300", cwd=tmp_path)
    wait_for(lambda: sum(" sleep 300" in p for p in job_processes(job_id)) == 2, 30, "the job's sleeps")
    daemons = cluster.daemons()
    namespaces = {d.namespace for d in daemons if d.namespace}
    assert len(namespaces) == 3            # slurmctl, node1, node2
    began = time.monotonic()
    cluster.stop()
    stopped = time.monotonic() - began
    assert not [d.name for d in daemons if localcluster.is_alive(d)]
    assert not [p for ns in namespaces for p in localcluster.members(ns)]
    assert not job_processes(job_id)
    assert not processes_mentioning(cluster.root)
    assert str(cluster.root) not in Path("/proc/self/mountinfo").read_text()
    assert not (cluster.root / "cluster.json").exists()
    print(f"start {started:.1f} s, stop {stopped:.1f} s")


@needs_slurm
def test_a_daemon_that_fails_is_named_with_its_log(short_dir, monkeypatch):
    real = localcluster.slurm_conf
    monkeypatch.setattr(localcluster, "slurm_conf", lambda c: real(c) + "NoSuchSlurmOption=1\n")
    cluster = LocalSlurmCluster(short_dir / "c")
    with pytest.raises(ClusterError) as failed:
        cluster.start(timeout=stretched(20))
    message = str(failed.value)
    assert "did not start: slurmctld exited" in message and "NoSuchSlurmOption" in message, message
    assert not processes_mentioning(cluster.root)


def test_a_caller_that_is_not_root_is_told_so(short_dir, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(ClusterError, match="needs root"):
        LocalSlurmCluster(short_dir / "c").start()
    assert not (short_dir / "c").exists()


def test_stop_never_takes_the_machines_namespace_for_a_nodes():
    """An init that has not yet entered its namespaces shares the machine's: stop() killing "its" namespace
    would then kill every process of the machine."""
    assert localcluster.own_namespace(os.getpid()) == ""
    assert localcluster.own_namespace(1) == ""


def test_a_folder_too_long_for_slurmstepds_sockets_is_refused_before_anything_starts(tmp_path):
    """slurmstepd puts a step's socket in the node's spool folder, and a socket path has at most 107 bytes: a
    longer cluster folder started every daemon and then failed each job's launch; now it is refused at once."""
    deep = tmp_path / ("d" * 60) / ("e" * 40)
    with pytest.raises(ClusterError, match=r"too long for slurmstepd's sockets .* give a folder of at most \d+"):
        LocalSlurmCluster(deep)
    assert not deep.exists()
