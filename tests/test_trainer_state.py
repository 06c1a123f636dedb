"""What a run directory records about its training state, with real rank processes: an AAVG run
stopped at an averaging round resumes bitwise (learner batch, batch rule and rounds included), and
the trainer's events (resumed, stopped, complete, already_complete) appear once per occurrence,
written by rank 0 only, with the fields the report reads."""
import json

import pytest
import torch

from trainer_utils import make_dataset, run_ranks, tiny_args

from trainer.loop import checkpoint as ckpt
from trainer import rundir


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("state") / "data", train=24, val=8, frames=8, size=32)


def aavg_args(run, data, **kw):
    """Two learners, Adam, an averaging round every 2 local steps, a batch check every 3 steps."""
    return tiny_args(run, data, epochs=3, optimizer="adam", optimizer_sync="aavg", avg_interval=2,
                     aavg_eval_every=3, aavg_b2=2, aavg_max_batch=8, lr=0.01, eval_every=0, **kw) + ["--no-test"]


def test_aavg_run_stopped_at_an_averaging_round_resumes_to_the_same_state(data, tmp_path):
    run_ranks(2, aavg_args(tmp_path / "ref", data), tmp_path / "logs-ref", timeout=300)
    run_ranks(2, aavg_args(tmp_path / "cut", data, max_steps=4), tmp_path / "logs-cut", timeout=300)
    assert not (tmp_path / "cut" / rundir.COMPLETE).exists()
    assert ckpt.load(ckpt.latest(tmp_path / "cut"))["step"] == 4
    run_ranks(2, aavg_args(tmp_path / "cut", data), tmp_path / "logs-cut2", timeout=300)
    assert "resumed from" in (tmp_path / "logs-cut2" / "rank0.log").read_text()
    a, b = (ckpt.load(ckpt.latest(tmp_path / r)) for r in ("ref", "cut"))
    assert a["step"] == b["step"] > 4 and a["epoch"] == b["epoch"] == 3
    assert a["aavg"] == b["aavg"] and a["aavg"]["avg_rounds"] > 2
    for k, v in a["model"].items():
        assert torch.equal(v, b["model"][k]), k
    for k, s in a["optimizer"]["state"].items():
        for name, v in s.items():
            assert torch.equal(torch.as_tensor(v), torch.as_tensor(b["optimizer"]["state"][k][name])), (k, name)


def events(run, launches=False):
    """The run's events; the launch records (one per start) only when asked."""
    found = rundir.parse_events((run / rundir.EVENTS).read_text())
    return found if launches else [e for e in found if e["event"] != "launch"]


def test_two_ranks_write_one_event_per_occurrence(data, tmp_path):
    run = tmp_path / "run"
    args = tiny_args(run, data, epochs=2, eval_every=0, ckpt_every_steps=2) + ["--no-test"]
    run_ranks(2, args + ["--max-steps", "3"], tmp_path / "logs1", timeout=300)
    assert [(e["event"], e["step"], e["reason"]) for e in events(run)] == [("stopped", 3, "--max-steps")]
    run_ranks(2, args, tmp_path / "logs2", timeout=300)
    got = events(run)
    assert [e["event"] for e in got] == ["stopped", "resumed", "complete"]
    assert got[1]["step"] == 3 and got[1]["checkpoint"] == rundir.checkpoint_name(3)
    assert got[2]["step"] == 12 and got[2]["epochs"] == 2
    assert all(e["job"].isdecimal() for e in got)
    run_ranks(2, args, tmp_path / "logs3", timeout=300)
    last = events(run)[3:]
    assert len(last) == 1, last
    assert [(e["event"], e["by"]) for e in last] == [("already_complete", "trainer")]
    assert "COMPLETE exists" in (tmp_path / "logs3" / "rank0.log").read_text()
    starts = [e for e in events(run, launches=True) if e["event"] == "launch"]
    assert [(e["step"], e["ranks"]) for e in starts] == [(0, 2), (3, 2), (12, 2)]   # one per start, from rank 0
    lines = (run / rundir.EVENTS).read_text().splitlines()
    assert len(lines) == 4 + 3 and all(json.loads(line)["event"] for line in lines)
