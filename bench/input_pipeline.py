"""Input pipeline vs training step: frames/s one core decodes and augments, and
how many cores per rank the step's consumption needs.

Pipeline = the trainer's own Dataset (TrainClips: shard read with pread, frame
choice, JPEG decode, multi-scale crop, flip) on one process (one core). The
consumption side is the step time of the TSM model for the same clips, either
measured here (CPU, small resolution) or given (--step-clips-per-s, e.g. a
GPU's measured clips/s, or the reference 26 clips/s per V100 of mmaction2).
The decode pass runs --rounds times after a warm-up; the figures are the
median and min-max over the rounds.

Usage (frames stored at 340x256 JPEG, the defaults; 224x224 crops):
  .venv/bin/python bench/input_pipeline.py --step-clips-per-s 26   # cores per V100 rank (mmaction2's 26 clips/s)
  .venv/bin/python bench/input_pipeline.py                         # against a CPU TSM-R50 step measured here
  .venv/bin/python bench/input_pipeline.py --smoke --step-clips-per-s 26   # tiny: checks that it runs
"""
from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from trainer.data.clips import ClipSpec  # noqa: E402
from trainer.data.datasets import TrainClips  # noqa: E402
from trainer.shards import ShardWriter, write_manifest  # noqa: E402


def make_frames(n: int, w: int, h: int, rng: np.random.Generator) -> list:
    """Smooth, photo-like frames (gradients + noise) so JPEG sizes resemble real video frames."""
    yy, xx = np.mgrid[0:h, 0:w]
    out = []
    base = rng.integers(0, 255, 3)
    for t in range(n):
        img = np.stack([(xx * (c + 1) + yy * (3 - c) + 5 * t + base[c]) % 256 for c in range(3)], -1)
        img = (img + rng.normal(0, 12, img.shape)).clip(0, 255).astype(np.uint8)
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, format="JPEG", quality=85)
        out.append(buf.getvalue())
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--videos", type=int, default=24)
    p.add_argument("--frames", type=int, default=80, help="frames per video")
    p.add_argument("--width", type=int, default=340)
    p.add_argument("--height", type=int, default=256, help="Kinetics frames are usually stored at shorter side 256")
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--clips", type=int, default=48, help="clips decoded for the measurement")
    p.add_argument("--step-clips-per-s", type=float, default=0.0,
                   help="consumption to compare with; 0 = measure a CPU TSM-R50 step at --step-size")
    p.add_argument("--step-size", type=int, default=112)
    p.add_argument("--rounds", type=int, default=5, help="timed decode passes of --clips clips each")
    p.add_argument("--smoke", action="store_true", help="tiny data set and 2 rounds: checks that it runs")
    a = p.parse_args()
    if a.smoke:
        a.videos, a.frames, a.clips, a.rounds = 2, 16, 4, 2
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        w = ShardWriter(root / "train-000.tar", "train")
        for i in range(a.videos):
            w.add(f"v{i:04d}", i % 4, make_frames(a.frames, a.width, a.height, rng))
        write_manifest(root / "manifest.json", {"format": "summit-jobs-shards/1", "name": "bench",
                                                "classes": ["a", "b", "c", "d"], "shards": [w.close()]})
        ds = TrainClips(str(root), ClipSpec(num_segments=8, mode="dense", stride=8, size=a.size), seed=0)
        ds[(0, 0)]  # open files, warm caches
        for k in range(a.clips):
            ds[(1, k % len(ds))]
        rates, wall = [], []
        for r in range(a.rounds):
            # Per core = per CPU second of this one-threaded process: on a shared machine the wall
            # clock also counts the time other processes hold the core; both are printed.
            t, w0 = time.process_time(), time.perf_counter()
            for k in range(a.clips):
                ds[(1, k % len(ds))]   # the same clips every round
            rates.append(a.clips / (time.process_time() - t))
            wall.append(a.clips / (time.perf_counter() - w0))
        clips_s = statistics.median(rates)
        print(f"input pipeline, 1 core: {clips_s * 8:8.1f} frames/s = {clips_s:6.2f} clips/s per CPU second, median "
              f"of {a.rounds} rounds ({min(rates) * 8:.0f}-{max(rates) * 8:.0f} frames/s; wall clock "
              f"{statistics.median(wall) * 8:.0f} frames/s; 8 frames, {a.width}x{a.height} JPEG -> "
              f"{a.size}x{a.size} multi-scale crop + flip)")
    if a.step_clips_per_s:
        need, src = a.step_clips_per_s, "given by --step-clips-per-s"
    else:
        from trainer.models.model import build_model
        import torch.nn.functional as F
        m = build_model("resnet50", 400, 8)
        opt = torch.optim.SGD(m.parameters(), lr=1e-4, momentum=0.9)
        x = torch.randn(8, 3, a.step_size, a.step_size)
        y = torch.zeros(1, dtype=torch.long)
        for i in range(3):
            if i == 1:
                t = time.perf_counter()
            opt.zero_grad()
            F.cross_entropy(m(x), y).backward()
            opt.step()
        need = 1 / ((time.perf_counter() - t) / 2)
        src = f"measured: CPU TSM-R50 step, 1 thread, 1 clip at {a.step_size}x{a.step_size}"
    print(f"step consumption: {need:8.2f} clips/s = {need * 8:.1f} frames/s ({src})")
    print(f"cores of input pipeline needed per rank: {need / clips_s:.2f} ({need / max(rates):.2f}-"
          f"{need / min(rates):.2f})")
    print(json.dumps({"frame": f"{a.width}x{a.height}", "size": a.size, "rounds": a.rounds,
                      "frames_per_s": {"median": round(clips_s * 8, 1), "min": round(min(rates) * 8, 1),
                                       "max": round(max(rates) * 8, 1)},
                      "wall_frames_per_s": round(statistics.median(wall) * 8, 1),
                      "step_clips_per_s": round(need, 3), "step_source": src,
                      "cores_per_rank": round(need / clips_s, 3)}))


if __name__ == "__main__":
    main()
