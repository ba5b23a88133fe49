"""Elementwise ops and their VJP rules.

Rule contract (every op module): each op is a table entry (:func:`~daskgrad.graph.primitive`)
that owns its forward (``impl``) and names what its rule reads (``save``);
its rule ``rule(g, s, **params)`` gets the output cotangent ``g`` (a Tensor), ``s``, whose
attributes are the values the op saved (a Python number operand stays a number there: a host
0-d chunk would meet device chunks), and the plain params the op bound; it returns one
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

import functools
import math
import numbers
import operator

import dask.array as da
import dask.base
import numpy as np

from .. import _dask as door, chunk
from ..graph import View, guard, primitive, promoted
from ._util import (as_tensor, binary_operands, check_broadcast, check_same_device, only_tensor, public, raw,
                    numpy_bool_as_float, refuse_complex, torch_scalar, refuse_dtype_kinds, SCALARS, tensor_operand,
                    tensor_or_scalar, value)
from .._data import DEFAULT_FLOAT, checked_scalar, result_type, wrapped_int
from .._modes import is_grad_enabled
from .._tensor import Tensor, require_cuda


# ----------------------------------------------------------------- unary table
def _unary(name, node, impl, rule, save=(), complex_ok=True, methods=(), floating=True):
    """An elementwise op of one tensor as one line: its primitive, whose rule ``rule(g, s)`` reads
    the input ``s.x`` or the result ``s.r`` when ``save`` names it, and the public op that binds it.
    ``floating``: an integer or bool input is read as the default float (torch's ``exp`` of int64 is
    float32; NumPy's float64), as not for ``neg``, ``abs``, ``floor``."""
    p = primitive(name, torch=node, impl=impl, save=save, elementwise=True, promote="floating" if floating else None,
                  prepare=functools.partial(tensor_operand, refuse=None if complex_ok else name))
    p.vjp(rule)

    def op(x):
        return p.bind(x)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"Elementwise ``{name}``; gradient node ``{node}``."
    op.primitive = p
    return public(*methods)(op)


def _kernel(fn):
    """An elementwise chunk kernel as a fusable blockwise layer that keeps the chunk type; of an
    integer or bool input, the floating dtype NumPy's ufuncs give (``exp``'s: its values' dtype)."""
    def layer(a):
        dtype = float_result(a.dtype)
        a = a if dtype == a.dtype else a.astype(dtype)
        return da.map_blocks(fn, a, dtype=dtype, meta=a._meta)
    return layer


def float_result(dtype):
    """The dtype of a floating op (torch's ``exp``) of ``dtype``: itself where floating or complex, else the
    default float."""
    return dtype if dtype.kind in "fc" else DEFAULT_FLOAT


conj_p = primitive("conj", torch="ConjBackward0", impl=da.conj)
conj_p.vjp(lambda g, s: (conj(g),))
# torch's Tensor.conj(): a view (the storage seen conjugated: a write through it writes the conjugate);
# conj_p, a new tensor, is conj_physical and what rules use
conj_view_p = primitive("conj_view", torch="ConjBackward0", impl=da.conj,
                        view=View(lambda shape, strides, offset, out_shape: (strides, offset),
                                  lambda a, new: da.conj(new)))
conj_view_p.vjp(lambda g, s: (conj(g),))
real_p = primitive("real", torch="RealBackward0", impl=da.real)
real_p.vjp(lambda g, s: (g,))


imag_p = primitive("imag", torch="ImagBackward0", impl=da.imag)
imag_p.vjp(lambda g, s: (g * 1j,))


def conj(x):
    """Complex conjugate (differentiable); real tensors and numbers come back unchanged, no node."""
    if isinstance(x, (int, float)):
        return x
    if isinstance(x, complex):
        return x.conjugate()
    x = as_tensor(x)
    if x.dtype.kind != "c":
        return x
    return conj_p.bind(x)


def real_part(x):
    """The real part, a new tensor (differentiable): a complex cotangent reaching a real input keeps its real
    part.  (The public ``real`` is torch's view of it: ``composite.py``.)"""
    x = as_tensor(x)
    if x.dtype.kind != "c":
        return x
    return real_p.bind(x)


def imag_part(x):
    """The imaginary part of a complex tensor, a new tensor (differentiable; its cotangent ``g`` reaches the
    input as ``g * 1j``).  (The public ``imag`` is torch's view of it: ``composite.py``.)"""
    return imag_p.bind(as_tensor(x))


# holomorphic: each rule multiplies by conj(f'(z)), which is f'(x) for real x
neg = _unary("neg", "NegBackward0", operator.neg, lambda g, s: (-g,), methods=("__neg__", "neg_", "neg"),
             floating=False)


def _neg_operand(x):
    (x,) = tensor_operand(x)
    if x.dtype == bool:  # (torch's words; NumPy's negative refuses bools too)
        raise RuntimeError("Negation, the `-` operator, on a bool tensor is not supported. If you are trying to "
                           "invert a mask, use the `~` or `logical_not()` operator instead.")
    return (x,)


neg.primitive.prepare = _neg_operand
exp = _unary("exp", "ExpBackward0", da.exp, lambda g, s: (g * conj(s.r),), ("r",), methods=("exp_", "exp"))
expm1 = _unary("expm1", "Expm1Backward0", da.expm1, lambda g, s: (g * conj(s.r + 1),), ("r",), methods=("expm1",))
log = _unary("log", "LogBackward0", da.log, lambda g, s: (g / conj(s.x),), ("x",), methods=("log_", "log"))
log1p = _unary("log1p", "Log1PBackward0", da.log1p, lambda g, s: (g / conj(s.x + 1),), ("x",), methods=("log1p",))
sin = _unary("sin", "SinBackward0", da.sin, lambda g, s: (g * conj(cos(s.x)),), ("x",), methods=("sin_", "sin"))
cos = _unary("cos", "CosBackward0", da.cos, lambda g, s: (-g * conj(sin(s.x)),), ("x",), methods=("cos_", "cos"))
tan = _unary("tan", "TanBackward0", da.tan, lambda g, s: (g * conj(s.r * s.r + 1),), ("r",), methods=("tan",))
tanh = _unary("tanh", "TanhBackward0", da.tanh, lambda g, s: (g * conj(1 - s.r * s.r),), ("r",),
              methods=("tanh_", "tanh"))
def _sigmoid_rule(g, s):
    r = s.r
    if r.dtype.kind == "c":  # torch's sigmoid_backward of complex: g * conj((1 - r) * r)
        return (g * conj((1 - r) * r),)
    return (g * r * (1 - r),)


sigmoid = _unary("sigmoid", "SigmoidBackward0", _kernel(chunk.sigmoid), _sigmoid_rule, ("r",),
                 methods=("sigmoid_", "sigmoid"))
softplus = _unary("softplus", "SoftplusBackward0", _kernel(chunk.softplus),
                  lambda g, s: (g * sigmoid(s.x),), ("x",), complex_ok=False, methods=("softplus",))
def _relu_rule(g, s):
    """relu'(0) = 0, as in torch.  Recording a graph (``create_graph``), the zeros are ``0 * r + 0``, so the
    gradient depends on the input as torch's threshold_backward does (its own gradient is 0); else the
    number 0, the same +0.0 (``r <= 0`` is a finite zero there) without two passes over the chunk."""
    return (where(s.r <= 0, 0 * s.r + 0 if is_grad_enabled() else 0, g),)


relu = _unary("relu", "ReluBackward0", chunk.relu, _relu_rule, ("r",), complex_ok=False,
              methods=("relu_", "relu"), floating=False)


def _abs_rule(g, s):
    if s.x.dtype.kind != "c":  # (0 at NaN: torch's sign)
        return (g * sign(s.x),)
    r = abs(s.x)  # z / |z|, 0 at 0, built from differentiable ops so double backward stays right
    return (g * where(r == 0, 0, s.x / where(r == 0, 1, r)),)


abs = _unary("abs", "AbsBackward0", da.absolute, _abs_rule, ("x",), methods=("__abs__", "abs_", "abs"), floating=False)
sqrt = _unary("sqrt", "SqrtBackward0", da.sqrt, lambda g, s: (g / conj(2 * s.r),), ("r",), methods=("sqrt_", "sqrt"))
def _sign_layer(a):
    if a.dtype.kind == "b":  # (torch's sign of a bool is itself; NumPy's refuses)
        return da.not_equal(a, False)
    if a.dtype.kind != "f":
        return da.sign(a)
    return da.map_blocks(chunk.sign, a, dtype=a.dtype, meta=a._meta)


sign = _unary("sign", "SignBackward0", _sign_layer, lambda g, s: (zeros_like(g),), complex_ok=False,
              methods=("sign",), floating=False)
sinh = _unary("sinh", "SinhBackward0", da.sinh, lambda g, s: (g * conj(cosh(s.x)),), ("x",), methods=("sinh",))
cosh = _unary("cosh", "CoshBackward0", da.cosh, lambda g, s: (g * conj(sinh(s.x)),), ("x",), methods=("cosh",))


@public("square")
def square(x):
    """``x ** 2`` elementwise (NumPy's and torch's ``square``)."""
    return pow(x, 2)


# ---------------------------------------------------------------- binary ops
def _binary(name, torch, impl, save=(), refuse=None, promote="common", opmath=False):
    """A primitive of two operands that broadcast; either may be a Python number, which reaches the
    rule as itself (``s.a``/``s.b``) when ``save`` names it.  The forward reads them in torch's result
    type (``promote="floating"``: a floating one, as ``div``'s), not NumPy's."""
    return primitive(name, torch=torch, impl=impl, args=("a", "b"), save=save, promote=promote, opmath=opmath,
                     elementwise=True, prepare=functools.partial(binary_operands, refuse=refuse))


add_p = _binary("add", "AddBackward0", operator.add)
add_p.vjp(lambda g, s: (g, g))
sub_p = _binary("sub", ("SubBackward0", "RsubBackward1"), operator.sub)
sub_p.vjp(lambda g, s: (g, -g))


def _alpha(a, b, alpha):
    """add's and sub's ``alpha=``, checked against the result type as torch's: no float alpha for
    integers, a bool one for bools only, none out of the dtype's range; of bools, a bool."""
    dtype = result_type(a, b)
    if dtype.kind in "biu" and isinstance(alpha, (float, complex)):
        raise RuntimeError("For integral input tensors, argument alpha must not be a floating point number.")
    if isinstance(alpha, complex) and dtype.kind != "c":
        raise RuntimeError("For non-complex input tensors, argument alpha must not be a complex number.")
    if isinstance(alpha, bool) and dtype.kind != "b":
        raise RuntimeError("Boolean alpha only supported for Boolean results.")
    if dtype.kind == "b":
        alpha = bool(alpha)
    return checked_scalar(alpha, dtype), dtype


def _with_alpha(plain, a, b, alpha, sign, node):
    """``plain(a, alpha * b)`` (``sign``: -1 for sub): of floats one fused multiply-add, as torch's kernel
    (``a + alpha * b`` rounded once: SGD's ``p.add_(g, alpha=-lr)`` is torch's bit for bit).  A 0-d
    tensor ``alpha`` (a scheduler's tensor learning rate) is a product, as its value is not known here."""
    if isinstance(alpha, Tensor):
        return plain.bind(a, mul(b, alpha), node=node)
    if isinstance(b, np.generic):  # (a NumPy number is weak, as torch reads it: np.uint8(200) * 2 is 400)
        b = b.item()
    alpha, dtype = _alpha(a, b, alpha)
    if dtype.kind == "c":  # (torch's complex a + (alpha + 0j) * b: an infinite part of b makes the other NaN)
        return scaled_add_p.bind(a, b, complex(sign * alpha), node=node)
    if alpha == 1:
        return plain.bind(a, b, node=node)
    if isinstance(b, numbers.Number):  # (a number: the number scaled)
        return plain.bind(a, b * alpha, node=node)
    if dtype.kind != "f":  # (alpha * b in the result's dtype, as torch's: not in b's own, where it could wrap)
        return plain.bind(a, mul(b if b.dtype == dtype else astype(b, dtype), alpha), node=node)
    return scaled_add_p.bind(a, b, sign * alpha, node=node)


def _scaled_add_operands(a, b, alpha):
    return (*binary_operands(a, b), alpha)


scaled_add_p = primitive("scaled_add", torch=("AddBackward0", "SubBackward0", "RsubBackward1"),
                         impl=chunk.scaled_add, args=("a", "b", "alpha"), save=("alpha",), consts=("alpha",),
                         prepare=_scaled_add_operands, promote="common", elementwise=True)
scaled_add_p.vjp(lambda g, s: (g, g * (s.alpha.conjugate() if isinstance(s.alpha, complex) else s.alpha)))


def _complex(a, b):
    for v in (a, b):
        t = type(v)
        if t is float or t is int or t is bool:  # (the common operands first: a loop's add and sub pass here)
            continue
        if t is Tensor:
            if v._storage.value.dtype.kind == "c":
                return True
        elif isinstance(v, complex) or getattr(v, "dtype", None) is not None and v.dtype.kind == "c":
            return True
    return False


def _is_bool(v):
    """A bool or an array of bools (sub's operands that torch refuses)."""
    t = type(v)
    if t is float or t is int:
        return False
    if t is Tensor:
        return v._storage.value.dtype == np.bool_
    return isinstance(v, bool) or getattr(v, "dtype", None) == np.bool_


@public("__add__", "__radd__", "__iadd__", "add_", "add")
def add(a, b, *, alpha=1):
    """``a + alpha * b`` with broadcasting (NumPy's ``add``, torch's ``add``); a Python number stays weakly
    typed, as in torch."""
    if type(alpha) is int and alpha == 1 and not _complex(a, b):
        return add_p.bind(a, b)
    if not isinstance(a, Tensor) and isinstance(b, Tensor) and type(alpha) is int and alpha == 1:  # (number + t:
        # torch's t.add(number), t first)
        a, b = b, a
    return _with_alpha(add_p, a, b, alpha, 1, "AddBackward0")


@public("__sub__", "__rsub__", "__isub__", "sub_", "sub")
def sub(a, b, *, alpha=1):
    """``a - alpha * b`` with broadcasting (NumPy's ``subtract``, torch's ``sub``)."""
    node = "SubBackward0" if isinstance(a, Tensor) else "RsubBackward1"
    a, b = numpy_bool_as_float(a), numpy_bool_as_float(b)
    bools = [_is_bool(a), _is_bool(b)]
    if any(bools):  # (torch's refusals; NumPy refuses two bools too)
        if all(bools):
            raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or "
                               "`logical_xor()` operator instead.")
        raise RuntimeError("Subtraction, the `-` operator, with a bool tensor is not supported. If you are trying to "
                           "invert a mask, use the `~` or `logical_not()` operator instead.")
    if type(alpha) is int and alpha == 1 and not _complex(a, b):
        return sub_p.bind(a, b, node=node)
    return _with_alpha(sub_p, a, b, alpha, -1, node)


