"""Every launcher survives the warning signal: {torchrun, blaunch, mpirun, jsrun} x {the built-in trainer,
a plain DDP script that knows only env://}, each as a chain until complete on 2 virtual nodes x 2 ranks.

Each cell submits with `summit-jobs submit --until-complete` as a user would. Every link but the last is
warned once it has trained a step past where it started (WARNED_LINKS: two under jsrun, one under the others):
the test sends the warning as ``bkill -s USR2`` and LSF's -wa action deliver it (to every process of the job,
``state.signal_job``, through lsf_jobs.warn_job), so the number of links does not depend on this
machine's speed (the -wa timing itself is tested in test_embedded_lsf.py and test_lsf_semantics.py). Then,
for every link:
- the ranks agree on a step, checkpoint, and exit 0; the link queues the next one; the last writes COMPLETE;
- once the job's record says it ended (and bjobs that it is DONE), no process of it is alive: every process
  carrying the job's LSB_JOBID, or naming the cell's own folder without another job's (launchers,
  torchrun's agents, ranks), is looked for and none may be left (one that is a zombie has nothing left to
  run); those seen while the link ran show that the look finds the job's processes;
- all ranks hold the same weights: the trainer's stopped and complete events carry ``weights_agree``, and
  the DDP script writes every rank's final weights, compared tensor by tensor.
And for the built-in trainer, across launchers (the -n/span[ptile] form of today's LSF against the CSM/jsrun
form): each launcher's log says who started the ranks and that rank 0 is on the first virtual node, the
torchrun job's script asks ``-n 4 -R span[ptile=2]`` and no ``-nnodes``, and every launcher's chain ends with
the very weights the jsrun chain ends with (resuming is bitwise exact, test_resume.py, so where the links
were cut does not matter).
The two torchrun chains run side by side, each in an embedded LSF home of its own, submitted at the same moment:
homes that numbered their jobs alone gave both jobs one id, hence one torchrun rendezvous (the same port and
--rdzv-id), and the four agents met in one store. Their links must have ids and ports of their own.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Set, Tuple

import pytest
import torch

from lsf_jobs import bjobs_state, cli, job_processes, lsf_environment, newest_step, recorded_state, wait_for, warn_job
from summit_jobs.schedulers.lsf.embedded import state as native_state
from summit_jobs.schedulers.lsf.embedded.state import node_names
from test_launchers import _trainer_args
from user_chain_checks import check_user_chain
from trainer_utils import REPO

#: jsrun first: the other launchers' trainer chains are compared with its weights.
LAUNCHERS = ["jsrun", "torchrun", "blaunch", "mpirun"]
PROGRAMS = ["trainer", "ddp"]
#: Who each launcher's trainer log says started the ranks.
STARTED_BY = {"jsrun": "jsrun", "blaunch": "blaunch", "mpirun": "mpi", "torchrun": "torchrun"}
#: The first virtual node's name without its number (vnode, or 127.1.0. where tasks get no host names).
NODE1 = node_names(1)[0]
#: Open MPI refuses to run as root without these (the CI machine runs tests as root).
MPI_ROOT = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
#: Steps of the whole run, and how far each link trains before its warning. The DDP script sleeps 0.2 s a
#: step, so its ranks stop within 2 steps of the warning: at most 3 steps a link, and 8 steps take at least
#: 3 links. The built-in trainer's tiny steps take milliseconds, and on a loaded machine a few more of them
#: pass before the ranks agree to stop: 12 steps keep its chains at 3 links or more even at 5 steps a link.
TOTAL_STEPS = {"trainer": 12, "ddp": 8}
STEPS_BEFORE_WARNING = 1
#: Links warned before one is left to finish. Every link costs a job start and 4 ranks' start-up (warning each
#: one made the DDP chains 8 links of 1 step). Under jsrun, the default launcher: warned, resumed and warned
#: again, then complete (3 links), so a resumed link's warning and checkpoint are seen under each program.
#: Under the other launchers: warned, then resumed to complete (2 links), which is every step a launcher
#: takes part in (the warning reaching its ranks, their exit, the next link starting them from a checkpoint).
WARNED_LINKS = {"jsrun": 2, "torchrun": 1, "blaunch": 1, "mpirun": 1}
DDP_SCRIPT = REPO / "tests" / "ddp_env_train.py"
#: Seconds between two looks for the job's processes while a link runs (a look reads every process's
#: environment): every 0.1 s until a few have been seen (a link that is not warned may end within a second),
#: then every 0.5 s. The look only has to show that it finds the job's processes; the one that counts comes
#: after the end.
PROCESS_LOOK = (0.1, 0.5)
#: Processes after which the looks slow down: at least the batch script, the launcher and a rank.
FEW = 4


@dataclass
class Cell:
    """One chain that ran to its end: the job ids of its links, in order, and its folders."""
    launcher: str
    program: str
    folder: Path
    jobs: List[str]
    env: Dict[str, str]

    @property
    def run_dir(self) -> Path:
        return self.folder / "run"


# 16 clips, 2 per rank x 4 ranks: 2 steps an epoch, TOTAL_STEPS["trainer"] / 2 epochs
DATA_SHAPE = dict(train=16, val=0, frames=4, size=32)  # the ``data`` fixture's set (conftest.py)


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


def _drive_link(env: Dict[str, str], jid: str, cell: Path, run_dir: Path, warn: bool = True) -> Set[int]:
    """Watch one link: warn it a step past its start (unless not ``warn``), wait for its end; the pids it ran.

    The job's state is read from its record in this process (recorded_state): a bjobs process ten times a
    second took CPU from the ranks; bjobs is asked once the link has ended (_chain)."""
    wait_for(lambda: recorded_state(jid, env) not in (None, "PEND"), timeout=120, what=f"job {jid} to start")
    start, pids, warned = newest_step(run_dir), set(), not warn
    deadline = time.time() + 300
    looked = 0.0
    while time.time() < deadline:
        # the step first, and the warning at once: anything slow in between lets a loaded machine's
        # trainer run several more steps
        if not warned and newest_step(run_dir) >= start + STEPS_BEFORE_WARNING:
            warn_job(jid, env)
            warned = True
        if time.time() - looked >= PROCESS_LOOK[len(pids) > FEW]:
            pids |= job_processes(jid, env["SUMMIT_JOBS_LSF_HOME"], cell)
            looked = time.time()
        if recorded_state(jid, env) in ("DONE", "EXIT"):
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"job {jid} did not end within 300 s")
    assert len(pids) > 2, f"too few processes of job {jid} were seen: {sorted(pids)}"
    # the job's processes now: a pid recorded earlier may since have exec'd into another job's process (the
    # chain's bsub forks what becomes the next link's supervisor, which carries no LSB_JOBID)
    # The job record says DONE once the script has ended; the supervisor then ends what is left of the job within
    # its kill grace, so a process still there after that bound is one the job left behind.
    deadline = time.time() + 15
    left = sorted(job_processes(jid, env["SUMMIT_JOBS_LSF_HOME"], cell))
    while left and time.time() < deadline:
        time.sleep(0.2)
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


def _chain(env: Dict[str, str], first: str, cell: Path, warned: int) -> List[str]:
    """Drive every link of the chain to its end; the job ids in order. The first ``warned`` links are warned;
    the next one trains to the end, so the chain is ``warned`` + 1 links long (each warned link trains at most
    3 steps, fewer than the run's)."""
    run_dir = cell / "run"
    jobs = [first]
    while True:
        _drive_link(env, jobs[-1], cell, run_dir, warn=len(jobs) <= warned)
        rec = bjobs_state(jobs[-1], env)
        out = "".join(p.read_text(errors="replace") for p in run_dir.glob(f"*.{jobs[-1]}.*"))
        assert rec["STAT"] == "DONE", f"link {len(jobs)} (job {jobs[-1]}) ended {rec}:\n{out[-3000:]}"
        if (run_dir / "COMPLETE").exists():
            return jobs
        queued = (run_dir / "chain.jobs").read_text().split() if (run_dir / "chain.jobs").exists() else []
        assert len(queued) == len(jobs), f"link {len(jobs)} queued no next link:\n{out[-3000:]}"
        jobs.append(queued[-1])


def _run_cell(base: Path, data: Path, launcher: str, program: str,
              together: Optional[threading.Barrier] = None) -> Cell:
    """Submit one cell's chain in an embedded LSF home of its own and drive it to its end; with ``together``,
    the submission waits for the other cells' at that barrier, so that all are submitted at the same moment."""
    env = dict(lsf_environment(base), SUMMIT_JOBS_LSF_MINUTE="60", OMP_NUM_THREADS="1", **MPI_ROOT)
    if launcher == "mpirun" and not shutil.which("mpirun", path=env["PATH"]):
        if os.environ.get("CI"):
            pytest.fail("mpirun (Debian's openmpi-bin) is missing: .ci/run installs it")
        pytest.skip("Open MPI's mpirun is not installed here (apt install openmpi-bin)")
    folder = base / f"{launcher}-{program}"
    folder.mkdir()
    if together is not None:
        together.wait(timeout=60)
    first = _submit(env, folder, launcher, program, data)
    return Cell(launcher, program, folder, _chain(env, first, folder, WARNED_LINKS[launcher]), env)


#: Launchers whose cells (both programs) run side by side, each in a home of its own (see the docstring).
SIDE_BY_SIDE = {"torchrun"}


@pytest.fixture(scope="module")
def chains(tmp_path_factory, data) -> Callable[[str, str], Cell]:
    """Each cell's chain, run once however many tests read it: the trainer cells of the other launchers
    compare their weights with the jsrun chain's; a SIDE_BY_SIDE launcher's cells run together, each in a
    thread of its own. A chain that failed fails every test that asks for it."""
    done: Dict[Tuple[str, str], object] = {}

    def run(launcher: str, programs: List[str]) -> None:
        together = threading.Barrier(len(programs)) if len(programs) > 1 else None
        with ThreadPoolExecutor(len(programs)) as pool:
            futures = {p: pool.submit(_run_cell, tmp_path_factory.mktemp(f"{launcher}-{p}"), data, launcher, p,
                                      together) for p in programs}
        for program, future in futures.items():
            try:
                done[(launcher, program)] = future.result()
            except BaseException as exc:          # noqa: B036 - a skip or failure is reported by every asker
                done[(launcher, program)] = exc

    def get(launcher: str, program: str) -> Cell:
        if (launcher, program) not in done:
            run(launcher, PROGRAMS if launcher in SIDE_BY_SIDE else [program])
        found = done[(launcher, program)]
        if isinstance(found, BaseException):
            raise found
        return found
    return get


def _events(run_dir: Path) -> List[Dict]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]


