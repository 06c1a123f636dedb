"""synth and pack through the real command line: both layouts, determinism, resume, bad input."""
import io
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from PIL import Image

from helpers import run_cli
from summit_jobs.data import synth
from trainer import shards


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """3 videos per class (2 train, 1 val), 8 frames of 48x48, both layouts."""
    root = tmp_path_factory.mktemp("synth")
    env = dict(os.environ, XDG_CONFIG_HOME=str(root / "xdg"))
    r = run_cli(["synth", str(root / "d"), "--videos-per-class", "3", "--val-fraction", "0.34", "--frames", "8",
                 "--size", "48", "--seed", "7"], env)
    assert r.returncode == 0, r.stderr
    return root / "d", env


def test_synth_layouts(small):
    d, env = small
    lines = (d / "rawframes" / "train_list.txt").read_text().split("\n")
    assert lines[0] == "train/moving_right/moving_right_0000 8 0"
    assert len([x for x in lines if x]) == 16
    assert len((d / "rawframes" / "val_list.txt").read_text().split()) == 8 * 3
    folder = d / "rawframes" / "train" / "growing" / "growing_0001"
    assert sorted(p.name for p in folder.iterdir()) == [f"img_{i:05d}.jpg" for i in range(1, 9)]
    assert Image.open(folder / "img_00001.jpg").size == (48, 48)
    mp4s = sorted((d / "videos").rglob("*.mp4"))
    assert len(mp4s) == 24 and (d / "videos" / "val" / "shrinking" / "shrinking_0002.mp4").is_file()
    import av
    with av.open(str(mp4s[0])) as c:
        frames = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
    assert len(frames) == 8 and frames[0].shape == (48, 48, 3)
    assert (d / "classes.txt").read_text().split() == list(synth.CLASSES)


def test_synth_is_deterministic_and_refuses_to_overwrite(small, tmp_path):
    d, env = small
    r = run_cli(["synth", str(tmp_path / "again"), "--videos-per-class", "3", "--val-fraction", "0.34",
                 "--frames", "8", "--size", "48", "--seed", "7", "--layout", "rawframes", "--quiet"], env)
    assert r.returncode == 0, r.stderr
    for f in ("train/moving_up/moving_up_0001/img_00005.jpg", "val/rotating_clockwise/rotating_clockwise_0002/"
              "img_00008.jpg"):
        assert (tmp_path / "again" / "rawframes" / f).read_bytes() == (d / "rawframes" / f).read_bytes()
    r = run_cli(["synth", str(tmp_path / "again"), "--quiet"], env)
    assert r.returncode == 2 and "--force" in r.stderr and "Traceback" not in r.stderr
    r = run_cli(["synth", str(tmp_path / "x"), "--size", "33"], env)
    assert r.returncode == 2 and "even" in r.stderr


def _object_mask(frame):
    """Pixels far from the background colour (the median of the border)."""
    bg = np.median(np.concatenate([frame[0], frame[-1], frame[:, 0], frame[:, -1]]), axis=0)
    return np.abs(frame.astype(int) - bg).sum(axis=2) > 120


def _object_area(frame):
    return int(_object_mask(frame).sum())


