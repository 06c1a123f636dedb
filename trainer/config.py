"""The trainer's command line: the paper's recipe as defaults, every value overridable.

Why argparse and not the CLI's click: this runs on compute nodes where only the
training environment is guaranteed, and it must not import ``summit_jobs``.
Repeated options keep the last value, so arguments a user appends after the
planner's (``summit-jobs submit ... -- --epochs 3``) override them.
"""
from __future__ import annotations

import argparse
import math
import os
import re
from typing import Callable, Dict, List, Mapping, Optional, Tuple

from trainer import submit_options
# The choice lists of the options submit also offers are their declarations' (trainer.submit_options); named here
# too, where the trainer's other choice lists are.
from trainer.submit_options import (AVG_INTERVAL_EPOCH, COMPRESSIONS, OPTIMIZER_SYNCS, OPTIMIZERS,  # noqa: F401
                                    SCHEDULES)

LR_PER_8_CLIPS = 0.00125
#: The torch releases the trainer supports, as (major, minor): the oldest (OLCF Summit's Open-CE 1.10 had
#: PyTorch 2.0.1) and the newest it is tested on. Written here, torch-free, so that trainer.dist.compat and
#: ``summit-jobs doctor`` (which checks a site's torch without importing it) read one range.
TORCH_RANGE = ((2, 0), (2, 13))
#: The depths trainer.models.model builds (listed here too: this module must not import torch).
ARCHS = ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152")
#: Choice lists of the options ``summit-jobs submit`` also offers; the first entry is the trainer's default.
#: The login side (click choices, JobOptions defaults, plan checks) reads them from here: written once.
ENGINES = ("horovod", "ddp")
#: Where the temporal shift goes: TSM's own rule, or every residual block.
SHIFT_BLOCKS = ("official", "all")
#: How the final test combines a video's views: the official code averages logits.
TEST_AVERAGES = ("logits", "probs")
#: Weights-only export formats ("none": no export) and the key layouts weights are read and written in.
EXPORT_FORMATS = ("pt", "safetensors", "none")
WEIGHT_LAYOUTS = ("summit", "tsm", "mmaction2")
#: What a clip holds: RGB frames, or stacks of optical flow fields (the two-stream network's temporal stream).
MODALITIES = ("rgb", "flow")
COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune")
COMPILE_BACKENDS = ("inductor", "aot_eager")
DECODERS = ("cpu", "device")
#: --aavg-eval-every for a batch-rule check once per epoch, at its end (after the epoch's averaging round).
AAVG_CHECK_EPOCH = -1
#: Named recipes: trainer option name -> value. A preset's values become the parser's defaults, so options given
#: explicitly win; ``summit-jobs submit --preset`` renders every value into the job script (summit_jobs.planning.plan).
#: Plain values only: the login side reads this table without torch.
PRESETS: Dict[str, Dict[str, object]] = {
    # AAVG paper (seeds/aavg-action-recognition-cluster.txt): adaptive-batchsize K-step model averaging.
    "aavg-paper": {
        "optimizer": "adam",         # Sec. I, IV: "we use the Adam optimizer", customised for AAVG (Alg. 2)
        "optimizer_sync": "aavg",    # Alg. 1: learners step locally, then average parameters
        "avg_interval": -1,          # Sec. III-C: "We use K = -1 for all our AAVG implementations" (once an epoch)
        "aavg_eval_every": -1,       # Fig. 4: checked once an epoch ("adaption first occurs after 5 epochs")
        "aavg_b1": 1.0,              # Sec. III-D: "we use b1 = 1 and b2 = 2" (Alg. 1 line 15: grow when a < a* b1)
        "aavg_b2": 2.0,              # Sec. III-D: the batch grows by b2
        "aavg_max_batch": 576,       # Sec. III-D: "We keep the maximum batchsize to 576"
        "val_clips": 5,              # Sec. II: validation "by averaging the prediction of 5 data samples"
        "test_clips": 25,            # Sec. II: "For the final validation, 25 samples are used"
        "test_crops": 1,             # Sec. II: "a center crop of 224x224 without scaling" in validation
        "test_size": 224,            # ... cut from the 256-side frame as it is (--test-size 0 would take all 256)
    },
}


