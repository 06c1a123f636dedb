"""The settings of a command, each resolved once: options > environment > config file > profile.

Why one module: the machine, the project, the quota, the runs folder and the
template folder used to be looked up in each command, and the lookups drifted
(submit and simulate read the quota differently). Every command that needs
one of them asks here, so the rule is written once and the help text can
state it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, Optional

#: The machine when nothing names one: the embedded LSF of this computer.
DEFAULT_MACHINE = "local"
#: Parent of run directories when no option, config or profile names one (relative to the current folder).
DEFAULT_RUNS_DIR = "summit-jobs-runs"
#: The quota rule, as the help of --quota-nodes states it.
QUOTA_RULE = ("Your allocation's node limit: --quota-nodes > config quota_nodes > profile quota_nodes; "
              "with none of them, the machine's size. submit refuses more nodes; simulate plans within it.")


def first(*values: Optional[object]) -> Optional[object]:
    """The first value that was given (``None`` means: not given; 0 and '' count as given)."""
    return next((v for v in values if v is not None), None)


def machine(option: Optional[str], environ: Mapping[str, str], config) -> str:
    """--machine > $SUMMIT_JOBS_MACHINE > config ``machine`` > local (an empty value is not a name)."""
    return option or environ.get("SUMMIT_JOBS_MACHINE") or config.machine or DEFAULT_MACHINE


def project(option: Optional[str], environ: Mapping[str, str], config) -> Optional[str]:
    """--project > $SUMMIT_JOBS_PROJECT > config ``project`` (the profile has none: accounts are personal)."""
    return option or environ.get("SUMMIT_JOBS_PROJECT") or config.project


@dataclass(frozen=True)
class Quota:
    """The allocation's node limit and the number of nodes a job may use under it."""
    #: The limit that was set (option, config or profile), or None when none was.
    nodes: Optional[int]
    #: What a job may use: the quota, never more than the machine's size.
    usable: int


def quota(option: Optional[int], config, profile) -> Quota:
    """--quota-nodes > config ``quota_nodes`` > profile ``quota_nodes`` > the machine's size.

    ``config`` may be None (a plan built without the CLI has no config file).
    """
    nodes = first(option, config.quota_nodes if config is not None else None, profile.quota_nodes)
    usable = profile.max_nodes if nodes is None else min(int(nodes), profile.max_nodes)
    return Quota(nodes=None if nodes is None else int(nodes), usable=usable)


def runs_dir(option: Optional[str], config, profile) -> str:
    """--runs-dir > config ``runs_dir`` > profile ``runs_dir`` > ./summit-jobs-runs."""
    return option or config.runs_dir or profile.runs_dir or DEFAULT_RUNS_DIR


def template_dir(option: Optional[str], config) -> Optional[str]:
    """--template-dir > config ``template_dir`` (shipped templates otherwise)."""
    return option or config.template_dir


def environ() -> Mapping[str, str]:
    """The process environment, read in one place so that callers can pass another."""
    return os.environ
