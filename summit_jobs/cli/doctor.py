"""CLI: ``doctor``, a preflight check of a site, on this machine or on a login node over SSH.

Why here and not in summit_jobs/hosts/doctor.py: the probes run commands, and every
command goes through summit_jobs.hosts.host (LocalHost, or SshHost with its host-key
checks): the one place this tool runs anything. Each probe is a constant
script whose inputs (command names, folders) are its arguments, never part of
its code; only the profile's ``environment.setup`` lines are shell, as in the
job script. doctor.py turns what the probes found into checks. The scheduler's
checks are the profile's scheduler's own (``site_checks``): this module hands it
a HostProbe and names no scheduler.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Callable, Dict, List, Optional, Sequence, Tuple, TypeVar

import click

from summit_jobs import schedulers
from summit_jobs.hosts import doctor, host as hosts
from summit_jobs.profiles import settings
from summit_jobs.cli.submit import State, cli
from summit_jobs.hosts.doctor import FAIL, OK, WARN, Check, FolderProbe
from summit_jobs.errors import UserError

T = TypeVar("T")

#: For each command name: its path on PATH, or an empty field.
COMMANDS_PROBE = ('for c do p=$(command -v "$c" 2>/dev/null) && printf "%s\\t%s\\n" "$c" "$p" '
                  '|| printf "%s\\t\\n" "$c"; done')
#: For each folder: writable|readonly|file, whether it exists (yes|no), and its nearest existing ancestor, after
#: creating and removing a test file there (``.summit-jobs-doctor.<pid>``; one left by a probe that was killed,
#: whose process is gone, is removed first).
FOLDER_PROBE = ('for d do p=$d; while [ ! -e "$p" ]; do p=$(dirname -- "$p"); done; '
                'e=no; [ "$p" = "$d" ] && e=yes; '
                'if [ ! -d "$p" ]; then printf "file\\t%s\\t%s\\n" "$e" "$p"; continue; fi; '
                'for o in "$p"/.summit-jobs-doctor.*; do [ -f "$o" ] && ! kill -0 "${o##*.}" 2>/dev/null && '
                'rm -f -- "$o"; done; '
                't="$p/.summit-jobs-doctor.$$"; '
                'if (umask 077; : > "$t") 2>/dev/null; then rm -f -- "$t"; w=writable; else w=readonly; fi; '
                'printf "%s\\t%s\\t%s\\n" "$w" "$e" "$p"; done')
#: Seconds the environment probe may take (module loads and a first torch import on a busy login node).
ENV_TIMEOUT = 300.0


def find_commands(host: hosts.Host, names: Sequence[str]) -> Dict[str, Optional[str]]:
    """Where each command is on the target's PATH (None: not found)."""
    res = host.run(["sh", "-c", COMMANDS_PROBE, "sh", *names])
    found: Dict[str, Optional[str]] = {n: None for n in names}
    for line in res.stdout.splitlines():
        name, _, path = line.partition("\t")
        if name in found:
            found[name] = path.strip() or None
    return found


def _answer(host: hosts.Host, argv: List[str], parse: Callable[[str], T]) -> Tuple[Optional[T], Optional[str]]:
    """(parsed answer, None) of a scheduler's command, or (None, why not)."""
    try:
        res = host.run(argv)
    except UserError as exc:
        return None, str(exc)
    if res.rc != 0:
        return None, f"`{' '.join(argv)}` failed on {host.label} (exit {res.rc}): {res.text[-500:] or 'no output'}"
    try:
        return parse(res.stdout), None
    except UserError as exc:
        return None, str(exc)


class HostProbe:
    """The SiteProbe (summit_jobs.schedulers) of a host: the scheduler's checks look for and run its commands
    through the same host, and the same constant command probe, as the rest of doctor."""

    def __init__(self, host: hosts.Host) -> None:
        self.host = host
        self.label = host.label
        self.is_remote = host.is_remote

    def commands(self, names: Sequence[str]) -> Dict[str, Optional[str]]:
        return find_commands(self.host, names)

    def answer(self, argv: List[str], parse: Callable[[str], T]) -> Tuple[Optional[T], Optional[str]]:
        return _answer(self.host, argv, parse)


