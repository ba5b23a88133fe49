"""Small dask layers built directly, without dask's per-call argument normalization and inference.

dask's ``elemwise``, ``map_blocks`` and ``blockwise`` normalize their arguments, tokenize them and
infer the meta on sample arrays on every call (``inspect.signature`` of a ufunc alone is a quarter
of an elementwise op's build time); where daskgrad knows the result's chunks, dtype and meta, it
builds the same layer (same name, same tasks) itself.
"""
from __future__ import annotations

import dask.array as da
from dask.base import tokenize
import numpy as np
from dask.utils import funcname

from .internals import HighLevelGraph, blockwise, enforce_dtype

_NUMBERS = (bool, int, float, complex)


def _is_array(a):
    """A dask array or a value not built yet (anything with chunks, a dtype and a meta)."""
    return isinstance(a, da.Array) or hasattr(a, "chunks") and hasattr(a, "_meta")


def elementwise_aval(op, srcs):
    """The abstract value dask's ``elemwise`` would give ``op(*srcs)`` where the operands broadcast
    block by block; None otherwise (then the forward on stand-ins decides)."""
    try:  # (every elementwise op recorded passes here: what is known of ``op`` is looked up once)
        fn = _ufunc_likes[op]
    except KeyError:
        fn = getattr(op, "_ufunc", op) if _ufunc_like(op) else None
        if fn is not None and len(_ufunc_likes) < _INFERRED_MAX:  # (as _inferred: ufuncs, operators, kernels)
            _ufunc_likes[op] = fn
    except TypeError:  # (an unhashable op)
        fn = getattr(op, "_ufunc", op) if _ufunc_like(op) else None
    if fn is None:
        return None
    arrays, kinds = [], []  # (each operand's kind as _infer keys it, in the same pass)
    for a in srcs:
        t = type(a)
        if t in _NUMBERS:  # (never an array)
            kinds.append((t, _by_value(a)))
        elif t in _ARRAYS or _is_array(a):
            arrays.append(a)
            kinds.append((a.dtype, type(a._meta), a.ndim))
        else:
            return None
    if not arrays:
        return None
    first = arrays[0].chunks
    chunks = first if len(arrays) == 1 or (len(arrays) == 2 and arrays[1].chunks == first) else \
        broadcast_chunks(arrays)
    if chunks is None:
        return None
    inferred = _infer(fn, srcs, tuple(kinds))
    if inferred is None:
        return None
    return inferred + (chunks,)


_ufunc_likes = {}  # ufunc-like op -> the function _infer runs for it (a dask ufunc's NumPy ufunc)
_ARRAYS = {da.Array}  # types that are arrays (and daskgrad's Lazy values: see daskgrad._dask.lazy)


def _ufunc_like(op):
    return (getattr(op, "__module__", None) == "_operator" or isinstance(op, (np.ufunc, da.ufunc.ufunc))
            or getattr(op, "elementwise_kernel", False))


def broadcast_chunks(arrays):
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
_INFERRED_MAX = 4096


def _by_value(x):
    if type(x) is int:
        return x
    if _VALUE_PROMOTION and type(x) is float:
        return x.hex()  # (NaN equals itself here)
    if _VALUE_PROMOTION and type(x) is complex:
        return x.real.hex(), x.imag.hex()
    return None


def _infer(fn, args, kinds=None):
    """The result's dtype as dask infers it (on one-element samples) and its meta (``fn`` on the
    operands' metas), remembered per function and operand kinds: an integer operand by its value
    (NumPy refuses ``uint8 + 300`` and integer powers below zero), other numbers by their type
    (by their value too before NumPy 2: :data:`_VALUE_PROMOTION`).  ``kinds``: those kinds, where
    the caller has them."""
    if kinds is None:
        kinds = tuple((a.dtype, type(a._meta), a.ndim) if _is_array(a) else (type(a), _by_value(a))
                      for a in args)
    key = (fn, kinds)
    try:
        return _inferred[key]
    except (KeyError, TypeError):  # (TypeError: an unhashable meta type)
        pass
    try:
        with np.errstate(all="ignore"):
            dtype = fn(*(np.empty((1,) * max(1, a.ndim), dtype=a.dtype) if _is_array(a)
                         else a for a in args)).dtype
            meta = fn(*(a._meta if _is_array(a) else a for a in args))
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


