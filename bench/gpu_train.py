"""GPU training throughput: TSM-R50 clips/s, the plain 2D network's images/s in the same harness, their
per-frame ratio, and the trainer's own input path with the data wait's share of the step.

Every case runs the trainer's own training step (``trainer.loop.steps.train_step``: device-side
normalisation in ``StepContext.prep``, forward, cross-entropy, backward, SGD step; autocast and
a GradScaler for fp16 as the trainer sets them up; ``--compile`` through the trainer's own
``setup.compiled``) on one device, without a distributed engine around it:

1. TSM: uint8 clips (batch, frames, size, size, 3) and labels already on the device;
   clips/s, frames/s and the peak memory of the case.
2. 2D: the same network without the shift, built for one frame per sample, fed the same
   frames as batch x frames images with a label each: images/s.
3. The per-frame ratio: TSM frames/s over 2D images/s (same FLOPs per frame but the shift).
4. With ``--data DIR`` (a packed shard folder): the trainer's reader (``TrainClips`` behind
   the trainer's persistent ``Pipeline`` of --workers DataLoader workers, pinned memory on a
   GPU; ``--decode device``: the workers only read JPEG bytes and the step decodes them on the
   device), epoch after epoch as long as the steps need: clips/s and the time blocked in
   ``next(batches)`` over the step time. ``--reader-pass epoch`` reads as the trainer does (the pool
   reads into the next epoch); ``restart`` as it did before (a pool pass per epoch, whose queue starts
   empty); ``continuous`` is one pass over all epochs (the steady state).

Warm-up steps (``--warmup``: cuDNN's algorithm search, the compile, the workers' start) are
not timed; on a GPU the clocks are read after ``torch.cuda.synchronize()``. Peak memory is
``torch.cuda.max_memory_allocated`` per case on a GPU; on a CPU it is the process's peak
resident set size (``ru_maxrss``), which only grows from case to case.

Usage (one H100; all figures of a run in one table, --json keeps them; BENCHMARKS.md has the list):
  .venv/bin/python bench/gpu_train.py --json gpu_train.json                # cases 1-3, R50 8x224 bf16, batch 32
  summit-jobs synth data/synth --videos-per-class 64 --frames 64 --size 256 --layout rawframes
  summit-jobs pack data/synth/rawframes data/shards
  .venv/bin/python bench/gpu_train.py --data data/shards --workers 8 --decode cpu    # and case 4
  .venv/bin/python bench/gpu_train.py --data data/shards --workers 4 --decode device
  .venv/bin/python bench/gpu_train.py --data data/shards --workers 8 --decode cpu --reader-pass continuous
  .venv/bin/python bench/gpu_train.py --compile default --warmup 20
  .venv/bin/python bench/gpu_train.py --steps 10 --warmup 5 --profile prof/
CPU smoke run (seconds; one thread, since a shared CPU's step times swing far more on two):
  .venv/bin/python bench/gpu_train.py --device cpu --threads 1 --arch resnet18 --width 0.25 --frames 4 \\
      --size 32 --batch 2 --steps 3 --warmup 1
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import re
import resource
import sys
import time
from pathlib import Path
from typing import Dict, Iterator, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from trainer.config import ARCHS, COMPILE_BACKENDS, COMPILE_MODES, DECODERS  # noqa: E402 (torch-free)

#: The reference cost of one training clip of TSM-R50 at 8x224x224, forward and backward (FLOPs).
CLIP_FLOPS_R50 = 198e9
#: Goals on one H100 with bf16 autocast (TSM-R50, 8x224).
TARGET_CLIPS_PER_S = 500.0
TARGET_PER_FRAME_RATIO = 0.9
TARGET_DATA_WAIT = 0.05
#: --reader-pass: the trainer's way (reading ahead), a pool pass per epoch (before), one pass over all epochs.
READER_PASSES = ("epoch", "restart", "continuous")
#: The learning rate of the measured steps: small, so many steps on random labels stay finite.
BENCH_LR = 1e-3


def _at_least(lo: int):
    """An argparse type: a whole number >= ``lo`` (a step count or a batch of 0 measures nothing)."""
    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if n < lo:
            raise argparse.ArgumentTypeError(f"{text} is below {lo}")
        return n
    parse.__name__ = f"int >= {lo}"
    return parse


_positive, _count = _at_least(1), _at_least(0)


def _width(text: str) -> float:
    """A width multiplier in (0, 4] (argparse type)."""
    try:
        w = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < w <= 4:
        raise argparse.ArgumentTypeError(f"{text} is outside (0, 4]")
    return w


def parse_args(argv=None) -> argparse.Namespace:
    """The options; the trainer's names and choices where the trainer has the same option, and a missing
    --data or --json folder refused before minutes of measuring, not after."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="auto", help="auto (cuda if available, else cpu), cpu, cuda or cuda:N")
    p.add_argument("--arch", choices=ARCHS, default="resnet50")
    p.add_argument("--width", type=_width, default=1.0, help="network width multiplier (tiny CPU runs)")
    p.add_argument("--classes", type=_positive, default=400)
    p.add_argument("--frames", type=_positive, default=8, help="frames per clip (TSM segments)")
    p.add_argument("--size", type=_positive, default=224, help="crop side in pixels")
    p.add_argument("--batch", type=_positive, default=None, help="clips per step (default 32 on a GPU, 2 on CPU)")
    p.add_argument("--steps", type=_positive, default=50, help="timed steps per case")
    p.add_argument("--warmup", type=_count, default=10, help="untimed steps before each case")
    p.add_argument("--amp", choices=("auto", "off", "bf16", "fp16"), default="auto",
                   help="autocast on a GPU (auto: bf16 from compute capability 8.0); never on CPU")
    p.add_argument("--channels-last", choices=("auto", "on", "off"), default="auto", help="auto: on for cuda")
    p.add_argument("--compile", choices=COMPILE_MODES, default="off", help="torch.compile the model")
    p.add_argument("--compile-backend", choices=COMPILE_BACKENDS, default="inductor")
    p.add_argument("--data", default=None, help="packed shard folder: runs the real-reader case")
    p.add_argument("--workers", type=_count, default=8, help="DataLoader worker processes of the reader")
    p.add_argument("--prefetch", type=_positive, default=2, help="batches each worker keeps ready")
    p.add_argument("--reader-pass", choices=READER_PASSES, default="epoch",
                   help="epoch: as the trainer reads (the pool reads into the next epoch before it starts); "
                        "restart: one pool pass per epoch whose queue starts empty (the trainer before); "
                        "continuous: one pass over epoch after epoch (no epoch boundaries at all)")
    p.add_argument("--decode", choices=DECODERS, default="cpu",
                   help="cpu: the workers decode and augment; device: the workers read the JPEG bytes and "
                        "the step decodes (nvJPEG on a GPU) and augments on the device")
    p.add_argument("--threads", type=_count, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--json", default=None, help="write every figure, the device and the options here")
    p.add_argument("--profile", default=None, metavar="DIR",
                   help="torch.profiler over a few TSM steps: a chrome trace in DIR and the top 15 ops")
    a = p.parse_args(argv)
    if not re.fullmatch(r"auto|cpu|cuda(:[0-9]+)?", a.device):
        p.error(f"--device {a.device}: not a device this bench measures (use auto, cpu, cuda or cuda:N)")
    if a.data is not None and not (Path(a.data) / "manifest.json").is_file():
        p.error(f"--data {a.data}: no manifest.json there (pack a data set with 'summit-jobs pack')")
    if a.json is not None and not Path(a.json).resolve().parent.is_dir():
        p.error(f"--json {a.json}: its folder does not exist (create it first)")
    return a


if __name__ == "__main__":
    OPTIONS = parse_args()  # before torch is imported: a refused option costs no start-up time

import torch  # noqa: E402

from trainer.dist import compat  # noqa: E402
from trainer.loop import setup  # noqa: E402
from trainer.data.clips import ClipSpec  # noqa: E402
from trainer.data import devicedecode  # noqa: E402
from trainer.data.datasets import Pipeline, TrainClips  # noqa: E402
from trainer.dist.engines import Engine, Launch  # noqa: E402
from trainer.models.model import build_model  # noqa: E402
from trainer.methods.optim import build_optimizer  # noqa: E402
from trainer.data.sampler import MicroBatchSampler  # noqa: E402
from trainer.loop.steps import StepContext, train_step  # noqa: E402


def _cuda(dev: torch.device, asked: str) -> torch.device:
    """``dev`` with its index (the current GPU for a bare 'cuda'), made the current GPU."""
    if not torch.cuda.is_available():
        raise SystemExit(f"gpu_train: --device {asked}: this torch sees no CUDA GPU; use --device cpu")
    index = torch.cuda.current_device() if dev.index is None else dev.index
    if index >= torch.cuda.device_count():
        raise SystemExit(f"gpu_train: --device {asked}: this machine has {torch.cuda.device_count()} GPU(s), "
                         f"cuda:0 to cuda:{torch.cuda.device_count() - 1}")
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def resolve(a: argparse.Namespace) -> Tuple[torch.device, Optional[torch.dtype], bool]:
    """(device, autocast dtype or None, channels_last) for the options, as the trainer decides them."""
    name = ("cuda" if torch.cuda.is_available() else "cpu") if a.device == "auto" else a.device
    dev = torch.device(name)  # parse_args took only cpu, cuda and cuda:N
    if dev.type == "cuda":
        dev = _cuda(dev, a.device)
    if a.batch is None:
        a.batch = 32 if dev.type == "cuda" else 2
    if a.threads:
        torch.set_num_threads(a.threads)  # a shared CPU's step times swing far less on one thread
    amp, channels_last = setup.numerics(a, dev)  # refuses --amp bf16 on a GPU without native bfloat16
    setup.backends(dev)  # cudnn.benchmark, as the trainer
    return dev, amp, channels_last


def step_context(model: torch.nn.Module, a: argparse.Namespace, dev: torch.device, amp: Optional[torch.dtype],
                 channels_last: bool) -> StepContext:
    """The trainer's step context for ``model`` on one device: its SGD, its loss scaler for fp16, its
    compile; no engine (one rank: no gradient exchange, as an AAVG learner steps)."""
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    opt = build_optimizer("sgd", model, BENCH_LR, 0.9, 1e-4)
    scaler = compat.grad_scaler() if amp == torch.float16 else None
    engine = Engine(Launch(rank=0, size=1, local_rank=0, local_size=1, addr="127.0.0.1", port=0,
                           source="bench"), dev)
    return StepContext(engine=engine, model=setup.compiled(model, a, dev), opt=opt, scaler=scaler, device=dev,
                       amp_dtype=amp, channels_last=channels_last, accum=1, clip_grad=0.0, synchronous=False)


def network(a: argparse.Namespace, dev: torch.device, shift: bool) -> torch.nn.Module:
    """TSM (``shift``: a.frames segments) or the 2D network (no shift, one frame per sample), same seed."""
    torch.manual_seed(0)
    return build_model(a.arch, a.classes, a.frames if shift else 1, shift=shift, width=a.width).to(dev)


def synthetic(n: int, frames: int, a: argparse.Namespace, dev: torch.device) -> Iterator:
    """The same uint8 batch (n, frames, size, size, 3) and labels on the device, forever: the reader's
    output format, so the trainer's step normalises it on the device as it does a real batch."""
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (n, frames, a.size, a.size, 3), dtype=torch.uint8, generator=g).to(dev)
    y = torch.randint(0, a.classes, (n,), generator=g).to(dev)
    return itertools.repeat((x, y))


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _reset_peak(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)


