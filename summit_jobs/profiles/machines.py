"""Machine profiles: an LSF or Slurm site described as data (envs/*.yaml).

Nothing in the code is specific to Summit: every limit the planner checks and
every line the templates print about a machine comes from a profile. A site is
added by dropping a YAML file into ``~/.config/summit-jobs/machines/`` (or any
folder named by ``SUMMIT_JOBS_MACHINES_PATH``); it is validated against the
dataclasses below, which name the bad key on error. The dataclasses are the
file's shape, the scheduler section's too; what that section's values may be,
and which launchers there are, are its scheduler's rules, which the loader
asks for through summit_jobs.profiles.sections (the schedulers are the room
above this one).
"""
from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Literal, Optional, Tuple

from summit_jobs import resources
from summit_jobs.profiles import sections, usercache
from summit_jobs.profiles.choices import REQUESTS  # noqa: F401 - part of this module's interface
from summit_jobs.errors import UserError
from summit_jobs.profiles.schema import build, deep_merge, number


#: Shapes of the profile and config values that reach a job script: checked when a profile is loaded,
#: so that a typo or a hostile config fails with the key named instead of reaching a shell.
SHELL_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
TOKEN_RE = re.compile(r"[A-Za-z0-9_.,:=+/@%-]+")
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
#: A path that may name variables the compute node's shell or the trainer expands ($USER, ${SCRATCH}).
VAR_PATH_RE = re.compile(r"(?:[A-Za-z0-9_.,:=+/@%-]|\$[A-Za-z_][A-Za-z0-9_]*|\$\{[A-Za-z_][A-Za-z0-9_]*\})+")
#: What each shape above is, in the words of a refusal ("... so it must be WORDS").
SHAPES = {SHELL_NAME_RE: "a shell variable name (letters, digits, '_'; not starting with a digit)",
          TOKEN_RE: "one word of letters, digits and . , : = + / @ % _ - (no spaces, quotes, $ or ;)",
          NAME_RE: "a name of letters, digits, '.', '_' and '-' (starting with a letter or digit)",
          VAR_PATH_RE: "a path of letters, digits and . _ - / with $NAME or ${NAME} references only"}


def _line_safe(value: str) -> bool:
    return not any(ch in value for ch in "\n\r\0")


def check_shapes(checks: Iterable[Tuple[str, str, "re.Pattern[str]", str]]) -> None:
    """Raise ValueError for the first ``(key, value, pattern, words)`` whose value is not of its pattern's
    shape (``words`` say the shape): one sentence for every value a job script prints, whichever room's
    rule it is (a scheduler checks its own section's values with it)."""
    for key, value, pattern, words in checks:
        if not pattern.fullmatch(value):
            raise ValueError(f"{key} = {value!r} is not allowed: it is printed into job scripts, so it must be "
                             f"{words}")


def check_script_values(profile: "Profile") -> None:
    """Raise ValueError naming the key whose value cannot go into a job script safely.

    Names (variables, queues, the machine) must be plain names; ``module``
    and ``alloc_flags`` entries single tokens; ``nvme_path`` a path whose only
    ``$`` are variable references. Everything else that is printed is quoted by
    the renderer but may not hold a line break. ``environment.setup`` lines
    are shell by design (conda activation, site scripts) and are the one
    exception: they come from the profile the user chose to load. The values
    of the scheduler section are its scheduler's to check (sections.py).
    """
    env = profile.environment
    checks = [("name", profile.name, NAME_RE)]
    checks += [(f"environment.variables key {k!r}", k, SHELL_NAME_RE) for k in env.variables]
    checks += [(f"environment.modules[{i}]", m, TOKEN_RE) for i, m in enumerate(env.modules)]
    checks += [(f"alloc_flags[{i}]", f, TOKEN_RE) for i, f in enumerate(profile.alloc_flags)]
    checks += [(f"queues key {q!r}", q, NAME_RE) for q in profile.queues]
    if profile.node.nvme_path:
        checks.append(("node.nvme_path", profile.node.nvme_path, VAR_PATH_RE))
    check_shapes((key, value, pattern, SHAPES[pattern]) for key, value, pattern in checks)
    lines = [("environment.python", env.python), ("launcher.smpiargs", profile.launcher.smpiargs),
             ("runs_dir", profile.runs_dir or "")]
    lines += [(f"environment.variables.{k}", v) for k, v in env.variables.items()]
    lines += [(f"environment.setup[{i}]", v) for i, v in enumerate(env.setup)]
    for key, value in lines:
        if not _line_safe(value):
            raise ValueError(f"{key} = {value!r} holds a line break or NUL byte; give it on one line")


