"""The ``--decode device`` input path: DataLoader workers read each training clip's JPEG bytes and draw its
crop and flip; the rank decodes the frames and crops, resizes and flips them on its device.

Why: at 500+ clips/s per GPU (4,000+ frames/s) the workers' CPU decode can fall
behind the GPU. On CUDA the rank decodes a whole batch of frames with nvJPEG
(``torchvision.io.decode_jpeg`` with a list, on the device) instead.

The frame indices, crop box and flip are drawn in the worker by the CPU path's
own calls (``TrainClips.start``, ``TrainClips.rgb_indices``,
``transforms.clip_geometry``) in the same order from the same generator, so
both paths pick the same frames, crop and flip. Only the pixel arithmetic
differs: here a full-size decode and an antialiased bilinear resize, there
PIL's reduced-size (draft) decode and its bilinear resize; about an intensity
level apart on average (tests/datapath/test_device_decode.py).

Without CUDA the rank decodes with PIL, the decoder of the CPU path, at the
frames' full packed size: the same path, run and tested on any machine.

Training clips of RGB shards only: flow stacks and the validation and test
clips keep the CPU path.
"""
from __future__ import annotations

import dataclasses
import functools
import io
from typing import Callable, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

from trainer import preflight
from trainer.data import transforms
from trainer.loop.metrics import log
from trainer.data.datasets import Pipeline, TrainClips, bad_rgb, decoded, sample_error, shard_path

#: JPEG byte tensors (1-D uint8, on the host) -> (3, H, W) uint8 frames on the device.
Decoder = Callable[[List[torch.Tensor]], List[torch.Tensor]]


class Origin(NamedTuple):
    """Where a clip came from: enough for the rank to name the shard and member of a frame that fails."""
    path: str
    key: str
    indices: Tuple[int, ...]
    num_frames: int


@dataclasses.dataclass
class RawClip:
    """One training clip as a worker hands it over: its frames' JPEG bytes, the crop box (fractions of
    width and height), the flip, the output side, and where it came from."""
    frames: List[bytes]
    box: transforms.Box
    flip: bool
    size: int
    origin: Origin


class TrainBytes(Dataset):
    """``TrainClips``'s items, ``(epoch, index)`` or ``(epoch, index, frames, size)``, as ``RawClip``s: the
    same frames, box and flip as ``TrainClips`` gives them, and no pixel decoded.

    A first frame whose header does not read fails here, in the worker, with the
    CPU path's one line (``decoded``): the box is drawn from that header.
    """

    def __init__(self, clips: TrainClips):
        self.clips = clips

    def __len__(self) -> int:
        return len(self.clips)

    def __getitem__(self, item: Tuple[int, ...]) -> Tuple[RawClip, int]:
        shards = self.clips.shards
        i, spec, rng = self.clips.start(item)
        idx = self.clips.rgb_indices(i, spec, rng)
        origin = Origin(shard_path(shards, i), shards.key(i), tuple(int(j) for j in idx), shards.num_frames(i))

        def read(frames: List[bytes]) -> RawClip:
            box, flip = transforms.clip_geometry(frames[0], rng, spec.size, flip=spec.flip)
            return RawClip(list(frames), box, flip, spec.size, origin)

        return decoded(shards, i, idx, read), shards.label(i)


