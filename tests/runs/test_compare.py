"""`summit-jobs compare`: a real 2-rank run and its simulated twin (1 rank, 2 accumulation steps) agree;
a twin trained with another LR does not, and compare names the first step and the tensor that differ.
(4 real ranks against 2 ranks x 2 steps, bit for bit: tests/training/test_accumulation.py, on its runs.)"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from trainer_utils import make_dataset, run_ranks, tiny_args

from helpers import run_cli


def _train(tmp, data, name: str, ranks: int, accum: int, lr: float = 0.05):
    run = tmp / name
    args = tiny_args(run, data, accum_steps=accum, batch_per_gpu=2, epochs=1, eval_every=0, lr=lr,
                     ckpt_every_steps=0) + ["--no-test"]
    run_ranks(ranks, args, tmp / f"logs-{name}", timeout=180)
    return run


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Three tiny DDP runs on CPU with seed 0 and global batch 4: real (2x1), simulated (1x2), other LR (1x2)."""
    tmp = tmp_path_factory.mktemp("compare")
    data = make_dataset(tmp / "data", train=16, val=0, frames=8, size=32)
    return {"real": _train(tmp, data, "real", 2, 1), "sim": _train(tmp, data, "sim", 1, 2),
            "lr": _train(tmp, data, "lr", 1, 2, lr=0.07)}


def test_simulated_twin_agrees_with_real_run(runs, cli_env):
    proc = run_cli(["compare", str(runs["real"]), str(runs["sim"])], cli_env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "same: max |dw|" in proc.stdout and "after 4 steps" in proc.stdout, proc.stdout
    assert "NO:" not in proc.stdout
    assert "Traceback" not in proc.stderr
    js = run_cli(["compare", str(runs["real"]), str(runs["sim"]), "--json"], cli_env, timeout=120)
    result = json.loads(js.stdout)
    assert result["agree"] and result["step"] == 4 and result["worst"]["abs"] <= 1e-5
    assert [r["step"] for r in result["steps"]] == [1, 2, 3, 4]
    assert all(r["global_batch"] == [4, 4] for r in result["steps"])
    assert result["max_loss_diff"] is not None and result["max_loss_diff"] <= 1e-5


def test_checkpoint_files_compare_like_their_runs(runs, cli_env):
    files = [sorted((runs[k] / "checkpoints").glob("ckpt-*.pt"))[-1] for k in ("real", "sim")]
    proc = run_cli(["compare", *map(str, files), "--json"], cli_env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["steps"], "a checkpoint under RUN/checkpoints finds its run's metrics"


def test_other_lr_differs_naming_step_and_tensor(runs, cli_env):
    proc = run_cli(["compare", str(runs["real"]), str(runs["lr"])], cli_env, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert "first difference at step 1 (lr 0.05 vs 0.07" in proc.stderr, proc.stderr
    assert "tensor " in proc.stderr and "differs most" in proc.stderr
    result = json.loads(run_cli(["compare", str(runs["real"]), str(runs["lr"]), "--json"], cli_env,
                                timeout=120).stdout)
    assert not result["agree"] and result["worst"]["tensor"] in result["reason"]


def test_tolerance_decides(runs, cli_env):
    """A tolerance above the difference accepts the other-LR run: the verdict follows --tolerance."""
    assert run_cli(["compare", str(runs["real"]), str(runs["lr"]), "--tolerance", "10"], cli_env,
                   timeout=120).returncode == 0


def test_compare_help_keeps_startup_torch_free():
    code = ("import sys; from click.testing import CliRunner; import summit_jobs.cli.main as m;"
            "r = CliRunner().invoke(m.cli.cli, ['compare', '--help']); assert r.exit_code == 0, r.output;"
            "print(sorted(x for x in sys.modules if x == 'torch' or x.startswith('torch.')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
