"""Where the embedded LSF keeps its state: the one fact about it that the login side needs.

Apart from summit_jobs.schedulers.lsf.embedded so that the run index (runs.py) and ``summit-jobs lsf`` can tell which
embedded LSF a job id belongs to without importing the LSF itself: everything else on the login side talks
to whatever LSF the profile names, through lsf.py.

A home holds everything the embedded LSF writes, and nothing else: ``prepare`` takes a new or empty folder,
or one that already is a home, and refuses any other (``--home /`` or ``--home ~`` would otherwise be
adopted, a ``jobs`` folder made in it, and its lock, counters and job records mixed with the user's files).
"""
from __future__ import annotations

import errno
import os
import re
from pathlib import Path
from typing import Mapping, Optional

#: The file that marks a folder as an embedded-LSF home; every home the embedded LSF uses gets one.
MARK = ".summit-jobs-lsf-home"
#: What the embedded LSF writes in its home (state.py, vnode_ns.py). A folder that holds only these, and
#: the temporary names of their writers, is a home made before homes had the mark.
OWN_NAMES = frozenset({"jobs", "lock", "next_id", "last-job-id", "allocation.seq", "vnode-hosts", "nodes", MARK})
_TMP_NAME = re.compile(r"^\..+\.tmp[0-9]+$")


class NotAHome(OSError):
    """A folder named as the embedded LSF's home that is neither empty nor such a home (reported as any
    other state-folder error is: one line, no traceback)."""


def home_path(environ: Optional[Mapping[str, str]] = None) -> Path:
    """The state folder that ``environ`` (default: this process's) selects; nothing is created."""
    env = os.environ if environ is None else environ
    explicit = env.get("SUMMIT_JOBS_LSF_HOME")
    if explicit:
        return Path(explicit)
    data = env.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(data) / "summit-jobs" / "lsf"


def foreign_entries(path: Path) -> list:
    """The names in ``path`` the embedded LSF did not write (empty for a home without its mark yet)."""
    return sorted(name for name in os.listdir(path) if name not in OWN_NAMES and not _TMP_NAME.match(name))


def prepare(path: Path) -> Path:
    """``path`` as the embedded LSF's home: made if missing (private, 0700: job records hold the submission
    environment), with its jobs folder and mark; NotAHome when it is a folder of other things.

    A folder with the mark is a home; so is an empty one, or one holding only what the embedded LSF
    writes (a home made before the mark existed), and each gets the mark now. Errors of the file system
    (a file in the way, no permission) are raised as they come, for the caller to report in one line.
    """
    if not path.is_dir():
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
    mark = path / MARK
    if not mark.is_file():
        foreign = foreign_entries(path)
        if foreign:
            listed = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
            raise NotAHome(errno.ENOTEMPTY, f"not an embedded-LSF home, and not empty (it holds {listed}): give "
                           "a new or empty folder (it is created), or an existing embedded-LSF home", str(path))
        try:
            fd = os.open(mark, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            fd = None                   # another command of this home marked it first
        if fd is not None:
            with os.fdopen(fd, "w") as fh:
                fh.write("This folder is the state of an embedded LSF of summit-jobs.\n")
    (path / "jobs").mkdir(exist_ok=True, mode=0o700)
    return path
