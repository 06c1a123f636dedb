"""A checkpoint continues only the network it was written for.

The temporal shift has no weights: a checkpoint of a ResNet-101 whose shifts
sat in every block loads without complaint into one that shifts every other
block, and would train on as a different model. Parameter groups that differ
(--fc-lr5) fail inside torch. Both are refused with one line naming the option.
"""
import subprocess
import sys
from argparse import Namespace

from trainer_utils import REPO, make_dataset, run_ranks, tiny_args

from trainer.config import parse
from trainer.loop.trainstate import resume_mismatch


def _args(*extra):
    return parse(["--run-dir", "r", *extra])


def test_old_deep_checkpoints_shifted_every_block():
    old = {"arch": "resnet101", "width": 1.0, "shift": True, "shift_placement": "blockres", "fold_div": 8}
    why = resume_mismatch(old, _args("--arch", "resnet101"))
    assert "--shift-blocks all" in why and "official" in why
    assert resume_mismatch(old, _args("--arch", "resnet101", "--shift-blocks", "all")) is None
    r50 = dict(old, arch="resnet50")                       # the official rule shifts every block of R50
    assert resume_mismatch(r50, _args()) is None
    assert resume_mismatch(None, _args()) is None


def test_each_network_option_is_compared():
    saved = vars(_args("--arch", "resnet18", "--width", "0.5"))
    assert resume_mismatch(saved, Namespace(**saved)) is None
    for flag, value in (("--arch", "resnet34"), ("--width", "0.25"), ("--fold-div", "4"),
                        ("--shift-placement", "block"), ("--fc-lr5", None), ("--no-shift", None)):
        now = _args("--arch", "resnet18", "--width", "0.5", *([flag, value] if value else [flag]))
        assert flag.replace("--no-", "--") in resume_mismatch(saved, now), flag


def test_resuming_with_other_parameter_groups_is_refused_in_one_line(tmp_path):
    data = make_dataset(tmp_path / "data", train=8, val=2)
    run = tmp_path / "run"
    args = tiny_args(run, data, epochs=2, max_steps=2, eval_every=0) + ["--no-test"]
    run_ranks(1, args, tmp_path / "logs", timeout=120)
    out = subprocess.run([sys.executable, "-m", "trainer", *args, "--fc-lr5"], cwd=REPO, capture_output=True,
                         text=True, timeout=120, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)})
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert "was written with --fc-lr5 False and this run has True" in out.stderr, out.stderr[-2000:]
