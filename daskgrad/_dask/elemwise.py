"""Elementwise layers built without dask's per-call inference, for the common case of operands
that need no alignment."""
from __future__ import annotations

import threading

import dask.array as da
import numpy as np
from dask.base import tokenize
from dask.utils import funcname

from .fold import fold
from .internals import HighLevelGraph, blockwise, enforce_dtype

_NUMBERS = (bool, int, float, complex)


def elemwise(op, *args):
    """``op(*args)`` on dask arrays and Python numbers: the array dask's ``elemwise`` makes (same
    layer, name, dtype and meta), built directly when every array has the same chunks.

    dask's ``elemwise`` unifies chunks, infers the dtype on sample arrays, then infers the meta again
    through ``compute_meta``, whose ``inspect.signature`` of the ufunc alone is a quarter of an op's
    build time: a 100,000-op chain paid it 200,000 times (forward and rule).  Here the dtype is
    inferred as dask does and the meta is ``op`` on the operands' metas; anything else --
    other operand types, unaligned chunks, an op that raises -- goes to dask, which raises its own
    errors.  ``op`` is a function of ``operator``, a NumPy ufunc or a dask one (others are called)."""
    out = deferred(op, *args)
    return out.build() if type(out) is Pending else out


def deferred(op, *args):
    """:func:`elemwise`, not built yet: a :class:`Pending` that knows the array's dtype, meta and
    chunks and builds it when asked, when the direct path applies (else dask's array, built now).

    A graph that is recorded and never computed (torch's ``test_free_deep_graph``: 300,000 ops on a
    one-element tensor, dropped) then costs what recording costs, not a dask layer per op."""
    arrays = [a for a in args if isinstance(a, (da.Array, Pending))]
    if not _ufunc_like(op) or not arrays or any(
            type(a) not in _NUMBERS and not isinstance(a, (da.Array, Pending)) for a in args):
        return op(*_built(args))
    chunks = _broadcast_chunks(arrays)
    if chunks is None:
        return op(*_built(args))
    fn = getattr(op, "_ufunc", op)  # a dask ufunc wrapper (da.sin): its elemwise applies the NumPy ufunc
    inferred = _infer(fn, args)
    if inferred is None:  # dask's own path raises (or returns NotImplemented) as it does
        return op(*_built(args))
    dtype, meta = inferred
    return Pending(op, fn, args, dtype, meta, chunks)


def _broadcast_chunks(arrays):
    """The result's chunks where the operands broadcast block by block, as NumPy broadcasts them
    (trailing axes aligned): on each axis every operand has the same chunks or is one element long;
    else None (dask unifies the chunks, rechunking, or raises)."""
    first = arrays[0].chunks
    if all(a.chunks == first for a in arrays[1:]):
        return first
    ndim = max(a.ndim for a in arrays)
    out = []
    for d in range(ndim):
        axis = None
        for a in arrays:
            j = d - ndim + a.ndim
            if j < 0 or a.chunks[j] == (1,):
                continue
            if axis is None:
                axis = a.chunks[j]
            elif a.chunks[j] != axis:
                return None
        out.append((1,) if axis is None else axis)
    return tuple(out)


_inferred = {}  # (fn, each operand's kind) -> (dtype, meta), or None where inference raised
# NumPy before 2 promotes by a Python number's value (int8 + 1.5 is float16, + 1e5 float32); from 2
# on (NEP 50) only an integer's value matters (whether it fits)
_VALUE_PROMOTION = np.lib.NumpyVersion(np.__version__) < "2.0.0"


def _by_value(x):
    if type(x) is int:
        return x
    if _VALUE_PROMOTION and type(x) is float:
        return x.hex()  # (NaN equals itself here)
    if _VALUE_PROMOTION and type(x) is complex:
        return x.real.hex(), x.imag.hex()
    return None
_INFERRED_MAX = 4096