def _add_declared(g: "argparse._ArgumentGroup", group: str) -> None:
    """The options of ``group`` that trainer.submit_options declares (those summit-jobs submit also offers)."""
    for option in submit_options.OPTIONS:
        if option.group != group:
            continue
        if option.kind is bool:
            g.add_argument(option.flag, action="store_true", help=option.help)
        else:
            g.add_argument(option.flag, type=option.kind, choices=option.choices or None, default=option.default,
                           help=option.help)


def _run_options(g: "argparse._ArgumentGroup") -> None:
    """The run options."""
    g.add_argument("--run-dir", required=True, help="checkpoints, metrics.jsonl, COMPLETE (parallel file system; "
                   "$VARS are expanded)")
    g.add_argument("--data", help="folder of shards with manifest.json (train and val splits; $VARS expanded)")
    g.add_argument("--engine", choices=ENGINES, default=ENGINES[0],
                   help="horovod (the paper's; falls back to ddp when not installed) or torch.distributed ddp")
    g.add_argument("--seed", type=int, default=0, help="model init, shuffles and augmentation derive from it")
    g.add_argument("--max-steps", type=int, default=0,
                   help="stop (checkpoint, exit 0, no COMPLETE) once this many optimiser steps are done in total")
    g.add_argument("--log-every", type=int, default=10, help="optimiser steps between metrics records")
    g.add_argument("--threads", type=int, default=0, help="torch CPU threads per rank (0 = torch's default)")
    g.add_argument("--preset", choices=tuple(PRESETS), default=None,
                   help="a named recipe whose values become the defaults (options given explicitly win): "
                        "aavg-paper = Adam, AAVG once an epoch, the batch rule on a 5-clip validation each epoch "
                        "(b1 1, b2 2, at most 576 clips), the final test on 25 clips x 1 centre crop of 224")
    g.add_argument("--tensorboard", action="store_true",
                   help="also write TensorBoard event files to <run-dir>/tensorboard (needs the tensorboard package)")
    _add_declared(g, "run")


def _model_options(g: "argparse._ArgumentGroup") -> None:
    """The model options."""
    g.add_argument("--arch", choices=ARCHS, default="resnet50", help="the ResNet depth (the paper: resnet50)")
    g.add_argument("--num-segments", type=int, default=8, help="frames per clip (T)")
    g.add_argument("--num-classes", type=int, default=0, help="0 = the number of classes in the data's manifest")
    g.add_argument("--width", type=float, default=1.0, help="channel width multiplier (tiny test models)")
    g.add_argument("--no-shift", dest="shift", action="store_false", help="TSN 2D baseline: no temporal shift")
    g.add_argument("--shift-placement", choices=("blockres", "block"), default="blockres",
                   help="blockres: shift the residual branch's input (TSM's best); block: the block's input")
    g.add_argument("--shift-blocks", choices=SHIFT_BLOCKS, default=SHIFT_BLOCKS[0],
                   help="official: TSM's placement (with blockres, every other block of each stage when layer3 has "
                        "23 or more blocks: resnet101/152); all: every block")
    g.add_argument("--fold-div", type=int, default=8, help="1/fold_div channels shifted each way")
    g.add_argument("--pretrained", default=None, metavar="FILE",
                   help="start from an ImageNet 2D ResNet state_dict in torchvision's key layout (the TSM recipe's "
                        "initialisation); the fc head is new; $VARS expanded")
    g.add_argument("--init-from", default=None, metavar="RUN_DIR_OR_CKPT",
                   help="start from a trained model of this trainer (a run directory: its best.pt, else its newest "
                        "checkpoint; or a checkpoint file): every tensor that fits is copied, the fc head when the "
                        "classes match; an RGB model's first conv starts a flow stream averaged over its colour "
                        "channels and repeated over the flow channels (cross-modality transfer); $VARS expanded")
    g.add_argument("--dropout", type=float, default=0.0,
                   help="before the fc head (the paper: none; the official TSM recipe: 0.5)")
    _add_declared(g, "model")


