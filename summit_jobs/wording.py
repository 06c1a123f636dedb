"""How the plan's counts read: "1 node" and "2 nodes", and "GPUs" only on nodes that have them. Pure.

Why one module: the plan summary, simulate, scaling, the expected-links line and stage-data's plan each wrote
their own counts, and printed "1 minutes", "on 1 nodes" and "(8 GPUs)" for the CPU ranks of a machine whose
nodes have no GPU (the embedded LSF, the local Slurm cluster), which read as if the job asked for GPUs.
"""
from __future__ import annotations

from typing import Optional


def count(n: int, word: str, plural: Optional[str] = None) -> str:
    """``n`` and ``word``, plural unless ``n`` is 1: ``count(1, "node")`` is ``1 node``, ``count(1536, "rank")``
    is ``1,536 ranks``. ``plural`` for a word that does not take an ``s``."""
    return f"{n:,} {word if n == 1 else (plural or word + 's')}"


def rank_word(gpus_per_node: int) -> str:
    """What one rank of a node stands for: a ``GPU`` where the nodes have GPUs (one rank per GPU), else a
    ``CPU rank``."""
    return "GPU" if gpus_per_node > 0 else "CPU rank"


def ranks(n: int, gpus_per_node: int) -> str:
    """``8 GPUs`` on GPU nodes, ``8 CPU ranks`` on nodes without one; singular for 1."""
    return count(n, rank_word(gpus_per_node))


def per_rank(gpus_per_node: int) -> str:
    """``per GPU`` or ``per CPU rank``: the unit of the clips a rank trains on at each step."""
    return "per " + rank_word(gpus_per_node)
