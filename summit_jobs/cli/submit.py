"""The ``summit-jobs`` command line. Never imports torch: start-up must stay fast."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional, Tuple

import click

from summit_jobs.profiles import settings
from summit_jobs import version
from summit_jobs.cli.types import FiniteFloat, complete_machines, refuse_empty_values, whole
from summit_jobs.errors import UserError, describe_os_error
from summit_jobs.cli.lazygroup import LazyGroup
from summit_jobs import schedulers
from summit_jobs.profiles.choices import LAYOUTS, REQUESTS, STAGE_POLICIES
from trainer import config as trainer_config
from trainer import submit_options

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class _Group(LazyGroup):
    """Turns UserError into one paragraph on stderr and exit 2: no tracebacks for user mistakes."""

    def get_command(self, ctx: Optional[click.Context], cmd_name: str) -> Optional[click.Command]:
        """Every command's text options refuse an empty value (summit_jobs.cli.types says why)."""
        cmd = super().get_command(ctx, cmd_name)
        return refuse_empty_values(cmd) if cmd is not None else None

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except UserError as exc:
            click.echo(f"summit-jobs: error: {exc}", err=True)
            ctx.exit(exc.exit_code)
        except OSError as exc:
            # Disk full, read-only or missing folders, permissions: the system's words with the path.
            click.echo(f"summit-jobs: error: {describe_os_error(exc)}", err=True)
            ctx.exit(1)


class State:
    def __init__(self, machine: Optional[str], config_path: Optional[str]):
        from summit_jobs.profiles import config
        self.config = config.load(config_path)
        self.machine = settings.machine(machine, settings.environ(), self.config)
        self._profile = None
        #: SSH overrides from the command line (host, port, user, key_file, known_hosts, ...).
        self.ssh_options: dict = {}

    @property
    def profile(self):
        if self._profile is None:
            from summit_jobs.profiles import config
            self._profile = config.profile(self.config, self.machine)
        return self._profile

    def project(self, given: Optional[str]) -> Optional[str]:
        """The account to charge (summit_jobs.profiles.settings has the precedence)."""
        return settings.project(given, settings.environ(), self.config)

    def quota(self, given: Optional[int]) -> "settings.Quota":
        """The allocation's node limit, the same for every command (summit_jobs.profiles.settings has the rule)."""
        return settings.quota(given, self.config, self.profile)


@click.group(cls=_Group, context_settings=CONTEXT)
@click.option("--machine", "-m", metavar="NAME", shell_complete=complete_machines,
              help="Machine profile (summit, lassen, local, or one of yours). "
                   "Default: $SUMMIT_JOBS_MACHINE, the config file's 'machine', else local.")
@click.option("--config", "config_path", metavar="FILE", type=click.Path(dir_okay=False),
              help="User config file. Default: $SUMMIT_JOBS_CONFIG or ~/.config/summit-jobs/config.yaml.")
@click.option("--host", metavar="HOST", envvar="SUMMIT_JOBS_HOST",
              help="Login node to reach over SSH (default: the profile's ssh.host when this machine has no "
                   "LSF; 'local' forces this machine).")
@click.option("--port", type=whole(1, 65535), metavar="PORT", help="SSH port. Default: the profile's, else 22.")
@click.option("--user", metavar="NAME", help="SSH user name. Default: the profile's, else your local name.")
@click.option("--key-file", metavar="FILE", help="SSH private key (else ssh-agent and ~/.ssh keys).")
@click.option("--known-hosts", metavar="FILE", help="Extra known_hosts file checked before yours and the system's.")
@click.option("--trust-new-host-key", is_flag=True,
              help="DANGEROUS: accept and save an SSH host key never seen before (check its fingerprint "
                   "with the site first). Changed keys are refused regardless.")
@click.option("--remote-dir", metavar="DIR",
              help="Over SSH: absolute folder on the login node that holds run directories. "
                   "Default: the profile's ssh.remote_dir or the config's runs_dir.")
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=version.show,
              help="Show the version and the code revision (git commit), then exit.")
