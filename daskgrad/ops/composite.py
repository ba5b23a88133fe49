"""NumPy's functions that are compositions of the differentiable ops: no rule of their own, their
gradient is their parts' (so every chunking, complex input and double backward they support comes
with them).  NumPy's names and argument conventions; torch's name as an alias where torch has one.
"""
from __future__ import annotations

import functools
import math
import numbers
import warnings

import dask.array as da
import numpy as np

from .. import _dask as door, chunk
from .._dask import unknown as _unknown
from .._data import DEFAULT_FLOAT, result_type
from ..graph import guard, named, primitive
from .._tensor import Tensor, check_size, recorded
from ._util import (OPS, as_tensor, check_broadcast, check_same_device, constant_like, is_empty, norm_axes, norm_axis,
                    public, reduce_array, refuse_complex, tensor_operand)
from . import elementwise as ew
from .elementwise import arctan2, conj, sign, sin, sqrt, where
from .indexing import getitem, sort
from .reductions import amax, amin, length, mean, sum
from .shape import (broadcast_to, concatenate, expand_dims, flip, moveaxis, reshape, split, squeeze, stack, transpose,
                    view_as_complex, view_as_real)


public(name="cat")(concatenate)  # torch's name


@public("ravel")
def ravel(x):
    """The elements in C order, as a 1-D tensor."""
    return reshape(x, (-1,))


def along_axis(x, axis):
    """``(x, axis)`` as NumPy's functions of one ``axis`` read them: ``x`` a tensor, ``axis`` normalized;
    None: the raveled tensor's axis 0."""
    x = as_tensor(x)
    return (ravel(x), 0) if axis is None else (x, norm_axis(axis, x.ndim))


@public()
def atleast_1d(x):
    """``x`` with a length-1 axis in front if it is 0-d (NumPy's and torch's ``atleast_1d``, one tensor)."""
    x = as_tensor(x)
    return reshape(x, (1,)) if x.ndim == 0 else x


@public()
def atleast_2d(x):
    """``x`` with length-1 axes in front up to 2-d (NumPy's and torch's ``atleast_2d``, one tensor)."""
    x = as_tensor(x)
    return reshape(x, (1,) * (2 - x.ndim) + x.shape) if x.ndim < 2 else x


@public()
def atleast_3d(x):
    """NumPy's rule: a 1-D ``(n,)`` becomes ``(1, n, 1)``, a 2-D ``(m, n)`` becomes ``(m, n, 1)``."""
    x = as_tensor(x)
    if x.ndim == 0:
        return reshape(x, (1, 1, 1))
    if x.ndim == 1:
        return reshape(x, (1, x.shape[0], 1))
    if x.ndim == 2:
        return reshape(x, x.shape + (1,))
    return x


@public()
def vstack(tensors):
    """Tensors joined along axis 0 after ``atleast_2d`` (NumPy's and torch's ``vstack``)."""
    return concatenate([atleast_2d(t) for t in tensors], axis=0)


public(name="row_stack")(vstack)  # NumPy's (deprecated) and torch's other name


@public()
def hstack(tensors):
    """Tensors joined along axis 1, or axis 0 for 1-d ones (NumPy's and torch's ``hstack``)."""
    ts = [atleast_1d(t) for t in tensors]
    return concatenate(ts, axis=0 if ts[0].ndim == 1 else 1)


@public()
def dstack(tensors):
    """Tensors joined along axis 2 after ``atleast_3d`` (NumPy's and torch's ``dstack``)."""
    return concatenate([atleast_3d(t) for t in tensors], axis=2)


@public()
def column_stack(tensors):
    """1-d tensors as the columns of a 2-d one (a 0-d one as a 1 x 1), 2-d ones as they are, joined along
    axis 1 (NumPy's and torch's ``column_stack``)."""
    ts = [as_tensor(t) for t in tensors]
    return concatenate([reshape(t, (-1, 1)) if t.ndim < 2 else t for t in ts], axis=1)


@public()
def append(arr, values, axis=None):
    """NumPy's ``append``: both raveled when ``axis`` is None."""
    if axis is None:
        return concatenate([ravel(arr), ravel(values)], axis=0)
    return concatenate([arr, values], axis=axis)


@public()
def array_split(x, indices_or_sections, axis=0):
    """NumPy's ``array_split``: like ``split``, but ``n`` sections need not divide the axis (the
    first ``len % n`` sections are one longer)."""
    x = as_tensor(x)
    if not isinstance(indices_or_sections, numbers.Integral):
        return split(x, indices_or_sections, axis)
    n = int(indices_or_sections)
    if n <= 0:
        raise ValueError("number sections must be larger than 0.")
    length = x.shape[norm_axis(axis, x.ndim)]
    each, extra = divmod(length, n)
    sizes = [each + 1] * extra + [each] * (n - extra)
    return split(x, [int(c) for c in np.cumsum(sizes)[:-1]], axis)


