"""Schedulers: everything that names a scheduler's commands. Each scheduler is a package behind one interface.

The rest of the login side talks to a batch scheduler only through a :class:`Scheduler` (``for_profile`` of
a machine profile, ``for_record`` of a run record): it submits the links of a chain, asks for the state of
jobs, asks whom jobs belong to, cancels them, and names the output files a job script writes. What it gives
back is scheduler-neutral: job ids as opaque strings (each scheduler checks its own: ``job_id``), :class:`JobStatus` records whose ``state`` is one of
``STATES`` (the interface's own words: pending, running, done, failed, cancelled, timed_out, ...; each
scheduler maps its words onto them and keeps its own in ``native_state``), :class:`Owner` records, and cancel
outcomes (``terminating``, ``finished``, ``not found``). IBM LSF (``lsf/``) and Slurm (``slurm/``) implement it.
Errors a user can act on are ``UserError`` with the scheduler's own output in the message.

The planner asks the scheduler too: which launchers start ranks (the profile's ``launcher.kind`` is one of
them), how a job asks for its nodes (a :class:`Request`), how its ranks are placed (a :class:`LaunchLayout`,
which the plan carries and the scheduler's templates read) and what its job scripts export. The command line
asks it for the words it prints: the help of the options only a scheduler gives meaning to, its commands'
names, and the line a dry run of staging shows. ``summit-jobs doctor`` asks it for its site checks (its commands,
version, queues or partitions, account) through a :class:`SiteProbe`. A new scheduler is a package here that implements
:class:`Scheduler`, one line in ``IMPLEMENTATIONS``, and its templates under ``templates/<name>/``.

May import errors, the profiles and the trainer's torch-free contract; never planning, runs or cli. Importing
this module and an implementation's class must stay cheap: ``summit-jobs --help`` reads the option help here.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Protocol, Sequence, Tuple, \
    TypeVar

from summit_jobs.errors import UserError
from summit_jobs.profiles import sections

if TYPE_CHECKING:                       # the report's line type; imported only where checks are built
    from summit_jobs.hosts.doctor import Check

T = TypeVar("T")

#: An account (LSF's project, Slurm's account) as the tool accepts one: what reaches a scheduler's command line
#: and a job script's header, so nothing a shell or a directive parser could read differently.
ACCOUNT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")

#: The largest job id of the schedulers whose ids are whole numbers: LSF's (2^31 - 2); Slurm's are below it.
MAX_DECIMAL_JOB_ID = 2147483646


def decimal_job_id(value: object, maximum: int = MAX_DECIMAL_JOB_ID) -> Optional[str]:
    """A whole-number job id (LSF's, Slurm's) as text without leading zeros, or None when ``value`` is not one
    from 1 to ``maximum``."""
    if isinstance(value, bool):
        return None
    text = str(value) if isinstance(value, (int, str)) else ""
    if not (text.isascii() and text.isdecimal()) or not 1 <= int(text) <= maximum:
        return None
    return str(int(text))


#: What any job id must look like besides its scheduler's form: a file-name part and one shell word, so that it
#: can name files (exitcode.<id>) and reach a command line: no "/", space, quote or control character, and
#: nothing that starts like an option or a hidden file.
SAFE_JOB_ID = re.compile(r"[^\s/\\'\"`$;&|<>()*?!#~\x00-\x1f\x7f.-][^\s/\\'\"`$;&|<>()*?!#~\x00-\x1f\x7f]{0,127}")


def safe_job_id(text: Optional[str]) -> Optional[str]:
    """``text`` when it is a job id that is safe to name files with and to pass as one argument, else None."""
    return text if text is not None and SAFE_JOB_ID.fullmatch(text) else None


def id_order(job_id: str) -> Tuple[int, int, str]:
    """A sort key for job ids of any scheduler: whole numbers by value (LSF, Slurm), then the rest as text
    (PBS's ``123.server``, Flux's ``ƒ2Mq...``)."""
    text = str(job_id)
    return (0, int(text), "") if text.isascii() and text.isdecimal() else (1, 0, text)


#: The job states of the interface, the same words for every scheduler; each scheduler maps its own words onto
#: them (its state map) and keeps its word in ``JobStatus.native_state``. A job that is waiting to start...
PENDING = "pending"
#: ... waiting and held by its owner or an operator (LSF's PSUSP, Slurm's JobHeldUser) ...
HELD = "held"
RUNNING = "running"
#: ... started and stopped for a while (LSF's USUSP/SSUSP, Slurm's SUSPENDED and STOPPED) ...
SUSPENDED = "suspended"
#: ... and the ways a job ends: its script exited 0; it exited non-zero or the scheduler could not start it; its
#: owner or an operator killed it; its run limit (or deadline) ended it; a node it ran on failed; a job of
#: higher priority took its nodes (and the scheduler did not requeue it).
DONE = "done"
FAILED = "failed"
CANCELLED = "cancelled"
TIMED_OUT = "timed_out"
NODE_FAILURE = "node_failure"
PREEMPTED = "preempted"
#: A state no implementation could place (an unknown word, kept in ``native_state``; a job it could not ask
#: about): never taken for an end while the scheduler still lists the job.
UNKNOWN = "unknown"
#: The states of a job that is still the scheduler's to run.
OPEN = (PENDING, HELD, RUNNING, SUSPENDED)
#: The states of a job that has ended.
FINISHED = (DONE, FAILED, CANCELLED, TIMED_OUT, NODE_FAILURE, PREEMPTED)
STATES = OPEN + FINISHED + (UNKNOWN,)


@dataclass(frozen=True)
class JobStatus:
    """One job as the scheduler reports it."""
    job_id: str
    #: One of ``STATES``.
    state: str
    queue: str = ""
    name: str = ""
    exit_code: Optional[int] = None
    reason: str = ""
    submit_time: str = ""
    start_time: str = ""
    finish_time: str = ""
    exec_host: str = ""
    #: The folder the job was submitted from (LSF's SUB_CWD, Slurm's WorkDir), "" where the scheduler does not
    #: say: with the name, what tells a run's job from another job that was given its id later.
    work_dir: str = ""
    #: How often the scheduler started the job again after a failure or a preemption (Slurm's restart count).
    restarts: int = 0
    #: The state word the scheduler printed (LSF's ``RUN``, Slurm's ``RUNNING``): what its own commands show.
    native_state: str = ""

    @property
    def finished(self) -> bool:
        return self.state in FINISHED

    def to_dict(self) -> Dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class Owner:
    """Whom a job belongs to, as cancel checks it before it kills (ids are reused): the job's name, the folder
    it was submitted from and when; ``error``: the scheduler answered about this job with an error instead (it
    is then neither killed nor given up on)."""
    job_id: str
    name: str = ""
    work_dir: str = ""
    submit_time: str = ""
    error: str = ""


class Submitted(NamedTuple):
    """A job the scheduler accepted: its id and the queue (partition) it went to."""
    job_id: str
    queue: str


class SubmitRefused(UserError):
    """The scheduler refused a job (its own words in the message): the caller adds what was already queued.
    An answer it cannot read is another UserError, passed on as it is."""


@dataclass(frozen=True)
class Request:
    """The allocation part of a job script, as the scheduler writes it: the request kind, the launcher that
    starts the ranks, the slots, and the directives of the script's header."""
    #: How the nodes are asked for, in the scheduler's words (LSF: ``nnodes`` or ``slots``).
    kind: str
    #: What starts the ranks: one of the scheduler's ``launchers``.
    launcher: str
    slots_per_host: int
    slots: int
    #: ``(flag, value)`` directives of the allocation's shape (LSF: printed as ``#BSUB flag value``).
    shape: Tuple[Tuple[str, str], ...]
    #: Memory, application profile, container and the site's or user's own directives.
    extra: Tuple[Tuple[str, str], ...]
    #: What --mem became, for the summary ("" when not asked).
    memory: str = ""


