"""What ``summit-jobs submit`` does for real: record the run, then hand the job (or a chain) to the scheduler.

A chain of K jobs is K submissions of the same script into the same run
directory, each with ``-w "ended(<previous id>)"``: a link starts when the one
before it ends, however it ended, and the trainer resumes from the run's latest
checkpoint. The script asks for ``-wa USR2 -wt M`` so the trainer checkpoints
and exits 0 before the run limit; once training is complete the trainer writes
the COMPLETE marker and later links exit at once with success.

The script is submitted from the run directory, since its ``-o``/``-e`` paths
are relative to the submission folder.
"""
from __future__ import annotations

import json
import os
import posixpath
import shlex
from typing import Dict, List, Optional, Tuple

import click

from summit_jobs.hosts import host as hosts
from summit_jobs.errors import UserError
from trainer import submit_options


def ssh_options(state) -> Dict[str, object]:
    return dict(getattr(state, "ssh_options", None) or {})


def prepare(state, kw: dict) -> dict:
    """Before planning: over SSH, run directories are paths on the login node, not here.

    The planner makes run directories absolute on this machine, which is only
    right when the jobs run here; over SSH the parent folder must come from
    --remote-dir, the profile's ssh.remote_dir or the config's runs_dir, and
    must be absolute (``~`` would be expanded on the wrong machine). Returns
    the options to plan with: a new mapping, ``kw`` itself is left as given.
    """
    from summit_jobs import schedulers
    target = hosts.ssh_target_for(state.profile, ssh_options(state),
                                  login_command=schedulers.for_profile(state.profile).submit_command)
    kw = _with_script_path(kw, target)
    if target is None:
        _warn_unused_ssh_options(ssh_options(state))
        return dict(kw)
    chosen, what = _remote_parent(state, kw)
    if chosen is None:
        if kw.get("dry_run"):
            return dict(kw)     # a dry run only shows the script; the paths are this machine's
        raise UserError(f"submitting over SSH to {target.label()} needs a folder on that machine for the run "
                        "directories: pass --remote-dir /ABSOLUTE/PATH (e.g. your scratch folder), or set "
                        "ssh.remote_dir in the profile or runs_dir in the config file.")
    if not str(chosen).startswith("/"):
        raise UserError(f"{what} {chosen!r} must be an absolute path on {target.label()} (no '~' or relative "
                        "paths: they would be resolved on this machine).")
    if what.startswith("--remote-dir"):
        return dict(kw, runs_dir=chosen)
    return dict(kw)


def _with_script_path(kw: dict, target) -> dict:
    """--command's script, as the ranks will find it: they run in the run directory, so a relative script
    (``python3 train.py``, the way one runs it by hand) is made absolute when it is in this folder, and refused
    when it is not there (or when the job runs on another machine, whose folders this one cannot see). A dry
    run is not refused: it shows a script, nothing runs."""
    from summit_jobs.planning import job, plan
    words = job.user_command_words(kw.get("user_command"))
    index = plan.script_index(words)
    if index is None or words[index].startswith("/"):
        return kw
    script = words[index]
    if target is not None:
        if kw.get("dry_run"):
            return kw
        raise UserError(f"--command's script {script!r} is a relative path; the ranks run in the run directory on "
                        f"{target.label()}: give the script's absolute path there.")
    if os.path.isfile(script):
        return dict(kw, user_command=shlex.join(words[:index] + (os.path.abspath(script),) + words[index + 1:]))
    if kw.get("run_dir") and os.path.isfile(os.path.join(os.path.expanduser(kw["run_dir"]), script)):
        return kw
    if kw.get("dry_run"):
        return kw
    raise UserError(f"--command's script {script!r} is not in this folder ({os.getcwd()}), and the ranks run in the "
                    "run directory: give the script's absolute path, or submit from its folder.")


#: The global options that only a submission over SSH uses, by their option names.
SSH_ONLY = {"port": "--port", "user": "--user", "key_file": "--key-file", "known_hosts": "--known-hosts",
            "trust_new_host_key": "--trust-new-host-key", "remote_dir": "--remote-dir"}


def _warn_unused_ssh_options(options: Dict[str, object]) -> None:
    """Say which SSH options a submission on this machine leaves unused (not refused: the same command line
    serves a laptop, which reaches the login node over SSH, and the login node itself)."""
    unused = [flag for key, flag in SSH_ONLY.items() if options.get(key)]
    if unused:
        click.echo(f"summit-jobs: warning: {', '.join(unused)} {'is' if len(unused) == 1 else 'are'} ignored: "
                   "this job is submitted on this machine, not over SSH.", err=True)


