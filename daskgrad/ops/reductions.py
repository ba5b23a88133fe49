"""Reductions and their VJP rules (contract: see ``elementwise.py``).

Each reduction is a table entry made by :func:`_reduction`, bound by :func:`_reduce`, which own the preamble every
reduction shares (coercion, axes, ``keepdims``, unknown chunk sizes, the torch name by
``axis is None``) and puts the cotangent back on the reduced axes (:func:`_spread`) with the
input's own chunks, so a reduction's rule is only its local derivative, ``local(gx, x, r,
axes=..., ...)``, where ``gx`` is the cotangent already broadcast back to ``x``.
"""
from __future__ import annotations

import builtins
import functools
import math

import dask.array as da
import numpy as np
from dask.array.utils import meta_from_array

from .. import _dask as door, chunk
from .._dask import unknown as _unk
from ..graph import RESULT, primitive
from .._data import DEFAULT_FLOAT
from .._modes import is_grad_enabled
from .._tensor import Tensor
from ._util import (accumulates_in, as_tensor, norm_axes, norm_axis, numel, public, reduce_array, split_every,
                    tensor_operand, value)
from .elementwise import astype, conj, exp, ones_like, where, zeros_like
from .shape import concatenate, expand_dims, flip, reshape, squeeze


def _reduction(name, torch, local, save=(), refuse=None):
    """A reduction's table entry.  ``torch``: the node name over all axes and over some (one name
    for both when they agree); ``save``: what ``local`` reads, ``"x"``, ``"r"`` (the result) and
    ``"n"``, the number of elements each output reduces (a lazy tensor after a boolean mask);
    ``refuse``: the op's name in torch's error for complex inputs, ``None`` when they are
    differentiable."""
    p = primitive(name, torch, save=save, prepare=functools.partial(tensor_operand, refuse=refuse))
    p.vjp(functools.partial(_reduction_rule, local=local, save=p.save))
    return p


def _reduce(prim, x, axis, keepdims, forward, fwd=(), **params):
    """Bind ``x`` reduced over ``axis``: the preamble every reduction shares (axes, ``keepdims``,
    unknown chunk sizes, the torch name by ``axis is None``) and so its own path rather than
    ``impl``.  ``forward(a, n, n_out, *, axes, keepdims, **dict(fwd))`` makes the result array
    (``n``, ``n_out``: the element counts with and without ``keepdims``, when ``"n"`` is saved; a
    module-level function, so that a loop's programs are equal)."""
    (x,) = prim.prepare(x)
    axes, unknown = norm_axes(axis, x.ndim), _unknown(x.shape)
    n = n_out = None
    if "n" in prim.save:
        n, n_out = _count(x, axes, keepdims)
    save = {"x": x} if unknown or "x" in prim.save else {}
    if "r" in prim.save:
        save["r"] = RESULT
    if isinstance(n, Tensor):  # counted from the chunks: a lazy constant, saved like any tensor
        save["n"] = n
    elif "n" in prim.save:
        params["n"] = n
    if x.dtype == np.float16 and prim in _ACCUMULATING and dict(fwd).get("dtype") is None:  # (not sum(dtype=))
        forward, fwd = _in_float32, (("inner", forward),) + tuple(fwd)
    out = door.defer(forward, (value(x), value(n), value(n_out)),
                     (("axes", axes), ("keepdims", keepdims)) + tuple(fwd))
    return prim.record(out, x, save=save, node=prim.torch[0] if axis is None else prim.torch[-1], axes=axes,
                       keepdims=keepdims, shape=x.shape, chunks=x.chunks, unknown=unknown, **params)


def _in_float32(a, n, n_out, *, inner, **params):
    """torch's reductions of float16 accumulate in float32 and round once at the end (a sum of 3,000 ones is
    3,000, not float16's 2,048; partial sums of chunks do not overflow)."""
    return inner(a.astype(np.float32), n, n_out, **params).astype(np.float16)


