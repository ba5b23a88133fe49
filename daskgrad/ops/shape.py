"""Shape ops and indexing (contract: see ``elementwise.py``).

These ops are linear, so each rule is the transposed op: reshape back,
inverse permutation, sum over broadcast axes, scatter for indexing, split for
concatenation.  None of them saves a tensor (except integer-array indexing,
which saves its index), so, as in torch, they can be traversed twice.
"""
from __future__ import annotations

import dask.array as da
import numpy as np
from dask.array.utils import meta_from_array

from .. import chunk
from ..graph import primitive
from .._tensor import Tensor
from . import _util
from ._util import as_tensor, norm_axes, norm_axis, raw


def _meta(x):
    return (x.shape, x.dtype, x.chunks, x.array._meta)


def _zeros(meta):
    shape, dtype, chunks, m = meta
    return da.zeros(shape, dtype=dtype, chunks=chunks, meta=m)


# ------------------------------------------------------------------- reshaping
# torch names x.reshape(...) of a contiguous tensor ViewBackward0 (daskgrad tracks no strides)
reshape_p = primitive("reshape", torch="ViewBackward0")
reshape_p.vjp(lambda g, s, *, old: (reshape(g, old),))


def reshape(x, shape):
    x = as_tensor(x)
    old = x.shape
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    _check_reshape(shape, old)
    return reshape_p.bind(_reshape_array(x.array, shape), x, old=old)


def _check_reshape(shape, old):
    """torch's errors for a shape that does not fit (dask's ValueError or a silent NaN size otherwise)."""
    if any(n != n for n in old):
        return  # unknown size after a boolean mask: dask decides
    if sum(1 for n in shape if n == -1) > 1:
        raise RuntimeError("only one dimension can be inferred")
    for i, n in enumerate(shape):
        if n < -1:
            raise RuntimeError(f"invalid shape dimension {n} at index {i} of shape {list(shape)}")
    size = int(np.prod(old, dtype=np.int64))
    known = int(np.prod([n for n in shape if n != -1], dtype=np.int64))
    if (size != known if -1 not in shape else (known == 0 or size % known)):
        raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {size}")


def _reshape_array(a, shape):
    try:
        return a.reshape(shape)
    except NotImplementedError:  # dask reshapes only even merges/splits of chunks
        pass
    try:
        return a.rechunk({i: -1 for i in range(1, a.ndim)}).reshape(shape)
    except NotImplementedError:
        return a.rechunk(-1).reshape(shape)


def flatten(x):
    return reshape(x, (-1,))


transpose_p = primitive("transpose", torch=("TBackward0", "PermuteBackward0"))
transpose_p.vjp(lambda g, s, *, inverse: (transpose(g, inverse),))


def transpose(x, axes=None):
    """Permute axes (all reversed by default, as in NumPy)."""
    x = as_tensor(x)
    perm = tuple(range(x.ndim))[::-1] if axes is None else _perm(axes, x.ndim)
    inverse = tuple(int(i) for i in np.argsort(perm))
    node = "TBackward0" if axes is None and x.ndim <= 2 else "PermuteBackward0"
    return transpose_p.bind(da.transpose(x.array, perm), x, node=node, inverse=inverse)


permute = transpose


def _perm(axes, ndim):
    axes = tuple(axes)
    if len(axes) != ndim:
        raise RuntimeError("permute(sparse_coo): number of dimensions in the tensor input does not match the length "
                           f"of the desired ordering of dimensions i.e. input.dim() = {ndim} is not equal to "
                           f"len(dims) = {len(axes)}")
    perm = tuple(norm_axis(a, ndim) for a in axes)
    if len(set(perm)) != len(perm):
        raise RuntimeError("permute(): duplicate dims are not allowed.")
    return perm


def swapaxes(x, axis1, axis2):
    x = as_tensor(x)
    perm = list(range(x.ndim))
    axis1, axis2 = norm_axis(axis1, x.ndim), norm_axis(axis2, x.ndim)
    perm[axis1], perm[axis2] = perm[axis2], perm[axis1]
    return transpose(x, perm)


def moveaxis(x, source, destination):
    x = as_tensor(x)
    source, destination = norm_axis(source, x.ndim), norm_axis(destination, x.ndim)
    perm = [i for i in range(x.ndim) if i != source]
    perm.insert(destination, source)
    return transpose(x, perm)


def _sum_to(g, shape):
    from .reductions import sum_to  # reductions import this module

    return sum_to(g, shape)


