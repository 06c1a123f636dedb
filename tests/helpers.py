"""Helpers the test modules import by name (fixtures live in the conftest.py files instead).

Why a module of its own: each test folder may have a conftest.py, and pytest imports every one of them
under the one name ``conftest``, so ``from conftest import ...`` would find whichever it imported last.
"""
import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

REPO = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` (created if missing), held for the block: the processes of one test
    session take turns."""
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def shared_folder(tmp_path_factory, name: str, build: Callable[[Path], None]) -> Path:
    """A folder ``build`` fills once per test session, for every test module and pytest-xdist worker.

    Why: several modules start from the same expensive data (a synthetic set packed by the real CLI); built
    per module, it was built once for each. The first process to ask builds it under a lock, in the folder
    all of the session's workers share; the others wait for the lock and find it done (marked by a file
    written last, so a build that failed is tried again, and fails again, for whoever asks next).
    """
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent                                # the session's folder, above each worker's own
    folder, done = root / f"shared-{name}", root / f"shared-{name}.done"
    with _locked(root / f"shared-{name}.lock"):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            done.write_text("")
    return folder


#: What slowdown() times: an interpreter start with the imports every program of the suite begins with (a
#: client library's script, bsub, parsl's interchange and worker pool all start so).
SPEED_PROBE = "import json, subprocess"
#: The probe's wall time on the reference machine (2 cores, nothing else running): slowdown() is 1 there.
QUIET_PROBE_SECONDS = 0.05
#: Probes per measurement; the slowest counts (a busy machine's load comes and goes, and a limit set in a
#: lull would be too short for the burst after it).
SPEED_SAMPLES = 3
#: The largest factor slowdown() answers: a limit stretched further would outlast pytest's own timeout
#: (setup.cfg, 900 s) and a hang would then end the test without its clean-up.
MAX_SLOWDOWN = 8.0


def slowdown(samples: int = SPEED_SAMPLES) -> float:
    """How many times longer than on a quiet reference machine a program's start takes here now: the longest
    wall time of ``samples`` interpreter starts (SPEED_PROBE) over QUIET_PROBE_SECONDS, from 1 to
    MAX_SLOWDOWN.

    Why: a time limit in a test is a guess at how long some work takes, and the same work takes several times
    longer on a slower machine or while another suite shares the cores; a fixed number fails the busy
    machine (parsl's blocks outran a fixed run limit beside another ``make test``) or waits for nothing on a
    quiet one. Measured when a test sets its limits, not once per session: the load changes while the suite
    runs. The wall time, not the CPU time: what a busy machine takes from a program is its share of the
    cores."""
    times = []
    for _ in range(samples):
        began = time.perf_counter()
        subprocess.run([sys.executable, "-c", SPEED_PROBE], check=True)
        times.append(time.perf_counter() - began)
    return min(MAX_SLOWDOWN, max(1.0, max(times) / QUIET_PROBE_SECONDS))


def run_cli(args, env, cwd=None, input=None, timeout=60):
    """Run the real console entry point in a subprocess (the path a user takes)."""
    return subprocess.run([sys.executable, "-m", "summit_jobs", *args], env=env, cwd=cwd, input=input,
                          capture_output=True, text=True, timeout=timeout)


#: The variable that marks the processes of one group a test started (``marked`` and ``kill_marked_group``).
GROUP_MARK = "SUMMIT_JOBS_TEST_GROUP"


def marked(env: dict) -> dict:
    """``env`` with a mark of its own for a process group the test starts (start_new_session) and may have to
    kill whatever is left of later (``kill_marked_group``)."""
    import uuid
    return dict(env, **{GROUP_MARK: uuid.uuid4().hex})


def kill_marked_group(pgid: int, env: dict) -> None:
    """SIGKILL the processes left in process group ``pgid`` that carry ``env``'s mark.

    Why not os.killpg(pgid): once the group's last process is gone its id is free, and with pid_max at 32768 a
    new group soon has it; a killpg after the group emptied then kills another test's processes (an embedded
    LSF job script died of SIGKILL 40 ms after its start that way)."""
    import signal
    mark = f"{GROUP_MARK}={env[GROUP_MARK]}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdecimal():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                if int(fh.read().rsplit(b")", 1)[-1].split()[2]) != pgid:
                    continue
            with open(f"/proc/{entry}/environ", "rb") as fh:
                if mark not in fh.read().split(b"\0"):
                    continue
            os.kill(int(entry), signal.SIGKILL)
        except (OSError, ValueError, IndexError):
            continue
