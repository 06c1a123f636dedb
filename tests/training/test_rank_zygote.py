"""The rank zygote (tests/rank_zygote.py) gives the tests what an exec'd ``python -m trainer`` gives: the same
refusal and exit status, the same weights from the same run, its own pid and process group, the environment
asked for, and a status of -N when signal N ends it; a request whose import-time environment differs is
exec'd."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

import trainer_utils
from trainer_utils import REPO, free_jobid, make_dataset, rank_env, run_trainer, start_rank, tiny_args

from trainer import rundir
from trainer.loop import checkpoint as ckpt


#: SUMMIT_JOBS_TEST_EXEC_RANKS=1 execs every rank: then there is no forked rank to compare.
forked_only = pytest.mark.skipif(os.environ.get("SUMMIT_JOBS_TEST_EXEC_RANKS") == "1",
                                 reason="SUMMIT_JOBS_TEST_EXEC_RANKS=1: every rank is exec'd")


def _params(run):
    return ckpt.load(ckpt.latest(run))["model"]


@forked_only
def test_a_forked_rank_refuses_trains_and_ends_as_an_exec_d_one(tmp_path):
    env = rank_env(0, 1, free_jobid())
    forked = run_trainer(["--run-dir", str(tmp_path / "x")], env)
    execd = subprocess.run([sys.executable, "-m", "trainer", "--run-dir", str(tmp_path / "x")], env=env,
                           cwd=str(REPO), capture_output=True, text=True, timeout=120)
    assert (forked.returncode, forked.stderr, forked.stdout) == (execd.returncode, execd.stderr, execd.stdout)
    assert forked.returncode != 0 and "--data DIR is required" in forked.stderr

    data = make_dataset(tmp_path / "data", train=8, val=0, frames=4, size=32)
    for name, fresh in (("forked", False), ("execd", True)):
        rank = start_rank(tiny_args(tmp_path / name, data, eval_every=0) + ["--no-test"], rank_env(0, 1, free_jobid()),
                          tmp_path / f"{name}.log", fresh=fresh)
        assert isinstance(rank, trainer_utils.rank_zygote.ForkedRank) != fresh, trainer_utils._zygote().env
        assert rank.wait(timeout=120) == 0, (tmp_path / f"{name}.log").read_text()
    a, b = _params(tmp_path / "forked"), _params(tmp_path / "execd")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert "all 1 epochs done" in (tmp_path / "forked.log").read_text()


@forked_only
def test_a_forked_rank_has_its_own_pid_group_environment_and_signal_status(tmp_path):
    data = make_dataset(tmp_path / "data", train=8, val=0, frames=4, size=32)
    job = free_jobid()
    env = rank_env(0, 1, job)
    rank = start_rank(tiny_args(tmp_path / "run", data, epochs=500) + ["--no-test"], env, tmp_path / "r.log",
                      process_group=0)
    assert isinstance(rank, trainer_utils.rank_zygote.ForkedRank)
    deadline = time.time() + 60
    while "step 2/" not in (tmp_path / "r.log").read_text():
        assert time.time() < deadline and rank.poll() is None, (tmp_path / "r.log").read_text()
        time.sleep(0.05)
    # A process of its own, leading the group it asked for, the zygote's child (which reaps it), and
    # running with the environment it was given.
    assert rank.pid != os.getpid() and os.getpgid(rank.pid) == rank.pid != os.getpgid(0)
    ppid = int(open(f"/proc/{rank.pid}/stat").read().rsplit(")", 1)[1].split()[1])
    assert ppid == trainer_utils._zygote().proc.pid
    launch = [json.loads(line) for line in (tmp_path / "run" / rundir.EVENTS).read_text().splitlines()][0]
    assert (launch["event"], launch["job"]) == ("launch", job)  # its LSB_JOBID, not the zygote's
    rank.send_signal(signal.SIGKILL)
    assert rank.wait(timeout=30) == -signal.SIGKILL
    assert rank.poll() == -signal.SIGKILL


def test_a_request_whose_import_time_environment_differs_is_exec_d(tmp_path):
    env = rank_env(0, 1, free_jobid(), {"OMP_NUM_THREADS": "2"})
    assert not trainer_utils._zygote().accepts(env)
    rank = start_rank(["--run-dir", str(tmp_path / "x")], env, tmp_path / "r.log")
    assert not isinstance(rank, trainer_utils.rank_zygote.ForkedRank)
    assert rank.wait(timeout=120) != 0 and "--data DIR is required" in (tmp_path / "r.log").read_text()


def test_another_trainer_module_forked_answers_as_its_exec_d_run(tmp_path):
    """``python -m trainer.models.interop`` (a module the zygote has imported) forked: the same refusal, stdout
    and status as exec'd, and no runpy warning that the module was imported before it ran."""
    (tmp_path / "notes.pth").write_text("epoch 3: top-1 71.2%\n")
    args = ["convert", str(tmp_path / "notes.pth"), str(tmp_path / "out.pth"), "--to", "tsm"]
    env = rank_env(0, 1, free_jobid())
    forked = run_trainer(args, env, module="trainer.models.interop")
    execd = subprocess.run([sys.executable, "-m", "trainer.models.interop", *args], env=env, cwd=str(REPO),
                           capture_output=True, text=True, timeout=120)
    assert (forked.returncode, forked.stderr, forked.stdout) == (execd.returncode, execd.stderr, execd.stdout)
    assert forked.returncode != 0 and "notes.pth" in forked.stderr and "RuntimeWarning" not in forked.stderr
    assert not (tmp_path / "out.pth").exists()


@forked_only
def test_a_rank_program_of_the_tests_is_forked_and_fails_as_its_exec_d_run(tmp_path):
    """``start_ranks(module=(tests/methods_worker.py,))`` forks the script (``python SCRIPT`` as runpy runs it):
    called without its arguments, it fails with the same status and the same last line as exec'd."""
    worker = (str(REPO / "tests" / "methods_worker.py"),)
    (forked,) = trainer_utils.start_ranks(1, [], tmp_path / "forked", module=worker)
    assert isinstance(forked, trainer_utils.rank_zygote.ForkedRank)
    (execd,) = trainer_utils.start_ranks(1, [], tmp_path / "execd", module=worker, fresh=True)
    assert not isinstance(execd, trainer_utils.rank_zygote.ForkedRank)
    assert forked.wait(timeout=60) == execd.wait(timeout=60) == 1
    last = [(tmp_path / d / "rank0.log").read_text().strip().splitlines()[-1] for d in ("forked", "execd")]
    assert last[0] == last[1] == "IndexError: list index out of range", last
