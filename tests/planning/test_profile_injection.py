"""No shell through a profile's scheduler section: every text key of ``scheduler`` (LSF's keys and
``scheduler.slurm``), found by walking the schema, gets shell payloads behind a value the key accepts.

Each case is either refused with the key named, or rendered into a script that really runs (bash, with
recording stand-ins for the scheduler's commands) without creating the canary file, and that reaches its
launch line. The keys come from the dataclasses of ``summit_jobs.profiles.machines``, so a key added later is
tested as soon as it exists; a text key without a valid example below fails
``test_every_text_key_of_the_scheduler_section_has_an_example`` until one is given.
"""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
import typing
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import pytest

from summit_jobs.errors import UserError
from summit_jobs.planning import render
from summit_jobs.planning.plan import JobOptions, make_plan
from summit_jobs.profiles import machines

#: Shell that would create the canary if it ran, each appended to a value the key accepts.
PAYLOADS = ("&touch>{c}&", ";touch {c}", "$(touch {c})", "`touch {c}`", "|touch {c}", ")&(touch {c}",
            " touch {c}", "'\"touch {c}")

#: A value each text key of the scheduler section accepts (the payloads are appended to it), and the
#: profile it is tried on. Keys whose type is a fixed set of words (Literal) are not text.
EXAMPLES: Dict[str, Tuple[str, str]] = {
    "scheduler.kind": ("lsf", "lsf-gpu"),
    "scheduler.account_flag": ("-P", "lsf-gpu"),
    "scheduler.account_name": ("project", "lsf-gpu"),
    "scheduler.launch_node_prefixes": ("batch", "lsf-gpu"),
    "scheduler.gpu.gmodel": ("NVIDIAH100", "lsf-gpu"),
    "scheduler.gpu.gmem": ("10G", "lsf-gpu"),
    "scheduler.memory.forms": ("-M", "lsf-gpu"),
    "scheduler.app": ("parallel-96", "lsf-gpu"),
    "scheduler.container": ("ubuntu:22.04", "lsf-gpu"),
    "scheduler.extra_directives": ("-B", "lsf-gpu"),
    "scheduler.slurm.qos": ("normal", "slurm-gpu"),
    "scheduler.slurm.qos.*.max_walltime": ("1:00", "slurm-gpu"),
    "scheduler.slurm.qos.*.description": ("production", "slurm-gpu"),
    "scheduler.slurm.constraint": ("gpu&hbm80g", "slurm-gpu"),
    "scheduler.slurm.nvme_constraint": ("nvme", "slurm-gpu"),
    "scheduler.slurm.gpu_type": ("a100", "slurm-gpu"),
    "scheduler.slurm.memory": ("0", "slurm-gpu"),
    "scheduler.slurm.extra_directives": ("--reservation=myresv", "slurm-gpu"),
    "scheduler.slurm.step_options": ("--gpu-bind=closest", "slurm-gpu"),
}

STUB = r'''#!/usr/bin/env python3
import json, os, sys
with open(os.environ["STUB_LOG"], "a") as fh:
    fh.write(json.dumps([os.path.basename(sys.argv[0])] + sys.argv[1:]) + "\n")
if os.path.basename(sys.argv[0]) == "scontrol":
    print("n1")
'''
STUBS = ("srun", "sbatch", "scontrol", "squeue", "bsub", "blaunch", "jsrun", "mpirun", "module", "torchrun")
LAUNCHERS = {"srun", "blaunch", "jsrun", "mpirun"}


def _is_text(tp: Any) -> bool:
    return tp is str


