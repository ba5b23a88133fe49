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

import math
import warnings

import dask
import dask.array as da
import numpy as np
from dask.array.utils import meta_from_array
from dask.utils import parse_bytes

from .. import _dask as door, chunk
from ..graph import View, primitive
from .._tensor import Tensor, layout, recorded
from . import _util
from ._util import as_tensor, public, raw
from .shape import broadcast_to, permute, rechunk, reshape


def _meta(x):
    """What an index's VJP needs to make zeros like ``x``: its shape, dtype, chunks and chunk type, the
    last as ``(type, dtype, ndim)`` of its meta array (:data:`_chunk_metas`): the array itself, an
    ndarray param (changeable in place), would be frozen again at every indexing op and submission,
    and keep a backward that reads it from being made again (:class:`daskgrad._dask.Piece`)."""
    v = x._storage.value  # (what x.shape, x.dtype and x.chunks read, without the properties)
    m = v._meta
    kind = (type(m), m.dtype, m.ndim)
    if kind not in _chunk_metas:
        _chunk_metas[kind] = m
    return (v.shape, v.dtype, v.chunks, kind)


_chunk_metas = {}  # (meta type, dtype, ndim) -> an empty meta array of that chunk type (one per kind seen)


def _zeros(meta):
    shape, dtype, chunks, kind = meta
    return da.zeros(shape, dtype=dtype, chunks=chunks, meta=_chunk_metas[kind])


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
        elif not -shape[d] <= int(i) < shape[d]:
            return None  # (out of range: the index op raises torch's IndexError)
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


_BOOLS = (bool, np.bool_)


def _is_int(i):
    return isinstance(i, (int, np.integer)) and not isinstance(i, _BOOLS)


def _as_tuple(index):
    """The index as a tuple of items, as torch reads it: a list holding a sequence, a slice, a tensor, None
    or Ellipsis is a tuple of indices (torch's and old NumPy's rule), any other list one index."""
    if isinstance(index, tuple):
        return index
    if isinstance(index, list) and any(isinstance(i, (list, tuple, slice, np.ndarray, Tensor, da.Array))
                                       or i is None or i is Ellipsis for i in index):
        return tuple(index)
    return (index,)


def _item(i):
    """One index item normalised: a 0-d integer (bool) tensor the int (bool) it holds, read as torch reads
    it; a list a NumPy array (an empty one int64); a tensor its dask array."""
    if isinstance(i, Tensor):
        i = raw(i)
    if getattr(i, "dtype", None) == np.uint8 and hasattr(i, "ndim"):  # (torch's deprecated byte mask)
        warnings.warn("indexing with dtype torch.uint8 is now deprecated, please use a dtype torch.bool instead.",
                      UserWarning, stacklevel=4)
        i = i.astype(bool)
    if getattr(i, "ndim", None) == 0 and np.dtype(i.dtype).kind in "iub":
        v = i.compute() if isinstance(i, da.Array) else i
        return bool(v) if np.dtype(i.dtype).kind == "b" else int(v)
    if isinstance(i, list):
        a = np.asarray(i)
        return a.astype(np.int64) if a.size == 0 else a
    return i


def _specified(items, ndim):
    """How many of the tensor's axes ``items`` name (a mask as many as it has); torch's IndexErrors for an item
    of another kind and for too many."""
    for i in items:
        if not (i is None or i is Ellipsis or isinstance(i, (slice, int, np.integer, np.ndarray, da.Array))):
            raise IndexError("only integers, slices (`:`), ellipsis (`...`), None and long or byte Variables are "
                             f"valid indices (got {type(i).__name__})")
        if isinstance(i, (np.ndarray, da.Array)) and i.dtype.kind not in "iub":
            raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
    spec = sum(i.ndim if _is_mask(i) else 0 if i is None or i is Ellipsis or isinstance(i, _BOOLS) else 1
               for i in items)
    if spec > ndim:
        raise IndexError(f"too many indices for tensor of dimension {ndim}")
    return spec


def _check_mask(mask, view, d):
    """torch's IndexError for a mask over axes ``d``... of ``view`` (the tensor after the basic index) of
    another shape."""
    for j, m in enumerate(mask.shape):
        n = view[d + j]
        if m != n and m == m and n == n:
            raise IndexError(f"The shape of the mask {list(mask.shape)} at index {j} does not match the shape "
                             f"of the indexed tensor {list(view)} at index {d + j}")