@click.pass_context
def cli(ctx: click.Context, machine: Optional[str], config_path: Optional[str], host: Optional[str],
        port: Optional[int], user: Optional[str], key_file: Optional[str], known_hosts: Optional[str],
        trust_new_host_key: bool, remote_dir: Optional[str]) -> None:
    """Train video models (TSM) on IBM LSF and Slurm GPU clusters, from a laptop to thousands of GPUs.

    \b
    Typical use:
      summit-jobs machines                         what machines are known, and their limits
      summit-jobs --machine summit submit --nodes 256 --project ABC123 --dry-run
      summit-jobs submit --nodes 2                 run for real on the embedded LSF (this machine)

    The 'local' machine is an embedded LSF on this computer: virtual nodes, CPU
    ranks, the same LSF commands and launchers a real cluster takes.
    """
    ctx.obj = State(machine, config_path)
    ctx.obj.ssh_options = {"host": host, "port": port, "user": user, "key_file": key_file,
                           "known_hosts": known_hosts, "trust_new_host_key": trust_new_host_key,
                           "remote_dir": remote_dir}


refuse_empty_values(cli)


@cli.command("machines")
@click.option("--json", "as_json", is_flag=True, help="Print the profiles as JSON.")
@click.pass_obj
def machines_cmd(state: State, as_json: bool) -> None:
    """List machine profiles and their scheduling limits."""
    from summit_jobs.profiles import config, machines
    rows, submit_words = [], {}
    for name in machines.available():
        p = config.profile(state.config, name)
        submit_words[name] = schedulers.for_profile(p).submit_words(p.scheduler.submit_mode)
        rows.append({
            "name": name, "description": p.description, "gpus_per_node": p.node.gpus,
            "ranks_per_node": p.node.slots, "cores_per_node": p.node.cores, "max_nodes": p.max_nodes,
            "queues": {q: {"default": v.default, "max_walltime": v.max_walltime, "max_nodes": v.max_nodes,
                           "allowed_bins": list(v.allowed_bins) if v.allowed_bins else None}
                       for q, v in p.queues.items()},
            "walltime_bins": [{"bin": b.bin, "nodes": [b.min_nodes, b.max_nodes], "max_walltime": b.max_walltime}
                              for b in p.walltime_bins],
            "submit_mode": p.scheduler.submit_mode, "account_flag": p.scheduler.account_flag,
            "nvme_path": p.node.nvme_path, "quota_nodes": p.quota_nodes, "source": p.source,
            "retired": p.retired, "reference": p.reference or None,
        })
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for r in rows:
        mark = " (selected)" if r["name"] == state.machine else ""
        # A retired machine stays listed (its profile is the paper's reference), never mistaken for a live one.
        mark += f" (retired {r['retired']}: reference only)" if r["retired"] else ""
        click.echo(f"{r['name']}{mark}: {r['description']}")
        click.echo(f"  nodes: up to {r['max_nodes']:,}; {r['gpus_per_node']} GPUs, {r['cores_per_node']} cores, "
                   f"{r['ranks_per_node']} ranks per node; NVMe {r['nvme_path'] or 'none'}")
        click.echo(f"  submit: {submit_words[r['name']]}; account flag {r['account_flag']}")
        bins = ", ".join(f"{b['bin']}: {b['nodes'][0]}-{b['nodes'][1]} nodes <= {b['max_walltime']}"
                         for b in r["walltime_bins"])
        click.echo(f"  walltime bins: {bins}")
        qs = []
        for q, v in r["queues"].items():
            extra = [f"<= {v['max_walltime']}"] if v["max_walltime"] else []
            if v["max_nodes"]:
                extra.append(f"<= {v['max_nodes']} nodes")
            if v["allowed_bins"]:
                extra.append("bins " + ",".join(map(str, v["allowed_bins"])))
            qs.append(f"{q}{'*' if v['default'] else ''} ({', '.join(extra)})")
        click.echo(f"  queues (* default): {'; '.join(qs)}")
        click.echo(f"  profile: {r['source']}")
        if r["reference"]:
            click.echo(f"  reference: {r['reference']}")


