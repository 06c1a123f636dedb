"""Setting a run up, one concern per function: numerics, data, schedule, model and optimiser, and the
run record of what took effect.

Why not in the trainer's constructor: each of these has its own failure (a missing --data, too few
clips for one global batch, staging that disagrees with the job's placement) and its own side
effects; small functions keep each failure next to its cause and the constructor a list of steps.
"""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import torch

from trainer.data.clips import ClipSpec
from trainer.config import LR_PER_8_CLIPS
from trainer.data.datasets import EvalClips, TrainClips
from trainer.dist import compat
from trainer.dist.engines import Engine
from trainer.models import interop, transfer
from trainer.loop.metrics import log
from trainer.models.model import build_model
from trainer.methods.optim import build_optimizer
from trainer.data.sampler import steps_per_epoch
from trainer.methods.schedules import Schedule, TrainData
from trainer.shards import ShardDataset

#: Horovod's tensor-fusion buffer when HOROVOD_FUSION_THRESHOLD is not set (bytes).
HOROVOD_DEFAULT_FUSION = 128 * 1024 * 1024
#: torch DDP's default gradient bucket (bucket_cap_mb=25).
DDP_DEFAULT_BUCKET = 25 * 1024 * 1024
#: Compiled graphs kept per model under --compile: multigrid's long cycle times its short cycle
#: (4 x 3 shapes) plus the final phase, with room for the last partial batches.
COMPILE_SHAPES = 32


#: The first CUDA compute capability with bfloat16 arithmetic (Ampere, A100).
BF16_CAPABILITY = (8, 0)


def amp_dtype(option: str, cuda: bool, capability: Optional[Tuple[int, int]]) -> Optional[torch.dtype]:
    """The autocast dtype for ``--amp option`` on a CUDA GPU of ``capability`` (None: no autocast).

    Why the capability and not ``torch.cuda.is_bf16_supported()``: from torch 2.3
    that answers True on a V100 (7.0), which only emulates bfloat16, and auto
    would then pick the slow emulation; on torch 2.0 it answers False there, and
    ``torch.autocast`` turns itself off with a warning for an explicit bf16. So
    auto picks bf16 from 8.0 and fp16 (with a GradScaler) below, and an explicit
    bf16 below 8.0 is refused (ValueError) rather than silently run in fp32.
    Never on CPU.
    """
    if not cuda or option == "off":
        return None
    native = capability is not None and tuple(capability) >= BF16_CAPABILITY
    if option == "bf16" and not native:
        have = ".".join(str(n) for n in capability) if capability else "unknown"
        raise ValueError(f"--amp bf16 needs a GPU of compute capability {BF16_CAPABILITY[0]}.{BF16_CAPABILITY[1]} "
                         f"or newer (this one: {have}, which has no native bfloat16): use --amp fp16 or auto")
    if option == "bf16" or (option == "auto" and native):
        return torch.bfloat16
    return torch.float16


def numerics(args: argparse.Namespace, device: torch.device) -> Tuple[Optional[torch.dtype], bool]:
    """(autocast dtype or None, channels-last memory format): what the device and the options allow."""
    cuda = device.type == "cuda"
    capability = tuple(torch.cuda.get_device_capability(device)) if cuda else None
    try:
        amp = amp_dtype(args.amp, cuda, capability)
    except ValueError as exc:
        raise SystemExit(f"trainer: {exc}") from None
    return amp, args.channels_last == "on" or (args.channels_last == "auto" and cuda)


def backends(device: torch.device) -> None:
    """On a GPU, let cuDNN time its convolution algorithms once per input shape and keep the fastest,
    as the official TSM training script does (``cudnn.benchmark = True``): a run's clip shapes are
    few (one, or multigrid's handful), so the timing is paid a few times per run."""
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True


def compile_refusal(args: argparse.Namespace, why: str) -> str:
    """The one line that ends a run whose ``--compile`` cannot compile the model (``why``: the cause)."""
    return (f"trainer: --compile {args.compile} (backend {args.compile_backend}) could not compile the model: "
            f"{why[:300]}; run with --compile off, or --compile-backend aot_eager where no C++ compiler works "
            "(inductor needs one on a CPU)")


def check_compiler(args: argparse.Namespace, device: torch.device) -> None:
    """Refuse at set-up a ``--compile`` whose inductor backend would find no C++ compiler for the CPU.

    Why at set-up: inductor finds out at its first compile, inside the first training
    step, after the data, the model and the resume are set up (over ten CPU-seconds on a
    tiny run before the same refusal). A GPU's kernels need no C++ compiler, nor does
    aot_eager; where torch cannot be asked, the first compile still refuses (``train``).
    """
    if args.compile == "off" or args.compile_backend != "inductor" or device.type != "cpu":
        return
    why = compat.cpp_compiler_problem()
    if why is not None:
        raise SystemExit(compile_refusal(args, why))


