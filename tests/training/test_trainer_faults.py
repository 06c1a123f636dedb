"""Faults around the training loop, with real rank processes (2 ranks, ddp, DataLoader workers where the
fault needs them): stop signals sent to every process of the job (as LSF sends them), DataLoader workers
killed or orphaned, a multigrid run stopped after its last epoch and run again, each rank's own BatchNorm
statistics in a checkpoint, and AAVG's batch rule on a small data set. (Runs stopped at --max-steps and run on,
AAVG's among them: tests/training/test_trainer_state.py.)"""
import copy
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable, Dict, List

import pytest
import torch

from trainer_utils import free_jobid, logs, rank_env, run_ranks, start_rank, start_ranks, tiny_args, \
    wait_ranks

from trainer.loop import checkpoint as ckpt
from trainer.dist.bnstats import merge_running_stats, pooled_row, rank_rows, running_stats, set_running_stats
from trainer.loop.metrics import read_metrics
from trainer.rundir import COMPLETE


def start_job(args: List[str], log_dir: Path) -> List[subprocess.Popen]:
    """Two ranks in one process group of their own, as the ranks of an LSF job are: a signal to the group
    reaches every process of the job (ranks, their forkserver and DataLoader workers)."""
    job, procs = free_jobid(), []
    log_dir.mkdir(parents=True, exist_ok=True)
    for r in range(2):
        group = 0 if r == 0 else procs[0].pid
        procs.append(start_rank(args, rank_env(r, 2, job), log_dir / f"rank{r}.log", process_group=group))
    return procs


def wait_for(run: Path, procs: List[subprocess.Popen], ready: Callable[[List[Dict]], bool], log_dir: Path,
             timeout: float = 60) -> None:
    """Until the run's metrics records satisfy ``ready`` (the ranks still running)."""
    end = time.time() + timeout
    while time.time() < end:
        recs = read_metrics(run) if (run / "metrics.jsonl").exists() else []
        if ready(recs):
            return
        assert all(p.poll() is None for p in procs), "a rank ended early:\n" + logs(log_dir)
        time.sleep(0.05)
    for p in procs:
        p.kill()
        p.wait()
    raise AssertionError("the records never came:\n" + logs(log_dir))


def children(pid: int) -> List[int]:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def workers_of(rank_pid: int) -> List[int]:
    """The DataLoader workers of a rank: the children of its forkserver."""
    out = []
    for c in children(rank_pid):
        try:
            if "forkserver" in Path(f"/proc/{c}/cmdline").read_text():
                out += children(c)
        except OSError:
            pass
    return sorted(out)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie has ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def rank_logs(log_dir: Path) -> List[str]:
    return [(log_dir / f"rank{r}.log").read_text() for r in (0, 1)]


# -- stop signals sent to every process of the job --------------------------------------------------------

def test_each_stop_signal_to_every_process_of_the_job_saves_and_the_next_run_resumes(data, tmp_path):
    """LSF's warning action, the run limit's USR2 and bkill's INT and TERM go to all of the job's processes,
    the ranks' DataLoader workers and forkserver included. The workers must outlive the request: the
    ranks still read batches until the next record (here each second epoch's end), save there and exit 0.

    One run, launched four times: each of the first three launches gets one of the signals (USR2, TERM,
    INT) after its first record. Facts, for each signal: both ranks exit 0, no traceback, rank 0 says
    "(signal NAME): checkpoint saved", the checkpoint is the next record's step and no COMPLETE is
    written; the next launch resumes from it. The fourth launch resumes and finishes with the final test."""
    run = tmp_path / "run"
    # 24 clips, 2 ranks x 2: 6 steps an epoch, a record at each epoch's end, 36 steps in all
    args = tiny_args(run, data, epochs=6, workers=2, log_every=6, test_clips=1, test_last=1)
    for n, sig in enumerate((signal.SIGUSR2, signal.SIGTERM, signal.SIGINT)):
        begun, log_dir = 12 * n, tmp_path / f"logs-{sig.name}"
        procs = start_job(args, log_dir)
        wait_for(run, procs, lambda recs: any(r["kind"] == "train" and r["step"] > begun for r in recs), log_dir,
                 timeout=120)
        os.killpg(procs[0].pid, sig)  # after this launch's first record: during validation or the next epoch
        assert wait_ranks(procs, log_dir, timeout=120) == [0, 0], logs(log_dir)
        rank0, rank1 = rank_logs(log_dir)
        assert "Traceback" not in rank0 + rank1, rank0 + rank1
        assert f"(signal {sig.name}): checkpoint saved" in rank0, rank0
        assert ckpt.load(ckpt.latest(run))["step"] == begun + 12, (sig.name, "not the next record's step")
        assert not (run / COMPLETE).exists(), sig.name
        assert n == 0 or "resumed from" in rank0, f"the launch stopped by {sig.name} did not resume"
    run_ranks(2, args, tmp_path / "logs-last", timeout=120)
    assert (run / COMPLETE).exists() and "resumed from" in (tmp_path / "logs-last" / "rank0.log").read_text()