def _check_limits(profile: "Profile") -> None:
    """Raise ValueError naming the key whose value each number's range alone cannot catch: bins whose node
    counts are upside down, queue limits that are not walltimes or name no bin, a warm-up longer than the run,
    folders that are not absolute (the NVMe's among them), a backbone the trainer does not build, a scheduler
    section its scheduler refuses (sections.py), a fusion buffer that is no size."""
    from trainer import config as trainer_config   # torch-free: the trainer's choice lists
    for i, b in enumerate(profile.walltime_bins):
        parse_hhmm(b.max_walltime, f"walltime_bins[{i}].max_walltime")
        if b.min_nodes > b.max_nodes:
            raise ValueError(f"walltime_bins[{i}] (bin {b.bin}) has min_nodes {b.min_nodes} above max_nodes "
                             f"{b.max_nodes}; give min_nodes <= max_nodes")
    bins = {b.bin for b in profile.walltime_bins}
    for name, q in profile.queues.items():
        if q.max_walltime is not None:
            parse_hhmm(q.max_walltime, f"queues.{name}.max_walltime")
        unknown = sorted(set(q.allowed_bins or ()) - bins)
        if unknown:
            raise ValueError(f"queues.{name}.allowed_bins names bin {unknown[0]}, which walltime_bins does not "
                             f"list (bins: {', '.join(map(str, sorted(bins)))})")
    recipe = profile.recipe
    if recipe.warmup_epochs > recipe.epochs:
        raise ValueError(f"recipe.warmup_epochs = {recipe.warmup_epochs:g} is above recipe.epochs = "
                         f"{recipe.epochs}; give a warm-up between 0 and the epochs")
    if recipe.arch not in trainer_config.ARCHS:
        raise ValueError(f"recipe.arch = {recipe.arch!r} is not a backbone the trainer builds; use one of "
                         f"{', '.join(trainer_config.ARCHS)}")
    nvme = profile.node.nvme_path
    if nvme is not None and not nvme.startswith(("/", "$")):
        raise ValueError(f"node.nvme_path = {nvme!r} must be an absolute folder on the compute nodes (e.g. "
                         "/mnt/bb/$USER) or start with a variable their shell expands ($TMPDIR/data): a relative "
                         "path would be resolved in each job's working folder, and one starting with '-' read as "
                         "an option")
    for key in ("compute_read_only_prefixes", "node_local_prefixes"):
        for i, prefix in enumerate(getattr(profile, key)):
            if not prefix.startswith("/") or not prefix.strip("/"):
                raise ValueError(f"{key}[{i}] = {prefix!r} must be an absolute folder below / (e.g. /ccs/home)")
    if not profile.environment.python.strip():
        raise ValueError("environment.python is empty; give the compute nodes' interpreter (python3, a path, "
                         "or auto)")
    if not ACCOUNT_FLAG_RE.fullmatch(profile.scheduler.account_flag):
        raise ValueError(f"scheduler.account_flag = {profile.scheduler.account_flag!r} must be one option of the "
                         "scheduler's submit command, e.g. -P, -G or --account")
    _check_keys_of_others(profile)
    _rules(profile).check_profile(profile)
    fusion = profile.environment.variables.get("HOROVOD_FUSION_THRESHOLD")
    if fusion is not None and not re.fullmatch(r"[0-9]+", fusion):
        raise ValueError(f"environment.variables.HOROVOD_FUSION_THRESHOLD = {fusion!r} must be a byte count "
                         "(a whole number >= 0)")


