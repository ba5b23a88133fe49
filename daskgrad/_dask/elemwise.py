"""Elementwise layers built without dask's per-call inference, for the common case of operands
that need no alignment."""
from __future__ import annotations

import dask.array as da
import numpy as np
from dask.base import tokenize
from dask.utils import funcname

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
    arrays = [a for a in args if isinstance(a, da.Array)]
    if not _ufunc_like(op) or not arrays or any(a.chunks != arrays[0].chunks for a in arrays[1:]) or any(
            type(a) not in _NUMBERS and not isinstance(a, da.Array) for a in args):
        return op(*args)
    fn = getattr(op, "_ufunc", op)  # a dask ufunc wrapper (da.sin): its elemwise applies the NumPy ufunc
    try:
        with np.errstate(all="ignore"):
            # the dtype as dask infers it, on one-element samples (an integer to a negative power raises)
            dtype = fn(*(np.empty((1,) * max(1, a.ndim), dtype=a.dtype) if isinstance(a, da.Array) else a
                         for a in args)).dtype
            meta = fn(*(a._meta if isinstance(a, da.Array) else a for a in args))
        if np.isscalar(meta):  # a 0-d NumPy operand gives a NumPy scalar
            meta = np.array(meta)
        if meta.dtype != dtype:
            meta = meta.astype(dtype)
    except Exception:  # noqa: BLE001 - dask's own path raises (or returns NotImplemented) as it does
        return op(*args)
    name = f"{funcname(fn)}-{tokenize(fn, dtype, *args, True)}"
    kwargs = {}
    if arrays[0].ndim == 0:  # NumPy returns scalars for 0-d operands: dask casts them back
        fn, kwargs = enforce_dtype, {"enforce_dtype": dtype, "enforce_dtype_function": fn}
    # the layer and array da.blockwise makes, without its argument normalization (a third of the time)
    ind = tuple(range(arrays[0].ndim))[::-1]
    pairs = [(a.name, ind) if isinstance(a, da.Array) else (a, None) for a in args]
    layer = blockwise(fn, name, ind, *(x for p in pairs for x in p), numblocks={a.name: a.numblocks for a in arrays},
                      **kwargs)
    return da.Array(HighLevelGraph.from_collections(name, layer, arrays), name, arrays[0].chunks, meta=meta)


def _ufunc_like(op):
    return getattr(op, "__module__", None) == "_operator" or isinstance(op, (np.ufunc, da.ufunc.ufunc))
