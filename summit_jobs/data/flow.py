"""Optical flow for the temporal stream of two-stream networks: extraction and the 8-bit encoding.

Why this encoding: it is the convention of TSN and mmaction2 (denseflow), so
shards packed here hold what models trained on their flow frames expect. Each
flow component is clipped to +-bound pixels (20 by default) and mapped
linearly onto 0..255, ``round(255 * (v + bound) / (2 * bound))``, then stored
as a grayscale JPEG: ``flow_x`` and ``flow_y`` for each pair of consecutive
frames. Zero motion is 127.5; a reader turns a pixel back into pixels of motion
with ``decode`` (the same bound).

Flow is computed at the packed resolution (after pack's short-side resize), by
OpenCV: TV-L1 (``cv2.optflow``, the contrib module: the accurate one, what the
two-stream papers used) or Farneback (main module, over 100 times faster on a CPU: BENCHMARKS.md).
OpenCV is imported only here and only when flow is packed: ``summit-jobs
--help`` and RGB packs never load it. It runs on one thread
(``cv2.setNumThreads(1)``): parallelism comes from pack's worker processes,
and a result that does not depend on threading keeps shards byte-identical
for any worker count.

Pure functions of their inputs: no files, no global state besides OpenCV's
thread count.
"""
from __future__ import annotations

import io
import math
from typing import Any, List, Sequence, Tuple

ALGORITHMS = ("tvl1", "farneback")
DEFAULT_BOUND = 20.0
#: mmaction2's name of pre-extracted flow frames: the direction (x or y), then the 1-based index.
FLOW_TMPL = "flow_{}_{:05d}.jpg"
#: The 8-bit value of zero motion: the middle of 0..255.
MIDPOINT = 127.5


def check_bound(bound: float) -> None:
    """``--flow-bound``: a positive, finite number of pixels (a zero bound would divide by zero)."""
    if not (isinstance(bound, (int, float)) and math.isfinite(bound) and bound > 0):
        raise ValueError(f"--flow-bound {bound} must be a positive number of pixels of motion "
                         f"({DEFAULT_BOUND:g} is the TSN and mmaction2 convention)")


def _cv2() -> Any:
    """OpenCV, imported on first use, on one thread (see the module docstring)."""
    try:
        import cv2
    except ImportError:
        raise RuntimeError("optical flow needs OpenCV: pip install opencv-contrib-python-headless "
                           "(or pip install -e '.[flow]')") from None
    cv2.setNumThreads(1)
    return cv2


def require(algorithm: str) -> None:
    """Refuse early, before any worker starts, when OpenCV (or its contrib module, for TV-L1) is missing."""
    cv2 = _cv2()
    if algorithm == "tvl1" and not hasattr(cv2, "optflow"):
        raise RuntimeError(_NO_CONTRIB)


_NO_CONTRIB = ("TV-L1 flow needs OpenCV's contrib module (cv2.optflow): pip install "
               "opencv-contrib-python-headless, or use --flow-algorithm farneback")


def compute(prev: Any, nxt: Any, algorithm: str) -> Any:
    """Dense flow (H x W x 2 float32, pixels) from grayscale uint8 frame ``prev`` to ``nxt``."""
    cv2 = _cv2()
    if algorithm == "tvl1":
        if not hasattr(cv2, "optflow"):
            raise RuntimeError(_NO_CONTRIB)
        return cv2.optflow.DualTVL1OpticalFlow_create().calc(prev, nxt, None)
    if algorithm == "farneback":
        # pyr_scale, levels, winsize, iterations, poly_n, poly_sigma, flags: OpenCV's documented example.
        return cv2.calcOpticalFlowFarneback(prev, nxt, None, 0.5, 3, 15, 3, 5, 1.2, 0)
    raise ValueError(f"flow algorithm {algorithm!r} is not one of {', '.join(ALGORITHMS)}")


def quantize(v: Any, bound: float) -> Any:
    """Flow component (pixels) -> uint8: clipped to +-bound, then ``round(255 * (v + bound) / (2 * bound))``."""
    import numpy as np
    clipped = np.clip(np.asarray(v, dtype=np.float64), -bound, bound)
    return np.rint(255.0 * (clipped + bound) / (2.0 * bound)).astype(np.uint8)


def decode(u8: Any, bound: float) -> Any:
    """The inverse of ``quantize``: uint8 (or a decoded JPEG) -> pixels of motion, float32."""
    import numpy as np
    return (np.asarray(u8, dtype=np.float32) * (2.0 * bound / 255.0) - bound).astype(np.float32)


def gray_jpeg(u8: Any, quality: int) -> bytes:
    """A single-channel uint8 array as a grayscale JPEG (PIL: the same encoder as pack's RGB frames)."""
    from PIL import Image
    buf = io.BytesIO()
    Image.fromarray(u8, mode="L").save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def encode_field(flow: Any, bound: float, quality: int) -> Tuple[bytes, bytes]:
    """One H x W x 2 flow field -> (flow_x JPEG, flow_y JPEG)."""
    return gray_jpeg(quantize(flow[..., 0], bound), quality), gray_jpeg(quantize(flow[..., 1], bound), quality)


def flow_jpegs(frames: Sequence[Any], algorithm: str, bound: float, quality: int) -> List[Tuple[bytes, bytes]]:
    """Grayscale uint8 frames -> one (x, y) JPEG pair per consecutive pair: ``len(frames) - 1`` fields.

    Fewer than two frames have no motion to measure: refused (pack skips and reports the sample).
    """
    if len(frames) < 2:
        raise ValueError(f"{len(frames)} frame(s): optical flow needs at least 2 frames")
    return [encode_field(compute(a, b, algorithm), bound, quality) for a, b in zip(frames, frames[1:])]


def rescale(u8: Any, factor: float) -> Any:
    """Encoded flow of a frame resized by ``factor``: motion scales with the image, around zero motion.

    Exact under the linear encoding whatever the bound was (values that leave 0..255 are clipped, as
    the extraction clips them).
    """
    import numpy as np
    v = MIDPOINT + (np.asarray(u8, dtype=np.float64) - MIDPOINT) * factor
    return np.clip(np.rint(v), 0, 255).astype(np.uint8)