def probe_folders(host: hosts.Host, paths: Sequence[str]) -> List[Optional[FolderProbe]]:
    """What the folder probe found for each path (None where it printed nothing for it)."""
    res = host.run(["sh", "-c", FOLDER_PROBE, "sh", *paths])
    lines = res.stdout.splitlines()
    out: List[Optional[FolderProbe]] = []
    for index, path in enumerate(paths):
        fields = lines[index].split("\t", 2) if index < len(lines) else []
        if len(fields) != 3:
            out.append(None)
            continue
        kind, exists, ancestor = fields
        out.append(FolderProbe(path=path, exists=exists == "yes", ancestor=ancestor, is_dir=kind != "file",
                               writable=kind == "writable"))
    return out


def folders_to_check(state: State, profile, host: hosts.Host, runs_dir: Optional[str],
                     data_dirs: Sequence[str]) -> List[tuple]:
    """(kind, path, must exist, the option that sets it) of the run folder and each data folder."""
    out = []
    if host.is_remote:
        remote = runs_dir or state.ssh_options.get("remote_dir") or profile.ssh.remote_dir or state.config.runs_dir
        if remote:
            out.append(("run folder", str(remote), False, "--remote-dir"))
    else:
        chosen = settings.runs_dir(runs_dir, state.config, profile)
        out.append(("run folder", chosen if "$" in chosen else os.path.abspath(os.path.expanduser(chosen)), False,
                    "--runs-dir"))
    for d in data_dirs:
        path = d if host.is_remote or "$" in d else os.path.abspath(os.path.expanduser(d))
        out.append(("data folder", path, True, "--data"))
    return out


def folder_checks(host: hosts.Host, profile, wanted: List[tuple]) -> List[Check]:
    """Step 3: each folder's path, then what the probe found there."""
    checks: List[Optional[Check]] = [doctor.check_path_text(kind, path, host.is_remote) for kind, path, _, _ in wanted]
    if not wanted and host.is_remote:
        checks.append(Check(FAIL, "run folder", f"no folder on {host.label} is named for run directories",
                            "pass --remote-dir /ABSOLUTE/PATH (e.g. your scratch folder), or set ssh.remote_dir in "
                            "the profile or runs_dir in the config file"))
    probe_paths = [path for (_, path, _, _), c in zip(wanted, checks) if c is None]
    probes = iter(probe_folders(host, probe_paths) if probe_paths else [])
    out = []
    for (kind, path, must_exist, option), check in zip(wanted, checks):
        if check is None:
            probe = next(probes)
            check = doctor.check_folder(kind, probe, profile, must_exist, option) if probe else \
                Check(FAIL, kind, f"the folder probe said nothing about {path}", "run doctor again")
        out.append(check)
    return out + [c for c in checks[len(wanted):] if c is not None]


def profile_python(profile) -> str:
    """The interpreter the profile's jobs run (``auto``: the one running summit-jobs, as the plan takes it)."""
    return sys.executable if profile.environment.python == "auto" else profile.environment.python


def environment_checks(host: hosts.Host, profile) -> List[Check]:
    """Step 4: the profile's set-up, then the trainer's imports, through the same command path as the rest."""
    python = profile_python(profile)
    script = doctor.environment_script(profile, python)
    try:
        res = host.run(["bash", "-c", script], timeout=ENV_TIMEOUT)
    except UserError as exc:
        return [Check(FAIL, "trainer environment", str(exc), "run the profile's set-up by hand on that machine")]
    return doctor.check_environment(res.rc, res.stdout, res.stderr, profile, python)


def command_checks(host: hosts.Host, profile, command: Optional[str]) -> List[Check]:
    """Step 4b (--command): the interpreter the ranks will run for the command, and what its script imports,
    after the same set-up as the job's."""
    if command is None:
        return []
    from summit_jobs.planning import plan
    from summit_jobs.planning.job import user_command_words
    words = user_command_words(command)
    resolved = plan.command_with_python(words, profile_python(profile))       # what the ranks will run, as the plan has it
    if not plan.is_python_program(resolved[0]):
        found = find_commands(host, [words[0]])[words[0]]
        if found is None:
            return [Check(FAIL, "command", f"{words[0]} is not on PATH on {host.label}",
                          "give the program's full path in --command (the job's PATH is the one you submit from)")]
        return [Check(OK, "command", f"{words[0]} is {found}; it is not a Python interpreter, so doctor cannot "
                      "see what it needs")]
    python = resolved[0]
    target = plan.python_target(resolved)
    script = doctor.command_script(profile, python, (target[0], resolved[target[1]]) if target else ())
    try:
        res = host.run(["bash", "-c", script], timeout=ENV_TIMEOUT)
    except UserError as exc:
        return [Check(FAIL, "command interpreter", str(exc), "run the profile's set-up by hand on that machine")]
    return doctor.check_command(res.rc, res.stdout, res.stderr, words[0], python, profile_python(profile))


