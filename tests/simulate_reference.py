"""The reference of the simulate tests: a real 4-node run (8 ranks) on the embedded LSF, which every
simulated shape, on the embedded LSF (tests/training/test_simulate_e2e.py) and on Slurm
(tests/schedulers/slurm/test_slurm_jobs.py), is held to. tests/conftest.py's ``real_four_node_run`` makes it
once per session."""
import json
from pathlib import Path

from lsf_jobs import cli, lsf_environment, wait_state
from trainer_utils import make_dataset

from trainer.loop import checkpoint as ckpt

TINY = ["--width", "0.125", "--num-segments", "4", "--frame-stride", "2", "--input-size", "32", "--workers", "0",
        "--num-classes", "0", "--warmup-epochs", "0", "--eval-every", "0", "--no-test", "--threads", "1",
        "--ckpt-every-minutes", "0", "--log-every", "1", "--weight-decay", "0.01"]


def params_after(run_dir, steps):
    state = ckpt.load(ckpt.latest(run_dir))
    assert state["step"] == steps
    return {k: v for k, v in state["model"].items() if "running" not in k and "num_batches" not in k}


#: What every run of this comparison is given besides its shape (the trainer's options follow "--").
COMMON = ["--epochs", "1", "--engine", "ddp", "--clips-per-gpu", "2", "--job-name", "acc"]
#: 64 clips / (8 virtual ranks x 2 clips) = 4 optimiser steps, the same global batch and LR in every shape.
STEPS = 4


def make_real_four_node_run(root: Path) -> None:
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