def _split_at_least(x, sections, axis, need, name):
    x = as_tensor(x)
    if x.ndim < need:
        raise ValueError(f"{name} only works on arrays of {need} or more dimensions")
    return split(x, sections, axis)


@public()
def hsplit(x, indices_or_sections):
    """``split`` along axis 1, or axis 0 for a 1-d tensor: a list of tensors (NumPy's ``hsplit``)."""
    x = as_tensor(x)
    return _split_at_least(x, indices_or_sections, 0 if x.ndim == 1 else 1, 1, "hsplit")


@public()
def vsplit(x, indices_or_sections):
    """``split`` along axis 0 of a tensor of at least 2 dimensions: a list of tensors (NumPy's ``vsplit``)."""
    return _split_at_least(x, indices_or_sections, 0, 2, "vsplit")


@public()
def dsplit(x, indices_or_sections):
    """``split`` along axis 2 of a tensor of at least 3 dimensions: a list of tensors (NumPy's ``dsplit``)."""
    return _split_at_least(x, indices_or_sections, 2, 3, "dsplit")


@public("repeat_interleave")
@named(lambda x, repeats, axis=None, *, output_size=None:
       "IndexSelectBackward0" if isinstance(repeats, Tensor) or np.ndim(repeats) else "ViewBackward0")
def repeat(x, repeats, axis=None, *, output_size=None):
    """NumPy's ``repeat`` (torch's ``repeat_interleave``): each element ``repeats`` times along
    ``axis`` (the raveled tensor when None); ``repeats`` an int or one count per element (host numbers, or
    a tensor, computed); torch's ``output_size`` is checked."""
    x = as_tensor(x)
    if isinstance(repeats, Tensor):
        repeats = repeats.detach().numpy()
    x, axis = along_axis(x, axis)
    n = x.shape[axis]
    counts = np.broadcast_to(np.asarray(repeats), (n,)) if np.ndim(repeats) == 0 else np.asarray(repeats)
    if counts.shape != (n,) or (counts < 0).any():
        raise ValueError(f"repeats must be a non-negative int or {n} non-negative ints for an axis of length {n}")
    index = np.repeat(np.arange(n), counts)  # host integers the user gave: a gather, summed back in backward
    if output_size is not None and output_size != len(index):
        raise RuntimeError("allocated size does not match required size")
    return getitem(x, (slice(None),) * axis + (index,))


@public()
@named("RepeatBackward0")
def tile(x, reps):
    """NumPy's ``tile``: ``reps`` copies along each axis (the shorter of the two padded with ones)."""
    x = as_tensor(x)
    reps = (reps,) if isinstance(reps, numbers.Integral) else tuple(reps)
    if any(r < 0 for r in reps):
        raise ValueError("negative dimensions are not allowed")
    d = max(x.ndim, len(reps))
    x = reshape(x, (1,) * (d - x.ndim) + x.shape)
    reps = (1,) * (d - len(reps)) + reps
    copied = False  # (a copy always, as NumPy's and torch's: never a view, of x, that writes through to it)
    for axis, r in enumerate(reps):
        if r != 1:
            x = concatenate([x] * r, axis=axis) if r else getitem(x, (slice(None),) * axis + (slice(0, 0),))
            copied = r > 1
    return x if copied else ew.clone(x)


@public()
def flipud(x):
    """``x`` reversed along axis 0 (NumPy's and torch's ``flipud``)."""
    x = as_tensor(x)
    if x.ndim < 1:
        raise ValueError("Input must be >= 1-d.")
    return flip(x, 0)


@public()
def fliplr(x):
    """``x`` reversed along axis 1, for at least 2 dimensions (NumPy's and torch's ``fliplr``)."""
    x = as_tensor(x)
    if x.ndim < 2:
        raise ValueError("Input must be >= 2-d.")
    return flip(x, 1)


@public("rot90")
@named("Rot90Backward0")
def rot90(x, k=1, axes=(0, 1)):
    """NumPy's ``rot90``: ``k`` quarter turns from the first of ``axes`` towards the second."""
    x = as_tensor(x)
    if len(axes) != 2:
        raise ValueError("len(axes) must be 2.")
    a0, a1 = norm_axis(axes[0], x.ndim), norm_axis(axes[1], x.ndim)
    if a0 == a1:
        raise ValueError("Axes must be different.")
    k %= 4
    if k == 0:
        return x
    if k == 2:
        return flip(flip(x, a0), a1)
    perm = list(range(x.ndim))
    perm[a0], perm[a1] = perm[a1], perm[a0]
    return transpose(flip(x, a1), perm) if k == 1 else flip(transpose(x, perm), a1)


