"""RMSprop (torch's single-tensor update: momentum, centered, weight decay, maximize), lazily.

State tensors are made like the parameter (same shape, dtype, chunks, device) and updated in place, as
Adam's are: ``step()`` submits nothing, and the next submission computes the new values and stores them
in place of the old ones, so neither the parameter nor its state grows a lineage.

>>> opt = optim.RMSprop(model.parameters(), lr=1e-2, momentum=0.9, centered=True)
"""
from __future__ import annotations

from ..ops import sqrt, zeros_like
from .optimizer import Optimizer, check_lr


class RMSprop(Optimizer):
    """torch's ``optim.RMSprop`` (momentum, ``centered``, weight decay, ``maximize``); ``step()``
    submits nothing, the update runs with the next submission."""
    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0, centered=False,
                 capturable=False, foreach=None, maximize=False, differentiable=False):
        check_lr(lr, epsilon=eps, momentum=momentum, weight_decay=weight_decay, alpha=alpha)
        super().__init__(params, dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps, centered=centered,
                                      weight_decay=weight_decay, capturable=capturable, foreach=foreach,
                                      maximize=maximize, differentiable=differentiable))

    def _update(self, group):
        lr, alpha, eps, momentum = group["lr"], group["alpha"], group["eps"], group["momentum"]
        for p, grad in self._grads(group):
            state = self.state[p]
            if not state:
                state["step"] = 0.0
                state["square_avg"] = zeros_like(p)
                if momentum > 0:
                    state["momentum_buffer"] = zeros_like(p)
                if group["centered"]:
                    state["grad_avg"] = zeros_like(p)
            state["step"] += 1
            # (torch's single-tensor update, op for op: the same bits)
            square_avg = state["square_avg"].mul_(alpha).addcmul_(grad, grad, value=1 - alpha)
            if group["centered"]:
                grad_avg = state["grad_avg"].lerp_(grad, 1 - alpha)
                avg = sqrt(square_avg.addcmul(grad_avg, grad_avg, value=-1)).add_(eps)
            else:
                avg = sqrt(square_avg).add_(eps)
            if momentum > 0:
                buf = state["momentum_buffer"].mul_(momentum).addcdiv_(grad, avg)
                p.add_(buf, alpha=-lr)
            else:
                p.addcdiv_(grad, avg, value=-lr)
