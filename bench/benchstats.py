"""What the benchmarks share: the median and spread of repeated rounds, and a cold page cache.

Each figure in BENCHMARKS.md is the median of rounds with its min-max beside it, so one lucky or unlucky
round on a shared machine shows as spread instead of moving the figure.
"""
from __future__ import annotations

import os
import statistics
from typing import Dict, Iterable, Sequence


def spread(values: Sequence[float], nd: int = 2, scale: float = 1.0) -> Dict[str, float]:
    """Median and min-max of per-round values (times ``scale``, e.g. 1000 for seconds shown as ms)."""
    return {"median": round(statistics.median(values) * scale, nd), "min": round(min(values) * scale, nd),
            "max": round(max(values) * scale, nd)}


def evict(paths: Iterable[os.PathLike]) -> None:
    """Drop the files' pages from the page cache, so the next read comes from the disk."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