def compiled(model: torch.nn.Module, args: argparse.Namespace, device: torch.device) -> torch.nn.Module:
    """The training step's model under torch.compile (``--compile``), or ``model`` itself when off.

    Why the wrapper outside the engine's (DDP): dynamo then splits the graph at
    DDP's gradient buckets so the allreduce still overlaps the backward pass.
    Checkpoints and evaluation use the plain module (``engines.unwrap``). Each
    new clip shape (multigrid) compiles again, so the recompile limit is raised
    to cover a long cycle's shapes.
    """
    if args.compile == "off":
        return model
    from torch import _dynamo
    _dynamo.config.cache_size_limit = max(_dynamo.config.cache_size_limit, COMPILE_SHAPES)
    mode = None if args.compile == "default" or args.compile_backend != "inductor" else args.compile
    try:
        return torch.compile(model, backend=args.compile_backend, mode=mode)
    except RuntimeError as exc:  # e.g. a Python torch.compile does not support yet
        raise SystemExit(f"trainer: --compile {args.compile}: torch.compile is not available here ({exc}); "
                         "run with --compile off") from None


def clip_spec(args: argparse.Namespace) -> ClipSpec:
    return ClipSpec(num_segments=args.num_segments, mode=args.sampling, stride=args.frame_stride,
                    size=args.input_size, scale_size=args.scale_size, flip=args.flip, test_crops=args.test_crops,
                    test_size=args.test_size, modality=args.modality, flow_stack=args.flow_stack)


def network(args: argparse.Namespace, num_classes: int) -> torch.nn.Module:
    """The network the options describe (its first conv takes 3 colours or 2 x --flow-stack flow channels)."""
    return build_model(args.arch, num_classes, args.num_segments, args.shift, args.shift_placement,
                       args.width, args.fold_div, args.dropout, shift_blocks=args.shift_blocks,
                       in_channels=clip_spec(args).channels)


@dataclass
class Data:
    """The run's data and its epoch geometry at the base batch."""
    train: TrainData
    val_set: Optional[EvalClips]
    test_set: Optional[EvalClips]  # the final test's clips x crops of the validation videos
    num_classes: int
    steps_per_epoch: int
    global_batch: int


def load_data(args: argparse.Namespace, engine: Engine, spec: ClipSpec, device: torch.device) -> Data:
    """The training and validation clips, the class count, and the steps per epoch every rank agrees on."""
    train_set = TrainClips(args.data, spec, args.seed, "train")
    num_classes = args.num_classes or len(train_set.shards.classes)
    labels = train_set.shards.labels()
    if labels and max(labels) >= num_classes:
        raise SystemExit(f"trainer: the data has label {max(labels)} but the model has {num_classes} "
                         "classes: pass --num-classes 0 to take the count from the manifest")
    val_set = EvalClips(args.data, spec, args.val_clips, "val") if len(ShardDataset(args.data, "val")) else None
    test_set = EvalClips(args.data, spec, args.test_clips, "val", args.test_crops, args.test_size) \
        if val_set is not None and args.test else None
    k = args.accum_steps
    global_batch = engine.size * k * args.batch_per_gpu
    train = TrainData(train_set, engine.rank, engine.size, k, None)
    steps = steps_per_epoch(len(train_set), engine.size * k, args.batch_per_gpu)
    placement = train_set.shards.manifest.get("placement") or {}
    if placement.get("policy") == "partition" and int(placement.get("nodes", 1)) > 1:
        train, steps = partitioned(args, engine, train_set, int(placement["nodes"]), int(placement["node"]), device)
    if steps == 0:
        raise SystemExit(f"trainer: {len(train_set)} training clips are fewer than one global batch "
                         f"of {global_batch} ({engine.size} ranks x {k} accumulation x "
                         f"{args.batch_per_gpu} clips)")
    return Data(train, val_set, test_set, num_classes, steps, global_batch)


