"""Does the temporal shift learn time? TSM vs the same network with the shift off.

Data (default): the product's synthetic set, `summit-jobs synth` packed by
`summit-jobs pack`: eight classes in four forwards/backwards pairs (moving
right/left, down/up, growing/shrinking, rotating clockwise/counter-clockwise).
A clip of one class of a pair is a clip of the other played backwards, so a
per-frame 2D network with average consensus (shift off = TSN) can name the
kind of motion but not its direction: at most 25% (chance 12.5%), while TSM
can read the order. `--squares` uses the tests' moving squares instead (two
classes, forward/backward on a wrapping path: TSN at most 50%).
Both runs use the real trainer (`python -m trainer`, one rank, CPU) with
identical settings apart from --no-shift.

Usage: .venv/bin/python bench/tsm_learning.py [--epochs 20] [--videos-per-class 100] [--threads 2]
Prints the validation top-1 per epoch and the final figures of both runs.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from trainer_utils import REPO, make_dataset  # noqa: E402

from trainer.loop.metrics import read_metrics  # noqa: E402


def synth_dataset(root: Path, videos_per_class: int, size: int) -> None:
    sj = [sys.executable, "-m", "summit_jobs"]
    subprocess.run([*sj, "synth", str(root / "synth"), "--videos-per-class", str(videos_per_class), "--frames", "16",
                    "--size", str(size), "--layout", "rawframes", "--quiet"], check=True, cwd=str(REPO))
    subprocess.run([*sj, "pack", str(root / "synth" / "rawframes"), str(root / "shards"), "--short-side", str(size),
                    "--shard-size", "4MB", "--quiet"], check=True, cwd=str(REPO), stdout=subprocess.DEVNULL)


def run(data: Path, run_dir: Path, a: argparse.Namespace, shift: bool) -> dict:
    cmd = [sys.executable, "-m", "trainer", "--run-dir", str(run_dir), "--data", str(data), "--engine", "ddp",
           "--arch", "resnet18", "--width", str(a.width), "--num-segments", "8", "--frame-stride", "2",
           "--input-size", str(a.size), "--batch-per-gpu", str(a.batch), "--lr", str(a.lr),
           "--warmup-epochs", "1", "--epochs", str(a.epochs), "--workers", "0", "--num-classes", "0",
           "--no-flip", "--test-clips", "2", "--test-last", "1", "--log-every", "1000",
           "--ckpt-every-minutes", "0", "--threads", str(a.threads), "--seed", str(a.seed)]
    if not shift:
        cmd.append("--no-shift")
    t0 = time.time()
    proc = subprocess.run(cmd, cwd=str(REPO), timeout=3600, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True)
    if proc.returncode:
        sys.exit(f"the trainer failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    wall = time.time() - t0
    recs = read_metrics(run_dir)
    evals = [r["top1"] for r in recs if r["kind"] == "eval"]
    test = [r for r in recs if r["kind"] == "test" and r.get("summary")][-1]
    return {"evals": evals, "test_top1": test["top1"], "wall_s": wall}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--videos-per-class", type=int, default=100, help="synthetic set: 75%% train, 25%% val")
    p.add_argument("--frame-size", type=int, default=64, help="synthetic set: frame side in pixels")
    p.add_argument("--squares", action="store_true", help="the tests' moving squares instead of the synthetic set")
    p.add_argument("--train", type=int, default=256, help="--squares: training clips")
    p.add_argument("--val", type=int, default=128, help="--squares: validation clips")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--width", type=float, default=0.25)
    p.add_argument("--size", type=int, default=48, help="network input side")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if a.squares:
            classes = ("forward", "backward")
            data = make_dataset(Path(tmp) / "data", train=a.train, val=a.val, frames=16, size=a.size, shards=4,
                                classes=classes)
            what = f"moving squares: {a.train} train / {a.val} val clips, 2 classes, 16 frames {a.size}x{a.size}"
            ceiling = 50.0
        else:
            synth_dataset(Path(tmp), a.videos_per_class, a.frame_size)
            data = Path(tmp) / "shards"
            manifest = json.loads((data / "manifest.json").read_text())
            classes = tuple(manifest["classes"])
            count = {split: sum(s["samples"] for s in manifest["shards"] if s["split"] == split)
                     for split in ("train", "val")}
            what = (f"synthetic set: {count['train']} train / {count['val']} val clips, {len(classes)} classes, "
                    f"16 frames {a.frame_size}x{a.frame_size}")
            ceiling = 25.0
        print(f"{what}; resnet18 width {a.width}, input {a.size}, 8 segments, batch {a.batch}, lr {a.lr}, "
              f"{a.epochs} epochs, {a.threads} threads", flush=True)
        res = {}
        for shift in (True, False):
            name = "TSM (shift on)" if shift else "TSN (shift off)"
            r = run(data, Path(tmp) / ("on" if shift else "off"), a, shift)
            res[name] = r
            print(f"{name:16s} val top1 per epoch: " + " ".join(f"{100 * x:.0f}" for x in r["evals"]), flush=True)
        print()
        print(f"{'model':16s} {'final val top1 (1 clip)':>24s} {'test top1 (2 clips)':>20s} {'wall s':>8s}")
        for name, r in res.items():
            print(f"{name:16s} {100 * r['evals'][-1]:23.1f}% {100 * r['test_top1']:19.1f}% {r['wall_s']:8.0f}")
        print(f"chance: {100 / len(classes):.1f}%; an order-blind model's ceiling: {ceiling:.0f}%")


if __name__ == "__main__":
    main()
