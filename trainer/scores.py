"""Per-video test scores in the run directory: ``scores/<checkpoint stem>.npz``. Torch-free.

Why kept: the summed counts of a test (top-1, top-5, loss) cannot be combined
across runs; two-stream late fusion (an RGB run and an optical-flow run,
``summit-jobs fuse``) needs every video's score vector from each stream. Rank 0
writes one file per tested checkpoint: ``scores/<stem>.npz`` from the final
test, ``scores/test-only-<stem>.npz`` from ``--test-only``.

The file (``numpy.load(allow_pickle=False)`` reads it; no object arrays):

- ``keys``: unicode (videos,), each video's key in the shards;
- ``labels``: int64 (videos,);
- ``scores``: float32 (videos, classes), the video's views averaged as the test
  averaged them (``--test-average``: mean logits, or the log of the mean
  probability);
- ``meta``: a JSON object in a 0-d unicode array: ``format``, ``checkpoint``,
  ``step``, ``epoch``, ``clips``, ``crops``, ``test_size``, ``average``,
  ``modality``, ``num_classes``, ``classes`` (the manifest's class names),
  ``test_only``.

Written under a temporary name in the same folder, then renamed
(``trainer.files``); a killed write's temporary is removed by the next writer.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Union

import numpy as np

from trainer.files import atomic_path
from trainer.rundir import SCORES

PathLike = Union[str, "os.PathLike[str]"]
FORMAT = "summit-jobs-scores/1"
#: File names of ``--test-only`` results start with this; the rest are the final test's.
TEST_ONLY_PREFIX = "test-only-"
#: The arrays every scores file holds.
ARRAYS = ("keys", "labels", "scores", "meta")
_LEFTOVER = re.compile(r"^\.(?P<name>[^/]+\.npz)\.tmp\d+$")


def scores_name(checkpoint: str, test_only: bool = False) -> str:
    """``scores/<stem>.npz`` (or ``scores/test-only-<stem>.npz``) for a checkpoint's file name, relative to
    the run directory: what the ``test`` record names."""
    stem = Path(checkpoint).stem
    return f"{SCORES}/{TEST_ONLY_PREFIX if test_only else ''}{stem}.npz"


def clean_leftovers(run_dir: PathLike, only: Optional[str] = None) -> List[Path]:
    """Remove temporaries that a killed write left in ``run_dir/scores``.

    Why not every one: a ``--test-only`` run may share the folder with a training
    (and with other test-only runs). The training's rank 0 is the one writer of
    the final test's names, so it removes all of those (``only`` None); a
    test-only run removes only the leftovers of the file it is about to write
    (``only``: that file's name).
    """
    folder = Path(run_dir) / SCORES
    removed: List[Path] = []
    if not folder.is_dir():
        return removed
    for p in folder.iterdir():
        m = _LEFTOVER.match(p.name)
        if m is None:
            continue
        name = m.group("name")
        if (only is None and not name.startswith(TEST_ONLY_PREFIX)) or name == only:
            p.unlink(missing_ok=True)
            removed.append(p)
    return removed


def write_scores(run_dir: PathLike, name: str, keys: Sequence[str], labels: Sequence[int], scores: np.ndarray,
                 meta: Dict[str, object]) -> Path:
    """``run_dir/name`` holds the table whole, or keeps what it held; returns its path."""
    path = Path(run_dir) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {"keys": np.array(list(keys), dtype=np.str_),
              "labels": np.asarray(labels, dtype=np.int64),
              "scores": np.asarray(scores, dtype=np.float32),
              "meta": np.array(json.dumps({"format": FORMAT, **meta}, sort_keys=True), dtype=np.str_)}
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)
            fh.flush()
            os.fsync(fh.fileno())
    return path


def test_meta(args: object, test_set: object, checkpoint: str, step: int, epoch: int, num_classes: int,
              test_only: bool) -> Dict[str, object]:
    """What a reader needs to know of a test's scores besides the table: which checkpoint, which protocol
    (clips, crops, size, how views were averaged) and which stream (``modality``) produced them."""
    shards = getattr(test_set, "shards", None)
    classes = [str(c) for c in getattr(shards, "classes", None) or []]
    return {"checkpoint": Path(checkpoint).name, "step": int(step), "epoch": int(epoch),
            "clips": int(getattr(test_set, "clips")), "crops": int(getattr(test_set, "crops")),
            "test_size": int(getattr(test_set, "size")), "average": str(getattr(args, "test_average", "logits")),
            "modality": str(getattr(args, "modality", "rgb")), "num_classes": int(num_classes),
            "classes": classes, "test_only": bool(test_only)}


def save_test(run_dir: PathLike, test_set: object, table: object, meta: Dict[str, object]) -> str:
    """Rank 0, after a test: the table (videos x classes, row = dataset index) with the videos' keys and
    labels, under the name the ``test`` record gives (returned). A killed earlier write's temporary goes
    first (see ``clean_leftovers``)."""
    name = scores_name(str(meta["checkpoint"]), bool(meta.get("test_only")))
    clean_leftovers(run_dir, Path(name).name if meta.get("test_only") else None)
    shards = getattr(test_set, "shards")
    n = len(shards)
    write_scores(run_dir, name, [shards.key(i) for i in range(n)], [shards.label(i) for i in range(n)],
                 np.asarray(table), meta)
    return name