def _reduce_fwd(a, n, n_out, *, axes, keepdims, fn):
    if fn in ("max", "min") and not a.size:  # an empty result (the empty reduced dims raised): dask's tree would
        return reduce_array(a, "sum", axes, keepdims).astype(a.dtype)  # reduce an empty block
    return reduce_array(a, fn, axes, keepdims)


def _reduction_rule(g, s, *, local, save, axes, keepdims, shape, chunks, unknown, **params):
    """Put the cotangent back on the reduced axes with the input's own chunks, so a reduction's
    ``local(gx, x, r, axes=..., ...)`` is only its local derivative."""
    x = s.x if unknown or "x" in save else None
    gx = _spread(g, shape, chunks, axes, keepdims, x if unknown else None)
    r = _keep(s.r, axes, keepdims) if "r" in save else None
    if "n" in save and "n" not in params:
        params["n"] = s.n
    return (local(gx, x, r, axes=axes, **params),)


def _spread(g, x_shape, x_chunks, axes, keepdims, like=None):
    """Undo a reduction's shape: ``g`` broadcast back over the reduced axes, with the input's chunks."""
    if like is not None:  # unknown (NaN) chunk sizes, e.g. after a boolean mask: broadcast elementwise
        return (expand_dims(g, axes) if not keepdims and axes else g) + zeros_like(like)
    if not axes:
        return g
    return spread(g, axes, keepdims, x_shape, x_chunks)


spread_p = primitive("spread", torch="ExpandBackward0")
spread_p.vjp(lambda g, s, *, axes, keepdims: (sum(g, axis=axes, keepdims=keepdims),))


def spread(g, axes, keepdims, shape, chunks):
    """One blockwise task per output chunk (fuses with what follows), unlike dask's broadcast_to."""
    g = as_tensor(g)
    out = door.defer(_spread_array, (value(g),), (("axes", axes), ("keepdims", keepdims), ("chunks", chunks)))
    return spread_p.record(out, g, axes=axes, keepdims=keepdims)


def _spread_array(a, *, axes, keepdims, chunks):
    a = da.squeeze(a, axis=axes) if keepdims else a
    return da.map_blocks(chunk.spread, a, axes=axes, new_axis=list(axes), chunks=chunks, dtype=a.dtype,
                         meta=meta_from_array(a._meta, ndim=len(chunks)))


def _unknown(shape):
    return any(n != n for n in shape)


def _count(x, axes, keepdims):
    """How many elements each output averages: a Python int when the reduced sizes are known, else
    (after a boolean mask) a lazy constant tensor counted from the chunks themselves, so ``x[x > 0].mean()``
    is not divided by NaN.  Returns ``(count with keepdims=True, count as the output is shaped)``."""
    if not _unknown([x.shape[a] for a in axes]):
        n = numel(x.shape, axes)
        return n, n
    n = sum(ones_like(x), axis=axes, keepdims=True)
    return n, (n if keepdims or not axes else squeeze(n, axes))


def length(x, axes, keepdims=False):
    """The product of ``x``'s lengths along ``axes``, as a divisor: an int, or where one is not known (rows after a
    boolean mask: NaN) a lazy count shaped as a reduction over ``axes`` gives (dividing by NaN was silently NaN)."""
    return _count(x, norm_axes(axes, x.ndim), keepdims)[1]


def _keep(r, axes, keepdims):
    return r if keepdims or not axes else expand_dims(r, axes)


# ------------------------------------------------------------------ the table
sum_p = _reduction("sum", ("SumBackward0", "SumBackward1"), lambda gx, x, r, axes: gx)
mean_p = _reduction("mean", ("MeanBackward0", "MeanBackward1"), lambda gx, x, r, axes, n: gx / n, save=("n",))


def _max_local(gx, x, r, axes):
    # torch's max(): the gradient is shared evenly by the positions holding the result, NaN ones
    # included (a NaN max sends it to the NaNs)
    mask = (x == r) | ((x != x) & (r != r))
    return where(mask, gx / sum(mask, axis=axes, keepdims=True).astype(gx.dtype), 0)


