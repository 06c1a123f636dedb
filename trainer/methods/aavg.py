"""AAVG: asynchronous-style model averaging with adaptive batch size (the AAVG paper).

P learners each run K local optimiser steps, then average their parameters
(K = -1: once per epoch). After averaging, Adam's moments are averaged too and
BatchNorm running statistics are merged as the statistics of the union of the
learners' batches: mean = average of means; var = average of (var + mean^2) -
mean_new^2. Every m steps (m = -1: at each epoch's end, as the paper checks) the
validation accuracy a is checked: if a < best * b1 the batch grows by b2 (up to
a maximum); best tracks the best accuracy.

Engine-agnostic: everything takes an ``allreduce_mean(tensor) -> tensor``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, List, Optional

import torch

from trainer.dist.bnstats import merge_running_stats
from trainer.config import AAVG_CHECK_EPOCH

AllreduceMean = Callable[[torch.Tensor], torch.Tensor]


def merge_bn_stats(means: torch.Tensor, variances: torch.Tensor):
    """Merge per-learner BN statistics (rows = learners) into those of the pooled batch."""
    mean = means.mean(dim=0)
    var = (variances + means * means).mean(dim=0) - mean * mean
    return mean, var


@torch.no_grad()
def average_learners(model: torch.nn.Module, optimizer: Optional[torch.optim.Optimizer],
                     allreduce_mean: AllreduceMean) -> None:
    """One averaging round: parameters, Adam/SGD state tensors, and BN running statistics."""
    merge_running_stats(model, allreduce_mean)
    bn_buffers = {id(t) for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)
                  for t in (m.running_mean, m.running_var) if t is not None}
    for p in model.parameters():
        p.copy_(allreduce_mean(p.detach().clone()))
    for b in model.buffers():
        if id(b) not in bn_buffers and b.is_floating_point():
            b.copy_(allreduce_mean(b.clone()))
    if optimizer is not None:
        for state in optimizer.state.values():
            for key, val in state.items():
                if torch.is_tensor(val) and val.is_floating_point() and val.dim() > 0:
                    # exp_avg, exp_avg_sq (Adam), momentum_buffer (SGD)
                    val.copy_(allreduce_mean(val.clone()))


@dataclass
class BatchSizeController:
    """The adaptive batch rule: every m steps (m = -1: once per epoch, at its end), grow the batch by b2 when
    accuracy < best * b1."""
    batch: int
    every: int
    b1: float = 1.0
    b2: float = 2.0
    max_batch: int = 576
    best: float = float("-inf")
    history: List[tuple] = field(default_factory=list)

    def due(self, step: int) -> bool:
        """A check after optimiser step ``step`` inside an epoch (m >= 1)."""
        return self.every > 0 and step > 0 and step % self.every == 0

    @property
    def per_epoch(self) -> bool:
        """m = -1: one check at each epoch's end instead of every m steps."""
        return self.every == AAVG_CHECK_EPOCH

    def observe(self, step: int, accuracy: float) -> int:
        grew = accuracy < self.best * self.b1
        if grew:
            self.batch = min(self.max_batch, int(round(self.batch * self.b2)))
        self.best = max(self.best, accuracy)
        self.history.append((step, accuracy, self.batch, grew))
        return self.batch


def should_average(step_in_epoch: int, steps_per_epoch: int, interval: int) -> bool:
    """K local steps between averaging rounds; K = -1 averages at the end of each epoch."""
    if interval == -1:
        return step_in_epoch + 1 == steps_per_epoch
    if interval < 1:
        raise ValueError("avg interval K must be >= 1 or -1 (once per epoch)")
    return (step_in_epoch + 1) % interval == 0
