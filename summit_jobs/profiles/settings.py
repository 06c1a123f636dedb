"""The settings of a command, each resolved once: options > environment > config file > profile > default.

Why one module: the machine, the project, the quota, the runs folder and the
template folder used to be looked up in each command, and the lookups drifted
(submit and simulate read the quota differently). Every command that needs
one of them asks here, so the rule is written once and the help text can
state it. Each rule is a list of layers (``Source``), highest first; the value
functions take the first layer that was given, and ``explain`` returns the
same layers for ``summit-jobs config``, so what it prints cannot drift from
what the commands use.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, List, Mapping, Optional, Sequence, Tuple

if TYPE_CHECKING:
    from pathlib import Path

#: The machine when nothing names one: the embedded LSF of this computer.
DEFAULT_MACHINE = "local"
#: Parent of run directories when no option, config or profile names one (relative to the current folder).
DEFAULT_RUNS_DIR = "summit-jobs-runs"
#: The quota rule, as the help of --quota-nodes states it.
QUOTA_RULE = ("Your allocation's node limit: --quota-nodes > config quota_nodes > profile quota_nodes; "
              "with none of them, the machine's size. submit refuses more nodes; simulate plans within it.")
#: The variable that names the config file.
CONFIG_ENV = "SUMMIT_JOBS_CONFIG"

#: The kinds of layer, highest precedence first.
KINDS = ("option", "environment", "config", "profile", "default")


@dataclass(frozen=True)
class Source:
    """One layer of a setting: its value there (None: not given) and where exactly that is."""
    kind: str
    value: Any = None
    #: The option (--machine), variable (SUMMIT_JOBS_MACHINE), config file path or profile name.
    where: str = ""
    #: The key in the file (quota_nodes, machines.summit.quota_nodes) for config and profile layers.
    key: str = ""
    #: The line of that key in the file, when known.
    line: Optional[int] = None
    #: The profile's file, for profile layers.
    path: str = ""
    #: Why a default is what it is (shown after it).
    note: str = ""

    def describe(self) -> str:
        """The origin as ``summit-jobs config`` prints it."""
        if self.kind in ("option", "environment"):
            return f"{self.kind} {self.where}"
        if self.kind == "config":
            at = f"{self.where}:{self.line}" if self.line else self.where
            return f"config file {at}" + (f" ({self.key})" if "." in self.key else "")
        if self.kind == "profile":
            at = f" {self.path}:{self.line}" if self.path and self.line else ""
            return f"profile {self.where} (key {self.key}){at}"
        return f"default ({self.note})" if self.note else "default"


def first(*values: Optional[object]) -> Optional[object]:
    """The first value that was given (``None`` means: not given; 0 and '' count as given)."""
    return next((v for v in values if v is not None), None)


def _given(value: object, blank_counts: bool) -> bool:
    return value is not None if blank_counts else bool(value)


def pick(layers: Sequence[Source], blank_counts: bool = False) -> Source:
    """The winning layer: the first given, else the default (every rule ends with one).

    ``blank_counts``: whether 0 and '' count as given (numbers) or not (names: an empty name is none).
    """
    return next(s for s in layers if s.kind == "default" or _given(s.value, blank_counts))


def overridden(layers: Sequence[Source], blank_counts: bool = False) -> Tuple[Source, ...]:
    """The given layers below the winner (not the default): what the winner overrode."""
    win = layers.index(pick(layers, blank_counts))
    return tuple(s for s in layers[win + 1:] if s.kind != "default" and _given(s.value, blank_counts))


def _config(config, key: str) -> Source:
    """The config file's layer for ``key`` (``config`` may be None: no file at all)."""
    if config is None:
        return Source("config")
    return Source("config", getattr(config, key), config.source or "", key, config.line_of(key))


def _profile(config, profile, key: str) -> Source:
    """The profile's layer for ``key``: from the config's ``machines.NAME`` overrides when set there."""
    value = getattr(profile, key)
    override = f"machines.{profile.name}.{key}"
    line = config.line_of(override) if config is not None else None
    if line is not None:
        return Source("config", value, config.source or "", override, line)
    return Source("profile", value, profile.name, key, path=profile.source)


def machine_layers(option: Optional[str], environ: Mapping[str, str], config) -> List[Source]:
    return [Source("option", option, "--machine"),
            Source("environment", environ.get("SUMMIT_JOBS_MACHINE"), "SUMMIT_JOBS_MACHINE"),
            _config(config, "machine"), Source("default", DEFAULT_MACHINE, note="the embedded LSF")]


def machine(option: Optional[str], environ: Mapping[str, str], config) -> str:
    """--machine > $SUMMIT_JOBS_MACHINE > config ``machine`` > local (an empty value is not a name)."""
    return pick(machine_layers(option, environ, config)).value