# -- DataLoader workers that die, or outlive their rank ----------------------------------------------------

@pytest.mark.parametrize("victim", [0, 1])
def test_a_worker_killed_mid_epoch_ends_its_rank_with_one_line_and_no_rank_hangs(data, tmp_path, victim):
    """A worker killed with SIGKILL (by hand, or by the out-of-memory killer): the rank it served says so in
    one line naming the worker; the other rank ends too (another rank ended); nobody hangs."""
    run, log_dir = tmp_path / "run", tmp_path / "logs"
    # One clip a step: 12 steps an epoch, so a slow poll still finds the training pool alone.
    procs = start_ranks(2, tiny_args(run, data, epochs=3, workers=2, log_every=1, batch_per_gpu=1), log_dir)
    wait_for(run, procs, lambda recs: len(recs) >= 2, log_dir)
    pids = workers_of(procs[victim].pid)
    assert len(pids) == 2, pids  # the training pool (validation's starts at the epoch's end)
    os.kill(pids[0], signal.SIGKILL)
    codes = wait_ranks(procs, log_dir, timeout=45)
    assert all(c != 0 for c in codes), codes
    texts = rank_logs(log_dir)
    assert all("Traceback (most recent call last)" not in t for t in texts), logs(log_dir)
    line = [x for x in texts[victim].splitlines() if x.startswith("trainer: ")]
    assert line and f"pid {pids[0]} killed by SIGKILL" in line[-1] and "data loader worker" in line[-1], line
    assert "resume" in line[-1]


class _Pool:
    """What ``_naming_lost_workers`` reads of a loader iterator: its worker processes."""

    def __init__(self, workers):
        self._workers = workers


def test_a_connection_reset_before_the_workers_death_is_known_still_names_the_worker():
    """The race behind a rank that said only "Connection reset by peer": the read fails while the killed
    worker is still ending (or while the forkserver has not yet passed its exit status back), so every
    worker still looks alive. The rank waits for the death to become known, then names it."""
    from trainer.data.datasets import WorkerLost, _context, _naming_lost_workers
    worker = _context(1).Process(target=time.sleep, args=(30,))  # the rank's start method (forkserver)
    worker.start()
    killer = threading.Timer(0.5, os.kill, (worker.pid, signal.SIGKILL))
    killer.start()
    try:
        assert worker.is_alive()  # the moment of the failed read
        with pytest.raises(WorkerLost) as lost:
            with _naming_lost_workers(lambda: _Pool([worker])):
                raise ConnectionResetError(104, "Connection reset by peer")
        assert f"pid {worker.pid} killed by SIGKILL" in str(lost.value) and "resume" in str(lost.value)
    finally:
        killer.join()
        worker.join(10)


def test_a_failure_with_every_worker_alive_is_passed_on_unchanged():
    """No worker died: the failure is the rank's own and keeps its type (a bad clip, a broken peer)."""
    from trainer.data.datasets import _context, _naming_lost_workers
    worker = _context(1).Process(target=time.sleep, args=(30,))
    worker.start()
    try:
        started = time.monotonic()
        with pytest.raises(ValueError):
            with _naming_lost_workers(lambda: _Pool([worker])):
                raise ValueError("a bad clip")
        assert time.monotonic() - started < 1.0  # no wait for an error that is not a broken connection
        with pytest.raises(ConnectionResetError):
            with _naming_lost_workers(lambda: _Pool([worker])):
                raise ConnectionResetError(104, "Connection reset by peer")
    finally:
        worker.kill()
        worker.join(10)


