"""Adamax (torch's single-tensor update: Adam with the infinity norm, weight decay, maximize), lazily.

State tensors (``exp_avg``, ``exp_inf``) are made like the parameter (same shape, dtype, chunks, device) at
its first step and updated in place: ``step()`` submits nothing, and no lineage grows.

>>> opt = optim.Adamax(model.parameters(), lr=2e-3, betas=(0.9, 0.999))
"""
from __future__ import annotations

from ..ops import maximum, zeros_like
from .optimizer import Optimizer, _required, check_lr


class Adamax(Optimizer):
    """torch's ``optim.Adamax`` (weight decay, ``maximize``); ``step()`` submits nothing, the update runs
    with the next submission."""
    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, foreach=None, *,
                 maximize=False, differentiable=False, capturable=False):
        check_lr(lr, epsilon=eps)
        for i in (0, 1):
            if not 0.0 <= betas[i] < 1.0:
                raise ValueError(f"Invalid beta parameter at index {i}: {betas[i]}")
        check_lr(_required, weight_decay=weight_decay)
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, foreach=foreach,
                                      maximize=maximize, differentiable=differentiable, capturable=capturable))

    def _update(self, group):
        lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
        for p, grad in self._grads(group):
            state = self.state[p]
            if not state:
                state["step"] = 0.0
                state["exp_avg"], state["exp_inf"] = zeros_like(p), zeros_like(p)
            state["step"] += 1
            # (torch's single-tensor update, op for op: the same bits)
            exp_avg = state["exp_avg"].lerp_(grad, 1 - beta1)
            exp_inf = state["exp_inf"]
            exp_inf.copy_(maximum(exp_inf.mul_(beta2), grad.abs().add_(eps)))
            clr = lr / (1 - beta1 ** state["step"])
            p.addcdiv_(exp_avg, exp_inf, value=-clr)
