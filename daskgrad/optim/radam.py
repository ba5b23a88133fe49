"""RAdam (torch's single-tensor update: the rectified Adam step, coupled or decoupled weight decay,
maximize), lazily.

State tensors (``exp_avg``, ``exp_avg_sq``) are made like the parameter (same shape, dtype, chunks, device) at
its first step and updated in place; whether a step is rectified depends on the step count only (a Python
number), so ``step()`` submits nothing.

>>> opt = optim.RAdam(model.parameters(), lr=1e-3, decoupled_weight_decay=True, weight_decay=1e-2)
"""
from __future__ import annotations

from ..ops import sqrt, zeros_like
from .optimizer import Optimizer, _required, check_lr


class RAdam(Optimizer):
    """torch's ``optim.RAdam`` (``decoupled_weight_decay``, ``maximize``); ``step()`` submits nothing, the
    update runs with the next submission."""
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, decoupled_weight_decay=False,
                 *, foreach=None, maximize=False, capturable=False, differentiable=False):
        check_lr(lr, epsilon=eps)
        for i in (0, 1):
            if not 0.0 <= betas[i] < 1.0:
                raise ValueError(f"Invalid beta parameter at index {i}: {betas[i]}")
        check_lr(_required, weight_decay=weight_decay)
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, maximize=maximize,
                                      foreach=foreach, capturable=capturable,
                                      decoupled_weight_decay=decoupled_weight_decay, differentiable=differentiable))

    def _update(self, group):
        lr, (beta1, beta2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        decoupled = group["decoupled_weight_decay"]
        for p, grad in self._grads(group, l2=not decoupled):
            state = self.state[p]
            if not state:
                state["step"] = 0.0
                state["exp_avg"], state["exp_avg_sq"] = zeros_like(p), zeros_like(p)
            state["step"] += 1
            step = state["step"]
            if wd != 0 and decoupled:
                p.mul_(1 - lr * wd)
            # (torch's single-tensor update, op for op: the same bits)
            exp_avg = state["exp_avg"].lerp_(grad, 1 - beta1)
            exp_avg_sq = state["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            bias_correction1 = 1 - beta1 ** step
            bias_correction2 = 1 - beta2 ** step
            bias_corrected_exp_avg = exp_avg / bias_correction1
            rho_inf = 2 / (1 - beta2) - 1
            rho_t = rho_inf - 2 * step * (beta2 ** step) / bias_correction2
            if rho_t > 5.0:
                rect = ((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)) ** 0.5
                adaptive_lr = (bias_correction2 ** 0.5) / sqrt(exp_avg_sq).add_(eps)
                p.add_(bias_corrected_exp_avg * lr * adaptive_lr * rect, alpha=-1.0)
            else:
                p.add_(bias_corrected_exp_avg * lr, alpha=-1.0)
