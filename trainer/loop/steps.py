"""One optimiser step and one evaluation pass, apart from the loop that calls them.

Why apart: the loop decides when (epochs, stops, checkpoints); these decide how (micro-batches,
mixed precision, the engine's gradient exchange, per-video view averaging). Each can be read,
and changed, without the other.
"""
from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, Iterator, List, Literal, Optional, Tuple, Union, overload

import torch
import torch.nn.functional as F

from trainer.dist import compat
from trainer.data.clips import normalize
from trainer.data.datasets import EvalClips, eval_loader
from trainer.data.devicedecode import ByteBatch, device_clips
from trainer.dist.engines import Engine, unwrap
from trainer.loop.metrics import topk_hits
from trainer.data.sampler import eval_indices

if TYPE_CHECKING:
    from trainer.data.datasets import Pipeline


@dataclass
class StepContext:
    """What a step needs: the engine, the (possibly wrapped) model, its optimiser and the numerics."""
    engine: Engine
    model: torch.nn.Module
    opt: torch.optim.Optimizer
    scaler: Optional["compat.GradScaler"]
    device: torch.device
    amp_dtype: Optional[torch.dtype]
    channels_last: bool
    accum: int
    clip_grad: float
    synchronous: bool  # False for AAVG learners: no gradient allreduce, no engine contexts

    def prep(self, x: Union[torch.Tensor, ByteBatch]) -> torch.Tensor:
        """A batch of clips (N, T, C, H, W) as the frames the 2D network takes, on the device; a ``ByteBatch``
        (``--decode device``) is decoded and augmented on the device first."""
        if isinstance(x, ByteBatch):
            x = device_clips(x, self.device)
        x = normalize(x.to(self.device, non_blocking=True))
        x = x.reshape(-1, *x.shape[2:])
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last else x

    def autocast(self):
        if self.amp_dtype is None:
            return nullcontext()
        return torch.autocast("cuda", dtype=self.amp_dtype)


def _micro_batches(ctx: StepContext, batches: Iterator) -> Tuple[torch.Tensor, float]:
    """Forward and backward over the step's micro-batches; returns [loss sum, top1, top5, n] on the
    device and the time spent waiting for data.

    Why on the device: reading a number back (``.item()``, ``float()``) waits for
    the GPU to finish everything queued; the loop reads the sums once per
    metrics record (``--log-every``), not per micro-batch.
    """
    e, k = ctx.engine, ctx.accum
    wait = 0.0
    sums = torch.zeros(4, dtype=torch.float64, device=ctx.device)
    for micro in range(k):
        t0 = time.perf_counter()
        x, y = next(batches)
        wait += time.perf_counter() - t0
        x, y = ctx.prep(x), y.to(ctx.device, non_blocking=True)
        with (e.micro_context(ctx.model, micro, k) if ctx.synchronous else nullcontext()):
            with ctx.autocast():
                out = ctx.model(x)
                loss = F.cross_entropy(out.float(), y)
            scaled = loss / k
            (ctx.scaler.scale(scaled) if ctx.scaler is not None else scaled).backward()
        sums[0] += loss.detach().double() * y.shape[0]
        sums[1:3] += topk_hits(out.detach(), y)
        sums[3] += y.shape[0]
    return sums, wait


def train_step(ctx: StepContext, batches: Iterator, lr: float) -> Tuple[torch.Tensor, float]:
    """k micro-batches, one allreduce, optional clipping, one update; returns the device sums
    [loss sum, top1, top5, n] and the time spent waiting for data. A parameter group's ``lr_mult``
    (the official recipe's fc groups) scales ``lr`` for that group."""
    e, opt = ctx.engine, ctx.opt
    for g in opt.param_groups:
        g["lr"] = lr * g.get("lr_mult", 1.0)
    opt.zero_grad()  # set_to_none (torch >= 2 default; Horovod takes no argument)
    sums, wait = _micro_batches(ctx, batches)
    if ctx.synchronous:
        e.finish_grads(opt)
    if ctx.scaler is not None:
        ctx.scaler.unscale_(opt)
    if ctx.clip_grad > 0:
        torch.nn.utils.clip_grad_norm_(ctx.model.parameters(), ctx.clip_grad)
    with (e.step_context(opt) if ctx.synchronous else nullcontext()):
        if ctx.scaler is not None:
            ctx.scaler.step(opt)
            ctx.scaler.update()
        else:
            opt.step()
    return sums, wait


@dataclass
class EvalLoader:
    """How evaluation batches are read and combined: per-rank views per batch, how a video's views
    are averaged, and where the batches come from (a persistent pipeline, or a loader per pass)."""
    batch_per_gpu: int
    workers: int
    prefetch: int
    average: str = "logits"
    pipeline: Optional["Pipeline"] = None


def video_scores(out: torch.Tensor, views: int, average: str) -> torch.Tensor:
    """One prediction per video from its ``views`` rows of logits: the mean of the logits (the official
    TSM test) or, with ``average == "probs"``, the log of the mean probability. Either way a valid input
    to ``cross_entropy`` and to top-k."""
    out = out.float().view(-1, views, out.shape[-1])
    if average == "probs":
        return out.softmax(-1).mean(1).clamp_min(1e-12).log()
    return out.mean(1)