@dataclasses.dataclass
class ByteBatch:
    """A training batch of the device path: every frame's JPEG bytes in one flat uint8 tensor (frame ``f``
    is ``data[offsets[f]:offsets[f + 1]]``, clip after clip, ``frames`` each), each clip's crop box
    (fractions) and flip, the output side, and each clip's origin.

    Why one flat tensor: the DataLoader pins one buffer per batch (and moves one
    through shared memory from a worker), not N x T small ones; nvJPEG reads its
    input from host memory, so it stays there.
    """
    data: torch.Tensor
    offsets: torch.Tensor
    boxes: torch.Tensor
    flips: torch.Tensor
    size: int
    origins: List[Origin]

    def __len__(self) -> int:
        return int(self.boxes.shape[0])

    @property
    def frames(self) -> int:
        """Frames per clip (every clip of a batch has the batch's shape)."""
        return (int(self.offsets.numel()) - 1) // max(len(self), 1)

    def pin_memory(self) -> "ByteBatch":
        """Called by the DataLoader's pinning thread (``pin_memory=True`` on CUDA)."""
        return dataclasses.replace(self, data=self.data.pin_memory())

    def jpegs(self) -> List[torch.Tensor]:
        """Every frame's bytes as a 1-D uint8 view of ``data``."""
        ends = self.offsets.tolist()
        return [self.data[a:b] for a, b in zip(ends, ends[1:])]

    def clip_bytes(self, n: int) -> List[bytes]:
        """Clip ``n``'s frames as bytes."""
        t, ends = self.frames, self.offsets.tolist()
        return [self.data[ends[f]:ends[f + 1]].numpy().tobytes() for f in range(n * t, (n + 1) * t)]


def collate(items: Sequence[Tuple[RawClip, int]]) -> Tuple[ByteBatch, torch.Tensor]:
    """A worker's batch of ``(RawClip, label)`` -> ``(ByteBatch, labels)``."""
    clips = [c for c, _ in items]
    shapes = {(len(c.frames), c.size) for c in clips}
    if len(shapes) != 1:
        raise ValueError(f"a batch holds clips of one shape (frames, size), not {sorted(shapes)}")
    frames = [f for c in clips for f in c.frames]
    offsets = np.zeros(len(frames) + 1, dtype=np.int64)
    np.cumsum([len(f) for f in frames], out=offsets[1:])
    data = torch.empty(int(offsets[-1]), dtype=torch.uint8)
    flat = data.numpy()
    for f, start in zip(frames, offsets.tolist()):
        flat[start:start + len(f)] = np.frombuffer(f, dtype=np.uint8)
    batch = ByteBatch(data, torch.from_numpy(offsets), torch.tensor([c.box for c in clips], dtype=torch.float64),
                      torch.tensor([c.flip for c in clips], dtype=torch.bool), clips[0].size,
                      [c.origin for c in clips])
    return batch, torch.tensor([y for _, y in items], dtype=torch.long)


# -- decoders ---------------------------------------------------------------------------------

def _pil_decoder(device: torch.device) -> Decoder:
    """PIL, the CPU path's decoder, at full size, in the rank; the frames then go to ``device``."""
    def decode(jpegs: List[torch.Tensor]) -> List[torch.Tensor]:
        rgb = (transforms.decode(j.numpy().tobytes()) for j in jpegs)
        return [torch.from_numpy(a.copy()).permute(2, 0, 1).to(device) for a in rgb]  # a copy: PIL's is read-only
    return decode


def _tiny_jpeg(colour: Tuple[int, int, int]) -> torch.Tensor:
    """An 8 x 8 JPEG of one colour, to try a decoder on."""
    from PIL import Image
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), colour).save(buf, format="JPEG")
    return torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)


