"""Shared helpers for the op modules: coercing operands and normalising axes."""
from __future__ import annotations

import numbers

import dask.array as da

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
    import numpy as np

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
