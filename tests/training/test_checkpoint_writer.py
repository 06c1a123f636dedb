"""Background checkpoint writes: the file holds the state as it was asked for, writes never overlap,
the folder ends as synchronous saves leave it, and a failed write is raised in the caller, once.

Real files and real ``torch.save`` throughout; the failures are real ones (a
full tmpfs, the kernel's file-size limit), never a patched ``open``.
"""
from __future__ import annotations

import copy
import json
import subprocess
import sys
import threading
import time
from collections import OrderedDict

import pytest
import torch

from trainer_utils import REPO

from trainer.loop import checkpoint as ckpt
from trainer.loop.checkpoint import CheckpointError
from trainer.loop.ckptwriter import CheckpointWriter, cpu_copy


def real_state(floats: int = 1 << 16, step: int = 1):
    """A model's and a stepped optimiser's state as the trainer builds it, with ``floats`` weights or more."""
    torch.manual_seed(step)
    model = torch.nn.Sequential(torch.nn.Linear(floats // 64, 64), torch.nn.BatchNorm1d(64))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(4, floats // 64)).square().mean().backward()
    opt.step()
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step,
             "rng": {"torch": torch.get_rng_state(), "python": {"state": [1, 2, 3], "gauss": None}},
             "args": {"arch": "resnet50", "lr_steps": [30, 60]}, "pair": (torch.arange(3), "x")}
    return model, opt, state


def same(a, b) -> bool:
    """Equal values of the same types, tensors bit for bit, mappings with the same attributes."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return (list(a) == list(b) and all(same(a[k], b[k]) for k in a)
                and getattr(a, "__dict__", {}) == getattr(b, "__dict__", {}))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def listing(run):
    return sorted(p.name for p in ckpt.ckpt_dir(run).iterdir())


def temporaries(root):
    return sorted(str(p) for p in root.rglob(".*.tmp*"))


def test_cpu_copy_shares_no_tensor_or_container_and_keeps_types_and_metadata():
    _, _, state = real_state()
    state["again"] = state["pair"][0]  # one tensor met twice stays one tensor
    snap = cpu_copy(state)
    assert same(snap, state) and type(snap["model"]) is OrderedDict
    assert snap["model"]._metadata == state["model"]._metadata
    assert snap["again"] is snap["pair"][0]
    for k, t in state["model"].items():
        assert snap["model"][k].data_ptr() != t.data_ptr()
    assert snap["args"]["lr_steps"] is not state["args"]["lr_steps"]


def test_changes_after_submit_do_not_reach_the_file(tmp_path):
    """The optimiser steps the moment submit returns; the file still holds the step that was asked for."""
    model, opt, state = real_state(floats=1 << 22)  # 16 MB of weights: the write is still going on below
    expected = copy.deepcopy(state)
    w = CheckpointWriter()
    path = w.submit(tmp_path / "run", state, 1, keep=2)
    model(torch.randn(4, model[0].in_features)).sum().backward()
    opt.step()  # in place: parameters, and momentum buffers the state dict points at
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    state["rng"]["python"]["state"].append(99)
    state["args"]["arch"] = "changed"
    assert w.wait() == path
    saved = ckpt.load(path)
    assert same(saved, expected), "the file holds values changed after submit"
    assert not same(saved["model"], state["model"])  # the changes above did happen to the original


SEQUENCE = [  # (step, epoch_end, best)
    (2, None, False), (4, 0, True), (6, None, False), (8, 1, False), (10, None, False), (12, 2, True),
    (14, 3, False)]


def test_writes_follow_each_other_and_the_folder_ends_as_with_synchronous_saves(tmp_path):
    runs, prev = (tmp_path / "async", tmp_path / "sync"), None
    states = [real_state(floats=1 << 20, step=step)[2] for step, _, _ in SEQUENCE]  # 8 MB: a write takes a while
    for state, (step, epoch_end, best) in zip(states, SEQUENCE):
        ckpt.save(runs[1], state, step, keep=2, epoch_end=epoch_end, keep_epochs=2, best=best)
    w = CheckpointWriter()
    for state, (step, epoch_end, best) in zip(states, SEQUENCE):
        w.submit(runs[0], state, step, keep=2, epoch_end=epoch_end, keep_epochs=2, best=best)
        if prev is not None:  # submit waited: the previous write is done, under its final name
            assert ckpt.load(ckpt.step_path(runs[0], prev))["step"] == prev
        prev = step
    w.close()
    assert listing(runs[0]) == listing(runs[1]) == [
        "best.pt", "ckpt-000000012.pt", "ckpt-000000014.pt", "epoch-0002.pt", "epoch-0003.pt"]
    for name in listing(runs[1]):
        assert same(ckpt.load(runs[0] / "checkpoints" / name), ckpt.load(runs[1] / "checkpoints" / name)), name
    assert ckpt.load(runs[0] / "checkpoints" / "best.pt")["step"] == 12
    assert temporaries(tmp_path) == []


def test_close_without_writes_twice_and_submit_after_close(tmp_path):
    threads = threading.active_count()
    w = CheckpointWriter()
    assert w.close() is None and w.close() is None and w.wait() is None
    assert threading.active_count() == threads  # nothing was started
    with pytest.raises(RuntimeError, match="after close"):
        w.submit(tmp_path, {"step": 1}, 1, keep=1)
    with CheckpointWriter() as w2:
        w2.submit(tmp_path, {"step": 3}, 3, keep=1)
    assert not w2.busy() and ckpt.latest(tmp_path).name == "ckpt-000000003.pt"


@pytest.fixture
def small_fs(tmp_path):
    """A real 1 MiB file system (tmpfs): a 2 MB checkpoint does not fit."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True,
                         text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({res.stderr.strip()}); the file-size-limit test covers this")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_full_disk_is_raised_once_as_the_synchronous_save_raises_it(small_fs):
    run, big, small = small_fs / "run", {"w": torch.zeros(1 << 19)}, {"w": torch.zeros(4)}
    with pytest.raises(CheckpointError) as sync:
        ckpt.save(run, big, 2, keep=2)
    assert "No space left on device" in str(sync.value) and str(ckpt.step_path(run, 2)) in str(sync.value)
    w = CheckpointWriter()
    w.submit(run, big, 2, keep=2)
    with pytest.raises(CheckpointError) as bg:
        w.wait()
    assert type(bg.value) is type(sync.value) and str(bg.value) == str(sync.value)
    assert w.wait() is None  # raised once, not again
    w.submit(run, big, 4, keep=2)
    with pytest.raises(CheckpointError, match="ckpt-000000004.pt"):
        w.submit(run, small, 6, keep=2)  # the next submit raises the failure and writes nothing
    assert listing(run) == [] and temporaries(small_fs) == []
    subprocess.run(["mount", "-o", "remount,size=16m", str(small_fs)], check=True)
    w.submit(run, big, 6, keep=2)
    assert w.close() == ckpt.step_path(run, 6)
    assert listing(run) == ["ckpt-000000006.pt"] and same(ckpt.load(ckpt.step_path(run, 6)), big)


#: Runs in a child process: the kernel's file-size limit (RLIMIT_FSIZE) makes the write fail for real.
CHILD = r"""
import json, resource, signal, sys, torch
from pathlib import Path
from trainer.loop import checkpoint as ckpt
from trainer.loop.ckptwriter import CheckpointWriter
run, mode = Path(sys.argv[1]), sys.argv[2]
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
big = {"w": torch.zeros(1 << 19)}
w = CheckpointWriter()
if mode == "exit-in-flight":  # the job ends (an exception) right after asking for a large write
    w.submit(run, {"w": torch.ones(1 << 24)}, 8, keep=2)
    raise SystemExit("trainer: ended while the checkpoint was written")
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, hard))
if mode == "exit-failed":  # a failure nobody waits for
    w.submit(run, big, 2, keep=2)
    sys.exit(0)
out = {}
try:
    ckpt.save(run, big, 2, keep=2)
except BaseException as exc:
    out["sync"] = [type(exc).__name__, str(exc)]
w.submit(run, big, 2, keep=2)
try:
    w.wait()
except BaseException as exc:
    out["async"] = [type(exc).__name__, str(exc)]
out["again"] = str(w.wait())
out["left"] = sorted(p.name for p in ckpt.ckpt_dir(run).iterdir())
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
w.submit(run, big, 4, keep=2)
out["after"] = str(w.close())
out["left_after"] = sorted(p.name for p in ckpt.ckpt_dir(run).iterdir())
print(json.dumps(out))
"""


def child(run, mode):
    return subprocess.run([sys.executable, "-c", CHILD, str(run), mode], cwd=str(REPO), capture_output=True,
                          text=True, timeout=120)


def test_a_file_size_limit_is_raised_as_the_synchronous_save_raises_it(tmp_path):
    res = child(tmp_path / "run", "fail")
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    assert out["sync"][0] == "CheckpointError" and "File too large" in out["sync"][1]
    assert out["async"] == out["sync"] and out["again"] == "None" and out["left"] == []
    assert out["after"] == str(ckpt.step_path(tmp_path / "run", 4)) and out["left_after"] == ["ckpt-000000004.pt"]


def test_a_write_in_flight_when_the_process_ends_is_finished_not_dropped(tmp_path):
    res = child(tmp_path / "run", "exit-in-flight")
    assert res.returncode == 1 and "ended while the checkpoint was written" in res.stderr
    assert same(ckpt.load(ckpt.step_path(tmp_path / "run", 8)), {"w": torch.ones(1 << 24)})
    assert temporaries(tmp_path) == []


def test_a_failure_nobody_waited_for_is_said_at_exit(tmp_path):
    res = child(tmp_path / "run", "exit-failed")
    assert "trainer: cannot write checkpoint" in res.stderr and "File too large" in res.stderr, res.stderr
    assert str(ckpt.step_path(tmp_path / "run", 2)) in res.stderr
    assert temporaries(tmp_path) == []


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def test_submit_returns_well_before_a_synchronous_save_would(tmp_path):
    """Sums over interleaved rounds, in alternating order: one slow moment of a busy machine decides nothing."""
    state = {"model": {"a": torch.randn(1 << 22), "b": torch.randn(1 << 22)},
             "optimizer": {"m": torch.randn(1 << 22)}}  # 48 MiB
    w = CheckpointWriter()
    sync, submit, in_flight = [], [], []

    def background(i):
        submit.append(timed(lambda: w.submit(tmp_path / "async", state, i, keep=1)))
        in_flight.append(w.busy())  # the write goes on after submit has returned

    for i in range(6):
        runs = [lambda: sync.append(timed(lambda: ckpt.save(tmp_path / "sync", state, i, keep=1))),
                lambda: background(i)]
        for run in runs[::1 if i % 2 else -1]:
            run()
            w.wait()
    w.close()
    assert any(in_flight) and sum(submit) < sum(sync), (in_flight, submit, sync)
    assert same(ckpt.load(ckpt.latest(tmp_path / "async")), ckpt.load(ckpt.latest(tmp_path / "sync")))


def test_then_runs_after_the_save_on_the_copy_and_its_failure_is_raised(tmp_path):
    seen = []
    w = CheckpointWriter()
    state = {"model": {"w": torch.ones(3)}, "step": 1}
    w.submit(tmp_path, state, 1, keep=2, then=lambda s: seen.append((ckpt.step_path(tmp_path, 1).is_file(), s)))
    state["model"]["w"].add_(1)                                  # the training thread goes on
    w.wait()
    assert seen[0][0] is True and torch.equal(seen[0][1]["model"]["w"], torch.ones(3))

    def fail(_state):
        raise SystemExit("trainer: --export-weights pt: disk full")
    w.submit(tmp_path, state, 2, keep=2, then=fail)
    with pytest.raises(SystemExit, match="export-weights"):
        w.wait()
    assert w.wait() is not None                                   # raised once
    w.close()
