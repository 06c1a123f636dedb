"""Bad values of the official TSM recipe's options (``--shift-blocks``, ``--fc-lr5``), refused in one line.

They are trainer options: given to ``python -m trainer`` directly, or after ``--``
on ``summit-jobs submit``, which checks them with the trainer's own parser before
anything is written or submitted.
"""
from __future__ import annotations

import pytest

from badinput import assert_refused, run_module, trainer_env
from helpers import REPO, run_cli

#: (arguments, what the refusal must name)
BAD_RECIPE = [
    (["--shift-blocks", "sideways"], "'sideways'"),
    (["--shift-blocks", "ALL"], "'ALL'"),
    (["--shift-blocks", "every-other"], "'every-other'"),
    (["--shift-blocks="], "invalid choice: ''"),
    (["--fc-lr5=yes"], "'yes'"),
    (["--fc-lr5", "--shift-blocks", "official,all"], "'official,all'"),
]
IDS = [" ".join(a) for a, _ in BAD_RECIPE]


@pytest.mark.parametrize("extra,needle", BAD_RECIPE, ids=IDS)
def test_the_trainer_refuses_a_bad_recipe_option(tmp_path, extra, needle):
    run = tmp_path / "run"
    res = run_module("trainer", ["--run-dir", str(run), "--data", str(tmp_path / "data"), *extra], trainer_env(),
                     cwd=str(REPO), timeout=60)
    assert_refused(res, [needle], prefix="python -m trainer: error: ")
    assert res.returncode == 2 and not run.exists()


@pytest.mark.parametrize("extra,needle", BAD_RECIPE, ids=IDS)
def test_submit_refuses_a_bad_recipe_option_after_the_separator(cli_env, tmp_path, extra, needle):
    res = run_cli(["--machine", "summit", "submit", "--nodes", "2", "--project", "ABC123", "--dry-run", "--",
                   *extra], cli_env, cwd=tmp_path)
    assert_refused(res, [needle], prefix="summit-jobs: error: the trainer would refuse its arguments")
    assert res.returncode == 2 and "#BSUB" not in res.stdout


def test_the_shift_blocks_choices_are_the_models():
    from trainer.config import SHIFT_BLOCKS
    from trainer.models.model import SHIFT_BLOCKS as BUILT
    assert SHIFT_BLOCKS == BUILT
