"""Shard reader throughput: frames/s per core for read + decode + multi-scale crop + resize + flip to 224.

Two questions, answered apart, in one process (= one core) on the same frames
with the same crops and flips (the same random draws):

1. What the shard format buys: the frames' bytes come either from one tar
   (ShardDataset.frames: one ``os.pread`` per frame on a file kept open) or from
   one JPEG file per frame (open, read, close: the rawframes layout). Both sides
   then run the SAME decode, timed with draft mode on both and with draft mode
   off on both, so the ratio is the I/O path alone. An I/O-only pass (no decode)
   gives the per-frame cost of each path with the page cache warm, and with the
   source pages evicted before each clip's read (cold: the bytes come from the
   disk; the tar whole, the clip's 8 files on the other side; inodes and
   directory entries stay cached either way).
2. What draft mode buys: the trainer's decode (trainer.data.transforms.train_clip:
   crop box from the JPEG header, draft-mode decode at 1/2, 1/4 or 1/8 scale when
   the crop stays >= 224 after it, one ``resize(box=...)``) against the same code
   without the draft request (a full decode), on the same bytes.

The variants run interleaved clip by clip, in an order rotated every clip,
after one warm-up pass; the cold reads run apart (their evictions would make the
warm reads cold). Decode rates and ratios are per CPU second of this one-threaded
process, since the wall clock of a shared machine also counts other processes
(wall-clock rates are in the JSON); figures are medians over the rounds with
their min-max, ratios paired round by round. For reference only, the per-file
reader this benchmark used to compare with (PIL opens each file, full decode,
crop, then a second pass to resize) runs in the same rounds. Frames are stored at two sizes:
short side 256 (the usual Kinetics pre-processing) and 480 (frames kept at 480p).

    .venv/bin/python bench/reader_throughput.py [--clips 60] [--rounds 5]
    .venv/bin/python bench/reader_throughput.py --smoke     # tiny sizes, one round: checks it runs
"""
from __future__ import annotations

import argparse
import io
import json
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Sequence, Tuple

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from summit_jobs.data import synth  # noqa: E402
from trainer import shards  # noqa: E402
from trainer.data import transforms
from benchstats import evict, spread

SEGMENTS = 8
SIZE = 224


def make_frames(n_videos: int, frames: int, height: int, seed: int = 0) -> List[List[bytes]]:
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


def full_decode_clip(frames: Sequence[bytes], rng: np.random.Generator) -> np.ndarray:
    """train_clip without the draft request: the same geometry, draws and resize, from a full decode.

    Why a copy here: it must differ from trainer.data.transforms.train_clip in the
    draft call only, so that their ratio is what draft mode buys.
    """
    rel, flip = transforms.clip_geometry(frames[0], rng, SIZE)
    out = np.empty((len(frames), SIZE, SIZE, 3), np.uint8)
    for t, data in enumerate(frames):
        img = Image.open(io.BytesIO(data))
        w, h = img.size
        if img.mode != "RGB":
            img = img.convert("RGB")
        img = img.resize((SIZE, SIZE), Image.BILINEAR, box=(rel[0] * w, rel[1] * h, rel[2] * w, rel[3] * h))
        if flip:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        out[t] = np.asarray(img)
    return out


def earlier_baseline_clip(paths: Sequence[Path], rng: np.random.Generator) -> np.ndarray:
    """The per-file reader this benchmark used to compare with: PIL opens each file, decodes it in full,
    converts, crops, then resizes (two passes over the pixels), then flips. Not like with like: kept so
    that the figures it gave can be told apart from what the shard format and draft mode buy."""
    with open(paths[0], "rb") as f:
        rel, flip = transforms.clip_geometry(f.read(), rng, SIZE)
    out = np.empty((len(paths), SIZE, SIZE, 3), np.uint8)
    for t, p in enumerate(paths):
        img = Image.open(p).convert("RGB")
        w, h = img.size
        box = (round(rel[0] * w), round(rel[1] * h), round(rel[2] * w), round(rel[3] * h))
        img = img.crop(box).resize((SIZE, SIZE), Image.BILINEAR)
        if flip:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        out[t] = np.asarray(img)
    return out


def draft_clip(frames: Sequence[bytes], rng: np.random.Generator) -> np.ndarray:
    """The trainer's own clip decode (draft mode)."""
    return transforms.train_clip(frames, rng, SIZE)


