"""Bad input to --compile: each refused in one line naming the value and the fix, no traceback.

The compiler case is a machine without a working C++ compiler (inductor builds its CPU kernels with one):
CXX names a program that fails, as a login image without build tools would. It is refused at set-up, before
the run record is written and before anything is compiled.
"""
from __future__ import annotations

import os
import resource
from pathlib import Path

import pytest

from badinput import assert_refused, run_module
from trainer_utils import make_dataset, tiny_args

from trainer.rundir import RUN_CONFIG

#: CPU seconds (user and system) the trainer may spend refusing a machine without a C++ compiler: its imports,
#: the set-up before the check and inductor's compiler search take about 2.5 here; at the first compile, 13 to 15.
NO_COMPILER_CPU_S = 9.0


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("compilebad") / "data", train=8, val=4, frames=8, size=32)


CASES = [
    ("unknown-mode", ["--compile", "fastest"], {}, ["--compile", "fastest", "max-autotune"]),
    ("unknown-backend", ["--compile", "default", "--compile-backend", "tensorrt"], {},
     ["--compile-backend", "tensorrt", "aot_eager"]),
    ("no-c-compiler", ["--compile", "default"], {"CXX": "/bin/false"},
     ["--compile default", "could not compile", "/bin/false", "--compile off", "aot_eager"]),
]


@pytest.mark.parametrize("name,args,env,needles", CASES, ids=[c[0] for c in CASES])
def test_bad_compile_input_is_refused_in_one_line(data, tmp_path, name, args, env, needles):
    run = tmp_path / "run"
    before = _children_cpu_s()
    proc = run_module("trainer", tiny_args(run, data, max_steps=1) + args,
                      dict(os.environ, RANK="0", WORLD_SIZE="1", **env), timeout=300,
                      fresh=True)  # exec'd: its CPU time counts in this process's RUSAGE_CHILDREN
    spent = _children_cpu_s() - before
    assert_refused(proc, needles)
    last = proc.stderr.strip().splitlines()[-1]
    assert all(n in last for n in needles), proc.stderr[-3000:]  # the whole refusal on its last line
    if name == "no-c-compiler":  # refused at set-up: no run record, no training step, so no compile
        assert not (run / RUN_CONFIG).exists(), proc.stderr[-3000:]
        assert spent < NO_COMPILER_CPU_S, f"the refusal took {spent:.1f} CPU-s: {proc.stderr[-3000:]}"


def _children_cpu_s() -> float:
    """CPU seconds of this process's finished children (the trainer, once run_module has waited for it)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
