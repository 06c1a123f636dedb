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

from trainer.models.tsm import TemporalShift, conv_1x1, shift_conv

ARCHS = {
    "resnet18": ("basic", [2, 2, 2, 2]),
    "resnet34": ("basic", [3, 4, 6, 3]),
    "resnet50": ("bottleneck", [3, 4, 6, 3]),
    "resnet101": ("bottleneck", [3, 4, 23, 3]),
    "resnet152": ("bottleneck", [3, 8, 36, 3]),
}
PLACEMENTS = ("blockres", "block")
SHIFT_BLOCKS = ("official", "all")
#: Stage-3 depth from which the official TSM code shifts only every other block (resnet101/152).
DEEP_LAYER3 = 23
FC_INIT_STD = 0.001


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


def shift_round(layers: List[int], placement: str, shift_blocks: str) -> int:
    """Every how many blocks of a stage carry a shift (block i does when ``i % round == 0``).

    Why not always 1: the official TSM code shifts only every other block of each
    stage of the deep ResNets (layer3 of 23 or more blocks) with "blockres", and a
    TSM-R101/R152 compared with its published accuracy must be that network;
    "block" shifts every block there too. ``shift_blocks="all"`` shifts every
    block whatever the depth.
    """
    if shift_blocks not in SHIFT_BLOCKS:
        raise ValueError(f"unknown shift blocks {shift_blocks!r}: choose one of {', '.join(SHIFT_BLOCKS)}")
    if shift_blocks == "official" and placement == "blockres" and layers[2] >= DEEP_LAYER3:
        return 2
    return 1


class TSMResNet(nn.Module):
    """ResNet backbone + temporal shift in residual blocks (``shift_blocks``) + average consensus."""

    def __init__(self, arch: str = "resnet50", num_classes: int = 400, num_segments: int = 8,
                 shift: bool = True, fold_div: int = 8, placement: str = "blockres", width: float = 1.0,
                 dropout: float = 0.0, shift_blocks: str = "official", in_channels: int = 3):
        super().__init__()
        if arch not in ARCHS:
            raise ValueError(f"unknown arch {arch!r}: choose one of {', '.join(ARCHS)}")
        if placement not in PLACEMENTS:
            raise ValueError(f"unknown shift placement {placement!r}: choose one of {', '.join(PLACEMENTS)}")
        kind, layers = ARCHS[arch]
        n_round = shift_round(layers, placement, shift_blocks)
        block: Type[BasicBlock] = Bottleneck if kind == "bottleneck" else BasicBlock
        self.arch, self.num_segments, self.num_classes = arch, num_segments, num_classes
        base = max(8, int(round(64 * width)))
        self.inplanes = base
        self.in_channels = in_channels  # 3 colours, or 2 x the flow stack for the temporal stream
        self.conv1 = nn.Conv2d(in_channels, base, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(base)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self._shift_args = (num_segments, fold_div, shift, placement, n_round)
        self.layer1 = self._make_layer(block, base, layers[0], 1)
        self.layer2 = self._make_layer(block, base * 2, layers[1], 2)
        self.layer3 = self._make_layer(block, base * 4, layers[2], 2)
        self.layer4 = self._make_layer(block, base * 8, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.fc = nn.Linear(base * 8 * block.expansion, num_classes)
        self._init_weights()

    def _init_weights(self) -> None:
        """He init for convs, BN as the identity, the last BN of each branch zeroed, a near-zero classifier."""
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
        # The official TSM classifier (``_prepare_tsn``): weight ~ N(0, 0.001), bias 0, with or
        # without dropout. The first logits are near zero, so the first loss is log(classes).
        nn.init.normal_(self.fc.weight, 0.0, FC_INIT_STD)
        nn.init.zeros_(self.fc.bias)

    def _make_layer(self, block: Type[BasicBlock], planes: int, blocks: int, stride: int) -> nn.Sequential:
        n_segment, fold_div, shift, placement, n_round = self._shift_args
        layers: List[nn.Module] = []
        for i in range(blocks):
            s = stride if i == 0 else 1
            downsample = None
            if s != 1 or self.inplanes != planes * block.expansion:
                downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes * block.expansion, 1, s, bias=False),
                                           nn.BatchNorm2d(planes * block.expansion))
            # An unshifted block holds no TemporalShift at all: set_shift(True) cannot turn it on.
            ts = TemporalShift(n_segment, fold_div, enabled=shift) if i % n_round == 0 else None
            layers.append(block(self.inplanes, planes, s, downsample, ts, placement))
            self.inplanes = planes * block.expansion
        return nn.Sequential(*layers)

    def set_shift(self, enabled: bool) -> None:
        """Switch every shift the model holds on or off (off = the TSN 2D baseline); blocks built
        without one (``shift_blocks="official"`` on resnet101/152) stay unshifted either way."""
        for m in self.modules():
            if isinstance(m, TemporalShift):
                m.enabled = enabled

    def set_num_segments(self, t: int) -> None:
        """Frames per clip from now on (multigrid changes T per iteration): the shifts
        and sub-batch BatchNorm fold clips by it. No parameter depends on T."""
        from trainer.models.subbn import set_frames
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
        """``x``: (N, T, C, H, W) or already folded (N*T, C, H, W), C = ``in_channels``; returns (N, classes)."""
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
                dropout: float = 0.0, shift_blocks: str = "official", in_channels: int = 3) -> TSMResNet:
    """The trainer's model from its options (``--shift-blocks``: which blocks carry a shift; ``in_channels``:
    3, or 2 x --flow-stack for a flow stream)."""
    return TSMResNet(arch, num_classes, num_segments, shift, fold_div, placement, width, dropout, shift_blocks,
                     in_channels)