def _peak(dev: torch.device) -> Dict:
    """The case's peak memory and what it counts."""
    if dev.type == "cuda":
        return {"peak_mem_bytes": int(torch.cuda.max_memory_allocated(dev)),
                "peak_mem_kind": "torch.cuda.max_memory_allocated (this case)"}
    return {"peak_mem_bytes": int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024,
            "peak_mem_kind": "CPU: process peak RSS so far (ru_maxrss)"}


def measure(ctx: StepContext, batches: Iterator, a: argparse.Namespace) -> Dict:
    """``a.warmup`` untimed steps, then ``a.steps`` timed ones: seconds per step, the share of the step spent
    waiting for the next batch, and the loss sums' finiteness (a NaN step is no figure)."""
    dev = ctx.device
    for _ in range(a.warmup):
        train_step(ctx, batches, BENCH_LR)
    _sync(dev)
    _reset_peak(dev)
    wait, sums = 0.0, None
    t0 = time.perf_counter()
    for _ in range(a.steps):
        sums, w = train_step(ctx, batches, BENCH_LR)
        wait += w
    _sync(dev)
    elapsed = time.perf_counter() - t0
    loss_sum = float(sums[0]) if sums is not None else float("nan")
    return {"step_s": elapsed / a.steps, "data_wait_s": wait / a.steps, "data_wait_share": wait / elapsed,
            "loss_finite": math.isfinite(loss_sum), **_peak(dev)}


