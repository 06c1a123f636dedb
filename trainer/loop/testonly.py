"""``--test-only CKPT``: the multi-clip test of one checkpoint on any number of ranks, and nothing else.

Why apart from the training loop: a test needs no training clips, optimiser,
schedule or resume, and it must leave a run directory as it found it apart from
its own records: no checkpoint written, pruned or cleaned up (a training run
may be writing into the same folder), no COMPLETE, no run_config.json. The
test itself is the final test's: ``steps.evaluate`` over the validation videos
with --test-clips x --test-crops views of --test-size, averaged by --test-average;
the result is one ``test`` record in metrics.jsonl with ``test_only: true``
and the per-video scores in ``scores/test-only-<checkpoint stem>.npz``.
The checkpoint may be this trainer's or another code's (``trainer.models.interop``).
"""
from __future__ import annotations

import argparse
import signal
from pathlib import Path
from typing import Dict, Optional, Tuple

import torch

from trainer.loop import checkpoint as ckpt
from trainer.loop import startup
from trainer.models import interop
from trainer import preflight, rundir, scores
from trainer.loop import setup, tboard
from trainer.data.datasets import EvalClips
from trainer.dist.engines import Engine, make_engine
from trainer.loop.metrics import MetricsWriter, log
from trainer.loop.signals import STOP_SIGNALS
from trainer.loop.steps import EvalLoader, StepContext, evaluate
from trainer.loop.trainstate import plain_args


def read_weights(path: Path) -> Tuple[Dict[str, torch.Tensor], Dict]:
    """(the weights in this trainer's key layout, what the file says of them: arch, width, classes, shift,
    and its plain entries under ``meta``: step and epoch for this trainer's checkpoints).

    Any checkpoint ``trainer.models.interop`` reads: this trainer's, its weights-only exports, the official
    TSM code's and mmaction2's, as data only (never code).
    """
    preflight.weights_file(path, "--test-only")
    try:
        return interop.load_checkpoint_any(path)
    except interop.WeightsError as exc:
        raise ckpt.CheckpointError(f"trainer: --test-only {path}: {exc}") from None


def _agreed_weights(engine: Engine, path: Path) -> Tuple[Optional[Dict], Dict]:
    """Every rank reads the file; when one cannot, all stop (none waits in a collective for it)."""
    try:
        weights, info = read_weights(path)
        failure = None
    except (ckpt.CheckpointError, preflight.Refusal) as exc:
        weights, info, failure = None, {}, exc
    if engine.any_rank(failure is not None):
        raise failure if failure is not None else SystemExit(
            f"trainer: rank {engine.rank}: another rank could not read {path} (its line says why)")
    step = (info.get("meta") or {}).get("step")
    if not engine.agree(step if isinstance(step, int) else -1):
        raise SystemExit(f"trainer: the ranks read different contents from {path} (rank {engine.rank} sees step "
                         f"{step}): is it on a file system every node sees?")
    return weights, info


def weights_misfit(model: torch.nn.Module, weights: Dict) -> Optional[str]:
    """How ``weights`` differ from what ``model`` holds (names and shapes), in a few words; None if they fit."""
    want = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    have = {k: tuple(v.shape) for k, v in weights.items() if isinstance(v, torch.Tensor)}
    missing = [k for k in want if k not in have]
    unused = [k for k in weights if k not in want]
    wrong = [k for k in want if k in have and have[k] != want[k]]
    parts = []
    if missing:
        parts.append(f"{len(missing)} tensors missing, the first {missing[0]}")
    if unused:
        parts.append(f"{len(unused)} tensors this network has no place for, the first {unused[0]}")
    if wrong:
        parts.append(f"{wrong[0]} is {list(have[wrong[0]])} in the file and {list(want[wrong[0]])} here")
    return "; ".join(parts) or None


