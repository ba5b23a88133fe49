"""Dask algorithms for axes whose chunk lengths are not known until computed (rows after a boolean mask:
dask's NaN chunk sizes), where dask's own need the lengths or break on an empty block.

None of them asks for the lengths: each works block by block, in the blocks' order, so recording an op never
submits anything (dask's ``compute_chunk_sizes`` would, and a NaN length makes dask's ``flip``, arg-reductions,
``concatenate`` and rechunk-to-one-chunk refuse; its ``cumsum`` and ``max`` fail inside a task when a block
holds no rows).
"""
from __future__ import annotations

import inspect
from functools import partial

import dask.array as da
import numpy as np
from dask.base import tokenize

from .internals import HighLevelGraph, MaterializedLayer, Task, TaskRef


def unknown(a, axes=None) -> bool:
    """Whether a chunk length of ``a`` along ``axes`` (every axis when None) is not known (NaN)."""
    axes = range(a.ndim) if axes is None else (axes,) if isinstance(axes, (int, np.integer)) else axes
    return any(c != c for ax in axes for c in a.chunks[ax])


def _array(a, name, tasks, chunks, meta=None):
    layer = MaterializedLayer(tasks, collection_annotations={"chunks": chunks, "dtype": a.dtype})
    layers, deps = dict(a.dask.layers), dict(a.dask.dependencies)
    layers[name], deps[name] = layer, {a.name}
    return da.Array(HighLevelGraph(layers, deps), name, chunks, meta=a._meta if meta is None else meta)


def _join(ax, *blocks):
    return blocks[0] if len(blocks) == 1 else np.concatenate(blocks, axis=ax)


def one_block(a, axis):
    """``a`` with its blocks along ``axis`` joined into one (``a.rechunk({axis: -1})``, which dask refuses for
    unknown lengths): a task per block of the other axes concatenating its run along ``axis``."""
    if a.numblocks[axis] == 1:
        return a
    name = "join-unknown-" + tokenize(a.name, axis)
    tasks = {}
    for idx in np.ndindex(*(1 if k == axis else n for k, n in enumerate(a.numblocks))):
        key = (name, *idx)
        refs = [TaskRef((a.name, *idx[:axis], j, *idx[axis + 1:])) for j in range(a.numblocks[axis])]
        tasks[key] = Task(key, _join, axis, *refs)
    total = sum(a.chunks[axis])
    chunks = tuple((total,) if k == axis else c for k, c in enumerate(a.chunks))
    return _array(a, name, tasks, chunks)


def rechunk(a, chunks):
    """dask's ``rechunk``, where an axis of unknown lengths asked to be one chunk (-1, or its whole length) is
    joined block by block (:func:`one_block`) and the known axes rechunked by dask."""
    if not unknown(a):
        return a.rechunk(chunks)
    if isinstance(chunks, dict):
        spec = {(k % a.ndim): v for k, v in chunks.items()}
    elif isinstance(chunks, (tuple, list)) and len(chunks) == a.ndim:
        spec = dict(enumerate(chunks))
    else:
        spec = {k: chunks for k in range(a.ndim)}
    joined = []
    for k, v in list(spec.items()):
        if unknown(a, k):
            whole = (isinstance(v, int) and v == -1) or (isinstance(v, tuple) and len(v) == 1)
            if whole:
                joined.append(k)
                del spec[k]
    out = a.rechunk(spec) if spec else a
    for k in joined:
        out = one_block(out, k)
    return out


def flip(a, axes):
    """``a`` reversed along ``axes`` (``np.flip``): dask's slices by position, which needs the lengths.  Along an
    axis of unknown lengths its blocks are joined, flipped and cut back into ``a``'s blocks (:func:`along_one_block`):
    the result's blocks hold as many elements as ``a``'s, so it lines up with ``a`` block by block (the blocks in
    reversed order, each flipped, would not, and a block of one row would broadcast against another's)."""
    if not unknown(a, axes):
        return da.flip(a, axes)
    known = [ax for ax in axes if not unknown(a, ax)]
    out = da.flip(a, known) if known else a
    for ax in axes:
        if unknown(a, ax):
            out = along_one_block(np.flip, out, ax, axis=ax)
    return out


def _carry(binop, axis, carried, block):
    """The running value after ``block``: ``carried`` combined with ``block``'s last slice along ``axis``, or
    ``carried`` itself after a block without any (dask's scan broadcast the empty slice and failed)."""
    if block.shape[axis] == 0:
        return carried
    last = block[(slice(None),) * axis + (slice(-1, None),)]
    return binop(carried, last)


def _ident(meta, ident, dtype, shape):
    return np.full_like(meta, ident, dtype=dtype, shape=shape)


