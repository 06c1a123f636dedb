"""`summit-jobs report` reads the trainer's launch records: launches, resume steps, chain boundaries on
the plots, the data set's missing videos; and draws runs a user can read (colours, chance, the multi-clip
test, smoothing, per-GPU throughput) in a table that fits 100 columns.

The runs are real tiny trainer launches. The chain's links stop at a step limit and the next resumes at
that very step, so no step is trained twice and the metrics show no pause: the old guess from pauses
counted such a 3-link chain as one launch.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, Tuple

import pytest
from PIL import Image

from trainer_utils import REPO, make_dataset, run_ranks, tiny_args

from summit_jobs.runs import report
from trainer import rundir

CLI = [sys.executable, "-m", "summit_jobs"]


def run_report(args, timeout=120):
    return subprocess.run(CLI + ["report", *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          cwd=str(REPO))


def records(run: Path, kind: str, keep=lambda r: True):
    """Last record per step of a kind, read independently of report.py."""
    out = {}
    for line in (run / rundir.METRICS).read_text().splitlines():
        r = json.loads(line)
        if r["kind"] == kind and keep(r):
            out[r["step"]] = r
    return [out[s] for s in sorted(out)]


def panel(doc, fig, index):
    return doc["figures"][fig]["panels"][index]


def series(doc, fig, index, label):
    found = [s for s in panel(doc, fig, index)["series"] if s["label"] == label]
    assert len(found) == 1, [s["label"] for s in panel(doc, fig, index)["series"]]
    return found[0]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("launches")
    data = make_dataset(tmp / "data", train=8, val=4)
    chain = tmp / "tsm-chain"
    args = tiny_args(chain, data, epochs=3, test_last=2)
    run_ranks(1, args + ["--max-steps", "3"], tmp / "logs1", timeout=180)
    run_ranks(1, args + ["--max-steps", "7"], tmp / "logs2", timeout=180)
    run_ranks(1, args, tmp / "logs3", timeout=180)
    noshift = tmp / "tsn-noshift"
    run_ranks(1, tiny_args(noshift, data, epochs=3, test_last=2) + ["--no-shift"], tmp / "logs4", timeout=180)
    return {"chain": chain, "noshift": noshift, "data": data, "tmp": tmp}


@pytest.fixture(scope="module")
def chain_report(runs, tmp_path_factory) -> Tuple[subprocess.CompletedProcess, Dict]:
    """`summit-jobs report CHAIN --out DIR` (the text table, default options) and the report.json it wrote:
    run once for the tests that read that same report (a report is a Python start-up and four plots)."""
    folder = tmp_path_factory.mktemp("chain-report") / "rep"
    out = run_report([runs["chain"], "--out", folder])
    assert out.returncode == 0, out.stderr
    return out, json.loads((folder / "report.json").read_text())


def copy_run(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("report", "checkpoints"))
    return dst


def test_launches_are_counted_from_launch_records(runs, chain_report, tmp_path):
    chain = runs["chain"]
    steps = [json.loads(line)["step"] for line in (chain / rundir.METRICS).read_text().splitlines()
             if json.loads(line)["kind"] == "train"]
    assert steps == list(range(1, 13))                        # no step trained twice, no pause to see
    guess = report.deduplicate(report.parse_metrics((chain / rundir.METRICS).read_text()))
    assert (guess.launches, guess.launches_estimated) == (1, True)   # what the pauses alone say
    out = run_report([chain, "--json", "--out", tmp_path / "rep"])
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout)["summary"]
    assert (s["launches"], s["launches_estimated"], s["resume_steps"], s["replayed_steps"]) == (3, False, [3, 7], 0)
    text, _ = chain_report
    assert "trainer launches                    3 (0 steps replayed after resumes)" in text.stdout
    assert "resumed at steps                    3, 7" in text.stdout


def test_a_run_without_launch_records_says_its_count_is_estimated(runs, tmp_path):
    run = copy_run(runs["chain"], tmp_path / "old-run")
    (run / rundir.EVENTS).unlink()
    out = run_report([run, "--json", "--out", tmp_path / "rep"])
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout)["summary"]
    assert (s["launches"], s["launches_estimated"], s["resume_steps"]) == (1, True, [])
    text = run_report([run, "--out", tmp_path / "rep"]).stdout
    assert "estimated from pauses in the metrics (no launch records)" in " ".join(text.split())


def test_chain_boundaries_are_marked_in_every_panel(runs, chain_report):
    _, doc = chain_report
    train = records(runs["chain"], "train")
    labels = ["launch 2 from step 3", "launch 3 from step 7"]
    for fig in report.PLOTS:
        for p in doc["figures"][fig]["panels"]:
            assert [v["label"] for v in p["vlines"]] == labels, (fig, p["ylabel"])
    assert [v["x"] for v in panel(doc, "lr.png", 0)["vlines"]] == [3.0, 7.0]
    assert [v["x"] for v in panel(doc, "throughput.png", 2)["vlines"]] == [3.0, 7.0]
    assert [v["x"] for v in panel(doc, "loss.png", 0)["vlines"]] == [0.75, 1.75]     # 4 steps per epoch
    times = series(doc, "loss.png", 1, "train")["x"]
    assert [v["x"] for v in panel(doc, "loss.png", 1)["vlines"]] == [times[2], times[6]]
    assert [r["step"] for r in train] == list(range(1, 13))


def test_visuals_colours_chance_test_points_top5_and_throughput(runs, tmp_path):
    out = run_report([runs["chain"], "--compare", runs["noshift"], "--out", tmp_path / "rep"])
    assert out.returncode == 0, out.stderr
    doc = json.loads((tmp_path / "rep" / "report.json").read_text())
    for fig in report.PLOTS:
        for p in doc["figures"][fig]["panels"]:
            for s in p["series"]:
                assert s["color"] == ("C0" if s["label"].startswith("tsm-chain: ") else "C1"), s["label"]
                assert s["style"] == ("dashed" if ": train" in s["label"] else "solid"), s["label"]
    chance = [{"y": 25.0, "label": "chance (25%, 4 classes)", "color": "grey"}]
    assert panel(doc, "accuracy.png", 0)["hlines"] == chance and panel(doc, "accuracy.png", 1)["hlines"] == chance
    assert [h["y"] for h in panel(doc, "accuracy.png", 2)["hlines"]] == [100.0]
    for name, run, color in (("tsm-chain", runs["chain"], "C0"), ("tsn-noshift", runs["noshift"], "C1")):
        tests = records(run, "test", lambda r: not r.get("summary"))
        points = [p for p in panel(doc, "accuracy.png", 0)["points"] if p["color"] == color]
        assert [(p["x"], p["y"], p["label"]) for p in points] == \
            [(r["epoch"] + 1, 100 * r["top1"], f"{name}: test 2 clips x 3 crops") for r in tests]
        train = records(run, "train")
        assert series(doc, "accuracy.png", 2, f"{name}: train top-5")["y"] == [100 * r["top5"] for r in train]
        # Nothing in these runs' records says what a rank ran on (no plan.json): per rank, not per GPU.
        assert series(doc, "throughput.png", 2, f"{name}: clips/s per rank")["y"] == \
            [r["clips_per_s"] / r["ranks"] for r in train]
    assert panel(doc, "throughput.png", 0)["ylim"] == [0, None] and panel(doc, "throughput.png", 2)["ylim"] == [0, None]
    for name in ("accuracy.png", "throughput.png"):
        with Image.open(tmp_path / "rep" / name) as im:
            im.load()
            assert im.size[0] > 1200                            # three panels side by side


def moving_mean(steps, ys, window):
    """The reference: for each step s, the mean of the values at steps in (s - window, s]."""
    return [sum(y for t, y in zip(steps, ys) if s - window < t <= s) /
            sum(1 for t in steps if s - window < t <= s) for s in steps]


def test_train_curves_are_smoothed_on_request(runs, chain_report, tmp_path):
    train = records(runs["chain"], "train")
    steps, loss = [r["step"] for r in train], [r["loss"] for r in train]
    assert run_report([runs["chain"], "--smooth", "4", "--out", tmp_path / "a"]).returncode == 0
    doc = json.loads((tmp_path / "a" / "report.json").read_text())
    smooth = series(doc, "loss.png", 0, "train (4-step mean)")
    assert smooth["y"] == pytest.approx(moving_mean(steps, loss, 4), rel=1e-12)
    assert smooth["style"] == "dashed" and series(doc, "loss.png", 0, "train")["alpha"] == 0.3
    assert series(doc, "loss.png", 0, "train")["y"] == loss                   # the raw curve stays
    top1 = series(doc, "accuracy.png", 0, "train top-1 (4-step mean)")["y"]
    assert top1 == pytest.approx(moving_mean(steps, [100 * r["top1"] for r in train], 4), rel=1e-12)
    assert run_report([runs["chain"], "--smooth", "0", "--out", tmp_path / "b"]).returncode == 0
    default = chain_report[1]                                   # default: 12 steps / 50 = 0
    for doc in (json.loads((tmp_path / "b" / "report.json").read_text()), default):
        assert [s["label"] for s in panel(doc, "loss.png", 0)["series"]] == ["train", "eval"]


def _pointed_at(run: Path, data: Path) -> None:
    """The run's launch records name ``data`` as --data (as if it had trained on it)."""
    lines = []
    for line in (run / rundir.EVENTS).read_text().splitlines():
        e = json.loads(line)
        if e["event"] == "launch":
            e["options"]["data"] = str(data)
        lines.append(json.dumps(e))
    (run / rundir.EVENTS).write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("missing,shown", [(3, "3 videos missing"), (["a.mp4", "b.mp4"], "2 videos missing"),
                                           (0, "0 videos missing"), ("lots", None), (None, None)])
