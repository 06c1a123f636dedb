"""The plan: profile + options in, a checked job shape out. Pure: no I/O.

Every policy rule of the machine is checked here, before anything is written
or submitted, and each failure names the limit and the way out. The renderer
only formats a Plan; the simulate planner builds on the same function. What
only the machine's scheduler knows (how nodes are asked for, which launchers
start ranks and how they place them, the variables its scripts need) the
planner asks the profile's scheduler (summit_jobs.schedulers.Scheduler) and
carries as data: ``launch_layout`` is the scheduler's own object, read by its
templates.
"""
from __future__ import annotations

import dataclasses
import math
import re
import shlex
from dataclasses import asdict, dataclass, replace
from typing import Dict, List, Optional, Tuple

from summit_jobs import schedulers
from summit_jobs.profiles import settings
from summit_jobs import wording
from trainer.rundir import nvme_data_dir
from summit_jobs.planning import trainer_args
from summit_jobs.profiles.choices import LAYOUTS, STAGE_POLICIES  # noqa: F401 - part of this module's interface
from summit_jobs.errors import UserError
from summit_jobs.profiles.machines import Profile, Queue, WalltimeBin, format_hhmm, parse_hhmm
from trainer import config as trainer_config
from trainer import rundir
from trainer.submit_options import OPTIONS as DECLARED

#: Patterns that guard values are always applied with ``fullmatch``: ``re.match`` with ``$`` accepts a
#: trailing newline, which would split a ``#BSUB`` line.
JOB_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
ACCOUNT_RE = schedulers.ACCOUNT_RE
#: Marker the trainer writes when all epochs are done; later chain links exit at once.
COMPLETE_MARKER = rundir.COMPLETE
#: The job script in the run directory.
SCRIPT_NAME = rundir.SCRIPT
#: Ids of the links a chain until complete submitted itself (the first link's id is in run.json).
CHAIN_FILE = rundir.CHAIN
#: The trainer options declared in trainer.submit_options: JobOptions fields (submit options), and where
#: ``in_plan``, Plan fields. A preset sets them where the user did not; the rest of a preset
#: (trainer.config.PRESETS) goes to the trainer as written.
PRESET_FIELDS = tuple(option.name for option in DECLARED)
#: Options with a default whose being given on the command line matters (JobOptions.explicit): a preset's
#: methods, and options that apply only with another one (--max-links, --stage-policy).
EXPLICIT_FIELDS = PRESET_FIELDS + ("max_links", "stage_policy")
#: The trainer options the planner derives or takes from the profile's recipe (trainer.submit_options says why
#: they are not declared there): each has its own code below.
PLANNED_FIELDS = ("epochs", "clips_per_gpu", "lr", "warmup_epochs", "engine", "arch", "num_classes")
#: Options that set the built-in trainer's optimisation; with --command the user's program has its own.
TRAINER_FIELDS = PLANNED_FIELDS + PRESET_FIELDS
#: The largest global batch at which the linear LR rule is known to keep this recipe's accuracy: the paper
#: this project follows (Lin, Gan and Han, "Training Kinetics in 15 Minutes", arXiv:1910.00932) trains TSM
#: on Kinetics with 1,536 GPUs x 8 clips = 12,288 clips, its largest, without losing accuracy; Goyal et al.
#: (arXiv:1706.02677) find the rule holding for ResNet-50 on ImageNet up to 8k images and failing beyond.
LINEAR_LR_MAX_BATCH = 12_288
#: LARS (You, Gitman and Ginsburg, arXiv:1708.03888) trains ResNet-50 on ImageNet at batches up to 32k.
LARS_MAX_BATCH = 32_768


def declared_fields(after: str, in_plan_only: bool = False):
    """A class decorator, under ``@dataclass``, that gives the class a field for each trainer option declared in
    trainer.submit_options (its declared default), right after field ``after``; with ``in_plan_only``, for those
    declared ``in_plan``.

    Why a decorator: a new declared option reaches JobOptions and Plan without an edit here. Why at a place:
    ``plan.json`` is the Plan's fields in their order, and the declared options stand where they always stood.
    """
    def add(cls):
        own = dict(cls.__dict__.get("__annotations__", {}))
        if after not in own:
            raise TypeError(f"{cls.__name__} has no field {after!r} to put the declared options after")
        fields = {}
        for name, annotation in own.items():
            fields[name] = annotation
            if name != after:
                continue
            for option in DECLARED:
                if in_plan_only and not option.in_plan:
                    continue
                if option.name in own:
                    raise TypeError(f"{cls.__name__}.{option.name} is a declared trainer option: drop the field")
                fields[option.name] = option.kind.__name__
                setattr(cls, option.name, option.default)
        cls.__annotations__ = fields
        return cls
    return add


@dataclass(frozen=True)
@declared_fields(after="virtual_nodes")
class JobOptions:
    """What the user asked for. ``None`` means: the profile's or the recipe's default."""
    nodes: object
    run_dir: str
    project: Optional[str] = None
    walltime: Optional[str] = None
    queue: Optional[str] = None
    job_name: str = "tsm"
    epochs: Optional[int] = None
    data: Optional[str] = None
    stage_policy: str = STAGE_POLICIES[0]
    layout: Optional[str] = None
    clips_per_gpu: Optional[int] = None
    lr: Optional[float] = None
    warmup_epochs: Optional[float] = None
    engine: Optional[str] = None
    arch: Optional[str] = None
    num_classes: Optional[int] = None
    num_segments: Optional[int] = None
    chain: int = 1
    accum_steps: int = 1
    quota_nodes: Optional[int] = None
    python: Optional[str] = None
    warning_minutes: Optional[int] = None
    trainer_args: Tuple[str, ...] = ()
    #: Set by simulate: the node count whose optimisation this job reproduces.
    virtual_nodes: Optional[int] = None
    # Here come the trainer options declared in trainer.submit_options (the methods of the seed papers: schedule,
    # optimizer, averaging, compression), each with its declared default (declared_fields).
    fusion_threshold: Optional[int] = None
    #: Training clips per epoch, for the multigrid schedule in the summary.
    train_clips: Optional[int] = None
    #: Parse the trainer's arguments with its own parser (off when a user template replaces the launch line,
    #: which then decides what runs and what its arguments mean).
    check_trainer_args: bool = True
    #: Chain until the trainer writes COMPLETE: each link that ends after the warning signal submits the
    #: next one itself, up to ``max_links`` links in all.
    until_complete: bool = False
    max_links: int = 20
    #: Request and launcher kinds (None: the profile's), memory per node, -app, container, the Slurm QOS, extra
    #: lines of the script's header (#BSUB or #SBATCH: the directive option of the profile's scheduler).
    request: Optional[str] = None
    launcher: Optional[str] = None
    mem: Optional[str] = None
    app: Optional[str] = None
    container: Optional[str] = None
    qos: Optional[str] = None
    bsub_options: Tuple[str, ...] = ()
    #: The user's own training command (words), run on every rank instead of ``python -m trainer``.
    command: Tuple[str, ...] = ()
    #: A named trainer recipe (trainer.config.PRESETS): its values are rendered into the script as options.
    #: A method option wins over it when named in ``explicit`` (given on the command line) or when it is not
    #: at the trainer's default.
    preset: Optional[str] = None
    explicit: Tuple[str, ...] = ()
    #: With --command: the steps the user's program trains in all, which status shows as ``step/total``.
    total_steps: Optional[int] = None


