"""Reductions and their VJP rules (contract: see ``elementwise.py``).

The cotangent of a reduction is ``g`` put back on the reduced axes
(:func:`_spread`) and broadcast with the input's own chunks, so gradients keep
the primal's chunking without a rechunk.
"""
from __future__ import annotations

import dask.array as da
from dask.array.utils import meta_from_array

from .. import chunk
from ..graph import RESULT, record
from ._util import as_tensor, norm_axes, norm_axis, numel, raw, reduce_array, refuse_complex
from .elementwise import conj, exp, where, zeros_like
from .shape import expand_dims, flip, squeeze


def _spread(g, x_shape, x_chunks, axes, keepdims, like=None):
    """Undo a reduction's shape: ``g`` broadcast back over the reduced axes, with the input's chunks."""
    if like is not None:  # unknown (NaN) chunk sizes, e.g. after a boolean mask: broadcast elementwise
        return (expand_dims(g, axes) if not keepdims and axes else g) + zeros_like(like)
    if not axes:
        return g
    return spread(g, axes, keepdims, x_shape, x_chunks)


def spread(g, axes, keepdims, shape, chunks):
    """One blockwise task per output chunk (fuses with what follows), unlike dask's broadcast_to."""
    g = as_tensor(g)
    a = da.squeeze(g.array, axis=axes) if keepdims else g.array
    out = da.map_blocks(chunk.spread, a, axes=axes, new_axis=list(axes), chunks=chunks, dtype=a.dtype,
                        meta=meta_from_array(a._meta, ndim=len(shape)))
    return record("ExpandBackward0", out, (g,), lambda gg, s: (sum(gg, axis=axes, keepdims=keepdims),))


def _unknown(shape):
    return any(n != n for n in shape)


def _like(x):
    """The saved input when its size is unknown (NaN, after a boolean mask): cotangents follow its chunks."""
    return x if _unknown(x.shape) else None


def _count(x, axes, keepdims):
    """How many elements each output averages: a Python int when the reduced sizes are known, else
    (after a boolean mask) a lazy constant tensor counted from the chunks themselves, so ``x[x > 0].mean()``
    is not divided by NaN.  Returns ``(count with keepdims=True, count as the output is shaped)``."""
    if not _unknown([x.shape[a] for a in axes]):
        n = numel(x.shape, axes)
        return n, n
    from .elementwise import ones_like

    n = sum(ones_like(x), axis=axes, keepdims=True)
    return n, (n if keepdims or not axes else squeeze(n, axes))


def _keep(r, axes, keepdims):
    return r if keepdims or not axes else expand_dims(r, axes)


def sum(x, axis=None, keepdims=False, dtype=None):
    x = as_tensor(x)
    axes, shape, chunks = norm_axes(axis, x.ndim), x.shape, x.chunks
    unknown = _unknown(shape)
    return record("SumBackward0" if axis is None else "SumBackward1",
                  (reduce_array(x.array, "sum", axes, keepdims) if dtype is None else
                   da.sum(x.array, axis=axis, keepdims=keepdims, dtype=dtype)), (x,),
                  lambda g, s: (_spread(g, shape, chunks, axes, keepdims, s.x if unknown else None),),
                  {"x": x} if unknown else None)


def mean(x, axis=None, keepdims=False):
    x = as_tensor(x)
    axes, shape, chunks = norm_axes(axis, x.ndim), x.shape, x.chunks
    unknown = _unknown(shape)
    n = _count(x, axes, keepdims)[1]
    # sum / n rather than da.mean: dask's mean builds host count arrays, which device chunks refuse
    return record("MeanBackward0" if axis is None else "MeanBackward1",
                  reduce_array(x.array, "sum", axes, keepdims) / raw(n), (x,),
                  lambda g, s: (_spread(g / n, shape, chunks, axes, keepdims, s.x if unknown else None),),
                  {"x": x} if unknown else None)


def sum_to(g, shape):
    """Sum ``g`` down to ``shape`` (the inverse of broadcasting)."""
    lead = g.ndim - len(shape)
    if lead:
        g = sum(g, axis=tuple(range(lead)))
    ones = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    return sum(g, axis=ones, keepdims=True) if ones else g


