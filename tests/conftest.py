import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


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