def case_plain(a: argparse.Namespace, dev: torch.device, amp: Optional[torch.dtype], cl: bool) -> Dict:
    """Case 2: the 2D network on batch x frames images per step; images/s."""
    ctx = step_context(network(a, dev, shift=False), a, dev, amp, cl)
    r = measure(ctx, synthetic(a.batch * a.frames, 1, a, dev), a)
    r["images_per_step"] = a.batch * a.frames
    r["images_per_s"] = r["images_per_step"] / r["step_s"]
    return r


def case_tsm(ctx: StepContext, a: argparse.Namespace) -> Dict:
    """Case 1: TSM on synthetic clips already on the device; clips/s and frames/s."""
    r = measure(ctx, synthetic(a.batch, a.frames, a, ctx.device), a)
    r["clips_per_s"] = a.batch / r["step_s"]
    r["frames_per_s"] = r["clips_per_s"] * a.frames
    if a.arch == "resnet50" and a.width == 1.0:
        flops = CLIP_FLOPS_R50 * (a.frames / 8) * (a.size / 224) ** 2
        r["model_tflops_per_s"] = r["clips_per_s"] * flops / 1e12
    return r


def _epochs(pipeline: Pipeline, clips: int, batch: int, how: str = "epoch") -> Iterator:
    """The trainer's batches epoch after epoch (one rank, no accumulation), as long as the steps need.

    ``how="epoch"``: as the trainer reads: a ``train_batches`` call per epoch, given the next epochs'
    samplers (``ahead``), so the pool reads into the next epoch while this one's last batches are trained on.
    ``"restart"``: as the trainer read before: a pool pass per epoch, with nothing of an epoch fetched before
    its pass starts, so each epoch's first batch waits for a worker to make a whole batch.
    ``"continuous"``: one pass whose sampler runs on from epoch to epoch, without any epoch boundary
    (the same batches in the same order in all three).
    """
    make = lambda epoch: MicroBatchSampler(clips, 0, 1, 1, batch, 0, epoch)   # noqa: E731
    if how == "continuous":
        yield from pipeline.train_batches(itertools.chain.from_iterable(make(e) for e in itertools.count()))
        return
    for epoch in itertools.count():
        yield from pipeline.train_batches(make(epoch), ahead=make if how == "epoch" else None)


