"""NumPy's functions that are compositions of the differentiable ops: no rule of their own, their
gradient is their parts' (so every chunking, complex input and double backward they support comes
with them).  NumPy's names and argument conventions; torch's name as an alias where torch has one.
"""
from __future__ import annotations

import math
import numbers

import dask.array as da
import numpy as np

from .._tensor import Tensor
from ._util import as_tensor, norm_axis, public
from .elementwise import arctan2, conj, real, sign, where
from .indexing import getitem
from .shape import concatenate, flip, reshape, split, transpose


public(name="cat")(concatenate)  # torch's name


@public("ravel")
def ravel(x):
    """The elements in C order, as a 1-D tensor."""
    return reshape(x, (-1,))


@public()
def atleast_1d(x):
    x = as_tensor(x)
    return reshape(x, (1,)) if x.ndim == 0 else x


@public()
def atleast_2d(x):
    x = as_tensor(x)
    return reshape(x, (1,) * (2 - x.ndim) + x.shape) if x.ndim < 2 else x


@public()
def atleast_3d(x):
    """NumPy's rule: a 1-D ``(n,)`` becomes ``(1, n, 1)``, a 2-D ``(m, n)`` becomes ``(m, n, 1)``."""
    x = as_tensor(x)
    if x.ndim == 0:
        return reshape(x, (1, 1, 1))
    if x.ndim == 1:
        return reshape(x, (1, x.shape[0], 1))
    if x.ndim == 2:
        return reshape(x, x.shape + (1,))
    return x


@public()
def vstack(tensors):
    return concatenate([atleast_2d(t) for t in tensors], axis=0)


@public()
def hstack(tensors):
    ts = [atleast_1d(t) for t in tensors]
    return concatenate(ts, axis=0 if ts[0].ndim == 1 else 1)


@public()
def dstack(tensors):
    return concatenate([atleast_3d(t) for t in tensors], axis=2)


@public()
def column_stack(tensors):
    ts = [as_tensor(t) for t in tensors]
    return concatenate([reshape(t, (t.shape[0], 1)) if t.ndim < 2 else t for t in ts], axis=1)


@public()
def append(arr, values, axis=None):
    """NumPy's ``append``: both raveled when ``axis`` is None."""
    if axis is None:
        return concatenate([ravel(arr), ravel(values)], axis=0)
    return concatenate([arr, values], axis=axis)


@public()
def array_split(x, indices_or_sections, axis=0):
    """NumPy's ``array_split``: like ``split``, but ``n`` sections need not divide the axis (the
    first ``len % n`` sections are one longer)."""
    x = as_tensor(x)
    if not isinstance(indices_or_sections, numbers.Integral):
        return split(x, indices_or_sections, axis)
    n = int(indices_or_sections)
    if n <= 0:
        raise ValueError("number sections must be larger than 0.")
    length = x.shape[norm_axis(axis, x.ndim)]
    each, extra = divmod(length, n)
    sizes = [each + 1] * extra + [each] * (n - extra)
    return split(x, [int(c) for c in np.cumsum(sizes)[:-1]], axis)


def _split_at_least(x, sections, axis, need, name):
    x = as_tensor(x)
    if x.ndim < need:
        raise ValueError(f"{name} only works on arrays of {need} or more dimensions")
    return split(x, sections, axis)


@public()
def hsplit(x, indices_or_sections):
    x = as_tensor(x)
    return _split_at_least(x, indices_or_sections, 0 if x.ndim == 1 else 1, 1, "hsplit")


@public()
def vsplit(x, indices_or_sections):
    return _split_at_least(x, indices_or_sections, 0, 2, "vsplit")


@public()
def dsplit(x, indices_or_sections):
    return _split_at_least(x, indices_or_sections, 2, 3, "dsplit")


@public("repeat_interleave")
def repeat(x, repeats, axis=None):
    """NumPy's ``repeat`` (torch's ``repeat_interleave``): each element ``repeats`` times along
    ``axis`` (the raveled tensor when None); ``repeats`` an int or one count per element."""
    x = as_tensor(x)
    if axis is None:
        x, axis = ravel(x), 0
    axis = norm_axis(axis, x.ndim)
    n = x.shape[axis]
    counts = np.broadcast_to(np.asarray(repeats), (n,)) if np.ndim(repeats) == 0 else np.asarray(repeats)
    if counts.shape != (n,) or (counts < 0).any():
        raise ValueError(f"repeats must be a non-negative int or {n} non-negative ints for an axis of length {n}")
    index = np.repeat(np.arange(n), counts)  # host integers the user gave: a gather, summed back in backward
    return getitem(x, (slice(None),) * axis + (index,))


@public()
def tile(x, reps):
    """NumPy's ``tile``: ``reps`` copies along each axis (the shorter of the two padded with ones)."""
    x = as_tensor(x)
    reps = (reps,) if isinstance(reps, numbers.Integral) else tuple(reps)
    if any(r < 0 for r in reps):
        raise ValueError("negative dimensions are not allowed")
    d = max(x.ndim, len(reps))
    x = reshape(x, (1,) * (d - x.ndim) + x.shape)
    reps = (1,) * (d - len(reps)) + reps
    for axis, r in enumerate(reps):
        if r != 1:
            x = concatenate([x] * r, axis=axis) if r else getitem(x, (slice(None),) * axis + (slice(0, 0),))
    return x


@public()
def flipud(x):
    x = as_tensor(x)
    if x.ndim < 1:
        raise ValueError("Input must be >= 1-d.")
    return flip(x, 0)


@public()
def fliplr(x):
    x = as_tensor(x)
    if x.ndim < 2:
        raise ValueError("Input must be >= 2-d.")
    return flip(x, 1)


@public("rot90")
def rot90(x, k=1, axes=(0, 1)):
    """NumPy's ``rot90``: ``k`` quarter turns from the first of ``axes`` towards the second."""
    x = as_tensor(x)
    if len(axes) != 2:
        raise ValueError("len(axes) must be 2.")
    a0, a1 = norm_axis(axes[0], x.ndim), norm_axis(axes[1], x.ndim)
    if a0 == a1:
        raise ValueError("Axes must be different.")
    k %= 4
    if k == 0:
        return x
    if k == 2:
        return flip(flip(x, a0), a1)
    perm = list(range(x.ndim))
    perm[a0], perm[a1] = perm[a1], perm[a0]
    return transpose(flip(x, a1), perm) if k == 1 else flip(transpose(x, perm), a1)


@public("imag")
def imag(x):
    """The imaginary part (differentiable); zeros for a real tensor, as NumPy's."""
    x = as_tensor(x)
    if x.dtype.kind != "c":
        return x * 0
    return real(x * -1j)


public("real")(real)
public("conj")(conj)
public(name="conjugate")(conj)


@public("angle")
def angle(x, deg=False):
    """The argument of a complex number (``pi`` or 0 for a real one, whose gradient is 0, as torch's)."""
    x = as_tensor(x)
    if x.dtype.kind == "c":
        out = arctan2(imag(x), real(x))
    else:
        out = where(x < 0, math.pi, 0.0) + sign(x) * 0.0
    return out * (180 / math.pi) if deg else out


@public()
def linspace(start, stop, num=50, endpoint=True, dtype=None, chunks="auto", requires_grad=False):
    """NumPy's ``linspace`` as a leaf tensor, chunked like dask's."""
    t = Tensor._make(da.linspace(start, stop, num, endpoint=endpoint, dtype=dtype, chunks=chunks))
    return t.requires_grad_(requires_grad) if requires_grad else t