@dataclass(frozen=True)
class Staging:
    manifest: str
    policy: str
    nvme_data_dir: str


@dataclass(frozen=True)
@declared_fields(after="trainer_argv", in_plan_only=True)
class Plan:
    machine: str
    nodes: int
    ranks_per_node: int
    ranks: int
    layout: str
    #: How the scheduler places the ranks and the one-per-node steps (its LaunchLayout; templates read it).
    launch_layout: schedulers.LaunchLayout
    walltime_minutes: int
    walltime: str
    bin: int
    bin_max_walltime: str
    queue: str
    alloc_flags: Tuple[str, ...]
    node_hours: float
    account_flag: str
    account: Optional[str]
    job_name: str
    run_dir: str
    chain: int
    warning_signal: str
    warning_minutes: int
    submit_mode: str
    python: str
    modules: Tuple[str, ...]
    setup: Tuple[str, ...]
    variables: Dict[str, str]
    smpiargs: str
    nvme_path: Optional[str]
    staging: Optional[Staging]
    # The trainer's optimisation.
    engine: str
    clips_per_gpu: int
    accum_steps: int
    virtual_nodes: int
    virtual_ranks: int
    global_batch: int
    lr: float
    epochs: int
    warmup_epochs: float
    trainer_argv: Tuple[str, ...]
    # Here come the trainer options declared ``in_plan`` in trainer.submit_options, as the job runs them
    # (declared_fields).
    multigrid: Tuple[Dict[str, object], ...] = ()
    complete_marker: str = COMPLETE_MARKER
    #: Written by cancel (trainer.rundir.CANCELLED): the chain's links check it before they run and after they
    #: queue the next link.
    cancel_marker: str = rundir.CANCELLED
    until_complete: bool = False
    max_links: int = 1
    #: The script's name in the run directory (a link of a chain until complete submits it again).
    script_name: str = SCRIPT_NAME
    #: The scheduler's own caps the job is held to beside its queue's (Slurm: its QOS), as messages name them.
    scheduler_limits: Tuple[str, ...] = ()
    #: Job ids of links submitted by the chain itself, one per line, in the run directory.
    chain_file: str = CHAIN_FILE
    #: How the nodes are asked for (LSF: ``nnodes`` or ``slots``) and what starts the ranks, in the scheduler's
    #: words (summit_jobs.schedulers.Request).
    request_kind: str = "nnodes"
    launcher: str = ""
    slots: int = 0
    slots_per_host: int = 0
    #: ``(flag, value)`` #BSUB directives: the allocation's shape (where -nnodes stands), then the rest.
    shape_directives: Tuple[Tuple[str, str], ...] = ()
    extra_directives: Tuple[Tuple[str, str], ...] = ()
    memory: str = ""
    #: True when ``trainer_argv`` is the user's own command (--command), not python -m trainer.
    user_command: bool = False
    #: The trainer preset whose values the script's trainer options carry (None: none).
    preset: Optional[str] = None
    #: With --command: the steps the user's program declared it trains in all (--total-steps; None: unknown).
    total_steps: Optional[int] = None
    #: With --command whose program was a bare ``python``/``python3``: that word, which the ranks run as the
    #: profile's interpreter (``python`` above) instead of whatever the job's PATH holds (None: not replaced).
    command_python: Optional[str] = None
    #: What the plan accepted but the user should know before spending node-hours (printed on stderr).
    warnings: Tuple[str, ...] = ()
    #: The scheduler whose templates render the plan (summit_jobs.schedulers.IMPLEMENTATIONS).
    scheduler: str = "lsf"
    #: GPUs per node (node.gpus): 0 on CPU-only nodes, whose ranks the summary calls CPU ranks, not GPUs.
    gpus_per_node: int = 0

    def __getattr__(self, name: str):
        """A field of the launch layout reads as the plan's own: templates written when the plan held the
        scheduler's fields itself (a user's --template-dir) keep working."""
        layout = self.__dict__.get("launch_layout")
        fields = getattr(layout, "__dataclass_fields__", {})
        if name.startswith("_") or name == "name" or name not in fields:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return getattr(layout, name)

    @property
    def rank_argv(self) -> Tuple[str, ...]:
        """What a launcher that starts every rank itself runs on each: the trainer, or the user's command behind
        ``python -m trainer.rankenv``, which gives it torchrun's env:// variables (RANK, WORLD_SIZE, ...)."""
        if self.user_command:
            return (self.python, "-m", "trainer.rankenv") + tuple(self.trainer_argv)
        return tuple(self.trainer_argv)

    @property
    def torchrun_program(self) -> Tuple[str, ...]:
        """What torchrun runs on each node: ``-m trainer ARGS``, or ``--no-python`` and the user's command."""
        argv = self.trainer_argv
        if not self.user_command and len(argv) > 2 and argv[1] == "-m":
            return ("-m",) + tuple(argv[2:])
        return ("--no-python",) + tuple(argv)

    def summary(self) -> Dict[str, object]:
        """The figures a user checks before spending node-hours (the trainer's only where it runs)."""
        out = {
            "machine": self.machine, "nodes": self.nodes, "ranks": self.ranks,
            "ranks_per_node": self.ranks_per_node, "layout": self.layout,
            "queue": self.queue, **({"limits": list(self.scheduler_limits)} if self.scheduler_limits else {}),
            "walltime": self.walltime, "bin": self.bin,
            "bin_max_walltime": self.bin_max_walltime, "node_hours": round(self.node_hours, 2),
            "chain": self.chain, "until_complete": self.until_complete, "max_links": self.max_links,
        }
        if not self.user_command:
            out.update(self._trainer_summary())
        out["run_dir"] = self.run_dir
        if self.staging:
            out["data"] = self.staging.manifest
            out["stage_policy"] = self.staging.policy
        if self.request_kind != "nnodes":      # a CSM request (-nnodes) is always started by its one launcher
            out.update(request=self.request_kind, launcher=self.launcher, slots=self.slots,
                       slots_per_host=self.slots_per_host)
        if self.memory:
            out["memory"] = self.memory
        if self.user_command:
            out["command"] = list(self.trainer_argv)
            if self.command_python:
                out["command_python"] = self.command_python
            if self.total_steps:
                out["total_steps"] = self.total_steps
        if self.preset:
            out["preset"] = self.preset
        if self.warnings:
            out["warnings"] = list(self.warnings)
        return out

    def _trainer_summary(self) -> Dict[str, object]:
        """The built-in trainer's optimisation: a user's own command has its own, which this tool cannot know
        (the recipe's defaults would read as if that program used them)."""
        out: Dict[str, object] = {
            "global_batch": self.global_batch, "lr": self.lr, "epochs": self.epochs,
            "warmup_epochs": self.warmup_epochs, "clips_per_gpu": self.clips_per_gpu,
            "accum_steps": self.accum_steps, "engine": self.engine,
        }
        if self.virtual_nodes != self.nodes:
            out["virtual_nodes"] = self.virtual_nodes
            out["virtual_ranks"] = self.virtual_ranks
        out.update({o.name: getattr(self, o.name) for o in DECLARED if o.in_plan and o.requires is None})
        out["fusion_threshold"] = self.variables.get("HOROVOD_FUSION_THRESHOLD")
        # An option that applies only with another one's value is shown where it applies.
        out.update({o.name: getattr(self, o.name) for o in DECLARED if o.in_plan and o.requires is not None
                    and getattr(self, o.requires[0], None) == o.requires[1]})
        if self.multigrid:
            out["multigrid"] = list(self.multigrid)
        return out

    def to_dict(self) -> Dict[str, object]:
        return asdict(self)