def _past_the_end(i, pos, k, over, adv):
    """torch's IndexError for an item its axis pointer reaches past the last of the ``k`` axes (after several
    Ellipses); a full slice passes (and advances it: the return)."""
    if isinstance(i, slice) and i == slice(None):
        return 1
    d = k + over
    if _is_int(i):
        raise IndexError(f"index {int(i)} is out of bounds for dimension {pos} with size 0")
    if isinstance(i, slice):
        raise IndexError(f"Dimension out of range (expected to be in range of [{-k}, {k - 1}], but got {d})")
    if i is None or isinstance(i, _BOOLS):
        raise IndexError(f"Dimension out of range (expected to be in range of [{-k - 1}, {k}], but got {d})")
    extra = sum(a.ndim - 1 for a in adv.values() if _is_mask(a))
    raise IndexError(f"too many indices for tensor of dimension {k} (got {d + extra + (i.ndim if _is_mask(i) else 1)})")


def _parse(shape, items):
    """torch's reading of an index (its ``applySlicing``): the basic index it applies first, as views (ints,
    slices, None, Ellipsis's slices; a Python bool a None), and the advanced indices it then applies to that
    view, by the view's axis: integer arrays, boolean masks (over as many axes as they have) and a bool's
    ``[0]`` or ``[]``.  torch's IndexErrors for too many indices, an int or concrete integer array out of
    range and a mask of another shape."""
    ndim = len(shape)
    spec = _specified(items, ndim)
    basic, adv, out_shape, later = [], {}, [], []
    d_in = over = 0  # (over: how far torch's axis pointer has run past the last axis, after several Ellipses)
    for real, i in enumerate(items):  # (torch names an int's place in the index in its IndexError)
        if i is Ellipsis:  # (each of several advances as far: torch's reading; past the last axis, none)
            n = min(ndim - spec, ndim - d_in)
            basic += [slice(None)] * n
            out_shape += shape[d_in:d_in + n]
            d_in, over = d_in + n, over + ndim - spec - n
        elif over or d_in >= ndim and not (i is None or isinstance(i, _BOOLS)):
            over += _past_the_end(i, real, len(out_shape), over, adv)
        elif i is None or isinstance(i, _BOOLS):
            if i is not None:
                adv[len(out_shape)] = np.zeros(1 if i else 0, dtype=np.int64)
            basic.append(None)
            out_shape.append(1)
        elif isinstance(i, slice):
            if i.step is not None and i.step <= 0:  # (NumPy's and dask's negative steps: torch has none, flip does it)
                raise ValueError("slice step cannot be zero" if i.step == 0 else "step must be greater than zero")
            basic.append(i)
            n = shape[d_in]
            out_shape.append(len(range(*i.indices(n))) if n == n else n)
            d_in += 1
        elif _is_int(i):
            n = shape[d_in]
            if n == n and not -n <= i < n:
                raise IndexError(f"index {int(i)} is out of bounds for dimension {real} with size {n}")
            basic.append(int(i))
            d_in += 1
        elif _is_mask(i):
            k, d = i.ndim, len(out_shape)
            later.append((_check_mask, i, tuple(out_shape) + tuple(shape[d_in:]), d))
            adv[d] = i
            basic += [slice(None)] * k
            out_shape += shape[d_in:d_in + k]
            d_in += k
        else:  # an integer array
            n = shape[d_in]
            if isinstance(i, np.ndarray) and i.size and n == n:
                later.append((_check_bounds, i, n))
            adv[len(out_shape)] = i
            basic.append(slice(None))
            out_shape.append(n)
            d_in += 1
    for check, *args in later:  # (torch checks its tensor indices after the basic ones: a bad step raises first)
        check(*args)
    basic += [slice(None)] * (ndim - d_in)
    return tuple(basic), adv


def _check_bounds(i, n):
    bad = i[(i < -n) | (i >= n)]
    if bad.size:  # (torch names dimension 0 for every array)
        raise IndexError(f"index {int(bad.flat[0])} is out of bounds for dimension 0 with size {n}")


def _basic(x, basic, one_slice=False):
    """``x[basic]``, a view (none at all for a basic index that keeps every axis whole, before an advanced one)."""
    return getitem_p.bind(x, node="SliceBackward0" if one_slice else _index_node(basic, x.shape), index=basic,
                          meta=_meta(x))


def _host_mask(m):
    """A mask's True places, as torch finds them beside other advanced indices: a tensor mask is read."""
    if isinstance(m, da.Array):
        if type(m._meta) is not np.ndarray:  # (a device mask is not copied to the host unasked)
            raise IndexError("a boolean tensor mask on the device is taken alone only (x[mask], x[:, mask]); "
                             "beside other advanced indices pass mask.cpu()")
        m = np.asarray(m.compute())
    return np.nonzero(np.asarray(m))


