"""Resume stays bitwise with more than two ranks.

With 3+ ranks, gloo's ring allreduce adds each gradient element in an order set
by its place in DDP's bucket, and DDP lays its buckets out again after the first
iteration of every launch: a resumed run used to round its first step
differently and drift off the uninterrupted trajectory (found by the demo's
4-rank chain). The engine now sums gradients in rank order on CPU.
"""
import os
import signal

import pytest

import test_resume as base
from trainer_utils import make_dataset


@pytest.fixture(scope="module")
def data4(tmp_path_factory):
    # 48 clips: 4 ranks x 2 clips = 6 steps per epoch, 18 in the 3 epochs of base.args_for.
    return make_dataset(tmp_path_factory.mktemp("resume4") / "data", train=48, val=8, frames=8, size=32)


def test_four_ranks_sigusr2_then_resume_is_bitwise_identical(data4, tmp_path, monkeypatch):
    monkeypatch.setattr(base, "RANKS", 4)
    ref = tmp_path / "ref"
    p = base.jsrun(base.args_for(ref, data4), tmp_path, "ref")
    assert base.finish(p, tmp_path, "ref") == 0, (tmp_path / "ref.log").read_text()[-4000:]
    run = tmp_path / "run"
    p = base.jsrun(base.args_for(run, data4), tmp_path, "usr2")
    base.wait_for_step(run, 7, p)
    os.kill(p.pid, signal.SIGUSR2)
    assert base.finish(p, tmp_path, "usr2") == 0, (tmp_path / "usr2.log").read_text()[-4000:]
    assert not (run / "COMPLETE").exists()
    p = base.jsrun(base.args_for(run, data4), tmp_path, "after")
    assert base.finish(p, tmp_path, "after") == 0, (tmp_path / "after.log").read_text()[-4000:]
    assert "resumed from" in (tmp_path / "after.log").read_text()
    base.assert_bitwise_equal(base.final_state(run), base.final_state(ref))
