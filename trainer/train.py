"""The training loop: what every rank runs.

Chain contract (the job script relies on it): resume from the newest
checkpoint in the run directory; on SIGUSR2 (LSF's warning before the
walltime) or SIGTERM, finish the current optimiser step, save, exit 0; write
``<run-dir>/COMPLETE`` when all epochs and the final test are done.

Why a stop flag travels in the per-step metrics allreduce: the signal reaches
ranks at slightly different moments; summing a 0/1 flag in the allreduce every
rank already does after each step makes all ranks stop after the same step,
so the checkpoint is consistent and no rank waits in a collective forever.
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import os
import random
import re
import signal
import socket
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch
import torch.nn.functional as F

from . import checkpoint as ckpt
from .aavg import BatchSizeController, average_learners, should_average
from .clips import ClipSpec, normalize
from .config import LR_PER_8_CLIPS
from .data import EvalClips, SampleError, TrainClips, error_line, eval_loader, shape_loader, train_loader
from .engines import Engine, make_engine, unwrap
from .metrics import MetricsWriter, log, progress_line, topk_correct
from .mgsteps import MultigridSteps
from .model import build_model
from .optim import build_optimizer
from .sampler import eval_indices, steps_per_epoch
from .shards import ShardDataset, ShardError
from .signals import STOP_SIGNALS
from .subbn import convert_to_sub_bn

COMPLETE = "COMPLETE"
RUN_CONFIG = "run_config.json"
#: Horovod's tensor-fusion buffer when HOROVOD_FUSION_THRESHOLD is not set (bytes).
HOROVOD_DEFAULT_FUSION = 128 * 1024 * 1024
#: torch DDP's default gradient bucket (bucket_cap_mb=25).
DDP_DEFAULT_BUCKET = 25 * 1024 * 1024


def lr_at(step: int, base_lr: float, warmup_steps: int, total_steps: int) -> float:
    """Per-iteration linear warm-up to ``base_lr``, then cosine decay to 0."""
    if step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    span = max(total_steps - warmup_steps, 1)
    return 0.5 * base_lr * (1.0 + math.cos(math.pi * min(step - warmup_steps, span) / span))


class StopFlag:
    """Set by SIGUSR2, SIGTERM or SIGINT (``signals.STOP_SIGNALS``); read once per optimiser step."""

    def __init__(self):
        self.signum: Optional[int] = None

    def install(self) -> None:
        from .signals import EARLY
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._handler)
        if EARLY:  # a stop request that came while the rank was starting
            self.signum = EARLY[0]

    def _handler(self, signum, frame) -> None:
        self.signum = signum

    def __bool__(self) -> bool:
        return self.signum is not None


def rng_states() -> Dict:
    """torch, numpy and python RNG states as a tensor and plain lists and numbers.

    Why not the objects the libraries return: checkpoints are read with
    ``weights_only=True``, which refuses numpy arrays; a numpy state stored as
    plain values restores the same stream bit for bit.
    """
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    version, internal, py_gauss = random.getstate()
    return {"torch": torch.get_rng_state(),
            "numpy": {"name": str(name), "keys": [int(k) for k in keys], "pos": int(pos),
                      "has_gauss": int(has_gauss), "gauss": float(gauss)},
            "python": {"version": int(version), "state": [int(v) for v in internal], "gauss": py_gauss}}


def set_rng_states(rng: Dict) -> None:
    """The inverse of ``rng_states``."""
    torch.set_rng_state(rng["torch"])
    n = rng["numpy"]
    np.random.set_state((n["name"], np.array(n["keys"], dtype=np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    p = rng["python"]
    random.setstate((p["version"], tuple(p["state"]), p["gauss"]))


def plain_args(args: argparse.Namespace) -> Dict:
    """The options as plain values (strings, numbers, booleans, None, lists of them) for the checkpoint."""
    def plain(v):
        if v is None or isinstance(v, (str, int, float, bool)):
            return v
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        return str(v)
    return {k: plain(v) for k, v in vars(args).items()}


def write_marker(run_dir: Path, name: str, text: str) -> None:
    """``run_dir/name`` holds ``text`` whole or not at all (temp name, then rename; no temp left on failure)."""
    tmp = run_dir / f".{name}.tmp{os.getpid()}"
    try:
        tmp.write_text(text)
        os.replace(tmp, run_dir / name)
    finally:
        tmp.unlink(missing_ok=True)


class Trainer:
    def __init__(self, args: argparse.Namespace, engine: Optional[Engine] = None):
        self.args = args
        self.run_dir = Path(args.run_dir)
        self.stop = StopFlag()
        self.stop.install()
        if args.threads:
            torch.set_num_threads(args.threads)
        if not args.data:
            raise SystemExit("trainer: --data DIR is required (a folder of shards with manifest.json)")
        self.engine = engine or make_engine(args.engine, rendezvous_dir=self.run_dir)
        e = self.engine
        self.is_main = e.rank == 0
        self.device = e.device
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if self.is_main:  # before anything is written: a killed run's half-written files go
            for p in ckpt.clean_leftovers(self.run_dir, (RUN_CONFIG, COMPLETE)):
                log(f"removed {p}, left by an interrupted run")
        self.metrics = MetricsWriter(self.run_dir, self.is_main)
        cuda = self.device.type == "cuda"
        self.amp_dtype = None
        if cuda and args.amp != "off":
            if args.amp == "bf16" or (args.amp == "auto" and torch.cuda.is_bf16_supported()):
                self.amp_dtype = torch.bfloat16
            else:
                self.amp_dtype = torch.float16
        self.channels_last = args.channels_last == "on" or (args.channels_last == "auto" and cuda)
        self.spec = ClipSpec(num_segments=args.num_segments, mode=args.sampling, stride=args.frame_stride,
                             size=args.input_size, scale_size=args.scale_size, flip=args.flip,
                             test_crops=args.test_crops)

        # Data.
        self.train_set = TrainClips(args.data, self.spec, args.seed, "train")
        n_classes = len(self.train_set.shards.classes)
        self.num_classes = args.num_classes or n_classes
        labels = self.train_set.shards.labels()
        if labels and max(labels) >= self.num_classes:
            raise SystemExit(f"trainer: the data has label {max(labels)} but the model has {self.num_classes} "
                             "classes: pass --num-classes 0 to take the count from the manifest")
        val = ShardDataset(args.data, "val")
        self.val_set = EvalClips(args.data, self.spec, 1, "val") if len(val) else None
        self.k = args.accum_steps
        self.virtual = e.size * self.k
        self.global_batch = self.virtual * args.batch_per_gpu
        # Who shares the sample space: all ranks, or (partitioned NVMe copies) the ranks of one node.
        self.sample_rank, self.sample_size = e.rank, e.size
        self._node_counts: Optional[List[int]] = None
        self.steps_per_epoch = steps_per_epoch(len(self.train_set), self.virtual, args.batch_per_gpu)
        placement = self.train_set.shards.manifest.get("placement") or {}
        if placement.get("policy") == "partition" and int(placement.get("nodes", 1)) > 1:
            self.steps_per_epoch = self._partitioned(int(placement["nodes"]), int(placement["node"]))
        if self.steps_per_epoch == 0:
            raise SystemExit(f"trainer: {len(self.train_set)} training clips are fewer than one global batch "
                             f"of {self.global_batch} ({e.size} ranks x {self.k} accumulation x "
                             f"{args.batch_per_gpu} clips)")
        self.total_steps = self.steps_per_epoch * args.epochs
        self.warmup_steps = int(round(args.warmup_epochs * self.steps_per_epoch))
        self.base_lr = args.lr if args.lr is not None else LR_PER_8_CLIPS * self.global_batch / 8
        # Methods: a multigrid schedule of shapes, or AAVG learners with an adaptive batch.
        self.mg: Optional[MultigridSteps] = None
        if args.schedule == "multigrid":
            self.mg = MultigridSteps(epochs=args.epochs, frames=args.num_segments, size=args.input_size,
                                     base_batch=args.batch_per_gpu,
                                     clips_per_epoch=self.steps_per_epoch * args.batch_per_gpu,
                                     short_cycle=args.short_cycle)
        self.run_total_steps = self.mg.total_steps if self.mg else self.total_steps
        self.aavg = args.optimizer_sync == "aavg"
        self.controller: Optional[BatchSizeController] = None
        self.epoch_batch = args.batch_per_gpu  # AAVG: per-learner batch of the current epoch
        self.avg_rounds = 0
        if self.aavg and args.aavg_eval_every > 0:
            self.controller = BatchSizeController(batch=args.batch_per_gpu, every=args.aavg_eval_every,
                                                  b1=args.aavg_b1, b2=args.aavg_b2, max_batch=args.aavg_max_batch)

        # Model and optimiser: the same init on every rank (and broadcast from rank 0 anyway).
        torch.manual_seed(args.seed)
        model = build_model(args.arch, self.num_classes, args.num_segments, args.shift, args.shift_placement,
                            args.width, args.fold_div, args.dropout).to(self.device)
        if self.mg is not None:
            convert_to_sub_bn(model, args.bn_clips, args.num_segments)
        if self.channels_last:
            model = model.to(memory_format=torch.channels_last)
        self.core = model
        opt = build_optimizer(args.optimizer, model, self.base_lr, args.momentum, args.weight_decay,
                              args.trust_coefficient)
        self.scaler = torch.amp.GradScaler("cuda") if self.amp_dtype == torch.float16 else None

        self.global_step, self.epoch, self.step_in_epoch = 0, 0, 0
        self.best_top1 = -1.0
        latest = self._resume_checkpoint()
        state = None
        if latest is not None:
            state = ckpt.load(latest)
            model.load_state_dict(state["model"])
        elif e.size > 1:
            e.broadcast_model(model)
        if self.aavg:
            # Learners step on their own gradients: no allreduce wrapper at all.
            self.model, self.opt = model, opt
        else:
            self.model, self.opt = e.prepare(model, opt, self.k, args.compression)
        if state is not None:
            self._restore(state, latest)
        log(f"{e.name} engine, {e.size} ranks x {self.k} accumulation = {self.virtual} virtual ranks, "
            f"global batch {self.global_batch}, lr {self.base_lr:.5g}, {self.steps_per_epoch} steps/epoch, "
            f"{args.epochs} epochs, device {self.device}", self.is_main)
        if e.size > 1:
            host = os.environ.get("SUMMIT_JOBS_VNODE") or socket.gethostname()
            log(f"ranks started by {e.launch.source}; rank 0 on {host}, rendezvous host {e.launch.addr}",
                self.is_main)
        self.run_config = self._run_config()
        if self.mg is not None or self.aavg or args.optimizer != "sgd" or args.compression != "none":
            log("methods: " + ", ".join(f"{k} {v}" for k, v in self.run_config.items()
                                        if k in ("schedule", "optimizer", "optimizer_sync", "avg_interval",
                                                 "compression_effective", "fusion_threshold_bytes")),
                self.is_main)
        if self.mg is not None:
            log(f"multigrid: {self.mg.total_steps} iterations instead of {self.total_steps} "
                f"({self.mg.speedup():.2f}x fewer)", self.is_main)
        if self.is_main:
            write_marker(self.run_dir, RUN_CONFIG, json.dumps(self.run_config, indent=1, sort_keys=True) + "\n")

    def _resume_checkpoint(self) -> Optional[Path]:
        """The checkpoint every rank resumes from: rank 0's newest, shared with the others.

        Why not each rank's own listing: ranks that resumed from different steps
        would train on as if nothing were wrong (see ``_test_checkpoints``).
        """
        mine: List[int] = []
        if self.is_main:
            newest = ckpt.latest(self.run_dir)
            mine = [ckpt.number(newest)] if newest is not None else []
        got = self.engine.broadcast_ints(mine, 1)
        return ckpt.step_path(self.run_dir, got[0]) if got else None

    def _run_config(self) -> Dict:
        """What the run record shows: the methods in force and the communication settings
        that took effect (Horovod reads its fusion buffer from the environment)."""
        a, e = self.args, self.engine
        comp = a.compression
        if self.aavg:
            comp = "none (aavg: no gradient allreduce)" if comp != "none" else "none"
        elif comp == "bf16" and e.name == "horovod":
            comp = "none (horovod has no bf16 compression)"
        env = os.environ.get("HOROVOD_FUSION_THRESHOLD")
        cfg: Dict = {
            "engine": e.name, "ranks": e.size, "accum_steps": self.k, "batch_per_gpu": a.batch_per_gpu,
            "global_batch": self.global_batch, "base_lr": self.base_lr, "schedule": a.schedule,
            "optimizer": a.optimizer, "optimizer_sync": a.optimizer_sync, "compression": a.compression,
            "compression_effective": comp, "amp": str(self.amp_dtype).replace("torch.", "") if self.amp_dtype
            else "off",
        }
        if e.name == "horovod":
            cfg["fusion_threshold_bytes"] = int(env) if env and env.isdigit() else HOROVOD_DEFAULT_FUSION
            cfg["fusion_threshold_source"] = "HOROVOD_FUSION_THRESHOLD" if env and env.isdigit() else "default"
        else:
            cfg["fusion_threshold_bytes"] = DDP_DEFAULT_BUCKET
            cfg["fusion_threshold_source"] = "ddp bucket_cap_mb default (HOROVOD_FUSION_THRESHOLD not used)"
        if a.optimizer == "lars":
            cfg["trust_coefficient"] = a.trust_coefficient
        if self.mg is not None:
            cfg.update(short_cycle=a.short_cycle, bn_clips=a.bn_clips, multigrid_iterations=self.mg.total_steps,
                       standard_iterations=self.total_steps,
                       multigrid=[{"stage": p.stage, "cycle": p.cycle, "frames": p.frames, "size": p.size,
                                   "batch_mult": p.batch_mult, "lr_mult": p.lr_mult, "iterations": p.iterations}
                                  for p in self.mg.phases])
        if self.aavg:
            cfg.update(avg_interval=a.avg_interval, aavg_eval_every=a.aavg_eval_every, aavg_b1=a.aavg_b1,
                       aavg_b2=a.aavg_b2, aavg_max_batch=a.aavg_max_batch)
        return cfg

    # -- per-epoch geometry (constant for the standard schedule) ---------------------------
    def _epoch_steps(self, epoch: int) -> int:
        if self.mg is not None:
            return self.mg.steps_in_epoch(epoch)
        if self.aavg and self.epoch_batch != self.args.batch_per_gpu:
            return self._steps_for_batch(self.epoch_batch)
        return self.steps_per_epoch

    def _steps_for_batch(self, batch: int) -> int:
        if self._node_counts is not None:
            per_node = self.sample_size
            return min(steps_per_epoch(int(c), per_node * self.k, batch) for c in self._node_counts)
        return steps_per_epoch(len(self.train_set), self.virtual, batch)

    def _lr(self) -> Tuple[float, float]:
        """(learning rate of this iteration, position on the standard iteration axis)."""
        if self.mg is not None:
            pos = self.mg.base_step(self.global_step)
            mult = self.mg.steps[min(self.global_step, self.mg.total_steps - 1)].lr_mult
            return lr_at(pos, self.base_lr, self.warmup_steps, self.total_steps) * mult, pos
        if self.aavg and self.epoch_batch != self.args.batch_per_gpu:
            # A grown batch means fewer steps per epoch: follow the curve by epochs done.
            pos = (self.epoch + self.step_in_epoch / self._epoch_steps(self.epoch)) * self.steps_per_epoch
            return lr_at(pos, self.base_lr, self.warmup_steps, self.total_steps), pos
        return lr_at(self.global_step, self.base_lr, self.warmup_steps, self.total_steps), self.global_step

    def average(self) -> None:
        """One AAVG round over the engine: parameters, optimiser moments, merged BN statistics."""
        e = self.engine
        average_learners(self.core, self.opt, lambda t: e.allreduce_sum(t).div_(e.size))
        self.avg_rounds += 1

    def _restore(self, state: Dict, path: Path) -> None:
        aavg = state.get("aavg")
        if self.aavg and aavg:
            self.epoch_batch, self.avg_rounds = aavg["epoch_batch"], aavg["avg_rounds"]
            if self.controller is not None and aavg.get("controller"):
                c = aavg["controller"]
                self.controller.batch, self.controller.best = c["batch"], c["best"]
                self.controller.history = [tuple(h) for h in c["history"]]
        self.opt.load_state_dict(state["optimizer"])
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.global_step, self.epoch, self.step_in_epoch = state["step"], state["epoch"], state["step_in_epoch"]
        self.best_top1 = state.get("best_top1", -1.0)
        rng = state.get("rng", {})
        if "torch" in rng:
            set_rng_states(rng)
        if state.get("steps_per_epoch") != self.steps_per_epoch:
            log(f"warning: {path.name} was written with {state.get('steps_per_epoch')} steps/epoch, now "
                f"{self.steps_per_epoch} (different ranks/batch): the epoch restarts at step 0", self.is_main)
            self.step_in_epoch = 0
        if self.step_in_epoch >= self._epoch_steps(self.epoch):
            self.epoch, self.step_in_epoch = self.epoch + 1, 0
            if self.controller is not None:
                self.epoch_batch = self.controller.batch
        log(f"resumed from {path} at step {self.global_step} (epoch {self.epoch}, step {self.step_in_epoch})",
            self.is_main)

    def _state(self) -> Dict:
        """Tensors and plain values only: what ``checkpoint.load`` (weights_only) accepts."""
        extra = {}
        if self.aavg:
            c = self.controller
            ctl = {"batch": c.batch, "best": c.best, "history": [list(h) for h in c.history]} if c else None
            extra["aavg"] = {"epoch_batch": self.epoch_batch, "avg_rounds": self.avg_rounds, "controller": ctl}
        return {**extra,
            "model": unwrap(self.model).state_dict(), "optimizer": self.opt.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "step": self.global_step, "epoch": self.epoch, "step_in_epoch": self.step_in_epoch,
            "steps_per_epoch": self.steps_per_epoch, "best_top1": self.best_top1,
            "rng": rng_states(), "args": plain_args(self.args),
        }

    def save(self, epoch_end: Optional[int] = None, best: bool = False) -> None:
        if self.is_main:
            ckpt.save(self.run_dir, self._state(), self.global_step, self.args.keep, epoch_end,
                      max(self.args.test_last, 1), best)

    # -- one optimiser step ------------------------------------------------------------------
    def _prep(self, x: torch.Tensor) -> torch.Tensor:
        x = normalize(x.to(self.device, non_blocking=True))
        x = x.reshape(-1, *x.shape[2:])
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last else x

    def _autocast(self):
        if self.amp_dtype is None:
            return nullcontext()
        return torch.autocast("cuda", dtype=self.amp_dtype)

    def train_step(self, batches) -> Tuple[List[float], float]:
        """k micro-batches, one allreduce, optional clipping, one update; returns sums and data wait."""
        e, k = self.engine, self.k
        lr, _ = self._lr()
        if self.mg is not None:
            self.core.set_num_segments(self.mg.steps[self.global_step].frames)
        for g in self.opt.param_groups:
            g["lr"] = lr
        self.opt.zero_grad()  # set_to_none (torch >= 2 default; Horovod takes no argument)
        wait = 0.0
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        c1 = c5 = n = 0
        for micro in range(k):
            t0 = time.perf_counter()
            x, y = next(batches)
            wait += time.perf_counter() - t0
            x, y = self._prep(x), y.to(self.device, non_blocking=True)
            with (e.micro_context(self.model, micro, k) if not self.aavg else nullcontext()):
                with self._autocast():
                    out = self.model(x)
                    loss = F.cross_entropy(out.float(), y)
                scaled = loss / k
                (self.scaler.scale(scaled) if self.scaler is not None else scaled).backward()
            loss_sum += loss.detach().double() * y.shape[0]
            a, b = topk_correct(out.detach(), y)
            c1, c5, n = c1 + a, c5 + b, n + y.shape[0]
        if not self.aavg:
            e.finish_grads(self.opt)
        if self.scaler is not None:
            self.scaler.unscale_(self.opt)
        if self.args.clip_grad > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.args.clip_grad)
        with (e.step_context(self.opt) if not self.aavg else nullcontext()):
            if self.scaler is not None:
                self.scaler.step(self.opt)
                self.scaler.update()
            else:
                self.opt.step()
        return [float(loss_sum), c1, c5, n, lr], wait

    # -- evaluation ---------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self, dataset: EvalClips, views: int, model: Optional[torch.nn.Module] = None) -> Dict[str, float]:
        """Average softmax over ``views`` clips per video; counts summed over ranks."""
        e = self.engine
        model = model if model is not None else self.model
        if self.mg is not None:
            unwrap(model).set_num_segments(self.args.num_segments)  # evaluation is at the full shape
        model.eval()
        idx = eval_indices(len(dataset), e.rank, e.size)
        loader = eval_loader(dataset, idx, views, max(self.args.batch_per_gpu, views), self.args.workers,
                             self.device.type == "cuda", self.args.prefetch)
        sums = torch.zeros(5, dtype=torch.float64, device=self.device)  # loss, c1, c5, n, wait
        t0 = time.perf_counter()
        it = iter(loader)
        while True:
            tw = time.perf_counter()
            try:
                x, y = next(it)
            except StopIteration:
                break
            sums[4] += time.perf_counter() - tw
            x, y = self._prep(x), y.to(self.device)
            with self._autocast():
                out = unwrap(model)(x).float()
            prob = out.softmax(1).view(-1, views, out.shape[1]).mean(1)
            y = y.view(-1, views)[:, 0]
            sums[0] += F.nll_loss(prob.clamp_min(1e-12).log(), y, reduction="sum").double()
            a, b = topk_correct(prob, y)
            sums[1] += a
            sums[2] += b
            sums[3] += y.shape[0]
        elapsed = time.perf_counter() - t0
        times = torch.tensor([elapsed], dtype=torch.float64, device=self.device)
        sums = e.allreduce_sum(sums)
        times = e.allreduce_sum(times)
        model.train()
        loss, c1, c5, n, wait = sums.tolist()
        n = max(n, 1)
        return {"loss": loss / n, "top1": c1 / n, "top5": c5 / n, "videos": int(n),
                "clips_per_s": n * views / max(times.item() / e.size, 1e-9),
                "data_wait_frac": wait / max(times.item(), 1e-9), "step_time": elapsed, "views": views}

    def _batch_rule(self, lr: float) -> None:
        """AAVG every m steps: validate the averaged model (the learners keep theirs), then the batch rule."""
        e = self.engine
        avg = copy.deepcopy(self.core)
        average_learners(avg, None, lambda t: e.allreduce_sum(t).div_(e.size))
        r = self.evaluate(self.val_set, 1, avg)
        before = self.controller.batch
        after = self.controller.observe(self.global_step, r["top1"])
        self.metrics.write("eval", step=self.global_step, epoch=self.epoch, lr=lr, aavg_batch=after,
                           aavg_best=self.controller.best, **r)
        log(f"aavg check at step {self.global_step}: top1 {100 * r['top1']:.2f}% (best "
            f"{100 * self.controller.best:.2f}%), batch {before}" + (f" -> {after} from the next epoch"
                                                                     if after != before else ""), self.is_main)

    def _partitioned(self, nodes: int, node: int) -> int:
        """Steps per epoch when each node holds only its share of the training shards.

        A node's ranks split that node's samples (the same sampler, over the node's
        ranks); every node must run the same number of steps or the allreduce
        hangs, so all take the smallest share's count. Exact accumulation still
        holds within the node: its physical ranks stand in for the node's virtual ranks.
        """
        e, a = self.engine, self.args
        if e.size % nodes:
            raise SystemExit(f"trainer: {e.size} ranks cannot be spread evenly over the {nodes} nodes the data was "
                             "staged for; stage with --nodes equal to the job's node count")
        per_node = e.size // nodes
        if e.rank // per_node != node:
            raise SystemExit(f"trainer: rank {e.rank} runs on node {e.rank // per_node} but this NVMe copy holds "
                             f"node {node}'s shards; the staging step and the training step disagree on placement")
        self.sample_rank, self.sample_size = e.rank % per_node, per_node
        counts = torch.zeros(nodes, dtype=torch.float64, device=self.device)
        if e.rank % per_node == 0:
            counts[node] = len(self.train_set)
        counts = e.allreduce_sum(counts).tolist()
        self._node_counts = [int(c) for c in counts]
        steps = min(steps_per_epoch(int(c), per_node * self.k, a.batch_per_gpu) for c in counts)
        log(f"partitioned data: node shares {[int(c) for c in counts]} clips, {steps} steps per epoch",
            self.is_main)
        return steps

    # -- the loop -------------------------------------------------------------------------
    def run(self) -> int:
        a, e = self.args, self.engine
        if (self.run_dir / COMPLETE).exists():
            log("COMPLETE exists: nothing to do", self.is_main)
            return 0
        acc = np.zeros(7)  # loss_sum, c1, c5, n, wait, step_time, clips/s (sum of per-rank)
        acc_steps = 0
        last_save = time.time()
        t_start, steps_start = time.time(), self.global_step
        while self.epoch < a.epochs:
            if self.controller is not None and self.step_in_epoch == 0:
                self.epoch_batch = self.controller.batch  # a grown batch takes effect at an epoch start
            epoch_steps = self._epoch_steps(self.epoch)
            if self.mg is not None:
                first, last = self.mg.epoch_range(self.epoch)
                shapes = [(st.frames, st.size, st.batch) for st in self.mg.steps[first:last]]
                loader = shape_loader(self.train_set, self.sample_rank, self.sample_size, self.k, a.seed,
                                      self.epoch, shapes, self.step_in_epoch, a.workers,
                                      self.device.type == "cuda", a.prefetch)
            else:
                loader = train_loader(self.train_set, self.sample_rank, self.sample_size, self.k,
                                      self.epoch_batch, a.seed, self.epoch,
                                      self.step_in_epoch, a.workers, self.device.type == "cuda", a.prefetch)
            batches = iter(loader)
            stopping = False
            while self.step_in_epoch < epoch_steps:
                t0 = time.perf_counter()
                step_shape = self.mg.steps[self.global_step] if self.mg is not None else None
                (loss_sum, c1, c5, n, lr), wait = self.train_step(batches)
                self.global_step += 1
                self.step_in_epoch += 1
                if self.aavg and (self.step_in_epoch == epoch_steps or
                                  should_average(self.step_in_epoch - 1, epoch_steps, a.avg_interval)):
                    self.average()  # always at an epoch end too: evaluations and checkpoints see one model
                dt = time.perf_counter() - t0
                stop_local = 1.0 if (self.stop or (a.max_steps and self.global_step >= a.max_steps)) else 0.0
                red = e.allreduce_sum(torch.tensor([stop_local, loss_sum, c1, c5, n, wait, dt,
                                                    n / max(dt, 1e-9)], dtype=torch.float64, device=self.device))
                red = red.tolist()
                stopping = red[0] > 0
                acc += red[1:]
                acc_steps += 1
                if self.is_main and (acc_steps >= a.log_every or stopping
                                     or self.step_in_epoch == epoch_steps):
                    extra = {}
                    if step_shape is not None:
                        extra = dict(frames=step_shape.frames, size=step_shape.size, batch=step_shape.batch,
                                     lr_mult=step_shape.lr_mult, phase=step_shape.phase,
                                     global_batch=step_shape.batch * self.virtual)
                    elif self.aavg:
                        extra = dict(batch=self.epoch_batch, global_batch=self.epoch_batch * self.virtual,
                                     avg_rounds=self.avg_rounds)
                    rec = self.metrics.write(
                        "train", step=self.global_step, epoch=self.epoch, loss=acc[0] / max(acc[3], 1),
                        top1=acc[1] / max(acc[3], 1), top5=acc[2] / max(acc[3], 1), lr=lr,
                        clips_per_s=acc[6] / acc_steps, data_wait_frac=acc[4] / max(acc[5], 1e-9),
                        step_time=acc[5] / e.size / acc_steps, ranks=e.size, accum_steps=self.k,
                        **{"global_batch": self.global_batch, **extra})
                    done = self.global_step - steps_start
                    eta = (time.time() - t_start) / done * (self.run_total_steps - self.global_step) \
                        if done else None
                    log(progress_line(rec, a.epochs, epoch_steps, self.run_total_steps, eta))
                    acc[:] = 0
                    acc_steps = 0
                if stopping:
                    break
                if self.controller is not None and self.controller.due(self.global_step) \
                        and self.val_set is not None:
                    self._batch_rule(lr)
                if self.is_main and ((a.ckpt_every_steps and self.global_step % a.ckpt_every_steps == 0) or
                                     (a.ckpt_every_minutes and time.time() - last_save > 60 * a.ckpt_every_minutes)):
                    self.save()
                    last_save = time.time()
            del batches, loader
            if self.step_in_epoch >= epoch_steps:
                best = False
                ev = (a.eval_every > 0 and ((self.epoch + 1) % a.eval_every == 0 or self.epoch + 1 == a.epochs))
                if ev and self.val_set is not None:
                    r = self.evaluate(self.val_set, 1)
                    best = r["top1"] > self.best_top1
                    self.best_top1 = max(self.best_top1, r["top1"])
                    rec = self.metrics.write("eval", step=self.global_step, epoch=self.epoch, lr=lr, **r)
                    log(f"eval epoch {self.epoch + 1}: top1 {100 * r['top1']:.2f}% top5 {100 * r['top5']:.2f}% "
                        f"({r['videos']} videos, 1 clip)", self.is_main)
                finished_epoch = self.epoch
                self.epoch, self.step_in_epoch = self.epoch + 1, 0
                self.save(epoch_end=finished_epoch, best=best)
                last_save = time.time()
            elif stopping:
                self.save()
            if stopping:
                why = f"signal {signal.Signals(int(self.stop.signum)).name}" if self.stop else "--max-steps"
                log(f"stopping at step {self.global_step} ({why}): checkpoint saved", self.is_main)
                e.barrier()
                return 0
        if a.test and self.val_set is not None:
            if not self.final_test():
                e.barrier()
                return 0
        e.barrier()
        if self.is_main:
            write_marker(self.run_dir, COMPLETE, f"step {self.global_step}\n")
            log(f"all {a.epochs} epochs done: wrote {self.run_dir / COMPLETE}")
        return 0

    def _test_checkpoints(self) -> List[Path]:
        """The epoch checkpoints every rank tests: rank 0 lists them, the others receive the list.

        Why rank 0 alone: it writes the checkpoints, and it reaches this point
        only after its last save has landed; another rank listing the folder on
        its own may see an older set (its last epoch not yet there) and then run
        a different number of evaluations, hanging in a collective. No rank
        writes or prunes checkpoints during the final test.
        """
        n = max(self.args.test_last, 1)
        mine = [ckpt.number(p) for p in ckpt.list_epoch_checkpoints(self.run_dir)[-n:]] if self.is_main else []
        return [ckpt.epoch_path(self.run_dir, ep) for ep in self.engine.broadcast_ints(mine, n)]

    def final_test(self) -> bool:
        """Multi-clip test of the last epochs' checkpoints; mean and std as the paper reports."""
        a, e = self.args, self.engine
        views = a.test_clips * a.test_crops
        test_set = EvalClips(a.data, self.spec, a.test_clips, "val")
        paths = self._test_checkpoints()
        log(f"final test on rank {e.rank} of {e.size}: {' '.join(p.name for p in paths)}")
        results = []
        for p in paths:
            if e.any_rank(bool(self.stop)):  # one rank's signal stops all, before the next collective
                log("signal during the final test: exiting; the next run repeats the test", self.is_main)
                return False
            state = ckpt.load(p)
            if not e.agree(state["step"]):
                raise SystemExit(f"trainer: the ranks read different contents from {p} (rank {e.rank} sees "
                                 f"step {state['step']}): is the run directory on a shared file system?")
            unwrap(self.model).load_state_dict(state["model"])
            r = self.evaluate(test_set, views)
            results.append(r)
            self.metrics.write("test", step=state["step"], epoch=state["epoch"] - 1, checkpoint=p.name, lr=0.0, **r)
            log(f"test {p.name}: top1 {100 * r['top1']:.2f}% top5 {100 * r['top5']:.2f}% "
                f"({a.test_clips} clips x {a.test_crops} crops)", self.is_main)
        if results:
            self._test_summary(results, paths, views)
        return True

    def _test_summary(self, results: List[Dict], paths: List[Path], views: int) -> None:
        """Mean and standard deviation over the tested checkpoints (the paper's report)."""
        a = self.args
        t1 = np.array([r["top1"] for r in results])
        t5 = np.array([r["top5"] for r in results])
        self.metrics.write("test", summary=True, step=self.global_step, epoch=a.epochs - 1,
                           loss=float(np.mean([r["loss"] for r in results])), top1=float(t1.mean()),
                           top5=float(t5.mean()), top1_std=float(t1.std()), top5_std=float(t5.std()),
                           checkpoints=[p.name for p in paths], lr=0.0,
                           clips_per_s=float(np.mean([r["clips_per_s"] for r in results])),
                           data_wait_frac=float(np.mean([r["data_wait_frac"] for r in results])),
                           step_time=float(sum(r["step_time"] for r in results)), views=views)
        log(f"final test over {len(results)} checkpoints: top1 {100 * t1.mean():.2f} +- {100 * t1.std():.2f}%",
            self.is_main)

    def close(self) -> None:
        self.metrics.close()
        self.engine.shutdown()


