"""Where the embedded LSF keeps its state: the one fact about it that the login side needs.

Apart from summit_jobs.schedulers.lsf.embedded so that the run index (runs.py) and ``summit-jobs lsf`` can tell which
embedded LSF a job id belongs to without importing the LSF itself: everything else on the login side talks
to whatever LSF the profile names, through lsf.py.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Optional


def home_path(environ: Optional[Mapping[str, str]] = None) -> Path:
    """The state folder that ``environ`` (default: this process's) selects; nothing is created."""
    env = os.environ if environ is None else environ
    explicit = env.get("SUMMIT_JOBS_LSF_HOME")
    if explicit:
        return Path(explicit)
    data = env.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(data) / "summit-jobs" / "lsf"
