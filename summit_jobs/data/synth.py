"""A tiny synthetic Kinetics: eight classes that only temporal order tells apart.

Why: packing, staging and training must be testable on a laptop in minutes,
and the point of TSM (temporal shift beats a 2D model that averages frames)
must be demonstrable. So the classes come in pairs that differ only in the
direction of time: moving right/left, down/up, growing/shrinking, rotating
clockwise/counter-clockwise.

The two classes of a pair are the same motion played forwards and backwards
(every parameter drawn from one distribution, time centred on the clip's
middle), so the set of frames of a clip tells nothing about its direction: a
model that looks at frames one at a time, or averages them, can at best name
the kind of motion (25% on eight classes, chance 12.5%); only the order of
frames carries the rest.

Both input layouts of the real data are written: the TSM/mmaction2 rawframes
layout (``<split>_list.txt`` with ``<folder> <num_frames> <label>`` lines and
folders of ``img_00001.jpg``) and Kinetics-style MP4 videos
(``videos/<split>/<class>/<id>.mp4``, encoded with PyAV). Deterministic: the
same seed gives the same pixels (and, for rawframes, the same bytes).
"""
from __future__ import annotations

import errno
import io
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Sequence, Tuple

from summit_jobs.errors import UserError
from summit_jobs.progress import Progress
from trainer import files

# numpy and PIL are imported where frames are drawn: a command line refused before that never pays for them.
if TYPE_CHECKING:
    import numpy as np

CLASSES: Tuple[str, ...] = (
    "moving_right", "moving_left", "moving_down", "moving_up",
    "growing", "shrinking", "rotating_clockwise", "rotating_counterclockwise",
)
#: Asymmetric outlines (unit square coordinates around 0), so that rotation is visible.
SHAPES: Tuple[Tuple[Tuple[float, float], ...], ...] = (
    ((-0.5, -0.5), (0.5, -0.1), (0.1, 0.0), (0.5, 0.1), (-0.5, 0.5)),       # notched arrow
    ((-0.5, -0.5), (0.5, -0.5), (0.5, -0.2), (-0.2, -0.2), (-0.2, 0.5), (-0.5, 0.5)),  # L
    ((-0.5, -0.4), (0.5, 0.0), (-0.5, 0.4), (-0.2, 0.0)),                    # dart
)
FPS = 25


@dataclass(frozen=True)
class SynthOptions:
    out: str
    videos_per_class: int = 20
    val_fraction: float = 0.25
    frames: int = 16
    size: int = 96
    seed: int = 0
    layouts: Tuple[str, ...] = ("rawframes", "videos")
    quality: int = 90


MAX_VIDEOS_PER_CLASS = 10_000


def check_options(o: SynthOptions) -> None:
    """Refuse what cannot work (or would run for days), naming the value and its range."""
    if not 2 <= o.videos_per_class <= MAX_VIDEOS_PER_CLASS:
        raise UserError(f"--videos-per-class {o.videos_per_class} must be between 2 (one train, one val) and "
                        f"{MAX_VIDEOS_PER_CLASS:,}.")
    if o.seed < 0:
        raise UserError(f"--seed {o.seed} must be 0 or more (it seeds numpy's generator, which takes no "
                        "negative numbers).")
    if not 0.0 < o.val_fraction < 1.0:
        raise UserError(f"--val-fraction {o.val_fraction} must be between 0 and 1 (exclusive).")
    if not 4 <= o.frames <= 300:
        raise UserError(f"--frames {o.frames} must be between 4 and 300 (the motion needs a few frames).")
    if not 32 <= o.size <= 512 or o.size % 2:
        raise UserError(f"--size {o.size} must be an even number of pixels between 32 and 512 "
                        "(H.264 needs even sides).")
    bad = set(o.layouts) - {"rawframes", "videos"}
    if bad or not o.layouts:
        raise UserError(f"--layout must be rawframes, videos or both (got {', '.join(sorted(bad)) or 'none'}).")


