"""Number types for command-line options: the limit is part of the option, so the message names both.

Why not click's FloatRange alone: it lets ``nan`` through (every comparison
with nan is false) and ``inf`` wherever no maximum is set; a learning rate or
a time of nan then travels into plans and projections as if it were a number.
"""
from __future__ import annotations

import math
from typing import Optional

import click


class FiniteFloat(click.ParamType):
    """A finite float above ``low`` (or at least ``low`` when ``low_open`` is false), at most ``high``."""

    name = "number"

    def __init__(self, low: Optional[float] = None, *, low_open: bool = False, high: Optional[float] = None):
        self.low, self.low_open, self.high = low, low_open, high

    def _range(self) -> str:
        parts = []
        if self.low is not None:
            parts.append(f"{'>' if self.low_open else '>='} {self.low:g}")
        if self.high is not None:
            parts.append(f"<= {self.high:g}")
        return " and ".join(parts) or "finite"

    def convert(self, value, param, ctx) -> float:
        if isinstance(value, float) and math.isfinite(value):
            number = value
        else:
            try:
                number = float(str(value).strip())
            except ValueError:
                self.fail(f"{value!r} is not a number (give a finite number {self._range()}).", param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number (give a number {self._range()}).", param, ctx)
        too_low = self.low is not None and (number <= self.low if self.low_open else number < self.low)
        if too_low or (self.high is not None and number > self.high):
            self.fail(f"{value!r} is out of range: give a number {self._range()}.", param, ctx)
        return number


def whole(low: int = 1, high: Optional[int] = None) -> click.IntRange:
    """A whole number in [low, high]; click names the value and the range when it is outside."""
    return click.IntRange(min=low, max=high)
