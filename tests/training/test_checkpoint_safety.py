"""Checkpoints are data: reading one never runs code, a bad one ends the trainer with one clear line.

A checkpoint is a pickle, and a pickle may name any function to call while it
is read; run directories are shared and copied, so the trainer reads them with
``weights_only=True`` and keeps only tensors and plain values in them.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import time

import numpy as np
import pytest
import torch

from badinput import assert_refused, run_module, trainer_env
from trainer_utils import REPO, run_ranks, start_ranks, tiny_args, wait_ranks

from trainer.loop import checkpoint as ckpt
from trainer.loop.train import rng_states, set_rng_states


class RunsCode:
    """Unpickling this creates a folder: proof that code ran."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


DATA_SHAPE = dict(train=8, val=0, frames=4, size=32)  # the ``data`` fixture's set (conftest.py)


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


# -- interrupted and failed saves ------------------------------------------------------------

LEFTOVERS = ("checkpoints/.ckpt-000000002.pt.tmp4242", "checkpoints/.epoch-0000.pt.tmp17",
             "checkpoints/.best.pt.tmp999999", ".run_config.json.tmp31337", ".COMPLETE.tmp8")


def final_names(run):
    """Files under the names a reader trusts."""
    d = ckpt.ckpt_dir(run)
    return sorted(p.name for p in d.iterdir() if not p.name.startswith(".")) if d.is_dir() else []


def temporaries(run):
    return sorted(str(p.relative_to(run)) for p in run.rglob(".*.tmp*"))


def test_leftovers_of_a_killed_run_are_removed_and_others_files_kept(data, tmp_path):
    """A run started over a killed run's temporaries removes them (the trainer's own names only), keeps other
    programs' files, and completes; what it saved loads with weights_only (numpy and python RNG states,
    options included): checkpoints are data."""
    run = tmp_path / "run"
    for name in LEFTOVERS:
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_bytes(b"half written")
    foreign = [run / ".run.json.tmp77", run / "notes.txt", run / "checkpoints" / "README"]
    for p in foreign:
        p.write_text("not the trainer's\n")
    run_ranks(1, tiny_args(run, data, epochs=1) + ["--no-test"], tmp_path / "logs", timeout=120)
    assert temporaries(run) == [".run.json.tmp77"]
    assert all(p.exists() for p in foreign) and (run / "COMPLETE").exists()
    state = torch.load(ckpt.latest(run), map_location="cpu", weights_only=True)
    assert state["args"]["epochs"] == 1 and isinstance(state["rng"]["numpy"]["keys"], list)


@pytest.fixture
def small_fs(tmp_path):
    """A real 512 KiB file system (tmpfs): a checkpoint of the tiny model (about 1.5 MB) does not fit."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mnt)], capture_output=True,
                         text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({res.stderr.strip()}): the full-disk case needs one")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_full_disk_during_a_save_leaves_no_file_and_one_clear_line(data, tmp_path, small_fs):
    run = small_fs / "run"
    args = tiny_args(run, data, epochs=1) + ["--no-test"]
    res = run_module("trainer", args, trainer_env(), cwd=str(REPO))
    assert_refused(res, ["No space left on device", str(ckpt.step_path(run, 4))], prefix="trainer: cannot write")
    assert final_names(run) == [] and temporaries(run) == []
    assert not (run / "COMPLETE").exists()
    # Room again: the same command finishes.
    subprocess.run(["mount", "-o", "remount,size=16m", str(small_fs)], check=True)
    run_ranks(1, args, tmp_path / "logs", timeout=120)
    assert (run / "COMPLETE").exists() and temporaries(run) == []


def test_kill_9_during_saves_then_the_rerun_resumes_cleanly(data, tmp_path):
    """SIGKILL the moment a checkpoint temporary appears (a save is under way), three times; every file
    under a final name still loads, and the next run cleans up, resumes and finishes."""
    run = tmp_path / "run"
    args = tiny_args(run, data, epochs=12, ckpt_every_steps=1) + ["--no-test"]
    caught = 0
    for attempt in range(3):
        before = ckpt.latest(run)
        (proc,) = start_ranks(1, args, tmp_path / f"logs{attempt}")
        deadline = time.time() + 90
        while time.time() < deadline and proc.poll() is None and ckpt.latest(run) == before:
            time.sleep(0.02)  # start-up: no save of this launch to catch before its first checkpoint
        while time.time() < deadline and proc.poll() is None:
            names = os.listdir(ckpt.ckpt_dir(run)) if ckpt.ckpt_dir(run).is_dir() else []
            if any(n.startswith("ckpt-") for n in names) and any(n.startswith(".ckpt-") for n in names):
                break  # a save under way, with an earlier checkpoint to resume from
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        caught += any(".ckpt-" in t for t in temporaries(run))
        for name in final_names(run):
            ckpt.load(ckpt.ckpt_dir(run) / name)  # whole, or not there at all
    assert caught, "no kill landed inside a save"
    run_ranks(1, args, tmp_path / "logs", timeout=150)
    assert (run / "COMPLETE").exists() and temporaries(run) == []
    text = (tmp_path / "logs" / "rank0.log").read_text()
    assert "resumed from" in text and "left by an interrupted run" in text


def test_a_full_disk_on_two_ranks_ends_every_rank_with_one_line(data, tmp_path, small_fs):
    """Rank 0 says what failed; rank 1, cut off in its next allreduce, says that another rank ended."""
    run = small_fs / "run"
    procs = start_ranks(2, tiny_args(run, data, epochs=2) + ["--no-test"], tmp_path / "logs")
    codes = wait_ranks(procs, tmp_path / "logs", timeout=120)
    assert all(c != 0 for c in codes), codes
    rank0, rank1 = ((tmp_path / "logs" / f"rank{r}.log").read_text() for r in (0, 1))
    assert "Traceback" not in rank0 + rank1, rank0 + rank1
    assert "trainer: cannot write checkpoint" in rank0 and "No space left on device" in rank0
    assert "trainer: rank 1 of 2 stops: another rank ended" in rank1, rank1
    assert final_names(run) == [] and temporaries(run) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGUSR2], ids=lambda s: s.name)
def test_each_stop_signal_after_start_up_saves_and_exits_0(data, tmp_path, sig):
    """IBM LSF's bkill sends SIGINT first: like TERM and the warning's USR2 it asks for a checkpoint,
    not a traceback (KeyboardInterrupt) and not a signal that is swallowed while training goes on."""
    run = tmp_path / "run"
    (proc,) = start_ranks(1, tiny_args(run, data, epochs=500) + ["--no-test"], tmp_path / "logs")
    deadline = time.time() + 90
    while ckpt.latest(run) is None and "epoch 1/500 step 2/" not in (tmp_path / "logs" / "rank0.log").read_text():
        assert time.time() < deadline and proc.poll() is None, (tmp_path / "logs" / "rank0.log").read_text()
        time.sleep(0.05)
    proc.send_signal(sig)
    assert wait_ranks([proc], tmp_path / "logs", timeout=60) == [0]
    text = (tmp_path / "logs" / "rank0.log").read_text()
    assert f"signal {sig.name}" in text and "checkpoint saved" in text and "Traceback" not in text
    assert ckpt.latest(run) is not None and not (run / "COMPLETE").exists()