@public()
def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """NumPy's ``cross``: the cross product of the 2- or 3-vectors along ``axisa`` of ``a`` and ``axisb``
    of ``b`` (``axis`` sets all three), broadcast, the product's components along ``axisc``; two
    2-vectors give the z component alone.  (torch's ``cross(dim=)`` spelling reaches ``axis``; its
    default, the first axis of length 3, is not NumPy's -1.)"""
    a, b = as_tensor(a), as_tensor(b)
    if axis is not None:
        axisa = axisb = axisc = axis
    a, b = moveaxis(a, norm_axis(axisa, a.ndim), -1), moveaxis(b, norm_axis(axisb, b.ndim), -1)
    if a.shape[-1] not in (2, 3) or b.shape[-1] not in (2, 3):
        raise ValueError("incompatible dimensions for cross product\n(dimension must be 2 or 3)")
    x = [getitem(a, (Ellipsis, i)) for i in range(a.shape[-1])]
    y = [getitem(b, (Ellipsis, i)) for i in range(b.shape[-1])]
    z = x[0] * y[1] - x[1] * y[0]
    if len(x) == len(y) == 2:
        warnings.warn("Arrays of 2-dimensional vectors are deprecated. Use arrays of 3-dimensional vectors "
                      "instead. (deprecated in NumPy 2.0)", DeprecationWarning, stacklevel=2)
        return z
    if len(x) == 2:
        parts = [x[1] * y[2], -(x[0] * y[2]), z]
    elif len(y) == 2:
        parts = [-(x[2] * y[1]), x[2] * y[0], z]
    else:
        parts = [x[1] * y[2] - x[2] * y[1], x[2] * y[0] - x[0] * y[2], z]
    shape = np.broadcast_shapes(*(p.shape for p in parts))
    out = stack([p if p.shape == shape else broadcast_to(p, shape) for p in parts], axis=-1)
    return moveaxis(out, -1, norm_axis(axisc, out.ndim))


def _real_attribute(real):
    def set_real(self, value):  # torch's ``z.real = v``: v copied into the real parts
        real(self).copy_(value)
    return property(real, set_real, doc="The real part, as torch's ``Tensor.real``: a view of a complex "
                    "tensor's real parts (a write to it writes the tensor), the tensor itself when it is real.")


def _imag_attribute(imag):
    def set_imag(self, value):
        if self.dtype.kind != "c":
            raise RuntimeError("imag is not implemented for tensors with non-complex dtypes.")
        imag(self).copy_(value)
    # NumPy's answer (zeros) for a real tensor where torch's attribute raises: array libraries probe
    # duck arrays with hasattr(t, "imag") (xarray's protocol check), which only an AttributeError passes
    return property(imag, set_imag, doc="The imaginary part, as torch's ``Tensor.imag``: a view of a complex "
                    "tensor's imaginary parts; zeros for a real tensor, as NumPy's.")


@public(("real", _real_attribute))
def real(x):
    """The real part: for a complex tensor a view of its real parts (torch's and NumPy's; a write to it
    writes ``x``), a real tensor itself."""
    x = as_tensor(x)
    if x.dtype.kind != "c":
        return x
    return getitem(view_as_real(x), (Ellipsis, 0))


@public(("imag", _imag_attribute))
def imag(x):
    """The imaginary part: for a complex tensor a view of its imaginary parts (torch's and NumPy's); zeros
    for a real tensor, as NumPy's."""
    x = as_tensor(x)
    if x.dtype.kind != "c":
        return x * 0
    return getitem(view_as_real(x), (Ellipsis, 1))


public("conj")(conj)
public(name="conjugate")(conj)


@public("angle")
@named("AngleBackward0")
def angle(x, deg=False):
    """The argument of a complex number (``pi`` or 0 for a real one, whose gradient is 0, as torch's)."""
    x = as_tensor(x)
    if x.dtype.kind == "c":
        out = arctan2(ew.imag_part(x), ew.real_part(x))  # (the parts as new tensors: no views)
    else:
        x = x if x.dtype != bool else ew.astype(x, ew.DEFAULT_FLOAT)
        out = where(x < 0, math.pi, where(x == x, sign(x) * 0.0, math.nan))  # (x's floating dtype; NaN stays)
    return guard(out * (180 / math.pi) if deg else out, x)


@public()
def linspace(start, stop, num=50, endpoint=True, dtype=None, chunks="auto", requires_grad=False, axis=0):
    """NumPy's ``linspace``: a leaf tensor chunked like dask's for number endpoints; for tensor (or
    array) endpoints, NumPy's ``start + k * step`` along a new ``axis``, its last sample ``stop`` itself
    when ``endpoint``, differentiable in both endpoints."""
    if num < 0:
        raise RuntimeError("number of steps must be non-negative")
    if not any(isinstance(v, (Tensor, list, tuple)) or np.ndim(v) for v in (start, stop)):
        check_size("linspace", (num,), dtype or np.float64, chunks)
        t = Tensor._make(da.linspace(start, stop, num, endpoint=endpoint, dtype=dtype, chunks=chunks))
        return t.requires_grad_(requires_grad) if requires_grad else t
    start, stop = as_tensor(start), as_tensor(stop)
    shape = np.broadcast_shapes(start.shape, stop.shape)
    div = (num - 1) if endpoint else num
    k = constant_like(np.arange(num, dtype=np.result_type(start.dtype, stop.dtype, float)), start.array._meta)
    k = reshape(k, (num,) + (1,) * len(shape))
    if div > 0:
        y = start + k * ((stop - start) / div)
    else:  # NumPy: one sample (or none) is start itself
        y = start + k * 0
    if endpoint and num > 1:
        y = concatenate([getitem(y, (slice(0, num - 1),)), reshape(broadcast_to(stop, shape), (1,) + shape)], axis=0)
    y = y if dtype is None else ew.astype(y, dtype)
    return y if axis == 0 else moveaxis(y, 0, norm_axis(axis, y.ndim))


