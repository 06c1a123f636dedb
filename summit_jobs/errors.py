"""The one exception type the CLI turns into a clean message and a non-zero exit,
and the wording of the operating system's errors the CLI reports the same way."""
from __future__ import annotations

import errno
import os


class UserError(Exception):
    """A mistake the user can fix: bad input, a broken profile, a policy limit.

    The message must name the limit that was hit and the way out; the CLI prints
    it as one paragraph without a traceback.
    """

    exit_code = 2


#: What to do about the errors a full, read-only or foreign folder gives.
_FIXES = {
    errno.ENOSPC: "free space there or choose another folder",
    errno.EDQUOT: "your disk quota is used up: free space or choose another folder",
    errno.EROFS: "that file system is read-only: choose a writable folder",
    errno.EACCES: "check the permissions, or choose a folder you can write",
    errno.EPERM: "check the permissions, or choose a folder you can write",
    errno.ENOENT: "check the path",
    errno.ENOTDIR: "a part of the path is a file, not a folder: check the path",
    errno.EISDIR: "the path is a folder where a file was expected: check the path",
    errno.ENOTEMPTY: "name a new or empty folder",
}


def describe_os_error(exc: OSError) -> str:
    """One sentence for an OSError: the path, the system's words and the way out.

    Why here: disk full, read-only and permission errors can surface from any
    command that writes; the CLI reports them all in one form instead of a
    traceback, and the commands keep their temporary-name-then-rename writes so
    nothing half-written stays behind under a final name.
    """
    what = exc.strerror or str(exc)
    paths = [p for p in (exc.filename, getattr(exc, "filename2", None)) if p]
    where = " -> ".join(os.fsdecode(p) for p in paths)
    fix = _FIXES.get(exc.errno or -1, "check the path and try again")
    return f"{where + ': ' if where else ''}{what}; {fix}."