def draft_share(frames_of: Callable[[int, List[int]], List[bytes]], plan: Sequence[Tuple[int, List[int]]]) -> float:
    """Fraction of the timed clips whose crop lets draft mode decode at a reduced scale at all
    (the same test as trainer.data.transforms, with the same draws as the timed passes)."""
    reduced = 0
    for k, (i, idx) in enumerate(plan):
        data = frames_of(i, idx[:1])
        rel, _ = transforms.clip_geometry(data[0], np.random.default_rng([3, k]), SIZE)
        img = Image.open(io.BytesIO(data[0]))
        full = img.size
        bw, bh = (rel[2] - rel[0]) * full[0], (rel[3] - rel[1]) * full[1]
        img.draft("RGB", (math.ceil(full[0] * SIZE / bw), math.ceil(full[1] * SIZE / bh)))
        reduced += img.size != full
    return reduced / len(plan)


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
    keys = [ds.key(i) for i in range(len(ds))]
    order = np.random.default_rng(1).integers(0, len(ds), clips)

    def shard_frames(i: int, idx: List[int]) -> List[bytes]:
        return ds.frames(i, idx)

    def file_frames(i: int, idx: List[int]) -> List[bytes]:
        return [(raw / keys[i] / f"img_{j + 1:05d}.jpg").read_bytes() for j in idx]

    # Each variant reads and decodes the same frames with the same draws: indices drawn once, and a
    # fresh generator per clip for the crop and flip.
    draws = np.random.default_rng(2)
    plan = [(int(i), transforms.sample_indices(ds.num_frames(int(i)), SEGMENTS, draws)) for i in order]
    assert all(shard_frames(i, idx) == file_frames(i, idx) for i, idx in plan)   # same bytes on both sides
    tar = [root / "train-00000.tar"]
    variants: Dict[str, Callable[[int, int, List[int]], Tuple[float, float]]] = {}

    def timed(read, decode=None, cold_paths=None) -> Callable[[int, int, List[int]], Tuple[float, float]]:
        """One clip of a variant: (wall, CPU) seconds of its read and decode."""
        def run(k: int, i: int, idx: List[int]) -> Tuple[float, float]:
            if cold_paths is not None:
                evict(cold_paths(i, idx))
            t, c = time.perf_counter(), time.process_time()
            data = read(i, idx)
            if decode is not None:
                decode(data, np.random.default_rng([3, k]))
            return time.perf_counter() - t, time.process_time() - c
        return run

    def clip_files(i: int, idx: List[int]) -> List[Path]:
        return [raw / keys[i] / f"img_{j + 1:05d}.jpg" for j in idx]

    variants["shards+draft"] = timed(shard_frames, draft_clip)
    variants["files+draft"] = timed(file_frames, draft_clip)
    variants["shards+full"] = timed(shard_frames, full_decode_clip)
    variants["files+full"] = timed(file_frames, full_decode_clip)
    variants["earlier baseline"] = timed(clip_files, lambda paths, rng: earlier_baseline_clip(paths, rng))
    variants["shards io"] = timed(shard_frames)
    variants["files io"] = timed(file_frames)
    cold = {"shards io cold": timed(shard_frames, cold_paths=lambda i, idx: tar),
            "files io cold": timed(file_frames, cold_paths=clip_files)}
    for k, (i, idx) in enumerate(plan):          # warm-up: page cache, PIL, code paths
        for run in variants.values():
            run(k, i, idx)
    times: Dict[str, List[float]] = {name: [] for name in [*variants, *cold]}
    cpu: Dict[str, List[float]] = {name: [] for name in [*variants, *cold]}
    for r in range(rounds):
        # Interleaved clip by clip, in an order rotated every clip, so that the other work on a
        # shared machine falls on every variant alike; one sum per variant and round. The cold
        # reads run apart, after the warm ones: their evictions would make the warm reads cold.
        for group in (variants, cold):
            names = list(group)
            acc = {name: [0.0, 0.0] for name in names}
            for k, (i, idx) in enumerate(plan):
                s = (k + r) % len(names)
                for name in names[s:] + names[:s]:
                    wall, used = group[name](k, i, idx)
                    acc[name][0] += wall
                    acc[name][1] += used
            for name in names:
                times[name].append(acc[name][0])
                cpu[name].append(acc[name][1])
        for i, idx in plan:                      # the next round's warm reads start warm again
            shard_frames(i, idx), file_frames(i, idx)
    # Decode rates and their ratios per CPU second of this one-threaded process (a shared machine's
    # other work inflates wall time, not CPU time); wall-clock rates are kept in the JSON. Reads are
    # given in CPU time when warm, in wall time when cold: a cold read waits for the disk, which CPU
    # time does not count.
    n = clips * SEGMENTS
    fps = {k: spread([n / t for t in v], 0) for k, v in cpu.items() if "io" not in k}
    wall_fps = {k: spread([n / t for t in v], 0) for k, v in times.items() if "io" not in k}
    us = {k: spread([t / n * 1e6 for t in (times if "cold" in k else cpu)[k]], 1) for k in times if "io" in k}

    def ratio(fast: str, slow: str) -> Dict[str, float]:
        """Per-round speed ratio fast/slow (CPU time of slow over CPU time of fast), paired by round."""
        return spread([s / f for f, s in zip(cpu[fast], cpu[slow])])

    kb = sum(len(j) for jpgs in data for j in jpgs) / (n_videos * frames) / 1e3
    return {"stored": f"{Image.open(io.BytesIO(data[0][0])).size[0]}x{height}", "jpeg_kb": round(kb, 1),
            "frames_per_pass": n, "rounds": rounds, "draft_reduces_share": round(draft_share(shard_frames, plan), 2),
            "frames_per_cpu_s": fps, "wall_frames_per_s": wall_fps, "io_us_per_frame": us,
            "shards_over_files_draft": ratio("shards+draft", "files+draft"),
            "shards_over_files_full": ratio("shards+full", "files+full"),
            "draft_over_full_shards": ratio("shards+draft", "shards+full"),
            "draft_over_full_files": ratio("files+draft", "files+full"),
            "trainer_over_files_full": ratio("shards+draft", "files+full"),
            "trainer_over_earlier_baseline": ratio("shards+draft", "earlier baseline")}