#: The official TSM fine-tuning multipliers (``--fc-lr5``): classifier weight and bias.
FC_WEIGHT_LR_MULT, FC_BIAS_LR_MULT = 5.0, 10.0


def _no_decay(module: nn.Module, name: str) -> bool:
    """The paper's rule: BatchNorm parameters and biases take no weight decay."""
    return isinstance(module, nn.modules.batchnorm._BatchNorm) or name == "bias"


def param_groups(model: nn.Module, weight_decay: float, fc_lr5: bool = False) -> List[dict]:
    """[decay, no decay (BN and biases)], each with ``lr_mult`` 1; with ``fc_lr5`` two more groups.

    Each group is named (``decay``, ``no_decay``, ``fc_weight``, ``fc_bias``) so that an
    optimiser can tell weights from the excluded BN and biases without counting on positions.

    ``fc_lr5`` is the official TSM recipe (``get_optim_policies``): the classifier
    (every ``nn.Linear``, TSMResNet's ``fc``) weight at 5x the LR with weight decay,
    its bias at 10x without; they then leave the first two groups. The groups keep
    this order and count whatever the model, so that an optimiser state saved by a
    run loads into the same run resumed (2 groups without ``fc_lr5``, as before it).
    Whoever sets the LR multiplies it by the group's ``lr_mult``.
    """
    decay: List[nn.Parameter] = []
    no_decay: List[nn.Parameter] = []
    fc_weight: List[nn.Parameter] = []
    fc_bias: List[nn.Parameter] = []
    for module in model.modules():
        head = fc_lr5 and isinstance(module, nn.Linear)
        for name, p in module.named_parameters(recurse=False):
            if not p.requires_grad:
                continue
            if head:
                (fc_bias if name == "bias" else fc_weight).append(p)
            else:
                (no_decay if _no_decay(module, name) else decay).append(p)
    groups = [{"name": "decay", "params": decay, "weight_decay": weight_decay, "lr_mult": 1.0},
              {"name": "no_decay", "params": no_decay, "weight_decay": 0.0, "lr_mult": 1.0}]
    if fc_lr5:
        groups += [{"name": "fc_weight", "params": fc_weight, "weight_decay": weight_decay,
                    "lr_mult": FC_WEIGHT_LR_MULT},
                   {"name": "fc_bias", "params": fc_bias, "weight_decay": 0.0, "lr_mult": FC_BIAS_LR_MULT}]
    return groups


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def count_macs(model: nn.Module, clip: torch.Tensor) -> float:
    """Multiply-accumulates of one forward pass (FLOPs / 2 from torch's counter).

    Counted on the convolution path: torch's counter does not see the in-place
    products of the CPU 1x1 kernel, which does the same multiply-accumulates
    (fewer by the zero-padded clip ends).
    """
    from trainer.dist import compat
    from trainer.models import tsm
    was, tsm.CPU_GEMM_1X1 = tsm.CPU_GEMM_1X1, False
    try:
        with torch.no_grad():
            flops = compat.count_flops(lambda: model(clip))
    finally:
        tsm.CPU_GEMM_1X1 = was
    return flops / 2
