"""The rest of dask.array's differentiable NumPy functions (those that rearrange tensors are in
``numpy_shape``): ``cumprod`` (its own rule, exact with zeros as torch's), ``take_along_axis`` (its
own rule, a gather and its scatter-add), and compositions of the ops (NaN-ignoring reductions and
order statistics, ``gradient``, ``select``, ``piecewise``, ``fmax`` ...), whose gradient is their
parts'.  NumPy's names and arguments; torch's name as an alias where torch has one.
"""
from __future__ import annotations

import math
import numbers

import dask.array as da
import numpy as np
from dask.array.utils import meta_from_array

from .. import _dask as door, chunk, return_types
from .._dask import unknown as _unknown
from ..graph import guard, named, primitive
from .._data import result_type
from .._modes import is_grad_enabled
from .._tensor import Tensor, recorded
from ._util import (accumulates_in, as_tensor, binary_operands, norm_axis, public, raw, tensor_operand,
                    tensor_or_scalar)
from . import elementwise as ew
from .composite import along_axis, isnan, quantile_args, quantile_method, quantile_result, ravel
from .elementwise import astype, conj, exp2, ge, le, trunc, where
from .indexing import _blocks_of, _gather_array, getitem, sort
from .indexing import gather_p, scatter_add_p  # (take's rule)
from .reductions import cumsum, length, mean, prod, running, running_sum, sum
from .shape import broadcast_to, concatenate, expand_dims, flip, pad, rechunk, reshape, squeeze, transpose


# ---------------------------------------------------------------------- cumprod
def _reverse_cumsum(t, axis, wide=False):
    return flip(running_sum(flip(t, axis), axis, None, wide), axis)


def _cumprod_rule(g, s, *, axis, wide=False):
    """torch's exact gradient with zeros: before the first zero of a slice, ``sum_{j>=i} g_j r_j / x_i``;
    at the first zero, the products with that zero left out (``cumprod`` of ``x`` with it set to 1);
    after it, 0 (each product there holds the first zero).  ``wide``: the running sums and products
    accumulated as torch's (the Tensor method's)."""
    x, r = s.x, s.r
    if x.shape[axis] == 1:  # torch's: the gradient itself, not g * x / x (a last bit off; a second derivative)
        return (g,)
    zero = x == 0
    seen = cumsum(zero, axis)
    before, first = seen == 0, zero & (seen == 1)
    terms, first_terms = g * conj(r), g * conj(running_product(where(first, 1, x), axis, None, wide))
    if not is_grad_enabled():  # torch's first-order branch: each sum over the products that are not 0 only (an
        # infinite g_j where the product is 0 is left out, not 0 * inf); with create_graph they stay, as the
        # zero products' own derivatives are not 0
        terms, first_terms = where(before, terms, 0), where(seen == 1, first_terms, 0)
    at_before = _reverse_cumsum(terms, axis, wide) / conj(where(before, x, 1))
    at_first = _reverse_cumsum(first_terms, axis, wide)
    return (where(before, at_before, where(first, at_first, 0)),)


cumprod_p = primitive("cumprod", torch="CumprodBackward0",
                      impl=lambda a, *, axis, wide=False: running(da.cumprod, a, axis, wide),
                      save=("x", "r"), prepare=tensor_operand)
cumprod_p.vjp(_cumprod_rule)


def _cumprod_method(cumprod):
    def method(self, dim=None, dtype=None, *, axis=None):
        """torch's ``cumprod(dim, dtype=None)``: float32 and half accumulate in double and float, as torch's CPU
        kernel (and its gradient)."""
        return running_product(self, dim if axis is None else axis, dtype, True)
    method.__name__ = "cumprod"
    return method


def running_product(x, axis, dtype, wide):
    """``cumprod``; ``wide``: accumulated as torch's (:func:`~daskgrad.ops.reductions.running`)."""
    x = as_tensor(x)
    x = x if (dtype := accumulates_in(x, dtype) if wide else dtype) is None else astype(x, dtype)  # (NumPy's uint64)
    if axis is None:
        return running_product(ravel(x), 0, None, wide)
    axis = norm_axis(axis, x.ndim)
    if x.ndim == 0:
        return reshape(running_product(reshape(x, (1,)), 0, dtype, wide), ())
    out = cumprod_p.bind(x, axis=axis, **({"wide": True} if wide else {}))
    return out if dtype is None or out.dtype == dtype else astype(out, dtype)  # (NumPy's int64 of small ints)


