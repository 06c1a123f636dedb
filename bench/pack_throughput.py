"""Pack throughput: videos/s (and frames/s) per core for both input layouts, and how it scales with workers.

Input: synthetic clips written by summit_jobs.data.synth at a Kinetics-like frame size
(MP4 via PyAV, and rawframes JPEG folders), packed by the real `pack` code with
1 worker and with all cores. Frames are re-encoded at short side --short-side (so
rawframes bigger than it are decoded, resized and re-encoded, as for real
Kinetics frames kept at full size).

Several workers pay a fixed start-up first: `pack` starts a pool of "spawn"
processes, each a fresh interpreter importing the pack code and the decoders.
On a small input that cost hides the scaling, so it is measured apart (a pool
of the same kind started, the decoders imported in each worker, stopped;
--rounds times) and the input defaults to 64 videos. Rounds alternate which
worker count goes first; the figures are medians with their min-max, and the
speed-up is paired round by round. "Videos per CPU s" counts the CPU time of
the pack and its workers (the per-core rate, which other work on a shared
machine does not inflate), and "cores used" is that CPU time over the wall
time: what the run actually got of the machine.

    .venv/bin/python bench/pack_throughput.py [--videos-per-class 8] [--frames 48] [--size 320] [--rounds 2]
    .venv/bin/python bench/pack_throughput.py --smoke       # 16 tiny videos: checks that it runs

--modality flow packs optical flow instead (--flow-algorithm tvl1 or farneback): the
rate is then also given in flow fields/s (one per pair of consecutive frames).

    .venv/bin/python bench/pack_throughput.py --modality flow --flow-algorithm farneback --videos-per-class 4 --workers 1 --rounds 1
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from summit_jobs.data import pack, synth  # noqa: E402
from benchstats import spread


def cpu_seconds() -> float:
    """CPU time of this process and of its reaped children (pack's pool is joined before pack returns)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def warm_worker(_: int) -> int:
    """A pool task that imports what a pack worker's first video imports (the decoders), nothing else."""
    import av  # noqa: F401
    import numpy  # noqa: F401
    from PIL import Image  # noqa: F401
    return os.getpid()


def pool_start(workers: int) -> float:
    """Seconds to start pack's kind of pool (spawn, pack's initializer), import the decoders in each
    worker and stop it: the fixed cost a multi-worker pack pays before its first video."""
    t = time.perf_counter()
    pool = multiprocessing.get_context("spawn").Pool(workers, pack._ignore_interrupts, (os.getpid(),))
    try:
        pool.map(warm_worker, range(workers), chunksize=1)
    finally:
        pool.terminate()
        pool.join()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--videos-per-class", type=int, default=8, help="8 classes: 64 videos by default.")
    ap.add_argument("--frames", type=int, default=48)
    ap.add_argument("--size", type=int, default=320, help="Square frame side of the synthetic videos.")
    ap.add_argument("--short-side", type=int, default=256)
    ap.add_argument("--modality", choices=("rgb", "flow"), default="rgb")
    ap.add_argument("--flow-algorithm", choices=("tvl1", "farneback"), default="tvl1")
    ap.add_argument("--layouts", default="videos,rawframes", help="Comma-separated: videos, rawframes.")
    ap.add_argument("--workers", default="", help="Comma-separated worker counts (default: 1 and all cores).")
    ap.add_argument("--rounds", type=int, default=2, help="Timed packs of each layout and worker count.")
    ap.add_argument("--smoke", action="store_true", help="16 tiny videos, one round: checks that it runs.")
    a = ap.parse_args()
    if a.smoke:
        a.videos_per_class, a.frames, a.size, a.short_side, a.rounds = 2, 8, 64, 48, 1
    base = Path(tempfile.mkdtemp(prefix="pack-bench-"))
    cores = os.cpu_count() or 1
    counts = sorted({int(w) for w in a.workers.split(",")} if a.workers else {1, cores})
    n_videos = 8 * a.videos_per_class
    try:
        t = time.perf_counter()
        synth.synth(synth.SynthOptions(out=str(base / "in"), videos_per_class=a.videos_per_class, frames=a.frames,
                                       size=a.size), progress=False)
        print(f"input: {n_videos} videos x {a.frames} frames of {a.size}x{a.size} "
              f"(written in {time.perf_counter() - t:.1f} s); {cores} cores, load average "
              f"{os.getloadavg()[0]:.1f}")
        starts = {w: [pool_start(w) for _ in range(a.rounds)] for w in counts if w > 1}
        for w, v in starts.items():
            print(f"pool start-up, {w} spawn workers (start, decoder imports, stop): {statistics.median(v):.2f} s "
                  f"(min {min(v):.2f}, max {max(v):.2f})")
        flow = {"modality": "flow", "flow_algorithm": a.flow_algorithm} if a.modality == "flow" else {}
        if a.modality == "flow":           # frame folders: compute flow from the RGB frames, not read flow_x/y
            flow["filename_tmpl"] = "img_{:05d}.jpg"
        results = []
        for layout in a.layouts.split(","):
            wall: Dict[int, List[float]] = {w: [] for w in counts}
            cpu: Dict[int, List[float]] = {w: [] for w in counts}
            mb = 0.0
            for r in range(a.rounds):
                for workers in (counts if r % 2 == 0 else list(reversed(counts))):
                    out = base / f"out-{layout}-{workers}"
                    shutil.rmtree(out, ignore_errors=True)
                    c, t = cpu_seconds(), time.perf_counter()
                    s = pack.pack(pack.PackOptions(src=str(base / "in" / layout), out=str(out), workers=workers,
                                                   short_side=a.short_side, shard_size=256 * 10**6, **flow),
                                  progress=False)
                    wall[workers].append(time.perf_counter() - t)
                    cpu[workers].append(cpu_seconds() - c)
                    assert s["samples"] == n_videos, s
                    mb = s["bytes"] / 1e6
            for workers in counts:
                vps = [n_videos / x for x in wall[workers]]
                speedup = [one / x for one, x in zip(wall[counts[0]], wall[workers])]
                r = {"layout": layout, "modality": a.modality, "videos": n_videos, "frames": a.frames,
                     "workers": workers, "rounds": a.rounds, "videos_per_s": spread(vps),
                     "frames_per_s": round(statistics.median(vps) * a.frames, 1),
                     f"speedup_vs_{counts[0]}": spread(speedup),
                     "cpu_s_per_video": round(statistics.median(cpu[workers]) / n_videos, 4),
                     "videos_per_cpu_s": round(n_videos / statistics.median(cpu[workers]), 2),
                     "cores_used": spread([c / w for c, w in zip(cpu[workers], wall[workers])]), "MB": round(mb, 1)}
                results.append(r)
                v = r["videos_per_s"]
                print(f"{layout:9s} {workers} worker(s): {v['median']:6.2f} videos/s ({v['min']:.2f}-{v['max']:.2f}; "
                      f"{r['frames_per_s']:,.1f} frames/s), x{statistics.median(speedup):.2f} of {counts[0]} worker(s) "
                      f"({min(speedup):.2f}-{max(speedup):.2f}); {r['videos_per_cpu_s']:.2f} videos per CPU s, "
                      f"{r['cores_used']['median']:.2f} cores used; {mb:.1f} MB of shards"
                      + (f"; {a.modality} {a.flow_algorithm}: {statistics.median(vps) * (a.frames - 1):,.1f} "
                         "flow fields/s" if a.modality == "flow" else ""))
        print(json.dumps({"pool_start_s": {str(w): spread(v) for w, v in starts.items()}, "packs": results}))
    finally:
        shutil.rmtree(base, ignore_errors=True)

if __name__ == "__main__":
    main()