def _amax_local(gx, x, r, axes):
    # torch's amax/amin: grad / count * mask, so a slice whose extreme is NaN (no position equals
    # it, count 0) gets NaN, as in torch, rather than a silent zero
    mask = x == r
    return gx / sum(mask, axis=axes, keepdims=True).astype(gx.dtype) * mask.astype(gx.dtype)


# max/min over all axes share the result evenly (MaxBackward1); over some axes, as amax/amin
max_all_p = _reduction("max", "MaxBackward1", _max_local, save=("x", "r"), refuse="max")
min_all_p = _reduction("min", "MinBackward1", _max_local, save=("x", "r"), refuse="min")
amax_p = _reduction("amax", "AmaxBackward0", _amax_local, save=("x", "r"), refuse="max")
amin_p = _reduction("amin", "AminBackward0", _amax_local, save=("x", "r"), refuse="min")


def _prod_local(gx, x, r, axes, whole=True):
    """torch's ``prod_backward``: its formula chosen by whether the whole input holds a zero (a lazy choice
    here, both computed): without one ``g * result / x`` (NaN at an infinite or NaN ``x``), with one (in any
    slice) the product of the others as the exclusive products from both ends (:func:`_prod_safe_zeros`; over a
    dim of length one the cotangent itself).  Over several axes (NumPy's, torch has none) or unknown chunk
    sizes, :func:`_prod_others`."""
    if x.ndim == 0:
        return gx
    if len(axes) != 1 and not whole or _unknown(x.shape):
        return _prod_others(gx, x, r, axes, whole)
    zeros = sum(x == 0)  # (in the whole input, for a dim too: torch's total_zeros)
    # each formula reads x only where it is chosen, 1 elsewhere: a double backward sends the zero cotangent of the
    # branch not taken through it, whose 0 * inf (r / x at a zero, cumprod's rule at an inf) would be NaN
    some = zeros > 0
    xs = where(some, x, 1)
    if whole:  # (torch's flattens the input: one dim)
        safe = reshape(_prod_safe_zeros(reshape(gx, (-1,)), reshape(xs, (-1,)), 0), x.shape)
        if not is_grad_enabled():  # torch's shortcut: two zeros or more, zeros (an inf cotangent too)
            safe = where(zeros >= 2, 0, safe)
    else:
        safe = _prod_safe_zeros(gx, xs, axes[0])
    return where(some, safe, gx * conj(r / where(some, 1, x)))


def _prod_safe_zeros(g, x, axis):
    """torch's ``prod_safe_zeros_backward``: ``g`` times the product of the others along ``axis``, the
    exclusive cumulative product from the front times that from the back (exact with zeros)."""
    n = x.shape[axis]
    if x.size == 0 or n == 1:
        return g
    head = tuple(slice(None) for _ in range(axis))
    ones = ones_like(x[head + (slice(0, 1),)])
    front = concatenate([ones, x[head + (slice(0, n - 1),)]], axis=axis).cumprod(axis)  # (the method: torch's node)
    back = flip(concatenate([ones, flip(x[head + (slice(1, n),)], axis)], axis=axis).cumprod(axis), axis)
    return g * conj(front * back)


def _prod_others(gx, x, r, axes, whole=True):
    """The product of the others, exact with zeros and differentiable again: P the product
    of the non-zeros, Z the count of zeros, S their sum (value 0, slope 1), so each entry keeps the
    zero factors it is a function of (with one zero the others' entries are S P / x, with two each
    zero's is (S - x) P).  Over a dim of length one the cotangent itself."""
    if not whole and builtins.all(x.shape[a] == 1 for a in axes):
        return gx
    zero = x == 0
    safe = where(zero, 1, x)
    p = prod(safe, axis=axes, keepdims=True)
    z = sum(zero, axis=axes, keepdims=True)
    s = sum(where(zero, x, 0), axis=axes, keepdims=True)
    at_zero = where(z == 1, p, where(z == 2, (s - x) * p, 0))
    elsewhere = where(z == 0, p, where(z == 1, s * p, 0)) / safe
    out = gx * conj(where(zero, at_zero, elsewhere))
    if whole and not is_grad_enabled():  # torch's shortcut: two zeros or more, zeros (an inf cotangent too)
        out = where(z >= 2, 0, out)
    return out


