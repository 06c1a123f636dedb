"""Every option of `submit` and `simulate` with a bad value: a clean refusal, a warning, or the right plan.

"Accepted but wrong" is the failure this file hunts: an option the plan drops
without a word (--short-cycle without multigrid, --max-links without a chain),
an empty value read as "the default" (--queue ''), a value quietly rewritten
(--warning-minutes above half the walltime), a batch past where its learning
rate is known to work. The tables hold one bad value for every option; a test
checks that they do, against the commands' own option lists, so a new option
cannot join without one. Each case runs the real entry point in a process and
must end within 20 s without a traceback.
"""
from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys

import click
import pytest

from badinput import assert_refused, option_names
from helpers import run_cli
from lsf_jobs import lsf_environment, wait_state

#: No case may take longer than this (a hang is a failure, not a slow pass).
LIMIT_S = 20

SUBMIT = ["--machine", "summit", "submit", "--project", "ABC123", "--dry-run", "--nodes", "2"]
SIMULATE = ["--machine", "summit", "simulate", "--project", "ABC123", "--dry-run", "--virtual-nodes", "4"]
LOCAL = ["--machine", "local", "submit", "--nodes", "1", "--dry-run"]

#: Options submit and simulate share: (option, the bad arguments, words the one-line refusal must hold).
SHARED = [
    ("--project", ["--project", "a b"], ["'a b'"]),
    ("--walltime", ["--walltime", "0:60"], ["'0:60'"]),
    ("--queue", ["--queue", "nope"], ["'nope'"]),
    ("--job-name", ["--job-name", "a b"], ["'a b'"]),
    ("--data", ["--data", "/gpfs/$USER/m.json"], ["$USER/m.json'"]),
    ("--stage-policy", ["--stage-policy", "replicate"], ["--stage-policy replicate", "--data MANIFEST"]),
    ("--layout", ["--layout", "socket"], ["'socket'"]),
    ("--request", ["--request", "nodes"], ["'nodes'"]),
    ("--launcher", ["--launcher", "srun"], ["'srun'"]),
    ("--mem", ["--mem", "4GB"], ["--mem 4GB", "whole nodes"]),
    ("--app", ["--app", "parallel 96"], ["--app 'parallel 96'"]),
    ("--container", ["--container", "img;touch pwned"], ["'img;touch pwned'"]),
    ("--qos", ["--qos", "debug"], ["--qos debug", "Slurm quality of service", "LSF machine"]),
    ("--bsub-option", ["--bsub-option", "-J other"], ["'-J other'", "--job-name"]),
    ("--total-steps", ["--total-steps", "10"], ["--total-steps 10"]),
    ("--epochs", ["--epochs", "0"], ["0"]),
    ("--clips-per-gpu", ["--clips-per-gpu", "0"], ["0"]),
    ("--lr", ["--lr", "nan"], ["'nan'"]),
    ("--warmup-epochs", ["--warmup-epochs", "-1"], ["'-1'"]),
    ("--engine", ["--engine", "mpi"], ["'mpi'"]),
    ("--arch", ["--arch", "resnet51"], ["'resnet51'"]),
    ("--num-classes", ["--num-classes", "0"], ["0"]),
    ("--schedule", ["--schedule", "cyclic"], ["'cyclic'"]),
    ("--short-cycle", ["--short-cycle"], ["--short-cycle", "--schedule multigrid"]),
    ("--optimizer", ["--optimizer", "lamb"], ["'lamb'"]),
    ("--optimizer-sync", ["--optimizer-sync", "async"], ["'async'"]),
    ("--avg-interval", ["--avg-interval", "5"], ["--avg-interval 5", "--optimizer-sync aavg"]),
    ("--compression", ["--compression", "zip"], ["'zip'"]),
    ("--fusion-threshold", ["--engine", "ddp", "--fusion-threshold", "8388608"],
     ["--fusion-threshold 8388608", "--engine ddp"]),
    ("--preset", ["--preset", "nope"], ["'nope'"]),
    ("--chain", ["--chain", "0"], ["0"]),
    ("--until-complete", ["--until-complete", "--chain", "3"], ["--chain 3", "--until-complete"]),
    ("--max-links", ["--max-links", "5"], ["--max-links 5", "--until-complete"]),
    ("--warning-minutes", ["--warning-minutes", "61"], ["--warning-minutes 61", "2:00", "60 or less"]),
    ("--quota-nodes", ["--quota-nodes", "0"], ["0"]),
    ("--env", ["--env", "A B=1"], ["'A B=1'"]),
    ("--run-dir", ["--run-dir", "/tmp/$(touch pwned)"], ["'/tmp/$(touch pwned)'"]),
    ("--runs-dir", ["--runs-dir", "/ccs/home/u"], ["/ccs/home", "cannot write"]),
    ("--template-dir", ["--template-dir", "/nonexistent-templates"], ["/nonexistent-templates"]),
    ("--dry-run", ["--dry-run=yes"], ["--dry-run", "does not take a value"]),
    ("--output", ["--output", "/nonexistent-dir/x.lsf"], ["/nonexistent-dir"]),
    ("--json", ["--json=1"], ["--json", "does not take a value"]),
    ("--force", ["--force=1"], ["--force", "does not take a value"]),
    ("trainer_args", ["--", "--bogus"], ["--bogus"]),
]
SUBMIT_ONLY = [
    ("--nodes", ["--nodes", "0"], ["node count 0"]),
    ("--command", ["--command", "python 'train.py"], ["No closing quotation"]),
]
SIMULATE_ONLY = [
    ("--virtual-nodes", ["--virtual-nodes", "0"], ["0"]),
    ("--nodes", ["--nodes", "3"], ["4 virtual nodes cannot be run exactly on 3 nodes"]),
    ("--max-accum-steps", ["--max-accum-steps", "0"], ["0"]),
    ("--throughput-from", ["--throughput-from", "/nonexistent-run"], ["/nonexistent-run"]),
    ("--train-clips", ["--train-clips", "0"], ["0"]),
    ("--command", ["--command", "python train.py"], ["--command runs your own program", "submit --command"]),
]
#: The group's own options, given before ``submit`` (the local machine unless the case names one).
GLOBAL = [
    ("--machine", ["--machine", "x;touch pwned"], ["'x;touch pwned'"]),
    ("--config", ["--config", "/nonexistent.yaml"], ["/nonexistent.yaml"]),
    ("--host", ["--host", "a b"], ["'a b'"]),
    ("--port", ["--port", "0"], ["0 is not in the range"]),
    ("--user", ["--user", ""], ["--user '' is empty"]),
    ("--key-file", ["--key-file", ""], ["--key-file '' is empty"]),
    ("--known-hosts", ["--known-hosts", ""], ["--known-hosts '' is empty"]),
    ("--trust-new-host-key", ["--trust-new-host-key=1"], ["does not take a value"]),
    ("--remote-dir", ["--machine", "summit", "--remote-dir", "runs"], ["'runs' must be an absolute path"]),
]
GLOBAL_BASE = ["submit", "--project", "ABC123", "--dry-run", "--nodes", "1"]