def connection_checks(host: hosts.Host) -> List[Check]:
    """Step 5 (over SSH): the first command opens the connection, host key checked, never a new one accepted."""
    if not host.is_remote:
        return []
    try:
        host.run(["true"])
        error = None
    except UserError as exc:
        error = str(exc)
    return [doctor.check_ssh(host.label, error)]


def run_checks(state: State, profile, host: hosts.Host, project: Optional[str], runs_dir: Optional[str],
               data_dirs: Sequence[str], command: Optional[str] = None) -> List[Check]:
    checks = connection_checks(host)
    if doctor.failed(checks):
        return checks + [Check(WARN, "other checks", f"not run: no SSH connection to {host.label}")]
    checks += schedulers.for_profile(profile).site_checks(HostProbe(host), profile, project)
    checks += folder_checks(host, profile, folders_to_check(state, profile, host, runs_dir, data_dirs))
    return checks + environment_checks(host, profile) + command_checks(host, profile, command)


@cli.command("doctor")
@click.option("--machine", "-m", "machine", metavar="NAME", help="Profile to check (overrides the global --machine).")
@click.option("--host", "host", metavar="HOST",
              help="Login node to check over SSH (overrides the global --host; 'local' checks this machine).")
@click.option("--project", metavar="NAME", help="Account to charge. Default: $SUMMIT_JOBS_PROJECT, the config's.")
@click.option("--runs-dir", metavar="DIR", help="Parent of run directories to check. Default: as submit's "
              "(over SSH: --remote-dir, the profile's ssh.remote_dir, the config's runs_dir).")
@click.option("--data", "data_dirs", multiple=True, metavar="DIR",
              help="A data folder the jobs read (repeatable): it must exist; stage-data writes into it.")
@click.option("--command", "command", metavar="'PROGRAM ARGS'",
              help="Your own training command, as you give it to submit: check the interpreter the ranks will run "
                   "for it (a bare python/python3 is the profile's) and that what its script imports is there.")
@click.option("--json", "as_json", is_flag=True, help="Print the checks as a JSON list of objects.")
@click.pass_context
def doctor_cmd(ctx: click.Context, machine: Optional[str], host: Optional[str], project: Optional[str],
               runs_dir: Optional[str], data_dirs: Sequence[str], command: Optional[str], as_json: bool) -> None:
    """Check a site before submitting: the scheduler (its commands, version, queues, account), folders, the
    trainer's environment, SSH.

    Each check prints one line, "ok|FAIL|warn  CHECK: what was found", and a
    "fix:" line when it is not ok. Over SSH (--host, or the profile's
    ssh.host) every probe runs on the login node through one connection,
    whose host key must already be known: doctor never accepts a new one.
    Exit status 0 when nothing failed (warnings allowed), 1 otherwise.
    """
    from summit_jobs.profiles import config
    state: State = ctx.obj
    profile = config.profile(state.config, machine) if machine else state.profile
    options = dict(state.ssh_options, trust_new_host_key=False, **({"host": host} if host else {}))
    checks: List[Check] = []
    if state.ssh_options.get("trust_new_host_key"):
        checks.append(Check(WARN, "--trust-new-host-key", "ignored: doctor never accepts a new host key",
                            "check the fingerprint with the site and add the key by hand"))
    with hosts.for_profile(profile, options, login_command=schedulers.for_profile(profile).submit_command) as target:
        checks += run_checks(state, profile, target, state.project(project), runs_dir, data_dirs, command)
    if as_json:
        click.echo(json.dumps([c.to_dict() for c in checks], indent=2))
    else:
        click.echo("\n".join(line for c in checks for line in c.lines()))
    ctx.exit(1 if doctor.failed(checks) else 0)
