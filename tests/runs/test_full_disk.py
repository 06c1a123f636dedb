"""A full disk under the run directory: the job script leaves no half-written exit-code file, and status says
the disk is full instead of an empty reason.

A real tmpfs of 1 MiB holds the run directory; the job's program fills it (as a checkpoint that does not fit
would) and fails. Needs root for the mount (CI runs as root).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from lsf_jobs import cli, lsf_environment, wait_state

#: The program: fills the disk to the last page (one big file, then one-byte files until none fits), then fails
#: as a checkpoint that does not fit would. Every rank of the job runs it, so each writes files of its own:
#: a rank that opened another's file with "wb" would truncate it and give the space back.
FILL = """import os, sys
for i in range(100000):
    try:
        with open(f"fill.{os.getpid()}.{i}", "wb") as fh:
            fh.write(b"x" * ((8 << 20) if i == 0 else 1))
    except OSError as exc:
        if i:
            print(exc, file=sys.stderr)
            sys.exit(1)
"""


@pytest.fixture
def small_disk(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    where = tmp_path / "small"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)]).returncode != 0:
            subprocess.run(["umount", "-l", str(where)])


def test_a_job_that_fills_its_disk_leaves_no_temporary_file_and_status_says_so(tmp_path, small_disk):
    env = lsf_environment(tmp_path)
    run_dir = small_disk / "run"
    (tmp_path / "fill.py").write_text(FILL)
    res = cli(["submit", "--nodes", "1", "--run-dir", str(run_dir), "--json", "--until-complete",
               "--command", f"{sys.executable} {tmp_path / 'fill.py'}"], env)
    assert res.returncode == 0, res.stderr
    (jid,) = json.loads(res.stdout)["job_ids"]
    assert wait_state(jid, env, timeout=60)["STAT"] in ("EXIT", "DONE")
    left = sorted(p.name for p in run_dir.iterdir())
    assert not [n for n in left if n.startswith(".exitcode.")], left
    assert f"exitcode.{jid}" not in left, left
    rows = json.loads(cli(["status", "--json", str(run_dir)], env).stdout)
    (row,) = rows
    assert row["state"] in ("failed", "unknown") and "no space left on" in row["reason"], row
    assert row["chain"].startswith("stopped: ") and "no space left on" in row["chain"], row
    table = cli(["status", str(run_dir)], env)
    assert "no space left on" in table.stdout, table.stdout
