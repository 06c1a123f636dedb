"""Bad input to ``python -m trainer --decode device``: refused in one line naming the value, never a traceback.

Two tables: options (a decoder that does not exist, the flow stream, which the
device path does not decode), and shards with one frame that is not a JPEG the
decoder can read, refused with the shard file and the member as the CPU path
refuses them, whether the worker (frame 0, whose header gives the crop box) or
the rank (any other frame) meets it.
"""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from badinput import assert_refused, run_module, trainer_env
from trainer_utils import REPO, make_dataset, moving_square_clip, tiny_args

from trainer.shards import ShardWriter, write_manifest


def _jpeg(mode: str, colour) -> bytes:
    buf = io.BytesIO()
    Image.new(mode, (32, 32), colour).save(buf, format="JPEG")
    return buf.getvalue()


def _png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (32, 32), (10, 200, 30)).save(buf, format="PNG")
    return buf.getvalue()


#: name -> (frame replaced, its bytes, what the refusal says why)
BAD_FRAMES = {
    "png-frame": (2, _png(), "frame is PNG, not JPEG"),
    "png-first-frame": (0, _png(), "frame is PNG, not JPEG"),
    "truncated": (2, _jpeg("RGB", (200, 20, 20))[:300], "Truncated"),
    "empty": (2, b"", "cannot identify image file"),
    "garbage": (4, np.random.default_rng(0).integers(0, 256, 2000, dtype=np.uint8).tobytes(),
                "cannot identify image file"),
    "garbage-first-frame": (0, b"\xff\xd8\xff" + bytes(500), "cannot identify image file"),
}


def _bad_dataset(root: Path, frame: int, data: bytes) -> Path:
    """8 training clips of 8 frames in one shard; sample train00001's ``frame`` replaced by ``data``."""
    root.mkdir(parents=True)
    rng = np.random.default_rng(0)
    entries = []
    for split, count in (("train", 8), ("val", 2)):
        w = ShardWriter(root / f"{split}-000.tar", split)
        for i in range(count):
            frames = moving_square_clip(("right", "left")[i % 2], 8, 32, rng)
            if split == "train" and i == 1:
                frames[frame] = data
            w.add(f"{split}{i:05d}", i % 2, frames)
        entries.append(w.close())
    write_manifest(root / "manifest.json", {"format": "summit-jobs-shards/1", "name": "bad", "classes": ["r", "l"],
                                            "shards": entries})
    return root


@pytest.mark.parametrize("name", sorted(BAD_FRAMES))
def test_a_frame_that_does_not_decode_is_named(tmp_path, name):
    frame, data, why = BAD_FRAMES[name]
    root = _bad_dataset(tmp_path / "data", frame, data)
    args = tiny_args(tmp_path / "run", root, decode="device", eval_every=0, batch_per_gpu=4, no_test=True)
    res = run_module("trainer", args, trainer_env(), cwd=str(REPO), timeout=180)
    member = f"train00001.{frame:05d}.jpg"
    assert_refused(res, [str(root / "train-000.tar"), f"member {member}", f"frame {frame}", "cannot be decoded",
                         why], prefix="trainer: shard ")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """An RGB pack and a flow pack (grayscale x and y JPEGs per field, 128 = no motion)."""
    root = tmp_path_factory.mktemp("ddbad")
    rgb = make_dataset(root / "rgb", train=8, val=2, frames=8, size=32, shards=1)
    flow = root / "flow"
    flow.mkdir()
    entries = []
    for split, count in (("train", 8), ("val", 2)):
        w = ShardWriter(flow / f"{split}-000.tar", split)
        for i in range(count):
            w.add_flow(f"{split}{i:05d}", i % 2, [(_jpeg("L", 128 + i), _jpeg("L", 128 - i))] * 12)
        entries.append(w.close())
    write_manifest(flow / "manifest.json", {"format": "summit-jobs-shards/1", "name": "flow", "modality": "flow",
                                            "classes": ["a", "b"], "flow": {"bound": 20.0}, "shards": entries})
    return {"rgb": rgb, "flow": flow}


#: (name, data pack, extra arguments, what the refusal must name)
CASES = [
    ("decoder-gpu", "rgb", ["--decode", "gpu"], ["--decode", "invalid choice: 'gpu'"]),
    ("decoder-nvjpeg", "rgb", ["--decode", "nvjpeg"], ["invalid choice: 'nvjpeg'"]),
    ("decoder-upper", "rgb", ["--decode", "DEVICE"], ["invalid choice: 'DEVICE'"]),
    ("decoder-empty", "rgb", ["--decode", ""], ["invalid choice: ''"]),
    ("flow-stream", "flow", ["--decode", "device", "--modality", "flow", "--flow-stack", "2"],
     ["trainer: --decode device", "--modality flow", "--decode cpu"]),
    ("flow-stream-workers", "flow", ["--decode", "device", "--modality", "flow", "--flow-stack", "2", "--workers",
                                     "2"], ["trainer: --decode device", "--modality flow", "--decode cpu"]),
]


@pytest.mark.parametrize("name,pack,extra,needles", CASES, ids=[c[0] for c in CASES])
def test_refused(data, tmp_path, name, pack, extra, needles):
    args = tiny_args(tmp_path / "run", data[pack], eval_every=0) + extra
    res = run_module("trainer", args, trainer_env(), cwd=str(REPO), timeout=180)
    assert_refused(res, needles)