def main(args: argparse.Namespace) -> int:
    """Train; a file-system failure (full disk, permissions, a missing file) ends with one line naming the path."""
    try:
        return _train(args)
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        raise SystemExit(f"trainer: {where}{exc.strerror or error_line(exc)}") from None
    except (ShardError, SampleError) as exc:  # bad data: the message names the shard (and the sample)
        line = error_line(exc)
        raise SystemExit(line if line.startswith("trainer: ") else f"trainer: {line}") from None


#: How a collective reports that another rank is gone (gloo, NCCL, Horovod), rather than a fault of its own.
LOST_PEER = re.compile(r"Connection (closed|reset) by peer|Broken pipe|gloo|nccl|horovod", re.I)


def _train(args: argparse.Namespace) -> int:
    trainer = Trainer(args)
    try:
        return trainer.run()
    except RuntimeError as exc:
        e = trainer.engine
        if e.size > 1 and LOST_PEER.search(f"{type(exc).__name__} {exc}"):
            # The rank that ended first printed the cause; a traceback from every other rank would bury it.
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise SystemExit(f"trainer: rank {e.rank} of {e.size} stops: another rank ended while they were "
                             f"exchanging data ({first}); the first rank to end says why") from None
        raise
    finally:
        # The work is saved (checkpoint or COMPLETE): a late warning signal must not turn a clean exit
        # into a kill. Python resets handlers to the default action while the interpreter shuts down,
        # which would let USR2 end the process with status 140; an ignored signal stays ignored.
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        trainer.close()
