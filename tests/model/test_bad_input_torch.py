"""Options the oldest supported torch (2.0.1) cannot honour are refused in one line, not run wrongly.

``--compression bf16`` on CPU rides on gloo, and torch 2.0's gloo reduces no
bfloat16: every rank stopped at its first backward pass with a traceback
("Invalid scalar type"). It is now refused on every rank before training, with
the torch release named and the way out. These cases need a torch 2.0.1 (see
tests/model/test_torch_compat.py) and are skipped without one. (``--amp bf16`` on a
GPU below compute capability 8.0 is refused too: tests/model/test_torch_compat.py
tests that choice without a GPU.)
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from badinput import assert_refused
from test_torch_compat import OLDEST_PYTHON, REPO, oldest
from trainer_utils import free_jobid, make_dataset, rank_env, tiny_args


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("data"), train=8, val=4)


def _ranks(size: int, args, timeout: float = 180):
    """Each rank's CompletedProcess: the trainer under torch 2.0.1 with jsrun's variables."""
    job = free_jobid()
    procs = [subprocess.Popen([str(OLDEST_PYTHON), "-m", "trainer", *args], env=rank_env(r, size, job),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(REPO))
             for r in range(size)]
    done = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        done.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    return done


CASES = [
    ("bf16-one-rank", 1, ["--compression", "bf16"], ["--compression bf16", "torch 2.0.1", "fp16 or none"]),
    ("bf16-two-ranks", 2, ["--compression", "bf16"], ["--compression bf16", "torch 2.0.1", "fp16 or none"]),
    ("bf16-accumulating", 1, ["--compression", "bf16", "--accum-steps", "2"], ["--compression bf16"]),
]


@oldest
@pytest.mark.parametrize("name,size,extra,needles", CASES, ids=[c[0] for c in CASES])
def test_refused_under_the_oldest_torch(name, size, extra, needles, data, tmp_path):
    run = tmp_path / "run"
    for proc in _ranks(size, tiny_args(run, data) + extra):
        assert_refused(proc, needles, prefix="trainer: ")
    assert not (Path(run) / "COMPLETE").exists() and not list(Path(run).glob("checkpoints/*.pt"))
