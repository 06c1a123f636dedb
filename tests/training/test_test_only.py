"""``python -m trainer --test-only CKPT``: the final test's protocol on one checkpoint, on 1 and 2 ranks.

A real tiny run is trained first (1 rank, 2 epochs, its final test on both epoch
checkpoints); the test-only runs then test one of those checkpoints, in a run
directory that does not exist yet and in the trained run's own directory, and
must score it exactly as the final test did, without touching what the run
wrote (checkpoints, COMPLETE, run_config.json, a killed save's leftover).
"""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from badinput import run_module, trainer_env
from trainer_utils import REPO, logs, make_dataset, run_ranks, start_ranks, tiny_args, wait_ranks

from trainer import rundir
from trainer.loop.metrics import read_metrics

CKPT = "epoch-0001.pt"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("testonly")
    data = make_dataset(tmp / "data", train=8, val=6)
    run = tmp / "run"
    run_ranks(1, tiny_args(run, data, epochs=2, test_last=2), tmp / "logs", timeout=180)
    assert (run / "COMPLETE").exists()
    return {"data": data, "run": run, "tmp": tmp}


def final_test_record(run: Path, name: str) -> dict:
    found = [r for r in read_metrics(run) if r["kind"] == "test" and r.get("checkpoint") == name
             and not r.get("test_only")]
    assert len(found) == 1, found
    return found[0]


def only_records(run: Path) -> list:
    return [r for r in read_metrics(run) if r.get("test_only")]


def snapshot(run: Path) -> dict:
    """Every file the training wrote, by relative path: (size, mtime, sha256)."""
    out = {}
    for p in sorted(run.rglob("*")):
        if p.is_file() and p.name not in (rundir.METRICS, rundir.EVENTS) and not p.name.startswith(".rendezvous"):
            blob = p.read_bytes()
            out[str(p.relative_to(run))] = (len(blob), p.stat().st_mtime_ns, hashlib.sha256(blob).hexdigest())
    return out


@pytest.mark.parametrize("ranks", [1, 2])
def test_test_only_scores_a_checkpoint_as_the_final_test_did(trained, tmp_path, ranks):
    out = tmp_path / "new" / "run"                       # does not exist yet: created
    ckpt = trained["run"] / "checkpoints" / CKPT
    run_ranks(ranks, tiny_args(out, trained["data"], test_only=ckpt), tmp_path / "logs", timeout=180)
    ref = final_test_record(trained["run"], CKPT)
    [rec] = only_records(out)
    assert (rec["checkpoint"], rec["test_only"], rec["step"], rec["epoch"]) == (CKPT, True, ref["step"], ref["epoch"])
    assert (rec["top1"], rec["top5"], rec["videos"], rec["views"]) == (ref["top1"], ref["top5"], 6, 2 * 3)
    assert rec["loss"] == pytest.approx(ref["loss"], rel=1e-5)
    assert (rec["clips"], rec["crops"]) == (2, 3)
    # Nothing a training writes: no checkpoint, no COMPLETE, no run record.
    assert not (out / "checkpoints").exists() and not (out / "COMPLETE").exists()
    assert not (out / rundir.RUN_CONFIG).exists()
    [launch] = [e for e in rundir.parse_events((out / rundir.EVENTS).read_text()) if e["event"] == "launch"]
    assert (launch["mode"], launch["ranks"], launch["checkpoint"]) == ("test_only", ranks, CKPT)
    assert launch["options"]["test_only"] == str(ckpt)
    line = f"test {CKPT}: top1 {100 * ref['top1']:.2f}%"
    assert line in (tmp_path / "logs" / "rank0.log").read_text()


def test_protocol_options_apply(trained, tmp_path):
    out = tmp_path / "run"
    ckpt = trained["run"] / "checkpoints" / CKPT
    args = tiny_args(out, trained["data"], test_only=ckpt, test_clips=1, test_crops=1, test_size=32,
                     test_average="probs")
    run_ranks(1, args, tmp_path / "logs", timeout=180)
    [rec] = only_records(out)
    assert (rec["views"], rec["clips"], rec["crops"], rec["videos"]) == (1, 1, 1, 6)
    assert "1 clips x 1 crops of 32, probs averaged; test only" in (tmp_path / "logs" / "rank0.log").read_text()


