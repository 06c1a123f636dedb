"""The temporal (optical flow) stream: stacks of flow fields in, a 2L-channel first conv, training on flow
that ``pack --modality flow`` extracted, and the RGB-to-flow transfer (``--init-from``).

Data: ``summit-jobs synth`` videos (motion classes in forward/backward pairs), packed twice by the real
CLI: as RGB frames and as Farneback flow, both at a 64-pixel shorter side.
"""
from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from trainer.data import clips, transforms
from trainer.models import interop, transfer
from trainer.models.model import build_model
from trainer_utils import run_ranks

#: 8 synthetic classes: chance is 12.5%.
CHANCE = 1 / 8


def _gray(value: int, w: int = 40, h: int = 30) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((h, w), value, np.uint8), mode="L").save(buf, "JPEG", quality=95)
    return buf.getvalue()


def test_a_flow_stack_interleaves_x_and_y_and_a_flip_reverses_horizontal_motion():
    # field j of the clip: x = 10 + 20 j (distinct per field), y = 60
    pairs = [(_gray(10 + 20 * j), _gray(60)) for j in range(6)]     # T = 2 stacks of L = 3
    rng = np.random.default_rng(0)
    out = transforms.flow_train_clip(pairs, 3, rng, size=16, flip=False)
    assert out.shape == (2, 16, 16, 6) and out.dtype == np.uint8
    for t in range(2):
        for j in range(3):
            assert abs(int(out[t, 8, 8, 2 * j]) - (10 + 20 * (3 * t + j))) <= 1      # x of field 3t + j
            assert abs(int(out[t, 8, 8, 2 * j + 1]) - 60) <= 1                       # its y
    flipped = None
    for seed in range(20):  # find a draw that flips (probability 1/2 each)
        r = np.random.default_rng(seed)
        box_rng = np.random.default_rng(seed)
        transforms.multiscale_box(40, 30, box_rng, 16)
        if box_rng.random() < 0.5:
            flipped = transforms.flow_train_clip(pairs, 3, r, size=16, flip=True)
            break
    assert flipped is not None
    assert abs(int(flipped[0, 8, 8, 0]) - (255 - 10)) <= 1, "a mirrored clip moves the other way along x"
    assert abs(int(flipped[0, 8, 8, 1]) - 60) <= 1, "vertical motion is unchanged by a horizontal flip"


def test_flow_test_crops_match_the_rgb_crop_geometry():
    pairs = [(_gray(100), _gray(150)) for _ in range(4)]
    out = transforms.flow_test_crops(pairs, 2, size=24, short_side=30, num_crops=3)
    assert out.shape == (3, 2, 24, 24, 4)
    with pytest.raises(ValueError, match="whole number of stacks"):
        transforms.flow_test_crops(pairs[:3], 2, size=24, short_side=30)


def test_stacks_are_consecutive_fields_and_short_videos_repeat_their_last():
    spec = clips.ClipSpec(num_segments=3, mode="uniform", modality="flow", flow_stack=4)
    idx = clips.flow_eval_indices(30, spec, 0, 1)
    stacks = [idx[i:i + 4] for i in range(0, 12, 4)]
    assert all(s == list(range(s[0], s[0] + 4)) for s in stacks)
    assert stacks[0][0] < stacks[1][0] < stacks[2][0] and stacks[2][-1] <= 29
    rng = np.random.default_rng(1)
    short = clips.flow_train_indices(2, spec, rng)             # 2 fields, stacks of 4
    assert len(short) == 12 and max(short) == 1 and min(short) == 0
    assert spec.channels == 8 and clips.ClipSpec().channels == 3


def test_flow_normalisation_centres_no_motion_and_keeps_rgb_as_it_was():
    flow = torch.full((1, 2, 4, 4, 6), 128, dtype=torch.uint8)
    assert clips.normalize(flow).abs().max() < 0.01                    # 128 is no motion
    assert clips.normalize(torch.full((1, 1, 2, 2, 6), 255, dtype=torch.uint8)).min() == 1.0
    rgb = torch.zeros((1, 1, 2, 2, 3), dtype=torch.uint8)
    assert torch.allclose(clips.normalize(rgb)[0, 0, :, 0, 0], -torch.tensor(clips.MEAN) / torch.tensor(clips.STD))


