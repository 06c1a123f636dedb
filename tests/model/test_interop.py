"""Weights in and out of the trainer (trainer/models/interop.py): an ImageNet start, the official TSM
code's and mmaction2's key layouts both ways, any checkpoint for --test-only, weights-only exports.

The layouts are checked against networks built here the way the sources build them
(official TSM: ops/models.py TSN with ops/temporal_shift.py make_temporal_shift under
DataParallel; mmaction2: backbones/resnet.py ConvModules, resnet_tsm.py's shift wrap,
tsm_head.py's fc_cls under a recognizer's backbone/cls_head): their ``state_dict()`` keys
come from torch, not from the module under test.
"""
from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import torch
from torch import nn

from badinput import run_module, trainer_env
from trainer_utils import REPO, make_dataset, tiny_args

from trainer.models import interop
from trainer.loop.checkpoint import list_epoch_checkpoints
from trainer.models.model import build_model


# -- networks built as the sources build them ------------------------------------------------

class Net(nn.Module):
    """ops/temporal_shift.py TemporalShift / resnet_tsm.py TemporalShift: the wrapped module is ``net``."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net


class ConvModule(nn.Module):
    """mmcv's ConvModule as mmaction2's ResNet uses it: ``conv`` and its BatchNorm ``bn``."""

    def __init__(self, conv: nn.Module, bn: nn.Module):
        super().__init__()
        self.conv, self.bn = conv, bn


def blocks(model):
    """(name, stage, index, block) of every residual block."""
    for s in range(1, 5):
        stage = getattr(model, f"layer{s}")
        for i, b in enumerate(list(stage)):
            yield f"layer{s}.{i}", stage, i, b


def in_order(names) -> list:
    """Block names in network order (layer1.0, layer1.1, ..., layer4.2)."""
    return sorted(names, key=lambda n: tuple(int(x) for x in n[len("layer"):].split(".")))


def shifted(model) -> set:
    return {f"layer{s}.{i}" for s in range(1, 5) for i, b in enumerate(getattr(model, f"layer{s}"))
            if b.shift is not None and b.shift.enabled}


def official_tsm(model, dropout: float) -> nn.Module:
    """make_temporal_shift (blockres: conv1 -> TemporalShift(conv1); block: the block), TSN's
    base_model and fc/new_fc (_prepare_tsn), and DataParallel's ``module``."""
    base = copy.deepcopy(model)
    wrapped = shifted(model)
    for name, stage, i, b in list(blocks(base)):
        if name in wrapped:
            if b.placement == "block":
                stage[i] = Net(b)
            else:
                b.conv1 = Net(b.conv1)
    tsn = nn.Module()
    tsn.base_model = base
    if dropout > 0:
        tsn.new_fc = base.fc
        base.fc = nn.Dropout(dropout)
    dp = nn.Module()
    dp.module = tsn
    return dp


def mmaction2_tsm(model) -> nn.Module:
    """ResNet's ConvModules (stem, convN with bnN, downsample), ResNetTSM's wrap of ``conv1.conv``
    (blockres) or of the block, TSMHead's ``fc_cls``, the recognizer's backbone and cls_head."""
    back = copy.deepcopy(model)
    wrapped = shifted(model)
    back.conv1 = ConvModule(back.conv1, back.bn1)
    del back.bn1
    for name, stage, i, b in list(blocks(back)):
        for n in (1, 2, 3):
            if hasattr(b, f"bn{n}"):
                setattr(b, f"conv{n}", ConvModule(getattr(b, f"conv{n}"), getattr(b, f"bn{n}")))
                delattr(b, f"bn{n}")
        if b.downsample is not None:
            b.downsample = ConvModule(b.downsample[0], b.downsample[1])
        if name in wrapped:
            if b.placement == "block":
                stage[i] = Net(b)
            else:
                b.conv1.conv = Net(b.conv1.conv)
    head = nn.Module()
    head.fc_cls = back.fc
    del back.fc
    rec = nn.Module()
    rec.backbone, rec.cls_head = back, head
    return rec


def same(a: dict, b: dict) -> bool:
    """Exactly the same keys and every tensor equal (dtype and values)."""
    return set(a) == set(b) and all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a)


