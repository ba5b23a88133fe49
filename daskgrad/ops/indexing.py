"""Indexing: ``x[index]`` and the out-of-place ``x[index] = value`` (contract: see ``elementwise.py``).

Basic indexing (ints, slices, None, Ellipsis) is dask's own, and its rule writes the cotangent into
zeros of the primal's shape.  The rest is built here from ``take`` and ``where``, because dask.array
lacks two things torch has: integer arrays on several axes at once (it raises "Don't yet support nd
fancy indexing") and masked assignment of a tensor in general (it takes only a 1-D mask, and an
array value only through a concrete one).  So pointwise integer arrays become one ``take`` along
their axes flattened into one, whose rule is a one-hot contraction (repeated indices accumulate),
and a masked assignment becomes a ``where`` whose tensor value is first gathered, by a ``take``, to
the mask's true places.  Integer-array indexing saves its index (as torch's IndexBackward0 does)
and boolean-mask indexing its mask; basic indexing saves nothing.
"""
from __future__ import annotations

import dask.array as da
import numpy as np
from dask.array.utils import meta_from_array

from .. import _dask as door, chunk
from ..graph import View, primitive
from .._tensor import Tensor, layout
from . import _util
from ._util import as_tensor, public, raw
from .shape import broadcast_to, moveaxis, permute, rechunk, reshape


def _meta(x):
    return (x.shape, x.dtype, x.chunks, x._storage.value._meta)


def _zeros(meta):
    shape, dtype, chunks, m = meta
    return da.zeros(shape, dtype=dtype, chunks=chunks, meta=m)


def _expand_index(index, ndim):
    index = index if isinstance(index, tuple) else (index,)
    consumed = sum(1 for i in index if i is not None and i is not Ellipsis)
    out = []
    for i in index:
        if i is Ellipsis:
            out.extend([slice(None)] * (ndim - consumed))
        else:
            out.append(i)
    if not any(i is Ellipsis for i in index):
        out.extend([slice(None)] * (ndim - consumed))
    return tuple(out)


def _is_mask(i):
    # a numpy dtype equals the type bool (`is` would not see it)
    return getattr(i, "dtype", None) == bool or (isinstance(i, list) and bool(i) and isinstance(i[0], bool))  # noqa: E721


def _is_array_index(i):
    return isinstance(i, (list, np.ndarray, da.Array, Tensor))


def _index_geometry(shape, strides, offset, index):
    """torch's shape, strides and storage offset of ``x[index]`` (ints, slices, None), one index at a
    time as torch applies them (a None's stride comes from the axis it lands before); None for an
    index torch copies for, or of a tensor whose lengths are unknown (after a boolean mask: a copy, as
    reshape's)."""
    if any(n != n for n in shape):
        return None
    shape, strides, d = list(shape), list(strides), 0
    for i in index:
        if i is None:
            strides.insert(d, shape[d] * strides[d] if d < len(shape) else 1)
            shape.insert(d, 1)
            d += 1
        elif isinstance(i, slice):
            start, stop, step = i.indices(shape[d])
            offset += start * strides[d]
            shape[d], strides[d] = len(range(start, stop, step)), strides[d] * step
            d += 1
        elif isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
            return None  # (a bool is a 0-d mask, an array an advanced index: torch copies)
        else:
            offset += (int(i) % shape[d]) * strides[d]
            del shape[d], strides[d]
    return tuple(shape), tuple(strides), offset


def _index_layout(x_shape, x_strides, x_offset, out_shape, *, index, meta):
    geometry = _index_geometry(x_shape, x_strides, x_offset, index)
    return None if geometry is None else geometry[1:]


def region(x, index):
    """(shape, strides, offset) of the part of ``x`` that ``x[index]`` writes, for a basic index; None
    for another (the whole of ``x`` may be written)."""
    index = index if isinstance(index, tuple) else (index,)
    if any(isinstance(i, (list, tuple, np.ndarray, Tensor, da.Array)) for i in index):
        return None
    try:
        index = _expand_index(index, x.ndim)
    except TypeError:
        return None
    if sum(1 for i in index if i is not None) != x.ndim:
        return None
    strides, offset = layout(x)
    return _index_geometry(x.shape, strides, offset, index)


