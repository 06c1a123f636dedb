"""torch side of the input pipeline: Dataset over the shards and the DataLoader.

Why forkserver/spawn: DataLoader workers deadlocked with fork on Summit (the
CUDA/MPI state of the parent is not fork-safe), so workers are never forked
from the training process. Why a fresh loader per epoch: the batch sampler
carries the epoch (its shuffle) and the resume position; worker start-up is a
few seconds against an epoch of minutes.
"""
from __future__ import annotations

import dataclasses
import multiprocessing
import os
import re
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from . import transforms
from .clips import ClipSpec, sample_rng, eval_clip, eval_frame_indices, train_clip, train_frame_indices
from .sampler import MicroBatchSampler, ShapeBatchSampler
from .shards import ShardDataset


class SampleError(ValueError):
    """A sample with a frame that cannot be decoded; the message names the shard file and the tar member."""


def error_line(exc: BaseException) -> str:
    """The message of ``exc`` without a DataLoader worker's traceback around it.

    Why: an error raised in a worker reaches the training process as the same
    type whose message is the worker's whole traceback; the line that says what
    is wrong is its last one, after the exception's name.
    """
    text = str(exc)
    if "Traceback (most recent call last)" not in text:
        return text
    last = [line for line in text.splitlines() if line.strip()][-1]
    return re.sub(r"^[\w.]+: ", "", last.strip(), count=1)


def _bad_frame(frames: Sequence[bytes], indices: Sequence[int], num_frames: int) -> Optional[Tuple[int, str]]:
    """(frame number, why) of the first frame of a clip that does not decode on its own, else None."""
    for j, data in zip(indices, frames):
        try:
            transforms.decode(data)
        except Exception as exc:  # PIL raises OSError, SyntaxError, ValueError, DecompressionBombError...
            why = re.sub(r"\s*<_io\.BytesIO object at 0x[0-9a-f]+>", "", str(exc))  # an address says nothing
            return min(max(int(j), 0), num_frames - 1), f"{type(exc).__name__}: {why}"
    return None


def decoded(shards: ShardDataset, i: int, indices: Sequence[int], make: Callable[[List[bytes]], np.ndarray]):
    """``make(frames)`` for sample ``i``; a frame that cannot be decoded is reported by shard file and member.

    Why here: the decode runs in a DataLoader worker, where PIL's own error names
    neither the video nor the file it came from. Only a frame that fails on its
    own is blamed on the data; any other failure is raised as it is.
    """
    frames = shards.frames(i, indices)
    try:
        return make(frames)
    except Exception:
        bad = _bad_frame(frames, indices, shards.num_frames(i))
        if bad is None:
            raise
        key, (j, why) = shards.key(i), bad
        si = shards._samples[i][0]  # the shard holding sample i (ShardDataset keeps no public accessor)
        path = shards.root / shards._shards[si]["name"]
        raise SampleError(f"trainer: shard {path}: member {key}.{j:05d}.jpg (sample {key}, frame {j}) cannot be "
                          f"decoded ({why}); re-pack that video or re-stage the shard") from None


class TrainClips(Dataset):
    """Items are (epoch, index): the augmentation draw depends on nothing else."""

    def __init__(self, root: str, spec: ClipSpec, seed: int, split: str = "train"):
        self.shards = ShardDataset(root, split)
        self.spec, self.seed = spec, seed

    def __len__(self) -> int:
        return len(self.shards)

    def __getitem__(self, item: Tuple[int, ...]):
        """``(epoch, index)``, or ``(epoch, index, frames, size)`` for a multigrid shape."""
        epoch, i = item[0], item[1]
        spec = self.spec if len(item) == 2 else self.shaped(item[2], item[3])
        rng = sample_rng(self.seed, epoch, i)
        idx = train_frame_indices(self.shards.num_frames(i), spec.num_segments, spec.mode, spec.stride, rng)
        clip = decoded(self.shards, i, idx, lambda frames: train_clip(frames, spec, rng))
        return torch.from_numpy(clip), self.shards.label(i)

    def shaped(self, frames: int, size: int) -> ClipSpec:
        """The spec for a multigrid shape: fewer frames keep the temporal span (the dense
        stride grows), as in the multigrid paper's coarse grids."""
        stride = max(1, int(round(self.spec.stride * self.spec.num_segments / frames)))
        return dataclasses.replace(self.spec, num_segments=frames, size=size, stride=stride)


class EvalClips(Dataset):
    """Items are (index, view): view = clip * test_crops + crop, all deterministic."""

    def __init__(self, root: str, spec: ClipSpec, clips: int, split: str = "val"):
        self.shards = ShardDataset(root, split)
        self.spec, self.clips = spec, clips

    def __len__(self) -> int:
        return len(self.shards)

    def __getitem__(self, item: Tuple[int, int]):
        i, view = item
        clip, crop = divmod(view, self.spec.test_crops)
        idx = eval_frame_indices(self.shards.num_frames(i), self.spec.num_segments, self.spec.mode,
                                 self.spec.stride, clip, self.clips)
        clip = decoded(self.shards, i, idx, lambda frames: eval_clip(frames, self.spec, crop))
        return torch.from_numpy(clip), self.shards.label(i)


def _context(workers: int) -> Optional[multiprocessing.context.BaseContext]:
    if workers <= 0:
        return None
    method = os.environ.get("SUMMIT_JOBS_WORKER_START", "forkserver")
    if method not in multiprocessing.get_all_start_methods():
        method = "spawn"
    return multiprocessing.get_context(method)


def _loader(dataset: Dataset, batch_sampler, workers: int, pin: bool, prefetch: int) -> DataLoader:
    kw = {}
    if workers > 0:
        kw = dict(multiprocessing_context=_context(workers), prefetch_factor=prefetch)
    return DataLoader(dataset, batch_sampler=batch_sampler, num_workers=workers, pin_memory=pin, **kw)


def train_loader(dataset: TrainClips, rank: int, size: int, accum: int, batch: int, seed: int, epoch: int,
                 start_step: int, workers: int, pin: bool, prefetch: int = 2) -> DataLoader:
    sampler = MicroBatchSampler(len(dataset), rank, size, accum, batch, seed, epoch, start_step)
    return _loader(dataset, sampler, workers, pin, prefetch)


def shape_loader(dataset: TrainClips, rank: int, size: int, accum: int, seed: int, epoch: int,
                 steps, start_step: int, workers: int, pin: bool, prefetch: int = 2) -> DataLoader:
    """One loader (one set of workers) for an epoch of variable-shape iterations."""
    sampler = ShapeBatchSampler(len(dataset), rank, size, accum, seed, epoch, steps, start_step)
    return _loader(dataset, sampler, workers, pin, prefetch)


class _ListBatches:
    def __init__(self, batches: List[List[Tuple[int, int]]]):
        self.batches = batches

    def __iter__(self):
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


def eval_loader(dataset: EvalClips, indices: List[int], views: int, batch: int, workers: int, pin: bool,
                prefetch: int = 2) -> DataLoader:
    """Batches of (sample, view) in sample-major order so per-video averaging is a reshape."""
    items = [(i, v) for i in indices for v in range(views)]
    per = max(1, batch // views) * views  # whole videos per batch
    batches = [items[j:j + per] for j in range(0, len(items), per)]
    return _loader(dataset, _ListBatches(batches), workers, pin, prefetch)




__all__ = ["TrainClips", "EvalClips", "SampleError", "error_line", "train_loader", "shape_loader", "eval_loader"]
