"""A rank's start-up with Python's cyclic garbage collector paused.

Why: starting a rank imports torch, and its first optimiser or DistributedDataParallel imports torch._dynamo:
about 465,000 objects that the collector tracks (modules, classes, functions), none of them garbage, which the collector would scan
again and again while they are made, and again in each later full collection. Paused from the first line of
``python -m trainer`` until the imports are done, then ``gc.freeze()`` leaves what the imports made out of every
later collection, and the collector runs as usual on the rest of the run: the model, data and optimiser are
made after the freeze, so nothing of theirs can be kept alive by it. A rank's start-up and a 4-step run on a CPU went
from 2.71 to 2.18 CPU-seconds (bench/rank_startup.py); on thousands of ranks each of them pays it.
"""
from __future__ import annotations

import gc
import importlib
from typing import List, Sequence


#: What the set-up imports on its first use of torch: every optimiser, DistributedDataParallel and the model's
#: weight initialisation under a device context import torch._dynamo (torch 2.x).
SET_UP_IMPORTS = ("torch._dynamo",)


def pause() -> None:
    """The first call of ``python -m trainer``: no cyclic collection until ``imports_done``."""
    gc.disable()


def imports_done(load: Sequence[str] = SET_UP_IMPORTS) -> None:
    """The imports are over: ``load`` (modules the set-up would import a moment later anyway) is imported
    first, what they all made is frozen, and the collector runs again. Idempotent, and a no-op where ``pause``
    was not called (the trainer run in-process by tests and bench/)."""
    if gc.isenabled():
        return
    for name in load:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    gc.freeze()
    gc.enable()


#: What ``hold_until_exit`` keeps.
_HELD: List[object] = []


def hold_until_exit(obj: object) -> None:
    """Keep ``obj`` (a trainer or engine holding a torch.distributed process group) referenced until the
    process leaves with os._exit (trainer/__main__.py), so its C++ destructors never run.

    Why: freeing DDP's Reducer frees the gloo process group, whose destructor joins gloo's worker thread while
    the freeing thread holds the GIL; a worker thread still finishing an allreduce needs the GIL to release a
    tensor, and both wait for ever. Seen as a rank that wrote COMPLETE and never exited (py-spy: the main
    thread in ~ProcessGroupGloo / std::thread::join, gloo's runLoop in gil_scoped_acquire), about once in a few
    hundred one-rank runs on a loaded 2-core machine. Everything is saved and closed before this; nothing is
    lost by not freeing it."""
    _HELD.append(obj)