def _integer_arrays(adv):
    """The advanced indices by axis, each mask as its True places over its axes (torch's nonzero)."""
    arrays = {}
    for d in sorted(adv):
        if _is_mask(adv[d]):
            arrays.update({d + j: z for j, z in enumerate(_host_mask(adv[d]))})
        else:
            arrays[d] = adv[d]
    return arrays


def _advanced(r, adv):
    """``r[adv]`` for advanced indices by axis (the other axes whole): one gather over the broadcast indices,
    their axes in place when side by side, else first (NumPy's and torch's rule).  A lone tensor mask stays
    lazy (its count unknown); a mask beside others is read (its True places are indices)."""
    dims = sorted(adv)
    if len(dims) == 1 and _is_mask(adv[dims[0]]) and isinstance(adv[dims[0]], da.Array):
        d, m = dims[0], adv[dims[0]]
        if d == 0:
            return _mask_select(r, m)
        return _mask_select(_move(r, list(range(d, d + m.ndim)), list(range(m.ndim))), m, at=d)
    arrays = _integer_arrays(adv)
    axes = sorted(arrays)
    index = tuple(arrays.get(k, slice(None)) for k in range(r.ndim))
    if len(axes) == 1 and np.ndim(arrays[axes[0]]) == 1:
        return _take(r, arrays[axes[0]], axes[0], index)
    return _take_points(r, index, axes)


@public("__getitem__")
def getitem(x, index):
    """torch's indexing: ints, slices (positive steps, as torch's), None, Ellipsis, Python bools, integer
    arrays (repeated indices accumulate in backward) and boolean masks, in any mix: the basic part a view,
    then one gather over the advanced indices (a copy)."""
    basic = _one_basic(x, index)
    if basic is not None:  # (the common case, x[i] or x[a:b] in range: what _parse gives, without its pass)
        return _basic(x, basic, type(index) is slice)
    x = as_tensor(x)
    one_slice = isinstance(index, slice)  # (torch slices x[:], where x[:, :] is an alias of x)
    basic, adv = _parse(x.shape, tuple(_item(i) for i in _as_tuple(index)))
    if not adv:
        return _basic(x, basic, one_slice)
    r = x if all(i == slice(None) for i in basic) else _basic(x, basic)
    return _advanced(r, adv)


def _one_basic(x, index):
    """The basic index ``_parse`` makes of ``index`` for tensor ``x`` where ``index`` is one int in range of
    a known first axis or one slice of ints and positive step; else None (``_parse`` reads it)."""
    t = type(index)
    if (t is not int and t is not slice) or not isinstance(x, Tensor):
        return None
    shape = x._storage.value.shape
    if not shape:
        return None
    if t is int:
        n = shape[0]
        if n != n or not -n <= index < n:
            return None
    else:
        start, stop, step = index.start, index.stop, index.step
        if not ((start is None or type(start) is int) and (stop is None or type(stop) is int)
                and (step is None or (type(step) is int and step > 0))):
            return None
    return (index,) + _FULL[len(shape) - 1] if len(shape) <= len(_FULL) else None


_FULL = [(slice(None),) * k for k in range(32)]  # (the rest of the axes, whole)


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
    try:
        if all(n == n for k in axes for n in np.shape(index[k])):  # (unknown lengths: refused below)
            np.broadcast_shapes(*[np.shape(index[k]) for k in axes])
    except ValueError:
        raise IndexError("shape mismatch: indexing tensors could not be broadcast together with shapes "
                         + ", ".join(str(list(np.shape(index[k]))) for k in axes)) from None
    if any(isinstance(index[k], da.Array) for k in axes):  # (a tensor index, as getitem hands it on)
        lin, shape = _lazy_linear(index, axes, sizes)
        return lin, shape, axes[0] if adjacent else 0
    idx = np.broadcast_arrays(*[np.asarray(index[k]) for k in axes])
    lin = np.ravel_multi_index(tuple(i % n for i, n in zip(idx, sizes)), sizes).ravel()
    lin.setflags(write=False)  # (this op's own copy, read-only: a program's key reads its values alone)
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
    # one gather, its flat axis unflattened to the broadcast shape in place (side by side) or first, in its
    # own task: its result is no view (torch's IndexBackward0 copies)
    return _take(flat, lin, 0, (slice(None),) * flat.ndim, shape=tuple(bshape), pos=pos)


