"""The trainer's command line: the paper's recipe as defaults, every value overridable.

Why argparse and not the CLI's click: this runs on compute nodes where only the
training environment is guaranteed, and it must not import ``summit_jobs``.
Repeated options keep the last value, so arguments a user appends after the
planner's (``summit-jobs submit ... -- --epochs 3``) override them.
"""
from __future__ import annotations

import argparse
import os
from typing import List, Optional

LR_PER_8_CLIPS = 0.00125


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m trainer",
        description="Train TSM (temporal shift) ResNet on Kinetics-style shards; one process per GPU. "
                    "Resumes from the newest checkpoint in --run-dir; on SIGUSR2/SIGTERM saves and exits 0; "
                    "writes <run-dir>/COMPLETE when all epochs and the final test are done.")
    a = p.add_argument
    g = p.add_argument_group("run")
    g.add_argument("--run-dir", required=True, help="checkpoints, metrics.jsonl, COMPLETE (parallel file system; "
                   "$VARS are expanded)")
    g.add_argument("--data", help="folder of shards with manifest.json (train and val splits; $VARS expanded)")
    g.add_argument("--engine", choices=("horovod", "ddp"), default="horovod",
                   help="horovod (the paper's; falls back to ddp when not installed) or torch.distributed ddp")
    g.add_argument("--seed", type=int, default=0, help="model init, shuffles and augmentation derive from it")
    g.add_argument("--max-steps", type=int, default=0,
                   help="stop (checkpoint, exit 0, no COMPLETE) once this many optimiser steps are done in total")
    g.add_argument("--log-every", type=int, default=10, help="optimiser steps between metrics records")
    g.add_argument("--threads", type=int, default=0, help="torch CPU threads per rank (0 = torch's default)")
    g = p.add_argument_group("model")
    g.add_argument("--arch", default="resnet50", help="resnet18|resnet34|resnet50|resnet101|resnet152")
    g.add_argument("--num-segments", type=int, default=8, help="frames per clip (T)")
    g.add_argument("--num-classes", type=int, default=0, help="0 = the number of classes in the data's manifest")
    g.add_argument("--width", type=float, default=1.0, help="channel width multiplier (tiny test models)")
    g.add_argument("--no-shift", dest="shift", action="store_false", help="TSN 2D baseline: no temporal shift")
    g.add_argument("--shift-placement", choices=("blockres", "block"), default="blockres")
    g.add_argument("--fold-div", type=int, default=8, help="1/fold_div channels shifted each way")
    g.add_argument("--dropout", type=float, default=0.0, help="before the fc head (the paper: none)")
    g = p.add_argument_group("optimisation (the paper's recipe)")
    g.add_argument("--batch-per-gpu", type=int, default=8, help="clips per rank per micro-batch (the paper: 8)")
    g.add_argument("--accum-steps", type=int, default=1,
                   help="micro-batches per optimiser step; each rank stands in for this many virtual ranks")
    g.add_argument("--lr", type=float, default=None,
                   help=f"peak learning rate (default {LR_PER_8_CLIPS} per 8 clips of the global batch)")
    g.add_argument("--warmup-epochs", type=float, default=5.0, help="per-iteration linear ramp, then cosine")
    g.add_argument("--epochs", type=int, default=100)
    g.add_argument("--momentum", type=float, default=0.9)
    g.add_argument("--weight-decay", type=float, default=1e-4, help="not applied to BatchNorm and biases")
    g.add_argument("--clip-grad", type=float, default=0.0, help="max gradient norm after the allreduce (0 = off)")
    g.add_argument("--compression", choices=("none", "fp16", "bf16"), default="none",
                   help="gradient compression for the allreduce (horovod: fp16 only)")
    g.add_argument("--optimizer", choices=("sgd", "lars", "adam"), default="sgd",
                   help="sgd (the paper's, momentum); lars (layer-wise trust ratio for very large batches, BN "
                        "parameters and biases excluded); adam (as the AAVG paper)")
    g.add_argument("--trust-coefficient", type=float, default=0.001, help="LARS trust coefficient")
    g.add_argument("--amp", choices=("auto", "off", "fp16", "bf16"), default="auto",
                   help="autocast on GPU (auto: bf16 where supported, else fp16); never on CPU")
    g.add_argument("--channels-last", choices=("auto", "on", "off"), default="auto", help="auto: on GPU only")
    g = p.add_argument_group("multigrid (Wu et al.): a schedule of clip shapes")
    g.add_argument("--schedule", choices=("standard", "multigrid"), default="standard",
                   help="multigrid: long cycle of (frames, size) shapes with proportionally larger batches and "
                        "LR, LR stages at 40%% and 80%% of the epochs, final phase at full shape")
    g.add_argument("--short-cycle", action="store_true",
                   help="multigrid: also cycle the crop size 1/2, 1/sqrt2, 1 of the current shape per iteration")
    g.add_argument("--bn-clips", type=int, default=8,
                   help="multigrid: clips per BatchNorm statistics group whatever the batch (sub-batch BN)")
    g = p.add_argument_group("AAVG model averaging (learners step locally, then average)")
    g.add_argument("--optimizer-sync", choices=("sync", "aavg"), default="sync",
                   help="sync: gradient allreduce every step; aavg: no gradient allreduce, average parameters, "
                        "optimiser moments and BN statistics every --avg-interval steps")
    g.add_argument("--avg-interval", type=int, default=-1,
                   help="aavg: local steps between averaging rounds (-1 = once per epoch)")
    g.add_argument("--aavg-eval-every", type=int, default=0,
                   help="aavg: steps between validations that drive the batch rule (0 = off)")
    g.add_argument("--aavg-b1", type=float, default=1.0, help="aavg: grow the batch when accuracy < best x b1")
    g.add_argument("--aavg-b2", type=float, default=2.0, help="aavg: batch growth factor")
    g.add_argument("--aavg-max-batch", type=int, default=576, help="aavg: largest per-learner batch")
    g = p.add_argument_group("data")
    g.add_argument("--sampling", choices=("dense", "uniform"), default="dense",
                   help="dense: T frames from a T*stride window; uniform: TSN segments")
    g.add_argument("--frame-stride", type=int, default=8, help="dense sampling stride")
    g.add_argument("--input-size", type=int, default=224)
    g.add_argument("--scale-size", type=int, default=0, help="test: shorter side (0 = input-size * 256/224)")
    g.add_argument("--no-flip", dest="flip", action="store_false",
                   help="no horizontal flip (for classes that left/right tells apart)")
    g.add_argument("--workers", type=int, default=4, help="DataLoader worker processes (forkserver) per rank")
    g.add_argument("--prefetch", type=int, default=2, help="batches each worker keeps ready")
    g = p.add_argument_group("evaluation and checkpoints")
    g.add_argument("--eval-every", type=int, default=1, help="epochs between 1-clip validations (0 = never)")
    g.add_argument("--test-clips", type=int, default=10, help="clips per video in the final test")
    g.add_argument("--test-crops", type=int, choices=(1, 3), default=1, help="spatial crops per clip in the test")
    g.add_argument("--test-last", type=int, default=5,
                   help="final test on the last N epochs' checkpoints; mean and std are reported")
    g.add_argument("--no-test", dest="test", action="store_false", help="skip the final multi-clip test")
    g.add_argument("--keep", type=int, default=3, help="step checkpoints kept (plus best and last epochs)")
    g.add_argument("--ckpt-every-steps", type=int, default=0, help="also checkpoint every N steps (0 = off)")
    g.add_argument("--ckpt-every-minutes", type=float, default=15.0, help="also checkpoint this often (0 = off)")
    return p


