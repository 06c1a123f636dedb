"""The embedded LSF's minute along a chain: job-script lines that let each link set the next link's minute.

Why with LSF: the lines put a shell function named ``bsub`` in front of the embedded LSF's command, which a
chain until complete calls to queue its next link, and hand the minute over in the embedded LSF's own
variable (SUMMIT_JOBS_LSF_MINUTE). summit_jobs.demo measures the minute; this only wires it in.
"""
from __future__ import annotations

import shlex
from typing import List


def chain_setup(python: str, floor: float) -> List[str]:
    """The profile's ``environment.setup`` lines of the demo's jobs: a shell function ``bsub`` in front of
    the embedded LSF's, which the chain calls to queue the next link. It runs
    ``python -m summit_jobs.demo --next-minute`` first and hands its answer to the real bsub as
    SUMMIT_JOBS_LSF_MINUTE, which sets the next link's limits and is that link's environment in turn; should
    the measurement fail, the link's own minute is passed on."""
    measure = (f"{shlex.quote(python)} -m summit_jobs.demo --next-minute \"${{RUN_DIR:-$PWD}}\" \"$SECONDS\" "
               f"{floor:g}")
    return [
        "# summit-jobs demo: the next link's LSF minute comes from this link's start-up (python -m summit_jobs.demo)",
        f"bsub() {{ local m; m=$({measure}) && [ -n \"$m\" ] || m=${{SUMMIT_JOBS_LSF_MINUTE:-60}}; "
        "SUMMIT_JOBS_LSF_MINUTE=$m command bsub \"$@\"; }",
    ]