# each operand is saved only when the *other* one needs a gradient (torch's MulBackward0/DivBackward0
# do the same): `h = x * 1; h *= 2; h += 1` must not keep `h` and then refuse its in-place edit
mul_p = _binary("mul", "MulBackward0", operator.mul, save=(("a", 1), ("b", 0)), opmath=True)
truediv_p = _binary("truediv", "DivBackward0", operator.truediv, save=(("a", 1), "b"), promote="floating",
                    opmath=True)


@mul_p.vjp
def _mul_rule(g, s):
    return (g * conj(s.b) if s.needs[0] else None), (g * conj(s.a) if s.needs[1] else None)


@truediv_p.vjp
def _truediv_rule(g, s):
    a, b = s.a, s.b
    # (a / b) / b, as torch's: a / (b * b) overflowed or underflowed to inf or NaN where b * b does (|b| > 1e154
    # or < 1e-154), and rounds otherwise
    return (g / conj(b) if s.needs[0] else None), (-g * conj((a / b) / b) if s.needs[1] else None)


def _rmul(mul):
    def __rmul__(self, other):
        """torch's ``number * t``: ``t.mul(number)``, the number second (half computes it in float32)."""
        return mul(self, other)
    return __rmul__


@public("__mul__", ("__rmul__", _rmul), "__imul__", "mul_", "mul")
def mul(a, b):
    """``a * b`` with broadcasting (NumPy's ``multiply``, torch's ``mul``)."""
    return mul_p.bind(a, b)