def linear_lr(global_batch: int, lr_per_8_clips: float) -> float:
    """The paper's rule: 0.00125 per 8 clips, scaled linearly with the batch."""
    return round(lr_per_8_clips * global_batch / 8, 10)


def parse_nodes(value: object, profile: Profile) -> int:
    limit = f"between 1 and {profile.max_nodes:,} on {profile.name}"
    if isinstance(value, bool):
        value = str(value)
    if isinstance(value, int):
        n = value
    else:
        text = str(value).strip().replace(",", "").replace("_", "")
        if not re.fullmatch(r"[+-]?[0-9]+", text):
            raise UserError(f"node count {value!r} is not a whole number. Give --nodes a whole number {limit}.")
        n = int(text)
    if n < 1:
        raise UserError(f"node count {n} is too small: a job needs at least 1 node. Give --nodes a whole number {limit}.")
    if n > profile.max_nodes:
        raise UserError(
            f"node count {n:,} is above {profile.name}'s maximum job size of "
            f"{wording.count(profile.max_nodes, 'node')}. "
            f"Give --nodes a whole number {limit}; to reproduce a larger run's optimisation, use "
            f"`summit-jobs --machine {profile.name} simulate --virtual-nodes {n}`.")
    return n


def _check_writable_on_compute_nodes(profile: Profile, opts: JobOptions) -> None:
    """The run directory must be writable where the ranks run (the manifest is only read)."""
    path = opts.run_dir
    for prefix in profile.compute_read_only_prefixes:
        root = prefix.rstrip("/")
        if path == root or path.startswith(root + "/"):
            hint = f" ({profile.writable_hint})" if profile.writable_hint else ""
            raise UserError(f"run directory {path} is under {root}, which {profile.name}'s compute nodes cannot "
                            "write: checkpoints and metrics would fail. Give --run-dir / --runs-dir a folder on "
                            f"the parallel file system{hint}.")


def _check_until_complete(opts: JobOptions) -> None:
    if opts.chain > 1:
        raise UserError(f"--chain {opts.chain} and --until-complete both say how many jobs to run: use "
                        "--until-complete (with --max-links as the cap) or a fixed --chain K.")
    if opts.max_links < 1:
        raise UserError(f"--max-links {opts.max_links} must be at least 1.")


def _check_schedule(lr: float, epochs: int, warmup: float, lr_per_8_clips: float) -> None:
    if not (math.isfinite(lr) and lr > 0):
        raise UserError(f"--lr {lr!r} must be a finite number above 0 (the peak learning rate; the default is "
                        f"{lr_per_8_clips:g} per 8 clips of the global batch).")
    if epochs < 1:
        raise UserError(f"--epochs {epochs} must be at least 1.")
    if not math.isfinite(warmup) or warmup < 0 or warmup > epochs:
        raise UserError(f"--warmup-epochs {warmup!r} (warm-up epochs) must be between 0 and the {epochs} training epochs.")


def simulate_command(profile: Profile, virtual_nodes: int, account: Optional[str]) -> str:
    parts = ["summit-jobs", "--machine", profile.name, "simulate", "--virtual-nodes", str(virtual_nodes)]
    if account:
        parts += ["--project", account]
    return shlex.join(parts)


# ---- step 1: allocation (account, quota, names, queue, bin, walltime) ---------------------------

@dataclass(frozen=True)
class Allocation:
    """What the scheduler is asked for, checked against the queue's and the allocation's rules."""
    nodes: int
    account: Optional[str]
    queue_name: str
    bin: WalltimeBin
    minutes: int
    warning_minutes: int
    #: The scheduler's own caps the job is held to beside the queue's, as messages name them ("QOS 'debug'").
    limits: Tuple[str, ...] = ()


def _account(profile: Profile, opts: JobOptions) -> Optional[str]:
    """The -P project / -G bank, checked: it lands in a #BSUB line."""
    word = profile.scheduler.account_name
    account = opts.project
    if account is not None:
        account = str(account).strip()
        if not ACCOUNT_RE.fullmatch(account):
            raise UserError(
                f"{word} {opts.project!r} is not a valid {word} name: use letters, digits, "
                f"'_', '.' and '-' only (at most 64 characters), as printed by your allocation.")
    if not account and profile.scheduler.account_required:
        raise UserError(
            f"{profile.name} charges every job to a {word} ({profile.scheduler.account_flag}), and none "
            f"was given. Pass --project NAME, set SUMMIT_JOBS_PROJECT, or put 'project: NAME' in the config file.")
    return account or None


def _check_quota(profile: Profile, opts: JobOptions, nodes: int, account: Optional[str]) -> None:
    """The allocation's node limit (not the machine's); a simulated run is planned within it by simulate."""
    quota = settings.quota(opts.quota_nodes, None, profile).nodes
    if quota is not None and nodes > quota and opts.virtual_nodes is None:
        raise UserError(
            f"{nodes:,} nodes is above your allocation's quota of {wording.count(quota, 'node')} on {profile.name}. "
            f"Run fewer nodes, or reproduce the {nodes:,}-node optimisation exactly on at most "
            f"{wording.count(quota, 'node')} "
            f"by gradient accumulation: {simulate_command(profile, nodes, account)}")


def _check_names(profile: Profile, opts: JobOptions) -> None:
    """Job name, paths and trainer arguments: values that end up in #BSUB and shell lines."""
    if not JOB_NAME_RE.fullmatch(opts.job_name or ""):
        raise UserError(
            f"job name {opts.job_name!r} cannot be used: it must start with a letter or digit and hold only "
            "letters, digits, '.', '_' and '-' (at most 128 characters), so that it is safe in #BSUB lines and "
            "file names. Pick another --job-name.")
    # Quoted later, but a newline or NUL would still break the script.
    for what, path in (("run directory", opts.run_dir), ("data manifest", opts.data), ("python", opts.python)):
        if path is not None and (("\n" in path) or ("\r" in path) or ("\0" in path) or not path.strip()):
            raise UserError(f"{what} path {path!r} contains a newline or NUL byte (or is empty); "
                            "use a plain path.")
    for what, option, path in (("run directory", "--run-dir", opts.run_dir), ("data manifest", "--data", opts.data)):
        if path is not None and "$" in path:
            # The script quotes the path (no expansion) while the trainer expands $VARS in it: the two
            # would name different folders. Expansion belongs to the user's shell, before summit-jobs.
            raise UserError(f"{what} path {path!r} contains '$': it would be used unexpanded by the job script "
                            f"but expanded by the trainer. Give {option} a path without '$' (let your shell "
                            "expand variables: write $SCRATCH/runs without quotes).")
    _check_writable_on_compute_nodes(profile, opts)
    for arg in opts.trainer_args:
        if "\0" in arg:
            raise UserError(f"trainer argument {arg!r} contains a NUL byte, which no command line can carry.")