def test_missing_videos_come_from_the_data_manifest(runs, tmp_path, missing, shown):
    data = tmp_path / "data"
    data.mkdir()
    manifest = json.loads((runs["data"] / "manifest.json").read_text())
    if missing is not None:
        manifest["missing"] = missing
    (data / "manifest.json").write_text(json.dumps(manifest))
    run = copy_run(runs["chain"], tmp_path / "run")
    _pointed_at(run, data)
    out = run_report([run, "--out", tmp_path / "rep"])
    assert out.returncode == 0, out.stderr
    rows = [ln for ln in out.stdout.splitlines() if ln.startswith("data set ")]
    assert rows == ([f"data set                            {shown} (from the data's manifest)"] if shown else [])


@pytest.mark.parametrize("damage", ["gone", "not json", "a list"])
def test_an_unreadable_manifest_says_nothing(runs, tmp_path, damage):
    data = tmp_path / "data"
    data.mkdir()
    if damage == "not json":
        (data / "manifest.json").write_text('{"missing": 3, "classes": [')
    elif damage == "a list":
        (data / "manifest.json").write_text("[1, 2]")
    run = copy_run(runs["chain"], tmp_path / "run")
    _pointed_at(run, data)
    out = run_report([run, "--json", "--out", tmp_path / "rep"])
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout)["summary"]
    assert (s["missing_videos"], s["classes"]) == (None, None)
    doc = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert panel(doc, "accuracy.png", 0)["hlines"] == []          # no class count: no chance line


