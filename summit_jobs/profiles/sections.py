"""A profile's scheduler section is checked by its scheduler: the hook through which the schedulers do it.

Why a hook: a machine profile is checked whole when it is loaded, so that a bad key is refused naming the
profile's file and the key before anything plans with it. But which launchers a scheduler has, and what the keys
of the scheduler section may hold (LSF's ``#BSUB`` lines, Slurm's ``scheduler.slurm``), are that scheduler's to
say, and summit_jobs.schedulers is the room above this one: this room may not import it. So the schedulers'
package installs its lookup here when it is imported (the command line, the planner and the embedded LSF all
import it before they load a profile), and the loader asks it for the rules of the profile's scheduler.

Imports nothing: ``summit-jobs --help`` imports summit_jobs.schedulers, and with it this module.
"""
from __future__ import annotations

from typing import Any, Callable, List, Protocol, Tuple


class SectionRules(Protocol):
    """What a scheduler says about a profile while it is loaded (summit_jobs.schedulers.Scheduler gives it)."""

    #: The launchers a profile's ``launcher.kind`` may name.
    launchers: Tuple[str, ...]
    #: The launcher of a profile that names none.
    default_launcher: str

    def check_profile(self, profile: Any) -> None:
        """Raise ValueError naming the key of ``profile`` (a machines.Profile) that this scheduler cannot plan
        with; the loader prefixes the profile's file."""


#: The installed lookup (a profile -> its scheduler's rules): one entry, put there by summit_jobs.schedulers.
_LOOKUP: List[Callable[[Any], SectionRules]] = []


def install(lookup: Callable[[Any], SectionRules]) -> None:
    """Make ``lookup`` the source of every scheduler's rules (summit_jobs.schedulers does, when imported)."""
    _LOOKUP[:] = [lookup]


def rules(profile: Any) -> SectionRules:
    """The rules of the scheduler of ``profile`` (its ``scheduler.kind``). A profile loaded before any scheduler is known is a fault of the
    program, not of the profile: said as such instead of loading it unchecked."""
    if not _LOOKUP:
        raise RuntimeError("no scheduler has installed its profile rules: import summit_jobs.schedulers before "
                           "loading a machine profile")
    return _LOOKUP[0](profile)
