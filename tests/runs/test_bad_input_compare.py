"""Bad input to `summit-jobs compare`: missing runs, runs without checkpoints, corrupt or foreign files,
different architectures or steps, and bad tolerances. Each case must be refused with a non-zero exit, no
traceback and the offending value named. The checkpoints are real torch archives written here. Refusals that
need no tensor (missing runs, no checkpoint, a file that is no archive, the tolerance) come before torch is
imported: those cases run in a process where torch cannot be imported."""
from __future__ import annotations

import fractions
import zipfile
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import pytest
import torch

from badinput import assert_refused, run_module_without_torch
from helpers import run_cli


def _ckpt(path: Path, obj: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(obj, path)
    return path


def _good(root: Path, name: str, step: int = 3, shape=(2, 3), key: str = "fc.weight") -> Path:
    """A run directory with one small checkpoint of the trainer's form."""
    _ckpt(root / name / "checkpoints" / f"ckpt-{step:09d}.pt", {"model": {key: torch.ones(shape)}, "step": step})
    return root / name


def _file(root: Path, name: str, data: bytes) -> Path:
    p = root / name / "checkpoints" / "ckpt-000000003.pt"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    return p


def _zip(root: Path) -> Path:
    p = root / "z" / "checkpoints" / "ckpt-000000003.pt"
    p.parent.mkdir(parents=True)
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("hello.txt", "not a checkpoint")
    return p


#: name -> (builder of (RUN_A, RUN_B, extra options) in a folder, needles; "{A}"/"{B}" are the paths given).
Build = Callable[[Path], Tuple[str, str, List[str]]]
CASES: Dict[str, Tuple[Build, List[str]]] = {
    "missing run": (lambda r: (str(r / "nowhere"), str(_good(r, "b")), []), ["run {A} does not exist"]),
    "missing second run": (lambda r: (str(_good(r, "a")), str(r / "gone"), []), ["run {B} does not exist"]),
    "run without checkpoint": (lambda r: (str(_mk(r / "empty")), str(_good(r, "b")), []),
                               ["run {A} has no checkpoint"]),
    "empty checkpoints folder": (lambda r: (str(_good(r, "a")), str(_mk(r / "e" / "checkpoints").parent), []),
                                 ["run {B} has no checkpoint"]),
    "only a temporary of a killed save": (
        lambda r: (str(_file(r, "t", b"x").rename(r / "t" / "checkpoints" / ".ckpt-000000003.pt.tmp9").parent
                       .parent), str(_good(r, "b")), []), ["run {A} has no checkpoint"]),
    "garbage checkpoint": (lambda r: (str(_good(r, "a")), str(_file(r, "g", b"\x00garbage" * 10)), []),
                           ["checkpoint {B} is not readable", "not a torch archive"]),
    "empty checkpoint": (lambda r: (str(_file(r, "e", b"")), str(_good(r, "b")), []),
                         ["checkpoint {A} is not readable"]),
    "cut-short checkpoint": (lambda r: (str(_good(r, "a")), str(_cut(_good(r, "c"))), []),
                             ["checkpoint {B} is not readable"]),
    "zip that is no checkpoint": (lambda r: (str(_zip(r)), str(_good(r, "b")), []),
                                  ["checkpoint {A} is not readable"]),
    "pickle naming a foreign class": (
        lambda r: (str(_ckpt(r / "p.pt", {"model": {}, "x": fractions.Fraction(1, 3)})), str(_good(r, "b")), []),
        ["checkpoint {A} is not readable", "more than tensors"]),
    "no model in it": (lambda r: (str(_ckpt(r / "n.pt", {"step": 3})), str(_good(r, "b")), []),
                       ["checkpoint {A} is not readable", "no model weights"]),
    "different tensors": (lambda r: (str(_good(r, "a")), str(_good(r, "b", key="head.weight")), []),
                          ["different architectures", "fc.weight"]),
    "different shapes": (lambda r: (str(_good(r, "a")), str(_good(r, "b", shape=(4, 3))), []),
                         ["different architectures", "fc.weight", "[2, 3]", "[4, 3]"]),
    "different steps": (lambda r: (str(_good(r, "a")), str(_good(r, "b", step=5)), []),
                        ["different steps", "step 3", "step 5"]),
    "negative tolerance": (lambda r: (str(_good(r, "a")), str(_good(r, "b")), ["--tolerance", "-1"]),
                           ["--tolerance -1.0"]),
    "nan tolerance": (lambda r: (str(_good(r, "a")), str(_good(r, "b")), ["--tolerance", "nan"]),
                      ["--tolerance nan"]),
    "infinite tolerance": (lambda r: (str(_good(r, "a")), str(_good(r, "b")), ["--tolerance", "inf"]),
                           ["--tolerance inf"]),
    "tolerance not a number": (lambda r: (str(_good(r, "a")), str(_good(r, "b")), ["--tolerance", "tiny"]),
                               ["'tiny'"]),
}


#: The cases refused before torch is imported (a zip archive needs torch.load to tell what it holds).
WITHOUT_TORCH = {"missing run", "missing second run", "run without checkpoint", "empty checkpoints folder",
                 "only a temporary of a killed save", "garbage checkpoint", "empty checkpoint",
                 "cut-short checkpoint", "negative tolerance", "nan tolerance", "infinite tolerance",
                 "tolerance not a number"}


def _mk(p: Path) -> Path:
    p.mkdir(parents=True)
    return p


def _cut(run: Path) -> Path:
    p = next((run / "checkpoints").glob("ckpt-*.pt"))
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
    return p


@pytest.mark.parametrize("name", list(CASES))
def test_compare_refuses(name, tmp_path, cli_env):
    build, needles = CASES[name]
    a, b, extra = build(tmp_path)
    if name in WITHOUT_TORCH:
        proc = run_module_without_torch("summit_jobs", ["compare", a, b, *extra], cli_env, timeout=120)
    else:
        proc = run_cli(["compare", a, b, *extra], cli_env, timeout=120)
    assert_refused(proc, [n.format(A=a, B=b) for n in needles])
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    if not proc.stderr.startswith("Usage:"):  # click's own refusal of a malformed option keeps its usage lines
        assert proc.stderr.startswith("summit-jobs: error: ") and len(proc.stderr.strip().splitlines()) == 1, \
            proc.stderr
