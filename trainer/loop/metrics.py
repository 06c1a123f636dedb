"""Metrics: JSONL records (read by reports and simulated runs) and a log line.

Why JSONL appended line by line: a reader (the CLI's status/report commands,
possibly while the run is going) sees whole records; a record cut by a kill
is only ever the last line, readers skip lines that do not parse, and the
next launch starts its records on a line of their own. After a
resume, steps between the last checkpoint and the kill appear twice; readers
keep the last record for a (kind, step).
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

import torch

from trainer import units
from trainer.rundir import METRICS, ends_whole  # the run directory names its files in one place


def topk_hits(logits: torch.Tensor, target: torch.Tensor, ks=(1, 5)) -> torch.Tensor:
    """How many rows have the target among their top k, for each k: a float64 tensor on the logits'
    device (no host sync; the caller reads it when it reports)."""
    k = min(max(ks), logits.shape[1])
    pred = logits.topk(k, dim=1).indices
    hit = pred.eq(target.view(-1, 1))
    return torch.stack([hit[:, :min(kk, k)].any(dim=1).sum() for kk in ks]).double()


class MetricsWriter:
    """Rank 0 only; every other rank gets a writer that does nothing.

    Other readers of the same records (TensorBoard, ``trainer.loop.tboard``) are
    attached as sinks: they get each record after it is in metrics.jsonl.
    """

    def __init__(self, run_dir: os.PathLike, enabled: bool):
        self.enabled = enabled
        self.path = Path(run_dir) / METRICS
        self._f = open(self.path, "a+", buffering=1) if enabled else None  # a+: its last byte is read
        self.sinks: List[object] = []
        if self._f is not None and not ends_whole(self._f.fileno()):
            self._f.write("\n")  # a killed launch's cut line: this launch's records start on their own

    def attach(self, sink: object) -> None:
        """Also give every record to ``sink.record(rec)``; ``close`` closes it (rank 0 only)."""
        if self.enabled:
            self.sinks.append(sink)

    def write(self, kind: str, **fields) -> Dict:
        rec = {"kind": kind, "time": time.time(), **fields}
        if self._f is not None:
            self._f.write(json.dumps(rec, sort_keys=True) + "\n")
            self._f.flush()
        for sink in self.sinks:
            sink.record(rec)
        return rec

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None
        while self.sinks:
            self.sinks.pop().close()


def read_metrics(run_dir: os.PathLike) -> List[Dict]:
    """All whole records, in file order (a torn last line is skipped)."""
    path = Path(run_dir) / METRICS
    out = []
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def log(msg: str, enabled: bool = True) -> None:
    """One line on stderr, written in one piece.

    Why one write: the ranks of a job share one output file; ``print`` writes the
    text and its newline separately, so another rank's line could land between them.
    """
    if enabled:
        sys.stderr.write(f"[trainer {time.strftime('%H:%M:%S')}] {msg}\n")
        sys.stderr.flush()


def progress_line(rec: Dict, epochs: int, steps_per_epoch: int, total_steps: int, eta: Optional[float]) -> str:
    pct = 100.0 * rec["step"] / max(total_steps, 1)
    return (f"epoch {rec['epoch'] + 1}/{epochs} step {rec['step']}/{total_steps} ({pct:.1f}%) | "
            f"loss {rec['loss']:.4f} top1 {100 * rec['top1']:.1f}% top5 {100 * rec['top5']:.1f}% | "
            f"lr {rec['lr']:.5g} | {rec['clips_per_s']:.1f} clips/s | data wait {100 * rec['data_wait_frac']:.0f}%"
            + (f" | eta {units.duration(eta)}" if eta is not None else ""))