def _extreme(name_full, name_axis, fn, amax_rule=False):
    def op(x, axis=None, keepdims=False):
        x = as_tensor(x)
        refuse_complex(fn, x)
        axes, shape, chunks = norm_axes(axis, x.ndim), x.shape, x.chunks
        full = axis is None and not amax_rule

        def rule(g, s):
            r = _keep(s.r, axes, keepdims)
            mask = s.x == r
            if full:  # torch's max(): the gradient is shared evenly by the positions holding the result,
                # NaN ones included (a NaN max sends it to the NaNs)
                mask = mask | ((s.x != s.x) & (r != r))
                count = sum(mask, axis=axes, keepdims=True).astype(g.dtype)
                return (where(mask, _spread(g, shape, chunks, axes, keepdims, _like(s.x)) / count, 0),)
            # torch's amax/amin: grad / count * mask, so a slice whose extreme is NaN (no position
            # equals it, count 0) gets NaN, as in torch, rather than a silent zero
            count = sum(mask, axis=axes, keepdims=True).astype(g.dtype)
            return (_spread(g, shape, chunks, axes, keepdims, _like(s.x)) / count * mask.astype(g.dtype),)

        return record(name_full if full else name_axis,
                      reduce_array(x.array, fn, axes, keepdims), (x,), rule, {"x": x, "r": RESULT})
    return op


max = _extreme("MaxBackward1", "AmaxBackward0", "max")
min = _extreme("MinBackward1", "AminBackward0", "min")
amax = _extreme("MaxBackward1", "AmaxBackward0", "max", amax_rule=True)
amin = _extreme("MinBackward1", "AminBackward0", "min", amax_rule=True)


def prod(x, axis=None, keepdims=False, dtype=None):
    x = _cast(as_tensor(x), dtype)
    axes, shape, chunks = norm_axes(axis, x.ndim), x.shape, x.chunks

    # product of the others, exact with zeros: P = prod of non-zeros, Z = count of zeros
    def rule(g, s):
        zero = s.x == 0
        p = prod(where(zero, 1, s.x), axis=axes, keepdims=True)
        z = sum(zero, axis=axes, keepdims=True)
        others = where(zero, where(z == 1, p, 0), where(z == 0, p, 0) / where(zero, 1, s.x))
        return (_spread(g, shape, chunks, axes, keepdims, _like(s.x)) * conj(others),)

    return record("ProdBackward0" if axis is None else "ProdBackward1",
                  reduce_array(x.array, "prod", axes, keepdims), (x,), rule, {"x": x})


def var(x, axis=None, ddof=0, keepdims=False):
    """Variance with NumPy's default ``ddof=0`` (torch's default is 1: pass ``ddof=1``)."""
    x = as_tensor(x)
    refuse_complex("var", x)
    axes, shape, chunks = norm_axes(axis, x.ndim), x.shape, x.chunks
    n, n_out = _count(x, axes, keepdims)

    def rule(g, s):
        centered = s.x - mean(s.x, axis=axes, keepdims=True)
        return (_spread(g, shape, chunks, axes, keepdims, _like(s.x)) * centered * (2 / (n - ddof)),)

    return record("VarBackward0", _var_array(x.array, axes, ddof, keepdims, n, n_out), (x,), rule, {"x": x})


def _var_array(a, axes, ddof, keepdims, n, n_out):
    centered = a - reduce_array(a, "sum", axes, True) / raw(n)
    return reduce_array(centered * centered, "sum", axes, keepdims) / (raw(n_out) - ddof)


def std(x, axis=None, ddof=0, keepdims=False):
    """Standard deviation (``ddof=0`` by default); its gradient is 0 where it is 0, as in torch."""
    x = as_tensor(x)
    refuse_complex("std", x)
    axes, shape, chunks = norm_axes(axis, x.ndim), x.shape, x.chunks
    n, n_out = _count(x, axes, keepdims)

    def rule(g, s):
        r = _keep(s.r, axes, keepdims)
        centered = s.x - mean(s.x, axis=axes, keepdims=True)
        scaled = where(r == 0, 0, _spread(g, shape, chunks, axes, keepdims, _like(s.x)) / (r * (n - ddof)))
        return (scaled * centered,)

    return record("StdBackward0", da.sqrt(_var_array(x.array, axes, ddof, keepdims, n, n_out)), (x,), rule,
                  {"x": x, "r": RESULT})


