"""Slurm for real: `summit-jobs submit --machine local-slurm` on the local Slurm cluster (2 nodes x 2 CPU ranks,
gloo), as a user submits, and status, logs and cancel on its runs.

What each test holds the Slurm path to:
- the tiny TSM trains under srun and under torchrun to the very weights it reaches on the embedded LSF (the
  jsrun path), with the same seed;
- a user's DDP script (tests/ddp_env_train.py), unmodified, gets env:// variables from trainer.rankenv and
  completes with the same weights on every rank;
- cancel ends a running job, status says so, and no process of the job is left on either node;
- simulate --virtual-nodes 4 on the 2 Slurm nodes (4 ranks, 2 accumulation steps) trains to the weights of a
  real 4-node run (8 ranks, on the embedded LSF: the test cluster has 2 nodes) within 1e-5, as on LSF.

The cluster is tests/slurm_cluster.py's (session fixture; skipped where Slurm cannot run, required in CI). A
chain until complete of 3 links stopped by the warning, and the other job-control checks every scheduler
passes, are tests/conformance/test_conformance.py's.
"""
from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List

import pytest
import torch

from lsf_jobs import cli, lsf_environment, wait_for, wait_state
from slurm_cluster import cluster_job_processes
from test_launchers import _trainer_args
from simulate_reference import COMMON as SIMULATE_COMMON, STEPS as SIMULATE_STEPS, TINY as SIMULATE_TINY, \
    params_after as simulated_params
from trainer_utils import REPO, make_dataset
from trainer.loop import checkpoint as ckpt
from summit_jobs.schedulers import FINISHED

#: What every run of the tiny TSM is given (the options test_launchers gives its jobs).
TRAINER = ["--epochs", "1", "--num-classes", "4", "--clips-per-gpu", "2", "--engine", "ddp", "--arch", "resnet18",
           "--lr", "0.1", "--warmup-epochs", "0"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("slurm-jobs") / "data", train=16, val=0, frames=4, size=32)


@pytest.fixture
def env(slurm_cluster, tmp_path) -> Dict[str, str]:
    """A user's shell: this test's own config, data and LSF folders, the cluster's SLURM_CONF, one thread a rank."""
    return slurm_cluster.env(dict(lsf_environment(tmp_path, minute=60), OMP_NUM_THREADS="1"))



def _weights(run_dir: Path):
    """The model of a run's newest checkpoint."""
    newest = sorted((run_dir / "checkpoints").glob("ckpt-*.pt"))[-1]
    return torch.load(newest, weights_only=True, map_location="cpu")["model"]


def submit(env: Dict[str, str], run_dir: Path, *args: str, machine: str = "local-slurm") -> str:
    res = cli(["--machine", machine, "submit", "--nodes", "2", "--run-dir", str(run_dir), "--json", *args], env,
              timeout=120)
    assert res.returncode == 0, res.stderr
    return str(json.loads(res.stdout)["job_ids"][0])


def status(env: Dict[str, str], run_dir: Path) -> List[Dict]:
    res = cli(["status", str(run_dir), "--json"], env, timeout=60)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def status_when(env: Dict[str, str], run_dir: Path, accept: Callable[[List[Dict]], bool], due: Callable[[], bool],
                timeout: float, what: str, every: float = 3.0) -> List[Dict]:
    """Status rows once ``accept`` takes them. ``summit-jobs status`` (a Python start-up, squeue and sacct) runs
    when ``due()`` says the awaited state may have come (a cheap look at the run directory) and otherwise
    every ``every`` seconds, instead of ten times a second: the polling itself took a core from the tests
    beside this one."""
    last = [float("-inf")]

    def probe():
        if not due() and time.monotonic() - last[0] < every:
            return None
        last[0] = time.monotonic()
        rows = status(env, run_dir)
        return rows if accept(rows) else None
    return wait_for(probe, timeout=timeout, what=what)


def exit_codes(run_dir: Path) -> int:
    """How many jobs of the run have ended through the script's finish (its exitcode.<job> file)."""
    return len(list(run_dir.glob("exitcode.*")))


def ended(env: Dict[str, str], run_dir: Path, timeout: float = 300) -> Dict:
    """The run's one job once status shows it ended."""
    rows = status_when(env, run_dir, lambda r: bool(r) and r[0]["state"] in FINISHED,
                       lambda: exit_codes(run_dir) >= 1, timeout, f"the job of {run_dir.name} to end")
    return rows[0]


def no_process_left(cluster, job_id: str) -> None:
    wait_for(lambda: not cluster_job_processes(cluster, job_id), timeout=30, what=f"every process of job {job_id} to end")


def output(run_dir: Path, name: str) -> str:
    return "".join(p.read_text() for p in sorted(run_dir.glob(f"{name}.*.*")))


def test_srun_and_torchrun_train_to_the_weights_of_the_embedded_lsf(slurm_cluster, env, tmp_path, data):
    lsf_run = tmp_path / "lsf-run"
    lsf_job = submit(env, lsf_run, *TRAINER, "--walltime", "30", "--job-name", "jsrun", "--",
                     *_trainer_args(data), machine="local")
    runs = {launcher: tmp_path / launcher for launcher in ("srun", "torchrun")}
    jobs = {launcher: submit(env, run_dir, *TRAINER, "--walltime", "0:30", "--launcher", launcher, "--job-name",
                             launcher, "--", *_trainer_args(data)) for launcher, run_dir in runs.items()}
    assert wait_state(lsf_job, env, timeout=300)["STAT"] == "DONE", output(lsf_run, "jsrun")
    reference = _weights(lsf_run)
    for launcher, run_dir in runs.items():
        row = ended(env, run_dir)
        text = output(run_dir, launcher)
        assert (row["state"], row["exit_code"], row["native_state"]) == ("done", 0, "COMPLETED"), text
        assert f"ranks started by {launcher}; rank 0 on node1, rendezvous host node1" in text, text
        assert "ddp engine, 4 ranks" in text
        weights = _weights(run_dir)
        differ = [k for k in reference if not torch.equal(weights[k], reference[k])]
        assert weights.keys() == reference.keys() and not differ, f"{launcher}: {differ[:3]} differ from jsrun's"
        script = (run_dir / "job.sbatch").read_text()
        assert "#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=2\n" in script and "#BSUB" not in script
        logs = cli(["logs", str(run_dir)], env, timeout=60)
        assert logs.returncode == 0 and f"ranks started by {launcher}" in logs.stdout, logs.stderr
        no_process_left(slurm_cluster, jobs[launcher])


