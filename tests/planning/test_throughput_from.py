"""`simulate --throughput-from RUN` over a metrics.jsonl that holds lines other than records.

A metrics file is appended to by a running trainer and may be edited or
concatenated by hand; like `status` and `report`, the reader keeps the
records it can use and passes over the rest.
"""
import json

import pytest

from badinput import assert_refused
from helpers import run_cli

SIM = ["--machine", "summit", "simulate", "--virtual-nodes", "8", "--quota-nodes", "4", "--project", "A1",
       "--dry-run", "--json"]


def _train(clips_per_s, ranks: int = 2) -> dict:
    """One training-step record as the trainer writes it (job-wide clips/s over its ranks)."""
    return {"kind": "train", "step": 1, "clips_per_s": clips_per_s, "ranks": ranks}


def test_lines_that_are_not_records_are_passed_over(cli_env, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    lines = [json.dumps(_train(40.0)), "[1, 2, 3]", '"a string"', "17", "null", "true",
             json.dumps(_train("fast")), json.dumps(_train(30.0, ranks=[2])), json.dumps(_train(float("nan"))),
             json.dumps(_train(-8.0)), json.dumps(_train(60.0)), "{not json", json.dumps(_train(50.0))]
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    proc = run_cli([*SIM, "--throughput-from", str(run)], cli_env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    sim = json.loads(proc.stdout)["simulate"]
    # Usable per-GPU rates: 20, 30, 25 -> the median is 25.
    assert sim["throughput_clips_per_s_per_gpu"] == pytest.approx(25.0)


def test_a_file_of_only_non_records_is_refused_in_one_line(cli_env, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_bytes(b"[1]\n{\"kind\": \"train\", \"clips_per_s\": {}, \"ranks\": 1}\n\xff\xfe\n")
    proc = run_cli([*SIM, "--throughput-from", str(run)], cli_env, cwd=tmp_path)
    assert_refused(proc, [str(run / "metrics.jsonl"), "no training steps"])
