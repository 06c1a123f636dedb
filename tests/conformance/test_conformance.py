"""One job-control suite over every scheduler: the embedded LSF and the real local Slurm cluster.

What a user does with any scheduler goes through the real command line (``summit-jobs submit``, ``status``,
``logs``, ``cancel``) and must read the same: a job's state in the interface's words (pending, running, done,
failed, cancelled, timed_out; the scheduler's own word in native_state), its output files, a cancel of a pending
and of a running link, a chain of 3 links each stopped by the warning, a submission the scheduler itself refuses,
and an id it does not know. After every job, none of its processes is left.

A third scheduler adds one entry to ``SCHEDULERS`` (a :class:`Harness`: its machine profile, its shell, where its
jobs' processes are found, how a submission is made to be refused, its walltime for a short chain link).

The long jobs (the chain and a job that runs into its run limit) are queued when a scheduler's first test starts
and collected by its last one, so the suite waits for them once, while the other tests run.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List

import pytest

from lsf_jobs import cli, job_processes, lsf_environment, run, stretched, wait_for
from summit_jobs.schedulers import FINISHED
from user_chain_checks import check_user_chain

#: The user's program, torch-free: ``fail`` exits 3; ``hang`` ignores the warning and runs until it is killed;
#: ``train STEPS`` follows the chain contract (the warning stops it after a step, it saves, and rank 0 says so).
PROGRAM = r'''
import json, os, signal, sys, time
from trainer.loop.chain import Chain
mode, rank = sys.argv[1], os.environ.get("RANK", "0")      # every launcher gives each rank torchrun's variables
print(f"conformance: {mode} on rank {rank}", flush=True)
if mode == "fail":
    sys.exit(3)
if mode == "hang":
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    while True:
        time.sleep(0.2)
chain = Chain(every=1)
state = chain.resume(lambda path: json.loads(path.read_text()))
step = state["step"] if state else 0
if state and rank == "0":
    print(f"conformance: resumed at step {step}", flush=True)
steps = int(sys.argv[2])
while step < steps:
    step += 1
    chain.record(step, loss=1.0 / step)
    time.sleep(0.2)
    if chain.should_stop(step):
        break
chain.save(step, lambda path: path.write_text(json.dumps({"step": step})))
if step >= steps:
    chain.complete(f"step {step}")
chain.finish()
if rank == "0":
    print(f"conformance: {'done' if step >= steps else 'warned'} at step {step}", flush=True)
'''


#: How long a short job (a chain link of two minutes) may take from its submission to its end on each scheduler,
#: stretched by this machine's speed once, at import, with the long test's own limit below.
LINK_SECONDS = {"lsf": stretched(60), "slurm": stretched(240)}


@dataclass
class Harness:
    """A scheduler as this suite drives it."""
    name: str
    #: The machine profile whose jobs go to this scheduler here.
    machine: str
    #: The user's shell: the scheduler's commands reachable, this test's own config and data folders.
    env: Dict[str, str]
    #: The live processes of a job (ids or pids as text); empty once the job left nothing behind.
    processes: Callable[[str], List[str]]
    #: Submit options with which the scheduler itself refuses the job, and the words of its refusal.
    refused: List[str]
    refusal_words: str
    #: --walltime and --warning-minutes of a chain link that the warning stops within the test's patience.
    link_walltime: List[str]
    #: How long a job of ``link_walltime`` may take from its submission to its end.
    link_seconds: float
    #: The scheduler's own command that kills a job, as a user or an operator types it (not summit-jobs cancel).
    kill: List[str]
    long_jobs: Dict[str, object] = field(default_factory=dict)


def _lsf(home: Path, _request) -> Harness:
    env = dict(lsf_environment(home, minute=stretched(4.0)), OMP_NUM_THREADS="1")
    return Harness(name="lsf", machine="local", env=env,
                   processes=lambda jid: [str(p) for p in job_processes(jid, env["SUMMIT_JOBS_LSF_HOME"])],
                   refused=["--bsub-option", "-R order[mem]"], refusal_words="not order[...]",
                   link_walltime=["--walltime", "2", "--warning-minutes", "1"], link_seconds=LINK_SECONDS["lsf"],
                   kill=["bkill"])


def _slurm(home: Path, request) -> Harness:
    from slurm_cluster import cluster_job_processes
    cluster = request.getfixturevalue("slurm_cluster")
    env = cluster.env(dict(lsf_environment(home, minute=60), OMP_NUM_THREADS="1"))
    # slurmctld looks at time limits every 30 s (PERIODIC_TIMEOUT) and sends --signal's warning once, up to 30 s
    # early: with --time=1 and @60 it is due the moment a link starts, and a warning sent before slurmd has
    # started the batch shell is lost; --time=2 with @60 puts it 30 to 60 s into each link.
    return Harness(name="slurm", machine="local-slurm", env=env,
                   processes=lambda jid: cluster_job_processes(cluster, jid),
                   refused=["--sbatch-option", "--reservation=nosuchreservation"],
                   refusal_words="Requested reservation is invalid",
                   link_walltime=["--walltime", "2", "--warning-minutes", "1"], link_seconds=LINK_SECONDS["slurm"],
                   kill=["scancel"])


#: Every scheduler the suite runs over: a third one adds its line here.
SCHEDULERS = {"lsf": _lsf, "slurm": _slurm}


@pytest.fixture(scope="module", params=sorted(SCHEDULERS))
def sched(request, tmp_path_factory) -> Harness:
    home = tmp_path_factory.mktemp(f"conformance-{request.param}")
    harness = SCHEDULERS[request.param](home, request)
    (home / "program.py").write_text(PROGRAM)
    harness.env["CONFORMANCE_PROGRAM"] = str(home / "program.py")
    harness.env["CONFORMANCE_HOME"] = str(home)
    return harness


def command(sched: Harness, *args: str) -> List[str]:
    return ["--command", " ".join([sys.executable, sched.env["CONFORMANCE_PROGRAM"], *args])]


def submit(sched: Harness, name: str, *args: str, nodes: int = 1) -> Dict:
    """Submit through the command line; its --json answer (job ids, run directory)."""
    run_dir = Path(sched.env["CONFORMANCE_HOME"]) / name
    res = cli(["--machine", sched.machine, "submit", "--nodes", str(nodes), "--run-dir", str(run_dir),
               "--job-name", name, "--json", *args], sched.env, timeout=stretched(120))
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    return {"run_dir": run_dir, "ids": [str(j) for j in out["job_ids"]]}


def status(sched: Harness, target: str) -> List[Dict]:
    res = cli(["--machine", sched.machine, "status", "--json", target], sched.env, timeout=stretched(60))
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    return json.loads(res.stdout)


def status_when(sched: Harness, run_dir: Path, accept: Callable[[List[Dict]], bool], timeout: float,
                what: str) -> List[Dict]:
    """The run's status rows once ``accept`` takes them (asked once a second: each ask starts a Python)."""
    def look():
        rows = status(sched, str(run_dir))
        return rows if accept(rows) else None
    return wait_for(look, timeout=timeout, what=what)