def _model(args: argparse.Namespace, num_classes: int, weights: Dict, info: Dict, path: Path,
           device: torch.device, channels_last: bool) -> torch.nn.Module:
    """The network of these options with the checkpoint's weights; one line naming the options to pass
    when the file holds another network."""
    if args.num_classes and args.num_classes != info["num_classes"]:
        raise SystemExit(f"trainer: --test-only {path}: --num-classes {args.num_classes}, but its classifier has "
                         f"{info['num_classes']} classes: pass --num-classes {info['num_classes']} (or 0 for the "
                         "data's count)")
    why = interop.option_mismatch(info, args, num_classes)
    if not why:
        model = setup.network(args, num_classes).to(device)
        why = weights_misfit(model, weights)
    if why:
        raise SystemExit(f"trainer: --test-only {path}: {why}")
    model.load_state_dict(weights)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model


def _test_set(args: argparse.Namespace) -> EvalClips:
    spec = setup.clip_spec(args)
    test_set = EvalClips(args.data, spec, args.test_clips, "val", args.test_crops, args.test_size)
    if len(test_set) == 0:
        raise SystemExit(f"trainer: --test-only: {args.data} has no validation videos to test on "
                         "(the test reads the 'val' split of the manifest)")
    return test_set


def _announce(args: argparse.Namespace, engine: Engine, metrics: MetricsWriter, path: Path) -> None:
    """Rank 0: the launch record and, with --tensorboard, the TensorBoard writer."""
    run_dir = Path(args.run_dir)
    rundir.launch(run_dir, plain_args(args), mode="test_only", checkpoint=path.name, seed=args.seed,
                  ranks=engine.size, engine=engine.name, torch=torch.__version__, step=0)
    if args.tensorboard:
        metrics.attach(tboard.TensorBoardSink(run_dir, plain_args(args)))


def _run(args: argparse.Namespace, engine: Engine, metrics: MetricsWriter) -> int:
    path = Path(args.test_only)
    test_set = _test_set(args)
    num_classes = args.num_classes or len(test_set.shards.classes)
    weights, info = _agreed_weights(engine, path)
    amp, channels_last = setup.numerics(args, engine.device)
    model = _model(args, num_classes, weights, info, path, engine.device, channels_last)
    ctx = StepContext(engine, model, None, None, engine.device, amp, channels_last, 1, 0.0, True)
    how = EvalLoader(args.batch_per_gpu, args.workers, args.prefetch, args.test_average)
    log(f"test only: {path} on {engine.size} ranks, {len(test_set)} videos", engine.rank == 0)
    r, table = evaluate(ctx, how, test_set, model, per_video=True)
    meta = info.get("meta") or {}
    step = meta.get("step") if isinstance(meta.get("step"), int) else 0
    epoch = meta.get("epoch") if isinstance(meta.get("epoch"), int) else 0
    saved = scores.scores_name(path.name, test_only=True)
    if engine.rank == 0:
        saved = scores.save_test(args.run_dir, test_set, table, scores.test_meta(
            args, test_set, path.name, step, max(epoch - 1, 0), num_classes, test_only=True))
    metrics.write("test", step=step, epoch=max(epoch - 1, 0), checkpoint=path.name, test_only=True, lr=0.0,
                  clips=args.test_clips, crops=args.test_crops, layout=info.get("layout"), scores=saved, **r)
    log(f"test {path.name}: top1 {100 * r['top1']:.2f}% top5 {100 * r['top5']:.2f}% ({args.test_clips} clips x "
        f"{args.test_crops} crops of {args.test_size}, {args.test_average} averaged; test only)", engine.rank == 0)
    engine.barrier()
    return 0


def test_only(args: argparse.Namespace) -> int:
    """Run the test of ``args.test_only`` and exit 0; the run directory is created when it does not exist."""
    startup.imports_done()
    preflight.require_data(args)
    for sig in STOP_SIGNALS:  # nothing to save: a stop request ends the test as the signal's default does
        signal.signal(sig, signal.SIG_DFL)
    if args.threads:
        torch.set_num_threads(args.threads)
    run_dir = Path(args.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    engine = make_engine(args.engine, rendezvous_dir=run_dir)
    metrics = MetricsWriter(run_dir, engine.rank == 0)
    try:
        if engine.rank == 0:
            _announce(args, engine, metrics, Path(args.test_only))
        return _run(args, engine, metrics)
    finally:
        metrics.close()
        engine.shutdown()
        startup.hold_until_exit(engine)  # its process group is never freed (startup.hold_until_exit says why)
