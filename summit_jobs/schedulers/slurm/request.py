"""What a job asks Slurm for: the ``#SBATCH`` directives of its allocation and its QOS. Pure. (What a Slurm
profile's section may hold is profile.py's, with the directive rules here.)

Why a module of its own: a Slurm site's policy is the profile's (``scheduler.slurm``): partitions are the
profile's queues, a QOS has caps of its own, GPUs are asked as ``--gpus-per-node`` (select/cons_tres, Slurm
19.05 and later) or ``--gres=gpu:N`` (every Slurm), CPUs and memory as the site wants. Each becomes a
``(option, value)`` pair here, so that the templates print data and never branch on a site.

Every value is checked: a directive is a long option and, after ``=``, one word of Slurm's token characters,
printed without quotes; anything else is refused with the rule named. Options summit-jobs writes itself
cannot be given again (sbatch takes the last one, which would contradict the plan), by any name or
abbreviation, nor can options that change how the job is submitted or rerun.
"""
from __future__ import annotations

import math
import re
from typing import List, Mapping, Optional, Sequence, Tuple

from summit_jobs.errors import UserError
from summit_jobs.profiles.machines import MAX_MEMORY_KB, Profile
from summit_jobs.schedulers import Limit, Request
from summit_jobs.schedulers.slurm.launch import LAUNCHERS, cpus_per_task

#: One #SBATCH directive as a user or a profile gives it: ``--option`` or ``--option=value`` (long options only:
#: a short one's meaning depends on its letter's case and is easily misread). Values hold no spaces or quotes.
VALUE_CHARS = r"A-Za-z0-9_.,:=+/@%\[\]&|*()!<>-"
DIRECTIVE_RE = re.compile(rf"--[a-z][a-z0-9-]*(?:=[{VALUE_CHARS}]+)?")
#: A --constraint: features joined by Slurm's & (and), | (or), brackets, counts (*N) and parentheses.
CONSTRAINT_RE = re.compile(r"[A-Za-z0-9_.,:\[\]&|*()!-]+")
#: Memory per node in Slurm's own form (sbatch(1) --mem: a whole number, unit K, M, G or T; 0 = all of it).
SLURM_MEM_RE = re.compile(r"[0-9]+[KMGT]?")
#: --mem as users write it: 64GB, 64G, 500MB, 1.5TB (powers of 1,024, as Slurm counts), or 0.
MEM_RE = re.compile(r"(?i)([0-9]+(?:\.[0-9]+)?)\s*([KMGT])(?:i?B)?")
UNIT_KIB = {"K": 1, "M": 1024, "G": 1024 ** 2, "T": 1024 ** 3}
#: The largest --signal time sbatch takes (sbatch(1): 0 to 65535 seconds).
MAX_SIGNAL_SECONDS = 65535
#: Options summit-jobs writes itself, and what sets them instead.
OWNED = {"--job-name": "--job-name", "--nodes": "--nodes", "--ntasks": "(one rank per GPU or CPU slot)",
         "--ntasks-per-node": "(one rank per GPU or CPU slot)",
         "--cpus-per-task": "the profile's scheduler.slurm.cpus_per_task",
         "--cpus-per-gpu": "the profile's scheduler.slurm.cpus_per_task",
         "--gpus-per-node": "the profile's scheduler.slurm.gpus", "--gres": "the profile's scheduler.slurm.gpus",
         "--gpus": "the profile's scheduler.slurm.gpus", "--mem": "--mem", "--mem-per-cpu": "--mem",
         "--mem-per-gpu": "--mem", "--time": "--walltime", "--account": "--project", "--partition": "--queue",
         "--qos": "--qos", "--constraint": "the profile's scheduler.slurm.constraint",
         "--output": "(the run directory's output file)", "--error": "(the run directory's error file)",
         "--signal": "--warning-minutes", "--dependency": "--chain", "--chdir": "(the run directory)",
         # The job's shape counted another way: GPUs or tasks per task, per GPU or per socket contradict one
         # rank per GPU on the --gpus-per-node GPUs (the job pends, or its ranks get the wrong GPUs).
         "--ntasks-per-gpu": "(one rank per GPU or CPU slot)",
         "--gpus-per-task": "the profile's scheduler.slurm.gpus (one rank per GPU)",
         "--gpus-per-socket": "the profile's scheduler.slurm.gpus", "--tres-per-task": "the profile's scheduler.slurm"}
#: Other names sbatch and srun take for an owned option.
ALIASES = {"--tasks-per-node": "--ntasks-per-node"}
#: Options that change how the job is submitted or rerun, and what does it here instead: summit-jobs submits one
#: job per run directory, returns once it is queued, and resumes a run by its chain (the next link starts from
#: the checkpoint), on the cluster that status and cancel ask.
SUBMISSION = {
    "--array": "makes several jobs of one script, which would share one run directory while status follows one; "
               "for jobs that follow each other use --chain",
    "--requeue": "sets whether Slurm requeues the job, and summit-jobs resumes a run by its chain: use --chain or "
                 "--until-complete",
    "--no-requeue": "sets whether Slurm requeues the job, and summit-jobs resumes a run by its chain: use --chain "
                    "or --until-complete",
    "--wait": "makes sbatch wait for the job to end, so submit would block for the job's whole run: follow it "
              "with summit-jobs status RUN --watch",
    "--clusters": "sends the job to another cluster, where status and cancel do not look: write a profile for "
                  "that cluster",
    "--wrap": "replaces the job script summit-jobs writes: run your own program with --command",
    "--test-only": "makes sbatch check the job without submitting it: use --dry-run"}
