"""Clip transforms of TSM on JPEG bytes: decode, multi-scale crop, flip, test crops.

Torch-free (numpy + PIL) so DataLoader workers stay light and the login side
and benchmarks can use it; the trainer turns the uint8 ``(T, H, W, 3)`` arrays
into tensors itself.

Why it is fast: the crop box is chosen from the JPEG header alone, then PIL's
draft mode asks libjpeg to decode at 1/2, 1/4 or 1/8 scale inside the DCT
whenever the crop would still be at least ``size`` pixels after the reduction,
and a single ``resize(box=...)`` does crop and resize in one pass. All frames of
a clip share one crop and one flip (TSM's "group" transforms): per-frame crops
would break the motion that tells the classes apart.

Deterministic: all randomness comes from the ``numpy.random.Generator`` given.
"""
from __future__ import annotations

import io
import math
from typing import List, Optional, Sequence, Tuple

import numpy as np
from PIL import Image

#: TSM's GroupMultiScaleCrop scales (relative to the shorter side).
SCALES: Tuple[float, ...] = (1.0, 0.875, 0.75, 0.66)
Box = Tuple[float, float, float, float]


def _open(data: bytes) -> Image.Image:
    img = Image.open(io.BytesIO(data))
    if img.format != "JPEG":
        raise ValueError(f"frame is {img.format}, not JPEG")
    return img


def _decode_boxes(data: bytes, rels: Sequence[Box], out_w: int, out_h: int, flip: bool = False,
                  mode: str = "RGB") -> List[np.ndarray]:
    """Decode ``data`` once and resample each box of ``rels`` (fractions of width and height, so that
    frames of another size get the same crop) to out_w x out_h: (out_h, out_w, 3) arrays, or
    (out_h, out_w) with ``mode="L"`` (a flow field's grayscale JPEG).

    The boxes share one size (a clip's crop, or the test's crops along the
    longer side), so one draft decode serves them all: three test crops cost
    one decode, not three.
    """
    img = _open(data)
    full_w, full_h = img.size
    bw, bh = (rels[0][2] - rels[0][0]) * full_w, (rels[0][3] - rels[0][1]) * full_h
    # Smallest decode that keeps the crop at least out_w x out_h: libjpeg scales by 1/2, 1/4, 1/8.
    img.draft(mode, (max(1, math.ceil(full_w * out_w / bw)), max(1, math.ceil(full_h * out_h / bh))))
    w, h = img.size
    if img.mode != mode:
        img = img.convert(mode)
    out = []
    for rel in rels:
        crop = img.resize((out_w, out_h), Image.BILINEAR, box=(rel[0] * w, rel[1] * h, rel[2] * w, rel[3] * h))
        if flip:   # in PIL: a reversed-stride numpy copy of the clip costs more than the decode
            crop = crop.transpose(Image.FLIP_LEFT_RIGHT)
        out.append(np.asarray(crop))
    return out


def _decode_box(data: bytes, rel: Box, out_w: int, out_h: int, flip: bool = False) -> np.ndarray:
    """One box of ``_decode_boxes``."""
    return _decode_boxes(data, [rel], out_w, out_h, flip)[0]


def _relative(box: Box, w: int, h: int) -> Box:
    return (box[0] / w, box[1] / h, box[2] / w, box[3] / h)


def frame_size(data: bytes) -> Tuple[int, int]:
    """(width, height) from the JPEG header, without decoding pixels."""
    return _open(data).size


def decode(data: bytes) -> np.ndarray:
    """Full-resolution RGB uint8 (H, W, 3)."""
    img = _open(data)
    return np.asarray(img.convert("RGB"))


def _fix_offsets(img_w: int, img_h: int, crop_w: int, crop_h: int) -> List[Tuple[int, int]]:
    """TSM's 13 fixed crop positions (more_fix_crop): corners, centre, edge midpoints, quarter points."""
    ws, hs = (img_w - crop_w) // 4, (img_h - crop_h) // 4
    return [(0, 0), (4 * ws, 0), (0, 4 * hs), (4 * ws, 4 * hs), (2 * ws, 2 * hs),
            (0, 2 * hs), (4 * ws, 2 * hs), (2 * ws, 4 * hs), (2 * ws, 0),
            (1 * ws, 1 * hs), (3 * ws, 1 * hs), (1 * ws, 3 * hs), (3 * ws, 3 * hs)]