def _put_index(a, new, index):
    """``a`` with ``new`` written at basic ``index`` (whose None axes ``new`` has)."""
    kept = tuple(i for i in index if i is not None)
    new_axes, pos = [], 0
    for i in index:
        if i is None:
            new_axes.append(pos)
        if not isinstance(i, (int, np.integer)):
            pos += 1
    new = new.squeeze(axis=tuple(new_axes)) if new_axes else new
    if not new.size:  # nothing is written (dask's assignment of an empty value raises)
        return a
    out = a.copy()
    out[kept] = new
    return out


# a basic index views its tensor; torch names the node of a slice, a select, a None, an alias (x[...]) and
# of each output of the ops that return several views (unbind, split, chunk: see ops/views.py)
getitem_p = primitive("getitem", torch=("SliceBackward0", "SelectBackward0", "UnsqueezeBackward0", "AliasBackward0",
                                        "UnbindBackward0", "SplitBackward0", "SplitWithSizesBackward0"),
                      impl=door.basic_index,
                      view=View(_index_layout, lambda a, new, *, index, meta: _put_index(a, new, index)))
getitem_p.vjp(lambda g, s, *, index, meta: (scatter_p.bind(g, index=index, meta=meta),))


def _as_int(i):
    """A 0-d integer index tensor as the int it holds, as torch reads it (``x[t(1), :, t([0, 2])]``
    selects first); its value is read, as torch's."""
    if getattr(i, "ndim", None) == 0 and np.dtype(i.dtype).kind in "iu":
        return int(i.compute())
    return i


def _side_by_side(places):
    """Whether index places are consecutive: ints and arrays side by side land where NumPy and torch
    both put them; apart, NumPy puts the arrays' axes first and torch applies the ints first."""
    places = sorted(places)
    return places == list(range(places[0], places[0] + len(places)))


def _bool_scalars(x, items):
    """``x[True]``, ``x[:, False]``: as torch, the bools together one advanced index of length 1 (all
    True) or 0: a new axis where the first is, or first of all where others come between them; a copy."""
    if any(isinstance(i, (list, np.ndarray, Tensor, da.Array)) for i in items):
        raise IndexError("indexing with a Python bool next to array indices is not supported")
    at = [k for k, i in enumerate(items) if type(i) in (bool, np.bool_)]
    keep = all(items[k] for k in at)
    if at != list(range(at[0], at[0] + len(at))):  # (not side by side: NumPy's and torch's rule puts it first)
        at = [0]
        items = (None,) + tuple(i for i in items if type(i) not in (bool, np.bool_))
    else:
        items = items[:at[0]] + (None,) + tuple(i for i in items[at[0]:] if type(i) not in (bool, np.bool_))
    consumed = sum(1 for i in items if i is not None and i is not Ellipsis)
    ax = 0  # the new axis's place in the result
    for i in items[:at[0]]:
        ax += 1 if i is None or isinstance(i, slice) else x.ndim - consumed if i is Ellipsis else 0
    out = getitem(x, items)
    if not keep:
        out = getitem(out, (slice(None),) * ax + (slice(0, 0),))
    return out.clone()


