"""Adafactor (torch's single-tensor update: factored second moments, relative step size, update clipping,
decoupled weight decay, maximize), lazily.

A parameter of two or more dimensions keeps ``row_var`` (its last axis reduced to 1) and ``col_var`` (its
second-to-last reduced to 1) instead of a full second moment; a vector keeps ``variance``.  torch reads two
numbers back per parameter and step (the parameter's RMS and the update's RMS, with ``.item()``); here they
stay 0-d tensors in the graph, so ``step()`` submits nothing.

>>> opt = optim.Adafactor(model.parameters(), lr=1e-2)
"""
from __future__ import annotations

import numpy as np

from ..ops import maximum, minimum, zeros_like
from .._tensor import Tensor
from .optimizer import Optimizer


class Adafactor(Optimizer):
    """torch's ``optim.Adafactor`` (``beta2_decay``, ``eps=(eps1, eps2)``, clipping threshold ``d``,
    ``weight_decay``, ``maximize``); ``step()`` submits nothing, the update runs with the next submission."""

    def __init__(self, params, lr=1e-2, beta2_decay=-0.8, eps=(None, 1e-3), d=1.0, weight_decay=0.0, *,
                 foreach=None, maximize=False):
        if isinstance(lr, Tensor) and lr.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")
        if not 0.0 <= lr:
            raise ValueError(f"Learning rate should be >= 0 but is: {lr}")
        if not 0.0 >= beta2_decay:
            raise ValueError(f"beta2_decay should be <= 0 but is: {beta2_decay}")
        if eps[0] is not None and not 0.0 <= eps[0]:
            raise ValueError(f"epsilon1 should be >= 0 but is: {eps[0]}")
        if not 0.0 <= eps[1]:
            raise ValueError(f"epsilon2 should be >= 0 but is: {eps[1]}")
        if not 1.0 <= d:
            raise ValueError(f"Clipping threshold d should be >= 1 but is: {d}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"weight_decay should be >= 0 but is: {weight_decay}")
        super().__init__(params, dict(lr=lr, beta2_decay=beta2_decay, eps=eps, d=d, weight_decay=weight_decay,
                                      foreach=foreach, maximize=maximize))

    def _state_like(self, key, param):
        """The factored moments: like the parameter (dtype, device, chunks along the kept axes) with its
        last (``row_var``) or second-to-last (``col_var``) axis reduced to 1."""
        if key == "row_var":
            return param.detach()[..., :1]
        if key == "col_var":
            return param.detach()[..., :1, :]
        return None

    def _update(self, group):
        lr, beta2_decay, (eps1, eps2) = group["lr"], group["beta2_decay"], group["eps"]
        d, wd = group["d"], group["weight_decay"]
        for p in group["params"]:
            if p.grad is not None and p.dtype.kind == "c":
                raise RuntimeError("Adafactor does not support complex parameters")
        for p, grad in self._grads(group, l2=False):
            state = self.state[p]
            if not state:
                state["step"] = 0.0
                if grad.ndim > 1:
                    state["row_var"] = zeros_like(self._state_like("row_var", p))
                    state["col_var"] = zeros_like(self._state_like("col_var", p))
                else:
                    state["variance"] = zeros_like(p)
            state["step"] += 1
            step = state["step"]
            eps1_p = np.finfo(p.dtype).eps if eps1 is None else eps1
            one_minus_beta2_t = step ** beta2_decay
            rho_t = minimum(lr, 1 / step ** 0.5) if isinstance(lr, Tensor) else min(lr, 1 / step ** 0.5)
            # torch reads max(eps2, RMS(p)) * rho_t back with .item(); a lazy 0-d tensor here, from p before decay
            alpha = maximum(p.norm(2) / p.numel() ** 0.5, eps2) * rho_t
            if wd != 0:
                p.mul_(1 - lr * wd)
            if grad.ndim > 1:
                row_var, col_var = state["row_var"], state["col_var"]
                row_var.lerp_(grad.norm(dim=-1, keepdim=True).square_().div_(grad.shape[-1]), one_minus_beta2_t)
                col_var.lerp_(grad.norm(dim=-2, keepdim=True).square_().div_(grad.shape[-2]), one_minus_beta2_t)
                # row_var @ col_var is an outer product (a sum of one term): the broadcast product, exactly
                var_estimate = (row_var * col_var).div_(row_var.mean(dim=-2, keepdim=True).clamp_(min=eps1_p))
            else:
                variance = state["variance"]
                variance.lerp_(grad * grad, one_minus_beta2_t)
                var_estimate = variance.clone()
            update = var_estimate.clamp_(min=eps1_p * eps1_p).rsqrt_().mul_(grad)
            denom = maximum(update.norm(2) / (update.numel() ** 0.5 * d), 1.0)
            p.sub_(update * (alpha / denom))