def test_the_workers_of_a_rank_killed_outright_end_with_it(data, tmp_path):
    """A rank killed with SIGKILL leaves no DataLoader worker (nor forkserver) behind. A forkserver worker
    is not the rank's child: torch's watchdog never sees the rank go, and the forkserver waits for its
    workers, so both stayed until the job ended."""
    run, log_dir = tmp_path / "run", tmp_path / "logs"
    procs = start_ranks(2, tiny_args(run, data, epochs=3, workers=2, log_every=1, batch_per_gpu=1), log_dir)
    wait_for(run, procs, lambda recs: len(recs) >= 2, log_dir)
    pids = [w for p in procs for w in workers_of(p.pid)]
    servers = [c for p in procs for c in children(p.pid) if "forkserver" in Path(f"/proc/{c}/cmdline").read_text()]
    assert len(pids) == 4 and len(servers) == 2, (pids, servers)
    try:
        for p in procs:
            p.kill()
            p.wait()
        end = time.time() + 20
        while time.time() < end and any(alive(x) for x in pids + servers):
            time.sleep(0.2)
        assert [x for x in pids + servers if alive(x)] == []
    finally:
        for x in pids + servers:  # what this test started, by pid
            if alive(x):
                os.kill(x, signal.SIGKILL)


# -- a run stopped at its end and run again, and what a stop between records saves --------------------------------------------

def test_a_multigrid_run_stopped_after_its_last_epoch_resumes_and_completes(data, tmp_path):
    """A multigrid run stopped after its last step (here --max-steps at the last step; a signal during the
    last validation or the final test leaves the same checkpoint) is finished by the next run: the final
    test and COMPLETE, not an IndexError for the epoch after the last one."""
    run = tmp_path / "run"
    args = tiny_args(run, data, epochs=3, schedule="multigrid", test_clips=1, test_last=1)
    run_ranks(2, args + ["--max-steps", "10"], tmp_path / "logs1", timeout=60)
    last = ckpt.load(ckpt.latest(run))
    assert (last["step"], last["epoch"]) == (10, 3) and not (run / COMPLETE).exists()  # every epoch done
    run_ranks(2, args, tmp_path / "logs2", timeout=60)
    assert (run / COMPLETE).exists()
    assert any(r["kind"] == "test" and r.get("summary") for r in read_metrics(run))


def test_each_ranks_own_batchnorm_statistics_come_back_exactly_and_pool_as_a_merge_does():
    """What a checkpoint between merges carries (``bnstats.rank_rows``): each rank takes its own statistics
    back bit for bit, and on another number of ranks the rows merge as ``merge_running_stats`` merges."""
    torch.manual_seed(0)
    nets = [torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.BatchNorm2d(4))
            for _ in range(3)]
    for i, net in enumerate(nets):
        net(torch.randn(8, 3, 6, 6) * (i + 1) + i)  # each "rank" saw other data
    parts = [rank_rows(net, lambda t: t, r, 3) for r, net in enumerate(nets)]  # each rank's contribution
    rows = rank_rows(nets[0], lambda t: sum(parts), 0, 3)  # the allreduce's sum, as every rank gets it
    for r, net in enumerate(nets):
        fresh = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.BatchNorm2d(4))
        set_running_stats(fresh, rows[r])
        assert torch.equal(running_stats(fresh), running_stats(net))
    sent = []  # what each rank puts into merge_running_stats's allreduce
    for net in nets:
        merge_running_stats(copy.deepcopy(net), lambda t: sent.append(t.clone()) or t)
    merged = copy.deepcopy(nets[0])
    merge_running_stats(merged, lambda t: torch.stack(sent).mean(0))
    assert torch.allclose(pooled_row(merged, rows), running_stats(merged), rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError):
        set_running_stats(merged, rows[0][:-1])


# -- AAVG's batch rule ----------------------------------------------------------------------------------------

def test_the_aavg_batch_rule_never_grows_past_the_training_set(data, tmp_path):
    """A batch rule that grows at every check (b1 huge) on 24 clips and 2 learners: the batch stops at the
    largest that one global batch of the data holds (12; the rule's next step, 16, would be 32 clips), and
    the run completes instead of failing at the next epoch's start with a sampler error."""
    run = tmp_path / "run"
    args = tiny_args(run, data, epochs=5, optimizer="adam", optimizer_sync="aavg", aavg_eval_every=2,
                     aavg_b1=1e9, aavg_b2=2, lr=0.01, eval_every=0) + ["--no-test"]
    run_ranks(2, args, tmp_path / "logs", timeout=60)
    assert (run / COMPLETE).exists()
    batches = [r["batch"] for r in read_metrics(run) if r["kind"] == "train"]
    assert max(batches) == 12, batches