# torch's div(rounding_mode=...): the rounded quotient, whose gradient is zero (not floor_divide's error)
rounded_div_p = primitive("rounded_div", torch="DivBackward2", impl=lambda a, b, *, mode: _rounded_div(a, b, mode),
                          args=("a", "b"), prepare=binary_operands, promote="common", opmath=True)
rounded_div_p.vjp(lambda g, s, *, mode: (zeros_like(g), zeros_like(g)))


def _dtype_of(*operands):
    """The dtype of a binary op's promoted operands (a Python number among them has the array's)."""
    return next(x.dtype for x in operands if hasattr(x, "dtype"))


def _nonzero_array(a):
    return da.map_blocks(chunk.nonzero_divisor, a, dtype=a.dtype, meta=a._meta)


def checked_divisor(a, b):
    """``b`` as the divisor of ``a``: where the result is an integer, torch's ``RuntimeError: ZeroDivisionError``
    for a zero (NumPy gives 0), at once for a number, while computing for a tensor (an integer one: no
    gradient to keep)."""
    dtype = result_type(a, b)
    if dtype.kind not in "iu":
        return b
    if any(n == 0 for n in (*getattr(a, "shape", ()), *getattr(b, "shape", ()))):  # (an empty result: torch divides
        return b  # nothing, and raises nothing)
    if not isinstance(b, Tensor):
        if wrapped_int(b, dtype) == 0:  # (a number wraps into the dtype first: uint8 // 256 divides by 0)
            raise RuntimeError("ZeroDivisionError")
        return b
    return Tensor._make(door.defer(_nonzero_array, (value(b),)))


def _rounded_div(a, b, mode):
    floor = a // b  # Python's floor division (exact where floor(a / b) rounds wrong), as torch's; its dtype
    if mode == "floor":
        return floor
    if floor.dtype.kind in "iu":  # (exact: through float64, an int64 past 2**53 would round)
        inexact = ((a % b) != 0) & ((a < 0) ^ (b < 0))
        return floor + inexact.astype(floor.dtype)
    return da.trunc(a / b).astype(floor.dtype)


def _rtruediv(truediv):
    def __rtruediv__(self, other):
        """torch's ``number / t``: ``t.reciprocal() * number`` -- its value, bit for bit (of an integer ``t``
        too: ``2.5 / int_t`` rounds twice, as torch's), and its gradient reads the reciprocal, not ``t`` (which
        a later write may change); a NumPy number is read as torch's ``Scalar`` (a NumPy bool: a float)."""
        other = torch_scalar(other)
        if isinstance(other, (int, float)) and (not isinstance(other, bool) or self.dtype.kind != "c"):
            return mul(reciprocal(self), other)
        return truediv(other, self)
    return __rtruediv__


@public("__truediv__", ("__rtruediv__", _rtruediv), "__itruediv__", "div_", "div")
def truediv(a, b, *, rounding_mode=None):
    """``a / b``, true division with broadcasting (NumPy's ``divide``/``true_divide``, torch's ``div``);
    torch's ``rounding_mode='trunc'`` or ``'floor'`` rounds the quotient (integers stay integers), with
    a zero gradient."""
    if rounding_mode is None:
        return truediv_p.bind(a, b)
    if rounding_mode not in ("trunc", "floor"):
        raise RuntimeError("div expected rounding_mode to be one of None, 'trunc', or 'floor' but found "
                           f"'{rounding_mode}'")
    # (torch's saves both, though its gradient is zero: a write to either before the backward raises)
    return guard(rounded_div_p.bind(a, checked_divisor(a, b), mode=rounding_mode), a, b)


