"""What a training run does epoch by epoch: steps per epoch, the LR of each step, the loader of each
epoch, the model's shape per step, and the part of the checkpoint that belongs to the schedule.

Why one interface with three implementations: the loop asks the same questions of every run
("how many steps in epoch e?", "what LR now?", "which batches?"); the answers differ for the
standard recipe, multigrid (a schedule of clip shapes) and AAVG (learners averaging with an
adaptive batch). Each answer lives in one class instead of a branch in the loop.
"""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Dict, List, Optional

import torch

from trainer.methods.aavg import BatchSizeController, should_average
from trainer.data.datasets import TrainClips
from trainer.data.sampler import MicroBatchSampler, ShapeBatchSampler
from trainer.methods.mgsteps import MultigridSteps
from trainer.data.sampler import steps_per_epoch as sampler_steps


def lr_at(step: float, base_lr: float, warmup_steps: int, total_steps: int) -> float:
    """Per-iteration linear warm-up to ``base_lr``, then cosine decay to 0."""
    if step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    span = max(total_steps - warmup_steps, 1)
    return 0.5 * base_lr * (1.0 + math.cos(math.pi * min(step - warmup_steps, span) / span))


@dataclass
class TrainData:
    """The training clips and who shares their sample space (all ranks, or one node's ranks)."""
    train_set: TrainClips
    sample_rank: int
    sample_size: int
    accum: int
    node_counts: Optional[List[int]]  # clips per node when each node holds its own share

    def steps_for_batch(self, batch: int) -> int:
        """Steps per epoch at ``batch`` clips per virtual rank (the smallest node share when partitioned)."""
        if self.node_counts is not None:
            return min(sampler_steps(c, self.sample_size * self.accum, batch) for c in self.node_counts)
        return sampler_steps(len(self.train_set), self.sample_size * self.accum, batch)


@dataclass
class Position:
    """Where the run is: what the LR and the epoch geometry are functions of."""
    step: int
    epoch: int
    step_in_epoch: int


class Schedule:
    """The standard recipe: the same steps every epoch, warm-up then cosine over iterations."""
    name = "standard"

    def __init__(self, args: argparse.Namespace, data: TrainData, steps_per_epoch: int, base_lr: float,
                 virtual: int):
        self.args, self.data = args, data
        self.steps_per_epoch = steps_per_epoch
        self.total_steps = steps_per_epoch * args.epochs
        self.warmup_steps = int(round(args.warmup_epochs * steps_per_epoch))
        self.base_lr = base_lr
        self.virtual = virtual

    @property
    def run_total_steps(self) -> int:
        return self.total_steps

    def epoch_steps(self, epoch: int) -> int:
        return self.steps_per_epoch

    def lr(self, pos: Position) -> float:
        return lr_at(pos.step, self.base_lr, self.warmup_steps, self.total_steps)

    def start_epoch(self) -> None:
        """Called when an epoch starts at its first step (a schedule may change its batch here)."""

    def sampler(self, epoch: int, start: int):
        """The batch sampler of ``epoch`` from its step ``start``: what the rank's workers read next."""
        return self._micro(self.args.batch_per_gpu, epoch, start, self.epoch_steps(epoch))

    def _micro(self, batch: int, epoch: int, start: int, steps: int) -> MicroBatchSampler:
        """This rank's fixed-batch sampler of ``epoch`` from step ``start``, ``steps`` steps long at most."""
        a, d = self.args, self.data
        return MicroBatchSampler(len(d.train_set), d.sample_rank, d.sample_size, d.accum, batch, a.seed, epoch, start,
                                 max_steps=steps)

    def sampler_ahead(self, epoch: int):
        """The sampler ``epoch`` will use from its first step, as far as it is known now; None past the run's
        last epoch. The input pool reads into it before the epoch starts and keeps what it read only when
        the epoch's real sampler (``sampler``) has the same key."""
        return self.sampler(epoch, 0) if epoch < self.args.epochs else None

    def adapt_model(self, model: torch.nn.Module) -> None:
        """Changes to the freshly built model the schedule needs (before the optimiser sees it)."""

    def before_step(self, core: torch.nn.Module, step: int) -> None:
        """The model's shape for iteration ``step``."""

    def before_eval(self, model: torch.nn.Module) -> None:
        """The model's shape for evaluation (the full shape)."""

    def metrics_extra(self, step: int) -> Dict:
        """Fields of the train record for iteration ``step`` (0-based, the one just run)."""
        return {}

    def state(self) -> Dict:
        """The schedule's own part of a checkpoint (top-level keys)."""
        return {}

    def restore(self, state: Dict) -> None:
        """The inverse of ``state``."""

    def config(self) -> Dict:
        """The schedule's entries in run_config.json."""
        return {}

    def describe(self) -> Optional[str]:
        """A log line about the schedule, or None."""
        return None


