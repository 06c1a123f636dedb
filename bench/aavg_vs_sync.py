"""AAVG model averaging vs synchronous SGD: validation accuracy over wall-clock time.

Real multi-process runs (2 ranks, the DDP engine over gloo, CPU) of the real
trainer on the same moving-squares clips: synchronous momentum SGD (gradient
allreduce every step, the TSM paper's) against AAVG learners (Adam, K local
steps between averaging rounds, the batch rule every m steps). Validation of
the (averaged) model every epoch; prints top-1 against seconds since start.

Usage: .venv/bin/python bench/aavg_vs_sync.py [--epochs 8] [--avg-interval 4] [--ranks 2]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from trainer_utils import make_dataset, run_ranks  # noqa: E402

from trainer.loop.metrics import read_metrics  # noqa: E402


def run(data: Path, tmp: Path, name: str, a: argparse.Namespace, extra: list) -> dict:
    run_dir = tmp / name
    args = ["--run-dir", str(run_dir), "--data", str(data), "--engine", "ddp", "--arch", "resnet18",
            "--width", str(a.width), "--num-segments", "8", "--frame-stride", "2", "--input-size", str(a.size),
            "--batch-per-gpu", str(a.batch), "--warmup-epochs", "1", "--epochs", str(a.epochs),
            "--workers", "0", "--num-classes", "0", "--no-flip", "--no-test", "--log-every", "1000",
            "--ckpt-every-minutes", "0", "--threads", "1", "--seed", str(a.seed), *extra]
    t0 = time.time()
    run_ranks(a.ranks, args, tmp / f"{name}-logs", timeout=1800)
    wall = time.time() - t0
    recs = read_metrics(run_dir)
    evals = [(r["time"] - t0, r["top1"]) for r in recs if r["kind"] == "eval" and "aavg_batch" not in r]
    batch = [r["batch"] for r in recs if r["kind"] == "train" and "batch" in r]
    return {"evals": evals, "wall_s": wall, "final_batch": batch[-1] if batch else a.batch}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--train", type=int, default=256)
    p.add_argument("--val", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--sgd-lr", type=float, default=0.04)
    p.add_argument("--adam-lr", type=float, default=0.002)
    p.add_argument("--avg-interval", type=int, default=4)
    p.add_argument("--aavg-eval-every", type=int, default=16)
    p.add_argument("--width", type=float, default=0.25)
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data = make_dataset(tmp / "data", train=a.train, val=a.val, frames=16, size=a.size, shards=4)
        print(f"moving squares: {a.train} train / {a.val} val clips, 4 classes; resnet18 width {a.width}, "
              f"8 segments, {a.ranks} ranks x batch {a.batch}, {a.epochs} epochs", flush=True)
        runs = {
            "sync SGD": ["--lr", str(a.sgd_lr)],
            f"AAVG Adam K={a.avg_interval}": ["--optimizer", "adam", "--lr", str(a.adam_lr), "--optimizer-sync",
                                              "aavg", "--avg-interval", str(a.avg_interval),
                                              "--aavg-eval-every", str(a.aavg_eval_every),
                                              "--aavg-max-batch", str(4 * a.batch)],
            "AAVG Adam K=-1": ["--optimizer", "adam", "--lr", str(a.adam_lr), "--optimizer-sync", "aavg",
                               "--avg-interval", "-1"],
        }
        res = {}
        for name, extra in runs.items():
            r = run(data, tmp, name.replace(" ", "_").replace("=", ""), a, extra)
            res[name] = r
            print(f"{name:18s} val top1 @ s: " + " ".join(f"{100 * acc:.0f}@{t:.0f}" for t, acc in r["evals"]),
                  flush=True)
        print()
        print(f"{'method':18s} {'wall s':>7s} {'final top1':>10s} {'best top1':>9s} {'final batch':>11s}")
        for name, r in res.items():
            accs = [acc for _, acc in r["evals"]]
            print(f"{name:18s} {r['wall_s']:7.0f} {100 * accs[-1]:9.1f}% {100 * max(accs):8.1f}% "
                  f"{r['final_batch']:11d}")


if __name__ == "__main__":
    main()
