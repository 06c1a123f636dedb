"""Multigrid training schedules (Wu et al., "A Multigrid Method for Efficiently Training Video Models").

Train on a schedule of mini-batch *shapes*: fewer frames and smaller crops with
proportionally more clips, so each iteration costs about the same; the LR
scales linearly with the batch multiplier. Torch-free and pure: the schedule is
a function of the recipe, testable to the iteration.

Long cycle: (T, S) factors (1/4, 1/sqrt2), (1/2, 1/sqrt2), (1/2, 1), (1, 1) ->
batch multipliers 1 / (t * s^2) = 8, 4, 2, 1. Every LR stage is split across
the four shapes so they get *equal iterations* while the stage still sees the
same number of clips; a final phase runs at the full shape.

Short cycle (optional): per iteration, the spatial size cycles through 1/2,
1/sqrt2, 1 *of the current long-cycle shape* (batch x4, x2, x1). Two defects of
PySlowFast's implementation are avoided on purpose: it scaled the short cycle
from the *default* spatial size, so outside the last long-cycle phase the
short-cycle shapes and multipliers were wrong; and its final phase indexed the
third short-cycle shape, so a long cycle without short cycle crashed.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import List, Sequence, Tuple

LONG_CYCLE = ((0.25, 1 / math.sqrt(2)), (0.5, 1 / math.sqrt(2)), (0.5, 1.0), (1.0, 1.0))
SHORT_CYCLE = (0.5, 1 / math.sqrt(2), 1.0)


@dataclass(frozen=True)
class Shape:
    frames: int
    size: int
    #: Clips per GPU relative to the base batch: 1 / (t * s^2) of the nominal factors
    #: (8, 4, 2, 1 for the long cycle), not of the rounded pixel sizes.
    batch_mult: float


def shape_for(frames: int, size: int, t: float, s: float) -> Shape:
    f = max(1, int(round(frames * t)))
    sz = max(1, int(round(size * s)))
    return Shape(f, sz, round(1.0 / (t * s * s), 6))


@dataclass(frozen=True)
class Phase:
    stage: int               # LR stage index (the final full-shape phase has the last index)
    cycle: int               # long-cycle index, 0..3; -1 for the final phase
    frames: int
    size: int
    batch_mult: float        # long-cycle batch multiplier (LR is scaled by the same factor)
    lr_mult: float
    iterations: int
    epochs: float            # clip budget of the phase, in epochs of the dataset
    short_cycle: Tuple[Shape, ...]  # per-iteration shapes within the phase (empty: no short cycle)

    def shape_at(self, iteration_in_phase: int) -> Shape:
        if not self.short_cycle:
            return Shape(self.frames, self.size, self.batch_mult)
        return self.short_cycle[iteration_in_phase % len(self.short_cycle)]

    def to_dict(self):
        return asdict(self)


def long_cycle_shapes(frames: int, size: int, short_cycle: bool) -> List[List[Shape]]:
    """For each long-cycle phase, the shapes its iterations cycle through (one without short cycle)."""
    out = []
    for t, s in LONG_CYCLE:
        base = shape_for(frames, size, t, s)
        if short_cycle:
            out.append([shape_for(frames, size, t, s * f) for f in SHORT_CYCLE])
        else:
            out.append([base])
    return out


def schedule(*, epochs: int, stages: Sequence[int], frames: int, size: int, clips_per_epoch: int,
             base_batch: int, short_cycle: bool = False, epoch_factor: float = 1.0) -> List[Phase]:
    """The phases of a multigrid run.

    ``stages`` are the LR-stage boundaries in epochs of the base run, starting at 0
    (for example [0, 40, 80] of 100 epochs: stages 0-40, 40-80, then the final
    phase 80-100 at full shape). ``epoch_factor`` stretches the whole clip budget
    (PySlowFast uses 1.5 to spend part of the saving on accuracy).
    """
    if list(stages) != sorted(stages) or not stages or stages[0] != 0 or stages[-1] >= epochs:
        raise ValueError(f"stages {list(stages)} must start at 0, increase, and end before {epochs} epochs")
    shapes = long_cycle_shapes(frames, size, short_cycle)
    # Average batch multiplier per long-cycle phase (over its short-cycle shapes).
    avg_mult = [sum(s.batch_mult for s in ph) / len(ph) for ph in shapes]
    phases: List[Phase] = []
    base_iters_total = 0.0
    mg_iters_total = 0.0
    for k in range(len(stages) - 1):
        stage_epochs = stages[k + 1] - stages[k]
        base_iters_total += stage_epochs * clips_per_epoch / base_batch
        # Equal iterations per shape, same clips in the stage: I * base_batch * sum(avg_mult) = stage clips.
        iters = stage_epochs * clips_per_epoch / (base_batch * sum(avg_mult))
        for c, ph in enumerate(shapes):
            mg_iters_total += iters
            long = shape_for(frames, size, *LONG_CYCLE[c])
            phases.append(Phase(k, c, long.frames, long.size, long.batch_mult, long.batch_mult, iters,
                                iters * base_batch * avg_mult[c] / clips_per_epoch,
                                tuple(ph) if short_cycle else ()))
    # Final phase at full shape, with the same iteration saving as the rest.
    saving = base_iters_total / mg_iters_total
    final_epochs = epochs - stages[-1]
    final_iters = final_epochs * clips_per_epoch / base_batch / saving
    full = shape_for(frames, size, 1.0, 1.0)
    phases.append(Phase(len(stages) - 1, -1, full.frames, full.size, 1.0, 1.0, final_iters,
                        final_iters * base_batch / clips_per_epoch, ()))
    # Scale the clip budget by epoch_factor and round iterations, keeping totals whole.
    out = []
    for p in phases:
        it = max(1, int(round(p.iterations * epoch_factor)))
        out.append(Phase(p.stage, p.cycle, p.frames, p.size, p.batch_mult, p.lr_mult, it,
                         p.epochs * epoch_factor, p.short_cycle))
    return out




def describe(phases: Sequence[Phase]) -> str:
    lines = [f"{'stage':>5} {'cycle':>5} {'T':>3} {'S':>4} {'batch x':>7} {'LR x':>5} {'iters':>7}"]
    for p in phases:
        cyc = "final" if p.cycle < 0 else str(p.cycle)
        lines.append(f"{p.stage:>5} {cyc:>5} {p.frames:>3} {p.size:>4} {p.batch_mult:>7.2f} {p.lr_mult:>5.2f} "
                     f"{p.iterations:>7}")
    return "\n".join(lines)