# the result is saved only for the exponent's gradient, as torch's (so pow_ of a scalar exponent saves
# only its base, which a later write does not change)
pow_p = _binary("pow", ("PowBackward0", "PowBackward1", "PowBackward2"), chunk.pow,
                save=("a", "b", ("r", 1)))


@pow_p.vjp
def _pow_rule(g, s):
    # torch's masks: d/da is 0 where b == 0 (not 0 * a**-1, NaN at a == 0), and d/db is 0 where
    # a == 0 and b >= 0 (not 0 * log 0); elsewhere the plain formulas, infinities included.  d/db is
    # torch's g * where(mask, 0, r * log a), so its derivative in g is torch's 0 under the mask; r is
    # masked too, so its derivative in b is 0 there, not a 0 * log 0 (torch's NaN of its own formula:
    # tests/test_degenerate_derivatives.py's MASKED_NAN)
    a, b = s.a, s.b
    if isinstance(b, Tensor):
        ga = where(b == 0, 0, g * b * pow(a, b - 1))
    elif b == 2 and a.dtype.kind == "f" and not is_grad_enabled():  # (a ** 1 is a, bit for bit: no op to
        ga = g * b * a                                                  # record; with create_graph, torch's graph)
    else:  # a real exponent (complex ones are refused): conj(b * a**(b-1)) = b * conj(a**(b-1))
        ga = g * b * conj(pow(a, b - 1)) if b != 0 else zeros_like(g)
    gb = None
    if isinstance(b, Tensor) and s.needs[1]:
        if isinstance(a, Tensor):
            mask = (a == 0) & (b >= 0)
            gb = g * where(mask, 0, where(mask, 0, s.r) * log(a))
        elif a == 0:  # a Python base stays a Python number: a host 0-d chunk would meet device chunks
            mask = b >= 0
            gb = g * where(mask, 0, where(mask, 0, s.r) * -math.inf)
        else:
            gb = g * s.r * (math.log(a) if a > 0 else math.nan)
    return ga, gb


@public("__pow__", "__rpow__", "pow_", "pow")
def pow(a, b):
    """``a ** b`` with broadcasting (NumPy's ``power``, torch's ``pow``); with a tensor or complex exponent,
    complex inputs that require grad are refused (no rule yet)."""
    if isinstance(b, Tensor) or isinstance(b, complex):
        refuse_complex("pow", a, b)
    node = ("PowBackward0" if not isinstance(b, Tensor) else
            "PowBackward1" if isinstance(a, Tensor) else "PowBackward2")
    if isinstance(a, Tensor) and node == "PowBackward0":  # (an exponent beyond the result's range: torch's error)
        if not _fits_float_tensor(a, b):  # (the common case, t ** 2 of floats, has nothing to check)
            if isinstance(b, numbers.Integral) and b < 0 and result_type(a, b).kind in "biu":
                raise RuntimeError("Integers to negative integer powers are not allowed.")
            checked_scalar(b, result_type(a, b))
    out = pow_p.bind(a, b, node=node)
    return astype(out, bool) if out.dtype == np.int8 and result_type(a, b).kind == "b" else out  # (NumPy's bool power)


def _fits_float_tensor(a, b):
    """Whether ``b``, a Python int or float, is an exponent that a floating tensor ``a`` takes as it is: the
    result type is ``a``'s and the number is in its range (what :func:`checked_scalar` would find)."""
    tb = type(b)
    if tb is not int and tb is not float:
        return False
    dtype = a.dtype
    if dtype.kind != "f":
        return False
    high = _FLOAT_MAX.get(dtype)
    if high is None:
        high = _FLOAT_MAX[dtype] = float(np.finfo(dtype).max)
    # (no abs() here: this module's abs is the op)
    return (tb is float or -(1 << 63) <= b < 1 << 63) and (b != b or -high <= b <= high or b in (math.inf, -math.inf))


_FLOAT_MAX = {}  # a floating dtype -> its largest value, as a Python float


def _tie(g, s, strict):
    # torch's rule: each input takes the gradient unless the other is strictly larger (smaller); a tie
    # splits it 0.5 / 0.5, and a NaN on either side gives it to both.  A Python bound stays a number: a
    # host 0-d chunk would meet device chunks
    a, b = s.a, s.b
    share = where(a == b, g * 0.5, g)
    return where(strict(b, a), 0, share), where(strict(a, b), 0, share)


maximum_p = _binary("maximum", "MaximumBackward0", da.maximum, save=("a", "b"), refuse="maximum")
maximum_p.vjp(lambda g, s: _tie(g, s, operator.gt))
minimum_p = _binary("minimum", "MinimumBackward0", da.minimum, save=("a", "b"), refuse="minimum")
minimum_p.vjp(lambda g, s: _tie(g, s, operator.lt))


@public("maximum")
def maximum(a, b):
    """The larger of ``a`` and ``b`` elementwise (NumPy's and torch's ``maximum``); at a tie each input gets
    half the gradient, as in torch."""
    return maximum_p.bind(a, b)


@public("minimum")
def minimum(a, b):
    """The smaller of ``a`` and ``b`` elementwise (NumPy's and torch's ``minimum``); at a tie each input gets
    half the gradient, as in torch."""
    return minimum_p.bind(a, b)


where_p = primitive("where", torch="WhereBackward0")
where_p.vjp(lambda g, s: (where(s.c, g, 0), where(s.c, 0, g)))


def _where_array(c, x, y):
    """``where`` as dask's, its blocks selected by :func:`daskgrad.chunk.where` (branch-free on NumPy chunks)."""
    return door.elemwise(chunk.where, c, x, y)


class _NotGiven:
    """``where``'s default for ``x`` and ``y``: NumPy tells one argument given from two by their count."""

    def __repr__(self):
        return "<not given>"


_NOT_GIVEN = _NotGiven()


