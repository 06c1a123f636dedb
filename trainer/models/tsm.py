"""Temporal shift (TSM, Lin et al.) with the official repository's semantics.

Why a custom autograd function: the shift is a pure data movement, so its
gradient is the same movement in the opposite direction. Writing the backward
out explicitly costs one output allocation per pass instead of the three
slice-copy nodes autograd would record, which keeps the shift's share of a
training step to memory traffic only (bench/shift_cost.py measures it).

Layout: the input is ``(N*T, C, H, W)`` with clips laid out clip-major (the T
frames of clip 0, then those of clip 1, ...). Channels ``[0, fold)`` of frame
t take frame t+1's values (the last frame gets zeros), channels
``[fold, 2*fold)`` take frame t-1's values (frame 0 gets zeros), the rest are
unchanged; ``fold = C // fold_div``.
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

from trainer.dist import compat


def _shift(x: torch.Tensor, n_segment: int, fold_div: int, reverse: bool) -> torch.Tensor:
    nt, c, h, w = x.shape
    if nt % n_segment:
        raise ValueError(f"batch of {nt} frames is not a whole number of {n_segment}-frame clips")
    fold = c // fold_div
    v = x.view(nt // n_segment, n_segment, c, h, w)
    if compat.is_compiling():
        return _shift_padded(v, fold, reverse).view(nt, c, h, w)
    return _shift_one_pass(x, n_segment, fold, reverse)


def _shift_one_pass(x: torch.Tensor, t: int, fold: int, reverse: bool) -> torch.Tensor:
    """The shift as one gather over a precomputed index, then the clip ends' zeros.

    Why: the shift written as slice copies is five kernels, and in channels_last (the GPU layout) each
    copies runs of ``fold`` channels at a stride of C, which is where an eager step lost 1.20x against
    the 2D network. One gather reads every element it needs once and writes every output element once
    (the 2 * fold / (T * C) of them at the clip ends, which get zeros, are written twice: the gather
    puts a frame's own values there first). A pure data movement, so it equals the reference bit for
    bit in every dtype (tests/model/test_tsm.py).

    Contiguous (NCHW): rows of H*W values, one per (frame, channel), selected by ``index_select`` with the
    batch's row index, made at each call from the cached one of a clip (T*C integers, whatever the batch).
    channels_last: ``gather`` along the frame axis of the (clips, T, H*W, C) view, with an index of
    (1, T, 1, C) expanded (no memory per element). Other layouts are made contiguous first.
    """
    nt, c, h, w = x.shape
    channels_last = not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last)
    if not channels_last and not x.is_contiguous():
        x = x.contiguous()
    index = _shift_index(c, t, fold, reverse, channels_last, x.device)
    clips = nt // t
    if channels_last:
        out = torch.empty_like(x, memory_format=torch.channels_last)
        src = x.permute(0, 2, 3, 1).view(clips, t, h * w, c)
        dst = out.permute(0, 2, 3, 1).view(clips, t, h * w, c)
        torch.gather(src, 1, index.expand(clips, t, h * w, c), out=dst)
        ends = dst
    else:
        # the batch's rows from the clip's (index_select along the first dimension: the fast copy of whole rows)
        batch_rows = (torch.arange(0, nt * c, t * c, device=x.device).view(clips, 1) + index).view(-1)
        out = torch.index_select(x.view(nt * c, h * w), 0, batch_rows).view(nt, c, h, w)
        ends = out.view(clips, t, c, h * w).transpose(2, 3)   # (clips, T, H*W, C), as above
    if fold:
        first, last = (0, t - 1) if reverse else (t - 1, 0)   # the frame whose fold-0 (fold-1) values are zeros
        ends[:, first, :, :fold].zero_()
        ends[:, last, :, fold:2 * fold].zero_()
    return out


@functools.lru_cache(maxsize=64)
def _shift_index(c: int, t: int, fold: int, reverse: bool, channels_last: bool,
                 device: torch.device) -> torch.Tensor:
    """The source frame of each (frame, channel), shaped (1, T, 1, C) for the channels_last gather; else the
    source row of each (frame, channel) row of one contiguous clip, T*C of them, for index_select.
    Clip-end positions point at their own frame (their zeros are written after). Cached per shape: the
    index is built on the host once, not at every step, and it is one clip's (T*C integers), so a batch
    size or a multigrid shape adds no large tensor to the cache."""
    step = torch.zeros(c, dtype=torch.long)
    step[:fold], step[fold:2 * fold] = (-1, 1) if reverse else (1, -1)   # fold 0 reads t+1 (forward)
    src = (torch.arange(t).view(t, 1) + step.view(1, c)).clamp_(0, t - 1)   # (T, C)
    if channels_last:
        return src.view(1, t, 1, c).to(device)
    return (src * c + torch.arange(c).view(1, c)).reshape(-1).to(device)


def _shift_padded(v: torch.Tensor, fold: int, reverse: bool) -> torch.Tensor:
    """``_shift`` of clip-major frames ``v`` (N, T, C, H, W) as padded slices joined by one ``cat``.

    Why a second form: under torch.compile (inductor, torch 2.13) the slice
    writes into ``torch.empty_like`` came out as NaN once the shift sat in a
    graph of two or more residual blocks (each block alone was right), while
    this form compiles to the same values. Eagerly the slice writes stay: they
    are about 5% faster on a CPU (no padded temporaries).
    """
    back, fwd = v[:, :, :fold], v[:, :, fold:2 * fold]
    end, start = (0, 0, 0, 0, 0, 0, 0, 1), (0, 0, 0, 0, 0, 0, 1, 0)  # one zero frame after / before
    if not reverse:  # fold 0: out[t] = x[t+1]; fold 1: out[t] = x[t-1]
        back, fwd = F.pad(back[:, 1:], end), F.pad(fwd[:, :-1], start)
    else:
        back, fwd = F.pad(back[:, :-1], start), F.pad(fwd[:, 1:], end)
    return torch.cat((back, fwd, v[:, :, 2 * fold:]), dim=2)


class _TemporalShift(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, n_segment: int, fold_div: int):  # type: ignore[override]
        ctx.n_segment, ctx.fold_div = n_segment, fold_div
        return _shift(x, n_segment, fold_div, reverse=False)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        return _shift(grad.contiguous(memory_format=_format(grad)), ctx.n_segment, ctx.fold_div, reverse=True), None, None


def _format(t: torch.Tensor) -> torch.memory_format:
    return torch.channels_last if t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last) \
        and not t.is_contiguous() else torch.contiguous_format


def temporal_shift(x: torch.Tensor, n_segment: int, fold_div: int = 8) -> torch.Tensor:
    """Shift 1/fold_div of the channels one frame back and 1/fold_div one frame forward."""
    if x.dim() != 4:
        raise ValueError(f"temporal_shift expects (N*T, C, H, W), got shape {tuple(x.shape)}")
    return _TemporalShift.apply(x, n_segment, fold_div)


class TemporalShift(nn.Module):
    """The shift as a module, placed on the residual branch before conv1 ("blockres").

    Holds no parameters: it can be switched off (``enabled = False``) to get the
    TSN 2D baseline with the very same weights and FLOPs.
    """

    def __init__(self, n_segment: int, fold_div: int = 8, enabled: bool = True):
        super().__init__()
        self.n_segment = n_segment
        self.fold_div = fold_div
        self.enabled = enabled

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.enabled:
            return x
        return temporal_shift(x, self.n_segment, self.fold_div)

    def extra_repr(self) -> str:
        return f"n_segment={self.n_segment}, fold_div={self.fold_div}, enabled={self.enabled}"


class _ShiftConv(torch.autograd.Function):
    """conv(shift(x)) that keeps only ``x`` for the backward pass, not the shifted copy.

    Why: on the residual branch ("blockres") the shifted tensor is a second
    full-size activation per block that conv would otherwise hold until the
    backward pass, while ``x`` is held anyway (by the previous block's ReLU or
    the downsample conv). The price is one more copy per block in backward
    (the shift recomputed); on CPU the step time did not change measurably
    (bench/shift_cost.py), and TSM's activation memory becomes the 2D
    network's (a test compares the saved bytes).
    """

    @staticmethod
    def forward(ctx, x, weight, n_segment: int, fold_div: int, stride, padding):  # type: ignore[override]
        ctx.n_segment, ctx.fold_div, ctx.stride, ctx.padding = n_segment, fold_div, stride, padding
        dev = x.device.type
        # Under autocast, conv runs in the autocast dtype; casting here (and again in backward)
        # does what autograd's cast nodes would do, since a custom Function sees no autocast in backward.
        ctx.cast = compat.autocast_dtype(dev)
        ctx.save_for_backward(x, weight)
        xs, w = _shift(x, n_segment, fold_div, reverse=False), weight
        if ctx.cast is not None:
            xs, w = xs.to(ctx.cast), w.to(ctx.cast)
        with torch.autocast(dev, enabled=False):
            return F.conv2d(xs, w, None, stride, padding)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        x, weight = ctx.saved_tensors
        xs, w = _shift(x, ctx.n_segment, ctx.fold_div, reverse=False), weight
        if ctx.cast is not None:
            xs, w, grad = xs.to(ctx.cast), w.to(ctx.cast), grad.to(ctx.cast)
        gx, gw, _ = torch.ops.aten.convolution_backward(
            grad, xs, w, None, list(ctx.stride), list(ctx.padding), [1, 1], False, [0, 0], 1,
            [ctx.needs_input_grad[0], ctx.needs_input_grad[1], False])
        if gx is not None:
            gx = _shift(gx.contiguous(memory_format=_format(gx)), ctx.n_segment, ctx.fold_div, reverse=True)
            gx = gx.to(x.dtype)
        if gw is not None:
            gw = gw.to(weight.dtype)
        return gx, gw, None, None, None, None


class _ShiftConv1x1(torch.autograd.Function):
    """1x1 conv of the shifted input as batched matrix products that read the shifted frames in place.

    Why: a 1x1 conv works frame by frame, so ``conv(shift(x))`` is the product of
    the unshifted channels with their weight columns plus, for each of the two
    shifted folds, the product of frame t+-1's channels written into frame t.
    No shifted copy of ``x`` is made, forward or backward (the copy is what the
    shift costs on a CPU: bench/shift_cost.py). CPU only, NCHW-contiguous fp32/fp64
    outside autocast; ``fold = 0`` is the plain 1x1 conv through the same code, so
    that the network without the shift differs from TSM by the shift alone.
    """

    @staticmethod
    def forward(ctx, x, weight, n_segment: int, fold: int):  # type: ignore[override]
        ctx.n_segment, ctx.fold = n_segment, fold
        ctx.save_for_backward(x, weight)
        nt, c, h, w = x.shape  # nt is a whole number of clips: the callers check
        cout, f, t = weight.shape[0], fold, n_segment
        xm, wm = x.view(nt, c, h * w), weight.reshape(cout, c)
        # Zeroed, not empty: torch 2.0's CPU baddbmm_ with beta=0 still multiplies the old values
        # (0 * NaN = NaN) for small products, so garbage in fresh memory could reach the output.
        y = torch.zeros(nt, cout, h * w, dtype=x.dtype, device=x.device)
        y.baddbmm_(wm[:, 2 * f:].expand(nt, cout, c - 2 * f), xm[:, 2 * f:], beta=0)
        if f:
            yv, xv = y.view(nt // t, t, cout, h * w), xm.view(nt // t, t, c, h * w)
            wa, wb = wm[:, :f].expand(t - 1, cout, f), wm[:, f:2 * f].expand(t - 1, cout, f)
            for b in range(nt // t):
                yv[b, :-1].baddbmm_(wa, xv[b, 1:, :f])  # fold 0: frame t reads frame t+1
                yv[b, 1:].baddbmm_(wb, xv[b, :-1, f:2 * f])  # fold 1: frame t reads frame t-1
        return y.view(nt, cout, h, w)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        x, weight = ctx.saved_tensors
        nt, c, h, w = x.shape
        cout, f, t = weight.shape[0], ctx.fold, ctx.n_segment
        xm, wm = x.view(nt, c, h * w), weight.reshape(cout, c)
        g = grad.contiguous().view(nt, cout, h * w)
        gv, xv = g.view(nt // t, t, cout, h * w), xm.view(nt // t, t, c, h * w)
        gx = gw = None
        if ctx.needs_input_grad[0]:
            wt = wm.t()
            # Zeroed (see forward): frame 0's fold-0 values were read by no frame, nor the last
            # frame's fold-1 values, so those stay zero.
            gxm = torch.zeros_like(xm)
            gxm[:, 2 * f:].baddbmm_(wt[2 * f:].expand(nt, c - 2 * f, cout), g, beta=0)
            if f:
                gxv = gxm.view(nt // t, t, c, h * w)
                wa, wb = wt[:f].expand(t - 1, f, cout), wt[f:2 * f].expand(t - 1, f, cout)
                for b in range(nt // t):
                    gxv[b, 1:, :f].baddbmm_(wa, gv[b, :-1], beta=0)
                    gxv[b, :-1, f:2 * f].baddbmm_(wb, gv[b, 1:], beta=0)
            gx = gxm.view(nt, c, h, w)
        if ctx.needs_input_grad[1]:
            # One product per frame accumulated in place: a single product over all frames would
            # need frame-major copies of both operands.
            gwm = torch.zeros(cout, c, dtype=weight.dtype, device=weight.device)
            for n in range(nt):
                gwm[:, 2 * f:].addmm_(g[n], xm[n, 2 * f:].t())
            if f:
                for b in range(nt // t):
                    for i in range(t - 1):
                        gwm[:, :f].addmm_(gv[b, i], xv[b, i + 1, :f].t())
                        gwm[:, f:2 * f].addmm_(gv[b, i + 1], xv[b, i, f:2 * f].t())
            gw = gwm.view_as(weight)
        return gx, gw, None, None


#: Route eligible 1x1 convs on the residual branch through ``_ShiftConv1x1`` (bench/shift_cost.py
#: turns it off to compare against the library convolution).
CPU_GEMM_1X1 = True


def _gemm_1x1_ok(x: torch.Tensor, conv: nn.Conv2d, n_segment: int) -> bool:
    """Whether ``_ShiftConv1x1`` applies (partial clips go to the paths that report them)."""
    return (CPU_GEMM_1X1 and x.device.type == "cpu" and x.dim() == 4 and x.shape[0] % n_segment == 0
            and x.is_contiguous()
            and x.dtype in (torch.float32, torch.float64) and x.dtype == conv.weight.dtype
            and not compat.autocast_enabled("cpu") and conv.bias is None and conv.groups == 1
            and tuple(conv.kernel_size) == (1, 1) and tuple(conv.stride) == (1, 1)
            and tuple(conv.padding) == (0, 0) and tuple(conv.dilation) == (1, 1))


def conv_1x1(x: torch.Tensor, conv: nn.Conv2d, n_segment: int) -> torch.Tensor:
    """``conv(x)`` through the same code as the fused shift where that applies (the network without the shift)."""
    if _gemm_1x1_ok(x, conv, n_segment):
        return _ShiftConv1x1.apply(x, conv.weight, n_segment, 0)
    return conv(x)


def shift_conv(x: torch.Tensor, conv: nn.Conv2d, n_segment: int, fold_div: int = 8) -> torch.Tensor:
    """``conv(temporal_shift(x))`` for a bias-free, ungrouped, undilated conv, without saving the shifted copy."""
    if conv.bias is not None or conv.groups != 1 or tuple(conv.dilation) != (1, 1) or x.dim() != 4:
        return conv(temporal_shift(x, n_segment, fold_div))
    if _gemm_1x1_ok(x, conv, n_segment):
        return _ShiftConv1x1.apply(x, conv.weight, n_segment, x.shape[1] // fold_div)
    return _ShiftConv.apply(x, conv.weight, n_segment, fold_div, tuple(conv.stride), tuple(conv.padding))
