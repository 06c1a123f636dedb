"""A trainer option that submit also offers is declared once (trainer/submit_options.py), and that is all.

Why as tests: the options used to be written in six places (the trainer's parser, the submit option, the
planner's fields, the script's arguments, the check of arguments after ``--``, the resume check), and a new one
that missed a place failed quietly (a submit option the plan dropped, a value after ``--`` nobody compared).
Here two options that no file of the project knows are added to the declarations alone, in a fresh process, and
followed to the submit --help, the plan, the script's trainer arguments, the trainer's parser and the run record.
Every declared option is also checked against what each side built from it.
"""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from trainer import submit_options

REPO = Path(__file__).resolve().parents[2]

#: Added to the declarations before anything else is imported; ``mode`` picks what the process then does.
DRIVER = r'''
import json, runpy, sys
from trainer import submit_options as so

so.OPTIONS = so.OPTIONS + (
    so.TrainerOption("label_smoothing", float, 0.0, low=0.0, high=0.5, group="optimisation",
                     help="soften the one-hot targets by this much", submit_help="Label smoothing of the loss."),
    so.TrainerOption("average_buffers", bool, False, group="aavg", help="aavg: average the BN buffers too",
                     submit_help="AAVG: average the BatchNorm buffers too.", requires=("optimizer_sync", "aavg"),
                     requires_words="is part of AAVG's averaging", fixes_schedule=False),
)
mode, args = sys.argv[1], sys.argv[2:]
if mode == "cli":
    sys.argv = ["summit-jobs", *args]
    runpy.run_module("summit_jobs", run_name="__main__", alter_sys=True)
elif mode == "trainer-help":
    from trainer import config
    config.parser().print_help()
elif mode == "parse":
    from trainer import config
    a = config.parse(args)
    print(json.dumps({"label_smoothing": a.label_smoothing, "average_buffers": a.average_buffers}))
elif mode == "record":
    import os
    from summit_jobs.errors import UserError
    from summit_jobs.hosts.host import LocalHost
    from summit_jobs.planning.plan import JobOptions, make_plan
    from summit_jobs.profiles import config
    from summit_jobs.runs import records, submission
    profile = config.profile(config.load(None), "local")
    plan = make_plan(profile, JobOptions(nodes=1, run_dir=args[0], label_smoothing=0.1))
    records.create(LocalHost(), plan, profile, "#!/bin/bash\n", force=False, ssh=None)
    os.makedirs(os.path.join(args[0], "checkpoints"))
    other = make_plan(profile, JobOptions(nodes=1, run_dir=args[0], label_smoothing=0.2))
    try:
        submission.check_resume_schedule(LocalHost(), other)
    except UserError as exc:
        print(exc)
'''

NEW = ("label_smoothing", "average_buffers")


@pytest.fixture
def driver(tmp_path, cli_env):
    """Run DRIVER in a fresh process: (mode, *args) -> the completed process."""
    path = tmp_path / "driver.py"
    path.write_text(DRIVER)
    env = dict(cli_env, PYTHONPATH=str(REPO))

    def run(mode: str, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(path), mode, *args], env=env, cwd=str(tmp_path),
                              capture_output=True, text=True, timeout=120)
    return run


def trainer_words(script: str) -> List[str]:
    line = next(line for line in script.splitlines() if " -m trainer " in line)
    return line.split(" -m trainer ", 1)[1].split()


def dry_run(driver, tmp_path, *extra: str) -> Dict[str, object]:
    res = driver("cli", "--machine", "local", "submit", "--nodes", "1", "--dry-run", "--json",
                 "--run-dir", str(tmp_path / "run"), *extra)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_no_file_of_the_project_knows_the_new_options():
    """What the tests below see comes from the declarations alone."""
    found = [str(p.relative_to(REPO)) for pkg in ("summit_jobs", "trainer", "templates")
             for p in (REPO / pkg).rglob("*") if p.is_file() and p.suffix in (".py", ".j2")
             and any(name in p.read_text() for name in NEW)]
    assert not found


def test_a_declared_option_is_a_submit_option_and_a_trainer_option(driver):
    res = driver("cli", "submit", "--help")
    assert res.returncode == 0, res.stderr
    assert "--label-smoothing" in res.stdout and "Label smoothing of the loss." in res.stdout
    assert "--average-buffers" in res.stdout
    helps = driver("trainer-help")
    assert "--label-smoothing LABEL_SMOOTHING" in helps.stdout and "--average-buffers" in helps.stdout


