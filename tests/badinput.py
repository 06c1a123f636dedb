"""The shared check of the bad-input suite (tests/*/test_bad_input_*.py).

Each of those files holds a table of cases: a command line a user could type
(or a file a user could write) and the words the refusal must contain. Every
case must end with a non-zero exit, no Python traceback, nothing on stdout
that looks like success, and a message naming the value that was refused.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterable, Optional, Sequence

REPO = Path(__file__).resolve().parent.parent


def trainer_env(**extra: str) -> Dict[str, str]:
    """The environment of a one-process ``python -m trainer``: this process's, less any launcher's rank
    variables, with the repository importable and one OpenMP thread. That is the rank zygote's import-time
    environment (tests/trainer_utils.rank_env), so such a trainer is forked, not exec'd."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JSM_", "OMPI_", "LSB_", "HOROVOD_"))}
    env.update({"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", **extra})
    return env


def assert_refused(proc: subprocess.CompletedProcess, needles: Iterable[str] = (), *,
                   prefix: Optional[str] = None) -> None:
    """``proc`` refused its input cleanly: non-zero, no traceback, every needle in stderr."""
    out, err = proc.stdout or "", proc.stderr or ""
    assert proc.returncode not in (0, None), (proc.returncode, out[-2000:], err[-2000:])
    assert "Traceback (most recent call last)" not in err + out, err[-4000:]
    for needle in needles:
        assert needle in err, (needle, err[-2000:])
    if prefix is not None:
        assert prefix in err, (prefix, err[-2000:])


def run_module(module: str, args: Sequence[str], env: dict, cwd=None, timeout: float = 120,
               input: Optional[str] = None, fresh: bool = False) -> subprocess.CompletedProcess:
    """``python -m module args`` as a user would run it (the real entry point, a real process; the trainer and
    its modules forked by the rank zygote where it can be, tests/rank_zygote.py, unless ``fresh``)."""
    from rank_zygote import forks_module
    if forks_module(module) and input is None:
        from trainer_utils import run_trainer
        return run_trainer(args, env, cwd=cwd, timeout=timeout, fresh=fresh, module=module)
    return subprocess.run([sys.executable, "-m", module, *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, input=input)


#: ``python -m MODULE`` (runpy, as ``-m`` runs it) in a process where ``import torch`` raises ImportError.
_WITHOUT_TORCH = ("import runpy, sys; sys.modules['torch'] = None; module = sys.argv.pop(1); "
                  "runpy.run_module(module, run_name='__main__', alter_sys=True)")


def run_module_without_torch(module: str, args: Sequence[str], env: dict, cwd=None,
                             timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m module args`` where torch cannot be imported: a clean refusal from it shows that the
    refusal comes before torch's import (a second of CPU a user would wait for nothing)."""
    return subprocess.run([sys.executable, "-c", _WITHOUT_TORCH, module, *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def option_names(command) -> set:
    """Each parameter of a click command as the bad-input tables name it: an argument by its name, an
    option by its long spelling (its first one when it has none)."""
    import click
    out = set()
    for p in command.params:
        if isinstance(p, click.Argument):
            out.add(p.name)
        elif p.name != "help":
            out.add(next((o for o in p.opts if o.startswith("--")), p.opts[0]))
    return out

