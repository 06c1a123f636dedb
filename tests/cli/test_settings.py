"""Where each setting of a job comes from, and that it has one owner.

Precedence (options > environment > config file > profile) is pinned through
the real command line; submit and simulate must agree on the quota. The
schema tests pin that the trainer's choice lists and defaults are written once.
"""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO, run_cli

SUMMIT = ["--machine", "summit"]


def _config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    return str(path)


def _submit_json(args, env, cwd) -> dict:
    proc = run_cli([*args, "--dry-run", "--json"], env, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


# ---- project: --project > SUMMIT_JOBS_PROJECT > config ----------------------------------------

@pytest.mark.parametrize("option, env_value, expected", [
    ("OPT1", "ENV1", "OPT1"),
    (None, "ENV1", "ENV1"),
    (None, None, "CFG1"),
])
def test_project_precedence(cli_env, tmp_path, option, env_value, expected):
    cfg = _config(tmp_path, "project: CFG1\n")
    env = dict(cli_env, **({"SUMMIT_JOBS_PROJECT": env_value} if env_value else {}))
    args = ["--config", cfg, *SUMMIT, "submit", "--nodes", "2"] + (["--project", option] if option else [])
    script = _submit_json(args, env, tmp_path)["script"]
    assert f"#BSUB -P {expected}\n" in script


# ---- machine: --machine > SUMMIT_JOBS_MACHINE > config > local --------------------------------

@pytest.mark.parametrize("option, env_value, expected", [
    ("summit", "lassen", "summit"),
    (None, "lassen", "lassen"),
    (None, None, "summit"),
])
def test_machine_precedence(cli_env, tmp_path, option, env_value, expected):
    cfg = _config(tmp_path, "machine: summit\nproject: P1\n")
    env = dict(cli_env, **({"SUMMIT_JOBS_MACHINE": env_value} if env_value else {}))
    args = ["--config", cfg] + (["--machine", option] if option else []) + ["submit", "--nodes", "2"]
    assert _submit_json(args, env, tmp_path)["plan"]["machine"] == expected


# ---- quota: --quota-nodes > config quota_nodes > profile quota_nodes > none -------------------

QUOTA_CONFIGS = {
    "option": ("quota_nodes: 16\nmachines:\n  summit:\n    quota_nodes: 8\n", ["--quota-nodes", "32"], 32),
    "config": ("quota_nodes: 16\nmachines:\n  summit:\n    quota_nodes: 8\n", [], 16),
    "profile": ("machines:\n  summit:\n    quota_nodes: 8\n", [], 8),
}


@pytest.mark.parametrize("layer", sorted(QUOTA_CONFIGS))
def test_quota_is_the_same_for_submit_and_simulate(cli_env, tmp_path, layer):
    """submit refuses one node above the quota, simulate runs on exactly the quota: the same number."""
    text, option, quota = QUOTA_CONFIGS[layer]
    cfg = _config(tmp_path, "project: P1\n" + text)
    base = ["--config", cfg, *SUMMIT]
    _submit_json([*base, "submit", "--nodes", str(quota), *option], cli_env, tmp_path)
    proc = run_cli([*base, "submit", "--nodes", str(quota + 1), *option, "--dry-run"], cli_env, cwd=tmp_path)
    assert proc.returncode == 2 and f"quota of {quota}" in proc.stderr, proc.stderr
    sim = _submit_json([*base, "simulate", "--virtual-nodes", str(quota * 2), *option], cli_env, tmp_path)
    assert sim["simulate"]["quota_nodes"] == quota
    assert sim["simulate"]["physical_nodes"] == quota


def test_no_quota_means_the_machine_size(cli_env, tmp_path):
    """With no quota anywhere, submit takes up to the machine's size and simulate plans against it."""
    _submit_json([*SUMMIT, "submit", "--nodes", "4608", "--project", "P1"], cli_env, tmp_path)
    sim = _submit_json([*SUMMIT, "simulate", "--virtual-nodes", "9216", "--project", "P1"], cli_env, tmp_path)
    assert sim["simulate"]["quota_nodes"] == 4608 and sim["simulate"]["physical_nodes"] == 4608


def test_quota_rule_in_help(cli_env):
    for command in ("submit", "simulate"):
        proc = run_cli([command, "--help"], cli_env)
        text = " ".join(proc.stdout.split())
        assert "--quota-nodes > config quota_nodes > profile quota_nodes" in text, text


# ---- runs_dir: --run-dir > --runs-dir > config runs_dir > profile runs_dir > ./summit-jobs-runs ----

@pytest.mark.parametrize("args, config_text, expected", [
    (["--runs-dir", "opt-runs"], "runs_dir: cfg-runs\n", "opt-runs"),
    ([], "runs_dir: cfg-runs\nmachines:\n  local:\n    runs_dir: prof-runs\n", "cfg-runs"),
    ([], "machines:\n  local:\n    runs_dir: prof-runs\n", "prof-runs"),
    ([], "", "summit-jobs-runs"),
])
def test_runs_dir_precedence(cli_env, tmp_path, args, config_text, expected):
    cfg = _config(tmp_path, config_text)
    plan = _submit_json(["--config", cfg, "submit", "--nodes", "1", *args], cli_env, tmp_path)["plan"]
    assert Path(plan["run_dir"]).parent == tmp_path / expected


# ---- prepare does not change what it was given ------------------------------------------------

def test_prepare_returns_new_options_and_leaves_its_input_alone():
    from summit_jobs.profiles import config as config_mod
    from summit_jobs.runs import submission

    class Over:
        """The CLI's state for a laptop that reaches summit over SSH."""
        config = config_mod.UserConfig()
        profile = config_mod.profile(config_mod.UserConfig(), "summit")
        ssh_options = {"host": "login1.example.org", "remote_dir": "/gpfs/alpine/scratch/me"}

    kw = {"run_dir": None, "runs_dir": None, "dry_run": False}
    before = dict(kw)
    out = submission.prepare(Over(), kw)
    assert kw == before
    assert out["runs_dir"] == "/gpfs/alpine/scratch/me" and out is not kw


# ---- one schema for the trainer's options -----------------------------------------------------

def _click_params(command: str) -> dict:
    from summit_jobs.cli import main  # every command registered
    return {p.name: p for p in main.cli.cli.get_command(None, command).params}


@pytest.mark.parametrize("name", ["engine", "schedule", "optimizer", "optimizer_sync", "compression"])
def test_choice_lists_are_the_trainers(name):
    from trainer import config
    parser_choices = {a.dest: tuple(a.choices) for a in config.parser()._actions if a.choices}
    for command in ("submit", "simulate"):
        assert tuple(_click_params(command)[name].type.choices) == parser_choices[name]


@pytest.mark.parametrize("name", ["schedule", "optimizer", "optimizer_sync", "compression", "avg_interval"])
def test_defaults_are_the_trainers(name):
    import dataclasses

    from summit_jobs.planning.plan import JobOptions
    from trainer import config
    trainer_default = config.parser().get_default(name)
    assert _click_params("submit")[name].default == trainer_default
    assert {f.name: f.default for f in dataclasses.fields(JobOptions)}[name] == trainer_default


def test_run_directory_names_are_rundirs():
    from summit_jobs.planning import plan
    from trainer import rundir
    assert (plan.COMPLETE_MARKER, plan.SCRIPT_NAME, plan.CHAIN_FILE) == (rundir.COMPLETE, rundir.SCRIPT, rundir.CHAIN)


COMBINATIONS = [
    (["--optimizer-sync", "aavg", "--compression", "fp16"], "--compression applies to the gradient allreduce"),
    (["--optimizer-sync", "aavg", "--avg-interval", "0"], "--avg-interval 0 must be"),
    (["--compression", "bf16", "--engine", "horovod"], "bf16 gradient compression is a torch.distributed hook"),
]


@pytest.mark.parametrize("args,needle", COMBINATIONS, ids=[" ".join(a) for a, _ in COMBINATIONS])
def test_method_combination_rules_have_one_owner(args, needle, cli_env, tmp_path):
    """submit refuses a combination with the same words the trainer's own parser uses (trainer.config)."""
    from trainer import config
    submit = run_cli([*SUMMIT, "submit", "--nodes", "2", "--project", "P1", "--dry-run", *args], cli_env,
                     cwd=tmp_path)
    assert submit.returncode == 2 and needle in submit.stderr, submit.stderr
    values = dict(vars(config.parse(["--run-dir", "r"])))
    for flag, value in zip(args[0::2], args[1::2]):
        key = flag[2:].replace("-", "_")
        values[key] = int(value) if value.lstrip("-").isdecimal() else value
    assert needle in config.method_conflict(values)
    proc = subprocess.run([sys.executable, "-c", "from trainer import config; import sys; config.parse(sys.argv[1:])",
                           "--run-dir", "r", *args], capture_output=True, text=True, cwd=str(REPO))
    assert proc.returncode == 2 and needle in proc.stderr, proc.stderr


# ---- small functions ----------------------------------------------------------------------------

PLANNING_FILES = ["summit_jobs/planning/plan.py", "summit_jobs/runs/submission.py", "summit_jobs/cli/submit.py",
                  "summit_jobs/cli/simulate.py", "summit_jobs/planning/simulate.py", "summit_jobs/planning/trainer_args.py",
                  "summit_jobs/profiles/schema.py", "summit_jobs/profiles/config.py", "summit_jobs/profiles/settings.py",
                  "trainer/config.py"]


@pytest.mark.parametrize("path", PLANNING_FILES)
def test_no_function_over_60_lines(path):
    tree = ast.parse((REPO / path).read_text())
    long = [f"{node.name} ({node.end_lineno - node.lineno + 1} lines)" for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 60]
    assert not long, long
