"""dask.array's NumPy functions that rearrange, join or thin tensors (``block``, ``insert``,
``delete``, ``rollaxis``, ``coarsen``, ``topk`` ...): compositions of the shape, indexing and
reduction ops, so their gradient is their parts'.
"""
from __future__ import annotations

import numpy as np

from .._tensor import Tensor
from ._util import as_tensor, constant_like, norm_axis, public
from .composite import along_axis, nanmax, nanmean, nanmin, nansum, ravel
from .elementwise import astype
from .indexing import argsort, getitem, sort
from .numpy_extra import _check_host_index, _on_device, nanprod
from .reductions import amax, amin, mean, prod, sum
from .shape import broadcast_to, concatenate, flip, moveaxis, reshape, stack, transpose


@public()
def broadcast_arrays(*args):
    """The tensors broadcast to one shape (a list), each differentiable."""
    ts = [as_tensor(t) for t in args]
    shape = _broadcast_shape(*(t.shape for t in ts))
    return [t if _same(t.shape, shape) else broadcast_to(t, shape) for t in ts]


def _same(a, b):
    return len(a) == len(b) and all(m == n or (m != m and n != n) for m, n in zip(a, b))


def _broadcast_shape(*shapes):
    """NumPy's ``broadcast_shapes``, where a length not known until computed (NaN, rows after a boolean mask) meets
    itself or 1 (it stays NaN)."""
    if all(n == n for s in shapes for n in s):
        return np.broadcast_shapes(*shapes)
    nd = max(len(s) for s in shapes)
    out = []
    for i in range(nd):
        sizes = [s[i - nd + len(s)] for s in shapes if i - nd + len(s) >= 0]
        known = {n for n in sizes if n == n and n != 1}
        if len(known) > 1:
            return np.broadcast_shapes(*(tuple(1 if n != n else n for n in s) for s in shapes))  # (NumPy's error)
        out.append(next(iter(known)) if known else next((n for n in sizes if n != n), 1))
    return tuple(out)


public(name="broadcast_tensors")(broadcast_arrays)  # torch's name


@public()
def rollaxis(a, axis, start=0):
    """NumPy's ``rollaxis`` (``moveaxis`` with its older convention for the destination)."""
    a = as_tensor(a)
    axis = norm_axis(axis, a.ndim)
    if not -a.ndim <= start <= a.ndim:
        raise np.exceptions.AxisError(f"'start' arg requires {-a.ndim} <= start < {a.ndim + 1}, but {start} was "
                                      "passed in")
    start = start % (a.ndim + 1) if start < 0 else start
    if axis < start:
        start -= 1
    return a if axis == start else moveaxis(a, axis, start)


@public()
def ediff1d(ary, to_end=None, to_begin=None):
    """The differences of the raveled tensor, with ``to_begin``/``to_end`` joined at the ends."""
    flat = ravel(ary)
    parts = [getitem(flat, (slice(1, None),)) - getitem(flat, (slice(None, -1),))]
    for extra, at in ((to_begin, 0), (to_end, len(parts) + 1)):
        if extra is not None:
            e = ravel(as_tensor(extra) if isinstance(extra, Tensor) else _on_device(np.ravel(extra), flat))
            parts.insert(at if at == 0 else len(parts), e)
    return concatenate(parts, axis=0) if len(parts) > 1 else parts[0]


@public()
def delete(arr, obj, axis=None):
    """NumPy's ``delete``: ``arr`` without the entries ``obj`` (an int, a slice or host integers) along ``axis``."""
    arr, axis = along_axis(arr, axis)
    n = arr.shape[axis]
    keep = np.ones(n, dtype=bool)
    if isinstance(obj, slice):
        keep[obj] = False
    else:
        gone = np.asarray(obj)
        if gone.dtype.kind == "b":
            keep = ~np.broadcast_to(gone, (n,))
        else:
            _check_host_index(gone, n, axis)
            keep[gone] = False
    return getitem(arr, (slice(None),) * axis + (np.flatnonzero(keep),))


