"""Shared pieces of the job-lifecycle tests: an isolated embedded LSF, a test program, a template.

The fixtures made of them (``lsf_env``, ``program``, ``template_dir``) are in tests/conftest.py.
Time in the embedded LSF is scaled (SUMMIT_JOBS_LSF_MINUTE) so minute-based
limits take seconds. The helpers' time limits (``run``, ``wait_for``, ``wait_state``) are given as a quiet
machine's seconds and stretched by the machine's measured slowdown (``stretched``), so that a busy machine
gets the time its jobs need there and a quiet one waits for nothing longer.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Set

import pytest

# The slowdown measured at most every SLOWDOWN_TTL seconds, one cache for the LSF and the Slurm helpers.
from slurm_cluster import stretched  # noqa: F401  (re-exported for the test modules)

REPO = Path(__file__).resolve().parent.parent
BIN = REPO / "summit_jobs" / "schedulers" / "lsf" / "embedded" / "bin"

#: Prints the rank variables, records argv, optionally sleeps; on USR2 writes a checkpoint marker and exits 0.
PROGRAM = r'''
import json, os, signal, sys, time
keys = ["JSM_NAMESPACE_RANK", "JSM_NAMESPACE_SIZE", "JSM_NAMESPACE_LOCAL_RANK", "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "PMIX_RANK", "SUMMIT_JOBS_VNODE"]
rank = os.environ.get("JSM_NAMESPACE_RANK", "x")
# One write per line: ranks share the job's output file, and print() under PYTHONUNBUFFERED writes the
# text and its newline separately, so another rank's line could land in between.
os.write(1, ("RANK " + " ".join(f"{k}={os.environ.get(k)}" for k in keys) + "\n").encode())
out = os.environ.get("PROG_OUT")
if out:
    with open(os.path.join(out, f"argv.{os.environ.get('LSB_JOBID')}.{rank}.json"), "w") as fh:
        json.dump(sys.argv[1:], fh)
def on_usr2(signum, frame):
    # LSF signals every process of the job and jsrun forwards the script's signal too: a second USR2 during
    # the exit would end the rank with 140, so once warned the stand-in ignores it (docs/user-command.md).
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    with open(f"ckpt.{os.environ.get('LSB_JOBID')}.{rank}", "w") as fh:
        fh.write("checkpoint\n")
    os.write(1, f"rank {rank}: USR2, checkpoint written\n".encode())
    sys.exit(0)
signal.signal(signal.SIGUSR2, on_usr2)
if os.environ.get("PROG_FAIL_RANK") == rank:
    time.sleep(float(os.environ.get("PROG_FAIL_DELAY", "0")))  # let the other ranks start first
    sys.exit(3)
deadline = time.time() + float(os.environ.get("PROG_SLEEP", "0"))
while time.time() < deadline:
    time.sleep(0.05)
'''


def lsf_environment(tmp_path: Path, minute: float = 2.0) -> Dict[str, str]:
    env = dict(os.environ)
    for k in ("SUMMIT_JOBS_MACHINE", "SUMMIT_JOBS_PROJECT", "SUMMIT_JOBS_CONFIG", "SUMMIT_JOBS_MACHINES_PATH",
              "SUMMIT_JOBS_HOST", "SSH_AUTH_SOCK", "SUMMIT_JOBS_LSF_NODES", "SUMMIT_JOBS_LSF_CORES"):
        env.pop(k, None)
    env.update({
        "XDG_CONFIG_HOME": str(tmp_path / "xdg-config"),
        "XDG_DATA_HOME": str(tmp_path / "xdg-data"),
        "SUMMIT_JOBS_LSF_HOME": str(tmp_path / "lsf"),
        "SUMMIT_JOBS_LSF_MINUTE": str(minute),
        "SUMMIT_JOBS_LSF_KILL_GRACE": "1",
        # A job still running 1 LSF minute after its run limit's SIGUSR2 is terminated (IBM: 10 minutes).
        "SUMMIT_JOBS_LSF_RUNLIMIT_GRACE": "1",
        "SUMMIT_JOBS_PYTHON": sys.executable,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    })
    return env


def write_template(folder: Path, program: Path) -> Path:
    """A template folder whose launch step runs ``program`` through jsrun with the trainer's argv."""
    part = folder / "lsf" / "partials"
    part.mkdir(parents=True, exist_ok=True)
    (part / "launch.j2").write_text(
        'echo "summit-jobs: job $JOB_ID starting {{ plan.ranks }} ranks"\n'
        'run_step jsrun {{ plan.jsrun.flags() | qjoin }} -h "$RUN_DIR" {{ plan.python | q }} '
        + str(program) + ' {{ plan.trainer_argv | qjoin }}\n'
        'rc=$?\n'
        'echo "summit-jobs: training step ended with exit code $rc"\n')
    return folder


