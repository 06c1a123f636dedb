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


@torch.no_grad()
def set_running_stats(model: torch.nn.Module, flat: torch.Tensor) -> None:
    """Load a ``running_stats`` tensor back into the model's BatchNorm layers (a rank taking up its own
    statistics again on resume). Values come back exactly: float32 survives the trip through float64."""
    offset = 0
    for m in _running_bns(model):
        for t in (m.running_mean, m.running_var):
            k = t.numel()
            if offset + k > flat.numel():
                raise ValueError(f"{flat.numel()} BatchNorm statistics for a network that has more")
            t.copy_(flat[offset:offset + k].view_as(t))
            offset += k
    if offset != flat.numel():
        raise ValueError(f"{flat.numel()} BatchNorm statistics for a network that has {offset}")


def rank_rows(model: torch.nn.Module, allreduce_sum: Callable[[torch.Tensor], torch.Tensor], rank: int,
              size: int) -> torch.Tensor:
    """Every rank's running statistics unmerged, row r from rank r (a collective: every rank calls it).

    Why: a checkpoint taken where the ranks' statistics were not merged must
    give each rank its own back, or the resumed run no longer continues the
    interrupted one exactly.
    """
    mine = running_stats(model)
    rows = torch.zeros(size, mine.numel(), dtype=torch.float64, device=mine.device)
    rows[rank] = mine
    return allreduce_sum(rows)


def pooled_row(model: torch.nn.Module, rows: torch.Tensor) -> torch.Tensor:
    """``rank_rows`` merged as ``merge_running_stats`` merges (for a resume on another number of ranks)."""
    out, offset = [], 0
    for m in _running_bns(model):
        k = m.running_mean.numel()
        mean, var = rows[:, offset:offset + k], rows[:, offset + k:offset + 2 * k]
        mu = mean.mean(0)
        out += [mu, (var + mean * mean).mean(0) - mu * mu]
        offset += 2 * k
    return torch.cat(out) if out else torch.zeros(0, dtype=torch.float64)
