"""Does the temporal shift learn time? TSM vs the same network with the shift off.

Data: clips of a square moving on a wrapping path; two classes, "forward"
(right or down) and "backward" (left or up), the axis drawn per clip. The set
of frames of a clip has the same distribution in both classes, so a per-frame
2D network with average consensus (shift off = TSN) can only guess (50%),
while TSM can read the order. (With four fixed-axis classes a TSN can learn the
axis from the positions a clip visits: --four-classes shows that.)
Both runs use the real trainer (`python -m
trainer`, one rank, CPU) with identical settings apart from --no-shift.

Usage: .venv/bin/python bench/tsm_learning.py [--epochs 12] [--train 256] [--threads 2]
Prints the validation top-1 per epoch and the final figures of both runs.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from trainer_utils import REPO, make_dataset  # noqa: E402

from trainer.metrics import read_metrics  # noqa: E402


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
    subprocess.run(cmd, check=True, cwd=str(REPO), timeout=3600, stdout=subprocess.DEVNULL)
    wall = time.time() - t0
    recs = read_metrics(run_dir)
    evals = [r["top1"] for r in recs if r["kind"] == "eval"]
    test = [r for r in recs if r["kind"] == "test" and r.get("summary")][-1]
    return {"evals": evals, "test_top1": test["top1"], "wall_s": wall}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--train", type=int, default=256)
    p.add_argument("--val", type=int, default=128)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--width", type=float, default=0.25)
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--four-classes", action="store_true", help="right/left/down/up (chance 25%%, TSN ceiling 50%%)")
    a = p.parse_args()
    classes = ("right", "left", "down", "up") if a.four_classes else ("forward", "backward")
    with tempfile.TemporaryDirectory() as tmp:
        data = make_dataset(Path(tmp) / "data", train=a.train, val=a.val, frames=16, size=a.size, shards=4,
                            classes=classes)
        print(f"moving squares: {a.train} train / {a.val} val clips, {len(classes)} classes, 16 frames {a.size}x{a.size}; "
              f"resnet18 width {a.width}, 8 segments, batch {a.batch}, {a.epochs} epochs, "
              f"{a.threads} threads", flush=True)
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
        print(f"chance: {100 / len(classes):.1f}%")


if __name__ == "__main__":
    main()
