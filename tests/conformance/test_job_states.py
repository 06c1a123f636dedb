"""The interface's job states: one set of words for every scheduler, each scheduler's own word kept.

Why: status, cancel, the demo and --watch decide on these words (a job still open, an end, how it ended); a
word that leaks from one scheduler (LSF's EXIT, Slurm's COMPLETED) would make a third scheduler imitate it.
"""
from __future__ import annotations

import pytest

from summit_jobs import schedulers
from summit_jobs.runs import lifecycle, statusview
from summit_jobs.schedulers import JobStatus
from summit_jobs.schedulers.lsf import client as lsf
from summit_jobs.schedulers.slurm import client as slurm


def test_the_states_are_the_interfaces_own_words():
    assert schedulers.STATES == ("pending", "held", "running", "suspended", "done", "failed", "cancelled",
                                 "timed_out", "node_failure", "preempted", "unknown")
    assert set(schedulers.OPEN).isdisjoint(schedulers.FINISHED)
    for word in set(lsf.STATE_MAP) | set(slurm.STATE_MAP):
        assert word not in schedulers.STATES, word


@pytest.mark.parametrize("reason,state", [
    ("TERM_OWNER: job killed by owner", "cancelled"), ("TERM_ADMIN: job killed by root", "cancelled"),
    ("TERM_RUNLIMIT: job killed after reaching LSF run time limit", "timed_out"),
    ("TERM_PREEMPT: job killed after preemption", "preempted"),
    ("TERM_MEMLIMIT: job killed after reaching LSF memory usage limit", "failed"), ("", "failed")])
def test_an_lsf_exit_is_placed_by_its_termination_reason(reason, state):
    text = ('{"COMMAND":"bjobs","JOBS":1,"RECORDS":[{"JOBID":"7","STAT":"EXIT","EXIT_CODE":"140",'
            f'"EXIT_REASON":"{reason}"}}]}}')
    found, _ = lsf.parse_bjobs_json(text)
    assert (found["7"].state, found["7"].native_state, found["7"].finished) == (state, "EXIT", True)
    assert found["7"].reason == reason


@pytest.mark.parametrize("code,said,state", [
    (0, "timed_out", "done"), (0, "failed", "done"), (3, "done", "failed"), (140, "timed_out", "timed_out"),
    (1, "node_failure", "node_failure"), (1, "preempted", "preempted"), (1, "running", "failed")])
def test_the_exit_code_file_decides_an_end_and_the_scheduler_says_how(code, said, state):
    assert lifecycle.ended_state(code, said) == state


def test_a_row_keeps_the_schedulers_word_beside_the_interfaces():
    st = JobStatus("9", "timed_out", exit_code=140, native_state="TIMEOUT", reason="TimeLimit")
    row = lifecycle.job_row({"name": "r", "run_dir": "/r"}, "9", "here", st, 140, None, "squeue")
    assert (row["state"], row["native_state"], row["exit_code"]) == ("timed_out", "TIMEOUT", 140)
    assert statusview.state_text(row) == "timed out"
    assert statusview.state_text(dict(row, state="failed")) == "failed 140"


def test_a_job_the_scheduler_says_was_cancelled_is_cancelled_whatever_its_exit_code():
    """Slurm's CANCELLED gives no reason: the row says whose word it is."""
    st = JobStatus("9", "cancelled", exit_code=0, native_state="CANCELLED")
    row = lifecycle.job_row({"name": "r", "run_dir": "/r"}, "9", "here", st, 0, None, "squeue")
    assert row["state"] == "done"           # the trainer saved and exited 0 on the cancel's TERM ...
    lifecycle.mark_cancelled(row, st, {"name": "r", "run_dir": "/r"})
    assert (row["state"], row["cancelled"]) == ("cancelled", True)     # ... and the job is still cancelled
    assert row["reason"] == "CANCELLED: the scheduler says CANCELLED"


def test_a_job_still_open_is_never_marked_cancelled():
    st = JobStatus("9", "running", native_state="RUN")
    row = lifecycle.job_row({"name": "r", "run_dir": "/r", "cancelled": ["9"]}, "9", "here", st, None, None, "bjobs")
    lifecycle.mark_cancelled(row, st, {"name": "r", "run_dir": "/r", "cancelled": ["9"]})
    assert (row["state"], row["cancelled"]) == ("running", False)


@pytest.mark.parametrize("native", ["UNKWN", "ZOMBI", "REVOKED", "LEVITATING"])
def test_an_unknown_job_the_scheduler_still_lists_has_not_ended(native):
    """Its host may be unreachable while it still runs and writes into its run directory: status --watch,
    logs --follow, resume and the full-disk look all wait for it."""
    row = {"state": "unknown", "native_state": native}
    assert not lifecycle.ended(row)
    assert lifecycle.ended({"state": "unknown", "native_state": None})       # gone from the scheduler's list
    assert all(lifecycle.ended({"state": s, "native_state": "X"}) for s in schedulers.FINISHED)
    assert not any(lifecycle.ended({"state": s, "native_state": "X"}) for s in schedulers.OPEN)


def test_a_documented_word_that_leaves_the_state_unknown_says_why():
    text = '{"COMMAND":"bjobs","JOBS":1,"RECORDS":[{"JOBID":"7","STAT":"UNKWN"}]}'
    found, _ = lsf.parse_bjobs_json(text)
    assert (found["7"].state, found["7"].native_state) == ("unknown", "UNKWN")
    assert "host cannot be reached" in found["7"].reason
    st = slurm.status(slurm.SlurmJob(job_id="5", state="REVOKED", reason="None"))
    assert (st.state, st.native_state) == ("unknown", "REVOKED")
    assert "another cluster of the federation" in st.reason and "does not know" not in st.reason


@pytest.mark.parametrize("native", ["ZOMBI", "REVOKED"])
def test_an_exit_code_file_ends_a_job_the_scheduler_lists_as_unknown_for_good(native):
    """Slurm's sacct keeps a federation's REVOKED sibling so for ever: its exit-code file says how it ended."""
    st = JobStatus("9", "unknown", native_state=native)
    for code, state in ((0, "done"), (3, "failed")):
        row = lifecycle.job_row({"name": "r", "run_dir": "/r"}, "9", "here", st, code, None, "squeue")
        assert (row["state"], row["exit_code"], row["source"]) == (state, code, "exit-code file"), row
        assert lifecycle.ended(row)
    row = lifecycle.job_row({"name": "r", "run_dir": "/r"}, "9", "here", st, None, None, "squeue")
    assert row["state"] == "unknown" and not lifecycle.ended(row)


def test_a_zombi_with_an_exit_reason_keeps_both():
    text = ('{"COMMAND":"bjobs","JOBS":1,"RECORDS":[{"JOBID":"7","STAT":"ZOMBI",'
            '"EXIT_REASON":"TERM_OWNER: job killed by owner"}]}')
    found, _ = lsf.parse_bjobs_json(text)
    assert "killed while its host could not be reached" in found["7"].reason and "TERM_OWNER" in found["7"].reason