def logsumexp(x, axis=None, keepdims=False):
    """``log(sum(exp(x)))``, shifted by the max so large values stay finite."""
    x = as_tensor(x)
    refuse_complex("logsumexp", x)
    axes, shape, chunks = norm_axes(axis, x.ndim), x.shape, x.chunks
    a = x.array
    m = reduce_array(a, "max", axes, True)
    m = da.where(da.isfinite(m), m, 0)
    out = da.log(reduce_array(da.exp(a - m), "sum", axes, True)) + m
    if not keepdims:
        out = out.squeeze(axis=axes)
    return record("LogsumexpBackward0", out, (x,),
                  lambda g, s: (_spread(g, shape, chunks, axes, keepdims, _like(s.x))
                                * exp(s.x - _keep(s.r, axes, keepdims)),),
                  {"x": x, "r": RESULT})


def cumsum(x, axis=None, dtype=None):
    x = _cast(as_tensor(x), dtype)
    if axis is None:
        from .shape import reshape

        return cumsum(reshape(x, (-1,)), 0)
    axis = norm_axis(axis, x.ndim)
    if x.ndim == 0:  # torch: the cumulative sum of a 0-d tensor is itself
        from .shape import reshape

        return reshape(cumsum(reshape(x, (1,)), 0), ())
    return record("CumsumBackward0", da.cumsum(x.array, axis=axis), (x,),
                  lambda g, s: (flip(cumsum(flip(g, axis), axis), axis),))


def norm(x, ord=None, axis=None, keepdims=False):
    """Vector ``ord``-norm over ``axis`` (all axes by default; ``ord`` 2 by default, any p > 0 or
    ``inf``); its gradient where the norm is 0 is 0, as torch's subgradient."""
    x = as_tensor(x)
    refuse_complex("linalg_vector_norm", x)
    if ord not in (None, 2, 2.0, "fro"):
        return _p_norm(x, ord, axis, keepdims)
    axes, shape, chunks = norm_axes(axis, x.ndim), x.shape, x.chunks
    out = da.sqrt(reduce_array(x.array * x.array, "sum", axes, keepdims))

    def rule(g, s):
        r = _keep(s.r, axes, keepdims)
        return (s.x * where(r == 0, 0, _spread(g, shape, chunks, axes, keepdims, _like(s.x)) / r),)

    return record("LinalgVectorNormBackward0", out, (x,), rule, {"x": x, "r": RESULT})



def _p_norm(x, p, axis, keepdims):
    from .elementwise import abs, pow, sign

    if p == float("inf"):
        return amax(abs(x), axis=axis, keepdims=keepdims)
    if not isinstance(p, (int, float)) or p <= 0:
        raise NotImplementedError(f"norm: ord={p!r} is not implemented (any p > 0 and inf are)")
    axes, shape, chunks = norm_axes(axis, x.ndim), x.shape, x.chunks
    out = reduce_array(da.absolute(x.array) ** p, "sum", axes, keepdims) ** (1 / p)

    def rule(g, s):  # d||x||_p = sign(x) |x|^(p-1) / ||x||^(p-1), 0 where the norm is 0
        r = _keep(s.r, axes, keepdims)
        scale = where(r == 0, 0, _spread(g, shape, chunks, axes, keepdims, _like(s.x)) / pow(r, p - 1))
        return (sign(s.x) * pow(abs(s.x), p - 1) * scale,)

    return record("LinalgVectorNormBackward0", out, (x,), rule, {"x": x, "r": RESULT})


def _cast(x, dtype):
    from .elementwise import astype

    return x if dtype is None else astype(x, dtype)


def argmax(x, axis=None):
    """Index of the largest value (an integer tensor: never differentiable)."""
    from ..tensor import Tensor

    x = as_tensor(x)
    return Tensor._make(da.argmax(x.array, axis=axis if axis is None else norm_axis(axis, x.ndim)))


def argmin(x, axis=None):
    from ..tensor import Tensor

    x = as_tensor(x)
    return Tensor._make(da.argmin(x.array, axis=axis if axis is None else norm_axis(axis, x.ndim)))
