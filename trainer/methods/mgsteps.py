"""A multigrid schedule unrolled into the iterations a run executes.

Why unrolled: the training loop, the sampler and resume all need to answer
"what is iteration s?" (frames, crop size, clips per rank, LR multiplier) and
"which iterations make epoch e?" in O(1), the same on every rank and after a
restart. Torch-free.

Epochs under multigrid are a clip budget, not an iteration count: epoch e ends
at the first iteration where the clips seen (per virtual rank) reach
(e + 1) x clips_per_epoch, so evaluations and epoch checkpoints fall where the
standard run would have them in data seen, while each epoch has fewer, larger
iterations in the small shapes. The LR follows the standard warm-up + cosine
curve over clips seen, times the long-cycle multiplier (LR scales linearly
with the batch).
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import List, Sequence, Tuple

from trainer.methods import multigrid as mg


@dataclass(frozen=True)
class Step:
    frames: int
    size: int
    batch: int        # clips per virtual rank (per micro-batch)
    lr_mult: float
    phase: int        # index into the schedule's phases


def stage_boundaries(epochs: int) -> List[int]:
    """LR stages at 40% and 80% of the run (then the final full-shape phase), as the planner shows them."""
    return sorted({0, int(epochs * 0.4), int(epochs * 0.8)})


class MultigridSteps:
    def __init__(self, *, epochs: int, frames: int, size: int, base_batch: int, clips_per_epoch: int,
                 short_cycle: bool):
        self.epochs, self.base_batch, self.clips_per_epoch = epochs, base_batch, clips_per_epoch
        self.phases: Sequence[mg.Phase] = mg.schedule(
            epochs=epochs, stages=stage_boundaries(epochs), frames=frames, size=size,
            clips_per_epoch=clips_per_epoch, base_batch=base_batch, short_cycle=short_cycle)
        self.steps: List[Step] = []
        for pi, ph in enumerate(self.phases):
            for i in range(ph.iterations):
                sh = ph.shape_at(i)
                self.steps.append(Step(sh.frames, sh.size, max(1, int(round(base_batch * sh.batch_mult))),
                                       ph.lr_mult, pi))
        # clips_before[s]: clips per virtual rank consumed before iteration s.
        self.clips_before = [0]
        for st in self.steps:
            self.clips_before.append(self.clips_before[-1] + st.batch)
        self.epoch_start = [0]
        for e in range(epochs - 1):
            s = bisect.bisect_left(self.clips_before, (e + 1) * clips_per_epoch)
            self.epoch_start.append(min(max(s, self.epoch_start[-1] + 1), len(self.steps) - (epochs - 1 - e)))
        self.epoch_start.append(len(self.steps))

    @property
    def total_steps(self) -> int:
        return len(self.steps)

    def epoch_range(self, epoch: int) -> Tuple[int, int]:
        return self.epoch_start[epoch], self.epoch_start[epoch + 1]

    def steps_in_epoch(self, epoch: int) -> int:
        a, b = self.epoch_range(epoch)
        return b - a

    def base_step(self, s: int) -> float:
        """Position of iteration s on the standard run's iteration axis (by clips seen)."""
        return self.clips_before[min(s, len(self.steps))] / self.base_batch

    def speedup(self) -> float:
        """Iterations of the standard run over iterations of this one (the same clips)."""
        return self.epochs * self.clips_per_epoch / self.base_batch / max(self.total_steps, 1)
