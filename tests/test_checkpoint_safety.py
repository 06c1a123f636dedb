"""Checkpoints are data: reading one never runs code, a bad one ends the trainer with one clear line.

A checkpoint is a pickle, and a pickle may name any function to call while it
is read; run directories are shared and copied, so the trainer reads them with
``weights_only=True`` and keeps only tensors and plain values in them.
"""
from __future__ import annotations

import os
import random

import numpy as np
import pytest
import torch

from badinput import assert_refused, run_module
from trainer_utils import REPO, make_dataset, run_ranks, tiny_args

from trainer import checkpoint as ckpt
from trainer.train import rng_states, set_rng_states


class RunsCode:
    """Unpickling this creates a folder: proof that code ran."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("safety") / "data", train=8, val=0, frames=4, size=32)


def trainer_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JSM_", "OMPI_", "LSB_", "HOROVOD_"))}
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    return env


def plant(run, name, obj=None, raw=None):
    d = ckpt.ckpt_dir(run)
    d.mkdir(parents=True, exist_ok=True)
    path = d / name
    if raw is not None:
        path.write_bytes(raw)
    else:
        torch.save(obj, path)
    return path


def test_a_checkpoint_that_runs_code_is_refused_without_running_it(data, tmp_path):
    run, marker = tmp_path / "run", tmp_path / "pwned"
    path = plant(run, "ckpt-000000005.pt", {"model": RunsCode(marker), "step": 5})
    res = run_module("trainer", tiny_args(run, data, epochs=1) + ["--no-test"], trainer_env(), cwd=str(REPO))
    assert_refused(res, [str(path), "refusing to load"], prefix="trainer: ")
    assert not marker.exists()


@pytest.mark.parametrize("raw", [b"", b"not a zip file at all" * 4], ids=["empty", "garbage"])
def test_an_unreadable_checkpoint_is_named(data, tmp_path, raw):
    run = tmp_path / "run"
    path = plant(run, "ckpt-000000003.pt", raw=raw)
    res = run_module("trainer", tiny_args(run, data, epochs=1) + ["--no-test"], trainer_env(), cwd=str(REPO))
    assert_refused(res, [str(path), "not a readable checkpoint"], prefix="trainer: ")


def test_saved_checkpoints_load_as_data_only(data, tmp_path):
    """What the trainer writes passes weights_only (numpy and python RNG states, options included)."""
    run = tmp_path / "run"
    run_ranks(1, tiny_args(run, data, epochs=1) + ["--no-test"], tmp_path / "logs", timeout=120)
    state = torch.load(ckpt.latest(run), map_location="cpu", weights_only=True)
    assert state["args"]["epochs"] == 1 and isinstance(state["rng"]["numpy"]["keys"], list)


def test_rng_states_round_trip_through_a_checkpoint(tmp_path):
    random.seed(3)
    np.random.seed(4)
    torch.manual_seed(5)
    np.random.normal()  # a cached gaussian in numpy's state
    path = tmp_path / "rng.pt"
    torch.save({"rng": rng_states()}, path)
    want = (random.random(), np.random.normal(), np.random.rand(), torch.rand(1).item())
    set_rng_states(ckpt.load(path)["rng"])
    assert (random.random(), np.random.normal(), np.random.rand(), torch.rand(1).item()) == want