def _remote_parent(state, kw: dict) -> Tuple[Optional[str], str]:
    """Over SSH: --run-dir > --runs-dir > --remote-dir > profile ssh.remote_dir > config runs_dir."""
    remote = ssh_options(state).get("remote_dir") or state.profile.ssh.remote_dir
    for chosen, what in ((kw.get("run_dir"), "--run-dir"), (kw.get("runs_dir"), "--runs-dir"),
                         (remote, "--remote-dir (or the profile's ssh.remote_dir)"),
                         (state.config.runs_dir, "the config's runs_dir")):
        if chosen:
            return chosen, what
    return None, ""


#: Plan fields that fix the optimisation trajectory: a run resumed with other values is another experiment. The
#: trainer options declared in trainer.submit_options say so themselves (``fixes_schedule``).
SCHEDULE_FIELDS = ("epochs", "global_batch", "lr", "warmup_epochs", "clips_per_gpu", "virtual_ranks",
                   *(o.name for o in submit_options.OPTIONS if o.in_plan and o.fixes_schedule), "engine")


def check_resume_schedule(host, plan) -> None:
    """Refuse ``--force`` into a run whose checkpoints were made under another schedule.

    The new jobs resume from the newest checkpoint; with other epochs, LR or
    batch they would silently continue those weights on a different curve,
    and the record would describe neither run.
    """
    join = posixpath.join if host.is_remote else os.path.join
    if not host.exists(join(plan.run_dir, "checkpoints")):
        return
    text = host.read_text(join(plan.run_dir, "plan.json"))
    try:
        old = json.loads(text) if text else None
    except ValueError:
        old = None
    if not isinstance(old, dict):
        return
    changed = [f"{name} {old.get(name)!r} -> {getattr(plan, name)!r}" for name in SCHEDULE_FIELDS
               if name in old and old.get(name) != getattr(plan, name)]
    if changed:
        raise UserError(f"{host.label}:{plan.run_dir} holds checkpoints of a run planned differently "
                        f"({'; '.join(changed)}); resuming them under the new plan would mix two schedules. "
                        "Use a new --run-dir, or submit with the run's original options.")


def submit(state, profile, plan, script: str, kw: dict) -> List[str]:
    """Submit ``plan.chain`` jobs; print the job ids and the run directory; return the ids."""
    from summit_jobs import schedulers  # here, not at the top: a dry run needs neither
    from summit_jobs.runs import records as runs
    scheduler = schedulers.for_profile(profile)
    host = hosts.for_profile(profile, ssh_options(state), login_command=scheduler.submit_command)
    with host:
        ssh = host.target.record() if isinstance(host, hosts.SshHost) else None
        if kw.get("force"):
            check_resume_schedule(host, plan)
        record = runs.create(host, plan, profile, script, force=bool(kw.get("force")), ssh=ssh)
        join = posixpath.join if host.is_remote else os.path.join
        script_path = join(plan.run_dir, plan.script_name)
        ids: List[str] = []
        queue = plan.queue
        prev = None
        for link in range(plan.chain):
            try:
                job_id, queue = scheduler.submit(host, plan.script_name, cwd=plan.run_dir, script=script,
                                                 submit_mode=plan.submit_mode, depends_on=prev)
            except schedulers.SubmitRefused as exc:
                done = f" Jobs already submitted for this run: {', '.join(ids)}." if ids else ""
                raise UserError(f"{exc}\nThe script is {script_path}.{done}") from None
            ids.append(job_id)
            record["job_ids"] = list(record.get("job_ids") or []) + [job_id]
            runs.save(host, record)
            after = f" after ended({prev})" if prev else ""
            if plan.chain > 1:
                click.echo(f"submitted job {job_id}{after} ({link + 1}/{plan.chain})", err=True)
            prev = job_id
    if kw.get("as_json"):
        click.echo(json.dumps({"job_ids": ids, "queue": queue, "run_dir": plan.run_dir, "host": host.label,
                               "plan": plan.summary()}, indent=2))
    else:
        chain = f" (chain of {len(ids)}, each after ended() of the previous)" if len(ids) > 1 else ""
        click.echo(f"job {' '.join(ids)} submitted to queue {queue} on {host.label}{chain}")
        click.echo(f"run directory: {plan.run_dir}")
        # Quoted: a run name is the user's, and this line is meant to be pasted into a shell.
        click.echo(f"follow it with: summit-jobs status {shlex.quote(runs.follow_target(record))} --watch")
    return ids
