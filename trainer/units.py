"""How quantities read, one way everywhere: durations and byte counts. Torch-free.

Why one module: the plan summary, stage-data's estimates, the report and the
trainer's progress line used four different spellings of a duration (1:02:03,
62.1 min, 1 h 02 min, 3723 s), so the same time read differently depending on
where a user looked.
"""
from __future__ import annotations

import math
from typing import Optional


def duration(seconds: Optional[float]) -> str:
    """``12.3 s``, ``4 min 05 s``, ``3 h 11 min``; ``-`` for no value."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    seconds = max(0.0, float(seconds))
    if seconds < 59.95:
        return f"{seconds:.1f} s"
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    if h:
        return f"{h} h {m:02d} min"
    return f"{m} min {sec:02d} s"


def human_bytes(n: float) -> str:
    """``512 B``, ``1.5 MB``, ``2.3 TB`` (powers of 1,000, as disks and archives are sold)."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000.0
    return f"{n:.1f} TB"
