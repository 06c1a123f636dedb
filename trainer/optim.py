"""The optimiser named on the command line, with the recipe's parameter groups.

Why one place: every optimiser must keep the rule "no weight decay on
BatchNorm parameters and biases" (``model.param_groups``); LARS additionally
leaves that group out of the trust ratio (``lars: False``), as You et al. do.
"""
from __future__ import annotations

import torch
from torch import nn

from .lars import LARS
from .model import param_groups

OPTIMIZERS = ("sgd", "lars", "adam")


def build_optimizer(name: str, model: nn.Module, lr: float, momentum: float, weight_decay: float,
                    trust_coefficient: float = 0.001) -> torch.optim.Optimizer:
    groups = param_groups(model, weight_decay)  # [decay, no-decay (BN and biases)]
    if name == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=momentum)
    if name == "lars":
        groups[0]["lars"] = True
        groups[1].update(lars=False, weight_decay=0.0)
        return LARS(groups, lr=lr, momentum=momentum, weight_decay=weight_decay,
                    trust_coefficient=trust_coefficient)
    if name == "adam":
        # The AAVG paper's learners used Adam; its moments are what AAVG averages.
        return torch.optim.Adam(groups, lr=lr)
    raise ValueError(f"unknown optimizer {name!r}: use one of {', '.join(OPTIMIZERS)}")