broadcast_to_p = primitive("broadcast_to", torch="ExpandBackward0")
broadcast_to_p.vjp(lambda g, s, *, old: (_sum_to(g, old),))


def broadcast_to(x, shape, chunks=None):
    """Broadcast with NumPy rules; ``chunks`` sets the chunks of the new and size-1 axes."""
    x = as_tensor(x)
    shape, old = tuple(shape), x.shape
    lead = len(shape) - len(old)
    for i, n in enumerate(old):
        if n != 1 and n == n and shape[lead + i] != n and shape[lead + i] != -1:
            raise RuntimeError(f"The expanded size of the tensor ({shape[lead + i]}) must match the existing size "
                               f"({n}) at non-singleton dimension {lead + i}.  Target sizes: {list(shape)}.  "
                               f"Tensor sizes: {list(old)}")
    a = x.array
    if chunks is not None:  # kept axes must already carry the target chunks
        lead = len(shape) - a.ndim
        want = tuple(c if a.shape[i] != 1 or shape[lead + i] == 1 else a.chunks[i]
                     for i, c in enumerate(chunks[lead:]))
        if want != a.chunks:
            a = a.rechunk(want)
    if shape == old and (chunks is None or tuple(chunks) == a.chunks):
        return x if a is x.array else rechunk(x, a.chunks)
    return broadcast_to_p.bind(da.broadcast_to(a, shape, chunks=chunks), x, old=old)


expand_dims_p = primitive("expand_dims", torch="UnsqueezeBackward0")
expand_dims_p.vjp(lambda g, s, *, axes: (squeeze(g, axes),))
squeeze_p = primitive("squeeze", torch="SqueezeBackward1")
squeeze_p.vjp(lambda g, s, *, axes: (expand_dims(g, axes),))


def expand_dims(x, axis):
    x = as_tensor(x)
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    axes = norm_axes(axes, x.ndim + len(axes))
    return expand_dims_p.bind(da.expand_dims(x.array, axes), x, axes=axes)


unsqueeze = expand_dims


def squeeze(x, axis=None):
    x = as_tensor(x)
    if axis is None:
        axes = tuple(i for i, n in enumerate(x.shape) if n == 1)
    else:
        axes = norm_axes(axis, x.ndim)
    if not axes:
        return x
    if any(x.shape[a] != 1 for a in axes):
        raise ValueError("cannot select an axis to squeeze out which has size not equal to one")
    return squeeze_p.bind(da.squeeze(x.array, axis=axes), x, axes=axes)


rechunk_p = primitive("rechunk", torch="RechunkBackward0")
rechunk_p.vjp(lambda g, s, *, old: (rechunk(g, old),))
flip_p = primitive("flip", torch="FlipBackward0")
flip_p.vjp(lambda g, s, *, axes: (flip(g, axes),))
roll_p = primitive("roll", torch="RollBackward0")
roll_p.vjp(lambda g, s, *, back, axis: (roll(g, back, axis),))


def rechunk(x, chunks):
    x = as_tensor(x)
    return rechunk_p.bind(x.array.rechunk(chunks), x, old=x.chunks)


def flip(x, axis=None):
    x = as_tensor(x)
    axes = norm_axes(axis, x.ndim)
    return flip_p.bind(da.flip(x.array, axes), x, axes=axes)


def roll(x, shift, axis=None):
    x = as_tensor(x)
    back = tuple(-s for s in shift) if isinstance(shift, (tuple, list)) else -shift
    if axis is not None:
        axis = (tuple(norm_axis(a, x.ndim) for a in axis) if isinstance(axis, (tuple, list))
                else norm_axis(axis, x.ndim))
    return roll_p.bind(da.roll(x.array, shift, axis), x, back=back, axis=axis)


# ------------------------------------------------------------ joining, splitting
concatenate_p = primitive("concatenate", torch="CatBackward0")
concatenate_p.vjp(lambda g, s, *, axis, bounds: tuple(getitem(g, (slice(None),) * axis + (slice(lo, hi),))
                                                      for lo, hi in zip(bounds[:-1], bounds[1:])))
stack_p = primitive("stack", torch="StackBackward0")
stack_p.vjp(lambda g, s, *, axis, n: tuple(getitem(g, (slice(None),) * axis + (i,)) for i in range(n)))


