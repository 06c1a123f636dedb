"""``summit-jobs lsf``: the embedded LSF's commands for one shell, to test other programs' LSF code against.

Why: code that drives LSF (dask-jobqueue, parsl, psij, a site's own scripts)
is usually tested against mocks, because a real LSF needs a cluster. The
embedded LSF runs real jobs on this machine, and its commands (bsub, bjobs,
bkill, jsrun, blaunch, lsid, bqueues) are small shims in
summit_jobs/schedulers/lsf/embedded/bin. They are never installed on a user's PATH: a bsub
that shadows a site's real one would be a trap. These commands put them there
only for the shell that asks: ``lsf env`` prints the exports for ``eval``,
``lsf shell`` starts a shell (or one command) with them.

The environment is the one summit-jobs gives its own LSF subprocesses
(summit_jobs.hosts.host.embedded_environment): the bin folder first on PATH, the
interpreter the shims run (SUMMIT_JOBS_PYTHON), the virtual nodes and cores of
the embedded machine's profile, and the state folder (SUMMIT_JOBS_LSF_HOME).
By default that folder is the one `summit-jobs` itself uses, so `bjobs` in the
shell and `summit-jobs status` see the same jobs.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import click

from summit_jobs.cli.submit import State, cli  # noqa: F401
from summit_jobs.errors import UserError

#: The variables the exports set, in the order they are printed (PYTHONPATH and SUMMIT_JOBS_CONFIG only when
#: needed, see _python_path and _config_file).
NAMES = ("PATH", "SUMMIT_JOBS_LSF_HOME", "SUMMIT_JOBS_PYTHON", "SUMMIT_JOBS_LSF_NODES", "SUMMIT_JOBS_LSF_CORES",
         "SUMMIT_JOBS_LSF_CLUSTER", "PYTHONPATH", "SUMMIT_JOBS_CONFIG")

HOME_HELP = ("State folder of the embedded LSF (created if missing). Default: the local machine's, "
             "$SUMMIT_JOBS_LSF_HOME or ~/.local/share/summit-jobs/lsf (so `summit-jobs status` sees your jobs).")
GENERIC_HELP = ("A generic LSF cluster, without IBM CSM: every job is an -n job whose script runs on its first "
                "execution host (no launch node batch1), one slot unless -n says more, and -nnodes is refused. "
                "Default: a Summit-like CSM cell (SUMMIT_JOBS_LSF_CLUSTER=csm), which summit-jobs' own local "
                "machine needs.")


class Setup:
    """What a shell needs to reach one embedded LSF: its state folder, the bin folder and the variables."""

    def __init__(self, home: Path, bin_dir: Path, values: Dict[str, str], prefixes: Dict[str, str]):
        self.home = home
        self.bin_dir = bin_dir
        #: Full values, as a program's environment takes them (PATH with the shell's PATH after the bin folder).
        self.values = values
        #: For PATH and PYTHONPATH: the part that goes in front of the shell's own value.
        self.prefixes = prefixes

    def environ(self, base: Dict[str, str]) -> Dict[str, str]:
        """``base`` with the embedded LSF's variables set."""
        return {**base, **self.values}

    def exports(self) -> str:
        """POSIX shell lines (sh, bash, zsh, ksh) for ``eval``; every value shell-quoted.

        PATH and PYTHONPATH keep the value the shell has when the line runs ("$PATH"), so a saved file of
        these lines can be sourced later in another step of a CI job.
        """
        q = shlex.quote
        # No value in the comment: a quoted newline would end the comment and run the rest as a command.
        lines = ["# the embedded LSF of summit-jobs (its state folder is SUMMIT_JOBS_LSF_HOME)"]
        for name, value in self.values.items():
            if name in self.prefixes:
                lines.append(f'export {name}={q(self.prefixes[name])}"${{{name}:+:${name}}}"')
            else:
                lines.append(f"export {name}={q(value)}")
        return "\n".join(lines) + "\n"

    def to_json(self) -> str:
        """The same for programs: the full values, and which part of PATH/PYTHONPATH is the LSF's."""
        return json.dumps({"home": str(self.home), "bin": str(self.bin_dir),
                           "commands": sorted(p.name for p in self.bin_dir.iterdir() if not p.name.startswith(".")),
                           "environment": self.values, "prepend": self.prefixes}, indent=2)