@public("__getitem__")
def getitem(x, index):
    """NumPy indexing: ints, slices (negative steps too), None, Ellipsis, one integer
    array (repeated indices accumulate in backward) or a boolean mask."""
    x = as_tensor(x)
    if any(type(i) in (bool, np.bool_) for i in (index if isinstance(index, tuple) else (index,))):
        return _bool_scalars(x, index if isinstance(index, tuple) else (index,))
    one_slice = isinstance(index, slice)  # (torch slices x[:], where x[:, :] is an alias of x)
    if isinstance(index, list) and any(isinstance(i, (list, tuple, slice, np.ndarray, Tensor, da.Array))
                                       or i is None or i is Ellipsis for i in index):
        index = tuple(index)  # torch (and old NumPy) read a list holding sequences as a tuple of indices
    index = _expand_index(tuple(_as_int(raw(i)) if isinstance(i, Tensor) else i
                                for i in (index if isinstance(index, tuple) else (index,))), x.ndim)
    _check_bounds(index, x.shape)
    arrays = [k for k, i in enumerate(index) if _is_array_index(i)]
    ints = [k for k, i in enumerate(index) if isinstance(i, (int, np.integer))]
    if (arrays and ints and not _side_by_side(arrays + ints)  # (side by side: NumPy's places are torch's)
            and all(np.ndim(index[k]) == 1 for k in arrays)  # (N-d ones: NumPy's points, as before)
            and sum(i is not None for i in index) == x.ndim):
        # torch applies the ints first, as basic indexing, then the arrays to what is left: x[1, :, [0, 2]]
        # is x[1][:, [0, 2]], (3, 2) of a (2, 3, 4) x, where NumPy's rule puts the array's axis first (2, 3)
        basic = tuple(i if k in ints or i is None else slice(None) for k, i in enumerate(index))
        return getitem(getitem(x, basic), tuple(slice(None) if i is None else i for k, i in enumerate(index)
                                                if k not in ints))
    if arrays:
        first = index[arrays[0]]
        if _is_mask(first) and isinstance(first, (list, np.ndarray)):  # a host mask: its True places, known
            k = arrays[0]
            return getitem(x, index[:k] + tuple(np.nonzero(np.asarray(first))) + index[k + 1:])
        if _is_mask(first):
            k = arrays[0]
            if k == 0 and len(arrays) == 1 and all(i == slice(None) for i in index[1:]):
                return _mask_select(x, first)  # x[mask], x[mask, ...]: lazily, its length unknown
            # elsewhere (x[:, mask], x[mask, 1]) its True places, as torch finds them: a mask is read
            if type(first._meta) is not np.ndarray:  # (a device mask is not copied to the host unasked)
                raise IndexError("a boolean tensor mask on the device is taken as the first index only (x[mask]); "
                                 "for x[:, mask] pass mask.cpu()")
            return getitem(x, index[:k] + tuple(np.nonzero(np.asarray(first.compute()))) + index[k + 1:])
        points = [k for k, i in enumerate(index) if _is_array_index(i) or isinstance(i, (int, np.integer))]
        if all(i is not None for i in index) and any(i != slice(None) for k, i in enumerate(index) if k not in points):
            # NumPy's mixed indexing (x[3, 2:, [1, 3]]): the slices first, as a basic index that keeps
            # every axis, then the integer arrays (and ints) on the result, placed as NumPy places them
            x = getitem(x, tuple(slice(None) if k in points else i for k, i in enumerate(index)))
            index = tuple(i if k in points else slice(None) for k, i in enumerate(index))
        if len(points) > 1:
            return _take_points(x, index, points)
        return _take(x, np.array(first) if isinstance(first, list) else first, arrays[0], index)
    return getitem_p.bind(x, node="SliceBackward0" if one_slice else _index_node(index, x.shape), index=index,
                          meta=_meta(x))


def _index_node(index, shape):
    """torch's node of ``x[index]``: that of the last op its indexing applies, one index at a time (a
    full slice applies none; none at all is an alias)."""
    name, d = "AliasBackward0", 0
    for i in index:
        if i is None:
            name = "UnsqueezeBackward0"
            continue
        if not isinstance(i, slice):
            name = "SelectBackward0"
        elif shape[d] != shape[d] or i.indices(shape[d]) != (0, shape[d], 1):
            name = "SliceBackward0"
        d += 1
    return name


def _points(x, index, axes):
    """NumPy's pointwise indexing by several integer arrays (ints count as 0-d arrays) as one
    integer array over those axes flattened: ``(linear indices, broadcast shape, position of the
    result's broadcast axes)``.  dask.array has no such indexing; a take along one flattened axis
    is what it has (and its VJP accumulates repeated points)."""
    if any(index[k] != slice(None) for k in range(len(index)) if k not in axes) or any(i is None for i in index):
        raise NotImplementedError("integer-array indices on several axes must be combined with full slices only")
    sizes = tuple(x.shape[k] for k in axes)
    adjacent = list(axes) == list(range(axes[0], axes[0] + len(axes)))
    if any(isinstance(index[k], da.Array) for k in axes):  # (a tensor index, as getitem hands it on)
        lin, shape = _lazy_linear(index, axes, sizes)
        return lin, shape, axes[0] if adjacent else 0
    idx = np.broadcast_arrays(*[np.asarray(index[k]) for k in axes])
    lin = np.ravel_multi_index(tuple(i % n for i, n in zip(idx, sizes)), sizes).ravel()
    return lin, idx[0].shape, axes[0] if adjacent else 0


