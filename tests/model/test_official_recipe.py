"""The model details of the official TSM recipe, checked against rules re-derived from its code.

Compared against github.com/mit-han-lab/temporal-shift-module (master):

- ``ops/temporal_shift.py``, ``make_temporal_shift``: with ``place == 'block'`` every
  block of every stage of a torchvision ResNet is wrapped by the shift; with
  ``'blockres'`` the shift goes before each block's ``conv1``, and when ``layer3``
  has 23 or more blocks (resnet101/152) only block ``i`` of each stage with
  ``i % n_round == 0``, ``n_round = 2`` (otherwise 1). ``official_shifted`` below
  states that rule again, independently of ``trainer.models.model``.
- ``ops/models.py``, ``TSN._prepare_tsn``: the classifier weight is drawn from
  N(0, 0.001) and its bias set to 0, with or without dropout before it.
- ``ops/models.py``, ``TSN.get_optim_policies`` with ``fc_lr5``: the ``nn.Linear``
  weight in a group of ``lr_mult`` 5 with weight decay (``decay_mult`` 1), its bias
  in a group of ``lr_mult`` 10 without (``decay_mult`` 0); ``main.py``'s
  ``adjust_learning_rate`` sets each group's LR to ``lr * lr_mult``. (The official
  groups also give conv biases ``lr_mult`` 2; this trainer's convs have no bias and
  its other groups keep ``lr_mult`` 1.)
"""
from __future__ import annotations

from typing import List

import pytest
import torch
from torch import nn

from trainer.methods.lars import LARS
from trainer.models.model import ARCHS, build_model, count_params, param_groups
from trainer.methods.optim import build_optimizer
from trainer.models.subbn import convert_to_sub_bn
from trainer.models.tsm import TemporalShift

STAGES = ("layer1", "layer2", "layer3", "layer4")


def official_shifted(arch: str, placement: str, shift_blocks: str) -> List[List[bool]]:
    """Per stage, per block: whether the official code (or ``all``) puts a shift in it."""
    depths = ARCHS[arch][1]
    if shift_blocks == "all" or placement == "block":
        return [[True] * d for d in depths]
    n_round = 2 if depths[2] >= 23 else 1
    return [[i % n_round == 0 for i in range(d)] for d in depths]


def model_shifted(model: nn.Module) -> List[List[bool]]:
    """Per stage, per block: whether the block holds a TemporalShift (as its ``shift`` or anywhere inside)."""
    return [[any(isinstance(m, TemporalShift) for m in block.modules()) for block in getattr(model, s)]
            for s in STAGES]


def tiny(arch: str, placement: str = "blockres", shift_blocks: str = "official", shift: bool = True,
         t: int = 4) -> nn.Module:
    torch.manual_seed(0)
    return build_model(arch, 5, t, shift=shift, placement=placement, width=0.125, shift_blocks=shift_blocks)


# -- (a) which blocks carry a shift ---------------------------------------------------------
@pytest.mark.parametrize("shift_blocks", ["official", "all"])
@pytest.mark.parametrize("placement", ["blockres", "block"])
@pytest.mark.parametrize("arch", ["resnet50", "resnet101", "resnet152"])
def test_shift_placement_is_the_official_rule(arch, placement, shift_blocks):
    got = model_shifted(tiny(arch, placement, shift_blocks))
    assert got == official_shifted(arch, placement, shift_blocks)


def test_deep_resnets_shift_every_other_block_by_default():
    """The counts the rule gives: R101 2+2+12+2, R152 2+4+18+2 shifted blocks; R50 all 16."""
    counts = {a: sum(isinstance(m, TemporalShift) for m in build_model(a, 5, 4, width=0.125).modules())
              for a in ("resnet50", "resnet101", "resnet152")}
    assert counts == {"resnet50": 16, "resnet101": 18, "resnet152": 26}


def test_unknown_shift_blocks_is_refused():
    with pytest.raises(ValueError, match="sideways"):
        build_model("resnet18", 5, 4, width=0.125, shift_blocks="sideways")


def test_the_default_resnet50_is_unchanged():
    """R50 keeps the paper's Table 1 size (the fc init changes values, not the count)."""
    assert count_params(build_model("resnet50", 400, 8)) == 24_327_632


