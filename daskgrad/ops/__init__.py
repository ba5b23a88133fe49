"""Step 3 of the data flow: the ops, each a table entry (primitive) with its VJP rule beside it.

``elementwise`` (the rule contract is at its top), ``reductions``, ``shape``,
``indexing``, ``linalg``, ``nn``.  This module also gives :class:`~daskgrad.Tensor` its
operators and methods, in one table, so a method is easy to trace to its op.
"""
from __future__ import annotations

from .._tensor import Tensor
from .elementwise import (abs, add, astype, clamp, clip, clone, to_device, cos, eq, exp, expm1, full_like, ge, gt, le,
                          log, log1p, logical_and, logical_or, lt, maximum, minimum, mul, ne, neg, ones_like,
                          pow, relu, sigmoid, sign, sin, softplus, sqrt, square, sub, tan, tanh, truediv,
                          where, zeros_like)
from .indexing import getitem, setitem
from .linalg import dot, einsum, matmul, tensordot
from .nn import (binary_cross_entropy_with_logits, cross_entropy, log_softmax, mse_loss, nll_loss,
                 softmax)
from .reductions import (amax, amin, argmax, argmin, cumsum, logsumexp, max, mean, min, norm, prod, std, sum, sum_to,
                         var)
from .shape import (broadcast_to, concatenate, diff, expand_dims, flatten, flip, moveaxis, pad, permute, rechunk,
                    reshape, roll, split, squeeze, stack, swapaxes, transpose, unsqueeze)
from .stencil import convolve, correlate

__all__ = ["abs", "add", "amax", "amin", "argmax", "argmin", "astype", "binary_cross_entropy_with_logits",
           "broadcast_to", "clamp", "clip", "clone", "concatenate", "cos", "cross_entropy", "cumsum", "diff",
           "dot", "einsum", "eq", "exp", "expand_dims", "expm1", "flatten", "flip", "full_like", "ge",
           "getitem", "gt", "le", "log", "log1p", "log_softmax", "logical_and", "logical_or", "logsumexp",
           "lt", "matmul", "max", "maximum", "mean", "min", "minimum", "moveaxis", "mse_loss", "mul", "ne",
           "neg", "nll_loss", "norm", "ones_like", "pad", "permute", "pow", "prod", "rechunk", "relu",
           "reshape", "roll", "setitem", "sigmoid", "sign", "sin", "softmax", "softplus", "split", "sqrt",
           "square", "squeeze", "stack", "std", "sub", "sum", "swapaxes", "tan", "tanh", "tensordot", "to_device",
           "transpose", "truediv", "unsqueeze", "var", "where", "zeros_like"]
__all__ += ["convolve", "correlate"]


def _flip_args(fn):
    return lambda self, other: fn(other, self)


def _shape_args(fn):
    # torch style x.reshape(2, 3) and x.expand(3) as well as NumPy style x.reshape((2, 3))
    return lambda self, *shape: fn(self, shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape)


def _inplace(fn):
    return lambda self, other: self._inplace(fn, other)


_METHODS = {
    "__add__": add, "__radd__": _flip_args(add), "__sub__": sub, "__rsub__": _flip_args(sub),
    "__mul__": mul, "__rmul__": _flip_args(mul), "__truediv__": truediv, "__rtruediv__": _flip_args(truediv),
    "__pow__": pow, "__rpow__": _flip_args(pow), "__matmul__": matmul, "__rmatmul__": _flip_args(matmul),
    "__neg__": neg, "__abs__": abs, "__getitem__": getitem,
    "__lt__": lt, "__le__": le, "__gt__": gt, "__ge__": ge, "__eq__": eq, "__ne__": ne,
    "__and__": logical_and, "__or__": logical_or,
    "__iadd__": _inplace(add), "__isub__": _inplace(sub), "__imul__": _inplace(mul),
    "__itruediv__": _inplace(truediv),
    "add_": _inplace(add), "sub_": _inplace(sub), "mul_": _inplace(mul), "div_": _inplace(truediv),
    "clamp_": lambda self, a_min=None, a_max=None: self._inplace(lambda s: clip(s, a_min, a_max)),
    "pow_": _inplace(pow), "neg_": lambda self: self._inplace(neg), "abs_": lambda self: self._inplace(abs),
    "exp_": lambda self: self._inplace(exp), "log_": lambda self: self._inplace(log),
    "sin_": lambda self: self._inplace(sin), "cos_": lambda self: self._inplace(cos),
    "tanh_": lambda self: self._inplace(tanh), "sigmoid_": lambda self: self._inplace(sigmoid),
    "relu_": lambda self: self._inplace(relu), "sqrt_": lambda self: self._inplace(sqrt),
    "add": add, "sub": sub, "mul": mul, "div": truediv, "pow": pow, "matmul": matmul, "dot": dot,
    "neg": neg, "exp": exp, "expm1": expm1, "log": log, "log1p": log1p, "sin": sin, "cos": cos, "tan": tan,
    "tanh": tanh, "sigmoid": sigmoid, "relu": relu, "softplus": softplus, "abs": abs, "sqrt": sqrt,
    "square": square, "sign": sign, "maximum": maximum, "minimum": minimum, "clip": clip, "clamp": clip,
    "sum": sum, "mean": mean, "max": max, "min": min, "amax": amax, "amin": amin, "prod": prod, "var": var,
    "std": std, "logsumexp": logsumexp, "argmax": argmax, "argmin": argmin, "cumsum": cumsum, "norm": norm,
    "softmax": softmax, "log_softmax": log_softmax,
    "reshape": _shape_args(reshape), "view": _shape_args(reshape), "flatten": flatten,
    "transpose": lambda self, *axes: (swapaxes(self, *axes) if len(axes) == 2 and self.ndim != 2 else
                                      transpose(self, axes[0] if len(axes) == 1 else (axes or None))),
    "permute": _shape_args(permute), "swapaxes": swapaxes, "moveaxis": moveaxis,
    "broadcast_to": broadcast_to, "expand": _shape_args(broadcast_to), "expand_dims": expand_dims,
    "unsqueeze": unsqueeze, "squeeze": squeeze, "flip": flip, "roll": roll, "rechunk": rechunk,
    "astype": astype, "clone": clone, "to": to_device,
    "cuda": lambda self: to_device(self, "cuda"), "cpu": lambda self: to_device(self, "cpu"),
    "double": lambda self: astype(self, "float64"), "float": lambda self: astype(self, "float32"),
}
for _name, _fn in _METHODS.items():
    setattr(Tensor, _name, _fn)
Tensor.T = property(lambda self: transpose(self))
Tensor.mT = property(lambda self: swapaxes(self, -1, -2))
from .layers import dropout_mask, embedding, embedding_backward, erf  # noqa: E402
__all__ += ["embedding", "erf"]
Tensor.erf = erf

from . import inplace  # noqa: E402,F401  (installs Tensor.__setitem__, fill_, copy_)
