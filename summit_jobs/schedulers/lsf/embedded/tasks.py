"""Start a job step's tasks as real processes and see them to the end: shared by jsrun and blaunch.

Each task gets the caller's environment plus its own variables. Why the
failure rule (a task that exits non-zero gets the others TERM, then KILL after
the kill grace): a distributed step with one rank gone never finishes, and a
step that hangs until the run limit wastes the allocation. USR1/USR2/TERM/INT/
HUP received by the launcher are forwarded to every task, so the warning
signal and bkill reach the ranks. Tasks write straight to the launcher's
stdout/stderr. A task on a virtual node with a host name (vnode_ns) starts in
namespaces of its own where gethostname() is that name and the nodes' names
resolve to their addresses.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Dict, List, Optional

from summit_jobs.schedulers.lsf.embedded import state

FORWARDED = (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def run(command: List[str], task_envs: List[Dict[str, str]], cwd: str, who: str, unit: str = "task") -> int:
    """Run ``command`` once per entry of ``task_envs`` (``unit`` N is entry N); the first failing one's
    status, else 0."""
    procs: List[subprocess.Popen] = []

    def forward(signum, _frame):
        for p in procs:
            if p.poll() is None:
                try:
                    p.send_signal(signum)
                except ProcessLookupError:
                    pass

    for sig in FORWARDED:
        signal.signal(sig, forward)
    hosts = [e.get("SUMMIT_JOBS_VNODE", "") for e in task_envs]
    for index, extra in enumerate(task_envs):
        env = dict(os.environ)
        env.update(extra)
        try:
            prepare = state.preexec(extra.get("SUMMIT_JOBS_VNODE", ""), hosts)
            procs.append(subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, preexec_fn=prepare))
        except (OSError, subprocess.SubprocessError) as exc:
            print(f"{who}: error: cannot start {command[0]!r} for {unit} {index}: {exc}", file=sys.stderr)
            forward(signal.SIGKILL, None)
            return 255
    status = _wait(procs, forward, who, unit)
    # Every task has ended: a signal now (LSF's warning reaches every process of the job, and the batch
    # shell forwards it too) has no one to go to. Ignored, not left to the handler: while the interpreter
    # exits, it puts the default action back, and SIGUSR2's default ends the launcher as if it had failed.
    for sig in FORWARDED:
        signal.signal(sig, signal.SIG_IGN)
    return status


def _wait(procs: List[subprocess.Popen], forward, who: str, unit: str) -> int:
    """Wait for every task; when one fails, TERM the others (KILL after the grace); that task's status.
    It looks every 0.05 s, and at once when a task ends (state.ExitWaiter)."""
    failed: Optional[int] = None
    term_at: Optional[float] = None
    grace = state.kill_grace()
    waiter = state.ExitWaiter([p.pid for p in procs])
    while True:
        codes = [p.poll() for p in procs]
        for proc, code in zip(procs, codes):
            if code is not None:
                waiter.forget(proc.pid)
        if failed is None:
            for index, code in enumerate(codes):
                if code is not None and code != 0:
                    failed = 128 - code if code < 0 else code
                    print(f"{who}: {unit} {index} exited with status {failed}; terminating the other {unit}s",
                          file=sys.stderr)
                    forward(signal.SIGTERM, None)
                    term_at = time.time()
                    break
        if all(c is not None for c in codes):
            break
        if term_at is not None and time.time() - term_at > grace:
            forward(signal.SIGKILL, None)
        waiter.wait(0.05)
    waiter.close()
    return failed or 0