def ended(rows: List[Dict], count: int = 1) -> bool:
    return len(rows) == count and all(r["state"] in FINISHED for r in rows)


def nothing_left(sched: Harness, ids: List[str]) -> None:
    for jid in ids:
        wait_for(lambda: not sched.processes(jid), timeout=stretched(30), what=f"every process of job {jid} to end")


@pytest.fixture(scope="module", autouse=True)
def long_jobs(sched) -> Dict[str, object]:
    """Queued at a scheduler's first test: a chain until complete of 3 links, each stopped by the warning, and
    a job that ignores the warning and runs into its run limit. test_zz_... collects them."""
    sched.long_jobs["chain"] = submit(sched, "chain", *sched.link_walltime, "--until-complete", "--max-links", "3",
                                      *command(sched, "train", "100000"), nodes=2)
    sched.long_jobs["limit"] = submit(sched, "limit", *sched.link_walltime, *command(sched, "hang"))
    return sched.long_jobs


def test_a_job_runs_to_done_and_its_output_is_where_logs_looks(sched):
    job = submit(sched, "done", *command(sched, "train", "3"))
    (row,) = status_when(sched, job["run_dir"], ended, sched.link_seconds, "the job to end")
    assert (row["job_id"], row["state"], row["exit_code"], row["cancelled"]) == (job["ids"][0], "done", 0, False)
    assert row["native_state"] and row["native_state"] != "done", row      # the scheduler's own word, kept
    assert row["source"] == "exit-code file" and row["last_event"]["text"].startswith("training complete"), row
    logs = cli(["logs", str(job["run_dir"])], sched.env, timeout=stretched(60))
    assert logs.returncode == 0 and "conformance: done at step 3" in logs.stdout, logs.stdout + logs.stderr
    table = cli(["--machine", sched.machine, "status", str(job["run_dir"])], sched.env, timeout=stretched(60))
    assert any(job["ids"][0] in line and " done " in line for line in table.stdout.splitlines()), table.stdout
    nothing_left(sched, job["ids"])


def test_a_job_that_exits_non_zero_is_failed_with_its_code(sched):
    job = submit(sched, "fail", *command(sched, "fail"))
    (row,) = status_when(sched, job["run_dir"], ended, sched.link_seconds, "the job to end")
    assert (row["state"], row["exit_code"], row["cancelled"]) == ("failed", 3, False), row
    table = cli(["--machine", sched.machine, "status", str(job["run_dir"])], sched.env, timeout=stretched(60))
    assert any(job["ids"][0] in line and " failed 3 " in line for line in table.stdout.splitlines()), table.stdout
    nothing_left(sched, job["ids"])