def _optimisation_options(g: "argparse._ArgumentGroup") -> None:
    """The optimisation (the paper's recipe) options."""
    g.add_argument("--batch-per-gpu", type=int, default=8, help="clips per rank per micro-batch (the paper: 8)")
    g.add_argument("--accum-steps", type=int, default=1,
                   help="micro-batches per optimiser step; each rank stands in for this many virtual ranks")
    g.add_argument("--lr", type=float, default=None,
                   help=f"peak learning rate (default {LR_PER_8_CLIPS} per 8 clips of the global batch)")
    g.add_argument("--warmup-epochs", type=float, default=5.0, help="per-iteration linear ramp, then cosine")
    g.add_argument("--epochs", type=int, default=100)
    g.add_argument("--momentum", type=float, default=0.9)
    g.add_argument("--weight-decay", type=float, default=1e-4, help="not applied to BatchNorm and biases")
    g.add_argument("--clip-grad", type=float, default=0.0,
                   help="max gradient norm after the allreduce (0 = off; the official TSM recipe: 20)")
    g.add_argument("--fc-lr5", action="store_true",
                   help="the official TSM fine-tuning groups: fc weight at 5x and fc bias at 10x the learning rate")
    _add_declared(g, "optimisation")
    g.add_argument("--trust-coefficient", type=float, default=0.001, help="LARS trust coefficient")
    g.add_argument("--amp", choices=("auto", "off", "fp16", "bf16"), default="auto",
                   help="autocast on GPU (auto: bf16 where supported, else fp16); never on CPU")
    g.add_argument("--channels-last", choices=("auto", "on", "off"), default="auto", help="auto: on GPU only")
    g.add_argument("--compile", choices=COMPILE_MODES, default=COMPILE_MODES[0],
                   help="torch.compile the training step's model (off; default, reduce-overhead or max-autotune: "
                        "inductor's modes). Compiling takes minutes at start and once per new clip shape")
    g.add_argument("--compile-backend", choices=COMPILE_BACKENDS, default=COMPILE_BACKENDS[0],
                   help="inductor generates kernels; aot_eager only traces (a quick check that the model compiles)")


def _multigrid_options(g: "argparse._ArgumentGroup") -> None:
    """The multigrid (Wu et al.): a schedule of clip shapes options."""
    _add_declared(g, "multigrid")
    g.add_argument("--bn-clips", type=int, default=8,
                   help="multigrid: clips per BatchNorm statistics group whatever the batch (sub-batch BN)")


def _aavg_options(g: "argparse._ArgumentGroup") -> None:
    """The AAVG model averaging (learners step locally, then average) options."""
    _add_declared(g, "aavg")
    g.add_argument("--aavg-eval-every", type=int, default=0,
                   help="aavg: steps between validations that drive the batch rule (0 = off; -1 = once per "
                        "epoch, at its end, after the epoch's averaging round: the paper's)")
    g.add_argument("--aavg-b1", type=float, default=1.0, help="aavg: grow the batch when accuracy < best x b1")
    g.add_argument("--aavg-b2", type=float, default=2.0, help="aavg: batch growth factor")
    g.add_argument("--aavg-max-batch", type=int, default=576, help="aavg: largest per-learner batch")


