"""Render a Plan into an LSF batch script. Pure: plan (and templates) in, text out."""
from __future__ import annotations

import functools
import shlex
from pathlib import Path
from typing import Optional

import jinja2

from summit_jobs import resources
from summit_jobs.errors import UserError
from summit_jobs.plan import Plan

MAIN_TEMPLATE = "lsf/job.sh.j2"


@functools.lru_cache(maxsize=8)
def _environment(template_dir: Optional[str]) -> jinja2.Environment:
    loaders = []
    if template_dir:
        if not Path(template_dir).is_dir():
            raise UserError(f"template directory {template_dir} does not exist; point --template-dir (or "
                            "'template_dir' in the config) at a folder holding lsf/job.sh.j2 or partials to override.")
        loaders.append(jinja2.FileSystemLoader(template_dir))
    loaders.append(jinja2.FileSystemLoader(str(resources.templates_dir())))
    env = jinja2.Environment(
        loader=jinja2.ChoiceLoader(loaders),
        bytecode_cache=_bytecode_cache(),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters["q"] = lambda value: shlex.quote(str(value))
    env.filters["qjoin"] = lambda values: shlex.join(str(v) for v in values)
    return env


def _bytecode_cache() -> Optional[jinja2.BytecodeCache]:
    """Compiled templates cached per user: compiling them is most of a dry run's start-up.

    Keyed by template source checksum, so an edited template is recompiled;
    an unwritable cache folder just means no cache.
    """
    import os
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    folder = os.path.join(base, "summit-jobs", "jinja")
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        return None
    return jinja2.FileSystemBytecodeCache(folder)


def render(plan: Plan, template_dir: Optional[str] = None) -> str:
    """The batch script for ``plan``; user templates in ``template_dir`` override shipped ones."""
    env = _environment(template_dir)
    try:
        text = env.get_template(MAIN_TEMPLATE).render(plan=plan)
    except jinja2.TemplateError as exc:
        where = getattr(exc, "filename", None) or template_dir or "shipped templates"
        raise UserError(f"template error in {where}: {exc}") from None
    # No line-by-line clean-up here: a quoted trainer argument may hold newlines or
    # trailing spaces, and it must reach the trainer byte for byte.
    return text
