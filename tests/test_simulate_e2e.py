"""simulate end to end: V = 4 virtual nodes on p = 2 and p = 1 physical nodes give the weights of a real
4-node run, through the CLI -> embedded LSF -> jsrun -> trainer (real rank processes, fp32, CPU)."""
import json

import pytest

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


@pytest.mark.slow
def test_simulated_runs_match_real_four_node_run(tmp_path):
    env = lsf_environment(tmp_path, minute=60)
    data = make_dataset(tmp_path / "data", train=64, val=0, frames=8, size=32)
    common = ["--epochs", "1", "--engine", "ddp", "--clips-per-gpu", "2", "--job-name", "acc"]
    trainer = ["--", "--data", str(data), *TINY]
    jobs = {}
    for label, args in {
        "real 4 nodes": ["submit", "--nodes", "4"],
        "simulate p=2": ["simulate", "--virtual-nodes", "4", "--quota-nodes", "2"],
        "simulate p=1": ["simulate", "--virtual-nodes", "4", "--quota-nodes", "2", "--nodes", "1"],
    }.items():
        run_dir = tmp_path / label.replace(" ", "-").replace("=", "")
        res = cli(["--machine", "local", *args, *common, "--run-dir", str(run_dir), "--json", *trainer], env,
                  timeout=120)
        assert res.returncode == 0, res.stderr
        out = json.loads(res.stdout)
        jobs[label] = (out["job_ids"][0], run_dir)
        if label.startswith("simulate"):
            assert "k = 4" in res.stderr if "p=1" in label else "k = 2" in res.stderr
    # The three jobs queue for the 4 virtual nodes and run one after another.
    results = {}
    for label, (job_id, run_dir) in jobs.items():
        state = wait_state(job_id, env, timeout=600)
        assert state["STAT"] == "DONE", (label, state, (run_dir / f"acc.{job_id}.err").read_text()[-3000:])
        # The run record notes both shapes: 4 virtual nodes, and the physical node count of this job.
        plan = json.loads((run_dir / "plan.json").read_text())
        assert plan["virtual_nodes"] == 4
        assert plan["nodes"] == {"real 4 nodes": 4, "simulate p=2": 2, "simulate p=1": 1}[label]
        # 64 clips / (8 virtual ranks x 2 clips) = 4 optimiser steps, the same global batch and LR in all three.
        results[label] = _params(run_dir, 4)
    ref = results["real 4 nodes"]
    for label, params in results.items():
        worst = max((params[k] - ref[k]).abs().max().item() for k in ref)
        print(f"{label}: max abs weight difference to the real 4-node run {worst:.3g}")
        assert worst <= 1e-5, f"{label}: max abs difference {worst:g} to the real 4-node run"
    # The weights did move (non-zero momentum after 4 steps): agreement is not the trivial kind.
    opt = ckpt.load(ckpt.latest(jobs["real 4 nodes"][1]))["optimizer"]["state"]
    assert opt and max(v["momentum_buffer"].abs().max().item() for v in opt.values()) > 1e-6