@public()
def where(condition, x=_NOT_GIVEN, y=_NOT_GIVEN):
    """``x`` where ``condition`` else ``y``; the condition gets no gradient (it is saved, not an input:
    torch's node has two edges, so this op records its own forward).  With ``condition`` only, NumPy's
    ``nonzero(condition)``: one index tensor per axis (lengths not known until computed)."""
    if x is _NOT_GIVEN or y is _NOT_GIVEN:
        if x is not _NOT_GIVEN or y is not _NOT_GIVEN:
            raise ValueError("either both or neither of x and y should be given")
        cond = as_tensor(condition)
        if not cond.ndim:
            raise ValueError("Calling nonzero on 0d arrays is not allowed. Use np.atleast_1d(scalar).nonzero() "
                             "instead.")
        return tuple(Tensor._make(i) for i in da.nonzero(cond.array))
    cond, x, y = as_tensor(condition), tensor_or_scalar(x), tensor_or_scalar(y)
    if not isinstance(x, Tensor) and not isinstance(y, Tensor):  # two numbers: torch's dtype for them (1.0: float32)
        y = full_like(cond, y, dtype=result_type(x, y))
    check_same_device(cond, x, y)
    check_broadcast(getattr(x, "shape", ()), getattr(y, "shape", ()))
    shapes = (getattr(x, "shape", ()), getattr(y, "shape", ()))
    if all(n == n for shape in shapes for n in shape):  # (an unknown length, after a boolean mask: dask checks)
        check_broadcast(cond.shape, np.broadcast_shapes(*shapes))
    out = door.defer(_where_array, (value(cond), *promoted([value(x), value(y)])[0]))
    return where_p.record(out, only_tensor(x), only_tensor(y), save={"c": cond})


def _clamp_operands(x, lo, hi):
    x = as_tensor(x)
    lo, hi = (None if v is None else tensor_or_scalar(v) for v in (lo, hi))
    if lo is None and hi is None:
        raise RuntimeError("daskgrad.clamp: At least one of 'min' or 'max' must not be None")
    refuse_complex("clamp", x, *(v for v in (lo, hi) if v is not None))
    if any(isinstance(v, complex) for v in (lo, hi)):
        raise NotImplementedError("clamp is not supported for complex types")
    return x, lo, hi


def _clamp_array(a, lo, hi):
    if lo is not None:
        a = door.elemwise(chunk.clamp_min, a, lo)
    if hi is not None:
        a = door.elemwise(chunk.clamp_max, a, hi)
    return a


clamp_p = primitive("clamp", torch=("ClampBackward0", "ClampBackward1"), impl=_clamp_array, args=("x", "lo", "hi"),
                    save=("x", "lo", "hi"), prepare=_clamp_operands, promote="common")


@clamp_p.vjp
def _clamp_rule(g, s):
    # torch's clamp_backward and clamp_backward_min_max: x keeps g inside [lo, hi]; where lo > hi the
    # result is hi, so hi takes g there and lo only where x < lo <= ... < hi
    x, lo, hi = s.x, s.lo, s.hi
    keep = None
    if lo is not None:
        keep = x >= lo
    if hi is not None:
        keep = (x <= hi) if keep is None else keep & (x <= hi)
    g_lo = g_hi = None
    if isinstance(lo, Tensor):
        g_lo = where((x < lo) & (lo < hi) if hi is not None else x < lo, g, 0)
    if isinstance(hi, Tensor):
        g_hi = where((x > hi) | (hi < lo) if lo is not None else x > hi, g, 0)
    return where(keep, g, 0), g_lo, g_hi


@public("clip", "clamp", "clamp_")
def clip(x, a_min=None, a_max=None, *, min=None, max=None):
    """Clamp to ``[a_min, a_max]`` (torch's ``min=``/``max=`` too; either bound may be None: one-sided); on
    a bound the input keeps its gradient, and where ``a_min > a_max`` the result is ``a_max``, which takes
    the gradient (torch's convention)."""
    if min is not None or max is not None:
        if (a_min is not None and min is not None) or (a_max is not None and max is not None):
            raise TypeError("clip() got a bound twice (a_min and min, or a_max and max)")
        a_min, a_max = a_min if min is None else min, a_max if max is None else max
    tensor_bounds = any(v is not None and not isinstance(v, SCALARS) for v in (a_min, a_max))
    if not tensor_bounds and isinstance(x, Tensor):  # (a number bound beyond the result's range: torch's error)
        dtype = result_type(*(v for v in (x, a_min, a_max) if v is not None))
        a_min, a_max = (checked_scalar(v, dtype) for v in (a_min, a_max))
    return clamp_p.bind(x, a_min, a_max, node="ClampBackward0" if tensor_bounds else "ClampBackward1")


clamp = public(name="clamp")(clip)


# ------------------------------------------------- comparisons (never differentiable)
def _compare(fn, name, *methods):
    def op(a, b):
        a, b = tensor_or_scalar(numpy_bool_as_float(a)), tensor_or_scalar(numpy_bool_as_float(b))
        if name.startswith("bitwise_"):  # (torch's words name the result type: int32 & 0.5 is Float)
            refuse_dtype_kinds(name, "fc", np.empty(0, result_type(a, b)))
        out = Tensor._make(door.defer(fn, promoted([value(a), value(b)])[0], elementwise=True))  # (in torch's type)
        # `while y.norm() < 1000`: forcing the comparison must persist what y's backward saved
        out._origin = tuple(t for t in (a, b) if isinstance(t, Tensor) and t.grad_fn is not None)
        return out
    op.__name__ = op.__qualname__ = name
    op.__doc__ = _DOCS[name]
    return public(*methods, name=name)(op)


_DOCS = {**{name: f"``a {symbol} b`` elementwise with broadcasting (torch's ``{name}``): a boolean tensor, never "
                  "differentiable." for name, symbol in
            (("lt", "<"), ("le", "<="), ("gt", ">"), ("ge", ">="), ("eq", "=="), ("ne", "!="))},
         **{f"logical_{name}": f"NumPy's and torch's ``logical_{name}``: the truth of ``a`` and ``b`` (non-zero is "
                               "true) combined elementwise, a boolean tensor, never differentiable."
            for name in ("and", "or", "xor")},
         **{f"bitwise_{name}": f"``a {symbol} b`` elementwise (NumPy's and torch's ``bitwise_{name}``): bitwise on "
                               "integers, logical on booleans, never differentiable."
            for name, symbol in (("and", "&"), ("or", "|"), ("xor", "^"))}}

lt, le = _compare(operator.lt, "lt", "__lt__"), _compare(operator.le, "le", "__le__")
gt, ge = _compare(operator.gt, "gt", "__gt__"), _compare(operator.ge, "ge", "__ge__")
eq, ne = _compare(operator.eq, "eq", "__eq__"), _compare(operator.ne, "ne", "__ne__")
bitwise_and = _compare(operator.and_, "bitwise_and", "__and__", "__rand__", "bitwise_and")
bitwise_or = _compare(operator.or_, "bitwise_or", "__or__", "__ror__", "bitwise_or")
bitwise_xor = _compare(operator.xor, "bitwise_xor", "__xor__", "__rxor__", "bitwise_xor")
# not `&`: on integers torch's and NumPy's logical_and give booleans where `&` is bitwise
logical_and = _compare(da.logical_and, "logical_and", "logical_and")
logical_or = _compare(da.logical_or, "logical_or", "logical_or")
logical_xor = _compare(da.logical_xor, "logical_xor", "logical_xor")


