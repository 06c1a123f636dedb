"""A Lightning Trainer chained with trainer.loop.lightning_chain.ChainCallback, on LSF and on Slurm.

docs/examples/lightning_train.py, the script docs/user-command.md shows (``Trainer(strategy="ddp",
num_nodes=2, devices=2)``, CPU and gloo), is submitted as a user would: ``summit-jobs submit --nodes 2
--until-complete --command 'python .../lightning_train.py --steps 12'``, 2 nodes x 2 ranks, once on the embedded
LSF (jsrun: Lightning picks its LSFEnvironment) and once on the local Slurm cluster (srun: its
SLURMEnvironment, whose auto-requeue the callback switches off). Each chain is 3 links: the first two are
warned once they have trained a step past where they started (LSF: SIGUSR2 to every process of the job, as
-wa and ``bkill -s USR2`` deliver it; Slurm: ``scancel --batch --signal=USR2``, as ``--signal=B:USR2@60``
delivers it), the third trains to the end. So the number of links does not depend on this machine's speed.

Checked: every link ends DONE with exit 0 and leaves no process behind; every link's ranks are one world of 4
on 2 nodes in the environment named above; the warned links save at a step they agreed on and the next link
resumes from it, at least once in the middle of an epoch (8 batches a rank each); the last writes COMPLETE and
status shows the 3 links DONE; and the final weights and optimizer state are bitwise those of one
uninterrupted run of the same script (a plain submit on the embedded LSF, shared by both chains). That holds
because the script's loader is resumable and its model draws no random numbers while training: Lightning
restores the loops, the optimizer and the data position, not the random states (docs/user-command.md).

Lightning's import costs seconds of CPU per rank, so the chains are as short as the checks allow: 3 links,
12 steps, one reference run.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

import pytest
import torch

from lsf_jobs import cli, lsf_environment, newest_step, require_client, wait_for, wait_state
from slurm_cluster import ENDED, cluster_job_processes, squeue_job
from summit_jobs.schedulers.lsf.embedded import vnode_ns
from test_launcher_chains import _chain as drive_lsf_chain
from trainer.loop.chain import STOP_SIGNALS
from trainer_utils import REPO
from summit_jobs.schedulers import FINISHED

PROGRAM = REPO / "docs" / "examples" / "lightning_train.py"
#: Steps of the run; an epoch is 8 steps (256 samples, 4 ranks, batches of 8), so a warned link (a step or
#: two past its start) stops inside an epoch and the last link crosses an epoch's end after a resume.
STEPS, EPOCH = 12, 8
#: Links warned before one is left to finish.
WARNED = 2
#: Seconds the script sleeps in each step: the warning reaches the ranks a step or two after it is sent.
STEP_SECONDS = 0.2


def command(steps: int = STEPS, step_seconds: float = STEP_SECONDS) -> List[str]:
    return ["--command", f"{sys.executable} {PROGRAM} --steps {steps} --step-seconds {step_seconds}"]


def test_the_module_imports_no_lightning_and_a_min_steps_trainer_is_refused(lightning, tmp_path):
    """Importing the callback's module loads neither torch nor Lightning (a login node without them can read
    it); a Trainer whose min_steps would train on past the warning's checkpoint is refused before its first
    step, with the option named."""
    code = ("import sys, trainer.loop.lightning_chain; "
            "print([m for m in ('torch', 'lightning', 'pytorch_lightning') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(REPO), timeout=60)
    assert (out.returncode, out.stdout.strip()) == (0, "[]"), out.stderr
    from trainer.loop.lightning_chain import ChainCallback

    class Tiny(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    before = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}    # this process is pytest's
    chain = ChainCallback(run_dir=tmp_path)
    try:
        trainer = lightning.Trainer(accelerator="cpu", devices=1, max_steps=2, min_steps=1, callbacks=[chain],
                                    logger=False, enable_checkpointing=False, enable_progress_bar=False,
                                    enable_model_summary=False, default_root_dir=str(tmp_path))
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(4, 2)), batch_size=2)
        with pytest.raises(ValueError, match=r"Trainer\(min_steps=1\) keeps training after the warning"):
            trainer.fit(Tiny(), loader)
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "COMPLETE").exists()


def submit(env: Dict[str, str], run_dir: Path, *args: str, machine: str = "local") -> str:
    res = cli(["--machine", machine, "submit", "--nodes", "2", "--walltime", "30", "--run-dir", str(run_dir),
               "--json", *args], env, timeout=120)
    assert res.returncode == 0, res.stderr
    return str(json.loads(res.stdout)["job_ids"][0])


def lsf_env(base: Path) -> Dict[str, str]:
    """An embedded LSF of the test's own, its minute a real one (no -wa warning within a link: the test warns)."""
    return dict(lsf_environment(base), SUMMIT_JOBS_LSF_MINUTE="60", OMP_NUM_THREADS="1")


