"""NAdam (torch's single-tensor update: momentum decay, coupled or decoupled weight decay, maximize), lazily.

State tensors (``exp_avg``, ``exp_avg_sq``) are made like the parameter (same shape, dtype, chunks, device) at
its first step and updated in place; ``step`` and ``mu_product`` are Python numbers (torch keeps them as 0-d
float32 tensors on the host: ``mu_product`` is rounded to float32 as torch's is), so ``step()`` submits nothing.

>>> opt = optim.NAdam(model.parameters(), lr=2e-3, momentum_decay=4e-3)
"""
from __future__ import annotations

import numpy as np

from ..ops import sqrt, zeros_like
from .optimizer import Optimizer, _float32, _required, check_lr


class NAdam(Optimizer):
    """torch's ``optim.NAdam`` (``momentum_decay``, ``decoupled_weight_decay``, ``maximize``); ``step()``
    submits nothing, the update runs with the next submission."""
    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, momentum_decay=4e-3,
                 decoupled_weight_decay=False, *, foreach=None, maximize=False, capturable=False,
                 differentiable=False):
        check_lr(lr, epsilon=eps)
        for i in (0, 1):
            if not 0.0 <= betas[i] < 1.0:
                raise ValueError(f"Invalid beta parameter at index {i}: {betas[i]}")
        check_lr(_required, weight_decay=weight_decay, momentum_decay=momentum_decay)
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      momentum_decay=momentum_decay, decoupled_weight_decay=decoupled_weight_decay,
                                      maximize=maximize, foreach=foreach, capturable=capturable,
                                      differentiable=differentiable))

    def _update(self, group):
        lr, (beta1, beta2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        momentum_decay, decoupled = group["momentum_decay"], group["decoupled_weight_decay"]
        for p, grad in self._grads(group, l2=not decoupled):
            state = self.state[p]
            if not state:
                state["step"], state["mu_product"] = 0.0, 1.0
                state["exp_avg"], state["exp_avg_sq"] = zeros_like(p), zeros_like(p)
            state["step"] += 1
            step = state["step"]
            if wd != 0 and decoupled:
                p.mul_(1 - lr * wd)
            # (torch's single-tensor update, op for op: the same bits)
            bias_correction2 = 1 - beta2 ** step
            mu = beta1 * (1.0 - 0.5 * (0.96 ** (step * momentum_decay)))
            mu_next = beta1 * (1.0 - 0.5 * (0.96 ** ((step + 1) * momentum_decay)))
            mu_product = state["mu_product"] = _float32(np.float32(state["mu_product"]) * np.float32(mu))
            exp_avg = state["exp_avg"].lerp_(grad, 1 - beta1)
            exp_avg_sq = state["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            denom = sqrt(exp_avg_sq.div(bias_correction2)).add_(eps)
            p.addcdiv_(grad, denom, value=-lr * (1.0 - mu) / (1.0 - mu_product))
            p.addcdiv_(exp_avg, denom, value=(-lr * mu_next) / (1.0 - mu_product * mu_next))