@public("logical_not")
def logical_not(x):
    """NumPy's and torch's ``logical_not``: true where ``x`` is zero, a boolean tensor, never differentiable."""
    x = as_tensor(x)
    return Tensor._make(door.defer(da.logical_not, (value(x),), elementwise=True))


def _invert_method(bitwise_not):
    def method(self):
        if self.dtype.kind in "fc":  # torch's words for the operator, as its kernel's for the method
            raise TypeError("~ (operator.invert) is only implemented on integer and Boolean-type tensors")
        return bitwise_not(self)
    method.__wrapped__ = bitwise_not
    return method


@public(("__invert__", _invert_method), "bitwise_not")
def bitwise_not(x):
    """``~x`` (NumPy's ``invert``, torch's ``bitwise_not``): bitwise on integers, logical on booleans;
    floating tensors are refused with torch's errors."""
    x = as_tensor(x)
    refuse_dtype_kinds("bitwise_not", "fc", x)
    return Tensor._make(door.defer(da.invert, (value(x),), elementwise=True))


# ------------------------------------------------------- casts and constants
astype_p = primitive("astype", torch="ToCopyBackward0", impl=lambda a, *, dtype: a.astype(dtype))
astype_p.vjp(lambda g, s, *, dtype: (g,))
to_device_p = primitive("to_device", torch="ToCopyBackward0",
                        impl=lambda a, *, to, device: a.to_backend("cupy" if to == "cuda" else "numpy"))
to_device_p.vjp(lambda g, s, *, to, device: (to_device(g, device),))  # the cotangent goes back where x was
clone_p = primitive("clone", torch="CloneBackward0", impl=lambda a: a.copy(), prepare=tensor_operand)
clone_p.vjp(lambda g, s: (g,))


@public("astype")
def astype(x, dtype, copy=True):
    """``x`` cast to ``dtype`` (NumPy's ``astype``, torch's ``x.to(dtype)``; ``double()``/``float()`` too),
    differentiable; ``x`` itself when it has that dtype already (NumPy's ``copy=`` is taken: a lazy value
    is never written in place, so no copy is needed)."""
    x = as_tensor(x)
    if x.dtype == dtype:
        return x
    if np.dtype(dtype).kind not in "fc" and x.requires_grad:  # (torch's: an integer or bool result has no
        x = x.detach()                                          # gradient, and does not require one)
    return astype_p.bind(x, dtype=dtype)


def _cuda_method(to_device):
    def cuda(self, device=None, non_blocking=False, memory_format=None):
        """torch's ``cuda``: the chunks on the GPU (cupy).  ``device``: an index or ``"cuda:i"`` (which GPU runs a
        chunk is the cluster's placement); ``non_blocking`` and ``memory_format`` are taken, as torch's (a copy
        here is a lazy task; there are no strides to keep)."""
        return to_device(self, "cuda" if device is None else f"cuda:{device}" if isinstance(device, int) else device)
    return cuda


def _cpu_method(to_device):
    def cpu(self, memory_format=None):
        """torch's ``cpu``: the chunks in host memory (NumPy); ``memory_format`` is taken, as torch's."""
        return to_device(self, "cpu")
    return cpu


@public(("cuda", _cuda_method), ("cpu", _cpu_method))
def to_device(x, device):
    """Move chunks between host (``"cpu"``, NumPy) and GPU (``"cuda"``, cupy); differentiable."""
    x = as_tensor(x)
    device = "cuda" if str(device).startswith("cuda") else str(device)
    if device == x.device:
        return x
    if device == "cuda":
        require_cuda()
    return to_device_p.bind(x, to=device, device=x.device)


@public("clone")
def clone(x):
    """A copy of ``x`` that records ``CloneBackward0`` (torch's ``clone``, NumPy's ``copy``)."""
    return clone_p.bind(x)


def _full(a, value, dtype=None):
    """``value`` with the dask array ``a``'s shape, chunks and chunk type.  A 0-d one is made in one
    block from one element (``door.one_chunk``): ``da.full`` asks the chunk type for
    ``full_like(meta, shape=())``, which cupy reads as no shape given."""
    dtype = np.dtype(dtype or a.dtype)
    if a.ndim == 0:
        fill = functools.partial(chunk.filled, value=value)
        return door.one_chunk(a, fill, f"full_like-{dask.base.tokenize(door.exact(value), dtype.str)}", dtype=dtype)
    # (named by the value's bits: dask's token of NaN ignores its sign)
    kind = f"{type(a._meta).__module__}.{type(a._meta).__qualname__}"  # (NumPy's and cupy's are both "ndarray")
    name = f"full-{dask.base.tokenize(door.exact(value), dtype.str, a.chunks, kind)}"
    return da.full(a.shape, value, dtype=dtype, chunks=a.chunks, meta=door.prototype(a), name=name)


fill_p = primitive("fill", torch=("FillBackward2", "ZeroBackward0"), impl=lambda a, *, value: _full(a, value))
fill_p.vjp(lambda g, s, *, value: (zeros_like(g),))
copy_p = primitive("copy", torch="CopyBackwards", args=("x", "src"),
                   impl=lambda a, src: da.broadcast_to(src, a.shape).astype(a.dtype))
copy_p.vjp(lambda g, s: (zeros_like(g), g))


def fill(x, value, node="FillBackward2"):
    """``x.fill_(value)``'s out-of-place result: what ``x`` came from gets a zero gradient."""
    return fill_p.bind(x, value=checked_scalar(value, x.dtype), node=node)


def copy_to(x, src):
    """``x.copy_(src)``'s out-of-place result: ``src`` broadcast to ``x``; ``x`` gets no gradient."""
    return copy_p.bind(x, tensor_or_scalar(src))


@public()
def full_like(x, fill_value, dtype=None, requires_grad=False):
    """A constant with ``x``'s shape, chunks and chunk type (``meta``), so a cupy tensor gets cupy chunks;
    torch's ``requires_grad=True`` makes it a leaf that requires grad."""
    a = value(x)
    fill_value = checked_scalar(fill_value, dtype or a.dtype)  # (torch's error for a number beyond the dtype's range)
    if any(n != n for n in a.shape):  # unknown chunk sizes (after a boolean mask): derive from the blocks
        a = raw(x)
        dtype = np.dtype(dtype or a.dtype)  # (each block of that dtype: the float zeros of an int64 count were float)
        out = Tensor._make(da.map_blocks(chunk.full_like, a, fill_value, dtype, dtype=dtype,
                                         meta=a._meta.astype(dtype)))
    else:
        out = Tensor._make(door.defer(_full, (a, fill_value), (("dtype", dtype),)))
    return out.requires_grad_(True) if requires_grad else out