#: Scheduler keys only IBM LSF reads (``-gpu``, ``-M``, ``-app``, CSM's launch node, the embedded LSF): a Slurm
#: profile leaves them out, and its own keys are under ``scheduler.slurm``.
LSF_ONLY_KEYS = ("embedded", "csm", "launch_node_prefixes", "virtual_nodes", "request", "slots_per_host", "gpu",
                 "memory", "app", "container", "extra_directives")


def _check_keys_of_others(profile: "Profile") -> None:
    """Raise ValueError naming a key this module describes for LSF or Slurm on the profile of another scheduler
    (``scheduler.<kind>`` holds its own keys): nothing would read it there, and some (``embedded``) change how
    this tool reaches the machine. LSF and Slurm refuse each other's keys themselves, in their own words."""
    sched = profile.scheduler
    if sched.kind in ("lsf", "slurm"):
        return
    unset = Scheduler(submit_mode=sched.submit_mode, account_flag=sched.account_flag, kind=sched.kind, own=sched.own)
    for key in LSF_ONLY_KEYS + ("slurm",):
        if getattr(unset, key) != getattr(sched, key):
            raise ValueError(f"scheduler.{key} is {'Slurm' if key == 'slurm' else 'LSF'}'s, and this profile's "
                             f"scheduler.kind is {sched.kind}: remove it (its own keys go under scheduler.{sched.kind})")


def _rules(profile: "Profile") -> sections.SectionRules:
    """The rules of the profile's scheduler (sections.py); a ``scheduler.kind`` no scheduler answers to is the
    profile's fault, refused naming the key."""
    try:
        return sections.rules(profile)
    except UserError as exc:
        raise ValueError(f"scheduler.kind: {exc}") from None


#: What ``scheduler.account_flag`` may look like: one option of the submit command (``-P``, ``--account``).
ACCOUNT_FLAG_RE = re.compile(r"-[A-Za-z]|--[a-z][a-z-]{0,30}")


def _launcher_of_scheduler(profile: "Profile") -> "Launcher":
    """The profile's launcher with its kind checked against its scheduler's launchers, or that scheduler's
    default where the file names none: which launchers exist is the scheduler's to say (sections.py)."""
    scheduler = _rules(profile)
    kind = profile.launcher.kind
    if kind is None:
        return dataclasses.replace(profile.launcher, kind=scheduler.default_launcher)
    if kind not in scheduler.launchers:
        raise ValueError(f"'launcher.kind' must be one of {' | '.join(repr(k) for k in scheduler.launchers)}, "
                         f"got {kind!r}.")
    return profile.launcher


def parse_hhmm(text: str, what: str) -> int:
    """Minutes from LSF's ``[hours:]minutes`` (``-W`` never takes seconds)."""
    text = str(text).strip()
    parts = text.split(":")
    ok = 1 <= len(parts) <= 2 and all(re.fullmatch(r"[0-9]{1,6}", p) for p in parts)
    if ok and len(parts) == 2 and (len(parts[1]) != 2 or int(parts[1]) >= 60):
        ok = False
    if not ok:
        raise UserError(
            f"{what} {text!r} is not in LSF's [hours:]minutes form. "
            "Write H:MM (for example 2:00 or 0:30) or plain minutes (for example 90); "
            "LSF's -W does not take seconds.")
    minutes = int(parts[0]) * 60 + int(parts[1]) if len(parts) == 2 else int(parts[0])
    if minutes <= 0:
        raise UserError(f"{what} {text!r} must be at least one minute.")
    return minutes


def format_hhmm(minutes: int) -> str:
    return f"{minutes // 60}:{minutes % 60:02d}"


@dataclass(frozen=True)
class WalltimeBin:
    bin: int = number(low=1)
    min_nodes: int = number(low=1)
    max_nodes: int = number(low=1)
    max_walltime: str

    @property
    def max_minutes(self) -> int:
        return parse_hhmm(self.max_walltime, f"walltime bin {self.bin} max_walltime")