def concatenate(tensors, axis=0):
    ts = [as_tensor(t) for t in tensors]
    axis = norm_axis(axis, ts[0].ndim)
    for k, t in enumerate(ts[1:], 1):
        for d in range(ts[0].ndim):
            if d != axis and (t.ndim != ts[0].ndim or t.shape[d] != ts[0].shape[d]):
                if t.ndim != ts[0].ndim:
                    raise RuntimeError(f"Tensors must have same number of dimensions: got {ts[0].ndim} and {t.ndim}")
                raise RuntimeError(f"Sizes of tensors must match except in dimension {axis}. Expected size "
                                   f"{ts[0].shape[d]} but got size {t.shape[d]} for tensor number {k} in the list.")
    bounds = tuple(int(b) for b in np.cumsum([0] + [t.shape[axis] for t in ts]))
    return concatenate_p.bind(da.concatenate([t.array for t in ts], axis=axis), *ts, axis=axis, bounds=bounds)


def stack(tensors, axis=0):
    ts = [as_tensor(t) for t in tensors]
    axis = norm_axis(axis, ts[0].ndim + 1)
    for k, t in enumerate(ts[1:], 1):
        if t.shape != ts[0].shape:
            raise RuntimeError(f"stack expects each tensor to be equal size, but got {list(ts[0].shape)} at entry 0 "
                               f"and {list(t.shape)} at entry {k}")
    return stack_p.bind(da.stack([t.array for t in ts], axis=axis), *ts, axis=axis, n=len(ts))


def split(x, indices_or_sections, axis=0):
    """NumPy's ``split``: a list of slices, each its own differentiable op."""
    x = as_tensor(x)
    axis = norm_axis(axis, x.ndim)
    n = x.shape[axis]
    if isinstance(indices_or_sections, int):
        if indices_or_sections <= 0:
            raise ValueError("number sections must be larger than 0.")
        if n % indices_or_sections:
            raise ValueError("array split does not result in an equal division")
        step = n // indices_or_sections
        cuts = list(range(step, n, step))
    else:
        cuts = list(indices_or_sections)
    edges = [0] + cuts + [n]
    pre = (slice(None),) * axis
    return [getitem(x, pre + (slice(lo, hi),)) for lo, hi in zip(edges[:-1], edges[1:])]


pad_p = primitive("pad", torch="ConstantPadNdBackward0")
pad_p.vjp(lambda g, s, *, index: (getitem(g, index),))


def pad(x, pad_width, mode="constant", constant_values=0):
    """Constant padding (NumPy's ``pad_width``); the rule slices the padding off."""
    if mode != "constant":
        raise NotImplementedError("only mode='constant' is differentiable")
    x = as_tensor(x)
    widths = np.broadcast_to(np.array(pad_width, dtype=int), (x.ndim, 2))  # NumPy's pad_width forms
    index = tuple(slice(int(lo), int(lo) + n) for (lo, _), n in zip(widths, x.shape))
    return pad_p.bind(da.pad(x.array, [tuple(int(v) for v in w) for w in widths], mode="constant",
                             constant_values=constant_values), x, index=index)


def diff(x, n=1, axis=-1):
    x = as_tensor(x)
    axis = norm_axis(axis, x.ndim)
    pre = (slice(None),) * axis
    for _ in range(n):
        x = getitem(x, pre + (slice(1, None),)) - getitem(x, pre + (slice(None, -1),))
    return x


# --------------------------------------------------------------------- indexing
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
    return getattr(i, "dtype", None) == bool or (isinstance(i, list) and bool(i) and isinstance(i[0], bool))


def _is_array_index(i):
    return isinstance(i, (list, np.ndarray, da.Array, Tensor))


getitem_p = primitive("getitem", torch=("SliceBackward0", "SelectBackward0"))
getitem_p.vjp(lambda g, s, *, index, meta: (_scatter(g, index, meta),))
scatter_p = primitive("scatter", torch="SliceBackwardBackward0")
scatter_p.vjp(lambda g, s, *, index: (getitem(g, index),))