def _nvjpeg_decoder(device: torch.device) -> Decoder:
    """torchvision's batched nvJPEG decode on ``device``, tried once on two tiny JPEGs: a torchvision that
    is missing, built without CUDA, or too old for a list of images is refused here, at start-up."""
    fix = (f"pip install torchvision (the release matching torch {torch.__version__}), or train with "
           "--decode cpu")
    try:
        from torchvision.io import ImageReadMode, decode_jpeg
    except Exception as exc:  # ImportError, or a torchvision built for another torch (RuntimeError, OSError)
        raise SystemExit(f"trainer: --decode device on {device} decodes JPEG with nvJPEG through torchvision, "
                         f"which cannot be imported ({type(exc).__name__}: {exc}): {fix}") from None

    def batched(jpegs: List[torch.Tensor]) -> List[torch.Tensor]:
        return list(decode_jpeg(jpegs, mode=ImageReadMode.RGB, device=device))

    def one_by_one(jpegs: List[torch.Tensor]) -> List[torch.Tensor]:  # torchvision < 0.19: one image a call
        return [decode_jpeg(j, mode=ImageReadMode.RGB, device=device) for j in jpegs]

    probe = [_tiny_jpeg((200, 30, 30)), _tiny_jpeg((30, 30, 200))]
    failure: Optional[Exception] = None
    for decode in (batched, one_by_one):
        try:
            decode(probe)
        except Exception as exc:
            failure = failure or exc
            continue
        if decode is one_by_one:
            log(f"--decode device: this torchvision decodes one JPEG a call on {device} (batched decoding came "
                "with torchvision 0.19), about 1,600 frames/s, which may be slower than --decode cpu with enough "
                "workers: measure both (bench/gpu_train.py)", True)
        return _on_side_stream(decode, device)
    why = f"{type(failure).__name__}: {str(failure).splitlines()[0] if str(failure) else ''}"
    raise SystemExit(f"trainer: --decode device: torchvision cannot decode JPEGs on {device} ({why}): {fix}")


def _on_side_stream(decode: Decoder, device: torch.device) -> Decoder:
    """``decode`` run with a stream of its own as the current stream, its frames then handed to the
    caller's stream.

    Why: torchvision allocates the decoded frames on the current stream and
    nvJPEG writes them on a private stream that does not wait for it. On the
    training stream the caching allocator can hand the decoder a block that
    the previous step freed while its kernels are still queued to read it,
    and the decode overwrites it (pytorch/vision#9606: silent NaNs on an
    H100). A block of a stream that runs nothing else is never in such use;
    ``record_stream`` keeps each frame's block from being reused until the
    training stream is done with it.
    """
    side = torch.cuda.Stream(device=device)

    def run(jpegs: List[torch.Tensor]) -> List[torch.Tensor]:
        main = torch.cuda.current_stream(device)
        with torch.cuda.stream(side):
            frames = decode(jpegs)
        main.wait_stream(side)
        for f in frames:
            f.record_stream(main)
        return frames
    return run


@functools.lru_cache(maxsize=None)
def decoder_for(device: torch.device) -> Decoder:
    """nvJPEG on a CUDA device (refused in one line when torchvision cannot do it), else PIL in the rank."""
    return _nvjpeg_decoder(device) if device.type == "cuda" else _pil_decoder(device)


def train_input(train: TrainClips, device: torch.device) -> Tuple[Dataset, Callable]:
    """The device path's training dataset and collate, once the run is known to be able to use it: RGB
    shards, and on CUDA a torchvision that decodes there (checked now, before any worker starts)."""
    preflight.device_decode("device", train.spec.modality)
    decoder_for(torch.device(device))
    return TrainBytes(train), collate


def pipeline(train: TrainClips, evals: dict, workers: int, pin: bool, prefetch: int = 2, persistent: bool = True,
             decode: str = "cpu", device: Optional[torch.device] = None) -> Pipeline:
    """The run's input Pipeline; with ``decode="device"`` its training workers read ``train_input``'s bytes."""
    feed = train_input(train, device or torch.device("cpu")) if decode == "device" else None
    return Pipeline(train, evals, workers, pin, prefetch, persistent, train_input=feed)


# -- the rank's side ----------------------------------------------------------------------------

def _resized(x: torch.Tensor, size: int) -> torch.Tensor:
    """(T, 3, h, w) uint8 -> (T, 3, size, size) uint8, bilinear with antialiasing as PIL resizes.

    On the CPU torch resizes uint8 channels-last frames itself (PIL's fixed-point
    arithmetic, about 3x faster than in float); elsewhere in float, then rounded.
    """
    if x.device.type == "cpu":
        return F.interpolate(x.contiguous(memory_format=torch.channels_last), size=(size, size), mode="bilinear",
                             align_corners=False, antialias=True)
    return _resized_float(x, size)