def _render_clip(label: int, frames: int, size: int, rng: np.random.Generator) -> List[np.ndarray]:
    """One clip of class ``label`` as uint8 (size, size, 3) frames.

    Classes come in pairs (2k, 2k+1) that are the same motion played forwards
    and backwards: every parameter is drawn from one distribution for the pair
    and time runs from -0.5 to 0.5 around the clip's middle (reversed for
    2k+1), so a clip of class 2k+1 is exactly a clip of class 2k played
    backwards. A model blind to the order of frames can tell the kind of
    motion (the pair) but never its direction: it is capped at 25% on the
    eight classes (chance: 12.5%). The whole path stays inside the frame, and
    a bright shape on a dark background keeps the spatial task easy, so that
    what is left to learn is time.
    """
    import numpy as np
    from PIL import Image, ImageDraw

    pair, backwards = divmod(label, 2)
    shape = np.array(SHAPES[int(rng.integers(len(SHAPES)))], dtype=np.float64)
    bg = tuple(int(c) for c in rng.integers(0, 70, 3))
    fg = tuple(int(c) for c in rng.integers(170, 256, 3))
    smin, smax = 0.3 * size, 0.5 * size
    s = rng.uniform(smin, smax)                         # the shape's side (moving and rotating pairs)
    angle0 = rng.uniform(0, 2 * math.pi)
    travel = rng.uniform(0.35, 0.5) * size              # distance a moving shape covers in the clip
    turn = rng.uniform(0.5, 0.75) * math.pi             # angle a rotating shape covers in the clip
    largest = smax if pair == 2 else s
    reach = 0.75 * largest                              # half extent of a rotated outline, with margin
    if pair in (0, 1):                                  # centre of the path: all of it inside the frame
        lo, hi = reach + travel / 2, size - reach - travel / 2
        along, across = rng.uniform(lo, max(lo, hi)), rng.uniform(reach, size - reach)
    else:
        cx, cy = rng.uniform(reach, size - reach, 2)
    out = []
    for t in range(frames):
        u = (t - (frames - 1) / 2) / max(frames - 1, 1)
        u = -u if backwards else u
        side, a = s, angle0
        if pair == 0:
            cx, cy = along + travel * u, across        # right (or left, played backwards)
        elif pair == 1:
            cx, cy = across, along + travel * u        # down (or up)
        elif pair == 2:
            side = (smin + smax) / 2 + (smax - smin) * u   # growing (or shrinking)
        else:
            a = angle0 + turn * u                       # image y points down: a growing angle turns clockwise
        rot = np.array([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]])
        pts = (shape @ rot.T) * side
        img = Image.new("RGB", (size, size), bg)
        ImageDraw.Draw(img).polygon([(float(px + cx), float(py + cy)) for px, py in pts], fill=fg)
        arr = np.asarray(img).astype(np.int16)
        arr += rng.normal(0, 6, arr.shape).astype(np.int16)  # sensor noise: realistic JPEG sizes
        out.append(np.clip(arr, 0, 255).astype(np.uint8))
    return out


