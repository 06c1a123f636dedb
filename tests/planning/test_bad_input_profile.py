"""A bad value for every key of a machine profile: refused in one line naming the key, the file and the rule.

Profiles are data a site writes (or copies and edits); before, a negative GPU
count, a throughput of -5 clips/s or an NVMe of -1 GB was accepted and planned
with. Each case writes a copy of the Summit profile with one key spoiled into a
user profile folder and plans a job with it through the real entry point; a
test checks that the table holds a case for every key the schema has, so a new
key cannot join without its range or shape being tried.
"""
from __future__ import annotations

import copy
import dataclasses
from typing import Union, get_args, get_origin, get_type_hints

import pytest
import yaml

from badinput import assert_refused
from helpers import REPO, run_cli
from slurm_cluster import stretched   # a quiet machine's seconds -> here, now

#: (key path, bad value, words the refusal must hold besides the file's path). Numbers name their range.
CASES = [
    ("name", "a b", ["name = 'a b'"]),
    ("description", [1], ["'description' must be text"]),
    ("scheduler.submit_mode", "pipe", ["'scheduler.submit_mode' must be one of"]),
    ("scheduler.account_flag", "-A", ["scheduler.account_flag '-A' is not LSF's", "-P (project) or -G"]),
    ("scheduler.account_flag", "-P x", ["scheduler.account_flag = '-P x' must be one option of the scheduler's "
                                        "submit command"]),
    ("scheduler.account_name", [1], ["'scheduler.account_name' must be text"]),
    ("scheduler.account_required", "maybe", ["'scheduler.account_required' must be true or false"]),
    ("scheduler.embedded", "maybe", ["'scheduler.embedded' must be true or false"]),
    ("scheduler.csm", 1, ["'scheduler.csm' must be true or false"]),
    ("scheduler.launch_node_prefixes", ["batch node"], ["scheduler.launch_node_prefixes[0]"]),
    ("scheduler.warning_minutes", 0, ["'scheduler.warning_minutes' = 0 is out of range", ">= 1"]),
    ("scheduler.virtual_nodes", -2, ["'scheduler.virtual_nodes' = -2 is out of range", ">= 1"]),
    ("scheduler.request", "cores", ["'scheduler.request' must be one of"]),
    ("scheduler.slots_per_host", 0, ["'scheduler.slots_per_host' = 0 is out of range", ">= 1"]),
    ("scheduler.gpu.mode", "exclusive", ["'scheduler.gpu.mode' must be one of"]),
    ("scheduler.gpu.j_exclusive", "maybe", ["'scheduler.gpu.j_exclusive' must be true or false"]),
    ("scheduler.gpu.mps", "maybe", ["'scheduler.gpu.mps' must be true or false"]),
    ("scheduler.gpu.gmodel", "", ["'scheduler.gpu.gmodel' is empty"]),
    ("scheduler.gpu.gmem", "16G;touch X", ["scheduler.gpu.gmem"]),
    ("scheduler.gpu.legacy_rusage", "maybe", ["'scheduler.gpu.legacy_rusage' must be true or false"]),
    ("scheduler.memory.unit", "PB", ["'scheduler.memory.unit' must be one of"]),
    ("scheduler.memory.per", "node", ["'scheduler.memory.per' must be one of"]),
    ("scheduler.memory.forms", ["-X"], ["scheduler.memory.forms[0]"]),
    ("scheduler.app", "", ["'scheduler.app' is empty"]),
    ("scheduler.container", "", ["'scheduler.container' is empty"]),
    ("scheduler.extra_directives", ["-J other"], ["scheduler.extra_directives[0]", "writes -J itself"]),
    ("scheduler.own", {"select": 2}, ["unknown key 'scheduler.own'", "scheduler.<kind>"]),
    ("scheduler.lsf", {"queue": "x"}, ["scheduler.lsf is not a section", "remove scheduler.lsf"]),
    ("scheduler.kind", "pbs", ["scheduler.kind: scheduler 'pbs' is not one this tool drives; known: lsf, slurm"]),
    # A Slurm section on an LSF profile; each key of the section is tried on a Slurm profile in
    # tests/schedulers/slurm/test_bad_input_slurm.py.
    ("scheduler.slurm", {"partition": False}, ["scheduler.slurm is read only when scheduler.kind is slurm"]),
    ("node.gpus", -1, ["'node.gpus' = -1 is out of range", ">= 0"]),
    ("node.cores", 0, ["'node.cores' = 0 is out of range", ">= 1"]),
    ("node.sockets", 0, ["'node.sockets' = 0 is out of range", ">= 1"]),
    ("node.smt", -4, ["'node.smt' = -4 is out of range", ">= 1"]),
    ("node.cpu_slots", -1, ["'node.cpu_slots' = -1 is out of range", ">= 0"]),
    ("node.memory_gb", -512, ["'node.memory_gb' = -512.0 is out of range", ">= 0"]),
    ("node.nvme_path", "", ["'node.nvme_path' is empty"]),
    ("node.nvme_capacity_gb", -1, ["'node.nvme_capacity_gb' = -1.0 is out of range", ">= 0"]),
    ("node.nvme_read_gbps", -5.5, ["'node.nvme_read_gbps' = -5.5 is out of range", ">= 0"]),
    ("node.nvme_write_gbps", -2.1, ["'node.nvme_write_gbps' = -2.1 is out of range", ">= 0"]),
    ("max_nodes", 0, ["'max_nodes' = 0 is out of range", ">= 1"]),
    ("walltime_bins[0].bin", 0, ["'walltime_bins[0].bin' = 0 is out of range", ">= 1"]),
    ("walltime_bins[0].min_nodes", -1, ["'walltime_bins[0].min_nodes' = -1 is out of range", ">= 1"]),
    ("walltime_bins[0].max_nodes", 0, ["'walltime_bins[0].max_nodes' = 0 is out of range", ">= 1"]),
    ("walltime_bins[0].max_walltime", "24:0", ["walltime_bins[0].max_walltime '24:0'", "[hours:]minutes"]),
    ("queues.batch.description", [1], ["'queues.batch.description' must be text"]),
    ("queues.batch.default", "maybe", ["'queues.batch.default' must be true or false"]),
    ("queues.batch.max_walltime", "soon", ["queues.batch.max_walltime 'soon'", "[hours:]minutes"]),
    ("queues.batch.use_bins", "maybe", ["'queues.batch.use_bins' must be true or false"]),
    ("queues.batch.allowed_bins", [0, 5], ["'queues.batch.allowed_bins[0]' = 0 is out of range", ">= 1"]),
    ("queues.batch.max_nodes", 0, ["'queues.batch.max_nodes' = 0 is out of range", ">= 1"]),
    ("queues.batch.chaining", "maybe", ["'queues.batch.chaining' must be true or false"]),
    ("queues.batch.max_jobs_per_user", 0, ["'queues.batch.max_jobs_per_user' = 0 is out of range", ">= 1"]),
    ("queues.batch.max_queued_per_user", -1, ["'queues.batch.max_queued_per_user' = -1 is out of range", ">= 1"]),
    ("alloc_flags", ["smt4 nvme"], ["alloc_flags[0]"]),
    ("launcher.kind", "srun", ["'launcher.kind' must be one of"]),
    ("launcher.layout", "socket", ["'launcher.layout' must be one of"]),
    ("launcher.smpiargs", "-gpu\n#BSUB -q x", ["launcher.smpiargs", "line break"]),
    ("environment.python", "", ["environment.python is empty"]),
    ("environment.modules", ["cuda; touch X"], ["environment.modules[0]"]),
    ("environment.setup", ["a\nb"], ["environment.setup[0]", "line break"]),
    ("environment.variables", {"HOROVOD_FUSION_THRESHOLD": "lots"},
     ["environment.variables.HOROVOD_FUSION_THRESHOLD = 'lots'", "byte count"]),
    ("performance.clips_per_second_per_gpu", -5,
     ["'performance.clips_per_second_per_gpu' = -5.0 is out of range", ">= 0"]),
    ("performance.pfs_read_gbps", -10, ["'performance.pfs_read_gbps' = -10.0 is out of range", ">= 0"]),
    ("performance.allreduce_bandwidth_gbps", -23,
     ["'performance.allreduce_bandwidth_gbps' = -23.0 is out of range", ">= 0"]),
    ("performance.allreduce_latency_us", -5, ["'performance.allreduce_latency_us' = -5.0 is out of range", ">= 0"]),
    ("performance.comm_overlap", 1.5, ["'performance.comm_overlap' = 1.5 is out of range", ">= 0 and <= 1"]),
    ("performance.single_node_hours", 0, ["'performance.single_node_hours' = 0.0 is out of range", "> 0"]),
    ("performance.startup_seconds", -10, ["'performance.startup_seconds' = -10.0 is out of range", ">= 0"]),
    ("performance.input_clips_per_second_per_core", -118,
     ["'performance.input_clips_per_second_per_core' = -118.0 is out of range", ">= 0"]),
    ("performance.input_cores_per_node", -1, ["'performance.input_cores_per_node' = -1 is out of range", ">= 0"]),
    ("performance.epoch_start_seconds", -0.45, ["'performance.epoch_start_seconds' = -0.45 is out of range", ">= 0"]),
    ("ssh.host", "", ["'ssh.host' is empty"]),
    ("ssh.user", "", ["'ssh.user' is empty"]),
    ("ssh.port", 0, ["'ssh.port' = 0 is out of range", ">= 1 and <= 65535"]),
    ("ssh.key_file", "", ["'ssh.key_file' is empty"]),
    ("ssh.known_hosts", "", ["'ssh.known_hosts' is empty"]),
    ("ssh.remote_dir", "", ["'ssh.remote_dir' is empty"]),
    ("recipe.clips_per_gpu", 0, ["'recipe.clips_per_gpu' = 0 is out of range", ">= 1"]),
    ("recipe.lr_per_8_clips", 0, ["'recipe.lr_per_8_clips' = 0.0 is out of range", "> 0"]),
    ("recipe.epochs", 0, ["'recipe.epochs' = 0 is out of range", ">= 1"]),
    ("recipe.warmup_epochs", -1, ["'recipe.warmup_epochs' = -1.0 is out of range", ">= 0"]),
    ("recipe.momentum", 1, ["'recipe.momentum' = 1.0 is out of range", ">= 0 and < 1"]),
    ("recipe.weight_decay", -0.0001, ["'recipe.weight_decay' = -0.0001 is out of range", ">= 0"]),
    ("recipe.arch", "resnet51", ["recipe.arch = 'resnet51'", "resnet50"]),
    ("recipe.num_segments", 0, ["'recipe.num_segments' = 0 is out of range", ">= 1"]),
    ("recipe.num_classes", 0, ["'recipe.num_classes' = 0 is out of range", ">= 1"]),
    ("recipe.engine", "mpi", ["'recipe.engine' must be one of"]),
    ("quota_nodes", 0, ["'quota_nodes' = 0 is out of range", ">= 1"]),
    ("runs_dir", "", ["'runs_dir' is empty"]),
    ("compute_read_only_prefixes", ["ccs/home"], ["compute_read_only_prefixes[0] = 'ccs/home'", "absolute"]),
    ("writable_hint", [1], ["'writable_hint' must be text"]),
    ("node_local_prefixes", ["/"], ["node_local_prefixes[0] = '/'", "absolute"]),
    ("source", "/etc/passwd", ["unknown key 'source'"]),
    ("retired", "", ["'retired' is empty"]),
    ("reference", {"url": "x"}, ["'reference' must be text"]),
    # Values no single key's shape catches: non-finite numbers, a boolean for a count, keys at odds.
    ("performance.comm_overlap", float("nan"), ["'performance.comm_overlap' must be a finite number"]),
    ("node.nvme_capacity_gb", float("inf"), ["'node.nvme_capacity_gb' must be a finite number"]),
    ("node.gpus", True, ["'node.gpus' must be a whole number"]),
    ("walltime_bins[4].min_nodes", 50, ["walltime_bins[4] (bin 5) has min_nodes 50 above max_nodes 45"]),
    ("queues.killable.allowed_bins", [4, 9], ["queues.killable.allowed_bins names bin 9"]),
    ("recipe.warmup_epochs", 200, ["recipe.warmup_epochs = 200 is above recipe.epochs = 100"]),
]