@dataclass(frozen=True)
class Queue:
    description: str = ""
    default: bool = False
    #: Cap of the queue itself; the bin table may cap lower when ``use_bins``.
    max_walltime: Optional[str] = None
    use_bins: bool = True
    #: Only jobs whose node count falls in these bins may use the queue (killable: 4, 5).
    allowed_bins: Optional[Tuple[int, ...]] = number(None, low=1)
    max_nodes: Optional[int] = number(None, low=1)
    #: Debug queues forbid dependency chains (one job per user in any state).
    chaining: bool = True
    max_jobs_per_user: Optional[int] = number(None, low=1)
    #: Jobs one user may have queued at once; the scheduler rejects more at submit (Summit batch: 100).
    max_queued_per_user: Optional[int] = number(None, low=1)


#: Memory units LSF takes (LSF_UNIT_FOR_LIMITS) and what a memory request counts.
MEMORY_UNITS = ("KB", "MB", "GB", "TB")
#: The most memory per node ``--mem`` may ask for, in KB of 1,024 bytes: 1,024 TB, far above any node built
#: today (the largest shared-memory machines hold tens of TB). Above it the value is a typo, and one of many
#: digits overflowed the conversion into the scheduler's unit instead of being refused.
MAX_MEMORY_KB = 1024 ** 4
MEMORY_PER = ("slot", "host", "job")


@dataclass(frozen=True)
class Gpu:
    """The ``-gpu`` request of IBM LSF 10.1 (``num`` is per host and comes from node.gpus)."""
    mode: Literal["shared", "exclusive_process"] = "exclusive_process"
    j_exclusive: Optional[bool] = None
    mps: Optional[bool] = None
    gmodel: Optional[str] = None
    gmem: Optional[str] = None
    #: Request GPUs with the legacy ``-R "rusage[ngpus_excl_p=N]"`` instead (only where the site still takes it).
    legacy_rusage: bool = False


@dataclass(frozen=True)
class Memory:
    """How the site reads a memory request: the unit of -M and rusage[mem] and what they count."""
    unit: Literal["KB", "MB", "GB", "TB"] = "MB"
    #: ``slot``: per slot (LSF's default for rusage); ``host``: per host; ``job``: for the whole job.
    per: Literal["slot", "host", "job"] = "slot"
    #: Which forms the site wants: ``-M`` (a limit) and/or ``rusage`` (a reservation in -R).
    forms: Tuple[str, ...] = ("-M", "rusage")


#: How a Slurm job asks for its nodes' GPUs: ``--gpus-per-node=N`` (select/cons_tres, Slurm 19.05 and later),
#: ``--gres=gpu:N`` (every Slurm), or not at all (a site that gives whole nodes with their GPUs).
SLURM_GPU_FORMS = ("gpus-per-node", "gres", "none")


@dataclass(frozen=True)
class Qos:
    """A Slurm quality of service a job may name (``--qos``): caps of its own on top of the partition's."""
    description: str = ""
    #: The QOS of a job that names none (at most one); with none marked, no ``--qos`` is written.
    default: bool = False
    max_walltime: Optional[str] = None
    max_nodes: Optional[int] = number(None, low=1)
    #: Some debug QOS forbid dependent jobs (Frontier's: one job per user in any state, no chaining).
    chaining: bool = True
    max_queued_per_user: Optional[int] = number(None, low=1)