def cumreduction(func, binop, ident, a, axis, dtype=None):
    """dask's sequential ``cumreduction`` (``func`` within blocks, ``binop`` carrying each block's last value
    into the next), where a block along ``axis`` may be empty: such a block carries the running value on."""
    if not unknown(a, axis):
        return da.reductions.cumreduction(func, binop, ident, a, axis, dtype=dtype)
    if dtype is None:
        dtype = getattr(func(np.ones((0,), dtype=a.dtype)), "dtype", object)
    try:
        takes_dtype = "dtype" in inspect.signature(func).parameters
    except ValueError:
        takes_dtype = isinstance(getattr(func, "__self__", None), np.ufunc)
    m = a.map_blocks(partial(func, dtype=dtype) if takes_dtype else func, axis=axis, dtype=dtype)
    name = f"{getattr(func, '__name__', 'scan')}-unknown-{tokenize(func, axis, binop, ident, a.name, dtype)}"
    tasks = {}
    others = [range(n) if k != axis else [0] for k, n in enumerate(a.numblocks)]
    for idx in np.ndindex(*(len(r) for r in others)):
        shape = tuple(a.chunks[k][i] if k != axis else 1 for k, i in enumerate(idx))
        carried = (name, "extra", *idx)
        tasks[carried] = Task(carried, _ident, m._meta, ident, m.dtype, shape)
        for j in range(a.numblocks[axis]):
            at = (*idx[:axis], j, *idx[axis + 1:])
            tasks[(name, *at)] = Task((name, *at), binop, TaskRef(carried), TaskRef((m.name, *at)))
            if j + 1 < a.numblocks[axis]:
                nxt = (name, "extra", *idx[:axis], j + 1, *idx[axis + 1:])
                tasks[nxt] = Task(nxt, _carry, binop, axis, TaskRef(carried), TaskRef((m.name, *at)))
                carried = nxt
    layer = MaterializedLayer(tasks, collection_annotations={"chunks": a.chunks, "dtype": m.dtype})
    layers, deps = dict(m.dask.layers), dict(m.dask.dependencies)
    layers[name], deps[name] = layer, {m.name}
    return da.Array(HighLevelGraph(layers, deps), name, a.chunks, meta=m._meta)


def _never_empty(block, axes, fill):
    if all(block.shape[ax] for ax in axes):
        return block
    shape = tuple(max(n, 1) if k in axes else n for k, n in enumerate(block.shape))
    return np.full_like(block, fill, shape=shape)


def identity_of(fn, dtype):
    """What ``fn`` (``max`` or ``min``) of nothing may be taken as: the lowest (highest) value of ``dtype``."""
    dtype = np.dtype(dtype)
    largest = fn in ("max", "amax", "nanmax")
    if dtype.kind == "b":
        return not largest
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return info.min if largest else info.max
    return -np.inf if largest else np.inf


def no_empty_blocks(a, axes, fill):
    """``a`` with each block holding nothing along ``axes`` (of unknown lengths) replaced by one slice of
    ``fill`` there: dask's ``max``/``min`` of an empty block is an empty partial, which its combine step cannot
    join with the others' (``fill``, max's or min's identity, leaves the result as it is)."""
    axes = tuple(ax for ax in axes if unknown(a, ax))
    if not axes:
        return a
    return a.map_blocks(_never_empty, axes=axes, fill=fill, dtype=a.dtype, meta=a._meta)


def _length(block, axis):
    return block.shape[axis]


def _piece(joined, axis, *lengths):
    start = sum(lengths[:-1])
    return joined[(slice(None),) * axis + (slice(start, start + lengths[-1]),)]


def split_like(joined, like, axis):
    """``joined`` (one block along ``axis``, as long as ``like``) cut into ``like``'s blocks along ``axis``: each
    block's length read from ``like``'s block when computed, so the result's chunks are ``like``'s (a cotangent
    meets its input's blocks as they are) without the lengths being known here."""
    if like.numblocks[axis] == 1:
        return joined
    token = tokenize(joined.name, like.name, axis)
    name, lens = "split-unknown-" + token, "lengths-unknown-" + token
    tasks = {}
    for idx in np.ndindex(*like.numblocks):
        at = (*idx[:axis], 0, *idx[axis + 1:])
        if idx[axis] == 0:
            for j in range(like.numblocks[axis]):
                k = (lens, *idx[:axis], j, *idx[axis + 1:])
                tasks[k] = Task(k, _length, TaskRef((like.name, *k[1:])), axis)
        refs = [TaskRef((lens, *idx[:axis], j, *idx[axis + 1:])) for j in range(idx[axis] + 1)]
        tasks[(name, *idx)] = Task((name, *idx), _piece, TaskRef((joined.name, *at)), axis, *refs)
    layer = MaterializedLayer(tasks, collection_annotations={"chunks": like.chunks, "dtype": joined.dtype})
    layers = {**like.dask.layers, **joined.dask.layers}
    deps = {**like.dask.dependencies, **joined.dask.dependencies}
    layers[name], deps[name] = layer, {joined.name, like.name}
    return da.Array(HighLevelGraph(layers, deps), name, like.chunks, meta=joined._meta)


def along_one_block(fn, a, ax, **kwargs):
    """``fn`` (a block function keeping the block's shape) applied along the whole of ``axis``: the blocks
    joined there, ``fn`` applied, and cut back into ``a``'s blocks (:func:`split_like`)."""
    joined = one_block(a, ax)
    out = joined.map_blocks(fn, dtype=kwargs.pop("dtype", a.dtype), meta=kwargs.pop("meta", a._meta), **kwargs)
    return split_like(out, a, ax)