def _centered(x, axes):
    return x - mean(x, axis=axes, keepdims=True)


prod_p = _reduction("prod", ("ProdBackward0", "ProdBackward1"), _prod_local, save=("x", "r"))  # (r: as torch saves it)
# complex var/std are real, their gradients torch's (x - mean) times the real factor
var_p = _reduction("var", "VarBackward0",
                   lambda gx, x, r, axes, n, ddof, whole=True: _var_rule(gx, x, axes, n, ddof, whole),
                   save=("x", "n"))


def _var_rule(gx, x, axes, n, ddof, whole):
    centered = _centered(x, axes)
    if isinstance(n, Tensor):  # (a count of unknown chunks: no branch on it)
        return gx * centered * (2 / (n - ddof))
    dof = n - ddof
    # torch's branch without dim (or of a 0-d input) at ddof >= n: inf, nan where x is its mean; with a dim,
    # even one naming every dim, its formula below (2 / dof: a negative dof flips the sign)
    if dof <= 0 and whole:  # (x == its mean, not x - mean == 0: an infinite x is NaN there, a NaN x inf, as torch's)
        return gx * where(x == mean(x, axis=axes, keepdims=True), math.nan, math.inf)
    return gx * centered * (2 / dof if dof else math.inf)  # (along some axes torch's formula: 2 / 0 is inf)



# the gradient of std is 0 where it is 0, as in torch; the division there is by 1, so that zero's own
# derivatives are 0 (the rule is 0 for every cotangent), not a 0 / 0 (torch's NaN: see pow's rule)
std_p = _reduction("std", "StdBackward0",
                   lambda gx, x, r, axes, n, ddof, whole=True: gx * math.nan * x  # (torch's without dim at ddof >= n)
                   if not isinstance(n, Tensor) and n <= ddof and whole else
                   where(r == 0, 0, gx / where(r == 0, 1, r * (n - ddof))) * _centered(x, axes),
                   save=("x", "r", "n"))
logsumexp_p = _reduction("logsumexp", "LogsumexpBackward0", lambda gx, x, r, axes: gx * exp(x - r),
                         save=("x", "r"), refuse="logsumexp")


_ACCUMULATING = frozenset({sum_p, mean_p, var_p, std_p, logsumexp_p})  # (not prod: torch's overflows in half)


# ------------------------------------------------------------------ the ops
@public()
def sum(x, axis=None, keepdims=False, dtype=None):
    """The sum over ``axis``, all elements when None (NumPy's ``sum``, optionally in ``dtype``; torch's
    ``dim=``/``keepdim=`` are accepted too); of unsigned integers, NumPy's uint64 (``Tensor.sum``: torch's int64)."""
    if dtype is None:
        return _reduce(sum_p, x, axis, keepdims, _reduce_fwd, (("fn", "sum"),))
    return _reduce(sum_p, x, axis, keepdims, _sum_fwd, (("dtype", dtype),))


def _sum_fwd(a, n, n_out, *, axes, keepdims, dtype):
    return da.sum(a, axis=axes, keepdims=keepdims, dtype=dtype, split_every=split_every(a, axes))


@public()
def mean(x, axis=None, keepdims=False):
    """The arithmetic mean over ``axis``, all elements when None (NumPy's and torch's ``mean``)."""
    # sum / n rather than da.mean: dask's mean builds host count arrays, which device chunks refuse
    return _reduce(mean_p, x, axis, keepdims, _mean_fwd)


def _mean_fwd(a, n, n_out, *, axes, keepdims):
    return reduce_array(a, "sum", axes, keepdims) / n_out


def sum_to(g, shape):
    """Sum ``g`` down to ``shape`` (the inverse of broadcasting)."""
    lead = g.ndim - len(shape)
    if lead:
        g = sum(g, axis=tuple(range(lead)))
    ones = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    return sum(g, axis=ones, keepdims=True) if ones else g


