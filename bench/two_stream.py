"""Two-stream training on the synthetic motion classes: does the RGB-to-flow transfer save epochs?

    python bench/two_stream.py [--work DIR] [--seeds 0 1 2] [--targets 0.8 0.9 0.95]

The whole path a user takes, with the real CLI and trainer: ``summit-jobs synth``
(8 motion classes in forward/backward pairs), ``pack`` twice (RGB frames, and
Farneback optical flow), an RGB stream, then for each seed a flow stream from
scratch and one started from the trained RGB model (``--init-from``, the AAVG
paper's transfer), both with the same seed, data order and options. Reported:
the epoch at which each flow stream's validation top-1 first reaches each
target, its final test top-1, and ``summit-jobs fuse`` of the RGB stream with
each flow stream. An epoch that never reaches a target counts as "never".

Wall time on a 2-core CPU machine: about 13 minutes with the defaults (12 of them training).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional

#: One small network and optimiser for both streams (bench/tsm_learning.py's: TSM learns the synthetic set).
COMMON = ["--engine", "ddp", "--arch", "resnet18", "--width", "0.25", "--input-size", "48", "--batch-per-gpu", "16",
          "--lr", "0.05", "--warmup-epochs", "1", "--workers", "0", "--test-clips", "2", "--test-last", "1",
          "--log-every", "1000", "--no-flip", "--threads", "2"]
#: RGB: 8 frames, 2 apart; flow: 4 segments of 5 consecutive fields (20 fields of the 15 a video has).
RGB = ["--num-segments", "8", "--frame-stride", "2"]
FLOW = ["--modality", "flow", "--flow-stack", "5", "--num-segments", "4", "--frame-stride", "3"]


def run(argv: List[str], env: Dict[str, str], log: Optional[Path] = None) -> str:
    """Run a command; its output goes to ``log`` (or is returned); a failure stops the bench with the tail."""
    proc = subprocess.run(argv, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if log is not None:
        log.write_text(proc.stdout)
    if proc.returncode != 0:
        sys.exit(f"bench: {' '.join(argv[:6])} ... failed ({proc.returncode}):\n{proc.stdout[-3000:]}")
    return proc.stdout


def cli(*args: str) -> List[str]:
    return [sys.executable, "-m", "summit_jobs", *args]


def trainer(run_dir: Path, data: Path, *extra: str) -> List[str]:
    return [sys.executable, "-m", "trainer", "--run-dir", str(run_dir), "--data", str(data), *COMMON, *extra]


def evals(run_dir: Path) -> List[float]:
    """Validation top-1 after each epoch."""
    recs = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["top1"] for r in recs if r.get("kind") == "eval"]


def test_top1(run_dir: Path) -> float:
    recs = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in recs if r.get("kind") == "test" and r.get("summary")][-1]["top1"]


def first_epoch(curve: List[float], target: float) -> Optional[int]:
    """The 1-based epoch at which ``curve`` first reaches ``target`` (None: never)."""
    return next((i + 1 for i, v in enumerate(curve) if v >= target), None)


def fused(env: Dict[str, str], rgb: Path, flow: Path, weights: str = "1,1") -> float:
    out = json.loads(run(cli("fuse", str(rgb), str(flow), "--weights", weights, "--json"), env))
    return out["fused"]["top1"]


def prepare(work: Path, env: Dict[str, str], a: argparse.Namespace) -> None:
    """Synthetic videos, their RGB and flow packs, and the RGB stream (skipped when already there)."""
    if not (work / "flow" / "manifest.json").exists():
        run(cli("synth", str(work / "d"), "--videos-per-class", str(a.videos_per_class), "--frames", "16",
                "--size", "64", "--seed", "1", "--layout", "rawframes", "--quiet", "--force"), env)
        frames = str(work / "d" / "rawframes")
        run(cli("pack", frames, str(work / "rgb"), "--short-side", "64", "--quiet"), env)
        run(cli("pack", frames, str(work / "flow"), "--modality", "flow", "--flow-algorithm", "farneback",
                "--filename-tmpl", "img_{:05d}.jpg", "--short-side", "64", "--quiet"), env)
    rgb = work / "runs" / "rgb"
    if not (rgb / "COMPLETE").exists():
        run(trainer(rgb, work / "rgb", *RGB, "--epochs", str(a.rgb_epochs)), env, work / "rgb.log")
    print(f"rgb stream: val top1 by epoch {[round(v, 3) for v in evals(rgb)]}, test {test_top1(rgb):.3f}",
          flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=None, help="working folder (default: a new temporary one)")
    ap.add_argument("--videos-per-class", type=int, default=50)
    ap.add_argument("--rgb-epochs", type=int, default=30)
    ap.add_argument("--flow-epochs", type=int, default=8)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--targets", type=float, nargs="+", default=[0.8, 0.9, 0.95])
    a = ap.parse_args()
    work = a.work or Path(tempfile.mkdtemp(prefix="two-stream-"))
    env = dict(os.environ, XDG_CONFIG_HOME=str(work / "xdg"))
    prepare(work, env, a)
    rows = []
    for seed in a.seeds:
        for mode, extra in (("scratch", []), ("transfer", ["--init-from", str(work / "runs" / "rgb")])):
            run_dir = work / "runs" / f"flow-{mode}-{seed}"
            if not (run_dir / "COMPLETE").exists():
                run(trainer(run_dir, work / "flow", *FLOW, "--seed", str(seed),
                            "--epochs", str(a.flow_epochs), *extra), env, work / f"flow-{mode}-{seed}.log")
            curve = evals(run_dir)
            row = {"seed": seed, "mode": mode, "curve": curve, "test_top1": test_top1(run_dir),
                   "fused_top1": fused(env, work / "runs" / "rgb", run_dir),
                   "fused_tsn_top1": fused(env, work / "runs" / "rgb", run_dir, "1,1.5"),
                   **{f"epochs_to_{t:g}": first_epoch(curve, t) for t in a.targets}}
            rows.append(row)
            print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()
                              if k != "curve"}) + f"  curve {[round(v, 3) for v in curve]}", flush=True)
    summary(rows, a.targets, a.flow_epochs)


def summary(rows: List[Dict], targets: List[float], epochs: int) -> None:
    """Mean epochs to each target (never = epochs + 1, marked), test and fused top-1, per mode."""
    print(f"\n{'flow stream':<10} " + " ".join(f"{'epochs to ' + format(t, 'g'):>14}" for t in targets)
          + f" {'test top1':>10} {'fused 1:1':>10} {'fused 1:1.5':>12}")
    for mode in ("scratch", "transfer"):
        mine = [r for r in rows if r["mode"] == mode]
        cells = []
        for t in targets:
            got = [r[f"epochs_to_{t:g}"] for r in mine]
            never = sum(g is None for g in got)
            mean = statistics.mean(g if g is not None else epochs + 1 for g in got)
            cells.append(f"{mean:>10.2f}{'*' * never:<4}")
        print(f"{mode:<10} " + " ".join(cells) + f" {statistics.mean(r['test_top1'] for r in mine):>10.3f}"
              f" {statistics.mean(r['fused_top1'] for r in mine):>10.3f}"
              f" {statistics.mean(r['fused_tsn_top1'] for r in mine):>12.3f}")
    print(f"(mean over seeds; * = a seed that never reached the target in {epochs} epochs, counted as {epochs + 1}; "
          "fused: summit-jobs fuse of the RGB stream with each flow stream, weights RGB:flow)")


if __name__ == "__main__":
    main()
