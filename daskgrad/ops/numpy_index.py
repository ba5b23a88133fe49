"""NumPy's functions whose results are indices, counts, booleans, bins or constants: dask's own
functions on the chunks, returned as tensors that do not require grad (as torch's integer and
boolean results), and the factories (``eye``, ``tri``, ``indices``, ``meshgrid`` ...), which take
``dtype=``, ``chunks=``, ``requires_grad=`` and ``device=`` as ``daskgrad.zeros`` does.  Where torch
records a node whose backward raises (``bincount`` with weights, ``floor_divide``), so does this.
"""
from __future__ import annotations

import builtins

import dask
import dask.array as da
import numpy as np

from .. import _dask as door, _tensor
from ..graph import primitive, promoted, rounded_to_half
from .._tensor import Tensor, arange, full, ones, zeros
from ._util import (as_tensor, norm_axis, numpy_bool_as_float, public, raw, refuse_dtype_kinds, tensor_or_scalar,
                    value)
from .elementwise import bitwise_not, checked_divisor, mod, zeros_like
from .shape import broadcast_to, reshape

for _name, _fn in (("zeros", zeros), ("ones", ones), ("full", full), ("arange", arange)):
    public(name=_name)(_fn)


def _arr(x):
    """A dask array of a tensor; a host operand as it is (dask's functions take both)."""
    return raw(tensor_or_scalar(x)) if isinstance(x, Tensor) or hasattr(x, "__array_function__") else x


def _int_result(fn, name, doc):
    def op(*args, **kwargs):
        out = fn(*[_arr(a) for a in args], **{k: _arr(v) for k, v in kwargs.items()})
        return tuple(Tensor._make(o) for o in out) if isinstance(out, (tuple, list)) else Tensor._make(out)
    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"{doc} (not differentiable)."
    return public()(op)


# ------------------------------------------------------------- searching, counting
@public()
def searchsorted(a, v, side="left", sorter=None):
    """Where ``v`` would go in the sorted 1-D ``a`` (``torch.searchsorted``); an integer tensor."""
    if side not in ("left", "right"):
        raise ValueError(f"side must be 'left' or 'right' (got {side!r})")
    a = as_tensor(a)
    if a.ndim != 1:
        raise ValueError("Input array a must be one dimensional")
    return Tensor._make(da.searchsorted(a.array, _arr(v), side=side, sorter=_arr(sorter)))


@public()
def digitize(x, bins, right=False):
    """The index of the bin each value of ``x`` falls in (host ``bins``, as dask's); an integer tensor."""
    if isinstance(bins, Tensor) or hasattr(bins, "__dask_graph__"):  # np.asarray would compute it here
        raise TypeError("digitize takes bins in host memory (a list or NumPy array), as dask.array.digitize; "
                        "for lazy or device bins use searchsorted(bins, x, side=\"right\")")
    return Tensor._make(da.digitize(raw(as_tensor(x)), np.asarray(bins), right=right))


@public()
def count_nonzero(a, axis=None, keepdims=False):
    """How many elements are not zero, over ``axis`` (``torch.count_nonzero``); an integer tensor."""
    a = as_tensor(a)
    out = da.count_nonzero(a.array, axis=None if axis is None else tuple(
        norm_axis(k, a.ndim) for k in (axis if isinstance(axis, (tuple, list)) else (axis,))))
    t = Tensor._make(out)
    if keepdims:
        shape = tuple(1 if axis is None or k in _axes(axis, a.ndim) else n for k, n in enumerate(a.shape))
        t = reshape(t, shape)
    return t


def _axes(axis, ndim):
    return {norm_axis(k, ndim) for k in (axis if isinstance(axis, (tuple, list)) else (axis,))}


argwhere = _int_result(da.argwhere, "argwhere", "The indices of the non-zero elements, one row each (an unknown "
                       "number of rows, as dask's)")
nonzero = _int_result(da.nonzero, "nonzero", "The indices of the non-zero elements, one tensor per axis (unknown "
                      "lengths, as dask's; ``torch.nonzero`` is ``argwhere``)")
flatnonzero = _int_result(da.flatnonzero, "flatnonzero", "The indices of the non-zero elements of the raveled tensor")
unravel_index = _int_result(da.unravel_index, "unravel_index", "Flat indices as a tuple of index tensors")
ravel_multi_index = _int_result(da.ravel_multi_index, "ravel_multi_index", "Index tensors as flat indices")


@public()
def isin(element, test_elements, assume_unique=False, invert=False):
    """Whether each element is in ``test_elements`` (``torch.isin``); a boolean tensor."""
    return Tensor._make(da.isin(raw(as_tensor(element)), _arr(test_elements), assume_unique=assume_unique,
                                invert=invert))