def final_state(run_dir: Path) -> Dict[str, Dict[str, torch.Tensor]]:
    """The model and the optimizer's momentum of the run's last checkpoint (at STEPS)."""
    ckpt = torch.load(run_dir / "checkpoints" / f"ckpt-{STEPS:09d}.pt", weights_only=True, map_location="cpu")
    momentum = {str(k): v["momentum_buffer"] for k, v in ckpt["optimizer_states"][0]["state"].items()}
    return {"model": ckpt["state_dict"], "momentum": momentum}


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Dict[str, Dict[str, torch.Tensor]]:
    """One uninterrupted run of the script (a plain submit, one job) on the embedded LSF: what both chains must
    end with."""
    base = tmp_path_factory.mktemp("lightning-reference")
    env, run_dir = lsf_env(base), base / "run"
    job = submit(env, run_dir, *command(step_seconds=0))
    rec = wait_state(job, env, timeout=300)
    out = "".join(p.read_text(errors="replace") for p in sorted(run_dir.glob("*.out")))
    assert rec["STAT"] == "DONE" and (run_dir / "COMPLETE").exists(), out[-3000:]
    return final_state(run_dir)


def checkpoint_steps(run_dir: Path) -> List[int]:
    return sorted(int(p.name[5:14]) for p in (run_dir / "checkpoints").glob("ckpt-*.pt"))


def check_chain(run_dir: Path, jobs: List[str], env: Dict[str, str], environment: str,
                reference: Dict[str, Dict[str, torch.Tensor]]) -> None:
    """What both schedulers' chains must show (the module's docstring)."""
    logs = "".join(p.read_text(errors="replace") for p in sorted(run_dir.glob("lightning_train.*.out")))
    assert len(jobs) == WARNED + 1 and (run_dir / "COMPLETE").read_text() == f"step {STEPS}\n", logs[-3000:]
    assert logs.count(f"chain: 4 ranks on 2 nodes ({environment}") == len(jobs), logs[-3000:]
    assert logs.count("chain: warned (") == WARNED, logs[-3000:]       # SIGUSR2, or another rank's first
    stops = checkpoint_steps(run_dir)[:-1]
    assert len(stops) == WARNED and checkpoint_steps(run_dir)[-1] == STEPS, checkpoint_steps(run_dir)
    for step in stops:
        assert f"chain: resumed at step {step} from ckpt-{step:09d}.pt" in logs, logs[-3000:]
    assert any(step % EPOCH for step in stops), f"no link stopped inside an epoch: {stops}"
    assert f"chain: done at step {STEPS}: COMPLETE" in logs
    assert logs.count("summit-jobs: chain: queued link") == WARNED, logs[-3000:]
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert sorted(set(steps)) == list(range(1, STEPS + 1)), steps

    def settled():
        rows = json.loads(cli(["status", str(run_dir), "--json"], env, timeout=60).stdout)
        return rows if len(rows) == len(jobs) and all(r["state"] in FINISHED for r in rows) else None
    rows = wait_for(settled, timeout=60, what="status to show every link ended")
    assert [(r["job_id"], r["state"], r["exit_code"]) for r in rows] == [(j, "done", 0) for j in jobs], rows

    got = final_state(run_dir)
    for part, tensors in reference.items():
        differ = [k for k in tensors if not torch.equal(got[part][k], tensors[k])]
        assert got[part].keys() == tensors.keys() and not differ, \
            f"{part}: {differ} differ from the uninterrupted run's after resuming at {stops}"