@public(("cumprod", _cumprod_method))
def cumprod(x, axis=None, dtype=None):
    """The cumulative product along ``axis`` (the raveled tensor when None); its gradient is exact where
    the input holds zeros, as torch's."""
    return running_product(x, axis, dtype, False)


public(name="cumulative_prod")(cumprod)  # NumPy 2's name
public(name="cumulative_sum")(cumsum)


# ----------------------------------------------------------- NaN-ignoring ones
@public()
def nancumsum(x, axis=None, dtype=None):
    """``cumsum`` with NaNs counted as 0."""
    x = as_tensor(x)
    return cumsum(where(isnan(x), 0, x), axis=axis, dtype=dtype)


@public()
def nancumprod(x, axis=None, dtype=None):
    """``cumprod`` with NaNs counted as 1."""
    x = as_tensor(x)
    return cumprod(where(isnan(x), 1, x), axis=axis, dtype=dtype)


@public()
def nanprod(x, axis=None, keepdims=False, dtype=None):
    """``prod`` with NaNs counted as 1."""
    x = as_tensor(x)
    return prod(where(isnan(x), 1, x), axis=axis, keepdims=keepdims, dtype=dtype)


@public()
def nanvar(x, axis=None, ddof=0, keepdims=False, dtype=None):
    """``var`` of the non-NaN values (NaN where fewer than ``ddof + 1`` remain); NaN positions get a
    zero gradient; of integers or bools, in float64 (NumPy's)."""
    x = as_tensor(x)
    x = astype(x, dtype) if dtype is not None else astype(x, np.float64) if x.dtype.kind in "biu" else x
    nan = isnan(x)
    kept = where(nan, 0.0, ew.ones_like(x))
    n = sum(kept, axis=axis, keepdims=True)
    centered = where(nan, 0.0, x - sum(where(nan, 0.0, x), axis=axis, keepdims=True) / n)
    return sum(centered * centered, axis=axis, keepdims=keepdims) / (sum(kept, axis=axis, keepdims=keepdims) - ddof)


@public()
def nanstd(x, axis=None, ddof=0, keepdims=False, dtype=None):
    """``std`` of the non-NaN values, ``sqrt(nanvar)``; NaN positions get a zero gradient."""
    return ew.sqrt(nanvar(x, axis=axis, ddof=ddof, keepdims=keepdims, dtype=dtype))


def _nanarg(fn):
    def op(x, axis=None):
        x = as_tensor(x)
        return Tensor._make(getattr(da, fn)(x.array, axis=axis if axis is None else norm_axis(axis, x.ndim)))
    op.__name__ = op.__qualname__ = fn
    op.__doc__ = f"NumPy's ``{fn}`` (NaNs skipped; an integer tensor, never differentiable)."
    return public()(op)


nanargmax, nanargmin = _nanarg("nanargmax"), _nanarg("nanargmin")


@public()
def moment(x, order, axis=None, dtype=None, keepdims=False, ddof=0):
    """dask's ``moment``: the ``order``-th central moment, ``sum((x - mean)**order) / (n - ddof)``."""
    x = as_tensor(x) if dtype is None else astype(as_tensor(x), dtype)
    if order < 0 or int(order) != order:
        raise ValueError("Order must be an integer >= 0")
    n = length(x, axis, keepdims)  # (a lazy count after a boolean mask)
    if order < 2:  # 1 and 0 by definition, as dask's (no gradient)
        return sum(ew.full_like(x, float(order == 0)), axis=axis, keepdims=keepdims) / n
    c = x - mean(x, axis=axis, keepdims=True)
    return sum(c ** int(order), axis=axis, keepdims=keepdims) / (n - ddof)