def _data_options(g: "argparse._ArgumentGroup") -> None:
    """The data options."""
    g.add_argument("--modality", choices=MODALITIES, default=MODALITIES[0],
                   help="rgb: frames; flow: the temporal stream, each segment a stack of --flow-stack consecutive "
                        "optical flow fields (x and y) from shards packed with 'pack --modality flow'")
    g.add_argument("--flow-stack", type=int, default=10,
                   help="flow: consecutive flow fields per segment; the first conv takes 2 x this many channels "
                        "(the two-stream papers: 10)")
    g.add_argument("--sampling", choices=("dense", "uniform"), default="dense",
                   help="dense: T frames from a T*stride window; uniform: TSN segments")
    g.add_argument("--frame-stride", type=int, default=8, help="dense sampling stride")
    g.add_argument("--input-size", type=int, default=224)
    g.add_argument("--scale-size", type=int, default=0, help="test: shorter side (0 = input-size * 256/224)")
    g.add_argument("--no-flip", dest="flip", action="store_false",
                   help="no horizontal flip (for classes that left/right tells apart)")
    g.add_argument("--decode", choices=DECODERS, default=DECODERS[0],
                   help="cpu: workers decode the JPEG frames and crop, resize and flip them; device: workers only "
                        "read each training clip's JPEG bytes and draw its crop and flip, and the rank decodes "
                        "(nvJPEG through torchvision on a GPU, PIL otherwise) and augments on its device; RGB "
                        "training clips only: validation and test clips keep the cpu path, --modality flow "
                        "needs cpu")
    g.add_argument("--workers", type=int, default=4, help="DataLoader worker processes (forkserver) per rank")
    g.add_argument("--prefetch", type=int, default=2, help="batches each worker keeps ready")
    g.add_argument("--persistent-workers", choices=("on", "off"), default="on",
                   help="on: one set of workers serves every epoch, validation and test of the run")
    _add_declared(g, "data")


def _evaluation_options(g: "argparse._ArgumentGroup") -> None:
    """The evaluation and checkpoints options."""
    g.add_argument("--eval-every", type=int, default=1, help="epochs between validations (0 = never)")
    g.add_argument("--val-clips", type=int, default=1,
                   help="clips per video in the validations during training and AAVG's batch-rule checks, one "
                        "centre crop each, predictions averaged (the AAVG paper: 5)")
    g.add_argument("--test-clips", type=int, default=10, help="clips per video in the final test")
    g.add_argument("--test-crops", type=int, choices=(1, 3), default=3,
                   help="spatial crops per clip in the test (the paper: 3 along the longer side)")
    g.add_argument("--test-size", type=int, default=0,
                   help="test crop side (0 = --scale-size: the full-resolution frame, 256 at --input-size 224, "
                        "as the paper tests; --test-size 224 --test-crops 1 is the single centre crop)")
    g.add_argument("--test-average", choices=TEST_AVERAGES, default=TEST_AVERAGES[0],
                   help="combine a video's views by averaging logits (the official code) or probabilities")
    g.add_argument("--test-last", type=int, default=5,
                   help="final test on the last N epochs' checkpoints; mean and std are reported")
    g.add_argument("--no-test", dest="test", action="store_false", help="skip the final multi-clip test")
    g.add_argument("--test-only", default=None, metavar="CKPT",
                   help="only the multi-clip test of this checkpoint (this trainer's, the official TSM code's or "
                        "mmaction2's), on any number of ranks; no training; $VARS expanded")
    g.add_argument("--export-weights", choices=EXPORT_FORMATS, default=EXPORT_FORMATS[0],
                   help="weights-only copies of the last and best models beside the resumable checkpoints")
    g.add_argument("--export-layout", choices=WEIGHT_LAYOUTS, default=WEIGHT_LAYOUTS[0],
                   help="key layout of the exported weights: this trainer's, the official TSM code's or mmaction2's")
    g.add_argument("--keep", type=int, default=3, help="step checkpoints kept (plus best and last epochs)")
    g.add_argument("--ckpt-every-steps", type=int, default=0, help="also checkpoint every N steps (0 = off)")
    g.add_argument("--ckpt-every-minutes", type=float, default=15.0, help="also checkpoint this often (0 = off)")
    _add_declared(g, "evaluation")


#: Argument groups in --help order: (title, function that adds the group's options).
GROUPS = (
    ("run", _run_options),
    ("model", _model_options),
    ("optimisation (the paper's recipe)", _optimisation_options),
    ("multigrid (Wu et al.): a schedule of clip shapes", _multigrid_options),
    ("AAVG model averaging (learners step locally, then average)", _aavg_options),
    ("data", _data_options),
    ("evaluation and checkpoints", _evaluation_options),
)