def test_test_only_in_the_trained_runs_own_folder_leaves_it_as_it_was(trained, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(trained["run"], run)
    leftover = run / "checkpoints" / ".ckpt-000000003.pt.tmp4242"   # as if a training were writing it now
    leftover.write_bytes(b"partial")
    before = snapshot(run)
    records_before = read_metrics(run)
    report_before = subprocess.run([sys.executable, "-m", "summit_jobs", "report", str(run), "--json", "--out",
                                    str(tmp_path / "r1")], capture_output=True, text=True, timeout=120, cwd=str(REPO))
    assert report_before.returncode == 0, report_before.stderr
    run_ranks(2, tiny_args(run, trained["data"], test_only=run / "checkpoints" / CKPT), tmp_path / "logs",
              timeout=180)
    now = snapshot(run)
    assert now.pop(f"scores/test-only-{Path(CKPT).stem}.npz")   # its own per-video scores, nothing else
    assert now == before                                        # checkpoints, COMPLETE, run_config.json, leftover
    after = read_metrics(run)
    assert after[:len(records_before)] == records_before and len(after) == len(records_before) + 1
    assert after[-1]["test_only"] and after[-1]["top1"] == final_test_record(run, CKPT)["top1"]
    # The report shows the result and keeps the training's own figures (time, launches) as they were.
    rep = subprocess.run([sys.executable, "-m", "summit_jobs", "report", str(run), "--json", "--out",
                          str(tmp_path / "r2")], capture_output=True, text=True, timeout=120, cwd=str(REPO))
    assert rep.returncode == 0, rep.stderr
    s, s0 = json.loads(rep.stdout)["summary"], json.loads(report_before.stdout)["summary"]
    assert s["test_only"] == [{"checkpoint": CKPT, "top1": after[-1]["top1"], "top5": after[-1]["top5"],
                               "protocol": "2 clips x 3 crops"}]
    for key in ("training_seconds", "wall_seconds", "launches", "steps", "test_top1_mean"):
        assert s[key] == s0[key], key


def test_a_missing_checkpoint_ends_every_rank_with_one_line(trained, tmp_path):
    missing = tmp_path / "nowhere" / "ckpt-000000004.pt"
    procs = start_ranks(2, tiny_args(tmp_path / "run", trained["data"], test_only=missing), tmp_path / "logs")
    codes = wait_ranks(procs, tmp_path / "logs", timeout=120)
    assert all(c != 0 for c in codes), codes
    for r in range(2):
        text = (tmp_path / "logs" / f"rank{r}.log").read_text()
        assert "Traceback" not in text, logs(tmp_path / "logs")
        lines = [ln for ln in text.splitlines() if ln.startswith("trainer: ")]
        assert lines == [f"trainer: --test-only {missing}: no such file"], text
    assert not (tmp_path / "run" / rundir.METRICS).exists() or not only_records(tmp_path / "run")


@pytest.mark.parametrize("layout", ["tsm", "mmaction2"])
def test_a_checkpoint_in_another_codes_layout_scores_the_same(trained, tmp_path, layout):
    """The same weights converted to the official TSM code's or mmaction2's keys test exactly alike."""
    ckpt = trained["run"] / "checkpoints" / CKPT
    converted = tmp_path / f"{layout}.pth"
    conv = run_module("trainer.models.interop", ["convert", str(ckpt), str(converted), "--to", layout],
                      trainer_env(), cwd=str(REPO))
    assert conv.returncode == 0, conv.stderr
    out = tmp_path / "run"
    run_ranks(1, tiny_args(out, trained["data"], test_only=converted), tmp_path / "logs", timeout=180)
    ref = final_test_record(trained["run"], CKPT)
    [rec] = only_records(out)
    assert (rec["checkpoint"], rec["layout"], rec["top1"], rec["top5"]) == (converted.name, layout, ref["top1"],
                                                                            ref["top5"])
    assert rec["loss"] == pytest.approx(ref["loss"], rel=1e-5)