def _run(args, cli_env, tmp_path) -> subprocess.CompletedProcess:
    return run_cli(args, cli_env, cwd=tmp_path, timeout=LIMIT_S)


def _refused(proc, needles, tmp_path) -> None:
    assert_refused(proc, needles)
    assert "#BSUB" not in proc.stdout
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("option,args,needles", SHARED + SUBMIT_ONLY, ids=[c[0] for c in SHARED + SUBMIT_ONLY])
def test_submit_refuses_a_bad_value(cli_env, tmp_path, option, args, needles):
    _refused(_run([*SUBMIT, *args], cli_env, tmp_path), needles, tmp_path)


@pytest.mark.parametrize("option,args,needles", SHARED + SIMULATE_ONLY, ids=[c[0] for c in SHARED + SIMULATE_ONLY])
def test_simulate_refuses_a_bad_value(cli_env, tmp_path, option, args, needles):
    _refused(_run([*SIMULATE, *args], cli_env, tmp_path), needles, tmp_path)


@pytest.mark.parametrize("option,args,needles", GLOBAL, ids=[c[0] for c in GLOBAL])
def test_a_global_option_with_a_bad_value(cli_env, tmp_path, option, args, needles):
    _refused(_run([*args, *GLOBAL_BASE], cli_env, tmp_path), needles, tmp_path)


