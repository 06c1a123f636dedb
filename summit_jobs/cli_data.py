"""CLI commands of the data path: synth, pack, stage-data."""
from summit_jobs.cli import State, cli  # noqa: F401