def parser() -> argparse.ArgumentParser:
    """The trainer's argparse parser, one argument group per concern."""
    p = argparse.ArgumentParser(
        prog="python -m trainer",
        description="Train TSM (temporal shift) ResNet on Kinetics-style shards; one process per GPU. "
                    "Resumes from the newest checkpoint in --run-dir; on SIGUSR2/SIGTERM saves and exits 0; "
                    "writes <run-dir>/COMPLETE when all epochs and the final test are done.")
    for title, add in GROUPS:
        add(p.add_argument_group(title))
    return p

def _finite(lo: float, hi: float = math.inf, lo_open: bool = False, hi_open: bool = False):
    """A check that a float is finite and within [lo, hi] (ends open where asked)."""
    def ok(v: float) -> bool:
        return (math.isfinite(v) and (v > lo if lo_open else v >= lo) and (v < hi if hi_open else v <= hi))
    return ok


#: The largest learning rate: the recipe's is about 0.2 at 1,536 GPUs and LARS's base rates stay below 100; a
#: larger one (1e300 was accepted) is a slip that diverges in the first step.
MAX_LR = 1000.0
#: Float options: (check, what the value must be). argparse's float() takes 'nan', 'inf' and '1e999'; a NaN
#: learning rate trains for hours on NaN weights, so they are refused here with the option and its value.
FLOATS: Dict[str, Tuple[Callable[[float], bool], str]] = {
    "lr": (_finite(0, MAX_LR, lo_open=True), f"a learning rate above 0 and at most {MAX_LR:,} (leave it out for "
           f"{LR_PER_8_CLIPS} per 8 clips of the global batch)"),
    "warmup_epochs": (_finite(0), "a finite number of epochs, 0 or more"),
    "momentum": (_finite(0, 1, hi_open=True), "at least 0 and below 1 (the recipe: 0.9)"),
    "weight_decay": (_finite(0), "a finite number, 0 or more (the recipe: 1e-4)"),
    "clip_grad": (_finite(0), "a finite gradient norm, or 0 for no clipping"),
    "dropout": (_finite(0, 1, hi_open=True), "a probability, at least 0 and below 1"),
    "width": (_finite(0, 16, lo_open=True), "a channel multiplier above 0 and at most 16 (1 = the real network)"),
    "trust_coefficient": (_finite(0, lo_open=True), "a finite number above 0 (the usual: 0.001)"),
    "ckpt_every_minutes": (_finite(0), "a finite number of minutes, or 0 for none"),
    "aavg_b1": (_finite(0, lo_open=True), "a finite factor above 0"),
    "aavg_b2": (_finite(1), "a finite growth factor of at least 1"),
}
#: Integer options: (smallest value, what to do instead).
INTS: Dict[str, Tuple[int, str]] = {
    "seed": (0, "a seed is 0 or more"), "max_steps": (0, "0 means no limit"),
    "log_every": (1, "records every N optimiser steps"), "threads": (0, "0 keeps torch's default"),
    "num_segments": (1, "frames per clip"), "num_classes": (0, "0 takes the count from the manifest"),
    "fold_div": (2, "1/N of the channels is shifted each way, so N is at least 2"),
    "batch_per_gpu": (1, "clips per rank"), "accum_steps": (1, "micro-batches per optimiser step"),
    "epochs": (1, "at least one epoch"), "bn_clips": (1, "clips per BatchNorm group"),
    "aavg_eval_every": (AAVG_CHECK_EPOCH, "-1 checks once per epoch, 0 turns the batch rule off"),
    "aavg_max_batch": (1, "clips per learner"), "val_clips": (1, "clips per video"),
    "frame_stride": (1, "frames between sampled frames"), "input_size": (1, "pixels"),
    "scale_size": (0, "0 means input-size x 256/224"), "test_size": (0, "0 means the --scale-size"),
    "workers": (0, "0 decodes in the rank itself"), "flow_stack": (1, "flow fields per segment"),
    "prefetch": (1, "batches each worker keeps ready"), "eval_every": (0, "0 means never"),
    "test_clips": (1, "clips per video"), "test_last": (1, "use --no-test to skip the final test"),
    "keep": (1, "the newest checkpoint is always kept"), "ckpt_every_steps": (0, "0 means off"),
}
MAX_SEED = 2 ** 63 - 1
#: Size options: (largest value, what the option is). argparse takes any integer, and a typo such as
#: --input-size 100000 would otherwise reach a 56 GiB frame buffer before failing; these ranges hold every recipe the
#: trainer knows with room to spare, and the memory check below catches combinations within them. The planner
#: (summit_jobs.planning.plan) holds --epochs, --clips-per-gpu and --num-classes to the same bounds before its own
#: arithmetic, where a 400-digit count overflowed a float instead of being refused.
MAX_SIZES: Dict[str, Tuple[int, str]] = {
    "input_size": (1024, "pixels per side of a training crop; the recipe: 224"),
    "scale_size": (2048, "pixels on the test frames' shorter side; the recipe: 256"),
    "num_segments": (256, "frames per clip; the recipe: 8"),
    "flow_stack": (64, "flow fields per segment; the two-stream papers: 10"),
    "batch_per_gpu": (4096, "clips per rank per micro-batch; the recipe: 8"),
    "aavg_max_batch": (4096, "clips per learner; the AAVG paper: 576"),
    "val_clips": (1000, "clips per video; the AAVG paper: 5"),
    "test_clips": (1000, "clips per video; the recipe: 10"),
    "epochs": (10_000, "training epochs; the recipe: 100"),
    "num_classes": (100_000, "classes of the dataset; Kinetics: 400 to 700"),
}
GIB = 1024 ** 3


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _shown(v: object) -> str:
    return format(v, "g") if isinstance(v, float) else str(v)


