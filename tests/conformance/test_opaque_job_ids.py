"""Job ids are opaque outside a scheduler's package: a PBS id (``123.server``) and a Flux id (``ƒ2Mq...``)
go through run records, targets and ``summit-jobs status`` as LSF's and Slurm's whole numbers do, each
scheduler checking its own (``Scheduler.job_id``).

No PBS server or Flux broker runs here, so two fake schedulers stand in, registered for the test only; they
answer the interface's questions from a table (the state of each job) and hold the forms of their real ids:
PBS Pro's ``sequence.server`` (qsub prints it; PBS Professional 2022.1 Reference Guide, "Job Identifiers")
and Flux's default F58 form (``flux job id``: "ƒ" and base-58 digits; flux-core's RFC 19).
"""
from __future__ import annotations

import json
import re
from typing import Dict, List, Optional, Sequence, Tuple

import pytest
from click.testing import CliRunner

from summit_jobs import schedulers
from summit_jobs.errors import UserError
from summit_jobs.runs import lifecycle, records

#: The state each fake job is in, by id: what the fake schedulers' query answers.
STATES: Dict[str, str] = {}


class _Fake:
    """The part of the Scheduler interface that status, records and targets use; nothing of LSF's."""
    script_name = "job.sh"
    option_help: Dict[str, str] = {}
    launchers: Tuple[str, ...] = ()
    command_group = None
    status_command = "qstat"
    cancel_command = "qdel"
    pattern = r""

    def job_id(self, value: object) -> Optional[str]:
        text = value if isinstance(value, str) else ""
        return text if re.fullmatch(self.pattern, text) else None

    def query(self, host, job_ids: Sequence[str]) -> Tuple[Dict[str, schedulers.JobStatus], List[str]]:
        found = {j: schedulers.JobStatus(job_id=j, state=STATES[j]) for j in job_ids if j in STATES}
        return found, [j for j in job_ids if j not in STATES]

    def owners(self, host, job_ids: Sequence[str]) -> Dict[str, schedulers.Owner]:
        return {}

    def output_files(self, script: str, job_id: str) -> List[str]:
        return [f"job.{job_id}.out"]


class FakePbs(_Fake):
    name, label, job_id_words = "fakepbs", "PBS", "a sequence number and the server: 123.server"
    pattern = r"[1-9][0-9]{0,9}\.[A-Za-z0-9][A-Za-z0-9.-]{0,62}"


class FakeFlux(_Fake):
    name, label, job_id_words = "fakeflux", "Flux", "ƒ and base-58 digits: ƒ2Mq7bdXT"
    pattern = r"ƒ[1-9A-HJ-NP-Za-km-z]{1,13}"


@pytest.fixture
def fakes(monkeypatch, tmp_path):
    import summit_jobs.cli.main  # noqa: F401 (the command line, built with the real schedulers' option help)
    monkeypatch.setitem(schedulers.IMPLEMENTATIONS, "fakepbs", f"{__name__}:FakePbs")
    monkeypatch.setitem(schedulers.IMPLEMENTATIONS, "fakeflux", f"{__name__}:FakeFlux")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "index"))
    monkeypatch.setattr(records, "current_embedded_home", lambda: "")
    STATES.clear()
    yield
    STATES.clear()


def _run(tmp_path, scheduler: str, ids: List[str]) -> Dict:
    run_dir = tmp_path / f"run-{scheduler}"
    run_dir.mkdir()
    record = {"run_dir": str(run_dir), "name": f"run-{scheduler}", "job_ids": ids, "scheduler": scheduler,
              "created": "2026-12-07T18:00:00", "lsf_home": None}
    (run_dir / "run.json").write_text(json.dumps(record))
    records._save_index(record)
    return record


def _status(*args: str) -> List[Dict]:
    from summit_jobs.cli import main
    res = CliRunner().invoke(main.cli.cli, ["status", "--json", *args], catch_exceptions=False)
    assert res.exit_code in (0, 1), res.output
    return json.loads(res.output)


@pytest.mark.parametrize("scheduler,ids", [("fakepbs", ["123.server", "124.server"]),
                                           ("fakeflux", ["ƒ2Mq7bdXT", "ƒ2MqAb9Zz"])])
def test_records_targets_and_status_carry_ids_that_are_not_numbers(fakes, tmp_path, scheduler, ids):
    record = _run(tmp_path, scheduler, ids)
    STATES.update({ids[0]: "done", ids[1]: "running"})
    assert records.parse_record((tmp_path / f"run-{scheduler}" / "run.json").read_bytes(), "run.json")["job_ids"] \
        == ids
    # A job id names its run through the index, as an LSF id does.
    assert lifecycle.targets(None, ids[1]) == [(records.find(str(record["run_dir"]))[0], [ids[1]])]
    rows = _status(str(record["run_dir"]))
    assert [(r["job_id"], r["state"]) for r in rows] == [(ids[0], "done"), (ids[1], "running")]
    (row,) = _status(ids[0])
    assert (row["job_id"], row["run"], row["state"]) == (ids[0], record["name"], "done")


def test_each_scheduler_refuses_what_is_not_its_id(fakes, tmp_path):
    """A PBS record with a Flux id, an LSF record with a PBS id, a shell word: refused with the scheduler's own
    description of its ids (the ids go to its commands)."""
    for scheduler, bad, words in (("fakepbs", "ƒ2Mq7bdXT", "123.server"), ("fakepbs", "1;touch x", "123.server"),
                                  ("lsf", "123.server", "a whole number from 1 to 2147483646"),
                                  ("fakeflux", "12", "base-58")):
        with pytest.raises(UserError, match=re.escape(words)):
            records.check_record({"run_dir": "/x", "job_ids": [bad], "scheduler": scheduler}, "run.json")
    for kind in ("pbs", ["lsf"], {"kind": "lsf"}, 7):
        with pytest.raises(UserError, match=re.escape(f"'scheduler' {kind!r} is not one this tool drives")):
            records.check_record({"run_dir": "/x", "job_ids": ["1"], "scheduler": kind}, "run.json")
    for kind in (None, ""):   # records written before the key was there, or with it empty: LSF's
        assert records.check_record({"run_dir": "/x", "job_ids": ["7"], "scheduler": kind}, "r")["job_ids"] == ["7"]


def test_an_id_a_scheduler_would_take_is_still_refused_when_it_cannot_name_a_file(fakes, monkeypatch):
    """Ids name files (exitcode.<id>) and reach command lines: a scheduler that took "../x" or "-rf" would
    still see them refused by the records."""
    monkeypatch.setattr(FakePbs, "pattern", r".+")
    for bad in ("../x", "a/b", "-rf", ".hidden", "a b", "a;b", "$(x)"):
        with pytest.raises(UserError, match="not a job id of PBS"):
            records.check_record({"run_dir": "/x", "job_ids": [bad], "scheduler": "fakepbs"}, "run.json")
    assert records.check_record({"run_dir": "/x", "job_ids": ["7.pbs-1"], "scheduler": "fakepbs"},
                                "run.json")["job_ids"] == ["7.pbs-1"]


def test_ids_sort_numbers_by_value_and_the_rest_as_text():
    assert sorted(["10", "9", "124.server", "123.server", "ƒ2Mq"], key=schedulers.id_order) == \
        ["9", "10", "123.server", "124.server", "ƒ2Mq"]
