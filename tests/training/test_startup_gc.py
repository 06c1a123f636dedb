"""trainer.loop.startup: a rank's imports run with the cyclic collector paused, then what they made is frozen
and the collector runs again for the rest of the run. Each case runs in a Python of its own: the collector's
state is the process's."""
from __future__ import annotations

import subprocess
import sys

from trainer_utils import REPO

PROGRAM = """
import gc, sys
from trainer.loop import startup
startup.pause()
paused = not gc.isenabled()
import torch
startup.imports_done(load=startup.SET_UP_IMPORTS + ("no_such_module_here",))
frozen = gc.get_freeze_count()
startup.imports_done(load=startup.SET_UP_IMPORTS)
print(paused, gc.isenabled(), "torch._dynamo" in sys.modules, frozen > 100000, gc.get_freeze_count() == frozen)
"""

IN_PROCESS = """
import gc
from trainer.loop import startup
startup.imports_done(load=("json",))
print(gc.isenabled(), gc.get_freeze_count())
"""


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], cwd=str(REPO), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_imports_run_paused_then_are_frozen_and_the_collector_runs_again():
    """Paused, then the set-up's imports (a module that is missing is passed over) are loaded, frozen (torch's
    and dynamo's objects: well over 100,000) and the collector is on again; a second call changes nothing."""
    assert _run(PROGRAM) == ["True", "True", "True", "True", "True"]


def test_without_a_pause_nothing_is_frozen():
    """The trainer run in-process (tests, bench/) never paused: its collector is left as it was, nothing frozen."""
    assert _run(IN_PROCESS) == ["True", "0"]

