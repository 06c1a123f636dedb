"""Progress of the long commands (synth, pack, stage-data, report): a bar on a terminal, lines in logs.

Why two forms: a bar redraws one line with carriage returns, which a terminal
shows as one line that moves, but a job log, a CI log or a pipe keeps as one
ever longer line of overwritten text. So:

- stderr is a terminal: a live bar (tqdm) with the count, the rate and the
  time left. tqdm is imported only then: it costs about 40 ms that ``--help``
  and a dry run need not pay. ``NO_COLOR`` (any value) leaves the bar without
  colour codes; it still redraws with carriage returns.
- anything else: plain lines, never a carriage return or an escape code: one
  when the work starts, one at least every 10% of it and at least every
  ``SUMMIT_JOBS_PROGRESS_INTERVAL`` seconds (default 5, so a log shows the
  command is alive during a long tape recall), and a final line.
- ``enabled=False`` (the commands' ``--quiet``): no progress at all; messages
  passed to :meth:`Progress.write` (a retry, a warning) are still printed.
"""
from __future__ import annotations

import math
import os
import sys
import threading
import time
from typing import Optional, TextIO, Tuple

from summit_jobs.errors import UserError
from trainer import units

INTERVAL_ENV = "SUMMIT_JOBS_PROGRESS_INTERVAL"
DEFAULT_INTERVAL = 5.0
#: Longest interval accepted: beyond a day a log line is no longer a sign of life.
MAX_INTERVAL = 86400.0
#: A plain line at least every this share of the work.
STEP = 0.1
__all__ = ["DEFAULT_INTERVAL", "INTERVAL_ENV", "Progress", "check_environment", "interval"]


def interval() -> float:
    """Seconds between plain lines at the longest, from ``SUMMIT_JOBS_PROGRESS_INTERVAL`` (default 5)."""
    raw = os.environ.get(INTERVAL_ENV, "").strip()
    if not raw:
        return DEFAULT_INTERVAL
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 0 < value <= MAX_INTERVAL:     # also refuses nan
        raise UserError(f"{INTERVAL_ENV}={raw!r} must be a number of seconds above 0 and at most "
                        f"{MAX_INTERVAL:g} (how often a log gets a progress line); unset it for "
                        f"{DEFAULT_INTERVAL:g} s.")
    return value


def check_environment(enabled: bool = True) -> None:
    """Refuse a bad interval before a command starts its work, not halfway through it."""
    if enabled:
        interval()


def no_color() -> bool:
    """NO_COLOR set to anything (https://no-color.org): no colour escape codes."""
    return "NO_COLOR" in os.environ