_COMPLEX_NAMES = {"complex64": "ComplexFloat", "complex128": "ComplexDouble"}


def _refuse_complex_extreme(x, fn, amax_like, axis):
    """torch (CPU) has no order on complex numbers: max/min/amax/amin refuse them, under autograd
    or not, with the words of its kernels."""
    if x.dtype.kind != "c":
        return
    name = _COMPLEX_NAMES.get(str(x.dtype), str(x.dtype))
    if not amax_like and axis is not None:
        raise RuntimeError(f"{fn}(): does not support complex input")
    kernel = f"{fn}_values_cpu" if amax_like else f"{fn}_all"
    raise NotImplementedError(f'"{kernel}" not implemented for \'{name}\'')


def _refuse_empty(x, name, axis, known_dim=False):
    """torch's errors for an extreme (max, argmax, ...) with no identity over no elements: of all of an empty
    tensor, or over an empty dim (named as given; as normalized, ``known_dim``: argmax's words)."""
    if axis is None:
        if x.ndim and not numel(x.shape, range(x.ndim)):
            error = IndexError if known_dim else RuntimeError
            raise error(f"{name}(): Expected reduction dim to be specified for input.numel() == 0."
                        + ("" if known_dim else " Specify the reduction dim with the 'dim' argument."))
        return
    for d in (axis if isinstance(axis, (tuple, list)) else (axis,)):
        if x.ndim and x.shape[norm_axis(d, x.ndim)] == 0:
            raise IndexError(f"{name}(): Expected reduction dim {norm_axis(d, x.ndim) if known_dim else d} to have "
                             "non-zero size.")


def _extreme(all_p, axis_p, fn):
    def op(x, axis=None, keepdims=False):
        x = as_tensor(x)
        _refuse_complex_extreme(x, fn, all_p is axis_p, axis)
        _refuse_empty(x, op.__name__, axis)
        return _reduce(all_p if axis is None else axis_p, x, axis, keepdims, _reduce_fwd, (("fn", fn),))
    op.__name__ = op.__qualname__ = fn if all_p is not axis_p else axis_p.name
    word = "largest" if fn == "max" else "smallest"
    op.__doc__ = (f"The {word} value over ``axis``, all elements when None (NumPy's ``{op.__name__}``); tied "
                  "extremes share the gradient evenly.")
    if all_p is not axis_p:
        op.__doc__ += f"  Unlike torch's ``{fn}(dim)``, the values only (no indices)."
    return op


max = public()(_extreme(max_all_p, amax_p, "max"))
min = public()(_extreme(min_all_p, amin_p, "min"))
amax = public()(_extreme(amax_p, amax_p, "max"))
amin = public()(_extreme(amin_p, amin_p, "min"))


@public("prod")
def prod(x, axis=None, keepdims=False, dtype=None):
    """The product over ``axis``, all elements when None (NumPy's ``prod``, optionally in ``dtype``; torch's
    ``prod`` takes one ``dim``)."""
    x = as_tensor(x)
    x = x if (dtype := accumulates_in(x, dtype)) is None else astype(x, dtype)
    return _in(dtype, _reduce(prod_p, x, axis, keepdims, _reduce_fwd, (("fn", "prod"),), whole=axis is None))


def _in(dtype, out):
    """``out`` in the ``dtype`` asked for: NumPy's sums and products of small integers and bools are int64,
    torch's are the dtype given (its wrap-around: the int64 result cast, for + and * commute with it)."""
    return out if dtype is None or out.dtype == dtype else astype(out, dtype)


def _ddof(ddof, correction, unbiased):
    """NumPy's ``ddof`` from torch's spellings: ``correction=`` is ddof, ``unbiased=`` 1 or 0."""
    given = [k for k, v in (("correction", correction), ("unbiased", unbiased)) if v is not None]
    if len(given) > 1 or (given and ddof != 0):
        raise TypeError(f"got {' and '.join((['ddof'] if ddof != 0 else []) + given)}: give one of ddof, "
                        "correction and unbiased")
    if correction is not None:
        return correction
    if unbiased is not None:
        return int(bool(unbiased))
    return ddof


