"""Checkpoint writes in the background, one at a time, in the order they were asked for.

Why: rank 0 writing a checkpoint (the model and the optimiser's moments, about
200 MB for ResNet-50, with fsync) stalls every rank at the next collective.
At hundreds of GPUs an epoch is a few seconds, so a synchronous write costs a
noticeable share of the run. The writer takes a copy of the state in host
memory (fast) and lets a thread write it with the same ``checkpoint.save``
as before, while training goes on.

What stays exactly as the synchronous ``save``: a write starts only after
the previous one has ended, so the renames, the pruning of old step and
epoch checkpoints and ``best.pt`` happen in the order the steps were asked
for; a failure is the same exception, raised in the training thread at the
next ``submit``, ``wait`` or ``close``, once.

Why the thread is not a daemon: a daemon thread is stopped where it stands
when the interpreter exits, so a checkpoint asked for just before the end of
the job would be lost without a word. A non-daemon thread makes the
interpreter finish the write first, even when the training thread ends with
an exception. The trainer still calls ``wait``/``close`` before it exits, so
that a failed write ends the run with its one line and a non-zero status; a
failure that nobody collected is printed to stderr at exit (an ``atexit``
hook, which runs after the interpreter has joined the thread).
A process killed outright (SIGKILL, node failure) leaves at most a hidden
temporary, never a file under a final name; ``checkpoint.clean_leftovers``
removes it in the next run.
"""
from __future__ import annotations

import atexit
import copy
import os
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Dict, Optional

import torch

from trainer.loop.checkpoint import save, step_path

#: Values a copy may share with the original: nothing can change them in place.
IMMUTABLE = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device, torch.Size)


def cpu_copy(obj: Any, memo: Optional[Dict[int, Any]] = None) -> Any:
    """A deep copy of ``obj`` whose tensors are new tensors in host memory.

    Why every tensor is copied, even one already on the CPU: the optimiser
    updates parameters and moments in place right after ``submit`` returns,
    and the file must hold the values of the step it is named after. A
    tensor met twice is copied once (``memo``), as ``copy.deepcopy`` does;
    mappings keep their type and attributes (a module's ``state_dict`` carries
    its versions in ``_metadata``, which ``load_state_dict`` reads). Two
    different tensors that share one storage (tied weights) become two
    copies: the file is larger, the values loaded are the same.
    """
    memo = {} if memo is None else memo
    if isinstance(obj, IMMUTABLE):
        return obj
    if id(obj) in memo:
        return memo[id(obj)]
    if isinstance(obj, torch.Tensor):
        out = obj.detach().to("cpu", copy=True)
    elif isinstance(obj, dict):
        out = _copy_mapping(obj, memo)
    elif isinstance(obj, list):
        out = memo[id(obj)] = []
        out.extend(cpu_copy(v, memo) for v in obj)
    elif isinstance(obj, tuple):
        items = [cpu_copy(v, memo) for v in obj]
        out = type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)
    else:
        out = copy.deepcopy(obj)
    memo[id(obj)] = out
    return out


def _copy_mapping(obj: dict, memo: Dict[int, Any]) -> dict:
    """A dict (or OrderedDict) with copied values, of the same type and with its attributes."""
    out = type(obj)()
    memo[id(obj)] = out
    for k, v in obj.items():
        out[k] = cpu_copy(v, memo)
    extra = getattr(obj, "__dict__", None)
    if extra:
        out.__dict__.update(copy.deepcopy(extra))
    return out


class CheckpointWriter:
    """Rank 0's checkpoint writes, one at a time, in a background thread.

    Memory: while a write is in flight the host holds a second copy of the
    checkpoint (model, optimiser state, RNG states): about 200 MB for
    ResNet-50 with momentum. It is freed when the write ends, before the next
    copy is taken, so there are never more than two.

    One thread (the training loop) calls ``submit``, ``wait`` and ``close``;
    the writer's own thread only runs ``checkpoint.save``.
    """

    def __init__(self) -> None:
        self._thread: Optional[threading.Thread] = None
        self._error: Optional[BaseException] = None
        self._last: Optional[Path] = None
        self._closed = False
        atexit.register(self._report_uncollected)

    def submit(self, run_dir: os.PathLike, state: Dict, step: int, keep: int, epoch_end: Optional[int] = None,
               keep_epochs: int = 5, best: bool = False, then: Optional[Callable[[Dict], None]] = None) -> Path:
        """Start writing ``state`` as ``checkpoint.save`` would; return the step checkpoint's final path.

        Waits for the previous write first (and raises its failure, if any:
        this state is then not written). When this returns, ``state`` has
        been copied: the caller may change its tensors at once. ``then``, if
        given, runs in the writer's thread after the save, on the same copy
        (the weights-only exports), and its failure is raised as the save's.
        """
        if self._closed:
            raise RuntimeError("CheckpointWriter.submit after close()")
        self.wait()
        snapshot = cpu_copy(state)
        job = dict(run_dir=run_dir, state=snapshot, step=step, keep=keep, epoch_end=epoch_end,
                   keep_epochs=keep_epochs, best=best)
        self._thread = threading.Thread(target=self._write, args=(job, then), name="checkpoint-writer",
                                        daemon=False)
        self._thread.start()
        return step_path(run_dir, step)

    def _write(self, job: Dict, then: Optional[Callable[[Dict], None]] = None) -> None:
        """The thread's body: the synchronous save; its failure is kept for the training thread."""
        try:
            self._last = save(**job)
            if then is not None:
                then(job["state"])
        except BaseException as exc:  # CheckpointError is a SystemExit: it must not end only this thread
            self._error = exc

    def _report_uncollected(self) -> None:
        """At exit: a failed write that no ``wait`` raised is said on stderr rather than lost."""
        if self._error is not None:
            print(f"{self._error}", file=sys.stderr, flush=True)

    def wait(self) -> Optional[Path]:
        """Block until the write in flight (if any) has ended; raise its failure, once.

        Returns the path of the newest step checkpoint written by this writer,
        or None when none was.
        """
        if self._thread is not None:
            self._thread.join()  # interrupted (Ctrl-C): the thread stays known, a later wait joins it
            self._thread = None
        error, self._error = self._error, None
        if error is not None:
            raise error
        return self._last

    def close(self) -> Optional[Path]:
        """Wait for the last write (raising its failure) and refuse new ones; safe to call again."""
        self._closed = True
        try:
            return self.wait()
        finally:
            atexit.unregister(self._report_uncollected)

    def busy(self) -> bool:
        """Whether a write is in flight now (for logs and tests; ``wait`` is what callers need)."""
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> "CheckpointWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
