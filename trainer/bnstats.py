"""BatchNorm running statistics made one across ranks.

Why: every rank normalises its own batches (per-GPU BatchNorm, as the paper
trains), so each rank's running mean and variance drift apart while the
weights stay identical. Rank 0 alone saves the checkpoint; if each rank
validated with its own statistics, the reported accuracy (and the choice of
``best.pt``) would belong to no saved model. Before validation and before a
save, every rank takes the statistics of the pooled batches:
mean = average of means; var = average of (var + mean^2) - mean^2, the same
merge AAVG uses for its learners. Running statistics do not enter the
training forward pass, so the optimisation is unchanged.

One allreduce for the whole network (a flat tensor), not two per layer.
"""
from __future__ import annotations

from typing import Callable, List

import torch

AllreduceMean = Callable[[torch.Tensor], torch.Tensor]


def _running_bns(model: torch.nn.Module) -> List[torch.nn.modules.batchnorm._BatchNorm]:
    return [m for m in model.modules()
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.running_mean is not None]


@torch.no_grad()
def merge_running_stats(model: torch.nn.Module, allreduce_mean: AllreduceMean) -> int:
    """Replace every BatchNorm's running statistics by those of all ranks' pooled batches; returns
    the number of layers merged. A collective: every rank must call it at the same point."""
    bns = _running_bns(model)
    if not bns:
        return 0
    means = [m.running_mean.double() for m in bns]
    ex2 = [m.running_var.double() + mu * mu for m, mu in zip(bns, means)]
    flat = allreduce_mean(torch.cat(means + ex2))
    n = sum(mu.numel() for mu in means)
    offset = 0
    for m in bns:
        k = m.running_mean.numel()
        mean, sq = flat[offset:offset + k], flat[n + offset:n + offset + k]
        m.running_mean.copy_(mean)
        m.running_var.copy_(sq - mean * mean)
        offset += k
    return len(bns)


def running_stats(model: torch.nn.Module) -> torch.Tensor:
    """All BatchNorm running means and variances as one flat tensor (what the ranks compare)."""
    bns = _running_bns(model)
    return torch.cat([t.detach().double().flatten() for m in bns for t in (m.running_mean, m.running_var)]) \
        if bns else torch.zeros(0, dtype=torch.float64)