class MultigridSchedule(Schedule):
    """Multigrid (Wu et al.): a schedule of clip shapes; the LR follows clips seen times the batch multiplier."""
    name = "multigrid"

    def __init__(self, args: argparse.Namespace, data: TrainData, steps_per_epoch: int, base_lr: float,
                 virtual: int):
        super().__init__(args, data, steps_per_epoch, base_lr, virtual)
        self.mg = MultigridSteps(epochs=args.epochs, frames=args.num_segments, size=args.input_size,
                                 base_batch=args.batch_per_gpu, clips_per_epoch=steps_per_epoch * args.batch_per_gpu,
                                 short_cycle=args.short_cycle)

    @property
    def run_total_steps(self) -> int:
        return self.mg.total_steps

    def epoch_steps(self, epoch: int) -> int:
        return self.mg.steps_in_epoch(epoch)

    def lr(self, pos: Position) -> float:
        base = self.mg.base_step(pos.step)
        mult = self.mg.steps[min(pos.step, self.mg.total_steps - 1)].lr_mult
        return lr_at(base, self.base_lr, self.warmup_steps, self.total_steps) * mult

    def sampler(self, epoch: int, start: int):
        a, d = self.args, self.data
        first, last = self.mg.epoch_range(epoch)
        shapes = [(st.frames, st.size, st.batch) for st in self.mg.steps[first:last]]
        return ShapeBatchSampler(len(d.train_set), d.sample_rank, d.sample_size, d.accum, a.seed, epoch, shapes,
                                 start)

    def adapt_model(self, model: torch.nn.Module) -> None:
        from trainer.models.subbn import convert_to_sub_bn
        convert_to_sub_bn(model, self.args.bn_clips, self.args.num_segments)

    def before_step(self, core: torch.nn.Module, step: int) -> None:
        core.set_num_segments(self.mg.steps[step].frames)

    def before_eval(self, model: torch.nn.Module) -> None:
        model.set_num_segments(self.args.num_segments)

    def metrics_extra(self, step: int) -> Dict:
        st = self.mg.steps[step]
        return dict(frames=st.frames, size=st.size, batch=st.batch, lr_mult=st.lr_mult, phase=st.phase,
                    global_batch=st.batch * self.virtual)

    def config(self) -> Dict:
        a = self.args
        return dict(short_cycle=a.short_cycle, bn_clips=a.bn_clips, multigrid_iterations=self.mg.total_steps,
                    standard_iterations=self.total_steps,
                    multigrid=[{"stage": p.stage, "cycle": p.cycle, "frames": p.frames, "size": p.size,
                                "batch_mult": p.batch_mult, "lr_mult": p.lr_mult, "iterations": p.iterations}
                               for p in self.mg.phases])

    def describe(self) -> Optional[str]:
        return (f"multigrid: {self.mg.total_steps} iterations instead of {self.total_steps} "
                f"({self.mg.speedup():.2f}x fewer)")