#: The longest a stretched limit of these helpers gets: below pytest's own timeout (setup.cfg, 900 s), so that
#: a hang ends in the helper's message and the test's clean-up runs. A caller that passes a limit it has
#: stretched already (the ``stretch`` fixture) is stretched twice; this bounds that too.
LIMIT_CEILING = 600.0


def limit(seconds: float) -> float:
    """``seconds`` on a quiet machine -> the limit here now: stretched by the measured slowdown, at most
    LIMIT_CEILING (unless ``seconds`` asks for more itself)."""
    return max(min(stretched(seconds), LIMIT_CEILING), seconds)


def run(argv: List[str], env: Dict[str, str], cwd=None, input: Optional[str] = None,
        timeout: float = 60) -> subprocess.CompletedProcess:
    """Run a command and capture its output; ``timeout``: a quiet machine's seconds (stretched, ``limit``)."""
    return subprocess.run(argv, env=env, cwd=cwd, input=input, capture_output=True, text=True,
                          timeout=limit(timeout))


def cli(args: List[str], env: Dict[str, str], **kw) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "summit_jobs", *args], env, **kw)


def bjobs_state(job_id: str, env: Dict[str, str]) -> Dict[str, str]:
    """bjobs -json's record of the job. A bjobs that gives no record fails the test with its exit status and
    both of its outputs (a bare JSON error said nothing of why)."""
    res = run(["bjobs", "-a", "-o", "jobid stat exit_code exit_reason pend_reason", "-json", str(job_id)], env)
    try:
        return json.loads(res.stdout)["RECORDS"][0]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise AssertionError(f"bjobs -json {job_id} gave no record ({type(exc).__name__}: {exc}); exit status "
                             f"{res.returncode}, stdout {res.stdout[-1000:]!r}, stderr {res.stderr[-2000:]!r}"
                             ) from None


def wait_for(predicate: Callable[[], object], timeout: float = 30, what: str = "condition") -> object:
    """``predicate``'s first true value, asked every 0.1 s for ``timeout`` seconds of a quiet machine
    (stretched by the measured slowdown, ``limit``)."""
    allowed = limit(timeout)
    deadline = time.time() + allowed
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {allowed:.1f}s ({timeout:g}s on a quiet machine) waiting for {what}")


def recorded_job(job_id: str, env: Dict[str, str]) -> Optional[Dict]:
    """The job's record in the embedded LSF's state folder (``env``'s SUMMIT_JOBS_LSF_HOME), read in this
    process; None when there is none (another home, no home, an id that is not a number). A job array's id
    names the record of its first element.

    Why: a bjobs or ``summit-jobs status`` call is a Python start-up (0.1 to 0.5 s of CPU); polling one ten
    times a second takes a good share of a 2-core machine from the very job a test waits for. Reading the
    record costs a file read. The record only says when asking is worth it (gated): the answer a test
    checks is still the command's.
    """
    home = env.get("SUMMIT_JOBS_LSF_HOME")
    if not home or not str(job_id).isdecimal():
        return None
    try:
        rec = json.loads((Path(home) / "jobs" / str(job_id) / "job.json").read_bytes())
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None


def recorded_state(job_id: str, env: Dict[str, str]) -> Optional[str]:
    """The state in the job's record (recorded_job); None when there is no record."""
    rec = recorded_job(job_id, env)
    return None if rec is None else rec.get("state")


def recorded_jobs(env: Dict[str, str]) -> List[Dict]:
    """Every job record of ``env``'s embedded LSF (each element of a job array has its own), read here."""
    home = env.get("SUMMIT_JOBS_LSF_HOME")
    jobs = Path(home) / "jobs" if home else None
    if jobs is None or not jobs.is_dir():
        return []
    found = [recorded_job(p.name, env) for p in jobs.iterdir()]
    return [r for r in found if r is not None]


def recorded_ended(job_ids: Iterable[str], env: Dict[str, str]) -> Optional[bool]:
    """Whether every record of these jobs (a job array's id: all its elements) says it ended; None when one
    of them has no record here."""
    wanted = {str(j) for j in job_ids}
    records = [r for r in recorded_jobs(env) if str(r.get("array_id") or r.get("id")) in wanted]
    if {str(r.get("array_id") or r.get("id")) for r in records} != wanted:
        return None
    return all(r.get("state") in ("DONE", "EXIT") for r in records)


#: Seconds between two calls of a command while the records say it would not answer yet: bjobs and status
#: also end jobs whose supervisor died (state.reap_lost), which the records alone do not show.
ASK_EVERY = 1.0


def gated(cheap: Callable[[], Optional[bool]], costly: Callable[[], object],
          every: float = ASK_EVERY) -> Callable[[], object]:
    """A predicate for wait_for that calls ``costly`` (a command, the truth) only when ``cheap`` (a look at
    the records) says it may now succeed or cannot tell (None), and at least every ``every`` seconds."""
    asked = [0.0]

    def predicate():
        now = time.time()
        if cheap() is False and now - asked[0] < every:
            return None
        asked[0] = now
        return costly()
    return predicate


