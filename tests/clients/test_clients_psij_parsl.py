"""psij-python and parsl, unchanged, run jobs through the embedded LSF's own commands.

Why these tests: both libraries drive LSF only through bsub, bjobs and bkill
(psij's LsfJobExecutor, parsl's LSFProvider), and on a site they meet IBM LSF.
Here each library runs in a program of its own whose environment is the one
`summit-jobs lsf env --json` gives a user's shell (the embedded LSF's commands
first on PATH), with the virtual environment's bin folder after them as an
activated environment would have it. Nothing of either library is replaced or
patched; where a library has a bug of its own, the client program works around
it in the open and says which version and which bug.

Each client program runs in its own session under a time limit, so a hang fails
the test instead of blocking the run, and whatever it left behind is killed.
After every job: bjobs shows the state IBM would (DONE, or EXIT with its
TERM_* reason), and no process of the job is left.

Every limit (the LSF minute that the clients' walltimes count in, parsl's
heartbeats and command timeout, each wait) is a quiet machine's figure
stretched by the slowdown measured as the test starts (helpers.slowdown):
beside another suite on two cores, a parsl block took longer than the 10 s
that its 5-minute walltime was in 2-second minutes, and LSF's run limit killed
its workers (TERM_RUNLIMIT; parsl reported ManagerLost).
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List

import pytest

from helpers import kill_marked_group, marked
from lsf_jobs import BIN, gated, job_processes, recorded_ended, require_client, run, wait_for

#: The interpreter's bin folder: parsl starts interchange.py and process_worker_pool.py from PATH.
VENV_BIN = str(Path(sys.executable).parent)
#: Fields bjobs is asked for after a client ran (IBM names, bjobs -o).
FIELDS = "jobid stat exit_code exit_reason first_host exec_host nreq_slot job_name"

# Seconds on the quiet reference machine (2 cores, nothing else running), each a few times what the step
# takes there; every test stretches them by the slowdown it measures as it starts (the ``stretch`` fixture).
#: One LSF minute: parsl's block and psij's job ask -W 5, which must hold their start-up (up to about 6 s there).
MINUTE = 6.0
#: A command of the embedded LSF (bsub, bjobs, bkill; a Python start each): parsl's cmd_timeout too.
COMMAND = 15.0
#: A job's end after its client ran (bjobs shows DONE or EXIT), and its processes' end after that.
JOB_END = 20.0
PROCESSES_END = 10.0
#: psij: the job running; the job final; the whole client program.
PSIJ_ACTIVE, PSIJ_FINAL, PSIJ_RUN = 15.0, 30.0, 60.0
#: parsl: each app's result; the whole client program (start, two apps, clean-up).
PARSL_RESULT, PARSL_RUN = 45.0, 75.0
#: parsl's heartbeats (whole seconds, as its worker pool reads them): every second there, and a manager
#: given up after 20 s of silence.
HEARTBEAT_PERIOD, HEARTBEAT_THRESHOLD = 1.0, 20.0


@pytest.fixture
def client_env(tmp_path, stretch) -> Dict[str, str]:
    """A user's environment after `summit-jobs lsf env`: the embedded LSF of this test's own home on PATH,
    the virtual environment's bin folder after it; LSF minutes of MINUTE seconds stretched by the measured
    slowdown (a 5-minute walltime holds a busy machine's start-up), and a kill grace of 1 s so that bkill
    ends a job in seconds."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SUMMIT_JOBS_", "LSB_"))}
    base["PATH"] = os.pathsep.join(p for p in base.get("PATH", os.defpath).split(os.pathsep)
                                   if p and Path(p).resolve() != BIN.resolve())
    base.update({"XDG_CONFIG_HOME": str(tmp_path / "xdg-config"), "XDG_DATA_HOME": str(tmp_path / "xdg-data"),
                 "SUMMIT_JOBS_LSF_MINUTE": f"{stretch(MINUTE):.1f}", "SUMMIT_JOBS_LSF_KILL_GRACE": "1"})
    res = run([sys.executable, "-m", "summit_jobs", "lsf", "env", "--json", "--home", str(tmp_path / "lsf")], base,
              timeout=stretch(COMMAND))
    assert res.returncode == 0, res.stderr
    env = {**base, **json.loads(res.stdout)["environment"]}
    first, rest = env["PATH"].split(os.pathsep, 1)
    assert first == str(BIN)
    env["PATH"] = os.pathsep.join([first, VENV_BIN, rest])
    return env