def text_keys(cls: type = machines.Scheduler, prefix: str = "scheduler") -> Iterator[Tuple[str, str]]:
    """``(dotted key, shape)`` for every text leaf under ``cls``: shape ``str``, ``tuple`` (of str),
    ``dict-key`` (a mapping's keys) or ``optional``; nested dataclasses are walked, mapping values too
    (their keys written ``*``)."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp, key = hints[f.name], f"{prefix}.{f.name}"
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if origin is typing.Union:
            inner = [a for a in args if a is not type(None)]
            if len(inner) == 1 and _is_text(inner[0]):
                yield key, "optional"
            continue
        if _is_text(tp):
            yield key, "str"
        elif origin is tuple and args and _is_text(args[0]):
            yield key, "tuple"
        elif origin is dict:
            if _is_text(args[0]):
                yield key, "dict-key"
            if dataclasses.is_dataclass(args[1]):
                yield from text_keys(args[1], f"{key}.*")
        elif dataclasses.is_dataclass(tp):
            yield from text_keys(tp, key)


def _override(key: str, shape: str, value: str) -> dict:
    """The profile override that puts ``value`` at ``key``."""
    parts = key.split(".")
    if "*" in parts:   # a value inside a mapping entry: one entry, named by the example of its mapping
        at = parts.index("*")
        mapping = ".".join(parts[:at])
        inner = {parts[at + 1]: value}
        if mapping == "scheduler.slurm.qos":
            inner["default"] = True
        parts = parts[:at] + [EXAMPLES[mapping][0]]
        leaf: Any = inner
    elif shape == "tuple":
        leaf = [value]
    elif shape == "dict-key":
        leaf = {value: {"default": True, "max_walltime": "24:00"}} if key == "scheduler.slurm.qos" else {value: ""}
    else:
        leaf = value
    for part in reversed(parts):
        leaf = {part: leaf}
    return leaf


def test_every_text_key_of_the_scheduler_section_has_an_example():
    keys = {k for k, _ in text_keys()}
    assert "scheduler.slurm.step_options" in keys and "scheduler.app" in keys and "scheduler.gpu.gmodel" in keys
    missing = sorted(keys - set(EXAMPLES))
    assert not missing, f"give these scheduler keys a valid example in EXAMPLES: {missing}"
    assert not set(EXAMPLES) - keys, "EXAMPLES names keys the schema no longer has"


def test_every_example_renders_and_reaches_its_script():
    """The examples themselves are accepted and show up in the script: a payload behind them is then tested
    where the value is really printed, not refused for an unrelated reason."""
    for key, shape in text_keys():
        value, machine = EXAMPLES[key]
        script = _render(machine, _override(key, shape, value), Path("/tmp/summit-jobs-example"))
        if key not in ("scheduler.account_name", "scheduler.launch_node_prefixes",
                       "scheduler.slurm.qos.*.max_walltime", "scheduler.slurm.qos.*.description",
                       "scheduler.slurm.nvme_constraint"):
            assert value.split(":")[0] in script, (key, value)


def _render(machine: str, override: dict, run_dir: Path) -> str:
    profile = machines.load(machine, json.loads(json.dumps(override)))
    profile = dataclasses.replace(profile, environment=dataclasses.replace(profile.environment,
                                                                           python=sys.executable))
    # --mem on LSF, so that scheduler.memory's forms are printed; on Slurm it would replace scheduler.slurm.memory.
    opts = JobOptions(nodes=2, run_dir=str(run_dir), python=sys.executable, project="abc123",
                      mem=None if profile.scheduler.kind == "slurm" else "64GB",
                      trainer_args=("--epochs", "1"), check_trainer_args=False)
    return render.render(make_plan(profile, opts))


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    base = tmp_path_factory.mktemp("profile-injection")
    bin_dir = base / "bin"
    bin_dir.mkdir()
    for name in STUBS:
        (bin_dir / name).write_text(STUB)
        (bin_dir / name).chmod(0o755)
    # The script starts a few Pythons: its time limit is a multiple of one start measured now, on this machine.
    began = time.monotonic()
    subprocess.run([sys.executable, "-c", "import summit_jobs.planning.render"], check=True)
    return {"base": base, "timeout": max(30.0, 300 * (time.monotonic() - began))}


def _cases() -> List[Tuple[str, str, str]]:
    return [(key, shape, payload) for key, shape in text_keys() for payload in PAYLOADS]


@pytest.mark.parametrize("key,shape,payload", _cases(), ids=lambda v: str(v)[:40])
def test_a_shell_payload_in_a_scheduler_key_never_runs(bench, key, shape, payload):
    base = bench["base"]
    canary = base / f"CANARY-{abs(hash((key, payload)))}"
    value = EXAMPLES[key][0] + payload.format(c=canary)
    run_dir = base / "runs" / f"r{abs(hash((key, payload)))}"
    try:
        script = _render(EXAMPLES[key][1], _override(key, shape, value), run_dir)
    except UserError as exc:
        named = key.replace(".*", "")
        assert named.split(".")[-1] in str(exc) or key.split(".")[-1] in str(exc), (key, str(exc))
        assert "Traceback" not in str(exc)
        return
    run_dir.mkdir(parents=True)
    path = run_dir / "job.sh"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0, script
    log = run_dir / "stub.log"
    log.write_text("")
    env = {"PATH": f"{base / 'bin'}:/usr/bin:/bin", "STUB_LOG": str(log), "HOME": str(run_dir),
           "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-2]", "LSB_JOBID": "7",
           "LSB_MCPU_HOSTS": "h1 96 h2 96", "LSB_DJOB_HOSTFILE": str(run_dir / "hosts"), "USER": "u"}
    (run_dir / "hosts").write_text("h1\n" * 96 + "h2\n" * 96)
    subprocess.run(["bash", str(path)], env=env, capture_output=True, cwd=run_dir, timeout=bench["timeout"])
    assert not canary.exists(), f"{key} = {value!r} ran as shell:\n{script}"
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert any(c[0] in LAUNCHERS for c in calls), (key, value, calls, script)