@public()
def unique(ar, return_index=False, return_inverse=False, return_counts=False):
    """The sorted distinct values (an unknown length, as dask's), with the extras NumPy's returns."""
    out = da.unique(raw(as_tensor(ar)), return_index=return_index, return_inverse=return_inverse,
                    return_counts=return_counts)
    return tuple(Tensor._make(o) for o in out) if isinstance(out, tuple) else Tensor._make(out)


@public()
def union1d(ar1, ar2):
    """The sorted distinct values of both (an unknown length, as dask's); not differentiable."""
    return Tensor._make(da.union1d(raw(as_tensor(ar1)), raw(as_tensor(ar2))))


# --------------------------------------------------------------------- bins
@public()
def histogram(a, bins=10, range=None, weights=None, density=None):
    """``(counts, bin_edges)`` as dask's (an integer ``bins`` needs ``range``, which dask cannot
    infer without computing); not differentiable."""
    h, edges = da.histogram(raw(as_tensor(a)), bins=_arr(bins), range=range, weights=_arr(weights), density=density)
    return _wrap(h), _wrap(edges)


@public()
def histogram2d(x, y, bins=10, range=None, weights=None, density=None):
    """``(counts, x_edges, y_edges)`` of the pairs ``(x, y)``, as dask's; not differentiable."""
    h, ex, ey = da.histogram2d(raw(as_tensor(x)), raw(as_tensor(y)), bins=bins, range=range,
                               weights=_arr(weights), density=density)
    return _wrap(h), _wrap(ex), _wrap(ey)


@public()
def histogramdd(sample, bins, range=None, weights=None, density=None):
    """``(counts, [edges per axis])`` of the rows of ``sample``, as dask's; not differentiable."""
    sample = raw(as_tensor(sample)) if not isinstance(sample, (list, tuple)) else [_arr(s) for s in sample]
    h, edges = da.histogramdd(sample, bins=bins, range=range, weights=_arr(weights), density=density)
    return _wrap(h), [_wrap(e) for e in edges]


def _wrap(a):
    """A result as a tensor: dask computes some bin edges on the client from the host arguments."""
    return Tensor._make(a if isinstance(a, da.Array) else da.from_array(a, chunks=-1))


def _raise_no_derivative(g, s, *, op):
    raise RuntimeError(f"derivative for aten::{op} is not implemented")


# torch's ``NotImplemented`` node: the result of inputs requiring grad requires grad too, and
# reaching it in backward raises (its node is named when it binds, so it has no torch name here)
not_implemented_p = primitive("not_implemented")
not_implemented_p.vjp(_raise_no_derivative)


def _no_derivative(out, name, *inputs):
    ins = tuple(t if isinstance(t, Tensor) and t.requires_grad else None for t in inputs)
    if not any(t is not None for t in ins):
        return out
    return not_implemented_p.record(out.array, *ins, node="NotImplemented", op=name)


def _nonnegative(x):
    if x.size and x.min() < 0:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    return x


def _bincount_float32(x, w, minlength):
    if x.size and x.min() < 0:
        np.bincount(x)  # (NumPy's error for a negative value)
    out = np.zeros(builtins.max(int(x.max()) + 1 if x.size else 0, minlength), np.float32)
    np.add.at(out, x, w)  # (in float32, in order: torch's sums)
    return out


def _bincount_method(op):
    def method(self, weights=None, minlength=0):
        """torch's ``bincount``: float32 weights are summed in float32 (NumPy's and ``daskgrad.bincount``'s
        in float64)."""
        w = as_tensor(weights) if weights is not None else None
        if self.ndim == 1 and self.shape[0] == 0 and w is not None and w.shape == (0,):
            return op(self, None, minlength)  # (torch's: no elements, int64 zeros whatever the weights)
        if self.ndim == 1 and self.dtype.kind == "i":  # (a negative value: torch's error, in the tasks)
            self = Tensor._make(self.array.map_blocks(_nonnegative, dtype=self.dtype))
        if w is None or w.dtype != np.float32 or self.dtype.kind in "fc" or self.ndim != 1:
            return op(self, weights, minlength)
        out = Tensor._make(da.map_blocks(_bincount_float32, self.array.rechunk(-1), w.array.rechunk(-1), minlength,
                                         dtype=np.float32, chunks=((np.nan,),)))
        return _no_derivative(out, "bincount", weights)
    return method