def show(r: dict) -> None:
    f, u = r["frames_per_cpu_s"], r["io_us_per_frame"]

    def fr(k: str) -> str:
        return f"{f[k]['median']:.0f} ({f[k]['min']:.0f}-{f[k]['max']:.0f})"

    def ra(k: str) -> str:
        return f"{r[k]['median']:.2f} ({r[k]['min']:.2f}-{r[k]['max']:.2f})"

    def us(k: str) -> str:
        return f"{u[k]['median']:.1f} ({u[k]['min']:.1f}-{u[k]['max']:.1f})"

    print(f"frames {r['stored']} ({r['jpeg_kb']} KB JPEG) -> {SIZE}x{SIZE}, one core, {r['frames_per_pass']} "
          f"frames per pass, median (min-max) of {r['rounds']} rounds, frames per CPU second; draft mode "
          f"reduces the decode for {r['draft_reduces_share']:.0%} of the clips")
    print(f"  draft on both:  shards {fr('shards+draft')} | files {fr('files+draft')} frames/s | "
          f"shards/files {ra('shards_over_files_draft')}")
    print(f"  full on both:   shards {fr('shards+full')} | files {fr('files+full')} frames/s | "
          f"shards/files {ra('shards_over_files_full')}")
    print(f"  draft/full:     shards {ra('draft_over_full_shards')} | files {ra('draft_over_full_files')}")
    print(f"  not like with like: shards+draft against the earlier baseline (PIL opens each file, full decode, "
          f"crop then resize) {fr('earlier baseline')} frames/s: {ra('trainer_over_earlier_baseline')}")
    print(f"  bytes only, us/frame: warm (CPU) shards {us('shards io')} | files {us('files io')}; "
          f"cold (wall) shards {us('shards io cold')} | files {us('files io cold')}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clips", type=int, default=60, help="Clips of 8 frames per timed pass.")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--videos", type=int, default=16)
    ap.add_argument("--frames", type=int, default=32)
    ap.add_argument("--heights", default="256,480", help="Stored frame heights (4:3 frames), comma-separated.")
    ap.add_argument("--smoke", action="store_true", help="Tiny sizes and one round: checks that it runs.")
    a = ap.parse_args()
    if a.smoke:
        a.clips, a.rounds, a.videos, a.frames, a.heights = 4, 1, 2, 8, "256"
    base = Path(tempfile.mkdtemp(prefix="reader-bench-"))
    try:
        results = []
        for height in (int(h) for h in a.heights.split(",")):
            r = run_case(base, height, a.videos, a.frames, a.clips, a.rounds)
            results.append(r)
            show(r)
        print(json.dumps(results))
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
