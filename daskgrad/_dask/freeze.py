"""A value as a hashable structure equal exactly when the values are: the step cache's key.

``dask.base.tokenize`` of a step's description costs more than running a step of small chunks
(0.6 ms for a graph of seven layers, a quarter of a nested backward's time), because it walks the
structure through dask's dispatch and hashes it with SHA-1.  A frozen structure is a tuple that
Python hashes and compares directly.  It is as exact as the tokens it replaces:

* numbers keep their type, and floats their bits (``-0.0`` and ``0.0``, ``1`` and ``1.0`` differ);
* functions defined at module level are themselves (a function redefined under the same name is
  another object: the template holds the old one, so its identity is not reused); a closure is its
  code, defaults and captured values, so the closures an op makes afresh each step are equal;
* arrays are their type, dtype, shape and bytes (larger ones by dask's token of their buffer).

Anything else raises :class:`Unfrozen`, and the caller falls back to dask's token.
"""
from __future__ import annotations

import functools
import types

import numpy as np
from dask.base import tokenize
from dask.layers import ArrayBlockIdDep, ArrayChunkShapeDep, ArraySliceDep, ArrayValuesDep
from dask.utils import Dispatch
from toolz.functoolz import Compose, curry

_SMALL = 4096  # bytes: an array this small is frozen as its bytes; a larger one by dask's token
# itself (hashed by identity): NumPy's public functions (C dispatchers since NumPy 1.25) and dask's
# per-type registries (a chunk function's global, as ``concatenate_lookup``)
_ITSELF = (np.ufunc, type, type(np.transpose), Dispatch)
_BY_CHUNKS = (ArrayBlockIdDep, ArrayChunkShapeDep, ArraySliceDep)  # all they hold is made from their chunks


class Unfrozen(Exception):
    """A value with no exact frozen form here."""


def freeze(obj):
    t = type(obj)
    if t is str or t is int or t is bool or obj is None:
        return (t, obj) if t is not str else obj
    if t is tuple or t is list:
        return (t, *(freeze(o) for o in obj))
    if t is float:
        return (float, obj.hex())
    if t is dict:
        return (dict, *sorted(((freeze(k), freeze(v)) for k, v in obj.items()), key=repr))
    return _freeze_other(obj, t)


def _freeze_other(obj, t):
    if t is complex:
        return (complex, obj.real.hex(), obj.imag.hex())
    if t is types.FunctionType:
        return _function(obj)
    if t is types.BuiltinFunctionType or isinstance(obj, _ITSELF):
        return obj  # hashed and compared by identity: itself
    if t is functools.partial:
        return (functools.partial, freeze(obj.func), freeze(obj.args), freeze(obj.keywords))
    if t is Compose:  # a reduction's aggregate
        return (Compose, freeze(obj.first), freeze(obj.funcs))
    if t is curry:  # dask.array's creation functions (ones, full, ...)
        return (curry, freeze(obj.func), freeze(obj.args), freeze(obj.keywords))
    if t in _BY_CHUNKS:  # a creation function's block shapes, slices or ids
        return (t, freeze(obj.chunks))
    if t is ArrayValuesDep:  # map_blocks' block_id / block_info: a value per block
        return (t, freeze(obj.chunks), freeze(obj.values))
    if isinstance(obj, np.dtype):
        return _dtype(obj)
    if isinstance(obj, np.generic):
        return (t, _dtype(obj.dtype), obj.tobytes())
    if t is np.ndarray:
        if obj.dtype.hasobject:
            raise Unfrozen("an object array")
        data = obj.tobytes() if obj.nbytes <= _SMALL else tokenize(obj)
        return (np.ndarray, _dtype(obj.dtype), obj.shape, data)
    if t is slice:
        return (slice, freeze(obj.start), freeze(obj.stop), freeze(obj.step))
    if obj is Ellipsis:
        return (type(obj),)
    raise Unfrozen(t.__name__)


def _dtype(dtype):
    """A dtype by its byte layout, and its repr where that is not all of it: ``.str`` is ``|V16`` for
    every 16-byte record or sub-array type, whatever its fields.  (A repr costs 0.5 us.)"""
    if dtype.kind in "biufcmMSU" and dtype.metadata is None:
        return (np.dtype, dtype.str)
    return (np.dtype, dtype.str, repr(dtype))


def _function(fn):
    if fn.__closure__ is None and fn.__defaults__ is None and fn.__kwdefaults__ is None:
        return fn
    # a closure made afresh (an op's kernel) is what it runs: its code, the values it captured, and
    # the globals it names (a notebook may rebind one between steps)
    try:
        cells = tuple(freeze(c.cell_contents) for c in fn.__closure__ or ())
    except ValueError as e:  # a cell not filled yet (a closure over a name assigned later)
        raise Unfrozen(str(e)) from e
    names = fn.__globals__
    used = tuple((n, _global(names[n])) for n in fn.__code__.co_names if n in names)
    return (types.FunctionType, fn.__code__, cells, freeze(fn.__defaults__), freeze(fn.__kwdefaults__), used)


def _global(obj):
    if isinstance(obj, (types.ModuleType, types.FunctionType, type)):
        return obj  # itself: a rebinding of the name is another object
    return freeze(obj)
