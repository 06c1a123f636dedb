"""Stop signals caught from the first line of the rank process.

Importing torch takes seconds; a warning signal (LSF's -wa USR2, or the USR2
of the run limit itself) or bkill's INT and TERM (IBM LSF sends SIGINT, then
SIGTERM, then SIGKILL) arriving in that window would otherwise kill the rank with the default
action instead of asking it to stop cleanly. ``catch_early`` records them
until the trainer's own handler takes over and reads ``EARLY``.
"""
import signal
from typing import List

STOP_SIGNALS = (signal.SIGUSR2, signal.SIGTERM, signal.SIGINT)
EARLY: List[int] = []


def catch_early() -> None:
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda signum, frame: EARLY.append(signum))