# ------------------------------------------------------------------ gradient
def _on_device(host, like):
    """A small host array (coefficients the user's coordinates give) as a constant on ``like``'s chunk type."""
    a = da.from_array(np.asarray(host, dtype=like.dtype), chunks=-1)
    meta = like._storage.value._meta
    return Tensor._make(a.map_blocks(chunk.like, meta, dtype=a.dtype, meta=meta_from_array(meta, a.ndim, a.dtype)))


def _along(t, axis, n):
    """A 1-D host ``t`` of length ``n`` shaped to broadcast along ``axis`` of an ``n``-D tensor."""
    return np.reshape(t, (-1,) + (1,) * (n - axis - 1))


def _gradient_axis(f, axis, spacing, edge_order):
    """np.gradient along one axis: central differences inside, one-sided ones of ``edge_order`` at the ends."""
    n = f.shape[axis]
    if n < edge_order + 1:
        raise ValueError("Shape of array too small to calculate a numerical gradient, at least (edge_order + 1) "
                         "elements are required.")
    pre = (slice(None),) * axis

    def at(i, j="one"):  # one slice of width 1 at i, or the range i:j
        return getitem(f, pre + (slice(i, i + 1 or None) if j == "one" else slice(i, j),))

    if np.ndim(spacing) == 0:
        h = float(spacing)
        inside = (at(2, None) - at(None, -2)) / (2 * h)
        if edge_order == 1:
            lo, hi = (at(1) - at(0)) / h, (at(-1) - at(-2)) / h
        else:
            lo = (at(0) * -1.5 + at(1) * 2 - at(2) * 0.5) / h
            hi = (at(-3) * 0.5 - at(-2) * 2 + at(-1) * 1.5) / h
        return concatenate([lo, inside, hi], axis=axis)
    x = np.asarray(spacing, dtype=np.float64)
    if x.ndim != 1 or len(x) != n:
        raise ValueError("when 1d, distances must match the length of the corresponding dimension")
    dx = np.diff(x)
    d1, d2 = dx[:-1], dx[1:]
    coef = [-d2 / (d1 * (d1 + d2)), (d2 - d1) / (d1 * d2), d1 / (d2 * (d1 + d2))]
    c = [_on_device(_along(k, axis, f.ndim), f) for k in coef]
    inside = c[0] * at(None, -2) + c[1] * at(1, -1) + c[2] * at(2, None)
    if edge_order == 1:
        lo, hi = (at(1) - at(0)) / dx[0], (at(-1) - at(-2)) / dx[-1]
    else:
        a, b = dx[0], dx[1]
        lo = at(0) * (-(2 * a + b) / (a * (a + b))) + at(1) * ((a + b) / (a * b)) + at(2) * (-a / (b * (a + b)))
        a, b = dx[-2], dx[-1]
        hi = at(-3) * (b / (a * (a + b))) + at(-2) * (-(a + b) / (a * b)) + at(-1) * ((2 * b + a) / (b * (a + b)))
    return concatenate([lo, inside, hi], axis=axis)


@public()
def gradient(f, *varargs, axis=None, edge_order=1):
    """NumPy's ``gradient``: second-order central differences inside, first- or second-order
    (``edge_order``) one-sided ones at the ends; ``varargs`` one spacing for all axes, or one per
    axis (a number, or the 1-D coordinates along it).  One tensor for one axis, else a list.
    Differentiable, across chunk boundaries (each difference reads its neighbours)."""
    f = as_tensor(f)
    if f.dtype.kind not in "fc":
        f = astype(f, np.float64)
    axes = tuple(range(f.ndim)) if axis is None else tuple(norm_axis(a, f.ndim) for a in (
        axis if isinstance(axis, (tuple, list)) else (axis,)))
    if edge_order not in (1, 2):
        raise ValueError("'edge_order' greater than 2 not supported")
    if len(varargs) == 0:
        spacings = [1.0] * len(axes)
    elif len(varargs) == 1 and np.ndim(varargs[0]) == 0:
        spacings = [varargs[0]] * len(axes)
    elif len(varargs) == len(axes):
        spacings = list(varargs)
    else:
        raise TypeError("invalid number of arguments")
    if any(isinstance(s, (Tensor, da.Array)) for s in spacings):
        raise TypeError("gradient's spacings are host numbers or coordinates (NumPy arrays), not lazy tensors")
    out = [_gradient_axis(f, a, s, edge_order) for a, s in zip(axes, spacings)]
    return out[0] if len(out) == 1 else out