def getitem(x, index):
    """NumPy indexing: ints, slices (negative steps too), None, Ellipsis, one integer
    array (repeated indices accumulate in backward) or a boolean mask."""
    x = as_tensor(x)
    if isinstance(index, list) and any(isinstance(i, (list, tuple, slice, np.ndarray, Tensor, da.Array))
                                       or i is None or i is Ellipsis for i in index):
        index = tuple(index)  # torch (and old NumPy) read a list holding sequences as a tuple of indices
    index = _expand_index(tuple(raw(i) if isinstance(i, Tensor) else i
                                for i in (index if isinstance(index, tuple) else (index,))), x.ndim)
    _check_bounds(index, x.shape)
    arrays = [k for k, i in enumerate(index) if _is_array_index(i)]
    if arrays:
        first = index[arrays[0]]
        if _is_mask(first):
            return _mask_select(x, first)
        points = [k for k, i in enumerate(index) if _is_array_index(i) or isinstance(i, (int, np.integer))]
        if len(points) > 1:
            return _take_points(x, index, points)
        return _take(x, np.array(first) if isinstance(first, list) else first, arrays[0], index)
    node = "SelectBackward0" if any(isinstance(i, (int, np.integer)) for i in index) else "SliceBackward0"
    out = getitem_p.bind(x.array[index], x, node=node, index=index, meta=_meta(x))
    out._base = x if out.grad_fn is not None or x.requires_grad else None
    return out


def _points(x, index, axes):
    """NumPy's pointwise indexing by several integer arrays (ints count as 0-d arrays) as one
    integer array over those axes flattened: ``(linear indices, broadcast shape, position of the
    result's broadcast axes)``.  dask.array has no such indexing; a take along one flattened axis
    is what it has (and its VJP accumulates repeated points)."""
    if any(index[k] != slice(None) for k in range(len(index)) if k not in axes) or any(i is None for i in index):
        raise NotImplementedError("integer-array indices on several axes must be combined with full slices only")
    if any(isinstance(index[k], (da.Array, Tensor)) for k in axes):
        raise NotImplementedError("integer-array indices on several axes must be concrete (lists or NumPy arrays)")
    idx = np.broadcast_arrays(*[np.asarray(index[k]) for k in axes])
    sizes = tuple(x.shape[k] for k in axes)
    lin = np.ravel_multi_index(tuple(i % n for i, n in zip(idx, sizes)), sizes).ravel()
    adjacent = list(axes) == list(range(axes[0], axes[0] + len(axes)))
    return lin, idx[0].shape, axes[0] if adjacent else 0


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
    cond = reshape(m, tuple(m.shape) + (1,) * len(rest)) if rest else m
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


def _scatter(g, index, meta):
    """Zeros of the primal's shape with ``g`` written at ``index`` (the VJP of basic indexing)."""
    kept = tuple(i for i in index if i is not None)
    new_axes = []
    pos = 0
    for i in index:
        if i is None:
            new_axes.append(pos)
        if not isinstance(i, (int, np.integer)):
            pos += 1
    src = g.array.squeeze(axis=tuple(new_axes)) if new_axes else g.array
    out = _zeros(meta)
    out[kept] = src
    return scatter_p.bind(out, g, index=index)


take_p = primitive("take", torch="IndexBackward0")


@take_p.vjp
def _take_rule(g, s, *, axis, n, chunks, lazy):
    # scatter-add as a one-hot contraction: repeated indices accumulate
    from .linalg import tensordot  # linalg imports this module

    cols = s.idx.array.rechunk((g.chunks[axis],))
    if not lazy:  # a host index: its chunks go where g's are (a lazy one is already checked, wrapped, placed)
        cols = cols.map_blocks(chunk.like, g.array._meta, dtype=cols.dtype,
                               meta=meta_from_array(g.array._meta, 1, cols.dtype))
    rows = da.arange(n, chunks=(chunks[axis],), like=g.array._meta)
    onehot = Tensor._make((rows[:, None] == cols[None, :]).astype(g.dtype))
    return (moveaxis(tensordot(onehot, g, axes=([1], [axis])), 0, axis),)


def _take(x, idx, axis, index):
    if any(i != slice(None) for k, i in enumerate(index) if k != axis):
        raise NotImplementedError("an integer-array index must be combined with full slices only")
    n, shape, chunks = x.shape[axis], x.shape, x.chunks
    lazy = isinstance(idx, da.Array)
    idx = _checked_lazy_index(idx, n) if lazy else idx % n

    # the index is saved as a tensor, as torch's IndexBackward0 saves its indices
    if lazy:
        return take_p.bind(x.array[(slice(None),) * axis + (idx,)], x, save={"idx": Tensor._make(idx)},
                           axis=axis, n=n, chunks=chunks, lazy=True)
    a = x.array.rechunk({axis: -1})  # each block holds the whole axis: a plain per-block take
    out = da.map_blocks(chunk.take, a, idx=idx, axis=axis, dtype=a.dtype, meta=a._meta,
                        chunks=tuple((len(idx),) if k == axis else c for k, c in enumerate(a.chunks)))
    return take_p.bind(out, x, save={"idx": Tensor._make(da.from_array(idx, chunks=-1))}, axis=axis, n=n,
                       chunks=chunks, lazy=False)


