"""Bad input to ``python -m trainer``: refused with one line naming the value, never a traceback.

Two tables: options that argparse accepts as numbers but that make no sense
(NaN, infinite, negative or zero where the option needs otherwise), refused by
``trainer.config.parse`` before anything starts; and data that breaks while
training (a corrupt JPEG in a shard), refused with the shard file and the
sample's member name, whether the frame was decoded in a DataLoader worker or
in the rank itself.
"""
from __future__ import annotations

import os
import tarfile

import pytest

from badinput import assert_refused, run_module
from trainer_utils import REPO, make_dataset, tiny_args

from trainer.config import parse


def trainer_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JSM_", "OMPI_", "LSB_", "HOROVOD_"))}
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    return env


# -- a corrupt frame in a shard --------------------------------------------------------------

def corrupt_member(shard, member):
    """Overwrite the start of one JPEG inside a real tar shard (its offset read with tarfile)."""
    with tarfile.open(shard) as tf:
        info = tf.getmember(member)
    with open(shard, "r+b") as f:
        f.seek(info.offset_data)
        f.write(b"\x00" * 64)


@pytest.fixture(scope="module")
def corrupt_data(tmp_path_factory):
    """Two data folders, each with one corrupt frame: in a training sample and in a validation sample."""
    out = {}
    for split in ("train", "val"):
        root = make_dataset(tmp_path_factory.mktemp(f"corrupt-{split}") / "data", train=8, val=4, frames=8,
                            size=32, shards=2)
        shard = root / f"{split}-000.tar"
        key = f"{split}00001"
        corrupt_member(shard, f"{key}.00002.jpg")  # frame 2: in every 4-frame stride-2 clip of 8 frames
        out[split] = (root, shard, key)
    return out


@pytest.mark.parametrize("split", ["train", "val"])
@pytest.mark.parametrize("workers", [0, 2], ids=["in-rank", "in-worker"])
def test_a_corrupt_jpeg_names_the_shard_and_the_member(corrupt_data, tmp_path, split, workers):
    root, shard, key = corrupt_data[split]
    args = tiny_args(tmp_path / "run", root, epochs=1, workers=workers, eval_every=1, test_clips=1)
    res = run_module("trainer", args, trainer_env(), cwd=str(REPO), timeout=180)
    assert_refused(res, [str(shard), f"member {key}.00002.jpg", f"sample {key}"], prefix="trainer: shard ")
