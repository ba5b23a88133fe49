"""Ops behind ``daskgrad.nn`` layers (contract: see ``elementwise.py``).

``erf`` (for exact GELU), ``embedding`` (a row gather whose VJP is a scatter-add,
and back) and ``dropout_mask``.  LayerNorm and GELU themselves are compositions
of existing ops, so their gradients (and second derivatives) come for free.

erf: NumPy has none and SciPy is not a core dependency.  Chunks of NumPy or cupy
use ``scipy.special.erf`` / ``cupyx.scipy.special.erf`` when importable; any other
chunk (or no SciPy) gets :func:`_erf_ufuncs`, built only from ufuncs that every
duck array has, accurate to a few ulp (checked against ``math.erf`` in the tests).
"""
from __future__ import annotations

import math

import dask.array as da
import numpy as np

from .. import _dask as door, _data, _tensor, chunk
from ..graph import primitive
from .._tensor import Tensor
from ._util import as_tensor, check_same_device, public, tensor_operand, value
from .elementwise import exp, float_result, sigmoid, tanh

_TWO_OVER_SQRT_PI = 2 / math.sqrt(math.pi)


def _erf_ufuncs(x):
    """erf from ufuncs alone: the all-positive series ``erf x = 2/sqrt(pi) e^{-x^2} sum 2^n x^{2n+1}
    / (2n+1)!!`` (no cancellation) for |x| < 3, the continued fraction of erfc beyond, 1 past 6."""
    a = np.abs(x)
    small = np.minimum(a, 3.0)
    term, total = small, small
    for n in range(1, 60):  # ratio 2x^2/(2n+1) < 1 once n > 9; 60 terms reach double precision at x = 3
        term = term * (2 * small * small) / (2 * n + 1)
        total = total + term
    series = _TWO_OVER_SQRT_PI * np.exp(-small * small) * total
    big = np.maximum(a, 3.0)
    frac = big
    for k in range(60, 0, -1):  # erfc x = e^{-x^2}/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + ...))))
        frac = big + (k / 2) / frac
    tail = 1 - np.exp(-big * big) / (math.sqrt(math.pi) * frac)
    out = np.where(a < 3.0, series, np.where(a < 6.0, tail, np.where(a == a, 1.0, a)))  # (NaN stays NaN)
    return np.where(x < 0, -out, out).astype(x.dtype, copy=False)


def special_layer(name, fallback, args=(), own=False):
    """The layer of SciPy's special function ``name`` on each chunk: SciPy's kernel on NumPy chunks,
    cupyx's on cupy ones, ``fallback`` (ufuncs alone) where neither is installed or for another chunk
    type; integer and half blocks computed in ``float_result``'s dtype (the kernels compute half in a
    wider type).  ``args``: leading arguments of the kernel (``polygamma(n, x)``), trailing ones of
    ``fallback``; ``own``: ``fallback`` always (torch's own formula).  ``erf`` here, ``erfc``, ``erfinv`` and
    the gamma family in :mod:`.methods`."""
    def kernel(x):
        if own:
            return fallback(x, *args)
        mod = type(x).__module__.split(".")[0]
        try:
            if mod == "cupy":
                import cupyx.scipy.special as special
                return getattr(special, name)(*args, x)
            if type(x) is np.ndarray:
                import scipy.special as special
                return getattr(special, name)(*args, x)
        except ImportError:
            pass
        return fallback(x, *args)

    def block(x):  # (in x's dtype: SciPy's polygamma(n, float32) is float64)
        return kernel(x).astype(x.dtype, copy=False)

    def block_as(x, dtype):
        return block(x.astype(dtype))

    def layer(a):
        dtype = float_result(a.dtype)
        if dtype == a.dtype and dtype != np.float16:
            return da.map_blocks(block, a, dtype=dtype, meta=a._meta)
        return da.map_blocks(block_as, a, dtype, dtype=dtype, meta=a._meta.astype(dtype))

    block.__name__, block_as.__name__, layer.__name__ = name, f"{name}_as", f"{name}_layer"
    return layer