def _randomised(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for t in model.state_dict().values():
            if t.is_floating_point():
                t.copy_(torch.randn(t.shape, generator=g))
    return model


def test_cross_modality_init_averages_the_rgb_stem_and_copies_the_rest(tmp_path):
    rgb = _randomised(build_model("resnet18", 8, 4, width=0.25), 1)
    torch.save({"model": rgb.state_dict(), "step": 3}, tmp_path / "rgb.pt")
    flow = build_model("resnet18", 8, 4, width=0.25, in_channels=10)
    report = transfer.init_from(flow, tmp_path / "rgb.pt")
    w = flow.state_dict()["conv1.weight"]
    assert w.shape[1] == 10
    want = rgb.state_dict()["conv1.weight"].mean(dim=1, keepdim=True)
    assert torch.equal(w, want.expand_as(w))
    for k, v in rgb.state_dict().items():
        if k != "conv1.weight":
            assert torch.equal(flow.state_dict()[k], v), k
    assert "cross-modality" in report.line() and "fc head copied" in report.line()
    other = build_model("resnet18", 5, 4, width=0.25, in_channels=10)      # other classes: a new head
    before = other.state_dict()["fc.weight"].clone()
    assert "fc head is new (8 classes there)" in transfer.init_from(other, tmp_path / "rgb.pt").line()
    assert torch.equal(other.state_dict()["fc.weight"], before)


def test_imagenet_weights_start_a_flow_stream_by_cross_modality(tmp_path):
    imagenet = _randomised(build_model("resnet18", 1000, 1, shift=False, width=0.25), 2)
    torch.save(imagenet.state_dict(), tmp_path / "r18.pth")
    flow = build_model("resnet18", 8, 4, width=0.25, in_channels=20)
    report = interop.load_pretrained(flow, tmp_path / "r18.pth")
    assert report.cross_modality and "repeated over the flow channels" in report.line()
    stem = flow.state_dict()["conv1.weight"]
    assert torch.equal(stem, imagenet.state_dict()["conv1.weight"].mean(1, keepdim=True).expand_as(stem))


# -- end to end: synth -> pack (rgb, flow) -> train ----------------------------------------------

def stream_args(run_dir: Path, data: Path, *extra: str) -> list:
    """A small two-stream recipe that learns the synthetic motions in seconds on a CPU."""
    return ["--run-dir", str(run_dir), "--data", str(data), "--engine", "ddp", "--arch", "resnet18",
            "--width", "0.25", "--num-segments", "3", "--sampling", "uniform", "--input-size", "56",
            "--batch-per-gpu", "4", "--lr", "0.01", "--optimizer", "adam", "--warmup-epochs", "0",
            "--epochs", "6", "--workers", "0", "--test-clips", "2", "--test-last", "1", "--log-every", "4",
            "--no-flip", "--threads", "1", *extra]


def _metrics(run_dir: Path) -> list:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_a_flow_stream_on_extracted_flow_beats_chance_on_two_ranks(packs, tmp_path):
    run = tmp_path / "flow"
    run_ranks(2, stream_args(run, packs / "flow", "--modality", "flow", "--flow-stack", "5"), tmp_path / "logs")
    summary = [r for r in _metrics(run) if r.get("kind") == "test" and r.get("summary")]
    assert summary, "no final test"
    assert summary[-1]["top1"] >= 3 * CHANCE, summary[-1]
    state = torch.load(run / "checkpoints" / "best.pt", weights_only=True)
    assert state["model"]["conv1.weight"].shape[1] == 10
    assert state["args"]["modality"] == "flow"


def test_init_from_an_rgb_run_starts_the_flow_stream_from_its_weights(packs, tmp_path):
    from badinput import run_module, trainer_env
    rgb = tmp_path / "rgb"
    r = run_module("trainer", stream_args(rgb, packs / "rgb", "--epochs", "1", "--no-test"), trainer_env(),
                   timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    flow = tmp_path / "flow"
    r = run_module("trainer", stream_args(flow, packs / "flow", "--modality", "flow", "--flow-stack", "5",
                                          "--init-from", str(rgb), "--max-steps", "1"), trainer_env(), timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "init-from:" in r.stderr and "best.pt" in r.stderr and "cross-modality" in r.stderr
    src = torch.load(rgb / "checkpoints" / "best.pt", weights_only=True)["model"]
    got = torch.load(next((flow / "checkpoints").glob("ckpt-*.pt")), weights_only=True)["model"]
    # one Adam step at lr 0.01 moves each weight by about 0.01 at most: still the RGB model's
    diff = (got["layer4.1.conv2.weight"] - src["layer4.1.conv2.weight"]).abs().max().item()
    assert diff < 0.05
    stem = src["conv1.weight"].mean(1, keepdim=True).expand_as(got["conv1.weight"])
    assert (got["conv1.weight"] - stem).abs().max().item() < 0.05
