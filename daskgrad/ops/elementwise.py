"""Elementwise ops and their VJP rules.

Rule contract (every op module): each op is a table entry (:func:`~daskgrad.graph.primitive`);
its rule ``rule(g, s, **params)`` gets the output cotangent ``g`` (a Tensor), ``s``, whose
attributes are the tensors the op saved, and the plain params the op bound; it returns one
cotangent per input, ``None`` meaning zero.  Rules are module-level (or one-line lambdas of
``g``, ``s`` and params): they close over no tensor, so nothing outlives a released node.  Rules are written in daskgrad
ops, so ``create_graph=True`` differentiates them again.  Rules need not undo
broadcasting, casts or rechunking: the engine sums a cotangent to its input's
shape and gives it the input's dtype and chunks.

Complex inputs follow torch's convention: the cotangent is the conjugate Wirtinger derivative,
so a holomorphic ``f`` gets ``g * conj(f'(z))`` (``conj`` is free on real tensors) and ``abs``
gets ``g * z / |z|``.  Ops without such a rule refuse complex inputs under autograd
(:func:`~._util.refuse_complex`) instead of returning a wrong number.
"""
from __future__ import annotations

import math
import operator

import dask.array as da
import numpy as np

from .. import chunk
from ..graph import RESULT, primitive
from ._util import (as_tensor, check_broadcast, check_same_device, only_tensor, raw, refuse_complex,
                    tensor_or_scalar)
from .._tensor import Tensor, require_cuda


# ----------------------------------------------------------------- unary table
def _unary(name, node, forward, rule, save, complex_ok=True):
    """An elementwise op of one tensor: its table entry (rule ``rule(g, s)``, saving the input
    ``"x"``, the result ``"r"`` or nothing) and the public function that binds it."""
    p = primitive(name, torch=node)
    p.vjp(rule)

    def op(x):
        x = as_tensor(x)
        if not complex_ok:
            refuse_complex(name, x)
        saved = None if save is None else {save: x if save == "x" else RESULT}
        return p.bind(forward(x.array), x, save=saved)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"Elementwise ``{name}``; gradient node ``{node}``."
    op.primitive = p
    return op


def _kernel(fn):
    """An elementwise chunk kernel as a fusable blockwise layer that keeps the chunk type."""
    return lambda a: da.map_blocks(fn, a, dtype=a.dtype, meta=a._meta)


conj_p = primitive("conj", torch="ConjBackward0")
conj_p.vjp(lambda g, s: (conj(g),))
real_p = primitive("real", torch="RealBackward0")
real_p.vjp(lambda g, s: (g,))


def conj(x):
    """Complex conjugate (differentiable); real tensors and numbers come back unchanged, no node."""
    if isinstance(x, (int, float)):
        return x
    if isinstance(x, complex):
        return x.conjugate()
    x = as_tensor(x)
    if x.dtype.kind != "c":
        return x
    return conj_p.bind(da.conj(x.array), x)


def real(x):
    """The real part (differentiable): a complex cotangent reaching a real input keeps its real part."""
    x = as_tensor(x)
    if x.dtype.kind != "c":
        return x
    return real_p.bind(da.real(x.array), x)


# holomorphic: each rule multiplies by conj(f'(z)), which is f'(x) for real x
neg = _unary("neg", "NegBackward0", operator.neg, lambda g, s: (-g,), None)
exp = _unary("exp", "ExpBackward0", da.exp, lambda g, s: (g * conj(s.r),), "r")
expm1 = _unary("expm1", "Expm1Backward0", da.expm1, lambda g, s: (g * conj(s.r + 1),), "r")
log = _unary("log", "LogBackward0", da.log, lambda g, s: (g / conj(s.x),), "x")
log1p = _unary("log1p", "Log1PBackward0", da.log1p, lambda g, s: (g / conj(s.x + 1),), "x")
sin = _unary("sin", "SinBackward0", da.sin, lambda g, s: (g * conj(cos(s.x)),), "x")
cos = _unary("cos", "CosBackward0", da.cos, lambda g, s: (-g * conj(sin(s.x)),), "x")
tan = _unary("tan", "TanBackward0", da.tan, lambda g, s: (g * conj(s.r * s.r + 1),), "r")
tanh = _unary("tanh", "TanhBackward0", da.tanh, lambda g, s: (g * conj(1 - s.r * s.r),), "r")
sigmoid = _unary("sigmoid", "SigmoidBackward0", _kernel(chunk.sigmoid), lambda g, s: (g * s.r * (1 - s.r),), "r",
                 complex_ok=False)
