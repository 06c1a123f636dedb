"""Bad input to the run-reading features: ``python -m trainer --test-only``, ``--tensorboard`` without its
package, and ``summit-jobs report --smooth``. Every case is refused with a non-zero exit, one line naming
the value (``trainer: ...`` or ``summit-jobs: ...``) and no traceback; the trainer is the real one."""
from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import pytest
import torch

from badinput import assert_refused, run_module, trainer_env
from helpers import run_cli
from trainer_utils import REPO, make_dataset, tiny_args

from trainer.loop import tboard


@pytest.fixture(scope="module")
def trained(tiny_run, tmp_path_factory):
    """A real one-epoch run (the session's tiny_run, tests/conftest.py): its checkpoint is the good file the
    mismatch cases start from."""
    tmp = tmp_path_factory.mktemp("bad-runs")
    run = tiny_run / "run"
    six = make_dataset(tmp / "data6", train=6, val=6, classes=("right", "left", "down", "up", "forward", "backward"))
    return {"data": tiny_run / "data", "data6": six, "run": run, "ckpt": run / "checkpoints" / "epoch-0000.pt"}


def _write(path: Path, blob: bytes) -> Path:
    path.write_bytes(blob)
    return path


def _saved(path: Path, obj: object) -> Path:
    torch.save(obj, path)
    return path


def _stub_without_tensorboard(tmp: Path) -> str:
    """A folder that, first on PYTHONPATH, makes ``import tensorboard`` fail as on a machine without it."""
    (tmp / "stub" / "tensorboard").mkdir(parents=True)
    (tmp / "stub" / "tensorboard" / "__init__.py").write_text("raise ImportError('No module named tensorboard')\n")
    return f"{tmp / 'stub'}{os.pathsep}{REPO}"


#: name -> (builder (tmp folder, trained run) -> (trainer options, extra environment), needles, where
#: "{P}" in a needle is the --test-only path given).
Build = Callable[[Path, Dict], Tuple[List[str], Dict[str, str]]]


def _only(path_of: Callable[[Path, Dict], Path], *extra: str) -> Build:
    return lambda tmp, t: (tiny_args(tmp / "out", t["data"], test_only=path_of(tmp, t)) + list(extra), {})


TRAINER_CASES: Dict[str, Tuple[Build, List[str]]] = {
    "missing checkpoint": (_only(lambda tmp, t: tmp / "gone.pt"), ["--test-only {P}: no such file"]),
    "a folder": (_only(lambda tmp, t: tmp), ["--test-only {P}: not a file"]),
    "empty file": (_only(lambda tmp, t: _write(tmp / "empty.pt", b"")), ["{P}: an empty file"]),
    "text file": (_only(lambda tmp, t: _write(tmp / "notes.pt", b"epoch 3 looked good\n")),
                  ["{P}: not a weights file"]),
    "archive without weights": (_only(lambda tmp, t: _saved(tmp / "meta.pt", {"step": 3})),
                                ["{P}: it holds no state dict", "'step'"]),
    "archive of a list": (_only(lambda tmp, t: _saved(tmp / "list.pt", [1, 2, 3])), ["{P}: it holds a list"]),
    "pickle that names code": (_only(lambda tmp, t: _saved(tmp / "code.pt", {"model": argparse.Namespace(a=1)})),
                               ["{P}: refusing it"]),
    "weights of another depth": (_only(lambda tmp, t: t["ckpt"], "--arch", "resnet34"),
                                 ["{P}: it is a resnet18", "pass --arch resnet18"]),
    "weights of another class count": (_only(lambda tmp, t: t["ckpt"], "--num-classes", "7"),
                                       ["{P}: --num-classes 7", "has 4 classes", "pass --num-classes 4"]),
    "weights of another width": (_only(lambda tmp, t: t["ckpt"], "--width", "0.25"),
                                 ["{P}: it is a resnet18 of width 0.125", "pass --width 0.125"]),
    "data of another class count": (lambda tmp, t: (tiny_args(tmp / "out", t["data6"], test_only=t["ckpt"]), {}),
                                    ["{P}: it is a resnet18", "4 classes", "the data has 6 classes"]),
    "test-only without data": (lambda tmp, t: (tiny_args(tmp / "out", None, test_only=t["ckpt"]), {}),
                               ["--test-only needs --data"]),
    "unset variable in the path": (_only(lambda tmp, t: Path("$SUMMIT_JOBS_NO_SUCH_VAR/ckpt.pt")),
                                   ["--test-only $SUMMIT_JOBS_NO_SUCH_VAR/ckpt.pt", "is not set"]),
    "tensorboard not installed": (lambda tmp, t: (tiny_args(tmp / "out", t["data"]) + ["--tensorboard"],
                                                  {"PYTHONPATH": _stub_without_tensorboard(tmp)}),
                                  [tboard.MISSING]),
    "tensorboard not installed, test only": (
        lambda tmp, t: (tiny_args(tmp / "out", t["data"], test_only=t["ckpt"]) + ["--tensorboard"],
                        {"PYTHONPATH": _stub_without_tensorboard(tmp)}), [tboard.MISSING]),
}


@pytest.mark.parametrize("case", sorted(TRAINER_CASES))
def test_trainer_refuses(case, trained, tmp_path):
    build, needles = TRAINER_CASES[case]
    args, extra = build(tmp_path, trained)
    given = args[args.index("--test-only") + 1] if "--test-only" in args else ""
    proc = run_module("trainer", args, trainer_env(**extra), cwd=str(REPO), timeout=180)
    assert_refused(proc, [n.replace("{P}", given) for n in needles], prefix="trainer: ")
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("trainer: ")]
    assert len(lines) == 1, proc.stderr
    assert not (tmp_path / "out" / "checkpoints").exists()


REPORT_CASES: Dict[str, Tuple[List[str], List[str]]] = {
    "negative smoothing": (["--smooth", "-1"], ["--smooth -1"]),
    "smoothing that is not a number": (["--smooth", "ten"], ["'ten'"]),
    "smoothing that is a fraction": (["--smooth", "2.5"], ["'2.5'"]),
}


@pytest.mark.parametrize("case", sorted(REPORT_CASES))
def test_report_refuses(case, trained, cli_env, tmp_path):  # noqa: F811
    options, needles = REPORT_CASES[case]
    proc = run_cli(["report", str(trained["run"]), "--out", str(tmp_path / "rep"), *options], cli_env, timeout=120)
    assert_refused(proc, needles)
    assert proc.returncode == 2 and not (tmp_path / "rep").exists()
