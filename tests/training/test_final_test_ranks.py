"""The final multi-clip test on several ranks: every rank tests the same checkpoints.

Rank 0 writes the epoch checkpoints; the other ranks used to list the folder on
their own, before rank 0's last save had landed. With fewer epochs than
``--test-last`` the ranks then ran a different number of evaluations and hung in
a collective until the run limit; with more, they tested different epochs while
metrics.jsonl named rank 0's. Real rank processes (DDP on CPU), the default
``--test-last`` (5), epochs below and above it on 2 and 4 ranks; the 4-rank run
with fewer epochs is the one through the embedded LSF, with the job script's
default trainer options.
"""
from __future__ import annotations

import json
import re
import signal
import time

import pytest

from lsf_jobs import cli, lsf_environment
from trainer_utils import logs, make_dataset, run_ranks, start_ranks, tiny_args, wait_job_ended, wait_ranks

from trainer.loop.metrics import read_metrics

TESTED = re.compile(r"final test on rank (\d+) of (\d+): (.*)$", re.M)


# 16 clips: 2 ranks x 2 clips = 4 steps per epoch, 4 ranks x 2 clips = 2.
DATA_SHAPE = dict(train=16, val=4, frames=8, size=32)  # the ``data`` fixture's set (conftest.py)


def names_by_rank(log_dir, size):
    """{rank: [checkpoint names]} from each rank's own log line."""
    out = {}
    for r in range(size):
        found = TESTED.findall((log_dir / f"rank{r}.log").read_text())
        assert len(found) == 1, f"rank {r} logged {len(found)} final-test lines\n" + logs(log_dir)
        rank, world, names = found[0]
        assert (int(rank), int(world)) == (r, size)
        out[r] = names.split()
    return out


def assert_records_name(run, epochs):
    """metrics.jsonl's test records name the last 5 epochs' checkpoints, in order, and one summary of them."""
    expected = [f"epoch-{e:04d}.pt" for e in range(max(0, epochs - 5), epochs)]
    recs = [r for r in read_metrics(run) if r["kind"] == "test"]
    assert [r["checkpoint"] for r in recs if not r.get("summary")] == expected
    assert [r["checkpoints"] for r in recs if r.get("summary")] == [expected]
    assert [r["epoch"] for r in recs if not r.get("summary")] == list(range(max(0, epochs - 5), epochs))
    return expected


# 4 ranks with fewer epochs than --test-last: test_two_node_job_with_default_trainer_options_finishes
@pytest.mark.parametrize("ranks,epochs", [(2, 2), (2, 6), (4, 6)])
def test_every_rank_tests_the_checkpoints_metrics_name(data, tmp_path, ranks, epochs):
    run = tmp_path / "run"
    args = tiny_args(run, data, epochs=epochs, test_last=None, eval_every=0, test_clips=1)
    run_ranks(ranks, args, tmp_path / "logs", timeout=150)  # every rank exits 0, none hangs
    assert (run / "COMPLETE").exists()
    expected = assert_records_name(run, epochs)
    by_rank = names_by_rank(tmp_path / "logs", ranks)
    assert all(names == expected for names in by_rank.values()), by_rank


def test_two_node_job_with_default_trainer_options_finishes(tmp_path):
    """summit-jobs submit on the local machine: 2 nodes x 2 ranks, the final test at its defaults (--test-last
    5 over 2 epochs): the job ends DONE with COMPLETE, each of the 4 ranks logs one final-test line naming
    both epochs' checkpoints, and metrics.jsonl's test records name the same (the 4-rank case of
    test_every_rank_tests_the_checkpoints_metrics_name)."""
    env = lsf_environment(tmp_path, minute=60)
    data = make_dataset(tmp_path / "data", train=16, val=4, frames=8, size=32)
    run_dir = tmp_path / "run"
    res = cli(["--machine", "local", "submit", "--nodes", "2", "--epochs", "2",
               "--clips-per-gpu", "2", "--job-name", "final", "--run-dir", str(run_dir), "--json", "--",
               "--data", str(data), "--width", "0.125", "--num-segments", "4", "--frame-stride", "2",
               "--input-size", "32", "--workers", "0", "--threads", "1"], env, timeout=120)
    assert res.returncode == 0, res.stderr
    job = json.loads(res.stdout)["job_ids"][0]
    state = wait_job_ended(job, env, run_dir, timeout=300)
    err = (run_dir / f"final.{job}.err").read_text() if (run_dir / f"final.{job}.err").exists() else ""
    assert state["STAT"] == "DONE", (state, err[-4000:])
    assert (run_dir / "COMPLETE").exists(), err[-4000:]
    assert assert_records_name(run_dir, 2) == ["epoch-0000.pt", "epoch-0001.pt"]
    lines = TESTED.findall(err)
    assert sorted(int(r) for r, _, _ in lines) == [0, 1, 2, 3], err[-4000:]
    assert {(world, names) for _, world, names in lines} == {("4", "epoch-0000.pt epoch-0001.pt")}, lines


def test_a_signal_to_one_rank_during_the_final_test_stops_every_rank(tmp_path):
    """LSF's warning reaches ranks at different moments: one rank's stop must not leave the others in a
    collective. All ranks leave the test together, exit 0, and COMPLETE is not written (the next link
    repeats the test)."""
    data = make_dataset(tmp_path / "data", train=8, val=48, frames=8, size=32)
    run = tmp_path / "run"
    args = tiny_args(run, data, epochs=6, test_last=None, eval_every=0, test_clips=10)
    log_dir = tmp_path / "logs"
    procs = start_ranks(2, args, log_dir)
    deadline = time.time() + 120
    while "final test on rank 1" not in (log_dir / "rank1.log").read_text():
        assert time.time() < deadline and procs[1].poll() is None, logs(log_dir)
        time.sleep(0.02)
    procs[1].send_signal(signal.SIGUSR2)
    assert wait_ranks(procs, log_dir, timeout=120) == [0, 0], logs(log_dir)
    assert not (run / "COMPLETE").exists(), logs(log_dir)
    assert "signal during the final test" in (log_dir / "rank0.log").read_text()
    assert [r for r in read_metrics(run) if r["kind"] == "test" and r.get("summary")] == []