class AAVGSchedule(Schedule):
    """AAVG: learners step on their own gradients and average every K steps; the batch rule may grow the
    per-learner batch from the next epoch on (fewer steps, the LR curve followed by epochs done).

    ``inner`` is the shape schedule underneath (standard or multigrid); a multigrid run keeps its own
    shapes, steps and LR, and AAVG adds the averaging and the batch rule's checks.
    """
    name = "aavg"

    def __init__(self, inner: Schedule):
        super().__init__(inner.args, inner.data, inner.steps_per_epoch, inner.base_lr, inner.virtual)
        a = self.args
        self.inner = inner
        self.epoch_batch = a.batch_per_gpu
        self.avg_rounds = 0
        self.controller: Optional[BatchSizeController] = None
        if a.aavg_eval_every != 0:  # m steps, or -1: once per epoch
            # the rule never grows the batch past one global batch of the training clips (the sampler refuses it)
            top = a.aavg_max_batch
            while top > a.batch_per_gpu and inner.data.steps_for_batch(top) == 0:
                top -= 1
            self.controller = BatchSizeController(batch=a.batch_per_gpu, every=a.aavg_eval_every, b1=a.aavg_b1,
                                                  b2=a.aavg_b2, max_batch=top)

    def _grown(self) -> bool:
        return not isinstance(self.inner, MultigridSchedule) and self.epoch_batch != self.args.batch_per_gpu

    @property
    def run_total_steps(self) -> int:
        return self.inner.run_total_steps

    def epoch_steps(self, epoch: int) -> int:
        return self.data.steps_for_batch(self.epoch_batch) if self._grown() else self.inner.epoch_steps(epoch)

    def lr(self, pos: Position) -> float:
        if not self._grown():
            return self.inner.lr(pos)
        done = (pos.epoch + pos.step_in_epoch / self.epoch_steps(pos.epoch)) * self.steps_per_epoch
        return lr_at(done, self.base_lr, self.warmup_steps, self.total_steps)

    def start_epoch(self) -> None:
        if self.controller is not None:
            self.epoch_batch = self.controller.batch  # a grown batch takes effect at an epoch start

    def sampler(self, epoch: int, start: int):
        if isinstance(self.inner, MultigridSchedule):
            return self.inner.sampler(epoch, start)
        return self._micro(self.epoch_batch, epoch, start, self.epoch_steps(epoch))

    def sampler_ahead(self, epoch: int):
        """The batch rule's newest batch: what the next epoch starts with unless a later check changes it."""
        if epoch >= self.args.epochs or isinstance(self.inner, MultigridSchedule) or self.controller is None:
            return super().sampler_ahead(epoch)
        batch = self.controller.batch
        return self._micro(batch, epoch, 0, self.data.steps_for_batch(batch))

    def adapt_model(self, model: torch.nn.Module) -> None:
        self.inner.adapt_model(model)

    def before_step(self, core: torch.nn.Module, step: int) -> None:
        self.inner.before_step(core, step)

    def before_eval(self, model: torch.nn.Module) -> None:
        self.inner.before_eval(model)

    def due_average(self, step_in_epoch: int, epoch_steps: int) -> bool:
        """After the step that brought the epoch to ``step_in_epoch``: average now? Always at an epoch end,
        so evaluations and checkpoints see one model."""
        return step_in_epoch == epoch_steps or should_average(step_in_epoch - 1, epoch_steps,
                                                              self.args.avg_interval)

    def check_due(self, step: int) -> bool:
        """A batch-rule check after optimiser step ``step`` inside the epoch (--aavg-eval-every m >= 1)."""
        return self.controller is not None and self.controller.due(step)

    def check_at_epoch_end(self) -> bool:
        """A batch-rule check at every epoch's end, after its averaging round (--aavg-eval-every -1)."""
        return self.controller is not None and self.controller.per_epoch

    def metrics_extra(self, step: int) -> Dict:
        if isinstance(self.inner, MultigridSchedule):
            return self.inner.metrics_extra(step)
        return dict(batch=self.epoch_batch, global_batch=self.epoch_batch * self.virtual,
                    avg_rounds=self.avg_rounds)

    def state(self) -> Dict:
        c = self.controller
        ctl = {"batch": c.batch, "best": c.best, "history": [list(h) for h in c.history]} if c else None
        return {"aavg": {"epoch_batch": self.epoch_batch, "avg_rounds": self.avg_rounds, "controller": ctl}}

    def restore(self, state: Dict) -> None:
        saved = state.get("aavg")
        if not saved:
            return
        self.epoch_batch, self.avg_rounds = saved["epoch_batch"], saved["avg_rounds"]
        c = saved.get("controller")
        if self.controller is not None and c:
            self.controller.batch, self.controller.best = c["batch"], c["best"]
            self.controller.history = [tuple(h) for h in c["history"]]

    def config(self) -> Dict:
        a = self.args
        return {**self.inner.config(), "avg_interval": a.avg_interval, "aavg_eval_every": a.aavg_eval_every,
                "aavg_b1": a.aavg_b1, "aavg_b2": a.aavg_b2, "aavg_max_batch": a.aavg_max_batch}

    def describe(self) -> Optional[str]:
        return self.inner.describe()


def make_schedule(args: argparse.Namespace, data: TrainData, steps_per_epoch: int, base_lr: float,
                  virtual: int) -> Schedule:
    """The schedule the options name: multigrid or standard shapes, with AAVG on top when asked."""
    kind = MultigridSchedule if args.schedule == "multigrid" else Schedule
    sched = kind(args, data, steps_per_epoch, base_lr, virtual)
    return AAVGSchedule(sched) if args.optimizer_sync == "aavg" else sched