@dataclass(frozen=True)
class Slurm:
    """What a Slurm site asks of a job's ``#SBATCH`` lines (``scheduler.kind: slurm``). The profile's
    ``queues`` are the partitions."""
    #: Write ``--partition=QUEUE``; false where the site picks nodes by constraint and QOS alone (Perlmutter).
    partition: bool = True
    #: The QOS jobs may name, with their limits (--qos NAME picks one).
    qos: Dict[str, Qos] = field(default_factory=dict)
    #: Node features every job asks for (``--constraint``, with Slurm's ``&`` and ``|``), e.g. ``gpu``.
    constraint: Optional[str] = None
    #: The feature added to the constraint when ``--data`` stages to node-local NVMe (Frontier: ``nvme``).
    nvme_constraint: Optional[str] = None
    gpus: Literal["gpus-per-node", "gres", "none"] = "gpus-per-node"
    #: A GPU type as the site's gres.conf names it (``--gpus-per-node=a100:4``); none: any.
    gpu_type: Optional[str] = None
    #: CPUs per rank (``--cpus-per-task``, repeated on every srun line); default: the node's cores per rank.
    cpus_per_task: Optional[int] = number(None, low=1)
    #: Memory per node every job asks for (``--mem``, Slurm's form: 0 for all of it, 500G, 64000M); --mem
    #: overrides; none: the partition's default.
    memory: Optional[str] = None
    #: ``--exclusive``: no other job on the job's nodes.
    exclusive: bool = False
    #: Further #SBATCH lines every job needs, each ``--option[=value]`` (validated tokens).
    extra_directives: Tuple[str, ...] = ()
    #: Further options of the srun line that starts one rank per task (the srun launcher), each
    #: ``--option[=value]``: how a site binds GPUs to ranks (Frontier: --gpus-per-task=1, --gpu-bind=closest).
    step_options: Tuple[str, ...] = ()


@dataclass(frozen=True)
class Scheduler:
    #: ``file``: the submit command is given the script's path (Summit, every Slurm site); ``stdin``: the
    #: script on its standard input (most LSF sites). The scheduler's ``submit_words`` says it in its own command.
    submit_mode: Literal["file", "stdin"]
    #: ``-P project`` on OLCF's LSF, ``-G bank`` at LLNL, ``--account`` on Slurm: an option of the scheduler's
    #: submit command (each scheduler says which of its own it takes: its check_profile).
    account_flag: str
    account_name: str = "project"
    account_required: bool = True
    #: The embedded single-machine LSF of this package runs the jobs.
    embedded: bool = False
    #: IBM CSM (Summit, Lassen): the allocation lists the launch node first, with one slot; the ranks skip it.
    #: Off on generic LSF clusters, where the first host runs rank 0.
    csm: bool = False
    #: Host-name prefixes that are never compute nodes (dropped wherever they appear in the host list).
    launch_node_prefixes: Tuple[str, ...] = ("batch", "login")
    #: Minutes before the run limit at which ``-wa USR2`` is delivered (checkpoint-and-chain).
    warning_minutes: int = number(10, low=1)
    #: Embedded LSF only: how many virtual nodes this machine pretends to have.
    virtual_nodes: Optional[int] = number(None, low=1)
    #: ``nnodes`` (CSM, Summit) or ``slots`` (-n and span[ptile], every other LSF cluster).
    request: Literal["nnodes", "slots"] = "nnodes"
    #: Slots asked per host in the slot form (default: the node's cores, i.e. whole nodes).
    slots_per_host: Optional[int] = number(None, low=1)
    gpu: Gpu = field(default_factory=Gpu)
    memory: Memory = field(default_factory=Memory)
    #: Application profile (-app) every job uses, e.g. Janelia's parallel-96; --app overrides.
    app: Optional[str] = None
    #: Container image every job runs in (-a "docker(IMAGE)", WashU RIS); --container overrides.
    container: Optional[str] = None
    #: Further #BSUB lines the site requires, each "-FLAG value" (validated tokens).
    extra_directives: Tuple[str, ...] = ()
    #: The batch scheduler: IBM LSF (the keys above), Slurm (``slurm`` below; the LSF-only keys stay unset), or
    #: any other that summit_jobs.schedulers.IMPLEMENTATIONS names (its own keys under ``scheduler.<kind>``).
    kind: str = "lsf"
    slurm: Slurm = field(default_factory=Slurm)
    #: ``scheduler.<kind>`` of a scheduler this file does not describe (none for LSF and Slurm): the section as
    #: written, which that scheduler checks and reads (its check_profile), so that a new scheduler brings its
    #: keys without an edit here.
    own: Optional[Dict[str, Any]] = None


