"""A rank started by Slurm's srun, read from the variables srun gives each task. Torch-free.

Why: ``torch.distributed``'s env:// wants RANK, WORLD_SIZE, LOCAL_RANK and MASTER_ADDR, and srun gives each
task SLURM_PROCID (its rank in the step), SLURM_STEP_NUM_TASKS (the step's tasks), SLURM_LOCALID (its rank on
its node), SLURM_NODEID (its node's index) and SLURM_STEP_TASKS_PER_NODE (``2(x3),1``: tasks on each node, in
order), and the job's nodes as SLURM_JOB_NODELIST in Slurm's compressed form (``node[1-2]``). srun(1),
"OUTPUT ENVIRONMENT VARIABLES". trainer.rankenv and the trainer's engines read ranks through this module.

Only a task of a step counts (SLURM_STEP_ID is set): the batch script itself has SLURM_PROCID=0 and the
job's task count too, and a program it runs directly is no rank of a step.
"""
from __future__ import annotations

import re
from typing import List, Mapping, Optional, Tuple


def job_id(env: Mapping[str, str]) -> str:
    """The Slurm job's id (SLURM_JOB_ID), or "" outside a Slurm job."""
    value = str(env.get("SLURM_JOB_ID", "")).strip()
    return value if value.isdecimal() else ""


def tasks_per_node(text: str) -> List[int]:
    """``2(x3),1`` -> [2, 2, 2, 1]; [] for text that is not in that form."""
    out: List[int] = []
    for part in str(text or "").split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not m:
            return []
        out += [int(m.group(1))] * int(m.group(2) or 1)
    return out


def first_host(nodelist: str) -> Optional[str]:
    """The first host of a Slurm host list (``nid[001234-001240,001300],gpu7`` -> ``nid001234``), as
    ``scontrol show hostnames | head -n 1`` names it; None for an empty list."""
    text, depth, end = str(nodelist or "").strip(), 0, None
    for i, ch in enumerate(text):
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            end = i
            break
    first = text[:end]
    first = re.sub(r"\[([^\]]*)\]", lambda m: re.split(r"[,-]", m.group(1))[0], first)
    return first or None


def step_task(env: Mapping[str, str]) -> Optional[Tuple[int, int, int, int]]:
    """(rank, world size, local rank, local world size) of a task srun started; None outside a step."""
    names = ("SLURM_STEP_ID", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID")
    values = [str(env.get(n, "")).strip() for n in names]
    if not all(v.isdecimal() for v in values):
        return None
    _step, rank, size, local = (int(v) for v in values)
    per_node = tasks_per_node(env.get("SLURM_STEP_TASKS_PER_NODE", ""))
    node = str(env.get("SLURM_NODEID", "")).strip()
    local_size = per_node[int(node)] if node.isdecimal() and int(node) < len(per_node) else size
    return rank, size, local, local_size
