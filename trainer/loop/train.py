"""The training loop: what every rank runs.

Chain contract (the job script relies on it): resume from the newest
checkpoint in the run directory; on SIGUSR2 (LSF's warning before the
walltime) or SIGTERM, finish the current optimiser step, save, exit 0; write
``<run-dir>/COMPLETE`` when all epochs and the final test are done.

Why a stop flag travels in the metrics allreduce: the signal reaches ranks at
slightly different moments; summing a 0/1 flag in the allreduce every rank
already does at each metrics record (every --log-every steps, each epoch's
end, --max-steps) makes all ranks stop after the same step, so the checkpoint
is consistent and no rank waits in a collective forever. Between records a
step reads nothing back from the device (bench/host_syncs.py).
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import re
import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import torch

from trainer.loop import checkpoint as ckpt
from trainer.dist import compat
from trainer.models import interop
from trainer import preflight, rundir
from trainer import scores
from trainer.loop import setup
from trainer.loop import startup
from trainer.loop import tboard
from trainer.methods.aavg import average_learners
from trainer.dist.bnstats import merge_running_stats, pooled_row, rank_rows, set_running_stats
from trainer.loop.ckptwriter import CheckpointWriter
from trainer.data import devicedecode
from trainer.data.datasets import EvalClips, SampleError, error_line
from trainer.dist.engines import Engine, make_engine, unwrap
from trainer.loop.metrics import MetricsWriter, log, progress_line
from trainer.rundir import COMPLETE, RUN_CONFIG
from trainer.methods.schedules import AAVGSchedule, Schedule, lr_at, make_schedule
from trainer.shards import ShardError
from trainer.loop.signals import STOP_SIGNALS
from trainer.loop.steps import EvalLoader, StepContext, evaluate, train_step
from trainer.loop.testonly import test_only
from trainer.loop.trainstate import TrainState, plain_args, resume_mismatch, rng_states, set_rng_states

__all__ = ["Trainer", "main", "lr_at", "rng_states", "set_rng_states", "plain_args", "COMPLETE", "RUN_CONFIG"]


class StopFlag:
    """Set by SIGUSR2, SIGTERM or SIGINT (``signals.STOP_SIGNALS``), or by the job script's warning file in
    the run directory (``rundir.warned``: the warning reaches a rank even where a launcher between the
    script and the rank ignores the signal, torchrun's agent under trainer.agent); read once per optimiser
    step, the file at most once a second."""

    #: Seconds between two looks for the warning file.
    FILE_EVERY_S = 1.0

    def __init__(self, run_dir: Optional[Path] = None):
        self.signum: Optional[int] = None
        self.run_dir = run_dir
        self.job = rundir.job_id()
        self.by_file = False
        self._next_look = 0.0

    def install(self) -> None:
        from trainer.loop.signals import EARLY
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._handler)
        if EARLY:  # a stop request that came while the rank was starting
            self.signum = EARLY[0]

    def _handler(self, signum, frame) -> None:
        self.signum = signum

    def _file(self) -> bool:
        if self.run_dir is None or not self.job:
            return False
        now = time.monotonic()
        if now < self._next_look:
            return False
        self._next_look = now + self.FILE_EVERY_S
        if rundir.warned(self.run_dir, self.job):
            self.signum, self.by_file = int(signal.SIGUSR2), True
            return True
        return False

    def __bool__(self) -> bool:
        return self.signum is not None or self._file()

    def reason(self) -> str:
        """What the stop line and the ``stopped`` event name: the signal, or else the step limit."""
        if self.signum is None:
            return "--max-steps"
        name = signal.Signals(int(self.signum)).name
        return f"signal {name} (the job's warning file)" if self.by_file else f"signal {name}"


def write_marker(run_dir: Path, name: str, text: str) -> None:
    """``run_dir/name`` holds ``text`` whole or not at all (temp name, then rename; no temp left on failure)."""
    tmp = run_dir / f".{name}.tmp{os.getpid()}"
    try:
        tmp.write_text(text)
        os.replace(tmp, run_dir / name)
    finally:
        tmp.unlink(missing_ok=True)


@dataclass
class Reduced:
    """One metrics record's numbers after the allreduce: the flags every rank now agrees on, and the
    record of the steps since the last one."""
    stop: bool
    save: bool
    record: Dict


class _Progress:
    """Per-rank sums between two train records, and the run's pace for the ETA.

    Why the sums stay on the device: reading one back waits for the GPU to
    drain its queue; the loop reads them once per record (``reduce``), in the
    same allreduce that carries the stop and save flags, so between records a
    step does no host sync of its own.
    """

    def __init__(self, step: int, device: torch.device):
        self.device = device
        self.sums = torch.zeros(4, dtype=torch.float64, device=device)  # loss_sum, c1, c5, n
        self.wait = self.time = 0.0
        self.steps = 0
        self.t_start, self.step_start = time.time(), step

    def add(self, sums: torch.Tensor, wait: float, seconds: float) -> None:
        self.sums += sums
        self.wait += wait
        self.time += seconds
        self.steps += 1

    def reduce(self, engine: Engine, stop: bool, save: bool) -> Reduced:
        """The one host sync between records: flags, sums, times and this rank's clips/s, summed over ranks."""
        host = torch.tensor([float(stop), float(save), self.wait, self.time], dtype=torch.float64,
                            device=self.device)
        rate = (self.sums[3] / max(self.time, 1e-9)).view(1)
        red = engine.allreduce_sum(torch.cat([host, self.sums, rate])).tolist()
        stop_n, save_n, wait, seconds, loss, c1, c5, n, rate_sum = red
        record = dict(loss=loss / max(n, 1), top1=c1 / max(n, 1), top5=c5 / max(n, 1), clips_per_s=rate_sum,
                      data_wait_frac=wait / max(seconds, 1e-9),
                      step_time=seconds / engine.size / max(self.steps, 1))
        self.sums.zero_()
        self.wait = self.time = 0.0
        self.steps = 0
        return Reduced(stop_n > 0, save_n > 0, record)

    def eta(self, step: int, total: int) -> Optional[float]:
        done = step - self.step_start
        return (time.time() - self.t_start) / done * (total - step) if done else None


class Trainer:
    """A run on this rank: set up in small steps (engine, data, schedule, model and optimiser, resume),
    then ``run`` the loop; the step, evaluation, schedule and resumable state live in their own modules."""

    def __init__(self, args: argparse.Namespace, engine: Optional[Engine] = None):
        startup.imports_done()
        self.args = args
        self.run_dir = Path(args.run_dir)
        self.stop = StopFlag(self.run_dir)
        self.stop.install()
        if args.threads:
            torch.set_num_threads(args.threads)
        preflight.require_data(args)
        self._setup_engine(engine)
        self._setup_data()
        self._setup_model()
        self._log_setup()

    # -- set-up ------------------------------------------------------------------------------
    def _setup_engine(self, engine: Optional[Engine]) -> None:
        """The engine, the run directory (a killed run's half-written files go first) and the metrics file."""
        self.engine = engine or make_engine(self.args.engine, rendezvous_dir=self.run_dir)
        self.is_main = self.engine.rank == 0
        self.device = self.engine.device
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if self.is_main:  # before anything is written
            for p in ckpt.clean_leftovers(self.run_dir, (RUN_CONFIG, COMPLETE)):
                log(f"removed {p}, left by an interrupted run")
        self.metrics = MetricsWriter(self.run_dir, self.is_main)
        self.writer = CheckpointWriter() if self.is_main else None  # rank 0 writes, in the background
        self._bn_unmerged = False  # the last record left each rank its own BatchNorm statistics
        self.amp_dtype, self.channels_last = setup.numerics(self.args, self.device)
        setup.check_compiler(self.args, self.device)
        setup.backends(self.device)

    def _setup_data(self) -> None:
        """Clips, epoch geometry and the schedule over them."""
        a, e = self.args, self.engine
        self.spec = setup.clip_spec(a)
        data = setup.load_data(a, e, self.spec, self.device)
        self.train_data, self.val_set, self.num_classes = data.train, data.val_set, data.num_classes
        self.test_set = data.test_set
        evals = {name: d for name, d in (("val", data.val_set), ("test", data.test_set)) if d is not None}
        self.pipeline = devicedecode.pipeline(data.train.train_set, evals, a.workers, self.device.type == "cuda",
                                              a.prefetch, a.persistent_workers == "on", a.decode, self.device)
        self.k = a.accum_steps
        self.virtual = e.size * self.k
        self.global_batch = data.global_batch
        self.schedule: Schedule = make_schedule(a, data.train, data.steps_per_epoch,
                                                setup.base_lr(a, data.global_batch), self.virtual)

    def _setup_model(self) -> None:
        """Model and optimiser, the resume (or rank 0's weights broadcast), then the engine's wrapper."""
        a, e = self.args, self.engine
        model, opt = setup.model_and_optimizer(a, self.num_classes, self.schedule, self.device, self.channels_last,
                                               self.schedule.base_lr, self.is_main)
        self.core = model
        self.scaler = compat.grad_scaler() if self.amp_dtype == torch.float16 else None
        self.state = TrainState()
        self.resumed_from: Optional[Path] = None
        latest = self._resume_checkpoint()
        saved = None
        if latest is not None:
            saved = ckpt.load(latest)
            why = resume_mismatch(saved.get("args"), a)
            if why:
                raise SystemExit(f"trainer: {latest} {why}")
            model.load_state_dict(saved["model"])
            self._own_bn_stats(model, saved.get("bn_ranks"))
        elif e.size > 1:
            e.broadcast_model(model)
        if self.aavg:  # learners step on their own gradients: no allreduce wrapper at all
            self.model, self.opt = model, opt
        else:
            self.model, self.opt = e.prepare(model, opt, self.k, a.compression)
        self.model = setup.compiled(self.model, a, self.device)
        self.step_ctx = StepContext(e, self.model, self.opt, self.scaler, self.device, self.amp_dtype,
                                    self.channels_last, self.k, a.clip_grad, not self.aavg)
        if saved is not None:
            self._resume(saved, latest)

    def _log_setup(self) -> None:
        """The start-up lines and the run record of what took effect."""
        a, e, s = self.args, self.engine, self.schedule
        log(f"{e.name} engine, {e.size} ranks x {self.k} accumulation = {self.virtual} virtual ranks, "
            f"global batch {self.global_batch}, lr {s.base_lr:.5g}, {s.steps_per_epoch} steps/epoch, "
            f"{a.epochs} epochs, device {self.device}", self.is_main)
        if e.size > 1:
            host = os.environ.get("SUMMIT_JOBS_VNODE") or socket.gethostname()
            log(f"ranks started by {e.launch.source}; rank 0 on {host}, rendezvous host {e.launch.addr}",
                self.is_main)
        self.run_config = setup.run_config(a, e, s, self.global_batch, self.amp_dtype)
        if a.schedule == "multigrid" or self.aavg or a.optimizer != "sgd" or a.compression != "none":
            log("methods: " + ", ".join(f"{k} {v}" for k, v in self.run_config.items()
                                        if k in ("schedule", "optimizer", "optimizer_sync", "avg_interval",
                                                 "compression_effective", "fusion_threshold_bytes")),
                self.is_main)
        if s.describe():
            log(s.describe(), self.is_main)
        if a.compile != "off" and a.schedule == "multigrid":
            shapes = {(p["frames"], p["size"]) for p in s.config()["multigrid"]}
            log(f"--compile {a.compile} with multigrid: the model is compiled again for each of its "
                f"{len(shapes)} clip shapes{' (and each short-cycle crop)' if a.short_cycle else ''}, each "
                "compile taking about as long as the first; --compile off starts at once", self.is_main)
        if self.is_main:
            write_marker(self.run_dir, RUN_CONFIG, json.dumps(self.run_config, indent=1, sort_keys=True) + "\n")

    @property
    def aavg(self) -> bool:
        return isinstance(self.schedule, AAVGSchedule)

    @property
    def global_step(self) -> int:
        return self.state.step

    @property
    def avg_rounds(self) -> int:
        return self.schedule.avg_rounds

    @avg_rounds.setter
    def avg_rounds(self, value: int) -> None:
        self.schedule.avg_rounds = value

    # -- resume and save ---------------------------------------------------------------------
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

    def _resume(self, saved: Dict, path: Path) -> None:
        warning = self.state.restore(saved, self.opt, self.scaler, self.schedule)
        if warning:
            log(f"warning: {path.name} {warning}", self.is_main)
        st = self.state
        log(f"resumed from {path} at step {st.step} (epoch {st.epoch}, step {st.step_in_epoch})", self.is_main)
        self.resumed_from = path

    def _own_bn_stats(self, model: torch.nn.Module, rows: Optional[torch.Tensor]) -> None:
        """A checkpoint with every rank's unmerged statistics (a --max-steps stop between records) gives each
        rank its own row back; on another number of ranks every rank takes them merged."""
        if rows is not None:
            e = self.engine
            set_running_stats(model, rows[e.rank] if rows.shape[0] == e.size else pooled_row(model, rows))

    def merge_bn(self) -> None:
        """Every rank takes the BatchNorm statistics of all ranks' batches (``trainer.dist.bnstats``; a collective).

        Done at every metrics record, which is where the ranks may stop, save
        or end an epoch: there every rank holds the same statistics, so rank
        0's checkpoint is the whole BatchNorm state (a resumed run continues
        exactly), and validation sees what is saved.
        """
        e = self.engine
        if e.size > 1:
            merge_running_stats(self.core, lambda t: e.allreduce_sum(t).div_(e.size))

    def save(self, epoch_end: Optional[int] = None, best: bool = False) -> None:
        """Rank 0 hands the state to the writer. Every save comes right after a metrics record, whose
        BatchNorm merge gave all ranks the statistics rank 0 writes (``merge_bn``); after a record only
        --max-steps asked for, which merges nothing, every rank's own statistics go in as ``bn_ranks``."""
        e = self.engine
        rows = rank_rows(self.core, e.allreduce_sum, e.rank, e.size) if self._bn_unmerged and e.size > 1 else None
        if self.is_main:
            state = self.state.checkpoint(self.model, self.opt, self.scaler, self.schedule, self.args)
            if rows is not None:
                state["bn_ranks"] = rows.cpu()
            self.writer.submit(self.run_dir, state, self.state.step, self.args.keep, epoch_end,
                               max(self.args.test_last, 1), best, then=self._exports(epoch_end, best))

    def _exports(self, epoch_end: Optional[int], best: bool):
        """What the writer's thread exports after the checkpoint: weights-only copies of the last epoch's
        and the best model (--export-weights, --export-layout), from the checkpoint's own copy; None
        when there is nothing to export."""
        a, st = self.args, self.state
        names = (["last"] if epoch_end is not None else []) + (["best"] if best else [])
        if a.export_weights == "none" or not names:
            return None
        info = dict(interop.layout_info(self.core), epoch=st.epoch,
                    best_prec1=100 * st.best_top1 if st.best_top1 >= 0 else None)

        def export(state: Dict) -> None:
            try:
                for name in names:
                    interop.export_weights(self.run_dir, state["model"], name, a.export_weights, a.export_layout,
                                           **info)
            except interop.WeightsError as exc:
                raise SystemExit(f"trainer: --export-weights {a.export_weights}: {exc}") from None
        return export

    def saved(self) -> None:
        """Rank 0: block until the checkpoint in flight is on disk (its failure is raised here)."""
        if self.writer is not None:
            self.writer.wait()

    # -- methods -----------------------------------------------------------------------------
    def average(self) -> None:
        """One AAVG round over the engine: parameters, optimiser moments, merged BN statistics."""
        e = self.engine
        average_learners(self.core, self.opt, lambda t: e.allreduce_sum(t).div_(e.size))
        self.avg_rounds += 1

    def evaluate(self, dataset: EvalClips, model: Optional[torch.nn.Module] = None, per_video: bool = False):
        """``steps.evaluate`` at the full shape, on the training model unless another is given (``per_video``:
        also every video's scores, see ``steps.evaluate``)."""
        model = model if model is not None else self.model
        self.schedule.before_eval(unwrap(model))
        a = self.args
        how = EvalLoader(a.batch_per_gpu, a.workers, a.prefetch, a.test_average, self.pipeline)
        if per_video:
            return evaluate(self.step_ctx, how, dataset, model, per_video=True)
        return evaluate(self.step_ctx, how, dataset, model)

    def _batch_rule(self, lr: float) -> None:
        """AAVG every m steps: validate the averaged model (the learners keep theirs), then the batch rule."""
        e, st = self.engine, self.state
        avg = copy.deepcopy(self.core)
        average_learners(avg, None, lambda t: e.allreduce_sum(t).div_(e.size))
        r = self.evaluate(self.val_set, avg)
        self.metrics.write("eval", step=st.step, epoch=st.epoch, lr=lr, **self._observe(r), **r)

    def _observe(self, r: Dict) -> Dict:
        """AAVG's batch rule on the validation ``r`` of the averaged model; the eval record's fields of it."""
        st, ctl = self.state, self.schedule.controller
        before = ctl.batch
        after = ctl.observe(st.step, r["top1"])
        log(f"aavg check at step {st.step}: top1 {100 * r['top1']:.2f}% (best "
            f"{100 * ctl.best:.2f}%), batch {before}" + (f" -> {after} from the next epoch"
                                                         if after != before else ""), self.is_main)
        return dict(aavg_batch=after, aavg_best=ctl.best)

    # -- the loop -------------------------------------------------------------------------
    def run(self) -> int:
        self._announce()
        if (self.run_dir / COMPLETE).exists():
            log("COMPLETE exists: nothing to do", self.is_main)
            if self.is_main:
                rundir.event(self.run_dir, "already_complete", by="trainer")
            return 0
        if self.is_main and self.resumed_from is not None:  # recorded only when the run goes on from it
            rundir.event(self.run_dir, "resumed", step=self.state.step, checkpoint=self.resumed_from.name)
        if self.is_main and self.args.tensorboard:  # points after the resume step replace the killed launch's
            self.metrics.attach(tboard.TensorBoardSink(self.run_dir, plain_args(self.args),
                                                       self.state.step + 1 if self.resumed_from else None))
        progress = _Progress(self.state.step, self.device)
        self._last_save = time.time()
        while self.state.epoch < self.args.epochs:
            if self.args.max_steps and self.state.step >= self.args.max_steps:
                return self._stopped()  # resumed at --max-steps: no step beyond it
            if self._epoch(progress):
                return self._stopped()
        return self._finish()

    def _announce(self) -> None:
        """Rank 0: the ``launch`` event, what this launch runs and from which step (the report counts
        launches and marks chain boundaries with it)."""
        if not self.is_main:
            return
        a, e = self.args, self.engine
        extra = {"resumed_from": self.resumed_from.name} if self.resumed_from is not None else {}
        if (self.run_dir / COMPLETE).exists():  # this launch will find nothing to do
            extra["already_complete"] = True
        rundir.launch(self.run_dir, plain_args(a), mode="train", seed=a.seed, ranks=e.size, engine=e.name,
                      torch=torch.__version__, step=self.state.step,
                      total_steps=self.schedule.run_total_steps, **extra)

    def _epoch(self, progress: _Progress) -> bool:
        """The rest of the current epoch; True when the ranks agreed to stop (a checkpoint is saved)."""
        st, s = self.state, self.schedule
        if st.step_in_epoch == 0:
            s.start_epoch()
        epoch_steps = s.epoch_steps(st.epoch)
        # ahead: the workers go on into the next epoch's batches while this epoch's last are trained on
        batches = self.pipeline.train_batches(s.sampler(st.epoch, st.step_in_epoch), ahead=s.sampler_ahead)
        stopping, lr = False, 0.0
        while st.step_in_epoch < epoch_steps and not stopping:
            stopping, lr = self._step(batches, epoch_steps, progress)
        del batches
        if st.step_in_epoch >= epoch_steps:
            self._end_epoch(lr)
        elif stopping:
            self.save()
        return stopping

    def _step(self, batches, epoch_steps: int, progress: _Progress):
        """One optimiser step and what follows it on every rank; returns (stopping, lr).

        The ranks agree on stopping and on a timed save at each metrics record
        (every --log-every steps, at the end of an epoch, at --max-steps): a stop
        signal takes effect there, with a checkpoint that all ranks reach at the
        same step.
        """
        a, st, s = self.args, self.state, self.schedule
        t0 = time.perf_counter()
        step = st.step
        s.before_step(self.core, step)
        lr = s.lr(st.position)
        sums, wait = train_step(self.step_ctx, batches, lr)
        st.advance()
        if self.aavg and s.due_average(st.step_in_epoch, epoch_steps):
            self.average()
        progress.add(sums, wait, time.perf_counter() - t0)
        limit = bool(a.max_steps and st.step >= a.max_steps)
        step_save = bool(a.ckpt_every_steps and st.step % a.ckpt_every_steps == 0)
        stopping = timed_save = False
        # the record grid counts from the epoch's start, not from the last record: a run resumed from a
        # --max-steps stop between records keeps the grid (and BatchNorm merges) of the run it was cut from
        grid = bool(step_save or st.step_in_epoch % a.log_every == 0 or st.step_in_epoch == epoch_steps)
        if limit or grid:
            red = progress.reduce(self.engine, bool(self.stop) or limit, self._save_time())
            stopping, timed_save = red.stop, red.save
            if grid:  # a record that only --max-steps asks for merges nothing: the run it is cut from has none
                self.merge_bn()
            self._bn_unmerged = not grid
            if self.is_main:
                self._log_train(red.record, progress, step, lr, epoch_steps)
        if self.aavg and s.check_due(st.step) and self.val_set is not None:
            self._batch_rule(lr)  # before a stop too: the resumed run starts after this step's check
        if stopping:
            return True, lr
        if timed_save or step_save:
            self.save()
            self._last_save = time.time()
        return False, lr

    def _save_time(self) -> bool:
        """Rank 0: whether --ckpt-every-minutes has passed since the last save (the ranks agree through
        the record's allreduce)."""
        a = self.args
        return bool(self.is_main and a.ckpt_every_minutes and time.time() - self._last_save > 60 * a.ckpt_every_minutes)

    def _log_train(self, record: Dict, progress: _Progress, step: int, lr: float, epoch_steps: int) -> None:
        """Rank 0: the train record and progress line over the steps since the last one."""
        a, e, st, s = self.args, self.engine, self.state, self.schedule
        rec = self.metrics.write("train", step=st.step, epoch=st.epoch, lr=lr, **record,
                                 ranks=e.size, accum_steps=self.k,
                                 **{"global_batch": self.global_batch, **s.metrics_extra(step)})
        log(progress_line(rec, a.epochs, epoch_steps, s.run_total_steps, progress.eta(st.step, s.run_total_steps)))

    def _end_epoch(self, lr: float) -> None:
        """Evaluate when due, move to the next epoch, save the epoch's checkpoint (and best.pt).

        AAVG's batch rule when it checks once per epoch (--aavg-eval-every -1) takes the same validation: the
        epoch's last step ended with an averaging round, so every learner holds the averaged model, and the
        check lands in the epoch's checkpoint (a resumed run neither repeats nor skips it).
        """
        a, st = self.args, self.state
        best = False
        due = a.eval_every > 0 and ((st.epoch + 1) % a.eval_every == 0 or st.epoch + 1 == a.epochs)
        check = self.aavg and self.schedule.check_at_epoch_end()
        # the epoch's last step was a metrics record: the ranks' BatchNorm statistics are merged already
        if (due or check) and self.val_set is not None:
            r = self.evaluate(self.val_set)
            if due:
                best = r["top1"] > st.best_top1
                st.best_top1 = max(st.best_top1, r["top1"])
            self.metrics.write("eval", step=st.step, epoch=st.epoch, lr=lr, **(self._observe(r) if check else {}),
                               **r)
            log(f"eval epoch {st.epoch + 1}: top1 {100 * r['top1']:.2f}% top5 {100 * r['top5']:.2f}% "
                f"({r['videos']} videos, {a.val_clips} clip{'s' if a.val_clips != 1 else ''})", self.is_main)
        finished = st.epoch
        st.next_epoch()
        self.save(epoch_end=finished, best=best)
        self._last_save = time.time()

    def _weights_agree(self) -> bool:
        """Whether every rank holds the same weights (collective: every rank calls it at the same point).

        One float64 fingerprint per rank (each tensor's sum, weighted by its position), compared
        exactly: data-parallel ranks must hold bit-identical weights after every synchronous step, and
        a rank that drifted (a lost gradient, a different resume) shows here, in the stop and complete
        events, instead of in the accuracy weeks later. Under AAVG the learners differ between averages.
        """
        with torch.no_grad():
            sums = [p.detach().double().sum() for p in unwrap(self.model).parameters()]
            fp = torch.stack(sums) @ torch.arange(1, len(sums) + 1, dtype=torch.float64, device=sums[0].device)
        e = self.engine
        t = torch.zeros(e.size, dtype=torch.float64, device=self.device)
        t[e.rank] = fp.to(self.device)
        seen = e.allreduce_sum(t)
        return bool((seen == seen[0]).all())

    def _stopped(self) -> int:
        """After the stop step's checkpoint: say why, record it, and leave together."""
        why, step = self.stop.reason(), self.state.step
        self.saved()
        agree = self._weights_agree()
        log(f"stopping at step {step} ({why}): checkpoint saved", self.is_main)
        if self.is_main:
            rundir.event(self.run_dir, "stopped", step=step, reason=why, weights_agree=agree)
        self.engine.barrier()
        return 0

    def _finish(self) -> int:
        """All epochs done: the final test, then COMPLETE (unless a signal cut the test short)."""
        a, e = self.args, self.engine
        self.saved()  # the final test reads the epoch checkpoints; COMPLETE comes after the last one is on disk
        if self.test_set is not None:
            if not self.final_test():
                e.barrier()
                return 0
        agree = self._weights_agree()
        e.barrier()
        if self.is_main:
            write_marker(self.run_dir, COMPLETE, f"step {self.state.step}\n")
            rundir.event(self.run_dir, "complete", step=self.state.step, epochs=a.epochs, weights_agree=agree)
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
        test_set = self.test_set
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
            r, table = self.evaluate(test_set, per_video=True)
            results.append(r)
            saved = self._save_scores(p, state, table)
            self.metrics.write("test", step=state["step"], epoch=state["epoch"] - 1, checkpoint=p.name, lr=0.0,
                               clips=a.test_clips, crops=a.test_crops, scores=saved, **r)
            log(f"test {p.name}: top1 {100 * r['top1']:.2f}% top5 {100 * r['top5']:.2f}% "
                f"({a.test_clips} clips x {a.test_crops} crops of {a.test_size}, {a.test_average} averaged)",
                self.is_main)
        if results:
            self._test_summary(results, paths, test_set.views)
        return True

    def _save_scores(self, path: Path, state: Dict, table: torch.Tensor) -> str:
        """Rank 0 writes the test's per-video scores of checkpoint ``path`` (``trainer.scores``); every rank
        returns the file's name relative to the run directory, for the ``test`` record."""
        if not self.is_main:
            return scores.scores_name(path.name)
        meta = scores.test_meta(self.args, self.test_set, path.name, state["step"], state["epoch"] - 1,
                                table.shape[1], test_only=False)
        return scores.save_test(self.run_dir, self.test_set, table, meta)

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
                           step_time=float(sum(r["step_time"] for r in results)), views=views,
                           clips=a.test_clips, crops=a.test_crops)
        log(f"final test over {len(results)} checkpoints: top1 {100 * t1.mean():.2f} +- {100 * t1.std():.2f}%",
            self.is_main)

    def close(self) -> None:
        """The last checkpoint on disk (a failed write is raised here), then workers, metrics and engine."""
        try:
            if self.writer is not None:
                self.writer.close()
        finally:
            self.pipeline.close()
            self.metrics.close()
            self.engine.shutdown()



