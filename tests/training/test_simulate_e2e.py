"""simulate end to end: V = 4 virtual nodes on p = 2 and p = 1 physical nodes give the weights of a real
4-node run, through the CLI -> embedded LSF -> jsrun -> trainer (real rank processes, fp32, CPU).

The real 4-node run (8 ranks) is made once per session (``real_four_node_run``): tests/schedulers/slurm/test_slurm_jobs.py
holds simulate on Slurm to the same run."""
import json
from pathlib import Path
from typing import Dict

import pytest

from conftest import shared_folder
from conftest_lsf import cli, lsf_environment, wait_state
from trainer_utils import make_dataset

from trainer.loop import checkpoint as ckpt

TINY = ["--width", "0.125", "--num-segments", "4", "--frame-stride", "2", "--input-size", "32", "--workers", "0",
        "--num-classes", "0", "--warmup-epochs", "0", "--eval-every", "0", "--no-test", "--threads", "1",
        "--ckpt-every-minutes", "0", "--log-every", "1", "--weight-decay", "0.01"]


def _params(run_dir, steps):
    state = ckpt.load(ckpt.latest(run_dir))
    assert state["step"] == steps
    return {k: v for k, v in state["model"].items() if "running" not in k and "num_batches" not in k}


#: What every run of this comparison is given besides its shape (the trainer's options follow "--").
COMMON = ["--epochs", "1", "--engine", "ddp", "--clips-per-gpu", "2", "--job-name", "acc"]
#: 64 clips / (8 virtual ranks x 2 clips) = 4 optimiser steps, the same global batch and LR in every shape.
STEPS = 4


def _real_four_node_run(root: Path) -> None:
    """The data (64 clips) in ``data`` and a real 4-node run (8 ranks, its own embedded LSF) in ``run``."""
    env = lsf_environment(root, minute=60)
    data = make_dataset(root / "data", train=64, val=0, frames=8, size=32)
    res = cli(["--machine", "local", "submit", "--nodes", "4", *COMMON, "--run-dir", str(root / "run"), "--json",
               "--", "--data", str(data), *TINY], env, timeout=120)
    assert res.returncode == 0, res.stderr
    job_id = json.loads(res.stdout)["job_ids"][0]
    state = wait_state(job_id, env, timeout=600)
    assert state["STAT"] == "DONE", (state, (root / "run" / f"acc.{job_id}.err").read_text()[-3000:])
    plan = json.loads((root / "run" / "plan.json").read_text())
    assert (plan["virtual_nodes"], plan["nodes"]) == (4, 4)


@pytest.fixture(scope="session")
def real_four_node_run(tmp_path_factory) -> Dict[str, Path]:
    """``{"data", "run"}``: the data and the real 4-node run every simulated shape is held to, made once per
    session for all workers (conftest.shared_folder)."""
    root = shared_folder(tmp_path_factory, "real-four-node-run", _real_four_node_run)
    return {"data": root / "data", "run": root / "run"}


@pytest.mark.slow
def test_simulated_runs_match_real_four_node_run(tmp_path, real_four_node_run):
    env = lsf_environment(tmp_path, minute=60)
    trainer = ["--", "--data", str(real_four_node_run["data"]), *TINY]
    jobs = {}
    for label, args in {
        "simulate p=2": ["simulate", "--virtual-nodes", "4", "--quota-nodes", "2"],
        "simulate p=1": ["simulate", "--virtual-nodes", "4", "--quota-nodes", "2", "--nodes", "1"],
    }.items():
        run_dir = tmp_path / label.replace(" ", "-").replace("=", "")
        res = cli(["--machine", "local", *args, *COMMON, "--run-dir", str(run_dir), "--json", *trainer], env,
                  timeout=120)
        assert res.returncode == 0, res.stderr
        out = json.loads(res.stdout)
        jobs[label] = (out["job_ids"][0], run_dir)
        assert "k = 4" in res.stderr if "p=1" in label else "k = 2" in res.stderr
    results = {"real 4 nodes": _params(real_four_node_run["run"], STEPS)}
    for label, (job_id, run_dir) in jobs.items():
        state = wait_state(job_id, env, timeout=600)
        assert state["STAT"] == "DONE", (label, state, (run_dir / f"acc.{job_id}.err").read_text()[-3000:])
        # The run record notes both shapes: 4 virtual nodes, and the physical node count of this job.
        plan = json.loads((run_dir / "plan.json").read_text())
        assert plan["virtual_nodes"] == 4
        assert plan["nodes"] == {"simulate p=2": 2, "simulate p=1": 1}[label]
        results[label] = _params(run_dir, STEPS)
    ref = results["real 4 nodes"]
    for label, params in results.items():
        worst = max((params[k] - ref[k]).abs().max().item() for k in ref)
        print(f"{label}: max abs weight difference to the real 4-node run {worst:.3g}")
        assert worst <= 1e-5, f"{label}: max abs difference {worst:g} to the real 4-node run"
    # The weights did move (non-zero momentum after 4 steps): agreement is not the trivial kind.
    opt = ckpt.load(ckpt.latest(real_four_node_run["run"]))["optimizer"]["state"]
    assert opt and max(v["momentum_buffer"].abs().max().item() for v in opt.values()) > 1e-6
