"""The command line of ``python -m trainer.models.interop convert``, and what it checks before torch. Torch-free.

Why a module of its own: importing torch costs about a second of CPU, and most mistakes
a user makes with ``convert`` (a missing or empty IN, a folder, an OUT that exists or whose
folder does not, an unknown layout) need no tensor to see. This module parses the options
and checks the paths (``precheck``) before ``trainer.models.interop`` imports torch for a
conversion that can start. interop.py re-exports its names (``parser``, ``WeightsError``,
the choice lists), so the library's API is what it was; its ``python -m`` entry runs
``precheck`` before its own ``import torch``, and its ``main`` runs the conversion. This
module never imports interop.py: the checks are below the conversion, not beside it.
"""
from __future__ import annotations

import argparse
import errno
import os
import stat
import sys
from pathlib import Path
from typing import List, Optional

from trainer import preflight
from trainer.config import SHIFT_BLOCKS

LAYOUTS = ("summit", "tsm", "mmaction2")
FORMATS = ("pt", "safetensors")
PLACEMENTS = ("blockres", "block")
#: Where the official TSN keeps its classifier: ``new_fc`` when built with dropout (its scripts
#: and test_models.py), ``base_model.fc`` with dropout 0.
TSM_FCS = ("new_fc", "base_model.fc")
#: What a refusal starts with (the tests and docs/weights.md quote it).
ERROR_PREFIX = "trainer.models.interop: error: "


class WeightsError(ValueError):
    """Weights this module cannot use. The message says what is wrong and what to do, without the
    file's path: the caller puts its option and the path in front (``trainer: --pretrained FILE: ...``)."""


def file_kind(path: Path) -> str:
    """"zip", "legacy" (torch < 1.6 pickle), "safetensors", "unknown" or "empty", from the first bytes.

    Why sniff: a text file handed to ``torch.load`` fails deep in the unpickler with a
    message that reads like a refused pickle; saying "not a weights file" is the truth.
    """
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(9)
    if head[:4] == b"PK\x03\x04":
        return "zip"
    if head[:1] == b"\x80":
        return "legacy"
    if len(head) == 9 and head[8:9] == b"{" and 8 + int.from_bytes(head[:8], "little") <= size:
        return "safetensors"
    return "unknown" if size else "empty"


def weights_kind(path: os.PathLike) -> str:
    """``file_kind`` of a file a loader can try ("zip", "legacy" or "safetensors"); WeightsError for
    one that cannot be read or that no loader reads (the messages of ``interop.read_weights``)."""
    try:
        kind = file_kind(Path(path))
    except OSError as exc:
        raise WeightsError(f"cannot read it: {exc.strerror or exc}") from None
    if kind == "empty":
        raise WeightsError(preflight.EMPTY_FILE)
    if kind == "unknown":
        raise WeightsError("not a weights file: neither a torch checkpoint (torch.save) nor safetensors")
    return kind


def cannot_write(path: Path, exc: OSError) -> str:
    """The refusal for an OUT that could not be written (``exc``), with the fix its cause calls for."""
    full = exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
    fix = f"free space in {path.parent} or write elsewhere" if full else \
        f"check that {path.parent} exists and is writable"
    return f"cannot write {path}: {exc.strerror or exc}; nothing was left under that name: {fix}"


def _folder_problem(folder: Path) -> Optional[OSError]:
    """Why no file can be created in ``folder`` (as the write would report it), or None."""
    try:
        mode = os.stat(folder).st_mode
    except OSError as exc:
        return exc
    if not stat.S_ISDIR(mode):
        return OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
    if not os.access(folder, os.W_OK | os.X_OK):
        return OSError(errno.EACCES, os.strerror(errno.EACCES))
    return None


def check_paths(a: argparse.Namespace) -> None:
    """Refuse, as ``convert`` would, what the paths alone show is wrong: OUT a folder or (without
    --force) taken, IN unreadable, empty or no weights file, no file creatable where OUT goes."""
    out = Path(a.output)
    if out.is_dir():
        raise WeightsError(f"{out} is a folder: give a file name")
    if out.exists() and not a.force:
        raise WeightsError(f"{out} exists: pass --force to replace it, or choose another OUT")
    try:
        weights_kind(a.input)
    except WeightsError as exc:
        raise WeightsError(f"{a.input}: {exc}") from None
    problem = _folder_problem(out.parent)
    if problem is not None:
        raise WeightsError(cannot_write(out, problem))


def parser() -> argparse.ArgumentParser:
    """The command line: ``convert IN OUT --to LAYOUT`` (more subcommands may join it)."""
    p = argparse.ArgumentParser(prog="python -m trainer.models.interop",
                                description="Weights between this trainer, the official TSM code and mmaction2.")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("convert", help="write IN's weights to OUT in another key layout",
                       description="Read IN (this trainer's checkpoint or export, an official TSM or mmaction2 "
                                   "checkpoint, a state dict; .pt/.pth or .safetensors) and write its weights "
                                   "to OUT in the layout of --to.")
    c.add_argument("input", metavar="IN")
    c.add_argument("output", metavar="OUT")
    c.add_argument("--to", required=True, choices=LAYOUTS, help="key layout of OUT")
    c.add_argument("--format", choices=FORMATS, default=None,
                   help="file format of OUT (default: safetensors when OUT ends in .safetensors, else pt)")
    c.add_argument("--tsm-fc", choices=TSM_FCS, default=None,
                   help="the official TSN's classifier name (default new_fc: a TSN built with dropout, as "
                        "its scripts and test_models.py do; base_model.fc for --dropout 0)")
    c.add_argument("--no-shift", dest="shift", action="store_const", const=False, default=None,
                   help="the network has no temporal shift (TSN); default: what IN records, else shifted")
    c.add_argument("--shift-placement", choices=PLACEMENTS, default=None,
                   help="where the shifts are (default: what IN records, else blockres)")
    c.add_argument("--shift-blocks", choices=SHIFT_BLOCKS, default=None,
                   help="which blocks carry a shift (default: what IN records, else official)")
    c.add_argument("--force", action="store_true", help="replace OUT if it exists")
    return p


def checked(argv: Optional[List[str]] = None) -> argparse.Namespace:
    """The command line with its paths checked: argparse exits 2 for a bad option, WeightsError says what is
    wrong with IN or OUT."""
    a = parser().parse_args(argv)
    check_paths(a)
    return a


def refused(exc: WeightsError) -> int:
    """Say ``exc`` in the command's one line on stderr; the exit status of a refusal."""
    print(f"{ERROR_PREFIX}{exc}", file=sys.stderr)
    return 2


def precheck(argv: Optional[List[str]] = None) -> None:
    """Exit with a refusal for anything wrong with the command line, before the caller imports torch."""
    try:
        checked(argv)
    except WeightsError as exc:
        sys.exit(refused(exc))