def randomised(model: nn.Module, seed: int = 0) -> nn.Module:
    """Every float tensor of the state (BN statistics included) made distinct, so equality means a copy."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for t in model.state_dict().values():
            if t.is_floating_point():
                t.copy_(torch.randn(t.shape, generator=g) * 0.1 + (1.0 if t.min() > 0 else 0.0))
    return model


# -- the layouts against the sources' structures ---------------------------------------------

def test_official_tsm_keys_are_those_of_the_official_network():
    model = build_model("resnet50", 10, width=0.125)
    sd = model.state_dict()
    ref = official_tsm(model, dropout=0.5).state_dict()
    for key in ("module.base_model.conv1.weight", "module.base_model.bn1.running_var",
                "module.base_model.layer1.0.conv1.net.weight", "module.base_model.layer1.0.bn1.weight",
                "module.base_model.layer1.0.downsample.0.weight",
                "module.base_model.layer4.2.conv1.net.weight", "module.new_fc.weight", "module.new_fc.bias"):
        assert key in ref
    assert same(interop.to_layout(sd, "tsm", **interop.layout_info(model)), ref)
    back, layout = interop.from_layout(ref)
    assert layout == "tsm" and same(back, sd)


def test_mmaction2_keys_are_those_of_the_mmaction2_network():
    model = build_model("resnet50", 10, width=0.125)
    sd = model.state_dict()
    ref = mmaction2_tsm(model).state_dict()
    for key in ("backbone.conv1.conv.weight", "backbone.conv1.bn.running_mean",
                "backbone.layer1.0.conv1.conv.net.weight", "backbone.layer1.0.conv1.bn.weight",
                "backbone.layer1.0.conv3.conv.weight", "backbone.layer1.0.downsample.conv.weight",
                "backbone.layer1.0.downsample.bn.bias", "cls_head.fc_cls.weight"):
        assert key in ref
    assert same(interop.to_layout(sd, "mmaction2", **interop.layout_info(model)), ref)
    back, layout = interop.from_layout(ref)
    assert layout == "mmaction2" and same(back, sd)


@pytest.mark.parametrize("layout", ["tsm", "mmaction2"])
def test_deep_resnets_shift_every_other_block_and_block_placement_wraps_the_block(layout):
    """resnet101 with blockres: layer3.1 unshifted (make_temporal_shift's n_round 2); "block" wraps whole blocks."""
    build = official_tsm if layout == "tsm" else (lambda m, dropout=0: mmaction2_tsm(m))
    deep = build_model("resnet101", 5, width=0.125)
    ref = build(deep, dropout=0).state_dict()
    pre = "module.base_model." if layout == "tsm" else "backbone."
    conv = "conv1" if layout == "tsm" else "conv1.conv"
    assert f"{pre}layer3.1.{conv}.weight" in ref and f"{pre}layer3.2.{conv}.net.weight" in ref
    assert same(interop.to_layout(deep.state_dict(), layout, **interop.layout_info(deep), dropout=0), ref)
    block = build_model("resnet18", 5, width=0.125, placement="block")
    ref = build(block, dropout=0).state_dict()
    assert f"{pre}layer2.1.net.{conv}.weight" in ref
    assert same(interop.to_layout(block.state_dict(), layout, **interop.layout_info(block), dropout=0), ref)
    back, _ = interop.from_layout(ref)
    assert same(back, block.state_dict())


def test_tsm_classifier_is_base_model_fc_without_dropout():
    model = build_model("resnet18", 7, width=0.125)
    ref = official_tsm(model, dropout=0).state_dict()
    assert "module.base_model.fc.weight" in ref and not any("new_fc" in k for k in ref)
    assert same(interop.to_layout(model.state_dict(), "tsm", **interop.layout_info(model), dropout=0), ref)
    assert same(interop.to_layout(model.state_dict(), "tsm", tsm_fc="base_model.fc"), ref)


# -- round trips -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def randomised_resnet50s():
    """``(width, dropout) -> randomised 400-class resnet50``, each built once for the module: drawing a
    full-width network's 25M random weights costs more than its three layouts' round trips together."""
    built = {}

    def get(width: float, dropout: float) -> nn.Module:
        if (width, dropout) not in built:
            built[width, dropout] = randomised(build_model("resnet50", 400, width=width, dropout=dropout))
        return built[width, dropout]
    return get


@pytest.mark.parametrize("width", [1.0, 0.125], ids=["resnet50", "tiny"])
@pytest.mark.parametrize("layout", interop.LAYOUTS)
@pytest.mark.parametrize("dropout", [0.0, 0.5])
def test_round_trip_is_exact(randomised_resnet50s, width, layout, dropout):
    model = randomised_resnet50s(width, dropout)
    sd = model.state_dict()
    out = interop.to_layout(sd, layout, **interop.layout_info(model), dropout=dropout)
    if layout == "tsm":
        assert ("module.new_fc.weight" in out) == (dropout > 0)
    back, found = interop.from_layout(out)
    assert found == layout and same(back, sd)


def test_a_model_without_shift_has_no_wrapped_keys_and_round_trips():
    model = build_model("resnet18", 3, width=0.125, shift=False)
    for layout in ("tsm", "mmaction2"):
        out = interop.to_layout(model.state_dict(), layout, **interop.layout_info(model))
        assert not any(".net." in k for k in out)
        assert same(interop.from_layout(out)[0], model.state_dict())


# -- --pretrained ----------------------------------------------------------------------------

def imagenet(arch: str = "resnet18", width: float = 0.25) -> nn.Module:
    """A torchvision-layout 2D ResNet with 1000 classes (our model without shift has its keys)."""
    return randomised(build_model(arch, 1000, width=width, shift=False), seed=1).eval()


@pytest.mark.parametrize("form", ["bare", "state_dict", "model", "legacy", "safetensors", "no-bn-counters"])
def test_pretrained_copies_the_backbone_exactly_and_keeps_a_new_fc(tmp_path, form):
    src = imagenet()
    sd = src.state_dict()
    path = tmp_path / ("w.safetensors" if form == "safetensors" else "w.pth")
    if form == "safetensors":
        from safetensors.torch import save_file
        save_file({k: v.contiguous() for k, v in sd.items()}, str(path))
    elif form == "legacy":
        torch.save(sd, path, _use_new_zipfile_serialization=False)
    elif form == "no-bn-counters":  # torchvision's original ImageNet files predate num_batches_tracked
        torch.save({k: v for k, v in sd.items() if not k.endswith("num_batches_tracked")}, path)
    else:
        torch.save(sd if form == "bare" else {form: sd, "epoch": 90}, path)
    dst = build_model("resnet18", 10, width=0.25)
    fc_before = copy.deepcopy(dst.fc.state_dict())
    report = interop.load_pretrained(dst, path)
    assert report.copied == len([k for k in sd if not k.startswith("fc.")]) - (
        20 if form == "no-bn-counters" else 0)
    assert report.source_classes == 1000 and "fc head is new" in report.line()
    if form == "no-bn-counters":  # for --test-only the whole state dict loads strictly: counters added as 0
        whole, _ = interop.load_checkpoint_any(path)
        assert whole["bn1.num_batches_tracked"].item() == 0 and set(whole) == set(sd)
    dst.eval()
    image = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert torch.equal(dst.conv1(image), src.conv1(image))
        dst.set_shift(False)
        assert torch.equal(dst.features(image), src.features(image))
    assert dst.fc.weight.shape == (10, src.fc.weight.shape[1])
    assert same(dst.fc.state_dict(), fc_before)


def test_pretrained_from_a_published_tsm_checkpoint_takes_its_backbone(tmp_path):
    src = randomised(build_model("resnet18", 400, width=0.25))
    torch.save({"epoch": 50, "arch": "resnet18", "best_prec1": 70.1,
                "state_dict": official_tsm(src, 0.5).state_dict()}, tmp_path / "tsm.pth")
    dst = build_model("resnet18", 10, width=0.25)
    report = interop.load_pretrained(dst, tmp_path / "tsm.pth")
    assert report.layout == "tsm"
    assert torch.equal(dst.layer1[0].conv1.weight, src.layer1[0].conv1.weight)


def test_pretrained_of_another_arch_names_the_keys_and_the_fix_and_copies_nothing(tmp_path):
    torch.save(imagenet("resnet50", 0.25).state_dict(), tmp_path / "r50.pth")
    dst = build_model("resnet18", 10, width=0.25)
    before = copy.deepcopy(dst.state_dict())
    with pytest.raises(interop.WeightsError) as err:
        interop.load_pretrained(dst, tmp_path / "r50.pth")
    msg = str(err.value)
    assert "198 unexpected (layer1.0.conv3.weight, " in msg and "193 more" in msg and "of another shape" in msg
    assert "the file holds a resnet50" in msg and "--arch resnet50" in msg
    assert same(dst.state_dict(), before)
    torch.save(imagenet("resnet18", 0.25).state_dict(), tmp_path / "r18.pth")
    with pytest.raises(interop.WeightsError, match=r"does not fit the model: \d+ missing \(layer1.0.conv3.weight, "
                                                   r".* more\).*--arch resnet18"):
        interop.load_pretrained(build_model("resnet50", 10, width=0.25), tmp_path / "r18.pth")


def test_pretrained_of_another_width_names_the_shapes(tmp_path):
    torch.save(imagenet("resnet18", 0.5).state_dict(), tmp_path / "wide.pth")
    with pytest.raises(interop.WeightsError, match=r"of another shape \(conv1.weight: file \[32, 3, 7, 7\], "
                                                   r"model \[16, 3, 7, 7\]"):
        interop.load_pretrained(build_model("resnet18", 10, width=0.25), tmp_path / "wide.pth")


@pytest.mark.parametrize("content, words", [
    (b"", "an empty file"), (b"not weights\n", "not a weights file"),
    (None, "holds a list"), ({"epoch": 3}, "holds no state dict"), ({"conv1.weight": 3}, "holds no state dict"),
    ({"state_dict": {"conv1.weight": 3}}, "'conv1.weight' is a int, not a tensor")])
def test_pretrained_refuses_what_is_not_weights(tmp_path, content, words):
    path = tmp_path / "f.pth"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        torch.save([1, 2] if content is None else content, path)
    with pytest.raises(interop.WeightsError, match=words):
        interop.load_pretrained(build_model("resnet18", 10, width=0.25), path)


def test_a_pickle_with_code_is_refused_not_run(tmp_path):
    import argparse
    torch.save({"state_dict": {}, "args": argparse.Namespace(a=1)}, tmp_path / "code.pth")
    with pytest.raises(interop.WeightsError, match="more than tensors and plain values"):
        interop.load_checkpoint_any(tmp_path / "code.pth")


# -- any checkpoint --------------------------------------------------------------------------

def test_a_legacy_official_checkpoint_with_its_optimiser_loads(tmp_path):
    """main.py's dict as torch < 1.6 saved it (the published checkpoints' era)."""
    model = randomised(build_model("resnet50", 400, width=0.125))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(1, 8, 3, 32, 32)).sum().backward()
    opt.step()
    ckpt = {"epoch": 50, "arch": "resnet50", "state_dict": official_tsm(model, 0.5).state_dict(),
            "optimizer": opt.state_dict(), "best_prec1": 74.1}
    torch.save(ckpt, tmp_path / "TSM_kinetics_RGB_resnet50_shift8_blockres_avg_segment8_e50.pth",
               _use_new_zipfile_serialization=False)
    sd, info = interop.load_checkpoint_any(tmp_path / "TSM_kinetics_RGB_resnet50_shift8_blockres_avg_segment8_e50.pth")
    assert same(sd, model.state_dict())
    assert (info["arch"], info["num_classes"], info["layout"]) == ("resnet50", 400, "tsm")
    assert info["placement"] == "blockres"
    assert info["shifted"] == in_order(shifted(model))
    assert info["meta"] == {"epoch": 50, "arch": "resnet50", "best_prec1": 74.1}