# ------------------------------------------------------- take, take_along_axis
@public("take")
@named(lambda a, indices, axis=None: "TakeBackward0" if axis is None else None)
def take(a, indices, axis=None):
    """NumPy's ``take`` (``torch.take`` when ``axis`` is None): the elements at ``indices`` along
    ``axis`` (of the raveled tensor when None), shaped ``a.shape[:axis] + indices.shape +
    a.shape[axis + 1:]``; repeated indices accumulate in backward."""
    given = a if axis is None else None  # (torch's take saves its input: guarded; index_select's reads no value)
    a, axis = along_axis(a, axis)
    pre = (slice(None),) * axis
    if isinstance(indices, numbers.Integral):
        return getitem(a, pre + (int(indices),))
    lazy = isinstance(indices, (Tensor, da.Array))
    idx = raw(indices) if lazy else np.asarray(indices)
    if idx.dtype.kind not in "iu":
        raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
    if idx.ndim == 1:
        return guard(getitem(a, pre + (indices if lazy else idx,)), given)
    flat = getitem(a, pre + ((Tensor._make(idx.reshape(-1)) if lazy else idx.reshape(-1)),))
    return guard(reshape(flat, a.shape[:axis] + idx.shape + a.shape[axis + 1:]), given)


def _check_host_index(idx, n, axis):
    bad = (idx < -n) | (idx >= n)
    if bad.any():
        raise IndexError(f"index {int(idx[bad][0])} is out of bounds for axis {axis} with size {n}")


@public()
def take_along_axis(arr, indices, axis=-1):
    """NumPy's ``take_along_axis`` (torch's ``take_along_dim``, ``torch.gather`` with broadcasting):
    ``out[..., j, ...] = arr[..., indices[..., j, ...], ...]`` along ``axis`` (the raveled tensor when
    None).  ``indices`` host integers or an integer tensor (``argsort``'s); the axis becomes one chunk.
    Backward adds the cotangent back where it was read (repeats accumulate)."""
    x = as_tensor(arr)
    lazy = isinstance(indices, (Tensor, da.Array))
    idx = raw(indices) if lazy else np.asarray(indices)
    if axis is None:
        x, axis, idx = ravel(x), 0, idx.reshape(-1)
    x, idx, axis, n = _gather_operands(x, idx, axis, lazy)
    return gather_p.bind(x, idx, axis=axis, n=n)


def _gather_operands(x, idx, axis, lazy):
    """``x`` and integer ``idx`` (a dask or host array) broadcast against each other but along ``axis``,
    ``x``'s axis in one chunk, ``idx`` chunked as the result: what ``gather_p`` takes."""
    axis = norm_axis(axis, x.ndim)
    if idx.dtype.kind not in "iu":
        raise IndexError("`indices` must be an integer array")
    if idx.ndim != x.ndim:
        raise ValueError("`indices` and `arr` must have the same number of dimensions")
    n = x.shape[axis]
    if not lazy:
        _check_host_index(idx, n, axis)
    shape = tuple(m if k == axis else max(a, m) for k, (a, m) in enumerate(zip(x.shape, idx.shape)))
    if x.shape[:axis] + x.shape[axis + 1:] != shape[:axis] + shape[axis + 1:]:
        x = broadcast_to(x, shape[:axis] + (n,) + shape[axis + 1:])
    if len(x.chunks[axis]) > 1:
        x = rechunk(x, {axis: -1})
    chunks = tuple((shape[axis],) if k == axis else c for k, c in enumerate(x.chunks))
    if lazy:
        idx = _unknown.rechunk(_unknown.broadcast_to(idx, shape), chunks)
    else:
        meta = x._storage.value._meta
        idx = da.from_array(np.broadcast_to(idx, shape), chunks=chunks).map_blocks(
            chunk.like, meta, dtype=idx.dtype, meta=meta_from_array(meta, len(shape), idx.dtype))
    return x, Tensor._make(idx), axis, n


