"""status of a user's own chain, from the job script's link events: each link's records are the ones after
its ``link_start`` offset in metrics.jsonl (a user's records carry no job id and maybe no time), a link that has
just started shows no step until it writes one, the rate never spans the wait between two links, and each
finished link says how it ended from its ``link_end`` event.

The inputs are what a 3-link chain leaves (the file's bytes built record by record, so the offsets are the
real ones); the real subprocess path is covered by the launcher chains (tests/user_chain_checks.py).
"""
from __future__ import annotations

import json
from typing import Dict, List, Optional, Tuple

from summit_jobs.runs import report, statusview
from trainer import rundir

T0 = 1_760_000_000.0


class Run:
    """A run directory's metrics.jsonl bytes and events, written as a chain of a user's program writes them."""

    def __init__(self) -> None:
        self.data = b""
        self.events: List[Dict] = []
        self.now = T0

    def start(self, job: str, checkpoint: str = "") -> None:
        self.now += 30.0                       # the queue wait between two links
        self.events.append({"event": "link_start", "by": "script", "job": job, "time": self.now,
                            "metrics_offset": len(self.data), "checkpoint": checkpoint})

    def steps(self, first: int, last: int, timed: bool = True) -> None:
        for step in range(first, last + 1):
            self.now += 0.5
            rec = {"kind": "train", "step": step, "loss": 1.0 / step}
            if timed:
                rec["time"] = self.now
            self.data += (json.dumps(rec) + "\n").encode()

    def end(self, job: str, code: int = 0, warned: bool = True, cancelled: bool = False, complete: bool = False,
            start: str = "", checkpoint: str = "") -> None:
        self.now += 1.0
        self.events.append({"event": "link_end", "by": "script", "job": job, "time": self.now, "exit": code,
                            "warned": warned, "cancelled": cancelled, "complete": complete,
                            "start_checkpoint": start, "checkpoint": checkpoint})

    def files(self, ids: List[str], complete: bool = False, data: Optional[bytes] = None) -> statusview.RunFiles:
        records, offsets = rundir.json_records_at(self.data if data is None else data, statusview.keep_record)
        return statusview.RunFiles(records=records, record_offsets=offsets, events=list(self.events),
                                   plan={"until_complete": True, "max_links": 20, "user_command": True,
                                         "total_steps": 30},
                                   chain_ids=list(ids), complete=complete,
                                   checkpoints=statusview.checkpoint_steps(
                                       [e["checkpoint"] for e in self.events if e.get("checkpoint")]))


def ckpt(step: int) -> str:
    return f"ckpt-{step:09d}.pt"


def rows_for(states: List[Tuple[str, str]], files: statusview.RunFiles) -> List[Dict]:
    rows = [{"run": "r", "job_id": j, "state": s, "exit_code": 0 if s == "done" else None,
             "source": "exit-code file", "native_state": None, "reason": ""} for j, s in states]
    statusview.add_facts(rows, files)
    return rows


def two_links_and_a_third_starting(timed: bool = True) -> Run:
    run = Run()
    run.start("1")
    run.steps(1, 10, timed)
    run.end("1", checkpoint=ckpt(10))
    run.start("2", ckpt(10))
    run.steps(11, 20, timed)
    run.end("2", start=ckpt(10), checkpoint=ckpt(20))
    run.start("3", ckpt(20))
    return run


def test_each_link_shows_its_own_step_and_a_new_link_none_until_it_has_one():
    for timed in (True, False):
        run = two_links_and_a_third_starting(timed)
        rows = rows_for([("1", "done"), ("2", "done"), ("3", "running")], run.files(["1", "2", "3"]))
        assert [r["step"] for r in rows] == [10, 20, None], rows
        assert rows[2]["last_event"]["text"] == "started from the checkpoint at step 20", rows[2]
        assert rows[2]["eta_s"] is None
        run.steps(21, 22, timed)
        rows = rows_for([("1", "done"), ("2", "done"), ("3", "running")], run.files(["1", "2", "3"]))
        assert [r["step"] for r in rows] == [10, 20, 22], rows


def test_the_rate_and_eta_use_only_time_inside_the_link():
    run = two_links_and_a_third_starting()
    run.steps(21, 24)
    rows = rows_for([("1", "done"), ("2", "done"), ("3", "running")], run.files(["1", "2", "3"]))
    assert rows[2]["steps_per_s"] == 2.0, rows[2]          # 0.5 s a step; the 31 s between links not counted
    assert rows[2]["eta_s"] == 3.0, rows[2]                # 6 steps left of 30
    assert rows[0]["steps_per_s"] == 2.0 and rows[1]["steps_per_s"] == 2.0


