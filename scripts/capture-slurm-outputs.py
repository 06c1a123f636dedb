#!/usr/bin/env python3
"""Capture real outputs of Slurm's commands from a local test cluster into tests/data/slurm/.

Usage (as root, with slurm-wlm, munge, mariadb-server-core and slurmdbd installed):

    PYTHONPATH=. python3 scripts/capture-slurm-outputs.py /tmp/summit-slurm-capture

It starts summit_jobs.schedulers.slurm.localcluster's cluster (2 nodes of 2 CPUs, with slurmdbd) in the
folder given, runs four jobs (a 2-node job that waits for a file, a job that depends on it, a job that is
cancelled, a job that exits 3), and writes what sbatch, squeue, scontrol and sacct print at chosen moments,
each with a .source file naming the Slurm version, the command, the moment and the jobs' scripts.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from slurm_cluster import sacct_job, wait_job  # noqa: E402
from summit_jobs.schedulers.slurm.localcluster import LocalSlurmCluster  # noqa: E402

OUT = REPO / "tests" / "data" / "slurm"


#: What a reader of a captured file should know about 22.05's output.
NOTES = {
    "squeue_json_running.txt": "squeue --json of 22.05 lists every job the controller knows; it ignores -j and -t.",
    "squeue_json_ended.txt": "exit_code is the raw wait status: 768 for exit 3 (3 << 8), 15 for the cancelled job "
                             "(SIGTERM).",
    "sacct_json.txt": "exit_code is {\"status\": \"SUCCESS\", \"return_code\": 0} for every job, the FAILED one "
                      "(exit 3) too: 22.05's dbv0.0.38 parser (src/plugins/openapi/dbv0.0.38/parse.c, "
                      "_dump_job_exit_code) writes SUCCESS and 0 whenever WIFEXITED holds, whatever the exit "
                      "status. sacct -P's ExitCode (sacct_p.txt) is right.",
}


def capture(cluster: LocalSlurmCluster, name: str, argv, moment: str, jobs: str) -> str:
    """Run a command, write its stdout to NAME and how it was run to NAME.source; its stdout."""
    out = cluster.run(argv, timeout=60, cwd=str(cluster.root.parent))
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {out.stderr}")
    version = cluster.run(["sinfo", "--version"]).stdout.strip()
    (OUT / name).write_text(out.stdout)
    (OUT / f"{name}.source").write_text(
        f"Captured by scripts/capture-slurm-outputs.py on {time.strftime('%Y-%m-%d')} from a real cluster\n"
        f"started by summit_jobs.schedulers.slurm.localcluster (Debian 12's {version}, 2 slurmd nodes\n"
        f"node1 and node2 of 2 CPUs, partition debug, cluster summitlocal, slurmdbd with MariaDB 10.11).\n"
        f"Command: {' '.join(argv)}\nMoment: {moment}\nJobs:\n{jobs}\nChanged: nothing (stdout as printed).\n"
        + (f"Note: {NOTES[name]}\n" if name in NOTES else ""))
    return out.stdout


def submit(cluster: LocalSlurmCluster, folder: Path, *args: str) -> str:
    out = cluster.run(["sbatch", "--parsable", *args], cwd=str(folder))
    if out.returncode != 0:
        raise SystemExit(f"sbatch {args} failed: {out.stderr}")
    return out.stdout.strip()


def main(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    OUT.mkdir(parents=True, exist_ok=True)
    release = folder / "release"
    release.unlink(missing_ok=True)
    script = folder / "two-nodes.sh"
    script.write_text(f"#!/bin/bash\n#SBATCH -N 2\n#SBATCH -J two-nodes\n"
                      f"while [ ! -e {release} ]; do sleep 0.1; done\nsrun hostname\n")
    jobs = (f"  1: sbatch --parsable --output={folder}/%x-%j.out {script}\n"
            f"     ({script}: #SBATCH -N 2, -J two-nodes; waits for {release}, then srun hostname)\n"
            f"  2: sbatch --dependency=afterany:1 -J after-first --wrap 'echo second'\n"
            f"  3: sbatch -J cancelled --wrap 'sleep 300', then scancel 3\n"
            f"  4: sbatch -J exits-3 --wrap 'exit 3' (submitted after jobs 1-3 ended)")
    cluster = LocalSlurmCluster(folder / "cluster", accounting=True).start(timeout=60)
    try:
        first = capture(cluster, "sbatch_parsable.txt", ["sbatch", "--parsable", f"--output={folder}/%x-%j.out",
                                                         str(script)], "job 1's submission", jobs).strip()
        wait_job(cluster, first, states=("RUNNING",))
        second = submit(cluster, folder, f"--dependency=afterany:{first}", "-J", "after-first",
                        f"--output={folder}/%x-%j.out", "--wrap", "echo second")
        third = submit(cluster, folder, "-J", "cancelled", f"--output={folder}/%x-%j.out", "--wrap", "sleep 300")
        wait_job(cluster, third, states=("RUNNING",))
        running = "job 1 and 3 RUNNING, job 2 PENDING (Dependency)"
        capture(cluster, "squeue_default.txt", ["squeue"], running, jobs)
        capture(cluster, "squeue_json_running.txt", ["squeue", "--json"], running, jobs)
        capture(cluster, "scontrol_show_job_running.txt", ["scontrol", "show", "job", first], running, jobs)
        capture(cluster, "scontrol_show_job_pending.txt", ["scontrol", "show", "job", second], running, jobs)
        cluster.run(["scancel", third])
        release.touch()
        wait_job(cluster, second)
        fourth = submit(cluster, folder, "-J", "exits-3", f"--output={folder}/%x-%j.out", "--wrap", "exit 3")
        for job in (first, second, third, fourth):
            sacct_job(cluster, job)
        ended = "all four jobs ended (COMPLETED, COMPLETED, CANCELLED, FAILED) and in slurmdbd"
        capture(cluster, "squeue_json_ended.txt", ["squeue", "--json"], ended, jobs)
        capture(cluster, "sacct_p.txt", ["sacct", "-P"], ended, jobs)
        capture(cluster, "sacct_p_format.txt", ["sacct", "-P", "-n", "-X", "-j", f"{first},{second},{third},{fourth}",
                                                "--format=JobID,JobName,Partition,State,ExitCode,Submit,Start,"
                                                "End,NodeList,WorkDir"], ended, jobs)
        capture(cluster, "sacct_json.txt", ["sacct", "--json", "-j", f"{first},{second},{third},{fourth}"], ended, jobs)
    finally:
        cluster.stop()
    json.loads((OUT / "sacct_json.txt").read_text())


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(Path(sys.argv[1]).resolve())