def _check_index(block, n):
    """Chunk kernel for a lazy integer index: torch's IndexError (the values are unknown on the
    client, so the check runs in the task that reads them), negative indices wrapped."""
    bad = (block < -n) | (block >= n)
    if bad.any():
        raise IndexError(f"index {int(block[bad][0])} is out of bounds for dimension 0 with size {n}")
    return block % n


def _checked_lazy_index(idx, n):
    if idx.ndim != 1 or idx.dtype.kind not in "iu":
        raise NotImplementedError("a lazy index must be a 1-D integer array")
    return idx.map_blocks(_check_index, n, dtype=idx.dtype, meta=idx._meta)


def _rows_only(a):
    return a.rechunk({i: -1 for i in range(1, a.ndim)})


mask_select_p = primitive("mask_select", torch="IndexBackward0")
mask_select_p.vjp(lambda g, s: (_mask_scatter(g, s.m),))
mask_scatter_p = primitive("mask_scatter", torch="IndexPutBackward0")
mask_scatter_p.vjp(lambda g, s: (_mask_select(g, s.m),))


def _mask_select(x, mask):
    """``x[mask]``: one output chunk (of unknown length) per row block of ``x``."""
    mask = raw(as_tensor(mask)) if not isinstance(mask, da.Array) else mask
    for i, (m, n) in enumerate(zip(mask.shape, x.shape)):
        if m != n and m == m and n == n:
            raise IndexError(f"The shape of the mask {list(mask.shape)} at index {i} does not match the shape of the "
                             f"indexed tensor {list(x.shape)} at index {i}")
    if mask.shape != x.shape:
        mask = da.broadcast_to(mask.reshape(mask.shape + (1,) * (x.ndim - mask.ndim)), x.shape)
    a, m = _rows_only(x.array), _rows_only(mask.rechunk(x.chunks))
    letters = "".join(chr(ord("i") + k) for k in range(x.ndim))
    out = da.blockwise(chunk.mask_select, "i", a, letters, m, letters, dtype=x.dtype,
                       adjust_chunks={"i": lambda n: np.nan}, meta=a._meta[:0].reshape((0,)),
                       concatenate=True)

    return mask_select_p.bind(out, x, save={"m": Tensor._make(m)})


def _mask_scatter(g, m):
    """Zeros shaped like mask ``m`` with ``g`` written where it is True: the VJP of ``x[mask]``,
    itself recorded (its VJP selects again) so double backward passes through it."""
    letters = "".join(chr(ord("i") + k) for k in range(m.ndim))
    out = da.blockwise(chunk.mask_scatter, letters, m.array, letters, g.array, "i", dtype=g.dtype,
                       align_arrays=False, meta=g.array._meta.reshape((0,) * m.ndim))
    return mask_scatter_p.bind(out, g, save={"m": m})


setitem_p = primitive("setitem", torch="CopySlices")
setitem_p.vjp(lambda g, s, *, index, meta_index: (setitem(g, index, 0),
                                                  getitem(g, meta_index) if s.needs[1] else None))


def setitem(x, index, value):
    """The out-of-place result of ``x[index] = value`` (``Tensor.__setitem__`` rebinds to it)."""
    x, value = as_tensor(x), _util.tensor_or_scalar(value)
    index = tuple(raw(i) if isinstance(i, Tensor) else i for i in (index if isinstance(index, tuple) else (index,)))
    meta_index = _expand_index(index, x.ndim)
    _check_bounds(meta_index, x.shape)
    arrays = [k for k, i in enumerate(meta_index) if _is_array_index(i)]
    if arrays:
        first = meta_index[arrays[0]]
        if _is_mask(first):
            if (np.ndim(first) > 1 or isinstance(value, Tensor) and value.ndim) and len(index) == 1:
                return _set_mask(x, first, value)
        else:
            points = [k for k, i in enumerate(meta_index) if k in arrays or isinstance(i, (int, np.integer))]
            if len(points) > 1:
                return _set_points(x, meta_index, points, value)
    out = x.array.copy()
    out[index] = raw(value)
    return setitem_p.bind(out, x, _util.only_tensor(value), index=index, meta_index=meta_index)
