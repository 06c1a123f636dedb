"""TensorBoard event files beside metrics.jsonl (``--tensorboard``): the same records, another reader.

Why fed from the metrics writer: every number TensorBoard shows is a field of a
record already written to metrics.jsonl, at the record's step and time, so the
two never disagree (tests/training/test_tensorboard.py reads both back). Rank 0 only.

Why ``purge_step`` on a resume: the steps between the checkpoint and the kill
are trained (and logged) again; TensorBoard then drops the first launch's points
from that step on, as the report keeps the last record per step.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Dict, Optional

from trainer import preflight
from trainer.rundir import TENSORBOARD

MISSING = preflight.TENSORBOARD_MISSING
#: The record fields written as scalars, under ``<section>/<field>``.
SCALARS = ("loss", "top1", "top5", "lr", "clips_per_s", "data_wait_frac")
#: Metrics named in the hyperparameter view (their scalars are written with the records).
HPARAM_METRICS = ("eval/top1", "test_mean/top1")


def require() -> None:
    """Exit at start, on every rank, when TensorBoard cannot be written: before any rank waits for another.
    The package itself is looked for before torch is imported (``preflight.require_tensorboard``); torch's
    writer for it is tried here."""
    preflight.require_tensorboard()
    try:
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401
    except ImportError:
        raise SystemExit(MISSING) from None


def section(record: Dict) -> str:
    """Where a record's scalars go: train, eval, test (per checkpoint), test_mean (the final test's
    mean) or test_only (``--test-only``): apart, because they share steps."""
    kind = str(record.get("kind"))
    if kind == "test" and record.get("summary"):
        return "test_mean"
    if kind == "test" and record.get("test_only"):
        return "test_only"
    return kind


def hparam_value(value: object) -> object:
    """An option as the hyperparameter view takes it: a number stays a number, anything else is text."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return value
    return str(value)


class TensorBoardSink:
    """A SummaryWriter on ``<run-dir>/tensorboard``; ``record`` takes metrics records as they are written."""

    def __init__(self, run_dir: os.PathLike, options: Dict[str, object], purge_step: Optional[int] = None):
        from torch.utils.tensorboard import SummaryWriter
        self.writer = SummaryWriter(log_dir=str(Path(run_dir) / TENSORBOARD), purge_step=purge_step)
        self._options(options)

    def _options(self, options: Dict[str, object]) -> None:
        """The run's options in the hyperparameter view (hparams plugin), written once per launch."""
        from torch.utils.tensorboard.summary import hparams
        values = {k: hparam_value(v) for k, v in sorted(options.items())}
        for summary in hparams(values, {m: 0.0 for m in HPARAM_METRICS}):
            self.writer.file_writer.add_summary(summary)
        self.writer.flush()

    def record(self, rec: Dict) -> None:
        """The record's numbers as scalars at its step and time; flushed, so a kill loses nothing written."""
        step, where = rec.get("step"), section(rec)
        if not isinstance(step, int) or isinstance(step, bool):
            return
        for name in SCALARS:
            value = rec.get(name)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self.writer.add_scalar(f"{where}/{name}", float(value), step, walltime=rec.get("time"))
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