def _lazy_linear(index, axes, sizes):
    """The linear indices of pointwise integer arrays over ``axes`` (of lengths ``sizes``), one of them
    lazy, as a 1-D dask array, and their broadcast shape: each index checked and wrapped in the task
    that reads it, as a lone lazy index is (:func:`_check_index`)."""
    parts = []
    for k in axes:
        i = index[k]
        if not isinstance(i, da.Array):
            i = np.asarray(i)
            i = da.from_array(i.astype(np.intp) if i.size == 0 else i, chunks=-1)  # (an empty list is float)
        parts.append(i)
    if any(p.dtype.kind == "b" for p in parts) or any(n != n for p in parts for n in p.shape):
        raise NotImplementedError("integer-array indices on several axes, one of them lazy, must be integer "
                                  "arrays of known lengths (a boolean index beside them must be concrete)")
    if any(p.dtype.kind not in "iu" for p in parts):
        raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
    parts = da.broadcast_arrays(*parts)
    lin = None
    for p, n, k in zip(parts, sizes, axes):
        flat = p.ravel()
        wrapped = flat.map_blocks(_check_index, n, k, dtype=flat.dtype, meta=flat._meta).astype(np.int64)
        lin = wrapped if lin is None else lin * n + wrapped
    return lin, parts[0].shape


def _move(x, source, destination):
    """``np.moveaxis`` with lists of axes, as one permute (identity: no node)."""
    order = [n for n in range(x.ndim) if n not in source]
    for dst, src in sorted(zip(destination, source)):
        order.insert(dst, src)
    return x if order == list(range(x.ndim)) else permute(x, tuple(order))


def _flat_over(x, axes):
    """``x`` with ``axes`` moved to the front and flattened into one (and how to undo it)."""
    rest = tuple(n for k, n in enumerate(x.shape) if k not in axes)
    moved = _move(x, list(axes), list(range(len(axes))))
    return reshape(moved, (int(np.prod([x.shape[k] for k in axes])),) + rest), rest


def _take_points(x, index, axes):
    lin, bshape, pos = _points(x, index, axes)
    flat, rest = _flat_over(x, axes)
    out = reshape(_take(flat, lin, 0, (slice(None),) * flat.ndim), bshape + rest)
    if pos:  # adjacent advanced axes keep their place, as in NumPy (separated ones go first)
        out = _move(out, list(range(len(bshape))), list(range(pos, pos + len(bshape))))
    return out


def _set_points(x, index, axes, value):
    """``x[index] = value`` for pointwise integer-array indices, through one flattened axis."""
    if any(isinstance(index[k], (da.Array, Tensor)) for k in axes):
        raise NotImplementedError("integer-array indices on several axes must be concrete (lists or NumPy arrays) "
                                  "to assign through")
    lin, bshape, pos = _points(x, index, axes)
    flat, rest = _flat_over(x, axes)
    if isinstance(value, Tensor):
        nb = len(bshape)
        shape = rest[:pos] + bshape + rest[pos:]
        value = broadcast_to(value, shape) if value.shape != shape else value
        if pos:
            value = _move(value, list(range(pos, pos + nb)), list(range(nb)))
        value = reshape(value, (len(lin),) + rest)
    out = setitem(flat, (lin,), value)
    return _move(reshape(out, tuple(x.shape[k] for k in axes) + rest), list(range(len(axes))), list(axes))


def _set_mask(x, mask, value):
    """``x[mask] = value`` as a ``where``: dask.array assigns through a boolean mask only with a scalar
    and a 1-D mask.  A tensor value's elements are gathered to the mask's true places in order (the
    running count of the mask indexes it), so its gradient is the cotangent at those places."""
    from .elementwise import where
    from .reductions import cumsum

    concrete = not isinstance(mask, (da.Array, Tensor))
    m = as_tensor(da.from_array(np.asarray(mask), chunks=-1) if concrete else mask)
    if m.ndim > x.ndim or tuple(x.shape[:m.ndim]) != tuple(m.shape):
        raise IndexError(f"The shape of the mask {list(m.shape)} at index 0 does not match the shape of the "
                         f"indexed tensor {list(x.shape)} at index 0")
    rest = x.shape[m.ndim:]
    cond = reshape(m, tuple(m.shape) + (1,) * len(rest)) if rest else m
    if isinstance(value, Tensor) and value.ndim and value.shape[0] != value.shape[0]:
        # an unknown length: a masked selection itself (``t[mask] += v``), one block per row block of the
        # mask, written back block by block (a block holding another count of values raises in its task)
        rows = _rows_only(m.array.rechunk(x.chunks[:m.ndim]))
        if len(value.chunks[0]) != len(rows.chunks[0]):
            raise NotImplementedError("assigning a tensor of unknown length through a mask: its blocks must be "
                                      "those of the masked selection (t[mask] = f(t[mask]))")
        return where(cond, _mask_scatter(value, Tensor._make(rows)), x)
    if isinstance(value, Tensor) and value.ndim and value.shape[0] != 1:
        if concrete:
            k = int(np.asarray(mask).sum())
            if value.shape[0] != k:
                raise RuntimeError(f"shape mismatch: value tensor of shape {list(value.shape)} cannot be "
                                   f"broadcast to indexing result of shape {[k] + list(rest)}")
        order = reshape(cumsum(reshape(m, (-1,)).astype("int64")) - 1, (-1,))
        order = where(order < 0, 0, order)
        gathered = _take(value, order.array, 0, (slice(None),) * value.ndim)
        value = reshape(gathered, tuple(m.shape) + tuple(value.shape[1:]))
    return where(cond, value, x)