def _set_points(x, index, axes, value):
    """``x[index] = value`` for pointwise integer arrays (lazy ones too) on ``axes`` (the others whole),
    through one flattened axis; ``value`` broadcast to what ``x[index]`` is, as torch's ``index_put_``."""
    lin, bshape, pos = _points(x, index, axes)
    flat, rest = _flat_over(x, axes)
    nb, count = len(bshape), int(np.prod(bshape, dtype=np.int64))
    shape = tuple(rest[:pos]) + tuple(bshape) + tuple(rest[pos:])
    if isinstance(value, Tensor):
        if value.shape != shape:
            if not _broadcasts(value.shape, shape):
                raise RuntimeError(f"shape mismatch: value tensor of shape {list(value.shape)} cannot be broadcast "
                                   f"to indexing result of shape {list(shape)}")
            value = broadcast_to(value, shape)
        if pos:
            value = _move(value, list(range(pos, pos + nb)), list(range(nb)))
        value = reshape(value, (count,) + tuple(rest))
    if not count:  # nothing is written (dask's assignment of an empty value raises)
        from .elementwise import clone
        out = clone(x)
        if isinstance(value, Tensor) and value.requires_grad and x.dtype.kind in "fc":  # (its empty gradient)
            out = out + value.sum().to(x.dtype)
        return out
    out = setitem_p.bind(flat, value, index=(lin,), meta_index=(lin,))
    return _move(reshape(out, tuple(x.shape[k] for k in axes) + tuple(rest)), list(range(len(axes))), list(axes))


def _broadcasts(src, dst):
    """Whether shape ``src`` broadcasts to shape ``dst`` (unknown lengths pass)."""
    return len(src) <= len(dst) and all(a == 1 or a == b or a != a or b != b
                                        for a, b in zip(src[::-1], dst[::-1]))


def _set_mask(x, mask, value, counted):
    """``x[mask] = value`` as a ``where``: dask.array assigns through a boolean mask only with a scalar
    and a 1-D mask.  A tensor value's elements are gathered to the mask's true places in order (the
    running count of the mask indexes it), so its gradient is the cotangent at those places.
    ``counted``: the value's first axis runs over the True places (else it is broadcast over them)."""
    from .elementwise import where
    from .reductions import cumsum

    concrete = not isinstance(mask, (da.Array, Tensor))
    m = as_tensor(da.from_array(np.asarray(mask), chunks=-1) if concrete else mask)
    if m.ndim > x.ndim or tuple(x.shape[:m.ndim]) != tuple(m.shape):
        raise IndexError(f"The shape of the mask {list(m.shape)} at index 0 does not match the shape of the "
                         f"indexed tensor {list(x.shape)} at index 0")
    rest = x.shape[m.ndim:]
    cond = reshape(m, tuple(m.shape) + (1,) * len(rest)) if rest else m
    if isinstance(value, Tensor) and not counted:  # (the same value at each True place)
        if not _broadcasts(value.shape, rest):
            count = int(np.asarray(mask).sum()) if concrete else np.nan
            raise RuntimeError(f"shape mismatch: value tensor of shape {list(value.shape)} cannot be broadcast "
                               f"to indexing result of shape {[count] + list(rest)}")
        return where(cond, value, x)
    if isinstance(value, Tensor) and (value.ndim > len(rest) + 1 or not _broadcasts(value.shape[1:], rest)):
        count = int(np.asarray(mask).sum()) if concrete else np.nan
        raise RuntimeError(f"shape mismatch: value tensor of shape {list(value.shape)} cannot be broadcast "
                           f"to indexing result of shape {[count] + list(rest)}")
    if isinstance(value, Tensor) and value.ndim and value.shape[0] != value.shape[0]:
        # an unknown length: a masked selection itself (``t[mask] += v``), one block per row block of the
        # mask, written back block by block (a block holding another count of values raises in its task)
        rows = _rows_only(m.array.rechunk(x.chunks[:m.ndim]))
        if len(value.chunks[0]) != len(rows.chunks[0]):
            raise NotImplementedError("assigning a tensor of unknown length through a mask: its blocks must be "
                                      "those of the masked selection (t[mask] = f(t[mask]))")
        return where(cond, _mask_scatter(value, Tensor._make(rows)), x)
    if isinstance(value, Tensor) and value.shape[0] == 1:
        value = reshape(value, value.shape[1:])
    elif isinstance(value, Tensor):
        if concrete:
            k = int(np.asarray(mask).sum())
            if value.shape[0] != k:
                raise RuntimeError(f"shape mismatch: value tensor of shape {list(value.shape)} cannot be "
                                   f"broadcast to indexing result of shape {[k] + list(rest)}")
        order = reshape(cumsum(reshape(m, (-1,)).astype("int64")) - 1, (-1,))
        order = where(order < 0, 0, order)
        gathered = _take(value, order.array, 0, (slice(None),) * value.ndim)
        value = reshape(gathered, tuple(m.shape) + (1,) * (len(rest) + 1 - value.ndim) + tuple(value.shape[1:]))
    return where(cond, value, x)


