"""The chain contract for a Lightning ``Trainer``: one callback. Imports neither torch nor Lightning itself.

A job of ``summit-jobs submit --command ... --until-complete`` is one link of a chain (docs/user-command.md):
the scheduler warns it (SIGUSR2, or the job script's warning file) before its run limit, the ranks save and
exit 0, the next link resumes from the newest checkpoint, and COMPLETE ends the chain. ``ChainCallback`` keeps
that contract for ``Trainer.fit``::

    from trainer.loop.lightning_chain import ChainCallback

    chain = ChainCallback()                    # catches the warning from here on
    trainer = L.Trainer(strategy="ddp", num_nodes=2, devices=2, max_steps=400, callbacks=[chain])
    trainer.fit(model, loader, ckpt_path=chain.resume_path())    # the newest checkpoint, or None

Why a callback of its own rather than ``Chain`` wrapped by hand:

- Lightning's ``Trainer.save_checkpoint`` is collective: every rank must call it (rank 0 writes, then all
  meet in a barrier). ``Chain.save`` alone runs the write on rank 0 only, and a save wrapped in it hangs.
  Here every rank saves at the same step, to the contract's name (``checkpoints/ckpt-<global step>.pt``,
  under a temporary name, renamed by rank 0 once the save's barrier is passed: Lightning's own save writes
  in place).
- The stop is decided by every rank together after an optimizer step (``Chain.should_stop`` with the
  strategy's ``reduce_boolean_decision``), never inside a gradient accumulation: a rank that stopped alone
  would leave the others waiting in their next all-reduce.
- The checkpoint is saved in ``on_train_batch_end``, where Lightning's own step checkpoints are saved, so
  ``trainer.fit(ckpt_path=...)`` resumes mid-epoch: the model, optimizers, LR schedulers, precision
  scaler, callbacks' state and the loops' counters (global step, epoch, batch in the epoch). The data
  resume where they stopped only when the train loader has ``state_dict``/``load_state_dict`` (torchdata's
  ``StatefulDataLoader``, or a few lines: docs/examples/lightning_train.py); with a plain ``DataLoader`` the
  resumed epoch starts its data over (Lightning warns) and ends after the batches it had left. Random
  states are not in the checkpoint: dropout or random augmentation draw other numbers after a resume.
- Lightning's SLURM auto-requeue is switched off (``auto_requeue = False`` on its ``SLURMEnvironment``,
  in ``setup``, before the Trainer installs its signal handlers). The chain queues the next link itself,
  as a new job after this one, only when this link saved and exited 0. Lightning's requeue (on SIGUSR1:
  an ``hpc_ckpt_N.ckpt`` of its own, then ``scontrol requeue`` of the same job) would run the same run
  twice from two checkpoint series, and fail anyway on the ``--no-requeue`` jobs summit-jobs submits.
  One mechanism on LSF and Slurm alike.

Training that ends for any other reason than the warning (``max_steps``, ``max_epochs``, early stopping)
is done: every rank saves the final checkpoint and rank 0 writes COMPLETE. Rank 0 appends a
``metrics.jsonl`` record after every ``record_every`` optimizer steps (``step``, ``epoch``, and ``loss``
when ``training_step`` returns one), which ``summit-jobs status`` and ``report`` read. Once the fit is over,
the stop signals are ignored, so that a late warning cannot turn the exit 0 into 140.

The class is made on first use (``ChainCallback``, PEP 562): it subclasses Lightning's ``Callback`` (of
``lightning.pytorch``, or of ``pytorch_lightning`` where only that is installed or already imported), and
importing this module must not import Lightning or torch (docs, the login side's checks).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Mapping, Optional

from trainer.loop.chain import Chain


class ChainHooks:
    """The hooks of ``ChainCallback`` (see the module's docstring); ``ChainCallback`` adds Lightning's base.

    ``run_dir``: the run directory (default: the working directory, where the job script starts every
    rank). ``every``: optimizer steps between two stop decisions (each is one tiny all-reduce).
    ``record_every``: optimizer steps between two metrics.jsonl records. The stop signals are caught from
    construction on: make the callback before the Trainer, as early in the script as you can.
    """

    def __init__(self, run_dir: Optional[Any] = None, every: int = 1, record_every: int = 1) -> None:
        if record_every < 1:
            raise ValueError(f"record_every={record_every}: give 1 or more steps between two records")
        self.chain = Chain(run_dir, every=every)
        self.record_every = record_every
        #: The step at which the warning stopped training (None: not stopped by it).
        self.stopped_at: Optional[int] = None
        self._start = 0
        self._step = -1

    def resume_path(self) -> Optional[str]:
        """The newest whole checkpoint of the run, for ``trainer.fit(..., ckpt_path=...)``; None at the start."""
        newest = self.chain.newest()
        return None if newest is None else str(newest)

    # -- Lightning's hooks -----------------------------------------------------------------------------
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage != "fit":
            return
        _check_stoppable(trainer)
        self.chain.rank = trainer.global_rank
        environment = getattr(trainer.strategy, "cluster_environment", None)
        requeue = bool(getattr(environment, "auto_requeue", False))
        if requeue:
            environment.auto_requeue = False
        self._say(trainer, f"{trainer.world_size} ranks on {trainer.num_nodes} nodes "
                           f"({type(environment).__name__ if environment is not None else 'one process'})"
                           + ("; Lightning's SLURM auto-requeue off: the chain queues the next link" if requeue
                              else ""))

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._start = self._step = trainer.global_step
        if trainer.ckpt_path:
            self._say(trainer, f"resumed at step {self._start} from {Path(trainer.ckpt_path).name}")

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        step = trainer.global_step
        if step == self._step:            # inside a gradient accumulation: no optimizer step yet
            return
        self._step = step
        if step % self.record_every == 0:
            self._record(trainer, step, outputs)
        if self.stopped_at is not None:
            return
        agree = lambda flag: bool(trainer.strategy.reduce_boolean_decision(flag, all=False))  # noqa: E731
        if not self.chain.should_stop(step, agree=agree) or _ends_after_this_batch(trainer, step):
            return                        # training ending here anyway: on_train_end saves and completes
        path = self.chain.save(step, lambda tmp: trainer.save_checkpoint(tmp), every_rank=True)
        self.stopped_at = step
        trainer.should_stop = True
        self._say(trainer, f"warned ({self.chain.stopped_by}): saved {path.name if path else '?'}, "
                           f"stopping at step {step}")

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if self.stopped_at is not None:
            return
        step = trainer.global_step
        if step != self._start or not trainer.ckpt_path:      # a resume that trained nothing has its checkpoint
            self.chain.save(step, lambda tmp: trainer.save_checkpoint(tmp), every_rank=True)
        self.chain.complete(f"step {step}")
        self._say(trainer, f"done at step {step}: COMPLETE")

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        # After the Trainer's teardown, which puts back the handlers it found: from here on a warning is ignored.
        self.chain.finish()

    # -- helpers ---------------------------------------------------------------------------------------
    def _record(self, trainer: Any, step: int, outputs: Any) -> None:
        if self.chain.rank != 0:
            return
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        fields = {"epoch": trainer.current_epoch}
        if hasattr(loss, "item"):
            fields["loss"] = float(loss.item())
        self.chain.record(step, **fields)

    def _say(self, trainer: Any, text: str) -> None:
        if trainer.global_rank == 0:
            print(f"chain: {text}", flush=True)


def _check_stoppable(trainer: Any) -> None:
    """min_steps and min_epochs make Lightning ignore ``should_stop`` until they are reached: the ranks would
    have saved and gone on training into the run limit. Refused before the first step."""
    loop = trainer.fit_loop
    for name in ("min_steps", "min_epochs"):
        if getattr(loop, name, None):
            raise ValueError(f"ChainCallback: Trainer({name}={getattr(loop, name)}) keeps training after the "
                             f"warning until it is reached, past the checkpoint and into the run limit; "
                             f"leave {name} out of a chained Trainer")


def _ends_after_this_batch(trainer: Any, step: int) -> bool:
    """Whether training ends after this batch anyway (its max_steps, or the last batch of its last epoch)."""
    if trainer.max_steps not in (None, -1) and step >= trainer.max_steps:
        return True
    last_epoch = trainer.max_epochs not in (None, -1) and trainer.current_epoch + 1 >= trainer.max_epochs
    return bool(last_epoch and getattr(trainer.fit_loop.epoch_loop.batch_progress, "is_last_batch", False))


def _lightning_callback() -> type:
    """Lightning's Callback class: the one of the Lightning the script uses (a Trainer accepts only its own)."""
    if "pytorch_lightning" in sys.modules and "lightning" not in sys.modules:
        import pytorch_lightning
        return pytorch_lightning.Callback
    try:
        import lightning.pytorch
        return lightning.pytorch.Callback
    except ImportError:
        try:
            import pytorch_lightning
        except ImportError:
            raise ImportError("ChainCallback needs Lightning: pip install lightning (or pytorch-lightning)") \
                from None
        return pytorch_lightning.Callback


def __getattr__(name: str) -> Any:
    """``ChainCallback``, made on first use so that importing this module imports no Lightning."""
    if name != "ChainCallback":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    cls = type("ChainCallback", (ChainHooks, _lightning_callback()),
               {"__doc__": ChainHooks.__doc__, "__module__": __name__, "__qualname__": "ChainCallback"})
    globals()["ChainCallback"] = cls
    return cls


__all__ = ["ChainCallback", "ChainHooks"]