erf_p = primitive("erf", torch="ErfBackward0", impl=special_layer("erf", _erf_ufuncs), save=("x",),
                 prepare=tensor_operand)
erf_p.vjp(lambda g, s: (g * (_TWO_OVER_SQRT_PI * exp(-(s.x * s.x))),))


@public("erf")
def erf(x):
    """Elementwise error function; gradient ``2/sqrt(pi) exp(-x^2)``, node ``ErfBackward0``."""
    return erf_p.bind(x)


# ------------------------------------------------------------------ silu, gelu: one node each, torch's backward
# Their forwards are the compositions ``nn.functional`` used (the same numbers); their rules are torch's
# backward kernels' formulas (``silu_backward``, ``GeluBackward``), whose one product with the cotangent
# gives an infinite cotangent an infinite gradient where the composition's sum of two products (inf - inf)
# gave NaN.  Written in daskgrad ops, so ``create_graph=True`` differentiates them again.
_SQRT1_2 = 1 / math.sqrt(2)
_GELU_ALPHA = _TWO_OVER_SQRT_PI * _SQRT1_2 * 0.5  # torch's kAlpha, 1 / sqrt(2 pi)
_GELU_BETA = math.sqrt(2) * _TWO_OVER_SQRT_PI * 0.5  # torch's kBeta, sqrt(2 / pi)
_GELU_KAPPA = 0.044715
_erf_layer = special_layer("erf", _erf_ufuncs)


def _silu_impl(a):
    return a * da.map_blocks(chunk.sigmoid, a, dtype=a.dtype, meta=a._meta)


def _gelu_impl(a):
    return a * 0.5 * (1 + _erf_layer(a * _SQRT1_2))


def _gelu_tanh_impl(a):
    inner = math.sqrt(2 / math.pi) * (a + 0.044715 * a * a * a)
    return 0.5 * a * (1 + da.tanh(inner))


silu_p = primitive("silu", torch="SiluBackward0", impl=_silu_impl, save=("x",), prepare=tensor_operand)
gelu_p = primitive("gelu", torch="GeluBackward0", impl=_gelu_impl, save=("x",), prepare=tensor_operand)
gelu_tanh_p = primitive("gelu_tanh", torch="GeluBackward0", impl=_gelu_tanh_impl, save=("x",),
                        prepare=tensor_operand)


@silu_p.vjp
def _silu_rule(g, s):
    sig = sigmoid(s.x)
    return (g * (sig * (1 + s.x * (1 - sig))),)


@gelu_p.vjp
def _gelu_rule(g, s):
    x = s.x
    cdf = 0.5 * (1 + erf(x * _SQRT1_2))
    pdf = _GELU_ALPHA * exp(-0.5 * x * x)
    return (g * (cdf + x * pdf),)


@gelu_tanh_p.vjp
def _gelu_tanh_rule(g, s):
    x = s.x
    x_sq = x * x
    tanh_inner = tanh(_GELU_BETA * (x + _GELU_KAPPA * (x_sq * x)))
    left, right = 0.5 * x, 1 + tanh_inner
    inner_derivative = _GELU_BETA * (1 + (3 * _GELU_KAPPA) * x_sq)
    return (g * (0.5 * right + left * (1 - tanh_inner * tanh_inner) * inner_derivative),)


# ------------------------------------------------------------------ embedding
def _check_rows(idx, rows):
    """torch's IndexError for a row outside ``[0, rows)``; -1 too, which NumPy would wrap to the last row.
    Indices are lazy, so this runs in the tasks that read them (gather and scatter alike: a backward
    needs no forward rows), and the error reaches the user from the submission, before any value or
    ``.grad`` comes back; host indices are checked on the client as well, as torch does."""
    if ((idx < 0) | (idx >= rows)).any():
        raise IndexError("index out of range in self")


def _gather_block(idx, weight):
    _check_rows(idx, weight.shape[0])
    return weight[idx]


