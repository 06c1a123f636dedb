"""What a run directory records about its training state, with real rank processes (2 ranks, ddp): runs
stopped by --max-steps and run on end bitwise where the uninterrupted run ends (off the metrics grid, and
an AAVG run at an averaging round and at a batch-rule check), a rerun at its --max-steps trains no
further, and the trainer's events (resumed, stopped, complete, already_complete) appear once per
occurrence, written by rank 0 only, with the fields the report reads.

Each test is one chain of launches of one run directory next to an uninterrupted reference run: the
launches share their start-up, and each fact is checked at the launch that shows it."""
import json

import torch

from trainer_utils import run_ranks, tiny_args

from trainer.loop import checkpoint as ckpt
from trainer import rundir
from trainer.loop.metrics import read_metrics


def aavg_args(run, data, **kw):
    """Two learners, Adam, an averaging round every 2 local steps, a batch check every 3 steps."""
    return tiny_args(run, data, epochs=3, optimizer="adam", optimizer_sync="aavg", avg_interval=2,
                     aavg_eval_every=3, aavg_b2=2, aavg_max_batch=8, lr=0.01, eval_every=0, **kw) + ["--no-test"]


def rank0_log(log_dir) -> str:
    return (log_dir / "rank0.log").read_text()


def test_aavg_runs_stopped_at_an_averaging_round_and_at_a_batch_check_resume_to_the_same_state(data, tmp_path):
    """One AAVG run stopped twice by --max-steps, then run on, against an uninterrupted run.

    Facts: (1) a stop at step 4 (an averaging round, mid-epoch) leaves its checkpoint and no COMPLETE;
    (2) the next launch resumes from it and (3) stops at step 6, where an epoch, an averaging round and a
    batch-rule period end together; (4) the last launch resumes and ends bitwise where the uninterrupted
    run ends: weights, optimiser moments and the AAVG state (learner batch, the rule's history, batch and
    best, averaging rounds), so neither stop lost or repeated a check."""
    ref, cut = tmp_path / "ref", tmp_path / "cut"
    run_ranks(2, aavg_args(ref, data), tmp_path / "logs-ref", timeout=300)
    run_ranks(2, aavg_args(cut, data, max_steps=4), tmp_path / "logs-cut4", timeout=300)
    assert not (cut / rundir.COMPLETE).exists(), "a --max-steps stop wrote COMPLETE"
    assert ckpt.load(ckpt.latest(cut))["step"] == 4, "the stop at an averaging round saved another step"
    run_ranks(2, aavg_args(cut, data, max_steps=6), tmp_path / "logs-cut6", timeout=300)
    assert "resumed from" in rank0_log(tmp_path / "logs-cut6"), "the launch after the stop at step 4 did not resume"
    assert ckpt.load(ckpt.latest(cut))["step"] == 6, "the stop at the batch check saved another step"
    run_ranks(2, aavg_args(cut, data), tmp_path / "logs-cut-end", timeout=300)
    assert "resumed from" in rank0_log(tmp_path / "logs-cut-end"), "the launch after step 6 did not resume"
    a, b = (ckpt.load(ckpt.latest(r)) for r in (ref, cut))
    assert a["step"] == b["step"] == 18 and a["epoch"] == b["epoch"] == 3, (a["step"], b["step"])
    assert [h[0] for h in b["aavg"]["controller"]["history"]] == [3, 6, 9, 12, 15, 18], "a batch check was lost"
    assert a["aavg"] == b["aavg"] and a["aavg"]["avg_rounds"] > 2, (a["aavg"], b["aavg"])
    for k, v in a["model"].items():
        assert torch.equal(v, b["model"][k]), f"weights differ after the resumes: {k}"
    for k, s in a["optimizer"]["state"].items():
        for name, v in s.items():
            assert torch.equal(torch.as_tensor(v), torch.as_tensor(b["optimizer"]["state"][k][name])), (k, name)


def events(run, launches=False):
    """The run's events; the launch records (one per start) only when asked."""
    found = rundir.parse_events((run / rundir.EVENTS).read_text())
    return found if launches else [e for e in found if e["event"] != "launch"]