def _check_bounds(index, shape):
    """torch's IndexError for an integer (or a concrete integer-array) index out of range, where
    NumPy-style wrapping or dask's own text would otherwise answer.  A lazy index array is checked
    in its chunk kernel instead (see ``_take``)."""
    dim = 0
    for pos, i in enumerate(index):  # torch names an int index's place in the index, None included
        if i is None:
            continue
        if isinstance(i, (bool, np.bool_)):
            continue
        if isinstance(i, (int, np.integer)) or isinstance(i, (list, np.ndarray)):
            n = shape[dim]
            idx = np.asarray(i) if not isinstance(i, (int, np.integer)) else np.array([i])
            if idx.dtype.kind in "iu" and idx.size and n == n:
                bad = idx[(idx < -n) | (idx >= n)]
                if bad.size:
                    where = pos if isinstance(i, (int, np.integer)) else 0  # torch reports 0 for array indices
                    raise IndexError(f"index {int(bad[0])} is out of bounds for dimension {where} with size {n}")
        dim += 1


def _scatter_array(g, *, index, meta):
    """Zeros of the primal's shape with ``g`` written at ``index`` (the VJP of basic indexing)."""
    return _put_index(_zeros(meta), g, index)


scatter_p = primitive("scatter", torch="SliceBackwardBackward0", impl=_scatter_array)
scatter_p.vjp(lambda g, s, *, index, meta: (getitem(g, index),))


take_p = primitive("take", torch="IndexBackward0")


@take_p.vjp
def _take_rule(g, s, *, axis, n, chunks, lazy):
    # scatter-add as a one-hot contraction: repeated indices accumulate
    from .products import tensordot  # late: the knot of linear ops (see tests/test_floors.py)

    cols = s.idx.array.rechunk((g.chunks[axis],))
    if not lazy:  # a host index: its chunks go where g's are (a lazy one is already checked, wrapped, placed)
        cols = cols.map_blocks(chunk.like, g._storage.value._meta, dtype=cols.dtype,
                               meta=meta_from_array(g._storage.value._meta, 1, cols.dtype))
    rows = da.arange(n, chunks=(chunks[axis],), like=g._storage.value._meta)
    onehot = Tensor._make((rows[:, None] == cols[None, :]).astype(g.dtype))
    return (moveaxis(tensordot(onehot, g, axes=([1], [axis])), 0, axis),)


def _take(x, idx, axis, index):
    """On ``record``, not ``impl``: a host index is a constant of each block's task, a lazy one goes to dask's take."""
    if any(i != slice(None) for k, i in enumerate(index) if k != axis):
        raise NotImplementedError("an integer-array index must be combined with full slices only")
    n, chunks = x.shape[axis], x.chunks
    lazy = isinstance(idx, da.Array)
    idx = _checked_lazy_index(idx, n) if lazy else idx % n

    # the index is saved as a tensor, as torch's IndexBackward0 saves its indices
    if lazy:
        out = door.defer(_take_lazy, (_util.value(x), idx), (("axis", axis),))
        return take_p.record(out, x, save={"idx": Tensor._make(idx)}, axis=axis, n=n, chunks=chunks, lazy=True)
    out = door.defer(_take_host, (_util.value(x),), (("idx", idx), ("axis", axis)))
    return take_p.record(out, x, save={"idx": Tensor._make(da.from_array(idx, chunks=-1))}, axis=axis, n=n,
                         chunks=chunks, lazy=False)