@public()
def zeros_like(x, dtype=None, requires_grad=False):
    """Zeros with ``x``'s shape, chunks and chunk type (NumPy's and torch's ``zeros_like``); a constant:
    no gradient flows to ``x`` (``requires_grad=True``: a leaf that requires grad, as torch's)."""
    return full_like(x, 0, dtype, requires_grad)


@public()
def ones_like(x, dtype=None, requires_grad=False):
    """Ones with ``x``'s shape, chunks and chunk type (NumPy's and torch's ``ones_like``); a constant:
    no gradient flows to ``x`` (``requires_grad=True``: a leaf that requires grad, as torch's)."""
    return full_like(x, 1, dtype, requires_grad)


# ------------------------------------------------- the rest of NumPy's elementwise functions
# Each is one line: NumPy's name, torch's node, the dask kernel, the rule (torch's derivatives.yaml
# formula, conjugated for complex inputs) and the torch-named methods.  Aliases under torch's names
# (asin, atan2, ...) are set below.
_LN2, _LN10 = math.log(2.0), math.log(10.0)
arcsin = _unary("arcsin", "AsinBackward0", da.arcsin, lambda g, s: (g / conj(sqrt(1 - s.x * s.x)),), ("x",),
                methods=("asin", "arcsin"))
arccos = _unary("arccos", "AcosBackward0", da.arccos, lambda g, s: (-g / conj(sqrt(1 - s.x * s.x)),), ("x",),
                methods=("acos", "arccos"))
arctan = _unary("arctan", "AtanBackward0", da.arctan, lambda g, s: (g / conj(1 + s.x * s.x),), ("x",),
                methods=("atan", "arctan"))
arcsinh = _unary("arcsinh", "AsinhBackward0", da.arcsinh, lambda g, s: (g / conj(sqrt(s.x * s.x + 1)),), ("x",),
                 methods=("asinh", "arcsinh"))
arccosh = _unary("arccosh", "AcoshBackward0", da.arccosh, lambda g, s: (g / conj(sqrt(s.x * s.x - 1)),), ("x",),
                 methods=("acosh", "arccosh"))
arctanh = _unary("arctanh", "AtanhBackward0", da.arctanh, lambda g, s: (g / conj(1 - s.x * s.x),), ("x",),
                 methods=("atanh", "arctanh"))
# the real cube root; its derivative 1 / (3 cbrt(x)^2) is inf at 0, as x ** (1/3)'s is in torch
cbrt = _unary("cbrt", "PowBackward0", da.cbrt, lambda g, s: (g / (3 * s.r * s.r),), ("r",), complex_ok=False)
log2 = _unary("log2", "Log2Backward0", da.log2, lambda g, s: (g / conj(s.x * _LN2),), ("x",), methods=("log2",))
log10 = _unary("log10", "Log10Backward0", da.log10, lambda g, s: (g / conj(s.x * _LN10),), ("x",),
               methods=("log10",))
exp2 = _unary("exp2", "Exp2Backward0", da.exp2, lambda g, s: (g * conj(s.r * _LN2),), ("r",), methods=("exp2",))
reciprocal = _unary("reciprocal", "ReciprocalBackward0", da.reciprocal, lambda g, s: (-g * conj(s.r * s.r),),
                    ("r",), methods=("reciprocal",))
# piecewise constant: a zero gradient everywhere, as torch's
floor = _unary("floor", "FloorBackward0", da.floor, lambda g, s: (zeros_like(g),), complex_ok=False,
               methods=("floor",), floating=False)
ceil = _unary("ceil", "CeilBackward0", da.ceil, lambda g, s: (zeros_like(g),), complex_ok=False, methods=("ceil",),
              floating=False)
trunc = _unary("trunc", "TruncBackward0", da.trunc, lambda g, s: (zeros_like(g),), complex_ok=False,
               methods=("trunc", "fix"), floating=False)
def _round_impl(a, decimals=0):
    """NumPy's ``round``; float16 with decimals in float32, rounded once (torch's kernel)."""
    if a.dtype != np.float16 or not decimals:
        return da.round(a, decimals)
    with np.errstate(over="ignore"):
        scale = np.float32(10.0 ** abs(decimals)) if abs(decimals) < 39 else np.float32(np.inf)
    a = a.astype(np.float32)
    return (da.rint(a * scale) / scale if decimals > 0 else da.rint(a / scale) * scale).astype(np.float16)


round_p = primitive("round", torch=("RoundBackward0", "RoundBackward1"), impl=_round_impl,
                    prepare=functools.partial(tensor_operand, refuse="round"))
round_p.vjp(lambda g, s, decimals=0: (zeros_like(g),))


@public("round")
def round(x, decimals=0):
    """NumPy's ``round`` (half to even, as torch's); a zero gradient."""
    if not isinstance(decimals, numbers.Integral) or isinstance(decimals, bool):
        raise TypeError(f"round(): argument 'decimals' must be int, not {type(decimals).__name__}")
    return round_p.bind(x, decimals=decimals, node="RoundBackward1" if decimals else "RoundBackward0")



def _atan2_rule(g, s):
    a, b = s.a, s.b
    r = a * a + b * b
    inv = where(r == 0, 0, 1 / where(r == 0, 1, r))  # torch's gradient at (0, 0) is 0, not NaN
    return g * b * inv, g * -a * inv


def _logaddexp_rule(g, s, base_exp):
    a, b = s.a, s.b
    return g / (1 + base_exp(b - a)), g / (1 + base_exp(a - b))


def _remainder_rule(g, s, mode):
    # torch's: -g * a.div(b, rounding_mode=mode), so an infinite a gives NaN (floor) as its division does; a and b
    # saved only for b's gradient, as torch's (a number divisor or a constant one: a write to a after is no error)
    return g, (-g * truediv(s.a, s.b, rounding_mode=mode) if s.needs[1] else None)


arctan2_p = _binary("arctan2", "Atan2Backward0", da.arctan2, save=("a", "b"), refuse="atan2", promote="floating")
arctan2_p.vjp(_atan2_rule)
hypot_p = _binary("hypot", "HypotBackward0", da.hypot, save=("a", "b", "r"), refuse="hypot", promote="floating")
hypot_p.vjp(lambda g, s: (g * s.a / s.r, g * s.b / s.r))
logaddexp_p = _binary("logaddexp", "LogaddexpBackward0", da.logaddexp, save=("a", "b"), refuse="logaddexp",
                      promote="floating")