@dataclass(frozen=True)
class Limit:
    """A cap of the scheduler's own beside the queue's (Slurm: the QOS a job names), which the planner applies as
    it applies a queue's: the run limit, the largest job, whether jobs may be chained."""
    #: How messages name it: "QOS 'debug'".
    name: str
    max_walltime: Optional[str] = None
    max_nodes: Optional[int] = None
    chaining: bool = True
    max_queued_per_user: Optional[int] = None
    #: The way out a refusal offers besides changing the job ("another QOS (--qos regular)"); "" for none.
    other: str = ""


class LaunchLayout(Protocol):
    """How a scheduler places a job's ranks and its one-process-per-node steps (staging, collecting results):
    the scheduler's own frozen dataclass. The plan carries it as ``launch_layout`` (plan.json as a mapping), the
    scheduler's templates read its fields, and the planner reads nothing of it but ``name``."""

    #: The layout's name in the plan's summary (LSF: ``gpu``, one rank per GPU, or ``node``).
    name: str


class SiteProbe(Protocol):
    """How a scheduler's site checks look at the machine ``summit-jobs doctor`` checks (this one, or a login node
    over SSH): the command line builds it on a host, so that every probe runs through the one command path, and
    the scheduler decides only which commands to look for and run, and how to read their answers."""

    #: The machine in sentences: ``this machine``, ``user@login1``.
    label: str
    #: Whether the machine is reached over SSH (a fix then speaks of the SSH session's PATH).
    is_remote: bool

    def commands(self, names: Sequence[str]) -> Dict[str, Optional[str]]:
        """Where each command is on the machine's PATH (None: not found)."""

    def answer(self, argv: List[str], parse: Callable[[str], T]) -> Tuple[Optional[T], Optional[str]]:
        """``(parse(stdout), None)`` of a command, or ``(None, why not)`` when it could not run, exited non-zero
        (the reason then holds its exit status and its words) or ``parse`` raised a UserError."""


