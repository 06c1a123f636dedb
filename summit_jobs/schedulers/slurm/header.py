"""The Jinja filters of Slurm's job script: an ``#SBATCH`` option and its value (``sbatch_directive``) and the
same option as one word of the srun line (``srun_option``).

Why here and not with the renderer: what an ``#SBATCH`` line may hold is Slurm's rule, as the request that
builds the directives is (request.py); the renderer asks the scheduler for its filters
(``SlurmScheduler.template_filters``) and marks what they return as finished shell text. Each filter is a
last check: the plan has checked every value already, and this refuses anything that could split the line or
start another all the same. Standard library and errors only: a dry run imports this.
"""
from __future__ import annotations

import re
import shlex
from typing import Any, Callable, Dict, Tuple

from summit_jobs.errors import UserError

#: An #SBATCH option and its value: a long option, and one word of checked characters (no quotes are needed:
#: sbatch splits a directive line at white space, which no value holds).
SBATCH_FLAG = re.compile(r"--[a-z][a-z0-9-]*")
SBATCH_VALUE = re.compile(r"[A-Za-z0-9_.,:=+/@%\[\]&|*()!<>-]+")


def sbatch_directive(pair: Tuple[str, str]) -> str:
    """``(flag, value)`` as the rest of an ``#SBATCH`` line: ``--nodes=4``, ``--constraint=gpu&hbm80g``,
    ``--exclusive``."""
    flag, value = str(pair[0]), str(pair[1])
    if not SBATCH_FLAG.fullmatch(flag) or (value and not SBATCH_VALUE.fullmatch(value)):
        raise UserError(f"#SBATCH {flag}={value!r} cannot be written: a long option and one word of letters, "
                        "digits and . , : = + / @ % _ - [ ] & | * ( ) ! < > only.")
    return f"{flag}={value}" if value else flag


def srun_option(pair: Tuple[str, str]) -> str:
    """``(flag, value)`` as one quoted word of an ``srun`` command line (``--gpu-bind=closest``).

    Unlike an ``#SBATCH`` line, which sbatch reads and the shell skips as a comment, the srun line is run by
    bash: a value may hold Slurm's ``&``, ``|`` or ``!``, and must stay one word there, never a command
    separator. The option's shape is checked as a directive's is (so it holds no line break to refuse).
    """
    return shlex.quote(sbatch_directive(pair))


#: The filters Slurm's templates use, by the name they use them by.
FILTERS: Dict[str, Callable[[Any], str]] = {"sbatch_directive": sbatch_directive, "srun_option": srun_option}