def _set(data: dict, path: str, value) -> dict:
    """``data`` with the value at ``path`` (dots, and [i] for list items) replaced."""
    out = copy.deepcopy(data)
    node, parts = out, path.replace("[", ".[").split(".")
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        key = int(part[1:-1]) if part.startswith("[") else part
        if last:
            node[key] = value
        else:
            if not isinstance(key, int):
                node = node.setdefault(key, {})
            else:
                node = node[key]
    return out


def _label(case) -> str:
    return f"{case[0]}={case[1]!r}"


@pytest.mark.parametrize("path,value,needles", CASES, ids=[_label(c) for c in CASES])
def test_a_bad_profile_value_is_refused(cli_env, tmp_path, path, value, needles):
    base = yaml.safe_load((REPO / "envs" / "summit.yaml").read_text())
    folder = tmp_path / "machines"
    folder.mkdir()
    profile = folder / "bad.yaml"
    profile.write_text(yaml.safe_dump(_set(dict(base, name="bad"), path, value)))
    env = dict(cli_env, SUMMIT_JOBS_MACHINES_PATH=str(folder))
    proc = run_cli(["--machine", "bad", "submit", "--nodes", "2", "--project", "ABC123", "--dry-run"], env,
                   cwd=tmp_path, timeout=stretched(20))
    assert_refused(proc, [str(profile), *needles], prefix="summit-jobs: error: machine profile ")
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert "#BSUB" not in proc.stdout and not (tmp_path / "X").exists()