def test_each_finished_link_says_how_it_ended():
    run = two_links_and_a_third_starting()
    run.steps(21, 30)
    run.end("3", warned=False, complete=True, start=ckpt(20), checkpoint=ckpt(30))
    rows = rows_for([("1", "done"), ("2", "done"), ("3", "done")], run.files(["1", "2", "3"], complete=True))
    texts = [r["last_event"]["text"] for r in rows]
    assert texts == ["stopped by the warning: checkpoint at step 10", "stopped by the warning: checkpoint at step 20",
                     "training complete (checkpoint at step 30)"], texts
    assert rows[2]["last_event"]["time"] == run.events[-1]["time"]    # the script's own time, to the millisecond


def test_a_cancel_a_run_limit_and_a_failure_are_told_apart():
    def ended(native: str, **kw) -> str:
        run = Run()
        run.start("1")
        run.steps(1, 3)
        run.end("1", **kw)
        rows = [{"run": "r", "job_id": "1", "state": "failed", "exit_code": 130, "source": "exit-code file",
                 "native_state": native, "reason": ""}]
        statusview.add_facts(rows, run.files(["1"]))
        return rows[0]["last_event"]["text"]

    assert ended("TERM_OWNER", code=130, warned=False, cancelled=True) == "cancelled (exit 130): no new checkpoint"
    assert ended("CANCELLED", code=0, warned=False, cancelled=True, checkpoint=ckpt(3)) == \
        "cancelled (exit 0): checkpoint at step 3"
    assert ended("TERM_RUNLIMIT", code=140, warned=True, cancelled=True).startswith("run limit reached (TERM_RUNLIMIT")
    assert ended("TIMEOUT", code=0, warned=True, cancelled=True).startswith("run limit reached (TIMEOUT")
    assert ended("EXIT", code=3, warned=False) == "failed with exit code 3"
    assert ended("EXIT", code=1, warned=True) == "warned, then failed with exit code 1: no new checkpoint"
    assert ended("DONE", code=0, warned=False) == "ended with exit code 0 before any warning, without COMPLETE"


def test_records_before_the_first_link_event_belong_to_no_link():
    """A run begun before the job script wrote link events: its old records are not credited to a new link."""
    run = Run()
    run.steps(1, 5)
    run.start("2", ckpt(5))
    rows = rows_for([("2", "running")], run.files(["2"]))
    assert rows[0]["step"] is None, rows


def test_an_end_without_events_is_aged_by_the_exit_code_files_time():
    rows = [{"run": "r", "job_id": "1", "state": "failed", "exit_code": 137, "source": "exit-code file",
             "native_state": "EXIT", "reason": "", "finish_time": "Dec  7 04:14", "ended_at": T0 + 28.0}]
    statusview.add_facts(rows, statusview.RunFiles(plan={"user_command": True}, chain_ids=["1"]))
    assert rows[0]["last_event"]["time"] == T0 + 28.0
    assert statusview.event_cell(rows[0], T0 + 30.0).startswith("2s ago: ended with exit code 137")


def test_report_counts_the_launches_of_a_users_chain_from_its_link_events(tmp_path):
    run = two_links_and_a_third_starting()
    run.steps(21, 30)
    run.end("3", warned=False, complete=True, start=ckpt(20), checkpoint=ckpt(30))
    (tmp_path / rundir.METRICS).write_bytes(run.data)
    (tmp_path / rundir.EVENTS).write_text("".join(json.dumps(e) + "\n" for e in run.events))
    (tmp_path / rundir.PLAN).write_text(json.dumps({"user_command": True, "nodes": 1, "ranks": 2}))
    for job in ("1", "2", "3"):
        (tmp_path / rundir.exitcode_name(job)).write_text("0\n")
    from summit_jobs.hosts.host import LocalHost
    data = report.load(LocalHost(), str(tmp_path))
    summary = report.summarize(data)
    assert summary["launches"] == 3 and summary["launches_estimated"] is False, summary
    assert summary["steps_per_s_median"] == 2.0, summary
    assert [j["ended"] for j in summary["jobs"]] == ["stopped by the warning: checkpoint at step 10",
                                                     "stopped by the warning: checkpoint at step 20",
                                                     "training complete (checkpoint at step 30)"], summary["jobs"]
    assert [j["resumed_from_step"] for j in summary["jobs"]] == [None, 10, 20]
    rows = dict(report._chain_rows(summary) + report._figure_rows(summary))
    assert rows["launches of your command"].startswith("3 ("), rows
    assert rows["throughput (median)"] == "2.0 steps/s", rows


def test_lsfs_run_limit_reason_names_the_end_of_a_signalled_link():
    run = Run()
    run.start("1")
    run.steps(1, 3)
    run.end("1", code=140, warned=True, cancelled=True)
    rows = [{"run": "r", "job_id": "1", "state": "timed_out", "exit_code": 140, "source": "exit-code file",
             "native_state": "EXIT", "reason": "TERM_RUNLIMIT: job killed after reaching LSF run time limit"}]
    statusview.add_facts(rows, run.files(["1"]))
    assert rows[0]["last_event"]["text"].startswith("run limit reached (TERM_RUNLIMIT; exit 140)"), rows