def train_clips(a: argparse.Namespace) -> Optional[TrainClips]:
    """The --data training clips as the trainer opens them (None without --data), checked before any case
    runs so that a data set that cannot feed a step is refused in seconds, not after the other cases."""
    if a.data is None:
        return None
    train = TrainClips(a.data, ClipSpec(num_segments=a.frames, size=a.size), seed=0)
    if len(train) < a.batch:
        raise SystemExit(f"gpu_train: --data {a.data} holds {len(train)} training clips, fewer than one "
                         f"--batch of {a.batch}: pack more videos or lower --batch")
    if len(train.shards.classes) > a.classes:
        raise SystemExit(f"gpu_train: --data {a.data} has {len(train.shards.classes)} classes but --classes "
                         f"is {a.classes}: raise --classes")
    return train


def reader(a: argparse.Namespace, train: TrainClips, dev: torch.device) -> Tuple[Pipeline, Iterator]:
    """The trainer's input path over ``train``, as the trainer builds it: (pipeline to close, endless batches).
    With ``--decode device`` the workers hand over JPEG bytes and ``StepContext.prep`` decodes on ``dev``."""
    pipeline = devicedecode.pipeline(train, {}, a.workers, dev.type == "cuda", a.prefetch, decode=a.decode,
                                     device=dev)
    return pipeline, _epochs(pipeline, len(train), a.batch, a.reader_pass)