def main(args: argparse.Namespace) -> int:
    """Train (or only test: --test-only); a file-system failure (full disk, permissions, a missing file) ends
    with one line naming the path."""
    try:
        if args.tensorboard:
            tboard.require()
        return test_only(args) if args.test_only else _train(args)
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        raise SystemExit(f"trainer: {where}{exc.strerror or error_line(exc)}") from None
    except (ShardError, SampleError) as exc:  # bad data: the message names the shard (and the sample)
        line = error_line(exc)
        raise SystemExit(line if line.startswith("trainer: ") else f"trainer: {line}") from None


#: How a collective reports that another rank is gone (gloo, NCCL, Horovod), rather than a fault of its own.
LOST_PEER = re.compile(r"Connection (closed|reset) by peer|Broken pipe|gloo|nccl|horovod", re.I)


def _compile_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is torch.compile's own failure (dynamo or its backend), not the model's."""
    from torch._dynamo import exc as dynamo_exc
    return isinstance(exc, (dynamo_exc.BackendCompilerFailed, dynamo_exc.InternalTorchDynamoError))


def _train(args: argparse.Namespace) -> int:
    trainer = Trainer(args)
    try:
        rc = trainer.run()
        trainer.engine.barrier()   # no rank tears down while another still exchanges data with it
        return rc
    except RuntimeError as exc:
        e = trainer.engine
        if args.compile != "off" and _compile_failure(exc):
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise SystemExit(setup.compile_refusal(args, first)) from None
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
        startup.hold_until_exit(trainer)  # its process group is never freed (startup.hold_until_exit says why)
