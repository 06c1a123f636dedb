"""Pack throughput: videos/s (and frames/s) per core, for both input layouts.

Input: synthetic clips written by summit_jobs.synth at a Kinetics-like frame size
(MP4 via PyAV, and rawframes JPEG folders), packed by the real `pack` code with
1 worker and with all cores, in the same run. Frames are re-encoded at short side
--short-side (so rawframes bigger than it are decoded, resized and re-encoded, as
for real Kinetics frames kept at full size).

    .venv/bin/python bench/pack_throughput.py [--videos-per-class 4] [--frames 48] [--size 320]

--modality flow packs optical flow instead (--flow-algorithm tvl1 or farneback): the
rate is then also given in flow fields/s (one per pair of consecutive frames).

    .venv/bin/python bench/pack_throughput.py --modality flow --flow-algorithm farneback
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from summit_jobs import pack, synth  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--videos-per-class", type=int, default=4)
    ap.add_argument("--frames", type=int, default=48)
    ap.add_argument("--size", type=int, default=320, help="Square frame side of the synthetic videos.")
    ap.add_argument("--short-side", type=int, default=256)
    ap.add_argument("--modality", choices=("rgb", "flow"), default="rgb")
    ap.add_argument("--flow-algorithm", choices=("tvl1", "farneback"), default="tvl1")
    ap.add_argument("--layouts", default="videos,rawframes", help="Comma-separated: videos, rawframes.")
    a = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="pack-bench-"))
    cores = os.cpu_count() or 1
    try:
        t = time.perf_counter()
        synth.synth(synth.SynthOptions(out=str(base / "in"), videos_per_class=a.videos_per_class, frames=a.frames,
                                       size=a.size), progress=False)
        print(f"input: {8 * a.videos_per_class} videos x {a.frames} frames of {a.size}x{a.size} "
              f"(written in {time.perf_counter() - t:.1f} s)")
        results = []
        flow = {"modality": "flow", "flow_algorithm": a.flow_algorithm} if a.modality == "flow" else {}
        if a.modality == "flow":           # frame folders: compute flow from the RGB frames, not read flow_x/y
            flow["filename_tmpl"] = "img_{:05d}.jpg"
        for layout in a.layouts.split(","):
            for workers in sorted({1, cores}):
                out = base / f"out-{layout}-{workers}"
                t = time.perf_counter()
                s = pack.pack(pack.PackOptions(src=str(base / "in" / layout), out=str(out), workers=workers,
                                               short_side=a.short_side, shard_size=256 * 10**6, **flow),
                              progress=False)
                dt = time.perf_counter() - t
                vps = s["samples"] / dt
                r = {"layout": layout, "modality": a.modality, "workers": workers, "videos_per_s": round(vps, 2),
                     "videos_per_s_per_core": round(vps / workers, 2),
                     "frames_per_s": round(vps * a.frames, 1), "MB": round(s["bytes"] / 1e6, 1)}
                results.append(r)
                print(f"{layout:9s} {workers} worker(s): {vps:6.2f} videos/s = {vps / workers:6.2f} per core "
                      f"({vps * a.frames:,.1f} frames/s), {s['bytes'] / 1e6:.1f} MB of shards"
                      + (f"; {a.modality} {a.flow_algorithm}: {vps * (a.frames - 1):,.1f} flow fields/s"
                         if a.modality == "flow" else ""))
        print(json.dumps(results))
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
