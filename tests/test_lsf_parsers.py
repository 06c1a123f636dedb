"""LSF output parsers against captured outputs (written from IBM's documented formats), and
against what the embedded LSF prints, so both sides agree on one grammar."""
from __future__ import annotations

from pathlib import Path

import pytest

from summit_jobs import lsf

DATA = Path(__file__).parent / "data" / "lsf"


def read(name: str) -> str:
    return (DATA / name).read_text()


def test_bsub_default_queue_form():
    assert lsf.parse_bsub_output(read("bsub_default_queue.txt")) == ("779469", "batch")


def test_bsub_explicit_queue_and_long_id():
    assert lsf.parse_bsub_output(read("bsub_explicit_queue_long_id.txt")) == ("12345678", "debug")


def test_bsub_with_banner_line():
    assert lsf.parse_bsub_output(read("bsub_lassen_pbatch.txt")) == ("4120", "pbatch")


def test_bsub_refusal_keeps_raw_output():
    with pytest.raises(lsf.LsfOutputError) as exc:
        lsf.parse_bsub_output(read("bsub_rejected.txt"))
    assert "Project not specified. Job not submitted." in str(exc.value)


def test_bjobs_json_states_codes_and_not_found():
    found, missing = lsf.parse_bjobs_json(read("bjobs_json.txt"))
    assert missing == ["123"]
    assert found["779469"].state == "DONE" and found["779469"].exit_code == 0
    long = found["12345678"]
    assert long.state == "EXIT" and long.exit_code == 140 and long.reason.startswith("TERM_RUNLIMIT")
    pend = found["12345679"]
    assert pend.state == "PEND" and "dependency" in pend.reason and pend.exit_code is None
    assert not pend.finished and long.finished


def test_bjobs_json_garbage_is_an_error_with_the_text():
    with pytest.raises(lsf.LsfOutputError) as exc:
        lsf.parse_bjobs_json("bjobs: command not found")
    assert "command not found" in str(exc.value)


def test_bjobs_plain_pending_row_without_exec_host_and_long_id():
    found, missing = lsf.parse_bjobs_plain(read("bjobs_plain.txt"))
    assert set(found) == {"779469", "12345678", "779470"}
    assert missing == ["123"]
    assert found["12345678"].state == "PEND" and found["12345678"].queue == "debug"
    assert found["12345678"].name == "tsm-256" and found["12345678"].exec_host == ""
    assert found["779469"].exec_host == "batch2" and found["779469"].submit_time == "Nov 10 12:01"


def test_bjobs_plain_truncated_id_is_refused():
    with pytest.raises(lsf.LsfOutputError, match="truncated"):
        lsf.parse_bjobs_plain(read("bjobs_plain_truncated.txt"))


def test_bkill_outcomes():
    assert lsf.bkill_outcome(read("bkill_mixed.txt")) == {
        "779469": "terminating", "779470": "finished", "5": "not found"}


def test_command_builders():
    assert lsf.bsub_argv("job.lsf", "file") == (["bsub", "job.lsf"], False)
    assert lsf.bsub_argv("job.lsf", "stdin", depends_on="12345678") == (["bsub", "-w", "ended(12345678)"], True)
    argv = lsf.bjobs_argv(["1", "22"])
    assert argv[:2] == ["bjobs", "-a"] and argv[-3:] == ["-json", "1", "22"]
    with pytest.raises(ValueError):
        lsf.bjobs_argv(["1; rm -rf /"])
    with pytest.raises(ValueError):
        lsf.bsub_argv("job.lsf", "file", depends_on="$(x)")
    assert lsf.batches([str(i) for i in range(450)], 200)[-1] == [str(i) for i in range(400, 450)]


def test_embedded_bjobs_output_round_trips(tmp_path, monkeypatch, capsys):
    """What the embedded bjobs prints (-json and plain) is read back by the same parsers."""
    import json
    import time

    from summit_jobs.embedded import bjobs, state
    monkeypatch.setenv("SUMMIT_JOBS_LSF_HOME", str(tmp_path))
    home = state.home()
    base = {"queue": "batch", "name": "tsm", "user": "alice", "from_host": "vm", "cores": 2,
            "submit_time": time.time(), "dependency": None, "project": None, "pend_reason": None,
            "supervisor_pid": None}
    jdir = state.job_dir(home, 12345678)
    jdir.mkdir(parents=True)
    state.save_job(home, {**base, "id": 12345678, "state": "PEND", "hosts": [],
                          "pend_reason": "Not enough virtual nodes free", "submit_time": time.time() + 60})
    state.job_dir(home, 7).mkdir(parents=True)
    state.save_job(home, {**base, "id": 7, "state": "EXIT", "hosts": ["vnode01"], "exit_code": 143,
                          "start_time": time.time(), "finish_time": time.time(),
                          "exit_reason": "TERM_RUNLIMIT: job killed after reaching LSF run time limit"})
    assert bjobs.main(["-a", "-o", " ".join(lsf.STATUS_FIELDS), "-json", "12345678", "7", "9"]) == 0
    found, missing = lsf.parse_bjobs_json(capsys.readouterr().out)
    assert missing == ["9"]
    assert found["12345678"].state == "PEND" and "virtual nodes" in found["12345678"].reason
    assert found["7"].exit_code == 143 and found["7"].reason.startswith("TERM_RUNLIMIT")
    bjobs.main(["-a"])
    found, _ = lsf.parse_bjobs_plain(capsys.readouterr().out)
    assert found["12345678"].state == "PEND" and found["7"].state == "EXIT"
    json.dumps(found["7"].to_dict())
