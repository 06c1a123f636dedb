"""Render a Plan into its scheduler's batch script. Pure: plan (and templates) in, text out.

Why every ``{{ value }}`` is quoted by one function (the environment's
``finalize``): a template writer cannot forget a filter. Text becomes one
shell word (``shlex.quote``, which leaves plain tokens such as ``tsm`` or
``1,536`` unchanged) and may not hold a line break, because a value printed in
a comment or a ``#BSUB`` line would otherwise start a new line of shell.
Numbers pass as they are. The few places that need something else say so:
``q`` (one word, the same rule, for use inside other expressions), ``qjoin``
(a command line of words, which may hold line breaks inside quotes: trainer
arguments reach the ranks byte for byte), ``shell_code`` (a profile's
``setup`` lines, which are shell by design), and the scheduler's own filters
of its header's directives, which it checks and gives
(``template_filters``: LSF's ``bsub_directive`` and ``bsub_words``, validated
tokens inside the double quotes of a ``#BSUB`` value; Slurm's
``sbatch_directive`` and ``srun_option``). Inside double quotes a quoted
value is not safe (``"$(...)"`` still runs): shipped templates never put a
value there, and a test checks it.
"""
from __future__ import annotations

import functools
import shlex
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

import jinja2

from summit_jobs import resources, schedulers
from summit_jobs.errors import UserError
from summit_jobs.planning.plan import Plan


