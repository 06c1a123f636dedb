"""Sub-batch ("ghost") BatchNorm for multigrid training.

Why: multigrid multiplies the clips per GPU by up to 32 in the small shapes.
If BatchNorm took its statistics over the whole (larger) batch, the
normalisation noise, and with it the regularisation and the learned
statistics, would change with the shape. So in training the batch is split
into groups of a fixed number of clips (8, the paper's per-GPU batch), each
group is normalised with its own statistics, and the running statistics are
the merge of the groups' (mean = average of means; var = average of
(var + mean^2) - mean^2, the statistics of the pooled groups), as PySlowFast's
sub-batch BN aggregates them. In evaluation it is plain BatchNorm.

Frames are folded into the batch clip-major ((N*T, C, H, W), see ``trainer.models.tsm``),
so a group of ``g`` clips is ``g * T`` consecutive rows; the module must know T
(``frames``), which the multigrid loop sets per iteration.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def group_clips(clips: int, bn_clips: int) -> int:
    """Clips per statistics group: ``bn_clips`` when it divides the batch, else the
    largest divisor of the batch below it (never a partial group)."""
    if clips <= bn_clips:
        return clips
    for g in range(bn_clips, 0, -1):
        if clips % g == 0:
            return g
    return 1


class SubBatchNorm2d(nn.BatchNorm2d):
    """BatchNorm2d whose training statistics are per group of ``bn_clips`` clips.

    A subclass (same parameters, buffers and state-dict keys as BatchNorm2d), so
    checkpoints, the no-weight-decay rule and AAVG's BN merge treat it as BN.
    """

    def __init__(self, num_features: int, bn_clips: int = 8, frames: int = 1, **kw):
        super().__init__(num_features, **kw)
        self.bn_clips, self.frames = bn_clips, frames

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or x.dim() != 4 or x.shape[0] % self.frames:
            return super().forward(x)
        b, c, h, w = x.shape
        clips = b // self.frames
        g = group_clips(clips, self.bn_clips)
        groups = clips // g
        if groups == 1:
            return super().forward(x)
        m = g * self.frames
        # (groups*m, C, H, W) -> (m, groups*C, H, W): one BN "channel" per (group, channel).
        xg = x.reshape(groups, m, c, h, w).transpose(0, 1).reshape(m, groups * c, h, w)
        weight = self.weight.repeat(groups) if self.weight is not None else None
        bias = self.bias.repeat(groups) if self.bias is not None else None
        out = F.batch_norm(xg, None, None, weight, bias, True, 0.0, self.eps)
        if self.track_running_stats and self.running_mean is not None:
            with torch.no_grad():
                xs = xg.detach().float()
                mean = xs.mean(dim=(0, 2, 3)).view(groups, c)
                var = xs.var(dim=(0, 2, 3), unbiased=True).view(groups, c)
                new_mean = mean.mean(0)
                new_var = (var + mean * mean).mean(0) - new_mean * new_mean
                self.num_batches_tracked += 1
                mom = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked)
                self.running_mean.mul_(1 - mom).add_(new_mean.to(self.running_mean.dtype), alpha=mom)
                self.running_var.mul_(1 - mom).add_(new_var.to(self.running_var.dtype), alpha=mom)
        out = out.reshape(m, groups, c, h, w).transpose(0, 1).reshape(b, c, h, w)
        return out.contiguous(memory_format=torch.channels_last) if x.is_contiguous(
            memory_format=torch.channels_last) and not x.is_contiguous() else out

    def extra_repr(self) -> str:
        return super().extra_repr() + f", bn_clips={self.bn_clips}"


def convert_to_sub_bn(module: nn.Module, bn_clips: int, frames: int) -> nn.Module:
    """Replace every BatchNorm2d (in place, recursively) by a SubBatchNorm2d holding the same tensors."""
    for name, child in module.named_children():
        if type(child) is nn.BatchNorm2d:
            sub = SubBatchNorm2d(child.num_features, bn_clips, frames, eps=child.eps, momentum=child.momentum,
                                 affine=child.affine, track_running_stats=child.track_running_stats)
            sub = sub.to(device=child.weight.device if child.weight is not None else None)
            sub.load_state_dict(child.state_dict())
            setattr(module, name, sub)
        else:
            convert_to_sub_bn(child, bn_clips, frames)
    return module


def set_frames(module: nn.Module, frames: int) -> None:
    for m in module.modules():
        if isinstance(m, SubBatchNorm2d):
            m.frames = frames
