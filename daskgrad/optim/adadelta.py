"""Adadelta (torch's single-tensor update: rho, weight decay, maximize), lazily.

State tensors (``square_avg``, ``acc_delta``) are made like the parameter (same shape, dtype, chunks, device)
at its first step and updated in place: ``step()`` submits nothing, and neither the parameter nor its state
grows a lineage.

>>> opt = optim.Adadelta(model.parameters(), lr=1.0, rho=0.9)
"""
from __future__ import annotations

from ..ops import sqrt, zeros_like
from .optimizer import Optimizer, _required, check_lr


class Adadelta(Optimizer):
    """torch's ``optim.Adadelta`` (``rho``, weight decay, ``maximize``); ``step()`` submits nothing, the
    update runs with the next submission."""
    def __init__(self, params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0, foreach=None, *, capturable=False,
                 maximize=False, differentiable=False):
        check_lr(lr)
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho}")
        check_lr(_required, epsilon=eps, weight_decay=weight_decay)
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize,
                                      capturable=capturable, foreach=foreach, differentiable=differentiable))

    def _update(self, group):
        lr, rho, eps = group["lr"], group["rho"], group["eps"]
        for p, grad in self._grads(group):
            state = self.state[p]
            if not state:
                state["step"] = 0.0
                state["square_avg"], state["acc_delta"] = zeros_like(p), zeros_like(p)
            state["step"] += 1
            # (torch's single-tensor update, op for op: the same bits)
            square_avg = state["square_avg"].mul_(rho).addcmul_(grad, grad, value=1 - rho)
            std = sqrt(square_avg.add(eps))
            delta = sqrt(state["acc_delta"].add(eps)).div_(std).mul_(grad)
            state["acc_delta"].mul_(rho).addcmul_(delta, delta, value=1 - rho)
            p.add_(delta, alpha=-lr)
