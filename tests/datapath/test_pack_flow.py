"""pack --modality flow through the real command line: accuracy of the stored flow, the shard format,
determinism over worker counts, resume after a kill, mmaction2's pre-extracted flow folders."""
import io
import json
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from PIL import Image

from helpers import run_cli
from summit_jobs.data import flow
from trainer import shards


def _texture(h: int, w: int, seed: int, scale: int) -> np.ndarray:
    """Smooth random texture with a 32-pixel margin, at ``scale`` x the frame size."""
    rng = np.random.default_rng(seed)
    coarse = Image.fromarray((rng.random(((h + 64) // 4, (w + 64) // 4)) * 255).astype(np.uint8))
    return np.asarray(coarse.resize(((w + 64) * scale, (h + 64) * scale), Image.BICUBIC), float)


def _shifted_frames(h: int, w: int, dx: float, dy: float, n: int, seed: int = 0) -> list:
    """``n`` frames of one texture, each moved by (dx, dy) pixels from the last: exact sub-pixel shifts
    (whole pixels at 4x resolution, then a 4x4 block mean)."""
    s = 4
    big = _texture(h, w, seed, s)
    out = []
    for t in range(n):
        ox, oy = 32 * s - round(t * dx * s), 32 * s - round(t * dy * s)
        crop = big[oy:oy + h * s, ox:ox + w * s]
        out.append(crop.reshape(h, s, w, s).mean(axis=(1, 3)).round().clip(0, 255).astype(np.uint8))
    return out


def _write_rawframes(root, clips) -> None:
    """A rawframes dataset: ``clips`` is [(folder, frames, label)], JPEG quality 95, train_list.txt."""
    lines = []
    for folder, frames, label in clips:
        d = root / folder
        d.mkdir(parents=True)
        for i, f in enumerate(frames, 1):
            Image.fromarray(f).convert("RGB").save(d / f"img_{i:05d}.jpg", quality=95)
        lines.append(f"{folder} {len(frames)} {label}")
    (root / "train_list.txt").write_text("\n".join(lines) + "\n")


def _pack(env, *args, timeout=300):
    r = run_cli(["pack", *map(str, args), "--json", "--quiet"], env, timeout=timeout)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _decoded(ds, i, t, bound=20.0):
    x, y = ds.flow(i, [t])[0]
    return tuple(flow.decode(np.asarray(Image.open(io.BytesIO(b))), bound) for b in (x, y))


SHIFTS = [(3.0, -2.0), (1.5, 0.5)]


@pytest.mark.parametrize("algorithm", ["farneback", "tvl1"])
def test_stored_flow_measures_a_known_translation(algorithm, tmp_path, cli_env):
    clips = [(f"shift{k}", _shifted_frames(72, 88, dx, dy, 3, seed=k), k) for k, (dx, dy) in enumerate(SHIFTS)]
    _write_rawframes(tmp_path / "raw", clips)
    _pack(cli_env, tmp_path / "raw", tmp_path / "out", "--modality", "flow", "--flow-algorithm", algorithm,
          "--filename-tmpl", "img_{:05d}.jpg", "--short-side", "0", "--no-shuffle")
    ds = shards.ShardDataset(tmp_path / "out", "train")
    assert ds.modality == "flow" and len(ds) == 2
    for i, (dx, dy) in enumerate(SHIFTS):
        assert ds.key(i) == f"shift{i}" and ds.num_frames(i) == 2          # 3 frames, 2 flow fields
        for t in range(2):
            fx, fy = _decoded(ds, i, t)
            assert fx.shape == (72, 88)
            inner = (slice(12, -12), slice(12, -12))
            assert abs(fx[inner].mean() - dx) < 0.5 and abs(fy[inner].mean() - dy) < 0.5, (algorithm, dx, dy,
                                                                                          fx[inner].mean(),
                                                                                          fy[inner].mean())


def test_quantize_is_the_tsn_mapping_and_decode_inverts_it():
    v = np.array([-25.0, -20.0, -0.1, 0.0, 0.1, 7.3, 20.0, 31.0])
    u = flow.quantize(v, 20.0)
    assert u.tolist() == [round(255 * (min(max(x, -20), 20) + 20) / 40) for x in v]
    assert u[0] == 0 and u[-1] == 255 and u[3] == 128
    assert np.abs(flow.decode(u, 20.0)[1:-1] - v[1:-1]).max() <= 20.0 / 255 + 1e-6


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """synth: 3 videos per class, 6 frames of 48x48, both layouts."""
    root = tmp_path_factory.mktemp("flowsynth")
    import os
    env = dict(os.environ, XDG_CONFIG_HOME=str(root / "xdg"))
    r = run_cli(["synth", str(root / "d"), "--videos-per-class", "3", "--val-fraction", "0.34", "--frames", "6",
                 "--size", "48", "--seed", "3", "--quiet"], env)
    assert r.returncode == 0, r.stderr
    return root / "d", env


@pytest.mark.parametrize("layout,algorithm", [("videos", "tvl1"), ("rawframes", "farneback")])
def test_flow_pack_is_the_same_for_one_and_two_workers(small, tmp_path, layout, algorithm):
    d, env = small
    side = 24 if algorithm == "tvl1" else 48                     # TV-L1 is slow: a quarter of the pixels
    extra = ["--modality", "flow", "--flow-algorithm", algorithm, "--shard-size", f"{side * 5 // 6}KB",
             "--short-side", side]
    if layout == "rawframes":
        extra += ["--filename-tmpl", "img_{:05d}.jpg"]
    s1 = _pack(env, d / layout, tmp_path / "a", *extra, "-j", "1")
    s2 = _pack(env, d / layout, tmp_path / "b", *extra, "-j", "2")
    assert s1["samples"] == s2["samples"] == 24 and s1["skipped"] == 0 and s1["shards"] > 2
    m1, m2 = (json.loads((tmp_path / x / "manifest.json").read_text()) for x in "ab")
    assert m1 == m2 and m1["modality"] == "flow" and m1["flow"] == {"algorithm": algorithm, "bound": 20.0}
    for e in m1["shards"]:
        assert (tmp_path / "a" / e["name"]).read_bytes() == (tmp_path / "b" / e["name"]).read_bytes()
    ds = shards.ShardDataset(tmp_path / "a", "val")
    assert len(ds) == 8 and all(ds.num_frames(i) == 5 for i in range(len(ds)))   # 6 frames, 5 fields
    x, y = ds.flow(0, [4])[0]
    assert Image.open(io.BytesIO(x)).mode == "L" and Image.open(io.BytesIO(y)).size == (side, side)
    with pytest.raises(shards.ShardError, match="flow"):
        ds.frames(0, [0])
    import tarfile
    names = tarfile.open(tmp_path / "a" / m1["shards"][0]["name"]).getnames()
    key = names[0][:-len(".json")]
    assert names[1:3] == [f"{key}.00000.x.jpg", f"{key}.00000.y.jpg"]


def _one_frame_mp4(path) -> None:
    import av
    with av.open(str(path), mode="w", format="mp4") as c:
        st = c.add_stream("libx264", rate=25)
        st.width = st.height = 48
        st.pix_fmt = "yuv420p"
        frame = av.VideoFrame.from_ndarray(np.full((48, 48, 3), 90, np.uint8), format="rgb24")
        for packet in st.encode(frame):
            c.mux(packet)
        for packet in st.encode():
            c.mux(packet)


def test_a_one_frame_video_is_skipped_and_reported(small, tmp_path):
    d, env = small
    vids = tmp_path / "vids"
    shutil.copytree(d / "videos", vids)
    _one_frame_mp4(vids / "train" / "growing" / "still.mp4")
    r = run_cli(["pack", str(vids), str(tmp_path / "o"), "--modality", "flow", "--flow-algorithm", "farneback",
                 "--quiet"], env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "24 videos" in r.stdout and "skipped 1" in r.stderr and "still.mp4" in r.stderr
    report = json.loads((tmp_path / "o" / "pack-report.json").read_text())
    assert report["packed"] == 24 and "optical flow needs at least 2 frames" in report["skipped"][0]["error"]


def test_flow_pack_resumes_after_sigkill_with_identical_output(tmp_path, cli_env):
    r = run_cli(["synth", str(tmp_path / "s"), "--videos-per-class", "6", "--frames", "12", "--size", "96",
                 "--layout", "rawframes", "--quiet"], cli_env, timeout=120)
    assert r.returncode == 0, r.stderr
    src = tmp_path / "s" / "rawframes"
    opts = ["--shard-size", "1", "--modality", "flow", "--flow-algorithm", "farneback",
            "--filename-tmpl", "img_{:05d}.jpg", "-j", "1"]
    _pack(cli_env, src, tmp_path / "ref", *opts)
    out = tmp_path / "out"
    killed_midway = False
    for _ in range(5):
        p = subprocess.Popen([sys.executable, "-m", "summit_jobs", "pack", str(src), str(out), *opts, "--quiet"],
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
        shutil.rmtree(out)
    assert killed_midway, "pack finished before it could be killed"
    summary = _pack(cli_env, src, out, *opts)
    assert summary["resumed_shards"] >= 3
    ref = json.loads((tmp_path / "ref" / "manifest.json").read_text())
    assert json.loads((out / "manifest.json").read_text()) == ref and ref["modality"] == "flow"
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in (tmp_path / "ref").iterdir())
    # The same input as RGB is another pack: its state is not resumed as flow, and vice versa.
    r = run_cli(["pack", str(src), str(tmp_path / "ref"), "--modality", "flow", "--flow-bound", "10"], cli_env)
    assert r.returncode == 2 and "already exists" in r.stderr


def _flow_folder(root, name: str, fields: int, value_x: int, value_y: int, size=(64, 48)) -> None:
    """An mmaction2 flow folder: flow_x_00001.jpg + flow_y_00001.jpg per field, constant values."""
    d = root / name
    d.mkdir(parents=True)
    for t in range(1, fields + 1):
        Image.new("L", size, value_x).save(d / f"flow_x_{t:05d}.jpg", quality=95)
        Image.new("L", size, value_y).save(d / f"flow_y_{t:05d}.jpg", quality=95)


def test_preextracted_mmaction2_flow_folders(tmp_path, cli_env):
    src = tmp_path / "flows"
    # +4 px (x) and -2 px (y) at bound 20: round(255 * 24 / 40) = 153, round(255 * 18 / 40) = 115
    _flow_folder(src, "train/a", 3, 153, 115)
    _flow_folder(src, "train/b", 2, 128, 128)
    (src / "train_list.txt").write_text("train/a 3 0\ntrain/b 2 1\n")
    s = _pack(cli_env, src, tmp_path / "o", "--modality", "flow")
    assert s["samples"] == 2 and s["layout"] == "rawframes"
    m = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert m["modality"] == "flow" and m["flow"] == {"algorithm": "pre-extracted", "bound": 20.0}
    ds = shards.ShardDataset(tmp_path / "o", "train")
    i = [ds.key(j) for j in range(len(ds))].index("train__a")
    assert ds.num_frames(i) == 3
    assert ds.flow(i, [2]) == [((src / "train/a/flow_x_00003.jpg").read_bytes(),
                                (src / "train/a/flow_y_00003.jpg").read_bytes())]
    # Downscaled to short side 24 (half): the motion halves too, +2 px and -1 px.
    _pack(cli_env, src, tmp_path / "half", "--modality", "flow", "--short-side", "24")
    half = shards.ShardDataset(tmp_path / "half", "train")
    fx, fy = _decoded(half, [half.key(j) for j in range(len(half))].index("train__a"), 0)
    assert fx.shape == (24, 32) and abs(fx.mean() - 2.0) < 0.3 and abs(fy.mean() + 1.0) < 0.3


def test_help_and_rgb_pack_never_import_opencv(small, tmp_path):
    d, env = small
    for args in (["--help"], ["pack", str(d / "rawframes"), str(tmp_path / "rgb"), "--quiet", "-j", "1"]):
        r = subprocess.run([sys.executable, "-X", "importtime", "-m", "summit_jobs", *args], env=env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        assert not [ln for ln in r.stderr.splitlines() if ln.split("|")[-1].strip() == "cv2"]
    assert shards.ShardDataset(tmp_path / "rgb").modality == "rgb"
    assert "modality" not in json.loads((tmp_path / "rgb" / "manifest.json").read_text())