def project_layers(option: Optional[str], environ: Mapping[str, str], config) -> List[Source]:
    return [Source("option", option, "--project"),
            Source("environment", environ.get("SUMMIT_JOBS_PROJECT"), "SUMMIT_JOBS_PROJECT"),
            _config(config, "project"), Source("default", None, note="none; accounts are personal")]


def project(option: Optional[str], environ: Mapping[str, str], config) -> Optional[str]:
    """--project > $SUMMIT_JOBS_PROJECT > config ``project`` (the profile has none: accounts are personal)."""
    return pick(project_layers(option, environ, config)).value


@dataclass(frozen=True)
class Quota:
    """The allocation's node limit and the number of nodes a job may use under it."""
    #: The limit that was set (option, config or profile), or None when none was.
    nodes: Optional[int]
    #: What a job may use: the quota, never more than the machine's size.
    usable: int


def quota_layers(option: Optional[int], config, profile) -> List[Source]:
    return [Source("option", option, "--quota-nodes"), _config(config, "quota_nodes"),
            _profile(config, profile, "quota_nodes"),
            Source("default", None, note=f"none: up to the machine's {profile.max_nodes:,} nodes")]


def quota(option: Optional[int], config, profile) -> Quota:
    """--quota-nodes > config ``quota_nodes`` > profile ``quota_nodes`` > the machine's size.

    ``config`` may be None (a plan built without the CLI has no config file).
    """
    nodes = pick(quota_layers(option, config, profile), blank_counts=True).value
    usable = profile.max_nodes if nodes is None else min(int(nodes), profile.max_nodes)
    return Quota(nodes=None if nodes is None else int(nodes), usable=usable)


def runs_dir_layers(option: Optional[str], config, profile) -> List[Source]:
    return [Source("option", option, "--runs-dir"), _config(config, "runs_dir"),
            _profile(config, profile, "runs_dir"),
            Source("default", DEFAULT_RUNS_DIR, note="in the current folder")]


def runs_dir(option: Optional[str], config, profile) -> str:
    """--runs-dir > config ``runs_dir`` > profile ``runs_dir`` > ./summit-jobs-runs."""
    return pick(runs_dir_layers(option, config, profile)).value


def template_dir_layers(option: Optional[str], config) -> List[Source]:
    return [Source("option", option, "--template-dir"), _config(config, "template_dir"),
            Source("default", None, note="the shipped templates")]


def template_dir(option: Optional[str], config) -> Optional[str]:
    """--template-dir > config ``template_dir`` (shipped templates otherwise)."""
    return pick(template_dir_layers(option, config)).value


def config_file_layers(option: Optional[str], environ: Mapping[str, str], default: Path) -> List[Source]:
    """--config > $SUMMIT_JOBS_CONFIG > the default path (used only when it exists)."""
    found = str(default) if default.is_file() else None
    return [Source("option", option, "--config"), Source("environment", environ.get(CONFIG_ENV), CONFIG_ENV),
            Source("default", found, note="" if found else f"none: {default} does not exist")]


def config_file(option: Optional[str], environ: Mapping[str, str], default: Path) -> Source:
    """Where the config file comes from; ``value`` None when there is none."""
    return pick(config_file_layers(option, environ, default))


@dataclass(frozen=True)
class Resolved:
    """One setting as ``summit-jobs config`` shows it: the winning layer and the given ones below it."""
    name: str
    winner: Source
    overridden: Tuple[Source, ...]


def _resolved(name: str, layers: List[Source], blank_counts: bool = False) -> Resolved:
    return Resolved(name, pick(layers, blank_counts), overridden(layers, blank_counts))


def explain(options: Mapping[str, Any], environ: Mapping[str, str], config, profile_of: Callable[[str], Any],
            default_config: Path) -> List[Resolved]:
    """Every setting with the layer it comes from, by the same rules the commands use.

    ``options``: what the command line gave (machine, config, project, quota_nodes, runs_dir,
    template_dir; None when not given). ``profile_of(name)`` loads a machine's profile.
    """
    name = machine(options.get("machine"), environ, config)
    profile = profile_of(name)
    return [
        _resolved("config", config_file_layers(options.get("config"), environ, default_config)),
        _resolved("machine", machine_layers(options.get("machine"), environ, config)),
        _resolved("project", project_layers(options.get("project"), environ, config)),
        _resolved("quota_nodes", quota_layers(options.get("quota_nodes"), config, profile), blank_counts=True),
        _resolved("runs_dir", runs_dir_layers(options.get("runs_dir"), config, profile)),
        _resolved("template_dir", template_dir_layers(options.get("template_dir"), config)),
    ]


def environ() -> Mapping[str, str]:
    """The process environment, read in one place so that callers can pass another."""
    return os.environ
