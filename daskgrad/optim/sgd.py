"""SGD with momentum, dampening, Nesterov and weight decay: torch's update, lazily.

>>> opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
"""
from __future__ import annotations

from ..ops import zeros_like
from .optimizer import Optimizer, check_lr


class SGD(Optimizer):
    """torch's ``optim.SGD``: momentum, dampening, weight decay, Nesterov and ``maximize``; ``step()``
    submits nothing, the update runs with the next submission."""
    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False, *,
                 maximize=False, foreach=None, differentiable=False, fused=None):
        check_lr(lr)
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                                      nesterov=nesterov, maximize=maximize, foreach=foreach,
                                      differentiable=differentiable, fused=fused))

    def _update(self, group):
        lr, momentum, dampening = group["lr"], group["momentum"], group["dampening"]
        for p, grad in self._grads(group):
            if momentum != 0:
                state = self.state[p]
                buf = state.get("momentum_buffer")
                if buf is None:  # written in place, as later steps are: stored by the next submission
                    buf = state["momentum_buffer"] = zeros_like(p).copy_(grad)
                else:
                    buf.mul_(momentum).add_(grad, alpha=1 - dampening)
                grad = grad.add(buf, alpha=momentum) if group["nesterov"] else buf
            p.add_(grad, alpha=-lr)  # (torch's single-tensor update, op for op: the same bits)