@dataclass(frozen=True)
class Node:
    """One compute node. Zero means "none" for GPUs and CPU slots and "unknown" for the sizes and speeds."""
    gpus: int = number(low=0)
    cores: int = number(low=1)
    sockets: int = number(2, low=1)
    smt: int = number(4, low=1)
    #: Ranks per node when the node has no GPU (the embedded machine: CPU ranks).
    cpu_slots: int = number(0, low=0)
    memory_gb: float = number(0.0, low=0)
    #: May contain ``$USER``: expanded by the shell on the compute node.
    nvme_path: Optional[str] = None
    nvme_capacity_gb: float = number(0.0, low=0)
    nvme_read_gbps: float = number(0.0, low=0)
    nvme_write_gbps: float = number(0.0, low=0)

    @property
    def slots(self) -> int:
        """Ranks per node: one per GPU, or the configured CPU slots."""
        return self.gpus if self.gpus > 0 else self.cpu_slots


@dataclass(frozen=True)
class Launcher:
    #: What starts the ranks: one of the profile's scheduler's launchers (None in the file: the scheduler's
    #: default, filled in when the profile is loaded); --launcher overrides.
    kind: Optional[str] = None
    #: ``gpu``: one resource set per GPU (-n 6N -r 6 -a 1 -g 1 -c 7);
    #: ``node``: one resource set per node holding all GPUs (-n N -r 1 -a 6 -g 6 -c 42).
    layout: Literal["gpu", "node"] = "gpu"
    #: Extra ``--smpiargs`` value ("off", "-gpu", "-disable_gpu_hooks"); none when empty.
    smpiargs: str = ""


@dataclass(frozen=True)
class Environment:
    #: Interpreter on the compute nodes; ``auto`` = the one running summit-jobs.
    python: str = "python3"
    #: ``module load`` arguments, one per line in the script.
    modules: Tuple[str, ...] = ()
    #: Further shell lines (conda activation, ...). Trusted: they come from the profile.
    setup: Tuple[str, ...] = ()
    #: Exported before launch: Horovod/NCCL defaults such as HOROVOD_FUSION_THRESHOLD.
    variables: Dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Performance:
    """Figures for estimates (simulate, staging time); measured numbers beat these. Zero means unknown."""
    clips_per_second_per_gpu: float = number(0.0, low=0)
    pfs_read_gbps: float = number(0.0, low=0)
    allreduce_bandwidth_gbps: float = number(0.0, low=0)
    allreduce_latency_us: float = number(0.0, low=0)
    #: Fraction of the allreduce hidden behind the backward pass.
    comm_overlap: float = number(0.0, low=0, high=1)
    #: A measured single-node time to train the recipe (hours), when one is known (the paper's: 49 h 55 min).
    single_node_hours: Optional[float] = number(None, low=0, low_open=True)
    #: Seconds from a job's start to its first training step (set-up, staging, the ranks' interpreters and
    #: imports, rendezvous, loading the checkpoint it resumes): every link of a chain pays them before it trains,
    #: which the expected links and simulate's job count take off each link's minutes. 0: unknown.
    startup_seconds: float = number(0.0, low=0)
    #: The input pipeline's steady-state rate on one CPU core: training clips decoded and augmented per second
    #: by one data worker (bench/input_pipeline.py). With the cores below it says whether a node's workers keep
    #: up with its GPUs at the recipe's batch (`scaling`, `simulate`). 0: unknown, input not counted.
    input_clips_per_second_per_core: float = number(0.0, low=0)
    #: Cores of a node the data workers may use; 0: the node's cores less one per rank.
    input_cores_per_node: int = number(0, low=0)
    #: Seconds a rank waits for an epoch's first batch beyond a step's usual wait (bench/epoch_boundary.py):
    #: paid once per epoch, so it weighs most where epochs are shortest (~19 steps at 1,536 GPUs).
    epoch_start_seconds: float = number(0.0, low=0)


