"""A strict duck-array chunk type that fails the way cupy fails, for CPU CI (a test double: no
package code needs it, so it lives with the tests).

``StrictArray`` wraps a NumPy array but refuses implicit conversion to NumPy
(NumPy's asarray on a chunk raises, as on cupy) and refuses NumPy array operands in
ufuncs (``chunk * np.ones(n)`` raises, as on cupy).  It dispatches NumPy
functions (NEP 18) and creation with ``like=`` (NEP 35), so array-type-agnostic
code works.  Two of cupy's readings are copied too, each found on a GPU: ``*_like(a, shape=())``
gives ``a``'s shape (cupy takes ``()`` for no shape), and ``ufunc.at`` refuses a tuple of index
arrays.  ``register()`` makes it a Dask chunk type and the ``"strict"``
array backend; ``to_strict(tensor)`` moves a tensor's chunks onto it.
"""
from __future__ import annotations

import numpy as np

_MESSAGE = ("Implicit conversion to a NumPy array is not allowed. Please use .get() to construct a NumPy "
            "array explicitly.")


def _unwrap(x):
    if isinstance(x, StrictArray):
        return x.arr
    if isinstance(x, np.ndarray):  # cupy refuses 0-d host arrays too; only NumPy scalars pass
        raise TypeError(f"Unsupported type {type(x)} mixed with StrictArray chunks (a host array on a device)")
    if isinstance(x, (list, tuple)):
        return type(x)(_unwrap(v) for v in x)
    if isinstance(x, dict):
        return {k: _unwrap(v) for k, v in x.items()}
    return x


def _wrap(x):
    if isinstance(x, (np.ndarray, np.generic)):  # cupy returns 0-d arrays where NumPy returns scalars
        return StrictArray(x)
    if isinstance(x, tuple):
        return tuple(_wrap(v) for v in x)
    if isinstance(x, list):
        return [_wrap(v) for v in x]
    return x


class StrictArray(np.lib.mixins.NDArrayOperatorsMixin):
    """A device-like array: values on the 'device', never converted to NumPy implicitly."""

    __slots__ = ("arr",)
    __array_priority__ = 0

    def __init__(self, arr):
        self.arr = arr.arr if isinstance(arr, StrictArray) else np.array(arr)

    shape = property(lambda self: self.arr.shape)
    dtype = property(lambda self: self.arr.dtype)
    ndim = property(lambda self: self.arr.ndim)
    size = property(lambda self: self.arr.size)
    nbytes = property(lambda self: self.arr.nbytes)
    T = property(lambda self: StrictArray(self.arr.T))
    real = property(lambda self: StrictArray(self.arr.real))  # (cupy's: views of the parts, on the device)
    imag = property(lambda self: StrictArray(self.arr.imag))

    def __array__(self, dtype=None, copy=None):
        raise TypeError(_MESSAGE)

    def get(self):
        """The explicit device-to-host copy (cupy's ``.get()``)."""
        return self.arr.copy()

    def __repr__(self):
        return f"StrictArray({self.arr!r})"

    def __len__(self):
        return len(self.arr)

    def __getitem__(self, index):
        return _wrap(self.arr[_unwrap_index(index)])

    def __setitem__(self, index, value):
        self.arr[_unwrap_index(index)] = _unwrap(value)

    def __bool__(self):
        return bool(self.arr)

    def __float__(self):
        return float(self.arr)

    def __int__(self):
        return int(self.arr)

    def item(self):
        return self.arr.item()

    def astype(self, dtype, **kwargs):
        return StrictArray(self.arr.astype(dtype, **kwargs))

    def reshape(self, *shape, **kwargs):
        return StrictArray(self.arr.reshape(*shape, **kwargs))

    def copy(self):
        return StrictArray(self.arr.copy())

    def view(self, dtype):  # (cupy's ndarray.view(dtype): the same bytes as another dtype)
        return StrictArray(self.arr.view(dtype))

    def transpose(self, *axes):
        return StrictArray(self.arr.transpose(*axes))

    def sum(self, *args, **kwargs):
        return np.sum(self, *args, **kwargs)

    def squeeze(self, axis=None):
        return StrictArray(self.arr.squeeze(axis))

    def ravel(self):
        return StrictArray(self.arr.ravel())

    def any(self, *args, **kwargs):
        return np.any(self, *args, **kwargs)

    def all(self, *args, **kwargs):
        return np.all(self, *args, **kwargs)

    def max(self, *args, **kwargs):
        return np.max(self, *args, **kwargs)

    def min(self, *args, **kwargs):
        return np.min(self, *args, **kwargs)

    def prod(self, *args, **kwargs):
        return np.prod(self, *args, **kwargs)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        CALLS.add((f"ufunc.{ufunc.__name__}", method, tuple(sorted(kwargs))))
        if method == "at" and isinstance(inputs[1], tuple):  # cupy's ufunc.at takes one index array
            return NotImplemented
        result = getattr(ufunc, method)(*_unwrap(inputs), **_unwrap(kwargs))
        return _wrap(result) if method != "at" else None

    def __array_function__(self, func, types, args, kwargs):
        CALLS.add((f"{func.__module__}.{func.__name__}", "__call__", tuple(sorted(kwargs))))
        if func in _EXPLICIT_COPIES:  # np.array(host, like=chunk): an explicit host-to-device copy
            return StrictArray(func(*[a.arr if isinstance(a, StrictArray) else a for a in args], **kwargs))
        if func in _LIKE and kwargs.get("shape") == ():  # as cupy: shape=() is read as no shape given
            kwargs = {k: v for k, v in kwargs.items() if k != "shape"}
        return _wrap(func(*_unwrap(args), **_unwrap(kwargs)))