def _resized_float(x: torch.Tensor, size: int) -> torch.Tensor:
    """``_resized`` in float, for devices without a uint8 resize (CUDA)."""
    y = F.interpolate(x.float(), size=(size, size), mode="bilinear", align_corners=False, antialias=True)
    return y.round_().clamp_(0, 255).to(torch.uint8)


def _crop(frame: torch.Tensor, box: Sequence[float]) -> torch.Tensor:
    """``box`` (fractions) of a (3, H, W) frame, at least one pixel each way."""
    _, h, w = frame.shape
    x0, y0, x1, y1 = round(box[0] * w), round(box[1] * h), round(box[2] * w), round(box[3] * h)
    return frame[:, y0:max(y1, y0 + 1), x0:max(x1, x0 + 1)]


def augment(frames: List[torch.Tensor], box: Sequence[float], flip: bool, size: int) -> torch.Tensor:
    """One clip's decoded (3, H, W) frames -> (T, size, size, 3) uint8: one crop, one resize, one flip."""
    crops = [_crop(f, box) for f in frames]
    if len({c.shape for c in crops}) == 1:
        out = _resized(torch.stack(crops), size)
    else:  # frames of different sizes in one video: the same relative box, resized one by one
        out = torch.cat([_resized(c[None], size) for c in crops])
    if flip:
        out = out.flip(-1)
    return out.permute(0, 2, 3, 1)


def _pil_frames(batch: ByteBatch, device: torch.device, jpegs: List[torch.Tensor]) -> List[torch.Tensor]:
    """Every frame of ``batch`` decoded by PIL in the rank, clip by clip; a clip with a frame PIL cannot
    decode either raises the CPU path's error naming its shard and member (``SampleError``)."""
    decode, t, out = _pil_decoder(device), batch.frames, []
    for n, o in enumerate(batch.origins):
        try:
            out += decode(jpegs[n * t:(n + 1) * t])
        except Exception:
            bad = bad_rgb(batch.clip_bytes(n), o.indices, o.num_frames)
            if bad is None:
                raise
            raise sample_error(o.path, o.key, bad) from None
    return out


def _decoded_frames(batch: ByteBatch, device: torch.device, decode: Decoder) -> List[torch.Tensor]:
    """Every frame of ``batch`` decoded on ``device``.

    When the device decoder refuses the batch, PIL decodes it in the rank (once,
    reusing nothing twice): a frame PIL cannot decode either is named by shard
    and member; otherwise (a JPEG nvJPEG does not take: CMYK, 12-bit,
    arithmetic coding) training goes on, and the first such batch is said in
    the log. Running out of device memory is not a decoding problem and is
    passed on as it is.
    """
    jpegs = batch.jpegs()
    try:
        return decode(jpegs)
    except torch.cuda.OutOfMemoryError:
        raise
    except Exception as exc:
        frames = _pil_frames(batch, device, jpegs)
        _say_pil_fallback(exc)
        return frames


_SAID_FALLBACK: List[bool] = []


def _say_pil_fallback(exc: Exception) -> None:
    """Once per process: a batch nvJPEG refused went to PIL (slower; every batch doing so would be hidden
    in the step time otherwise)."""
    if _SAID_FALLBACK:
        return
    _SAID_FALLBACK.append(True)
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    log(f"--decode device: the device decoder refused a batch that PIL decodes ({first[:200]}); PIL decodes "
        "such batches in the rank (slower). Said once", True)


def device_clips(batch: ByteBatch, device: torch.device, decode: Optional[Decoder] = None) -> torch.Tensor:
    """The batch's clips, uint8 (N, T, S, S, 3) on ``device``: the layout the workers give on the CPU path."""
    device = torch.device(device)
    frames = _decoded_frames(batch, device, decode or decoder_for(device))
    t = batch.frames
    boxes, flips = batch.boxes.tolist(), batch.flips.tolist()
    return torch.stack([augment(frames[n * t:(n + 1) * t], boxes[n], flips[n], batch.size)
                        for n in range(len(batch))])


__all__ = ["ByteBatch", "RawClip", "TrainBytes", "collate", "decoder_for", "device_clips", "train_input"]