def _insert_positions(obj, n, axis):
    """NumPy's reading of ``insert``'s ``obj``: ``(positions, scalar)``, the positions an int list in
    the user's order (negatives counted from the end), ``scalar`` when ``obj`` is one integer."""
    if isinstance(obj, slice):
        return list(range(*obj.indices(n))), False
    if isinstance(obj, Tensor):
        raise TypeError("insert: obj must be host positions (an int, a sequence of ints or a slice), not a Tensor")
    idx = np.asarray(obj)
    if idx.dtype == bool:
        if idx.ndim != 1:
            raise ValueError("boolean array argument obj to insert must be one dimensional")
        idx = np.flatnonzero(idx)
    elif idx.ndim > 1:
        raise ValueError("index array argument obj to insert must be one dimensional or scalar")
    if idx.size and idx.dtype.kind not in "iu":
        raise IndexError("arrays used as indices must be of integer (or boolean) type")
    positions = [int(i) for i in idx.reshape(-1)]
    for i in positions:
        if not -n <= i <= n:
            raise IndexError(f"index {i if len(positions) > 1 else obj} is out of bounds for axis {axis} "
                             f"with size {n}")
    return [i + n if i < 0 else i for i in positions], idx.ndim == 0


@public()
def insert(arr, obj, values, axis=None):
    """NumPy's ``insert``: ``values`` placed before the positions ``obj`` (an int, a sequence of ints
    or a slice, each counted in ``arr`` as it was) along ``axis`` (of the flattened ``arr`` when None),
    with NumPy's broadcasting of ``values``; differentiable in ``arr`` and ``values``."""
    arr, axis = along_axis(arr, axis)
    n = arr.shape[axis]
    positions, scalar = _insert_positions(obj, n, axis)
    v = as_tensor(values) if isinstance(values, Tensor) else _on_device(np.asarray(values), arr)
    v = astype(v, arr.dtype) if v.dtype != arr.dtype else v
    pre = (slice(None),) * axis
    if len(positions) == 1:  # NumPy's one-position rule: values as a block of slices, however many
        if v.ndim < arr.ndim:
            v = reshape(v, (1,) * (arr.ndim - v.ndim) + v.shape)
        v = moveaxis(v, 0, axis) if scalar else v
        shape = list(arr.shape)
        shape[axis] = v.shape[axis]
        v, p = broadcast_to(v, tuple(shape)), positions[0]
        return concatenate([getitem(arr, pre + (slice(0, p),)), v, getitem(arr, pre + (slice(p, None),))], axis=axis)
    shape = list(arr.shape)
    shape[axis] = len(positions)
    v = broadcast_to(v, tuple(shape))  # the k-th slice goes before arr's positions[k]
    pieces, start = [], 0
    for k in sorted(range(len(positions)), key=positions.__getitem__):  # stable, as NumPy's mergesort
        pieces += [getitem(arr, pre + (slice(start, positions[k]),)), getitem(v, pre + (slice(k, k + 1),))]
        start = positions[k]
    pieces.append(getitem(arr, pre + (slice(start, None),)))
    return concatenate([p for p in pieces if p.shape[axis]] or [getitem(arr, pre + (slice(0, 0),))], axis=axis)


@public()
def topk(a, k, axis=-1, split_every=None):
    """dask's ``topk``: the ``k`` largest values along ``axis``, largest first (the ``-k`` smallest,
    smallest first, for negative ``k``); the axis becomes one chunk.  (torch's ``topk`` returns values
    and indices: ``take_along_axis(a, argtopk(a, k))`` gives the values this way too.)"""
    s = sort(a, axis=axis)
    ax = norm_axis(axis, s.ndim)
    pre = (slice(None),) * ax
    return flip(getitem(s, pre + (slice(-k, None),)), ax) if k > 0 else getitem(s, pre + (slice(0, -k),))


