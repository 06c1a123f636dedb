"""``summit-jobs config``: every setting a command would use, its value, and where that value comes from.

Why: a value can come from an option, the environment, the config file, the
machine profile or a default, and a surprise (a forgotten SUMMIT_JOBS_MACHINE,
a config line overriding a profile) is hard to find by reading five places.
The layers and their order are summit_jobs.profiles.settings's (``settings.explain``),
the same rules the commands resolve with; this module only prints them, with
the line of each key in the config file or profile.
"""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any, Dict, List, Optional

import click

from summit_jobs.profiles import settings
from summit_jobs.cli.submit import State, cli
from summit_jobs.cli.types import whole
from summit_jobs.errors import UserError

#: Words that mark a credential in a setting's name: its value is never printed, only that it is set.
SECRET_WORDS = ("password", "passwd", "passphrase", "token", "secret", "credential", "api_key", "apikey")
#: What is printed instead of a secret's value.
HIDDEN = "<set>"
#: The widest value that sets the VALUE column; a longer one (a profile's path) puts its origin on the next line.
VALUE_WIDTH = 20


def is_secret(name: str) -> bool:
    """Whether ``name`` (a setting or key) looks like a credential."""
    lowered = name.lower()
    return any(word in lowered for word in SECRET_WORDS)


def shown(name: str, value: Any) -> Any:
    """``value`` as it may be printed: a secret's value becomes ``<set>`` (and stays None when not set)."""
    return HIDDEN if value is not None and is_secret(name) else value


def _detail(src: settings.Source) -> Dict[str, Any]:
    """The origin as data, for --json: the kind, and the option, variable, file, line and key it names."""
    out: Dict[str, Any] = {"kind": src.kind}
    if src.kind == "option":
        out["option"] = src.where
    elif src.kind == "environment":
        out["variable"] = src.where
    elif src.kind == "config":
        out.update(file=src.where, line=src.line, key=src.key)
    elif src.kind == "profile":
        out.update(profile=src.where, key=src.key, file=src.path or None, line=src.line)
    if src.note:
        out["note"] = src.note
    return out


class _Lines:
    """The key lines of profile files, each file read once (only for profile layers that are shown)."""

    def __init__(self) -> None:
        self._files: Dict[str, Dict[str, int]] = {}

    def fill(self, src: settings.Source) -> settings.Source:
        if src.kind != "profile" or not src.path or src.line is not None:
            return src
        from summit_jobs.profiles import config
        if src.path not in self._files:
            self._files[src.path] = config.key_lines(src.path)
        return dataclasses.replace(src, line=self._files[src.path].get(src.key))


def _profile_file(profile) -> settings.Resolved:
    """Which file the machine's profile was read from: a folder of SUMMIT_JOBS_MACHINES_PATH, yours, or shipped."""
    from summit_jobs.profiles import machines
    from summit_jobs import resources
    folder = Path(profile.source).parent
    extra = [Path(p) for p in os.environ.get("SUMMIT_JOBS_MACHINES_PATH", "").split(os.pathsep) if p]
    if folder in extra:
        src = settings.Source("environment", profile.source, "SUMMIT_JOBS_MACHINES_PATH")
    elif folder == machines.config_dir() / "machines":
        src = settings.Source("default", profile.source, note="your profiles folder, searched before the shipped one")
    elif folder == resources.envs_dir():
        src = settings.Source("default", profile.source, note="shipped with summit-jobs")
    else:
        src = settings.Source("default", profile.source)
    return settings.Resolved("profile", src, ())


def _entry(item: settings.Resolved, lines: _Lines, show_all: bool) -> Dict[str, Any]:
    """One setting as a JSON object: name, value, origin (text) and detail (data); ``overridden`` with --all."""
    win = lines.fill(item.winner)
    out: Dict[str, Any] = {"name": item.name, "value": shown(item.name, win.value), "origin": win.describe(),
                           "detail": _detail(win)}
    if show_all:
        out["overridden"] = [{"value": shown(item.name, s.value), "origin": s.describe(), "detail": _detail(s)}
                             for s in map(lines.fill, item.overridden)]
    return out


