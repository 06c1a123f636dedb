"""What ``python -m trainer`` refuses before it imports torch: input whose fault shows in the options, in a
path, in the data's manifest or in an installed package. Torch-free.

Why before torch: every rank imports torch (and, setting up, torch._dynamo) before it reads anything, a few
CPU-seconds on a laptop and often tens of seconds per rank from a parallel file system at scale; a
checkpoint path with a typo, a flow pack given to an RGB run or a missing tensorboard package was told to
each rank only after that. ``trainer/__main__.py`` calls ``refuse_early`` right after parsing, on every rank,
before the engine starts. The torch-side code (``trainer.loop``, ``trainer.data``, ``trainer.models``) calls
the same functions where it meets the same input, so a run started in-process refuses it in the same words.

What stays after torch: anything that needs a file's tensors (a checkpoint of another network or class
count) or the data's samples (a frame that does not decode, too few clips for a global batch).
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path
from trainer import rundir
from trainer.shards import ShardError, manifest_modality, read_manifest

TENSORBOARD_MISSING = "trainer: --tensorboard needs the tensorboard package (pip install tensorboard)"
#: Why a weights file of no bytes is refused (after ``trainer: OPTION PATH: ``).
EMPTY_FILE = "an empty file: a copy that never finished? copy it again"


class Refusal(SystemExit):
    """Input the trainer cannot use: the process ends with this one line (``trainer: ...``), no traceback."""


def refuse_early(args: argparse.Namespace) -> None:
    """Raise ``Refusal`` for the first of these options' faults that needs no torch to find, in the order the
    run would meet them (so the line is the one a later check would have given)."""
    if args.tensorboard:
        require_tensorboard()
    require_data(args)
    data_modality(args.data, args.modality)
    if args.test_only:
        weights_file(Path(args.test_only), "--test-only")
        return
    device_decode(args.decode, args.modality)
    if args.init_from:
        init_checkpoint(args.init_from)


def require_tensorboard() -> None:
    """``--tensorboard`` on a machine without the package: at start, on every rank, before any rank waits for
    another. Imported, not only looked up: a package that is there but fails to import is as missing."""
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        raise Refusal(TENSORBOARD_MISSING) from None


def require_data(args: argparse.Namespace) -> None:
    """--data is optional to the parser (the login side parses the arguments of any command) and needed here."""
    if args.data:
        return
    if args.test_only:
        raise Refusal("trainer: --test-only needs --data DIR (the folder of shards whose 'val' split is tested)")
    raise Refusal("trainer: --data DIR is required (a folder of shards with manifest.json)")


def data_modality(root: str, modality: str) -> None:
    """The data folder's manifest is readable and holds the modality the run trains or tests (its JSON only:
    the shards are opened after torch)."""
    try:
        manifest = read_manifest(root)
    except ShardError as exc:
        raise Refusal(f"trainer: {exc}") from None
    modality_matches(root, manifest_modality(manifest), modality)


def modality_matches(root: os.PathLike, held: str, modality: str) -> None:
    """Shards of ``held`` modality serve a run of ``modality``; else one line saying which option or pack fits.

    Why refused here: a flow pack read as frames (or frames as flow) would fail in every worker, once per
    clip, with a reader's error.
    """
    if held == modality:
        return
    how = ("train the temporal stream with --modality flow" if held == "flow" else
           "pack the videos with 'summit-jobs pack --modality flow' for --modality flow, or train with "
           "--modality rgb")
    raise Refusal(f"trainer: {root} holds {held} shards (manifest modality {held!r}) and this run trains "
                  f"--modality {modality}: {how}")


def device_decode(decode: str, modality: str) -> None:
    """``--decode device`` decodes RGB JPEGs only; the flow stream's fields are decoded by the workers."""
    if decode == "device" and modality != "rgb":
        raise Refusal(f"trainer: --decode device decodes RGB frames only and this run trains --modality "
                      f"{modality}: train it with --decode cpu (the workers decode its flow JPEGs)")


def weights_file(path: Path, option: str) -> None:
    """One line for an ``option`` path that names no weights file to read (missing, a folder, not readable,
    empty), before anything reads it."""
    why = None
    if not path.exists():
        why = "no such file"
    elif not path.is_file():
        why = "not a file"
    elif not os.access(path, os.R_OK):
        why = "not readable (permission denied)"
    elif path.stat().st_size == 0:
        why = EMPTY_FILE
    if why:
        raise Refusal(f"trainer: {option} {path}: {why}")


def init_checkpoint(source: os.PathLike) -> Path:
    """The checkpoint ``--init-from source`` names: a file, or a run directory's best.pt, else its newest
    checkpoint; refused in one line when there is none, or when it is empty."""
    path = _init_path(source)
    if path.stat().st_size == 0:
        raise Refusal(f"trainer: --init-from {path}: {EMPTY_FILE}")
    return path


def _init_path(source: os.PathLike) -> Path:
    """What ``source`` names, as ``init_checkpoint`` says; a path that names nothing is refused."""
    path = Path(source)
    if path.is_dir():
        best = rundir.ckpt_dir(path) / rundir.BEST
        if best.is_file():
            return best
        newest = rundir.latest(path)
        if newest is None:
            raise Refusal(f"trainer: --init-from {source}: a folder with no checkpoints (neither {rundir.BEST} "
                          f"nor ckpt-*.pt under {rundir.ckpt_dir(path)}): give a run directory that has "
                          "trained, or a checkpoint file")
        return newest
    if not path.exists():
        raise Refusal(f"trainer: --init-from {source}: no such file or directory")
    if not os.access(path, os.R_OK):
        raise Refusal(f"trainer: --init-from {source}: not readable (permission denied)")
    return path
