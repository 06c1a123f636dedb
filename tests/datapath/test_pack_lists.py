"""pack from the lists datasets are distributed with, through the real command line: Kinetics annotation
CSVs, mmaction2 / PySlowFast lists, UCF101 and HMDB51 split files (fixtures from real lines, see
tests/data/*/*.source), real H.264 / MPEG-4 files made with PyAV, and the shuffled shard order."""
from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest

from helpers import REPO, run_cli
from summit_jobs.data import datalists, synth
from summit_jobs.data.pack import stratified_order
from trainer import shards, stage

DATA = REPO / "tests" / "data"
KINETICS = DATA / "kinetics"
UCF = DATA / "ucf101" / "ucfTrainTestlist"
HMDB = DATA / "hmdb51" / "testTrainMulti_7030_splits"


def write_video(path: Path, label: int, seed: int, frames: int = 8, size: int = 32) -> Path:
    """A real clip of synth's class ``label % 8``: H.264 in MP4 (synth's own writer) or MPEG-4 in AVI."""
    import av
    path.parent.mkdir(parents=True, exist_ok=True)
    clip = synth._render_clip(label % 8, frames, size, np.random.default_rng([seed, label]))
    if path.suffix == ".mp4":
        synth._write_mp4(path, clip)
        return path
    with av.open(str(path), "w", format="avi") as container:
        stream = container.add_stream("mpeg4", rate=25)
        stream.width = stream.height = size
        stream.pix_fmt, stream.thread_count = "yuv420p", 1
        for f in clip:
            for packet in stream.encode(av.VideoFrame.from_ndarray(f, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def pack_json(env, *args, timeout: float = 120) -> dict:
    r = run_cli(["pack", *args, "--json", "--quiet"], env, timeout=timeout)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def by_key(out: Path, split: str) -> Dict[str, int]:
    ds = shards.ShardDataset(out, split)
    return {ds.key(i): ds.label(i) for i in range(len(ds))}


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """synth: 8 classes x 3 videos (2 train, 1 val), 8 frames of 32x32, both layouts."""
    root = tmp_path_factory.mktemp("lists")
    env = dict(os.environ, XDG_CONFIG_HOME=str(root / "xdg"))
    r = run_cli(["synth", str(root / "d"), "--videos-per-class", "3", "--val-fraction", "0.34", "--frames", "8",
                 "--size", "32", "--seed", "3", "--quiet"], env, timeout=120)
    assert r.returncode == 0, r.stderr
    return root / "d", env


# ---- Kinetics annotation CSVs ------------------------------------------------------------------

def test_kinetics_readers_of_the_real_formats():
    """K400 2017 (quoted labels, is_cc), K600 (unquoted labels with spaces), K700-2020 ("validate")."""
    k400 = datalists.read_kinetics([KINETICS / "k400_val_rows.csv"], Path("/nowhere"), None)
    assert k400.classes == ["abseiling", "air drumming", "archery", "passing American football (in game)"]
    assert len(k400.missing) == 20 and not k400.samples          # nothing on disk: all missing, none fatal
    first = k400.missing[0]
    assert first["key"] == "0wR5jVB-WPk_000417_000427" and first["split"] == "val"
    assert first["listed_at"].endswith("k400_val_rows.csv:2")
    k600 = datalists.read_kinetics([KINETICS / "k600_val_rows.csv"], Path("/nowhere"), None)
    assert "passing American football (in game)" in k600.classes and len(k600.missing) == 5
    k700 = datalists.read_kinetics([KINETICS / "k700_2020_validate_rows.csv"], Path("/nowhere"), None)
    assert {m["split"] for m in k700.missing} == {"val"}
    assert [m["key"] for m in k700.missing][0] == "---QUuC4vJs_000084_000094"


def test_kinetics_finds_clips_in_split_folders_class_folders_and_the_top_folder(tmp_path):
    rows = list(csv.reader((KINETICS / "k700_2020_validate_rows.csv").read_text().splitlines()))[1:]
    videos = tmp_path / "k700"
    stems = [f"{r[1]}_{int(r[2]):06d}_{int(r[3]):06d}" for r in rows]
    write_video(videos / "val" / f"{stems[0]}.mp4", 0, 1)                 # the split folder (CVDF's tars)
    write_video(videos / "validate" / "testifying" / f"{stems[1]}.mp4", 1, 1)   # arranged by class
    write_video(videos / f"{stems[2]}.mp4", 2, 1)                          # all clips in one folder
    listing = datalists.read_kinetics([KINETICS / "k700_2020_validate_rows.csv"], videos, None)
    assert not listing.missing and [s.key for s in listing.samples] == stems
    order = ["washing feet", "air drumming", "testifying"]
    listing = datalists.read_kinetics([KINETICS / "k700_2020_validate_rows.csv"], videos, order)
    assert [s.label for s in listing.samples] == [2, 0, 1]                # testifying, washing feet, air drumming


def test_kinetics_clip_missing_is_counted_apart_from_a_clip_that_cannot_be_decoded(tmp_path, cli_env):
    rows = list(csv.reader((KINETICS / "k400_val_rows.csv").read_text().splitlines()))[1:6]   # abseiling
    stems = [f"{r[1]}_{int(r[2]):06d}_{int(r[3]):06d}" for r in rows]
    for i, stem in enumerate(stems[:4]):
        write_video(tmp_path / "k400" / "val" / f"{stem}.mp4", 0, i)
    (tmp_path / "k400" / "val" / f"{stems[3]}.mp4").write_bytes(b"\0" * 4096)    # a broken download
    (tmp_path / "val.csv").write_text("\n".join((KINETICS / "k400_val_rows.csv").read_text().splitlines()[:6]))
    r = run_cli(["pack", str(tmp_path / "out"), "--annotations", str(tmp_path / "val.csv"), "--videos",
                 str(tmp_path / "k400"), "--quiet"], cli_env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "pack: 3 videos" in r.stdout and "1 listed videos missing from disk" in r.stdout
    assert "skipped 1 unreadable" in r.stderr and stems[3] in r.stderr
    report = json.loads((tmp_path / "out" / "pack-report.json").read_text())
    assert [m["key"] for m in report["missing"]] == [stems[4]] and report["missing"][0]["listed_at"].endswith(":6")
    assert [x["key"] for x in report["skipped"]] == [stems[3]]
    assert manifest(tmp_path / "out")["missing"] == 1


# ---- mmaction2 / PySlowFast lists --------------------------------------------------------------

def test_rawframe_list_under_any_name_packs_the_same_bytes_as_the_folder(small, tmp_path):
    d, env = small
    src = d / "rawframes"
    lists = tmp_path / "ann"
    lists.mkdir()
    shutil.copy(src / "train_list.txt", lists / "kinetics400_train_list_rawframes.txt")
    shutil.copy(src / "val_list.txt", lists / "kinetics400_val_list_rawframes.txt")
    a = pack_json(env, str(src), str(tmp_path / "a"), "--shard-size", "30KB")
    b = pack_json(env, str(tmp_path / "b"), "--list", f"train={lists / 'kinetics400_train_list_rawframes.txt'}",
                  "--list", f"val={lists / 'kinetics400_val_list_rawframes.txt'}", "--root", str(src),
                  "--classes", str(d / "classes.txt"), "--shard-size", "30KB")
    assert a["samples"] == b["samples"] == 24 and b["layout"] == "lists" and b["missing"] == 0
    ma, mb = manifest(tmp_path / "a"), manifest(tmp_path / "b")
    assert ma["shards"] == mb["shards"] and ma["classes"] == mb["classes"]    # the same bytes, shard by shard
    assert mb["missing"] == 0 and "missing" not in ma


def test_video_list_and_pyslowfast_csv_with_paths_relative_to_root(small, tmp_path):
    d, env = small
    videos = d / "videos"
    lines = [f"{p.relative_to(videos)} {synth.CLASSES.index(p.parent.name)}" for p in sorted(videos.rglob("*.mp4"))]
    train = [x for x in lines if x.startswith("train/")]
    val = [x for x in lines if x.startswith("val/")]
    (tmp_path / "k400_train_list_videos.txt").write_text("\n".join(train) + "\n")
    # PySlowFast's val.csv: 'path label', absolute paths, space-separated.
    (tmp_path / "val.csv").write_text("".join(f"{videos / x.split()[0]} {x.split()[1]}\n" for x in val))
    s = pack_json(env, str(tmp_path / "out"), "--list", f"train={tmp_path / 'k400_train_list_videos.txt'}",
                  "--list", f"val={tmp_path / 'val.csv'}", "--root", str(videos), "--shard-size", "40KB")
    assert s["samples"] == 24 and s["missing"] == 0
    got = by_key(tmp_path / "out", "train")
    assert len(got) == 16 and got["train__growing__growing_0001"] == synth.CLASSES.index("growing")
    assert manifest(tmp_path / "out")["classes"] == [f"class_{i:03d}" for i in range(8)]


def test_filename_template_reaches_the_workers(small, tmp_path):
    """mmaction2 lists often point at frames named 00001.jpg: --filename-tmpl must reach the decoding worker."""
    d, env = small
    src = tmp_path / "frames"
    shutil.copytree(d / "rawframes", src)
    for jpg in src.rglob("img_*.jpg"):
        jpg.rename(jpg.with_name(jpg.name[len("img_"):]))
    lst = ["--list", f"train={src / 'train_list.txt'}", "--list", f"val={src / 'val_list.txt'}", "-j", "2"]
    r = run_cli(["pack", str(tmp_path / "plain"), *lst, "--quiet"], env, timeout=120)
    assert r.returncode == 2 and "could be decoded" in r.stderr and "img_00001.jpg" in r.stderr
    s = pack_json(env, str(tmp_path / "tmpl"), *lst, "--filename-tmpl", "{:05d}.jpg")
    assert s["samples"] == 24 and s["skipped"] == 0
    ds = shards.ShardDataset(tmp_path / "tmpl", "val")
    i = [ds.key(j) for j in range(len(ds))].index("val__rotating_clockwise__rotating_clockwise_0002")
    folder = d / "rawframes" / "val" / "rotating_clockwise" / "rotating_clockwise_0002"
    assert ds.frames(i, [0, 7]) == [(folder / "img_00001.jpg").read_bytes(), (folder / "img_00008.jpg").read_bytes()]


# ---- UCF101 and HMDB51 -------------------------------------------------------------------------

def test_ucf101_split_files_with_windows_line_ends_and_a_class_spelt_in_another_case(tmp_path, cli_env):
    assert b"\r\n" in (UCF / "trainlist01.txt").read_bytes()
    videos = tmp_path / "UCF-101"
    listed = [line.split()[0] for name in ("trainlist01.txt", "testlist01.txt")
              for line in (UCF / name).read_text().splitlines() if line.strip()]
    for i, rel in enumerate(listed):
        folder, name = rel.split("/")
        folder = "HandstandPushups" if folder == "HandStandPushups" else folder
        if name != "v_YoYo_g08_c03.avi":                                   # one clip missing from disk
            write_video(videos / folder / name, i, 2)
    s = pack_json(cli_env, str(tmp_path / "out"), "--ucf101-splits", str(UCF), "--videos", str(videos),
                  "--split-number", "1", "--shard-size", "20KB")
    assert (s["samples"], s["missing"], s["layout"]) == (19, 1, "ucf101")
    m = manifest(tmp_path / "out")
    assert len(m["classes"]) == 101 and m["classes"][36] == "HandStandPushups" and m["missing"] == 1
    train, val = by_key(tmp_path / "out", "train"), by_key(tmp_path / "out", "val")
    assert len(train) == 11 and len(val) == 8
    assert train["HandStandPushups__v_HandStandPushups_g08_c01"] == 36 and train["YoYo__v_YoYo_g08_c01"] == 100
    assert val["Archery__v_Archery_g01_c02"] == 2                       # test list: class from the folder
    report = json.loads((tmp_path / "out" / "pack-report.json").read_text())
    assert [x["key"] for x in report["missing"]] == ["YoYo__v_YoYo_g08_c03"]
    assert report["missing"][0]["listed_at"].endswith("trainlist01.txt:12")


def test_hmdb51_split_files(tmp_path, cli_env):
    videos = tmp_path / "hmdb51_org"
    for i, f in enumerate(sorted(HMDB.glob("*_test_split1.txt"))):
        cls = f.name[:-len("_test_split1.txt")]
        for line in f.read_text().splitlines():
            write_video(videos / cls / line.split()[0], i, 3)
    s = pack_json(cli_env, str(tmp_path / "out"), "--hmdb51-splits", str(HMDB), "--videos", str(videos))
    assert (s["samples"], s["missing"]) == (4, 0)                       # the '0' (unused) clip is left out
    m = manifest(tmp_path / "out")
    assert m["classes"] == ["brush_hair", "cartwheel", "catch", "wave"] and m["missing"] == 0
    assert by_key(tmp_path / "out", "val") == {"cartwheel___Rad_Schlag_die_Bank__cartwheel_f_cm_np1_le_med_0": 1}
    assert sorted(by_key(tmp_path / "out", "train").values()) == [0, 2, 3]


# ---- the shuffled, class-stratified order ------------------------------------------------------

def node_classes(out: Path, nodes: int) -> List[set]:
    """The classes each node trains on under stage-data's partition policy (trainer.stage.placement):
    each node's shards in a folder of their own with that node's manifest, read with ShardDataset."""
    m = manifest(out)
    found = []
    for n, share in enumerate(stage.placement(m, nodes, "partition")):
        node = out.parent / f"{out.name}-node{n}"
        node.mkdir()
        for s in share:
            os.symlink(out / s["name"], node / s["name"])
        shards.write_manifest(node / "manifest.json", dict(m, shards=share))
        found.append(set(shards.ShardDataset(node, "train").labels()))
    return found


@pytest.fixture(scope="module")
def balanced(tmp_path_factory):
    """8 classes x 16 training videos (rawframes, listed class by class as mmaction2's lists are)."""
    root = tmp_path_factory.mktemp("order")
    env = dict(os.environ, XDG_CONFIG_HOME=str(root / "xdg"))
    r = run_cli(["synth", str(root / "d"), "--videos-per-class", "20", "--val-fraction", "0.2", "--frames", "4",
                 "--size", "32", "--layout", "rawframes", "--quiet"], env, timeout=180)
    assert r.returncode == 0, r.stderr
    return root / "d" / "rawframes", env


def test_every_node_of_a_partition_gets_every_class_and_workers_do_not_change_a_byte(balanced, tmp_path):
    src, env = balanced
    common = [str(src), "--shard-size", "120KB", "--seed", "11"]
    one = pack_json(env, common[0], str(tmp_path / "one"), *common[1:], "-j", "1")
    two = pack_json(env, common[0], str(tmp_path / "two"), *common[1:], "-j", "2")
    assert manifest(tmp_path / "one")["shards"] == manifest(tmp_path / "two")["shards"]
    for e in manifest(tmp_path / "one")["shards"]:
        assert (tmp_path / "one" / e["name"]).read_bytes() == (tmp_path / "two" / e["name"]).read_bytes()
    train = [e for e in manifest(tmp_path / "one")["shards"] if e["split"] == "train"]
    assert len(train) >= 8 and one["samples"] == two["samples"] == 160
    assert all(len(c) == 8 for c in node_classes(tmp_path / "one", 4))
    # The list order (what pack wrote before) gives a node a few classes only.
    pack_json(env, common[0], str(tmp_path / "sorted"), *common[1:], "--no-shuffle")
    assert min(len(c) for c in node_classes(tmp_path / "sorted", 4)) <= 3
    # Another seed, another order of the same samples.
    pack_json(env, common[0], str(tmp_path / "seed12"), "--shard-size", "120KB", "--seed", "12")
    keys = lambda out: [shards.ShardDataset(out, "train").key(i) for i in range(128)]  # noqa: E731
    assert keys(tmp_path / "seed12") != keys(tmp_path / "one")
    assert sorted(keys(tmp_path / "seed12")) == sorted(keys(tmp_path / "one"))


def test_stratified_order_spreads_each_class_over_the_split():
    samples = [datalists.Sample("train", f"c{c}-{i:02d}", c, "video", f"/v/{c}/{i}") for c in range(5)
               for i in range(12)]
    order = stratified_order(samples, 0)
    assert sorted(order, key=lambda s: s.key) == sorted(samples, key=lambda s: s.key)
    labels = [s.label for s in order]
    for start in range(len(labels) - 2 * 5 + 1):                       # any 2 x classes samples: all classes
        assert len(set(labels[start:start + 10])) == 5, (start, labels)


def test_resume_keeps_the_seed_a_rerun_with_another_seed_is_refused(balanced, tmp_path):
    src, env = balanced
    args = ["pack", str(src), None, "--shard-size", "1", "--short-side", "24", "-j", "1", "--quiet", "--seed", "5"]
    ref = tmp_path / "ref"
    pack_json(env, *[str(ref) if a is None else a for a in args[1:-2]], "--seed", "5")
    out = tmp_path / "out"
    p = subprocess.Popen([sys.executable, "-m", "summit_jobs", *[str(out) if a is None else a for a in args]],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 60
    state = out / ".pack-state.json"
    while time.time() < deadline and p.poll() is None:
        if state.exists() and len(json.loads(state.read_text() or '{"shards": []}')["shards"]) >= 3:
            break
        time.sleep(0.005)
    p.send_signal(signal.SIGKILL)
    p.communicate(timeout=30)
    assert not (out / "manifest.json").exists(), "pack finished before it could be killed"
    other = [str(out) if a is None else a for a in args[1:-1]] + ["6"]
    r = run_cli(["pack", *other], env, timeout=120)
    assert r.returncode == 2 and "unfinished pack of other input or options" in r.stderr
    s = pack_json(env, *[str(out) if a is None else a for a in args[1:-2]], "--seed", "5")
    assert s["resumed_shards"] >= 3
    assert manifest(out)["shards"] == manifest(ref)["shards"]
