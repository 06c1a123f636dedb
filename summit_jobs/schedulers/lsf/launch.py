"""What starts a job's ranks on LSF: the launchers, and jsrun's resource sets (LSF's launch layout). Pure.

Why here and not in the planner: resource sets are jsrun's notion (``-n -r -a -g -c -b``), and a launcher
name means something only to the scheduler that runs it. The planner asks the scheduler for a launch
layout (summit_jobs.schedulers.LaunchLayout) and carries it in the plan as ``launch_layout``; the templates
of templates/lsf/ print its flags.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Mapping, Optional

from summit_jobs.errors import UserError
from summit_jobs.profiles.choices import LAYOUTS

#: What starts the ranks: jsrun (CSM), blaunch (one rank per slot), Open MPI's mpirun through blaunch, or one
#: torchrun per node through ``blaunch -z``.
LAUNCHERS = ("jsrun", "blaunch", "mpirun", "torchrun")
#: The launcher of a profile that names none: Summit's.
DEFAULT_LAUNCHER = "jsrun"


@dataclass(frozen=True)
class Jsrun:
    """One jsrun resource-set shape: sets in all, per host, ranks and GPUs per set, cores per set, binding."""
    n: int
    r: int
    a: int
    g: int
    c: int
    b: str

    def flags(self) -> List[str]:
        out = ["-n", str(self.n), "-r", str(self.r), "-a", str(self.a)]
        if self.g:
            out += ["-g", str(self.g)]
        return out + ["-c", str(self.c), "-b", self.b]


@dataclass(frozen=True)
class LsfLayout:
    """LSF's launch layout: the layout's name and jsrun's resource sets of the training step and of the
    one-rank-per-node staging steps. Computed for every launcher (the summary names the layout); only jsrun
    lines print the sets."""
    name: str
    jsrun: Jsrun
    stage_jsrun: Jsrun


def layout(profile, opts, nodes: int, launcher: str) -> LsfLayout:
    """The resource sets of a job of ``nodes`` nodes: ``--layout`` over the profile's, and only for jsrun."""
    name = opts.layout or profile.launcher.layout
    if name not in LAYOUTS:
        raise UserError(f"layout {name!r} is not known: use 'gpu' (one resource set per GPU) or 'node' "
                        "(one resource set per node with all its GPUs).")
    if opts.layout is not None and launcher != "jsrun":
        raise UserError(f"--layout {opts.layout} arranges jsrun's resource sets, and this job's ranks are started "
                        f"by {launcher}: drop --layout.")
    node = profile.node
    cores = max(1, node.cores // node.slots)
    if name == "gpu":
        train = Jsrun(n=node.slots * nodes, r=node.slots, a=1, g=1 if node.gpus else 0, c=cores, b=f"packed:{cores}")
    else:
        train = Jsrun(n=nodes, r=1, a=node.slots, g=node.gpus, c=node.cores, b=f"packed:{cores}")
    stage = Jsrun(n=nodes, r=1, a=1, g=0, c=node.cores, b=f"packed:{node.cores}")
    return LsfLayout(name=name, jsrun=train, stage_jsrun=stage)


def gpus_per_rank(plan: Mapping) -> Optional[int]:
    """GPUs per resource set of a recorded plan: its launch layout's, or (plans recorded before the plan had
    one) its top-level ``jsrun``; None when neither holds a count."""
    layout_ = plan.get("launch_layout")
    sets = layout_.get("jsrun") if isinstance(layout_, Mapping) else None
    if not isinstance(sets, Mapping):
        sets = plan.get("jsrun")
    gpus = sets.get("g") if isinstance(sets, Mapping) else None
    return gpus if isinstance(gpus, int) and not isinstance(gpus, bool) and gpus >= 0 else None


def stage_line(profile, nodes: int, program: str) -> str:
    """One process per node with all its cores (the job script's staging step), as a dry run shows it."""
    return f"jsrun -n {nodes} -r 1 -a 1 -c {profile.node.cores} {program}"
