"""Pack a video dataset into tar shards + manifest (the format of trainer.shards).

Inputs: a SRC folder in one of the two layouts Kinetics is usually kept in,
- rawframes (TSM / mmaction2): ``<split>_list.txt`` with ``<folder> <num_frames> <label>``
  lines and folders of ``img_00001.jpg``;
- videos: ``<split>/<class>/<id>.<ext>`` (as the Kinetics download scripts leave them),
  decoded with PyAV;
or the lists a dataset is distributed with (summit_jobs.data.datalists): Kinetics
annotation CSVs, mmaction2 / PySlowFast lists, UCF101 and HMDB51 split files.
Listed clips missing from disk are counted and listed, never fatal.

Why it is built this way:
- Each split is written in a seeded, class-stratified shuffled order (``--seed``):
  every class's samples are spread evenly over the split, so any run of shards
  (what ``stage-data --policy partition`` gives one node) holds every class. In
  list order, one class fills one region of shards and a node would train on a
  few classes only.
- Workers (multiprocessing) decode and re-encode samples; the parent alone writes
  shards, in that order. Shard boundaries depend only on the samples' encoded
  sizes, so the output is byte-for-byte the same however many workers ran.
- Resumable: after every closed shard a state file records the shards done and
  how many input samples they consumed. A rerun checks those shards (size and
  hash) and continues after them, producing the same bytes as an uninterrupted
  run; the state's fingerprint covers the options (the seed among them) and the
  ordered sample list. The manifest is written last, so a shard that is not
  complete is never listed (ShardWriter also writes to ``*.partial`` and renames).
- A video or JPEG that cannot be decoded is skipped, counted and listed in
  ``pack-report.json``: one broken file in 240k must not stop a pack.
- ``--modality flow`` packs optical flow instead of RGB (summit_jobs.data.flow: TV-L1 or
  Farneback between consecutive frames at the packed resolution, stored as TSN's
  8-bit flow_x/flow_y JPEG pairs), or mmaction2's pre-extracted flow folders
  (``flow_x_00001.jpg`` + ``flow_y_00001.jpg``: a rawframe list with a two-field
  ``--filename-tmpl``, the default for flow). A clip of one frame has no motion:
  skipped and reported like an undecodable one.
- ``--force`` over a finished pack builds the new one beside it, in
  ``OUT/.pack-next`` (resumable there like any pack), and swaps it in only once
  it is complete: until then the old pack stays whole and readable, so a killed
  or failed ``--force`` never leaves OUT without a usable dataset. The swap
  removes the old manifest first (the new shards reuse the names, so it would
  lie), renames the new shards over the old ones and writes the new manifest
  last; a kill in those few renames leaves the finished replacement's
  manifest in ``.pack-next``, and the next run completes the swap before
  anything else. Until the swap OUT needs room for both packs. One pack at a
  time per folder (a FolderLock): a second is refused, naming the first.
"""
from __future__ import annotations

import hashlib
import io
import json
import multiprocessing
import os
import random
import re
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from summit_jobs.data import datalists, flow
from summit_jobs.data.datalists import SPLIT_ORDER, VIDEO_EXTS, Inputs, Listing, Sample, read_text, sample_key
from summit_jobs.errors import UserError
from summit_jobs.progress import Progress
from trainer import shards
from trainer import files, units

STATE_NAME = ".pack-state.json"
#: Where ``--force`` builds the replacement of a finished pack, inside OUT (same file system: the swap renames).
NEXT_DIR = ".pack-next"
REPORT_NAME = "pack-report.json"
__all__ = ["Inputs", "PackOptions", "Sample", "VIDEO_EXTS", "pack", "parse_size", "read_text"]


human_bytes = units.human_bytes


#: The largest ``--shard-size``: 1 TB. A shard is one file that staging copies whole onto a node's NVMe (and
#: the archive stores as one file); a larger one is a typo, and one of hundreds of digits overflowed the
#: conversion to bytes.
MAX_SHARD_BYTES = 10**12