def _final_weights(run_dir: Path) -> Dict[str, torch.Tensor]:
    newest = sorted((run_dir / "checkpoints").glob("ckpt-*.pt"))[-1]
    return torch.load(newest, weights_only=True, map_location="cpu")["model"]


def _check_trainer(cell: Cell, logs: str, chains: Callable[[str, str], Cell]) -> None:
    """The built-in trainer's facts: each warned link stopped on SIGUSR2 with agreeing weights, one complete
    event at the last step; who started the ranks; the same final weights as the jsrun chain."""
    jobs, run_dir = cell.jobs, cell.run_dir
    events = _events(run_dir)
    stopped = [e for e in events if e["event"] == "stopped"]
    complete = [e for e in events if e["event"] == "complete"]
    assert [e["job"] for e in stopped] == jobs[:-1], events
    assert all("SIGUSR2" in e["reason"] for e in stopped), stopped
    assert len(complete) == 1 and complete[0]["step"] == TOTAL_STEPS["trainer"] and complete[0]["job"] == jobs[-1]
    assert all(e["weights_agree"] is True for e in stopped + complete), stopped + complete
    assert f"ranks started by {STARTED_BY[cell.launcher]}; rank 0 on {NODE1[:-1]}" in logs, logs[-3000:]
    assert "ddp engine, 4 ranks" in logs, logs[-3000:]
    if cell.launcher == "torchrun":
        script = (run_dir / "job.lsf").read_text()
        assert '#BSUB -n 4\n#BSUB -R "span[ptile=2]"\n' in script and "#BSUB -nnodes" not in script, script
    if cell.launcher != "jsrun":
        reference, weights = _final_weights(chains("jsrun", "trainer").run_dir), _final_weights(run_dir)
        assert weights.keys() == reference.keys()
        differ = [k for k in reference if not torch.equal(weights[k], reference[k])]
        assert not differ, f"{cell.launcher}: {len(differ)} tensors differ from the jsrun chain, e.g. {differ[:3]}"


