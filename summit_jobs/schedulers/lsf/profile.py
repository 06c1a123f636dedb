"""The scheduler section of an LSF profile: what LSF's keys may hold, checked while the profile is loaded. Pure.

Why here: the keys (``scheduler.gpu``, ``scheduler.memory``, ``scheduler.app``, ``scheduler.container``,
``scheduler.extra_directives``, the launch node's prefixes) become ``#BSUB`` lines and jsrun's or blaunch's
host lists, so what they may hold is LSF's rule, written beside the request that prints them (request.py).
The profile loader asks for it through summit_jobs.profiles.sections (LsfScheduler.check_profile), so a bad
value is still refused naming the profile's file and the key before anything plans with it.
"""
from __future__ import annotations

import re
from typing import List, Tuple

from summit_jobs.profiles.machines import NAME_RE, SHAPES, TOKEN_RE, Profile, Slurm, check_shapes
from summit_jobs.schedulers.lsf.request import CONTAINER_RE, DIRECTIVE_RE, MEMORY_FORM_RE, owned

#: What each of LSF's own shapes is, in the words of a refusal ("... so it must be WORDS").
WORDS = {MEMORY_FORM_RE: "'-M' or 'rusage'",
         CONTAINER_RE: "an image reference of letters, digits and . _ / : @ -",
         DIRECTIVE_RE: "'-OPTION value ...': an option then words of letters, digits and . , : = + / @ % _ - [ ] "
                       "> < ( ) ! & | (no quotes, $ or ;)",
         **SHAPES}


def check_profile(profile: Profile) -> None:
    """Raise ValueError naming the key of an LSF profile that cannot be planned with: Slurm's account flag or
    section, an extra ``#BSUB`` line that contradicts the plan, a value that cannot go into a ``#BSUB`` line."""
    sched = profile.scheduler
    if sched.account_flag == "--account":
        raise ValueError("scheduler.account_flag '--account' is Slurm's; an LSF profile charges with -P "
                         "(project) or -G (group, bank), or set scheduler.kind: slurm")
    if sched.account_flag not in ("-P", "-G"):
        raise ValueError(f"scheduler.account_flag {sched.account_flag!r} is not LSF's: an LSF profile charges "
                         "with -P (project) or -G (group, bank)")
    if sched.own is not None:
        raise ValueError("scheduler.lsf is not a section: an LSF profile's keys are the scheduler section's own "
                         "(scheduler.account_flag, scheduler.request, ...); move them up and remove scheduler.lsf")
    if sched.slurm != Slurm():
        raise ValueError("scheduler.slurm is read only when scheduler.kind is slurm; set kind: slurm, or "
                         "remove the slurm section")
    for i, line in enumerate(sched.extra_directives):
        flag, _, value = " ".join(line.split()).partition(" ")
        why = owned(flag, value)
        if why:
            raise ValueError(f"scheduler.extra_directives[{i}] = {line!r}: {why}; remove the line")
    check_shapes((key, value, pattern, WORDS[pattern]) for key, value, pattern in _printed(profile))


def _printed(profile: Profile) -> List[Tuple[str, str, "re.Pattern[str]"]]:
    """``(key, value, shape)`` of every value of the section that job scripts print."""
    sched = profile.scheduler
    checks = [(f"scheduler.launch_node_prefixes[{i}]", p, TOKEN_RE) for i, p in enumerate(sched.launch_node_prefixes)]
    checks += [(f"scheduler.gpu.{k}", v, TOKEN_RE) for k, v in (("gmodel", sched.gpu.gmodel),
                                                                 ("gmem", sched.gpu.gmem)) if v]
    checks += [(f"scheduler.memory.forms[{i}]", f, MEMORY_FORM_RE) for i, f in enumerate(sched.memory.forms)]
    if sched.app:
        checks.append(("scheduler.app", sched.app, NAME_RE))
    if sched.container:
        checks.append(("scheduler.container", sched.container, CONTAINER_RE))
    checks += [(f"scheduler.extra_directives[{i}]", line, DIRECTIVE_RE)
               for i, line in enumerate(sched.extra_directives)]
    return checks
