"""Today's generic LSF form on the embedded LSF, for real: ``-gpu``, ``-M``, ``-R rusage[mem=]``, ``-app``
and Open MPI's ``mpirun`` launched through ``blaunch`` (IBM's documented way: ``--mca plm_rsh_agent
blaunch``), each with real bsub, supervisor, blaunch and rank processes."""
from __future__ import annotations

import json
import re
import shutil
import sys
import textwrap
from pathlib import Path
from typing import Dict, List

import pytest

from lsf_jobs import run, submitted_id, wait_state
from summit_jobs.schedulers.lsf.embedded.state import node_names

#: The virtual nodes' host names on this machine: vnode1... where tasks get host names, else 127.1.0.1...
NODE1, NODE2, NODE3, NODE4 = node_names(4)

PY = sys.executable
#: Prints one line with what a rank or task is told about itself.
SHOW = r'''
import os
keys = ["OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "SUMMIT_JOBS_VNODE",
        "LSF_PM_TASKID", "CUDA_VISIBLE_DEVICES"]
os.write(1, ("SHOW " + " ".join(f"{k}={os.environ.get(k)}" for k in keys) + "\n").encode())
'''


def script(tmp_path: Path, body: str, name: str = "job.lsf") -> str:
    path = tmp_path / name
    path.write_text("#!/bin/bash\n" + textwrap.dedent(body).lstrip())
    return str(path)


def shown(text: str) -> List[Dict[str, str]]:
    """The SHOW lines of a job's output as dicts, in the order printed."""
    return [dict(w.split("=", 1) for w in line.split()[1:]) for line in text.splitlines()
            if line.startswith("SHOW ")]


def submit_and_wait(tmp_path: Path, env: Dict[str, str], body: str, timeout: float = 60) -> tuple:
    res = run(["bsub", script(tmp_path, body)], env, cwd=tmp_path)
    jid = submitted_id(res.stdout)
    return jid, wait_state(jid, env, timeout=timeout)


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI (Debian openmpi-bin) is not installed; "
                    ".ci/run installs it")
def test_mpirun_through_blaunch_starts_four_ranks_on_their_hosts(tmp_path, lsf_env):
    """orted is started by ``blaunch <host> orted ...`` with arguments quoted for a remote shell; the ranks
    it starts carry Open MPI's variables and their host's GPUs."""
    (tmp_path / "prog.py").write_text(SHOW)
    env = dict(lsf_env, SUMMIT_JOBS_LSF_GPUS="2")
    jid, rec = submit_and_wait(tmp_path, env, f"""
        #BSUB -n 4
        #BSUB -R "span[ptile=2]"
        #BSUB -gpu "num=2:mode=exclusive_process"
        #BSUB -o mpi.%J.out
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
        mpirun -np 4 --hostfile $LSB_DJOB_HOSTFILE --mca plm_rsh_agent blaunch {PY} prog.py
        echo "mpirun-rc=$?"
        """, timeout=90)
    out = (tmp_path / f"mpi.{jid}.out").read_text()
    assert rec["STAT"] == "DONE" and "mpirun-rc=0" in out, out
    ranks = sorted(shown(out), key=lambda r: int(r["OMPI_COMM_WORLD_RANK"]))
    assert [r["OMPI_COMM_WORLD_RANK"] for r in ranks] == ["0", "1", "2", "3"], out
    assert {r["OMPI_COMM_WORLD_SIZE"] for r in ranks} == {"4"}
    assert [r["SUMMIT_JOBS_VNODE"] for r in ranks] == [NODE1, NODE1, NODE2, NODE2]
    assert [r["OMPI_COMM_WORLD_LOCAL_RANK"] for r in ranks] == ["0", "1", "0", "1"]
    assert {r["CUDA_VISIBLE_DEVICES"] for r in ranks} == {"0,1"}


def test_blaunch_runs_its_command_through_a_shell_unless_no_shell(tmp_path, lsf_env):
    """As rsh and ssh do (IBM: a drop-in replacement for both): the words are joined and run by /bin/sh, so
    quoting meant for the remote shell is undone there; -no-shell passes them as they are."""
    jid, rec = submit_and_wait(tmp_path, lsf_env, f"""
        #BSUB -n 2
        #BSUB -R "span[ptile=1]"
        #BSUB -o sh.%J.out
        blaunch {NODE2} echo 'on=$SUMMIT_JOBS_VNODE' '"quoted"'
        blaunch -no-shell {NODE2} echo 'on=$SUMMIT_JOBS_VNODE' '"quoted"'
        blaunch -use-login-shell -z {NODE1} echo 'login=$LSF_PM_TASKID'
        """)
    out = (tmp_path / f"sh.{jid}.out").read_text()
    assert rec["STAT"] == "DONE", out
    assert out.splitlines() == [f"on={NODE2} quoted", 'on=$SUMMIT_JOBS_VNODE "quoted"', "login=1"], out