# torch's ops that pick one value per slice and return its index (max(dim), median, sort ...): a gather at
# the index, its own node under torch's name, the index axis dropped unless ``keepdims``
values_at_p = primitive("values_at", torch=("MaxBackward0", "MinBackward0", "MedianBackward1",
                                            "NanmedianBackward1", "SortBackward0",
                                            "TopkBackward0", "KthvalueBackward0", "ModeBackward0"),
                        impl=lambda a, idx, *, axis, n, keepdims: (_gather_array(a, idx, axis=axis, n=n) if keepdims
                                                                   else _gather_array(a, idx, axis=axis, n=n)
                                                                   .squeeze(axis)),
                        args=("x", "idx"), save=("idx",), consts=("idx",))
values_at_p.vjp(lambda g, s, *, axis, n, keepdims: (scatter_add_p.bind(g if keepdims else expand_dims(g, axis),
                                                                       s.idx, axis=axis, n=n),))


def values_at(x, indices, axis, keepdims, node):
    """The values of ``x`` at integer tensor ``indices`` (shaped as ``x`` but 1 along ``axis``, or the whole
    axis for a sort) along ``axis``, recorded as torch's ``node``; the gradient goes to those places.  Along an
    axis of unknown lengths (rows after a boolean mask), one index a slice: the sum of ``x`` where each element's
    place (counted block by block) is the index, so the gradient reaches ``x``'s own blocks, lengths unknown."""
    x = as_tensor(x)
    if x.ndim and x.shape[axis] != x.shape[axis] and raw(indices).shape[axis] == 1:
        place = Tensor._make(door.defer(_unknown.positions, (recorded(x),), (("axis", axis),)))
        out = sum(where(place == Tensor._make(raw(indices)), x, ew.zeros_like(x)), axis=axis, keepdims=True)
        out = out if out.dtype == x.dtype else astype(out, x.dtype)
        return out if keepdims else squeeze(out, axis)
    original = x
    x, idx, axis, n = _gather_operands(as_tensor(x), raw(indices), axis, True)
    return _blocks_of(values_at_p.bind(x, idx, axis=axis, n=n, keepdims=keepdims, node=node), original, axis)


@public("take_along_dim")
def take_along_dim(x, indices, dim=None):
    """torch's ``take_along_dim``: :func:`take_along_axis` along ``dim``, of ``x`` and ``indices`` both
    flattened when ``dim`` is None (torch's default)."""
    given = x  # (torch's gather saves its input)
    if dim is None:
        x = ravel(x)
        indices = reshape(indices, (-1,)) if isinstance(indices, Tensor) else np.asarray(indices).reshape(-1)
        dim = 0
    return guard(take_along_axis(x, indices, dim), given)


# ------------------------------------------------------------ partition, diagonals
@public()
def argpartition(a, kth, axis=-1, kind="introselect", order=None):
    """NumPy's ``argpartition`` (an integer tensor, not differentiable): NumPy's own, on each chunk
    holding the whole axis (the axis becomes one chunk)."""
    x, axis = along_axis(a, axis)
    if kind != "introselect" or order is not None:
        raise NotImplementedError("argpartition: daskgrad takes kind='introselect' and no order")
    if len(x.chunks[axis]) > 1:
        x = rechunk(x, {axis: -1})
    return Tensor._make(da.map_blocks(chunk.argpartition, x.array, kth=kth, axis=axis, dtype=np.int64,
                                      meta=meta_from_array(x.array._meta, x.ndim, np.int64)))


@public()
def partition(a, kth, axis=-1, kind="introselect", order=None):
    """NumPy's ``partition``: the element at each ``kth`` position where sorting would put it, smaller ones
    before, larger after, in NumPy's own arrangement (``take_along_axis`` of :func:`argpartition`), so
    each value's gradient goes back to where it came from."""
    x = as_tensor(a)
    if axis is None:
        x, axis = ravel(x), 0
    return take_along_axis(x, argpartition(x.detach(), kth, axis, kind, order), axis)