#: Options of the training srun line summit-jobs writes itself (scheduler.slurm.step_options may not repeat them).
STEP_OWNED = {"--nodes": "--nodes", "--ntasks": "(one rank per GPU or CPU slot)",
              "--ntasks-per-node": "(one rank per GPU or CPU slot)",
              "--cpus-per-task": "the profile's scheduler.slurm.cpus_per_task",
              "--kill-on-bad-exit": "(a failed rank ends the step)"}


# ---- the directives ---------------------------------------------------------------------------------------

def _named(flag: str, names: Sequence[str]) -> Optional[str]:
    """The option of ``names`` that ``flag`` names, also as an abbreviation (sbatch and srun take unambiguous
    prefixes of their long options: --tasks-per-n, --arr, --no-req)."""
    if flag in names:
        return flag
    return next((o for o in names if len(flag) > 3 and o.startswith(flag)), None)


def _refusal(flag: str, owned: Mapping[str, str], submission: Mapping[str, str]) -> Optional[str]:
    """Why ``flag`` would contradict the plan (the end of a sentence), or None."""
    name = _named(flag, [*owned, *(a for a, o in ALIASES.items() if o in owned)])
    if name in ALIASES:
        return f"{name} is {ALIASES[name]}, which summit-jobs writes itself; set it with {owned[ALIASES[name]]}"
    if name:
        return f"summit-jobs writes {name} itself; set it with {owned[name]}"
    name = _named(flag, list(submission))
    return f"{name} {submission[name]}" if name else None


def check_directive(line: str, where: str, owned: Mapping[str, str] = OWNED, what: str = "an #SBATCH option",
                    submission: Mapping[str, str] = SUBMISSION) -> Tuple[str, str]:
    """``(option, value)`` of one directive line; a UserError naming ``where`` for any other shape, an owned
    option (or its alias or abbreviation), or one that changes how the job is submitted or rerun."""
    text = str(line).strip()
    if not DIRECTIVE_RE.fullmatch(text):
        raise UserError(f"{where} {line!r} is not {what} this tool can write: give '--option' or "
                        "'--option=value' (long options; the value without spaces, quotes, $ or ;), e.g. "
                        "--exclusive, --reservation=myresv, --gpu-bind=closest.")
    flag, _, value = text.partition("=")
    why = _refusal(flag, owned, submission)
    if why:
        raise UserError(f"{where} {line!r}: {why}.")
    return flag, value


# ---- the QOS ----------------------------------------------------------------------------------------------

def qos_name(profile: Profile, asked: Optional[str]) -> Optional[str]:
    """The QOS of the job: --qos, else the profile's default one, else none (the site's own default)."""
    listed = profile.scheduler.slurm.qos
    if asked is None:
        return next((n for n, q in listed.items() if q.default), None)
    if asked not in listed:
        known = f"use one of {', '.join(listed)}" if listed else \
            "it lists none; add the QOS with its limits under scheduler.slurm.qos, or drop --qos"
        raise UserError(f"QOS {asked!r} is not one the {profile.name} profile lists: {known}.")
    return asked


def qos_limits(profile: Profile, asked: Optional[str]) -> Tuple[Limit, ...]:
    """The job's QOS as a limit the planner applies beside the partition's (walltime, nodes, chaining)."""
    name = qos_name(profile, asked)
    if name is None:
        return ()
    qos = profile.scheduler.slurm.qos[name]
    others = [n for n in profile.scheduler.slurm.qos if n != name]
    return (Limit(name=f"QOS {name!r}", max_walltime=qos.max_walltime, max_nodes=qos.max_nodes,
                  chaining=qos.chaining, max_queued_per_user=qos.max_queued_per_user,
                  other=f"another QOS (--qos {others[0]})" if others else ""),)


# ---- the request ------------------------------------------------------------------------------------------

def parse_mem(text: str) -> str:
    """--mem in Slurm's form: 64GB -> 64G, 1.5TB -> 1536G, 0 -> 0 (all the node's memory); a UserError else,
    and for more than MAX_MEMORY_KB (a typo of many digits overflowed the conversion)."""
    text = str(text).strip()
    if re.fullmatch(r"0+(?:[KMGT]i?B?)?", text, re.I):
        return "0"
    m = MEM_RE.fullmatch(text)
    if not m or float(m.group(1)) <= 0:
        raise UserError(f"--mem {text!r} is not a memory size: write a number and a unit, e.g. 64GB, 500MB, or 0 "
                        "for all of the node's memory (memory per node; K, M, G, T count in 1,024s as Slurm does).")
    amount = float(m.group(1)) * UNIT_KIB[m.group(2).upper()]
    if not amount <= MAX_MEMORY_KB:
        shown = repr(text) if len(text) <= 24 else f"'{text[:12]}...' ({len(text)} characters)"
        raise UserError(f"--mem {shown} is more memory than a node has: give at most "
                        f"{MAX_MEMORY_KB // UNIT_KIB['T']}TB per node, e.g. 64GB, or 0 for all of it.")
    kib = int(math.ceil(amount))
    unit = next(u for u in "TGMK" if kib % UNIT_KIB[u] == 0)
    return f"{kib // UNIT_KIB[unit]}{unit}"