def _scatter_array(g, *, index, meta):
    """Zeros of the primal's shape with ``g`` written at ``index`` (the VJP of basic indexing)."""
    shape = meta[0]
    if any(n != n for n in shape):
        return _scatter_unknown(g, index, meta)
    return _put_index(_zeros(meta), g, index)


def _scatter_block(block, index, shape, g_of, out_dtype):
    full = tuple(block.shape[g_of[k]] if n != n else n for k, n in enumerate(shape))
    return _put_index(np.zeros_like(block, dtype=out_dtype, shape=full), block, index)


def _scatter_unknown(g, index, meta):
    """:func:`_scatter_array` where the primal has axes of unknown lengths (rows after a boolean mask), each taken
    whole by ``index`` (``t[:, 0]``, ``t[:, :2]``, ``t[:, None]``): block by block along them, each of ``g``'s
    blocks written into zeros of its own length there and of the primal's whole length along the others."""
    shape, dtype, chunks, kind = meta
    kept = [i for i in index if i is not None]
    full = tuple(index) + (slice(None),) * (len(shape) - len(kept))
    g_ind, g_of, k, extra = [], {}, 0, len(shape)
    for i in full:
        if i is None:  # (an axis of g only: one chunk of 1, squeezed by _put_index)
            g_ind.append(extra)
            extra += 1
        elif isinstance(i, slice):
            if shape[k] != shape[k] and i != slice(None):
                raise NotImplementedError(
                    f"the gradient of indexing {tuple(index)} a tensor of shape {tuple(shape)}: the length of axis "
                    f"{k} is not known until computed (after a boolean mask), and this index takes part of it")
            g_of[k] = len(g_ind)
            g_ind.append(k)
            k += 1
        else:
            if shape[k] != shape[k]:
                raise NotImplementedError(
                    f"the gradient of indexing {tuple(index)} a tensor of shape {tuple(shape)}: the length of axis "
                    f"{k} is not known until computed (after a boolean mask), and this index picks one of it")
            k += 1
    known = [a for a in range(g.ndim) if not (g_ind[a] < len(shape) and shape[g_ind[a]] != shape[g_ind[a]])]
    g = g.rechunk({a: -1 for a in known}) if known else g
    out = da.blockwise(_scatter_block, tuple(range(len(shape))), g, tuple(g_ind), index=full, shape=shape, g_of=g_of,
                       out_dtype=dtype, new_axes={k: shape[k] for k in range(len(shape)) if k not in g_ind},
                       adjust_chunks={k: shape[k] for k in g_of if shape[k] == shape[k]}, concatenate=True,
                       dtype=dtype, meta=_chunk_metas[kind])
    return out.rechunk({k: c for k, c in enumerate(chunks) if shape[k] == shape[k]})


scatter_p = primitive("scatter", torch="SliceBackwardBackward0", impl=_scatter_array)
scatter_p.vjp(lambda g, s, *, index, meta: (getitem(g, index),))


# take_along_axis and its adjoint, here as the rule of take (an integer-array index) is a scatter-add
def _gather_block(block, idx, axis):
    return np.take_along_axis(block, idx % block.shape[axis], axis)


def _scatter_add_block(g, idx, axis, n):
    """The adjoint of :func:`_gather_block`: ``g`` added into zeros at ``idx`` along ``axis`` (repeats accumulate).
    ``n`` NaN (a length not known until computed, after a boolean mask): a permutation's, the index's own."""
    n = idx.shape[axis] if n != n else n
    shape = g.shape[:axis] + (n,) + g.shape[axis + 1:]
    grid = [np.arange(s, like=g).reshape((1,) * d + (s,) + (1,) * (idx.ndim - d - 1)) for d, s in enumerate(idx.shape)]
    grid[axis] = idx % n
    # into a flat array through one flat index: cupy's ufunc.at refuses a tuple of index arrays
    flat = np.ravel_multi_index(tuple(np.broadcast_arrays(*grid)), shape)
    out = np.zeros_like(g, shape=(math.prod(shape),))
    np.add.at(out, flat.reshape(-1), np.broadcast_to(g, flat.shape).reshape(-1))
    return out.reshape(shape)


def _gather_array(a, idx, *, axis, n):
    return da.map_blocks(_gather_block, a, idx, axis=axis, dtype=a.dtype, meta=a._meta, chunks=idx.chunks)