def entries(state: State, options: Dict[str, Any], show_all: bool) -> List[Dict[str, Any]]:
    """Every resolved setting of this command line, in the order the table prints them."""
    from summit_jobs.profiles import config
    resolved = settings.explain(options, settings.environ(), state.config,
                                lambda name: config.profile(state.config, name), config.default_path())
    lines = _Lines()
    out = [_entry(item, lines, show_all) for item in resolved]
    out.insert(2, _entry(_profile_file(state.profile), lines, show_all))
    return out


def _text(value: Any) -> str:
    return "(none)" if value is None else str(value)


def table(rows: List[Dict[str, Any]]) -> str:
    """SETTING, VALUE, ORIGIN columns; with --all each overridden layer on a line of its own below.

    A value wider than the VALUE column (a profile's path) keeps its place and
    its origin moves to the next line, under ORIGIN: every origin starts in
    one column, however long the paths of this machine are.
    """
    body = []
    for r in rows:
        body.append([r["name"], _text(r["value"]), r["origin"]])
        body += [["  overrode", _text(o["value"]), o["origin"]] for o in r.get("overridden", ())]
    head = ["SETTING", "VALUE", "ORIGIN"]
    widths = [max(len(head[0]), *(len(b[0]) for b in body)),
              max(len(head[1]), *(len(b[1]) for b in body if len(b[1]) <= VALUE_WIDTH))]
    out = []
    for a, b, c in [head, *body]:
        if len(b) > widths[1]:
            out += [f"{a.ljust(widths[0])}  {b}", f"{'':{widths[0] + widths[1] + 4}}{c}"]
        else:
            out.append(f"{a.ljust(widths[0])}  {b.ljust(widths[1])}  {c}".rstrip())
    return "\n".join(out)


def _as_submit_takes_it(ctx: click.Context, param: click.Parameter, value: Optional[str]) -> Optional[str]:
    """A value submit would refuse is refused here too: config must not show as in use what submit rejects."""
    if value is None:
        return value
    if any(c in value for c in "\n\r\0"):
        raise UserError(f"{param.opts[0]} {value!r} contains a line break or NUL byte; use a plain value.")
    from summit_jobs.schedulers import ACCOUNT_RE
    if param.name == "project" and not ACCOUNT_RE.fullmatch(value.strip()):
        raise UserError(f"--project {value!r} is not a valid project name: use letters, digits, '_', '.' and '-' "
                        "only (at most 64 characters), as printed by your allocation.")
    return value


@cli.command("config")
@click.option("--project", "-P", metavar="NAME", callback=_as_submit_takes_it,
              help="As submit takes it: show what it would charge.")
@click.option("--quota-nodes", type=whole(1), metavar="N", help="As submit takes it: the quota a job is held to.")
@click.option("--runs-dir", metavar="DIR", callback=_as_submit_takes_it,
              help="As submit takes it: the parent of run directories.")
@click.option("--template-dir", metavar="DIR", type=click.Path(file_okay=False), callback=_as_submit_takes_it,
              help="As submit takes it: your own templates.")
@click.option("--all", "show_all", is_flag=True, help="Also show the values each winning one overrode.")
@click.option("--json", "as_json", is_flag=True, help="Print a list of {name, value, origin, detail}.")
@click.pass_context
def config_cmd(ctx: click.Context, project: Optional[str], quota_nodes: Optional[int], runs_dir: Optional[str],
               template_dir: Optional[str], show_all: bool, as_json: bool) -> None:
    """Show every setting with its value and where it comes from.

    Settings come from, highest first: command-line options, the environment
    (SUMMIT_JOBS_MACHINE, SUMMIT_JOBS_PROJECT, SUMMIT_JOBS_CONFIG), the config
    file (with the line of the key), the machine profile, then defaults. The
    global options (--machine, --config) apply as to any command.

    \b
    Examples:
      summit-jobs config
      summit-jobs --machine summit config --all
      summit-jobs config --json
    """
    group = ctx.parent.params if ctx.parent is not None else {}
    options = {"machine": group.get("machine"), "config": group.get("config_path"), "project": project,
               "quota_nodes": quota_nodes, "runs_dir": runs_dir, "template_dir": template_dir}
    rows = entries(ctx.obj, options, show_all)
    click.echo(json.dumps(rows, indent=2) if as_json else table(rows))