def _in_front(first: str, rest: str) -> str:
    """``first`` then the entries of the search path ``rest`` that are not ``first`` (no duplicate)."""
    return os.pathsep.join([first, *[p for p in rest.split(os.pathsep) if p and p != first]])


def _absolute(path: str) -> Path:
    """``path`` with ``~`` expanded, made absolute from the current folder (a variable must work from anywhere)."""
    return Path(os.path.abspath(os.path.expanduser(path)))


def _make_home(home: Path, what: str = "--home") -> None:
    """The state folder and its jobs folder, private (0700) as the embedded LSF makes them (job records hold
    the submission environment); a folder of other things is refused, never adopted (lsf.home.prepare)."""
    from summit_jobs.errors import describe_os_error
    from summit_jobs.schedulers.lsf import home as lsf_home
    if home.exists() and not home.is_dir():
        raise UserError(f"--home {home} is a file, not a folder: name a folder (it is created if missing).")
    try:
        lsf_home.prepare(home)
    except lsf_home.NotAHome as exc:
        raise UserError(f"{what} {home}: {exc.strerror}.") from None
    except OSError as exc:
        raise UserError(f"{what} {home}: {describe_os_error(exc)}") from None


def _embedded_profile(state: State):
    """The machine whose embedded LSF this is: the selected one if it is embedded, else ``local``."""
    from summit_jobs.profiles import config
    profile = state.profile
    if profile.scheduler.embedded:
        return profile
    return config.profile(state.config, "local")


def _package_root() -> Path:
    """The folder that holds this installation's summit_jobs package."""
    return Path(__file__).resolve().parent.parent