def positions(a, axis):
    """Each element's index along ``axis`` (int64, ``a``'s shape and blocks), counted block by block: dask's
    ``arange`` needs the length."""
    ones = a.map_blocks(np.ones_like, dtype=np.int64, meta=a._meta.astype(np.int64))
    return cumreduction(np.cumsum, np.add, 0, ones, axis, dtype=np.int64) - 1


def _broadcast_block(b, shape):
    lead = len(shape) - b.ndim
    return np.broadcast_to(b, tuple(b.shape[k - lead] if n is None else n for k, n in enumerate(shape)))


def broadcast_to(a, shape, chunks=None):
    """dask's ``broadcast_to``, where an axis of unknown lengths stays as it is (each block broadcast along the
    other axes): dask's compares the lengths, and NaN equals nothing.  Broadcasting a length-1 axis to an unknown
    length would need the lengths: refused."""
    shape = tuple(shape)
    if not unknown(a) and all(n == n for n in shape):
        return da.broadcast_to(a, shape, chunks=chunks)
    lead = len(shape) - a.ndim
    spec, out_chunks, new = [], [], {}
    for k, n in enumerate(shape):
        src = a.shape[k - lead] if k >= lead else 1
        if k >= lead and (src != 1 or n == 1 or src != src):
            spec.append(None)
            out_chunks.append(a.chunks[k - lead])
        elif n != n:
            raise NotImplementedError(
                f"broadcasting a tensor of shape {tuple(a.shape)} to {shape}: the length {n} is not known until it "
                "is computed (after a boolean mask: dask's unknown chunk sizes)")
        else:
            spec.append(int(n))
            out_chunks.append((int(n),))
            if chunks is not None and tuple(chunks[k]) != (n,):
                new[k] = chunks[k]
    if lead:
        a = a.reshape((1,) * lead + a.shape) if not unknown(a) else a[(None,) * lead]
    out = a.map_blocks(_broadcast_block, shape=tuple(spec), chunks=tuple(out_chunks), dtype=a.dtype, meta=a._meta)
    return out.rechunk(new) if new else out


def _block_arg(b, axis, largest):
    if not b.shape[axis]:
        return np.zeros_like(b, dtype=np.int64, shape=tuple(1 if k == axis else n for k, n in enumerate(b.shape)))
    return (np.argmax if largest else np.argmin)(b, axis=axis, keepdims=True)


def _block_value(b, axis, largest):
    if not b.shape[axis]:
        return np.zeros_like(b, shape=tuple(1 if k == axis else n for k, n in enumerate(b.shape)))
    return np.take_along_axis(b, _block_arg(b, axis, largest), axis)


def _block_length(b, axis):
    return np.full_like(b, b.shape[axis], dtype=np.int64, shape=tuple(1 if k == axis else n
                                                                       for k, n in enumerate(b.shape)))


def _pick(values, where, lengths, axis, largest):
    """The index (``where``) of the first extreme of ``values`` (a block's each) along ``axis``, blocks without
    elements (``lengths`` 0) passed over; a NaN is the extreme, as torch's and NumPy's."""
    valid = lengths > 0
    nan = valid & (values != values)
    best = np.where(valid, values, _lowest(values, largest))
    best = best.max(axis, keepdims=True) if largest else best.min(axis, keepdims=True)
    hit = np.where(nan.any(axis, keepdims=True), nan, valid & (values == best))
    return np.take_along_axis(where, np.argmax(hit, axis=axis, keepdims=True), axis)


def _lowest(values, largest):
    kind = values.dtype.kind
    if kind == "b":
        return not largest
    if kind in "iu":
        info = np.iinfo(values.dtype)
        return info.min if largest else info.max
    return -np.inf if largest else np.inf


def arg_reduction(a, fn, axis, keepdims=False):
    """dask's ``argmax``/``argmin`` along ``axis`` of unknown lengths: each block's extreme and local index, its
    offset the running sum of the blocks' lengths (counted from the blocks when computed), the first extreme
    among the blocks' (dask's needs the offsets on the client)."""
    largest = fn == "argmax"
    small = tuple((1,) * a.numblocks[axis] if k == axis else c for k, c in enumerate(a.chunks))
    imeta = a._meta.astype(np.int64)
    local = a.map_blocks(_block_arg, axis=axis, largest=largest, chunks=small, dtype=np.int64, meta=imeta)
    values = a.map_blocks(_block_value, axis=axis, largest=largest, chunks=small, dtype=a.dtype, meta=a._meta)
    lengths = a.map_blocks(_block_length, axis=axis, chunks=small, dtype=np.int64, meta=imeta)
    where = local + (da.cumsum(lengths, axis=axis) - lengths)
    values, where, lengths = (v.rechunk({axis: -1}) for v in (values, where, lengths))
    out_chunks = tuple((1,) if k == axis else c for k, c in enumerate(values.chunks))
    out = da.map_blocks(_pick, values, where, lengths, axis=axis, largest=largest, chunks=out_chunks,
                        dtype=np.int64, meta=imeta)
    return out if keepdims else out.squeeze(axis)
