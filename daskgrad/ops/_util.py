"""Shared helpers for the op modules: coercing operands and normalising axes."""
from __future__ import annotations

import numbers

import dask.array as da
import numpy as np

from ..tensor import Tensor

SCALARS = (numbers.Number,)


def tensor_or_scalar(x):
    """Tensors and Python scalars pass through (scalars stay weakly typed, as in torch);
    NumPy, cupy and dask arrays become constant tensors."""
    if isinstance(x, Tensor) or isinstance(x, SCALARS):
        return x
    if isinstance(x, da.Array):
        return Tensor._make(x)
    if hasattr(x, "__array_function__"):
        return Tensor._make(da.from_array(x, chunks=-1, asarray=False))
    raise TypeError(f"unsupported operand type: {type(x).__name__}")


def as_tensor(x) -> Tensor:
    x = tensor_or_scalar(x)
    if isinstance(x, Tensor):
        return x
    return Tensor._make(da.from_array(np.array(x), chunks=()))


def raw(x):
    return x.array if isinstance(x, Tensor) else x


def only_tensor(x):
    return x if isinstance(x, Tensor) else None


def check_same_device(*xs):
    devices = {x.device for x in xs if isinstance(x, Tensor) and x.ndim > 0}
    if len(devices) > 1:
        a, b = sorted(devices, reverse=True)[:2]
        a = f"{a}:0" if a == "cuda" else a
        raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, {a} and {b}!")


def norm_axes(axis, ndim):
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, int):
        axis = (axis,)
    return tuple(sorted(a % ndim if ndim else 0 for a in axis))


def numel(shape, axes) -> int:
    n = 1
    for a in axes:
        n *= shape[a]
    return n


def reduce_array(a, fn, axes, keepdims=False):
    """``da.<fn>`` over ``axes``; when every reduced axis is a single chunk (softmax over classes,
    a row norm), one fusable blockwise task per chunk instead of a reduction tree."""
    from dask.array.utils import meta_from_array

    from .. import chunk

    axes = norm_axes(axes, a.ndim)
    if not axes or any(len(a.chunks[ax]) != 1 for ax in axes):
        return getattr(da, fn)(a, axis=axes, keepdims=keepdims)
    ind = tuple(range(a.ndim))
    out_ind = ind if keepdims else tuple(i for i in ind if i not in axes)
    meta = getattr(np, fn)(a._meta, axis=axes, keepdims=keepdims) if a._meta.size else None
    dtype = getattr(np, fn)(np.ones((1,) * a.ndim, dtype=a.dtype), axis=axes).dtype
    return da.blockwise(chunk.reduce, out_ind, a, ind, fn=fn, axis=axes, keepdims=keepdims,
                        adjust_chunks={ax: 1 for ax in axes} if keepdims else None, dtype=dtype,
                        meta=meta_from_array(a._meta, ndim=len(out_ind), dtype=dtype) if meta is None else meta)