def _check_ddp(cell: Cell, logs: str) -> None:
    """The DDP script's facts: COMPLETE at its last step, a warned rank 0 in every link but the last, every
    link's 4 ranks in one world on 2 nodes with the same final weights."""
    jobs, run_dir = cell.jobs, cell.run_dir
    assert (run_dir / "COMPLETE").read_text() == f"step {TOTAL_STEPS['ddp']}\n"
    check_user_chain(cell.env, run_dir, jobs, total=TOTAL_STEPS["ddp"])
    # the last link may be warned too, when its warning and its last step coincide
    assert logs.count("rank 0: warned at step") >= len(jobs) - 1, logs[-3000:]
    for jid in jobs:
        infos = [json.loads((run_dir / "ranks" / f"{jid}.{r}.pid").read_text()) for r in range(4)]
        assert [i["world"] for i in infos] == [4] * 4
        assert [i["group_rank"] for i in infos] == ["0", "0", "1", "1"], infos
        weights = [torch.load(run_dir / "ranks" / f"{jid}.{r}.pt", weights_only=True) for r in range(4)]
        for r in range(1, 4):
            assert all(torch.equal(weights[0][k], weights[r][k]) for k in weights[0]), f"job {jid} rank {r}"


@pytest.mark.parametrize("program", PROGRAMS)
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_chain_of_warned_links_completes_under_every_launcher(chains, launcher, program):
    cell = chains(launcher, program)
    assert len(cell.jobs) == WARNED_LINKS[launcher] + 1, f"{len(cell.jobs)} links"
    logs = "".join(p.read_text(errors="replace") for p in sorted(cell.run_dir.glob("*.out")))
    assert logs.count("summit-jobs: chain: queued link") == len(cell.jobs) - 1, logs[-3000:]
    if program == "trainer":
        _check_trainer(cell, logs + "".join(p.read_text(errors="replace") for p in cell.run_dir.glob("*.err")),
                       chains)
    else:
        _check_ddp(cell, logs)