def _allocation_options() -> list:
    """What the scheduler is asked for: account, run limit, queue, name, data staging and layout."""
    return [
        click.option("--project", "-P", metavar="NAME",
                     help="Project/bank to charge (-P on Summit, -G on Lassen, --account on Slurm). Default: "
                          "$SUMMIT_JOBS_PROJECT or the config file."),
        click.option("--walltime", "-W", metavar="H:MM",
                     help="Run limit as [hours:]minutes. Default: the longest the node-count bin and queue allow."),
        click.option("--queue", "-q", metavar="QUEUE",
                     help="Queue (on Slurm: the partition). Default: the profile's default queue."),
        click.option("--job-name", "-J",
                     help="Job name (letters, digits, '.', '_', '-'). Default: tsm; with --command, the "
                          "program's name (train for --command 'python3 train.py')."),
        click.option("--data", metavar="MANIFEST",
                     help="Dataset manifest on the parallel file system: adds the NVMe staging step."),
        click.option("--stage-policy", type=click.Choice(STAGE_POLICIES), default=STAGE_POLICIES[0],
                     show_default=True, help="With --data: how shards are placed on the nodes' NVMe."),
        *_scheduler_options(),
        click.option("--command", "user_command", metavar="'PROGRAM ARGS'",
                     help="Run this training command on every rank instead of python -m trainer (split like a "
                          "shell would, never run by one). Chains, staging, status and logs apply; see "
                          "docs/user-command.md for the contract (checkpoint and exit 0 on SIGUSR2, a "
                          "COMPLETE file when done)."),
        click.option("--total-steps", type=whole(1, 10 ** 12), metavar="N",
                     help="With --command: the steps your program trains in all, for status to show step/N "
                          "and an ETA from the metrics.jsonl records it writes."),
    ]


def _scheduler_options() -> list:
    """Options only a scheduler gives a meaning to: their help (and --launcher's choices, the directive option's
    flags) are the schedulers' own (summit_jobs.schedulers), so that each says what the option does there."""
    text = schedulers.option_help
    return [
        click.option("--layout", type=click.Choice(LAYOUTS), help=text("layout")),
        click.option("--request", type=click.Choice(REQUESTS), help=text("request")),
        click.option("--launcher", type=click.Choice(schedulers.launcher_names()), help=text("launcher")),
        click.option("--mem", metavar="SIZE", help=text("mem")),
        click.option("--app", metavar="NAME", help=text("app")),
        click.option("--container", metavar="IMAGE", help=text("container")),
        click.option("--qos", metavar="NAME", help=text("qos")),
        click.option(*schedulers.directive_flags(), "bsub_options", multiple=True, metavar="'-OPT VALUE'",
                     help=text("directive")),
    ]


def _declared_option(option: "submit_options.TrainerOption"):
    """The submit option of a trainer option declared in trainer.submit_options: its flag, type, range or
    choices, default and help are the declaration's (a flag is off by default; the rest show their default)."""
    if option.kind is bool:
        return click.option(option.flag, is_flag=True, help=option.submit_help)
    if option.choices:
        kind = click.Choice(option.choices)
    elif option.kind is int:
        kind = click.IntRange(min=option.low, max=option.high)
    elif option.kind is float:
        kind = FiniteFloat(option.low, high=option.high)
    else:
        kind = click.STRING
    return click.option(option.flag, type=kind, default=option.default, show_default=True, help=option.submit_help)


