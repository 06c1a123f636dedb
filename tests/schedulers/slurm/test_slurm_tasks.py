"""The trainer's contract with Slurm: a rank srun started knows its rank, its node's ranks, the job's id and the
first node, from Slurm's own variables (trainer.slurm_tasks, read by trainer.rankenv and the engines).

Why as tests: ``torch.distributed``'s env:// reads RANK, WORLD_SIZE, LOCAL_RANK and MASTER_ADDR, which srun does
not set; a job script that started the trainer under srun would otherwise run every task as a world of one.
The pure cases pin the readings of srun(1)'s variables (values as the local Slurm 22.05 cluster gives them);
the last tests run the real srun and sbatch on that cluster.
"""
from __future__ import annotations

import json
import os
import sys

import pytest

from slurm_cluster import sbatch, wait_job
from trainer import rankenv, rundir, slurm_tasks, stage

#: What srun gave task 2 of ``srun -N2 -n4`` in job 1 (captured on the local cluster), less what no reader reads.
TASK_2 = {"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "node[1-2]", "SLURM_STEP_ID": "0", "SLURM_PROCID": "2",
          "SLURM_LOCALID": "0", "SLURM_NODEID": "1", "SLURM_NTASKS": "4", "SLURM_STEP_NUM_TASKS": "4",
          "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_TASKS_PER_NODE": "2(x2)"}
#: The batch script's own variables: SLURM_PROCID=0 and the job's task count, but no step.
BATCH = {"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "node[1-2]", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
         "SLURM_NODEID": "0", "SLURM_NTASKS": "4", "SLURM_TASKS_PER_NODE": "2(x2)"}


@pytest.mark.parametrize("text,hosts", [("node[1-2]", "node1"), ("nid[001234-001240,001300],gpu7", "nid001234"),
                                        ("login3,node[4-5]", "login3"), ("gpu-a[07-08]-x", "gpu-a07-x"),
                                        ("single", "single"), ("", None)])
def test_first_host_is_the_one_scontrol_show_hostnames_prints_first(text, hosts):
    assert slurm_tasks.first_host(text) == hosts


@pytest.mark.parametrize("text,counts", [("2(x2)", [2, 2]), ("4(x3),1", [4, 4, 4, 1]), ("8", [8]),
                                         ("", []), ("2(x)", [])])
def test_tasks_per_node_expand_slurms_counts(text, counts):
    assert slurm_tasks.tasks_per_node(text) == counts


def test_a_task_of_an_srun_step_is_a_rank_of_the_step():
    assert rankenv.launcher_ranks(TASK_2) == (2, 4, 0, 2, "srun")
    uneven = dict(TASK_2, SLURM_PROCID="4", SLURM_LOCALID="0", SLURM_NODEID="1", SLURM_STEP_NUM_TASKS="5",
                  SLURM_STEP_TASKS_PER_NODE="4,1")
    assert rankenv.launcher_ranks(uneven) == (4, 5, 0, 1, "srun")


def test_the_batch_script_itself_is_no_rank_and_torchrun_workers_are_torchruns():
    assert rankenv.launcher_ranks(BATCH)[4] == "single"
    worker = dict(TASK_2, SLURM_PROCID="1", RANK="3", WORLD_SIZE="4", LOCAL_RANK="1", LOCAL_WORLD_SIZE="2")
    assert rankenv.launcher_ranks(worker) == (3, 4, 1, 2, "torchrun")


def test_env_variables_of_an_srun_task():
    env = rankenv.torchrun_variables(TASK_2)
    assert {k: env[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                                "GROUP_WORLD_SIZE", "MASTER_ADDR")} == {
        "RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
        "GROUP_WORLD_SIZE": "2", "MASTER_ADDR": "node1"}
    assert env["MASTER_PORT"] == str(rankenv.derived_port({"SLURM_JOB_ID": "1"})) != "29500"
    kept = rankenv.torchrun_variables(dict(TASK_2, MASTER_ADDR="node9", MASTER_PORT="4242"))
    assert (kept["MASTER_ADDR"], kept["MASTER_PORT"]) == ("node9", "4242")


def test_the_job_id_is_lsfs_or_slurms(monkeypatch):
    assert rankenv.job_id({"SLURM_JOB_ID": "77"}) == "77"
    assert rankenv.job_id({"LSB_JOBID": "5", "SLURM_JOB_ID": "77"}) == "5"
    assert rankenv.job_id({"SLURM_JOB_ID": "x"}) == ""
    monkeypatch.delenv("LSB_JOBID", raising=False)
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    assert rundir.job_id() == "77"
    assert rundir.warning_name(rundir.job_id()) == ".warning.77"


def test_a_staging_task_of_a_step_knows_its_node(monkeypatch):
    for var in ("JSM_NAMESPACE_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "LSF_PM_TASKID"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("SLURM_NODEID", "1")
    monkeypatch.delenv("SLURM_STEP_ID", raising=False)
    with pytest.raises(stage.StageError, match="no node index"):
        stage.node_index(None, 2)
    monkeypatch.setenv("SLURM_STEP_ID", "3")
    assert stage.node_index(None, 2) == 1


# ---- on the real cluster ------------------------------------------------------------------------------------

PRINT_ENV = ("import json, os; print('ENV ' + json.dumps({k: os.environ[k] for k in ('RANK', 'WORLD_SIZE', "
             "'LOCAL_RANK', 'LOCAL_WORLD_SIZE', 'GROUP_RANK', 'MASTER_ADDR', 'MASTER_PORT')}), flush=True)")


def _ranks(text: str):
    return sorted((json.loads(line[4:]) for line in text.splitlines() if line.startswith("ENV ")),
                  key=lambda r: int(r["RANK"]))


def test_rankenv_under_the_real_srun_gives_each_task_its_env_variables(slurm_cluster, tmp_path):
    env = slurm_cluster.env(dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    job = slurm_cluster.run(["srun", "-N2", "--ntasks-per-node=2", sys.executable, "-m", "trainer.rankenv",
                             sys.executable, "-c", PRINT_ENV], env=env, timeout=120)
    assert job.returncode == 0, job.stderr
    ranks = _ranks(job.stdout)
    assert [(r["RANK"], r["WORLD_SIZE"], r["LOCAL_RANK"], r["LOCAL_WORLD_SIZE"], r["GROUP_RANK"]) for r in ranks] == [
        ("0", "4", "0", "2", "0"), ("1", "4", "1", "2", "0"), ("2", "4", "0", "2", "1"), ("3", "4", "1", "2", "1")]
    assert {r["MASTER_ADDR"] for r in ranks} == {"node1"} and len({r["MASTER_PORT"] for r in ranks}) == 1


def test_node_names_resolve_inside_a_job(slurm_cluster, tmp_path):
    """The test cluster's nodes resolve each other's names (a hosts file of their own), as a real cluster's do:
    the ranks dial the first node by name."""
    out = tmp_path / "hosts.out"
    script = tmp_path / "resolve.sh"
    script.write_text("#!/bin/bash\nsrun -N2 --ntasks-per-node=1 getent hosts node1 node2\n")
    job_id = sbatch(slurm_cluster, f"--output={out}", "-N2", str(script), cwd=tmp_path)
    assert wait_job(slurm_cluster, job_id, timeout=60)["job_state"] == "COMPLETED", out.read_text()
    lines = sorted(set(out.read_text().split("\n")) - {""})
    assert [line.split() for line in lines] == [["127.0.1.1", "node1"], ["127.0.1.2", "node2"]]
