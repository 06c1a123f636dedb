"""The fixtures the test folders share; each folder's own conftest.py holds the fixtures only its modules use.

Helpers a test module calls by name are in modules of their own (helpers.py, lsf_jobs.py, slurm_cluster.py,
trainer_utils.py, ...): pytest imports every folder's conftest.py under the one name ``conftest``.
"""
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Callable, Dict, Iterator

import pytest

TESTS = Path(__file__).resolve().parent
# The tests are grouped in folders by role (cli, planning, runs, schedulers/lsf, ...); the shared helpers
# (helpers, lsf_jobs, trainer_utils, slurm_cluster, ...) sit here at the top, and a few test modules take another's
# data or fixtures by module name (test_slurm_jobs imports test_launchers' trainer arguments). pytest puts the
# folder of each module it collects on sys.path (its "prepend" import mode; names are unique across folders):
# every test folder is put there up front, so such an import works whichever module pytest collected first.
for _folder in sorted({p.parent for p in TESTS.rglob("test_*.py") if "data" not in p.relative_to(TESTS).parts}):
    if str(_folder) not in sys.path:
        sys.path.append(str(_folder))

from helpers import REPO, run_cli, shared_folder, slowdown  # noqa: E402
from lsf_jobs import PROGRAM, lsf_environment, write_template  # noqa: E402
from slurm_cluster import required, stretched, unavailable_reason  # noqa: E402

from summit_jobs.schedulers.slurm.localcluster import LocalSlurmCluster  # noqa: E402


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


@pytest.fixture
def stretch() -> Callable[[float], float]:
    """Seconds a wait takes on the quiet reference machine -> seconds for it here now: stretched by
    slowdown(), measured once as the test starts, so that every limit of the test scales alike."""
    factor = slowdown()
    return lambda seconds: seconds * factor


@pytest.fixture
def lsf_env(tmp_path) -> Dict[str, str]:
    """Environment for an isolated embedded LSF (own state folder, 1 LSF minute = 2 s)."""
    return lsf_environment(tmp_path)


@pytest.fixture
def program(tmp_path) -> Path:
    """lsf_jobs.PROGRAM, the stand-in rank program, written into the test's folder."""
    path = tmp_path / "prog.py"
    path.write_text(PROGRAM)
    return path


@pytest.fixture
def template_dir(tmp_path, program) -> Path:
    """A template folder whose launch step runs ``program`` (lsf_jobs.write_template)."""
    return write_template(tmp_path / "templates", program)


@pytest.fixture(scope="session")
def real_four_node_run(tmp_path_factory) -> Dict[str, Path]:
    """``{"data", "run"}``: the data and the real 4-node run every simulated shape is held to
    (simulate_reference.py), made once per session for all workers (helpers.shared_folder)."""
    from simulate_reference import make_real_four_node_run
    root = shared_folder(tmp_path_factory, "real-four-node-run", make_real_four_node_run)
    return {"data": root / "data", "run": root / "run"}


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """torch computes on one thread in this test process, then goes back to its own count; for the modules
    that compute with torch in the test process itself (``pytestmark = pytest.mark.usefixtures(...)``).

    Why: ``make test`` runs several test processes on two cores, and torch starts one intra-op thread per
    core in each; the threads then wait on each other at every parallel region, and a gradcheck that takes
    4 s alone took minutes. One thread each fits the cores."""
    import torch
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory) -> Iterator[LocalSlurmCluster]:
    """The session's real Slurm cluster (slurm_cluster.py), shared by every module of this process (a fixture
    imported into each module would be that module's, started again for each); its start failing is an
    error of every test that uses it (with the daemon's log in the message), never a skip."""
    reason = unavailable_reason()
    if reason:
        if required():
            pytest.fail(f"SUMMIT_JOBS_REQUIRE_SLURM=1 but {reason}")
        pytest.skip(reason)
    cluster = LocalSlurmCluster(tmp_path_factory.mktemp("slurm"), cpus=4, accounting=True)
    cluster.start(timeout=stretched(30))
    yield cluster
    cluster.stop()
    # The database is the one large thing (about 80 MB); the logs stay for a failure's post-mortem.
    shutil.rmtree(cluster.root / "db", ignore_errors=True)
