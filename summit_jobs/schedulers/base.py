"""What the schedulers that drive their own commands through a host share (LSF, Slurm): submitting a job
script, running a command whose failure is an error in the scheduler's words, and the filters their templates
use.

Why a base class: every such scheduler submits alike (run the submit command in the run directory, refuse
with its own words when it exits non-zero, read the id and queue from its answer), and only the command line
and the reading of its answer are its own. A subclass gives ``submit_argv`` and ``parse_submitted`` (and
``queue_of`` where the answer does not name the queue), and its header filters in ``template_filters``; the
wording of refusals and failures, which users and tests read, lives here once.

May import errors and the interface (summit_jobs.schedulers); stays cheap to import, as the classes built on
it are read for ``summit-jobs --help``.
"""
from __future__ import annotations

from typing import Any, Callable, List, Mapping, Optional, Tuple

from summit_jobs.errors import UserError
from summit_jobs.schedulers import Submitted, SubmitRefused


class CommandScheduler:
    """A scheduler whose job control is its commands run through a host (``host.run(argv, cwd=, stdin=)``
    returning ``rc``, ``stdout`` and ``text``). Subclasses set ``submit_command`` and implement the argv
    builder and answer parser that ``submit`` calls."""

    #: The command that queues a job script (``bsub``, ``sbatch``): what a refusal names.
    submit_command: str

    # -- rendering --------------------------------------------------------------------------------------------

    def template_filters(self) -> Mapping[str, Callable[[Any], str]]:
        """The Jinja filters this scheduler's templates use, by name (its header's directives): each returns
        finished shell text or raises a UserError, and the renderer registers them as they are named. None
        here: a scheduler without filters of its own."""
        return {}

    # -- submitting -------------------------------------------------------------------------------------------

    def submit(self, host, script_name: str, *, cwd: str, script: str, submit_mode: str,
               depends_on: Optional[str] = None) -> Submitted:
        """Queue the script ``script_name`` in ``cwd`` (its text ``script`` goes on stdin where the command line
        asks for it); a non-zero exit is a SubmitRefused with the command's own words."""
        argv, via_stdin = self.submit_argv(script_name, submit_mode, depends_on)
        result = host.run(argv, cwd=cwd, stdin=script if via_stdin else None)
        if result.rc != 0:
            raise SubmitRefused(f"{self.submit_command} on {host.label} refused the job (exit {result.rc}):\n"
                                f"{result.text}")
        job_id, queue = self.parse_submitted(result)
        return Submitted(job_id, queue if queue is not None else self.queue_of(host, job_id, script))

    def submit_argv(self, script_name: str, submit_mode: str,
                    depends_on: Optional[str]) -> Tuple[List[str], bool]:
        """The submit command line of a script (a chain's next link waits for ``depends_on`` to end, whatever
        its exit), and whether the script's text goes on stdin; a ValueError for a mode or id it cannot
        take."""
        raise NotImplementedError

    def parse_submitted(self, result) -> Tuple[str, Optional[str]]:
        """The id of the job an accepted submission queued, and its queue where the answer names it (None:
        ``queue_of`` is asked); a UserError with the answer when it names no job."""
        raise NotImplementedError

    def queue_of(self, host, job_id: str, script: str) -> str:
        """The queue (partition) a job went to when the submit command's answer did not say: "" here, the
        cluster's default."""
        return ""

    # -- other commands ---------------------------------------------------------------------------------------

    def checked_run(self, host, argv: List[str], failed: Optional[Callable[[Any], bool]] = None):
        """The result of a query command; a UserError naming the command, the host, its exit status and its
        words when ``failed(result)`` (by default: it exited non-zero)."""
        result = host.run(argv)
        if (failed or _non_zero)(result):
            raise self.command_failed(host, argv[0], result)
        return result

    @staticmethod
    def command_failed(host, command: str, result, note: str = "") -> UserError:
        """The error of a command that did not answer: ``bjobs on HOST failed (exit N):`` and its words, then
        ``note``."""
        return UserError(f"{command} on {host.label} failed (exit {result.rc}):\n{result.text}{note}")

    @staticmethod
    def unreadable(host, command: str, what: str) -> UserError:
        """The error of a command whose answer says nothing this tool can read about ``what`` (the jobs,
        with their exit status and words)."""
        return UserError(f"{command} on {host.label} gave an answer this tool cannot read for {what}")


def _non_zero(result) -> bool:
    """A command failed when it exited non-zero."""
    return result.rc != 0