def test_an_mmaction2_checkpoint_with_block_placement_tells_the_options_to_test_it(tmp_path):
    model = randomised(build_model("resnet18", 6, width=0.125, placement="block"))
    torch.save({"meta": {"epoch": 12, "mmengine_version": "0.10.4"}, "state_dict": mmaction2_tsm(model).state_dict()},
               tmp_path / "mm.pth")
    sd, info = interop.load_checkpoint_any(tmp_path / "mm.pth")
    assert same(sd, model.state_dict()) and info["placement"] == "block"
    args = type("A", (), dict(arch="resnet18", width=0.125, shift=True, shift_placement="blockres",
                              shift_blocks="official"))()
    assert "--shift-placement block" in interop.option_mismatch(info, args, 6)
    args.shift_placement = "block"
    assert interop.option_mismatch(info, args, 6) is None
    assert "the data has 5 classes" in interop.option_mismatch(info, args, 5)
    args.arch = "resnet34"
    assert "--arch resnet18" in interop.option_mismatch(info, args, 6)


def test_a_checkpoint_of_unknown_modules_is_refused_with_a_hint(tmp_path):
    model = build_model("resnet50", 4, width=0.125)
    sd = official_tsm(model, 0.5).state_dict()
    sd["module.base_model.layer2.net.0.conv1.net.weight"] = sd.pop("module.base_model.layer2.0.conv1.net.weight")
    torch.save({"state_dict": sd}, tmp_path / "tpool.pth")
    with pytest.raises(interop.WeightsError, match="layer2.net.0.conv1.net.weight.*temporal-pooling"):
        interop.load_checkpoint_any(tmp_path / "tpool.pth")


