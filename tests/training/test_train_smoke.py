"""A few real training steps reduce the loss; frame sampling, LR schedule and the command line."""
import subprocess
import sys

import numpy as np
import pytest

from trainer_utils import REPO, make_dataset, run_ranks, tiny_args

from trainer.data.clips import eval_frame_indices, train_frame_indices
from trainer.config import parse
from trainer.loop.metrics import read_metrics
from trainer.loop.train import lr_at


def test_a_few_steps_reduce_the_loss(tmp_path):
    data = make_dataset(tmp_path / "data", train=8, val=4)
    run = tmp_path / "run"
    args = tiny_args(run, data, epochs=20, batch_per_gpu=8, lr=0.05, width=0.25, eval_every=0) + \
        ["--no-test", "--no-flip"]
    run_ranks(1, args, tmp_path / "logs", timeout=120)
    losses = [r["loss"] for r in read_metrics(run) if r["kind"] == "train"]
    assert len(losses) == 20
    assert np.mean(losses[-3:]) < 0.75 * np.mean(losses[:3]), losses
    assert (run / "COMPLETE").exists()


def test_dense_sampling():
    rng = np.random.default_rng(0)
    for _ in range(20):
        idx = train_frame_indices(300, 8, "dense", 8, rng)
        assert np.all(np.diff(idx) == 8) and 0 <= idx[0] <= 300 - 64
    # short video: clamped to its last frame
    assert train_frame_indices(20, 8, "dense", 8, rng) == [0, 8, 16, 19, 19, 19, 19, 19]
    starts = [eval_frame_indices(300, 8, "dense", 8, c, 10)[0] for c in range(10)]
    assert starts[0] == 0 and starts[-1] == 300 - 64 and starts == sorted(starts)


def test_uniform_sampling():
    rng = np.random.default_rng(1)
    idx = train_frame_indices(80, 8, "uniform", 8, rng)
    assert all(10 * i <= f < 10 * (i + 1) for i, f in enumerate(idx))
    assert eval_frame_indices(80, 8, "uniform", 8, 0, 1) == [5 + 10 * i for i in range(8)]
    assert max(train_frame_indices(3, 8, "uniform", 8, rng)) <= 2


def test_lr_schedule_warmup_then_cosine():
    base, warm, total = 1.0, 50, 500
    lrs = [lr_at(s, base, warm, total) for s in range(total)]
    assert lrs[0] == pytest.approx(base / warm) and lrs[warm - 1] == pytest.approx(base)
    assert all(np.diff(lrs[:warm]) > 0) and all(np.diff(lrs[warm:]) < 0)
    assert lrs[warm + (total - warm) // 2] == pytest.approx(base / 2, rel=1e-2) and lrs[-1] < 1e-3


def test_command_line_defaults_are_the_papers_recipe(monkeypatch):
    monkeypatch.setenv("SUMMIT_JOBS_NVME", "/mnt/bb/me")
    a = parse(["--run-dir", "r", "--data", "$SUMMIT_JOBS_NVME/summit-jobs/data", "--epochs", "7", "--epochs", "9"])
    assert a.data == "/mnt/bb/me/summit-jobs/data" and a.epochs == 9  # the last repeat wins
    assert (a.batch_per_gpu, a.warmup_epochs, a.momentum, a.weight_decay, a.dropout, a.num_segments) == \
        (8, 5.0, 0.9, 1e-4, 0.0, 8)
    assert a.lr is None and a.sampling == "dense" and a.test_clips == 10 and a.test_last == 5


def test_help_and_missing_data():
    out = subprocess.run([sys.executable, "-m", "trainer", "--help"], cwd=str(REPO), capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and "--accum-steps" in out.stdout and "SIGUSR2" in out.stdout
    out = subprocess.run([sys.executable, "-m", "trainer", "--run-dir", "/tmp/x-none"], cwd=str(REPO),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "--data DIR is required" in out.stderr