def wait_state(job_id: str, env: Dict[str, str], states=("DONE", "EXIT"), timeout: float = 40) -> Dict[str, str]:
    """bjobs' record of the job once bjobs shows it in one of ``states`` (bjobs asked when the job's own
    record shows one of them, or at least every ASK_EVERY seconds); ``timeout``: a quiet machine's seconds,
    stretched by wait_for."""
    def cheap() -> Optional[bool]:
        recorded = recorded_state(job_id, env)
        return None if recorded is None else recorded in states

    def costly():
        rec = bjobs_state(job_id, env)
        return rec if rec.get("STAT") in states else None
    return wait_for(gated(cheap, costly), timeout, f"job {job_id} to reach {states}")


def run_job_ids(run_dir: Path) -> List[str]:
    """The jobs of a submitted run: those submit recorded in run.json, then the links the chain queued
    (chain.jobs); [] while run.json cannot be read."""
    try:
        ids = [str(j) for j in json.loads((run_dir / "run.json").read_text())["job_ids"]]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    try:
        ids += (run_dir / "chain.jobs").read_text().split()
    except OSError:
        pass
    return ids


def run_recorded_ended(run_dir: Path, env: Dict[str, str]) -> Optional[bool]:
    """Whether every job of the run has ended by its record (None: some record cannot be read here). A link
    queues the next one before it ends, so a chain whose records all say ended has queued its last link."""
    ids = run_job_ids(run_dir)
    return recorded_ended(ids, env) if ids else None


def newest_step(run_dir: Path) -> int:
    """The newest step among the train records of the run's metrics.jsonl, 0 before any (a line being
    written is skipped)."""
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


def warn_job(job_id: str, env: Dict[str, str]) -> bool:
    """The warning as LSF's -wa action and ``bkill -s USR2`` deliver it: SIGUSR2 to every process of the job
    (state.signal_job), sent from this process; False when the job no longer runs.

    Why not a bkill process: on a loaded machine its start takes seconds, in which a tiny trainer trains
    through a whole link. Why not the -wa timing: a link's start-up on a loaded machine can take most of
    a scaled walltime, so the number of links would depend on the machine's speed (the -wa timing itself
    is tested in test_embedded_lsf.py and test_lsf_semantics.py)."""
    from summit_jobs.schedulers.lsf.embedded import state
    home = Path(env["SUMMIT_JOBS_LSF_HOME"])
    job = state.load_job(home, int(job_id))
    assert job is not None, f"job {job_id} has no record in {home}"
    if job.get("state") != "RUN":
        return False
    state.signal_job(job, signal.SIGUSR2, home)
    return True


def submitted_id(stdout: str) -> str:
    import re
    m = re.search(r"Job <(\d+)> is submitted", stdout)
    assert m, stdout
    return m.group(1)


def proc_alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie has nothing left to run)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[-1].split()[0] not in (b"Z", b"X")
    except OSError:
        return False


def job_processes(jid: str, lsf_home: str, cell: Optional[Path] = None) -> Set[int]:
    """Live processes of job ``jid`` as LSF's process tracking sees them: those carrying its LSB_JOBID and the
    LSF home. With ``cell``, also those whose command line names that folder and carry no other job's
    LSB_JOBID (a chain's next link runs in the same folder, and its processes are not this job's)."""
    found = set()
    home = f"SUMMIT_JOBS_LSF_HOME={lsf_home}".encode()
    mine = f"LSB_JOBID={jid}".encode()
    needle = str(cell).encode() if cell is not None else None
    for entry in os.listdir("/proc"):
        if not entry.isdecimal():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                env = fh.read().split(b"\0")
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read()
        except OSError:
            continue
        ours = mine in env and home in env
        names_cell = needle is not None and needle in cmdline and all(
            w == mine for w in env if w.startswith(b"LSB_JOBID="))
        if (ours or names_cell) and proc_alive(int(entry)):
            found.add(int(entry))
    return found



def require_client(module: str):
    """Import a third-party LSF client library, or skip the test without it.

    CI installs the ``clients`` extra and sets SUMMIT_JOBS_REQUIRE_CLIENTS=1, so there a missing client is a
    failure, never a silent skip.
    """
    import importlib
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if os.environ.get("SUMMIT_JOBS_REQUIRE_CLIENTS") == "1":
            pytest.fail(f"SUMMIT_JOBS_REQUIRE_CLIENTS=1 but {module} cannot be imported ({exc}); "
                        f"install the clients extra: pip install -e '.[clients]'")
        pytest.skip(f"{module} is not installed (pip install -e '.[clients]')")
