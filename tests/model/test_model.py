"""The model matches the paper's Table 1, and its parts behave as the recipe says."""
import pytest
import torch

from trainer.models.model import TSMResNet, build_model, count_macs, count_params, param_groups
from trainer.models.tsm import TemporalShift


@pytest.fixture(scope="module")
def r50():
    return build_model("resnet50", num_classes=400, num_segments=8).eval()


def test_resnet50_tsm_parameters(r50):
    assert abs(count_params(r50) - 24.3e6) <= 0.1e6, count_params(r50)


def test_resnet50_tsm_macs_per_clip(r50):
    macs = count_macs(r50, torch.randn(1, 8, 3, 224, 224))
    assert abs(macs - 33e9) <= 1e9, macs


def test_shift_everywhere_in_blockres(r50):
    shifts = [m for m in r50.modules() if isinstance(m, TemporalShift)]
    assert len(shifts) == 16  # one per bottleneck (3 + 4 + 6 + 3)
    assert all(s.n_segment == 8 and s.fold_div == 8 for s in shifts)


def test_shift_changes_output_and_off_is_frame_independent():
    torch.manual_seed(0)
    m = build_model("resnet18", 5, 4, width=0.125).eval()
    for mod in m.modules():  # make the residual branches matter (zero-init BN hides them)
        if isinstance(mod, torch.nn.BatchNorm2d):
            torch.nn.init.uniform_(mod.weight, 0.5, 1.5)
    x = torch.randn(2, 4, 3, 32, 32)
    perm = x[:, [2, 0, 3, 1]]
    with torch.no_grad():
        on, on_perm = m(x), m(perm)
        m.set_shift(False)
        off, off_perm = m(x), m(perm)
    # Without shift the network is a per-frame 2D net + average: frame order cannot matter.
    assert torch.allclose(off, off_perm, atol=1e-5)
    assert not torch.allclose(on, on_perm, atol=1e-4)
    assert on.shape == (2, 5)


def test_block_placement_and_folded_input():
    m = build_model("resnet18", 3, 2, width=0.125, placement="block").eval()
    x = torch.randn(2, 2, 3, 32, 32)
    with torch.no_grad():
        assert torch.allclose(m(x), m(x.view(4, 3, 32, 32)))
    with pytest.raises(ValueError):
        build_model(placement="sideways")


def test_no_weight_decay_on_bn_and_bias():
    m = build_model("resnet18", 3, 2, width=0.125)
    decay, no_decay = param_groups(m, 1e-4)
    assert decay["weight_decay"] == 1e-4 and no_decay["weight_decay"] == 0.0
    ids = {id(p) for p in no_decay["params"]}
    assert id(m.fc.bias) in ids and id(m.bn1.weight) in ids and id(m.bn1.bias) in ids
    assert id(m.fc.weight) not in ids and id(m.conv1.weight) not in ids
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(m.parameters()))


def test_no_dropout_by_default():
    assert not any(isinstance(x, torch.nn.Dropout) for x in TSMResNet("resnet18", width=0.125).modules())


def test_blockres_model_matches_the_unfused_shift_then_conv():
    """The model's fused shift+conv1 changes memory use, not the function: logits and every
    parameter gradient equal those of conv1(temporal_shift(x)) written out."""
    import trainer.models.model as model_mod
    from trainer.models.tsm import temporal_shift

    torch.manual_seed(0)
    for arch in ("resnet18", "resnet50"):
        m = build_model(arch=arch, num_classes=5, num_segments=4, width=0.125).double()
        x = torch.randn(2 * 4, 3, 32, 32, dtype=torch.float64)

        def grads():
            m.zero_grad()
            out = m(x)
            out.square().sum().backward()
            return out.detach(), [p.grad.clone() for p in m.parameters()]

        fused_out, fused_g = grads()
        orig = model_mod.BasicBlock._conv1
        model_mod.BasicBlock._conv1 = lambda self, a: self.conv1(
            temporal_shift(a, self.shift.n_segment, self.shift.fold_div) if self.shift is not None else a)
        try:
            ref_out, ref_g = grads()
        finally:
            model_mod.BasicBlock._conv1 = orig
        assert torch.allclose(fused_out, ref_out, atol=1e-10)
        assert all(torch.allclose(a, b, atol=1e-10) for a, b in zip(fused_g, ref_g))


def test_the_shift_keeps_no_extra_activation_for_backward():
    """With blockres, TSM holds the same activations for the backward pass as the 2D network
    (the shifted copy is recomputed, not kept): the memory a V100 has for 8 clips is not eaten by it."""
    m = build_model("resnet50", num_classes=10, num_segments=4, width=0.25)
    x = torch.randn(4, 3, 64, 64)

    def saved_bytes():
        seen = {}

        def pack(t):
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            m(x)
        return sum(seen.values())

    m.set_shift(True)
    with_shift = saved_bytes()
    m.set_shift(False)
    assert with_shift == saved_bytes()
