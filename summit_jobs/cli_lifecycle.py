"""CLI commands of the job lifecycle: status, cancel, logs (submit lives in cli.py)."""
from summit_jobs.cli import State, cli  # noqa: F401