@pytest.mark.parametrize("name", sorted(p.stem for p in (REPO / "envs").glob("*.yaml")))
def test_every_shipped_profile_is_within_its_ranges(cli_env, tmp_path, name):
    proc = run_cli(["--machine", name, "config"], cli_env, cwd=tmp_path, timeout=stretched(20))
    assert proc.returncode == 0, proc.stderr


def _leaves(tp, prefix: str = ""):
    """Every key path of the profile schema: a queue's keys under queues.batch, a bin's under walltime_bins[0]."""
    hints = get_type_hints(tp)
    for f in dataclasses.fields(tp):
        hint = hints[f.name]
        inner = next(a for a in get_args(hint) if a is not type(None)) if get_origin(hint) is Union else hint
        path = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(inner):
            yield from _leaves(inner, path + ".")
        elif get_origin(inner) is dict and dataclasses.is_dataclass(get_args(inner)[1]):
            yield from _leaves(get_args(inner)[1], path + ".batch.")
        elif get_origin(inner) is tuple and dataclasses.is_dataclass(get_args(inner)[0]):
            yield from _leaves(get_args(inner)[0], path + "[0].")
        else:
            yield path


def test_every_profile_key_has_a_bad_value():
    """Keys of the Slurm section are tried on a Slurm profile (tests/schedulers/slurm/test_bad_input_slurm.py)."""
    from summit_jobs.profiles.machines import Profile
    from test_bad_input_slurm import PROFILE_CASES as SLURM_CASES
    keys = set(_leaves(Profile))
    assert len(keys) > 80
    assert keys - {path for path, _, _ in CASES + SLURM_CASES} == set()


