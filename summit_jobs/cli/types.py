"""Number types for command-line options: the limit is part of the option, so the message names both.

Why not click's FloatRange alone: it lets ``nan`` through (every comparison
with nan is false) and ``inf`` wherever no maximum is set; a learning rate or
a time of nan then travels into plans and projections as if it were a number.
"""
from __future__ import annotations

import math
import os
import re
from typing import List, Optional

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


# ---- empty values ------------------------------------------------------------------------------------------
#
# Why one rule for every option: much of the code reads an option as ``value or default``, so ``--queue ''``
# or ``--data ''`` quietly meant "the default" (or "none") instead of what was typed -- usually a variable
# that was meant to be set and was not (``--data "$MANIFEST"``). No option of this tool takes an empty word,
# so an empty one is refused where click reads it, for every command, with the default it would have hidden.

#: Marks a parameter whose callback already refuses empty values.
_GUARDED = "_summit_jobs_refuses_empty"
_DEFAULT_RE = re.compile(r"Default: (.+?)(?:\.(?:\s|$)|$)", re.S)


def _default_words(param: click.Parameter) -> str:
    """What leaving the option out means, from its help text's "Default: ..." sentence ('' when none)."""
    found = _DEFAULT_RE.search(getattr(param, "help", None) or "")
    return " ".join(found.group(1).split()) if found else ""


def empty_refusal(option: str, default: str, required: bool = False) -> str:
    """The one line that refuses ``option ''``: the value, and the way to get what an empty value used to mean."""
    if required:
        return f"{option} '' is empty; give a value."
    if default:
        return f"{option} '' is empty; leave the option out for {default}."
    return f"{option} '' is empty; give a value, or leave the option out."


def _flag_words(param: click.Parameter) -> str:
    """How a refusal names the option: its first spelling, or its long spellings together when it has several
    (``--a-option/--b-option``: click does not say which one the user typed)."""
    longs = [o for o in param.opts if o.startswith("--")]
    return "/".join(longs) if len(longs) > 1 else param.opts[0]


def _refuse_empty_callback(previous):
    def callback(ctx: click.Context, param: click.Parameter, value):
        given = ctx.get_parameter_source(param.name) == click.core.ParameterSource.COMMANDLINE
        values = value if isinstance(value, (tuple, list)) else (value,)
        if given and any(isinstance(v, str) and v == "" for v in values):
            raise click.UsageError(empty_refusal(_flag_words(param), _default_words(param), param.required), ctx)
        return previous(ctx, param, value) if previous is not None else value
    return callback


def refuse_empty_values(command: click.Command) -> click.Command:
    """Make every text option of ``command`` (not its arguments) refuse an empty value, a group's commands
    included (``lsf env``); idempotent."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            refuse_empty_values(sub)
    for param in command.params:
        if isinstance(param, click.Option) and not param.is_flag and not getattr(param, _GUARDED, False):
            param.callback = _refuse_empty_callback(param.callback)
            setattr(param, _GUARDED, True)
    return command


def refuse_empty_argument(name: str, what: str):
    """A callback for argument ``name``: ``''`` is refused with one line saying to give ``what``.

    Why: options refuse ``''`` (refuse_empty_values), but an empty argument
    used to mean "none given" to the code after it: ``cancel ''`` killed the
    recent runs' jobs and ``synth ''`` wrote into the current folder.
    """
    def callback(ctx: click.Context, param: click.Parameter, value):
        values = value if isinstance(value, (tuple, list)) else (value,)
        if any(v == "" for v in values):
            from summit_jobs.errors import UserError
            raise UserError(f"{name} '' is empty; give {what}.")
        return value
    return callback


# ---- shell completion (click's shell_complete= callbacks) -----------------------------------------------
#
# Why here and light: completion runs the whole CLI once per TAB press, so these read a few folder listings
# and at most the config file and one profile; nothing is imported until a completion is asked for.

#: Files that make a folder a run directory: the submit record, the trainer's configuration, its metrics.
RUN_MARKERS = ("run.json", "run_config.json", "metrics.jsonl")
#: The most entries of one folder looked at (a huge folder must not stall a TAB press).
_MAX_ENTRIES = 5000


def complete_machines(ctx: click.Context, param: click.Parameter, incomplete: str) -> list:
    """--machine: the names of every profile (user folders and SUMMIT_JOBS_MACHINES_PATH included)."""
    from click.shell_completion import CompletionItem

    from summit_jobs.profiles import machines
    return [CompletionItem(name) for name in machines.available() if name.startswith(incomplete)]


def _is_run(path: str) -> bool:
    return any(os.path.isfile(os.path.join(path, marker)) for marker in RUN_MARKERS)


def _runs_in(folder: str, shown_as: str) -> List[str]:
    """Run directories directly under ``folder``, each written as ``shown_as`` + its name."""
    out = []
    try:
        with os.scandir(os.path.expanduser(folder or ".")) as entries:
            for i, entry in enumerate(entries):
                if i >= _MAX_ENTRIES:
                    break
                if entry.is_dir() and _is_run(entry.path):
                    out.append(shown_as + entry.name)
    except OSError:
        return []
    return out


def _configured_runs_dir(ctx: click.Context) -> Optional[str]:
    """The runs folder this command line would use (--machine and --config as typed so far), or None."""
    from summit_jobs.profiles import config, settings
    from summit_jobs.errors import UserError
    params = ctx.find_root().params
    try:
        cfg = config.load(params.get("config_path"))
        name = settings.machine(params.get("machine"), settings.environ(), cfg)
        return settings.runs_dir(None, cfg, config.profile(cfg, name))
    except (UserError, OSError, ValueError):
        return None


def complete_runs(ctx: click.Context, param: click.Parameter, incomplete: str) -> list:
    """RUN: run directories in the folder typed so far, else in the current folder and the configured runs folder.

    When none matches, the shell completes folder names itself (a run may sit deeper).
    """
    from click.shell_completion import CompletionItem
    head, _ = os.path.split(incomplete)
    if head:
        found = _runs_in(head, os.path.join(head, ""))
    else:
        found = _runs_in(".", "")
        runs = _configured_runs_dir(ctx)
        if runs and os.path.isdir(os.path.expanduser(runs)):
            found += _runs_in(runs, os.path.join(runs, ""))
    names = sorted({f for f in found if f.startswith(incomplete) or os.path.basename(f).startswith(incomplete)})
    if not names:
        return [CompletionItem(incomplete, type="dir")]
    return [CompletionItem(name) for name in names]
