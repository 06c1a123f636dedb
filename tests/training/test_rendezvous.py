"""Ranks of one job meet even when the port derived from LSB_JOBID is taken.

Two embedded-LSF homes number their jobs alike and any program may hold a
port: the derived port used to make rank 0 fail with EADDRINUSE (or let one
job's ranks reach another job's store). Real rank processes, real sockets.
"""
from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from badinput import assert_refused
from trainer_utils import REPO, free_jobid, logs, rank_env, start_ranks, tiny_args, wait_ranks

from trainer.dist.engines import horovod_available, rendezvous_port

ENGINES = ["ddp"] + (["horovod"] if horovod_available() else [])


DATA_SHAPE = dict(train=8, val=0, frames=4, size=32)  # the ``data`` fixture's set (conftest.py)


def hold(port):
    """A listening socket on every address at ``port``: someone else's server."""
    s = socket.socket()
    s.bind(("", port))
    s.listen()
    return s


def hold_derived_ports():
    """A job id and listening sockets on both ports derived from it. free_jobid's pair was free a moment ago;
    another test's rendezvous may take one before it is held here, so a pair that cannot be held is given
    back and another job id drawn."""
    for _ in range(20):
        job = free_jobid()
        port = rendezvous_port({"LSB_JOBID": job})
        held = []
        try:
            held = [hold(port), hold(port + 1)]
            return job, held
        except OSError:
            for s in held:
                s.close()
    raise RuntimeError("no pair of derived ports could be held in 20 draws")


def short_run(run, data, engine="ddp"):
    return tiny_args(run, data, engine=engine, max_steps=2, eval_every=0) + ["--no-test"]


def records(run):
    return sorted(p.name for p in run.glob(".rendezvous.*"))


def stale_records(run, job, port):
    """What killed launches leave in a run directory: this job's record and another job's, naming ``port``
    (where something that is not our store listens and never replies), and a record cut short by a kill."""
    run.mkdir(parents=True, exist_ok=True)
    stale = {"job": job, "port": port, "token": "0" * 32, "size": 2, "pid": 1}
    (run / f".rendezvous.{job}.json").write_text(json.dumps(stale))
    (run / ".rendezvous.12345.json").write_text(json.dumps(dict(stale, job="12345")))
    (run / f".rendezvous.{job}.json.tmp4242").write_text("{\"job\"")  # a write cut by a kill


@pytest.mark.parametrize("engine", ENGINES)
def test_a_held_derived_port_and_a_record_left_by_a_killed_launch_do_not_stop_the_job(data, tmp_path, engine):
    """Both ports derived from LSB_JOBID are held by someone else's server, and the run directory holds the
    records of killed launches pointing at a squatter that never replies: rank 0 serves the rendezvous on
    another port, rank 1 does not follow the stale record, both finish, and no record is left."""
    job, held = hold_derived_ports()
    held.append(hold(0))
    try:
        run = tmp_path / "run"
        stale_records(run, job, held[2].getsockname()[1])
        procs = start_ranks(2, short_run(run, data, engine), tmp_path / "logs", extra_env={"LSB_JOBID": job})
        assert wait_ranks(procs, tmp_path / "logs", timeout=150) == [0, 0], logs(tmp_path / "logs")
    finally:
        for s in held:
            s.close()
    assert records(run) == []  # removed once every rank had joined


def test_two_jobs_with_the_same_job_id_run_at_the_same_time(data, tmp_path):
    job = free_jobid()
    groups = [start_ranks(2, short_run(tmp_path / f"run{i}", data), tmp_path / f"logs{i}",
                          extra_env={"LSB_JOBID": job}) for i in range(2)]
    for i, procs in enumerate(groups):
        assert wait_ranks(procs, tmp_path / f"logs{i}", timeout=150) == [0, 0], logs(tmp_path / f"logs{i}")
        assert "2 ranks" in (tmp_path / f"logs{i}" / "rank0.log").read_text()


def test_a_rank_whose_rank_0_never_comes_ends_with_one_line(data, tmp_path):
    run = tmp_path / "run"
    env = rank_env(1, 2, free_jobid(), {"SUMMIT_JOBS_RENDEZVOUS_TIMEOUT": "3"})
    res = subprocess.run([sys.executable, "-m", "trainer", *short_run(run, data)], env=env, cwd=str(REPO),
                         capture_output=True, text=True, timeout=120)
    assert_refused(res, ["rank 1 waited 3 s for rank 0", str(run / ".rendezvous.")], prefix="trainer: ")