softplus = _unary("softplus", "SoftplusBackward0", _kernel(chunk.softplus),
                  lambda g, s: (g * sigmoid(s.x),), "x", complex_ok=False)
# relu'(0) = 0 and abs'(0) = sign(0) = 0, as in torch
relu = _unary("relu", "ReluBackward0", lambda a: da.maximum(a, 0),
              lambda g, s: (where(s.r > 0, g, 0),), "r", complex_ok=False)
def _abs_rule(g, s):
    if s.x.dtype.kind != "c":
        return (g * sign(s.x),)
    r = abs(s.x)  # z / |z|, 0 at 0, built from differentiable ops so double backward stays right
    return (g * where(r == 0, 0, s.x / where(r == 0, 1, r)),)


abs = _unary("abs", "AbsBackward0", da.absolute, _abs_rule, "x")
sqrt = _unary("sqrt", "SqrtBackward0", da.sqrt, lambda g, s: (g / conj(2 * s.r),), "r")
sign = _unary("sign", "SignBackward0", da.sign, lambda g, s: (zeros_like(g),), None, complex_ok=False)


def square(x):
    return pow(x, 2)


# ---------------------------------------------------------------- binary ops
def _binary(p, forward, x, y, save=None, node=None, **params):
    x, y = tensor_or_scalar(x), tensor_or_scalar(y)
    check_same_device(x, y)
    check_broadcast(getattr(x, "shape", ()), getattr(y, "shape", ()))
    return p.bind(forward(raw(x), raw(y)), only_tensor(x), only_tensor(y), save=save, node=node, **params)


def _operands(**values):
    """Split operands into saved tensors and plain params: a Python number is a param, a tensor is
    saved (``None`` leaves it unsaved).  A rule reads either back with :func:`_value`."""
    save = {k: v if isinstance(v, Tensor) else None for k, v in values.items()}
    params = {k: v for k, v in values.items() if v is not None and not isinstance(v, Tensor)}
    return save, params


def _value(s, name, param):
    v = getattr(s, name)
    return param if v is None else v


add_p = primitive("add", torch="AddBackward0")
add_p.vjp(lambda g, s: (g, g))
sub_p = primitive("sub", torch=("SubBackward0", "RsubBackward1"))
sub_p.vjp(lambda g, s: (g, -g))


def add(a, b):
    return _binary(add_p, operator.add, a, b)


def sub(a, b):
    return _binary(sub_p, operator.sub, a, b, node="SubBackward0" if isinstance(a, Tensor) else "RsubBackward1")


def _needs_grad(t):
    return isinstance(t, Tensor) and t.requires_grad


def _save_for_other(a, b):
    """Save each operand only when the *other* one needs a gradient (torch's MulBackward0/DivBackward0
    do the same): ``h = x * 1; h *= 2; h += 1`` must not keep ``h`` and then refuse its in-place edit."""
    a, b = tensor_or_scalar(a), tensor_or_scalar(b)
    return a, b, _operands(a=a if _needs_grad(b) else None, b=b)


mul_p = primitive("mul", torch="MulBackward0")
truediv_p = primitive("truediv", torch="DivBackward0")


@mul_p.vjp
def _mul_rule(g, s, a=None, b=None):
    a, b = _value(s, "a", a), _value(s, "b", b)
    return (g * conj(b) if s.needs[0] else None), (g * conj(a) if s.needs[1] else None)


@truediv_p.vjp
def _truediv_rule(g, s, a=None, b=None):
    a, b = _value(s, "a", a), _value(s, "b", b)
    return (g / conj(b) if s.needs[0] else None), (-g * conj(a / (b * b)) if s.needs[1] else None)


def mul(a, b):
    a, b, (save, params) = _save_for_other(a, b)
    if not _needs_grad(a):
        save["b"] = None
        params.pop("b", None)
    return _binary(mul_p, operator.mul, a, b, save, **params)


def truediv(a, b):
    a, b, (save, params) = _save_for_other(a, b)
    return _binary(truediv_p, operator.truediv, a, b, save, **params)


pow_p = primitive("pow", torch=("PowBackward0", "PowBackward1", "PowBackward2"))


