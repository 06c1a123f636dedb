"""The CPU benchmarks behind BENCHMARKS.md, run for real in their --smoke modes.

Why: a benchmark that no longer runs, or that stops measuring what its text
says (one unrepeated sample, two sides decoding differently, modes run one after
the other), silently turns the figures on record into claims. Nothing here is
timed: each run's JSON must hold the structure the figures rest on (repeated,
paired, interleaved, like with like), with consistent numbers.
"""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from typing import Dict, List

import pytest

from trainer_utils import REPO

BENCH = REPO / "bench"


def run_json(script: str, *args: str, timeout: float = 240) -> Dict:
    """Run a bench script as documented, from the repository root; its last stdout line is its JSON."""
    res = subprocess.run([sys.executable, str(BENCH / script), *args], cwd=str(REPO), capture_output=True,
                         text=True, timeout=timeout)
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def assert_spread(s: Dict[str, float], n: int = 0) -> None:
    """A median with its min and max, in that order (and n samples where the figure counts them)."""
    assert 0 < s["min"] <= s["median"] <= s["max"], s
    if n:
        assert s["n"] == n, s


def docstring(script: str) -> str:
    return ast.get_docstring(ast.parse((BENCH / script).read_text()))


def test_reader_throughput_compares_the_same_decode_on_both_sides():
    """Shards against files with draft mode on both and off on both, draft against full on each source."""
    (case,) = run_json("reader_throughput.py", "--smoke")
    assert case["stored"] == "342x256" and case["rounds"] == 1
    for key in ("shards+draft", "files+draft", "shards+full", "files+full"):
        assert_spread(case["frames_per_cpu_s"][key])
    for key in ("shards io", "files io", "shards io cold", "files io cold"):
        assert_spread(case["io_us_per_frame"][key])
    for key in ("shards_over_files_draft", "shards_over_files_full", "draft_over_full_shards",
                "draft_over_full_files"):
        assert_spread(case[key])
    # At short side 256 every TSM crop is under 2 x 224: draft mode cannot reduce a single decode.
    assert case["draft_reduces_share"] == 0


def test_lsf_latency_repeats_both_status_queries():
    """Batched and per-job bjobs are both timed every round; the ratio is paired round by round."""
    r = run_json("lsf_latency.py", "--smoke")
    assert r["jobs"] == 2 and r["rounds"] == 2
    assert_spread(r["bsub_latency_ms"], 2)
    assert_spread(r["bsub_to_running_ms"], 2)
    assert_spread(r["status_batched_one_call_ms"], 2)
    assert_spread(r["status_one_call_per_job_ms"], 2)
    assert_spread(r["per_job_over_batched_ratio"])


@pytest.mark.slow
def test_epoch_boundary_alternates_the_two_modes_and_counts_their_passes():
    """Whole runs of both modes, the one that goes first alternating; one pass per epoch before, one pass
    per run now; every wait figure a median with its spread, the step chosen from the measured rate."""
    r = run_json("epoch_boundary.py", "--smoke")
    assert r["order"] == ["before", "now", "now", "before"]
    assert r["before"]["passes_per_run"] == r["epochs"] and r["now"]["passes_per_run"] == 1
    assert r["step_ms"] == pytest.approx(1.5 * r["steady_batch_ms"], rel=0.01)
    for mode in ("before", "now"):
        for key in ("epoch_first_wait_ms", "other_step_wait_ms"):
            assert_spread(r[mode][key])
        assert 0 < r[mode]["wait_share_after_start_pct"] <= r[mode]["wait_share_pct"] < 100


def test_input_pipeline_documented_command_and_text_agree():
    """The usage names the default frame size, and the cores per rank are the given step over the decode rate."""
    r = run_json("input_pipeline.py", "--smoke", "--step-clips-per-s", "26")
    assert f"stored at {r['frame']} JPEG" in docstring("input_pipeline.py")
    assert "--step-clips-per-s 26" in docstring("input_pipeline.py")
    assert r["step_clips_per_s"] == 26 and r["rounds"] == 2
    assert_spread(r["frames_per_s"])
    assert r["cores_per_rank"] == pytest.approx(26 / (r["frames_per_s"]["median"] / 8), rel=0.01)


def test_pack_throughput_reports_pool_start_up_apart():
    """The pool's start-up is measured on its own, and each worker count packs every video."""
    r = run_json("pack_throughput.py", "--smoke", "--workers", "1,2")
    assert_spread(r["pool_start_s"]["2"])
    rows: List[Dict] = r["packs"]
    assert {(p["layout"], p["workers"]) for p in rows} == {(lay, w) for lay in ("videos", "rawframes")
                                                           for w in (1, 2)}
    for p in rows:
        assert p["videos"] == 16
        assert_spread(p["videos_per_s"])
        assert p["cpu_s_per_video"] > 0
        if p["workers"] == 1:
            assert p["speedup_vs_1"]["median"] == 1.0


def test_stage_throughput_pairs_the_ratio_round_by_round():
    """Every case gives the ratio of medians and the per-round ratio's median and spread."""
    r = run_json("stage_throughput.py", "--smoke")
    for case in ("cold-sha256", "warm-sha256"):
        assert r[case]["ratio_stage_vs_cp"] > 0
        assert_spread(r[case]["ratio_per_round"])
    assert "page cache" in docstring("stage_throughput.py")
