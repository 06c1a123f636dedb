"""The scheduler section of a Slurm profile (``scheduler.kind: slurm``): checked while the profile is loaded.
Pure.

Why here: a Slurm site's policy is its ``scheduler.slurm`` section (partitions, QOS, GPUs, CPUs, memory, the
site's own ``#SBATCH`` and srun options), and what those may hold is Slurm's rule, written beside the request
that prints them (request.py). A Slurm profile also leaves LSF's keys unset: set, they would be planned with
values nothing reads. The profile loader asks for these rules through summit_jobs.profiles.sections
(SlurmScheduler.check_profile), so a bad value is still refused naming the profile's file and the key before
anything plans with it.
"""
from __future__ import annotations

from summit_jobs.errors import UserError
from summit_jobs.profiles.machines import LSF_ONLY_KEYS, MAX_MEMORY_KB, NAME_RE, Launcher, Profile, Scheduler, \
    parse_hhmm
from summit_jobs.schedulers.slurm.launch import cpus_per_task
from summit_jobs.schedulers.slurm.request import (CONSTRAINT_RE, MAX_SIGNAL_SECONDS, OWNED, SLURM_MEM_RE, STEP_OWNED,
                                                  SUBMISSION, UNIT_KIB, check_directive)


def check_profile(profile: Profile) -> None:
    """Raise ValueError naming the key of a Slurm profile that cannot be planned with: one of LSF's keys, LSF's
    account flag or submit mode, a value that cannot go into an #SBATCH line, QOS limits that are no walltimes,
    two default QOS, CPUs the node does not have."""
    _check_no_lsf_keys(profile)
    _check_values(profile)
    slurm = profile.scheduler.slurm
    for name, qos in slurm.qos.items():
        if qos.max_walltime is not None:
            parse_hhmm(qos.max_walltime, f"scheduler.slurm.qos.{name}.max_walltime")
    defaults = [n for n, q in slurm.qos.items() if q.default]
    if len(defaults) > 1:
        raise ValueError(f"scheduler.slurm.qos marks {' and '.join(defaults)} as the default; mark one at most")
    threads = profile.node.cores * profile.node.smt
    if cpus_per_task(profile) * profile.node.slots > threads:
        raise ValueError(f"scheduler.slurm.cpus_per_task = {cpus_per_task(profile)} for {profile.node.slots} ranks "
                         f"per node is more than the node's {threads} CPUs (node.cores x node.smt)")
    if slurm.gpu_type and slurm.gpus == "none":
        raise ValueError("scheduler.slurm.gpu_type names a GPU type, and scheduler.slurm.gpus is none (GPUs are "
                         "not asked for): give gpus-per-node or gres, or drop gpu_type")
    if profile.scheduler.warning_minutes * 60 > MAX_SIGNAL_SECONDS:
        raise ValueError(f"scheduler.warning_minutes = {profile.scheduler.warning_minutes} is more than sbatch's "
                         f"--signal takes ({MAX_SIGNAL_SECONDS} s): give at most {MAX_SIGNAL_SECONDS // 60}")


def _check_no_lsf_keys(profile: Profile) -> None:
    """Raise ValueError naming a key that is LSF's (LSF's ``-gpu`` settings on a Slurm profile would be planned
    with values nothing reads), or LSF's account flag or submit mode."""
    sched = profile.scheduler
    unset = Scheduler(submit_mode=sched.submit_mode, account_flag=sched.account_flag)
    lsf_only = [(f"scheduler.{key}", getattr(unset, key) != getattr(sched, key)) for key in LSF_ONLY_KEYS]
    lsf_only += [("alloc_flags", bool(profile.alloc_flags)), ("launcher.smpiargs", bool(profile.launcher.smpiargs)),
                 ("launcher.layout", profile.launcher.layout != Launcher().layout)]
    for key, is_set in lsf_only:
        if is_set:
            raise ValueError(f"{key} is LSF's, and this profile's scheduler.kind is slurm: remove it (a Slurm "
                             "site's own settings go under scheduler.slurm)")
    if sched.account_flag != "--account":
        raise ValueError(f"scheduler.account_flag {sched.account_flag!r} is not Slurm's; a Slurm profile charges "
                         "jobs with --account")
    if sched.submit_mode != "file":
        raise ValueError("scheduler.submit_mode must be 'file' on Slurm: sbatch is given the script's file")


def _check_values(profile: Profile) -> None:
    """The shapes of the values that reach #SBATCH lines (ValueError naming the key)."""
    slurm = profile.scheduler.slurm
    checks = [(f"scheduler.slurm.qos key {q!r}", q, NAME_RE) for q in slurm.qos]
    checks += [(f"scheduler.slurm.{k}", v, pattern) for k, v, pattern in (
        ("constraint", slurm.constraint, CONSTRAINT_RE), ("nvme_constraint", slurm.nvme_constraint, NAME_RE),
        ("gpu_type", slurm.gpu_type, NAME_RE), ("memory", slurm.memory, SLURM_MEM_RE)) if v is not None]
    for key, value, pattern in checks:
        if not pattern.fullmatch(value):
            shape = {NAME_RE: "a name of letters, digits, '.', '_' and '-'",
                     CONSTRAINT_RE: "node features joined by & | , with [ ] ( ) * ! (no spaces, quotes or $)",
                     SLURM_MEM_RE: "Slurm's --mem form: a whole number and K, M, G or T (0: all of it)"}[pattern]
            raise ValueError(f"{key} = {value!r} is not allowed: it is printed into job scripts, so it must be "
                             f"{shape}")
    if slurm.memory is not None and _memory_kib(slurm.memory) > MAX_MEMORY_KB:
        raise ValueError(f"scheduler.slurm.memory = {slurm.memory!r} is more memory than a node has: give at most "
                         f"{MAX_MEMORY_KB // UNIT_KIB['T']}T")
    lines = [(f"scheduler.slurm.extra_directives[{i}] =", line, OWNED, "an #SBATCH option", SUBMISSION)
             for i, line in enumerate(slurm.extra_directives)]
    lines += [(f"scheduler.slurm.step_options[{i}] =", line, STEP_OWNED, "an srun option", {})
              for i, line in enumerate(slurm.step_options)]
    for where, line, owned, what, submission in lines:
        try:
            check_directive(line, where, owned, what, submission)
        except UserError as exc:
            raise ValueError(str(exc).rstrip(".")) from None


def _memory_kib(value: str) -> int:
    """KiB in Slurm's own --mem form (SLURM_MEM_RE: a whole number and K, M, G or T; M when none, as sbatch
    reads it)."""
    unit = value[-1] if value[-1] in UNIT_KIB else "M"
    return int(value.rstrip("KMGT")) * UNIT_KIB[unit]