@public()
@named("DiagEmbedBackward0")
def diag_embed(input, offset=0, dim1=-2, dim2=-1):
    """torch's ``diag_embed``: the last axis of ``input`` as the ``offset`` diagonal of new planes over
    the output's axes ``dim1`` and ``dim2`` (zeros elsewhere); its gradient is that diagonal of the
    cotangent."""
    x = as_tensor(input)
    n = x.shape[-1] if x.ndim else 1
    x = reshape(x, (1,)) if x.ndim == 0 else x
    square = reshape(x, x.shape + (1,)) * _on_device(np.eye(n, dtype=x.dtype), x)  # rows i hold x[..., i] at i
    k = abs(int(offset))
    if k:
        lead = ((0, 0),) * (x.ndim - 1)
        square = pad(square, lead + (((0, k), (k, 0)) if offset > 0 else ((k, 0), (0, k))))
    ndim = square.ndim
    d1, d2 = norm_axis(dim1, ndim), norm_axis(dim2, ndim)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    rest = iter(range(ndim - 2))
    return transpose(square, [ndim - 2 if i == d1 else ndim - 1 if i == d2 else next(rest) for i in range(ndim)])


@public()
def make_diagonal(D, offset=0, axis1=0, axis2=1):
    """HIPS autograd's ``make_diagonal`` (the inverse of ``diagonal``): :func:`diag_embed` with its
    axes named ``axis1`` and ``axis2``."""
    return diag_embed(D, offset, axis1, axis2)


@public()
def real_if_close(a, tol=100):
    """NumPy's ``real_if_close``: the real part of a complex tensor whose imaginary parts are all below
    ``tol`` machine epsilons (``tol`` itself when under 1), else the tensor as it is.  That test decides
    the result's dtype, so for a complex tensor it is computed here, at the call (one small reduction,
    a single boolean back); a real tensor is returned as it is, with nothing computed."""
    x = as_tensor(a)
    if x.dtype.kind != "c":
        return x
    limit = np.finfo(x.dtype).eps * tol if tol > 1 else tol
    small = Tensor._make(da.all(da.absolute(da.imag(x.array)) < limit))
    return ew.real_part(x) if bool(small.item()) else x


# --------------------------------------------------------------- choosing
@public()
def select(condlist, choicelist, default=0):
    """NumPy's ``select``: each element from the first choice whose condition holds, else ``default``."""
    if len(condlist) != len(choicelist):
        raise ValueError("list of cases must be same length as list of conditions")
    if not condlist:
        raise ValueError("select with an empty condition list is not possible")
    out = tensor_or_scalar(default)
    for cond, choice in reversed(list(zip(condlist, choicelist))):
        out = where(cond, choice, out)
    return out if isinstance(out, Tensor) else as_tensor(out)


@public()
def piecewise(x, condlist, funclist, *args, **kw):
    """NumPy's ``piecewise``: ``funclist[i](x)`` where ``condlist[i]`` holds (the last true one wins),
    an extra last function (or value) elsewhere, 0 where none holds.  Each function is applied to the
    whole tensor and its result chosen by ``where``: it must be finite everywhere (a NaN or infinite
    derivative outside its piece reaches the gradient as ``0 * inf``, as with torch's ``where``)."""
    x = as_tensor(x)
    if isinstance(condlist, (Tensor, np.ndarray)) and raw(condlist).ndim == x.ndim and x.ndim:
        condlist = [condlist]
    condlist = list(condlist) if isinstance(condlist, (list, tuple)) else [condlist]
    n = len(condlist)
    if len(funclist) not in (n, n + 1):
        raise ValueError(f"with {n} condition(s), either {n} or {n + 1} functions are expected")

    def value(f):
        return f(x, *args, **kw) if callable(f) else f

    out = ew.zeros_like(x)
    if len(funclist) == n + 1:
        otherwise = ew.eq(_any_of([as_tensor(c) for c in condlist]), False)
        out = where(otherwise, value(funclist[-1]), out)
    for cond, f in zip(condlist, funclist):
        out = where(cond, value(f), out)
    return out