@pow_p.vjp
def _pow_rule(g, s, a=None, b=None):
    # torch's masks: d/da is 0 where b == 0 (not 0 * a**-1, NaN at a == 0), and d/db is 0 where
    # a == 0 and b >= 0 (not 0 * log 0); elsewhere the plain formulas, infinities included
    a, b = _value(s, "a", a), _value(s, "b", b)
    if isinstance(b, Tensor):
        ga = where(b == 0, 0, g * b * pow(a, b - 1))
    else:  # a real exponent (complex ones are refused): conj(b * a**(b-1)) = b * conj(a**(b-1))
        ga = g * b * conj(pow(a, b - 1)) if b != 0 else zeros_like(g)
    gb = None
    if isinstance(b, Tensor):
        if isinstance(a, Tensor):
            gb = where((a == 0) & (b >= 0), 0, g * s.r * log(a))
        elif a == 0:  # a Python base stays a Python number: a host 0-d chunk would meet device chunks
            gb = where(b >= 0, 0, g * s.r * -math.inf)
        else:
            gb = g * s.r * (math.log(a) if a > 0 else math.nan)
    return ga, gb


def pow(a, b):
    if isinstance(b, Tensor) or isinstance(b, complex):
        refuse_complex("pow", a, b)
    node = ("PowBackward0" if not isinstance(b, Tensor) else
            "PowBackward1" if isinstance(a, Tensor) else "PowBackward2")
    save, params = _operands(a=tensor_or_scalar(a), b=tensor_or_scalar(b))
    return _binary(pow_p, operator.pow, a, b, {**save, "r": RESULT}, node=node, **params)


def _tie(g, s, strict, a, b):
    # the larger (smaller) input takes the gradient; a tie splits it 0.5 / 0.5, as in torch
    a, b = _value(s, "a", a), _value(s, "b", b)  # a Python bound stays a number: a host 0-d chunk would meet device chunks
    tie = where(a == b, g * 0.5, 0)
    return where(strict(a, b), g, tie), where(strict(b, a), g, tie)


maximum_p = primitive("maximum", torch="MaximumBackward0")
maximum_p.vjp(lambda g, s, a=None, b=None: _tie(g, s, operator.gt, a, b))
minimum_p = primitive("minimum", torch="MinimumBackward0")
minimum_p.vjp(lambda g, s, a=None, b=None: _tie(g, s, operator.lt, a, b))


def maximum(a, b):
    refuse_complex("maximum", a, b)
    save, params = _operands(a=tensor_or_scalar(a), b=tensor_or_scalar(b))
    return _binary(maximum_p, da.maximum, a, b, save, **params)


def minimum(a, b):
    refuse_complex("minimum", a, b)
    save, params = _operands(a=tensor_or_scalar(a), b=tensor_or_scalar(b))
    return _binary(minimum_p, da.minimum, a, b, save, **params)


where_p = primitive("where", torch="WhereBackward0")
where_p.vjp(lambda g, s: (where(s.c, g, 0), where(s.c, 0, g)))


def where(condition, x, y):
    """``x`` where ``condition`` else ``y``; the condition gets no gradient."""
    cond, x, y = as_tensor(condition), tensor_or_scalar(x), tensor_or_scalar(y)
    check_same_device(cond, x, y)
    check_broadcast(getattr(x, "shape", ()), getattr(y, "shape", ()))
    check_broadcast(cond.shape, np.broadcast_shapes(getattr(x, "shape", ()), getattr(y, "shape", ())))
    return where_p.bind(da.where(cond.array, raw(x), raw(y)), only_tensor(x), only_tensor(y), save={"c": cond})


clamp_p = primitive("clamp", torch=("ClampBackward0", "ClampBackward1"))


@clamp_p.vjp
def _clamp_rule(g, s, lo=None, hi=None):
    lo, hi = _value(s, "lo", lo), _value(s, "hi", hi)
    keep = None
    if lo is not None:
        keep = s.x >= lo
    if hi is not None:
        keep = (s.x <= hi) if keep is None else keep & (s.x <= hi)
    g_lo = where(s.x < lo, g, 0) if isinstance(lo, Tensor) else None
    g_hi = where(s.x > hi, g, 0) if isinstance(hi, Tensor) else None
    return (g if keep is None else where(keep, g, 0)), g_lo, g_hi