@public()
def array(object, dtype=None, *, copy=True, ndmin=0):
    """NumPy's ``array``: a tensor from a tensor (a differentiable copy unless ``copy=False``), a number,
    an array, or nested lists and tuples of them (stacked: ``array([x, x * 2])`` is lazy and differentiable
    in ``x``, as in HIPS autograd); ``dtype`` casts, ``ndmin`` prepends axes."""
    t = as_tensor(object)
    if copy and t is object:
        t = ew.clone(t)
    if dtype is not None and np.dtype(dtype) != t.dtype:
        t = ew.astype(t, dtype)
    return reshape(t, (1,) * (ndmin - t.ndim) + t.shape) if t.ndim < ndmin else t


# ------------------------------------------------------------- NumPy's other names
def _predicate(fn, name):
    """A test of each element (no gradient: the result is boolean)."""
    def op(x):
        return Tensor._make(fn(as_tensor(x).array))
    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"NumPy's ``{name}`` (boolean; not differentiable)."
    return public(name)(op)


isnan, isinf, isfinite = (_predicate(getattr(da, n), n) for n in ("isnan", "isinf", "isfinite"))
signbit, isreal, isposinf, isneginf = (_predicate(getattr(da, n), n) for n in ("signbit", "isreal", "isposinf",
                                                                              "isneginf"))

for _alias, _op in (("absolute", ew.abs), ("fabs", ew.abs), ("negative", ew.neg), ("multiply", ew.mul),
                    ("divide", ew.truediv), ("true_divide", ew.truediv), ("power", ew.pow),
                    ("rint", ew.round), ("equal", ew.eq), ("not_equal", ew.ne), ("greater", ew.gt),
                    ("greater_equal", ew.ge), ("less", ew.lt), ("less_equal", ew.le)):
    public(name=_alias)(_op)


@public()
def subtract(a, b, *, alpha=1):
    """``a - alpha * b`` (NumPy's ``subtract``, torch's ``sub``): a bool operand beside another is taken in
    their promoted dtype, as NumPy takes it (``1 - mask`` is 0s and 1s), where torch's ``sub`` and the
    ``-`` operator refuse it; two bools raise NumPy's TypeError."""
    bools = [isinstance(v, bool) or getattr(v, "dtype", None) == np.bool_ for v in (a, b)]
    if all(bools):
        raise TypeError("numpy boolean subtract, the `-` operator, is not supported, use the bitwise_xor, the `^` "
                        "operator, or the logical_xor function instead.")
    if any(bools):
        dtype = result_type(a, b)
        a, b = (int(v) if isinstance(v, bool) else ew.astype(v, dtype) if is_bool else v
                for v, is_bool in zip((a, b), bools))
    return ew.sub(a, b, alpha=alpha)


def _itself(op):
    """torch's ``x.positive()`` and ``+x``: ``x`` itself (a write into the result is a write into ``x``), no node."""
    def positive(self):
        if self.dtype == bool:
            raise RuntimeError("The `+` operator, on a bool tensor is not supported.")
        return self
    return positive


@public(("positive", _itself), ("__pos__", _itself))
def positive(x):
    """NumPy's ``positive``: a new tensor, recorded as ``x * 1``; of a bool tensor torch's error.  (The method
    ``x.positive()`` and ``+x`` are torch's: ``x`` itself.)"""
    x = as_tensor(x)
    if x.dtype == bool:
        raise RuntimeError("The `+` operator, on a bool tensor is not supported.")
    return x * 1


@public()
def float_power(a, b):
    """``a ** b`` computed in float64 (complex128 for complex operands), as NumPy's."""
    def wide(t):
        if not isinstance(t, Tensor):
            return t
        return t.astype(np.complex128 if t.dtype.kind == "c" else np.float64)
    return wide(as_tensor(a)) ** (wide(b) if isinstance(b, Tensor) else b)


@public("deg2rad")
@named("Deg2RadBackward0")
def deg2rad(x):
    """Degrees to radians, ``x * pi / 180`` (NumPy's ``deg2rad``/``radians``, torch's ``deg2rad``)."""
    return x * (math.pi / 180)


