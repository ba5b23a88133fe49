"""``daskgrad.autograd.function``: where torch users import ``Function``, ``FunctionCtx`` and
``once_differentiable`` from (``torch.autograd.function``)."""
from ..function import Function, FunctionCtx, once_differentiable

__all__ = ["Function", "FunctionCtx", "once_differentiable"]
