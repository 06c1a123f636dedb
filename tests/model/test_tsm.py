"""Temporal shift against a straightforward reference written from the official description."""
import pytest
import torch


from trainer.models import tsm
from trainer.models.tsm import TemporalShift, temporal_shift

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def reference_shift(x: torch.Tensor, t: int, fold_div: int = 8) -> torch.Tensor:
    """Loop version of the official semantics: (N*T, C, H, W), clip-major; channels
    [0, fold) of frame i take frame i+1 (last frame: zeros), channels [fold, 2 fold)
    take frame i-1 (first frame: zeros), the rest stay."""
    nt, c = x.shape[:2]
    fold = c // fold_div
    out = torch.zeros_like(x)
    for clip in range(nt // t):
        for i in range(t):
            row = clip * t + i
            for ch in range(c):
                if ch < fold:
                    if i + 1 < t:
                        out[row, ch] = x[row + 1, ch]
                elif ch < 2 * fold:
                    if i - 1 >= 0:
                        out[row, ch] = x[row - 1, ch]
                else:
                    out[row, ch] = x[row, ch]
    return out


SHAPES = [(1, 8, 8, 3, 3), (2, 8, 16, 4, 5), (3, 4, 24, 2, 2), (2, 3, 64, 1, 1), (1, 1, 8, 2, 2)]


@pytest.mark.parametrize("n,t,c,h,w", SHAPES)
def test_matches_reference(n, t, c, h, w):
    torch.manual_seed(n * 100 + t * 10 + c)
    x = torch.randn(n * t, c, h, w)
    got = temporal_shift(x, t)
    assert torch.equal(got, reference_shift(x, t))
    # channels_last input gives the same values
    assert torch.equal(temporal_shift(x.contiguous(memory_format=torch.channels_last), t), got)


def test_zero_padding_and_clip_boundaries():
    """The shift never leaks frames across clips: the last frame of clip 0 gets zeros, not clip 1's frame 0."""
    t, c = 4, 8
    x = torch.arange(2 * t, dtype=torch.float32).view(2 * t, 1, 1, 1).repeat(1, c, 1, 1) + 1
    y = temporal_shift(x, t)
    assert y[t - 1, 0].item() == 0 and y[t, 1].item() == 0  # ends of clip 0 and start of clip 1
    assert y[0, 0].item() == 2 and y[1, 1].item() == 1  # fold 0 from t+1, fold 1 from t-1
    assert torch.equal(y[:, 2:], x[:, 2:])


def test_no_parameters_and_off_is_identity():
    m = TemporalShift(8)
    assert list(m.parameters()) == [] and list(m.buffers()) == []
    x = torch.randn(16, 8, 2, 2)
    m.enabled = False
    assert m(x) is x


@pytest.mark.parametrize("n,t,c,h,w", SHAPES)
def test_gradient_is_the_reverse_shift(n, t, c, h, w):
    torch.manual_seed(1)
    x = torch.randn(n * t, c, h, w, requires_grad=True)
    g = torch.randn(n * t, c, h, w)
    temporal_shift(x, t).backward(g)
    # The adjoint of a shift: reverse the time axis, shift, reverse back.
    rev = lambda a: a.view(n, t, *a.shape[1:]).flip(1).reshape(n * t, *a.shape[1:])  # noqa: E731
    assert torch.equal(x.grad, rev(reference_shift(rev(g), t)))
    # and it agrees with autograd through the reference implementation
    x2 = x.detach().clone().requires_grad_(True)
    reference_shift(x2, t).backward(g)
    assert torch.equal(x.grad, x2.grad)


def test_rejects_partial_clips():
    with pytest.raises(ValueError):
        temporal_shift(torch.randn(7, 8, 1, 1), 4)


@pytest.mark.parametrize("kernel,stride,channels_last", [(1, 1, False), (3, 2, False), (1, 1, True), (3, 1, True)])
def test_fused_shift_conv_equals_conv_of_shift_with_gradients(kernel, stride, channels_last):
    """shift_conv keeps x instead of the shifted copy for backward: values and both gradients
    must be those of conv(temporal_shift(x))."""
    from trainer.models.tsm import shift_conv

    torch.manual_seed(0)
    conv = torch.nn.Conv2d(16, 8, kernel, stride, kernel // 2, bias=False).double()
    x = torch.randn(2 * 4, 16, 6, 6, dtype=torch.float64)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    x1 = x.clone().requires_grad_(True)
    ref = conv(temporal_shift(x1, 4, 8))
    g = torch.randn_like(ref)
    ref.backward(g)
    ref_gx, ref_gw = x1.grad.clone(), conv.weight.grad.clone()
    conv.weight.grad = None
    x2 = x.clone().requires_grad_(True)
    out = shift_conv(x2, conv, 4, 8)
    out.backward(g)
    assert torch.allclose(out, ref, atol=1e-12)
    assert torch.allclose(x2.grad, ref_gx, atol=1e-12)
    assert torch.allclose(conv.weight.grad, ref_gw, atol=1e-12)
    from trainer.models.tsm import _ShiftConv

    def fused(a, w):
        return _ShiftConv.apply(a, w, 4, 8, (stride, stride), (kernel // 2, kernel // 2))

    # gradcheck perturbs every input element in turn: on 3x3 frames (two clips of 4 frames, the same
    # channels, kernel, stride and layout) it checks the same backward as on 6x6, at a fifth of the cost
    small = torch.randn(2 * 4, 16, 3, 3, dtype=torch.float64)
    if channels_last:
        small = small.contiguous(memory_format=torch.channels_last)
    inputs = (small.requires_grad_(True), conv.weight.detach().clone().requires_grad_(True))
    assert torch.autograd.gradcheck(fused, inputs)


def test_fused_shift_conv_under_autocast_matches_the_unfused_path():
    """Under bf16 autocast (CPU here, fp16/bf16 on GPU) the fused step casts like autograd would:
    same output dtype and values, fp32 gradients for the fp32 input and weight."""
    from trainer.models.tsm import shift_conv

    torch.manual_seed(1)
    conv = torch.nn.Conv2d(16, 8, 1, bias=False)
    x = torch.randn(8, 16, 6, 6)
    res = []
    for fused in (True, False):
        conv.weight.grad = None
        a = x.clone().requires_grad_(True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = shift_conv(a, conv, 4, 8) if fused else conv(temporal_shift(a, 4, 8))
        out.float().square().sum().backward()
        res.append((out, a.grad, conv.weight.grad.clone()))
    (o1, gx1, gw1), (o2, gx2, gw2) = res
    assert o1.dtype == o2.dtype == torch.bfloat16
    assert gx1.dtype == torch.float32 and gw1.dtype == torch.float32
    assert torch.equal(o1, o2)
    assert torch.allclose(gx1, gx2, rtol=0, atol=1e-6) and torch.allclose(gw1, gw2, rtol=0, atol=1e-6)


@pytest.mark.parametrize("n,t,c", [(3, 4, 16), (2, 8, 24), (2, 1, 16)])
def test_cpu_1x1_kernel_equals_conv_of_shift_with_gradients(n, t, c):
    """The CPU 1x1 path (products that read frame t+-1 in place, no shifted copy): values and both
    gradients are those of conv(temporal_shift(x)) across clip boundaries, and with the shift off
    those of the plain conv; gradcheck on the function itself."""
    from trainer.models.tsm import _ShiftConv1x1, conv_1x1, shift_conv

    torch.manual_seed(2)
    conv = torch.nn.Conv2d(c, 8, 1, bias=False).double()
    x = torch.randn(n * t, c, 3, 2, dtype=torch.float64)
    g = torch.randn(n * t, 8, 3, 2, dtype=torch.float64)
    for fused, unfused in ((lambda a: shift_conv(a, conv, t, 8), lambda a: conv(temporal_shift(a, t, 8))),
                           (lambda a: conv_1x1(a, conv, t), conv)):
        res = []
        for fn in (fused, unfused):
            conv.weight.grad = None
            a = x.clone().requires_grad_(True)
            out = fn(a)
            out.backward(g)
            res.append((out.detach(), a.grad, conv.weight.grad.clone(), type(out.grad_fn).__name__))
        (o1, gx1, gw1, node), (o2, gx2, gw2, _) = res
        assert node == "_ShiftConv1x1Backward"  # the kernel under test ran
        assert torch.allclose(o1, o2, atol=1e-12)
        assert torch.allclose(gx1, gx2, atol=1e-12)
        assert torch.allclose(gw1, gw2, atol=1e-12)
    w = conv.weight.detach().clone().requires_grad_(True)
    # the kernel sees a frame as one row of h * w pixels: 1 x 2 frames check it as 3 x 2 do, at a third
    # of gradcheck's cost (one perturbation per input element)
    small = x[:, :, :1, :].contiguous()
    for fold in (0, c // 8):
        assert torch.autograd.gradcheck(lambda a, b: _ShiftConv1x1.apply(a, b, t, fold),
                                        (small.clone().requires_grad_(True), w))


def test_cpu_1x1_kernel_is_not_used_where_it_does_not_apply():
    """channels_last, autocast and strided 1x1 convs keep the convolution path (and its tests)."""
    from trainer.models.tsm import shift_conv

    conv = torch.nn.Conv2d(16, 8, 1, bias=False)
    x = torch.randn(8, 16, 6, 6)
    assert type(shift_conv(x.requires_grad_(), conv, 4).grad_fn).__name__ == "_ShiftConv1x1Backward"
    cl = x.detach().contiguous(memory_format=torch.channels_last).requires_grad_()
    assert type(shift_conv(cl, conv, 4).grad_fn).__name__ == "_ShiftConvBackward"
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert type(shift_conv(x, conv, 4).grad_fn).__name__ == "_ShiftConvBackward"
    strided = torch.nn.Conv2d(16, 8, 1, 2, bias=False)
    assert type(shift_conv(x, strided, 4).grad_fn).__name__ == "_ShiftConvBackward"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "strided"])
def test_one_pass_shift_is_bit_exact_in_every_dtype_and_layout(dtype, layout):
    """A data movement: the same bits as the reference in every dtype, for either memory format and for a
    view that is neither (made contiguous first); channels_last comes back channels_last."""
    torch.manual_seed(3)
    n, t, c, h, w = 2, 8, 32, 5, 3
    x = torch.randn(n * t, c, h, w).to(dtype)
    ref = reference_shift(x.float(), t).to(dtype)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    elif layout == "strided":
        x = torch.randn(n * t, c, h, 2 * w).to(dtype)[..., ::2]
        ref = reference_shift(x.float(), t).to(dtype)
    for reverse in (False, True):
        got = tsm._shift(x, t, 8, reverse)
        want = ref if not reverse else _reverse_reference(x, t)
        assert got.dtype == dtype and torch.equal(got, want)
    if layout == "channels_last":
        assert tsm._shift(x, t, 8, False).is_contiguous(memory_format=torch.channels_last)


def _reverse_reference(x: torch.Tensor, t: int) -> torch.Tensor:
    """The backward's shift: the time axis reversed, shifted, reversed back."""
    nt = x.shape[0]
    rev = lambda a: a.reshape(nt // t, t, *a.shape[1:]).flip(1).reshape(nt, *a.shape[1:])  # noqa: E731
    return rev(reference_shift(rev(x.float()), t)).to(x.dtype)


@pytest.mark.parametrize("channels_last", [False, True], ids=["contiguous", "channels_last"])
def test_the_eager_shift_is_one_gather_and_the_clip_end_zeros(channels_last):
    """What the eager shift runs, from torch's profiler: one index_select (contiguous) or gather
    (channels_last) over the whole tensor, two zero fills of the clip ends, and no copy of it."""
    from torch.profiler import ProfilerActivity, profile
    x = torch.randn(4 * 8, 64, 7, 7)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    tsm._shift(x, 8, 8, False)   # the index is built and cached on the first call
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        tsm._shift(x, 8, 8, False)
    ops = [e.key for e in prof.key_averages()]
    counts = {e.key: e.count for e in prof.key_averages()}
    moves = [op for op in ops if op in ("aten::index_select", "aten::gather", "aten::copy_", "aten::cat",
                                        "aten::index", "aten::index_put_", "aten::clone", "aten::contiguous")]
    assert moves == ["aten::gather" if channels_last else "aten::index_select"], ops
    assert counts[moves[0]] == 1 and counts.get("aten::zero_") == 2, counts
