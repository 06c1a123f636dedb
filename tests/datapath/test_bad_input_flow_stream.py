"""Bad input to the flow stream's options: each refused in one line naming the value and the fix."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from badinput import assert_refused, run_module, trainer_env
from test_flow_stream import stream_args
from trainer.models.model import build_model


@pytest.fixture(scope="module")
def made(packs, tmp_path_factory):  # noqa: F811
    """A flow run stopped after one step (stack of 5), an empty folder, a resnet34 checkpoint, junk."""
    root = tmp_path_factory.mktemp("flowbad")
    r = run_module("trainer", stream_args(root / "flowrun", packs / "flow", "--modality", "flow", "--flow-stack",
                                          "5", "--max-steps", "1"), trainer_env(), timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    (root / "empty").mkdir()
    torch.save({"model": build_model("resnet34", 8, 3, width=0.25).state_dict()}, root / "r34.pt")
    (root / "junk.pt").write_bytes(b"not a checkpoint at all")
    return root


CASES = [
    ("flow-on-rgb", ["{rgb}", "--modality", "flow"], ["holds rgb shards", "--modality flow", "pack --modality flow"]),
    ("rgb-on-flow", ["{flow}"], ["holds flow shards", "--modality rgb", "--modality flow"]),
    ("stack-zero", ["{flow}", "--modality", "flow", "--flow-stack", "0"], ["--flow-stack 0", "at least 1"]),
    ("init-missing", ["{flow}", "--modality", "flow", "--init-from", "{root}/nowhere"],
     ["--init-from", "nowhere", "no such file"]),
    ("init-empty-dir", ["{flow}", "--modality", "flow", "--init-from", "{root}/empty"],
     ["--init-from", "empty", "no checkpoints"]),
    ("init-other-arch", ["{flow}", "--modality", "flow", "--init-from", "{root}/r34.pt"],
     ["r34.pt", "another network", "--arch"]),
    ("init-junk", ["{flow}", "--modality", "flow", "--init-from", "{root}/junk.pt"], ["--init-from", "junk.pt"]),
    ("init-and-pretrained", ["{flow}", "--modality", "flow", "--init-from", "{root}/r34.pt", "--pretrained",
                             "{root}/r34.pt"], ["--pretrained and --init-from", "use one"]),
    ("resume-other-stack", ["{flow}", "--modality", "flow", "--flow-stack", "4", "--run-dir", "{root}/flowrun"],
     ["--flow-stack 5", "this run has 4"]),
    ("resume-as-rgb", ["{rgb}", "--run-dir", "{root}/flowrun"], ["--modality flow", "this run has rgb"]),
    ("test-flow-ckpt-as-rgb", ["{flow}", "--modality", "rgb", "--test-only", "{root}/flowrun/checkpoints/best.pt"],
     ["holds flow shards"]),
    ("test-flow-ckpt-other-stack", ["{flow}", "--modality", "flow", "--flow-stack", "3", "--test-only",
                                    "{ckpt}"], ["10 flow channels", "--modality flow --flow-stack 5"]),
]


@pytest.mark.parametrize("name,args,needles", CASES, ids=[c[0] for c in CASES])
def test_refused(made, packs, tmp_path, name, args, needles):  # noqa: F811
    ckpt = next((made / "flowrun" / "checkpoints").glob("ckpt-*.pt"))
    fill = {"rgb": str(packs / "rgb"), "flow": str(packs / "flow"), "root": str(made), "ckpt": str(ckpt)}
    data, *rest = [a.format(**fill) for a in args]
    argv = stream_args(tmp_path / "run", Path(data)) + rest
    r = run_module("trainer", argv, trainer_env(), timeout=300)
    assert_refused(r, [n.format(**fill) for n in needles], prefix="trainer:" if "--flow-stack 0" not in
                   needles[0] and "use one" not in needles[-1] else None)


@pytest.fixture(scope="module")
def corrupt_flow(packs, tmp_path_factory):  # noqa: F811
    """A copy of the flow pack with every flow_y JPEG of one training sample overwritten in its tar (so
    whichever fields a clip draws, one of them cannot be decoded)."""
    import shutil
    import tarfile
    root = tmp_path_factory.mktemp("corruptflow") / "flow"
    shutil.copytree(packs / "flow", root)
    shard = sorted(root.glob("train-*.tar"))[0]
    with tarfile.open(shard) as tf:
        key = next(m.name for m in tf.getmembers() if m.name.endswith(".y.jpg")).split(".")[0]
        members = [m for m in tf.getmembers() if m.name.startswith(key + ".") and m.name.endswith(".y.jpg")]
    with open(shard, "r+b") as f:
        for m in members:
            f.seek(m.offset_data)
            f.write(b"\x00" * 64)
    return root, shard, key


@pytest.mark.parametrize("workers", ["0", "2"], ids=["in-rank", "in-worker"])
def test_a_corrupt_flow_jpeg_names_the_shard_and_the_member(corrupt_flow, tmp_path, workers):
    root, shard, key = corrupt_flow
    argv = stream_args(tmp_path / "run", root, "--modality", "flow", "--flow-stack", "5", "--workers", workers)
    r = run_module("trainer", argv, trainer_env(), timeout=300)
    assert_refused(r, [str(shard), f"member {key}.", f".y.jpg (sample {key})", "cannot be decoded"],
                   prefix="trainer: shard ")