def _scatter_add_array(g, idx, *, axis, n):
    chunks = tuple((n,) if k == axis else c for k, c in enumerate(g.chunks))
    return da.map_blocks(_scatter_add_block, g, idx, axis=axis, n=n, dtype=g.dtype, meta=g._meta, chunks=chunks)


gather_p = primitive("take_along_axis", torch="GatherBackward0", impl=_gather_array, args=("x", "idx"),
                     save=("idx",), consts=("idx",))
scatter_add_p = primitive("scatter_add_along_axis", torch="ScatterAddBackward0", impl=_scatter_add_array,
                          args=("g", "idx"), save=("idx",), consts=("idx",))
gather_p.vjp(lambda g, s, *, axis, n: (scatter_add_p.bind(g, s.idx, axis=axis, n=n),))
scatter_add_p.vjp(lambda g, s, *, axis, n: (gather_p.bind(g, s.idx, axis=axis, n=n),))


take_p = primitive("take", torch="IndexBackward0")


@take_p.vjp
def _take_rule(g, s, *, axis, n, chunks, lazy, shape=None, pos=0):
    # a scatter-add (repeated indices accumulate), as torch's index_put with accumulate: not a one-hot
    # contraction, whose zeros times an inf or NaN of the cotangent made NaN at every row of its column.
    # A task scatters into the whole taken axis, so where that is larger than a chunk (an embedding table of
    # millions of rows) the contraction stays: its blocks are a chunk of rows by a chunk of indices
    if shape is not None:  # (the gather's unflattened axes back to one, first)
        nb = len(shape)
        g = _move(g, list(range(pos, pos + nb)), list(range(nb)))
        g = reshape(g, (int(np.prod(shape, dtype=np.int64)),) + tuple(g.shape[nb:]))
    cols = s.idx.array.rechunk((g.chunks[axis],))
    if not lazy:  # a host index: its chunks go where g's are (a lazy one is already checked, wrapped, placed)
        cols = cols.map_blocks(chunk.like, g._storage.value._meta, dtype=cols.dtype,
                               meta=meta_from_array(g._storage.value._meta, 1, cols.dtype))
    whole = n * g.dtype.itemsize * math.prod(max(c, default=0) for k, c in enumerate(g.chunks) if k != axis)
    if whole > parse_bytes(dask.config.get("array.chunk-size")):
        from .products import tensordot  # late: the knot of linear ops (see tests/test_floors.py)

        rows = da.arange(n, chunks=(chunks[axis],), like=g._storage.value._meta)
        onehot = Tensor._make((rows[:, None] == cols[None, :]).astype(g.dtype))
        return (_move(tensordot(onehot, g, axes=([1], [axis])), [0], [axis]),)
    if len(g.chunks[axis]) > 1:  # (the taken axis whole in each task; the others keep g's chunks)
        g = rechunk(g, tuple(c if k != axis else (g.shape[axis],) for k, c in enumerate(g.chunks)))
    idx = broadcast_to(reshape(Tensor._make(cols), (1,) * axis + (-1,) + (1,) * (g.ndim - axis - 1)), g.shape)
    out = scatter_add_p.bind(g, rechunk(idx, g.chunks), axis=axis, n=n)
    out_chunks = g.chunks[:axis] + (chunks[axis],) + g.chunks[axis + 1:]
    return (out if out.chunks == out_chunks else rechunk(out, out_chunks),)


def _take(x, idx, axis, index, shape=None, pos=0):
    """On ``record``, not ``impl``: a host index is a constant of each block's task, a lazy one goes to dask's
    take.  ``shape``: the taken axis (then the first) unflattened to ``shape`` and moved to ``pos``."""
    if any(i != slice(None) for k, i in enumerate(index) if k != axis):
        raise NotImplementedError("an integer-array index must be combined with full slices only")
    n, chunks = x.shape[axis], x.chunks
    lazy = isinstance(idx, da.Array)
    idx = _checked_lazy_index(idx, n) if lazy else idx % n
    if isinstance(idx, np.ndarray):
        idx.setflags(write=False)  # (its own copy, read-only: a program's key reads its values alone)

    # the index is saved as a tensor, as torch's IndexBackward0 saves its indices
    if lazy:
        out = door.defer(_take_lazy, (_util.value(x), idx), (("axis", axis),))
    else:
        out = door.defer(_take_host, (_util.value(x),), (("idx", idx), ("axis", axis)))
    if shape is not None:
        out = door.defer(_unflatten, (out,), (("shape", shape), ("pos", pos)))
    saved = Tensor._make(idx if lazy else da.from_array(idx, chunks=-1))
    return take_p.record(out, x, save={"idx": saved}, axis=axis, n=n, chunks=chunks, lazy=lazy, shape=shape, pos=pos)