# ---- options that apply only with another one ---------------------------------------------------------------

#: (case, command line, words of the refusal): each option used to vanish from the plan without a word.
NOT_APPLYING = [
    ("short-cycle-without-multigrid", [*SUBMIT, "--short-cycle"], ["--short-cycle", "--schedule multigrid"]),
    ("avg-interval-without-aavg", [*SUBMIT, "--avg-interval", "4"], ["--avg-interval 4", "--optimizer-sync aavg"]),
    ("avg-interval-default-given", [*SUBMIT, "--avg-interval", "-1"], ["--avg-interval -1"]),
    ("max-links-without-chain", [*SUBMIT, "--max-links", "5"], ["--max-links 5", "--until-complete"]),
    ("max-links-with-fixed-chain", [*SUBMIT, "--chain", "2", "--max-links", "5"], ["--max-links 5"]),
    ("stage-policy-without-data", [*SUBMIT, "--stage-policy", "partition"], ["--stage-policy partition",
                                                                            "--data MANIFEST"]),
    ("fusion-threshold-with-ddp", [*SUBMIT, "--engine", "ddp", "--fusion-threshold", "1"],
     ["--fusion-threshold 1", "--engine ddp"]),
    ("layout-with-blaunch", [*LOCAL, "--request", "slots", "--launcher", "blaunch", "--layout", "node"],
     ["--layout node", "blaunch"]),
    ("layout-with-torchrun", [*LOCAL, "--request", "slots", "--launcher", "torchrun", "--layout", "gpu"],
     ["--layout gpu", "torchrun"]),
    ("run-dir-and-runs-dir", [*LOCAL, "--run-dir", "r", "--runs-dir", "runs"], ["--run-dir r", "--runs-dir runs"]),
    ("output-without-dry-run", ["--machine", "local", "submit", "--nodes", "1", "--output", "job.lsf"],
     ["--output job.lsf", "--dry-run"]),
    ("simulate-command", [*SIMULATE, "--command", "python3 train.py"], ["--command", "accumulat"]),
    ("simulate-short-cycle", [*SIMULATE, "--short-cycle"], ["--short-cycle"]),
    ("simulate-max-links", [*SIMULATE, "--max-links", "3"], ["--max-links 3"]),
]
#: Options of the built-in trainer that --command (the user's own program) would drop.
TRAINER_OPTIONS = [
    ["--epochs", "3"], ["--clips-per-gpu", "4"], ["--lr", "0.1"], ["--warmup-epochs", "1"], ["--engine", "ddp"],
    ["--arch", "resnet18"], ["--num-classes", "10"], ["--schedule", "multigrid"], ["--short-cycle"],
    ["--optimizer", "lars"], ["--optimizer-sync", "aavg"], ["--avg-interval", "-1"], ["--compression", "fp16"],
]
NOT_APPLYING += [(f"command-with{args[0]}", [*LOCAL, "--command", "python3 train.py", *args], [args[0], "--command"])
                 for args in TRAINER_OPTIONS]


@pytest.mark.parametrize("case,args,needles", NOT_APPLYING, ids=[c[0] for c in NOT_APPLYING])
def test_an_option_that_would_not_apply_is_refused(cli_env, tmp_path, case, args, needles):
    proc = _run(args, cli_env, tmp_path)
    _refused(proc, needles, tmp_path)
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "job.lsf").exists()