@pytest.fixture(scope="module")
def lightning():
    """Lightning, or a skip without it (CI installs the clients extra and fails instead)."""
    return require_client("lightning")


def test_a_lightning_chain_on_the_embedded_lsf_ends_with_the_uninterrupted_runs_weights(lightning, tmp_path,
                                                                                         reference):
    why = vnode_ns.unavailable()
    if why is not None:
        pytest.skip("Lightning's LSFEnvironment finds its node by gethostname() in the rank file, and the "
                    f"virtual nodes cannot be given host names here: {why}")
    env, cell = lsf_env(tmp_path), tmp_path / "cell"
    cell.mkdir()
    first = submit(env, cell / "run", "--until-complete", "--max-links", "6", *command())
    jobs = drive_lsf_chain(env, first, cell, WARNED)
    check_chain(cell / "run", jobs, env, "LSFEnvironment)", reference)


def drive_slurm_chain(cluster, run_dir: Path, first: str) -> List[str]:
    """Every link to its end, the first WARNED warned a step past their start; the job ids in order. After each
    link: DONE (COMPLETED, exit 0) and no process of it left on either node."""
    jobs = [first]
    while True:
        jid, start = jobs[-1], newest_step(run_dir)
        ended = lambda: (run_dir / f"exitcode.{jid}").exists()    # noqa: E731 - the script's last act
        if len(jobs) <= WARNED:
            wait_for(lambda: newest_step(run_dir) > start or ended(), 300, f"job {jid} to train a step")
            res = cluster.run(["scancel", "--batch", "--signal=USR2", jid], timeout=60)
            assert res.returncode == 0, res.stderr
        wait_for(ended, 300, f"job {jid} to end")
        job = wait_for(lambda: (lambda j: j if j and j["job_state"] in ENDED else None)(squeue_job(cluster, jid)),
                       60, f"slurm to record job {jid}'s end")
        out = "".join(p.read_text(errors="replace") for p in sorted(run_dir.glob(f"*.{jid}.*")))
        assert job["job_state"] == "COMPLETED" and (run_dir / f"exitcode.{jid}").read_text() == "0\n", out[-3000:]
        wait_for(lambda: not cluster_job_processes(cluster, jid), 30, f"every process of job {jid} to end")
        if (run_dir / "COMPLETE").exists():
            return jobs
        queued = (run_dir / "chain.jobs").read_text().split() if (run_dir / "chain.jobs").exists() else []
        assert len(queued) == len(jobs), f"link {len(jobs)} queued no next link:\n{out[-3000:]}"
        jobs.append(queued[-1])
        time.sleep(0.1)


def test_a_lightning_chain_on_slurm_ends_with_the_uninterrupted_runs_weights(lightning, slurm_cluster, tmp_path,
                                                                            reference):
    env = slurm_cluster.env(lsf_env(tmp_path))
    run_dir = tmp_path / "run"
    first = submit(env, run_dir, "--until-complete", "--max-links", "6", *command(), machine="local-slurm")
    jobs = drive_slurm_chain(slurm_cluster, run_dir, first)
    check_chain(run_dir, jobs, env, "SLURMEnvironment); Lightning's SLURM auto-requeue off", reference)
    assert "#SBATCH --no-requeue" in (run_dir / "job.sbatch").read_text()
