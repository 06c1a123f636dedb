"""Two-stream late fusion: the per-video test scores of several runs (an RGB stream, an optical-flow
stream, ...) averaged into one prediction per video, and the accuracy of each stream and of the fusion.

Why late fusion: the two streams of TSN and of two-stream TSM are separate
networks trained as separate runs on different inputs; they meet only at the
end, where each video's class scores are averaged (TSN weights flow 1.5 to
RGB's 1). The trainer writes those scores at every test (``trainer.scores``:
``<run>/scores/<checkpoint stem>.npz``); this module reads them, matches the
videos by key, fuses and scores. Pure functions over arrays: no torch, no
printing; ``cli_fuse`` prints.
"""
from __future__ import annotations

import json
import math
import shlex
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

from summit_jobs.errors import UserError
from trainer.rundir import SCORES

# numpy, and trainer.scores that imports it, are imported where the tables are read: a command line refused
# before that never pays for them.
if TYPE_CHECKING:
    import numpy as np

AVERAGES = ("probs", "logits")
NO_SCORES = ("run its final test, or `python -m trainer --test-only CKPT --data DIR --run-dir {run}` "
             "(trainers older than per-video scores wrote none)")


@dataclass
class Stream:
    """One input: the scores file, where it came from and its table (rows in the file's order)."""
    name: str
    path: Path
    keys: np.ndarray
    labels: np.ndarray
    scores: np.ndarray
    meta: Dict[str, object]
    chosen: str = ""  # how the file was picked from a run directory ("" for a file given as such)


def _not_scores(path: Path, why: str) -> UserError:
    return UserError(f"{path}: not a test scores file ({why}): give a run directory or one of its "
                     f"{SCORES}/*.npz files written by the trainer's test")


def _load_arrays(path: Path) -> Dict[str, np.ndarray]:
    """The file's arrays, data only (``allow_pickle=False``); a file that is no such archive is refused."""
    import numpy as np

    from trainer.scores import ARRAYS

    try:
        z = np.load(path, allow_pickle=False)
        if not isinstance(z, np.lib.npyio.NpzFile):
            raise _not_scores(path, "a single .npy array, not an .npz archive")
        with z:
            missing = [a for a in ARRAYS if a not in z.files]
            if missing:
                raise _not_scores(path, f"no {', '.join(missing)} array")
            return {a: z[a] for a in ARRAYS}
    except (ValueError, zipfile.BadZipFile, EOFError, KeyError) as exc:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise _not_scores(path, f"unreadable: {why}") from None


def _meta(path: Path, raw: np.ndarray) -> Dict[str, object]:
    try:
        meta = json.loads(str(raw)) if raw.dtype.kind == "U" and raw.ndim == 0 else None
    except ValueError:
        meta = None
    if not isinstance(meta, dict):
        raise _not_scores(path, "its meta is not a JSON object")
    return meta


def read_stream(path: Path, name: str = "", chosen: str = "") -> Stream:
    """A scores file checked for what fusion relies on: one key, one label and one finite row per video,
    keys unique."""
    import numpy as np

    a = _load_arrays(path)
    keys, labels, scores = a["keys"], a["labels"], a["scores"]
    if keys.ndim != 1 or keys.dtype.kind != "U" or labels.ndim != 1 or labels.dtype.kind not in "iu":
        raise _not_scores(path, "keys must be text and labels integers, one per video")
    if scores.ndim != 2 or scores.dtype.kind != "f" or not len(keys) == len(labels) == scores.shape[0]:
        raise _not_scores(path, f"{len(keys)} keys, {len(labels)} labels and a {list(scores.shape)} score table "
                                "do not match")
    if len(set(keys.tolist())) != len(keys):
        raise _not_scores(path, "a video key appears twice")
    if not np.isfinite(scores).all():
        raise _not_scores(path, "scores that are not finite numbers")
    if len(labels) and (labels.min() < 0 or labels.max() >= scores.shape[1]):
        raise _not_scores(path, f"labels outside the {scores.shape[1]} classes")
    meta = _meta(path, a["meta"])
    return Stream(name or stream_name(path, meta), path, keys, labels.astype(np.int64),
                  scores.astype(np.float64), meta, chosen)