def train_steps(run):
    return [r["step"] for r in read_metrics(run) if r["kind"] == "train"]


def test_max_steps_stops_resume_bitwise_and_each_launch_writes_one_event_per_occurrence(data, tmp_path):
    """One run launched five times against an uninterrupted run (records every 4 steps, a checkpoint every 2,
    12 steps in all).

    Facts: (1) --max-steps 7, a step that is no metrics record, stops there with one ``stopped`` event
    (step, reason); (2) launched again with the same --max-steps it trains no further: no new step or
    checkpoint, the step-7 checkpoint untouched, "stopping at step 7 (--max-steps)" again; (3) run on, it
    resumes from step 7 (a ``resumed`` event naming the checkpoint) and ends with the uninterrupted run's
    weights, BatchNorm running statistics included, and a ``complete`` event (step, epochs); (4) launched
    once more it finds COMPLETE: one ``already_complete`` event by the trainer; (5) every launch records one
    ``launch`` event from rank 0 (its step, 2 ranks) and every event names the job."""
    def args_of(r):
        return tiny_args(r, data, epochs=2, eval_every=0, lr=0.02, log_every=4, ckpt_every_steps=2) + ["--no-test"]
    ref, run = tmp_path / "ref", tmp_path / "run"
    args = args_of(run)
    run_ranks(2, args_of(ref), tmp_path / "logs-ref", timeout=300)

    run_ranks(2, args + ["--max-steps", "7"], tmp_path / "logs1", timeout=300)
    assert [(e["event"], e["step"], e["reason"]) for e in events(run)] == [("stopped", 7, "--max-steps")]
    saved = [p.name for p in ckpt.list_checkpoints(run)]
    assert saved[-1] == ckpt.step_path(run, 7).name, saved
    stamp = ckpt.step_path(run, 7).stat()

    run_ranks(2, args + ["--max-steps", "7"], tmp_path / "logs2", timeout=300)
    assert [p.name for p in ckpt.list_checkpoints(run)] == saved, "a rerun at --max-steps saved a checkpoint"
    now = ckpt.step_path(run, 7).stat()
    assert (now.st_mtime_ns, now.st_size) == (stamp.st_mtime_ns, stamp.st_size), "the step-7 checkpoint changed"
    assert max(train_steps(run)) == 7, "a rerun at --max-steps trained further"
    assert "stopping at step 7 (--max-steps)" in rank0_log(tmp_path / "logs2")
    assert [(e["event"], e["step"]) for e in events(run)[1:]] == [("resumed", 7), ("stopped", 7)]

    run_ranks(2, args, tmp_path / "logs3", timeout=300)
    got = events(run)[3:]
    assert [e["event"] for e in got] == ["resumed", "complete"], got
    assert got[0]["step"] == 7 and got[0]["checkpoint"] == rundir.checkpoint_name(7)
    assert got[1]["step"] == 12 and got[1]["epochs"] == 2
    a, b = (ckpt.load(ckpt.latest(r)) for r in (ref, run))
    assert a["step"] == b["step"] == 12
    assert [k for k, v in a["model"].items() if not torch.equal(v, b["model"][k])] == [], \
        "the run stopped off the metrics grid ended with other weights or BatchNorm statistics"

    run_ranks(2, args, tmp_path / "logs4", timeout=300)
    last = events(run)[5:]
    assert [(e["event"], e["by"]) for e in last] == [("already_complete", "trainer")], last
    assert "COMPLETE exists" in rank0_log(tmp_path / "logs4")
    assert all(e["job"].isdecimal() for e in events(run))
    starts = [e for e in events(run, launches=True) if e["event"] == "launch"]
    assert [(e["step"], e["ranks"]) for e in starts] == [(0, 2), (7, 2), (7, 2), (12, 2)]  # one per start
    lines = (run / rundir.EVENTS).read_text().splitlines()
    assert len(lines) == 4 + 6 and all(json.loads(line)["event"] for line in lines)