def _queue(profile: Profile, opts: JobOptions, nodes: int) -> Tuple[str, Queue, WalltimeBin]:
    """The queue, its node and bin rules, and the walltime bin of ``nodes``."""
    queue_name = opts.queue or profile.default_queue
    if queue_name not in profile.queues:
        raise UserError(f"queue {queue_name!r} does not exist on {profile.name}. "
                        f"Valid queues: {', '.join(profile.queues)}.")
    queue = profile.queues[queue_name]
    nbin = profile.bin_for(nodes)
    if nbin is None:
        raise UserError(f"no walltime bin of {profile.name} covers {nodes} nodes; fix the profile's walltime_bins "
                        f"({profile.source}).")
    if queue.max_nodes is not None and nodes > queue.max_nodes:
        raise UserError(f"queue {queue_name!r} allows at most {wording.count(queue.max_nodes, 'node')}, and {nodes} "
                        f"were asked for. Use at most {wording.count(queue.max_nodes, 'node')} or another queue "
                        f"(--queue {profile.default_queue}).")
    if queue.allowed_bins is not None and nbin.bin not in queue.allowed_bins:
        ok = [b for b in profile.walltime_bins if b.bin in queue.allowed_bins]
        span = ", ".join(f"bin {b.bin}: {b.min_nodes}-{b.max_nodes} nodes" for b in ok)
        raise UserError(f"queue {queue_name!r} only takes jobs in bins {', '.join(map(str, queue.allowed_bins))} "
                        f"({span}); {wording.count(nodes, 'node')} is bin {nbin.bin}. Change --nodes or use --queue "
                        f"{profile.default_queue}.")
    return queue_name, queue, nbin


def _check_chain(profile: Profile, opts: JobOptions, queue_name: str, queue: Queue) -> None:
    """How many jobs the chain queues, against the queue's rules."""
    if opts.chain < 1:
        raise UserError(f"--chain {opts.chain} must be at least 1 (the number of jobs in the chain).")
    if opts.until_complete:
        _check_until_complete(opts)
    if (opts.chain > 1 or opts.until_complete) and not queue.chaining:
        raise UserError(f"queue {queue_name!r} does not allow chained jobs (it allows one job per user). "
                        f"Use --chain 1 or another queue (--queue {profile.default_queue}).")
    if queue.max_queued_per_user is not None and opts.chain > queue.max_queued_per_user:
        raise UserError(f"--chain {opts.chain} would queue {opts.chain} jobs, and queue {queue_name!r} on "
                        f"{profile.name} accepts at most {queue.max_queued_per_user} queued jobs per user (more are "
                        f"rejected at submit). Use --chain {queue.max_queued_per_user} or fewer with a longer "
                        f"--walltime, and submit the rest of the chain when these have run.")


def _check_scheduler_limits(opts: JobOptions, nodes: int, caps: Tuple[schedulers.Limit, ...]) -> None:
    """The scheduler's own caps beside the queue's (a Slurm QOS): its largest job and its chaining rules."""
    for cap in caps:
        other = f" or {cap.other}" if cap.other else ""
        if cap.max_nodes is not None and nodes > cap.max_nodes:
            raise UserError(f"{cap.name} allows at most {wording.count(cap.max_nodes, 'node')}, and {nodes} were "
                            f"asked for. Use at most {wording.count(cap.max_nodes, 'node')}{other}.")
        if (opts.chain > 1 or opts.until_complete) and not cap.chaining:
            raise UserError(f"{cap.name} does not allow chained jobs. Use --chain 1 without --until-complete{other}.")
        if cap.max_queued_per_user is not None and opts.chain > cap.max_queued_per_user:
            raise UserError(f"--chain {opts.chain} would queue {opts.chain} jobs, and {cap.name} accepts at most "
                            f"{cap.max_queued_per_user} queued jobs per user. Use --chain {cap.max_queued_per_user} "
                            f"or fewer{other}.")


def _walltime(profile: Profile, opts: JobOptions, nodes: int, queue_name: str, queue: Queue,
              nbin: WalltimeBin, caps: Tuple[schedulers.Limit, ...] = ()) -> int:
    """Minutes of run limit: the user's, within the tightest of the bin's, the queue's and the scheduler's own
    limits."""
    limits = []
    if queue.use_bins:
        limits.append((nbin.max_minutes, f"bin {nbin.bin} ({nbin.min_nodes}-{nbin.max_nodes} nodes)"))
    if queue.max_walltime:
        limits.append((parse_hhmm(queue.max_walltime, f"queue {queue_name} max_walltime"), f"queue {queue_name!r}"))
    limits += [(parse_hhmm(c.max_walltime, f"{c.name} max_walltime"), c.name) for c in caps if c.max_walltime]
    max_minutes, limit_name = min(limits) if limits else (nbin.max_minutes, f"bin {nbin.bin}")
    if opts.walltime is None:
        return max_minutes
    minutes = parse_hhmm(opts.walltime, "walltime")
    if minutes > max_minutes:
        raise UserError(
            f"walltime {format_hhmm(minutes)} is above the {format_hhmm(max_minutes)} limit of {limit_name} "
            f"on {profile.name} for {wording.count(nodes, 'node')}. Ask for --walltime {format_hhmm(max_minutes)} "
            "or less; for longer training use --chain K to run K jobs that resume from checkpoints.")
    return minutes


def _warning_minutes(profile: Profile, opts: JobOptions, minutes: int) -> int:
    """Warning signal before the run limit: the checkpoint-and-chain hook, at most half the run.

    The profile's default shrinks to fit a short job; a value the user gave is refused instead of rewritten,
    since the job would then train a different time before its warning than the user planned for. A walltime
    with no room for a warning of one minute in its second half is refused: the warning would come at the
    job's start, which checkpoints and stops it before it trains, so a chain of such links never progresses.
    """
    limit = minutes // 2
    if limit < 1:
        given = f"--walltime {opts.walltime}" if opts.walltime is not None else f"the walltime {format_hhmm(minutes)}"
        raise UserError(f"{given} leaves no room for the warning signal (at least 1 minute before the run limit, "
                        "at most half the run): it would come at the job's start and stop the job before it "
                        "trains. Give --walltime 2 or more.")
    warn = opts.warning_minutes
    if warn is None:
        return min(profile.scheduler.warning_minutes, limit)
    if warn < 1:
        raise UserError(f"--warning-minutes {warn} must be at least 1.")
    if warn > limit:
        raise UserError(f"--warning-minutes {warn} is more than half the {format_hhmm(minutes)} walltime: the "
                        f"warning may come at most {limit} minute{'s' if limit > 1 else ''} before the run limit. "
                        f"Give --warning-minutes {limit} or less, or a longer --walltime.")
    return warn


def allocation(profile: Profile, opts: JobOptions) -> Allocation:
    """Step 1: nodes, account, quota, queue, bin and walltime, in the order a user would fix them."""
    nodes = parse_nodes(opts.nodes, profile)
    account = _account(profile, opts)
    _check_quota(profile, opts, nodes, account)
    _check_names(profile, opts)
    queue_name, queue, nbin = _queue(profile, opts, nodes)
    _check_chain(profile, opts, queue_name, queue)
    caps = tuple(schedulers.for_profile(profile).limits(profile, opts))
    _check_scheduler_limits(opts, nodes, caps)
    minutes = _walltime(profile, opts, nodes, queue_name, queue, nbin, caps)
    return Allocation(nodes=nodes, account=account, queue_name=queue_name, bin=nbin, minutes=minutes,
                      warning_minutes=_warning_minutes(profile, opts, minutes), limits=tuple(c.name for c in caps))


# ---- step 2: launch (resource sets, staging, environment) ----------------------------------------

@dataclass(frozen=True)
class Launch:
    """How many ranks, and what they find in their environment (where they run is the scheduler's launch layout)."""
    ranks: int
    alloc_flags: Tuple[str, ...]
    staging: Optional[Staging]
    variables: Dict[str, str]
    python: str