def stream_name(path: Path, meta: Dict[str, object]) -> str:
    """``<run directory name> [<modality>]``: what the table calls a stream."""
    run = path.parent.parent.name if path.parent.name == SCORES else path.stem
    return f"{run} [{meta.get('modality', 'rgb')}]"


def _step(path: Path) -> int:
    step = _meta(path, _load_arrays(path)["meta"]).get("step")
    return step if isinstance(step, int) else -1


def _named(files: List[Path], checkpoint: str) -> List[Path]:
    """The files of ``checkpoint`` (a checkpoint's name or stem: ``epoch-0003``, ``epoch-0003.pt``, ``best``;
    ``epoch_0003`` reads as ``epoch-0003``), the final test's before ``--test-only``'s."""
    from trainer.scores import TEST_ONLY_PREFIX

    stem = Path(checkpoint).stem if checkpoint.endswith((".pt", ".pth", ".npz")) else checkpoint
    stems = [stem, stem.replace("_", "-")]
    for s in list(stems):
        stems.append(TEST_ONLY_PREFIX + s)
    return [f for s in stems for f in files if f.stem == s]


def scores_file(target: str, checkpoint: Optional[str] = None) -> Tuple[Path, str]:
    """(the scores file of ``target``, how it was chosen). A file is taken as given; a run directory gives
    its newest tested checkpoint's (highest step; the final test's before ``--test-only``'s), or
    ``checkpoint``'s."""
    path = Path(target).expanduser()
    if path.is_file():
        return path, ""
    if not path.is_dir():
        raise UserError(f"{target}: no such run directory or scores file: check the path")
    folder = path / SCORES
    files = sorted(f for f in folder.glob("*.npz") if not f.name.startswith(".")) if folder.is_dir() else []
    if not files:
        raise UserError(f"no test scores in {target} (no {SCORES}/*.npz): {NO_SCORES.format(run=shlex.quote(str(target)))}")
    if checkpoint:
        found = _named(files, checkpoint)
        if not found:
            raise UserError(f"--checkpoint {checkpoint}: {target}/{SCORES} has no scores of it; tested there: "
                            f"{', '.join(f.stem for f in files)}")
        return found[0], f"--checkpoint {checkpoint}"
    from trainer.scores import TEST_ONLY_PREFIX
    best = max(files, key=lambda f: (_step(f), not f.name.startswith(TEST_ONLY_PREFIX), f.name))
    return best, f"newest tested checkpoint, step {_step(best)}"


def parse_weights(text: Optional[str], count: int) -> List[float]:
    """One positive finite weight per input from ``1,1.5``; all 1 when not given."""
    if text is None:
        return [1.0] * count
    parts = [p.strip() for p in text.split(",")]
    weights = []
    for p in parts:
        try:
            w = float(p)
        except ValueError:
            w = float("nan")
        if not (math.isfinite(w) and w > 0):
            raise UserError(f"--weights {text}: {p!r} is not a positive finite number: give one weight per input, "
                            f"comma-separated, e.g. --weights {','.join(['1'] * (count - 1) + ['1.5'])}")
        weights.append(w)
    if len(weights) != count:
        raise UserError(f"--weights {text}: {len(weights)} weights for {count} inputs: give one per input, in the "
                        "order of the inputs")
    return weights


def _classes_agree(streams: Sequence[Stream]) -> None:
    counts = [s.scores.shape[1] for s in streams]
    if len(set(counts)) > 1:
        listed = ", ".join(f"{s.path} has {n}" for s, n in zip(streams, counts))
        raise UserError(f"the streams score different numbers of classes ({listed}): fuse runs trained and "
                        "tested on the same classes (the same data set and --num-classes)")


def _key_sets(streams: Sequence[Stream], common: bool) -> List[str]:
    """The keys to fuse in the first stream's order: all (every stream must have the same set), or with
    ``common`` those every stream has."""
    sets = [set(s.keys.tolist()) for s in streams]
    shared = set.intersection(*sets)
    if not common and any(len(k) != len(shared) for k in sets):
        only = "; ".join(f"{len(k - shared)} only in {s.path}" for s, k in zip(streams, sets) if k - shared)
        raise UserError(f"the streams tested different videos ({len(shared)} in all of them; {only}): test them "
                        "on the same data, or pass --common to fuse only the videos every stream has")
    if not shared:
        raise UserError("the streams have no video key in common (" + ", ".join(str(s.path) for s in streams)
                        + "): were they tested on the same data set?")
    return [k for k in streams[0].keys.tolist() if k in shared]


