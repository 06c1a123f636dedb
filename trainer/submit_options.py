"""The trainer options that ``summit-jobs submit`` also offers, each declared once.

Why here: an option such as ``--optimizer`` was written six times (the trainer's
parser, the submit option, the planner's fields, the job script's arguments,
the check of arguments after ``--``, the run record's schedule fields) and a
new one had to find all six. Each consumer now reads this list: the trainer's
parser (``trainer.config``), the submit and simulate options
(``summit_jobs.cli.submit``), the planner's ``JobOptions`` and ``Plan`` fields,
the arguments it renders into the script and the checks of those after ``--``
(``summit_jobs.planning``), and the resume check of a run's ``plan.json``
(``summit_jobs.runs.submission``). Adding an option is one ``TrainerOption``
below (and its test).

The module is plain data, torch-free and free of scheduler code, so that both
sides read it: the login side imports it at start-up, the trainer on every rank.

Not declared here, and why: --epochs, --clips-per-gpu (the trainer's
--batch-per-gpu), --lr and --warmup-epochs are derived by the planner (the LR
from the global batch, a short run's warm-up from its epochs); --engine, --arch
and --num-classes default to the machine profile's recipe, not to a trainer
default; all seven stand at fixed places at the head of the script's argument
list. --preset names a set of values (``trainer.config.PRESETS``), and
--fusion-threshold is a Horovod variable of the job, not a trainer option.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple, Union

#: Choice lists; the first entry is the default.
SCHEDULES = ("standard", "multigrid")
OPTIMIZERS = ("sgd", "lars", "adam")
OPTIMIZER_SYNCS = ("sync", "aavg")
COMPRESSIONS = ("none", "fp16", "bf16")
#: AAVG's default averaging interval: once per epoch.
AVG_INTERVAL_EPOCH = -1
#: The trainer's --help groups a declared option can join (trainer.config.GROUPS names them by these keys).
GROUP_KEYS = ("run", "model", "optimisation", "multigrid", "aavg", "data", "evaluation")

Value = Union[str, int, float, bool]


@dataclass(frozen=True)
class TrainerOption:
    """One option of both sides.

    ``name`` is the trainer's argument name (``optimizer_sync``: ``--optimizer-sync`` on both command lines, the
    ``JobOptions`` and ``Plan`` field and the ``plan.json`` key). ``kind`` is str, int, float or bool (a flag that
    is off by default). ``help`` is the trainer's --help text (argparse's: ``%%`` for a percent sign),
    ``submit_help`` the one ``summit-jobs submit --help`` shows. ``choices`` or the range ``low``..``high`` (both
    ends included) bound the value on both sides. The planner writes the option into the script only where its
    value is not ``default`` (or a --preset sets it).

    ``requires`` = (option, value): the option means something only with that one (``--short-cycle`` needs
    ``--schedule multigrid``); submit refuses it otherwise, saying that the option ``requires_words``. It is
    written into the script next to that option, and the plan's summary shows it only where it applies.

    ``in_plan``: a field of the plan and a key of ``plan.json`` (and of ``submit --json``'s summary).
    ``fixes_schedule``: the optimisation's course depends on it, so ``submit --force`` refuses to resume a run's
    checkpoints under another value (summit_jobs.runs.submission).
    """
    name: str
    kind: type
    default: Value
    help: str
    submit_help: str
    group: str
    choices: Tuple[str, ...] = ()
    low: Optional[float] = None
    high: Optional[float] = None
    requires: Optional[Tuple[str, Value]] = None
    requires_words: str = ""
    in_plan: bool = True
    fixes_schedule: bool = True

    def __post_init__(self) -> None:
        """A declaration that either side could not honour is refused when this module is imported."""
        problems = []
        if self.kind not in (str, int, float, bool):
            problems.append(f"kind {self.kind!r} is not str, int, float or bool")
        if self.kind is bool and self.default is not False:
            problems.append("a bool option is a flag that is off by default")
        if self.choices and self.default not in self.choices:
            problems.append(f"default {self.default!r} is not one of its choices")
        if self.group not in GROUP_KEYS:
            problems.append(f"group {self.group!r} is not one of {', '.join(GROUP_KEYS)}")
        if self.requires is not None and not self.requires_words:
            problems.append("an option that requires another says why (requires_words)")
        if problems:
            raise ValueError(f"trainer option {self.name!r}: " + "; ".join(problems))

    @property
    def flag(self) -> str:
        """The option as both command lines spell it: ``--optimizer-sync``."""
        return "--" + self.name.replace("_", "-")


#: In --help order on both sides; an option that ``requires`` another follows it.
OPTIONS: Tuple[TrainerOption, ...] = (
    TrainerOption(
        "schedule", str, SCHEDULES[0], choices=SCHEDULES, group="multigrid",
        help="multigrid: long cycle of (frames, size) shapes with proportionally larger batches and LR, LR stages "
             "at 40%% and 80%% of the epochs, final phase at full shape",
        submit_help="Training schedule: the recipe's, or multigrid (variable shapes)."),
    TrainerOption(
        "short_cycle", bool, False, group="multigrid",
        help="multigrid: also cycle the crop size 1/2, 1/sqrt2, 1 of the current shape per iteration",
        submit_help="Multigrid: add the per-iteration short cycle.",
        requires=("schedule", "multigrid"), requires_words="is part of the multigrid schedule",
        # Never a field of the plan: plan.json has not held it (the script's --short-cycle and the plan's
        # multigrid phases say it), and the resume check compares the phases' schedule through --schedule.
        in_plan=False, fixes_schedule=False),
    TrainerOption(
        "optimizer", str, OPTIMIZERS[0], choices=OPTIMIZERS, group="optimisation",
        help="sgd (the paper's, momentum); lars (layer-wise trust ratio for very large batches, BN parameters and "
             "biases excluded); adam (as the AAVG paper)",
        submit_help="LARS for very large batches (BN parameters and biases excluded)."),
    TrainerOption(
        "optimizer_sync", str, OPTIMIZER_SYNCS[0], choices=OPTIMIZER_SYNCS, group="aavg",
        help="sync: gradient allreduce every step; aavg: no gradient allreduce, average parameters, optimiser "
             "moments and BN statistics every --avg-interval steps",
        submit_help="Synchronous SGD, or AAVG model averaging with adaptive batch size."),
    TrainerOption(
        "avg_interval", int, AVG_INTERVAL_EPOCH, low=-1, high=10 ** 7, group="aavg",
        help="aavg: local steps between averaging rounds (-1 = once per epoch)",
        submit_help="AAVG: local steps between averaging rounds (-1: once per epoch).",
        requires=("optimizer_sync", "aavg"), requires_words="sets AAVG's averaging interval"),
    TrainerOption(
        "compression", str, COMPRESSIONS[0], choices=COMPRESSIONS, group="optimisation",
        help="gradient compression for the allreduce (horovod: fp16 only)",
        submit_help="Gradient compression for the allreduce (bf16: DDP only).",
        # How the gradients travel, not where the optimisation goes: a run may resume with another.
        fixes_schedule=False),
)


def declared(name: str) -> TrainerOption:
    """The declaration of option ``name``; KeyError when none declares it."""
    for option in OPTIONS:
        if option.name == name:
            return option
    raise KeyError(name)