class Progress:
    """Progress of ``total`` units of work, reported as ``done`` grows (see the module docstring).

    ``unit`` "B" counts bytes (shown as kB/MB/GB); any other unit is a word
    ("videos"). ``initial`` is work already done before this run (a resumed
    pack): the rate counts only what this run does. Thread-safe.
    """

    def __init__(self, what: str, total: int, unit: str = "", *, enabled: bool = True, initial: int = 0,
                 stream: Optional[TextIO] = None) -> None:
        self.what, self.total, self.unit = what, max(0, int(total)), unit
        self.stream = stream or sys.stderr
        self.initial = self.done = initial
        self.tail = ""
        self.start = time.monotonic()
        self._lock = threading.Lock()
        self._bar = None
        self._stop: Optional[threading.Event] = None
        self._closed = False
        self.mode = "off" if not enabled or not self.total else "bar" if _isatty(self.stream) else "lines"
        if self.mode == "bar":
            try:
                self._bar = _make_bar(self)
            except ImportError:       # installed without its dependencies: lines serve a terminal too
                self.mode = "lines"
        if self.mode == "lines":
            self.interval = interval()
            self._next_mark = math.floor(initial / self.total / STEP + 1e-9) + 1
            self._line(self._count())
            self._start_ticker()

    # -- public
    def update(self, done: float, tail: str = "") -> None:
        """``done`` units of the total are done now (not an increment); ``tail`` is shown after the count."""
        with self._lock:
            step, self.done = done - self.done, done
            self.tail = tail or self.tail
            if self._closed:
                return
            if self.mode == "bar":
                if tail:
                    self._bar.set_postfix_str(tail, refresh=False)
                if step:
                    self._bar.update(step)      # negative when a failed attempt's bytes are taken back
            elif self.mode == "lines" and self._due(time.monotonic()):
                self._line(self._count())

    def write(self, message: str) -> None:
        """One line of text (a retry, a warning) that does not tear the bar; printed even when quiet."""
        with self._lock:
            if self._bar is not None and not self._closed:
                self._bar.write(message, file=self.stream)
            else:
                self.stream.write(message + "\n")
                self.stream.flush()

    def close(self) -> None:
        """The final line: the whole count, time taken and mean rate (or where the work stopped)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._stop is not None:
                self._stop.set()
            if self.mode == "bar":
                self._bar.close()
            elif self.mode == "lines":
                self._line(self._final())

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- plain lines
    def _due(self, now: float) -> bool:
        """A line is due at each 10% of the work and after ``interval`` seconds without one."""
        if self.done >= self.total:
            return False                       # the final line says it
        mark = self.done / self.total / STEP + 1e-9
        if mark >= self._next_mark:
            self._next_mark = math.floor(mark) + 1
            return True
        return now - self._last_line >= self.interval

    def _amount(self, n: float) -> str:
        return units.human_bytes(n) if self.unit == "B" else f"{int(n)}"

    def _rate(self, elapsed: float) -> str:
        rate = (self.done - self.initial) / max(elapsed, 1e-9)
        return f"{units.human_bytes(rate)}/s" if self.unit == "B" else f"{rate:.1f} {self.unit}/s"

    def _fraction(self) -> str:
        unit = "" if self.unit == "B" else f" {self.unit}"
        pct = 100.0 * self.done / self.total
        return f"{self._amount(self.done)}/{self._amount(self.total)}{unit} ({math.floor(pct + 1e-9):.0f}%)"

    def _count(self) -> str:
        elapsed = time.monotonic() - self.start
        text = f"{self.what}: {self._fraction()}"
        if self.done > self.initial:
            left = (self.total - self.done) * elapsed / (self.done - self.initial)
            text += f", {self._rate(elapsed)}, {units.duration(left)} left"
        elif elapsed >= 0.1:
            text += f", {units.duration(elapsed)} so far"
        return text + (f"; {self.tail}" if self.tail else "")

    def _final(self) -> str:
        elapsed = time.monotonic() - self.start
        head = self.what + ": " + ("" if self.done >= self.total else "stopped at ")
        text = f"{head}{self._fraction()} in {units.duration(elapsed)}, {self._rate(elapsed)}"
        return text + (f"; {self.tail}" if self.tail else "")

    def _line(self, text: str) -> None:
        self._last_line = time.monotonic()
        self.stream.write(text + "\n")
        self.stream.flush()

    def _start_ticker(self) -> None:
        """A line after ``interval`` seconds even when no update comes (one long transfer, a slow video)."""
        self._stop = threading.Event()
        threading.Thread(target=self._tick, name="progress", daemon=True).start()

    def _tick(self) -> None:
        while True:
            with self._lock:
                wait = self._last_line + self.interval - time.monotonic()
            if self._stop.wait(max(wait, 0.01)):
                return
            with self._lock:
                if not self._closed and time.monotonic() - self._last_line >= self.interval:
                    self._line(self._count())


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):      # no such method, or a closed stream
        return False


def _fixed_size(stream) -> Optional[Tuple[int, int]]:
    """80x24 where the terminal reports a size of 0 (a pseudo-terminal nobody sized: some CI runners,
    ``docker run -t`` before its first resize), on which tqdm draws nothing at all; else None: the bar
    follows the terminal's width as it changes."""
    try:
        size = os.get_terminal_size(stream.fileno())
    except (AttributeError, ValueError, OSError):
        return 80, 24
    return None if size.columns > 0 and size.lines > 0 else (80, 24)


def _make_bar(p: Progress):
    """The terminal bar: tqdm, imported here and only here (see the module docstring)."""
    from tqdm import tqdm
    is_bytes = p.unit == "B"
    unit = "B" if is_bytes else f" {p.unit or 'items'}"       # tqdm writes the unit right after the rate
    cols, rows = _fixed_size(p.stream) or (None, None)
    return tqdm(total=p.total, initial=p.initial, desc=p.what, unit=unit, unit_scale=is_bytes, unit_divisor=1000,
                file=p.stream, mininterval=0.1, ncols=cols, nrows=rows, dynamic_ncols=cols is None, leave=True,
                colour=None if no_color() else "green", smoothing=0.3)
