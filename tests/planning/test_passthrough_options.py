"""--sbatch-option and --bsub-option, and a profile's extra_directives, cannot contradict the plan.

The plan owns the job's shape (nodes, ranks per node, GPUs per rank, span[ptile]), its name, outputs,
dependencies and how it is rerun (the chain), and submit returns once the job is queued. A directive that sets
one of those by another name (srun's alias --tasks-per-node, an sbatch abbreviation, bsub's -Jname), or that
changes how the job is submitted (--array, --wait, -K, the interactive -I forms), is refused naming what the
tool uses instead; every other site option still reaches the script's header. The command line runs in this
process (click's CliRunner): a refusal is a clean exit with one error line, never a traceback.
"""
from __future__ import annotations

import os
from typing import Dict, List, Optional

import pytest
from click.testing import CliRunner, Result

from lsf_jobs import lsf_environment

SLURM = ["--machine", "slurm-gpu", "submit", "--nodes", "2", "--dry-run"]
LSF = ["--machine", "lsf-gpu", "submit", "--nodes", "2", "--dry-run"]
LOCAL = ["--machine", "local", "submit", "--nodes", "1", "--dry-run"]


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> Dict[str, Optional[str]]:
    root = tmp_path_factory.mktemp("passthrough")
    out: Dict[str, Optional[str]] = {k: None for k in os.environ if k.startswith("SUMMIT_JOBS_")}
    out.update(lsf_environment(root))
    out["XDG_CACHE_HOME"] = str(root / "xdg-cache")
    for key in ("SUMMIT_JOBS_MACHINE", "SUMMIT_JOBS_PROJECT", "SUMMIT_JOBS_CONFIG", "SUMMIT_JOBS_MACHINES_PATH"):
        out[key] = None
    return out


def invoke(env: Dict[str, Optional[str]], args: List[str]) -> Result:
    from summit_jobs.cli import main
    return CliRunner().invoke(main.cli.cli, args, env=env, prog_name="summit-jobs")


def assert_refused(result: Result, needles: List[str]) -> str:
    """A clean non-zero exit with one error line holding every needle; the line."""
    assert isinstance(result.exception, SystemExit), (result.exception, result.output[-2000:])
    assert result.exit_code not in (0, None), result.output[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("summit-jobs: error: ")]
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert "#SBATCH" not in result.stdout and "#BSUB" not in result.stdout
    return lines[0]


# ---- sbatch --------------------------------------------------------------------------------------------------

SBATCH_REFUSED = [
    ("--tasks-per-node=8", ["--tasks-per-node is --ntasks-per-node", "writes itself", "one rank per GPU"]),
    ("--tasks-per-n=8", ["--tasks-per-node is --ntasks-per-node"]),
    ("--ntasks-per-gpu=1", ["summit-jobs writes --ntasks-per-gpu itself"]),
    ("--gpus-per-task=1", ["summit-jobs writes --gpus-per-task itself", "scheduler.slurm.gpus"]),
    ("--gpus-per-socket=2", ["--gpus-per-socket", "scheduler.slurm.gpus"]),
    ("--tres-per-task=gres/gpu:1", ["--tres-per-task"]),
    ("--ntasks-per-node=8", ["summit-jobs writes --ntasks-per-node itself"]),
    ("--array=1-3", ["--array makes several jobs", "one run directory", "--chain"]),
    ("--arr=1-3", ["--array makes several jobs"]),
    ("--wait", ["--wait makes sbatch wait", "summit-jobs status RUN --watch"]),
    ("--requeue", ["--requeue sets whether Slurm requeues", "--chain or --until-complete"]),
    ("--no-requeue", ["--no-requeue sets whether Slurm requeues", "--until-complete"]),
    ("--no-req", ["--no-requeue"]),
    ("--clusters=other", ["--clusters sends the job to another cluster"]),
    ("--wrap=true", ["--wrap replaces the job script", "--command"]),
    ("--test-only", ["--test-only", "--dry-run"]),
    ("--job-name=x", ["summit-jobs writes --job-name itself"]),
    ("--dep=afterok:1", ["summit-jobs writes --dependency itself", "--chain"]),
]


@pytest.mark.parametrize("option,needles", SBATCH_REFUSED, ids=[c[0] for c in SBATCH_REFUSED])
def test_an_sbatch_option_that_contradicts_the_plan_is_refused(env, option, needles):
    line = assert_refused(invoke(env, [*SLURM, "--sbatch-option", option]), [f"--sbatch-option {option!r}"])
    for needle in needles:
        assert needle in line, (needle, line)


def test_other_sbatch_options_reach_the_header(env):
    """Options of the site's own (and longer options an owned one is a prefix of) are not caught by the rule."""
    kept = ["--wait-all-nodes=1", "--reservation=resv1", "--gpu-bind=closest", "--exclusive", "--time-min=30",
            "--hold", "--mem-bind=local"]
    result = invoke(env, [*SLURM, *[w for option in kept for w in ("--sbatch-option", option)]])
    assert result.exit_code == 0, result.output
    header = set(result.stdout.splitlines())
    assert {f"#SBATCH {option}" for option in kept} <= header, result.stdout


# ---- bsub ----------------------------------------------------------------------------------------------------

