"""Shard reader throughput: frames/s per core for decode + multi-scale crop + resize + flip to 224.

Compares, in the same run and on the same frames, in one process (= one core):
- shards: ShardDataset.frames (os.pread from one tar) + trainer.transforms.train_clip
  (crop box from the JPEG header, draft-mode decode, one resize with box=);
- baseline: the usual rawframes reader: open each img_XXXXX.jpg file, full PIL decode,
  crop, resize, flip (the same crop geometry and the same random draws).
Frames are stored at two sizes: short side 256 (the usual Kinetics pre-processing,
where draft mode cannot help at 224) and 480 (frames kept at 480p, where it can).

    .venv/bin/python bench/reader_throughput.py [--clips 60] [--rounds 3]
"""
from __future__ import annotations

import argparse
import io
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from summit_jobs import synth  # noqa: E402
from trainer import shards, transforms  # noqa: E402

SEGMENTS = 8


def make_frames(n_videos: int, frames: int, height: int, seed: int = 0):
    """Synthetic clips resized to a 4:3 frame of the given height, as JPEG (quality 90)."""
    width = int(round(height * 4 / 3 / 2)) * 2
    out = []
    for v in range(n_videos):
        clip = synth._render_clip(v % 8, frames, 128, np.random.default_rng([seed, v]))
        jpgs = []
        for f in clip:
            img = Image.fromarray(f).resize((width, height), Image.BILINEAR)
            buf = io.BytesIO()
            img.save(buf, "JPEG", quality=90)
            jpgs.append(buf.getvalue())
        out.append(jpgs)
    return out


def baseline_clip(paths, rng, size=224):
    """The per-file reader: open, decode fully, crop, resize, flip (same draws as train_clip)."""
    first = Image.open(paths[0])
    box = transforms.multiscale_box(first.size[0], first.size[1], rng, size)
    flip = rng.random() < 0.5
    out = np.empty((len(paths), size, size, 3), np.uint8)
    for t, p in enumerate(paths):
        img = Image.open(p).convert("RGB")
        img = img.crop(tuple(int(round(b)) for b in box)).resize((size, size), Image.BILINEAR)
        if flip:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        out[t] = np.asarray(img)
    return out


def run_case(base: Path, height: int, n_videos: int, frames: int, clips: int, rounds: int) -> dict:
    data = make_frames(n_videos, frames, height)
    root = base / f"h{height}"
    raw = root / "raw"
    root.mkdir(parents=True)
    w = shards.ShardWriter(root / "train-00000.tar", "train")
    for v, jpgs in enumerate(data):
        d = raw / f"v{v:03d}"
        d.mkdir(parents=True)
        for t, j in enumerate(jpgs):
            (d / f"img_{t + 1:05d}.jpg").write_bytes(j)
        w.add(f"v{v:03d}", v % 8, jpgs)
    entry = w.close()
    shards.write_manifest(root / "manifest.json", {"format": shards.FORMAT, "classes": list(synth.CLASSES),
                                                   "hash": "sha256", "shards": [entry]})
    ds = shards.ShardDataset(root, "train")
    order = np.random.default_rng(1).integers(0, len(ds), clips)

    def shard_pass():
        rng = np.random.default_rng(2)
        for i in order:
            idx = transforms.sample_indices(ds.num_frames(int(i)), SEGMENTS, rng)
            transforms.train_clip(ds.frames(int(i), idx), rng)

    def baseline_pass():
        rng = np.random.default_rng(2)
        for i in order:
            idx = transforms.sample_indices(frames, SEGMENTS, rng)
            baseline_clip([raw / f"v{int(i):03d}" / f"img_{j + 1:05d}.jpg" for j in idx], rng)

    shard_pass(), baseline_pass()    # warm the page cache and PIL
    s_t, b_t = [], []
    for _ in range(rounds):
        t = time.perf_counter()
        shard_pass()
        s_t.append(time.perf_counter() - t)
        t = time.perf_counter()
        baseline_pass()
        b_t.append(time.perf_counter() - t)
    n = clips * SEGMENTS
    s, b = n / statistics.median(s_t), n / statistics.median(b_t)
    kb = sum(len(j) for jpgs in data for j in jpgs) / (n_videos * frames) / 1e3
    return {"stored": f"{Image.open(io.BytesIO(data[0][0])).size[0]}x{height}", "jpeg_kb": round(kb, 1),
            "shards_fps": round(s), "baseline_fps": round(b), "ratio": round(s / b, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clips", type=int, default=60, help="Clips of 8 frames per timed pass.")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--videos", type=int, default=16)
    ap.add_argument("--frames", type=int, default=32)
    a = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="reader-bench-"))
    try:
        results = []
        for height in (256, 480):
            r = run_case(base, height, a.videos, a.frames, a.clips, a.rounds)
            results.append(r)
            print(f"frames {r['stored']} ({r['jpeg_kb']} KB JPEG) -> 224x224 crop+flip, one core: "
                  f"shards {r['shards_fps']} frames/s | per-file PIL baseline {r['baseline_fps']} frames/s | "
                  f"ratio {r['ratio']:.2f}")
        print(json.dumps(results))
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