@public(("bincount", _bincount_method))
def bincount(x, weights=None, minlength=0):
    """How often each non-negative integer occurs (summing ``weights`` instead of ones when given);
    with weights that require grad the result does too, and backward raises, as torch's."""
    x = as_tensor(x)
    refuse_dtype_kinds("bincount", "fc", x)
    if x.ndim != 1:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    w = _arr(weights)
    if isinstance(w, da.Array) and w.chunks != x.chunks:
        w = w.rechunk(x.chunks)  # dask asks for matching chunks
    out = Tensor._make(da.bincount(x.array, weights=w, minlength=minlength))
    return _no_derivative(out, "bincount", weights)


# ------------------------------------------------------------ logic and integers
def _elementwise(name, methods=(), doc="NumPy's ``{}``"):
    fn = getattr(da, name)

    def op(*args, **kwargs):
        return Tensor._make(fn(*[_arr(a) for a in args], **kwargs))
    op.__name__ = op.__qualname__ = name
    op.__doc__ = doc.format(name) + " (not differentiable)."
    return public(*methods)(op)


for _name in ("left_shift", "right_shift", "iscomplex", "isclose", "allclose", "spacing"):
    globals()[_name] = _elementwise(_name)

public(name="invert")(bitwise_not)  # NumPy's name for ~


def _boolean_reduction(name):
    def op(a, axis=None, keepdims=False):
        a = as_tensor(a)
        axes = None if axis is None else tuple(sorted(_axes(axis, a.ndim or 1)))  # (0-d: dim 0 or -1, as torch's)
        axes = axes if a.ndim else None
        return Tensor._make(getattr(da, name)(a.array, axis=axes, keepdims=keepdims))
    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"NumPy's ``{name}`` (a boolean tensor)."
    return public((name, _uint8_kept))(op)


def _uint8_kept(op):
    def method(self, *args, **kwargs):
        """of a uint8 tensor, a uint8 one (0 or 1), as torch's"""
        out = op(self, *args, **kwargs)
        return out.astype(np.uint8) if self.dtype == np.uint8 else out
    return method


all_, any_ = _boolean_reduction("all"), _boolean_reduction("any")  # NumPy's all/any (not the builtins)


@public("__floordiv__", "__rfloordiv__", "__ifloordiv__", "floor_divide", "floor_divide_")
def floor_divide(x1, x2):
    """``floor(x1 / x2)``; as torch's, the result of inputs requiring grad requires grad, and backward raises."""
    a, b = tensor_or_scalar(numpy_bool_as_float(x1)), tensor_or_scalar(numpy_bool_as_float(x2))
    b = checked_divisor(a, b)  # (an integer one by zero: torch's error)
    operands, half = promoted([value(a), value(b)], opmath=True)  # (half in float32, as torch's)
    out = door.defer(da.floor_divide, operands, elementwise=True)
    out = Tensor._make(rounded_to_half(out) if half else out)
    return _no_derivative(out, "floor_divide", a, b)


@public(name="divmod")
def divmod_(x1, x2):
    """``(floor_divide(x1, x2), mod(x1, x2))``; the remainder is differentiable, as torch's ``remainder``."""
    return floor_divide(x1, x2), mod(x1, x2)


# ------------------------------------------------------------------- factories
def _made(fn, dtype, requires_grad, device, **kwargs):
    with dask.config.set({"array.backend": _tensor._backend(device)}):
        arr = fn(dtype=np.dtype(dtype or _tensor._DEFAULT_FLOAT), **kwargs)
    return _tensor._leaf(arr, requires_grad)


@public()
def eye(N, M=None, k=0, dtype=None, chunks="auto", requires_grad=False, device=None):
    """Ones on the ``k``-th diagonal (``torch.eye``; float32 by default, as torch's)."""
    M = N if M is None else M
    for n, what in ((N, "n"), (M, "m")):
        if n < 0:
            raise RuntimeError(f"{what} must be greater or equal to 0, got {n}")
    _tensor.check_size("eye", (max(N, M), max(N, M)), dtype or _tensor._DEFAULT_FLOAT, chunks)
    # the square one, sliced: dask 2026.8's non-square eye loses a block when one chunk spans a side
    return _made(lambda dtype: da.eye(max(N, M), chunks=chunks, k=k, dtype=dtype)[:N, :M], dtype, requires_grad,
                 device)


@public()
def identity(n, dtype=None, chunks="auto", requires_grad=False, device=None):
    """The ``n`` by ``n`` identity (``eye(n)``; float32 by default, as torch's)."""
    return eye(n, dtype=dtype, chunks=chunks, requires_grad=requires_grad, device=device)


