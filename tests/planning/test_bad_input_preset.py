"""Bad input around --preset, --val-clips and --aavg-eval-every, to the trainer and to summit-jobs submit.

Each case is a command line a user could type; each must end with a non-zero exit, no traceback, and a
message naming the value (run through the real entry points, in a process).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from badinput import assert_refused, run_module, trainer_env
from helpers import run_cli

REPO = Path(__file__).resolve().parents[2]

#: The trainer's own parser: (extra arguments, words the refusal must hold).
TRAINER = [
    ("unknown-preset", ["--preset", "aavg"], ["'aavg'", "aavg-paper"]),
    ("preset-empty", ["--preset", ""], ["''", "aavg-paper"]),
    ("preset-and-compression", ["--preset", "aavg-paper", "--compression", "fp16"],
     ["--compression applies to the gradient allreduce"]),
    ("preset-and-accumulation", ["--preset", "aavg-paper", "--accum-steps", "2"], ["exact accumulation"]),
    ("preset-batch-above-its-max", ["--preset", "aavg-paper", "--batch-per-gpu", "600"],
     ["--aavg-max-batch 576", "--batch-per-gpu 600"]),
    ("preset-test-crop-above-a-small-frame", ["--preset", "aavg-paper", "--input-size", "112"],
     ["--test-size 224", "--preset aavg-paper sets --test-size 224"]),
    ("val-clips-zero", ["--val-clips", "0"], ["--val-clips 0: must be at least 1"]),
    ("val-clips-negative", ["--val-clips", "-5"], ["--val-clips -5: must be at least 1"]),
    ("val-clips-word", ["--val-clips", "five"], ["'five'"]),
    ("aavg-eval-every-minus-two", ["--aavg-eval-every", "-2"], ["--aavg-eval-every -2: must be at least -1"]),
    ("aavg-eval-every-fraction", ["--aavg-eval-every", "0.5"], ["'0.5'"]),
]

SUBMIT = ["--machine", "local", "submit", "--nodes", "2", "--dry-run"]
#: summit-jobs submit (and simulate): (arguments, words the refusal must hold).
CLI = [
    ("submit-unknown-preset", [*SUBMIT, "--preset", "paper"], ["'paper'", "aavg-paper"]),
    ("submit-preset-and-compression", [*SUBMIT, "--preset", "aavg-paper", "--compression", "fp16"],
     ["--preset aavg-paper", "--compression applies to the gradient allreduce"]),
    ("submit-preset-clips-above-its-max", [*SUBMIT, "--preset", "aavg-paper", "--clips-per-gpu", "600"],
     ["--preset aavg-paper", "--aavg-max-batch 576", "--batch-per-gpu 600"]),
    ("submit-preset-with-own-command", [*SUBMIT, "--preset", "aavg-paper", "--command", "python train.py"],
     ["--preset aavg-paper", "--command"]),
    ("submit-preset-after-dashes", [*SUBMIT, "--", "--preset", "aavg-paper"], ["--preset 'aavg-paper'"]),
    ("submit-preset-value-after-dashes", [*SUBMIT, "--preset", "aavg-paper", "--", "--aavg-eval-every", "-2"],
     ["--aavg-eval-every -2: must be at least -1"]),
    ("submit-preset-method-changed-after-dashes", [*SUBMIT, "--preset", "aavg-paper", "--", "--optimizer", "sgd"],
     ["--preset aavg-paper sets --optimizer 'adam'", "give --optimizer sgd to submit"]),
    ("submit-val-clips-zero-after-dashes", [*SUBMIT, "--", "--val-clips", "0"], ["--val-clips 0: must be"]),
    ("simulate-preset-accumulates", ["--machine", "local", "simulate", "--virtual-nodes", "4", "--nodes", "2",
                                     "--preset", "aavg-paper", "--dry-run"],
     ["--preset aavg-paper", "exact accumulation"]),
]


@pytest.mark.parametrize("extra,needles", [c[1:] for c in TRAINER], ids=[c[0] for c in TRAINER])
def test_the_trainer_refuses(tmp_path, extra, needles):
    res = run_module("trainer", ["--run-dir", str(tmp_path / "run"), "--data", str(tmp_path / "data"), *extra],
                     trainer_env(), cwd=str(REPO), timeout=60)
    assert_refused(res, needles, prefix="python -m trainer: error:")
    assert not (tmp_path / "run").exists()  # refused before anything is written


@pytest.mark.parametrize("args,needles", [c[1:] for c in CLI], ids=[c[0] for c in CLI])
def test_summit_jobs_refuses(cli_env, tmp_path, args, needles):
    res = run_cli(args, cli_env, cwd=str(tmp_path))
    assert_refused(res, needles)
    assert "#BSUB" not in res.stdout