def elementwise_layer(op, args, dtype, meta, chunks):
    """The array dask's ``elemwise`` makes of ``op`` on ``args`` (dask arrays and numbers), whose
    blocks broadcast (see :func:`broadcast_chunks`): ``chunks`` the result's.  Built directly:
    dask's argument normalization and meta inference (``inspect.signature`` of the ufunc alone)
    cost more than the layer."""
    fn = getattr(op, "_ufunc", op)  # a dask ufunc wrapper (da.sin): its elemwise applies the NumPy ufunc
    arrays = [a for a in args if isinstance(a, da.Array)]
    name = f"{funcname(fn)}-{tokenize(fn, dtype, *map(exact, args), True)}"
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


def elemwise(op, *args):
    """``op(*args)`` on dask arrays and Python numbers, built now: the array dask's ``elemwise``
    makes (same layer, name, dtype and meta), built directly where the operands broadcast block by
    block (else by dask, which raises its own errors)."""
    aval = elementwise_aval(op, args)
    if aval is None:
        return op(*args)
    return elementwise_layer(op, args, *aval)


def exact(v):
    """An operand as a layer's name should see it: a NaN by its bits (dask's token of NaN ignores its sign:
    ``x * nan`` and ``x * -nan`` would be one layer); anything else as it is (the name dask would give)."""
    if (type(v) is float or type(v) is complex or isinstance(v, np.inexact)) and v != v:
        return type(v).__name__, np.asarray(v).tobytes()
    return v


def within_chunks(func, a, out_ind, chunks, meta, *, prefix=None, **kwargs):
    """``da.blockwise(func, out_ind, a, range(a.ndim), **kwargs)`` for a function of one array whose
    dropped axes are one chunk each (a reduction inside chunks), built directly: dask's argument
    normalization and meta checks cost ten times the layer (a 0-d ``sum()`` in a loop paid them
    every step).  ``prefix`` names its keys (default: ``func``'s name): the op's name (``sum``, ``max``),
    which the dashboard shows its time under, not the helper's."""
    name = f"{prefix or funcname(func)}-{tokenize(func, a.name, out_ind, chunks, kwargs)}"
    ind = tuple(range(a.ndim))
    layer = blockwise(func, name, out_ind, a.name, ind, numblocks={a.name: a.numblocks}, **kwargs)
    return da.Array(HighLevelGraph.from_collections(name, layer, [a]), name, chunks, meta=meta)


def one_chunk(a, fill, prefix, dtype=None):
    """An array ``<prefix>-<token>`` of ``a``'s shape, chunk type and dtype (or ``dtype``) in one chunk,
    ``fill(meta, shape, dtype)`` making the block, built directly: ``da.ones`` spends ~2 ms a call on tokenizing and
    meta
    inference, a tenth of a small step's client time.  A Blockwise layer (not one materialized
    task): fused into the tasks that read it."""
    name, ind = f"{prefix}-" + tokenize(a.name), tuple(range(a.ndim))
    dtype = a.dtype if dtype is None else dtype
    layer = blockwise(fill, name, ind, prototype(a), None, a.shape, None, dtype, None,
                      numblocks={}, new_axes={i: 1 for i in ind})
    return da.Array(HighLevelGraph({name: layer}, {name: set()}), name, a.chunks, meta=a._meta.astype(dtype))


def prototype(a):
    """``a``'s meta as a task's prototype argument: a 0-d array's meta is a value (a computed
    scalar's own), which a task would carry from step to step; an empty 1-d array of its type says
    the same (its array type and dtype)."""
    return a._meta.reshape(-1)[:0] if a.ndim == 0 else a._meta


def relabel(a, prefix):
    """``a`` ending in a layer named ``<prefix>-<token>``: fusion keeps the name of a chain's last
    layer, so the dashboard shows which rule ran.  The layer da.map_blocks would make, without its
    signature inspection and meta checks (a third of a rule's build time): it is fused away, only
    its name stays."""
    name, ind = f"{prefix}-{tokenize(a.name)}", tuple(range(a.ndim))
    layer = blockwise(_identity, name, ind, a.name, ind, numblocks={a.name: a.numblocks})
    return da.Array(HighLevelGraph.from_collections(name, layer, [a]), name, a.chunks, meta=a._meta)


def _identity(block):
    return block


_identity.row_rule = "elementwise"  # (runs on row blocks in a fused step: daskgrad._dask.rows)