def _unflatten(a, *, shape, pos):
    """``a`` with its first axis as ``shape``, those axes moved to ``pos``."""
    a = a.reshape(tuple(shape) + a.shape[1:])
    return da.moveaxis(a, list(range(len(shape))), list(range(pos, pos + len(shape)))) if pos else a


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


def _mask_select_array(a, m, *, at=0):
    """``a[m]`` per row block, for a mask ``m`` over ``a``'s first ``m.ndim`` axes: the selected rows,
    (count,) + the other axes (whole in each block: ``_rows_only``)."""
    a = _rows_only(a)
    letters = "".join(chr(ord("i") + k) for k in range(a.ndim))
    out = letters[:1] + letters[m.ndim:]
    out = da.blockwise(chunk.mask_select, out, a, letters, m, letters[:m.ndim], dtype=a.dtype,
                       adjust_chunks={"i": lambda n: np.nan}, concatenate=True,
                       meta=meta_from_array(a._meta, ndim=len(out)))
    return da.moveaxis(out, 0, at) if at else out


def _mask_scatter_array(g, m):
    """Zeros shaped ``m.shape + g.shape[1:]`` with ``g``'s rows written where ``m`` is True."""
    letters = "".join(chr(ord("i") + k) for k in range(m.ndim + g.ndim - 1))
    return da.blockwise(chunk.mask_scatter, letters, m, letters[:m.ndim], g, letters[:1] + letters[m.ndim:],
                        dtype=g.dtype, align_arrays=False, meta=meta_from_array(g._meta, ndim=len(letters)))


# the mask is saved but is no input (torch's nodes have one edge)
mask_select_p = primitive("mask_select", torch="IndexBackward0", impl=_mask_select_array, args=("x", "m"),
                          save=("m",), consts=("m",))
mask_select_p.vjp(lambda g, s, *, at=0: (_mask_scatter(_move(g, [at], [0]), s.m),))
mask_scatter_p = primitive("mask_scatter", torch="IndexPutBackward0", impl=_mask_scatter_array, args=("g", "m"),
                           save=("m",), consts=("m",))
mask_scatter_p.vjp(lambda g, s: (_mask_select(g, s.m),))


def _mask_select(x, mask, at=0):
    """``x[mask]``: the elements (a mask as ``x``) or rows (a mask over ``x``'s first axes, torch's and
    NumPy's ``x[x[:, 0] > 2]``) where ``mask`` is True; one output chunk (of unknown length) per row block."""
    mask = raw(as_tensor(mask)) if not isinstance(mask, da.Array) else mask
    if mask.ndim > x.ndim:
        raise IndexError(f"too many indices for tensor of dimension {x.ndim}")
    for i, (m, n) in enumerate(zip(mask.shape, x.shape)):
        if m != n and m == m and n == n:
            raise IndexError(f"The shape of the mask {list(mask.shape)} at index {i} does not match the shape of the "
                             f"indexed tensor {list(x.shape)} at index {i}")
    return mask_select_p.bind(x, Tensor._make(_rows_only(mask.rechunk(x.chunks[:mask.ndim]))), at=at)


def _mask_scatter(g, m):
    """Zeros shaped like mask ``m`` with ``g`` written where it is True: the VJP of ``x[mask]``,
    itself recorded (its VJP selects again) so double backward passes through it."""
    return mask_scatter_p.bind(g, m)


def _setitem_array(a, value, *, index, meta_index):
    out = a.copy()
    if 0 in a[index].shape:  # (an empty selection: nothing to write, where dask refuses to broadcast a value)
        return out
    out[index] = value
    return out


setitem_p = primitive("setitem", torch="CopySlices", impl=_setitem_array, args=("x", "value"))
setitem_p.vjp(lambda g, s, *, index, meta_index: (setitem(g, index, 0),
                                                  getitem(g, meta_index) if s.needs[1] else None))


