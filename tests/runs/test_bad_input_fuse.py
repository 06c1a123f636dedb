"""Bad input to `summit-jobs fuse`: too few inputs, runs without scores, streams that cannot be fused
(other classes, labels or videos), corrupt or foreign files, and bad weights. Each case must be refused with
a non-zero exit, one `summit-jobs: error:` line (click's usage error for a malformed option), no traceback and
the offending value named. The scores files are written by the trainer's own writer (trainer.scores) or
broken by hand."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Dict, List, Tuple

import numpy as np
import pytest

from badinput import assert_refused
from helpers import run_cli
from trainer.scores import write_scores

KEYS = [f"v{i:03d}" for i in range(6)]


def _run(root: Path, name: str, classes: int = 4, keys: List[str] = KEYS, labels=None, scores=None,
         stem: str = "epoch-0000") -> Path:
    """A run directory whose final test of ``stem`` wrote a scores file."""
    labels = [i % classes for i in range(len(keys))] if labels is None else labels
    scores = np.arange(len(keys) * classes, dtype=np.float32).reshape(len(keys), classes) if scores is None \
        else scores
    meta = {"checkpoint": f"{stem}.pt", "step": 3, "epoch": 0, "modality": "rgb", "num_classes": classes}
    write_scores(root / name, f"scores/{stem}.npz", keys, labels, scores, meta)
    return root / name


def _file(root: Path, name: str, data: bytes) -> Path:
    p = root / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    return p


def _npz(root: Path, name: str, **arrays) -> Path:
    p = root / name
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "wb") as fh:
        np.savez(fh, **arrays)
    return p


def _good_arrays(**over) -> Dict[str, np.ndarray]:
    a = {"keys": np.array(KEYS), "labels": np.arange(6, dtype=np.int64) % 4,
         "scores": np.zeros((6, 4), np.float32), "meta": np.array('{"step": 1}')}
    a.update(over)
    return a


def _cut(run: Path) -> Path:
    p = run / "scores" / "epoch-0000.npz"
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
    return p


def _mk(p: Path) -> Path:
    p.mkdir(parents=True)
    return p


#: name -> (builder of (inputs, extra options) in a folder, needles; "{0}", "{1}" are the inputs given).
Build = Callable[[Path], Tuple[List[str], List[str]]]
A = _run
CASES: Dict[str, Tuple[Build, List[str]]] = {
    "one input": (lambda r: ([str(A(r, "a"))], []), ["at least 2 inputs, got 1", "{0}"]),
    "no input": (lambda r: ([], []), ["at least 2 inputs, got 0"]),
    "missing path": (lambda r: ([str(r / "nowhere"), str(A(r, "b"))], []),
                     ["{0}: no such run directory or scores file"]),
    "run without scores": (lambda r: ([str(_mk(r / "empty")), str(A(r, "b"))], []),
                           ["no test scores in {0}", "--test-only CKPT"]),
    "only a killed write's temporary": (
        lambda r: ([str(_file(r, "t/scores/.epoch-0000.npz.tmp9", b"x").parent.parent), str(A(r, "b"))], []),
        ["no test scores in {0}"]),
    "different class counts": (lambda r: ([str(A(r, "a")), str(A(r, "b", classes=5))], []),
                               ["different numbers of classes", "{0}/scores/epoch-0000.npz has 4",
                                "{1}/scores/epoch-0000.npz has 5"]),
    "different labels": (lambda r: ([str(A(r, "a")), str(A(r, "b", labels=[0, 1, 3, 3, 0, 1]))], []),
                         ["video v002 has label 2 in {0}", "and 3 in {1}", "1 of 6 videos disagree"]),
    "different videos": (lambda r: ([str(A(r, "a")), str(A(r, "b", keys=KEYS[:5]))], []),
                         ["different videos", "5 in all of them", "1 only in {0}", "--common"]),
    "no video in common": (lambda r: ([str(A(r, "a")), str(A(r, "b", keys=[k + "x" for k in KEYS])), ],
                                      ["--common"]), ["no video key in common", "{0}", "{1}"]),
    "garbage file": (lambda r: ([str(A(r, "a")), str(_file(r, "g.npz", b"\x00garbage" * 10))], []),
                     ["{1}: not a test scores file"]),
    "empty file": (lambda r: ([str(_file(r, "e.npz", b"")), str(A(r, "b"))], []),
                   ["{0}: not a test scores file"]),
    "cut-short file": (lambda r: ([str(A(r, "a")), str(_cut(A(r, "c")))], []), ["{1}: not a test scores file"]),
    "corrupt file in a run": (lambda r: ([str(A(r, "a")), str(_cut(A(r, "c")).parent.parent)], []),
                              ["{1}/scores/epoch-0000.npz: not a test scores file"]),
    "archive without the arrays": (lambda r: ([str(A(r, "a")), str(_npz(r, "s.npz", scores=np.zeros((6, 4))))], []),
                                   ["{1}: not a test scores file", "no keys, labels, meta array"]),
    "a single .npy array": (lambda r: ([str(A(r, "a")), str(_npy(r))], []), ["{1}: not a test scores file",
                                                                              ".npy"]),
    "pickled meta": (lambda r: ([str(A(r, "a")), str(_npz(r, "p.npz", **_good_arrays(
        meta=np.array([{"step": 1}], dtype=object))))], []), ["{1}: not a test scores file", "unreadable"]),
    "meta not JSON": (lambda r: ([str(A(r, "a")), str(_npz(r, "m.npz", **_good_arrays(meta=np.array("{oops"))))],
                                []), ["{1}: not a test scores file", "meta is not a JSON object"]),
    "scores that are not numbers": (lambda r: ([str(A(r, "a")), str(A(r, "b", scores=np.full((6, 4), np.nan)))],
                                               []), ["{1}/scores/epoch-0000.npz: not a test scores file",
                                                     "not finite"]),
    "label outside the classes": (lambda r: ([str(A(r, "a")), str(A(r, "b", labels=[0, 1, 2, 3, 0, 4]))], []),
                                  ["labels outside the 4 classes"]),
    "rows and keys disagree": (lambda r: ([str(A(r, "a")), str(_npz(r, "k.npz", **_good_arrays(
        scores=np.zeros((5, 4), np.float32))))], []), ["{1}: not a test scores file", "6 keys, 6 labels",
                                                       "[5, 4]"]),
    "checkpoint not tested": (lambda r: ([str(A(r, "a")), str(A(r, "b"))], ["--checkpoint", "epoch-0009"]),
                              ["--checkpoint epoch-0009", "{0}/scores has no scores of it", "epoch-0000"]),
    "weight not a number": (lambda r: ([str(A(r, "a")), str(A(r, "b"))], ["--weights", "1,abc"]),
                            ["--weights 1,abc", "'abc' is not a positive finite number"]),
    "zero weight": (lambda r: ([str(A(r, "a")), str(A(r, "b"))], ["--weights", "1,0"]),
                    ["--weights 1,0", "'0' is not a positive"]),
    "negative weight": (lambda r: ([str(A(r, "a")), str(A(r, "b"))], ["--weights", "-1,1"]),
                        ["--weights -1,1", "'-1' is not a positive"]),
    "nan weight": (lambda r: ([str(A(r, "a")), str(A(r, "b"))], ["--weights", "nan,1"]),
                   ["--weights nan,1", "'nan'"]),
    "infinite weight": (lambda r: ([str(A(r, "a")), str(A(r, "b"))], ["--weights", "1,inf"]),
                        ["--weights 1,inf", "'inf'"]),
    "empty weight": (lambda r: ([str(A(r, "a")), str(A(r, "b"))], ["--weights", "1,"]),
                     ["--weights 1,", "'' is not a positive"]),
    "too few weights": (lambda r: ([str(A(r, "a")), str(A(r, "b"))], ["--weights", "1.5"]),
                        ["--weights 1.5", "1 weights for 2 inputs"]),
    "too many weights": (lambda r: ([str(A(r, "a")), str(A(r, "b"))], ["--weights", "1,1,1"]),
                         ["--weights 1,1,1", "3 weights for 2 inputs"]),
    "unknown average": (lambda r: ([str(A(r, "a")), str(A(r, "b"))], ["--average", "mean"]), ["'mean'"]),
}


def _npy(root: Path) -> Path:
    p = root / "single.npz"
    with open(p, "wb") as fh:
        np.save(fh, np.zeros(3))
    return p


@pytest.mark.parametrize("name", list(CASES))
def test_fuse_refuses(name, tmp_path, cli_env):
    build, needles = CASES[name]
    inputs, extra = build(tmp_path)
    proc = run_cli(["fuse", *inputs, *extra], cli_env, timeout=120)
    assert_refused(proc, [n.format(*inputs) for n in needles])
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    if not proc.stderr.startswith("Usage:"):  # click's own refusal of a malformed option keeps its usage lines
        assert proc.stderr.startswith("summit-jobs: error: ") and len(proc.stderr.strip().splitlines()) == 1, \
            proc.stderr
    assert "top1" not in proc.stdout


def test_the_same_good_files_fuse(tmp_path, cli_env):
    """The files the table breaks, unbroken, are accepted: the refusals above are about what was broken."""
    proc = run_cli(["fuse", str(_run(tmp_path, "a")), str(_run(tmp_path, "b")), "--weights", "1,1.5"], cli_env,
                   timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "fused (probs)" in proc.stdout
