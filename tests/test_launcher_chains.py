"""Every launcher survives the warning signal: {torchrun, blaunch, mpirun, jsrun} x {the built-in trainer,
a plain DDP script that knows only env://}, each as a chain until complete on 2 virtual nodes x 2 ranks.

Each cell submits with `summit-jobs submit --until-complete` as a user would. Every link is warned once it
has trained a step past where it started: the test sends the warning as ``bkill -s USR2`` and LSF's -wa
action deliver it (to every process of the job, ``state.signal_job``, called here), so the number
of links does not depend on this machine's speed (the -wa timing itself is tested in
test_warning_paths.py). Then, for every link:
- the ranks agree on a step, checkpoint, and exit 0; the link queues the next one; the last writes COMPLETE;
- once bjobs says the job ended, no process of it is alive: every process carrying the job's LSB_JOBID,
  or naming the cell's own folder without another job's (launchers, torchrun's agents, ranks), was
  recorded while the link ran, and each pid is checked to be gone (or a zombie, which has nothing left
  to run);
- all ranks hold the same weights: the trainer's stopped and complete events carry ``weights_agree``, and
  the DDP script writes every rank's final weights, compared tensor by tensor.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Dict, List, Set

import pytest
import torch

from conftest_lsf import bjobs_state, cli, job_processes, lsf_env, wait_for  # noqa: F401
from summit_jobs.schedulers.lsf.embedded import state as lsf_state
from test_launchers import _trainer_args
from trainer_utils import REPO, make_dataset

LAUNCHERS = ["torchrun", "blaunch", "mpirun", "jsrun"]
PROGRAMS = ["trainer", "ddp"]
#: Open MPI refuses to run as root without these (the CI machine runs tests as root).
MPI_ROOT = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
#: Steps of the whole run, and how far each link trains before its warning. The DDP script sleeps 0.2 s a
#: step, so its ranks stop within 2 steps of the warning: at most 3 steps a link, and 8 steps take at least
#: 3 links. The built-in trainer's tiny steps take milliseconds, and on a loaded machine a few more of them
#: pass before the ranks agree to stop: 12 steps keep its chains at 3 links or more even at 5 steps a link.
TOTAL_STEPS = {"trainer": 12, "ddp": 8}
STEPS_BEFORE_WARNING = 1
#: Links warned before one is left to finish: warned, resumed and warned again, then complete (3 links). Every
#: link costs a job start and 4 ranks' start-up: warning each one made the DDP chains 8 links of 1 step.
WARNED_LINKS = 2
DDP_SCRIPT = REPO / "tests" / "ddp_env_train.py"
@pytest.fixture(scope="module")
def data(tmp_path_factory):
    # 16 clips, 2 per rank x 4 ranks: 2 steps an epoch, TOTAL_STEPS["trainer"] / 2 epochs
    return make_dataset(tmp_path_factory.mktemp("chains") / "data", train=16, val=0, frames=4, size=32)


def _submit(env: Dict[str, str], cell: Path, launcher: str, program: str, data: Path) -> str:
    shape = [] if launcher == "jsrun" else ["--request", "slots", "--launcher", launcher]
    common = ["submit", "--nodes", "2", "--walltime", "30", "--until-complete", "--max-links", "10",
              "--run-dir", str(cell / "run"), "--job-name", f"{launcher}-{program}", "--json", *shape]
    if program == "trainer":
        args = common + ["--epochs", str(TOTAL_STEPS["trainer"] // 2), "--num-classes", "4", "--clips-per-gpu", "2",
                         "--engine", "ddp", "--arch", "resnet18", "--lr", "0.1", "--warmup-epochs", "0",
                         "--", *_trainer_args(data, max_steps=None)]
    else:
        script = cell / "ddp_env_train.py"          # a path of the cell's own, named in every rank's command line
        shutil.copy(DDP_SCRIPT, script)
        args = common + ["--command", f"{sys.executable} {script} --steps {TOTAL_STEPS['ddp']} --step-seconds 0.2"]
    res = cli(args, env, timeout=120)
    assert res.returncode == 0, res.stderr
    return str(json.loads(res.stdout)["job_ids"][0])


def _steps(run_dir: Path) -> int:
    """The newest step in metrics.jsonl (train records), 0 before any."""
    best = 0
    try:
        text = (run_dir / "metrics.jsonl").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("kind") == "train" and isinstance(rec.get("step"), int):
            best = max(best, rec["step"])
    return best


def _warn(env: Dict[str, str], jid: str) -> None:
    """The warning, as ``bkill -s USR2`` and the -wa action deliver it: to every process of the job
    (state.signal_job), sent from this process. Not through a bkill process: on a loaded machine its start
    takes seconds, in which the tiny trainer trains through its whole link."""
    home = Path(env["SUMMIT_JOBS_LSF_HOME"])
    job = lsf_state.load_job(home, int(jid))
    assert job is not None, f"job {jid} has no record in {home}"
    if job.get("state") == "RUN":           # the last link may have finished before its warning
        lsf_state.signal_job(job, signal.SIGUSR2, home)


def _drive_link(env: Dict[str, str], jid: str, cell: Path, run_dir: Path, warn: bool = True) -> Set[int]:
    """Watch one link: warn it a step past its start (unless not ``warn``), wait for its end; the pids it ran."""
    wait_for(lambda: bjobs_state(jid, env)["STAT"] != "PEND", timeout=120, what=f"job {jid} to start")
    start, pids, warned = _steps(run_dir), set(), not warn
    deadline = time.time() + 300
    while time.time() < deadline:
        # the step first, and the warning at once: a bjobs call in between lets a loaded machine's
        # trainer run several more steps
        if not warned and _steps(run_dir) >= start + STEPS_BEFORE_WARNING:
            _warn(env, jid)
            warned = True
        pids |= job_processes(jid, env["SUMMIT_JOBS_LSF_HOME"], cell)
        stat = bjobs_state(jid, env)["STAT"]
        if stat in ("DONE", "EXIT"):
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"job {jid} did not end within 300 s")
    assert len(pids) > 2, f"too few processes of job {jid} were seen: {sorted(pids)}"
    # the job's processes now: a pid recorded earlier may since have exec'd into another job's process (the
    # chain's bsub forks what becomes the next link's supervisor, which carries no LSB_JOBID)
    left = sorted(job_processes(jid, env["SUMMIT_JOBS_LSF_HOME"], cell))
    assert not left, f"job {jid} ended, but its processes {left} are alive: " + "; ".join(
        _cmdline(p) for p in left)
    return pids


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "(gone)"


def _chain(env: Dict[str, str], first: str, cell: Path) -> List[str]:
    """Drive every link of the chain to its end; the job ids in order. The first WARNED_LINKS links are warned;
    the next one trains to the end, so the chain is WARNED_LINKS + 1 links long (each warned link trains at most
    3 steps, fewer than the run's)."""
    run_dir = cell / "run"
    jobs = [first]
    while True:
        _drive_link(env, jobs[-1], cell, run_dir, warn=len(jobs) <= WARNED_LINKS)
        rec = bjobs_state(jobs[-1], env)
        out = "".join(p.read_text(errors="replace") for p in run_dir.glob(f"*.{jobs[-1]}.*"))
        assert rec["STAT"] == "DONE", f"link {len(jobs)} (job {jobs[-1]}) ended {rec}:\n{out[-3000:]}"
        if (run_dir / "COMPLETE").exists():
            return jobs
        queued = (run_dir / "chain.jobs").read_text().split() if (run_dir / "chain.jobs").exists() else []
        assert len(queued) == len(jobs), f"link {len(jobs)} queued no next link:\n{out[-3000:]}"
        jobs.append(queued[-1])


def _events(run_dir: Path) -> List[Dict]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("program", PROGRAMS)
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_chain_of_warned_links_completes_under_every_launcher(tmp_path, lsf_env, data, launcher, program):
    if launcher == "mpirun" and not shutil.which("mpirun", path=lsf_env["PATH"]):
        if os.environ.get("CI"):
            pytest.fail("mpirun (Debian's openmpi-bin) is missing: .ci/run installs it")
        pytest.skip("Open MPI's mpirun is not installed here (apt install openmpi-bin)")
    env = dict(lsf_env, SUMMIT_JOBS_LSF_MINUTE="60", OMP_NUM_THREADS="1", **MPI_ROOT)
    cell = tmp_path / f"{launcher}-{program}"
    cell.mkdir()
    jobs = _chain(env, _submit(env, cell, launcher, program, data), cell)
    run_dir = cell / "run"
    assert len(jobs) == WARNED_LINKS + 1, f"{len(jobs)} links"
    logs = "".join(p.read_text(errors="replace") for p in sorted(run_dir.glob("*.out")))
    assert logs.count("summit-jobs: chain: queued link") == len(jobs) - 1, logs[-3000:]
    if program == "trainer":
        events = _events(run_dir)
        stopped = [e for e in events if e["event"] == "stopped"]
        complete = [e for e in events if e["event"] == "complete"]
        assert [e["job"] for e in stopped] == jobs[:-1], events
        assert all("SIGUSR2" in e["reason"] for e in stopped), stopped
        assert len(complete) == 1 and complete[0]["step"] == TOTAL_STEPS["trainer"] and complete[0]["job"] == jobs[-1]
        assert all(e["weights_agree"] is True for e in stopped + complete), stopped + complete
    else:
        assert (run_dir / "COMPLETE").read_text() == f"step {TOTAL_STEPS['ddp']}\n"
        # the last link may be warned too, when its warning and its last step coincide
        assert logs.count("rank 0: warned at step") >= len(jobs) - 1, logs[-3000:]
        for jid in jobs:
            infos = [json.loads((run_dir / "ranks" / f"{jid}.{r}.pid").read_text()) for r in range(4)]
            assert [i["world"] for i in infos] == [4] * 4
            assert [i["group_rank"] for i in infos] == ["0", "0", "1", "1"], infos
            weights = [torch.load(run_dir / "ranks" / f"{jid}.{r}.pt", weights_only=True) for r in range(4)]
            for r in range(1, 4):
                assert all(torch.equal(weights[0][k], weights[r][k]) for k in weights[0]), f"job {jid} rank {r}"
