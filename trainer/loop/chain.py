"""The chain contract for your own training script, in a few lines. Imports neither torch nor click.

A job of ``summit-jobs submit --command ... --until-complete`` is one link of a
chain: LSF warns it (SIGUSR2) some minutes before its run limit, the script
saves and exits 0, and the next link resumes from the newest checkpoint until
the script writes COMPLETE (docs/user-command.md). ``Chain`` keeps that
contract for a plain (DDP) script::

    from trainer.loop.chain import Chain

    chain = Chain()                                    # catches the warning; rank from the launcher
    state = chain.resume(torch.load)                   # newest checkpoint's contents, or None
    step = state["step"] if state else 0
    while step < total:
        ...one optimiser step...
        step += 1
        chain.record(step, loss=loss.item())           # metrics.jsonl for status and report (rank 0)
        if chain.should_stop(step):                    # every rank gets the same answer at the same step
            break
    chain.save(step, lambda path: torch.save({...}, path))   # rank 0; temporary name, then rename
    if step >= total:
        chain.complete(f"step {step}")
    chain.finish()                                     # a late warning can no longer kill the exit

Why the agreement: the warning reaches ranks at different steps (and where
only the job script gets the signal, through the warning file it writes). A
rank that stops alone leaves the others waiting in their next allreduce. So
``should_stop`` is decided every ``every`` steps by all ranks together: with
``torch.distributed`` initialised by the script, by one all-reduce (MAX) of
the local flag; the helper never imports torch itself, it uses the one the
script already loaded. Without a process group (one rank) the local flag
decides.

Where the warning comes from, so that any one path is enough: SIGUSR2 (LSF
sends it to every process of the job), SIGTERM and SIGINT (bkill), and the
warning file ``.warning.<job id>`` the job script writes in the run directory
(trainer.rundir). Nothing here needs the scheduler's code on the compute node.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable, List, Optional

from trainer import rankenv, rundir

STOP_SIGNALS = (signal.SIGUSR2, signal.SIGTERM, signal.SIGINT)
_CKPT = re.compile(r"^ckpt-(\d{9})\.pt$")


class Chain:
    """One link's side of the chain contract: stop, resume, save, complete.

    ``run_dir``: the run directory (default: the working directory, where the job
    script starts every rank). ``every``: steps between two stop decisions (each
    costs one tiny all-reduce under DDP). ``rank``: this rank (default: from the
    launcher's variables, ``trainer.rankenv``).
    """

    def __init__(self, run_dir: Optional[os.PathLike] = None, every: int = 1, rank: Optional[int] = None):
        if every < 1:
            raise ValueError(f"every={every}: give 1 or more steps between two stop decisions")
        self.run_dir = Path(run_dir) if run_dir is not None else Path.cwd()
        self.every = every
        self.rank = rank if rank is not None else rankenv.launcher_ranks(os.environ)[0]
        self.job = rundir.job_id()
        self.signum: Optional[int] = None
        self.stopped_by = ""
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._caught)

    def _caught(self, signum, _frame) -> None:
        if self.signum is None:
            self.signum = signum

    # -- stopping --------------------------------------------------------------------------------------
    def warned(self) -> bool:
        """This rank's own view: a stop signal caught, or the job's warning file present."""
        if self.signum is None and rundir.warned(self.run_dir, self.job):
            self.signum = int(signal.SIGUSR2)
        return self.signum is not None

    def should_stop(self, step: int, agree: Optional[Callable[[bool], bool]] = None) -> bool:
        """Whether every rank stops after ``step``: decided together every ``every`` steps.

        ``agree(local flag)`` must return True on every rank when the flag holds on any rank; the default is
        one all-reduce through the script's torch.distributed. A framework passes its own (Lightning's
        ``strategy.reduce_boolean_decision(flag, all=False)``), which also works where its ranks talk
        through something else than torch.distributed's default group."""
        if step % self.every:
            return False
        local = self.warned()
        agreed = (agree or _any_rank)(local)
        if agreed and not self.stopped_by:
            self.stopped_by = signal.Signals(self.signum).name if self.signum else "another rank's warning"
        return agreed

    # -- checkpoints -----------------------------------------------------------------------------------
    @property
    def checkpoints(self) -> Path:
        return self.run_dir / rundir.CHECKPOINTS

    def newest(self) -> Optional[Path]:
        """The newest whole checkpoint (``checkpoints/ckpt-<step, 9 digits>.pt``), or None: what a link
        resumes from (a half-written one has another name until its rename)."""
        try:
            names = sorted(n for n in os.listdir(self.checkpoints) if _CKPT.match(n))
        except OSError:
            return None
        return self.checkpoints / names[-1] if names else None

    def resume(self, load: Callable[[Path], Any]) -> Any:
        """``load(newest checkpoint)``, or None when the run starts from scratch."""
        path = self.newest()
        return None if path is None else load(path)

    def save(self, step: int, write: Callable[[Path], None], every_rank: bool = False) -> Optional[Path]:
        """Rank 0 calls ``write(temporary path)``; the file is then renamed to the step's checkpoint name,
        so a reader (the next link) never sees half a checkpoint. Other ranks do nothing. The path, or None.

        ``every_rank``: for a collective save, which every rank must enter or the others hang (Lightning's
        ``Trainer.save_checkpoint``: rank 0 writes, then all meet in a barrier). Every rank calls ``write``
        with the same temporary path (named for the step and the job, not the process), and rank 0 renames it
        once its ``write`` has returned, which for a collective save is after every rank's part is written.
        Every rank gets the final path."""
        final = self.checkpoints / rundir.checkpoint_name(step)
        if self.rank != 0 and not every_rank:
            return None
        tmp = self.checkpoints / (f".{final.name}.tmp{self.job or 'local'}" if every_rank
                                  else f".{final.name}.tmp{os.getpid()}")
        self.checkpoints.mkdir(parents=True, exist_ok=True)
        if self.rank != 0:
            write(tmp)
            return final
        try:
            write(tmp)
            os.replace(tmp, final)
        finally:
            if tmp.is_dir():
                shutil.rmtree(tmp, ignore_errors=True)
            elif tmp.exists():
                tmp.unlink()
        return final

    def complete(self, text: str = "") -> None:
        """Rank 0 writes COMPLETE (whole or not at all): later links exit at once and the chain ends."""
        if self.rank != 0:
            return
        tmp = self.run_dir / f".{rundir.COMPLETE}.tmp{os.getpid()}"
        tmp.write_text(text if text.endswith("\n") or not text else text + "\n")
        os.replace(tmp, self.run_dir / rundir.COMPLETE)

    # -- records ---------------------------------------------------------------------------------------
    def record(self, step: int, **fields: float) -> None:
        """Rank 0 appends ``{"kind": "train", "step": ..., "time": ..., **fields}`` to metrics.jsonl, which
        ``summit-jobs status`` and ``report`` read. One write per record; a full disk loses the record,
        never the run."""
        if self.rank != 0:
            return
        line = json.dumps({"kind": "train", "step": int(step), "time": round(time.time(), 3), **fields}) + "\n"
        try:
            with open(self.run_dir / rundir.METRICS, "a", encoding="utf-8") as fh:
                fh.write(line)
        except OSError:
            pass

    def finish(self) -> None:
        """The work is saved: ignore further stop signals. Python puts the default action back while it
        shuts down, and a warning arriving then would end a finished rank with status 140."""
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)


def _any_rank(flag: bool) -> bool:
    """Whether ``flag`` holds on any rank: one all-reduce (MAX) through the script's own torch.distributed,
    when it has a process group; the flag itself otherwise."""
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None) if torch is not None else None
    if dist is None or not dist.is_available() or not dist.is_initialized() or dist.get_world_size() == 1:
        return flag
    backend = dist.get_backend()
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
    value = torch.tensor([1.0 if flag else 0.0], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item() > 0)


__all__: List[str] = ["Chain", "STOP_SIGNALS"]
