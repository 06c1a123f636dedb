"""Checkpoints in the run directory: atomic, last N kept, plus best and the
last epochs' ends (the paper's mean/std over the last 5 epochs' checkpoints).

Why atomic (temp name in the same folder + os.replace): a rank killed in the
middle of ``torch.save`` (walltime, SIGKILL, node failure) must never leave a
file under a final name, because the next chain link resumes from the newest
``ckpt-*.pt`` it finds. The run directory is on the parallel file system, never
only on node-local NVMe, which is erased when the job ends.
"""
from __future__ import annotations

import os
import pickle
import re
import shutil
import zipfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import torch

from trainer.dist import compat
# the step checkpoints' names and their listing are the run directory's contract (torch-free: the preflight
# resolves --init-from with them before torch is imported)
from trainer.rundir import BEST, CKPT_RE, checkpoint_name, ckpt_dir, latest, list_checkpoints  # noqa: F401

EPOCH_RE = re.compile(r"^epoch-(\d{4})\.pt$")


class CheckpointError(SystemExit):
    """A checkpoint that cannot be read or written: the trainer ends with this one line, no traceback."""


def _tmp_name(path: Path) -> Path:
    """The temporary a save writes first: hidden, in the same folder, named after the final file and the pid."""
    return path.with_name(f".{path.name}.tmp{os.getpid()}")


def _write_failure(path: Path, exc: BaseException) -> "CheckpointError":
    """One line for a save that failed (full disk, quota, permissions): what, where, and what to do."""
    cause: Optional[BaseException] = exc
    while cause is not None and not isinstance(cause, OSError):
        cause = cause.__cause__ or cause.__context__  # torch.save wraps the OSError of a short write
    why = (cause.strerror or str(cause)) if isinstance(cause, OSError) else str(exc).splitlines()[0]
    return CheckpointError(f"trainer: cannot write checkpoint {path}: {why}; nothing was left under a final "
                           f"name: free space in {path.parent} (or use a --run-dir elsewhere) and run again to "
                           "resume from the newest checkpoint")


def _atomic_save(obj: Dict, path: Path) -> None:
    tmp = _tmp_name(path)
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except (OSError, RuntimeError) as exc:
        raise _write_failure(path, exc) from None
    finally:
        tmp.unlink(missing_ok=True)


def _atomic_alias(src: Path, dst: Path) -> None:
    """dst becomes the same content as src (hard link when possible: no extra space)."""
    tmp = _tmp_name(dst)
    tmp.unlink(missing_ok=True)
    try:
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    except OSError as exc:
        raise _write_failure(dst, exc) from None
    finally:
        tmp.unlink(missing_ok=True)


def clean_leftovers(run_dir: os.PathLike, run_files: Tuple[str, ...] = ()) -> List[Path]:
    """Remove the temporaries of saves that a killed run (SIGKILL, node failure, full disk) left behind.

    Why all of them, whatever their pid: only rank 0 of the one job that owns
    the run directory writes these names, and it calls this before it writes
    anything, so no live writer can own one. Only the trainer's own names go
    (checkpoints, and ``run_files`` in the run directory): other programs'
    temporaries in the folder are theirs to handle.
    """
    own = re.compile(r"^\.(?:ckpt-\d{9}\.pt|epoch-\d{4}\.pt|best\.pt)\.tmp\d+$")
    mine = re.compile(r"^\.(?:%s)\.tmp\d+$" % "|".join(re.escape(n) for n in run_files)) if run_files else None
    removed = []
    for folder, pattern in ((ckpt_dir(run_dir), own), (Path(run_dir), mine)):
        if pattern is None or not folder.is_dir():
            continue
        for p in folder.iterdir():
            if pattern.match(p.name):
                p.unlink(missing_ok=True)
                removed.append(p)
    return removed


def step_path(run_dir: os.PathLike, step: int) -> Path:
    """Where the checkpoint of optimiser step ``step`` lives (the name ranks agree on)."""
    return ckpt_dir(run_dir) / checkpoint_name(step)


def epoch_path(run_dir: os.PathLike, epoch: int) -> Path:
    """Where the end-of-epoch checkpoint of (0-based) ``epoch`` lives."""
    return ckpt_dir(run_dir) / f"epoch-{epoch:04d}.pt"


def number(path: os.PathLike) -> int:
    """The step or epoch number in a checkpoint's name: what travels between ranks instead of a path."""
    m = CKPT_RE.match(Path(path).name) or EPOCH_RE.match(Path(path).name)
    if m is None:
        raise ValueError(f"{path} is not a step or epoch checkpoint name")
    return int(m.group(1))


def list_epoch_checkpoints(run_dir: os.PathLike) -> List[Path]:
    d = ckpt_dir(run_dir)
    if not d.is_dir():
        return []
    return sorted(p for p in d.iterdir() if EPOCH_RE.match(p.name))


def save(run_dir: os.PathLike, state: Dict, step: int, keep: int, epoch_end: Optional[int] = None,
         keep_epochs: int = 5, best: bool = False) -> Path:
    """Write ckpt-<step>.pt; alias it as epoch-<e>.pt / best.pt; prune old ones."""
    d = ckpt_dir(run_dir)
    d.mkdir(parents=True, exist_ok=True)
    path = step_path(run_dir, step)
    _atomic_save(state, path)
    if epoch_end is not None:
        _atomic_alias(path, epoch_path(run_dir, epoch_end))
        for old in list_epoch_checkpoints(run_dir)[:-max(1, keep_epochs)]:
            old.unlink(missing_ok=True)
    if best:
        _atomic_alias(path, d / BEST)
    for old in list_checkpoints(run_dir)[:-max(1, keep)]:
        old.unlink(missing_ok=True)
    return path


def _unpickle_reason(exc: BaseException) -> str:
    """The line of torch's long weights-only refusal that says what was refused."""
    for line in str(exc).splitlines():
        if "nsupported" in line:
            return line.strip().rstrip(".").replace("WeightsUnpickler error: ", "")
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def load(path: os.PathLike) -> Dict:
    """A checkpoint's contents, read as data only (``weights_only=True``).

    Why: a checkpoint is a pickle, and a pickle may name any function to call
    while it is read. Run directories are shared, copied and downloaded; a file
    in one must not be able to run code in every rank of a job. Our checkpoints
    hold only tensors and plain values (see ``trainstate.TrainState.checkpoint``).
    """
    try:
        if not zipfile.is_zipfile(path):  # torch.save writes a zip archive; anything else is not ours
            raise ValueError("not a torch archive: empty, cut short or another kind of file")
        return compat.load_data_only(path)  # weights_only=True on every torch release
    except pickle.UnpicklingError as exc:
        raise CheckpointError(f"trainer: refusing to load {path}: it holds more than tensors and plain values "
                              f"({_unpickle_reason(exc)}); move it out of {Path(path).parent} if it is not "
                              "this trainer's, or delete it to resume from an older checkpoint") from None
    except (EOFError, RuntimeError, ValueError, KeyError) as exc:
        raise CheckpointError(f"trainer: {path} is not a readable checkpoint ("
                              f"{_unpickle_reason(exc)}); delete it to resume from an older checkpoint") from None
    except OSError as exc:
        raise CheckpointError(f"trainer: cannot read checkpoint {path}: {exc.strerror or exc}") from None