# Every NumPy function and ufunc method that reached a StrictArray chunk, with its keyword names:
# tests check each one exists in cupy, so a kernel cupy lacks fails on CPU too.
CALLS: set = set()

_EXPLICIT_COPIES = {np.array, np.asarray, np.asanyarray, np.ascontiguousarray}
_LIKE = {np.empty_like, np.zeros_like, np.ones_like, np.full_like}


def _unwrap_index(index):
    if isinstance(index, tuple):
        return tuple(i.arr if isinstance(i, StrictArray) else i for i in index)
    return index.arr if isinstance(index, StrictArray) else index


_registered = False


def register() -> None:
    """Register StrictArray with dask (chunk type, concatenate/tensordot, the ``strict`` backend)."""
    global _registered
    if _registered:
        return
    import dask.array as da
    from dask.array.backends import ArrayBackendEntrypoint, array_creation_dispatch
    from dask.array.dispatch import (concatenate_lookup, einsum_lookup, empty_lookup, tensordot_lookup,
                                     to_numpy_dispatch)

    da.register_chunk_type(StrictArray)

    @concatenate_lookup.register(StrictArray)
    def _concat(arrays, axis=0):
        return StrictArray(np.concatenate([_unwrap(a) for a in arrays], axis=axis))

    @tensordot_lookup.register(StrictArray)
    def _tensordot(a, b, axes=2):
        return StrictArray(np.tensordot(_unwrap(a), _unwrap(b), axes=axes))

    @einsum_lookup.register(StrictArray)
    def _einsum(*args, **kwargs):
        return StrictArray(np.einsum(*_unwrap(args), **kwargs))

    @empty_lookup.register(StrictArray)
    def _empty(*args, **kwargs):
        return StrictArray(np.empty(*args, **kwargs))

    @to_numpy_dispatch.register(StrictArray)
    def _to_numpy(x, **kwargs):
        return x.get()

    class StrictBackend(ArrayBackendEntrypoint):
        @property
        def RandomState(self):
            return np.random.RandomState

        @property
        def default_bit_generator(self):
            return np.random.PCG64

        ones = staticmethod(_on_numpy(da.ones))
        zeros = staticmethod(_on_numpy(da.zeros))
        empty = staticmethod(_on_numpy(da.empty))
        full = staticmethod(_on_numpy(da.full))
        arange = staticmethod(_on_numpy(da.arange))

        @staticmethod
        def to_backend(data, **kwargs):
            return data.map_blocks(_to_strict_block, meta=StrictArray(data._meta))

    array_creation_dispatch.register_backend("strict", StrictBackend())
    _registered = True


_META = StrictArray(np.empty((0,)))


def _on_numpy(create):
    """Make the array with NumPy chunks, then wrap each chunk (the strict backend's creators)."""
    def make(*args, like=None, **kwargs):
        import dask

        with dask.config.set({"array.backend": "numpy"}):
            arr = create(*args, **kwargs)
        return arr.map_blocks(_to_strict_block, dtype=arr.dtype, meta=StrictArray(arr._meta))
    return make


def _to_strict_block(block):
    return StrictArray(block)


def to_strict(t):
    """The same tensor values with StrictArray chunks (a leaf keeps ``requires_grad``)."""
    import dask.array as da

    from daskgrad import Tensor

    register()
    a = t.array
    arr = da.map_blocks(_to_strict_block, a, dtype=a.dtype, meta=StrictArray(a._meta))
    return Tensor._make(arr, requires_grad=t.requires_grad)
