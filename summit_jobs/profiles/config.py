"""The user's config file: defaults and per-machine profile overrides.

Looked up as ``--config FILE``, else ``$SUMMIT_JOBS_CONFIG``, else
``~/.config/summit-jobs/config.yaml`` when it exists. Command-line options win
over the environment (SUMMIT_JOBS_MACHINE, SUMMIT_JOBS_PROJECT), which wins over
this file, which wins over the machine profile (summit_jobs.profiles.settings owns the
rule). The line of every key is kept, so that ``summit-jobs config`` and error
messages can point at it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from summit_jobs.profiles import machines, settings
from summit_jobs.errors import UserError
from summit_jobs.profiles.schema import build

#: Fields of UserConfig that the loader fills in; a file may not set them.
_INTERNAL = ("source", "lines")
#: The text keys of the file and what leaving each out means (an empty value is refused, not taken as that).
_DEFAULTS = {
    "machine": f"the default ($SUMMIT_JOBS_MACHINE, else {settings.DEFAULT_MACHINE})",
    "project": "none ($SUMMIT_JOBS_PROJECT or --project)",
    "runs_dir": f"the profile's runs_dir, else ./{settings.DEFAULT_RUNS_DIR}",
    "template_dir": "the shipped templates",
}


@dataclass(frozen=True)
class UserConfig:
    machine: Optional[str] = None
    project: Optional[str] = None
    #: The allocation's node limit, for every machine (a profile's quota_nodes is per machine).
    quota_nodes: Optional[int] = None
    #: Parent folder of run directories on the machine that runs the jobs.
    runs_dir: Optional[str] = None
    template_dir: Optional[str] = None
    #: Overrides merged into machine profiles, by machine name (same keys as envs/*.yaml).
    machines: Dict[str, Any] = field(default_factory=dict)
    source: Optional[str] = None
    #: The line of each key in the file, by dotted path (``machine``, ``machines.summit.quota_nodes``).
    lines: Dict[str, int] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.quota_nodes is not None and self.quota_nodes < 1:
            raise ValueError(f"quota_nodes = {self.quota_nodes} must be at least 1 (or left out: no quota)")
        if self.project is not None and any(ch in self.project for ch in "\n\r\0"):
            raise ValueError(f"project = {self.project!r} holds a line break; give it on one line")
        for key, default in _DEFAULTS.items():
            if getattr(self, key) is not None and not str(getattr(self, key)).strip():
                # An empty value would quietly mean the default, which the file did not ask for.
                raise ValueError(f"{key} = {getattr(self, key)!r} is empty; leave the key out for {default}")

    def line_of(self, key: str) -> Optional[int]:
        """The line where ``key`` (a dotted path) is set in the file, or None."""
        return self.lines.get(key)


def default_path() -> Path:
    return machines.config_dir() / "config.yaml"


def load(path: Optional[str]) -> UserConfig:
    """The config file named by --config (``path``), $SUMMIT_JOBS_CONFIG or the default path; empty if none."""
    where = settings.config_file(path, settings.environ(), default_path())
    if where.value is None:
        return UserConfig()
    p = Path(where.value).expanduser()
    if where.kind != "default" and not p.is_file():
        raise UserError(f"config file {p} does not exist. Create it, or drop --config / SUMMIT_JOBS_CONFIG.")
    data, lines = read_yaml(p, "config file")
    for key in data:        # one key at a time, so that a bad value is reported with its line
        if key in _INTERNAL:
            valid = ", ".join(f.name for f in dataclasses.fields(UserConfig) if f.name not in _INTERNAL)
            raise UserError(f"config file {_at(p, lines, str(key))}: unknown key {key!r}. Valid keys: {valid}.")
        build(UserConfig, {key: data[key]}, f"config file {_at(p, lines, str(key))}")
    known = None
    for name, overrides in (data.get("machines") or {}).items():
        if not isinstance(overrides, dict):
            raise UserError(f"config file {_at(p, lines, f'machines.{name}')}: 'machines.{name}' must be a "
                            "mapping of profile keys to override.")
        known = machines.available() if known is None else known
        if str(name) not in known:
            # A misspelt machine's overrides would never apply, without a word.
            raise UserError(f"config file {_at(p, lines, f'machines.{name}')}: 'machines.{name}' overrides no "
                            f"known machine. Known machines: {', '.join(known) or 'none'}.")
    cfg = build(UserConfig, data, f"config file {p}")
    return dataclasses.replace(cfg, source=str(p), lines=lines)


def _at(path: Path, lines: Dict[str, int], key: str) -> str:
    """``PATH:LINE`` of ``key`` (just PATH when its line is unknown)."""
    line = lines.get(key)
    return f"{path}:{line}" if line else str(path)


def read_yaml(path: Path, what: str) -> Tuple[Dict[str, Any], Dict[str, int]]:
    """A YAML mapping and the line of each of its keys (dotted paths), or one clean line naming file and line.

    Why compose then construct: the node tree keeps every key's position, the
    constructed data is what yaml.safe_load would give (libyaml when present).
    """
    import yaml
    loader_cls = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        loader = loader_cls(path.read_text(encoding="utf-8"))
        try:
            node = loader.get_single_node()
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except OSError as exc:
        raise UserError(f"cannot read {what} {path}: {exc.strerror}.") from None
    except UnicodeDecodeError as exc:
        raise UserError(f"{what} {path} is not UTF-8 text ({exc.reason} at byte {exc.start}); save it as UTF-8.") \
            from None
    except yaml.YAMLError as exc:
        raise UserError(_yaml_error(path, what, exc)) from None
    if data is None:
        return {}, {}
    if not isinstance(data, dict):
        raise UserError(f"{what} {path} must hold a mapping at the top level.")
    lines: Dict[str, int] = {}
    _key_lines(node, "", lines)
    return data, lines


def _yaml_error(path: Path, what: str, exc: Exception) -> str:
    """A YAML syntax error on one line: file:line, the problem, and what was being parsed."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
    col = f" (column {mark.column + 1})" if mark is not None else ""
    context, cmark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    started = f", {context} started at line {cmark.line + 1}" if context and cmark is not None else ""
    return f"{what} {where} is not valid YAML{col}: {problem}{started}. Fix that line."


def _key_lines(node, prefix: str, out: Dict[str, int]) -> None:
    """Record the (1-based) line of every mapping key under ``node``; a later duplicate wins, as in the data."""
    import yaml
    if not isinstance(node, yaml.MappingNode):
        return
    for key, value in node.value:
        if not isinstance(key, yaml.ScalarNode):
            continue
        path = f"{prefix}.{key.value}" if prefix else str(key.value)
        out[path] = key.start_mark.line + 1
        _key_lines(value, path, out)


def key_lines(path: str) -> Dict[str, int]:
    """The line of each key of a YAML file (a machine profile), or nothing when it cannot be read."""
    try:
        return read_yaml(Path(path), "file")[1]
    except UserError:
        return {}


def profile(cfg: UserConfig, name: str) -> machines.Profile:
    """Profile ``name`` with the config's overrides; an error they cause names their line in the config."""
    overrides = cfg.machines.get(name)
    try:
        return machines.load(name, overrides)
    except UserError as exc:
        line = cfg.line_of(f"machines.{name}") if overrides else None
        if line is None:
            raise
        raise UserError(f"{exc} (with the overrides of machines.{name} in config file {cfg.source}:{line})") \
            from None
