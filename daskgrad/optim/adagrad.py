"""Adagrad (torch's single-tensor update: lr_decay, weight decay, initial accumulator, maximize), lazily.

As torch, every parameter's state (``step`` 0 and ``sum`` filled with ``initial_accumulator_value``) is made
when the optimizer is, shaped and chunked like the parameter, and updated in place (no lineage grows).

>>> opt = optim.Adagrad(model.parameters(), lr=1e-2, lr_decay=1e-4)
"""
from __future__ import annotations

from ..ops import full_like, sqrt
from .optimizer import Optimizer, check_lr


class Adagrad(Optimizer):
    """torch's ``optim.Adagrad`` (``lr_decay``, weight decay, ``initial_accumulator_value``,
    ``maximize``); ``step()`` submits nothing, the update runs with the next submission."""
    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0, eps=1e-10,
                 foreach=None, *, maximize=False, differentiable=False, fused=None):
        check_lr(lr, lr_decay=lr_decay, weight_decay=weight_decay,
                 initial_accumulator_value=initial_accumulator_value, epsilon=eps)
        if fused:  # before the base class's refusal of differentiable=True, so torch's words come first
            if differentiable:
                raise RuntimeError("`fused` does not support `differentiable`")
            if foreach:
                raise RuntimeError("`fused` and `foreach` cannot be `True` together.")
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, eps=eps, weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value, foreach=foreach,
                                      maximize=maximize, differentiable=differentiable, fused=fused))
        for group in self.param_groups:
            for p in group["params"]:
                self._init_state(p)

    def _init_state(self, p):
        state = self.state[p]
        state["step"] = 0.0
        state["sum"] = full_like(p, self.defaults["initial_accumulator_value"])

    def _update(self, group):
        lr, lr_decay, eps = group["lr"], group["lr_decay"], group["eps"]
        for p, grad in self._grads(group):
            state = self.state[p]
            if not state:  # a parameter of a group added later
                self._init_state(p)
            state["step"] += 1
            clr = lr / (1 + (state["step"] - 1) * lr_decay)
            # (torch's single-tensor update, op for op: the same bits)
            state_sum = state["sum"].addcmul_(grad, grad, value=1)
            p.addcdiv_(grad, sqrt(state_sum).add_(eps), value=-clr)
