"""Writing files so that nothing half-written is ever seen: the one helper of both sides. Torch-free.

Why one helper: a reader (a resumed rank, ``status``, ``report``, the next
link of a chain) must find a whole file or the old one, never half of one, and
a kill or a full disk must leave nothing that poisons the next run. Every
writer in the project goes through ``atomic_path``: write under a hidden
temporary name in the same folder (``.<name>.tmp<pid>``, recognised and
removed by cleaners), then ``os.replace``; on any failure the temporary file
is removed and the error names the final path.
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator, Union

PathLike = Union[str, "os.PathLike[str]"]


def tmp_name(path: PathLike) -> Path:
    """The hidden temporary name ``path`` is written under before the rename."""
    p = Path(path)
    return p.with_name(f".{p.name}.tmp{os.getpid()}")


def discard(path: PathLike) -> None:
    """Remove a temporary file while handling another error: a read-only or vanished folder must
    not replace that error with its own."""
    try:
        os.unlink(path)
    except OSError:
        pass


def named(exc: OSError, path: PathLike) -> OSError:
    """The same error naming ``path``: a write to a full disk reports no file name of its own."""
    if exc.filename and not os.path.basename(os.fsdecode(exc.filename)).startswith("."):
        return exc
    return OSError(exc.errno, exc.strerror or str(exc), os.fspath(path))


@contextlib.contextmanager
def atomic_path(path: PathLike, mode: int = 0o644, suffix: str = "") -> Iterator[Path]:
    """A temporary path to write ``path``'s content to; renamed onto ``path`` when the block ends well.

    The file is created with ``mode`` before the caller writes (so a private
    file is never readable by others, not even for an instant). ``suffix``
    keeps an extension for writers that choose the format by it (``.png``).
    """
    final = Path(path)
    tmp = final.with_name(f".{final.name}.tmp{os.getpid()}{suffix}")
    try:
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode))
        yield tmp
        os.replace(tmp, final)
    except OSError as exc:
        discard(tmp)
        raise named(exc, final) from None
    except BaseException:
        discard(tmp)
        raise


def write_atomic(path: PathLike, data: Union[bytes, str], mode: int = 0o644) -> None:
    """``path`` holds ``data`` whole or keeps what it held (text is written as UTF-8)."""
    blob = data.encode() if isinstance(data, str) else data
    with atomic_path(path, mode) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(blob)
