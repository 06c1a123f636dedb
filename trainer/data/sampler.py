"""Which samples each (virtual) rank trains on: ONE function for both the real
distributed case and gradient accumulation.

Why: accumulation is only exact if a physical rank running k micro-batches
draws exactly the samples that k separate ranks would have drawn. So nothing
here knows about physical ranks except ``virtual_ranks_of``.

Mapping (documented contract):
- every epoch has one global shuffle, ``epoch_permutation(n, seed, epoch)``;
- optimiser step s of an epoch covers ``perm[s*B : (s+1)*B]`` with
  ``B = virtual_ranks * batch``; virtual rank v takes the contiguous slice
  ``[v*batch, (v+1)*batch)`` of it (``virtual_batch``);
- physical rank p with k accumulation steps is virtual ranks p*k .. p*k+k-1
  and processes their micro-batches in that order (``virtual_ranks_of``);
- the incomplete tail of an epoch is dropped (every step has a full batch).
"""
from __future__ import annotations

from typing import Iterator, List, Optional, Sequence, Tuple

import numpy as np


def epoch_permutation(n: int, seed: int, epoch: int) -> np.ndarray:
    """The epoch's global shuffle: the same on every rank, independent of rank count."""
    return np.random.default_rng([seed, epoch, 0x5A3]).permutation(n)


def steps_per_epoch(n: int, virtual_ranks: int, batch: int) -> int:
    return n // (virtual_ranks * batch)


def virtual_ranks_of(rank: int, accum_steps: int) -> List[int]:
    """The virtual ranks a physical rank stands in for, in processing order."""
    return list(range(rank * accum_steps, (rank + 1) * accum_steps))


def virtual_batch(perm: Sequence[int], step: int, vrank: int, virtual_ranks: int, batch: int) -> List[int]:
    """Sample indices of virtual rank ``vrank`` at optimiser step ``step`` of an epoch."""
    start = step * virtual_ranks * batch + vrank * batch
    return [int(i) for i in perm[start:start + batch]]


class MicroBatchSampler:
    """Batch sampler for one physical rank: yields ``[(epoch, index), ...]`` micro-batches.

    Starts at (epoch, step) so a resumed run continues the very same sequence.
    The epoch travels with every index because augmentation randomness is a
    function of (seed, epoch, sample index), never of the rank or the worker.
    """

    def __init__(self, n: int, rank: int, size: int, accum_steps: int, batch: int, seed: int,
                 epoch: int, start_step: int = 0, max_steps: Optional[int] = None):
        """``max_steps``: the epoch's steps when they are fewer than these ``n`` samples give (each node
        samples its own share of partitioned data, and every node stops at the smallest share's steps)."""
        self.n, self.rank, self.size, self.k, self.batch, self.seed = n, rank, size, accum_steps, batch, seed
        self.epoch, self.start_step = epoch, start_step
        self.virtual = size * accum_steps
        self.steps = steps_per_epoch(n, self.virtual, batch)
        if self.steps == 0:
            raise ValueError(f"{n} training samples are fewer than one global batch "
                             f"({self.virtual} virtual ranks x {batch} clips)")
        if max_steps is not None:
            self.steps = min(self.steps, max_steps)

    def __len__(self) -> int:
        return (self.steps - self.start_step) * self.k

    @property
    def key(self) -> tuple:
        """Equal for two samplers exactly when they yield the same micro-batches (a pool that read ahead
        into this epoch compares it with the sampler the epoch really uses)."""
        return ("micro", self.n, self.rank, self.virtual, self.k, self.batch, self.seed, self.epoch, self.start_step,
                self.steps)

    def __iter__(self) -> Iterator[List[Tuple[int, int]]]:
        perm = epoch_permutation(self.n, self.seed, self.epoch)
        for step in range(self.start_step, self.steps):
            for v in virtual_ranks_of(self.rank, self.k):
                yield [(self.epoch, i) for i in virtual_batch(perm, step, v, self.virtual, self.batch)]


def eval_indices(n: int, rank: int, size: int) -> List[int]:
    """Evaluation split across ranks (every sample exactly once, counts summed by allreduce)."""
    return list(range(rank, n, size))


def sample_stream(n: int, seed: int, epoch: int, start: int, stop: int) -> List[int]:
    """Positions [start, stop) of an epoch's index stream: the epoch's permutation,
    then (when variable batches run past it) further permutations of the same epoch."""
    out: List[int] = []
    pos = start
    while pos < stop:
        cycle, off = divmod(pos, n)
        perm = epoch_permutation(n, seed, epoch) if cycle == 0 else \
            np.random.default_rng([seed, epoch, 0x5A3, cycle]).permutation(n)
        take = min(stop - pos, n - off)
        out += [int(i) for i in perm[off:off + take]]
        pos += take
    return out


class ShapeBatchSampler:
    """Batch sampler for variable-shape iterations (multigrid): yields micro-batches of
    ``(epoch, index, frames, size)``, so the shape travels with every sample and one
    set of DataLoader workers serves every shape of the epoch.

    ``steps`` are the epoch's iterations as (frames, size, clips per virtual rank).
    Iteration s consumes ``virtual_ranks x batch_s`` positions of the epoch's stream;
    virtual rank v takes its contiguous slice, as in the fixed-batch mapping.
    """

    def __init__(self, n: int, rank: int, size: int, accum_steps: int, seed: int, epoch: int,
                 steps: Sequence[Tuple[int, int, int]], start_step: int = 0):
        self.n, self.rank, self.k, self.seed, self.epoch = n, rank, accum_steps, seed, epoch
        self.virtual = size * accum_steps
        self.steps, self.start_step = list(steps), start_step

    def __len__(self) -> int:
        return (len(self.steps) - self.start_step) * self.k

    @property
    def key(self) -> tuple:
        """As ``MicroBatchSampler.key``: the epoch's shapes are part of it."""
        return ("shape", self.n, self.rank, self.virtual, self.k, self.seed, self.epoch, tuple(self.steps),
                self.start_step)

    def __iter__(self) -> Iterator[List[Tuple[int, int, int, int]]]:
        offset = sum(self.virtual * b for _, _, b in self.steps[:self.start_step])
        for frames, size, b in self.steps[self.start_step:]:
            for v in virtual_ranks_of(self.rank, self.k):
                idx = sample_stream(self.n, self.seed, self.epoch, offset + v * b, offset + (v + 1) * b)
                yield [(self.epoch, i, frames, size) for i in idx]
            offset += self.virtual * b