@public()
def var(x, axis=None, ddof=0, keepdims=False, *, correction=None, unbiased=None):
    """Variance with NumPy's default ``ddof=0``; torch's ``correction=`` (ddof) and ``unbiased=`` (ddof 1
    or 0) are taken too (the method ``x.var()`` is torch's, ``correction=1`` by default)."""
    ddof = _ddof(ddof, correction, unbiased)
    return _reduce(var_p, x, axis, keepdims, _var_array, (("ddof", ddof),), ddof=ddof,
                   whole=axis is None or not np.ndim(x))


def _var_array(a, n, n_out, *, axes, keepdims, ddof):
    centered = a - reduce_array(a, "sum", axes, True) / n
    sq = centered * centered if a.dtype.kind != "c" else da.real(centered * da.conj(centered))
    dof = n_out - ddof
    dof = (dof if dof > 0 else 0) if isinstance(dof, (int, float, np.number)) else da.maximum(dof, 0)  # (NumPy's)
    return reduce_array(sq, "sum", axes, keepdims) / dof


@public()
def std(x, axis=None, ddof=0, keepdims=False, *, correction=None, unbiased=None):
    """Standard deviation with NumPy's default ``ddof=0`` (torch's ``correction=``/``unbiased=`` taken, as
    by :func:`var`); its gradient is 0 where it is 0, as in torch."""
    ddof = _ddof(ddof, correction, unbiased)
    return _reduce(std_p, x, axis, keepdims, _std_array, (("ddof", ddof),), ddof=ddof,
                   whole=axis is None or not np.ndim(x))


def _std_array(a, n, n_out, *, axes, keepdims, ddof):
    return da.sqrt(_var_array(a, n, n_out, axes=axes, keepdims=keepdims, ddof=ddof))


def _logsumexp_array(a, n, n_out, *, axes, keepdims):
    if not a.size:  # log(0): -inf, as torch's, or an empty result (no max to shift by)
        return reduce_array(a, "sum", axes, keepdims) - np.inf
    # (of complex, the max of the real parts, as torch's: the phase is the sum's, in (-pi, pi])
    m = reduce_array(da.real(a) if a.dtype.kind == "c" else a, "max", axes, True)
    m = da.where(da.isfinite(m), m, 0)
    out = da.log(reduce_array(da.exp(a - m), "sum", axes, True)) + m
    return out if keepdims else out.squeeze(axis=axes)


@public("logsumexp")
def logsumexp(x, axis=None, keepdims=False):
    """``log(sum(exp(x)))``, shifted by the max so large values stay finite; of integers, in the default
    float (torch's)."""
    x = as_tensor(x)
    if x.dtype.kind in "biu":
        x = astype(x, DEFAULT_FLOAT)
    return _reduce(logsumexp_p, x, axis, keepdims, _logsumexp_array)


# torch's CPU running sums and products (Tensor.cumsum/cumprod) accumulate in its acc_type, the value rounded to the
# input's dtype at each step: float32 in double, half in float, complex64 in complex128 (NumPy's, in the dtype)
_TORCH_ACC = {np.dtype(np.float32): np.dtype(np.float64), np.dtype(np.float16): np.dtype(np.float32),
              np.dtype(np.complex64): np.dtype(np.complex128)}


def running(fn, a, axis, wide):
    """``fn`` (dask's cumsum or cumprod) of ``a`` along ``axis``; ``wide``: in torch's accumulating dtype (the carry
    between chunks too), rounded back to ``a``'s.  Along rows not known until computed (after a boolean mask),
    a scan that carries its running value past blocks holding none (dask's fails on such a block)."""
    acc = _TORCH_ACC.get(a.dtype) if wide else None
    b = a if acc is None else a.astype(acc)
    if _unk.unknown(b, axis):
        out = _unk.cumreduction(*_UNKNOWN_SCANS[fn], b, axis)
    else:
        out = fn(b, axis=axis)
    return out if acc is None else out.astype(a.dtype)


