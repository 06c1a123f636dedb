"""The optimiser named on the command line, with the recipe's parameter groups.

Why one place: every optimiser must keep the rule "no weight decay on
BatchNorm parameters and biases" (``model.param_groups``); LARS additionally
leaves biases and BatchNorm out of the trust ratio (``lars: False``), as You et
al. do. With ``fc_lr5`` (the official TSM recipe) the classifier's weight and
bias get groups of their own at 5x and 10x the LR (``lr_mult``); under LARS the
weight keeps the trust ratio and the bias does not, as their kinds say.
"""
from __future__ import annotations

from typing import List

import torch
from torch import nn

from trainer.methods.lars import LARS
from trainer.models.model import param_groups

OPTIMIZERS = ("sgd", "lars", "adam")


def _with_lr(groups: List[dict], lr: float) -> List[dict]:
    """Each group's starting LR is ``lr * lr_mult``: right before the first step sets it again."""
    for g in groups:
        g["lr"] = lr * g["lr_mult"]
    return groups


#: The groups of ``param_groups`` whose tensors are layer weights: LARS scales them by the trust ratio.
LARS_GROUPS = ("decay", "fc_weight")


def _lars_kinds(groups: List[dict]) -> List[dict]:
    """Weights take the trust ratio; BatchNorm parameters and biases are plain momentum SGD."""
    for g in groups:
        g["lars"] = g["name"] in LARS_GROUPS
    return groups


def build_optimizer(name: str, model: nn.Module, lr: float, momentum: float, weight_decay: float,
                    trust_coefficient: float = 0.001, fc_lr5: bool = False) -> torch.optim.Optimizer:
    """``name``'s optimiser over ``param_groups(model, weight_decay, fc_lr5)``."""
    groups = _with_lr(param_groups(model, weight_decay, fc_lr5), lr)
    if name == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=momentum)
    if name == "lars":
        return LARS(_lars_kinds(groups), lr=lr, momentum=momentum, weight_decay=weight_decay,
                    trust_coefficient=trust_coefficient)
    if name == "adam":
        # The AAVG paper's learners used Adam; its moments are what AAVG averages.
        return torch.optim.Adam(groups, lr=lr)
    raise ValueError(f"unknown optimizer {name!r}: use one of {', '.join(OPTIMIZERS)}")
