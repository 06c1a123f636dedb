"""ResNet (18/34/50/101/152) with temporal shift, written here so that the
model is exactly the paper's TSM-R50 and nothing depends on torchvision.

Why a width multiplier: tests and the CPU demo need the same code path at a
size two CPU cores can train in seconds (``width=0.125`` gives 8 base channels,
still divisible by the shift's fold of 8).

Input: ``(N, T, 3, H, W)`` float clips; frames are folded into the batch
(clip-major, as the shift requires), the 2D network runs per frame, and the
per-frame logits are averaged over T (the TSN "average consensus").
"""
from __future__ import annotations

from typing import List, Optional, Type, Union

import torch
from torch import nn

from .tsm import TemporalShift, conv_1x1, shift_conv

ARCHS = {
    "resnet18": ("basic", [2, 2, 2, 2]),
    "resnet34": ("basic", [3, 4, 6, 3]),
    "resnet50": ("bottleneck", [3, 4, 6, 3]),
    "resnet101": ("bottleneck", [3, 4, 23, 3]),
    "resnet152": ("bottleneck", [3, 8, 36, 3]),
}
PLACEMENTS = ("blockres", "block")


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int, downsample: Optional[nn.Module],
                 shift: Optional[TemporalShift], placement: str):
        super().__init__()
        self.shift = shift
        self.placement = placement
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def _conv1(self, x: torch.Tensor) -> torch.Tensor:
        """conv1 of the residual branch; with "blockres" it sees the shifted input.

        The shift and conv1 run as one autograd step that keeps ``x`` (alive
        anyway) for the backward pass instead of a shifted copy of it.
        """
        s = self.shift
        if s is not None and s.enabled and self.placement == "blockres":
            return shift_conv(x, self.conv1, s.n_segment, s.fold_div)
        if s is not None:
            return conv_1x1(x, self.conv1, s.n_segment)
        return self.conv1(x)

    def _residual(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self._conv1(x)))
        return self.bn2(self.conv2(out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.shift is not None and self.placement == "block":
            x = self.shift(x)  # both paths see the shifted input
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(self._residual(x) + identity)


class Bottleneck(BasicBlock):
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int, downsample: Optional[nn.Module],
                 shift: Optional[TemporalShift], placement: str):
        nn.Module.__init__(self)
        self.shift = shift
        self.placement = placement
        out = planes * self.expansion
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        # Stride on the 3x3 conv (the "ResNet v1.5" of torchvision and the TSM code).
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def _residual(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self._conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.bn3(self.conv3(out))


class TSMResNet(nn.Module):
    """ResNet backbone + temporal shift in every residual block + average consensus."""

    def __init__(self, arch: str = "resnet50", num_classes: int = 400, num_segments: int = 8,
                 shift: bool = True, fold_div: int = 8, placement: str = "blockres", width: float = 1.0,
                 dropout: float = 0.0):
        super().__init__()
        if arch not in ARCHS:
            raise ValueError(f"unknown arch {arch!r}: choose one of {', '.join(ARCHS)}")
        if placement not in PLACEMENTS:
            raise ValueError(f"unknown shift placement {placement!r}: choose one of {', '.join(PLACEMENTS)}")
        kind, layers = ARCHS[arch]
        block: Type[BasicBlock] = Bottleneck if kind == "bottleneck" else BasicBlock
        self.arch, self.num_segments, self.num_classes = arch, num_segments, num_classes
        base = max(8, int(round(64 * width)))
        self.inplanes = base
        self.conv1 = nn.Conv2d(3, base, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(base)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self._shift_args = (num_segments, fold_div, shift, placement)
        self.layer1 = self._make_layer(block, base, layers[0], 1)
        self.layer2 = self._make_layer(block, base * 2, layers[1], 2)
        self.layer3 = self._make_layer(block, base * 4, layers[2], 2)
        self.layer4 = self._make_layer(block, base * 8, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.fc = nn.Linear(base * 8 * block.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        # Zero-init the last BN of each residual branch (Goyal et al.): every
        # block starts as the identity, which large-batch training relies on.
        for m in self.modules():
            if isinstance(m, Bottleneck):
                nn.init.zeros_(m.bn3.weight)
            elif isinstance(m, BasicBlock):
                nn.init.zeros_(m.bn2.weight)

    def _make_layer(self, block: Type[BasicBlock], planes: int, blocks: int, stride: int) -> nn.Sequential:
        n_segment, fold_div, shift, placement = self._shift_args
        layers: List[nn.Module] = []
        for i in range(blocks):
            s = stride if i == 0 else 1
            downsample = None
            if s != 1 or self.inplanes != planes * block.expansion:
                downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes * block.expansion, 1, s, bias=False),
                                           nn.BatchNorm2d(planes * block.expansion))
            ts = TemporalShift(n_segment, fold_div, enabled=shift)
            layers.append(block(self.inplanes, planes, s, downsample, ts, placement))
            self.inplanes = planes * block.expansion
        return nn.Sequential(*layers)

    def set_shift(self, enabled: bool) -> None:
        """Switch every shift on or off (off = the TSN 2D baseline)."""
        for m in self.modules():
            if isinstance(m, TemporalShift):
                m.enabled = enabled

    def set_num_segments(self, t: int) -> None:
        """Frames per clip from now on (multigrid changes T per iteration): the shifts
        and sub-batch BatchNorm fold clips by it. No parameter depends on T."""
        from .subbn import set_frames
        self.num_segments = t
        for m in self.modules():
            if isinstance(m, TemporalShift):
                m.n_segment = t
        set_frames(self, t)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return torch.flatten(self.avgpool(x), 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: (N, T, 3, H, W) or already folded (N*T, 3, H, W); returns (N, classes)."""
        if x.dim() == 5:
            n, t = x.shape[:2]
            x = x.reshape(n * t, *x.shape[2:])
        else:
            t = self.num_segments
            n = x.shape[0] // t
        if t != self.num_segments:
            raise ValueError(f"clips have {t} frames but the model was built for {self.num_segments} segments")
        logits = self.fc(self.dropout(self.features(x)))
        return logits.view(n, t, -1).mean(dim=1)


def build_model(arch: str = "resnet50", num_classes: int = 400, num_segments: int = 8, shift: bool = True,
                placement: str = "blockres", width: float = 1.0, fold_div: int = 8,
                dropout: float = 0.0) -> TSMResNet:
    return TSMResNet(arch, num_classes, num_segments, shift, fold_div, placement, width, dropout)


def param_groups(model: nn.Module, weight_decay: float) -> List[dict]:
    """The paper's rule: no weight decay on BatchNorm parameters and biases."""
    decay, no_decay = [], []
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if not p.requires_grad:
                continue
            if isinstance(module, nn.modules.batchnorm._BatchNorm) or name == "bias":
                no_decay.append(p)
            else:
                decay.append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def count_macs(model: nn.Module, clip: torch.Tensor) -> float:
    """Multiply-accumulates of one forward pass (FLOPs / 2 from torch's counter).

    Counted on the convolution path: torch's counter does not see the in-place
    products of the CPU 1x1 kernel, which does the same multiply-accumulates
    (fewer by the zero-padded clip ends).
    """
    from torch.utils.flop_counter import FlopCounterMode
    from . import tsm
    counter = FlopCounterMode(display=False)
    was, tsm.CPU_GEMM_1X1 = tsm.CPU_GEMM_1X1, False
    try:
        with counter, torch.no_grad():
            model(clip)
    finally:
        tsm.CPU_GEMM_1X1 = was
    return counter.get_total_flops() / 2