def test_single_frames_do_not_reveal_the_class_but_order_does():
    """The two classes of a pair are one motion played forwards and backwards: with the same
    random draws, class 2k+1 is class 2k reversed in time (up to the sensor noise), so the set of
    frames is the same and only their order differs. Over many clips the object areas of all
    frames have the same distribution for growing and shrinking while the frame-to-frame change
    separates them; left/right motion: the object's horizontal displacement has opposite signs."""
    size, frames, n = 64, 12, 60
    for pair in range(4):
        for i in range(3):
            fwd = synth._render_clip(2 * pair, frames, size, np.random.default_rng([3, pair, i]))
            bwd = synth._render_clip(2 * pair + 1, frames, size, np.random.default_rng([3, pair, i]))
            # Compare the shapes (pixels far from the background), not the noise.
            masks = lambda clip: np.stack([_object_mask(f) for f in clip])  # noqa: E731
            mf, mb = masks(fwd), masks(bwd)
            assert np.mean(mf[::-1] != mb) < 0.01                      # reversed: the same pixels
            assert np.mean(mf != mb) > 5 * max(np.mean(mf[::-1] != mb), 0.002)   # in order: they differ
    first_area = {4: [], 5: []}
    change = {4: [], 5: []}
    for label in (4, 5):
        for i in range(n):
            clip = synth._render_clip(label, frames, size, np.random.default_rng([1, label, i]))
            areas = [_object_area(f) for f in clip]
            first_area[label].extend(areas)
            diffs = np.diff(areas)
            change[label].append(np.median(diffs))
    a, b = np.array(first_area[4], float), np.array(first_area[5], float)
    assert abs(a.mean() - b.mean()) < 0.25 * (a.std() + b.std())      # the frames, order aside: indistinguishable
    assert np.mean(np.array(change[4]) > 0) > 0.9 and np.mean(np.array(change[5]) < 0) > 0.9   # order: clear
    # Moving right vs left: column profiles shift in opposite directions.
    for label, sign in ((0, 1), (1, -1)):
        ok = 0
        for i in range(20):
            clip = synth._render_clip(label, frames, size, np.random.default_rng([2, label, i]))
            p0, p1 = clip[0].astype(float).mean(axis=(0, 2)), clip[1].astype(float).mean(axis=(0, 2))
            shifts = [np.sum((np.roll(p0, s) - p1) ** 2) for s in range(-4, 5)]
            ok += np.sign(int(np.argmin(shifts)) - 4) == sign
        assert ok >= 18


def _pack(env, src, out, *extra, timeout=120):
    r = run_cli(["pack", str(src), str(out), "--json", *extra], env, timeout=timeout)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_pack_rawframes_round_trip_and_determinism(small, tmp_path):
    d, env = small
    s1 = _pack(env, d / "rawframes", tmp_path / "a", "--shard-size", "60KB", "-j", "2")
    s2 = _pack(env, d / "rawframes", tmp_path / "b", "--shard-size", "60KB", "-j", "1")
    assert s1["samples"] == 24 and s1["skipped"] == 0 and s1["shards"] > 2
    m1, m2 = (json.loads((tmp_path / x / "manifest.json").read_text()) for x in "ab")
    assert m1["shards"] == m2["shards"]                    # same bytes whatever the worker count
    assert m1["classes"] == list(synth.CLASSES) and m1["hash"] == "sha256"
    for e in m1["shards"]:
        assert shards.file_hash(tmp_path / "a" / e["name"]) == e["sha256"]
    ds = shards.ShardDataset(tmp_path / "a", "train")
    assert len(ds) == 16 and len(shards.ShardDataset(tmp_path / "a", "val")) == 8
    i = [ds.key(j) for j in range(len(ds))].index("train__moving_down__moving_down_0001")
    assert ds.label(i) == 2 and ds.num_frames(i) == 8
    src = d / "rawframes" / "train" / "moving_down" / "moving_down_0001"
    assert ds.frames(i, [0, 7]) == [(src / "img_00001.jpg").read_bytes(), (src / "img_00008.jpg").read_bytes()]
    r = run_cli(["pack", str(d / "rawframes"), str(tmp_path / "a")], env)
    assert r.returncode == 2 and "already exists" in r.stderr and "--force" in r.stderr


def test_pack_videos_resize_and_fps(small, tmp_path):
    d, env = small
    s = _pack(env, d / "videos", tmp_path / "v", "--short-side", "32")
    assert s["samples"] == 24 and s["layout"] == "videos"
    ds = shards.ShardDataset(tmp_path / "v", "val")
    assert ds.num_frames(0) == 8
    img = Image.open(io.BytesIO(ds.frames(0, [0])[0]))
    assert img.format == "JPEG" and img.size == (32, 32)
    raw = d / "rawframes" / "val" / "moving_right" / "moving_right_0002" / "img_00001.jpg"
    k = [ds.key(j) for j in range(len(ds))].index("val__moving_right__moving_right_0002")
    got = np.asarray(Image.open(io.BytesIO(ds.frames(k, [0])[0])).convert("RGB"), float)
    ref = np.asarray(Image.open(raw).convert("RGB").resize((32, 32), Image.BILINEAR), float)
    assert np.abs(got - ref).mean() < 12                   # same picture through H.264 + JPEG
    s = _pack(env, d / "videos", tmp_path / "half", "--fps", "12.5")
    assert shards.ShardDataset(tmp_path / "half").num_frames(0) == 4


