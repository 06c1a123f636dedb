"""From a command's options to a job: (profile, plan, script), below the command line.

Why here and not in the CLI: submit and simulate build a job the same way, and a command module that imported
another command's module for it tied the two together. The options arrive as the command's keyword dict; every
default is resolved by summit_jobs.profiles.settings through the ``state`` object the command line made (its
``config``, ``profile``, ``project()`` and ``quota()``). Nothing here prints: warnings come back to the caller.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import NamedTuple, Optional, Tuple

from summit_jobs import schedulers
from summit_jobs.errors import UserError
from summit_jobs.profiles import settings
from trainer import submit_options


class Job(NamedTuple):
    """A built job: the profile it is for (with --env applied), the checked plan (its ``warnings`` for the
    caller to print) and the rendered script."""
    profile: object
    plan: object
    script: str


def _env_overrides(pairs: Tuple[str, ...]) -> dict:
    out = {}
    for pair in pairs:
        from summit_jobs.profiles.machines import SHELL_NAME_RE
        name, sep, value = pair.partition("=")
        if not sep or not SHELL_NAME_RE.fullmatch(name):
            raise UserError(f"--env {pair!r} is not NAME=VALUE with NAME a shell variable name "
                            "(ASCII letters, digits, '_'; not starting with a digit).")
        if any(ch in value for ch in "\n\r\0"):
            raise UserError(f"--env {pair!r}: the value holds a line break or NUL byte; give it on one line.")
        out[name] = value
    return out


def _profile_with_env(profile, pairs: Tuple[str, ...]):
    """The profile with the --env overrides in its environment (the profile itself is not changed)."""
    import dataclasses
    env = _env_overrides(pairs)
    if not env:
        return profile
    try:        # the profile's own checks hold for the variables --env sets
        return dataclasses.replace(profile, environment=dataclasses.replace(
            profile.environment, variables={**profile.environment.variables, **env}))
    except ValueError as exc:
        raise UserError(f"--env: {exc}.") from None


def _run_dir(state, kw: dict, profile) -> str:
    """--run-dir, else RUNS_DIR/JOB_NAME-TIMESTAMP; absolute on this machine."""
    if kw.get("run_dir") and kw.get("runs_dir"):
        raise UserError(f"--run-dir {kw['run_dir']} names the run directory itself, so --runs-dir "
                        f"{kw['runs_dir']} (the folder of new run directories) would not be used: give one of them.")
    if kw.get("run_dir"):
        return os.path.abspath(os.path.expanduser(kw["run_dir"]))
    runs_dir = os.path.abspath(os.path.expanduser(settings.runs_dir(kw.get("runs_dir"), state.config, profile)))
    return default_run_dir(runs_dir, kw["job_name"], time.time())


def default_run_dir(runs_dir: str, job_name: str, now: float) -> str:
    """RUNS_DIR/JOB_NAME-YYYYmmdd-HHMMSS, with -2, -3, ... where a run of that name and second exists already.

    Why: submissions of one job name a second apart or less (a script submitting a sweep) got the same folder,
    and all but the first were refused as submitting into an existing run.
    """
    base = os.path.join(runs_dir, f"{job_name}-{time.strftime('%Y%m%d-%H%M%S', time.localtime(now))}")
    path, n = base, 1
    while os.path.lexists(path):
        n += 1
        path = f"{base}-{n}"
    return path


#: Options handed to JobOptions under the same name, as given (None: the profile's or the recipe's); the trainer
#: options declared in trainer.submit_options are handed on too.
_AS_GIVEN = ("walltime", "queue", "job_name", "epochs", "stage_policy", "layout", "request", "launcher", "mem",
             "app", "container", "qos", "clips_per_gpu", "lr",
             "warmup_epochs", "engine", "arch", "num_classes", "chain", "warning_minutes",
             "fusion_threshold", "train_clips", "max_links", "preset", "total_steps",
             *(option.name for option in submit_options.OPTIONS))


def job_options(state, kw: dict, profile, *, accum_steps: int = 1, virtual_nodes: Optional[int] = None,
                template_dir: Optional[str] = None, explicit: Tuple[str, ...] = ()):
    """The command's options as the planner's JobOptions, every default resolved by summit_jobs.profiles.settings."""
    from summit_jobs.planning import plan as plan_mod
    command = user_command_words(kw.get("user_command"))
    if kw.get("job_name") is None:      # an explicit name wins, even one the planner then refuses
        kw = dict(kw, job_name=plan_mod.default_job_name(command))
    given = {name: kw[name] for name in _AS_GIVEN if kw.get(name) is not None}
    return plan_mod.JobOptions(
        **given, nodes=kw["nodes"], run_dir=_run_dir(state, kw, profile), project=state.project(kw.get("project")),
        data=os.path.abspath(kw["data"]) if kw.get("data") else None, accum_steps=accum_steps,
        quota_nodes=state.quota(kw.get("quota_nodes")).nodes, virtual_nodes=virtual_nodes,
        python=sys.executable if profile.environment.python == "auto" else None,
        trainer_args=tuple(kw.get("trainer_args") or ()),
        check_trainer_args=not _replaces_launch(template_dir, schedulers.for_profile(profile).name),
        until_complete=bool(kw.get("until_complete")), bsub_options=tuple(kw.get("bsub_options") or ()),
        command=command, explicit=explicit,
    )


def user_command_words(text: Optional[str]) -> Tuple[str, ...]:
    """--command split into words as a shell would split it (it is never run by a shell)."""
    import shlex
    if text is None:
        return ()
    if any(ch in text for ch in "\n\r\0"):
        raise UserError(f"--command {text!r} holds a line break or NUL byte; give the command on one line.")
    try:
        words = tuple(shlex.split(text))
    except ValueError as exc:
        raise UserError(f"--command {text!r} cannot be split into words: {exc}.") from None
    if not words:
        raise UserError(f"--command {text!r} names no program; give the training command, e.g. "
                        "--command 'python train.py'.")
    return words


def build_job(state, kw: dict, *, accum_steps: int = 1, virtual_nodes: Optional[int] = None,
              explicit: Tuple[str, ...] = ()) -> Job:
    """Options -> Job. The one place a command's inputs meet the pure planner; ``explicit`` names the options
    the command line set (they win over a --preset)."""
    from summit_jobs.planning import plan as plan_mod

    profile = _profile_with_env(state.profile, kw.get("env_vars") or ())
    template_dir = settings.template_dir(kw.get("template_dir"), state.config)
    opts = job_options(state, kw, profile, accum_steps=accum_steps, virtual_nodes=virtual_nodes,
                       template_dir=template_dir, explicit=explicit)
    plan = plan_mod.make_plan(profile, opts)
    if plan.staging:                      # a manifest readable here is checked before anything is queued
        from summit_jobs.data import staging
        staging.check_job_manifest(plan.staging.manifest, plan.nodes, plan.staging.policy)
    from summit_jobs.planning import render  # Jinja2: only once the plan holds (a refused option never pays it)
    return Job(profile, plan, render.render(plan, template_dir))


def _replaces_launch(template_dir: Optional[str], scheduler: str) -> bool:
    """A user template that replaces the launch line (one of the scheduler's ``launch_templates``) decides what
    runs: its arguments are its own business."""
    if not template_dir:
        return False
    return any((Path(template_dir) / name).is_file() for name in schedulers.by_name(scheduler).launch_templates)


class RunEstimate(NamedTuple):
    """A job's estimate (summit_jobs.planning.simulate.Estimate) with what it was made from: the training set
    it counts, the throughput per rank, the seconds a minute of the job's walltime lasts and each job's
    start-up before it trains."""
    estimate: object
    training_set: object
    rate: float
    seconds_per_minute: float
    startup_seconds: float


def training_data(plan, data: Optional[str]) -> Optional[str]:
    """What the job trains on, as a path here: the --data manifest (staged to node-local NVMe), else the folder
    the trainer reads the shards from in place (``-- --data DIR``, the way on a machine without node-local NVMe);
    None for the user's own command, or when neither is given."""
    if data:
        return data
    if plan.user_command:
        return None
    from summit_jobs.planning import trainer_args
    try:
        return trainer_args.parse(plan.trainer_argv[3:]).data
    except UserError:               # a launch line a user template replaces: its arguments are its own
        return None


def estimate(profile, plan, data: Optional[str], environ, *, rate: Optional[float] = None,
             train_clips: Optional[int] = None) -> RunEstimate:
    """The time the built-in trainer's job trains and the links that takes, from the data it is given (its
    manifest's clips), the network it trains (its parameters: each step's allreduce), ``rate`` clips/s per rank
    (default: the profile's figure), the profile's start-up per link and the scheduler's minute (the embedded
    LSF's may be shortened in ``environ``). Shared by simulate and submit's expected links, so they agree."""
    from summit_jobs.planning import simulate, trainer_args
    try:
        args = trainer_args.parse(plan.trainer_argv[3:])
        params = simulate.model_params(args.arch, args.width, args.num_classes)
    except UserError:
        params = simulate.TSM_R50_PARAMS
    trainset = simulate.training_set(training_data(plan, data), train_clips)
    rate = profile.performance.clips_per_second_per_gpu if rate is None else rate
    minute = schedulers.for_profile(profile).seconds_per_minute(profile, environ)
    est = simulate.estimate(profile, nodes=plan.nodes, ranks_per_node=plan.ranks_per_node,
                            accum_steps=plan.accum_steps, clips_per_gpu=plan.clips_per_gpu, epochs=plan.epochs,
                            train_clips=trainset.clips, clips_per_second_per_gpu=rate, model_params=params,
                            walltime_minutes=plan.walltime_minutes, warning_minutes=plan.warning_minutes,
                            seconds_per_minute=minute, startup_seconds=profile.performance.startup_seconds)
    return RunEstimate(est, trainset, rate, minute, profile.performance.startup_seconds)


def expected_links(profile, plan, data: Optional[str], environ) -> str:
    """How many links a chain until complete should take: the training time (``estimate``) over what each link
    trains, its minutes before the warning less the profile's start-up (the built-in trainer's: a user's own
    command runs at a speed no profile knows)."""
    from summit_jobs import wording
    from summit_jobs.planning import simulate
    training = wording.count(max(1, plan.walltime_minutes - plan.warning_minutes), "minute")
    if plan.user_command:
        return (f"expected links: unknown for your own command (no profile knows its speed); at most "
                f"{plan.max_links} (--max-links), each training {training} before its warning")
    if profile.performance.clips_per_second_per_gpu <= 0:
        return "expected links: unknown (the profile has no performance.clips_per_second_per_gpu figure)"
    run = estimate(profile, plan, data, environ)
    est, startup = run.estimate, run.startup_seconds
    per_link = simulate.link_training_seconds(plan.walltime_minutes, plan.warning_minutes, run.seconds_per_minute,
                                              startup)
    minutes = training + ("" if run.seconds_per_minute == 60 else f" of {run.seconds_per_minute:g} s")
    link = f"{minutes} before its warning" + (f" less {simulate.hms(startup)} of start-up" if startup else "")
    if per_link <= 0:
        return (f"expected links: none trains: each link's {link} leaves no time to train; give a longer "
                "--walltime")
    what = (f"{simulate.hms(est.wall_seconds)} of training for {wording.count(run.training_set.clips, 'clip')} "
            f"({run.training_set.source}) x {wording.count(plan.epochs, 'epoch')} at {run.rate:g} clips/s "
            f"{wording.per_rank(plan.gpus_per_node)} from the profile")
    line = (f"expected links: about {est.jobs_needed} ({what}; {simulate.hms(per_link)} of training per link: "
            f"{link})")
    if est.jobs_needed > plan.max_links:
        line += f"; above --max-links {plan.max_links}: raise it, or the chain stops before training is complete"
    return line


def require_data(state, plan, kw: dict) -> None:
    """A real job needs data: without --data (or --data after `--`) every rank would stop at once."""
    from summit_jobs.planning import trainer_args
    if plan.user_command or _replaces_launch(settings.template_dir(kw.get("template_dir"), state.config),
                                             plan.scheduler):
        return                  # the user's own program decides where its data is
    if trainer_args.parse(plan.trainer_argv[3:]).data:
        return
    raise UserError("no data for the trainer: pass --data MANIFEST (shards on the parallel file system, staged to "
                    "node-local NVMe) or give the trainer a folder of shards after `--`, as in "
                    "`summit-jobs submit ... -- --data /path/to/shards`. See `summit-jobs pack --help`.")
