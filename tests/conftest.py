import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

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


def run_cli(args, env, cwd=None, input=None, timeout=60):
    """Run the real console entry point in a subprocess (the path a user takes)."""
    return subprocess.run([sys.executable, "-m", "summit_jobs", *args], env=env, cwd=cwd, input=input,
                          capture_output=True, text=True, timeout=timeout)