#: (option and its partner, what the plan then says): each option of the table above, where it applies.
APPLYING = [
    ([*SUBMIT, "--schedule", "multigrid", "--short-cycle"], lambda plan, script: "--short-cycle" in script),
    ([*SUBMIT, "--optimizer-sync", "aavg", "--optimizer", "adam", "--avg-interval", "4"],
     lambda plan, script: plan["avg_interval"] == 4 and "--avg-interval 4" in script),
    ([*SUBMIT, "--until-complete", "--max-links", "5"], lambda plan, script: plan["max_links"] == 5),
    ([*SUBMIT, "--data", "/gpfs/k400/manifest.json", "--stage-policy", "replicate"],
     lambda plan, script: plan["stage_policy"] == "replicate" and "--policy replicate" in script),
    ([*SUBMIT, "--engine", "horovod", "--fusion-threshold", "1"], lambda plan, script: plan["fusion_threshold"] == "1"),
    ([*SUBMIT, "--layout", "node"], lambda plan, script: plan["layout"] == "node" and "-a 6 -g 6" in script),
    ([*LOCAL, "--command", "python3 train.py", "--fusion-threshold", "1"],
     lambda plan, script: "HOROVOD_FUSION_THRESHOLD=1" in script),
]


@pytest.mark.parametrize("args,shown", APPLYING, ids=["multigrid", "aavg", "until-complete", "data", "horovod",
                                                      "jsrun", "command-fusion"])