@dataclass(frozen=True)
class Ssh:
    host: Optional[str] = None
    user: Optional[str] = None
    port: int = number(22, low=1, high=65535)
    key_file: Optional[str] = None
    known_hosts: Optional[str] = None
    #: Where run directories are created on the remote side.
    remote_dir: Optional[str] = None


@dataclass(frozen=True)
class Recipe:
    """The paper's training recipe; every value is overridable."""
    clips_per_gpu: int = number(8, low=1)
    lr_per_8_clips: float = number(0.00125, low=0, low_open=True)
    epochs: int = number(100, low=1)
    warmup_epochs: float = number(5.0, low=0)
    momentum: float = number(0.9, low=0, high=1, high_open=True)
    weight_decay: float = number(1e-4, low=0)
    arch: str = "resnet50"
    num_segments: int = number(8, low=1)
    num_classes: int = number(400, low=1)
    engine: Literal["horovod", "ddp"] = "horovod"


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    scheduler: Scheduler
    node: Node
    max_nodes: int = number(low=1)
    walltime_bins: Tuple[WalltimeBin, ...]
    queues: Dict[str, Queue]
    #: Always requested; ``nvme`` is added when data is staged to node-local NVMe.
    alloc_flags: Tuple[str, ...] = ()
    launcher: Launcher = field(default_factory=Launcher)
    environment: Environment = field(default_factory=Environment)
    performance: Performance = field(default_factory=Performance)
    ssh: Ssh = field(default_factory=Ssh)
    recipe: Recipe = field(default_factory=Recipe)
    #: The allocation's node limit for this user; above it, ``simulate`` is the way.
    quota_nodes: Optional[int] = number(None, low=1)
    #: Where run directories go (``$VARS`` are left to the shell of the remote side).
    runs_dir: Optional[str] = None
    #: Folders that compute nodes can read but not write (Summit's home and project NFS): a run
    #: directory there would fail at the first checkpoint, so the planner refuses it at submit time.
    compute_read_only_prefixes: Tuple[str, ...] = ()
    #: The place to point users at instead (named in that refusal).
    writable_hint: str = ""
    #: Folders every node has its own copy of (/tmp, the NVMe mount): a run or data folder there, as seen
    #: from the login node, is not the folder the compute nodes see (``summit-jobs doctor`` flags one). The
    #: fixed part of ``node.nvme_path`` counts too without being listed.
    node_local_prefixes: Tuple[str, ...] = ()
    #: The file it was loaded from (for messages and the run record).
    source: str = ""
    #: When the machine was retired (kept as the paper's reference), e.g. "2024-11".
    retired: Optional[str] = None
    #: Where the profile's facts come from (a site guide's address and the date it was read).
    reference: str = ""

    def __post_init__(self) -> None:
        if self.max_nodes < 1:
            raise ValueError("max_nodes must be at least 1")
        defaults = [n for n, q in self.queues.items() if q.default]
        if len(defaults) != 1:
            raise ValueError(f"exactly one queue must have 'default: true' (found {len(defaults) or 'none'})")
        if not self.walltime_bins:
            raise ValueError("walltime_bins must list at least one bin")
        if self.node.slots < 1:
            raise ValueError("node needs gpus >= 1 or, for CPU-only machines, cpu_slots >= 1")
        if self.scheduler.slots_per_host is not None and self.scheduler.slots_per_host < 1:
            raise ValueError("scheduler.slots_per_host must be at least 1")
        if self.quota_nodes is not None and self.quota_nodes < 1:
            raise ValueError(f"quota_nodes = {self.quota_nodes} must be at least 1 (or left out: no quota)")
        object.__setattr__(self, "launcher", _launcher_of_scheduler(self))
        _check_limits(self)
        check_script_values(self)

    @property
    def default_queue(self) -> str:
        return next(n for n, q in self.queues.items() if q.default)

    def bin_for(self, nodes: int) -> Optional[WalltimeBin]:
        for b in self.walltime_bins:
            if b.min_nodes <= nodes <= b.max_nodes:
                return b
        return None


