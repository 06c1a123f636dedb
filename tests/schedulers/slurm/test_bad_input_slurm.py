"""Slurm's bad inputs: every key of a Slurm profile's section and every submit option Slurm reads, with a bad
value, refused in one line that names the key or option and the rule.

Why a file of its own: tests/planning/test_bad_input_profile.py spoils a copy of Summit's profile, an LSF machine, on
which a Slurm section is refused as a whole; here each key is spoiled in a copy of the generic Slurm profile
(envs/slurm-gpu.yaml), so that its own range or shape is what refuses it. Its completeness test counts these
cases with its own. The option cases plan on that profile as a user would, through the real entry point.
"""
from __future__ import annotations

import pytest
import yaml

from badinput import assert_refused
from helpers import REPO, run_cli
from slurm_cluster import stretched   # a quiet machine's seconds -> here, now
from test_bad_input_profile import _set

#: (key path, bad value, words the refusal must hold besides the file's path).
PROFILE_CASES = [
    ("scheduler.slurm.partition", "maybe", ["'scheduler.slurm.partition' must be true or false"]),
    ("scheduler.slurm.qos.batch.description", [1], ["'scheduler.slurm.qos.batch.description' must be text"]),
    ("scheduler.slurm.qos.batch.default", "maybe", ["'scheduler.slurm.qos.batch.default' must be true or false"]),
    ("scheduler.slurm.qos.batch.max_walltime", "soon",
     ["scheduler.slurm.qos.batch.max_walltime 'soon'", "[hours:]minutes"]),
    ("scheduler.slurm.qos.batch.max_nodes", 0, ["'scheduler.slurm.qos.batch.max_nodes' = 0 is out of range", ">= 1"]),
    ("scheduler.slurm.qos.batch.chaining", "maybe", ["'scheduler.slurm.qos.batch.chaining' must be true or false"]),
    ("scheduler.slurm.qos.batch.max_queued_per_user", -1,
     ["'scheduler.slurm.qos.batch.max_queued_per_user' = -1 is out of range", ">= 1"]),
    ("scheduler.slurm.constraint", "gpu;touch X", ["scheduler.slurm.constraint = 'gpu;touch X'", "node features"]),
    ("scheduler.slurm.nvme_constraint", "nv me", ["scheduler.slurm.nvme_constraint = 'nv me'"]),
    ("scheduler.slurm.gpus", "gpus-per-task", ["'scheduler.slurm.gpus' must be one of"]),
    ("scheduler.slurm.gpu_type", "a100 x", ["scheduler.slurm.gpu_type = 'a100 x'"]),
    ("scheduler.slurm.cpus_per_task", 0, ["'scheduler.slurm.cpus_per_task' = 0 is out of range", ">= 1"]),
    ("scheduler.slurm.memory", "64GB", ["scheduler.slurm.memory = '64GB'", "Slurm's --mem form"]),
    ("scheduler.slurm.exclusive", "yes please", ["'scheduler.slurm.exclusive' must be true or false"]),
    ("scheduler.slurm.extra_directives", ["--time=5"],
     ["scheduler.slurm.extra_directives[0] = '--time=5'", "writes --time itself", "--walltime"]),
    ("scheduler.slurm.step_options", ["--ntasks=3"],
     ["scheduler.slurm.step_options[0] = '--ntasks=3'", "writes --ntasks itself"]),
    # Values at odds with each other or with the scheduler.
    ("scheduler.slurm.extra_directives", ["-C gpu"], ["scheduler.slurm.extra_directives[0] = '-C gpu'",
                                                     "long options"]),
    ("scheduler.slurm.extra_directives", ["--part=x"], ["writes --partition itself", "--queue"]),
    ("scheduler.slurm.qos.debug.max_walltime", "0:61", ["scheduler.slurm.qos.debug.max_walltime '0:61'"]),
    ("scheduler.slurm.qos.debug.default", True, ["scheduler.slurm.qos marks debug and normal as the default"]),
    ("scheduler.slurm.cpus_per_task", 9, ["scheduler.slurm.cpus_per_task = 9 for 4 ranks per node",
                                          "32 CPUs"]),
    ("scheduler.slurm.gpus", "none", ["scheduler.slurm.gpu_type names a GPU type"]),
    ("scheduler.warning_minutes", 1093, ["scheduler.warning_minutes = 1093", "at most 1092"]),
    ("scheduler.account_flag", "-P", ["scheduler.account_flag '-P' is not Slurm's", "--account"]),
    ("scheduler.submit_mode", "stdin", ["scheduler.submit_mode must be 'file' on Slurm"]),
    ("scheduler.gpu", {"mode": "shared"}, ["scheduler.gpu is LSF's", "scheduler.kind is slurm"]),
    ("scheduler.extra_directives", ["-B"], ["scheduler.extra_directives is LSF's"]),
    ("scheduler.csm", True, ["scheduler.csm is LSF's"]),
    ("alloc_flags", ["smt4"], ["alloc_flags is LSF's"]),
    ("launcher.layout", "node", ["launcher.layout is LSF's"]),
    ("launcher.kind", "blaunch", ["'launcher.kind' must be one of 'srun' | 'torchrun', got 'blaunch'"]),
]
#: Cases that need a value the generic profile does not have (a GPU type for the 'none' case).
PROFILE_BASE = {"scheduler.slurm.gpus": {"scheduler.slurm.gpu_type": "a100"}}