def _staging(profile: Profile, opts: JobOptions) -> Optional[Staging]:
    """Data staging onto node-local NVMe, when a manifest was given."""
    if not opts.data:
        return None
    if not profile.node.nvme_path:
        raise UserError(f"{profile.name} has no node-local NVMe in its profile (node.nvme_path); "
                        "point the trainer at the shards directly with -- --data DIR instead of --data.")
    if opts.stage_policy not in STAGE_POLICIES:
        raise UserError(f"stage policy {opts.stage_policy!r} is not known: use 'partition' or 'replicate'.")
    return Staging(manifest=opts.data, policy=opts.stage_policy, nvme_data_dir=nvme_data_dir(profile.node.nvme_path))


def _variables(profile: Profile, opts: JobOptions) -> Dict[str, str]:
    """The job's environment variables: the profile's, the scheduler's (the trainer's host rules read them), the
    fusion buffer."""
    variables = dict(profile.environment.variables)
    variables.update(schedulers.for_profile(profile).job_variables(profile, opts))
    if opts.fusion_threshold is not None:
        if opts.fusion_threshold < 0:
            raise UserError(f"--fusion-threshold {opts.fusion_threshold} must be a byte count >= 0 (0 disables "
                            "tensor fusion).")
        variables["HOROVOD_FUSION_THRESHOLD"] = str(opts.fusion_threshold)
    return variables


def launch(profile: Profile, opts: JobOptions, nodes: int) -> Launch:
    """Step 2: NVMe staging and the environment of the ranks."""
    staging = _staging(profile, opts)
    alloc = list(profile.alloc_flags)
    if staging and "nvme" not in alloc:
        alloc.append("nvme")
    return Launch(ranks=profile.node.slots * nodes,
                  alloc_flags=tuple(alloc), staging=staging, variables=_variables(profile, opts),
                  python=opts.python or profile.environment.python)


# ---- step 3: optimisation (batch, LR, warm-up, accumulation, methods) ----------------------------

@dataclass(frozen=True)
class Optimisation:
    """The trainer's optimisation: global batch and linear LR follow the (virtual) rank count."""
    clips: int
    accum: int
    virtual_nodes: int
    virtual_ranks: int
    global_batch: int
    lr: float
    epochs: int
    warmup: float
    engine: str
    multigrid: Tuple[Dict[str, object], ...]


#: Options whose largest value is the trainer's (trainer.config.MAX_SIZES): (JobOptions field, trainer option).
SIZED_OPTIONS = (("epochs", "epochs"), ("clips_per_gpu", "batch_per_gpu"), ("num_classes", "num_classes"))


def shown_number(value: int) -> str:
    """A whole number as a one-line message shows it: a typo of hundreds of digits by its head and length."""
    text = str(value)
    return text if len(text) <= 24 else f"{text[:12]}... ({len(text)} digits)"


def _check_sizes(opts: JobOptions) -> None:
    """Refuse a count above the trainer's bound before the planner computes with it.

    Why here: the batch, the learning rate and the warm-up are floats made from these counts, and a count of
    hundreds of digits overflowed that arithmetic (a traceback) or went into the script as if it were a size.
    """
    for field_name, trainer_name in SIZED_OPTIONS:
        value, (high, what) = getattr(opts, field_name), trainer_config.MAX_SIZES[trainer_name]
        if value is not None and value > high:
            raise UserError(f"--{field_name.replace('_', '-')} {shown_number(value)} is more than the trainer "
                            f"takes: give at most {high:,} ({what}).")


def _accumulation(opts: JobOptions, nodes: int) -> Tuple[int, int]:
    """Accumulation steps and the virtual node count they stand for."""
    accum = opts.accum_steps
    if accum < 1:
        raise UserError(f"accumulation steps {accum} must be at least 1.")
    virtual_nodes = opts.virtual_nodes if opts.virtual_nodes is not None else nodes
    if virtual_nodes != nodes * accum:
        raise UserError(f"virtual nodes ({virtual_nodes}) must equal nodes x accumulation steps "
                        f"({nodes} x {accum}).")
    return accum, virtual_nodes


def _epochs_and_warmup(opts: JobOptions, recipe) -> Tuple[int, float]:
    """Epochs, and a warm-up that a short run (a test, a demo) scales instead of warming up forever."""
    epochs = opts.epochs if opts.epochs is not None else recipe.epochs
    if epochs < 1:
        raise UserError(f"--epochs {epochs} must be at least 1.")
    if opts.warmup_epochs is not None:
        return epochs, opts.warmup_epochs
    if recipe.warmup_epochs > epochs / 2:
        return epochs, round(recipe.warmup_epochs * epochs / recipe.epochs, 4)
    return epochs, recipe.warmup_epochs


def preset_values(name: Optional[str]) -> Dict[str, object]:
    """The trainer options preset ``name`` sets (trainer.config.PRESETS, its one owner); {} for none."""
    if name is None:
        return {}
    if name not in trainer_config.PRESETS:
        raise UserError(f"--preset {name!r} is not known: use one of {', '.join(trainer_config.PRESETS)}.")
    return dict(trainer_config.PRESETS[name])


def with_preset(opts: JobOptions) -> JobOptions:
    """``opts`` with the preset's method options where the user set none: options > preset > trainer defaults.

    A method option counts as set when it is named in ``opts.explicit`` (the CLI lists what the command line
    gave) or differs from the trainer's default (a JobOptions built in code).
    """
    values = preset_values(opts.preset)
    defaults = {f.name: f.default for f in dataclasses.fields(JobOptions)}
    unset = [name for name in PRESET_FIELDS
             if name in values and name not in opts.explicit and getattr(opts, name) == defaults[name]]
    return replace(opts, **{name: values[name] for name in unset})


def _check_methods(opts: JobOptions, accum: int, engine: str, clips: int) -> None:
    """Checked here so that a bad combination never reaches a compute node (the rules: trainer.config)."""
    if engine not in trainer_config.ENGINES:
        raise UserError(f"engine {engine!r} is not known: use 'horovod' (the paper's) or 'ddp' (torch.distributed).")
    for option in DECLARED:
        if option.choices and getattr(opts, option.name) not in option.choices:
            raise UserError(f"{option.flag} {getattr(opts, option.name)!r} is not known: use one of "
                            f"{', '.join(option.choices)}.")
    problem = trainer_config.method_conflict({
        **preset_values(opts.preset), **{option.name: getattr(opts, option.name) for option in DECLARED},
        "accum_steps": accum, "engine": engine, "batch_per_gpu": clips})
    if problem:
        raise UserError(f"--preset {opts.preset} and your options cannot run together: {problem}" if opts.preset
                        else problem)


def _multigrid(opts: JobOptions, recipe, epochs: int, global_batch: int) -> Tuple[Dict[str, object], ...]:
    """The multigrid phases shown in the summary (the trainer computes the same with the same module)."""
    if opts.schedule != "multigrid":
        return ()
    from trainer.methods import multigrid as mg  # torch-free
    segments = opts.num_segments or recipe.num_segments
    stages = sorted({0, int(epochs * 0.4), int(epochs * 0.8)})
    if epochs < 3 or len(stages) < 2 or stages[-1] >= epochs:
        raise UserError(f"a multigrid schedule needs at least 3 epochs (it has LR stages at 40% and 80% of "
                        f"the run and a final phase); {epochs} were asked for.")
    phases = mg.schedule(epochs=epochs, stages=stages, frames=segments, size=224,
                         clips_per_epoch=opts.train_clips or 240_000, base_batch=global_batch,
                         short_cycle=opts.short_cycle)
    return tuple({"stage": p.stage, "cycle": p.cycle, "frames": p.frames, "size": p.size,
                  "batch_mult": p.batch_mult, "lr_mult": p.lr_mult, "iterations": p.iterations} for p in phases)