class Scheduler(Protocol):
    """What the login side needs of a batch scheduler. ``host`` is a summit_jobs.hosts host: ``run(argv, cwd=,
    stdin=)`` returning an object with ``rc``, ``stdout`` and ``text``, on this machine or over SSH."""

    #: The scheduler's name in profiles, run records and IMPLEMENTATIONS.
    name: str
    #: Its name in sentences (``LSF``): "is not known to LSF any more".
    label: str
    #: The command that queues a job script (LSF: ``bsub``): on PATH, this machine is a login node.
    submit_command: str
    #: The job script's name in a run directory (LSF: ``job.lsf``), as the scheduler's users name theirs; a
    #: chain's link submits it again by that name.
    script_name: str
    #: The command that lists jobs (LSF: ``bjobs``): what status rows and messages say a job's state came from.
    status_command: str
    #: The command that kills a job (LSF: ``bkill``): named where a user is told to kill one by hand.
    cancel_command: str
    #: What may start a job's ranks: the profile's ``launcher.kind`` and ``--launcher`` are one of these.
    launchers: Tuple[str, ...]
    #: The launcher of a profile that names none.
    default_launcher: str
    #: The help of the submit options that only a scheduler gives a meaning to, by the option's name without
    #: dashes: ``layout``, ``request``, ``launcher``, ``mem``, ``app``, ``container``, ``qos`` and ``directive``
    #: (the option whose values are further lines of the script's header). A scheduler leaves out the options
    #: it has no meaning for (and refuses them in ``request`` or ``limits``).
    option_help: Mapping[str, str]
    #: The flag of the ``directive`` option (LSF: ``--bsub-option``); its values reach ``request`` as
    #: ``opts.bsub_options``.
    directive_flag: str
    #: The main template of its job scripts, relative to templates/ (LSF: ``lsf/job.sh.j2``), and the templates
    #: that hold the launch line (a user folder overriding one of them runs its own command).
    job_template: str
    launch_templates: Tuple[str, ...]
    #: ``(name, "module:attribute", one-line help)`` of a ``summit-jobs`` command group of its own, or None.
    command_group: Optional[Tuple[str, str, str]]

    def submit_words(self, submit_mode: str) -> str:
        """How a script of a profile with ``scheduler.submit_mode`` is handed over, as a user would type it."""

    def check_profile(self, profile) -> None:
        """Raise ValueError naming the key of a profile of this scheduler that it cannot plan with (its own
        section's values, another scheduler's keys): the profile loader asks while it loads the file
        (summit_jobs.profiles.sections), so the refusal names the file."""

    # Optional: ``template_folder() -> str``, a folder holding ``<name>/job.sh.j2`` and its partials, for a
    # scheduler that ships its templates in its own package (LSF's and Slurm's are in templates/); the renderer
    # reads it after a user's --template-dir and before templates/, whose shared skeleton it may extend.

    def template_filters(self) -> Mapping[str, Callable[[Any], str]]:
        """The Jinja filters its templates use to write its header lines (LSF: ``bsub_directive``), each a check
        of a value's shape that raises UserError; the renderer registers them for this scheduler's templates only
        (a base class: summit_jobs.schedulers.base.CommandScheduler)."""

    def request(self, profile, opts, nodes: int) -> Request:
        """How a job of ``nodes`` nodes asks for them and which launcher starts its ranks, from the profile and
        the planner's JobOptions (``request``, ``launcher``, ``mem``, ``app``, ``container``,
        ``bsub_options``), every value checked: a UserError names the option and the way out."""

    def limits(self, profile, opts) -> Tuple[Limit, ...]:
        """Caps of the scheduler's own that the job is held to beside its queue's (Slurm: its QOS, from
        ``opts.qos`` or the profile's default); a UserError for a name the profile does not list, or for
        ``opts.qos`` on a scheduler without QOS."""

    def launch_layout(self, profile, opts, nodes: int, launcher: str) -> LaunchLayout:
        """How the ranks of a job of ``nodes`` nodes started by ``launcher`` are placed (``opts.layout`` over
        the profile's ``launcher.layout``); a UserError for a layout this launcher cannot honour."""

    def job_variables(self, profile, opts) -> Dict[str, str]:
        """Variables the job script exports for the scheduler's own sake (the trainer's host rules read them),
        after the profile's ``environment.variables``."""

    def gpus_per_rank(self, plan: Mapping) -> Optional[int]:
        """The GPUs each rank had, read from a recorded plan (plan.json, of any version this tool wrote); None
        when it does not say."""

    def stage_launch_line(self, profile, nodes: int, program: str) -> str:
        """The line that runs ``program`` once on each of ``nodes`` nodes (staging's second hop), as a dry run
        shows it."""

    def seconds_per_minute(self, profile, environ: Mapping[str, str]) -> float:
        """How many seconds one minute of a job's walltime and warning lasts on this scheduler (60, but for an
        embedded scheduler whose minute a setting in ``environ`` shortens): what the planner's estimates of a
        chain's links count a link's minutes in."""

    def submit(self, host, script_name: str, *, cwd: str, script: str, submit_mode: str,
               depends_on: Optional[str] = None) -> Submitted:
        """Queue the script ``script_name`` (in ``cwd``, whose text is ``script``); with ``depends_on``, to start
        once that job has ended, whatever its exit (a chain's next link)."""

    def query(self, host, job_ids: Sequence[str]) -> Tuple[Dict[str, JobStatus], List[str]]:
        """The status of each job the scheduler still knows, and the ids it no longer knows."""

    def owners(self, host, job_ids: Sequence[str]) -> Dict[str, Owner]:
        """For each known job its :class:`Owner` (name, submission folder, submit time), so that a cancel
        touches only jobs that still belong to the run (ids are reused)."""

    def cancel(self, host, job_ids: Sequence[str]) -> Dict[str, str]:
        """Cancel the jobs in the order given; for each id ``terminating``, ``finished`` (it had ended) or
        ``not found`` (the scheduler no longer knows it)."""

    def output_files(self, script: str, job_id: str) -> List[str]:
        """The output files (relative to the job's folder) that a job of ``script`` with id ``job_id`` writes."""

    def job_id(self, value: object) -> Optional[str]:
        """``value`` as this scheduler's job id (its canonical text), or None when it is not one. Ids are opaque
        to everything outside the scheduler's package (a PBS id is ``123.server``): run records, targets and
        chain files are checked here, since the ids they hold reach the scheduler's commands. An id also names
        files (``exitcode.<id>``, output files), so whatever an implementation accepts must pass
        ``safe_job_id`` (the callers check)."""

    #: How a job id of this scheduler looks, for messages: "a whole number from 1 to 2147483646".
    job_id_words: str

    def site_checks(self, probe: SiteProbe, profile, project: Optional[str]) -> List["Check"]:
        """``summit-jobs doctor``'s checks of the scheduler on the probed machine, one Check each (ok, warn or FAIL
        with its fix): its commands on PATH, its version against what this tool's readers need, the profile's
        queues (partitions, QOS) as the site lists them, and the account ``project`` (None: none given) against
        the profile's rule. A command that is missing or fails is a check's finding, never an exception."""


