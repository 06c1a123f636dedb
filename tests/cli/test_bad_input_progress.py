"""Bad values of SUMMIT_JOBS_PROGRESS_INTERVAL (seconds between progress lines in logs): every long command
refuses them before it starts its work, with the value named, a non-zero exit and no traceback; with --quiet
the variable is not used and so not checked."""
from __future__ import annotations

import pytest

from badinput import assert_refused, run_module

VALUES = ["abc", "0", "-1", "nan", "inf", "1e9", "5s"]
COMMANDS = {
    "synth": lambda tmp: ["synth", str(tmp / "s"), "--videos-per-class", "2"],
    "pack": lambda tmp: ["pack", str(tmp / "none"), str(tmp / "shards")],
    "stage-data": lambda tmp: ["stage-data", "-M", str(tmp / "manifest.json"), "--nodes", "1"],
    "report": lambda tmp: ["report", str(tmp / "run")],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("value", VALUES)
def test_bad_interval_is_refused_before_any_work(cli_env, tmp_path, command, value):
    env = dict(cli_env, SUMMIT_JOBS_PROGRESS_INTERVAL=value)
    proc = run_module("summit_jobs", COMMANDS[command](tmp_path), env)
    assert_refused(proc, [f"SUMMIT_JOBS_PROGRESS_INTERVAL={value!r}", "number of seconds"],
                   prefix="summit-jobs: error:")
    assert proc.returncode == 2
    assert not (tmp_path / "s").exists() and not (tmp_path / "shards").exists()


def test_quiet_does_not_read_the_interval(cli_env, tmp_path):
    env = dict(cli_env, SUMMIT_JOBS_PROGRESS_INTERVAL="abc")
    proc = run_module("summit_jobs", ["synth", str(tmp_path / "s"), "--videos-per-class", "2", "--quiet"], env)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