def case_reader(ctx: StepContext, a: argparse.Namespace, train: TrainClips) -> Dict:
    """Case 4: the TSM step fed by the trainer's reader; clips/s and the data wait's share of the step."""
    pipeline, batches = reader(a, train, ctx.device)
    try:
        r = measure(ctx, batches, a)
    finally:
        pipeline.close()
    r["clips_per_s"] = a.batch / r["step_s"]
    r["frames_per_s"] = r["clips_per_s"] * a.frames
    r.update(workers=a.workers, prefetch=a.prefetch, decode=a.decode, reader_pass=a.reader_pass,
             steps_per_epoch=len(train) // a.batch)
    return r


#: Steps recorded by --profile (after one untimed step).
PROFILE_STEPS = 3


def profile(ctx: StepContext, a: argparse.Namespace, out: Path) -> str:
    """A few TSM steps under torch.profiler: the chrome trace in ``out`` and the table of the top 15 ops by
    self device time (self CPU time on a CPU), which is also returned."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile
    cuda = ctx.device.type == "cuda"
    batches = synthetic(a.batch, a.frames, a, ctx.device)
    train_step(ctx, batches, BENCH_LR)
    _sync(ctx.device)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with torch_profile(activities=acts) as prof:
        for _ in range(PROFILE_STEPS):
            train_step(ctx, batches, BENCH_LR)
        _sync(ctx.device)
    out.mkdir(parents=True, exist_ok=True)
    trace = out / "gpu_train_trace.json"
    tmp = trace.with_name(trace.name + ".tmp")
    prof.export_chrome_trace(str(tmp))
    os.replace(tmp, trace)
    key = "self_device_time_total" if cuda else "self_cpu_time_total"
    table = prof.key_averages().table(sort_by=key, row_limit=15)
    _write(out / "gpu_train_top_ops.txt", table + "\n")
    return f"profile: {PROFILE_STEPS} TSM steps, chrome trace {trace}\n{table}"


def _target(name: str, goal: str, value: Optional[float], met: Optional[bool], note: str = "") -> Dict:
    return {"figure": name, "goal": goal, "value": value, "met": met, "note": note}


def targets(res: Dict, a: argparse.Namespace, amp: Optional[torch.dtype]) -> list:
    """The H100 goals, met or not; the clips/s goal only where the run is its setting (R50, 8x224, bf16)."""
    paper = a.arch == "resnet50" and a.width == 1.0 and a.frames == 8 and a.size == 224 and amp == torch.bfloat16
    clips = res["tsm"]["clips_per_s"]
    out = [_target("TSM-R50 training clips/s", f">= {TARGET_CLIPS_PER_S:g}", clips,
                   clips >= TARGET_CLIPS_PER_S if paper else None,
                   "" if paper else "the goal is for resnet50, width 1, 8x224, bf16"),
           _target("per-frame ratio TSM / 2D", f">= {TARGET_PER_FRAME_RATIO}", res["per_frame_ratio"],
                   res["per_frame_ratio"] >= TARGET_PER_FRAME_RATIO)]
    if "reader" in res:
        share = res["reader"]["data_wait_share"]
        out.append(_target("data wait share, real reader", f"< {TARGET_DATA_WAIT:.0%}", share,
                           share < TARGET_DATA_WAIT))
        cost = res["reader"]["input_cost_share"]
        out.append(_target("input cost share (1 - synthetic step / reader step)", f"< {TARGET_DATA_WAIT:.0%}",
                           cost, cost < TARGET_DATA_WAIT, "counts the rank's decode under --decode device"))
    return out


def device_info(dev: torch.device) -> Dict:
    """The machine and the library versions the figures belong to."""
    if dev.type == "cuda":
        name = torch.cuda.get_device_name(dev)
    else:
        name = f"CPU ({os.cpu_count()} cores, {torch.get_num_threads()} torch threads)"
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {"device": name, "device_type": dev.type, "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": cudnn}


def _row(case: str, value: float, unit: str, r: Optional[Dict] = None, fmt: str = ".2f") -> str:
    """One line of the table: the case, its figure, and the step time and peak memory when ``r`` has them."""
    tail = f"{1e3 * r['step_s']:>10.2f}  {r['peak_mem_bytes'] / 2 ** 20:>10.0f} MiB" if r else ""
    return f"{case:<32}{value:>12{fmt}} {unit:<9}{tail}".rstrip()


def _header(report: Dict) -> list:
    """The device, the versions and the settings the figures belong to."""
    o = report["options"]
    return [f"device: {report['device']}; torch {report['torch']}, CUDA {report['cuda']}, cuDNN {report['cudnn']}",
            f"{o['arch']} width {o['width']}, {o['batch']} clips x {o['frames']} frames x {o['size']}^2 per step, "
            f"amp {o['amp_effective']}, channels_last {o['channels_last_effective']}, compile {o['compile']}"
            + (f" ({o['compile_backend']})" if o["compile"] != "off" else "")
            + f"; {o['steps']} timed steps after {o['warmup']}",
            f"{'case':<32}{'figure':>12} {'':<9}{'step ms':>10}  {'peak memory':>14}"]


def report_lines(report: Dict) -> list:
    """The plain table of figures, the device, and (on a GPU) the goals."""
    r = report["results"]
    t, p = r["tsm"], r["plain2d"]
    lines = _header(report) + [
        _row("1 TSM, synthetic on device", t["clips_per_s"], "clips/s", t),
        _row("  the same in frames", t["frames_per_s"], "frames/s", fmt=".1f"),
        _row("2 2D, synthetic on device", p["images_per_s"], "images/s", p, fmt=".1f"),
        _row("3 per-frame ratio TSM / 2D", r["per_frame_ratio"], "", fmt=".3f")]
    if "reader" in r:
        d = r["reader"]
        lines += [_row("4 TSM, real reader", d["clips_per_s"], "clips/s", d),
                  _row("  data wait share of the step", d["data_wait_share"], "", fmt=".3f")
                  + f"  ({d['workers']} workers, prefetch {d['prefetch']}, decode {d['decode']}"
                  + (f", {d['reader_pass']} pass, {d['steps_per_epoch']} steps per epoch" if "reader_pass" in d
                     else "") + ")",
                  _row("  input cost share of the step", d["input_cost_share"], "", fmt=".3f")
                  + "  (1 - synthetic step / reader step)"]
    if "model_tflops_per_s" in t:
        lines.append(_row("  TSM model TFLOP/s", t["model_tflops_per_s"], "", fmt=".1f")
                     + "  (198 GFLOP per 8x224 clip)")
    lines.append(f"peak memory: {t['peak_mem_kind']}")
    bad = [k for k, v in r.items() if isinstance(v, dict) and not v.get("loss_finite", True)]
    if bad:
        lines.append(f"WARNING: non-finite loss in {', '.join(bad)}: those steps computed NaN/inf")
    for g in report.get("targets", []):
        verdict = "n/a" if g["met"] is None else ("met" if g["met"] else "NOT met")
        lines.append(f"target {g['figure']} {g['goal']}: {g['value']:.3f} -> {verdict}"
                     + (f" ({g['note']})" if g["note"] else ""))
    return lines


def _write(path: Path, text: str) -> None:
    """``text`` into ``path`` through a temporary name in the same folder: never a half-written file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def run_cases(a: argparse.Namespace, dev: torch.device, amp: Optional[torch.dtype], cl: bool) -> Tuple[Dict, str]:
    """Every case in one process, the 2D network first so that its memory is gone before TSM's; the figures
    and the --profile table ("" without it)."""
    train = train_clips(a)
    res: Dict = {"plain2d": case_plain(a, dev, amp, cl)}
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    ctx = step_context(network(a, dev, shift=True), a, dev, amp, cl)
    res["tsm"] = case_tsm(ctx, a)
    res["per_frame_ratio"] = res["tsm"]["frames_per_s"] / res["plain2d"]["images_per_s"]
    if train is not None:
        res["reader"] = case_reader(ctx, a, train)
        # What the input path adds to a step, whichever side decodes: with --decode device the rank's
        # decode and augmentation run inside the step (in prep), where the data wait does not see them.
        res["reader"]["input_cost_share"] = max(0.0, 1.0 - res["tsm"]["step_s"] / res["reader"]["step_s"])
    return res, profile(ctx, a, Path(a.profile)) if a.profile else ""


def main(argv=None, options: Optional[argparse.Namespace] = None) -> None:
    a = options if options is not None else parse_args(argv)
    dev, amp, cl = resolve(a)
    if amp is None and dev.type == "cpu" and a.amp in ("bf16", "fp16"):
        print(f"gpu_train: --amp {a.amp} is ignored on a CPU (the trainer never autocasts there)", file=sys.stderr)
    res, top_ops = run_cases(a, dev, amp, cl)
    options = dict(vars(a), amp_effective=str(amp).replace("torch.", "") if amp else "off",
                   channels_last_effective=cl)
    report = {**device_info(dev), "options": options, "results": res}
    if dev.type == "cuda":
        report["targets"] = targets(res, a, amp)
    print("\n".join(report_lines(report)))
    if top_ops:
        print(top_ops)
    if a.json:
        _write(Path(a.json), json.dumps(report, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(options=OPTIONS)
