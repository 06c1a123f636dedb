"""torchrun's agent, made to outlive the warning signal. Torch-free until it runs torchrun.

``python -m trainer.agent [torchrun options] PROGRAM ...`` runs torchrun
(``torch.distributed.run``) with the same arguments in this process, with the
warning signal (SIGUSR2, LSF's ``-wa`` and the run limit's) ignored.

Why: torchrun's agent handles SIGTERM, SIGINT, SIGHUP and SIGQUIT only, so a
SIGUSR2 ends it at once (status 140) and its workers, which torchrun starts in
sessions of their own, are left running without it. IBM LSF sends the warning
to every process of the job, the agents included. An ignored signal stays
ignored across exec, so the agent lives on, and its workers inherit the
ignored disposition until they install a handler of their own: the trainer
does at its first line (trainer.loop.signals), ``trainer.loop.chain.Chain`` does when it
is created. A worker learns of the warning from the signal where LSF sends it
to every process, and from the warning file the job script writes into the
run directory where only the script gets it (trainer.rundir.warning_name).
bkill's INT and TERM (and scancel's) are left to torchrun, which passes them
to the workers, waits for them, then raises its SignalException: uncaught, a
traceback in every cancelled job's log and exit status 1, as if the job had
failed. The agent ends instead with one line and the signal's status
(128 + its number), as a process killed by it would report.

A cancel often reaches the agent twice (bkill signals the job's processes and
blaunch passes the signal to its task as well; LSF follows INT with TERM).
torchrun's handler raises on every one, so the second lands inside its own
shutdown, most often in a logging call, and logging prints the exception's
traceback ("--- Logging error ---"). The agent's handler does not raise while
torchrun's shutdown is on the stack, nor while the first signal's
SignalException is being handled on the way there (torchrun's agent catches
it, logs a line, then shuts down): that shutdown already passes the first
signal to the workers and ends them with SIGKILL after its own timeout.
Anywhere else it raises, every time: a first signal that a logging call
swallowed is not the last word.
"""
from __future__ import annotations

import importlib
import os
import signal
import sys
from types import FrameType, ModuleType
from typing import List, Optional

#: The module whose ``_terminate_process_handler`` torchrun installs (the same in torch 2.0.1 and 2.13).
SIGNAL_MODULE = "torch.distributed.elastic.multiprocessing.api"
#: The signals the agent ignores: the warning (-wa USR2) and the run limit's USR2.
IGNORED = (signal.SIGUSR2,)


#: Functions of torchrun's shutdown (the agent's ``_shutdown``, the process context's ``close``/``_close``):
#: a signal that arrives while one of them runs is let pass.
SHUTDOWN_FUNCTIONS = ("_shutdown", "close", "_close")


def in_shutdown(frame: Optional[FrameType]) -> bool:
    """Whether torchrun's shutdown is on the stack of ``frame`` (the frame a signal interrupted)."""
    while frame is not None:
        code = frame.f_code
        if code.co_name in SHUTDOWN_FUNCTIONS and "distributed/elastic" in code.co_filename.replace(os.sep, "/"):
            return True
        frame = frame.f_back
    return False


def raise_outside_shutdown(api: ModuleType) -> None:
    """Make torchrun's signal handler (``api._terminate_process_handler``, looked up when torchrun starts
    its workers) raise its SignalException unless torchrun is shutting down already."""

    def handler(signum: int, frame: Optional[FrameType]) -> None:
        # A SignalException being handled where the signal landed: torchrun caught the first signal's and is
        # on its way to the shutdown (it logs a line first, where a second raise became a logging error).
        if in_shutdown(frame) or isinstance(sys.exc_info()[1], api.SignalException):
            return
        sigval = signal.Signals(signum)
        raise api.SignalException(f"Process {os.getpid()} got signal: {sigval}", sigval=sigval)

    api._terminate_process_handler = handler


def without_ignored(names: str) -> str:
    """torchrun's TORCHELASTIC_SIGNALS_TO_HANDLE (a site may set it) without the signals the agent ignores;
    torchrun's default when nothing else is left."""
    kept = [n.strip() for n in names.split(",") if n.strip() and n.strip() not in {s.name for s in IGNORED}]
    return ",".join(kept) or "SIGTERM,SIGINT,SIGHUP,SIGQUIT"


def main(argv: Optional[List[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    for sig in IGNORED:
        signal.signal(sig, signal.SIG_IGN)
    # torchrun installs its handler for the signals this names: never for the ignored warning signal.
    if os.environ.get("TORCHELASTIC_SIGNALS_TO_HANDLE") is not None:
        os.environ["TORCHELASTIC_SIGNALS_TO_HANDLE"] = without_ignored(os.environ["TORCHELASTIC_SIGNALS_TO_HANDLE"])
    try:
        from torch.distributed.elastic.multiprocessing.api import SignalException
        from torch.distributed.run import main as torchrun
    except ImportError as exc:
        print(f"trainer.agent: cannot start torchrun with {sys.executable}: {exc}", file=sys.stderr)
        return 127
    raise_outside_shutdown(importlib.import_module(SIGNAL_MODULE))
    sys.argv[0] = "torchrun"
    try:
        torchrun(args)
    except SignalException as exc:
        name = getattr(exc.sigval, "name", str(exc.sigval))
        print(f"trainer.agent: torchrun stopped by {name}: its workers were passed the signal and have ended",
              file=sys.stderr)
        return 128 + int(exc.sigval)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