def partitioned(args: argparse.Namespace, engine: Engine, train_set: TrainClips, nodes: int, node: int,
                device: torch.device) -> Tuple[TrainData, int]:
    """Steps per epoch when each node holds only its share of the training shards.

    A node's ranks split that node's samples (the same sampler, over the node's
    ranks); every node must run the same number of steps or the allreduce
    hangs, so all take the smallest share's count. Exact accumulation still
    holds within the node: its physical ranks stand in for the node's virtual ranks.
    """
    e = engine
    if e.size % nodes:
        raise SystemExit(f"trainer: {e.size} ranks cannot be spread evenly over the {nodes} nodes the data was "
                         "staged for; stage with --nodes equal to the job's node count")
    per_node = e.size // nodes
    if e.rank // per_node != node:
        raise SystemExit(f"trainer: rank {e.rank} runs on node {e.rank // per_node} but this NVMe copy holds "
                         f"node {node}'s shards; the staging step and the training step disagree on placement")
    counts = torch.zeros(nodes, dtype=torch.float64, device=device)
    if e.rank % per_node == 0:
        counts[node] = len(train_set)
    shares = [int(c) for c in e.allreduce_sum(counts).tolist()]
    train = TrainData(train_set, e.rank % per_node, per_node, args.accum_steps, shares)
    steps = train.steps_for_batch(args.batch_per_gpu)
    log(f"partitioned data: node shares {shares} clips, {steps} steps per epoch", e.rank == 0)
    return train, steps


def base_lr(args: argparse.Namespace, global_batch: int) -> float:
    """--lr, or the paper's rate scaled linearly with the global batch."""
    return args.lr if args.lr is not None else LR_PER_8_CLIPS * global_batch / 8


def model_and_optimizer(args: argparse.Namespace, num_classes: int, schedule: Schedule, device: torch.device,
                        channels_last: bool, lr: float, is_main: bool = True
                        ) -> Tuple[torch.nn.Module, torch.optim.Optimizer]:
    """The same initial model on every rank (seeded; rank 0's is broadcast anyway) and its optimiser."""
    torch.manual_seed(args.seed)
    model = network(args, num_classes).to(device)
    if args.init_from:
        log(transfer.init_from(model, args.init_from).line(), is_main)
    if args.pretrained:
        try:
            report = interop.load_pretrained(model, args.pretrained)
        except interop.WeightsError as exc:
            raise SystemExit(f"trainer: --pretrained {args.pretrained}: {exc}") from None
        log(report.line(), is_main)
    schedule.adapt_model(model)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    opt = build_optimizer(args.optimizer, model, lr, args.momentum, args.weight_decay, args.trust_coefficient,
                          fc_lr5=args.fc_lr5)
    return model, opt


def _communication(args: argparse.Namespace, engine: Engine) -> Dict:
    """The compression and fusion buffer that took effect (Horovod reads its buffer from the environment)."""
    comp = args.compression
    if args.optimizer_sync == "aavg":
        comp = "none (aavg: no gradient allreduce)" if comp != "none" else "none"
    elif comp == "bf16" and engine.name == "horovod":
        comp = "none (horovod has no bf16 compression)"
    cfg: Dict = {"compression_effective": comp}
    env = os.environ.get("HOROVOD_FUSION_THRESHOLD")
    if engine.name == "horovod":
        cfg["fusion_threshold_bytes"] = int(env) if env and env.isdigit() else HOROVOD_DEFAULT_FUSION
        cfg["fusion_threshold_source"] = "HOROVOD_FUSION_THRESHOLD" if env and env.isdigit() else "default"
    else:
        cfg["fusion_threshold_bytes"] = DDP_DEFAULT_BUCKET
        cfg["fusion_threshold_source"] = "ddp bucket_cap_mb default (HOROVOD_FUSION_THRESHOLD not used)"
    return cfg


def run_config(args: argparse.Namespace, engine: Engine, schedule: Schedule, global_batch: int,
               amp: Optional[torch.dtype]) -> Dict:
    """What the run record shows: the methods in force and the communication settings that took effect."""
    a = args
    cfg: Dict = {
        "engine": engine.name, "ranks": engine.size, "accum_steps": a.accum_steps, "batch_per_gpu": a.batch_per_gpu,
        "global_batch": global_batch, "base_lr": schedule.base_lr, "schedule": a.schedule,
        "optimizer": a.optimizer, "optimizer_sync": a.optimizer_sync, "compression": a.compression,
        "amp": str(amp).replace("torch.", "") if amp else "off", **_communication(a, engine),
        "shift_blocks": a.shift_blocks, "fc_lr5": a.fc_lr5,
        "test": f"{a.test_clips} clips x {a.test_crops} crops of {a.test_size}, {a.test_average} averaged",
        "val_clips": a.val_clips, "preset": a.preset,
    }
    if a.optimizer == "lars":
        cfg["trust_coefficient"] = a.trust_coefficient
    cfg.update(schedule.config())
    return cfg
