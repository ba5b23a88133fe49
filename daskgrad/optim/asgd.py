"""ASGD (torch's single-tensor update: averaged SGD with ``lambd``, ``alpha``, ``t0``, weight decay, maximize),
lazily.

``ax`` (the average) is made like the parameter at its first step and updated in place; ``step``, ``eta``
and ``mu`` are Python numbers (torch keeps them as 0-d float32 tensors: ``eta`` and ``mu`` are rounded to
float32 as torch's are; with a tensor ``lr``, ``eta`` stays a lazy tensor), so ``step()`` submits nothing.

>>> opt = optim.ASGD(model.parameters(), lr=1e-2, lambd=1e-4, alpha=0.75, t0=1e6)
"""
from __future__ import annotations

from ..ops import zeros_like
from .optimizer import Optimizer, _float32, check_lr


class ASGD(Optimizer):
    """torch's ``optim.ASGD`` (``lambd``, ``alpha``, ``t0``, weight decay, ``maximize``); ``step()``
    submits nothing, the update runs with the next submission."""
    def __init__(self, params, lr=1e-2, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0, foreach=None,
                 maximize=False, differentiable=False, capturable=False):
        check_lr(lr, weight_decay=weight_decay)
        super().__init__(params, dict(lr=lr, lambd=lambd, alpha=alpha, t0=t0, weight_decay=weight_decay,
                                      foreach=foreach, maximize=maximize, differentiable=differentiable,
                                      capturable=capturable))

    def _update(self, group):
        lr, lambd, alpha, t0 = group["lr"], group["lambd"], group["alpha"], group["t0"]
        for p, grad in self._grads(group):
            state = self.state[p]
            if not state:
                state["step"], state["eta"], state["mu"] = 0.0, _float32(lr), 1.0
                state["ax"] = zeros_like(p)
            state["step"] += 1
            step, eta, ax = state["step"], state["eta"], state["ax"]
            # (torch's single-tensor update, op for op: the same bits)
            p.mul_(1 - lambd * eta)
            p.add_(grad, alpha=-eta)
            if state["mu"] != 1:
                ax.add_(p.sub(ax).mul_(state["mu"]))
            else:
                ax.copy_(p)
            state["eta"] = _float32(lr / ((1 + lambd * lr * step) ** alpha))
            state["mu"] = _float32(1 / max(1, step - t0))