def _python_path(environ: Dict[str, str]) -> Optional[str]:
    """The folder to put on PYTHONPATH so that the shims import this summit_jobs, or None when the interpreter
    finds it on its own.

    Why: the shims run ``$SUMMIT_JOBS_PYTHON -m summit_jobs.schedulers.lsf.embedded.commands.bsub``. Run from a source checkout
    (PYTHONPATH, or ``python -m summit_jobs`` in the checkout), this process imports the checkout, but a shell
    elsewhere would import whatever is installed, or nothing. Only then is the checkout exported; a site
    folder on PYTHONPATH would change every Python the shell runs.
    """
    root = str(_package_root())
    entries = [os.path.abspath(p) for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in entries and os.path.abspath(os.getcwd()) != root:
        return None
    probe = "import importlib.util as u, sys; s = u.find_spec('summit_jobs'); sys.stdout.write(s.origin if s else '')"
    env = {k: v for k, v in environ.items() if k != "PYTHONPATH"}
    try:
        found = subprocess.run([sys.executable, "-c", probe], env=env, cwd="/", capture_output=True, text=True,
                               timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        found = ""
    if found and Path(found).resolve().parent.parent == Path(root):
        return None
    return root


def _config_file() -> Optional[str]:
    """The --config file given to this command, as an absolute path: the shell's bqueues and summit-jobs read it."""
    ctx = click.get_current_context(silent=True)
    given = ctx.find_root().params.get("config_path") if ctx is not None else None
    return str(_absolute(given)) if given else None


def setup(state: State, home: Optional[str], environ: Dict[str, str], generic: bool = False) -> Setup:
    """The shell environment of the embedded LSF at ``home`` (default: the one summit-jobs uses, which
    ``environ`` selects as it is this process's), created.

    ``generic``: a generic LSF cluster (SUMMIT_JOBS_LSF_CLUSTER=generic) rather than a CSM cell. The kind is
    always exported, so a shell that evaluated a ``--generic`` setup earlier gets the CSM cell back."""
    from summit_jobs.hosts import host as hosts
    from summit_jobs import resources
    from summit_jobs.runs import records as runs
    bin_dir = resources.embedded_bin_dir()
    if not (bin_dir / "bsub").is_file() or not os.access(bin_dir / "bsub", os.X_OK):
        raise UserError(f"the embedded LSF's commands in {bin_dir} are missing or not executable: reinstall "
                        "summit-jobs.")
    if os.pathsep in str(bin_dir):
        raise UserError(f"the embedded LSF's commands are in {bin_dir}, whose name has a '{os.pathsep}', which "
                        "PATH cannot hold: install summit-jobs in a folder without one.")
    where = _absolute(home) if home else Path(runs.current_embedded_home())
    _make_home(where, "--home" if home else "the embedded LSF's state folder (SUMMIT_JOBS_LSF_HOME or its default)")
    profile = _embedded_profile(state)
    full = hosts.embedded_environment(environ, profile.scheduler.virtual_nodes, profile.node.cores)
    full["PATH"] = _in_front(str(bin_dir), environ.get("PATH", os.defpath))
    full["SUMMIT_JOBS_LSF_HOME"] = str(where)
    full["SUMMIT_JOBS_LSF_CLUSTER"] = "generic" if generic else "csm"
    prefixes = {"PATH": str(bin_dir)}
    extra = _python_path(environ)
    if extra is not None:
        prefixes["PYTHONPATH"] = extra
        full["PYTHONPATH"] = _in_front(extra, environ.get("PYTHONPATH", ""))
    config_file = _config_file()
    if config_file is not None:
        full["SUMMIT_JOBS_CONFIG"] = config_file
    values = {name: full[name] for name in NAMES if name in full}
    return Setup(where, bin_dir, values, prefixes)


@cli.group("lsf", context_settings={"help_option_names": ["-h", "--help"]})
def lsf_group() -> None:
    """Put the embedded LSF's bsub, bjobs and bkill on PATH in one shell, to test your own LSF code.

    \b
    The embedded LSF runs real jobs on this machine (virtual nodes, CPU ranks).
    Its commands are never installed on your PATH: these put them there for one
    shell only, so code that calls bsub (dask-jobqueue, parsl, psij, your own
    scripts) can be tested against a real LSF on a laptop or in CI.

    \b
    In a POSIX shell (sh, bash, zsh):
      eval "$(summit-jobs lsf env)"            this shell; the jobs of `summit-jobs submit` too
      summit-jobs lsf shell                    a new shell; `exit` leaves it
    In a CI job or a pytest run, an LSF of its own:
      eval "$(summit-jobs lsf env --home "$RUNNER_TEMP/lsf")"; pytest
    """


@lsf_group.command("env")
@click.option("--home", metavar="DIR", help=HOME_HELP)
@click.option("--generic", is_flag=True, help=GENERIC_HELP)
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON for programs: the state folder, the bin folder, its commands, and the variables "
                   "with their full values (environment) and the part put in front of PATH (prepend).")
@click.pass_obj
def env_cmd(state: State, home: Optional[str], generic: bool, as_json: bool) -> None:
    """Print the shell exports that put the embedded LSF's commands on PATH.

    \b
    For `eval` in sh, bash or zsh: the bin folder of the embedded LSF first on
    PATH, SUMMIT_JOBS_LSF_HOME (its state folder), SUMMIT_JOBS_PYTHON, the
    virtual nodes and cores of the local machine's profile and the kind of
    cluster (SUMMIT_JOBS_LSF_CLUSTER: csm, or generic with --generic). Every
    value is shell-quoted. Nothing is installed: only the shell that evaluates
    these lines gets bsub, bjobs, bkill, bpeek, jsrun, blaunch, lsid, bqueues,
    bhosts, bparams and bacct.

    \b
    Examples:
      eval "$(summit-jobs lsf env)"; bsub -n 1 -W 5 ./job.sh; bjobs
      eval "$(summit-jobs lsf env --home "$RUNNER_TEMP/lsf")"; pytest tests/
      eval "$(summit-jobs lsf env --generic --home /tmp/lsf)"   # an LSF cluster without CSM
      summit-jobs lsf env --home /tmp/lsf > lsf.sh    # then `. ./lsf.sh` in a later step
      summit-jobs lsf env --json                       # for a program's subprocess environment
    """
    found = setup(state, home, dict(os.environ), generic)
    _note_python_path(found)
    click.echo(found.to_json() if as_json else found.exports(), nl=as_json)


def _note_python_path(found: Setup) -> None:
    """Say on stderr why PYTHONPATH is set, when it is: it changes what every Python of the shell imports."""
    if "PYTHONPATH" in found.prefixes:
        click.echo(f"summit-jobs lsf: PYTHONPATH starts with {shlex.quote(found.prefixes['PYTHONPATH'])}: this "
                   f"summit-jobs runs from a source folder that {found.values['SUMMIT_JOBS_PYTHON']} does not "
                   "import on its own, and the embedded LSF's commands need it", err=True)


def _shell() -> List[str]:
    """The user's login shell ($SHELL), else /bin/sh."""
    return [os.environ.get("SHELL") or "/bin/sh"]


def _program(argv: Tuple[str, ...], path: str) -> str:
    """The executable ``argv[0]`` names, looked up on the new PATH; a clear error when there is none."""
    name = argv[0]
    found = shutil.which(name, path=path) if os.sep not in name else (name if os.access(name, os.X_OK) else None)
    if found is None:
        raise UserError(f"{name!r} was not found on PATH (the embedded LSF's commands first) or is not "
                        "executable: name a program, e.g. `summit-jobs lsf shell -- bjobs -a`.")
    return found


@lsf_group.command("shell", context_settings={"ignore_unknown_options": True})
@click.option("--home", metavar="DIR", help=HOME_HELP)
@click.option("--generic", is_flag=True, help=GENERIC_HELP)
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="[-- COMMAND [ARGS]...]")
@click.pass_obj
def shell_cmd(state: State, home: Optional[str], generic: bool, command: Tuple[str, ...]) -> None:
    """Start your shell ($SHELL), or run COMMAND, with the embedded LSF's commands on PATH.

    \b
    The environment is `summit-jobs lsf env`'s. Before the shell starts,
    this command says on stderr which state folder it uses and how to leave
    (`exit`, or Ctrl-D). COMMAND runs without a shell; its exit status is this
    command's.

    \b
    Examples:
      summit-jobs lsf shell                              then bsub, bjobs, bkill; exit
      summit-jobs lsf shell --home /tmp/lsf -- pytest tests/
      summit-jobs lsf shell -- bjobs -a
      summit-jobs lsf shell --generic -- pytest tests/   an LSF cluster without CSM
    """
    found = setup(state, home, dict(os.environ), generic)
    _note_python_path(found)
    env = found.environ(dict(os.environ))
    argv = list(command) if command else _shell()
    program = _program(tuple(argv), env["PATH"])
    home_q = shlex.quote(str(found.home))
    if command:
        click.echo(f"summit-jobs lsf: running {shlex.join(argv)} with the embedded LSF at {home_q}", err=True)
    else:
        click.echo(f"summit-jobs lsf: a new {Path(argv[0]).name} with the embedded LSF at {home_q} "
                   f"(bsub, bjobs, bkill, ... on PATH); type `exit` or Ctrl-D to leave", err=True)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(program, argv, env)
    except OSError as exc:
        raise UserError(f"cannot run {argv[0]}: {exc.strerror}.") from None

