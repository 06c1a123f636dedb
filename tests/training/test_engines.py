"""Where ranks and the rendezvous come from, and the Horovod -> DDP fallback."""
import os
import subprocess
import sys

import pytest

from trainer_utils import REPO, make_dataset, run_ranks, tiny_args

from trainer.dist.engines import launch_from_env, rendezvous_addr, rendezvous_port


def test_jsrun_variables_win_over_mpi_and_torchrun():
    env = {"JSM_NAMESPACE_RANK": "5", "JSM_NAMESPACE_SIZE": "12", "JSM_NAMESPACE_LOCAL_RANK": "1",
           "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1", "RANK": "3", "WORLD_SIZE": "4",
           "LSB_MCPU_HOSTS": "batch3 1 h22n07 42 h22n08 42", "LSB_JOBID": "779469"}
    l = launch_from_env(env)
    assert (l.rank, l.size, l.local_rank, l.local_size, l.source) == (5, 12, 1, 6, "jsrun")
    assert l.addr == "h22n07"  # first compute host; the launch node is skipped
    assert l.port == rendezvous_port({"LSB_JOBID": "779469"})


def test_mpi_then_torchrun_then_single():
    l = launch_from_env({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4",
                         "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"})
    assert (l.rank, l.size, l.local_rank, l.local_size, l.source) == (2, 4, 0, 2, "mpi")
    l = launch_from_env({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "n1",
                         "MASTER_PORT": "1234"})
    assert (l.rank, l.size, l.local_rank, l.addr, l.port, l.source) == (1, 2, 1, "n1", 1234, "torchrun")
    l = launch_from_env({})
    assert (l.rank, l.size, l.source, l.port) == (0, 1, "single", 29500)
    with pytest.raises(ValueError):
        launch_from_env({"JSM_NAMESPACE_RANK": "4", "JSM_NAMESPACE_SIZE": "4"})


def test_rendezvous_address_sources():
    assert rendezvous_addr({"SUMMIT_JOBS_RENDEZVOUS_ADDR": "127.0.0.1", "LSB_HOSTS": "batch1 a a b"}) == "127.0.0.1"
    # LSB_MCPU_HOSTS, not LSB_HOSTS (dropped by LSF above 4,096 bytes; its order need not match).
    assert rendezvous_addr({"LSB_HOSTS": "a12n02 login2 a12n01", "LSB_MCPU_HOSTS": "login2 1 a12n01 2 a12n02 1"}) \
        == "a12n01"
    assert rendezvous_addr({"LSB_MCPU_HOSTS": "batch1 1 h1 42"}) == "h1"


def test_port_is_derived_from_the_job_id():
    ports = {rendezvous_port({"LSB_JOBID": str(j)}) for j in range(1000, 1100)}
    assert len(ports) == 100 and all(20000 <= p < 40000 and p % 2 == 0 for p in ports)  # p and p+1 per job
    assert rendezvous_port({"SUMMIT_JOBS_RENDEZVOUS_PORT": "31000"}) == 31000


def test_falls_back_to_ddp_when_horovod_is_missing(tmp_path):
    """A real run with an import path where 'horovod' cannot be imported."""
    blocker = tmp_path / "block" / "horovod"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('horovod blocked for this test')\n")
    data = make_dataset(tmp_path / "data", train=8, val=0)
    args = tiny_args(tmp_path / "run", data, engine="horovod", max_steps=2, eval_every=0) + ["--no-test"]
    run_ranks(2, args, tmp_path / "logs", timeout=120,
              extra_env={"PYTHONPATH": f"{tmp_path / 'block'}{os.pathsep}{REPO}"})
    log0 = (tmp_path / "logs" / "rank0.log").read_text()
    assert log0.count("falling back to torch.distributed") == 1
    assert "ddp engine, 2 ranks" in log0
    assert "falling back" not in (tmp_path / "logs" / "rank1.log").read_text()  # said once, by rank 0


def test_the_trainer_never_imports_summit_jobs():
    code = ("import sys, trainer.loop.train, trainer.dist.engines, trainer.data.datasets; "
            "sys.exit(any(m == 'summit_jobs' or m.startswith('summit_jobs.') for m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code], cwd=str(REPO), timeout=60).returncode == 0
