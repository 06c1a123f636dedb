"""Hop-2 staging throughput (copy + hash verification) against plain `cp` of the same bytes.

Both sides copy the same shard files from one local folder to another in the
same run, alternating which goes first, several rounds; the figures are the
medians, and the ratio is also given round by round (median, min-max), with the
CPU time each side spent per GB (which other work on a shared machine inflates
far less than the wall time). Two cases:
- cold: the source pages are evicted before each copy (posix_fadvise DONTNEED),
  so the data comes from the device, as it does from a parallel file system;
- warm: the source is in the page cache, which makes `cp` a memory copy and
  shows the CPU cost of hashing.
`cp --reflink=never` so that a copy-on-write file system cannot fake a copy.
What "verify" costs here: stage hashes each chunk of the destination right after
copying it, read back from the page cache (the chunk was just written), not
from the device; neither side waits for write-back (no fsync).
Each case runs with sha256 (the default) and, when the blake3 package is installed, BLAKE3.
Also prints the speed of the hash algorithms on one core of this machine.

    .venv/bin/python bench/stage_throughput.py [--files 8] [--mb 128] [--rounds 3]
    .venv/bin/python bench/stage_throughput.py --smoke      # 2 files of 4 MB, 2 rounds: checks that it runs
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from trainer import shards, stage  # noqa: E402
from benchstats import evict


def cpu_seconds(who: int) -> float:
    """User + system CPU time of this process (all its threads) or of its reaped children (cp)."""
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def hash_speeds(mb: int = 256) -> dict:
    data = os.urandom(mb << 20)
    out = {}
    for algo in ("sha256", "blake2b", "blake2s", "sha1", "md5", "sha512", "sha3_256", "blake3"):
        try:
            h = shards.new_hash(algo)
        except shards.ShardError:
            continue
        best = 0.0
        for _ in range(2):
            h = shards.new_hash(algo)
            t = time.perf_counter()
            h.update(data)
            h.hexdigest()
            best = max(best, len(data) / (time.perf_counter() - t) / 1e6)
        out[algo] = round(best)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--mb", type=int, default=128, help="Size of each shard file in MB.")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="Shards staged at once (trainer.stage --threads).")
    ap.add_argument("--dir", help="Scratch folder (default: a temporary one).")
    ap.add_argument("--smoke", action="store_true", help="2 files of 4 MB, 2 rounds: checks that it runs.")
    a = ap.parse_args()
    if a.smoke:
        a.files, a.mb, a.rounds = 2, 4, 2

    base = Path(a.dir or tempfile.mkdtemp(prefix="stage-bench-"))
    src, dst_cp, dst_st = base / "src", base / "cp", base / "stage"
    for d in (src, dst_cp, dst_st):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    algos = ["sha256"]
    try:
        shards.new_hash("blake3")
        algos.append("blake3")
    except shards.ShardError:
        print("(blake3 package not installed: sha256 only)")
    files = []
    for i in range(a.files):
        p = src / f"train-{i:05d}.tar"
        with open(p, "wb") as f:
            for _ in range(a.mb):
                f.write(os.urandom(1 << 20))
        files.append(p)
    for algo in algos:
        entries = [{"name": p.name, "split": "train", "bytes": p.stat().st_size, "samples": 0,
                    algo: shards.file_hash(p, algo), "index_offset": 0, "index_bytes": 0} for p in files]
        shards.write_manifest(src / f"manifest-{algo}.json", {"format": shards.FORMAT, "name": "bench",
                                                              "classes": [], "hash": algo, "shards": entries})
    total = sum(p.stat().st_size for p in files)
    results = {}
    try:
        for case, algo in [(c, h) for c in ("cold", "warm") for h in algos]:
            cp_t, st_t, cp_cpu, st_cpu = [], [], [], []
            for rnd in range(a.rounds):
                for d in (dst_cp, dst_st):
                    shutil.rmtree(d)
                    d.mkdir()

                def prepare() -> None:
                    os.sync()                    # no write-back of the previous copy during the next
                    if case == "cold":
                        evict(files)
                    else:
                        for p in files:
                            shards.file_hash(p)  # bring into the page cache

                def run_cp() -> None:
                    prepare()
                    t, c = time.perf_counter(), cpu_seconds(resource.RUSAGE_CHILDREN)
                    subprocess.run(["cp", "--reflink=never", *map(str, files), str(dst_cp)], check=True,
                                   timeout=600)
                    cp_t.append(time.perf_counter() - t)
                    cp_cpu.append(cpu_seconds(resource.RUSAGE_CHILDREN) - c)

                def run_stage() -> None:
                    prepare()
                    t, c = time.perf_counter(), cpu_seconds(resource.RUSAGE_SELF)
                    stage.stage(src / f"manifest-{algo}.json", dst_st, "partition", 1, 0, threads=a.threads,
                                quiet=True)
                    st_t.append(time.perf_counter() - t)
                    st_cpu.append(cpu_seconds(resource.RUSAGE_SELF) - c)

                for step in ((run_cp, run_stage) if rnd % 2 == 0 else (run_stage, run_cp)):  # alternate order
                    step()
            cp_s, st_s = statistics.median(cp_t), statistics.median(st_t)
            paired = [c / s for c, s in zip(cp_t, st_t)]
            results[f"{case}-{algo}"] = {"cp_GBps": round(total / cp_s / 1e9, 3),
                                         "stage_GBps": round(total / st_s / 1e9, 3),
                                         "ratio_stage_vs_cp": round(cp_s / st_s, 3),
                                         "ratio_per_round": {"median": round(statistics.median(paired), 3),
                                                             "min": round(min(paired), 3),
                                                             "max": round(max(paired), 3)},
                                         "cp_cpu_s_per_GB": round(statistics.median(cp_cpu) / total * 1e9, 3),
                                         "stage_cpu_s_per_GB": round(statistics.median(st_cpu) / total * 1e9, 3)}
            print(f"{case:5s} {algo:7s}: cp {total / cp_s / 1e9:6.2f} GB/s | stage+verify {total / st_s / 1e9:6.2f} "
                  f"GB/s | ratio {cp_s / st_s:.2f}, per round {statistics.median(paired):.2f} "
                  f"({min(paired):.2f}-{max(paired):.2f}); CPU s/GB cp {statistics.median(cp_cpu) / total * 1e9:.2f}, "
                  f"stage {statistics.median(st_cpu) / total * 1e9:.2f}  ({a.files} x {a.mb} MB, {a.threads} threads, median of "
                  f"{a.rounds}, load average {os.getloadavg()[0]:.1f})")
        # The ceiling of any verified copy when the CPU is the limit: hashing alone, same files, same threads.
        from concurrent.futures import ThreadPoolExecutor
        for algo in algos:
            t = time.perf_counter()
            with ThreadPoolExecutor(a.threads) as pool:
                list(pool.map(lambda p: shards.file_hash(p, algo), files))
            hash_only = total / (time.perf_counter() - t) / 1e9
            results[f"hash_only_warm_GBps_{algo}"] = round(hash_only, 3)
            print(f"{algo} alone over the same files ({a.threads} threads, warm): {hash_only:.2f} GB/s")
        results["hash_MBps"] = hash_speeds(8 if a.smoke else 256)
        print("hashlib MB/s on one core:", ", ".join(f"{k} {v}" for k, v in results["hash_MBps"].items()))
        print(json.dumps(results))
    finally:
        if not a.dir:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
