"""Kinetics as distributed, end to end through the CLI: annotation CSVs (real rows, tests/data/kinetics)
and flat split folders of <youtube_id>_<start:06d>_<end:06d>.mp4 made with PyAV, some clips missing as in
every real copy -> pack -> stage-data (both hops, 2 virtual nodes) -> a short training job on the embedded
LSF whose trainer reads the staged shards."""
from __future__ import annotations

import csv
import json
import re

from lsf_jobs import cli, lsf_environment, wait_state
from test_pack_lists import write_video

from helpers import REPO
from trainer import shards
from trainer.loop.metrics import read_metrics

ROWS = REPO / "tests" / "data" / "kinetics" / "k400_val_rows.csv"
TINY = ["--width", "0.125", "--num-segments", "4", "--frame-stride", "2", "--input-size", "32", "--workers", "0",
        "--num-classes", "0", "--warmup-epochs", "0", "--no-test", "--threads", "1", "--ckpt-every-minutes", "0",
        "--log-every", "1"]
#: Clips of the CSVs that are not on disk (gone from YouTube, in a real copy).
GONE = {"3caPS4FHFF8_000036_000046", "-UJgyiWe500_000029_000039", "1pWCgNggH5M_000000_000010"}


def kinetics_copy(root):
    """The 20 real K400 rows split 3 + 2 per class into train.csv and validate.csv (the split column
    rewritten, K700-2020's spelling for val), and the clips on disk as the CVDF tars leave them."""
    header, *rows = list(csv.reader(ROWS.read_text().splitlines()))
    by_label = {}
    for row in rows:
        by_label.setdefault(row[0], []).append(row)
    files = {"train": root / "train.csv", "validate": root / "validate.csv"}
    lines = {k: [header] for k in files}
    for label, members in by_label.items():
        for i, row in enumerate(members):
            split = "train" if i < 3 else "validate"
            lines[split].append([*row[:4], split, *row[5:]])
            stem = f"{row[1]}_{int(row[2]):06d}_{int(row[3]):06d}"
            if stem not in GONE:
                write_video(root / "k400" / ("train" if split == "train" else "val") / f"{stem}.mp4",
                            sorted(by_label).index(label), i)
    for split, path in files.items():
        with open(path, "w", newline="") as fh:
            csv.writer(fh).writerows(lines[split])
    return [str(p) for p in files.values()]


def test_kinetics_layout_packs_stages_and_trains(tmp_path):
    env = lsf_environment(tmp_path, minute=60)
    csvs = kinetics_copy(tmp_path)
    out = tmp_path / "archive"
    r = cli(["pack", str(out), "--annotations", csvs[0], "--annotations", csvs[1], "--videos",
             str(tmp_path / "k400"), "--shard-size", "20KB", "--quiet"], env, timeout=120)
    assert r.returncode == 0, r.stderr
    line = r.stdout.strip()
    assert line.startswith("pack: 17 videos in ") and "\n" not in line
    assert f"3 listed videos missing from disk (listed in {out / 'pack-report.json'})" in line
    report = json.loads((out / "pack-report.json").read_text())
    assert {m["key"] for m in report["missing"]} == GONE and report["packed"] == 17
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["missing"] == 3
    assert manifest["classes"] == ["abseiling", "air drumming", "archery", "passing American football (in game)"]
    train = shards.ShardDataset(out, "train")
    keys = {train.key(i): train.label(i) for i in range(len(train))}
    assert len(keys) == 10 and keys["-b6gqj_mZOs_000009_000019"] == 3 and keys["0wR5jVB-WPk_000417_000427"] == 0
    assert len(shards.ShardDataset(out, "val")) == 7
    assert sum(e["split"] == "train" for e in manifest["shards"]) >= 2    # one share per node

    pfs = tmp_path / "pfs"
    r = cli(["--machine", "local", "stage-data", "--manifest", str(out / "manifest.json"), "--nodes", "2",
             "--dest", str(pfs), "--to-nvme", "--quiet"], env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert len(re.findall(r"hop 2: .*; verified", r.stdout)) == 2
    assert json.loads((pfs / "manifest.json").read_text())["missing"] == 3

    run = tmp_path / "run"
    r = cli(["--machine", "local", "submit", "--nodes", "2", "--epochs", "1", "--engine", "ddp", "--clips-per-gpu",
             "1", "--data", str(pfs / "manifest.json"), "--job-name", "k400", "--run-dir", str(run), "--json",
             "--", *TINY], env, timeout=120)
    assert r.returncode == 0, r.stderr
    job = json.loads(r.stdout)["job_ids"][0]
    state = wait_state(job, env, timeout=240)
    assert state["STAT"] == "DONE", (state, (run / f"k400.{job}.err").read_text()[-3000:])
    assert (run / "COMPLETE").exists()
    records = read_metrics(run)
    assert [rec["step"] for rec in records if rec["kind"] == "train"] == [1, 2]     # 10 clips, 4 ranks x 1
    assert [rec["videos"] for rec in records if rec["kind"] == "eval"] == [7], records[-3:]
    assert json.loads((run / "plan.json").read_text())["nodes"] == 2