@functools.lru_cache(maxsize=8)
def _environment(template_dir: Optional[str], scheduler: str) -> jinja2.Environment:
    """The Jinja environment of one scheduler's templates: a user's ``template_dir`` over the scheduler's own
    folder (``template_folder``, for a scheduler that ships its templates in its package) over the shipped
    templates/ (the shared skeleton, LSF's and Slurm's), with the neutral filters and the scheduler's own (one
    environment per scheduler: a filter is its scheduler's word)."""
    loaders = []
    if template_dir:
        if not Path(template_dir).is_dir():
            raise UserError(f"template directory {template_dir} does not exist; point --template-dir (or "
                            "'template_dir' in the config) at a folder holding lsf/job.sh.j2 or partials to override.")
        loaders.append(jinja2.FileSystemLoader(template_dir))
    own = getattr(schedulers.by_name(scheduler), "template_folder", None)
    if own is not None:     # a scheduler that ships its templates in its own package: <folder>/<name>/job.sh.j2
        loaders.append(jinja2.FileSystemLoader(str(own())))
    loaders.append(jinja2.FileSystemLoader(str(resources.templates_dir())))
    loaders.append(SharedPartsAtOldPaths(loaders))
    env = jinja2.Environment(
        loader=jinja2.ChoiceLoader(loaders),
        bytecode_cache=_bytecode_cache(),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.finalize = shell_value
    env.filters["q"] = lambda value: Shell(shell_value(value))
    env.filters["qjoin"] = lambda values: Shell(shlex.join(str(v) for v in values))
    env.filters["shell_code"] = lambda line: Shell(str(line))
    for name, check in _scheduler_filters(scheduler).items():
        env.filters[name] = _as_shell(check)
    # The run directory's file names, from the one module that owns them (trainer.rundir, torch-free).
    from trainer import rundir
    env.globals["rundir"] = rundir
    return env


#: The parts every scheduler's folder once held a copy of and that are now whole in templates/common/partials/.
#: (The shared prologue, chain, staging and torchrun launch are bases whose blocks a scheduler fills in: a
#: scheduler without its own must not get the empty base in their place.)
MOVED_PARTS = ("summary.j2", "environment.j2", "link_events.j2", "launch.j2", "epilogue.j2")


def shared_name(name: str) -> Optional[str]:
    """``common/partials/<part>.j2`` for ``<scheduler>/partials/<part>.j2`` of a moved part, else None."""
    head, sep, part = name.rpartition("/partials/")
    if not sep or not head or "/" in head or head in ("common", "..", ".") or part not in MOVED_PARTS:
        return None
    return f"common/partials/{part}"


class SharedPartsAtOldPaths(jinja2.BaseLoader):
    """``<scheduler>/partials/<part>.j2`` of a part that is now shared (summary, environment, link events,
    launch, epilogue), when nothing else has that name: ``common/partials/<part>.j2`` as the loaders before it
    find it (a user's --template-dir first, so that an override of the shared part still counts). Why: a user's
    --template-dir copy of an older template (a whole ``lsf/job.sh.j2``, or ``lsf/partials/launch.j2``) includes
    them by the paths they had when each scheduler's folder held its own."""

    def __init__(self, loaders):
        self.loaders = list(loaders)

    def get_source(self, environment, template):
        shared = shared_name(template)
        for loader in self.loaders if shared else ():
            try:
                return loader.get_source(environment, shared)
            except jinja2.TemplateNotFound:
                continue
        raise jinja2.TemplateNotFound(template)


class Shell(str):
    """Text that is already shell syntax (quoted words, or a profile's own shell lines): printed as is."""


def shell_value(value: Any) -> str:
    """The one rule for a value printed into a script: a number as is, anything else one quoted word.

    Raises ``UserError`` for a line break or NUL byte: such a value cannot be
    one line of a script, and the planner should have refused it with a
    message naming the option.
    """
    if isinstance(value, Shell):
        return value
    if isinstance(value, bool) or value is None:
        return shlex.quote(str(value))
    if isinstance(value, (int, float)):
        return str(value)
    text = str(value)
    if any(ch in text for ch in "\n\r\0"):
        raise UserError(f"the value {text!r} holds a line break or NUL byte and cannot be placed on one line of "
                        "a job script; remove it from the option, config or profile that set it.")
    return shlex.quote(text)


def _scheduler_filters(name: str) -> Mapping[str, Callable[[Any], str]]:
    """The filters a scheduler gives its templates (``template_filters``: its header's checks), or none for a
    scheduler that gives none."""
    give = getattr(schedulers.by_name(name), "template_filters", None)
    return give() if give is not None else {}


def _as_shell(check: Callable[[Any], str]) -> Callable[[Any], Shell]:
    """A scheduler's filter whose text is printed as it is: the filter checked it and made it shell text (a
    directive, or a word it quoted) or raised a UserError."""
    return lambda value: Shell(check(value))


def _bytecode_cache() -> Optional[jinja2.BytecodeCache]:
    """Compiled templates cached per user: compiling them is most of a dry run's start-up.

    Keyed by template source checksum, so an edited template is recompiled;
    an unwritable cache folder just means no cache.
    """
    import os

    from summit_jobs.profiles import usercache
    folder = os.path.join(usercache.user_cache_dir(), "jinja")
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        return None
    return jinja2.FileSystemBytecodeCache(folder)


def render(plan: Plan, template_dir: Optional[str] = None) -> str:
    """The batch script for ``plan`` from its scheduler's templates; user templates in ``template_dir`` override
    shipped ones."""
    env = _environment(template_dir, plan.scheduler)
    main = schedulers.by_name(plan.scheduler).job_template
    try:
        text = env.get_template(main).render(plan=plan)
    except jinja2.TemplateError as exc:
        where = getattr(exc, "filename", None) or template_dir or "shipped templates"
        raise UserError(f"template error in {where}: {exc}") from None
    except UnicodeDecodeError as exc:
        raise UserError(f"a template in {template_dir or 'the shipped templates'} is not UTF-8 text ({exc.reason} "
                        f"at byte {exc.start}); save it as UTF-8.") from None
    except UserError:
        raise
    except Exception as exc:  # an expression in a user template failed ({{ 1 // 0 }}, a bad attribute call)
        raise UserError(f"template in {template_dir or 'the shipped templates'} failed while rendering: "
                        f"{type(exc).__name__}: {exc}. Fix the expression in your template.") from None
    # No line-by-line clean-up here: a quoted trainer argument may hold newlines or
    # trailing spaces, and it must reach the trainer byte for byte.
    return text
