"""The ``summit-jobs`` entry point: the command group with every command module registered.

Why a module of its own: the command modules (cli_compare, cli_data,
cli_fuse, cli_lifecycle, cli_report, cli_simulate) add their commands to the group
defined in cli.py, so cli.py must not import them back; this module imports
all of them, in one direction, and runs the group.
"""
from __future__ import annotations

from summit_jobs import (cli, cli_compare, cli_data, cli_fuse, cli_lifecycle, cli_report,  # noqa: F401 - registers
                         cli_simulate)


def main() -> None:
    cli.cli(prog_name="summit-jobs")


if __name__ == "__main__":
    main()