def test_the_same_options_where_they_apply(cli_env, tmp_path, args, shown):
    """The refusals above are about the missing partner: with it, each option is planned and shown."""
    proc = _run([*args, "--json"], cli_env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert shown(out["plan"], out["script"]), out["plan"]


# ---- --warning-minutes ---------------------------------------------------------------------------------------

def test_warning_minutes_above_half_the_walltime_is_refused(cli_env, tmp_path):
    """It used to become `-wt 5` without a word: the job would train another time than planned."""
    proc = _run([*SUBMIT, "--walltime", "10", "--warning-minutes", "30"], cli_env, tmp_path)
    _refused(proc, ["--warning-minutes 30", "0:10 walltime", "--warning-minutes 5 or less", "--walltime"],
             tmp_path)


@pytest.mark.parametrize("walltime,given,wt", [("10", "5", "5"), ("10", None, "5"), ("2:00", None, "10"),
                                               ("2", "1", "1")])
def test_warning_minutes_within_the_limit(cli_env, tmp_path, walltime, given, wt):
    """Half the walltime is allowed; the profile's 10 minutes shrink to fit a short job (its documented default)."""
    extra = ["--warning-minutes", given] if given else []
    proc = _run([*SUBMIT, "--walltime", walltime, *extra], cli_env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"#BSUB -wt {wt}\n" in proc.stdout


# ---- empty values --------------------------------------------------------------------------------------------

def _command(name: str) -> click.Command:
    from summit_jobs.cli import main  # noqa: F401 - registers the commands
    from summit_jobs.cli.submit import cli
    return cli.get_command(click.Context(cli), name)


def _text_options(command: click.Command):
    return [p.opts[-1] if p.opts[-1].startswith("--") else p.opts[0] for p in command.params
            if isinstance(p, click.Option) and not p.is_flag and p.type.name in ("text", "file", "directory", "path")]


def _empty_cases():
    from summit_jobs.cli.submit import cli
    cases = [("global", opt, [opt, "", *GLOBAL_BASE]) for opt in _text_options(cli)]
    for name, base in (("submit", SUBMIT), ("simulate", SIMULATE)):
        cases += [(name, opt, [*base, opt, ""]) for opt in _text_options(_command(name))]
    return cases


EMPTY = _empty_cases()


@pytest.mark.parametrize("where,option,args", EMPTY, ids=[f"{w}{o}" for w, o, _ in EMPTY])
def test_an_empty_value_is_refused_not_taken_as_the_default(cli_env, tmp_path, where, option, args):
    """`--queue ''` used to mean the default queue, `--data ''` no data: an unset variable in a script."""
    proc = _run(args, cli_env, tmp_path)
    _refused(proc, [f"{option} '' is empty"], tmp_path)


def test_the_empty_value_message_names_the_default(cli_env, tmp_path):
    proc = _run([*SUBMIT, "--queue", ""], cli_env, tmp_path)
    _refused(proc, ["--queue '' is empty; leave the option out for the profile's default queue"], tmp_path)


def test_every_text_option_is_tried_empty():
    """The generated table above is the commands' own option list (nothing hand-picked to leave out)."""
    assert {o for w, o, _ in EMPTY if w == "submit"} >= {"--queue", "--data", "--project", "--walltime", "--mem",
                                                          "--app", "--container", "--arch", "--run-dir",
                                                          "--runs-dir", "--output", "--template-dir"}
    assert "--throughput-from" in {o for w, o, _ in EMPTY if w == "simulate"}
    assert {"--machine", "--host", "--remote-dir", "--config"} <= {o for w, o, _ in EMPTY if w == "global"}


# ---- warnings: accepted, and said ----------------------------------------------------------------------------

def test_force_in_a_dry_run_without_output_is_said_to_do_nothing(cli_env, tmp_path):
    proc = _run([*SUBMIT, "--force"], cli_env, tmp_path)
    assert proc.returncode == 0 and "#BSUB" in proc.stdout, proc.stderr
    assert "warning: --force is ignored by a dry run without --output" in proc.stderr


def test_ssh_options_on_this_machine_are_said_to_be_ignored(cli_env, tmp_path):
    proc = _run(["--host", "local", "--user", "me", "--remote-dir", "/scratch/me", *SUBMIT], cli_env, tmp_path)
    assert proc.returncode == 0 and "#BSUB" in proc.stdout, proc.stderr
    assert "warning: --user, --remote-dir are ignored: this job is submitted on this machine" in proc.stderr


def test_a_batch_larger_than_the_training_set_is_warned(cli_env, tmp_path):
    """73,728 virtual Summit nodes: 3,538,944 clips a step, more than Kinetics-400's whole training set."""
    proc = _run(["--machine", "summit", "simulate", "--project", "ABC123", "--dry-run", "--virtual-nodes", "73728"],
                cli_env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("summit-jobs: warning:")]
    assert any("3,538,944 clips is more than the 240,000 training clips" in w for w in warnings), proc.stderr
    assert any("above 12,288" in w and "LR 552.96" in w and "--optimizer lars" in w for w in warnings), warnings


def test_the_training_set_is_the_one_given(cli_env, tmp_path):
    proc = _run([*SIMULATE, "--train-clips", "90"], cli_env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "the global batch of 192 clips is more than the 90 training clips" in proc.stderr


@pytest.mark.parametrize("args,bound", [
    (["--machine", "summit", "submit", "--nodes", "512"], "12,288"),
    (["--machine", "summit", "simulate", "--virtual-nodes", "1024", "--quota-nodes", "384", "--optimizer", "lars"],
     "32,768"),
], ids=["submit-sgd", "simulate-lars"])
def test_a_batch_beyond_the_linear_rule_is_warned(cli_env, tmp_path, args, bound):
    proc = _run([*args, "--project", "ABC123", "--dry-run", "--json"], cli_env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"above {bound}" in proc.stderr
    assert any(f"above {bound}" in w for w in json.loads(proc.stdout)["plan"]["warnings"])


@pytest.mark.parametrize("args", [
    ["--machine", "summit", "submit", "--nodes", "256"],
    ["--machine", "summit", "submit", "--nodes", "512", "--lr", "1.0"],
    ["--machine", "summit", "submit", "--nodes", "512", "--", "--lr", "1.0"],
    ["--machine", "summit", "simulate", "--virtual-nodes", "512", "--quota-nodes", "256", "--optimizer", "lars"],
], ids=["paper-largest", "own-lr", "own-lr-after-separator", "lars-within"])
def test_no_batch_warning_where_the_rule_is_shown_to_hold(cli_env, tmp_path, args):
    cut = args.index("--") if "--" in args else len(args)
    proc = _run([*args[:cut], "--project", "ABC123", "--dry-run", *args[cut:]], cli_env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "summit-jobs: warning" not in proc.stderr, proc.stderr


# ---- simulate: why the walltime it asks for -----------------------------------------------------------------

def test_simulate_says_why_it_asks_for_the_longest_walltime(cli_env, tmp_path):
    """An estimate of minutes and a job of the queue's maximum, without a word, looked like a mistake."""
    proc = _run(["--machine", "summit", "simulate", "--virtual-nodes", "1024", "--quota-nodes", "384",
                 "--project", "ABC123", "--dry-run"], cli_env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stderr.splitlines() if x.startswith("walltime 12:00:"))
    assert "no --walltime was given" in line and "longest" in line
    sized = re.search(r"--walltime (\d+:\d\d) asks for that", line)
    assert sized, line
    # The suggestion covers the estimate, its margin and the 10-minute warning, and the plan accepts it.
    hours, minutes = map(int, sized.group(1).split(":"))
    estimate = re.search(r"wall time (\d+) min (\d+) s", proc.stderr)
    assert hours * 60 + minutes >= (int(estimate.group(1)) + int(estimate.group(2)) / 60) * 1.25 + 10
    again = _run(["--machine", "summit", "simulate", "--virtual-nodes", "1024", "--quota-nodes", "384",
                  "--project", "ABC123", "--dry-run", "--walltime", sized.group(1)], cli_env, tmp_path)
    assert again.returncode == 0 and f"#BSUB -W {sized.group(1)}" in again.stdout, again.stderr
    assert "no --walltime was given" not in again.stderr


def test_simulate_counts_the_jobs_by_training_time_before_the_warning(cli_env, tmp_path):
    """A run that fits the walltime but not the time before its warning needs a second job."""
    args = ["--machine", "summit", "simulate", "--virtual-nodes", "1024", "--quota-nodes", "384", "--project",
            "ABC123", "--dry-run", "--json", "--walltime", "0:20", "--warning-minutes", "10"]
    proc = _run(args, cli_env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    sim = json.loads(proc.stdout)["simulate"]
    assert 600 < sim["wall_seconds"] < 20 * 60 and sim["jobs_needed"] == 2


# ---- the status hint after a real submit --------------------------------------------------------------------

def test_the_printed_status_command_is_shell_quoted(tmp_path):
    """A run name with shell metacharacters: the pasted hint runs `summit-jobs status NAME`, nothing else."""
    env = lsf_environment(tmp_path)
    name = "r x;touch pwned;`touch pwned2`&"
    run_dir = tmp_path / name
    proc = subprocess.run([sys.executable, "-m", "summit_jobs", "submit", "--nodes", "1", "--run-dir", str(run_dir),
                           "--walltime", "2", "--command", f"{sys.executable} -c pass"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=LIMIT_S)
    assert proc.returncode == 0, proc.stderr
    job_id = re.search(r"job (\d+) submitted", proc.stdout).group(1)
    hint = next(line for line in proc.stdout.splitlines() if line.startswith("follow it with: "))
    pasted = hint[len("follow it with: "):]
    # A shell where summit-jobs prints its arguments: what the pasted line would hand to the real command.
    shell = subprocess.run(["bash", "-c", 'summit-jobs() { printf "%s\\n" "$@"; }\n' + pasted], cwd=tmp_path,
                           capture_output=True, text=True, timeout=LIMIT_S)
    assert shell.returncode == 0, shell.stderr
    assert shell.stdout.splitlines() == ["status", name, "--watch"]
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "pwned2").exists()
    assert shlex.split(pasted) == ["summit-jobs", "status", name, "--watch"]
    wait_state(job_id, env)


# ---- the suite covers every option ---------------------------------------------------------------------------

def _covered(tables) -> set:
    return {option for table in tables for option, _, _ in table}


def test_every_option_of_submit_and_simulate_has_a_bad_value():
    from summit_jobs.cli.submit import cli
    assert option_names(_command("submit")) - _covered([SHARED, SUBMIT_ONLY]) == set()
    assert option_names(_command("simulate")) - _covered([SHARED, SIMULATE_ONLY]) == set()
    assert option_names(cli) - {"--version"} - _covered([GLOBAL]) == set()


def test_the_cases_are_counted():
    """The breadth this file adds to the bad-input suite (the report quotes this count)."""
    total = (len(SHARED) * 2 + len(SUBMIT_ONLY) + len(SIMULATE_ONLY) + len(GLOBAL) + len(NOT_APPLYING)
             + len(EMPTY))
    assert total >= 150, total