def _any_of(conds):
    out = conds[0]
    for c in conds[1:]:
        out = out | c
    return out


@public()
def choose(a, choices):
    """NumPy's ``choose``: ``choices[a[i]][i]`` (``a`` an integer tensor or host array; mode='raise')."""
    idx = tensor_or_scalar(a)
    return select([idx == k for k in range(len(choices))], list(choices), default=math.nan)


@public()
def compress(condition, a, axis=None):
    """NumPy's ``compress``: the slices along ``axis`` (of the raveled tensor when None) where the
    1-D ``condition`` is true; a host condition gives known sizes, a tensor one unknown (as dask's)."""
    a, axis = along_axis(a, axis)
    pre = (slice(None),) * axis
    if isinstance(condition, (Tensor, da.Array)):
        return getitem(a, pre + (raw(condition).astype(bool),))
    cond = np.asarray(condition, dtype=bool)
    if cond.ndim != 1:
        raise ValueError("condition must be a 1-d array")
    if len(cond) > a.shape[axis]:
        raise IndexError(f"index {len(cond) - 1} is out of bounds for axis {axis} with size {a.shape[axis]}")
    return getitem(a, pre + (np.flatnonzero(cond),))


@public()
def extract(condition, arr):
    """NumPy's ``extract``: ``ravel(arr)[ravel(condition)]`` (an unknown length for a tensor condition, as dask's)."""
    arr = as_tensor(arr)
    if isinstance(condition, (Tensor, da.Array)):
        return getitem(ravel(arr), reshape(as_tensor(condition), (-1,)) != 0)
    return getitem(ravel(arr), np.flatnonzero(np.ravel(condition)))


# ------------------------------------------------------- elementwise extras
def _nan_ignoring(a, b, cmp):
    """``a`` where ``cmp(a, b)`` or ``b`` is NaN, else ``b``: torch's fmax/fmin (a tie goes to ``a``)."""
    a, b = tensor_or_scalar(a), tensor_or_scalar(b)
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        a = as_tensor(a)
    take_a = cmp(a, b) if isinstance(a, Tensor) else cmp(as_tensor(b) * 0 + a, b)
    take_a = take_a | (isnan(b) if isinstance(b, Tensor) else b != b)
    return guard(where(take_a, a, b), a, b)  # (torch's saves both)


@public("fmax")
@named("FmaxBackward0")
def fmax(a, b):
    """The larger of two values, ignoring a NaN (NaN only where both are); a tie's gradient goes to
    ``a``, as torch's."""
    return _nan_ignoring(a, b, ge)


@public("fmin")
@named("FminBackward0")
def fmin(a, b):
    """The smaller of two values, ignoring a NaN (NaN only where both are); a tie's gradient goes to
    ``a``, as torch's."""
    return _nan_ignoring(a, b, le)


# ------------------------------------------------- NaN-ignoring order statistics
def _nan_at(s, c, p, axis, method):
    """The ``p``-quantile of each slice of sorted ``s`` (NaNs last) holding ``c`` non-NaN values: the
    values at the positions ``method`` reads, by a gather at indices that differ per slice.  An all-NaN slice reads
    its first sorted value (a NaN), as torch's ranks clamped at 0 do: its gradient goes there."""
    pos = ew.clip((c - 1) * float(p), 0, None)
    lo = ew.floor(pos)
    n = s.shape[axis]
    if method == "higher":
        lo = ew.ceil(pos)
    elif method == "nearest":
        lo = ew.round(pos)  # half to even, as torch's
    hi, frac = lo, None
    if method in ("linear", "midpoint"):
        hi = ew.ceil(pos)
        frac = pos - lo if method == "linear" else where(hi > lo, 0.5, 0.0)
    v = take_along_axis(s, astype(ew.clip(lo, 0, n - 1), np.int64), axis)
    if frac is not None:
        v = v + (take_along_axis(s, astype(ew.clip(hi, 0, n - 1), np.int64), axis) - v) * frac
    return v  # (NaN for an all-NaN slice: its first sorted value)