@public()
def argtopk(a, k, axis=-1, split_every=None):
    """The indices :func:`topk` takes (an integer tensor, not differentiable)."""
    i = argsort(a, axis=axis)
    ax = norm_axis(axis, i.ndim)
    pre = (slice(None),) * ax
    return flip(getitem(i, pre + (slice(-k, None),)), ax) if k > 0 else getitem(i, pre + (slice(0, -k),))


# ------------------------------------------------------------------ assembling
class _AxisConcatenator:
    """NumPy's ``r_``/``c_``: ``dg.r_[x, 0:3, y, 1.5]`` joins tensors, arrays, numbers and ranges (a
    slice is ``arange``, or ``linspace`` with a complex step ``0:1:5j``) along an axis, each raised to
    ``ndmin`` axes as NumPy raises them; a leading string ``"axis[,ndmin[,trans1d]]"`` sets those.
    The join is ``concatenate``, so it is lazy and differentiable in the tensors joined."""

    def __init__(self, axis, ndmin, trans1d, name):
        self.axis, self.ndmin, self.trans1d, self.__name__ = axis, ndmin, trans1d, name
        self.__doc__ = type(self).__doc__

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        axis, ndmin, trans1d = self.axis, self.ndmin, self.trans1d
        parts, scalars = [], []
        tensor = next((item for item in key if isinstance(item, Tensor)), None)

        def constant(host):  # on the tensors' chunk type, where they are device arrays
            return as_tensor(host) if tensor is None else constant_like(host, tensor.array._meta)

        for k, item in enumerate(key):
            if isinstance(item, str):
                if k:
                    raise ValueError("special directives must be the first entry.")
                if item in ("r", "c"):
                    raise NotImplementedError(f"{self.__name__}['{item}', ...]: daskgrad has no matrix type")
                axis, ndmin, trans1d = self._directive(item)
                continue
            if isinstance(item, slice):
                part, scalar = constant(self._range(item)), False
            elif isinstance(item, Tensor):
                part, scalar = item, False
            else:
                part, scalar = constant(item), not np.ndim(item)
                scalars += [item] if scalar else []
            parts.append((self._raised(part, ndmin, trans1d), scalar))
        tensors = [t.dtype for t, scalar in parts if not scalar]
        dtype = np.result_type(*tensors, *scalars) if tensors else np.result_type(*[t.dtype for t, _ in parts])
        return concatenate([astype(t, dtype) if t.dtype != dtype else t for t, _ in parts], axis=axis)

    @staticmethod
    def _directive(text):
        try:
            values = [int(v) for v in text.split(",")]
        except ValueError:
            raise ValueError(f"unknown special directive {text!r}") from None
        defaults = [0, 1, -1]
        return tuple(values[:3] + defaults[len(values):])

    @staticmethod
    def _range(item):
        start = 0 if item.start is None else item.start
        step = 1 if item.step is None else item.step
        if isinstance(step, (complex, np.complexfloating)):
            return np.linspace(start, item.stop, int(abs(step)))
        return np.arange(start, item.stop, step)

    @staticmethod
    def _raised(t, ndmin, trans1d):
        """NumPy's ``array(t, ndmin=ndmin)``, then its ``trans1d`` move of the original axes."""
        if t.ndim >= ndmin:
            return t
        k2 = ndmin - t.ndim
        raised = reshape(t, (1,) * k2 + t.shape)
        if trans1d == -1:
            return raised
        k1 = trans1d + k2 + 1 if trans1d < 0 else trans1d
        order = list(range(ndmin))
        order = order[:k1] + order[k2:] + order[k1:k2]
        return raised if order == sorted(order) else transpose(raised, tuple(order))


# (objects, as NumPy's: daskgrad.r_ and daskgrad.c_, not ops of the table)
r_ = _AxisConcatenator(0, 1, -1, "r_")
c_ = _AxisConcatenator(-1, 2, 0, "c_")