logaddexp_p.vjp(functools.partial(_logaddexp_rule, base_exp=lambda t: exp(t)))
logaddexp2_p = _binary("logaddexp2", "Logaddexp2Backward0", da.logaddexp2, save=("a", "b"), refuse="logaddexp2",
                       promote="floating")
logaddexp2_p.vjp(functools.partial(_logaddexp_rule, base_exp=lambda t: exp2(t)))
def _mod(a, b):
    """torch's ``remainder``: of floats, a zero keeps the dividend's sign (:func:`chunk.remainder`), not the divisor's
    as NumPy's."""
    return chunk.remainder(a, b) if _dtype_of(a, b).kind == "f" else a % b


fmod_p = _binary("fmod", ("FmodBackward0", "FmodBackward1"), da.fmod, save=(("a", 1), ("b", 1)), refuse="fmod")
fmod_p.vjp(functools.partial(_remainder_rule, mode="trunc"))
mod_p = _binary("mod", ("RemainderBackward0", "RemainderBackward1"), _mod, save=(("a", 1), ("b", 1)),
                refuse="remainder")
mod_p.vjp(functools.partial(_remainder_rule, mode="floor"))


nextafter_p = _binary("nextafter", "NextafterBackward0", da.nextafter, save=("a", "b"), refuse="nextafter",
                      promote="floating")
# torch 2.13's: the first operand's, as if the step were 0, where the operands differ (NaN included); 0 where
# they are equal (nextafter(a, a) is a constant), and 0 for the second operand
nextafter_p.vjp(lambda g, s: (where(s.a != s.b, g, 0), zeros_like(g)))


@public()
def nextafter(a, b):
    """The next floating value after ``a`` towards ``b`` (NumPy's and torch's ``nextafter``); the gradient
    goes to ``a`` as if the step were 0 where ``a != b`` and is 0 where they are equal; ``b`` gets 0, as
    torch's."""
    return nextafter_p.bind(a, b)


@public("atan2", "arctan2")
def arctan2(a, b):
    """The angle of the point ``(b, a)``, ``arctan(a / b)`` in the right quadrant (NumPy's ``arctan2``,
    torch's ``atan2``)."""
    return arctan2_p.bind(a, b)


@public("hypot")
def hypot(a, b):
    """``sqrt(a**2 + b**2)`` elementwise, without overflow (NumPy's and torch's ``hypot``)."""
    return hypot_p.bind(a, b)


@public("logaddexp")
def logaddexp(a, b):
    """``log(exp(a) + exp(b))``, computed without overflow (NumPy's and torch's ``logaddexp``)."""
    return logaddexp_p.bind(a, b)


@public("logaddexp2")
def logaddexp2(a, b):
    """``log2(2**a + 2**b)``, computed without overflow (NumPy's and torch's ``logaddexp2``)."""
    return logaddexp2_p.bind(a, b)


@public("fmod")
def fmod(a, b):
    """C's remainder (the sign of ``a``), as ``torch.fmod``."""
    return fmod_p.bind(a, checked_divisor(a, b), node="FmodBackward1" if isinstance(b, Tensor) else "FmodBackward0")


@public("__mod__", "__rmod__", "remainder")
def mod(a, b):
    """Python's remainder (the sign of ``b``; of floats, a zero result keeps ``a``'s sign), as ``torch.remainder``;
    an integer one by zero raises torch's error."""
    node = "RemainderBackward1" if isinstance(b, Tensor) else "RemainderBackward0"
    if isinstance(b, Tensor) and not isinstance(a, Tensor) and b.requires_grad:  # (torch's remainder.Scalar_Tensor
        # has no derivative: its node is NotImplemented, and a backward through it raises)
        out = mod_p.bind(a, checked_divisor(a, b.detach()))
        return _number_mod_p.record(out.array, b, node="NotImplemented") if is_grad_enabled() else out
    return mod_p.bind(a, checked_divisor(a, b), node=node)


def _no_remainder_derivative(g, s):
    raise RuntimeError("derivative for aten::remainder is not implemented")


_number_mod_p = primitive("not_implemented_remainder")  # (torch's NotImplemented node: named when it binds)
_number_mod_p.vjp(_no_remainder_derivative)


for _alias, _op in (("asin", arcsin), ("acos", arccos), ("atan", arctan), ("asinh", arcsinh), ("acosh", arccosh),
                   ("atanh", arctanh), ("atan2", arctan2), ("fix", trunc), ("around", round), ("remainder", mod)):
    public(name=_alias)(_op)  # torch's (and NumPy's other) names for the same op


# ------------------------------------------------------------------- Bessel I0, I1
def _bessel_impl(kernel):
    """A real Bessel kernel on the chunk, in the input's float dtype (NumPy's ``i0`` promotes float32
    through its float64 coefficients; torch keeps float32); integers arrive as the default float."""
    def impl(a):
        dt = a.dtype
        return da.map_blocks(lambda b: kernel(b).astype(dt, copy=False), a, dtype=dt,
                             meta=a._meta.astype(dt) if hasattr(a._meta, "astype") else a._meta)
    return impl


def _bessel_operand(x):
    x = as_tensor(x)
    if x.dtype.kind == "c":
        raise TypeError("i0 not supported for complex values")  # NumPy's words (torch: not implemented)
    return (x,)


# torch's rules: i0' = i1; i1' = i0 - i1 / x, 1/2 at 0 (the limit)
i0_p = primitive("i0", torch="I0Backward0", impl=_bessel_impl(np.i0), save=("x",), prepare=_bessel_operand,
                 promote="floating")
i0_p.vjp(lambda g, s: (g * special_i1(s.x),))
i1_p = primitive("special_i1", torch="SpecialI1Backward0", impl=_bessel_impl(chunk.i1), save=("x", "r"),
                 prepare=_bessel_operand, promote="floating")
i1_p.vjp(lambda g, s: (g * where(s.x == 0, 0.5, i0(s.x) - s.r / where(s.x == 0, 1, s.x)),))


@public("i0")
def i0(x):
    """The modified Bessel function of the first kind, order 0 (NumPy's ``i0``, torch's ``i0``), real
    tensors only; its gradient is ``i1``, as torch's (``torch.special.i1``, :func:`special_i1` here)."""
    return i0_p.bind(x)


def special_i1(x):
    """``torch.special.i1``: the modified Bessel function of the first kind, order 1 (NumPy has none;
    not a public op of the NumPy surface), differentiable as torch's."""
    return i1_p.bind(x)