def run_client(source: str, args: List[str], env: Dict[str, str], cwd: Path, timeout: float,
               command_timeout: float) -> str:
    """Run ``source`` as a program of its own session; its stdout. A failure or a hang (``timeout``) fails
    the test, and every process of the session (parsl's interchange, a worker) is killed, as are the home's
    unfinished jobs."""
    script = cwd / "client.py"
    script.write_text(source)
    env = marked(env)
    proc = subprocess.Popen([sys.executable, str(script), *args], env=env, cwd=str(cwd), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_marked_group(proc.pid, env)
        out, err = proc.communicate()
        pytest.fail(f"the client hung for {timeout}s\n{out[-3000:]}\n{err[-3000:]}")
    finally:
        kill_marked_group(proc.pid, env)     # what is left of the client's session, never a group that took its id
        left = run(["bjobs", "-noheader", "-o", "jobid"], env, timeout=command_timeout).stdout.split()
        if left:
            run(["bkill", *left], env, timeout=command_timeout)
    assert proc.returncode == 0, f"client exited {proc.returncode}\n{out[-3000:]}\n{err[-3000:]}"
    return out




def reported(out: str, tag: str) -> Dict:
    """The JSON a client printed on its line ``TAG {...}``."""
    line = next((ln for ln in out.splitlines() if ln.startswith(tag + " ")), None)
    assert line is not None, f"no {tag} line in the client's output:\n{out}"
    return json.loads(line[len(tag) + 1:])


def lsf_jobs(env: Dict[str, str], timeout: float) -> Dict[str, Dict[str, str]]:
    """Every job of the home as `bjobs -a -json` shows it, by job id."""
    res = run(["bjobs", "-a", "-json", "-o", FIELDS], env, timeout=timeout)
    assert res.returncode == 0, res.stderr
    return {r["JOBID"]: r for r in json.loads(res.stdout)["RECORDS"]}


def ended(jid: str, env: Dict[str, str], stretch: Callable[[float], float]) -> Dict[str, str]:
    """The job's bjobs record once it has ended (DONE or EXIT); bjobs is asked when the job's record says
    so, or every second (gated)."""
    return wait_for(gated(lambda: recorded_ended([jid], env),
                          lambda: (lambda r: r if r and r["STAT"] in ("DONE", "EXIT") else None)(
                              lsf_jobs(env, stretch(COMMAND)).get(jid))),
                    stretch(JOB_END), f"job {jid} to end")


def assert_as_ibm_shows(rec: Dict[str, str], killed: bool) -> None:
    """DONE: no exit code, no reason. EXIT after bkill: TERM_OWNER (IBM, "Termination reasons displayed by
    bacct, bhist, and bjobs", https://www.ibm.com/docs/SSWRJV_10.1.0/lsf_admin/termination_reasons_lsf.html)."""
    if rec["STAT"] == "DONE":
        assert (rec["EXIT_CODE"], rec["EXIT_REASON"]) == ("", ""), rec
    else:
        assert rec["STAT"] == "EXIT" and killed, rec
        assert rec["EXIT_REASON"].startswith("TERM_OWNER:"), rec


def assert_no_processes_left(jid: str, env: Dict[str, str], stretch: Callable[[float], float]) -> None:
    wait_for(lambda: not job_processes(jid, env["SUMMIT_JOBS_LSF_HOME"]), stretch(PROCESSES_END),
             f"the processes of job {jid} to end")


# ---------------------------------------------------------------------------------------------------- psij

PSIJ_CLIENT = r'''
import json, sys
from datetime import timedelta
from pathlib import Path
import psij
from psij import Job, JobAttributes, JobSpec, JobState, ResourceSpecV1
from psij.executors.batch.lsf import LsfExecutorConfig, LsfJobExecutor

mode, work, limits = sys.argv[1], Path(sys.argv[2]), json.loads(sys.argv[3])
config = LsfExecutorConfig(work_directory=work / "psij", queue_polling_interval=1, initial_queue_polling_delay=0,
                           keep_files=True)


class ReasonKeyLsfExecutor(LsfJobExecutor):
    """Works around a bug of psij-python 0.9.11 (still in its LsfJobExecutor.parse_status_output): for a
    record whose EXIT_REASON, KILL_REASON or SUSPEND_REASON is set, it reads entry["reason"], a key no bjobs
    record has, instead of entry[reason]. IBM LSF sets EXIT_REASON on every bkill'ed job (TERM_OWNER), so the
    KeyError fails every later poll of the executor, and neither that job nor any other of the executor is
    ever updated again. This gives each record the key psij reads; psij's own code does the rest."""

    def parse_status_output(self, exit_code, out):
        if exit_code == 0:
            data = json.loads(out)
            for rec in data.get("RECORDS", []):
                rec.setdefault("reason", next((rec[k] for k in ("EXIT_REASON", "KILL_REASON", "SUSPEND_REASON")
                                               if rec.get(k)), ""))
            out = json.dumps(data)
        return super().parse_status_output(exit_code, out)


class LoginNameLsfExecutor(LsfJobExecutor):
    """Works around a bug of psij-python 0.9.11: list() asks bjobs for the jobs of os.getlogin(), which raises
    ENXIO ("No such device or address") in a process without a controlling terminal (a CI job, a batch job).
    The user it means is the one getpass.getuser() names. Used for list() only."""

    def _current_user(self):
        import getpass
        return getpass.getuser()


executor = psij.JobExecutor.get_instance("lsf", config=config)
LoginNameLsfExecutor._NAME_, LoginNameLsfExecutor._VERSION_ = executor.name, executor.version
lister = LoginNameLsfExecutor(None, config)
if mode == "cancel":
    # psij's registry names the classes it instantiates; this one takes the name and version it gave "lsf".
    ReasonKeyLsfExecutor._NAME_, ReasonKeyLsfExecutor._VERSION_ = executor.name, executor.version
    executor = ReasonKeyLsfExecutor(None, config)
seen = []
executor.set_job_status_callback(lambda job, status: seen.append(status.state.name))
one_node = ResourceSpecV1(node_count=1)
if mode == "complete":
    spec = JobSpec(executable="/bin/sh", arguments=["-c", 'echo "host=$(hostname) jobid=$LSB_JOBID"; '
                                                          'echo "$PSIJ_GIVEN $SUBMIT_SIDE" > written.txt'],
                   directory=work, stdout_path=work / "job.out", stderr_path=work / "job.err",
                   environment={"PSIJ_GIVEN": "given by the job spec"},
                   resources=one_node, attributes=JobAttributes(duration=timedelta(minutes=5)))
elif mode == "cancel":
    spec = JobSpec(executable="/bin/sleep", arguments=["300"], directory=work, resources=one_node)
else:
    spec = JobSpec(executable="/bin/sh", arguments=["-c", "echo failing >&2; exit 3"], directory=work,
                   stderr_path=work / "job.err", resources=one_node)
job = Job(spec)
executor.submit(job)
listed_while_running = []
if mode == "cancel":
    job.wait(target_states=[JobState.ACTIVE], timeout=timedelta(seconds=limits["active"]))
    listed_while_running = lister.list()      # bjobs -a -noheader -o jobid -u USER
    executor.cancel(job)
status = job.wait(timeout=timedelta(seconds=limits["final"]))
listed = lister.list()
script = next((work / "psij").rglob(job.id + ".job")).read_text()
print("PSIJ " + json.dumps({"native_id": job.native_id, "state": status.state.name if status else None,
                            "exit_code": status.exit_code if status else None,
                            "message": status.message if status else None, "seen": seen, "script": script,
                            "listed": listed, "listed_while_running": listed_while_running}))
'''


def psij_run(mode: str, env: Dict[str, str], tmp_path: Path, stretch: Callable[[float], float]) -> Dict:
    work = tmp_path / "work"
    work.mkdir()
    limits = json.dumps({"active": stretch(PSIJ_ACTIVE), "final": stretch(PSIJ_FINAL)})
    return reported(run_client(PSIJ_CLIENT, [mode, str(work), limits], env, work, timeout=stretch(PSIJ_RUN),
                               command_timeout=stretch(COMMAND)), "PSIJ")


def test_psij_job_completes_through_lsf(client_env, tmp_path, stretch):
    """A psij job of one node is submitted with bsub, polled with bjobs, and COMPLETED; its output names the
    job's first host and LSB_JOBID; psij's script carries -env all and both -nnodes 1 and -n 1."""
    require_client("psij")
    got = psij_run("complete", dict(client_env, SUBMIT_SIDE="from the submitting shell"), tmp_path, stretch)
    jid = got["native_id"]
    assert (got["state"], got["exit_code"]) == ("COMPLETED", 0), got
    assert got["seen"][-1] == "COMPLETED" and "QUEUED" in got["seen"], got["seen"]
    for directive in ("#BSUB -env all", "#BSUB -nnodes 1", "#BSUB -n 1"):
        assert directive in got["script"].splitlines(), got["script"]
    rec = ended(jid, client_env, stretch)
    assert rec["STAT"] == "DONE" and rec["FIRST_HOST"], rec
    assert_as_ibm_shows(rec, killed=False)
    work = tmp_path / "work"
    # psij's "-env all" plus its "-env PSIJ_GIVEN=..." line: the spec's variable and the submitter's both arrive
    assert (work / "written.txt").read_text() == "given by the job spec from the submitting shell\n"
    assert any(line.startswith("#BSUB -env") and "PSIJ_GIVEN" in line for line in got["script"].splitlines())
    assert (work / "job.out").read_text().split() == [f"host={rec['FIRST_HOST']}", f"jobid={jid}"]
    assert got["listed"] == [jid], got["listed"]            # list(): the user's jobs, finished ones included
    assert_no_processes_left(jid, client_env, stretch)


def test_psij_cancel_ends_the_job(client_env, tmp_path, stretch):
    """psij's cancel() runs bkill on a running job: LSF ends it EXIT with TERM_OWNER, and psij reports the
    job final. psij-python's LSF executor maps every EXIT to FAILED (its _STATE_MAP has no CANCELED), so
    FAILED with LSF's reason as the message is what psij can report for a cancelled LSF job."""
    require_client("psij")
    got = psij_run("cancel", client_env, tmp_path, stretch)
    jid = got["native_id"]
    assert "ACTIVE" in got["seen"], got["seen"]
    assert got["listed_while_running"] == [jid] and got["listed"] == [jid], got
    assert got["state"] in ("CANCELED", "FAILED"), got
    rec = ended(jid, client_env, stretch)
    assert rec["STAT"] == "EXIT", rec
    assert_as_ibm_shows(rec, killed=True)
    if got["state"] == "FAILED":
        assert got["message"] == rec["EXIT_REASON"], got
    assert_no_processes_left(jid, client_env, stretch)


def test_psij_nonzero_exit_is_failed_with_its_code(client_env, tmp_path, stretch):
    """A psij job whose program exits 3 is FAILED with exit code 3 (psij's own exit-code file). Its LSF job
    script records the code and ends 0, so LSF shows DONE, as IBM would."""
    require_client("psij")
    got = psij_run("fail", client_env, tmp_path, stretch)
    jid = got["native_id"]
    assert (got["state"], got["exit_code"]) == ("FAILED", 3), got
    assert (tmp_path / "work" / "job.err").read_text() == "failing\n"
    rec = ended(jid, client_env, stretch)
    assert rec["STAT"] == "DONE", rec
    assert_as_ibm_shows(rec, killed=False)
    assert_no_processes_left(jid, client_env, stretch)


# ---------------------------------------------------------------------------------------------------- parsl

PARSL_CLIENT = r'''
import json, os, sys, time
import parsl
from parsl import bash_app, python_app
from parsl.config import Config
from parsl.executors import HighThroughputExecutor
from parsl.launchers import JsrunLauncher
from parsl.providers import LSFProvider

layout, run_dir, limits = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
common = dict(init_blocks=1, min_blocks=0, max_blocks=1, walltime="00:05:00", cmd_timeout=limits["command"])
if layout == "nnodes":
    provider = LSFProvider(nodes_per_block=1, **common)
elif layout == "slots":
    provider = LSFProvider(request_by_nodes=False, cores_per_block=4, cores_per_node=2, bsub_redirection=True,
                           **common)
else:
    provider = LSFProvider(nodes_per_block=2, launcher=JsrunLauncher(), **common)
htex = HighThroughputExecutor(label="lsf_htex", address="127.0.0.1", max_workers_per_node=1, cores_per_worker=1,
                              heartbeat_period=limits["heartbeat_period"],
                              heartbeat_threshold=limits["heartbeat_threshold"], poll_period=10, provider=provider)
config = Config(executors=[htex], run_dir=run_dir, strategy_period=1)


@python_app
def where(x):
    import os, socket
    return {"answer": x + 1, "jobid": os.environ.get("LSB_JOBID"), "host": socket.gethostname()}


@bash_app
def shell(path):
    return f'echo "$LSB_JOBID $(hostname)" > {path}'


start = time.time()
parsl.load(config)
try:
    py = where(41).result(timeout=limits["result"])
    rc = shell(os.path.join(run_dir, "bash.out")).result(timeout=limits["result"])
    with open(os.path.join(run_dir, "bash.out")) as fh:
        words = fh.read().split()
    print("PARSL " + json.dumps({"python": py, "bash_rc": rc, "bash": words, "jobs": sorted(provider.resources),
                                 "seconds": time.time() - start}), flush=True)
finally:
    parsl.dfk().cleanup()
print("CLEANED " + json.dumps({"seconds": time.time() - start}), flush=True)
'''


@pytest.mark.parametrize("layout, directives", [
    ("nnodes", ["#BSUB -nnodes 1"]),
    ("slots", ["#BSUB -n 4", '#BSUB -R "span[ptile=2]"']),
    ("jsrun", ["#BSUB -nnodes 2"]),
])
def test_parsl_lsfprovider_runs_apps(client_env, tmp_path, stretch, layout, directives):
    """parsl's LSFProvider under a HighThroughputExecutor runs a python_app and a bash_app in an LSF block:
    (nnodes) the default CSM header, the worker on the launch node; (slots) request_by_nodes=False and
    bsub < script, -n 4 span[ptile=2] on two virtual nodes; (jsrun) JsrunLauncher, one worker pool per
    compute node. cleanup() bkills the block; nothing of it is left."""
    require_client("parsl")
    run_dir = tmp_path / "runinfo"
    started = time.time()
    limits = {"command": math.ceil(stretch(COMMAND)), "result": stretch(PARSL_RESULT),
              "heartbeat_period": math.ceil(stretch(HEARTBEAT_PERIOD)),
              "heartbeat_threshold": math.ceil(stretch(HEARTBEAT_THRESHOLD))}
    out = run_client(PARSL_CLIENT, [layout, str(run_dir), json.dumps(limits)], client_env, tmp_path,
                     timeout=stretch(PARSL_RUN), command_timeout=stretch(COMMAND))
    wall = time.time() - started
    got, cleaned = reported(out, "PARSL"), reported(out, "CLEANED")
    assert got["python"]["answer"] == 42 and got["bash_rc"] == 0, got
    assert len(got["jobs"]) == 1, got
    jid = got["jobs"][0]
    assert got["python"]["jobid"] == jid and got["bash"][0] == jid, got
    scripts = list(run_dir.rglob("*.submit"))
    assert len(scripts) == 1, scripts
    lines = scripts[0].read_text().splitlines()
    assert all(d in lines for d in directives), lines
    rec = ended(jid, client_env, stretch)
    assert_as_ibm_shows(rec, killed=True)
    hosts = [pair.split("*")[1] for pair in rec["EXEC_HOST"].split(":")]
    if layout == "nnodes":
        # CSM: the batch script, and the pool that SingleNodeLauncher starts from it, run on the launch node.
        assert got["python"]["host"] == got["bash"][1] == rec["FIRST_HOST"] == hosts[0], (got, rec)
    elif layout == "slots":
        assert rec["EXEC_HOST"].count("2*") == 2 and len(hosts) == 2 and rec["NREQ_SLOT"] == "4", rec
        assert got["python"]["host"] == hosts[0], (got, rec)
    else:
        assert "jsrun -n 2 -r 1" in "\n".join(lines)
        assert got["python"]["host"] in hosts[1:] and got["python"]["host"] != rec["FIRST_HOST"], (got, rec)
    assert_no_processes_left(jid, client_env, stretch)
    print(f"parsl {layout}: results after {got['seconds']:.1f}s, cleaned up after {cleaned['seconds']:.1f}s, "
          f"test client {wall:.1f}s; slowdown {stretch(1.0):.1f}, run limit {5 * stretch(MINUTE):.0f}s")
