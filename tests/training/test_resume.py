"""Chain contract under the embedded jsrun with real rank processes: SIGUSR2
(LSF's warning signal, forwarded by jsrun) saves and exits 0; a run SIGKILLed at
a random step and resumed ends bitwise where an uninterrupted run ends; a link
after COMPLETE exits at once. One run goes through all of it (four launches)."""
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
import torch

from trainer_utils import REPO, free_jobid, tiny_args

from trainer.loop import checkpoint as ckpt
from trainer.loop.metrics import read_metrics

RANKS = 2


def jsrun(args, tmp_path, tag):
    """Start the embedded jsrun in its own process group (so the test can SIGKILL exactly what it started)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JSM_", "OMPI_", "HOROVOD_", "LSB_"))}
    env.update({"LSB_MCPU_HOSTS": "batch1 1 127.1.0.1 4", "LSB_JOBID": free_jobid(), "OMP_NUM_THREADS": "1",
                "SUMMIT_JOBS_LSF_HOME": str(tmp_path / "lsf"), "PYTHONPATH": str(REPO)})
    log = open(tmp_path / f"{tag}.log", "w")
    cmd = [sys.executable, "-m", "summit_jobs.schedulers.lsf.embedded.commands.jsrun", "-n", str(RANKS), "-r", str(RANKS), "-a", "1",
           "-c", "1", sys.executable, "-m", "trainer", *args]
    p = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=str(REPO), start_new_session=True)
    log.close()
    return p


def finish(p, tmp_path, tag, timeout=150):
    try:
        rc = p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        raise AssertionError("timed out:\n" + (tmp_path / f"{tag}.log").read_text()[-4000:])
    return rc


def wait_for_step(run_dir, step, p, timeout=120):
    end = time.time() + timeout
    while time.time() < end:
        steps = [r["step"] for r in read_metrics(run_dir) if r["kind"] == "train"]
        if steps and max(steps) >= step:
            return max(steps)
        assert p.poll() is None, "the run ended before the step was reached"
        time.sleep(0.05)
    raise AssertionError(f"step {step} not reached")


def args_for(run, data):
    return tiny_args(run, data, epochs=3, eval_every=0, lr=0.02, ckpt_every_steps=2, test_clips=1,
                     test_last=1)


def final_state(run):
    s = ckpt.load(ckpt.latest(run))
    return s


def assert_bitwise_equal(a, b):
    assert a["step"] == b["step"] == 18
    for k, v in a["model"].items():
        assert torch.equal(v, b["model"][k]), f"model tensor {k} differs"
    ma = a["optimizer"]["state"]
    mb = b["optimizer"]["state"]
    assert ma.keys() == mb.keys()
    for k in ma:
        assert torch.equal(ma[k]["momentum_buffer"], mb[k]["momentum_buffer"])


@pytest.fixture(scope="module")
def reference(data, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ref")
    run = tmp / "run"
    p = jsrun(args_for(run, data), tmp, "ref")
    assert finish(p, tmp, "ref") == 0, (tmp / "ref.log").read_text()[-4000:]
    assert (run / "COMPLETE").exists()
    return final_state(run)


def test_sigusr2_saves_and_exits_zero_then_sigkill_at_random_step_then_resume_is_bitwise_identical(
        data, reference, tmp_path):
    """One run through four launches of the embedded jsrun (2 ranks), against the uninterrupted reference.

    Facts: (1) SIGUSR2 to jsrun, which forwards it to every rank as the job script's trap does, makes the
    ranks save and exit 0: "signal SIGUSR2 ... checkpoint saved", no COMPLETE, and the checkpoint is the very
    step the run stopped after; (2) the next launch resumes and is SIGKILLed (jsrun and its ranks, no chance
    to save) at a random later step: no COMPLETE, and the newest checkpoint is no later than the last step
    it trained; (3) the next launch resumes, completes with the final test (mean and std reported) and ends
    bitwise where the uninterrupted run ends, weights and momentum; (4) a later chain link finds COMPLETE and
    exits at once."""
    run = tmp_path / "run"
    p = jsrun(args_for(run, data), tmp_path, "usr2")
    wait_for_step(run, 3, p)
    os.kill(p.pid, signal.SIGUSR2)
    assert finish(p, tmp_path, "usr2") == 0, (tmp_path / "usr2.log").read_text()[-4000:]
    log = (tmp_path / "usr2.log").read_text()
    assert "signal SIGUSR2" in log and "checkpoint saved" in log
    assert not (run / "COMPLETE").exists()
    stopped = ckpt.load(ckpt.latest(run))["step"]
    assert 3 <= stopped < 18
    last_train = [r for r in read_metrics(run) if r["kind"] == "train"][-1]
    assert last_train["step"] == stopped  # the checkpoint is the very step the run stopped after

    # Checkpoints every 2 steps are written in the background; the resumed launch already has one.
    target = random.Random().randint(min(stopped + 2, 15), 15)
    p = jsrun(args_for(run, data), tmp_path, "killed")
    wait_for_step(run, target, p)
    os.killpg(p.pid, signal.SIGKILL)  # jsrun and its ranks: no chance to save anything
    p.wait()
    assert "resumed from" in (tmp_path / "killed.log").read_text()
    assert not (run / "COMPLETE").exists()
    reached = max(r["step"] for r in read_metrics(run) if r["kind"] == "train")   # the ranks ran on until the kill
    saved = ckpt.latest(run)
    assert saved is not None and ckpt.load(saved)["step"] <= reached

    p = jsrun(args_for(run, data), tmp_path, "resumed")
    assert finish(p, tmp_path, "resumed") == 0, (tmp_path / "resumed.log").read_text()[-4000:]
    assert "resumed from" in (tmp_path / "resumed.log").read_text()
    assert (run / "COMPLETE").exists()
    assert_bitwise_equal(final_state(run), reference)
    # the final test ran and reported mean/std
    summary = [r for r in read_metrics(run) if r["kind"] == "test" and r.get("summary")]
    assert summary and 0.0 <= summary[-1]["top1"] <= 1.0 and "top1_std" in summary[-1]

    # a later chain link finds COMPLETE and exits at once
    p = jsrun(args_for(run, data), tmp_path, "again")
    assert finish(p, tmp_path, "again") == 0
    assert "COMPLETE exists" in (tmp_path / "again.log").read_text()


def test_metrics_records_have_the_documented_fields(data, reference, tmp_path_factory):
    run = next(tmp_path_factory.getbasetemp().glob("ref*/run"))
    recs = read_metrics(run)
    need = {"kind", "step", "epoch", "loss", "top1", "top5", "lr", "clips_per_s", "data_wait_frac",
            "step_time", "time"}
    kinds = {r["kind"] for r in recs}
    assert {"train", "test"} <= kinds
    for r in recs:
        assert need <= set(r), f"record lacks {need - set(r)}: {json.dumps(r)}"
    train = [r for r in recs if r["kind"] == "train"]
    assert [r["step"] for r in train] == list(range(1, 19))
    assert all(r["clips_per_s"] > 0 and 0 <= r["data_wait_frac"] <= 1 for r in train)