class VideoTable:
    """Per-video score sums of this rank's share: row ``i`` of ``table`` holds the summed score vectors of
    dataset video ``i`` and, in its last column, how many times this rank scored it.

    Why sums and counts rather than rows: summing every rank's table in one allreduce then gives each rank
    the whole test, and dividing by the counts undoes any video a rank split scores more than once.
    """

    def __init__(self, videos: int, classes: int, order: List[int], device: torch.device):
        self.table = torch.zeros(videos, classes + 1, dtype=torch.float64, device=device)
        self.order, self.pos = order, 0

    def add(self, scores: torch.Tensor) -> None:
        """The next videos of ``order`` (batches come in the order of the index list, whole videos each)."""
        rows = torch.tensor(self.order[self.pos:self.pos + scores.shape[0]], dtype=torch.long,
                            device=self.table.device)
        self.pos += scores.shape[0]
        counted = torch.cat([scores.double(), scores.new_ones(scores.shape[0], 1, dtype=torch.float64)], 1)
        self.table.index_add_(0, rows, counted)

    def gathered(self, engine: Engine) -> torch.Tensor:
        """Every rank's rows in one allreduce; each video's mean score vector (videos, classes), float64 on
        the CPU. A video no rank scored keeps zeros."""
        total = engine.allreduce_sum(self.table).cpu()
        return total[:, :-1] / total[:, -1:].clamp_min(1)


def num_classes_of(model: torch.nn.Module) -> int:
    """The width of the model's scores: the length of every rank's table rows, known before any batch (a
    rank with no videos must still join the allreduce with the same shape)."""
    core = unwrap(model)
    n = getattr(core, "num_classes", None)
    return int(n) if isinstance(n, int) else int(core.fc.out_features)


def _eval_sums(ctx: StepContext, model: torch.nn.Module, batches, views: int, average: str,
               table: Optional[VideoTable] = None) -> torch.Tensor:
    """[loss, top1, top5, videos, data wait] over this rank's share; each video's views averaged (and its
    score vector added to ``table`` when one is given)."""
    sums = torch.zeros(5, dtype=torch.float64, device=ctx.device)
    it = iter(batches)
    while True:
        tw = time.perf_counter()
        try:
            x, y = next(it)
        except StopIteration:
            break
        sums[4] += time.perf_counter() - tw
        x = x.flatten(0, 1)  # (videos x clips, crops, T, H, W, 3) -> one row per view
        x, y = ctx.prep(x), y.to(ctx.device)
        with ctx.autocast():
            out = unwrap(model)(x)
        scores = video_scores(out, views, average)
        y = y.view(scores.shape[0], -1)[:, 0]  # one label per video (its clips share it)
        sums[0] += F.cross_entropy(scores, y, reduction="sum").double()
        sums[1:3] += topk_hits(scores, y)
        sums[3] += y.shape[0]
        if table is not None:
            table.add(scores)
    return sums


@overload
def evaluate(ctx: StepContext, how: EvalLoader, dataset: EvalClips, model: torch.nn.Module) -> Dict[str, float]:
    ...


@overload
def evaluate(ctx: StepContext, how: EvalLoader, dataset: EvalClips, model: torch.nn.Module, *,
             per_video: Literal[True]) -> Tuple[Dict[str, float], torch.Tensor]:
    ...


@torch.no_grad()
def evaluate(ctx: StepContext, how: EvalLoader, dataset: EvalClips, model: torch.nn.Module, *,
             per_video: bool = False):
    """Every video of ``dataset`` scored from its clips x crops views; counts summed over ranks. The caller
    sets the model's evaluation shape; the model is back in training mode afterwards.

    With ``per_video`` (the final test and --test-only; not the validations during training, which need no
    more than counts) also every video's averaged score vector, on every rank: (videos, classes) float64 on
    the CPU, row = dataset index, as ``video_scores`` gives it. Two-stream late fusion reads these.
    """
    e = ctx.engine
    model.eval()
    idx = eval_indices(len(dataset), e.rank, e.size)
    views = dataset.views
    batch = max(how.batch_per_gpu, views)
    if how.pipeline is not None:
        batches = how.pipeline.eval_batches(dataset, idx, batch)
    else:
        batches = eval_loader(dataset, idx, batch, how.workers, ctx.device.type == "cuda", how.prefetch)
    table = VideoTable(len(dataset), num_classes_of(model), idx, ctx.device) if per_video else None
    t0 = time.perf_counter()
    sums = _eval_sums(ctx, model, batches, views, how.average, table)
    elapsed = time.perf_counter() - t0
    times = torch.tensor([elapsed], dtype=torch.float64, device=ctx.device)
    sums = e.allreduce_sum(sums)
    times = e.allreduce_sum(times)
    scores = table.gathered(e) if table is not None else None
    model.train()
    loss, c1, c5, n, wait = sums.tolist()
    n = max(n, 1)
    result = {"loss": loss / n, "top1": c1 / n, "top5": c5 / n, "videos": int(n),
              "clips_per_s": n * views / max(times.item() / e.size, 1e-9),
              "data_wait_frac": wait / max(times.item(), 1e-9), "step_time": elapsed, "views": views}
    return (result, scores) if per_video else result