def test_unreadable_inputs_are_skipped_and_counted(small, tmp_path):
    import shutil
    d, env = small
    raw = tmp_path / "raw"
    shutil.copytree(d / "rawframes", raw)
    bad = raw / "train" / "moving_up" / "moving_up_0000" / "img_00003.jpg"
    bad.write_bytes(bad.read_bytes()[:200])                 # truncated JPEG
    vids = tmp_path / "vids"
    shutil.copytree(d / "videos", vids)
    (vids / "train" / "growing" / "growing_0000.mp4").write_bytes(b"not a video at all" * 100)
    for src, out, what in ((raw, tmp_path / "p1", "moving_up_0000"), (vids, tmp_path / "p2", "growing_0000.mp4")):
        r = run_cli(["pack", str(src), str(out)], env, timeout=120)
        assert r.returncode == 0, r.stderr
        assert "23 videos" in r.stdout and "skipped 1 unreadable" in r.stderr and what in r.stderr
        report = json.loads((out / "pack-report.json").read_text())
        assert report["packed"] == 23 and len(report["skipped"]) == 1 and what in report["skipped"][0]["source"]
        assert len(shards.ShardDataset(out, "train")) == 15


def test_pack_bad_input_messages(tmp_path, cli_env):
    r = run_cli(["pack", str(tmp_path / "nope"), str(tmp_path / "o")], cli_env)
    assert r.returncode == 2 and "does not exist" in r.stderr
    (tmp_path / "empty").mkdir()
    r = run_cli(["pack", str(tmp_path / "empty"), str(tmp_path / "o")], cli_env)
    assert r.returncode == 2 and "neither a rawframes dataset" in r.stderr
    (tmp_path / "l").mkdir()
    (tmp_path / "l" / "train_list.txt").write_text("only-two-fields 3\n")
    r = run_cli(["pack", str(tmp_path / "l"), str(tmp_path / "o")], cli_env)
    assert r.returncode == 2 and "train_list.txt:1" in r.stderr
    r = run_cli(["pack", str(tmp_path / "l"), str(tmp_path / "o"), "--shard-size", "lots"], cli_env)
    assert r.returncode == 2 and "--shard-size" not in r.stderr and "size 'lots'" in r.stderr


def test_pack_resumes_after_sigkill_with_identical_output(tmp_path, cli_env):
    r = run_cli(["synth", str(tmp_path / "s"), "--videos-per-class", "6", "--frames", "16", "--size", "128",
                 "--layout", "rawframes", "--quiet"], cli_env, timeout=120)
    assert r.returncode == 0, r.stderr
    src = tmp_path / "s" / "rawframes"
    # Re-encoding to a smaller side makes every sample real work, so the kill lands mid-way.
    args = ["pack", str(src), None, "--shard-size", "1", "--short-side", "96", "-j", "1", "--quiet", "--json"]
    ref = _pack(cli_env, src, tmp_path / "ref", *args[3:-1])
    out = tmp_path / "out"
    killed_midway = False
    for _ in range(5):
        p = subprocess.Popen([sys.executable, "-m", "summit_jobs", *[str(out) if a is None else a for a in args]],
                             env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.time() + 60
        while time.time() < deadline and p.poll() is None:
            state = out / ".pack-state.json"
            if state.exists() and len(json.loads(state.read_text() or '{"shards": []}')["shards"]) >= 3:
                break
            time.sleep(0.005)
        p.send_signal(signal.SIGKILL)
        p.communicate(timeout=30)
        if not (out / "manifest.json").exists():
            killed_midway = True
            break
        import shutil
        shutil.rmtree(out)
    assert killed_midway, "pack finished before it could be killed"
    assert not (out / "manifest.json").exists()
    summary = _pack(cli_env, src, out, *args[3:-1])
    assert summary["resumed_shards"] >= 3
    m_ref = json.loads((tmp_path / "ref" / "manifest.json").read_text())
    m_out = json.loads((out / "manifest.json").read_text())
    assert m_out["shards"] == m_ref["shards"]
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in (tmp_path / "ref").iterdir())
    r = run_cli(["pack", str(src), str(tmp_path / "ref"), "--short-side", "64"], cli_env)
    assert r.returncode == 2 and "already exists" in r.stderr