def test_gpu_job_sees_its_hosts_gpus_in_the_script_and_every_task(tmp_path, lsf_env):
    env = dict(lsf_env, SUMMIT_JOBS_LSF_GPUS="4", CUDA_VISIBLE_DEVICES="7")
    (tmp_path / "prog.py").write_text(SHOW)
    jid, rec = submit_and_wait(tmp_path, env, f"""
        #BSUB -n 3
        #BSUB -R "span[ptile=2]"
        #BSUB -gpu "num=3:mode=shared:mps=no:j_exclusive=yes:gmodel=TeslaV100_SXM2_32GB:gmem=32000"
        #BSUB -o gpu.%J.out
        echo "script=$CUDA_VISIBLE_DEVICES"
        blaunch {PY} prog.py
        """)
    out = (tmp_path / f"gpu.{jid}.out").read_text()
    assert rec["STAT"] == "DONE", out
    assert "script=0,1,2" in out                       # the submission's CUDA_VISIBLE_DEVICES=7 is not kept
    tasks = sorted(shown(out), key=lambda t: int(t["LSF_PM_TASKID"]))
    assert [(t["SUMMIT_JOBS_VNODE"], t["CUDA_VISIBLE_DEVICES"]) for t in tasks] == [
        (NODE1, "0,1,2"), (NODE1, "0,1,2"), (NODE2, "0,1,2")]
    record = json.loads((Path(env["SUMMIT_JOBS_LSF_HOME"]) / "jobs" / jid / "job.json").read_text())
    assert record["gpu"] == {"num": 3, "mode": "shared", "mps": "no", "j_exclusive": "yes",
                             "gmodel": "TeslaV100_SXM2_32GB", "gmem": 32000}


def test_gpu_defaults_and_a_job_without_gpu_gets_no_devices(tmp_path, lsf_env):
    env = dict(lsf_env, SUMMIT_JOBS_LSF_GPUS="2")
    jid, rec = submit_and_wait(tmp_path, env, """
        #BSUB -gpu -
        #BSUB -n 1
        #BSUB -o def.%J.out
        echo "gpus=${CUDA_VISIBLE_DEVICES-unset}"
        """)
    assert rec["STAT"] == "DONE" and "gpus=0\n" in (tmp_path / f"def.{jid}.out").read_text()
    jid, rec = submit_and_wait(tmp_path, env, """
        #BSUB -n 1
        #BSUB -o none.%J.out
        echo "gpus=${CUDA_VISIBLE_DEVICES-unset}"
        """)
    assert rec["STAT"] == "DONE" and "gpus=unset\n" in (tmp_path / f"none.{jid}.out").read_text()


def test_a_job_above_its_memory_limit_is_killed_with_term_memlimit(tmp_path, lsf_env):
    """-M 60MB (job-level, per host): a task holding 150 MB on the second host ends the job as LSF does."""
    jid, rec = submit_and_wait(tmp_path, lsf_env, f"""
        #BSUB -n 2
        #BSUB -R "span[ptile=1] rusage[mem=100]"
        #BSUB -M 60MB
        #BSUB -o mem.%J.out
        blaunch {NODE2} {PY} -c '"import time; x = bytearray(150 * 2**20); time.sleep(60)"'
        echo "blaunch-rc=$?"
        """)
    assert rec["STAT"] == "EXIT", (tmp_path / f"mem.{jid}.out").read_text()
    assert rec["EXIT_REASON"] == "TERM_MEMLIMIT: job killed after reaching LSF memory usage limit"
    record = json.loads((Path(lsf_env["SUMMIT_JOBS_LSF_HOME"]) / "jobs" / jid / "job.json").read_text())
    assert record["mem_limit_kb"] == 60 * 1024 and record["rusage_mem_mb"] == 100
    assert record["memory_kb_at_kill"][NODE2] > 60 * 1024


def test_a_job_within_its_memory_limit_and_a_known_app_profile_runs(tmp_path, lsf_env):
    env = dict(lsf_env, SUMMIT_JOBS_LSF_APPS="parallel-96, gpu")
    jid, rec = submit_and_wait(tmp_path, env, f"""
        #BSUB -M 2GB
        #BSUB -R "rusage[mem=1GB]"
        #BSUB -app parallel-96
        #BSUB -o ok.%J.out
        {PY} -c "x = bytearray(20 * 2**20); print('held', len(x))"
        """)
    assert rec["STAT"] == "DONE", (tmp_path / f"ok.{jid}.out").read_text()
    record = json.loads((Path(env["SUMMIT_JOBS_LSF_HOME"]) / "jobs" / jid / "job.json").read_text())
    assert (record["mem_limit_kb"], record["rusage_mem_mb"], record["app"]) == (2 * 1024 ** 2, 1024, "parallel-96")
    assert re.search(r"held \d+", (tmp_path / f"ok.{jid}.out").read_text())