@public("rad2deg")
@named("Rad2DegBackward0")
def rad2deg(x):
    """Radians to degrees, ``x * 180 / pi`` (NumPy's ``rad2deg``/``degrees``, torch's ``rad2deg``)."""
    return x * (180 / math.pi)


public(name="radians")(deg2rad)
public(name="degrees")(rad2deg)


def _copysign_array(a, b):
    return da.where(da.signbit(b), -da.fabs(a), da.fabs(a))


def _copysign_number_array(a, *, negative):
    return -da.fabs(a) if negative else da.fabs(a)


def _copysign_ratio(g, s):
    # torch's copysign_tensor_self_backward: g * (result / self), the ratio 0 where self is 0 (so NaN at an
    # infinite or NaN self, as inf / inf; the abs/where composition gave +-g there)
    return g * where(s.a == 0, 0, s.r / s.a)


_copysign_p = primitive("copysign", torch="CopysignBackward0", impl=_copysign_array, args=("a", "b"),
                        save=("a", "r"))
# torch's gradient to the sign's tensor is zeros, not none (an optimizer steps on it), 0 for any cotangent
_copysign_p.vjp(lambda g, s: (_copysign_ratio(g, s), ew.zeros_like(g)))
_copysign_number_p = primitive("copysign_number", torch="CopysignBackward1", impl=_copysign_number_array,
                               args=("a",), save=("a", "r"))
_copysign_number_p.vjp(lambda g, s, *, negative: (_copysign_ratio(g, s),))


@public("copysign")
@named(lambda a, b: f"CopysignBackward{0 if isinstance(b, Tensor) else 1}")
def copysign(a, b):
    """``|a|`` with the sign of ``b`` (``b``'s sign bit: -0.0 counts as negative, as NumPy's), in torch's
    floating result type of the two; torch's gradient."""
    b = as_tensor(b) if not isinstance(b, numbers.Number) else b
    a = as_tensor(a)
    if (dtype := result_type(a, b, floating=True)) != a.dtype:
        a = ew.astype(a, dtype)
    if not isinstance(b, Tensor):
        return _copysign_number_p.bind(a, negative=math.copysign(1.0, b) < 0)
    check_same_device(a, b)
    check_broadcast(a.shape, b.shape)
    return _copysign_p.bind(a, b)


def _sinc_array(a):
    zero = a == 0
    safe = da.where(zero, 1, a) * a.dtype.type(math.pi)  # the other branch of the where never divides by 0
    return da.where(zero, 1, da.sin(safe) / safe).astype(a.dtype)


def _sinc_rule(g, s):
    # torch's formula, (pi x cos(pi x) - sin(pi x)) / (pi x^2), 0 where pi x^2 is 0: the chain rule through
    # sin(pi x) / (pi x) cancels badly near 0 (its gradient at 1e-12 was 2e-4, torch's (and the truth) ~0)
    x = s.x
    a = x * math.pi
    sq = x * x * math.pi
    return (where(sq == 0, 0, g * conj((a * ew.cos(a) - sin(a)) / sq)),)


sinc_p = primitive("sinc", torch="SincBackward0", impl=_sinc_array, save=("x",), prepare=tensor_operand)
sinc_p.vjp(_sinc_rule)


@public("sinc")
@named("SincBackward0")
def sinc(x):
    """``sin(pi x) / (pi x)``, 1 at 0, torch's gradient (0 at 0); integers and bools in float32, half in float32
    and rounded back, as torch's (``pi x`` in half is 0.1% off: sinc(1) was 3e-4, not 0)."""
    x = as_tensor(x)
    if x.dtype == np.float16:
        return ew.astype(sinc(ew.astype(x, np.float32)), np.float16)
    if x.dtype.kind in "biu":
        x = ew.astype(x, DEFAULT_FLOAT)
    return sinc_p.bind(x)


@public("nan_to_num")
@named("NanToNumBackward0")
def nan_to_num(x, nan=0.0, posinf=None, neginf=None):
    """NaN to ``nan``, infinities to the dtype's largest finite values (or those given); the
    gradient passes where the value was finite, as torch's."""
    x = as_tensor(x)
    info = np.finfo(x.dtype) if x.dtype.kind in "fc" else None
    hi = posinf if posinf is not None else (float(info.max) if info is not None else None)
    lo = neginf if neginf is not None else (float(info.min) if info is not None else None)
    if info is None:
        return x
    if x.dtype.kind == "c":  # (each part on its own, as torch's and NumPy's; not differentiable, as torch's)
        refuse_complex("nan_to_num", x)
        return view_as_complex(nan_to_num(view_as_real(x), nan, posinf, neginf))
    out = where(isnan(x), nan, x)
    out = where(out == math.inf, hi, out)
    return guard(where(out == -math.inf, lo, out), x)  # (torch's saves x)