def test_a_declared_option_reaches_the_plan_and_the_script(driver, tmp_path):
    out = dry_run(driver, tmp_path, "--label-smoothing", "0.1")
    words = trainer_words(out["script"])
    assert words[words.index("--label-smoothing") + 1] == "0.1"
    assert out["plan"]["label_smoothing"] == 0.1
    # the trainer takes the script's arguments as they are written
    parsed = driver("parse", *words)
    assert parsed.returncode == 0, parsed.stderr
    assert json.loads(parsed.stdout)["label_smoothing"] == 0.1


def test_a_declared_option_at_its_default_is_not_written(driver, tmp_path):
    out = dry_run(driver, tmp_path)
    assert "--label-smoothing" not in trainer_words(out["script"]) and out["plan"]["label_smoothing"] == 0.0


def test_an_option_that_requires_another_is_written_with_it(driver, tmp_path):
    out = dry_run(driver, tmp_path, "--optimizer-sync", "aavg", "--average-buffers")
    words = trainer_words(out["script"])
    at = words.index("--optimizer-sync")
    assert words[at:at + 5] == ["--optimizer-sync", "aavg", "--avg-interval", "-1", "--average-buffers"]
    assert out["plan"]["average_buffers"] is True
    assert "average_buffers" not in dry_run(driver, tmp_path)["plan"]     # shown only where it applies
    res = driver("cli", "--machine", "local", "submit", "--nodes", "1", "--dry-run", "--average-buffers")
    assert res.returncode == 2
    assert ("--average-buffers is part of AAVG's averaging: add --optimizer-sync aavg, or drop --average-buffers."
            in res.stderr)


@pytest.mark.parametrize("args,needle", [
    (["--label-smoothing", "0.9"], "0.9"),
    (["--", "--label-smoothing", "0.9"], "--label-smoothing 0.9: must be at most 0.5"),
    (["--label-smoothing", "0.1", "--", "--label-smoothing", "0.2"],
     "--label-smoothing 0.1 and --label-smoothing 0.2 after `--` disagree"),
], ids=["submit-range", "trainer-range", "both-ways"])
def test_a_declared_option_is_checked_on_both_sides(driver, tmp_path, args, needle):
    res = driver("cli", "--machine", "local", "submit", "--nodes", "1", "--dry-run",
                 "--run-dir", str(tmp_path / "run"), *args)
    assert res.returncode == 2 and needle in res.stderr and "Traceback" not in res.stderr, res.stderr


def test_a_declared_option_reaches_the_run_record(driver, tmp_path):
    run = tmp_path / "run"
    res = driver("record", str(run))
    assert res.returncode == 0, res.stderr
    record = json.loads((run / "plan.json").read_text())
    keys = list(record)
    assert record["label_smoothing"] == 0.1 and record["average_buffers"] is False
    assert keys.index("trainer_argv") < keys.index("label_smoothing") < keys.index("multigrid")
    # a run's checkpoints are not resumed under another value of an option that fixes the schedule
    assert "label_smoothing 0.1 -> 0.2" in res.stdout


# ---- every declared option, as each side built it -------------------------------------------------------

@pytest.mark.parametrize("option", submit_options.OPTIONS, ids=lambda o: o.name)
def test_each_side_builds_the_option_from_its_declaration(option):
    from summit_jobs.cli import main
    from summit_jobs.planning import plan, trainer_args
    from summit_jobs.runs import submission
    from trainer import config

    for command in ("submit", "simulate"):
        param = {p.name: p for p in main.cli.cli.get_command(None, command).params}[option.name]
        assert (param.opts, param.help) == ([option.flag], option.submit_help)
        assert param.is_flag if option.kind is bool else param.default == option.default
    action = {a.dest: a for a in config.parser()._actions}[option.name]
    assert (action.default, tuple(action.choices or ()), action.help) == (option.default, option.choices,
                                                                         option.help)
    fields = {f.name: f.default for f in dataclasses.fields(plan.JobOptions)}
    assert fields[option.name] == option.default
    assert (option.name in {f.name for f in dataclasses.fields(plan.Plan)}) == option.in_plan
    assert (option.name in submission.SCHEDULE_FIELDS) == (option.in_plan and option.fixes_schedule)
    assert trainer_args.SUBMIT_OPTION[option.name] == option.flag
    assert option.name in plan.TRAINER_FIELDS and option.name in plan.EXPLICIT_FIELDS


def test_a_declaration_either_side_could_not_honour_is_refused():
    with pytest.raises(ValueError, match="not one of its choices"):
        submit_options.TrainerOption("x", str, "c", choices=("a", "b"), group="run", help="", submit_help="")
    with pytest.raises(ValueError, match="group"):
        submit_options.TrainerOption("x", int, 0, group="nowhere", help="", submit_help="")
