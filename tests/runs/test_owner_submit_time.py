"""A job under one of a run's ids that was submitted before the run existed is another job (ids are reused):
the submit times the schedulers print are read, and status and cancel compare them with the run's record.

The times come from real captures: tests/data/lsf/bjobs_json_documented_states.txt (LSF's ``Nov 10 12:01``,
no year) and tests/data/slurm/sacct_p_format.txt (sacct's ``2026-11-27T21:07:11``), each with its .source.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from summit_jobs.hosts.host import LocalHost
from summit_jobs.runs import lifecycle
from lsf_jobs import PROGRAM, cli, lsf_environment, wait_state, write_template

DATA = Path(__file__).resolve().parents[1] / "data"


def _epoch(text: str) -> float:
    return time.mktime(time.strptime(text, "%Y-%m-%d %H:%M:%S"))


def test_lsfs_submit_time_of_a_real_capture_is_read_in_the_year_that_is_not_ahead():
    record = json.loads((DATA / "lsf" / "bjobs_json_documented_states.txt").read_text())["RECORDS"][0]
    assert record["SUBMIT_TIME"] == "Nov 10 12:01"
    # Asked on Dec 7 2026: this year's Nov 10. Asked on Jan 5 2027: still Nov 10 2026, not a date ahead.
    assert lifecycle.scheduler_time(record["SUBMIT_TIME"], _epoch("2026-12-07 12:00:00")) == \
        _epoch("2026-11-10 12:01:00")
    assert lifecycle.scheduler_time(record["SUBMIT_TIME"], _epoch("2027-01-05 08:00:00")) == \
        _epoch("2026-11-10 12:01:00")
    # LSB_DISPLAY_YEAR=Y adds the year; seconds and a trailing mark letter are read too
    assert lifecycle.scheduler_time("Nov 10 12:01 2025", _epoch("2026-12-07 12:00:00")) == \
        _epoch("2025-11-10 12:01:00")
    assert lifecycle.scheduler_time("Nov 10 12:01:07 L", _epoch("2026-12-07 12:00:00")) == \
        _epoch("2026-11-10 12:01:07")


def test_sacct_submit_time_of_a_real_capture_is_read():
    first = (DATA / "slurm" / "sacct_p_format.txt").read_text().splitlines()[0].split("|")
    assert first[5] == "2026-11-27T21:07:11"
    assert lifecycle.scheduler_time(first[5], time.time()) == _epoch("2026-11-27 21:07:11")


@pytest.mark.parametrize("text", ["", "-", "Unknown", "N/A", "None", "Nov 10", "Xyz 10 12:01", "12:01",
                                  "2026-11-27 21:07:11", "Nov 10 25:99:99 2026x", "Nov 10 12:01 99999"])
def test_what_is_not_a_time_is_no_time(text):
    assert lifecycle.scheduler_time(text, time.time()) is None


def _record(run_dir: str, created: str, **extra) -> dict:
    return dict({"run_dir": run_dir, "job_name": "tsm", "created": created}, **extra)


def test_a_job_submitted_before_the_run_was_created_is_foreign_even_from_the_runs_folder(tmp_path):
    host, run_dir = LocalHost(), str(tmp_path)
    created = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(_epoch("2026-11-27 22:00:00")))
    old = lifecycle.foreign(host, _record(run_dir, created), "1", "tsm", run_dir, "Slurm", "2026-11-27T21:07:11")
    assert old == (f"Slurm's job 1 (tsm) was submitted 2026-11-27T21:07:11, before this run was created "
                   f"({created})")
    # the run's own job: submitted after the record (or a minute-precision LSF time just before it)
    assert lifecycle.foreign(host, _record(run_dir, created), "1", "tsm", run_dir, "Slurm",
                             "2026-11-27T22:00:03") is None
    assert lifecycle.foreign(host, _record(run_dir, created), "1", "tsm", run_dir, "LSF", "Nov 27 21:59") is None
    # a run submitted again into its folder (--force) keeps its first jobs: they count from its first record
    again = _record(run_dir, "2026-11-28T09:00:00+0000", first_created=created)
    assert lifecycle.foreign(host, again, "1", "tsm", run_dir, "Slurm", "2026-11-27T22:00:03") is None
    # no time from the scheduler or the record: the folder decides alone
    assert lifecycle.foreign(host, _record(run_dir, ""), "1", "tsm", run_dir, "LSF", "Nov 27 21:59") is None
    assert lifecycle.foreign(host, _record(run_dir, created), "1", "tsm", run_dir, "LSF", "-") is None


def test_status_and_cancel_of_the_embedded_lsf_see_a_job_older_than_the_run(tmp_path):
    """A real run whose record says it was created a day after its job was submitted: its id now names a job
    from before the run (what a scheduler that reuses ids shows). Status shows the link as lost, cancel
    refuses to kill it."""
    env = dict(lsf_environment(tmp_path), PROG_SLEEP="0")
    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    run_dir = tmp_path / "runs" / "late"
    res = cli(["submit", "--nodes", "1", "--template-dir", str(write_template(tmp_path / "templates", prog)),
               "--run-dir", str(run_dir), "--job-name", "late", "--json"], env)
    assert res.returncode == 0, res.stderr
    jid = str(json.loads(res.stdout)["job_ids"][0])
    assert wait_state(jid, env, timeout=60)["STAT"] == "DONE"
    rows = json.loads(cli(["status", "--json", str(run_dir)], env).stdout)
    assert [(r["job_id"], r["state"], r["lost"]) for r in rows] == [(jid, "done", False)], rows

    record = json.loads((run_dir / "run.json").read_text())
    record["created"] = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(time.time() + 86400))
    (run_dir / "run.json").write_text(json.dumps(record))
    (run_dir / f"exitcode.{jid}").unlink(missing_ok=True)     # nothing of the run tells how its link ended
    rows = json.loads(cli(["status", "--json", str(run_dir)], env).stdout)
    assert len(rows) == 1 and rows[0]["lost"] and rows[0]["state"] == "unknown", rows
    assert f"job {jid} is now another job; this run's link was lost" in rows[0]["reason"], rows
    assert "before this run was created" in rows[0]["reason"], rows

    res = cli(["cancel", str(run_dir)], env)
    assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr
    assert f"job {jid}: NOT killed" in res.stderr and "before this run was created" in res.stderr, res.stderr
