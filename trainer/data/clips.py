"""From a sample in the shards to a uint8 clip: which frames, then the pixel
work (decode, multi-scale crop, flip, test crops) of ``trainer.data.transforms``.

Why uint8 out of the workers: the host->device copy is 4x smaller than float,
and normalisation is one fused op on the device (``normalize`` below).

Randomness is a function of (seed, epoch, sample index) only (``sample_rng``),
never of the rank or the worker id, so a physical rank standing in for a
virtual rank (gradient accumulation) draws exactly the same frames and crops.

Frame sampling follows the TSM code: "dense" = T frames from a T*stride window
(random start in training, evenly spaced windows for the multi-clip test;
indices past the end of a short video are clamped to its last frame);
"uniform" = TSN segments, one random frame per segment in training, the
segment's centre (shifted per clip) in testing.

A flow clip (``modality="flow"``, the two-stream network's temporal stream)
samples T stack starts the same way over the positions where a whole stack
fits, and each segment takes ``flow_stack`` consecutive fields from its start
(TSN's flow sampling; a video shorter than a stack repeats its last field).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Sequence

import numpy as np

from trainer.data import transforms

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def sample_rng(seed: int, epoch: int, index: int) -> np.random.Generator:
    return np.random.default_rng([seed, epoch, index, 0xC11])


def train_frame_indices(num_frames: int, t: int, mode: str, stride: int, rng: np.random.Generator) -> List[int]:
    if mode == "dense":
        window = t * stride
        start = int(rng.integers(0, max(num_frames - window, 0) + 1))
        return [min(start + i * stride, num_frames - 1) for i in range(t)]
    if mode == "uniform":
        edges = np.linspace(0.0, num_frames, t + 1)
        u = rng.random(t)
        return [min(int(edges[i] + u[i] * (edges[i + 1] - edges[i])), num_frames - 1) for i in range(t)]
    raise ValueError(f"unknown sampling mode {mode!r}: use 'dense' or 'uniform'")


def eval_frame_indices(num_frames: int, t: int, mode: str, stride: int, clip: int, clips: int) -> List[int]:
    """Frames of test clip ``clip`` out of ``clips`` (deterministic)."""
    if mode == "dense":
        window = t * stride
        starts = np.linspace(0, max(num_frames - window, 0), num=clips) if clips > 1 \
            else [max(num_frames - window, 0) // 2]
        start = int(round(float(starts[clip])))
        return [min(start + i * stride, num_frames - 1) for i in range(t)]
    if mode == "uniform":
        seg = num_frames / t
        frac = (clip + 0.5) / clips
        return [min(int(seg * i + seg * frac), num_frames - 1) for i in range(t)]
    raise ValueError(f"unknown sampling mode {mode!r}: use 'dense' or 'uniform'")


@dataclass(frozen=True)
class ClipSpec:
    num_segments: int = 8
    mode: str = "dense"
    stride: int = 8
    size: int = 224
    scale_size: int = 256  # test: shorter side resized to this
    flip: bool = True
    test_crops: int = 3
    test_size: int = 256  # test crop side; equal to scale_size, the full-resolution frame of the paper's test
    modality: str = "rgb"  # or "flow": T stacks of flow_stack consecutive optical flow fields
    flow_stack: int = 10

    @property
    def channels(self) -> int:
        """Input channels per segment: 3 colours, or x and y of each field of a flow stack."""
        return 3 if self.modality == "rgb" else 2 * self.flow_stack


def _stacks(starts: Sequence[int], num_fields: int, stack: int) -> List[int]:
    """The fields of each stack, segment after segment (clamped to the video's last field)."""
    return [min(s + j, num_fields - 1) for s in starts for j in range(stack)]


def flow_train_indices(num_fields: int, spec: "ClipSpec", rng: np.random.Generator) -> List[int]:
    """The T x flow_stack fields of a training flow clip: stack starts drawn as frames are."""
    starts = train_frame_indices(max(num_fields - spec.flow_stack + 1, 1), spec.num_segments, spec.mode,
                                 spec.stride, rng)
    return _stacks(starts, num_fields, spec.flow_stack)


def flow_eval_indices(num_fields: int, spec: "ClipSpec", clip: int, clips: int) -> List[int]:
    """The T x flow_stack fields of test clip ``clip`` out of ``clips`` (deterministic)."""
    starts = eval_frame_indices(max(num_fields - spec.flow_stack + 1, 1), spec.num_segments, spec.mode,
                                spec.stride, clip, clips)
    return _stacks(starts, num_fields, spec.flow_stack)


def train_clip(jpeg_frames: Sequence[bytes], spec: ClipSpec, rng: np.random.Generator) -> np.ndarray:
    """Multi-scale crop (one box for every frame) + resize + optional flip: (T, S, S, 3) uint8."""
    return transforms.train_clip(jpeg_frames, rng, size=spec.size, flip=spec.flip)


def eval_crops(jpeg_frames: Sequence[bytes], spec: ClipSpec, crops: int, size: int) -> np.ndarray:
    """Shorter side to ``scale_size``, then ``crops`` squares of side ``size`` (1 = centre; 3 = start,
    centre, end along the longer side): uint8 (crops, T, size, size, 3)."""
    return transforms.test_crops(jpeg_frames, size, spec.scale_size, crops)


def flow_train_clip(pairs, spec: ClipSpec, rng: np.random.Generator) -> np.ndarray:
    """A flow clip's multi-scale crop and flip: (T, S, S, 2 * flow_stack) uint8."""
    return transforms.flow_train_clip(pairs, spec.flow_stack, rng, size=spec.size, flip=spec.flip)


def flow_eval_crops(pairs, spec: ClipSpec, crops: int, size: int) -> np.ndarray:
    """A flow clip's test crops, placed as ``eval_crops`` places them: (crops, T, S, S, 2 * flow_stack)."""
    return transforms.flow_test_crops(pairs, spec.flow_stack, size, spec.scale_size, crops)


#: A flow pixel u in 0..255 stands for motion u * 2b / 255 - b: centred and scaled to [-1, 1]
#: (mmaction2's flow normalisation, mean 128 and std 128).
FLOW_MEAN, FLOW_STD = 0.5, 0.5


def normalize(batch, mean=MEAN, std=STD):
    """uint8 (N, T, H, W, C) -> float (N, T, C, H, W) on the device: ImageNet mean/std for 3 colour
    channels; for a flow stack (an even channel count, x and y per field) the 128 of no motion to 0 and
    the bound to 1."""
    import torch
    x = batch.permute(0, 1, 4, 2, 3).float().div_(255.0)
    c = x.shape[2]
    if c != 3:
        return x.sub_(FLOW_MEAN).div_(FLOW_STD)
    m = torch.tensor(mean, device=x.device).view(1, 1, 3, 1, 1)
    s = torch.tensor(std, device=x.device).view(1, 1, 3, 1, 1)
    return x.sub_(m).div_(s)