def _refuse_lsf_options(opts) -> None:
    """Options whose meaning is LSF's: said, never dropped without a word."""
    for given, flag, why in ((opts.request, "--request", "asks LSF for -nnodes or slots; Slurm jobs ask for nodes "
                                                        "(--nodes) with one task per GPU"),
                             (opts.app, "--app", "names an LSF application profile (-app)"),
                             (opts.container, "--container", "runs an LSF job in a Docker image (-a docker()); "
                                                             "on Slurm, give the site's container option with "
                                                             "--sbatch-option or the profile's setup lines")):
        if given is not None:
            raise UserError(f"{flag} {given} {why}: drop {flag}.")


def launcher_of(profile: Profile, asked: Optional[str]) -> str:
    """--launcher over the profile's, one of Slurm's; not torchrun where the profile binds GPUs per task (its
    step_options are for one rank per task, and one torchrun per node would get one rank's share)."""
    starter = asked or profile.launcher.kind
    if starter not in LAUNCHERS:
        raise UserError(f"--launcher {starter!r} is not one Slurm starts ranks with: use one of "
                        f"{', '.join(LAUNCHERS)}.")
    options = profile.scheduler.slurm.step_options
    if starter == "torchrun" and options:
        raise UserError(f"--launcher torchrun starts one torchrun per node, and {profile.name}'s srun options "
                        f"({' '.join(options)}, scheduler.slurm.step_options) bind resources per rank: use "
                        "--launcher srun (one rank per task).")
    return starter


def _gpus(profile: Profile) -> List[Tuple[str, str]]:
    gpus, slurm = profile.node.gpus, profile.scheduler.slurm
    if not gpus or slurm.gpus == "none":
        return []
    count = f"{slurm.gpu_type}:{gpus}" if slurm.gpu_type else str(gpus)
    return [("--gpus-per-node", count)] if slurm.gpus == "gpus-per-node" else [("--gres", f"gpu:{count}")]


def _constraint(profile: Profile, staging: bool) -> List[Tuple[str, str]]:
    """The profile's features, and the NVMe's when the job stages data there (both must hold: ``&``)."""
    slurm = profile.scheduler.slurm
    parts = [p for p in (slurm.constraint, slurm.nvme_constraint if staging else None) if p]
    if len(parts) == 2 and "|" in parts[0]:
        parts[0] = f"({parts[0]})"
    return [("--constraint", "&".join(parts))] if parts else []


def _memory(profile: Profile, mem: Optional[str]) -> Tuple[List[Tuple[str, str]], str]:
    value = parse_mem(mem) if mem else profile.scheduler.slurm.memory
    if value is None:
        return [], ""
    shown = "all of each node's memory" if value == "0" else f"{mem or value} per node"
    return [("--mem", value)], f"{shown} (--mem={value})"


def build(profile: Profile, opts, nodes: int) -> Request:
    """The #SBATCH directives of a job of ``nodes`` nodes: its shape (nodes, tasks, CPUs, GPUs), then its
    partition, QOS, constraint, memory and the site's and user's own lines, every value checked."""
    _refuse_lsf_options(opts)
    starter = launcher_of(profile, opts.launcher)
    slurm, slots = profile.scheduler.slurm, profile.node.slots
    if opts.warning_minutes is not None and opts.warning_minutes * 60 > MAX_SIGNAL_SECONDS:
        raise UserError(f"--warning-minutes {opts.warning_minutes} is more than sbatch's --signal takes "
                        f"({MAX_SIGNAL_SECONDS} s): give at most {MAX_SIGNAL_SECONDS // 60}.")
    shape = [("--nodes", str(nodes)), ("--ntasks-per-node", str(slots)),
             ("--cpus-per-task", str(cpus_per_task(profile)))] + _gpus(profile)
    extra = [("--partition", opts.queue or profile.default_queue)] if slurm.partition else []
    qos = qos_name(profile, opts.qos)
    extra += [("--qos", qos)] if qos else []
    extra += _constraint(profile, bool(opts.data))
    memory, text = _memory(profile, opts.mem)
    extra += memory + ([("--exclusive", "")] if slurm.exclusive else [])
    extra += [check_directive(line, f"scheduler.slurm.extra_directives[{i}] =")
              for i, line in enumerate(slurm.extra_directives)]
    extra += [check_directive(line, "--sbatch-option") for line in opts.bsub_options]
    return Request(kind="nodes", launcher=starter, slots_per_host=slots, slots=slots * nodes, shape=tuple(shape),
                   extra=tuple(extra), memory=text)
