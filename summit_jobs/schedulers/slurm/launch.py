"""What starts a job's ranks on Slurm: the launchers, and how srun places them (Slurm's launch layout). Pure.

Why here: a launcher name means something only to the scheduler that runs it. The planner asks the scheduler
for a launch layout (summit_jobs.schedulers.LaunchLayout) and carries it in the plan as ``launch_layout``; the
templates of templates/slurm/ print its numbers on their srun lines. Every srun line repeats
``--cpus-per-task``: Slurm 22.05 and 23.02 do not pass sbatch's ``-c`` on to srun (their RELEASE_NOTES), and
every srun line names ``--ntasks`` too, since a step inherits the job's task count (SLURM_NTASKS) and would
refuse a one-per-node ``--ntasks-per-node=1`` against it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional, Tuple

from summit_jobs.errors import UserError

#: What starts the ranks: srun (one rank per GPU or CPU slot) or one torchrun per node started by srun.
LAUNCHERS = ("srun", "torchrun")
#: The launcher of a profile that names none.
DEFAULT_LAUNCHER = "srun"


@dataclass(frozen=True)
class SlurmLayout:
    """Slurm's launch layout: ranks (tasks) per node, the CPUs of each, the GPUs each rank drives, and the CPUs
    of a one-per-node step (staging, torchrun's agent): every CPU the job holds on a node; and the site's own
    options of the srun line that starts the ranks (the profile's scheduler.slurm.step_options)."""
    name: str
    ntasks_per_node: int
    cpus_per_task: int
    gpus_per_task: int
    node_cpus: int
    step_options: Tuple[Tuple[str, str], ...] = ()


def cpus_per_task(profile) -> int:
    """The profile's ``scheduler.slurm.cpus_per_task``, else the node's cores shared out among its ranks."""
    return profile.scheduler.slurm.cpus_per_task or max(1, profile.node.cores // profile.node.slots)


def layout(profile, opts, nodes: int, launcher: str) -> SlurmLayout:
    """One rank per GPU (or CPU slot) on every node, whichever launcher starts them; --layout is jsrun's."""
    if opts.layout is not None:
        raise UserError(f"--layout {opts.layout} arranges jsrun's resource sets (LSF); on Slurm, srun starts one "
                        "rank per GPU (or CPU slot): drop --layout.")
    slots, cpus = profile.node.slots, cpus_per_task(profile)
    options = tuple((o.partition("=")[0], o.partition("=")[2]) for o in profile.scheduler.slurm.step_options)
    return SlurmLayout(name="gpu", ntasks_per_node=slots, cpus_per_task=cpus,
                       gpus_per_task=1 if profile.node.gpus else 0, node_cpus=slots * cpus,
                       step_options=options)


def gpus_per_rank(plan: Mapping) -> Optional[int]:
    """The GPUs of each rank in a recorded plan's launch layout; None when it does not say."""
    layout_ = plan.get("launch_layout")
    gpus = layout_.get("gpus_per_task") if isinstance(layout_, Mapping) else None
    return gpus if isinstance(gpus, int) and not isinstance(gpus, bool) and gpus >= 0 else None


def one_per_node(nodes: int, node_cpus: int) -> str:
    """The srun options of a step of one task per node holding all the job's CPUs there."""
    return f"srun --nodes={nodes} --ntasks={nodes} --ntasks-per-node=1 --cpus-per-task={node_cpus}"


def stage_line(profile, nodes: int, program: str) -> str:
    """One process per node with all the job's CPUs there (the job script's staging step), as a dry run shows it."""
    return f"{one_per_node(nodes, profile.node.slots * cpus_per_task(profile))} {program}"
