"""Schedulers: everything that names a scheduler's commands. Each scheduler is a package behind one interface.

The rest of the login side talks to a batch scheduler only through a :class:`Scheduler` (``for_profile`` of
a machine profile, ``for_record`` of a run record): it submits the links of a chain, asks for the state of
jobs, asks whom jobs belong to, cancels them, and names the output files a job script writes. What it gives
back is scheduler-neutral: job ids as strings, :class:`JobStatus` records whose ``state`` is one of
``STATES``, and cancel outcomes (``terminating``, ``finished``, ``not found``). IBM LSF is the first
implementation (``lsf/``); its state words are the interface's, so another scheduler maps its own onto them.
Errors a user can act on are ``UserError`` with the scheduler's own output in the message.

May import errors, the profiles and the trainer's torch-free contract; never planning, runs or cli.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Dict, List, Mapping, NamedTuple, Optional, Protocol, Sequence, Tuple

from summit_jobs.errors import UserError

#: The job states of the interface (LSF's words: IBM LSF 10.1, "About job states"): pending, provisioning,
#: running, finished normally, exited, suspended (by the user, the system or a host), unknown, waiting, zombie.
STATES = ("PEND", "PROV", "RUN", "DONE", "EXIT", "PSUSP", "USUSP", "SSUSP", "UNKWN", "WAIT", "ZOMBI")
#: A state word no implementation could place.
UNKNOWN = "UNKNOWN"
#: The states of a job that has ended.
FINISHED = ("DONE", "EXIT")


@dataclass(frozen=True)
class JobStatus:
    """One job as the scheduler reports it."""
    job_id: str
    state: str
    queue: str = ""
    name: str = ""
    exit_code: Optional[int] = None
    reason: str = ""
    submit_time: str = ""
    start_time: str = ""
    finish_time: str = ""
    exec_host: str = ""
    #: The state word the scheduler printed, kept when ``state`` is UNKNOWN because the word is not a known one.
    lsf_state: str = ""

    @property
    def finished(self) -> bool:
        return self.state in FINISHED

    def to_dict(self) -> Dict[str, object]:
        return asdict(self)


class Submitted(NamedTuple):
    """A job the scheduler accepted: its id and the queue (partition) it went to."""
    job_id: str
    queue: str


class SubmitRefused(UserError):
    """The scheduler refused a job (its own words in the message): the caller adds what was already queued.
    An answer it cannot read is another UserError, passed on as it is."""


class Scheduler(Protocol):
    """What the login side needs of a batch scheduler. ``host`` is a summit_jobs.hosts host: ``run(argv, cwd=,
    stdin=)`` returning an object with ``rc``, ``stdout`` and ``text``, on this machine or over SSH."""

    #: The scheduler's name in profiles, run records and messages.
    name: str

    def submit(self, host, script_name: str, *, cwd: str, script: str, submit_mode: str,
               depends_on: Optional[str] = None) -> Submitted:
        """Queue the script ``script_name`` (in ``cwd``, whose text is ``script``); with ``depends_on``, to start
        once that job has ended, whatever its exit (a chain's next link)."""

    def query(self, host, job_ids: Sequence[str]) -> Tuple[Dict[str, JobStatus], List[str]]:
        """The status of each job the scheduler still knows, and the ids it no longer knows."""

    def owners(self, host, job_ids: Sequence[str]) -> Dict[str, Mapping[str, str]]:
        """For each known job: its name and submission folder (``job_name``, ``sub_cwd``), so that a cancel
        touches only jobs that still belong to the run (ids are reused)."""

    def cancel(self, host, job_ids: Sequence[str]) -> Dict[str, str]:
        """Cancel the jobs in the order given; for each id ``terminating``, ``finished`` (it had ended) or
        ``not found`` (the scheduler no longer knows it)."""

    def output_files(self, script: str, job_id: str) -> List[str]:
        """The output files (relative to the job's folder) that a job of ``script`` with id ``job_id`` writes."""


#: Scheduler name -> "module:class" of its implementation (imported when first used: the CLI starts fast).
IMPLEMENTATIONS = {"lsf": "summit_jobs.schedulers.lsf.scheduler:LsfScheduler",
                   "slurm": "summit_jobs.schedulers.slurm.scheduler:SlurmScheduler"}


def by_name(name: str) -> Scheduler:
    """The implementation of scheduler ``name``; an unknown name is refused with the known ones."""
    import importlib

    target = IMPLEMENTATIONS.get(name)
    if target is None:
        raise UserError(f"scheduler {name!r} is not one this tool drives; known: {', '.join(sorted(IMPLEMENTATIONS))}.")
    module, _, cls = target.partition(":")
    return getattr(importlib.import_module(module), cls)()


def for_profile(profile) -> Scheduler:
    """The scheduler of a machine profile (every profile today is an LSF machine)."""
    return by_name(getattr(profile.scheduler, "kind", "lsf"))


def for_record(record: Optional[Mapping]) -> Scheduler:
    """The scheduler that ran a run (its run record says; records written before it did are LSF runs)."""
    return by_name(str((record or {}).get("scheduler") or "lsf"))