@public()
def block(arrays):
    """NumPy's ``block``: nested lists of tensors joined, the innermost lists along the last axis."""
    def depth(a):
        return 1 + depth(a[0]) if isinstance(a, list) and a else 0

    def leaves(a):
        return [t for e in a for t in leaves(e)] if isinstance(a, list) else [as_tensor(a)]

    if isinstance(arrays, tuple):
        raise TypeError("arrays is a tuple. Only lists can be used to arrange blocks, and np.block does not allow "
                        "implicit conversion from tuple to ndarray.")
    d = depth(arrays)
    ndim = max([d] + [t.ndim for t in leaves(arrays)])

    def join(a, level):
        if isinstance(a, list):
            return concatenate([join(e, level + 1) for e in a], axis=ndim - (d - level))
        t = as_tensor(a)
        return reshape(t, (1,) * (ndim - t.ndim) + t.shape) if t.ndim < ndim else t

    return join(arrays, 0)


@public()
def coarsen(reduction, x, axes, trim_excess=False, **kwargs):
    """dask's ``coarsen``: ``reduction`` (NumPy's ``sum``, ``mean``, ``max`` ... or the daskgrad op)
    over each block of ``axes[k]`` neighbours along axis ``k``, differentiable as that reduction."""
    x = as_tensor(x)
    op = {"sum": sum, "mean": mean, "prod": prod, "max": amax, "min": amin, "amax": amax, "amin": amin,
          "nansum": nansum, "nanmean": nanmean, "nanmax": nanmax, "nanmin": nanmin, "nanprod": nanprod,
          }.get(getattr(reduction, "__name__", None))
    if op is None:
        raise NotImplementedError(f"coarsen with {reduction!r}: daskgrad coarsens with sum, mean, prod, max, min "
                                  "and their nan* forms")
    axes = {norm_axis(k, x.ndim): int(f) for k, f in axes.items()}
    if trim_excess:
        x = getitem(x, tuple(slice(0, n - n % axes[k]) if k in axes else slice(None) for k, n in enumerate(x.shape)))
    if any(x.shape[k] % f for k, f in axes.items()):
        raise ValueError(f"Coarsening factors {axes} do not align with array shape {x.shape}.")
    shape, reduced = [], []
    for k, n in enumerate(x.shape):
        f = axes.get(k, 1)
        shape += [n // f, f]
        reduced.append(2 * k + 1)
    return op(reshape(x, tuple(shape)), axis=tuple(reduced), **kwargs)


@public()
def sliding_window_view(x, window_shape, axis=None, *, subok=False, writeable=False):
    """NumPy's ``lib.stride_tricks.sliding_window_view``: every window of ``window_shape`` along ``axis``
    (all axes when None), as new last axes; the windows are slices stacked (a copy, not a view:
    ``writeable`` must stay False), so each value's gradient sums over the windows holding it."""
    if writeable:
        raise ValueError("sliding_window_view of a daskgrad Tensor cannot be writeable: the windows are a copy")
    x = as_tensor(x)
    window_shape = tuple(window_shape) if np.iterable(window_shape) else (window_shape,)
    if axis is None:
        if len(window_shape) != x.ndim:
            raise ValueError(f"Since axis is `None`, must provide window_shape for all dimensions of `x`; got "
                             f"{len(window_shape)} window_shape elements and `x.ndim` is {x.ndim}.")
        axes = tuple(range(x.ndim))
    else:
        axes = tuple(norm_axis(a, x.ndim) for a in (axis if np.iterable(axis) else (axis,)))
        if len(window_shape) != len(axes):
            raise ValueError(f"Must provide matching length window_shape and axis; got {len(window_shape)} "
                             f"window_shape elements and {len(axes)} axes elements.")
    if any(w < 0 for w in window_shape):
        raise ValueError("`window_shape` cannot contain negative values")
    out = x
    for ax, w in zip(axes, window_shape):
        n = out.shape[ax] - w + 1
        if n < 0:
            raise ValueError("window shape cannot be larger than input array shape")
        pre = (slice(None),) * ax
        out = stack([getitem(out, pre + (slice(k, k + n),)) for k in range(w)], axis=-1)
    return out