def clip(x, a_min=None, a_max=None):
    """Clamp to ``[a_min, a_max]``; on a bound the input keeps its gradient (torch's convention)."""
    x, lo, hi = as_tensor(x), tensor_or_scalar(a_min), tensor_or_scalar(a_max)
    refuse_complex("clamp", x, lo, hi)
    out = x.array
    if lo is not None:
        out = da.maximum(out, raw(lo))
    if hi is not None:
        out = da.minimum(out, raw(hi))
    save, params = _operands(lo=lo, hi=hi)
    tensor_bounds = isinstance(lo, Tensor) or isinstance(hi, Tensor)
    return clamp_p.bind(out, x, only_tensor(lo), only_tensor(hi), save={"x": x, **save},
                        node="ClampBackward0" if tensor_bounds else "ClampBackward1", **params)


clamp = clip


# ------------------------------------------------- comparisons (never differentiable)
def _compare(fn):
    def op(a, b):
        a, b = tensor_or_scalar(a), tensor_or_scalar(b)
        out = Tensor._make(fn(raw(a), raw(b)))
        # `while y.norm() < 1000`: forcing the comparison must persist what y's backward saved
        out._origin = tuple(t for t in (a, b) if isinstance(t, Tensor) and t.grad_fn is not None)
        return out
    op.__name__ = fn.__name__
    return op


lt, le, gt, ge = _compare(operator.lt), _compare(operator.le), _compare(operator.gt), _compare(operator.ge)
eq, ne = _compare(operator.eq), _compare(operator.ne)
logical_and, logical_or = _compare(operator.and_), _compare(operator.or_)


# ------------------------------------------------------- casts and constants
astype_p = primitive("astype", torch="ToCopyBackward0")
astype_p.vjp(lambda g, s: (g,))
to_device_p = primitive("to_device", torch="ToCopyBackward0")
to_device_p.vjp(lambda g, s, *, device: (to_device(g, device),))
clone_p = primitive("clone", torch="CloneBackward0")
clone_p.vjp(lambda g, s: (g,))


def astype(x, dtype):
    x = as_tensor(x)
    if x.dtype == dtype:
        return x
    return astype_p.bind(x.array.astype(dtype), x)


def to_device(x, device):
    """Move chunks between host (``"cpu"``, NumPy) and GPU (``"cuda"``, cupy); differentiable."""
    x = as_tensor(x)
    device = "cuda" if str(device).startswith("cuda") else str(device)
    if device == x.device:
        return x
    if device == "cuda":
        require_cuda()
    out = x.array.to_backend("cupy" if device == "cuda" else "numpy")
    return to_device_p.bind(out, x, device=x.device)  # the rule moves the cotangent back


def clone(x):
    x = as_tensor(x)
    return clone_p.bind(x.array.copy(), x)


fill_p = primitive("fill", torch=("FillBackward0", "ZeroBackward0"))
fill_p.vjp(lambda g, s: (zeros_like(g),))
copy_p = primitive("copy", torch="CopyBackwards")
copy_p.vjp(lambda g, s: (zeros_like(g), g))


def fill(x, value, node="FillBackward0"):
    """``x.fill_(value)``'s out-of-place result: what ``x`` came from gets a zero gradient."""
    return fill_p.bind(da.full_like(x.array, value, dtype=x.dtype), x, node=node)


def copy_to(x, src):
    """``x.copy_(src)``'s out-of-place result: ``src`` broadcast to ``x``; ``x`` gets no gradient."""
    src = tensor_or_scalar(src)
    return copy_p.bind(da.broadcast_to(raw(src), x.shape).astype(x.dtype), x, only_tensor(src))


def full_like(x, fill_value, dtype=None):
    """A constant with ``x``'s shape, chunks and chunk type (``meta``), so a cupy tensor gets cupy chunks."""
    a = raw(x)
    if any(n != n for n in a.shape):  # unknown chunk sizes (after a boolean mask): derive from the blocks
        return Tensor._make(da.map_blocks(chunk.full_like, a, fill_value, dtype=dtype or a.dtype, meta=a._meta))
    return Tensor._make(da.full(a.shape, fill_value, dtype=dtype or a.dtype, chunks=a.chunks, meta=a._meta))


def zeros_like(x, dtype=None):
    return full_like(x, 0, dtype)


def ones_like(x, dtype=None):
    return full_like(x, 1, dtype)