def _check_numbers(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse numbers argparse accepts but the trainer cannot use, naming the option and its value."""
    for name, (ok, what) in FLOATS.items():
        v = getattr(args, name)
        if v is not None and not ok(v):
            p.error(f"{_flag(name)} {_shown(v)}: must be {what}")
    for name, (lo, hint) in INTS.items():
        v = getattr(args, name)
        if v < lo:
            p.error(f"{_flag(name)} {v}: must be at least {lo} ({hint})")
    if args.seed > MAX_SEED:
        p.error(f"--seed {args.seed}: must be at most {MAX_SEED}")
    for name, (hi, what) in MAX_SIZES.items():
        v = getattr(args, name)
        if v > hi:
            p.error(f"{_flag(name)} {v}: must be at most {hi} {what}")
    if 0 < args.scale_size < args.input_size:
        p.error(f"--scale-size {args.scale_size}: the test crops --input-size {args.input_size} from a shorter side "
                f"of this size; use at least {args.input_size}, or 0 for input-size x 256/224")
    scale = args.scale_size or int(round(args.input_size * 256 / 224))
    if args.test_size > scale:
        p.error(f"--test-size {args.test_size}: the test crops from a shorter side of {scale} (--scale-size); "
                f"use at most {scale}, or 0 for the full-resolution frame" + _from_preset(args, "test_size"))
    _check_memory(p, args, scale)


def memory_bytes() -> Optional[int]:
    """This machine's memory as a process may use it: physical memory, or a smaller cgroup limit (an LSF job's).

    None where the system does not say (the check is then skipped, never guessed).
    """
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return None
    for limit in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(limit) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < total:
            total = int(text)
    return total if total > 0 else None


def batch_inputs(args: argparse.Namespace, scale: int) -> List[Tuple[str, int]]:
    """The largest input batches the run builds: (the options that size it, bytes of its float32 tensor).

    A lower bound of what a rank needs (the activations are many times this), so a refusal by it is never
    wrong: the training micro-batch (AAVG's batch rule grows it up to --aavg-max-batch), the validation's and
    the final test's (a video's clips x crops views go into one batch when they outnumber --batch-per-gpu).
    """
    channels = 2 * args.flow_stack if args.modality == "flow" else 3
    per_frame = channels * 4
    frames, side, batch = args.num_segments, args.input_size, args.batch_per_gpu
    shape = f"--num-segments {frames}" + (f" x --flow-stack {args.flow_stack} x 2" if args.modality == "flow" else "")
    aavg = args.optimizer_sync == "aavg" and args.aavg_max_batch > batch
    train = f"--aavg-max-batch {args.aavg_max_batch}" if aavg else f"--batch-per-gpu {batch}"
    clips = args.aavg_max_batch if aavg else batch
    out = [(f"{train} x {shape} at --input-size {side}", clips * frames * side * side * per_frame)]
    if (args.eval_every or args.aavg_eval_every) and args.val_clips > batch:
        out.append((f"--val-clips {args.val_clips} x {shape} at --input-size {side}",
                    args.val_clips * frames * side * side * per_frame))
    if args.test or args.test_only:
        views, test_side = args.test_clips * args.test_crops, args.test_size or scale
        count = (f"--test-clips {args.test_clips} x --test-crops {args.test_crops}" if views > batch
                 else f"--batch-per-gpu {batch}")
        out.append((f"{count} x {shape} at a test side of {test_side} (--test-size, --scale-size)",
                    max(views, batch) * frames * test_side * test_side * per_frame))
    return out


def _check_memory(p: argparse.ArgumentParser, args: argparse.Namespace, scale: int) -> None:
    """Refuse sizes whose input batch alone does not fit in this machine's memory, naming the sizes to lower.

    On a rank that is the node the batch is built on; at submit time (the login side parses the same
    arguments) the login node's memory stands in for it, which only matters for sizes far beyond any recipe.
    """
    total = memory_bytes()
    if total is None:
        return
    sizes, need = max(batch_inputs(args, scale), key=lambda b: b[1])
    if need > total:
        p.error(f"{sizes}: one batch's input alone is {need / GIB:,.1f} GiB as float32, more than this machine's "
                f"{total / GIB:,.1f} GiB of memory; lower these sizes (the recipe: 8 clips x 8 frames at 224)")


def _from_preset(args: argparse.Namespace, name: str) -> str:
    """Words for an error about a value the user may not have typed: the --preset that set it, or ''."""
    preset = PRESETS.get(args.preset or "", {})
    if name not in preset or preset[name] != getattr(args, name):
        return ""
    return (f" (--preset {args.preset} sets {_flag(name)} {_shown(preset[name])} for --input-size 224; with another "
            f"--input-size give {_flag(name)} too)")


def method_conflict(values: Mapping[str, object]) -> Optional[str]:
    """The first combination of methods that cannot run, in words for the user; None when they can.

    One owner for these rules: the trainer's parser asks here, and so does the
    planner before anything is submitted (``summit_jobs.planning.plan``). ``values``
    holds the options by their argument names; a missing one is not checked.
    """
    get = values.get
    if get("optimizer_sync") == "aavg":
        interval = get("avg_interval")
        if isinstance(interval, int) and (interval == 0 or interval < -1):
            return (f"--avg-interval {interval} must be a number of local steps >= 1, or -1 (average once per "
                    "epoch)")
        if get("accum_steps", 1) != 1:
            return ("AAVG model averaging (--optimizer-sync aavg) cannot be combined with exact accumulation "
                    "(simulate, --accum-steps): averaging learners is not the synchronous V-node run. Use "
                    "--optimizer-sync sync with simulate.")
        if get("compression", "none") != "none":
            return ("--compression applies to the gradient allreduce, which AAVG does not do (learners average "
                    "parameters every K steps instead). Drop --compression, or use --optimizer-sync sync.")
        top, batch = get("aavg_max_batch"), get("batch_per_gpu")
        if isinstance(top, int) and isinstance(batch, int) and top < batch:
            return f"--aavg-max-batch {top}: must be at least --batch-per-gpu {batch}"
    if get("compression") == "bf16" and get("engine") == "horovod":
        return ("bf16 gradient compression is a torch.distributed hook; Horovod offers fp16 only. Use "
                "--compression fp16, or --engine ddp.")
    epochs = get("epochs")
    if get("schedule") == "multigrid" and isinstance(epochs, int) and epochs < 3:
        return (f"--schedule multigrid needs at least 3 epochs (LR stages at 40% and 80% and a final phase); "
                f"got {epochs}")
    return None


def _check_declared_ranges(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse a declared option's value outside its range (trainer.submit_options), as submit refuses it.

    After the method checks, whose messages say more where both apply (--avg-interval 0 with aavg).
    """
    for option in submit_options.OPTIONS:
        v = getattr(args, option.name)
        if option.kind not in (int, float) or v is None:
            continue
        if not math.isfinite(v):
            p.error(f"{option.flag} {_shown(v)}: must be a finite number")
        if option.low is not None and v < option.low:
            p.error(f"{option.flag} {_shown(v)}: must be at least {_shown(option.low)}")
        if option.high is not None and v > option.high:
            p.error(f"{option.flag} {_shown(v)}: must be at most {_shown(option.high)}")