def _take_lazy(a, idx, *, axis):
    return a[(slice(None),) * axis + (idx,)]


def _take_host(a, *, idx, axis):
    a = a.rechunk({axis: -1})  # each block holds the whole axis: a plain per-block take
    return da.map_blocks(chunk.take, a, idx=idx, axis=axis, dtype=a.dtype, meta=a._meta,
                         chunks=tuple((len(idx),) if k == axis else c for k, c in enumerate(a.chunks)))


def _check_index(block, n, dim=0):
    """Chunk kernel for a lazy integer index into axis ``dim`` of length ``n``: torch's IndexError (the
    values are unknown on the client, so the check runs in the task that reads them), negative
    indices wrapped."""
    bad = (block < -n) | (block >= n)
    if bad.any():
        raise IndexError(f"index {int(block[bad][0])} is out of bounds for dimension {dim} with size {n}")
    return block % n


def _checked_lazy_index(idx, n):
    if idx.ndim != 1 or idx.dtype.kind not in "iu":
        raise NotImplementedError("a lazy index must be a 1-D integer array")
    return idx.map_blocks(_check_index, n, dtype=idx.dtype, meta=idx._meta)


def _rows_only(a):
    return a.rechunk({i: -1 for i in range(1, a.ndim)})


def _mask_select_array(a, m):
    """``a[m]`` per row block, for a mask ``m`` over ``a``'s first ``m.ndim`` axes: the selected rows,
    (count,) + the other axes (whole in each block: ``_rows_only``)."""
    a = _rows_only(a)
    letters = "".join(chr(ord("i") + k) for k in range(a.ndim))
    out = letters[:1] + letters[m.ndim:]
    return da.blockwise(chunk.mask_select, out, a, letters, m, letters[:m.ndim], dtype=a.dtype,
                        adjust_chunks={"i": lambda n: np.nan}, concatenate=True,
                        meta=meta_from_array(a._meta, ndim=len(out)))


def _mask_scatter_array(g, m):
    """Zeros shaped ``m.shape + g.shape[1:]`` with ``g``'s rows written where ``m`` is True."""
    letters = "".join(chr(ord("i") + k) for k in range(m.ndim + g.ndim - 1))
    return da.blockwise(chunk.mask_scatter, letters, m, letters[:m.ndim], g, letters[:1] + letters[m.ndim:],
                        dtype=g.dtype, align_arrays=False, meta=meta_from_array(g._meta, ndim=len(letters)))


# the mask is saved but is no input (torch's nodes have one edge)
mask_select_p = primitive("mask_select", torch="IndexBackward0", impl=_mask_select_array, args=("x", "m"),
                          save=("m",), consts=("m",))
mask_select_p.vjp(lambda g, s: (_mask_scatter(g, s.m),))
mask_scatter_p = primitive("mask_scatter", torch="IndexPutBackward0", impl=_mask_scatter_array, args=("g", "m"),
                           save=("m",), consts=("m",))
mask_scatter_p.vjp(lambda g, s: (_mask_select(g, s.m),))


def _mask_select(x, mask):
    """``x[mask]``: the elements (a mask as ``x``) or rows (a mask over ``x``'s first axes, torch's and
    NumPy's ``x[x[:, 0] > 2]``) where ``mask`` is True; one output chunk (of unknown length) per row block."""
    mask = raw(as_tensor(mask)) if not isinstance(mask, da.Array) else mask
    if mask.ndim > x.ndim:
        raise IndexError(f"too many indices for tensor of dimension {x.ndim}")
    for i, (m, n) in enumerate(zip(mask.shape, x.shape)):
        if m != n and m == m and n == n:
            raise IndexError(f"The shape of the mask {list(mask.shape)} at index {i} does not match the shape of the "
                             f"indexed tensor {list(x.shape)} at index {i}")
    return mask_select_p.bind(x, Tensor._make(_rows_only(mask.rechunk(x.chunks[:mask.ndim]))))


def _mask_scatter(g, m):
    """Zeros shaped like mask ``m`` with ``g`` written where it is True: the VJP of ``x[mask]``,
    itself recorded (its VJP selects again) so double backward passes through it."""
    return mask_scatter_p.bind(g, m)