# -- weights-only export ---------------------------------------------------------------------

@pytest.mark.parametrize("fmt", interop.FORMATS)
@pytest.mark.parametrize("layout", interop.LAYOUTS)
def test_export_loads_back_to_the_same_tensors(tmp_path, fmt, layout):
    model = randomised(build_model("resnet50", 12, width=0.125, placement="block")).to(
        memory_format=torch.channels_last)  # strided tensors: safetensors takes contiguous ones only
    path = interop.export_weights(tmp_path, model.state_dict(), "best", fmt, layout, **interop.layout_info(model))
    assert path == tmp_path / "weights" / f"best.{fmt}"
    sd, info = interop.load_checkpoint_any(path)
    assert same(sd, model.state_dict())
    assert (info["layout"], info["format"], info["placement"]) == (layout, fmt, "block")
    assert set(info["shifted"]) == shifted(model)
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_export_none_writes_nothing(tmp_path):
    assert interop.export_weights(tmp_path, build_model("resnet18", 2, width=0.125).state_dict(), "last",
                                  "none", "summit") is None
    assert not (tmp_path / "weights").exists()


def test_a_killed_export_leaves_the_old_file_and_its_leftover_goes_next_time(tmp_path):
    """A write stopped by the file-size limit (as a full disk stops it): no new file under the final
    name, the previous one intact; a dead process's temporary is removed by the next export."""
    model = randomised(build_model("resnet18", 3, width=0.25))
    path = interop.export_weights(tmp_path, model.state_dict(), "last", "pt", "summit")
    old = path.read_bytes()
    code = ("import resource, signal, sys\n"
            "from trainer.models import interop\n"
            "from trainer.models.model import build_model\n"
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (50000, 50000))\n"
            "try:\n"
            f"    interop.export_weights({str(tmp_path)!r}, build_model('resnet18', 3, width=0.25).state_dict(), "
            "'last', 'pt', 'summit')\n"
            "except interop.WeightsError as exc:\n"
            "    sys.exit(str(exc))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=str(REPO), capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "cannot write" in proc.stderr and str(path) in proc.stderr
    assert path.read_bytes() == old
    assert [p.name for p in path.parent.iterdir()] == ["last.pt"]
    leftover = path.parent / ".last.pt.tmp999999"
    leftover.write_bytes(b"half")
    interop.export_weights(tmp_path, model.state_dict(), "last", "pt", "summit")
    assert not leftover.exists()


