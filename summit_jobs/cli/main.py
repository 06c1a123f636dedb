"""The ``summit-jobs`` entry point: the command group, with every command registered by name.

Why by name: importing a command's module costs its imports (Jinja2, PyYAML,
paramiko, the plotting stack), and `summit-jobs --help` or any one command
should not pay for all of them. Each line below names a command, the
``module:attribute`` of its click command and the one-line help that
`summit-jobs --help` lists; the module is imported only when the command runs
(summit_jobs.cli.lazygroup). tests/project/test_cli_startup_imports.py checks every line
against the command itself.

To add a command: define it in its own module with ``@cli.command("NAME")``
(``from summit_jobs.cli.submit import cli``) and add one line here:
``register("NAME", "summit_jobs.MODULE:FUNCTION", "The first sentence of its docstring.")``.
``submit`` and ``machines`` live in summit_jobs/cli/submit.py itself. A scheduler's own command group
(``summit-jobs lsf``) is registered from the scheduler's ``command_group`` line, below the others.
"""
from __future__ import annotations

import functools

import click

from summit_jobs import schedulers
from summit_jobs.cli import submit as cli

register = cli.cli.register_lazy
register("cancel", "summit_jobs.cli.lifecycle:cancel_cmd", "Kill a run's jobs (all links of a chain) or one job.")
register("compare", "summit_jobs.cli.compare:compare_cmd",
         "Whether two runs trained the same: e.g. a real run and its `simulate` twin.")
register("config", "summit_jobs.cli.config:config_cmd", "Show every setting with its value and where it comes from.")
register("doctor", "summit_jobs.cli.doctor:doctor_cmd",
         "Check a site before submitting: the scheduler (its commands, version, queues, account), folders, the "
         "trainer's environment, SSH.")
register("fuse", "summit_jobs.cli.fuse:fuse_cmd",
         "Late fusion of two or more streams: e.g. an RGB run and an optical-flow run.")
register("logs", "summit_jobs.cli.lifecycle:logs_cmd",
         "Print a run's job output (the -o and -e files), locally or over SSH.")
register("pack", "summit_jobs.cli.data:pack_cmd", "Pack a video dataset into tar shards + manifest.json in OUT.")
register("report", "summit_jobs.cli.report:report_cmd",
         "Plots and a summary table of a run: accuracy, loss, LR, throughput, chain.")
register("resume", "summit_jobs.cli.lifecycle:resume_cmd",
         "Queue a run's job script again: its next job resumes from the newest checkpoint.")
register("scaling", "summit_jobs.cli.simulate:scaling_cmd",
         "Project time-to-train and scaling efficiency over node counts.")
register("simulate", "summit_jobs.cli.simulate:simulate_cmd",
         "Run a V-node optimisation on fewer nodes by exact gradient accumulation.")
register("stage-data", "summit_jobs.cli.data:stage_data_cmd",
         "Stage a packed dataset: archive -> parallel file system -> node-local NVMe.")
register("status", "summit_jobs.cli.lifecycle:status_cmd", "Show the state of a run's jobs (or of the recent runs).")
register("synth", "summit_jobs.cli.data:synth_cmd", "Write a small synthetic Kinetics-format dataset into OUT.")
for group in schedulers.command_groups():
    register(*group)


def _refusing_unknown_machine(command: click.Command) -> click.Command:
    """``machines`` lists every profile and marks the selected one; a --machine (or $SUMMIT_JOBS_MACHINE, or
    config ``machine``) that names no profile was marked nowhere and went unsaid. Loading the selected profile
    first refuses it as every other command does, naming the known machines (profiles.machines)."""
    listing = command.callback

    @functools.wraps(listing)
    def callback(*args, **kwargs):
        state = click.get_current_context().find_object(cli.State)
        if state is not None:
            state.profile   # noqa: B018 - loading it is the check: a UserError naming the known machines
        return listing(*args, **kwargs)

    command.callback = callback
    return command


_refusing_unknown_machine(cli.machines_cmd)


def main() -> None:
    cli.cli(prog_name="summit-jobs")


if __name__ == "__main__":
    main()