def _check_methods(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Combinations the methods cannot run with (method_conflict)."""
    problem = method_conflict(vars(args))
    if problem:
        p.error(problem)


def preset_named(argv: Optional[List[str]] = None) -> Optional[str]:
    """The --preset that ``argv`` names, or None; an unknown name exits 2 with argparse's choices error.

    Why a first pass of its own: the preset decides the defaults of the real
    parse, so it must be known before that parse runs (parse_known_args skips
    every other option).
    """
    first = argparse.ArgumentParser(prog="python -m trainer", add_help=False)
    first.add_argument("--preset", choices=tuple(PRESETS), default=None)
    return first.parse_known_args(argv)[0].preset


def parse(argv: Optional[List[str]] = None) -> argparse.Namespace:
    """The trainer's options, checked; a bad value exits 2 with usage and one line naming it (argparse's way).

    Pure and torch-free: the login side calls it at submit time on the exact
    arguments a rank will get, so a typo fails there and not after the queue wait.
    """
    p = parser()
    name = preset_named(argv)
    if name is not None:
        p.set_defaults(**PRESETS[name])  # the preset's values as defaults: options given explicitly win
    args = p.parse_args(argv)
    if not args.run_dir.strip():
        p.error("--run-dir '': give the folder for checkpoints and metrics")
    args.run_dir = os.path.expandvars(args.run_dir)
    for name in ("data", "pretrained", "test_only", "init_from"):
        if getattr(args, name):
            setattr(args, name, os.path.expandvars(getattr(args, name)))
    _check_numbers(p, args)
    _check_methods(p, args)
    _check_declared_ranges(p, args)
    if args.pretrained and args.init_from:
        p.error("--pretrained and --init-from both give the starting weights: use one (--pretrained: ImageNet "
                "2D weights; --init-from: a model this trainer trained)")
    if args.scale_size <= 0:
        args.scale_size = int(round(args.input_size * 256 / 224))
    if args.test_size <= 0:
        args.test_size = args.scale_size
    return args


def unset_variables(args: argparse.Namespace) -> Optional[str]:
    """A message when --run-dir or --data still names a $VARIABLE after expansion, else None.

    Why not in ``parse``: the login side parses the same arguments, and the
    variables (the node's NVMe path) exist only inside the job. On a rank an
    unset one would make a folder literally named ``$SUMMIT_JOBS_NVME``.
    """
    for flag, value in (("--run-dir", args.run_dir), ("--data", args.data), ("--pretrained", args.pretrained),
                        ("--test-only", args.test_only), ("--init-from", args.init_from)):
        left = re.search(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?", value or "")
        if left:
            return (f"trainer: {flag} {value}: {left.group(0)} is not set in this environment "
                    "(set it in the job, or give the path itself)")
    return None