BSUB_REFUSED = [
    ("-K", ["-K makes bsub wait", "summit-jobs status RUN --watch"]),
    *[(flag, [f"{flag} runs the job interactively", "summit-jobs logs RUN"])
      for flag in ("-I", "-Ip", "-Is", "-IS", "-ISp", "-ISs", "-IX")],
    ("-r", ["-r sets whether LSF reruns the job", "--chain or --until-complete"]),
    ("-rn", ["-rn sets whether LSF reruns the job"]),
    ("-Q 99", ["-Q sets which exits LSF requeues"]),
    ("-J other", ["summit-jobs writes -J itself", "--job-name"]),
    ("-Jother", ["-Jother is -J with its value attached", "--job-name"]),
    ("-o out.txt", ["summit-jobs writes -o itself"]),
    ("-ofile", ["-ofile is -o with its value attached"]),
    ("-e err.txt", ["summit-jobs writes -e itself"]),
    ("-eo err.txt", ["summit-jobs writes -eo itself"]),
    ("-qdebug", ["-qdebug is -q with its value attached", "--queue"]),
    ("-w done(1)", ["summit-jobs writes -w itself", "--chain"]),
    ("-R span[hosts=1]", ["span[]", "ptile"]),
    ("-R select[mem>1000] span[ptile=2]", ["span[]"]),
    ("-cwd /tmp", ["-cwd sets the job's working folder", "--run-dir"]),
    ("-pack jobs.txt", ["-pack submits the jobs a file describes"]),
    ("-json opts.json", ["-json reads the job's options from a file"]),
]


@pytest.mark.parametrize("option,needles", BSUB_REFUSED, ids=[c[0] for c in BSUB_REFUSED])
def test_a_bsub_option_that_contradicts_the_plan_is_refused(env, option, needles):
    line = assert_refused(invoke(env, [*LSF, "--bsub-option", option]), [f"--bsub-option {option!r}"])
    for needle in needles:
        assert needle in line, (needle, line)


def test_the_embedded_lsf_takes_the_same_rule(env):
    assert_refused(invoke(env, [*LOCAL, "--bsub-option", "-K"]), ["-K makes bsub wait"])
    assert_refused(invoke(env, [*LOCAL, "--request", "slots", "--launcher", "blaunch", "--bsub-option",
                                "-R span[hosts=1]"]), ["span[]"])


def test_other_bsub_options_reach_the_header(env):
    """bsub's own options that begin like an owned one (-Jd, -outdir, -We, -rnc, -env) and -R without span[]."""
    kept = ["-Jd nightly", "-outdir /tmp/out", "-We 30", "-rnc /bin/true", "-env all", "-x", "-U resv1",
            "-R select[mem>1000]", "-R order[myspan]"]
    result = invoke(env, [*LSF, *[w for option in kept for w in ("--bsub-option", option)]])
    assert result.exit_code == 0, result.output
    header = [line for line in result.stdout.splitlines() if line.startswith("#BSUB ")]
    for option in kept:
        flag, _, value = option.partition(" ")
        assert any((line + " ").startswith(f"#BSUB {flag} ") and value in line for line in header), (option, header)


# ---- the profile's own lines ---------------------------------------------------------------------------------

PROFILE_LINES = [
    ("lsf-gpu", "scheduler:\n      extra_directives: ['-K']", ["scheduler.extra_directives[0] = '-K'",
                                                               "-K makes bsub wait", "remove the line"]),
    ("lsf-gpu", "scheduler:\n      extra_directives: ['-B', '-R span[ptile=4]']",
     ["scheduler.extra_directives[1] = '-R span[ptile=4]'", "span[]"]),
    ("lsf-gpu", "scheduler:\n      extra_directives: ['-Jname']", ["extra_directives[0] = '-Jname'", "-J"]),
    ("slurm-gpu", "scheduler:\n      slurm:\n        extra_directives: ['--array=0-9']",
     ["scheduler.slurm.extra_directives[0] = '--array=0-9'", "--array makes several jobs"]),
    ("slurm-gpu", "scheduler:\n      slurm:\n        extra_directives: ['--tasks-per-node=1']",
     ["scheduler.slurm.extra_directives[0]", "--tasks-per-node is --ntasks-per-node"]),
    ("slurm-gpu", "scheduler:\n      slurm:\n        step_options: ['--tasks-per-node=1']",
     ["scheduler.slurm.step_options[0]", "--tasks-per-node is --ntasks-per-node"]),
]


@pytest.mark.parametrize("machine,section,needles", PROFILE_LINES, ids=[f"{m}-{n[0][:40]}" for m, _, n in
                                                                         PROFILE_LINES])
def test_a_profiles_extra_line_goes_through_the_same_check(env, tmp_path, machine, section, needles):
    config = tmp_path / "config.yaml"
    config.write_text(f"machines:\n  {machine}:\n    {section}\n")
    result = invoke(env, ["--config", str(config), "--machine", machine, "submit", "--nodes", "2", "--dry-run"])
    assert_refused(result, needles)


def test_a_profiles_step_options_may_bind_gpus_per_task(env):
    """Frontier's srun line binds one GPU per task (--gpus-per-task=1): an srun option there, not an #SBATCH one."""
    result = invoke(env, ["--machine", "frontier", "submit", "--nodes", "2", "--project", "abc123", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "--gpus-per-task=1" in result.stdout