def _given(opts: JobOptions, name: str) -> bool:
    """Whether option ``name`` was set: named in ``explicit`` (the command line gave it), or not at its default."""
    default = {f.name: f.default for f in dataclasses.fields(JobOptions)}[name]
    return name in opts.explicit or getattr(opts, name) != default


def _check_applies(opts: JobOptions, engine: str) -> None:
    """Refuse an option that this job would drop without a word: it applies only with another one (the
    scheduler's launch layout refuses a --layout its launcher does not use)."""
    if opts.command:
        given = [n for n in TRAINER_FIELDS if _given(opts, n)]
        if given:
            flag = "--" + given[0].replace("_", "-")
            raise UserError(f"{flag} sets the built-in trainer's optimisation, and --command runs your own "
                            f"program instead of it: drop {flag} (give your program its options in --command).")
        return
    rules = _declared_rules(opts) + [
        (_given(opts, "max_links") and not opts.until_complete, f"--max-links {opts.max_links}",
         "caps a chain until complete: add --until-complete, or drop --max-links (--chain K runs K jobs)."),
        (_given(opts, "stage_policy") and not opts.data, f"--stage-policy {opts.stage_policy}",
         "places the shards that --data stages to the nodes' NVMe: add --data MANIFEST, or drop --stage-policy."),
        (opts.fusion_threshold is not None and engine != "horovod", f"--fusion-threshold {opts.fusion_threshold}",
         f"sets Horovod's tensor-fusion buffer, which --engine {engine} does not use: drop it, or use "
         "--engine horovod."),
    ]
    for broken, flag, why in rules:
        if broken:
            raise UserError(f"{flag} {why}")


def _declared_rules(opts: JobOptions) -> List[Tuple[bool, str, str]]:
    """(broken, option as given, why) for each declared trainer option that requires another's value."""
    rules = []
    for option in DECLARED:
        if option.requires is None:
            continue
        other, needed = option.requires
        value = getattr(opts, option.name)
        given = option.flag if option.kind is bool else f"{option.flag} {value}"
        why = f"{option.requires_words}: add --{other.replace('_', '-')} {needed}, or drop {option.flag}."
        rules.append((_given(opts, option.name) and getattr(opts, other) != needed, given, why))
    return rules


def training_set_warning(global_batch: int, train_clips: Optional[int]) -> Optional[str]:
    """A global batch above the training clips of an epoch (when known): the trainer cannot run one step."""
    if not train_clips or global_batch <= train_clips:
        return None
    return (f"the global batch of {global_batch:,} clips is more than the {train_clips:,} training clips of an "
            "epoch: the trainer stops before its first step. Use fewer nodes (or virtual nodes) or fewer "
            "--clips-per-gpu.")


def _batch_warnings(profile: Profile, opts: JobOptions, opt: "Optimisation") -> Tuple[str, ...]:
    """A global batch beyond the training set, or beyond where the linear LR rule is known to hold (when the LR
    is the rule's: an LR the user set, by --lr or after ``--``, is the user's call)."""
    batch = opt.global_batch
    out = [w for w in (training_set_warning(batch, opts.train_clips),) if w]
    from_rule = opt.lr == linear_lr(batch, profile.recipe.lr_per_8_clips)
    if from_rule and opts.optimizer_sync == "sync" and opts.optimizer in ("sgd", "lars"):
        bound, shown = ((LARS_MAX_BATCH, "LARS is shown to train ResNet-50 (You et al. 2017: ImageNet)")
                        if opts.optimizer == "lars" else
                        (LINEAR_LR_MAX_BATCH, "the linear LR rule is shown to keep this recipe's accuracy (Lin et "
                                              "al. 2019: TSM on Kinetics, 1,536 GPUs)"))
        if batch > bound:
            out.append(f"the global batch of {batch:,} clips is above {bound:,}, the largest at which {shown}; "
                       f"LR {opt.lr:g} from the linear rule may diverge or lose accuracy. Consider "
                       + ("--optimizer lars, " if opts.optimizer == "sgd" else "")
                       + "fewer (virtual) nodes, or your own --lr.")
    return tuple(out)


def optimisation(profile: Profile, opts: JobOptions, nodes: int) -> Optimisation:
    """Step 3: batch, LR, warm-up, accumulation and the methods of the seed papers."""
    recipe = profile.recipe
    accum, virtual_nodes = _accumulation(opts, nodes)
    if opts.num_classes is not None and opts.num_classes < 0:
        raise UserError(f"--num-classes {opts.num_classes} must be a class count >= 1 (or leave it out for the "
                        "recipe's).")
    _check_sizes(opts)
    clips = opts.clips_per_gpu if opts.clips_per_gpu is not None else recipe.clips_per_gpu
    if clips < 1:
        raise UserError(f"clips per GPU {clips} must be at least 1.")
    virtual_ranks = profile.node.slots * nodes * accum
    global_batch = virtual_ranks * clips
    lr = opts.lr if opts.lr is not None else linear_lr(global_batch, recipe.lr_per_8_clips)
    epochs, warmup = _epochs_and_warmup(opts, recipe)
    _check_schedule(lr, epochs, warmup, recipe.lr_per_8_clips)
    engine = opts.engine or recipe.engine
    _check_methods(opts, accum, engine, clips)
    return Optimisation(clips=clips, accum=accum, virtual_nodes=virtual_nodes, virtual_ranks=virtual_ranks,
                        global_batch=global_batch, lr=lr, epochs=epochs, warmup=warmup, engine=engine,
                        multigrid=_multigrid(opts, recipe, epochs, global_batch))


# ---- step 4: the trainer's command line -----------------------------------------------------------

def _trainer_argv(profile: Profile, opts: JobOptions, run: Launch, opt: Optimisation) -> List[str]:
    """``python -m trainer`` with the planned values; methods only when they differ from the trainer's defaults."""
    recipe = profile.recipe
    argv = [
        run.python, "-m", "trainer",
        "--run-dir", opts.run_dir,
        "--engine", opt.engine,
        "--arch", opts.arch or recipe.arch,
        "--num-segments", str(opts.num_segments or recipe.num_segments),
        "--num-classes", str(opts.num_classes or recipe.num_classes),
        "--batch-per-gpu", str(opt.clips),
        "--accum-steps", str(opt.accum),
        "--lr", repr(opt.lr),
        "--warmup-epochs", repr(float(opt.warmup)),
        "--epochs", str(opt.epochs),
        "--momentum", repr(recipe.momentum),
        "--weight-decay", repr(recipe.weight_decay),
    ]
    if run.staging:
        argv += ["--data", run.staging.nvme_data_dir]
    return argv + _methods_argv(opts)


def _methods_argv(opts: JobOptions) -> List[str]:
    """The declared trainer options (trainer.submit_options) that differ from the trainer's defaults; with a
    preset, ``--preset NAME`` and every value it sets, as resolved (an option the user gave wins), so that the
    script shows each of them.

    An option that requires another's value is written with that one: a valued one (--avg-interval) whenever
    that one is written, a flag (--short-cycle) when it is on.
    """
    preset = preset_values(opts.preset)

    def shown(option) -> bool:
        return getattr(opts, option.name) != option.default or option.name in preset

    argv = ["--preset", str(opts.preset)] if preset else []
    for option in DECLARED:
        if option.requires is not None:
            continue
        followers = [o for o in DECLARED if o.requires is not None and o.requires[0] == option.name]
        if shown(option) or any(o.name in preset for o in followers):
            for o in [option, *followers]:
                argv += _option_words(o, getattr(opts, o.name))
    for name, value in preset.items():
        if name not in PRESET_FIELDS:
            argv += ["--" + name.replace("_", "-"), str(value)]
    return argv