# -- the convert command, on a real run ------------------------------------------------------

def test_a_run_checkpoint_goes_to_mmaction2_and_back_with_its_shifts(tmp_path):
    data = make_dataset(tmp_path / "data", train=8, val=4, frames=8, size=32, shards=1)
    run = tmp_path / "run"
    res = run_module("trainer", tiny_args(run, data, shift_placement="block", no_test=True), trainer_env(),
                     cwd=str(REPO), timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    ckpt = list_epoch_checkpoints(run)[-1]
    env = trainer_env()
    mm = run_module("trainer.models.interop", ["convert", str(ckpt), str(tmp_path / "mm.pth"), "--to", "mmaction2"], env)
    assert mm.returncode == 0, mm.stderr
    assert "mmaction2 layout (pt), 8 shifted blocks, from" in mm.stdout and "assumed" not in mm.stdout
    keys = torch.load(tmp_path / "mm.pth", weights_only=True)["state_dict"]
    assert "backbone.layer1.0.net.conv1.conv.weight" in keys and "cls_head.fc_cls.weight" in keys
    back = run_module("trainer.models.interop", ["convert", str(tmp_path / "mm.pth"), str(tmp_path / "back.safetensors"),
                                          "--to", "summit"], env)
    assert back.returncode == 0, back.stderr
    sd, info = interop.load_checkpoint_any(tmp_path / "back.safetensors")
    assert same(sd, torch.load(ckpt, weights_only=True)["model"])
    assert info["placement"] == "block" and len(info["shifted"]) == 8


def convert(capsys, *args: str) -> subprocess.CompletedProcess:
    """The convert command's own entry (``main``) in this process, its exit code and output as a process's.

    Why not a process: the command's entry point as a process is run by
    test_a_run_checkpoint_goes_to_mmaction2_and_back_with_its_shifts and by every case of
    tests/model/test_bad_input_interop.py; the tests here check what a conversion writes and says, and a process
    would only add a torch start-up to each.
    """
    capsys.readouterr()
    rc = interop.main(["convert", *args])
    out = capsys.readouterr()
    return subprocess.CompletedProcess(["convert", *args], rc, out.out, out.err)


def test_convert_of_a_bare_state_dict_says_it_assumed_the_default_shifts(tmp_path, capsys):
    torch.save(build_model("resnet18", 3, width=0.125).state_dict(), tmp_path / "bare.pt")
    res = convert(capsys, str(tmp_path / "bare.pt"), str(tmp_path / "t.pth"), "--to", "tsm", "--no-shift")
    assert res.returncode == 0 and "0 shifted blocks" in res.stdout and "assumed" not in res.stdout
    res = convert(capsys, str(tmp_path / "bare.pt"), str(tmp_path / "u.pth"), "--to", "tsm")
    assert res.returncode == 0 and "8 shifted blocks" in res.stdout and "defaults were assumed" in res.stdout
    assert "module.new_fc.weight" in torch.load(tmp_path / "u.pth", weights_only=True)["state_dict"]


def test_convert_keeps_epoch_and_best_top1_in_the_official_units(tmp_path, capsys):
    """This trainer's best_top1 is a fraction (-1 before any validation); TSM's best_prec1 is percent."""
    from trainer.loop.checkpoint import save
    model = build_model("resnet18", 3, width=0.125)
    args = {"arch": "resnet18", "width": 0.125, "shift": True, "shift_placement": "blockres", "shift_blocks": "all"}
    for best, want in ((0.625, 62.5), (-1.0, 0.0)):
        path = save(tmp_path / "run", {"model": model.state_dict(), "best_top1": best, "epoch": 2, "step": 8,
                                       "args": args}, step=8, keep=1)
        out = tmp_path / f"tsm{best}.pth"
        res = convert(capsys, str(path), str(out), "--to", "tsm")
        assert res.returncode == 0, res.stderr
        ckpt = torch.load(out, weights_only=True)
        assert (ckpt["epoch"], ckpt["best_prec1"], ckpt["arch"]) == (2, want, "resnet18")
    res = convert(capsys, str(tmp_path / "tsm0.625.pth"), str(tmp_path / "s.pt"), "--to", "summit")
    assert res.returncode == 0, res.stderr
    meta = torch.load(tmp_path / "s.pt", weights_only=True)["meta"]
    assert (meta["epoch"], meta["best_prec1"], meta["placement"]) == (2, 62.5, "blockres")
