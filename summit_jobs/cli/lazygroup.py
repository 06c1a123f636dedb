"""A click group whose commands are imported only when they run (click's documented lazy-loading pattern).

Why: each command module brings its own imports (Jinja2, PyYAML, paramiko,
the plotting stack, the data packers); `summit-jobs --help` and any one
command should pay only for what they use. A command is registered by name
with the ``"module:attribute"`` of its click command and the one-line help
that the group's command list shows, so listing the commands (``--help``,
shell completion of command names) imports none of their modules. The help
text is checked against the command's own docstring by
tests/project/test_cli_startup_imports.py, so the two cannot drift apart.
"""
from __future__ import annotations

import importlib
from typing import Dict, List, Optional, Tuple

import click


class LazyGroup(click.Group):
    """``click.Group`` plus ``register_lazy(name, "module:attr", short_help)``."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        #: name -> ("module:attribute", the one-line help the command list shows).
        self.lazy_subcommands: Dict[str, Tuple[str, str]] = {}
        self._listing = False

    def register_lazy(self, name: str, target: str, short_help: str) -> None:
        """Register command ``name``, defined as ``attribute`` in ``module``, without importing it."""
        module, sep, attr = target.partition(":")
        if not sep or not module or not attr:
            raise ValueError(f"lazy command {name!r}: target {target!r} is not 'module:attribute'")
        if name in self.lazy_subcommands:
            raise ValueError(f"command {name!r} is registered twice")
        self.lazy_subcommands[name] = (target, short_help)

    def list_commands(self, ctx: Optional[click.Context]) -> List[str]:
        return sorted(set(self.commands) | set(self.lazy_subcommands))

    def get_command(self, ctx: Optional[click.Context], cmd_name: str) -> Optional[click.Command]:
        cmd = self.commands.get(cmd_name)
        if cmd is not None or cmd_name not in self.lazy_subcommands:
            return cmd
        if self._listing:
            return self._placeholder(cmd_name)
        return self.load(cmd_name)

    def load(self, name: str) -> click.Command:
        """Import the command's module and return its command (which the module's decorator may already add)."""
        target = self.lazy_subcommands[name][0]
        module, _, attr = target.partition(":")
        cmd = getattr(importlib.import_module(module), attr)
        if not isinstance(cmd, click.Command):
            raise TypeError(f"lazy command {name!r}: {target} is not a click command")
        self.commands[name] = cmd
        return cmd

    def _placeholder(self, name: str) -> click.Command:
        """A stand-in that only lists: its help is the registered line, which click shortens as it would the real."""
        return click.Command(name, help=self.lazy_subcommands[name][1])

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's command list, made from the registered lines for commands not imported yet."""
        self._listing = True
        try:
            super().format_commands(ctx, formatter)
        finally:
            self._listing = False

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list:
        """Completing a command name lists the registered lines; completing inside a command imports it."""
        self._listing = True
        try:
            return super().shell_complete(ctx, incomplete)
        finally:
            self._listing = False