@public()
def setitem(x, index, value):
    """The out-of-place result of ``x[index] = value`` (``Tensor.__setitem__`` rebinds to it), as torch
    writes it: the basic part of the index a view, into which ``value`` is copied (broadcast), or, with
    advanced indices, put at them (broadcast to what ``x[index]`` would be)."""
    x, value = as_tensor(x), _util.tensor_or_scalar(value)
    basic, adv = _parse(x.shape, tuple(_item(i) for i in _as_tuple(index)))
    if adv and isinstance(value, Tensor) and value.dtype != x.dtype:
        names = [_util.TORCH_TYPE_NAMES.get(t.dtype.name, t.dtype.name) for t in (x, value)]
        raise RuntimeError(f"Index put requires the source and destination dtypes match, got {names[0]} for the "
                           f"destination and {names[1]} for the source.")
    kept = tuple(i for i in basic if i is not None)
    whole = all(i == slice(None) for i in kept)
    if isinstance(value, Tensor):
        value = _strip_ones(value)
    if adv:
        part = x if whole and len(kept) == len(basic) else getitem_p.bind(x, node=_index_node(basic, x.shape),
                                                                          index=basic, meta=_meta(x))
        new = _put_advanced(part, adv, value)
        if whole:
            return reshape(new, x.shape) if new.shape != x.shape else new
        value = new
    view_shape = _index_geometry(x.shape, (0,) * x.ndim, 0, basic)
    if isinstance(value, Tensor) and view_shape is not None:
        view_shape = view_shape[0]
        if value.shape != view_shape:
            value = broadcast_to(value, view_shape)
        target = _index_geometry(x.shape, (0,) * x.ndim, 0, kept)[0]
        if value.shape != target:
            value = reshape(value, target)
    return setitem_p.bind(x, value, index=kept, meta_index=kept)


def _strip_ones(value):
    """``value`` without its leading length-1 axes (torch's ``slicePrefix1sSize`` before it copies)."""
    k = 0
    while k < value.ndim and value.shape[k] == 1:
        k += 1
    return reshape(value, value.shape[k:]) if k else value


def _put_advanced(part, adv, value):
    """``part`` with ``value`` put at its advanced indices (the other axes whole), out of place: ``value``
    broadcast to the shape ``part[adv]`` has, as torch's ``index_put_``."""
    dims = sorted(adv)
    if len(dims) == 1 and _is_mask(adv[dims[0]]):
        d, m = dims[0], adv[dims[0]]
        moved = _move(part, list(range(d, d + m.ndim)), list(range(m.ndim))) if d else part
        counted = isinstance(value, Tensor) and value.ndim >= part.ndim - m.ndim + 1 - d
        if counted and d:  # (the value's axis over the True places first, as the mask's axes are moved)
            c = value.ndim - (part.ndim - m.ndim + 1 - d)
            value = _move(value, [c], [0])
        new = _set_mask(moved, m, value, counted)
        return _move(new, list(range(m.ndim)), list(range(d, d + m.ndim))) if d else new
    arrays = _integer_arrays(adv)
    axes = sorted(arrays)
    index = tuple(arrays.get(k, slice(None)) for k in range(part.ndim))
    return _set_points(part, index, axes, value)


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
    original = as_tensor(x)
    x, axis = _along_one_chunk(x, axis)
    # the key: x's value now, in a storage of its own (torch's SortBackward0 keeps the indices, not x: a write to x
    # after the sort leaves its backward as it is; x.detach() shared x's version counter, and the backward raised)
    out = permute_along_p.bind(x, Tensor._make(recorded(x)), axis=axis, inverse=False)
    return _blocks_of(out, original, axis)


def _blocks_of(out, like, axis):
    """``out`` (along ``axis`` one block: rows of unknown count, after a boolean mask, joined for a sort) cut back
    into ``like``'s blocks, so it lines up with ``like`` block by block (a joined block would broadcast against
    each of ``like``'s, and silently so against one holding one row)."""
    if (like.ndim != out.ndim or len(like.chunks[axis]) == len(out.chunks[axis])
            or like.shape[axis] == like.shape[axis]):
        return out
    from .shape import split_like_p
    return split_like_p.bind(out, like, axis=axis)


@public()
def argsort(x, axis=-1, kind=None, *, descending=False, stable=None):
    """NumPy's ``argsort`` (stable, NaN last; not differentiable), torch's ``descending=`` too (stable,
    NaN first); the axis is rechunked into one chunk."""
    x = as_tensor(x)
    if x.ndim == 0 and axis is not None:  # torch: the one index of a 0-d tensor
        _util.norm_axis(axis, 0)
        return Tensor._make(da.zeros((), dtype=np.int64, chunks=(), meta=meta_from_array(x.array, 0, np.int64)))
    original = x
    x, axis = _along_one_chunk(x, axis)
    a = x.array
    meta = meta_from_array(a, dtype=np.int64)
    return _blocks_of(Tensor._make(da.map_blocks(chunk.argsort, a, axis=axis, descending=descending, dtype=np.int64,
                                                 meta=meta)), original, axis)