def test_a_users_ddp_script_runs_unmodified_under_srun(slurm_cluster, env, tmp_path):
    run_dir = tmp_path / "ddp"
    script = tmp_path / "ddp_env_train.py"
    shutil.copy(REPO / "tests" / "ddp_env_train.py", script)
    job = submit(env, run_dir, "--walltime", "0:30", "--command", f"{sys.executable} {script} --steps 6")
    row = ended(env, run_dir)
    assert (row["state"], row["exit_code"]) == ("done", 0), output(run_dir, "ddp_env_train")
    assert (run_dir / "COMPLETE").read_text() == "step 6\n"
    ranks = [json.loads((run_dir / "ranks" / f"none.{r}.pid").read_text()) for r in range(4)]
    assert [(r["world"], r["local_rank"], r["group_rank"]) for r in ranks] == [
        (4, "0", "0"), (4, "1", "0"), (4, "0", "1"), (4, "1", "1")]
    weights = [torch.load(run_dir / "ranks" / f"none.{r}.pt", weights_only=True) for r in range(4)]
    assert all(torch.equal(w["weight"], weights[0]["weight"]) for w in weights[1:])
    no_process_left(slurm_cluster, job)


def test_status_and_cancel_of_a_running_slurm_job(slurm_cluster, env, tmp_path):
    """A torchrun link of docs/examples/user_train.py (its ranks save and exit 0 on scancel's TERM) cancelled
    while it trains: EXIT, cancelled, no traceback from torchrun's agent, nothing left running."""
    run_dir = tmp_path / "long"
    program = REPO / "docs" / "examples" / "user_train.py"
    job = submit(env, run_dir, "--walltime", "0:30", "--launcher", "torchrun", "--command",
                 f"{sys.executable} {program} --steps 100000 --step-seconds 0.2")
    running = status_when(env, run_dir, lambda r: r[0]["state"] == "running" and (r[0]["step"] or 0) >= 1,
                          lambda: False, 120, "the job to run its first step", every=1.0)[0]
    assert (running["job_id"], running["native_state"]) == (job, "RUNNING")
    assert len(cluster_job_processes(slurm_cluster, job)) >= 4
    res = cli(["cancel", str(run_dir)], env, timeout=60)
    assert res.returncode == 0, res.stderr
    assert job in res.stdout + res.stderr
    row = ended(env, run_dir, timeout=120)
    assert (row["state"], row["cancelled"], row["native_state"]) == ("cancelled", True, "CANCELLED"), row
    assert row["last_event"]["text"].startswith("cancelled (exit "), row
    logs = output(run_dir, "user_train")
    assert "Traceback" not in logs, logs[-4000:]
    no_process_left(slurm_cluster, job)
    again = cli(["cancel", str(run_dir)], env, timeout=60)
    assert again.returncode == 0 and "NOT killed" not in again.stderr, again.stderr


def test_simulate_on_two_slurm_nodes_matches_a_real_four_node_run(slurm_cluster, env, tmp_path, real_four_node_run):
    """V = 4 virtual nodes on p = 2 Slurm nodes (4 ranks x 2 accumulation steps) against a real 4-node run
    (8 ranks; the embedded LSF's, since the test cluster has 2 nodes: the one test_simulate_e2e holds LSF's
    simulate to), same data, seed and global batch: the weights after the epoch's 4 steps agree within 1e-5."""
    sim_dir = tmp_path / "simulate-2"
    sim = cli(["--machine", "local-slurm", "simulate", "--virtual-nodes", "4", "--quota-nodes", "2", "--walltime",
               "0:30", *SIMULATE_COMMON, "--json", "--run-dir", str(sim_dir), "--",
               "--data", str(real_four_node_run["data"]), *SIMULATE_TINY], env, timeout=120)
    assert sim.returncode == 0, sim.stderr
    assert "k = 2" in sim.stderr and "#SBATCH" not in sim.stdout
    row = ended(env, sim_dir)
    assert (row["state"], row["exit_code"], row["native_state"]) == ("done", 0, "COMPLETED"), output(sim_dir, "acc")
    plan = json.loads((sim_dir / "plan.json").read_text())
    assert (plan["scheduler"], plan["virtual_nodes"], plan["nodes"], plan["accum_steps"]) == ("slurm", 4, 2, 2)
    ref = simulated_params(real_four_node_run["run"], SIMULATE_STEPS)
    got = simulated_params(sim_dir, SIMULATE_STEPS)
    worst = max((got[k] - ref[k]).abs().max().item() for k in ref)
    assert got.keys() == ref.keys() and worst <= 1e-5, f"max abs difference {worst:g} to the real 4-node run"
    # The weights did move (non-zero momentum after 4 steps): agreement is not the trivial kind.
    state = ckpt.load(ckpt.latest(sim_dir))["optimizer"]["state"]
    assert state and max(v["momentum_buffer"].abs().max().item() for v in state.values()) > 1e-6