SUBMIT = ["--machine", "slurm-gpu", "submit", "--nodes", "2", "--dry-run"]
#: (name, the bad arguments after SUBMIT, words the one-line refusal must hold).
OPTION_CASES = [
    ("qos-unknown", ["--qos", "premium"], ["QOS 'premium' is not one the slurm-gpu profile lists",
                                           "normal, debug"]),
    ("qos-nodes", ["--qos", "debug", "--nodes", "3"], ["QOS 'debug' allows at most 2 nodes", "--qos normal"]),
    ("qos-walltime", ["--qos", "debug", "--walltime", "1:00"], ["walltime 1:00 is above the 0:30 limit of QOS "
                                                                "'debug'", "--walltime 0:30 or less"]),
    ("qos-chain", ["--qos", "debug", "--until-complete"], ["QOS 'debug' does not allow chained jobs"]),
    ("partition-walltime", ["--walltime", "25:00"], ["walltime 25:00 is above the 24:00 limit"]),
    ("partition-unknown", ["--queue", "cpu"], ["queue 'cpu' does not exist on slurm-gpu", "Valid queues: gpu"]),
    ("largest-job", ["--nodes", "17"], ["node count 17 is above slurm-gpu's maximum job size of 16 nodes"]),
    ("launcher", ["--launcher", "blaunch"], ["--launcher 'blaunch' is not one Slurm starts ranks with",
                                             "srun, torchrun"]),
    ("layout", ["--layout", "node"], ["--layout node arranges jsrun's resource sets", "drop --layout"]),
    ("request", ["--request", "slots"], ["--request slots", "drop --request"]),
    ("app", ["--app", "parallel-96"], ["--app parallel-96", "drop --app"]),
    ("container", ["--container", "nvcr.io/pytorch"], ["--container nvcr.io/pytorch", "--sbatch-option"]),
    ("mem", ["--mem", "lots"], ["--mem 'lots' is not a memory size"]),
    ("sbatch-option-owned", ["--sbatch-option", "--signal=USR1@60"], ["'--signal=USR1@60'",
                                                                     "writes --signal itself",
                                                                     "--warning-minutes"]),
    ("sbatch-option-short", ["--sbatch-option", "-C gpu"], ["'-C gpu'", "long options"]),
    ("sbatch-option-hostile", ["--sbatch-option", "--comment=$(touch pwned)"], ["'--comment=$(touch pwned)'"]),
    ("bsub-option-spelling", ["--bsub-option", "--nodes=3"], ["'--nodes=3'", "writes --nodes itself"]),
    ("account-shape", ["--project", "m 1"], ["'m 1'"]),
]


def _profile_data(path: str, value) -> dict:
    base = yaml.safe_load((REPO / "envs" / "slurm-gpu.yaml").read_text())
    for other, extra in PROFILE_BASE.get(path, {}).items():
        base = _set(base, other, extra)
    return _set(dict(base, name="bad"), path, value)


@pytest.mark.parametrize("path,value,needles", PROFILE_CASES, ids=[f"{c[0]}={c[1]!r}" for c in PROFILE_CASES])
def test_a_bad_slurm_profile_value_is_refused(cli_env, tmp_path, path, value, needles):
    folder = tmp_path / "machines"
    folder.mkdir()
    profile = folder / "bad.yaml"
    profile.write_text(yaml.safe_dump(_profile_data(path, value)))
    env = dict(cli_env, SUMMIT_JOBS_MACHINES_PATH=str(folder))
    proc = run_cli(["--machine", "bad", "submit", "--nodes", "2", "--dry-run"], env, cwd=tmp_path,
                   timeout=stretched(20))
    assert_refused(proc, [str(profile), *needles], prefix="summit-jobs: error: machine profile ")
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert "#SBATCH" not in proc.stdout and not (tmp_path / "X").exists()


@pytest.mark.parametrize("name,args,needles", OPTION_CASES, ids=[c[0] for c in OPTION_CASES])
def test_a_bad_option_on_a_slurm_machine_is_refused(cli_env, tmp_path, name, args, needles):
    proc = run_cli([*SUBMIT, *args], cli_env, cwd=tmp_path, timeout=stretched(20))
    assert_refused(proc, needles, prefix="summit-jobs: error: ")
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert "#SBATCH" not in proc.stdout and not (tmp_path / "pwned").exists()


def test_the_profile_the_cases_spoil_plans_as_it_is(cli_env, tmp_path):
    """Each case above fails for its one spoilt value: the unspoilt profile and options plan."""
    proc = run_cli([*SUBMIT, "--qos", "debug", "--sbatch-option", "--gpu-bind=closest", "--mem", "1.5TB"], cli_env,
                   cwd=tmp_path, timeout=stretched(20))
    assert proc.returncode == 0, proc.stderr
    header = [line for line in proc.stdout.splitlines() if line.startswith("#SBATCH")]
    assert {"#SBATCH --qos=debug", "#SBATCH --gpu-bind=closest", "#SBATCH --mem=1536G",
            "#SBATCH --time=0:30:00"} <= set(header)