def _setitem_array(a, value, *, index, meta_index):
    out = a.copy()
    out[index] = value
    return out


setitem_p = primitive("setitem", torch="CopySlices", impl=_setitem_array, args=("x", "value"))
setitem_p.vjp(lambda g, s, *, index, meta_index: (setitem(g, index, 0),
                                                  getitem(g, meta_index) if s.needs[1] else None))


@public()
def setitem(x, index, value):
    """The out-of-place result of ``x[index] = value`` (``Tensor.__setitem__`` rebinds to it)."""
    x, value = as_tensor(x), _util.tensor_or_scalar(value)
    index = tuple(raw(i) if isinstance(i, Tensor) else i for i in (index if isinstance(index, tuple) else (index,)))
    meta_index = _expand_index(index, x.ndim)
    _check_bounds(meta_index, x.shape)
    arrays = [k for k, i in enumerate(meta_index) if _is_array_index(i)]
    ints = [k for k, i in enumerate(meta_index) if isinstance(i, (int, np.integer)) and type(i) not in (bool, np.bool_)]
    if (arrays and ints and not _side_by_side(arrays + ints) and all(np.ndim(meta_index[k]) == 1 for k in arrays)
            and sum(i is not None for i in meta_index) == x.ndim):
        # torch's order, as getitem's: the ints first (x[1, :, [0, 2]] = v writes x[1][:, [0, 2]])
        basic = tuple(i if k in ints else slice(None) for k, i in enumerate(meta_index) if i is not None)
        rest = tuple(i for k, i in enumerate(meta_index) if k not in ints)
        return setitem(x, basic, setitem(getitem(x, basic), rest, value))
    if arrays:
        first = meta_index[arrays[0]]
        if _is_mask(first):
            if (np.ndim(first) > 1 or isinstance(value, Tensor) and value.ndim) and len(index) == 1:
                return _set_mask(x, first, value)
        else:
            points = [k for k, i in enumerate(meta_index) if k in arrays or isinstance(i, (int, np.integer))]
            if len(points) > 1:
                return _set_points(x, meta_index, points, value)
    return setitem_p.bind(x, value, index=index, meta_index=meta_index)


# ------------------------------------------------------------------- sorting
def _permute_array(a, key, *, axis, inverse):
    return da.map_blocks(chunk.permute_along, a, key, axis=axis, inverse=inverse, dtype=a.dtype, meta=a._meta)


# a permutation along an axis, given by sorting a key; its VJP is the inverse permutation (and back)
permute_along_p = primitive("permute_along", torch="SortBackward0", impl=_permute_array, args=("x", "key"),
                            save=("key",), consts=("key",))
permute_along_p.vjp(lambda g, s, *, axis, inverse: (permute_along_p.bind(g, s.key, axis=axis, inverse=not inverse),))


def _along_one_chunk(x, axis):
    x = as_tensor(x)
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    axis = _util.norm_axis(axis, x.ndim)
    if len(x.chunks[axis]) > 1:
        x = rechunk(x, {axis: -1})
    return x, axis


@public()
def sort(x, axis=-1, kind=None):
    """NumPy's ``sort`` (values, ascending, NaN last; the flattened tensor when ``axis`` is None),
    differentiable as torch's: each value's gradient goes back to where it came from.  The sorted
    axis is rechunked into one chunk (the other axes stay chunked)."""
    x, axis = _along_one_chunk(x, axis)
    return permute_along_p.bind(x, x.detach(), axis=axis, inverse=False)


@public()
def argsort(x, axis=-1, kind=None, *, descending=False, stable=None):
    """NumPy's ``argsort`` (stable, NaN last; not differentiable), torch's ``descending=`` too (stable,
    NaN first); the axis is rechunked into one chunk."""
    x = as_tensor(x)
    if x.ndim == 0 and axis is not None:  # torch: the one index of a 0-d tensor
        _util.norm_axis(axis, 0)
        return Tensor._make(da.zeros((), dtype=np.int64, chunks=(), meta=meta_from_array(x.array, 0, np.int64)))
    x, axis = _along_one_chunk(x, axis)
    a = x.array
    meta = meta_from_array(a, dtype=np.int64)
    return Tensor._make(da.map_blocks(chunk.argsort, a, axis=axis, descending=descending, dtype=np.int64,
                                      meta=meta))