def multiscale_box(img_w: int, img_h: int, rng: np.random.Generator, size: int = 224,
                   scales: Sequence[float] = SCALES, max_distort: int = 1, fix_crop: bool = True) -> Box:
    """TSM's GroupMultiScaleCrop geometry: crop sides from ``scales`` x shorter side, aspect
    distorted by at most ``max_distort`` scale steps, placed at one of 13 fixed positions."""
    base = min(img_w, img_h)
    sizes = [int(base * s) for s in scales]
    crop_h = [size if abs(x - size) < 3 else x for x in sizes]
    crop_w = [size if abs(x - size) < 3 else x for x in sizes]
    pairs = [(min(w, img_w), min(h, img_h)) for i, h in enumerate(crop_h) for j, w in enumerate(crop_w)
             if abs(i - j) <= max_distort]
    cw, ch = pairs[int(rng.integers(len(pairs)))]
    if fix_crop:
        offsets = _fix_offsets(img_w, img_h, cw, ch)
        x, y = offsets[int(rng.integers(len(offsets)))]
    else:
        x = int(rng.integers(img_w - cw + 1))
        y = int(rng.integers(img_h - ch + 1))
    return (float(x), float(y), float(x + cw), float(y + ch))


def clip_geometry(first: bytes, rng: np.random.Generator, size: int = 224, scales: Sequence[float] = SCALES,
                  max_distort: int = 1, flip: bool = True, fix_crop: bool = True) -> Tuple[Box, bool]:
    """A training clip's crop box (fractions of width and height) and flip, drawn from ``rng`` with the
    frame size read from the header of its ``first`` frame.

    Why apart from the pixels: with ``--decode device`` the workers draw the
    augmentation and the rank does the pixel work; both input paths draw
    through this one function, so for the same generator they crop and flip
    alike.
    """
    w, h = frame_size(first)
    box = multiscale_box(w, h, rng, size, scales, max_distort, fix_crop)
    do_flip = bool(flip and rng.random() < 0.5)
    return _relative(box, w, h), do_flip


def train_clip(frames: Sequence[bytes], rng: np.random.Generator, size: int = 224,
               scales: Sequence[float] = SCALES, max_distort: int = 1, flip: bool = True,
               fix_crop: bool = True) -> np.ndarray:
    """Training augmentation of one clip: one multi-scale crop and one flip for all frames.

    Returns uint8 (T, size, size, 3).
    """
    if not frames:
        raise ValueError("a clip needs at least one frame")
    rel, do_flip = clip_geometry(frames[0], rng, size, scales, max_distort, flip, fix_crop)
    out = np.empty((len(frames), size, size, 3), dtype=np.uint8)
    for t, data in enumerate(frames):
        out[t] = _decode_box(data, rel, size, size, do_flip)
    return out


def test_boxes(img_w: int, img_h: int, size: int = 224, short_side: int = 256, num_crops: int = 1) -> List[Box]:
    """Crop boxes (full-resolution coordinates) equal to: resize the shorter side to
    ``short_side``, then take ``size`` squares at the centre (1 crop) or at the start, centre
    and end of the longer side (3 crops, the usual 10-clip x 3-crop protocol).

    With ``size == short_side`` (the paper's test: 256 of a 256 shorter side) the
    crops are the full-resolution frame's squares. The official code's
    ``GroupFullResSample`` places its three crops at left, right and centre of the
    width; for a portrait frame that gives the centre three times, where these
    move down the longer side.
    """
    if num_crops not in (1, 3):
        raise ValueError(f"num_crops must be 1 or 3, not {num_crops}")
    k = short_side / min(img_w, img_h)          # resize factor
    side = min(size / k, img_w, img_h)           # crop side in original pixels
    cx, cy = (img_w - side) / 2, (img_h - side) / 2
    if num_crops == 1:
        return [(cx, cy, cx + side, cy + side)]
    if img_w >= img_h:
        xs = [0.0, cx, img_w - side]
        return [(x, cy, x + side, cy + side) for x in xs]
    ys = [0.0, cy, img_h - side]
    return [(cx, y, cx + side, y + side) for y in ys]


def test_crops(frames: Sequence[bytes], size: int = 224, short_side: int = 256, num_crops: int = 1) -> np.ndarray:
    """Evaluation crops of one clip: uint8 (num_crops, T, size, size, 3), no randomness; each frame decoded once."""
    if not frames:
        raise ValueError("a clip needs at least one frame")
    w, h = frame_size(frames[0])
    boxes = [_relative(b, w, h) for b in test_boxes(w, h, size, short_side, num_crops)]
    out = np.empty((len(boxes), len(frames), size, size, 3), dtype=np.uint8)
    for t, data in enumerate(frames):
        for c, crop in enumerate(_decode_boxes(data, boxes, size, size)):
            out[c, t] = crop
    return out


