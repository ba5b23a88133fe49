"""Rprop (torch's single-tensor update: sign-dependent step sizes, ``etas``, ``step_sizes``, maximize), lazily.

The sign of ``grad * prev`` picks each element's factor with ``where`` (no host read, chunks kept): state
(``prev``, ``step_size``) is made like the parameter at its first step and updated in place, so ``step()``
submits nothing.

>>> opt = optim.Rprop(model.parameters(), lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50))
"""
from __future__ import annotations

from ..ops import full_like, ones_like, sign, where, zeros_like
from .._tensor import Tensor
from .optimizer import Optimizer, check_lr


class Rprop(Optimizer):
    """torch's ``optim.Rprop`` (``etas``, ``step_sizes``, ``maximize``); ``step()`` submits nothing, the
    update runs with the next submission."""
    def __init__(self, params, lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50), *, capturable=False, foreach=None,
                 maximize=False, differentiable=False):
        check_lr(lr)
        if not 0.0 < etas[0] < 1.0 < etas[1]:
            raise ValueError(f"Invalid eta values: {etas[0]}, {etas[1]}")
        super().__init__(params, dict(lr=lr, etas=etas, step_sizes=step_sizes, foreach=foreach, maximize=maximize,
                                      differentiable=differentiable, capturable=capturable))

    def _update(self, group):
        (etaminus, etaplus), (step_size_min, step_size_max) = group["etas"], group["step_sizes"]
        for p, grad in self._grads(group):
            state = self.state[p]
            if not state:
                lr = group["lr"]
                state["step"] = 0.0
                state["prev"] = zeros_like(p)
                # a tensor lr is added lazily (torch reads it back: the same value)
                state["step_size"] = zeros_like(p).add_(lr) if isinstance(lr, Tensor) else full_like(p, lr)
            state["step"] += 1
            # (torch's single-tensor update, its masked assignments as where: the same bits)
            s = sign(grad * state["prev"])
            # (the factors in the parameter's dtype: two Python numbers alone would make a float32 where)
            factor = where(s > 0, etaplus, where(s < 0, etaminus, ones_like(s)))
            step_size = state["step_size"].mul_(factor).clamp_(step_size_min, step_size_max)
            grad = where(s < 0, 0.0, grad)  # torch's grad[sign.eq(etaminus)] = 0
            p.addcmul_(sign(grad), step_size, value=-1)
            state["prev"].copy_(grad)