def _option_words(option, value: object) -> List[str]:
    """A declared option as the trainer's command line takes it: a flag alone (when on), else flag and value."""
    if option.kind is bool:
        return [option.flag] if value else []
    return [option.flag, str(value)]


def _given_to_trainer(opts: JobOptions) -> Dict[str, object]:
    """Trainer options the user set through submit options (a conflicting value after ``--`` is refused)."""
    given = {name: getattr(opts, name) for name in ("epochs", "lr", "warmup_epochs", "engine", "arch",
                                                     "num_classes") if getattr(opts, name) is not None}
    given.update({o.name: getattr(opts, o.name) for o in DECLARED if getattr(opts, o.name) != o.default})
    return given


def _checked_argv(profile: Profile, opts: JobOptions, run: Launch, opt: Optimisation) -> Tuple[List[str], Optimisation]:
    """The trainer's full argv, parsed as a rank will parse it; the optimisation it really runs.
    With --command, the user's own program and its arguments, which this tool cannot parse."""
    if opts.total_steps is not None and not opts.command:
        raise UserError(f"--total-steps {opts.total_steps} declares the steps of your own program (--command); "
                        "the built-in trainer counts its own steps (set --epochs instead).")
    if opts.total_steps is not None and opts.total_steps < 1:
        raise UserError(f"--total-steps {opts.total_steps} must be at least 1.")
    if opts.command:
        if opts.preset:
            raise UserError(f"--preset {opts.preset} sets options of the trainer, and --command runs your own "
                            "program instead of it: drop one of them (give your program its options yourself).")
        if any(any(ch in w for ch in "\n\r\0") for w in opts.command):
            raise UserError("--command holds a line break or NUL byte; give the command on one line.")
        return list(command_with_python(opts.command, run.python)) + list(opts.trainer_args), opt
    argv = _trainer_argv(profile, opts, run, opt)
    if opts.check_trainer_args:
        preset = preset_values(opts.preset)
        from_preset = [n for n in PRESET_FIELDS if n in preset and n not in opts.explicit]
        final = trainer_args.check(argv[3:], opts.trainer_args, _given_to_trainer(opts), run.staging is not None,
                                   opts.preset, from_preset)
        # What the ranks will really use (arguments after `--` may set them): the summary must not differ.
        lr = final.lr if final.lr is not None else opt.lr
        _check_schedule(lr, opt.epochs, final.warmup_epochs, profile.recipe.lr_per_8_clips)
        opt = replace(opt, lr=lr, warmup=final.warmup_epochs)
    return argv + list(opts.trainer_args), opt


def request_step(profile: Profile, opts: JobOptions, nodes: int) -> schedulers.Request:
    """How the job asks for its nodes and what starts its ranks: the profile's scheduler decides."""
    return schedulers.for_profile(profile).request(profile, opts, nodes)


def make_plan(profile: Profile, opts: JobOptions) -> Plan:
    """Check ``opts`` against ``profile``'s policy and derive the job's shape: the three steps, composed."""
    opts = with_preset(opts)
    alloc = allocation(profile, opts)
    run = launch(profile, opts, alloc.nodes)
    opt = optimisation(profile, opts, alloc.nodes)
    argv, opt = _checked_argv(profile, opts, run, opt)
    req = request_step(profile, opts, alloc.nodes)
    _check_applies(opts, opt.engine)
    scheduler = schedulers.for_profile(profile)
    placed = scheduler.launch_layout(profile, opts, alloc.nodes, req.launcher)
    nbin, minutes = alloc.bin, alloc.minutes
    return Plan(
        scheduler=scheduler.name, launch_layout=placed, script_name=scheduler.script_name,
        gpus_per_node=profile.node.gpus,
        scheduler_limits=alloc.limits,
        request_kind=req.kind, launcher=req.launcher, slots=req.slots, slots_per_host=req.slots_per_host,
        shape_directives=req.shape, extra_directives=req.extra, memory=req.memory,
        user_command=bool(opts.command),
        machine=profile.name, nodes=alloc.nodes, ranks_per_node=profile.node.slots, ranks=run.ranks,
        layout=placed.name, walltime_minutes=minutes,
        walltime=format_hhmm(minutes), bin=nbin.bin, bin_max_walltime=nbin.max_walltime, queue=alloc.queue_name,
        alloc_flags=run.alloc_flags if req.kind == "nnodes" else (), node_hours=alloc.nodes * minutes / 60.0 * opts.chain,
        account_flag=profile.scheduler.account_flag, account=alloc.account, job_name=opts.job_name,
        run_dir=opts.run_dir, chain=opts.chain, warning_signal="USR2", warning_minutes=alloc.warning_minutes,
        submit_mode=profile.scheduler.submit_mode, python=run.python, modules=profile.environment.modules,
        setup=profile.environment.setup, variables=run.variables, smpiargs=profile.launcher.smpiargs,
        nvme_path=profile.node.nvme_path, staging=run.staging, engine=opt.engine, clips_per_gpu=opt.clips,
        accum_steps=opt.accum, virtual_nodes=opt.virtual_nodes, virtual_ranks=opt.virtual_ranks,
        global_batch=opt.global_batch, lr=opt.lr, epochs=opt.epochs, warmup_epochs=float(opt.warmup),
        trainer_argv=tuple(argv), **{o.name: getattr(opts, o.name) for o in DECLARED if o.in_plan},
        multigrid=opt.multigrid, until_complete=opts.until_complete,
        max_links=opts.max_links if opts.until_complete else opts.chain, preset=opts.preset,
        total_steps=opts.total_steps,
        command_python=opts.command[0] if opts.command and is_bare_python(opts.command[0]) else None,
        warnings=() if opts.command else _batch_warnings(profile, opts, opt),
    )


def describe(plan: Plan) -> str:
    """Short plan summary for stderr next to a dry-run script. Counts read as counts (``1 node``, ``2 nodes``)
    and the ranks of nodes without GPUs as CPU ranks (summit_jobs.wording): the summary is what a
    user checks before spending node-hours, and "8 GPUs" there for CPU ranks read as a request for GPUs."""
    rank = "rank" if plan.gpus_per_node else "CPU rank"
    lines = [
        f"machine {plan.machine}: {wording.count(plan.nodes, 'node')} x {wording.count(plan.ranks_per_node, rank)}"
        f" = {wording.count(plan.ranks, rank)} ({_layout_words(plan)})",
        _allocation_line(plan),
    ]
    if not plan.user_command:
        lines.append(
            f"global batch {wording.count(plan.global_batch, 'clip')} ({plan.clips_per_gpu} "
            f"{wording.per_rank(plan.gpus_per_node)}"
            + (f" x {plan.accum_steps} accumulation steps" if plan.accum_steps > 1 else "")
            + f"), LR {plan.lr:g}, {wording.count(plan.epochs, 'epoch')} with {plan.warmup_epochs:g} warm-up, "
            f"engine {plan.engine}")
    if plan.virtual_nodes != plan.nodes and not plan.user_command:
        virtual = wording.count(plan.virtual_ranks, "virtual rank")
        lines.append(f"reproduces a {plan.virtual_nodes:,}-node run ({virtual}) exactly")
    if plan.request_kind == "slots":
        lines.append(f"asks for {wording.count(plan.slots, 'slot')} ({plan.slots_per_host} per host); ranks started "
                     f"by {plan.launcher}" + (f"; memory {plan.memory}" if plan.memory else ""))
    if plan.user_command:
        lines += _user_command_lines(plan)
    if plan.staging:
        lines.append(f"stages {plan.staging.manifest} to node-local NVMe ({plan.staging.policy})")
    if not plan.user_command:
        lines += _method_lines(plan)
    return "\n".join(lines)


