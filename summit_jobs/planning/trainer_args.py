"""The trainer's command line as the login node sees it: checked at submit time, not on a compute node.

Why here and with the trainer's own parser: a typo after ``--`` used to pass
``submit`` and fail every rank minutes later, after the queue wait. The parser
(``trainer.config``) imports neither torch nor this package, so the login side
parses the exact argument list a rank will get and reports the trainer's own
message. Only parsing happens: nothing reads the data or the run directory.
"""
from __future__ import annotations

import argparse
import contextlib
import io
from typing import Dict, Optional, Sequence

from summit_jobs.errors import UserError
from trainer import submit_options  # torch-free by contract (tests/project/test_layering.py checks it)

#: Trainer options the planner derives and a user may not set after ``--``, with the way to set them.
PLANNER_OWNED: Dict[str, str] = {
    "run_dir": "--run-dir of submit",
    "accum_steps": "simulate --virtual-nodes (accumulation must match the plan's virtual node count)",
    "batch_per_gpu": "--clips-per-gpu of submit (the global batch and the LR follow from it)",
    "epochs": "--epochs of submit (a short run's warm-up is scaled from it)",
    "preset": "--preset of submit (which writes each of its values into the script)",
}
#: Trainer options that a submit option of the same name also sets: given both ways with different values is a
#: conflict. Those declared in trainer.submit_options are all such options.
SUBMIT_OPTION: Dict[str, str] = {
    name: "--" + name.replace("_", "-")
    for name in ("epochs", "lr", "warmup_epochs", "engine", "arch", "num_classes",
                 *(option.name for option in submit_options.OPTIONS))
}


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """The trainer's namespace for ``argv`` (what follows ``python -m trainer``), or a UserError."""
    from trainer import config  # torch-free by contract (tests/cli/test_cli_jobs.py checks sys.modules)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return config.parse(list(argv))
    except SystemExit as exc:
        said = exc.code if isinstance(exc.code, str) else err.getvalue().strip().splitlines()[-1:] or [""]
        message = said if isinstance(said, str) else said[0]
        raise UserError(f"the trainer would refuse its arguments: {message.strip()}. Fix the arguments after "
                        "`--` (see `python -m trainer --help`).") from None


def check(planner_argv: Sequence[str], user_argv: Sequence[str], given: Dict[str, object],
          staging: bool, preset: Optional[str] = None, from_preset: Sequence[str] = ()) -> argparse.Namespace:
    """Parse planner + user arguments; refuse what the user may not override or contradicts submit.

    ``given`` maps trainer option names (``epochs``) to the value the user gave
    the submit option, for the options that were given; ``from_preset`` names
    those whose value came from ``--preset`` instead (the refusal says so).
    """
    base = parse(planner_argv)
    final = parse([*planner_argv, *user_argv]) if user_argv else base
    for name in sorted(vars(final)):
        before, after = getattr(base, name, None), getattr(final, name)
        if before == after:
            continue
        flag = "--" + name.replace("_", "-")
        if name in given and name in from_preset:
            raise UserError(f"--preset {preset} sets {SUBMIT_OPTION[name]} {given[name]!r}, and {flag} {after!r} "
                            f"after `--` would change it behind the plan; give {SUBMIT_OPTION[name]} {after} to "
                            "submit instead (an option you give wins over the preset).")
        if name in given:
            raise UserError(f"{SUBMIT_OPTION[name]} {given[name]!r} and {flag} {after!r} after `--` disagree; "
                            f"give the value once, with {SUBMIT_OPTION[name]}.")
        if name in PLANNER_OWNED or (name == "data" and staging):
            how = PLANNER_OWNED.get(name, "--data of submit (the staged NVMe copy is the trainer's data)")
            raise UserError(f"{flag} {after!r} after `--` would override what the plan derived ({before!r}); "
                            f"set it with {how} instead.")
    return final