def match(streams: Sequence[Stream], common: bool = False) -> Tuple[List[str], np.ndarray, List[np.ndarray]]:
    """(keys, labels, each stream's score rows) aligned by video key; refuses what cannot be fused."""
    import numpy as np

    _classes_agree(streams)
    keys = _key_sets(streams, common)
    labels = None
    tables = []
    for s in streams:
        row = {k: i for i, k in enumerate(s.keys.tolist())}
        order = np.array([row[k] for k in keys], dtype=np.int64)
        lab = s.labels[order]
        if labels is not None and not np.array_equal(lab, labels):
            bad = int(np.flatnonzero(lab != labels)[0])
            n = int((lab != labels).sum())
            raise UserError(f"video {keys[bad]} has label {int(labels[bad])} in {streams[0].path} and "
                            f"{int(lab[bad])} in {s.path} ({n} of {len(keys)} videos disagree): the streams must be "
                            "tested on the same labelled videos (the same manifest)")
        labels = lab
        tables.append(s.scores[order])
    return keys, labels, tables


def softmax(scores: np.ndarray) -> np.ndarray:
    """Row-wise probabilities (float64, shifted by each row's maximum: no overflow)."""
    import numpy as np

    z = np.exp(scores - scores.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def fuse(tables: Sequence[np.ndarray], weights: Sequence[float], average: str = "probs") -> np.ndarray:
    """The weighted mean of the streams' softmax probabilities (``probs``) or of their score vectors as they
    are (``logits``)."""
    if average not in AVERAGES:
        raise ValueError(f"average {average!r}: one of {AVERAGES}")
    parts = [softmax(t) if average == "probs" else t for t in tables]
    return sum(w * p for w, p in zip(weights, parts)) / float(sum(weights))


def accuracy(scores: np.ndarray, labels: np.ndarray, ks: Sequence[int] = (1, 5)) -> List[float]:
    """The fraction of videos whose label is among the top k scores, for each k (k beyond the classes
    counts every video)."""
    import numpy as np

    if len(labels) == 0:
        return [0.0 for _ in ks]
    order = np.argsort(-scores, axis=1, kind="stable")
    hits = order == labels[:, None]
    return [float(hits[:, :k].any(axis=1).mean()) for k in ks]


def _stream_row(s: Stream, table: np.ndarray, labels: np.ndarray, weight: float) -> Dict[str, object]:
    """A stream's line: its accuracy on the fused videos (``left_out``: its videos --common dropped)."""
    top1, top5 = accuracy(table, labels)
    return {"name": s.name, "file": str(s.path), "chosen": s.chosen, "modality": s.meta.get("modality", "rgb"),
            "checkpoint": s.meta.get("checkpoint"), "step": s.meta.get("step"), "average": s.meta.get("average"),
            "top1": top1, "top5": top5, "videos": int(len(labels)), "weight": weight,
            "left_out": int(len(s.keys) - len(labels))}


def fuse_runs(targets: Sequence[str], checkpoint: Optional[str] = None, weights: Optional[str] = None,
              average: str = "probs", common: bool = False) -> Dict[str, object]:
    """Everything ``summit-jobs fuse`` reports: each stream's accuracy on the fused videos, and the fusion's."""
    if len(targets) < 2:
        raise UserError(f"fuse needs at least 2 inputs, got {len(targets)} ({' '.join(targets) or 'none'}): give "
                        "the run directory (or scores file) of each stream, e.g. summit-jobs fuse runs/rgb runs/flow")
    w = parse_weights(weights, len(targets))
    streams = [read_stream(p, chosen=how) for p, how in (scores_file(t, checkpoint) for t in targets)]
    keys, labels, tables = match(streams, common)
    top1, top5 = accuracy(fuse(tables, w, average), labels)
    return {"streams": [_stream_row(s, t, labels, x) for s, t, x in zip(streams, tables, w)],
            "fused": {"top1": top1, "top5": top5, "videos": len(keys), "average": average, "weights": w},
            "common": common}
