import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

TESTS = Path(__file__).resolve().parent
# The tests are grouped in folders by role (cli, planning, runs, schedulers/lsf, ...); the shared helpers
# (conftest_lsf, trainer_utils, slurm_cluster, ...) sit here at the top, and a few test modules take another's
# data or fixtures by module name (test_slurm_jobs imports test_launchers' trainer arguments). pytest puts the
# folder of each module it collects on sys.path (its "prepend" import mode; names are unique across folders):
# every test folder is put there up front, so such an import works whichever module pytest collected first.
for _folder in sorted({p.parent for p in TESTS.rglob("test_*.py") if "data" not in p.relative_to(TESTS).parts}):
    if str(_folder) not in sys.path:
        sys.path.append(str(_folder))

# The Slurm cluster fixture lives here so that every module shares the session's one cluster (a fixture
# imported into each module is a fixture of that module, started again for each).
from slurm_cluster import slurm_cluster  # noqa: F401,E402

REPO = Path(__file__).resolve().parent.parent


def _interrupts_as_on_a_terminal() -> None:
    """Ctrl-C (SIGINT) and Ctrl-\\ (SIGQUIT) reach the programs the tests start as they reach a user's.

    Why: a shell starts a command in the background (``make test &``, nohup, a runner with no terminal) with
    SIGINT and SIGQUIT ignored, and an ignored signal stays ignored across fork and exec. Every program a test
    started would then ignore the Ctrl-C the test sends it: the tests of a watch and of an SSH password prompt
    ended by Ctrl-C failed that way, and only when the suite ran in the background. Python's own handler
    (KeyboardInterrupt) is put back in this process; the programs started from it get the default action."""
    import signal
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGQUIT) == signal.SIG_IGN:
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)


_interrupts_as_on_a_terminal()

#: The project's packages: the code the tests' Python subprocesses import.
PACKAGES = ("summit_jobs", "trainer")


def pytest_configure(config):
    """Compile the project's modules to bytecode once, before any test runs.

    Why: the suite starts hundreds of fresh ``python -m summit_jobs`` and ``python -m trainer`` processes.
    Where PYTHONDONTWRITEBYTECODE is set, none of them may write the bytecode it compiles, so each compiled
    every project module from source again: a large share of a short command's start-up. Python still reads
    bytecode that is there, so writing it once (as pip does for an installed program, into the gitignored
    __pycache__ folders, or under PYTHONPYCACHEPREFIX when that is set) gives the same processes, in the same
    environment, without that cost. Bytecode records its source's time and size and Python ignores it once
    they change, so an edit is never masked. The third-party packages were compiled when they were installed.
    pytest-xdist's workers find the bytecode their controller wrote.
    """
    import compileall
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    for package in PACKAGES:
        compileall.compile_dir(str(REPO / package), quiet=2, workers=1)


def pytest_collection_finish(session):
    """Freeze what collection made (the test modules, torch and the project, imported once per worker): each
    later full collection in an in-process test then scans only what the tests make. The same reason as
    trainer.loop.startup's; the in-process model and method tests used 12% less CPU with it."""
    import gc
    gc.freeze()


@pytest.fixture
def cli_env(tmp_path, monkeypatch):
    """An environment with no user config leaking in from the developer's home."""
    env = dict(os.environ)
    env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")
    env.pop("SUMMIT_JOBS_MACHINE", None)
    env.pop("SUMMIT_JOBS_PROJECT", None)
    env.pop("SUMMIT_JOBS_CONFIG", None)
    env.pop("SUMMIT_JOBS_MACHINES_PATH", None)
    monkeypatch.setenv("XDG_CONFIG_HOME", env["XDG_CONFIG_HOME"])
    for k in ("SUMMIT_JOBS_MACHINE", "SUMMIT_JOBS_PROJECT", "SUMMIT_JOBS_CONFIG", "SUMMIT_JOBS_MACHINES_PATH"):
        monkeypatch.delenv(k, raising=False)
    return env


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


def _pack_two_streams(root: Path) -> None:
    """``summit-jobs synth`` videos (8 motion classes in forward/backward pairs, 6 per class, 16 frames of
    64x64) packed by the real CLI as RGB frames (``rgb``) and as Farneback optical flow (``flow``)."""
    env = dict(os.environ, XDG_CONFIG_HOME=str(root / "xdg"))
    steps = [["synth", str(root / "d"), "--videos-per-class", "6", "--frames", "16", "--size", "64", "--seed", "1",
              "--quiet"],
             ["pack", str(root / "d" / "videos"), str(root / "rgb"), "--short-side", "64", "--quiet"],
             ["pack", str(root / "d" / "videos"), str(root / "flow"), "--modality", "flow", "--flow-algorithm",
              "farneback", "--short-side", "64", "--quiet"]]
    for args in steps:
        r = run_cli(args, env, timeout=300)
        assert r.returncode == 0, r.stderr


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A folder with a short path under /tmp: a Slurm test cluster's sockets live in it, and a socket path has
    at most 107 bytes (pytest's own folders, e.g. /tmp/pytest-of-root/pytest-155/popen-gw1/<test name>, are too
    long for a cluster inside them)."""
    folder = Path(tempfile.mkdtemp(prefix="sj-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def two_stream_packs(tmp_path_factory) -> Path:
    """The same videos packed as RGB (``<folder>/rgb``) and as optical flow (``<folder>/flow``), built once
    per session (tests/datapath/test_flow_stream.py, tests/datapath/test_bad_input_flow_stream.py and tests/runs/test_fuse.py
    train on them)."""
    return shared_folder(tmp_path_factory, "two-stream-packs", _pack_two_streams)


def _train_tiny_run(root: Path) -> None:
    """tests/trainer_utils.py's moving squares (8 train, 4 val clips) in ``data`` and one epoch of its tiny
    recipe on them, tested at the end, in ``run``."""
    from trainer_utils import make_dataset, run_ranks, tiny_args
    data = make_dataset(root / "data", train=8, val=4)
    run_ranks(1, tiny_args(root / "run", data, epochs=1, test_last=1), root / "logs", timeout=180)


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """A real one-epoch run of the tiny recipe (``<folder>/run``, trained on ``<folder>/data``), built once per
    session for the tests that only read it (tests/runs/test_bad_input_runs.py, tests/training/test_tensorboard.py)."""
    return shared_folder(tmp_path_factory, "tiny-run", _train_tiny_run)


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


@pytest.fixture
def stretch() -> Callable[[float], float]:
    """Seconds a wait takes on the quiet reference machine -> seconds for it here now: stretched by
    slowdown(), measured once as the test starts, so that every limit of the test scales alike."""
    factor = slowdown()
    return lambda seconds: seconds * factor


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
