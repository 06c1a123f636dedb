"""The trainer's weights options end to end: an ImageNet-style start, and weights-only exports written
beside the checkpoints by the checkpoint writer's thread."""
import subprocess
import sys

import torch

from trainer_utils import REPO, make_dataset, run_ranks, tiny_args

from trainer.loop import checkpoint as ckpt
from trainer.models.interop import load_checkpoint_any
from trainer.models.model import build_model


def test_pretrained_start_and_exports_of_last_and_best(tmp_path):
    data = make_dataset(tmp_path / "data", train=8, val=4)
    torch.manual_seed(123)
    source = build_model("resnet18", 1000, 4, shift=False, width=0.125)       # a 2D network, 1000 classes
    torch.save(source.state_dict(), tmp_path / "imagenet.pth")
    run = tmp_path / "run"
    args = tiny_args(run, data, epochs=2, eval_every=1, lr=1e-30, pretrained=tmp_path / "imagenet.pth",
                     export_weights="safetensors", export_layout="mmaction2") + ["--no-test"]
    run_ranks(2, args, tmp_path / "logs", timeout=240)
    log = (tmp_path / "logs" / "rank0.log").read_text()
    assert "pretrained:" in log and "the fc head is new" in log
    last = ckpt.load(ckpt.epoch_path(run, 1))["model"]
    # lr 1e-30: the backbone is still the source's (BatchNorm statistics move; weights do not)
    for k, v in source.state_dict().items():
        if k.endswith("weight") and not k.startswith("fc") and "bn" not in k and "downsample.1" not in k:
            assert torch.equal(last[k], v), k
    assert not torch.equal(last["fc.weight"][:4], source.state_dict()["fc.weight"][:4])
    for name in ("last", "best"):
        path = run / "weights" / f"{name}.safetensors"
        assert path.is_file(), sorted(p.name for p in (run / "weights").iterdir())
    exported, info = load_checkpoint_any(run / "weights" / "last.safetensors")
    assert info["layout"] == "mmaction2"
    assert set(exported) == set(last) and all(torch.equal(exported[k], last[k]) for k in last)


def test_pretrained_of_another_network_is_one_line(tmp_path):
    data = make_dataset(tmp_path / "data", train=8, val=2)
    torch.save(build_model("resnet34", 1000, 4, shift=False, width=0.125).state_dict(), tmp_path / "r34.pth")
    args = tiny_args(tmp_path / "run", data, pretrained=tmp_path / "r34.pth") + ["--no-test"]
    out = subprocess.run([sys.executable, "-m", "trainer", *args], cwd=REPO, capture_output=True, text=True,
                         timeout=120, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)})
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert f"trainer: --pretrained {tmp_path / 'r34.pth'}:" in out.stderr, out.stderr[-2000:]