def test_the_schema_states_a_range_for_every_number():
    """A number without a range is a number a profile may set to anything: each says what it allows."""
    from summit_jobs.profiles.machines import Profile
    from summit_jobs.profiles.schema import RANGE

    def numbers(tp, prefix=""):
        hints = get_type_hints(tp)
        for f in dataclasses.fields(tp):
            hint = hints[f.name]
            inner = next(a for a in get_args(hint) if a is not type(None)) if get_origin(hint) is Union else hint
            if dataclasses.is_dataclass(inner):
                yield from numbers(inner, f"{prefix}{f.name}.")
            elif get_origin(inner) is dict and dataclasses.is_dataclass(get_args(inner)[1]):
                yield from numbers(get_args(inner)[1], f"{prefix}{f.name}.NAME.")
            elif get_origin(inner) is tuple and dataclasses.is_dataclass(get_args(inner)[0]):
                yield from numbers(get_args(inner)[0], f"{prefix}{f.name}[].")
            elif inner in (int, float) or (get_origin(inner) is tuple and get_args(inner)[0] in (int, float)):
                yield f"{prefix}{f.name}", RANGE in f.metadata

    missing = [name for name, has in numbers(Profile) if not has]
    assert missing == []


def test_the_brief_examples_name_key_file_and_range(cli_env, tmp_path):
    """gpus: -1 in a user's profile folder: the message a site admin reads."""
    folder = tmp_path / "machines"
    folder.mkdir()
    text = (REPO / "envs" / "lsf-gpu.yaml").read_text()
    (folder / "mysite.yaml").write_text(text.replace("name: lsf-gpu", "name: mysite").replace("gpus: 4", "gpus: -1"))
    env = dict(cli_env, SUMMIT_JOBS_MACHINES_PATH=str(folder))
    proc = run_cli(["--machine", "mysite", "machines"], env, cwd=tmp_path, timeout=stretched(20))
    assert_refused(proc, [f"{folder / 'mysite.yaml'}: 'node.gpus' = -1 is out of range: give a number >= 0."])