def _jpeg(frame: np.ndarray, quality: int) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(frame).save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def _encode_mp4(tmp: Path, frames: Sequence[np.ndarray]) -> None:
    import av  # optional dependency (extra "video"): only needed for the videos layout

    with av.open(str(tmp), mode="w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=FPS)
        stream.width, stream.height = frames[0].shape[1], frames[0].shape[0]
        stream.pix_fmt = "yuv420p"
        stream.options = {"crf": "18", "preset": "veryfast"}
        stream.thread_count = 1   # single-threaded x264 is deterministic
        for f in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(f, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def _write_mp4(path: Path, frames: Sequence[np.ndarray]) -> None:
    """Encode under a temporary name, then rename; a full disk leaves nothing behind.

    PyAV reports a failed write as its own error type (an OSError subclass for
    errno failures, FFmpegError otherwise): both become one OSError naming the file.
    """
    import av.error

    tmp = files.tmp_name(path)
    try:
        _encode_mp4(tmp, frames)
        os.replace(tmp, path)
    except (OSError, av.error.FFmpegError) as exc:
        files.discard(tmp)
        code = getattr(exc, "errno", None) or errno.EIO
        raise OSError(code, getattr(exc, "strerror", None) or os.strerror(code), str(path)) from None
    except BaseException:
        files.discard(tmp)
        raise


def _atomic_write(path: Path, data: bytes) -> None:
    files.write_atomic(path, data)


def _prepare_out(root: Path, force: bool) -> None:
    """Refuse a file or a non-empty folder (unless --force); clear a killed run's temporary files."""
    if root.exists() and not root.is_dir():
        raise UserError(f"output {root} is a file, not a folder: choose a folder for the dataset.")
    if root.exists() and any(root.iterdir()) and not force:
        raise UserError(f"{root} already exists and is not empty; pass --force to write into it, "
                        "or choose another output folder.")
    root.mkdir(parents=True, exist_ok=True)
    for stray in root.rglob(".*.tmp*"):
        if stray.is_file() and stray.name.rsplit(".tmp", 1)[-1].isdecimal():
            stray.unlink(missing_ok=True)


def plan_videos(o: SynthOptions) -> List[Tuple[str, int, str]]:
    """(split, label, video id) for every video, in a fixed order."""
    n_val = max(1, round(o.videos_per_class * o.val_fraction))
    out = []
    for label, name in enumerate(CLASSES):
        for i in range(o.videos_per_class):
            split = "val" if i >= o.videos_per_class - n_val else "train"
            out.append((split, label, f"{name}_{i:04d}"))
    return out


def _write_video(o: SynthOptions, root: Path, split: str, label: int, vid: str,
                 lists: Dict[str, List[str]]) -> None:
    """One video in every layout asked for; its rawframes list line goes into ``lists``."""
    import numpy as np

    # One generator per video: the same video whatever the other options or the order of work.
    rng = np.random.default_rng([o.seed, label, int(vid.rsplit("_", 1)[1])])
    frames = _render_clip(label, o.frames, o.size, rng)
    cls = CLASSES[label]
    if "rawframes" in o.layouts:
        folder = root / "rawframes" / split / cls / vid
        folder.mkdir(parents=True, exist_ok=True)
        for t, f in enumerate(frames):
            _atomic_write(folder / f"img_{t + 1:05d}.jpg", _jpeg(f, o.quality))
        lists[split].append(f"{split}/{cls}/{vid} {len(frames)} {label}")
    if "videos" in o.layouts:
        folder = root / "videos" / split / cls
        folder.mkdir(parents=True, exist_ok=True)
        _write_mp4(folder / f"{vid}.mp4", frames)


def synth(o: SynthOptions, force: bool = False, progress: bool = True) -> Dict[str, object]:
    """Write the dataset under ``o.out``; returns a summary (counts and paths)."""
    check_options(o)
    root = Path(o.out)
    _prepare_out(root, force)
    _atomic_write(root / "classes.txt", ("\n".join(CLASSES) + "\n").encode())
    videos = plan_videos(o)
    lists: Dict[str, List[str]] = {"train": [], "val": []}
    with Progress("synth", len(videos), "videos", enabled=progress) as bar:
        for n, (split, label, vid) in enumerate(videos):
            _write_video(o, root, split, label, vid, lists)
            bar.update(n + 1)
    if "rawframes" in o.layouts:
        for split, lines in lists.items():
            _atomic_write(root / "rawframes" / f"{split}_list.txt", ("\n".join(lines) + "\n").encode())
        _atomic_write(root / "rawframes" / "classes.txt", ("\n".join(CLASSES) + "\n").encode())
    if "videos" in o.layouts:
        _atomic_write(root / "videos" / "classes.txt", ("\n".join(CLASSES) + "\n").encode())
    n_train = sum(1 for v in videos if v[0] == "train")
    return {"out": str(root), "classes": len(CLASSES), "train_videos": n_train,
            "val_videos": len(videos) - n_train, "frames": o.frames, "size": o.size,
            "layouts": list(o.layouts)}