def _infer(fn, args):
    """The result's dtype as dask infers it (on one-element samples) and its meta (``fn`` on the
    operands' metas), remembered per function and operand kinds: an integer operand by its value
    (NumPy refuses ``uint8 + 300`` and integer powers below zero), other numbers by their type
    (by their value too before NumPy 2: :data:`_VALUE_PROMOTION`)."""
    kinds = tuple((a.dtype, type(a._meta), a.ndim) if isinstance(a, (da.Array, Pending))
                  else (type(a), _by_value(a)) for a in args)
    key = (fn, kinds)
    try:
        return _inferred[key]
    except (KeyError, TypeError):  # (TypeError: an unhashable meta type)
        pass
    try:
        with np.errstate(all="ignore"):
            dtype = fn(*(np.empty((1,) * max(1, a.ndim), dtype=a.dtype) if isinstance(a, (da.Array, Pending))
                         else a for a in args)).dtype
            meta = fn(*(a._meta if isinstance(a, (da.Array, Pending)) else a for a in args))
        if np.isscalar(meta):  # a 0-d NumPy operand gives a NumPy scalar
            meta = np.array(meta)
        if meta.dtype != dtype:
            meta = meta.astype(dtype)
        out = (dtype, meta)
    except Exception:  # noqa: BLE001 - dask's own path raises (or returns NotImplemented) as it does
        out = None
    if len(_inferred) < _INFERRED_MAX:
        try:
            _inferred[key] = out
        except TypeError:
            pass
    return out


_building = threading.RLock()


class Pending:
    """An elementwise array not built yet (:func:`deferred`): its dtype, meta, chunks and shape as
    the built array will have them.  Built once, on first need (:meth:`build`), with every pending
    array it reads; the operands are let go then (the built graph holds what it needs)."""

    __slots__ = ("op", "fn", "args", "dtype", "_meta", "chunks", "shape", "ndim", "_built", "__weakref__")

    def __init__(self, op, fn, args, dtype, meta, chunks):
        self.op, self.fn, self.args, self.dtype, self._meta, self.chunks = op, fn, args, dtype, meta, chunks
        self.shape = tuple(sum(c) for c in chunks)
        self.ndim = len(chunks)
        self._built = None

    def build(self):
        """The dask array, built now with the pending arrays it reads (iteratively: a chain of
        recorded ops is as deep as the loop that made it)."""
        if self._built is not None:
            return self._built
        with _building:  # (another thread may be building the same chain)
            if self._built is None:
                self._build()
        return self._built

    def _build(self):
        todo, done, stack = [], set(), [self]  # post-order: a pending after all it reads
        while stack:
            p = stack[-1]
            if id(p) in done:
                stack.pop()
                continue
            waiting = [a for a in p.args if type(a) is Pending and a._built is None and id(a) not in done]
            if waiting:
                stack.extend(waiting)
            else:
                stack.pop()
                done.add(id(p))
                todo.append(p)
        for p in todo:
            p._built = fold(_layer(p.op, p.fn, _built(p.args), p.dtype, p._meta, p.chunks))
            p.args = None


def _built(args):
    return tuple(a.build() if type(a) is Pending else a for a in args)


def _layer(op, fn, args, dtype, meta, chunks):
    """The array dask's ``elemwise`` makes of ``op`` on ``args``, whose blocks broadcast (see
    :func:`elemwise`): ``chunks`` the result's."""
    arrays = [a for a in args if isinstance(a, da.Array)]
    name = f"{funcname(fn)}-{tokenize(fn, dtype, *args, True)}"
    kwargs = {}
    if any(a.ndim == 0 for a in arrays):  # a 0-d operand's chunk may be a scalar: dask casts the result
        fn, kwargs = enforce_dtype, {"enforce_dtype": dtype, "enforce_dtype_function": fn}
    # the layer and array da.blockwise makes, without its argument normalization (a third of the
    # time); an operand's axes are the result's last ones, and an axis one block long broadcasts
    ind = tuple(range(len(chunks)))[::-1]
    pairs = [(a.name, ind[len(ind) - a.ndim:]) if isinstance(a, da.Array) else (a, None) for a in args]
    layer = blockwise(fn, name, ind, *(x for p in pairs for x in p), numblocks={a.name: a.numblocks for a in arrays},
                      **kwargs)
    return da.Array(HighLevelGraph.from_collections(name, layer, arrays), name, chunks, meta=meta)


def _ufunc_like(op):
    return getattr(op, "__module__", None) == "_operator" or isinstance(op, (np.ufunc, da.ufunc.ufunc))


def within_chunks(func, a, out_ind, chunks, meta, **kwargs):
    """``da.blockwise(func, out_ind, a, range(a.ndim), **kwargs)`` for a function of one array whose
    dropped axes are one chunk each (a reduction inside chunks), built directly: dask's argument
    normalization and meta checks cost ten times the layer (a 0-d ``sum()`` in a loop paid them
    every step)."""
    name = f"{funcname(func)}-{tokenize(func, a.name, out_ind, chunks, kwargs)}"
    ind = tuple(range(a.ndim))
    layer = blockwise(func, name, out_ind, a.name, ind, numblocks={a.name: a.numblocks}, **kwargs)
    return da.Array(HighLevelGraph.from_collections(name, layer, [a]), name, chunks, meta=meta)