def config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "summit-jobs"


def profile_dirs() -> List[Path]:
    """Search order: user folders first (they may shadow a shipped profile), then envs/."""
    dirs: List[Path] = []
    extra = os.environ.get("SUMMIT_JOBS_MACHINES_PATH")
    if extra:
        dirs += [Path(p) for p in extra.split(os.pathsep) if p]
    dirs.append(config_dir() / "machines")
    dirs.append(resources.envs_dir())
    return dirs


def _profile_files() -> Dict[str, Path]:
    found: Dict[str, Path] = {}
    for d in profile_dirs():
        if d.is_dir():
            for p in sorted(d.glob("*.yaml")):
                found.setdefault(p.stem, p)
    return found


def available() -> List[str]:
    return sorted(_profile_files())


def _parse_yaml(text: str, path: Path, what: str):
    """The data of a YAML text (libyaml when present: 10x faster), or one line naming the file."""
    import yaml  # here, not at the top: a profile read before is served by usercache without it
    try:
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        raise UserError(f"{what} {path} is not valid YAML: {exc}") from None


def load_yaml(path: Path, what: str) -> dict:
    """A YAML file's top-level mapping; parsed once per text and parser (summit_jobs.profiles.usercache says how)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot read {what} {path}: {exc.strerror}.") from None
    except UnicodeDecodeError as exc:
        raise UserError(f"{what} {path} is not UTF-8 text ({exc.reason} at byte {exc.start}); save it as UTF-8.") \
            from None
    data = usercache.parsed("yaml", str(path), text, usercache.yaml_identity(), lambda t: _parse_yaml(t, path, what))
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"{what} {path} must hold a mapping at the top level.")
    return data


def load(name: str, overrides: Optional[dict] = None) -> Profile:
    """Load profile ``name`` with ``overrides`` (from the user config) merged in."""
    files = _profile_files()
    if name not in files:
        raise UserError(
            f"unknown machine {name!r}. Known machines: {', '.join(sorted(files)) or 'none'}. "
            f"Add a profile for another LSF site as {config_dir() / 'machines' / (name + '.yaml')} "
            "(copy envs/lsf-gpu.yaml, the documented generic GPU cluster, as a start).")
    path = files[name]
    data = load_yaml(path, "machine profile")
    data.setdefault("name", name)
    if overrides:
        data = deep_merge(data, overrides)
    if "source" in data:    # the loader's own record of the file: a profile cannot say where it came from
        raise UserError(f"machine profile {path}: unknown key 'source' (summit-jobs fills it in with the file's "
                        "path); remove it.")
    return dataclasses.replace(build(Profile, own_section(data, path), f"machine profile {path}"), source=str(path))


def own_section(data: dict, path: Path) -> dict:
    """``data`` with ``scheduler.<kind>`` of a scheduler this module does not describe moved to ``scheduler.own``
    (kept as written for that scheduler to check); ``own`` itself is the loader's and refused in a file."""
    section = data.get("scheduler")
    if not isinstance(section, dict):
        return data
    if "own" in section:
        raise UserError(f"machine profile {path}: unknown key 'scheduler.own' (a scheduler's own keys go under "
                        "scheduler.<kind>); remove it.")
    kind = section.get("kind", "lsf")
    names = {f.name for f in dataclasses.fields(Scheduler)}
    if not isinstance(kind, str) or kind in names or kind not in section:
        return data
    if not isinstance(section[kind], dict):
        raise UserError(f"machine profile {path}: 'scheduler.{kind}' must be a mapping (the {kind} scheduler's own "
                        f"keys), got {section[kind]!r}.")
    moved = {k: v for k, v in section.items() if k != kind}
    moved["own"] = section[kind]
    return dict(data, scheduler=moved)