# ------------------------------------------------- max and min of complex numbers
def _complex_extreme(torch_op, fn):
    """NumPy's ``max``/``min``/``amax``/``amin``: as torch's for real tensors; complex ones ordered as NumPy
    orders them (real parts, then imaginary), the gradient shared evenly by the tied extremes, as HIPS
    autograd's.  The extreme ``c`` is picked without a gradient and the result is ``c`` plus the mean of
    ``x - c`` over the positions holding it (exactly ``c``), so the gradient reaches those positions."""
    def op(x, axis=None, keepdims=False):
        x = as_tensor(x)
        if x.dtype.kind != "c":
            return torch_op(x, axis=axis, keepdims=keepdims)
        axes = norm_axes(axis, x.ndim)
        c = Tensor._make(reduce_array(x.detach().array, fn, axes, keepdims=True))
        held = ew.eq(x.detach(), c)
        share = sum(where(held, x - c, 0), axis=axes, keepdims=True) / sum(held, axis=axes, keepdims=True)
        out = c + share
        return out if keepdims else reshape(out, tuple(n for k, n in enumerate(x.shape) if k not in axes))
    op.__name__ = op.__qualname__ = torch_op.__name__
    op.__doc__ = torch_op.__doc__ + "  Complex tensors are ordered as NumPy orders them (torch's method refuses them)."
    return op


def _module_level_only(name, numpy_op):
    """``numpy_op`` as the module-level function ``name``, the Tensor methods calling what they called."""
    fn, methods = OPS[name]

    @functools.wraps(fn)
    def method(*args, **kwargs):
        return fn(*args, **kwargs)

    kept = tuple((m, lambda _op: method) if isinstance(m, str) else (m[0], lambda _op, w=m[1]: w(method))
                 for m in methods)
    return public(*kept, name=name)(numpy_op)


for _name, _fn in (("max", "max"), ("min", "min"), ("amax", "max"), ("amin", "min")):
    _module_level_only(_name, _complex_extreme(OPS[_name][0], _fn))

# ---------------------------------------------------- NaN-ignoring and other reductions
@public()
@named("NansumBackward0")
def nansum(x, axis=None, keepdims=False):
    """The sum over ``axis`` with NaN counted as zero (NumPy's and torch's ``nansum``); NaN entries get
    a zero gradient."""
    x = as_tensor(x)
    if x.dtype.kind not in "fc":  # (no NaN to skip: the integer sum, int64 as torch's)
        return sum(x, axis=axis, keepdims=keepdims)
    return guard(sum(where(isnan(x), 0.0, x), axis=axis, keepdims=keepdims), x)


def _float64_if_int(x):
    """``x`` as NumPy's statistics read integers and bools: float64 (not float32, which drops digits past 2**24)."""
    return ew.astype(x, np.float64) if x.dtype.kind in "biu" else x


@public()
def nanmean(x, axis=None, keepdims=False):
    """The mean over ``axis`` of the entries that are not NaN (NumPy's and torch's ``nanmean``); of integers or bools,
    in float64 (NumPy's)."""
    x = _float64_if_int(as_tensor(x))
    kept = where(isnan(x), 0.0, ew.ones_like(x))
    return nansum(x, axis=axis, keepdims=keepdims) / sum(kept, axis=axis, keepdims=keepdims)


@public("nanmax")
def nanmax(x, axis=None, keepdims=False):
    """The largest value over ``axis``, NaN ignored (NumPy's ``nanmax``); an all-NaN slice gives ``-inf``,
    where NumPy warns and gives NaN.  Integers and bools keep their dtype, as NumPy's."""
    x = as_tensor(x)
    if x.dtype.kind in "biu":  # (no NaN to skip; where(..., inf, x) would make them float32)
        return amax(x, axis=axis, keepdims=keepdims)
    return amax(where(isnan(x), -math.inf, x), axis=axis, keepdims=keepdims)


@public("nanmin")
def nanmin(x, axis=None, keepdims=False):
    """The smallest value over ``axis``, NaN ignored (NumPy's ``nanmin``); an all-NaN slice gives ``inf``,
    where NumPy warns and gives NaN.  Integers and bools keep their dtype, as NumPy's."""
    x = as_tensor(x)
    if x.dtype.kind in "biu":
        return amin(x, axis=axis, keepdims=keepdims)
    return amin(where(isnan(x), math.inf, x), axis=axis, keepdims=keepdims)


@public()
def ptp(x, axis=None, keepdims=False):
    """Peak to peak: ``max - min``."""
    return amax(x, axis=axis, keepdims=keepdims) - amin(x, axis=axis, keepdims=keepdims)