@public()
def tri(N, M=None, k=0, dtype=None, chunks="auto", requires_grad=False, device=None):
    """Ones at and below the ``k``-th diagonal."""
    _tensor.check_size("tri", (N, N if M is None else M), dtype or _tensor._DEFAULT_FLOAT, chunks)
    return _made(lambda dtype: da.tri(N, M, k, dtype=dtype, chunks=chunks), dtype, requires_grad, device)


@public()
def empty(*shape, dtype=None, chunks="auto", requires_grad=False, device=None):
    """As ``zeros`` (dask's ``empty`` is lazy too: its values are never read before being written)."""
    _tensor.check_size("empty", _tensor._shape(shape), dtype or _tensor._DEFAULT_FLOAT, chunks)
    return zeros(*shape, dtype=dtype, chunks=chunks, requires_grad=requires_grad, device=device)


@public()
def empty_like(x, dtype=None, requires_grad=False):
    """As ``zeros_like`` (nothing lazy is left unwritten); ``requires_grad`` makes it a leaf that does."""
    out = zeros_like(x, dtype=dtype)
    return out.requires_grad_(True) if requires_grad else out


@public()
def rand_like(x, dtype=None, requires_grad=False):
    """torch's ``rand_like``: uniform on [0, 1) with ``x``'s shape, chunks and device, drawn as
    :func:`daskgrad.rand` (each chunk from the run seed and its block id, the seed a value the program reads,
    so a loop that draws every step is one program; a distributed scheduler spreads the chunks)."""
    return _drawn_like(x, "uniform", dtype, requires_grad)


@public()
def randn_like(x, dtype=None, requires_grad=False):
    """torch's ``randn_like``: standard normal with ``x``'s shape, chunks and device (see :func:`rand_like`)."""
    return _drawn_like(x, "normal", dtype, requires_grad)


def _drawn_like(x, kind, dtype, requires_grad):
    base = zeros_like(as_tensor(x), dtype=dtype)
    _tensor.check_draw_dtype(kind, base.dtype)
    out = Tensor._make(door.defer(_tensor.drawn_array, (value(base), _tensor.run_seed()),
                                  (("kind", kind), ("params", (0.0, 1.0)), ("producer", True))))
    return out.requires_grad_(True) if requires_grad else out


@public()
def indices(dimensions, dtype=int, chunks="auto", sparse=False):
    """A grid of indices, one tensor per axis stacked first (an integer tensor, as dask's)."""
    if sparse:
        raise NotImplementedError("indices(sparse=True): use meshgrid(..., sparse=True) of aranges")
    return Tensor._make(da.indices(dimensions, dtype=dtype, chunks=chunks))


@public()
def meshgrid(*xi, indexing="xy", sparse=False, copy=True):
    """Coordinate grids of 1-D tensors (NumPy's default ``indexing='xy'``; ``torch.meshgrid`` defaults
    to ``'ij'``); differentiable, each grid a broadcast of its input."""
    if indexing not in ("xy", "ij"):
        raise ValueError("Valid values for `indexing` are 'xy' and 'ij'.")
    ts = [reshape(as_tensor(x), (-1,)) for x in xi]
    n = len(ts)
    shape = [t.shape[0] for t in ts]
    if indexing == "xy" and n > 1:
        shape[0], shape[1] = shape[1], shape[0]
    out = []
    for i, t in enumerate(ts):
        pos = (1 - i if i < 2 else i) if indexing == "xy" and n > 1 else i
        s = [1] * n
        s[pos] = t.shape[0]
        g = reshape(t, tuple(s))
        out.append(g if sparse else broadcast_to(g, tuple(shape)))
    return out


@public()
def fromfunction(function, shape, *, dtype=float, chunks="auto", **kwargs):
    """``function(*index_grids)``: it gets one float (``dtype``) tensor of indices per axis."""
    grids = [Tensor._make(g) for g in da.indices(shape, dtype=dtype, chunks=chunks)]
    return function(*grids, **kwargs)


def _index_pair(fn, name):
    def op(*args, **kwargs):
        args = [raw(a) if isinstance(a, Tensor) else a for a in args]
        return tuple(Tensor._make(o) for o in fn(*args, **kwargs))
    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"NumPy's ``{name}``: two integer index tensors."
    return public()(op)


tril_indices, triu_indices = _index_pair(da.tril_indices, "tril_indices"), _index_pair(da.triu_indices, "triu_indices")
tril_indices_from = _index_pair(da.tril_indices_from, "tril_indices_from")
triu_indices_from = _index_pair(da.triu_indices_from, "triu_indices_from")

