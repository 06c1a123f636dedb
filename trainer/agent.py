"""torchrun's agent, made to outlive the warning signal. Torch-free until it runs torchrun.

``python -m trainer.agent [torchrun options] PROGRAM ...`` runs
``python -m torch.distributed.run`` with the same arguments in its place
(exec: same pid), with the warning signal (SIGUSR2, LSF's ``-wa`` and the run
limit's) ignored.

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
bkill's INT and TERM are left to torchrun, which passes them to the workers.
"""
from __future__ import annotations

import os
import signal
import sys
from typing import List, Optional

#: The signals the agent ignores: the warning (-wa USR2) and the run limit's USR2.
IGNORED = (signal.SIGUSR2,)


def main(argv: Optional[List[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    for sig in IGNORED:
        signal.signal(sig, signal.SIG_IGN)
    try:
        os.execv(sys.executable, [sys.executable, "-m", "torch.distributed.run", *args])
    except OSError as exc:
        print(f"trainer.agent: cannot start torchrun with {sys.executable}: {exc.strerror or exc}", file=sys.stderr)
        return 127
    return 0  # not reached


if __name__ == "__main__":
    raise SystemExit(main())