@public("nanquantile")
def nanquantile(x, q, axis=None, keepdims=False, *, method="linear", interpolation=None):
    """``quantile`` of the non-NaN values (NaN for an all-NaN slice), differentiable as torch's
    ``nanquantile``: the gradient goes to the values interpolated."""
    method = quantile_method(method, interpolation)
    x, qs, axis, ndim, reduced = quantile_args(x, q, axis)
    s = sort(x, axis=axis)
    c = sum(where(isnan(s), 0.0, ew.ones_like(s)), axis=axis, keepdims=True)
    out = [squeeze(_nan_at(s, c, p, axis, method), axis) for p in qs]
    return quantile_result(out, q, keepdims, ndim, reduced)


@public()
def nanpercentile(x, q, axis=None, keepdims=False, *, method="linear", interpolation=None):
    """``nanquantile`` at ``q / 100`` (``q`` in [0, 100])."""
    return nanquantile(x, np.asarray(q, dtype=np.float64) / 100, axis=axis, keepdims=keepdims, method=method,
                       interpolation=interpolation)


@public()
def nanmedian(x, axis=None, keepdims=False):
    """The median of the non-NaN values (NumPy's: the mean of the two middle ones for an even count;
    torch's ``nanmedian`` returns the lower one); of integers or bools, float64 (NumPy's)."""
    x = as_tensor(x)
    return nanquantile(astype(x, np.float64) if x.dtype.kind in "biu" else x, 0.5, axis=axis, keepdims=keepdims)


def _ldexp_chunk(a, b):
    """``a * 2**b`` of a chunk (or a dask array), ``b`` in ``a``'s real dtype."""
    return a * np.exp2(b)


# one node, as torch's LdexpBackward0: it saves the exponent for x1's gradient and the result for x2's, never x1
# (a write to x1 after the call leaves the backward as it is; the product x1 * exp2(x2) saved x1 and raised)
ldexp_p = primitive("ldexp", torch="LdexpBackward0", impl=_ldexp_chunk, args=("a", "b"), save=(("b", 0), ("r", 1)),
                    elementwise=True, prepare=binary_operands)


@ldexp_p.vjp
def _ldexp_rule(g, s):
    if s.needs[1] and g.dtype.kind == "c":  # torch's engine refuses LdexpBackward0's complex cotangent of a real x2
        raise RuntimeError("Expected isFloatingType(grad.scalar_type()) || (input_is_complex == grad_is_complex) to "
                           "be true, but got false.  (Could this error message be improved?  If so, please report an "
                           "enhancement request to PyTorch.)")
    return (g * exp2(s.b) if s.needs[0] else None), (g * conj(s.r) * math.log(2.0) if s.needs[1] else None)


@public("ldexp")
def ldexp(x1, x2):
    """``x1 * 2**x2``, differentiable as torch's, in torch's floating result type of the two."""
    x1, x2 = as_tensor(x1), tensor_or_scalar(x2)
    dtype = result_type(x1, x2, floating=True)
    x1 = x1 if x1.dtype == dtype else astype(x1, dtype)
    if not isinstance(x2, Tensor):
        return x1 * 2.0 ** x2
    real = np.finfo(dtype).dtype  # (2 ** x2 in the real dtype of a complex result)
    return ldexp_p.bind(x1, x2 if x2.dtype == real else astype(x2, real))


@public("frexp")
@named("FrexpBackward0")
def frexp(x):
    """``(mantissa, exponent)`` (torch's named result) with ``x = mantissa * 2**exponent``; the mantissa's gradient is
    ``g / 2**exponent``, as torch's, the exponent an integer tensor."""
    x = as_tensor(x)
    e = Tensor._make(da.frexp(x.array)[1])
    return return_types.frexp(x / exp2(astype(e, x.dtype)), e)


@public()
def modf(x):
    """``(fractional part, integral part)``, each with ``x``'s sign; the first passes the gradient,
    the second's is 0."""
    x = as_tensor(x)
    t = trunc(x)
    return x - t, t
