"""Adam and AdamW (torch's single-tensor update, amsgrad included), lazily.

>>> opt = optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2)
"""
from __future__ import annotations

from ..ops import maximum, sqrt, zeros_like
from .._tensor import Tensor
from .optimizer import Optimizer, check_lr, check_tensor_lr


class Adam(Optimizer):
    """torch's ``optim.Adam`` (AMSGrad, ``maximize``, ``decoupled_weight_decay``); ``step()`` submits
    nothing, the update runs with the next submission."""
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False, *,
                 foreach=None, maximize=False, capturable=False, differentiable=False, fused=None,
                 decoupled_weight_decay=False):
        check_tensor_lr(lr, foreach, capturable)
        check_lr(lr, epsilon=eps)
        for i in (0, 1):
            if not 0.0 <= betas[i] < 1.0:
                raise ValueError(f"Invalid beta parameter at index {i}: {betas[i]}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if not (all(isinstance(b, float) for b in betas[:2]) or all(isinstance(b, Tensor) for b in betas[:2])):
            raise ValueError("betas must be either both floats or both Tensors")
        for i in (0, 1):
            if isinstance(betas[i], Tensor):
                if not capturable and foreach:
                    raise ValueError(f"betas[{i}] as a Tensor is not supported for capturable=False and foreach=True")
                if betas[i].numel() != 1:
                    raise ValueError(f"Tensor betas[{i}] must be 1-element")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                                      maximize=maximize, foreach=foreach, capturable=capturable,
                                      differentiable=differentiable, fused=fused,
                                      decoupled_weight_decay=decoupled_weight_decay))

    def _update(self, group):
        lr, (beta1, beta2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        decoupled = group["decoupled_weight_decay"]
        for p, grad in self._grads(group, l2=not decoupled):
            state = self.state[p]
            if not state:
                state["step"] = 0.0
                state["exp_avg"], state["exp_avg_sq"] = zeros_like(p), zeros_like(p)
                if group["amsgrad"]:
                    state["max_exp_avg_sq"] = zeros_like(p)
            state["step"] += 1
            step, exp_avg, exp_avg_sq = state["step"], state["exp_avg"], state["exp_avg_sq"]
            if wd != 0 and decoupled:
                p.mul_(1 - lr * wd)
            # (torch's single-tensor update, op for op: the same bits)
            exp_avg.lerp_(grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            step_size = lr / (1 - beta1 ** step)
            bias_correction2_sqrt = (1 - beta2 ** step) ** 0.5
            second = exp_avg_sq
            if group["amsgrad"]:
                second = state["max_exp_avg_sq"]
                second.copy_(maximum(second, exp_avg_sq))
            denom = (sqrt(second) / bias_correction2_sqrt).add_(eps)
            p.addcdiv_(exp_avg, denom, value=-step_size)


class AdamW(Adam):
    """Adam with decoupled weight decay (``p *= 1 - lr * weight_decay`` before the Adam step)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False, *,
                 maximize=False, foreach=None, capturable=False, differentiable=False, fused=None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach, maximize=maximize,
                         capturable=capturable, differentiable=differentiable, fused=fused,
                         decoupled_weight_decay=True)
