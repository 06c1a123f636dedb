"""``summit-jobs --version``: the package version and the code revision it runs.

Why the revision: two checkouts of the same version can render different
scripts; a bug report or a run compared across machines needs the commit.
From a git checkout it is asked of git (a short timeout, no shell; no git, no
failure); an installed package carries the commit recorded when it was built
(setup.py writes ``summit_jobs/REVISION``), else it says the revision is unknown.
"""
from __future__ import annotations

import os
from typing import List, Optional

from summit_jobs import __version__

#: Written into the built package by setup.py: the commit it was built from.
REVISION_FILE = "REVISION"
#: How long to wait for git: a hung network file system must not hold --version.
GIT_TIMEOUT_S = 2.0
_PKG = os.path.dirname(os.path.abspath(__file__))


def _git(args: List[str], folder: str) -> Optional[str]:
    """git's output for ``args`` run in ``folder``, or None when git is missing, slow or fails."""
    import subprocess  # here, not at the top: only --version runs git, and every command imports this module
    try:
        proc = subprocess.run(["git", "-C", folder, *args], capture_output=True, text=True,
                              timeout=GIT_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def git_revision(folder: str = _PKG) -> Optional[str]:
    """The short commit of the checkout that holds this package, ``-dirty`` when tracked files changed.

    Only when the package's own files are tracked there: an installed copy
    inside some other repository (a venv in a checkout) is not that checkout.
    """
    if _git(["ls-files", "--error-unmatch", "--", "__init__.py"], folder) is None:
        return None
    commit = _git(["rev-parse", "--short", "HEAD"], folder)
    if not commit:
        return None
    changes = _git(["status", "--porcelain", "--untracked-files=no"], folder)
    return commit + ("-dirty" if changes else "") if changes is not None else commit


def recorded_revision(folder: str = _PKG) -> Optional[str]:
    """The revision setup.py recorded at build time, or None."""
    try:
        with open(os.path.join(folder, REVISION_FILE), encoding="utf-8") as fh:
            text = fh.read().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text.splitlines()[0] if text else None


def describe() -> str:
    """``summit-jobs, version V, revision R`` as --version prints it."""
    live = git_revision()
    if live:
        rev = live
    else:
        recorded = recorded_revision()
        rev = f"{recorded} (recorded at build)" if recorded else "unknown (installed package)"
    return f"summit-jobs, version {__version__}, revision {rev}"


def show(ctx, param, value: bool) -> None:
    """The --version option's callback: print and exit before anything else is parsed or loaded."""
    if not value or ctx.resilient_parsing:
        return
    import click
    click.echo(describe())
    ctx.exit()
