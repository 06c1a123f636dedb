"""Bad input to ``python -m trainer.models.interop convert``: refused with one line naming the file (or
the key, or the value) and what to do, exit 2, never a traceback.

Files a user could hand it: missing, a folder, empty, text, a zip that is no torch file, a
torch file or a safetensors file cut short, a pickle that would run code, containers without
weights, state dicts of other networks (another block count, MobileNet, temporal pooling,
non-local blocks), of inconsistent shapes, without a classifier, or mixing layouts; and
outputs it must not write. Those that need no tensor (paths, options) are refused before torch is
imported: they run in a process where torch cannot be imported.
"""
from __future__ import annotations

import argparse
import zipfile
from pathlib import Path

import pytest
import torch

from badinput import assert_refused, run_module, run_module_without_torch, trainer_env

from trainer.models import interop
from trainer.models.model import build_model

PREFIX = "trainer.models.interop: error: "


def tiny_sd(arch: str = "resnet18") -> dict:
    return build_model(arch, 4, width=0.125).state_dict()


def write_inputs(d: Path) -> None:
    """Every bad input file of the table, under its case name."""
    (d / "folder").mkdir()
    (d / "empty.pth").write_bytes(b"")
    (d / "notes.pth").write_text("epoch 3: top-1 71.2%\n")
    with zipfile.ZipFile(d / "other.zip.pth", "w") as z:
        z.writestr("readme.txt", "not a torch archive")
    torch.save(tiny_sd(), d / "good.pth")
    whole = (d / "good.pth").read_bytes()
    (d / "cut.pth").write_bytes(whole[: len(whole) // 2])
    from safetensors.torch import save_file
    save_file(tiny_sd(), str(d / "good.safetensors"))
    whole = (d / "good.safetensors").read_bytes()
    (d / "cut.safetensors").write_bytes(whole[:-200])
    (d / "hollow.safetensors").write_bytes(len(b"{}").to_bytes(8, "little") + b"{}")
    torch.save({"state_dict": tiny_sd(), "args": argparse.Namespace(lr=0.1)}, d / "code.pth")
    torch.save([tiny_sd()], d / "list.pth")
    torch.save({"epoch": 3, "best_prec1": 70.0}, d / "noweights.pth")
    torch.save({"state_dict": {**tiny_sd(), "fc.note": "new head"}}, d / "nontensor.pth")
    torch.save({"features.0.0.weight": torch.zeros(32, 3, 3, 3), "classifier.1.weight": torch.zeros(4, 1280)},
               d / "mobilenet.pth")
    r50 = tiny_sd("resnet50")
    torch.save({k: v for k, v in r50.items() if not k.startswith(("layer3.4.", "layer3.5."))}, d / "r50cut.pth")
    torch.save({**tiny_sd(), "bn1.weight": torch.ones(5)}, d / "shapes.pth")
    torch.save({k: v for k, v in tiny_sd().items() if not k.startswith("fc.")}, d / "nofc.pth")
    tsm = interop.to_layout(tiny_sd("resnet50"), "tsm")
    tsm["module.base_model.layer2.net.0.conv1.net.weight"] = tsm.pop("module.base_model.layer2.0.conv1.net.weight")
    torch.save({"state_dict": tsm}, d / "tpool.pth")
    mm = interop.to_layout(tiny_sd("resnet50"), "mmaction2")
    mm["backbone.layer3.0.non_local_block.g.conv.weight"] = torch.zeros(4, 8, 1, 1, 1)
    torch.save({"meta": {}, "state_dict": mm}, d / "nonlocal.pth")
    twice = {"base_model." + k: v for k, v in tiny_sd().items()}
    twice["base_model.layer1.0.conv1.net.weight"] = twice["base_model.layer1.0.conv1.weight"]
    torch.save({"state_dict": twice}, d / "twice.pth")
    both = interop.to_layout(tiny_sd(), "tsm", placement="block")
    both["module.base_model.layer4.1.conv1.net.weight"] = both.pop("module.base_model.layer4.1.net.conv1.weight")
    torch.save({"state_dict": both}, d / "bothplaces.pth")
    (d / "taken.pth").write_bytes(b"someone's file")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad-interop")
    write_inputs(d)
    return d


#: (case, IN (a name in the inputs folder), extra arguments, words the refusal must hold besides IN's path).
CASES = [
    ("missing", "nope.pth", [], ["No such file or directory"]),
    ("folder", "folder", [], ["Is a directory"]),
    ("empty", "empty.pth", [], ["an empty file"]),
    ("text", "notes.pth", [], ["not a weights file"]),
    ("foreign-zip", "other.zip.pth", [], ["not a readable torch file"]),
    ("cut-torch", "cut.pth", [], ["not a readable torch file", "cut short"]),
    ("cut-safetensors", "cut.safetensors", [], ["not a readable safetensors file"]),
    ("hollow-safetensors", "hollow.safetensors", [], ["its state dict is empty"]),
    ("code", "code.pth", [], ["refusing it", "more than tensors", "argparse.Namespace"]),
    ("list", "list.pth", [], ["holds a list"]),
    ("no-weights", "noweights.pth", [], ["holds no state dict", "'epoch'"]),
    ("non-tensor", "nontensor.pth", [], ["'fc.note' is a str"]),
    ("mobilenet", "mobilenet.pth", [], ["features.0.0.weight", "not a ResNet"]),
    ("wrong-arch", "r50cut.pth", [], ["[3, 4, 4, 3]", "resnet18, resnet34, resnet50"]),
    ("shapes", "shapes.pth", [], ["bn1.weight: file [5], model [8]"]),
    ("no-classifier", "nofc.pth", [], ["no classifier (fc.weight"]),
    ("tpool", "tpool.pth", [], ["layer2.net.0.conv1.net.weight", "temporal-pooling"]),
    ("non-local", "nonlocal.pth", [], ["non_local_block", "non-local blocks"]),
    ("two-keys-one-name", "twice.pth", [], ["two keys map to layer1.0.conv1.weight"]),
    ("both-placements", "bothplaces.pth", [], ["both on blocks and on residual branches"]),
]

#: (case, OUT (in the inputs folder), extra arguments, words): good input, bad output or options.
OUTPUT_CASES = [
    ("out-exists", "taken.pth", [], ["taken.pth exists", "--force"]),
    ("out-folder", "folder", ["--force"], ["is a folder"]),
    ("out-no-parent", "no/such/dir/w.pth", [], ["cannot write", "no/such/dir/w.pth", "No such file or directory"]),
    ("bad-layout", "x.pth", ["--to", "caffe"], ["invalid choice: 'caffe'"]),
    ("bad-format", "x.pth", ["--format", "onnx"], ["invalid choice: 'onnx'"]),
    ("bad-tsm-fc", "x.pth", ["--tsm-fc", "fc"], ["invalid choice: 'fc'"]),
]


#: The cases refused from the options and the paths alone: before torch is imported, so these run in a
#: process where torch cannot be imported (a user waits for nothing, and the suite saves a second a case).
WITHOUT_TORCH = {"missing", "folder", "empty", "text", "out-exists", "out-folder", "out-no-parent", "bad-layout",
                 "bad-format", "bad-tsm-fc"}


def convert_cmd(case: str, args: list):
    """``python -m trainer.models.interop`` with ``args``, without torch for the cases that need none."""
    run = run_module_without_torch if case in WITHOUT_TORCH else run_module
    return run("trainer.models.interop", args, trainer_env())


@pytest.mark.parametrize("case, name, extra, words", CASES, ids=[c[0] for c in CASES])
def test_bad_input_file_is_refused(inputs, tmp_path, case, name, extra, words):
    src = inputs / name
    res = convert_cmd(case, ["convert", str(src), str(tmp_path / "out.pth"), "--to", "mmaction2", *extra])
    assert_refused(res, [f"{src}: ", *words], prefix=PREFIX)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out.pth").exists() and not list(tmp_path.iterdir())


@pytest.mark.parametrize("case, name, extra, words", OUTPUT_CASES, ids=[c[0] for c in OUTPUT_CASES])
def test_bad_output_or_option_is_refused(inputs, case, name, extra, words):
    out = inputs / name
    before = sorted(p.name for p in inputs.iterdir())
    args = ["convert", str(inputs / "good.pth"), str(out)] + (extra if "--to" in extra else ["--to", "tsm", *extra])
    res = convert_cmd(case, args)
    assert_refused(res, words)
    assert res.returncode == 2
    assert sorted(p.name for p in inputs.iterdir()) == before
    if name == "taken.pth":
        assert out.read_bytes() == b"someone's file"


def test_a_conversion_that_can_start_needs_torch(inputs, tmp_path):
    """The check of the cases above can fail: a file that passes the path checks reaches torch's import,
    which fails where torch is blocked."""
    res = run_module_without_torch("trainer.models.interop", ["convert", str(inputs / "other.zip.pth"),
                                                              str(tmp_path / "out.pth"), "--to", "tsm"], trainer_env())
    assert res.returncode != 0 and "import of torch halted" in res.stderr, res.stderr[-2000:]