#: The torchrun launch line of a job's output: its rendezvous host and port.
TORCHRUN_LINE = r"job {job} starting 4 ranks on 2 nodes \(torchrun, rendezvous ([\w.-]+):(\d+)\)"


def test_torchrun_chains_of_two_homes_run_side_by_side_with_ids_and_ports_of_their_own(chains):
    """The two torchrun cells' homes hand out distinct job ids (one machine-wide counter), their first links
    run at the same time, and links of the two homes that run at the same time rendezvous at ports of their
    own; that every link ended DONE with no process left is the cells' own test."""
    cells = [chains("torchrun", program) for program in PROGRAMS]
    ids = [job for cell in cells for job in cell.jobs]
    assert len(set(ids)) == len(ids), [cell.jobs for cell in cells]
    links = []                                  # (cell, job, start, finish, port) of every link
    for cell in cells:
        for job in cell.jobs:
            rec = native_state.load_job(cell.folder.parent / "lsf", int(job))
            out = (cell.run_dir / f"torchrun-{cell.program}.{job}.out").read_text(errors="replace")
            found = re.search(TORCHRUN_LINE.format(job=job), out)
            assert rec is not None and found, out[-3000:]
            links.append((cell.program, job, rec["start_time"], rec["finish_time"], found.group(2)))
    together = [(a, b) for a in links for b in links
                if a[0] < b[0] and max(a[2], b[2]) < min(a[3], b[3])]
    firsts = {(cells[0].program, cells[0].jobs[0]), (cells[1].program, cells[1].jobs[0])}
    assert any({a[:2], b[:2]} == firsts for a, b in together), links       # the first links side by side
    assert all(a[4] != b[4] for a, b in together), together
