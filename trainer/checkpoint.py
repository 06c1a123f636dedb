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
from typing import Dict, List, Optional

import torch

CKPT_RE = re.compile(r"^ckpt-(\d{9})\.pt$")
EPOCH_RE = re.compile(r"^epoch-(\d{4})\.pt$")
BEST = "best.pt"


def ckpt_dir(run_dir: os.PathLike) -> Path:
    return Path(run_dir) / "checkpoints"


def _atomic_save(obj: Dict, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _atomic_alias(src: Path, dst: Path) -> None:
    """dst becomes the same content as src (hard link when possible: no extra space)."""
    tmp = dst.with_name(f".{dst.name}.tmp{os.getpid()}")
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def step_path(run_dir: os.PathLike, step: int) -> Path:
    """Where the checkpoint of optimiser step ``step`` lives (the name ranks agree on)."""
    return ckpt_dir(run_dir) / f"ckpt-{step:09d}.pt"


def epoch_path(run_dir: os.PathLike, epoch: int) -> Path:
    """Where the end-of-epoch checkpoint of (0-based) ``epoch`` lives."""
    return ckpt_dir(run_dir) / f"epoch-{epoch:04d}.pt"


def number(path: os.PathLike) -> int:
    """The step or epoch number in a checkpoint's name: what travels between ranks instead of a path."""
    m = CKPT_RE.match(Path(path).name) or EPOCH_RE.match(Path(path).name)
    if m is None:
        raise ValueError(f"{path} is not a step or epoch checkpoint name")
    return int(m.group(1))


def list_checkpoints(run_dir: os.PathLike) -> List[Path]:
    d = ckpt_dir(run_dir)
    if not d.is_dir():
        return []
    return sorted((p for p in d.iterdir() if CKPT_RE.match(p.name)), key=lambda p: p.name)


def list_epoch_checkpoints(run_dir: os.PathLike) -> List[Path]:
    d = ckpt_dir(run_dir)
    if not d.is_dir():
        return []
    return sorted(p for p in d.iterdir() if EPOCH_RE.match(p.name))


def latest(run_dir: os.PathLike) -> Optional[Path]:
    ckpts = list_checkpoints(run_dir)
    return ckpts[-1] if ckpts else None


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


class CheckpointError(SystemExit):
    """A checkpoint that cannot be read or written: the trainer ends with this one line, no traceback."""


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
    hold only tensors and plain values (see ``Trainer._state``).
    """
    try:
        if not zipfile.is_zipfile(path):  # torch.save writes a zip archive; anything else is not ours
            raise ValueError("not a torch archive: empty, cut short or another kind of file")
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise CheckpointError(f"trainer: refusing to load {path}: it holds more than tensors and plain values "
                              f"({_unpickle_reason(exc)}); move it out of {Path(path).parent} if it is not "
                              "this trainer's, or delete it to resume from an older checkpoint") from None
    except (EOFError, RuntimeError, ValueError, KeyError) as exc:
        raise CheckpointError(f"trainer: {path} is not a readable checkpoint ("
                              f"{_unpickle_reason(exc)}); delete it to resume from an older checkpoint") from None
    except OSError as exc:
        raise CheckpointError(f"trainer: cannot read checkpoint {path}: {exc.strerror or exc}") from None