def test_a_running_link_and_its_pending_next_are_cancelled(sched):
    job = submit(sched, "cancel", "--walltime", "10", "--chain", "2", *command(sched, "hang"))
    first, second = job["ids"]
    rows = status_when(sched, job["run_dir"], lambda r: [x["state"] for x in r] == ["running", "pending"],
                       sched.link_seconds, "link 1 to run while link 2 waits")
    assert all(r["native_state"] for r in rows), rows
    res = cli(["cancel", str(job["run_dir"])], sched.env, timeout=stretched(60))
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    assert f"job {first}:" in res.stdout and f"job {second}:" in res.stdout, res.stdout
    rows = status_when(sched, job["run_dir"], lambda r: ended(r, 2), stretched(60), "both links to end")
    assert [(r["job_id"], r["state"], r["cancelled"]) for r in rows] == [(first, "cancelled", True),
                                                                       (second, "cancelled", True)], rows
    assert not list(job["run_dir"].glob(f"*.{second}.*")) or "conformance" not in "".join(
        p.read_text() for p in job["run_dir"].glob(f"*.{second}.*")), "the pending link ran"
    nothing_left(sched, [first, second])


def test_a_job_killed_with_the_schedulers_own_command_is_cancelled(sched):
    """Not through summit-jobs cancel (which records the ids it kills): the scheduler's word alone (LSF's EXIT
    with TERM_OWNER, Slurm's CANCELLED) must make the row cancelled."""
    job = submit(sched, "killed", "--walltime", "10", *command(sched, "hang"))
    (jid,) = job["ids"]
    status_when(sched, job["run_dir"], lambda r: r[0]["state"] == "running", sched.link_seconds, "the job to run")
    res = run([*sched.kill, jid], sched.env, timeout=30)
    assert res.returncode == 0, res.stdout + res.stderr
    (row,) = status_when(sched, job["run_dir"], ended, stretched(60), "the killed job to end")
    assert (row["state"], row["cancelled"]) == ("cancelled", True), row
    assert row["native_state"] in ("EXIT", "CANCELLED") and row["reason"].startswith("CANCELLED"), row
    assert "cancelled" not in json.loads((job["run_dir"] / "run.json").read_text()), "summit-jobs recorded a cancel"
    nothing_left(sched, [jid])


def test_a_submission_the_scheduler_refuses_is_one_message_and_queues_nothing(sched):
    run_dir = Path(sched.env["CONFORMANCE_HOME"]) / "refused"
    res = cli(["--machine", sched.machine, "submit", "--nodes", "1", "--run-dir", str(run_dir), *sched.refused,
               *command(sched, "train", "3")], sched.env, timeout=stretched(120))
    assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr
    assert "refused the job" in res.stderr and sched.refusal_words in res.stderr, res.stderr
    assert json.loads((run_dir / "run.json").read_text())["job_ids"] == []


def test_an_id_the_scheduler_does_not_know_is_unknown_and_not_killed(sched):
    (row,) = status(sched, "2000000001")
    assert (row["job_id"], row["state"], row["exit_code"]) == ("2000000001", "unknown", None), row
    res = cli(["--machine", sched.machine, "cancel", "2000000001"], sched.env, timeout=stretched(60))
    assert res.returncode == 0 and "job 2000000001: is not known to" in res.stdout, res.stdout + res.stderr


# Its two waits are bound by the harness (2 + 4 of a link's time) and its checks after them by a few minutes, all
# from the same measure of this machine's speed: the test's own limit is above their sum, so a slow machine fails
# it with a message, not a pytest-timeout kill.
@pytest.mark.timeout(7 * max(LINK_SECONDS.values()) + stretched(300))
def test_zz_a_chain_stopped_by_the_warning_and_a_job_past_its_run_limit(sched, long_jobs):
    chain, limit = long_jobs["chain"], long_jobs["limit"]
    (row,) = status_when(sched, limit["run_dir"], ended, 2 * sched.link_seconds, "the job past its limit to end")
    assert row["state"] == "timed_out" and not row["cancelled"], row
    nothing_left(sched, limit["ids"])
    run_dir = chain["run_dir"]

    def three_ended(rows: List[Dict]) -> bool:
        queued = (run_dir / "chain.jobs").read_text().split() if (run_dir / "chain.jobs").exists() else []
        return len(rows) == 3 == 1 + len(queued) and ended(rows, 3)
    rows = status_when(sched, run_dir, three_ended, 4 * sched.link_seconds, "three links of the chain to end")
    assert [(r["state"], r["exit_code"]) for r in rows] == [("done", 0)] * 3, rows
    logs = cli(["logs", str(run_dir)], sched.env, timeout=stretched(60)).stdout
    assert logs.count("conformance: warned at step") == 3 and logs.count("conformance: resumed at step") == 2, logs
    check_user_chain(sched.env, run_dir, [r["job_id"] for r in rows], last="chain stopped before COMPLETE: 3 links ran")
    nothing_left(sched, [r["job_id"] for r in rows])