@public()
def average(x, axis=None, weights=None, keepdims=False):
    """NumPy's ``average``: the mean, or ``sum(x * w) / sum(w)`` (``weights`` 1-D along one ``axis``,
    or shaped like ``x``)."""
    x = as_tensor(x)
    if weights is None:
        return mean(x, axis=axis, keepdims=keepdims)
    w = as_tensor(weights)
    if w.shape != x.shape:
        if axis is None or not isinstance(axis, numbers.Integral) or w.ndim != 1:
            raise TypeError("Axis must be specified when shapes of a and weights differ.")
        ax = norm_axis(axis, x.ndim)
        if w.shape[0] != x.shape[ax]:
            raise ValueError("Length of weights not compatible with specified axis.")
        w = reshape(w, tuple(-1 if d == ax else 1 for d in range(x.ndim)))
    return sum(x * w, axis=axis, keepdims=keepdims) / sum(w * ew.ones_like(x), axis=axis, keepdims=keepdims)


_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


def quantile_method(method, interpolation):
    """The interpolation asked for by NumPy's ``method=`` or torch's (and old NumPy's) ``interpolation=``:
    one of torch's five; NumPy's other methods (``'weibull'``, ...) are not implemented."""
    if interpolation is not None:
        if method != "linear":
            raise TypeError("quantile() got both 'method' and 'interpolation' (the same argument)")
        method = interpolation
    if method not in _INTERPOLATIONS:
        if method in ("inverted_cdf", "averaged_inverted_cdf", "closest_observation", "interpolated_inverted_cdf",
                      "hazen", "weibull", "median_unbiased", "normal_unbiased"):
            raise NotImplementedError(f"quantile(method={method!r}) is not implemented: daskgrad has torch's "
                                      f"interpolations {', '.join(_INTERPOLATIONS)}")
        raise RuntimeError("quantile() interpolation must be one of linear, lower, higher, midpoint or nearest. "
                           f"Got {method}")
    return method


def quantile_args(x, q, axis):
    """What the quantile family shares: ``x`` as a tensor with the axes to reduce merged into its last
    one (flattened when ``axis`` is None), the quantiles as a host array of floats (checked), the axis to
    reduce, ``x``'s rank, and the axes reduced (None: all).  Integers are read as float64, NumPy's (bools are
    refused as NumPy's quantile refuses them; ``Tensor.quantile`` refuses both first, as torch's)."""
    x = as_tensor(x)
    if x.dtype == bool:
        raise TypeError("numpy boolean subtract, the `-` operator, is not supported, use the bitwise_xor, the `^` "
                        "operator, or the logical_xor function instead.")
    x = _float64_if_int(x)
    qs = np.atleast_1d(np.asarray(q.detach() if isinstance(q, Tensor) else q, dtype=np.float64))
    if ((qs < 0) | (qs > 1)).any():
        raise ValueError("Quantiles must be in the range [0, 1]")
    if is_empty(x):
        raise RuntimeError("quantile() input tensor must be non-empty")
    if x.ndim == 0 and axis is not None:
        norm_axes(axis, 1)  # (0 or -1: a 0-d tensor's one element, as flattened)
    ndim = x.ndim
    if axis is None or x.ndim == 0:
        return ravel(x), qs, 0, ndim, None
    if isinstance(axis, (tuple, list)):  # NumPy's several axes: moved last and merged into one
        axes = norm_axes(axis, x.ndim)
        rest = [i for i in range(x.ndim) if i not in axes]
        x = transpose(x, rest + list(axes))
        return reshape(x, x.shape[:len(rest)] + (-1,)), qs, len(rest), ndim, axes
    axis = norm_axis(axis, x.ndim)
    return x, qs, axis, ndim, (axis,)


def _positions(pos, last, method):
    """The two sorted positions a quantile at ``pos`` reads and the weight of the upper one."""
    lo = math.floor(pos)
    if method == "lower":
        return lo, lo, 0.0
    if method == "higher":
        return math.ceil(pos), math.ceil(pos), 0.0
    if method == "nearest":  # half to even, as torch's round and NumPy's
        k = int(np.round(pos))
        return k, k, 0.0
    hi = min(math.ceil(pos), last)
    return lo, hi, (0.5 if method == "midpoint" else pos - lo) if hi != lo else 0.0


def quantile_result(out, q, keepdims, ndim, reduced):
    """One result per quantile shaped as NumPy's (a leading axis for a sequence of quantiles)."""
    lead = 0 if np.ndim(q) == 0 else 1
    res = out[0] if not lead else stack(out, axis=0)
    if keepdims:
        res = (reshape(res, res.shape[:lead] + (1,) * ndim) if reduced is None else
               expand_dims(res, tuple(lead + a for a in reduced)))
    return res