def _trainer_options() -> list:
    """Options the trainer also takes: choice lists and defaults come from trainer.config, written once; those
    declared in trainer.submit_options (and only there) come in their declared order."""
    tc = trainer_config
    return [
        click.option("--epochs", type=whole(1), help="Training epochs. Default: the recipe's (100)."),
        click.option("--clips-per-gpu", type=whole(1), help="Clips per GPU per step. Default: the recipe's (8)."),
        click.option("--lr", type=FiniteFloat(0, low_open=True, high=tc.MAX_LR),
                     help="Learning rate. Default: 0.00125 per 8 clips of global batch."),
        click.option("--warmup-epochs", type=FiniteFloat(0), help="Linear warm-up epochs. Default: the recipe's (5)."),
        click.option("--engine", type=click.Choice(tc.ENGINES), help="Gradient exchange engine."),
        click.option("--arch", help="Backbone (resnet50, resnet18, ...). Default: the profile's recipe."),
        click.option("--num-classes", type=whole(1), help="Classes of the dataset. Default: the recipe's."),
        *(_declared_option(o) for o in submit_options.OPTIONS),
        click.option("--fusion-threshold", type=whole(0, 2 ** 40), metavar="BYTES",
                     help="Horovod tensor-fusion buffer (HOROVOD_FUSION_THRESHOLD). Default: the profile's."),
        click.option("--preset", type=click.Choice(tuple(tc.PRESETS)),
                     help="A named recipe of trainer options, each written into the script; options you give "
                          "win. aavg-paper: the AAVG paper's (Adam, averaging once an epoch, the batch rule "
                          "on a 5-clip validation each epoch up to 576 clips, a 25-clip centre-crop test)."),
    ]


def _chain_options() -> list:
    """How many jobs, the warning before the run limit, and the quota they are held to."""
    return [
        click.option("--chain", type=whole(1), default=1, show_default=True,
                     help="Submit this many jobs, each depending on ended() of the previous and resuming "
                          "from the run's latest checkpoint."),
        click.option("--until-complete", is_flag=True,
                     help="Chain until training is complete: each job that is stopped by the warning signal "
                          "before COMPLETE submits the next one (after ended() of itself), as long as it made "
                          "progress, up to --max-links jobs."),
        click.option("--max-links", type=whole(1), default=20, show_default=True,
                     help="With --until-complete: the most jobs the chain may run."),
        click.option("--warning-minutes", type=whole(1),
                     help="Minutes before the run limit at which USR2 asks the trainer to checkpoint, at most "
                          "half the walltime. Default: the profile's scheduler.warning_minutes, shortened to "
                          "half of a short walltime."),
        click.option("--quota-nodes", type=whole(1), help=settings.QUOTA_RULE),
    ]


def _output_options() -> list:
    """Where the run goes and what is printed or written."""
    return [
        click.option("--env", "env_vars", multiple=True, metavar="NAME=VALUE",
                     help="Override an environment variable of the profile (e.g. HOROVOD_FUSION_THRESHOLD=8388608)."),
        click.option("--run-dir", metavar="DIR", help="Run directory. Default: RUNS_DIR/JOB_NAME-TIMESTAMP."),
        click.option("--runs-dir", metavar="DIR",
                     help="Parent of run directories. Default: the config's runs_dir, else the profile's, "
                          "else ./summit-jobs-runs."),
        click.option("--template-dir", metavar="DIR", type=click.Path(file_okay=False),
                     help="Your own templates; they override the shipped ones file by file."),
        click.option("--dry-run", is_flag=True,
                     help="Print the script (and a plan summary on stderr); submit nothing."),
        click.option("--output", "-o", metavar="FILE", type=click.Path(dir_okay=False),
                     help="With --dry-run: also write the script to FILE (never overwrites without --force)."),
        click.option("--json", "as_json", is_flag=True, help="Print the plan (and script) as JSON."),
        click.option("--force", is_flag=True, help="Allow overwriting an existing --output file or run directory."),
        click.argument("trainer_args", nargs=-1, type=click.UNPROCESSED),
    ]


def shared_job_options(f):
    """The options submit and simulate share: the schema of a job, in --help order."""
    opts = _allocation_options() + _trainer_options() + _chain_options() + _output_options()
    for opt in reversed(opts):
        f = opt(f)
    return f


