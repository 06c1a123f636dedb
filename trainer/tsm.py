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

import torch
from torch import nn


def _shift(x: torch.Tensor, n_segment: int, fold_div: int, reverse: bool) -> torch.Tensor:
    nt, c, h, w = x.shape
    if nt % n_segment:
        raise ValueError(f"batch of {nt} frames is not a whole number of {n_segment}-frame clips")
    fold = c // fold_div
    v = x.view(nt // n_segment, n_segment, c, h, w)
    out = torch.empty_like(v)
    # "reverse" moves values the other way: used by the backward pass.
    a, b = (slice(1, None), slice(None, -1)) if not reverse else (slice(None, -1), slice(1, None))
    # fold 0: out[t] = x[t+1] (forward); fold 1: out[t] = x[t-1] (forward).
    out[:, b, :fold] = v[:, a, :fold]
    out[:, a, fold:2 * fold] = v[:, b, fold:2 * fold]
    # Zero padding at the clip ends.
    if not reverse:
        out[:, -1:, :fold] = 0
        out[:, :1, fold:2 * fold] = 0
    else:
        out[:, :1, :fold] = 0
        out[:, -1:, fold:2 * fold] = 0
    out[:, :, 2 * fold:] = v[:, :, 2 * fold:]
    return out.view(nt, c, h, w)


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