def _layout_words(plan: Plan) -> str:
    """The layout as the summary names it: ``gpu layout`` on GPU nodes; on nodes without GPUs, what the ``gpu``
    layout does there (one rank per CPU slot)."""
    if plan.gpus_per_node or plan.layout != "gpu":
        return f"{plan.layout} layout"
    return "one rank per CPU slot"


def _allocation_line(plan: Plan) -> str:
    """Queue, walltime and bin, and the node-hours the allocation is charged at most."""
    return (f"queue {plan.queue}" + "".join(f" ({name})" for name in plan.scheduler_limits)
            + f", walltime {plan.walltime} (bin {plan.bin}, max {plan.bin_max_walltime}), "
            f"at most {plan.node_hours:,.1f} node-hours (if it runs to its walltime)"
            + (f" for {plan.chain} chained jobs" if plan.chain > 1 else "")
            + (f" per link; chained until complete, at most {wording.count(plan.max_links, 'link')}"
               if plan.until_complete else ""))


def _user_command_lines(plan: Plan) -> List[str]:
    """What is known of the user's own program: its command and the total it declared (nothing of its
    batch, LR or epochs, which are its own)."""
    total = (f"{plan.total_steps:,} steps in all (--total-steps): status shows step/total and an ETA"
             if plan.total_steps else "no total declared (--total-steps N): status shows the step, no ETA")
    lines = [f"runs your command on every rank: {shlex.join(plan.trainer_argv)}"]
    if plan.command_python:
        lines.append(f"  {plan.command_python}: the profile's interpreter (environment.python), which `doctor "
                     "--command` checks; a path runs as given")
    return lines + [total]


#: A program word that means "the Python on PATH": the ranks run the profile's interpreter for it instead.
_BARE_PYTHON_RE = re.compile(r"python[0-9.]*")


def is_bare_python(word: str) -> bool:
    """``python``, ``python3``, ``python3.11``: an interpreter named without a folder."""
    return bool(_BARE_PYTHON_RE.fullmatch(word))


def is_python_program(word: str) -> bool:
    """A Python interpreter, bare or with its folder (``python3``, ``/opt/conda/bin/python3.11``)."""
    return is_bare_python(word.rsplit("/", 1)[-1])


def python_target(command: Tuple[str, ...]) -> Optional[Tuple[str, int]]:
    """What a Python command runs: ``("script", i)`` (``python3 -u train.py`` -> 2) or ``("module", i)``
    (``python -m pkg.train`` -> 2), ``i`` the word's index; None for ``-c``/``-``, a command without either,
    and a program that is not a Python interpreter."""
    if not command or not is_python_program(command[0]):
        return None
    i = 1
    while i < len(command):
        word = command[i]
        if word == "-m":
            return ("module", i + 1) if i + 1 < len(command) else None
        if word in ("-c", "-"):
            return None
        if word in ("-X", "-W"):
            i += 2
        elif word.startswith("-"):
            i += 1
        else:
            return "script", i
    return None


def script_index(command: Tuple[str, ...]) -> Optional[int]:
    """Where the script is in a Python command (``python3 -u train.py --lr 1`` -> 2); None otherwise."""
    found = python_target(command)
    return found[1] if found and found[0] == "script" else None


def command_with_python(command: Tuple[str, ...], python: str) -> Tuple[str, ...]:
    """``command`` with a bare ``python``/``python3`` program replaced by the profile's interpreter.

    Why: the job's PATH is the submitter's shell's (LSF and Slurm copy the environment) or the site's default,
    and its ``python3`` is often not the interpreter that has torch (a venv not activated in this shell, the
    system Python on the nodes), while ``doctor`` and the job's own helpers (``python -m trainer.rankenv``) use
    the profile's. One interpreter for all of them; a program given with a folder runs as given."""
    if command and is_bare_python(command[0]):
        return (python,) + tuple(command[1:])
    return tuple(command)


def _method_lines(plan: Plan) -> List[str]:
    """The built-in trainer's methods: optimizer, averaging, compression, fusion, multigrid."""
    methods = ([f"preset {plan.preset}"] if plan.preset else []) + [f"optimizer {plan.optimizer}"]
    if plan.optimizer_sync == "aavg":
        methods.append("AAVG model averaging every "
                       + (wording.count(plan.avg_interval, "step") if plan.avg_interval > 0 else "epoch"))
    if plan.compression != "none":
        methods.append(f"{plan.compression} gradient compression")
    if "HOROVOD_FUSION_THRESHOLD" in plan.variables:
        methods.append(f"fusion buffer {int(plan.variables['HOROVOD_FUSION_THRESHOLD']):,} bytes")
    lines = [", ".join(methods)]
    if plan.multigrid:
        lines.append("multigrid schedule (stage, cycle, frames x size, batch x, LR x, iterations):")
        for p in plan.multigrid:
            cyc = "final" if p["cycle"] < 0 else p["cycle"]
            lines.append(f"  {p['stage']} {cyc}: {p['frames']} x {p['size']}, batch x{p['batch_mult']:g}, "
                         f"LR x{p['lr_mult']:g}, {wording.count(int(p['iterations']), 'iteration')}")
    return lines


#: Interpreters whose first argument that is not an option names the program (``python3 train.py``).
_INTERPRETER_RE = re.compile(r"(python|pypy)[0-9.]*|bash|sh|env")
#: Interpreter options that take the next word as their value (``python -X dev train.py``).
_VALUE_OPTIONS = ("-X", "-W", "-c")


def default_job_name(command: Tuple[str, ...]) -> str:
    """The job name when --job-name is not given: ``tsm`` for the built-in trainer; for a user's command, its
    program's name (``train`` for ``python3 train.py``, ``mypkg.train`` for ``python -m mypkg.train``), in the
    characters job names and file names take, so that the scheduler's job list and the output files say what
    runs."""
    if not command:
        return JobOptions.job_name
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", _program_word(list(command)))
    name = re.sub(r"^[^A-Za-z0-9]+", "", name)[:128]
    return name or "job"


def _program_word(words: List[str]) -> str:
    """The word that names what ``words`` runs: past an interpreter (and ``env``) and their options, without
    a folder or an extension (``.py``, ``.sh``)."""
    first = words[0].rsplit("/", 1)[-1]
    rest = list(words[1:]) if _INTERPRETER_RE.fullmatch(first) else []
    while rest:
        word = rest.pop(0)
        if word == "-m" and rest:
            return rest[0]
        if word in _VALUE_OPTIONS:
            rest = rest[1:]
        elif not word.startswith("-") and not (first == "env" and "=" in word):
            return _program_word([word] + rest)
    stem, dot, ext = first.rpartition(".")
    return stem if dot and stem and ext in ("py", "sh", "bash") else first