#: Scheduler name -> "module:class" of its implementation, imported when first used. ``summit-jobs --help``
#: imports every class for its option help: a class's module imports its command lines and parsers where they
#: are used, not at its top (tests/project/test_cli_startup_imports.py).
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
    """The scheduler of a machine profile (its ``scheduler.kind``: ``lsf`` unless it says ``slurm``)."""
    return by_name(getattr(profile.scheduler, "kind", "lsf"))


def for_record(record: Optional[Mapping]) -> Scheduler:
    """The scheduler that ran a run (its run record says; records written before it did are LSF runs)."""
    return by_name(str((record or {}).get("scheduler") or "lsf"))


def profile_rules(profile) -> Scheduler:
    """The scheduler whose rules the profile loader (a room below) checks a profile's scheduler section and
    launcher with: ``for_profile``'s, looked up at each call, so that whatever stands there answers."""
    return for_profile(profile)


sections.install(profile_rules)


def known() -> List[Scheduler]:
    """Every implementation, in IMPLEMENTATIONS' order: the command line's words are theirs together."""
    return [by_name(name) for name in IMPLEMENTATIONS]


def launcher_names() -> Tuple[str, ...]:
    """Every scheduler's launchers, each once (``--launcher``'s choices; the profile's scheduler then holds the
    job to its own)."""
    names: List[str] = []
    for scheduler in known():
        names += [n for n in scheduler.launchers if n not in names]
    return tuple(names)


def option_help(option: str) -> str:
    """The help of a submit option that schedulers give their meaning to: the one scheduler's text, or with
    several, each one's after its label."""
    texts = [(s.label, s.option_help[option]) for s in known() if option in s.option_help]
    if len(texts) == 1:
        return texts[0][1]
    return " ".join(f"{label}: {text}" for label, text in texts)


def directive_flags() -> Tuple[str, ...]:
    """The flags of the option that adds lines to a script's header, one per scheduler (aliases of one option)."""
    flags: List[str] = []
    for scheduler in known():
        flags += [scheduler.directive_flag] if scheduler.directive_flag not in flags else []
    return tuple(flags)


def command_groups() -> List[Tuple[str, str, str]]:
    """``(name, "module:attribute", one-line help)`` of the command groups the schedulers add to summit-jobs."""
    return [s.command_group for s in known() if s.command_group is not None]