# -- (b) the shift happens in those blocks and in no other -------------------------------------
def reference_shift(x: torch.Tensor, t: int, fold_div: int = 8) -> torch.Tensor:
    """The official semantics with torch.cat (not trainer.models.tsm): fold 0 from t+1, fold 1 from t-1, zeros at the ends."""
    nt, c, h, w = x.shape
    f = c // fold_div
    v = x.view(nt // t, t, c, h, w)
    z = torch.zeros_like(v[:, :1, :f])
    back = torch.cat([v[:, 1:, :f], z], 1)
    fwd = torch.cat([z, v[:, :-1, f:2 * f]], 1)
    return torch.cat([back, fwd, v[:, :, 2 * f:]], 2).view(nt, c, h, w)


def conv1_inputs_shifted(model: nn.Module, x: torch.Tensor, t: int) -> List[List[bool]]:
    """Per block: whether conv1 worked on the shifted block input (bn1 sees conv1's output).

    Hooks record each block's input and its bn1's input; conv1 of the shifted and of
    the unshifted input are computed here and the recorded value must equal exactly one.
    """
    seen = {}
    hooks = []
    for s in STAGES:
        for i, block in enumerate(getattr(model, s)):
            key = (s, i)
            hooks.append(block.register_forward_pre_hook(lambda m, a, k=key: seen.__setitem__(k, [a[0]])))
            hooks.append(block.bn1.register_forward_pre_hook(lambda m, a, k=key: seen[k].append(a[0])))
    try:
        with torch.no_grad():
            model(x)
            out = []
            for s in STAGES:
                row = []
                for i, block in enumerate(getattr(model, s)):
                    xin, conv_out = seen[(s, i)]
                    shifted = torch.allclose(conv_out, block.conv1(reference_shift(xin, t)), atol=1e-9)
                    plain = torch.allclose(conv_out, block.conv1(xin), atol=1e-9)
                    assert shifted != plain, (s, i, shifted, plain)
                    row.append(shifted)
                out.append(row)
    finally:
        for h in hooks:
            h.remove()
    return out


def lively(model: nn.Module) -> nn.Module:
    """Residual branches that matter (zero-init BN would make every block start as the identity)."""
    torch.manual_seed(1)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            nn.init.uniform_(m.weight, 0.5, 1.5)
    return model.double()


@pytest.mark.parametrize("arch,placement,shift_blocks", [
    ("resnet101", "blockres", "official"), ("resnet101", "blockres", "all"),
    ("resnet152", "blockres", "official"), ("resnet50", "blockres", "official"),
    ("resnet101", "block", "official")])
def test_conv1_sees_the_shifted_input_only_in_shifted_blocks(arch, placement, shift_blocks):
    model = lively(tiny(arch, placement, shift_blocks)).eval()
    x = torch.randn(2, 4, 3, 32, 32, dtype=torch.float64)
    assert conv1_inputs_shifted(model, x, 4) == official_shifted(arch, placement, shift_blocks)
    model.set_shift(False)
    assert conv1_inputs_shifted(model, x, 4) == [[False] * len(getattr(model, s)) for s in STAGES]


def test_set_shift_cannot_turn_on_a_block_built_without_one():
    """The TSN baseline of an R101 (--no-shift) switched on has the official blocks shifted, no more."""
    model = lively(tiny("resnet101", shift=False)).eval()
    x = torch.randn(1, 4, 3, 32, 32, dtype=torch.float64)
    assert not any(any(r) for r in conv1_inputs_shifted(model, x, 4))
    model.set_shift(True)
    assert conv1_inputs_shifted(model, x, 4) == official_shifted("resnet101", "blockres", "official")


def test_multigrid_frames_and_sub_batch_bn_keep_the_placement():
    """set_num_segments reaches the shifted blocks only; sub-batch BN trains through the unshifted ones."""
    model = lively(convert_to_sub_bn(tiny("resnet101"), bn_clips=2, frames=4))
    model.set_num_segments(2)
    assert {m.n_segment for m in model.modules() if isinstance(m, TemporalShift)} == {2}
    model.train()
    x = torch.randn(4, 2, 3, 32, 32, dtype=torch.float64)
    assert conv1_inputs_shifted(model, x, 2) == official_shifted("resnet101", "blockres", "official")
    model.zero_grad()
    model(x).square().sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


# -- (c) the classifier's initialisation -------------------------------------------------------
@pytest.mark.parametrize("dropout", [0.0, 0.5])
def test_fc_init_is_normal_0_001_with_zero_bias(dropout):
    torch.manual_seed(0)
    model = build_model("resnet50", 400, 8, dropout=dropout)
    w, b = model.fc.weight.detach(), model.fc.bias.detach()
    assert w.shape == (400, 2048)
    assert abs(w.std().item() - 0.001) < 0.00002  # 819,200 draws: the std's own error is ~8e-7
    assert abs(w.mean().item()) < 1e-5
    assert torch.equal(b, torch.zeros(400))


def test_fc_init_is_deterministic_under_the_seed():
    def fc(seed):
        torch.manual_seed(seed)
        return build_model("resnet18", 10, 4, width=0.125).fc.weight.detach().clone()
    assert torch.equal(fc(3), fc(3))
    assert not torch.equal(fc(3), fc(4))


# -- (d) the parameter groups ------------------------------------------------------------------
def test_param_groups_with_fc_lr5():
    model = tiny("resnet18")
    groups = param_groups(model, 1e-4, fc_lr5=True)
    by_name = {g["name"]: g for g in groups}
    assert [g["name"] for g in groups] == ["decay", "no_decay", "fc_weight", "fc_bias"]
    assert [p is model.fc.weight for p in by_name["fc_weight"]["params"]] == [True]
    assert [p is model.fc.bias for p in by_name["fc_bias"]["params"]] == [True]
    assert (by_name["fc_weight"]["lr_mult"], by_name["fc_weight"]["weight_decay"]) == (5.0, 1e-4)
    assert (by_name["fc_bias"]["lr_mult"], by_name["fc_bias"]["weight_decay"]) == (10.0, 0.0)
    assert (by_name["decay"]["lr_mult"], by_name["no_decay"]["lr_mult"]) == (1.0, 1.0)
    assert by_name["no_decay"]["weight_decay"] == 0.0
    no_decay = {id(p) for p in by_name["no_decay"]["params"]}
    assert id(model.bn1.weight) in no_decay and id(model.bn1.bias) in no_decay
    ids = [id(p) for g in groups for p in g["params"]]
    assert sorted(ids) == sorted(id(p) for p in model.parameters())  # each exactly once


def test_param_groups_without_fc_lr5_are_the_two_groups_at_lr_mult_1():
    model = tiny("resnet18")
    groups = param_groups(model, 1e-4)
    assert [(g["name"], g["lr_mult"]) for g in groups] == [("decay", 1.0), ("no_decay", 1.0)]
    assert id(model.fc.weight) in {id(p) for p in groups[0]["params"]}
    assert id(model.fc.bias) in {id(p) for p in groups[1]["params"]}


@pytest.mark.parametrize("name", ["sgd", "lars", "adam"])
def test_every_optimizer_starts_each_group_at_lr_times_its_mult(name):
    opt = build_optimizer(name, tiny("resnet18"), 0.1, 0.9, 1e-4, fc_lr5=True)
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([0.1, 0.1, 0.5, 1.0])
    assert [g["lr_mult"] for g in opt.param_groups] == [1.0, 1.0, 5.0, 10.0]


def test_an_optimizer_state_saved_before_lr_mult_loads_without_fc_lr5(tmp_path):
    """A checkpoint of two plain groups (no name, no lr_mult) restores into today's optimiser."""
    model = tiny("resnet18")
    old = torch.optim.SGD([{"params": g["params"], "weight_decay": g["weight_decay"]}
                           for g in param_groups(model, 1e-4)], lr=0.1, momentum=0.9)
    model(torch.randn(1, 4, 3, 32, 32)).sum().backward()
    old.step()
    torch.save({"optimizer": old.state_dict()}, tmp_path / "ckpt.pt")
    opt = build_optimizer("sgd", model, 0.1, 0.9, 1e-4)
    opt.load_state_dict(torch.load(tmp_path / "ckpt.pt", weights_only=True)["optimizer"])
    assert len(opt.param_groups) == 2 and all(g.get("lr_mult", 1.0) == 1.0 for g in opt.param_groups)
    assert all("momentum_buffer" in opt.state[p] for p in model.parameters())


# -- (e) LARS with the fc groups -------------------------------------------------------------
def test_lars_with_fc_lr5_updates_each_group_by_its_rule():
    torch.manual_seed(0)
    model = tiny("resnet18")
    lr, wd, trust = 0.2, 1e-2, 0.001
    opt = build_optimizer("lars", model, lr, 0.9, wd, trust, fc_lr5=True)
    assert isinstance(opt, LARS)
    assert [(g["name"], g["lars"]) for g in opt.param_groups] == [
        ("decay", True), ("no_decay", False), ("fc_weight", True), ("fc_bias", False)]
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    model(torch.randn(2, 4, 3, 32, 32)).logsumexp(1).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    opt.step()
    after = dict(model.named_parameters())

    def lars_step(n, group_lr):
        w, g = before[n], grads[n]
        rate = trust * w.norm() / (g.norm() + wd * w.norm())
        return w - group_lr * rate * (g + wd * w)
    assert torch.allclose(after["fc.weight"], lars_step("fc.weight", 5 * lr), atol=1e-8)
    assert torch.allclose(after["fc.bias"], before["fc.bias"] - 10 * lr * grads["fc.bias"], atol=1e-8)
    assert torch.allclose(after["conv1.weight"], lars_step("conv1.weight", lr), atol=1e-8)
    assert torch.allclose(after["bn1.bias"], before["bn1.bias"] - lr * grads["bn1.bias"], atol=1e-8)
    for _ in range(3):  # and keeps stepping (momentum buffers in all four groups)
        opt.zero_grad()
        model(torch.randn(2, 4, 3, 32, 32)).logsumexp(1).sum().backward()
        opt.step()
    assert all(torch.isfinite(p).all() for p in model.parameters())