@public("quantile")
def quantile(x, q, axis=None, keepdims=False, *, method="linear", interpolation=None):
    """NumPy's ``quantile`` (linear interpolation between the two nearest sorted values by default, as
    torch's; ``method=``/``interpolation=`` ``'lower'``, ``'higher'``, ``'midpoint'``, ``'nearest'``),
    differentiable as torch's: the gradient goes to the values read.  ``q`` a number or a sequence of
    numbers (a leading axis of the result, as NumPy's).  A slice holding a NaN gives NaN."""
    method = quantile_method(method, interpolation)
    x, qs, axis, ndim, reduced = quantile_args(x, q, axis)
    n, pick = x.shape[axis], (slice(None),) * axis
    if n != n:
        return quantile_result(_unknown_length_quantiles(x, qs, axis, method), q, keepdims, ndim, reduced)
    s = sort(x, axis=axis)
    last = getitem(s, pick + (n - 1,))  # NaN sorts last: the slice holds one iff this is NaN
    out = []
    for p in qs:
        lo, hi, w = _positions(float(p) * (n - 1), n - 1, method)
        v = getitem(s, pick + (lo,))
        if w:
            v = v + (getitem(s, pick + (hi,)) - v) * w
        out.append(where(last != last, last, v) if x.dtype.kind in "fc" and lo != n - 1 else v)
    return quantile_result(out, q, keepdims, ndim, reduced)


def _rank_block(block, axis):
    return np.argsort(chunk.argsort(block, axis), axis=axis, kind="stable")


def _ranks_array(a, *, axis):
    """Each element's place in the stable sorted order along ``axis`` (NaN last), in ``a``'s own blocks: the blocks
    joined along ``axis`` for the sort, the ranks cut back into them (lengths unknown, after a boolean mask)."""
    ranks = _unknown.one_block(a, axis).map_blocks(_rank_block, axis=axis, dtype=np.int64,
                                                    meta=a._meta.astype(np.int64))
    return _unknown.split_like(ranks, a, axis)


def _unknown_length_quantiles(x, qs, axis, method):
    """:func:`quantile` along an axis whose length is not known until computed (rows after a boolean mask): the
    sorted positions read, and the weights, computed lazily from the slice's count; each value read where it
    sits in ``x`` (the element whose rank in the sorted order is the position), so the gradient reaches ``x``'s
    own blocks."""
    rank = Tensor._make(door.defer(_ranks_array, (recorded(x),), (("axis", axis),)))
    last = ew.astype(length(x, (axis,), keepdims=True) - 1, np.float64)  # (the last place, per slice)

    def at(k):
        return sum(where(rank == k, x, ew.zeros_like(x)), axis=axis, keepdims=True)
    top = at(last)
    out = []
    for p in qs:
        pos = float(p) * last
        lo = ew.floor(pos)
        if method == "lower":
            hi, w = lo, None
        elif method == "higher":
            lo = hi = ew.ceil(pos)
            w = None
        elif method == "nearest":  # half to even, as torch's round and NumPy's
            lo = hi = ew.round(pos)
            w = None
        else:
            hi = ew.minimum(ew.ceil(pos), last)
            w = where(hi != lo, 0.5 if method == "midpoint" else pos - lo, 0.0)
        v = at(lo)
        if w is not None:
            w = ew.astype(w, x.dtype) if x.dtype.kind == "f" else w
            v = where(w != 0, v + (at(hi) - v) * w, v)
        v = where(top != top, top, v) if x.dtype.kind in "fc" else v
        out.append(squeeze(v, axis))
    return out


@public()
def median(x, axis=None, keepdims=False):
    """NumPy's ``median`` (the mean of the two middle values for an even count; torch's returns the
    lower one), differentiable through the values it reads; of integers or bools, float64 (NumPy's)."""
    return quantile(_float64_if_int(as_tensor(x)), 0.5, axis=axis, keepdims=keepdims)


@public()
def percentile(x, q, axis=None, keepdims=False, *, method="linear", interpolation=None):
    """``quantile(x, q / 100)``: NumPy's ``percentile``, ``q`` in [0, 100]."""
    return quantile(x, np.asarray(q, dtype=np.float64) / 100, axis=axis, keepdims=keepdims, method=method,
                    interpolation=interpolation)


@public()
def cov(m, rowvar=True, bias=False, ddof=None):
    """NumPy's ``cov`` of the variables in the rows of ``m`` (its columns when ``rowvar`` is False)."""
    m = atleast_2d(m)
    if not rowvar and m.shape[0] != 1:
        m = transpose(m)
    n = m.shape[1] if m.shape[1] == m.shape[1] else length(m[:1], 1)  # (after a boolean mask: a lazy count)
    ddof = ddof if ddof is not None else (0 if bias else 1)
    centered = m - mean(m, axis=1, keepdims=True)
    c = (centered @ conj(transpose(centered))) / (n - ddof)
    return reshape(c, ()) if c.shape == (1, 1) else c


@public()
def corrcoef(x, rowvar=True):
    """Pearson correlation coefficients of the rows of ``x`` (its columns when ``rowvar=False``), from
    ``cov`` (NumPy's ``corrcoef``; torch's takes rows only)."""
    c = cov(x, rowvar=rowvar)
    if c.ndim == 0:
        return c / c
    k = c.shape[0]
    d = sqrt(ew.real_part(getitem(c, (np.arange(k), np.arange(k)))))
    return c / reshape(d, (-1, 1)) / reshape(d, (1, -1))