def test_the_table_fits_100_columns_with_long_run_names(runs, tmp_path):
    a = copy_run(runs["chain"], tmp_path / ("tsm-resnet50-kinetics400-" + "a" * 70))
    b = copy_run(runs["noshift"], tmp_path / ("tsn-resnet50-kinetics400-" + "b" * 70))
    out = run_report([a, "--compare", b, "--out", tmp_path / "rep"])
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    table = lines[:-1]                                    # the last line names the report's path
    assert lines[-1].startswith("report: ")
    assert all(len(ln) <= 100 for ln in table), "\n".join(ln for ln in table if len(ln) > 100)
    head = table[0]
    assert "tsm-resnet5\u2026aaaaaaaaaaaa " in head and "tsn-resnet5\u2026bbbbbbbbbbbb " in head
    assert "difference" in head
    a_at, b_at, d_at = head.index("tsm-"), head.index("tsn-"), head.index("difference")
    assert cell(table, "trainer launches", a_at, b_at) == "3 (0 steps replayed after resumes)"
    assert cell(table, "trainer launches", b_at, d_at) == "1 (0 steps replayed after resumes)"
    assert cell(table, "resumed at steps", a_at, b_at) == "3, 7"
    assert cell(table, "test top-1 (multi-clip)", d_at, None).endswith(" points")
    summary = json.loads(run_report([a, "--compare", b, "--json", "--out", tmp_path / "rep"]).stdout)["summary"]
    assert cell(table, "test top-1 (multi-clip)", a_at, b_at).startswith(f"{100 * summary['test_top1_mean']:.1f}% +- ")


def cell(table, label, start, end):
    """The text of one cell of the aligned table: its row's line and the continuation lines below it."""
    rows = [i for i, ln in enumerate(table) if ln.startswith(label + " ")]
    assert len(rows) == 1, label
    i, parts = rows[0], []
    while True:
        parts.append(table[i][start:end].strip())
        i += 1
        if i == len(table) or table[i][:len(label)].strip():   # the next row's label
            return " ".join(p for p in parts if p)


def test_column_widths_share_the_room():
    assert report.column_widths([10, 12], 30) == [10, 12]              # everything fits: natural widths
    assert report.column_widths([80, 80, 12], 36) == [23, 23, 12]      # shared; the narrow column keeps its own
    assert sum(report.column_widths([200, 200], 40)) + 40 + 2 * 2 <= report.TABLE_WIDTH
    assert report.shorten("abcdef", 4) == "abc\u2026" and report.shorten("abc", 4) == "abc"
    assert report.shorten("run-one-final", 9, middle=True) == "run-\u2026inal"


def test_a_launch_that_finds_the_run_complete_is_no_chain_boundary(runs, tmp_path):
    run = tmp_path / "tsm-chain"
    shutil.copytree(runs["chain"], run, ignore=shutil.ignore_patterns("report"))
    args = tiny_args(run, runs["data"], epochs=3, test_last=2)
    run_ranks(1, args, tmp_path / "logs", timeout=180)     # a later link of the chain: nothing left to do
    starts = [e for e in rundir.parse_events((run / rundir.EVENTS).read_text()) if e["event"] == "launch"]
    assert [(e["step"], e.get("already_complete", False)) for e in starts] == \
        [(0, False), (3, False), (7, False), (12, True)]
    out = run_report([run, "--json", "--out", tmp_path / "rep"])
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout)["summary"]
    assert (s["launches"], s["resume_steps"]) == (3, [3, 7])
