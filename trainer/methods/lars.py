"""LARS: layer-wise adaptive rate scaling (You et al.) for very large batches.

Per parameter tensor (a "layer"), local_rate = trust * ||w|| / (||g|| + wd * ||w||)
and v = m * v + lr * local_rate * (g + wd * w); w = w - v. BatchNorm parameters
and biases are excluded (plain momentum SGD with their own weight decay, usually
0 in this recipe): put them in a param group with ``lars: False``.

Each group steps at its own ``lr``, so groups at a multiple of the base rate
(``--fc-lr5``: the classifier weight at 5x with the trust ratio, its bias at 10x
without) need nothing more here than their ``lr`` and ``lars`` keys.
"""
from __future__ import annotations

import torch


class LARS(torch.optim.Optimizer):
    def __init__(self, params, lr: float, momentum: float = 0.9, weight_decay: float = 1e-4,
                 trust_coefficient: float = 0.001, eps: float = 0.0):
        if lr < 0 or momentum < 0 or weight_decay < 0 or trust_coefficient <= 0:
            raise ValueError("LARS: lr, momentum, weight_decay must be >= 0 and trust_coefficient > 0")
        defaults = dict(lr=lr, momentum=momentum, weight_decay=weight_decay, trust_coefficient=trust_coefficient,
                        eps=eps, lars=True)
        super().__init__(params, defaults)

    @staticmethod
    def local_rate(w: torch.Tensor, g: torch.Tensor, weight_decay: float, trust: float, eps: float = 0.0) -> torch.Tensor:
        w_norm = torch.linalg.vector_norm(w)
        g_norm = torch.linalg.vector_norm(g)
        rate = trust * w_norm / (g_norm + weight_decay * w_norm + eps)
        # A layer with zero weights or zero gradient falls back to the global rate.
        return torch.where((w_norm > 0) & (g_norm > 0), rate, torch.ones_like(rate))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, m, wd = group["lr"], group["momentum"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                d = g.add(p, alpha=wd) if wd else g.clone()
                if group["lars"]:
                    d.mul_(self.local_rate(p, g, wd, group["trust_coefficient"], group["eps"]))
                state = self.state[p]
                buf = state.get("momentum_buffer")
                if buf is None:
                    buf = state["momentum_buffer"] = torch.zeros_like(p)
                buf.mul_(m).add_(d, alpha=lr)
                p.sub_(buf)
        return loss
