"""`summit-jobs --version`: the package version and the code revision.

From this checkout the revision is git's short commit; from a scratch
repository the test makes, exactly that commit, with ``-dirty`` once a tracked
file changes; from a copy outside git (or without git on PATH) it is unknown,
without failing; from a package built by setup.py, the commit recorded at build.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO

from summit_jobs import __version__

VERSION_LINE = re.compile(r"^summit-jobs, version (\S+), revision (.+)$")
#: What a package needs to run outside this checkout, and what setup.py needs to build it.
PACKAGE = ("summit_jobs", "trainer", "envs", "templates")
BUILD = ("setup.py", "setup.cfg", "pyproject.toml", "README.md")


def _version(env: dict, cwd: Path) -> str:
    proc = subprocess.run([sys.executable, "-m", "summit_jobs", "--version"], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    match = VERSION_LINE.match(proc.stdout.strip())
    assert match and match.group(1) == __version__, proc.stdout
    return match.group(2)


def _git(args, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True,
                          timeout=60).stdout.strip()


def _copy(dest: Path, names=PACKAGE) -> Path:
    dest.mkdir(parents=True)
    for name in names:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(src, dest / name)
    return dest


def _outside_git(cli_env: dict, tmp_path: Path, **extra) -> dict:
    """PYTHONPATH for a copy, and git told not to look above the test's folder."""
    return dict(cli_env, GIT_CEILING_DIRECTORIES=str(tmp_path), **extra)


needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


@needs_git
def test_revision_from_this_checkout(cli_env):
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    revision = _version(cli_env, REPO)
    head = _git(["rev-parse", "--short", "HEAD"], REPO)
    assert revision in (head, f"{head}-dirty"), (revision, head)


@pytest.fixture
def scratch_repo(tmp_path) -> Path:
    """A git repository of its own holding a copy of the package, committed once."""
    repo = _copy(tmp_path / "repo", PACKAGE + BUILD)
    _git(["init", "-q"], repo)
    _git(["add", "-A"], repo)
    _git(["-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-qm", "scratch"], repo)
    return repo


@needs_git
def test_commit_and_dirty_in_a_scratch_repository(cli_env, tmp_path, scratch_repo):
    env = _outside_git(cli_env, tmp_path, PYTHONPATH=str(scratch_repo))
    head = _git(["rev-parse", "--short", "HEAD"], scratch_repo)
    assert _version(env, scratch_repo) == head
    (scratch_repo / "notes.txt").write_text("an untracked file is not a change to the code\n")
    assert _version(env, scratch_repo) == head
    settings = scratch_repo / "summit_jobs" / "profiles" / "settings.py"
    settings.write_text(settings.read_text() + "\n# changed\n")
    assert _version(env, scratch_repo) == f"{head}-dirty"


def test_copy_outside_git_is_unknown(cli_env, tmp_path):
    site = _copy(tmp_path / "site")
    env = _outside_git(cli_env, tmp_path, PYTHONPATH=str(site))
    assert _version(env, site) == "unknown (installed package)"


@needs_git
def test_no_git_on_path_is_not_a_failure(cli_env, tmp_path, scratch_repo):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    env = _outside_git(cli_env, tmp_path, PYTHONPATH=str(scratch_repo), PATH=str(empty))
    assert _version(env, scratch_repo) == "unknown (installed package)"


@needs_git
def test_build_records_the_commit(cli_env, tmp_path, scratch_repo):
    """setup.py's build writes the commit into the built package; that copy, outside git, reports it."""
    lib = tmp_path / "lib"
    proc = subprocess.run([sys.executable, "setup.py", "-q", "build_py", "-d", str(lib)], cwd=scratch_repo,
                          env=cli_env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    head = _git(["rev-parse", "--short", "HEAD"], scratch_repo)
    assert (lib / "summit_jobs" / "REVISION").read_text() == head + "\n"
    assert not _git(["status", "--porcelain", "--untracked-files=no"], scratch_repo)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = _outside_git(cli_env, tmp_path, PYTHONPATH=str(lib))
    assert _version(env, elsewhere) == f"{head} (recorded at build)"


def test_version_is_answered_before_the_config_file_is_read(cli_env, tmp_path):
    """--version works even when the config file is broken (it is eager: nothing else is loaded)."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("machine: [unclosed\n")
    env = dict(cli_env, SUMMIT_JOBS_CONFIG=str(bad))
    assert _version(env, tmp_path)
    assert os.path.exists(bad)
