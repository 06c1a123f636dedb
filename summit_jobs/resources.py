"""Where the shipped data lives, installed or in a source checkout."""
from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent


def _find(name: str) -> Path:
    installed = _PKG / name          # non-editable install: summit_jobs/<name>
    if installed.is_dir():
        return installed
    return _PKG.parent / name        # source checkout / editable install: <repo>/<name>


def templates_dir() -> Path:
    return _find("templates")


def envs_dir() -> Path:
    return _find("envs")


def embedded_bin_dir() -> Path:
    """The embedded LSF's commands; put on PATH only for its own jobs and tests."""
    return _PKG / "schedulers" / "lsf" / "embedded" / "bin"