def _given_on_command_line(names: Tuple[str, ...]) -> Tuple[str, ...]:
    """Which of ``names`` the command line set (not their defaults): those win over a --preset."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return ()
    return tuple(n for n in names if ctx.get_parameter_source(n) not in (None, click.core.ParameterSource.DEFAULT))


def build_job(state: State, kw: dict, *, accum_steps: int = 1, virtual_nodes: Optional[int] = None):
    """Options -> (profile, plan, script) through summit_jobs.planning.job, printing the plan's warnings."""
    from summit_jobs.planning import job as job_mod
    from summit_jobs.planning import plan as plan_mod
    _check_output_options(kw)
    job = job_mod.build_job(state, kw, accum_steps=accum_steps, virtual_nodes=virtual_nodes,
                            explicit=_given_on_command_line(plan_mod.EXPLICIT_FIELDS))
    for line in job.plan.warnings:
        click.echo(f"summit-jobs: warning: {line}", err=True)
    return job.profile, job.plan, job.script


def _check_output_options(kw: dict) -> None:
    """--output writes a dry run's script (a real job's is in its run directory); --force in a dry run only
    concerns --output, so without it there is nothing to overwrite (said, not refused: the same command line
    often runs with and without --dry-run)."""
    if kw.get("output") and not kw.get("dry_run"):
        raise UserError(f"--output {kw['output']} writes the script of a dry run; a submitted job's script is "
                        "saved in its run directory. Add --dry-run, or drop --output.")
    if kw.get("force") and kw.get("dry_run") and not kw.get("output"):
        click.echo("summit-jobs: warning: --force is ignored by a dry run without --output (nothing is written).",
                   err=True)


def write_new_file(path: str, text: str, force: bool) -> None:
    """Write atomically; refuse to replace an existing file unless ``force``."""
    p = Path(path)
    if p.exists() and not force:
        raise UserError(f"{p} already exists; pass --force to overwrite it, or choose another --output.")
    if not p.parent.is_dir():
        raise UserError(f"cannot write {p}: its folder {p.parent} does not exist.")
    tmp = p.with_name(f".{p.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, p)


def emit_dry_run(plan, script: str, kw: dict, extra: Optional[dict] = None) -> None:
    from summit_jobs.planning import plan as plan_mod
    if kw.get("output"):
        write_new_file(kw["output"], script, kw.get("force", False))
    if kw.get("as_json"):
        payload = {"plan": plan.summary(), "script": script}
        if extra:
            payload.update(extra)
        click.echo(json.dumps(payload, indent=2))
    else:
        click.echo(script, nl=False)
        click.echo(plan_mod.describe(plan), err=True)


@cli.command("submit")
@click.option("--nodes", "-n", required=True, metavar="N", help="Number of nodes (whole number).")
@shared_job_options
@click.pass_obj
def submit_cmd(state: State, **kw) -> None:
    """Render, check and submit a training job.

    The job script is checked against the machine's policy (node-count bins,
    walltime, queue rules, quota) before anything is written. Arguments after
    `--` go to the trainer unchanged.

    \b
    Examples:
      summit-jobs --machine summit submit --nodes 256 --project ABC123 --dry-run
      summit-jobs submit --nodes 2 --epochs 3 --chain 2 -- --data /path/to/shards
    """
    from summit_jobs.planning import job as job_mod
    from summit_jobs.runs import submission
    kw = submission.prepare(state, kw)
    profile, plan, script = build_job(state, kw)
    if kw["dry_run"]:
        emit_dry_run(plan, script, kw)
        if plan.until_complete:
            click.echo(job_mod.expected_links(profile, plan, kw.get("data"), os.environ), err=True)
        return
    job_mod.require_data(state, plan, kw)
    if plan.until_complete:
        click.echo(job_mod.expected_links(profile, plan, kw.get("data"), os.environ), err=True)
    submission.submit(state, profile, plan, script, kw)