def test_clip(frames: Sequence[bytes], size: int = 224, short_side: int = 256) -> np.ndarray:
    """Centre crop of one clip: uint8 (T, size, size, 3)."""
    return test_crops(frames, size, short_side, 1)[0]


def sample_indices(num_frames: int, num_segments: int, rng: Optional[np.random.Generator]) -> List[int]:
    """TSN/TSM uniform sampling: one frame per segment, random within it (train) or its
    centre (``rng`` None, test). Short videos repeat frames rather than fail."""
    if num_frames < 1 or num_segments < 1:
        raise ValueError("num_frames and num_segments must be at least 1")
    seg = num_frames / num_segments
    if rng is None:
        return [min(num_frames - 1, int(seg * i + seg / 2)) for i in range(num_segments)]
    out = []
    for i in range(num_segments):
        lo = int(seg * i)
        hi = max(lo + 1, int(seg * (i + 1)))
        out.append(min(num_frames - 1, int(rng.integers(lo, hi))))
    return out


# -- optical flow stacks (the temporal stream) ------------------------------------------------
#: A flow field is a pair of grayscale JPEGs (flow_x, flow_y), 128 meaning no motion.
FlowPair = Tuple[bytes, bytes]


def _flow_into(out: np.ndarray, pairs: Sequence[FlowPair], rels: Sequence[Box], size: int, flip: bool) -> None:
    """Decode each field's x and y once and write every box's crop into ``out`` (boxes, fields, S, S, 2).

    Why the x component is inverted on a flip: mirroring the frames reverses
    horizontal motion. A stored u stands for ``u * 2b / 255 - b`` pixels, so
    ``255 - u`` is exactly the opposite motion (the TSN convention).
    """
    for t, (x, y) in enumerate(pairs):
        xs = _decode_boxes(x, rels, size, size, flip, mode="L")
        ys = _decode_boxes(y, rels, size, size, flip, mode="L")
        for c, (cx, cy) in enumerate(zip(xs, ys)):
            out[c, t, :, :, 0] = 255 - cx if flip else cx
            out[c, t, :, :, 1] = cy


def _stacked(fields: np.ndarray, stack: int) -> np.ndarray:
    """(..., T*L, S, S, 2) fields -> (..., T, S, S, 2L) stacks, channels x0, y0, x1, y1, ... per segment."""
    *lead, n, s1, s2, _ = fields.shape
    t = n // stack
    per = fields.reshape(*lead, t, stack, s1, s2, 2)
    return np.ascontiguousarray(np.moveaxis(per, -4, -2).reshape(*lead, t, s1, s2, 2 * stack))


def flow_train_clip(pairs: Sequence[FlowPair], stack: int, rng: np.random.Generator, size: int = 224,
                    scales: Sequence[float] = SCALES, max_distort: int = 1, flip: bool = True,
                    fix_crop: bool = True) -> np.ndarray:
    """Training augmentation of a flow clip: ``pairs`` holds T stacks of ``stack`` consecutive fields,
    one after another; one multi-scale crop and one flip for all of them (as for RGB clips).

    Returns uint8 (T, size, size, 2 * stack).
    """
    if not pairs or len(pairs) % stack:
        raise ValueError(f"a flow clip needs a whole number of stacks of {stack} fields, got {len(pairs)}")
    w, h = frame_size(pairs[0][0])
    box = multiscale_box(w, h, rng, size, scales, max_distort, fix_crop)
    do_flip = bool(flip and rng.random() < 0.5)
    out = np.empty((1, len(pairs), size, size, 2), dtype=np.uint8)
    _flow_into(out, pairs, [_relative(box, w, h)], size, do_flip)
    return _stacked(out, stack)[0]


def flow_test_crops(pairs: Sequence[FlowPair], stack: int, size: int = 224, short_side: int = 256,
                    num_crops: int = 1) -> np.ndarray:
    """Evaluation crops of a flow clip, as ``test_crops`` places them: uint8 (num_crops, T, size, size, 2 * stack)."""
    if not pairs or len(pairs) % stack:
        raise ValueError(f"a flow clip needs a whole number of stacks of {stack} fields, got {len(pairs)}")
    w, h = frame_size(pairs[0][0])
    boxes = [_relative(b, w, h) for b in test_boxes(w, h, size, short_side, num_crops)]
    out = np.empty((len(boxes), len(pairs), size, size, 2), dtype=np.uint8)
    _flow_into(out, pairs, boxes, size, False)
    return _stacked(out, stack)