_UNKNOWN_SCANS = {da.cumsum: (np.cumsum, np.add, 0), da.cumprod: (np.cumprod, np.multiply, 1)}


def _cumsum_array(a, *, axis, wide=False):
    out = running(da.cumsum, a, axis, wide)
    return out + 0 if a.dtype.kind == "f" else out  # torch's running sum starts at +0.0: a leading -0.0 gives 0.0


cumsum_p = primitive("cumsum", torch="CumsumBackward0", impl=_cumsum_array)
cumsum_p.vjp(lambda g, s, *, axis, wide=False: (flip(running_sum(flip(g, axis), axis, None, wide), axis),))


def _cumsum_method(cumsum):
    def method(self, dim=None, *, dtype=None, axis=None):
        """torch's ``cumsum(dim, dtype=None)``: ``dim`` is required (``daskgrad.cumsum`` flattens without it, as
        NumPy's); float32 and half accumulate in double and float, as torch's CPU kernel (and its gradient)."""
        if dim is None and axis is None:
            raise TypeError('cumsum() missing 1 required positional arguments: "dim"')
        return running_sum(self, dim if axis is None else axis, dtype, True)
    return method


def running_sum(x, axis, dtype, wide):
    """``cumsum``; ``wide``: accumulated as torch's (:func:`running`)."""
    x = as_tensor(x)
    x = x if (dtype := accumulates_in(x, dtype) if wide else dtype) is None else astype(x, dtype)  # (NumPy's uint64)
    if axis is None:
        return running_sum(reshape(x, (-1,)), 0, None, wide)
    axis = norm_axis(axis, x.ndim)
    if x.ndim == 0:  # torch: the cumulative sum of a 0-d tensor is itself
        return reshape(running_sum(reshape(x, (1,)), 0, dtype, wide), ())
    return _in(dtype, cumsum_p.bind(x, axis=axis, **({"wide": True} if wide else {})))


@public(("cumsum", _cumsum_method))
def cumsum(x, axis=None, dtype=None):
    """The cumulative sum along ``axis`` (NumPy's ``cumsum``: of the flattened tensor when ``axis`` is
    None, where torch requires ``dim``)."""
    return running_sum(x, axis, dtype, False)


def _arg_extreme(x, axis, keepdims, fn):
    x = as_tensor(x)
    _refuse_empty(x, fn, axis, known_dim=True)
    if x.ndim == 0:  # torch: the index of a 0-d tensor's one element, along dim 0 or -1 or none
        if axis is not None:
            norm_axis(axis, 0)
        return zeros_like(x, dtype=np.int64)
    if axis is not None:
        axis = norm_axis(axis, x.ndim)
    params = (("fn", fn), ("axis", axis), ("keepdims", keepdims))
    return Tensor._make(door.defer(_arg_extreme_array, (value(x),), params))


def _arg_extreme_array(a, *, fn, axis, keepdims):
    if axis is None:  # (flattened first where later axes are split: dask breaks ties in chunk order, torch and
        flat = a.reshape(-1) if any(len(c) > 1 for c in a.chunks[1:]) else a  # NumPy at the first in row order)
        out = getattr(da, fn)(flat)
        return out.reshape((1,) * a.ndim) if keepdims else out
    if _unk.unknown(a, axis):  # (rows after a boolean mask: dask's needs each block's offset on the client)
        return _unk.arg_reduction(a, fn, axis, keepdims)
    return getattr(da, fn)(a, axis=axis, keepdims=keepdims)


@public("argmax")
def argmax(x, axis=None, keepdims=False):
    """Index of the largest value (an integer tensor: never differentiable); of the flattened tensor
    when ``axis`` is None (``keepdims``: then shaped all ones, as NumPy's and torch's)."""
    return _arg_extreme(x, axis, keepdims, "argmax")


@public("argmin")
def argmin(x, axis=None, keepdims=False):
    """Index of the smallest value (an integer tensor: never differentiable); of the flattened tensor
    when ``axis`` is None."""
    return _arg_extreme(x, axis, keepdims, "argmin")