def parse(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = parser()
    args = p.parse_args(argv)
    args.run_dir = os.path.expandvars(args.run_dir)
    if args.data:
        args.data = os.path.expandvars(args.data)
    for name in ("batch_per_gpu", "accum_steps", "epochs", "num_segments", "input_size"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.optimizer_sync == "aavg":
        if args.avg_interval == 0 or args.avg_interval < -1:
            p.error(f"--avg-interval {args.avg_interval}: use a number of local steps >= 1, or -1 (once per epoch)")
        if args.accum_steps != 1:
            p.error("--optimizer-sync aavg has no gradient allreduce to accumulate for: use --accum-steps 1")
        if args.aavg_b2 < 1 or args.aavg_max_batch < args.batch_per_gpu:
            p.error("--aavg-b2 must be >= 1 and --aavg-max-batch at least --batch-per-gpu")
    if args.bn_clips < 1:
        p.error("--bn-clips must be at least 1")
    if args.schedule == "multigrid" and args.epochs < 3:
        p.error(f"--schedule multigrid needs at least 3 epochs (LR stages at 40% and 80% and a final phase); "
                f"got {args.epochs}")
    if args.warmup_epochs < 0:
        p.error("--warmup-epochs must not be negative")
    if args.scale_size <= 0:
        args.scale_size = int(round(args.input_size * 256 / 224))
    return args