def parse_size(text: str) -> int:
    """'2GB', '512MB', '1.5G', '1000000' -> bytes (decimal units, like disk vendors and HPSS), at most
    MAX_SHARD_BYTES."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kKmMgGtT]?)[bB]?\s*", str(text))
    if not m:
        raise UserError(f"size {text!r} is not a number with an optional unit (for example 2GB, 512MB).")
    mult = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}[m.group(2).lower()]
    amount = float(m.group(1)) * mult
    if not amount <= MAX_SHARD_BYTES:
        shown = repr(str(text)) if len(str(text)) <= 24 else f"'{str(text)[:12]}...' ({len(str(text))} characters)"
        raise UserError(f"size {shown} is more than a shard may hold: give at most 1TB (each shard is copied whole "
                        "onto the nodes' NVMe; for example 2GB, the default).")
    value = int(amount)
    if value < 1:
        raise UserError(f"size {text!r} must be at least one byte.")
    return value


@dataclass(frozen=True)
class PackOptions:
    src: str
    out: str
    layout: str = "auto"                 # auto | rawframes | videos
    shard_size: int = 2 * 10**9
    short_side: int = 256                # 0 keeps the frames' size
    fps: Optional[float] = None          # videos: keep about this many frames per second
    quality: int = 90
    workers: int = 0                     # 0: all CPU cores
    filename_tmpl: str = "img_{:05d}.jpg"
    name: Optional[str] = None
    algo: str = shards.HASH_ALGO
    seed: int = 0                        # the shuffled order of each split
    shuffle: bool = True                 # False: list order (kept for comparisons only)
    modality: str = "rgb"                # rgb | flow (optical flow, summit_jobs.data.flow)
    flow_algorithm: str = "tvl1"         # flow computed from frames: tvl1 | farneback
    flow_bound: float = flow.DEFAULT_BOUND


def read_classes(src: Path, classes_file: Optional[str]) -> Optional[List[str]]:
    """``--classes FILE``, else ``SRC/classes.txt`` when there is one (synth writes it)."""
    p = Path(classes_file) if classes_file else src / "classes.txt"
    if not classes_file and not p.is_file():
        return None
    return datalists.read_class_list(p)


def detect_layout(src: Path) -> str:
    if any((src / f"{s}_list.txt").is_file() for s in SPLIT_ORDER):
        return "rawframes"
    if any((src / s).is_dir() for s in SPLIT_ORDER):
        return "videos"
    raise UserError(f"{src} holds neither a rawframes dataset (train_list.txt / val_list.txt next to the frame "
                    "folders) nor a videos dataset (train/<class>/*.mp4, val/<class>/*.mp4). Point pack at the "
                    "folder that holds them, or pass --layout.")


def list_rawframes(src: Path, classes: Optional[List[str]]) -> Tuple[List[Sample], List[str]]:
    samples: List[Sample] = []
    max_label = -1
    found = False
    for split in SPLIT_ORDER:
        lst = src / f"{split}_list.txt"
        if not lst.is_file():
            continue
        found = True
        for n, line in enumerate(read_text(lst, "sample list").splitlines(), 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            parts = line.split()
            if len(parts) < 3 or not parts[-1].lstrip("-").isdecimal() or not parts[-2].isdecimal():
                raise UserError(f"{lst}:{n}: expected '<folder> <num_frames> <label>', got {line!r}.")
            folder, nf, label = " ".join(parts[:-2]), int(parts[-2]), int(parts[-1])
            if label < 0:
                raise UserError(f"{lst}:{n}: label {label} must be at least 0 (labels count classes from 0).")
            datalists.check_label(label, f"{lst}:{n}", classes)
            max_label = max(max_label, label)
            samples.append(Sample(split, sample_key(folder), label, "rawframes", str(src / folder), nf))
    if not found:
        raise UserError(f"{src} has no train_list.txt or val_list.txt (lines '<folder> <num_frames> <label>').")
    if classes is None:
        classes = [f"class_{i:03d}" for i in range(max_label + 1)]
    return samples, classes


def list_videos(src: Path, classes: Optional[List[str]]) -> Tuple[List[Sample], List[str]]:
    splits = [s for s in SPLIT_ORDER if (src / s).is_dir()]
    if not splits:
        raise UserError(f"{src} has no train/ or val/ folder of <class>/<video> files.")
    if classes is None:
        classes = sorted({d.name for s in splits for d in (src / s).iterdir() if d.is_dir()})
    index = {c: i for i, c in enumerate(classes)}
    samples = []
    for split in splits:
        for cdir in sorted(d for d in (src / split).iterdir() if d.is_dir()):
            if cdir.name not in index:
                raise UserError(f"class folder {cdir} is not in the class list ({len(classes)} classes).")
            for f in sorted(cdir.iterdir()):
                if f.suffix.lower() in VIDEO_EXTS:
                    rel = f"{split}/{cdir.name}/{f.name}"
                    samples.append(Sample(split, sample_key(rel), index[cdir.name], "video", str(f)))
    return samples, classes


# ---- worker side -------------------------------------------------------------------------------

def _fit(img, short_side: int):
    """Downscale so the shorter side is ``short_side``; never upscale (it only adds bytes)."""
    from PIL import Image
    w, h = img.size
    s = min(w, h)
    if short_side and s > short_side:
        k = short_side / s
        img = img.resize((max(1, round(w * k)), max(1, round(h * k))), Image.BILINEAR)
    return img


def _encode(img, quality: int) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def _open_image(p: Path):
    """(the file's bytes, the decoded image, its format); a truncated or corrupt file is refused naming it."""
    from PIL import Image
    data = p.read_bytes()
    try:
        img = Image.open(io.BytesIO(data))
        fmt = img.format
        img.load()                       # a truncated or corrupt JPEG fails here
    except Exception as exc:
        raise ValueError(f"{p}: {exc}") from None
    return data, img, fmt


def _rawframes(s: Sample, o: PackOptions) -> Tuple[List[bytes], Dict[str, object]]:
    out = []
    for i in range(1, s.num_frames + 1):
        data, img, fmt = _open_image(Path(s.path) / o.filename_tmpl.format(i))
        if fmt == "JPEG" and (not o.short_side or min(img.size) <= o.short_side):
            out.append(data)                 # already small enough: keep the original bytes
        else:
            out.append(_encode(_fit(img.convert("RGB"), o.short_side), o.quality))
    return out, {}


def _video(s: Sample, o: PackOptions) -> Tuple[List[bytes], Dict[str, object]]:
    return _video_frames(s, o, lambda img: _encode(_fit(img, o.short_side), o.quality))


def _video_frames(s: Sample, o: PackOptions, convert) -> Tuple[list, Dict[str, object]]:
    """The video's frames (every one, or about ``o.fps`` a second), each passed through ``convert``."""
    import av
    out = []
    with av.open(s.path) as container:
        stream = container.streams.video[0]
        stream.thread_count = 1          # parallelism comes from the worker processes: one core each
        rate = float(stream.average_rate or stream.guessed_rate or 0) or None
        next_t = 0.0
        for frame in container.decode(stream):
            if o.fps and rate and o.fps < rate:
                t = float(frame.time) if frame.time is not None else len(out) / rate
                if t + 1e-6 < next_t:
                    continue
                next_t += 1.0 / o.fps
            out.append(convert(frame.to_image()))
    if not out:
        raise ValueError(f"{s.path}: no video frames could be decoded")
    meta: Dict[str, object] = {}
    if rate:
        meta["fps"] = round(min(rate, o.fps) if o.fps else rate, 3)
    return out, meta


def is_flow_tmpl(tmpl: str) -> bool:
    """A template of pre-extracted flow frames (mmaction2's ``flow_{}_{:05d}.jpg``): direction, then index."""
    try:
        x1, y1, x2 = tmpl.format("x", 1), tmpl.format("y", 1), tmpl.format("x", 2)
    except (IndexError, KeyError, ValueError):
        return False
    return len({x1, y1, x2}) == 3


def _gray(img, short_side: int):
    """A frame at the packed resolution, as the grayscale uint8 array optical flow is computed on."""
    import numpy as np
    return np.asarray(_fit(img.convert("L"), short_side))


def _flow_from_frames(s: Sample, o: PackOptions) -> Tuple[List[Tuple[bytes, bytes]], Dict[str, object]]:
    """Decode the frames (video or frame folder), then one (x, y) JPEG pair per consecutive pair."""
    if s.kind == "rawframes":
        tmpl = Path(s.path) / o.filename_tmpl
        grays = [_gray(_open_image(Path(str(tmpl).format(i)))[1], o.short_side) for i in range(1, s.num_frames + 1)]
        meta: Dict[str, object] = {}
    else:
        grays, meta = _video_frames(s, o, lambda img: _gray(img, o.short_side))
    return flow.flow_jpegs(grays, o.flow_algorithm, o.flow_bound, o.quality), meta


def _flow_image(p: Path, short_side: int, quality: int, axis: int) -> bytes:
    """One pre-extracted flow frame: its own bytes when already a small grayscale JPEG, else resized
    (motion scaled with the image, along ``axis`` 0 = x, 1 = y) and re-encoded."""
    import numpy as np
    data, img, fmt = _open_image(p)
    if fmt == "JPEG" and img.mode == "L" and (not short_side or min(img.size) <= short_side):
        return data
    gray = img.convert("L")
    small = _fit(gray, short_side)
    u8 = np.asarray(small)
    if small.size != gray.size:
        u8 = flow.rescale(u8, small.size[axis] / gray.size[axis])
    return flow.gray_jpeg(u8, quality)


def _preextracted_flow(s: Sample, o: PackOptions) -> Tuple[List[Tuple[bytes, bytes]], Dict[str, object]]:
    """mmaction2 flow folders: ``flow_x_00001.jpg`` + ``flow_y_00001.jpg`` per field, ``num_frames`` fields."""
    folder = Path(s.path)
    return [(_flow_image(folder / o.filename_tmpl.format("x", t), o.short_side, o.quality, 0),
             _flow_image(folder / o.filename_tmpl.format("y", t), o.short_side, o.quality, 1))
            for t in range(1, s.num_frames + 1)], {}


def _sample(s: Sample, o: PackOptions):
    """What one sample packs into: JPEG frames (rgb) or (flow_x, flow_y) JPEG pairs (flow)."""
    if o.modality == "flow":
        if s.kind == "rawframes" and is_flow_tmpl(o.filename_tmpl):
            return _preextracted_flow(s, o)
        return _flow_from_frames(s, o)
    return _rawframes(s, o) if s.kind == "rawframes" else _video(s, o)


def _work(job: Tuple[int, Sample, PackOptions]):
    """Runs in a worker: returns (index, frames, meta, error); never raises for bad input."""
    i, s, o = job
    try:
        frames, meta = _sample(s, o)
        if not frames:
            raise ValueError(f"{s.path}: no frames")
        return i, frames, meta, None
    except Exception as exc:  # noqa: BLE001 - any decoder failure means: skip this sample
        msg = str(exc) or type(exc).__name__
        return i, None, None, msg if s.path in msg else f"{s.path}: {msg}"


# ---- parent side -------------------------------------------------------------------------------

def _fingerprint(o: PackOptions, samples: Sequence[Sample], classes: Sequence[str]) -> str:
    h = hashlib.sha256()
    opts = asdict(o)
    opts.pop("workers")
    opts.pop("out")
    if o.modality == "rgb":          # the flow options do not change an RGB pack: its old states stay valid
        for k in ("modality", "flow_algorithm", "flow_bound"):
            opts.pop(k)
    h.update(json.dumps([opts, list(classes), [asdict(s) for s in samples]], sort_keys=True).encode())
    return h.hexdigest()


def _write_json(path: Path, data: object) -> None:
    files.write_atomic(path, json.dumps(data, indent=1, sort_keys=True) + "\n")


def max_workers() -> int:
    """More worker processes than this only costs memory and start-up time: each decodes one sample."""
    return min(256, 4 * (os.cpu_count() or 1))


def check_options(o: PackOptions) -> None:
    """Refuse options that cannot work, naming the value and the range, before anything is written."""
    if not Path(o.src).is_dir():
        raise UserError(f"input folder {o.src} does not exist." if not Path(o.src).exists()
                        else f"input {o.src} is a file, not a folder of videos or frame folders.")
    if Path(o.out).exists() and not Path(o.out).is_dir():
        raise UserError(f"output {o.out} is a file, not a folder: choose a folder for the shards.")
    if not 0 <= o.workers <= max_workers():
        raise UserError(f"--workers {o.workers} must be between 0 (one per CPU core) and {max_workers()} "
                        f"(4 per core on this machine, at most 256).")
    if o.quality < 1 or o.quality > 100:
        raise UserError(f"--quality {o.quality} must be between 1 and 100.")
    if o.short_side < 0:
        raise UserError(f"--short-side {o.short_side} must be 0 (keep) or a positive number of pixels.")
    if o.fps is not None and not o.fps > 0:
        raise UserError(f"--fps {o.fps} must be positive.")
    if not 0 <= o.seed < 2**32:
        raise UserError(f"--seed {o.seed} must be between 0 and {2**32 - 1}.")
    check_flow_options(o)
    if not (o.modality == "flow" and is_flow_tmpl(o.filename_tmpl)):
        check_filename_tmpl(o.filename_tmpl)
    try:
        shards.new_hash(o.algo)
    except shards.ShardError as exc:
        raise UserError(str(exc).replace("the manifest's hash is", "--hash is") + ".") from None


def check_flow_options(o: PackOptions) -> None:
    """``--modality``, ``--flow-algorithm``, ``--flow-bound``: refused naming the value and what would do."""
    if o.modality not in ("rgb", "flow"):
        raise UserError(f"--modality {o.modality!r} must be rgb or flow.")
    if o.flow_algorithm not in flow.ALGORITHMS:
        raise UserError(f"--flow-algorithm {o.flow_algorithm!r} must be one of {', '.join(flow.ALGORITHMS)}.")
    try:
        flow.check_bound(o.flow_bound)
    except ValueError as exc:
        raise UserError(f"{exc}.") from None
    if o.modality == "flow" and is_flow_tmpl(o.filename_tmpl):
        first = o.filename_tmpl.format("x", 1)
        if os.path.isabs(first) or ".." in Path(first).parts:
            raise UserError(f"--filename-tmpl {o.filename_tmpl!r} points outside the flow folder: use "
                            f"{flow.FLOW_TMPL}.")


def check_filename_tmpl(tmpl: str) -> None:
    """``--filename-tmpl``: a frame file name with one integer field, inside the frame folder."""
    fix = "one integer field, for example img_{:05d}.jpg or {:05d}.jpg"
    try:
        first, second = tmpl.format(1), tmpl.format(2)
    except (IndexError, KeyError, ValueError) as exc:
        raise UserError(f"--filename-tmpl {tmpl!r} cannot name frame 1 ({exc}): use {fix}.") from None
    if first == second:
        raise UserError(f"--filename-tmpl {tmpl!r} names every frame the same ({first!r}): use {fix}.")
    if os.path.isabs(first) or ".." in Path(first).parts:
        raise UserError(f"--filename-tmpl {tmpl!r} points outside the frame folder: use {fix}.")


def _load_state(out: Path, fingerprint: str, force: bool) -> Dict[str, object]:
    fresh = {"fingerprint": fingerprint, "done": 0, "kept": []}
    p = out / STATE_NAME
    if not p.is_file():
        return fresh
    try:
        state = json.loads(p.read_text(encoding="utf-8"))
        state["shards"], state["consumed"], state["skipped_by_shard"]  # noqa: B018 - shape check
    except (ValueError, KeyError, TypeError):
        return fresh                       # unreadable or from another version: start over
    if state.get("fingerprint") != fingerprint:
        if not force:
            raise UserError(f"{out} holds an unfinished pack of other input or options; pass --force to start "
                            "over, or choose another output folder.")
        return fresh
    # Trust a finished shard only if it is there with the recorded size and hash.
    algo = state.get("algo", shards.HASH_ALGO)
    kept, done = [], 0
    for entry, consumed, skipped_here in zip(state["shards"], state["consumed"], state["skipped_by_shard"]):
        f = out / entry["name"]
        if not f.is_file() or f.stat().st_size != entry["bytes"] or shards.file_hash(f, algo) != entry[algo]:
            break
        kept.append((entry, consumed, skipped_here))
        done = consumed
    return {"fingerprint": fingerprint, "done": done, "kept": kept}


def _folder_listing(o: PackOptions, classes_file: Optional[str]) -> Tuple[str, Listing]:
    """SRC in the rawframes or videos layout."""
    src = Path(o.src)
    layout = detect_layout(src) if o.layout == "auto" else o.layout
    classes = read_classes(src, classes_file)
    samples, classes = (list_rawframes if layout == "rawframes" else list_videos)(src, classes)
    keys: Dict[Tuple[str, str], str] = {}
    for s in samples:
        if (s.split, s.key) in keys:
            raise UserError(f"{s.path} and {keys[(s.split, s.key)]} map to the same sample key {s.key!r}; "
                            "rename one of them.")
        keys[(s.split, s.key)] = s.path
    return layout, Listing(samples, classes)


def stratified_order(samples: Sequence[Sample], seed: int) -> List[Sample]:
    """Each split's samples in a seeded shuffled order that spreads every class evenly over the split.

    Why not a plain shuffle: a node's share of the shards (a few contiguous
    stretches of the order) then holds every class only with luck. Here the
    k-th of a class's n samples (in a random order) gets the position
    (k + u) / n, u uniform in [0, 1): one sample of the class in every 1/n of
    the split, so any stretch of 2/n of it holds the class (any stretch of
    2 x classes samples, when the classes are of equal size). The input order
    does not matter (samples are sorted first); the seed alone decides.
    """
    out: List[Sample] = []
    for split in SPLIT_ORDER:
        rng = random.Random(f"summit-jobs pack {seed} {split}")
        by_class: Dict[int, List[Sample]] = {}
        for s in sorted((s for s in samples if s.split == split), key=lambda s: (s.label, s.key)):
            by_class.setdefault(s.label, []).append(s)
        placed: List[Tuple[float, float, str, Sample]] = []
        for label in sorted(by_class):
            members = [s for _, s in sorted(((rng.random(), s.key), s) for s in by_class[label])]
            n = len(members)
            placed += [((k + rng.random()) / n, rng.random(), s.key, s) for k, s in enumerate(members)]
        out += [p[3] for p in sorted(placed, key=lambda p: p[:3])]
    return out


def _list_samples(o: PackOptions, inputs: Inputs, classes_file: Optional[str]) -> Tuple[str, Listing]:
    """The samples to pack, in the order they will be written, and the listed clips missing from disk."""
    if inputs.kind == "folder":
        layout, listing = _folder_listing(o, classes_file)
    else:
        classes = datalists.read_class_list(Path(classes_file)) if classes_file else None
        layout, listing = inputs.kind, datalists.read_inputs(inputs, classes)
    if not listing.samples and inputs.kind == "folder":
        raise UserError(f"{o.src} lists no samples to pack.")
    if not listing.samples and not listing.missing:
        raise UserError(f"{datalists.describe(inputs)} lists no samples to pack: its files name no clip of the "
                        "train, val or test split.")
    if not listing.samples:
        hint = "--root (or the paths in the list)" if inputs.kind == "lists" else "--videos"
        raise UserError(f"{datalists.describe(inputs)} lists no samples to pack: {len(listing.missing)} listed "
                        f"clips are not on disk (first: {listing.missing[0]['source']}); check {hint}.")
    if o.shuffle:
        listing.samples = stratified_order(listing.samples, o.seed)
    return layout, listing


def _clear_strays(folder: Path) -> None:
    """Remove the temporary files and partial shards a killed run left (the caller holds OUT's lock)."""
    shards.remove_stale_tmp(folder)
    for stray in folder.glob("*.tar.partial"):
        stray.unlink(missing_ok=True)


def _open_output(out: Path, fp: str, force: bool) -> Tuple[Path, Dict[str, object]]:
    """(the folder the shards are written into, its resume state), after clearing what a killed run left.

    Over a finished pack (``--force``) that folder is ``OUT/.pack-next``: the old
    pack is left whole until the new one is complete (see the module docstring).
    A replacement a killed run had finished is swapped in first.
    """
    next_dir = out / NEXT_DIR
    swapped = (next_dir / shards.MANIFEST_NAME).exists()
    if swapped:
        _swap_in(out, next_dir)
    _clear_strays(out)
    manifest_path = out / shards.MANIFEST_NAME
    if manifest_path.exists():
        if not force and swapped:
            raise UserError(f"{out} holds a finished pack again: the replacement an interrupted `pack --force` had "
                            f"finished is swapped in ({manifest_path}). Stage it, or pass --force to pack again "
                            "into it.")
        if not force:
            pending = (f" (an unfinished replacement is in {next_dir}: the same command with --force continues it)"
                       if (next_dir / STATE_NAME).exists() else "")
            raise UserError(f"{manifest_path} already exists: {out} holds a finished pack{pending}. Pass --force "
                            "to pack again into it, or choose another output folder.")
        next_dir.mkdir(exist_ok=True)
        _clear_strays(next_dir)
        return next_dir, _load_state(next_dir, fp, force)
    if next_dir.exists():                  # no finished pack left to keep: a replacement of it is moot
        shutil.rmtree(next_dir)
    return out, _load_state(out, fp, force)


def interrupted(folder: Path) -> Optional[str]:
    """What a folder without a manifest holds when a pack into it was cut short, and how to finish it (None when
    it shows no sign of one).

    Why: the manifest is written last, so a pack killed before then (or a ``--force`` killed while it swapped
    its finished replacement in) leaves shards and no manifest; "the manifest does not exist" alone sends the
    user looking for a file that was never written, instead of running the pack again.
    """
    if (folder / shards.MANIFEST_NAME).exists() or not folder.is_dir():
        return None
    if (folder / NEXT_DIR / shards.MANIFEST_NAME).exists():
        return (f"{folder} has no manifest: a `summit-jobs pack --force` into it was interrupted while it swapped "
                f"its finished replacement in (still in {folder / NEXT_DIR}). Run `summit-jobs pack` into {folder} "
                "again: it completes the swap first")
    if (folder / STATE_NAME).exists() or (folder / NEXT_DIR).exists() or any(folder.glob("*.tar")):
        return (f"{folder} has no manifest: a `summit-jobs pack` into it was interrupted before it wrote the "
                "manifest (its last step). Run the same pack command again: it resumes after the last finished "
                "shard")
    return None


def _swap_in(out: Path, new: Path) -> None:
    """Move the finished pack in ``new`` (its manifest written last) over the pack in ``out``.

    The old manifest goes first: once one shard is replaced it would list other
    bytes. The new manifest is written last, then ``new`` is removed. Every step
    can be repeated, so a run killed half-way is completed by the next one.
    """
    try:
        manifest = shards.read_manifest(new)
    except shards.ShardError as exc:
        raise UserError(f"{exc}; remove {new} and pack again.") from None
    (out / shards.MANIFEST_NAME).unlink(missing_ok=True)
    for entry in manifest["shards"]:
        moved = new / str(entry["name"])
        if moved.exists():
            os.replace(moved, out / str(entry["name"]))
    if (new / REPORT_NAME).exists():
        os.replace(new / REPORT_NAME, out / REPORT_NAME)
    _commit(out, manifest)
    (new / shards.MANIFEST_NAME).unlink()
    shutil.rmtree(new)


def _ignore_interrupts(parent: int) -> None:
    """Worker start-up: Ctrl-C is the parent's to handle (one message, not one traceback per worker),
    and a worker whose parent was killed exits instead of decoding for nobody."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG (Linux)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(1)


class _Packer:
    """The parent side of a pack: writes shards in input order and records progress after each."""

    def __init__(self, o: PackOptions, samples: List[Sample], fp: str, state: Dict[str, object], progress: bool,
                 folder: Path):
        self.o, self.samples, self.fp, self.out = o, samples, fp, folder
        kept = state.get("kept", [])
        self.resumed = len(kept)
        self.entries = [k[0] for k in kept]
        self.consumed_marks = [k[1] for k in kept]
        self.skipped_by_shard = [k[2] for k in kept]
        self.start = int(state["done"])
        self.counters: Dict[str, int] = {}
        for e in self.entries:
            self.counters[e["split"]] = self.counters.get(e["split"], 0) + 1
        self.bar = Progress("pack", len(samples), "videos", enabled=progress, initial=self.start)
        self.skipped_pending: List[Dict[str, str]] = []
        self.writer: Optional[shards.ShardWriter] = None

    def save_state(self) -> None:
        _write_json(self.out / STATE_NAME, {
            "fingerprint": self.fp, "algo": self.o.algo, "shards": self.entries, "consumed": self.consumed_marks,
            "skipped_by_shard": self.skipped_by_shard})

    def close_writer(self, consumed: int) -> None:
        if self.writer is None:
            return
        self.entries.append(self.writer.close())
        self.consumed_marks.append(consumed)
        self.skipped_by_shard.append(self.skipped_pending)
        self.skipped_pending = []
        self.writer = None
        self.save_state()

    def take(self, i: int, frames, meta, error: Optional[str]) -> None:
        s = self.samples[i]
        if self.writer is not None and self.writer.split != s.split:
            self.close_writer(i)
        if error is not None:
            self.skipped_pending.append({"key": s.key, "source": s.path, "error": error})
        else:
            if self.writer is None:
                n = self.counters.get(s.split, 0)
                self.counters[s.split] = n + 1
                self.writer = shards.ShardWriter(self.out / f"{s.split}-{n:05d}.tar", s.split, self.o.algo)
            (self.writer.add_flow if self.o.modality == "flow" else self.writer.add)(s.key, s.label, frames, meta)
            if self.writer.bytes_written >= self.o.shard_size:
                self.close_writer(i + 1)
        skipped = sum(len(x) for x in self.skipped_by_shard) + len(self.skipped_pending)
        self.bar.update(i + 1, f"{skipped} skipped")

    def run(self, workers: int) -> None:
        jobs = ((i, self.samples[i], self.o) for i in range(self.start, len(self.samples)))
        pool = (multiprocessing.get_context("spawn").Pool(workers, _ignore_interrupts, (os.getpid(),))
                if workers > 1 else None)
        try:
            results: Iterator = pool.imap(_work, jobs, chunksize=1) if pool else map(_work, jobs)
            for i, frames, meta, error in results:
                self.take(i, frames, meta, error)
            self.close_writer(len(self.samples))
        finally:
            if pool:
                pool.terminate()
                pool.join()
            if self.writer is not None:
                self.writer.abort()
            self.bar.close()

    def skipped(self) -> List[Dict[str, str]]:
        # Samples skipped after the last shard were not recorded in the state: a rerun retries them.
        return [x for group in self.skipped_by_shard for x in group] + self.skipped_pending


def _finish(out: Path, manifest: Dict[str, object], report: Dict[str, object]) -> None:
    """Report, manifest (the commit point), then the resume state and shards no manifest lists."""
    _write_json(out / REPORT_NAME, report)
    _commit(out, manifest)


def _commit(out: Path, manifest: Dict[str, object]) -> None:
    """Write the manifest (the commit point), then drop the resume state and the shards it does not list."""
    shards.write_manifest(out / shards.MANIFEST_NAME, manifest)
    (out / STATE_NAME).unlink(missing_ok=True)
    listed = {e["name"] for e in manifest["shards"]}
    for old in out.glob("*.tar"):          # a larger earlier pack's tail, replaced with --force
        if re.fullmatch(r"(train|val|test)-\d{5}\.tar", old.name) and old.name not in listed:
            old.unlink(missing_ok=True)


def _manifest(o: PackOptions, listing: Listing, entries: List[Dict[str, object]],
              counts_missing: bool) -> Dict[str, object]:
    """The manifest; list-driven inputs also record how many listed clips were not on disk."""
    manifest: Dict[str, object] = {
        "format": shards.FORMAT, "name": o.name or Path(o.src).resolve().name, "classes": list(listing.classes),
        "hash": o.algo, "shards": entries, "frame_short_side": o.short_side}
    if counts_missing:
        manifest["missing"] = len(listing.missing)
    if o.modality == "flow":
        pre = is_flow_tmpl(o.filename_tmpl) and all(s.kind == "rawframes" for s in listing.samples)
        made = "pre-extracted" if pre else o.flow_algorithm
        manifest["modality"] = "flow"
        manifest["flow"] = {"algorithm": made, "bound": o.flow_bound}
    return manifest


def _require_flow(o: PackOptions, samples: Sequence[Sample]) -> None:
    """Flow computed from frames needs OpenCV: say so once, before any worker starts."""
    if o.modality != "flow" or all(s.kind == "rawframes" for s in samples) and is_flow_tmpl(o.filename_tmpl):
        return
    try:
        flow.require(o.flow_algorithm)
    except RuntimeError as exc:
        raise UserError(f"--modality flow --flow-algorithm {o.flow_algorithm}: {exc}.") from None


def pack(o: PackOptions, *, force: bool = False, progress: bool = True, classes_file: Optional[str] = None,
         inputs: Inputs = Inputs()) -> Dict[str, object]:
    """Pack ``o.src`` (or the lists of ``inputs``) into shards and a manifest in ``o.out`` (see the module docstring).

    Holds ``o.out``'s FolderLock throughout: a second pack into the same folder is
    refused instead of writing the same shard names at the same time.
    """
    datalists.check_inputs(inputs, classes_file)
    check_options(o)
    out = Path(o.out)
    layout, listing = _list_samples(o, inputs, classes_file)
    samples, missing = listing.samples, listing.missing
    _require_flow(o, samples)
    fp = _fingerprint(o, samples, listing.classes)
    out.mkdir(parents=True, exist_ok=True)
    try:
        lock = shards.FolderLock(out, "summit-jobs pack").acquire()
    except shards.FolderBusy as exc:
        raise UserError(f"{exc}.") from None
    try:
        folder, state = _open_output(out, fp, force)
        packer = _Packer(o, samples, fp, state, progress, folder)
        workers = o.workers or os.cpu_count() or 1
        t0 = time.monotonic()
        packer.run(workers)
        skipped = packer.skipped()
        if not packer.entries:
            raise UserError(f"none of the {len(samples)} samples of {o.src} could be decoded; nothing was packed "
                            f"(first error: {skipped[0]['error'] if skipped else 'none'}).")
        _finish(folder, _manifest(o, listing, packer.entries, inputs.kind != "folder"),
                {"samples": len(samples), "packed": len(samples) - len(skipped), "skipped": skipped,
                 "missing": missing})
        if folder != out:
            _swap_in(out, folder)          # the replacement is complete: only now does the old pack go
    finally:
        lock.release()
    entries = packer.entries
    return {"manifest": str(out / shards.MANIFEST_NAME), "shards": len(entries),
            "samples": len(samples) - len(skipped), "skipped": len(skipped), "skipped_samples": skipped,
            "missing": len(missing), "missing_samples": missing, "report": str(out / REPORT_NAME),
            "bytes": sum(e["bytes"] for e in entries), "resumed_shards": packer.resumed,
            "seconds": round(time.monotonic() - t0, 2), "workers": workers, "layout": layout}
