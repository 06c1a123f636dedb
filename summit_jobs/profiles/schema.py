"""Build frozen dataclasses from YAML-loaded dicts, rejecting what does not fit.

The dataclasses *are* the schema: every field's type hint says what is allowed,
and a number's range rides on the field (``number(low=0)``), so that a negative
GPU count or throughput is refused where the file is read instead of turning
into a nonsense plan. Errors name the offending key by its full path and list
the valid keys, so a typo in a site's profile is a one-line fix instead of a
silent default.
"""
from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass
from typing import Any, Literal, Optional, Union, get_args, get_origin, get_type_hints

from summit_jobs.errors import UserError

#: The metadata key of a field's Range.
RANGE = "range"


@dataclass(frozen=True)
class Range:
    """The values a number may take: at least (or above, ``low_open``) ``low``, at most ``high``."""
    low: Optional[float] = None
    high: Optional[float] = None
    low_open: bool = False
    high_open: bool = False

    def holds(self, value: float) -> bool:
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return not (self.high is not None and (value >= self.high if self.high_open else value > self.high))

    def __str__(self) -> str:
        parts = []
        if self.low is not None:
            parts.append(f"{'>' if self.low_open else '>='} {self.low:g}")
        if self.high is not None:
            parts.append(f"{'<' if self.high_open else '<='} {self.high:g}")
        return " and ".join(parts)


def number(default: Any = dataclasses.MISSING, *, low: Optional[float] = None, high: Optional[float] = None,
           low_open: bool = False, high_open: bool = False) -> Any:
    """A dataclass field whose number (or each number of a tuple) must lie in the range; None passes."""
    meta = {RANGE: Range(low, high, low_open, high_open)}
    if default is dataclasses.MISSING:
        return dataclasses.field(metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    if origin is Union:
        return " or ".join(_type_name(a) for a in get_args(tp))
    if origin in (list, tuple):
        return f"list of {_type_name(get_args(tp)[0])}"
    if origin is dict:
        return f"mapping of {_type_name(get_args(tp)[1])}"
    if dataclasses.is_dataclass(tp):
        return "mapping"
    return getattr(tp, "__name__", str(tp))


def build(cls: type, data: Any, where: str) -> Any:
    """Return ``cls`` built from ``data``; ``where`` names the source for errors."""
    return _convert(cls, data, where, "")


def _convert(tp: Any, value: Any, where: str, path: str) -> Any:
    """``value`` as type ``tp``: dispatch on the kind of type hint."""
    label = path or "(top level)"
    origin = get_origin(tp)
    if origin is Union:
        return _convert_union(tp, value, where, path)
    if origin is Literal:
        if value not in get_args(tp):
            raise UserError(f"{where}: '{label}' must be one of {_type_name(tp)}, got {value!r}.")
        return value
    if origin in (list, tuple):
        if not isinstance(value, list):
            raise UserError(f"{where}: '{label}' must be a list, got {value!r}.")
        (item,) = get_args(tp)[:1]
        return tuple(_convert(item, v, where, f"{label}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise UserError(f"{where}: '{label}' must be a mapping, got {value!r}.")
        key_t, val_t = get_args(tp)
        return {str(k): _convert(val_t, v, where, f"{label}.{k}" if path else str(k))
                for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        return _convert_dataclass(tp, value, where, path)
    return _convert_scalar(tp, value, where, label)


def _convert_union(tp: Any, value: Any, where: str, path: str) -> Any:
    """The first member type that accepts ``value``; a lone member's own message otherwise."""
    args = get_args(tp)
    if value is None and type(None) in args:
        return None
    if value == "" and str in args and type(None) in args:
        # An empty text where "none" is spelled null: the file meant something, and it is not "none".
        raise UserError(f"{where}: '{path or '(top level)'}' is empty; leave the key out (or write null) to "
                        "leave it unset, or give a value.")
    errors = []
    for arg in args:
        if arg is type(None):
            continue
        try:
            return _convert(arg, value, where, path)
        except UserError as exc:
            errors.append(str(exc))
    raise UserError(errors[0] if len(errors) == 1 else
                    f"{where}: '{path or '(top level)'}' must be {_type_name(tp)}, got {value!r}.")


def _convert_dataclass(tp: Any, value: Any, where: str, path: str) -> Any:
    """A dataclass from a mapping: unknown keys named with the valid ones, required keys enforced."""
    label = path or "(top level)"
    if not isinstance(value, dict):
        raise UserError(f"{where}: '{label}' must be a mapping, got {value!r}.")
    hints = get_type_hints(tp)
    fields = {f.name: f for f in dataclasses.fields(tp)}
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise UserError(
            f"{where}: unknown key '{(path + '.') if path else ''}{unknown[0]}'. "
            f"Valid keys{' under ' + repr(path) if path else ''}: {', '.join(sorted(fields))}.")
    kwargs = {}
    for name, field in fields.items():
        sub = f"{path}.{name}" if path else name
        if name in value:
            kwargs[name] = _convert(hints[name], value[name], where, sub)
            _check_range(field, kwargs[name], where, sub)
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise UserError(f"{where}: required key '{sub}' is missing.")
    try:
        return tp(**kwargs)
    except (ValueError, TypeError, UserError) as exc:  # __post_init__ checks
        raise UserError(f"{where}: {exc}") from None


def _check_range(field: dataclasses.Field, value: Any, where: str, path: str) -> None:
    """The field's Range (``number(...)``) over its value, or over each item of a tuple of numbers."""
    limits = field.metadata.get(RANGE)
    if limits is None or value is None:
        return
    items = [(f"{path}[{i}]", v) for i, v in enumerate(value)] if isinstance(value, tuple) else [(path, value)]
    for label, item in items:
        if not limits.holds(item):
            raise UserError(f"{where}: '{label}' = {item!r} is out of range: give a number {limits}.")


def _convert_scalar(tp: Any, value: Any, where: str, label: str) -> Any:
    """Numbers, booleans and text, strictly: YAML's ``yes`` is not a number and ``1`` is not a boolean."""
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UserError(f"{where}: '{label}' must be a number, got {value!r}.")
        if not math.isfinite(value):
            raise UserError(f"{where}: '{label}' must be a finite number, got {value!r}.")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise UserError(f"{where}: '{label}' must be a whole number, got {value!r}.")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise UserError(f"{where}: '{label}' must be true or false, got {value!r}.")
        return value
    if tp is str:
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise UserError(f"{where}: '{label}' must be text, got {value!r}.")
        return str(value)
    if tp is Any or tp is typing.Any:
        return value
    raise TypeError(f"schema: unsupported type {tp!r} at {label}")


def deep_merge(base: dict, override: dict) -> dict:
    """Recursively merge ``override`` into a copy of ``base`` (override wins)."""
    out = dict(base)
    for key, val in override.items():
        if isinstance(val, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], val)
        else:
            out[key] = val
    return out
