"""The user's config file: defaults and per-machine profile overrides.

Looked up as ``--config FILE``, else ``$SUMMIT_JOBS_CONFIG``, else
``~/.config/summit-jobs/config.yaml`` when it exists. Command-line options win
over the environment (SUMMIT_JOBS_MACHINE, SUMMIT_JOBS_PROJECT), which wins over
this file, which wins over the machine profile.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional

from summit_jobs import machines
from summit_jobs.errors import UserError
from summit_jobs.schema import build


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

    def __post_init__(self) -> None:
        if self.quota_nodes is not None and self.quota_nodes < 1:
            raise ValueError(f"quota_nodes = {self.quota_nodes} must be at least 1 (or left out: no quota)")
        if self.project is not None and any(ch in self.project for ch in "\n\r\0"):
            raise ValueError(f"project = {self.project!r} holds a line break; give it on one line")


def default_path() -> Path:
    return machines.config_dir() / "config.yaml"


def load(path: Optional[str]) -> UserConfig:
    explicit = path or os.environ.get("SUMMIT_JOBS_CONFIG")
    if explicit:
        p = Path(explicit).expanduser()
        if not p.is_file():
            raise UserError(f"config file {p} does not exist. Create it, or drop --config / SUMMIT_JOBS_CONFIG.")
    else:
        p = default_path()
        if not p.is_file():
            return UserConfig()
    data = machines.load_yaml(p, "config file")
    for name, overrides in (data.get("machines") or {}).items():
        if not isinstance(overrides, dict):
            raise UserError(f"config file {p}: 'machines.{name}' must be a mapping of profile keys to override.")
    cfg = build(UserConfig, data, f"config file {p}")
    return UserConfig(**{**cfg.__dict__, "source": str(p)})


def profile(cfg: UserConfig, name: str) -> machines.Profile:
    return machines.load(name, cfg.machines.get(name))