def _scatter_block(idx, g, rows):
    _check_rows(idx, rows)
    out = np.zeros_like(g, shape=(rows, g.shape[-1]))
    np.add.at(out, idx.reshape(-1), g.reshape(-1, g.shape[-1]))
    return out[None]


def _check_indices(idx):
    if idx.dtype.kind not in "iu":
        kind = _data.TORCH_TYPE_NAMES.get(idx.dtype.name, idx.dtype.name)
        raise RuntimeError("Expected tensor for argument #1 'indices' to have one of the following scalar types: "
                           f"Long, Int; but got torch.{kind}Tensor instead (while checking arguments for embedding)")


@public()
def embedding(indices, weight):
    """``weight[indices]``: rows of a one-chunk ``weight`` (V, D) picked chunk by chunk of ``indices``."""
    host = indices if isinstance(indices, (np.ndarray, list)) else None
    indices, weight = as_tensor(indices), as_tensor(weight)
    _check_indices(indices)
    if host is not None:
        _check_rows(np.asarray(host), weight.shape[0])
    check_same_device(indices, weight)
    # detached: the indices take no gradient (their slot has no edge) even if cast from a float that does
    return embedding_p.bind(indices.detach(), weight, rows=weight.shape[0])


def _embedding_array(idx, weight, *, rows):
    w = weight.rechunk((weight.shape[0], weight.shape[1]))
    ind = "abcdefgh"[:idx.ndim]
    return da.blockwise(_gather_block, ind + "z", idx, ind, w, "yz", concatenate=True, dtype=w.dtype, meta=w._meta)


def _embedding_backward_array(grad, idx, *, rows):
    g = grad.reshape(-1, grad.shape[-1])
    i = idx.reshape(-1).rechunk((g.chunks[0],))
    g = g.rechunk((g.chunks[0], g.shape[1]))
    parts = da.blockwise(_scatter_block, "kvd", i, "k", g, "kd", rows=rows, new_axes={"v": rows},
                         adjust_chunks={"k": 1}, dtype=g.dtype, meta=g._meta[None])
    return parts.sum(axis=0)


embedding_p = primitive("embedding", torch="EmbeddingBackward0", impl=_embedding_array, args=("idx", "weight"),
                        save=("idx",))
embedding_p.vjp(lambda g, s, *, rows: (None, embedding_backward(g, s.idx, rows)))
embedding_backward_p = primitive("embedding_backward", torch="EmbeddingDenseBackward0",
                                 impl=_embedding_backward_array, args=("grad", "idx"), save=("idx",))
embedding_backward_p.vjp(lambda g, s, *, rows: (embedding(s.idx, g), None))


def embedding_backward(grad, indices, rows):
    """Scatter-add of ``grad`` (indices.shape + (D,)) into ``rows`` zero rows; its VJP is the gather."""
    return embedding_backward_p.bind(as_tensor(grad), as_tensor(indices).detach(), rows=rows)


# -------------------------------------------------------------------- dropout
def dropout_mask(x, p, scale=None):
    """A constant tensor shaped and chunked like ``x``: 0 with probability ``p``, else ``scale`` (by default
    ``1 / (1 - p)``).  Each chunk draws from its own seed (the run seed from :func:`daskgrad.manual_seed` and the
    block id), so the mask does not depend on the scheduler.  The run seed is a 0-d value the program reads
    (``door.Constant``), not a param: a training step with dropout draws a new mask every step from the same
    program, cached and instantiated as any other step (as a param, every step was a new program, lowered
    anew).  The draw is ``bernoulli(1 - p)``'s, times the scale (torch's ``bernoulli_(1 - p).div_(1 - p)``)."""
    keep = 1.0 - p
    params = (keep, (1 / keep if keep else 0.0) if scale is None else scale)  # (p = 1: callers multiply by 0)
    return Tensor._make(door.defer(_tensor.drawn_array, (value(x), _tensor.run_seed()),
                                   (("kind", "bernoulli"), ("params", params))))
