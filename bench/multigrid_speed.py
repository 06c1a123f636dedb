"""Multigrid vs the standard schedule: wall-clock to a target validation accuracy.

Both runs use the real trainer (`python -m trainer`, one rank, CPU) on the
same moving-squares clips (four direction classes) with the same epochs, base
batch and base LR; the multigrid run adds `--schedule multigrid [--short-cycle]`
(long cycle of coarse shapes with larger batches and LR, sub-batch BN over
--bn-clips clips). Validation runs every epoch at the full shape; the figure
is the wall-clock from process start to the first validation at or above the
target, and the ratio standard / multigrid.

Usage: .venv/bin/python bench/multigrid_speed.py [--epochs 10] [--target 0.9] [--short-cycle]
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

from trainer.loop.metrics import read_metrics  # noqa: E402


def run(data: Path, run_dir: Path, a: argparse.Namespace, multigrid: bool) -> dict:
    cmd = [sys.executable, "-m", "trainer", "--run-dir", str(run_dir), "--data", str(data), "--engine", "ddp",
           "--arch", "resnet18", "--width", str(a.width), "--num-segments", "8", "--frame-stride", "2",
           "--input-size", str(a.size), "--batch-per-gpu", str(a.batch), "--lr", str(a.lr),
           "--warmup-epochs", "1", "--epochs", str(a.mg_epochs if multigrid else a.epochs), "--workers", str(a.workers), "--num-classes", "0",
           "--no-flip", "--no-test", "--log-every", "1000", "--ckpt-every-minutes", "0",
           "--threads", str(a.threads), "--seed", str(a.seed), "--bn-clips", str(a.batch)]
    if multigrid:
        cmd += ["--schedule", "multigrid"] + (["--short-cycle"] if a.short_cycle else [])
    t0 = time.time()
    subprocess.run(cmd, check=True, cwd=str(REPO), timeout=3600, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    wall = time.time() - t0
    recs = read_metrics(run_dir)
    evals = [(r["time"] - t0, r["top1"]) for r in recs if r["kind"] == "eval"]
    steps = max(r["step"] for r in recs if r["kind"] == "train")
    hit = next((t for t, acc in evals if acc >= a.target), None)
    return {"evals": evals, "wall_s": wall, "steps": steps, "to_target_s": hit}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--train", type=int, default=256)
    p.add_argument("--val", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--width", type=float, default=0.25)
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--mg-epochs", type=int, default=0,
                   help="epochs of the multigrid run (0 = --epochs); its epochs are cheaper, so it may get more")
    p.add_argument("--only", choices=("standard", "multigrid"), help="run one schedule only")
    p.add_argument("--target", type=float, default=0.9)
    p.add_argument("--short-cycle", action="store_true")
    p.add_argument("--speed", type=int, default=2,
                   help="pixels per frame of the squares; the coarse grids sample frames 4x sparser, so a fast "
                        "square (size/8 per frame) aliases to no visible direction there")
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    a.mg_epochs = a.mg_epochs or a.epochs
    with tempfile.TemporaryDirectory() as tmp:
        data = make_dataset(Path(tmp) / "data", train=a.train, val=a.val, frames=16, size=a.size, shards=4,
                            speed=a.speed)
        print(f"moving squares: {a.train} train / {a.val} val clips, 4 classes, 16 frames {a.size}x{a.size}, "
              f"{a.speed} px/frame; "
              f"resnet18 width {a.width}, 8 segments, base batch {a.batch}, lr {a.lr}, {a.epochs} epochs "
              f"(multigrid {a.mg_epochs}), "
              f"{a.threads} threads, target top1 {100 * a.target:.0f}%", flush=True)
        res = {}
        for mg in [x for x in (False, True) if a.only is None or a.only == ("multigrid" if x else "standard")]:
            name = ("multigrid" + (" +short" if a.short_cycle else "")) if mg else "standard"
            r = run(data, Path(tmp) / name.replace(" ", ""), a, mg)
            res[name] = r
            print(f"{name:16s} val top1 per epoch (s): " + " ".join(f"{100 * acc:.0f}@{t:.0f}"
                                                                    for t, acc in r["evals"]), flush=True)
        print()
        print(f"{'schedule':16s} {'iterations':>10s} {'wall s':>8s} {'final top1':>10s} {'s to target':>12s}")
        for name, r in res.items():
            hit = f"{r['to_target_s']:.0f}" if r["to_target_s"] is not None else "not reached"
            print(f"{name:16s} {r['steps']:10d} {r['wall_s']:8.0f} {100 * r['evals'][-1][1]:9.1f}% {hit:>12s}")
        if len(res) < 2:
            return
        std, mg = res["standard"], res[[k for k in res if k != "standard"][0]]
        print(f"wall-clock ratio (standard / multigrid), whole run: {std['wall_s'] / mg['wall_s']:.2f}x")
        if std["to_target_s"] and mg["to_target_s"]:
            print(f"wall-clock ratio to {100 * a.target:.0f}% top1: {std['to_target_s'] / mg['to_target_s']:.2f}x")
        else:
            print(f"target {100 * a.target:.0f}% not reached by both runs: no ratio to target")


if __name__ == "__main__":
    main()
