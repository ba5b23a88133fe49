"""Halos for stencils: each chunk extended by its neighbours' edge cells, or by the boundary rule at
the array's edges; and rolls (periodic shifts) with the chunks they had.

dask's ``overlap`` spends ~16 tasks a chunk on a 2-D halo (a slicing per strip and per corner,
concatenations per axis, constant-boundary blocks made from nothing): in a wave equation's
checkpointed gradient two thirds of the tasks were halo tasks.  Here an axis costs three tasks a
chunk: two strips (a neighbour's edge cells, sliced where the neighbour is, so on a cluster only
the strip travels; or the boundary rule's cells, made from the chunk itself) and one task joining
them to the chunk.  An axis of one chunk costs one task a chunk, reading only that chunk (so chunk
fusion runs it inside the chunk's task).  Axes are extended one after another, so the corners come
with the second axis's strips, already extended along the first.
"""
from __future__ import annotations

import numpy as np
from dask.base import tokenize

import dask.array as da

from .internals import HighLevelGraph, MaterializedLayer, Task, TaskRef


def halo(a, depth, boundary):
    """The dask array ``a`` with each chunk extended by ``depth[ax]`` cells at both ends of each axis:
    its neighbours' cells inside the array, the boundary rule's at the array's edges -- a number
    (that constant), ``"reflect"`` (mirrored, the edge cell repeated: NumPy's ``symmetric``),
    ``"nearest"`` (the edge cell) or ``"periodic"`` (the other end's cells).  Every chunk must be
    at least ``depth[ax]`` long along each axis (``dask.array.overlap.ensure_minimum_chunksize``)."""
    for ax, d in enumerate(depth):
        if d:
            a = _extend(a, ax, d, boundary)
    return a


def _extend(a, ax, d, boundary):
    """``a`` extended along ``ax``: a strip task for each side of each chunk (a neighbour's edge
    cells, or the boundary rule's from the chunk itself), then a task a chunk joining them.

    Every chunk reads two strips of one layer, so chunk fusion sees a gather, as in dask's
    overlap: a strip read alone would be "chunk-aligned" and fuse each chunk with its neighbour,
    all chunks of an axis into one task (on 32 row bands of a wave equation: one fused task
    reading 791 MiB)."""
    token = tokenize(a.name, ax, d, boundary)
    name, strip = "halo-" + token, "halo-strip-" + token
    n = a.numblocks[ax]
    periodic = boundary == "periodic"
    strips, tasks = {}, {}
    for idx in np.ndindex(*a.numblocks):
        i = idx[ax]

        def block(j):
            return TaskRef((a.name, *idx[:ax], j, *idx[ax + 1:]))

        if n == 1:  # both strips come from the chunk itself: made inside the one task, which
            key = (name, *idx)  # reads only its chunk and so fuses with it (a shot's whole grid)
            tasks[key] = Task(key, _padded, block(i), ax, d, boundary)
            continue
        for side, j, cells in ((0, i - 1, (-d, None)), (1, i + 1, (0, d))):
            key = (strip, *idx, side)
            if 0 <= j < n or periodic:  # a neighbour's edge cells (across the ends if periodic)
                strips[key] = Task(key, _cells, block(j % n), ax, *cells)
            else:
                strips[key] = Task(key, _edge, block(i), ax, d, boundary, side == 0)
        key = (name, *idx)
        tasks[key] = Task(key, _joined, TaskRef((strip, *idx, 0)), block(i), TaskRef((strip, *idx, 1)), ax)
    chunks = a.chunks[:ax] + (tuple(c + 2 * d for c in a.chunks[ax]),) + a.chunks[ax + 1:]
    # the strips' chunks (``d`` cells along ``ax``, the two sides a last axis of length 1 each) noted as
    # an array's are, so that estimate_memory sizes them (a strip sized as its chunk made a wave
    # equation's checkpointed gradient's estimate 1.4x what a worker held)
    strip_chunks = a.chunks[:ax] + ((d,) * n,) + a.chunks[ax + 1:] + ((1, 1),)
    layers, deps = dict(a.dask.layers), dict(a.dask.dependencies)
    if strips:
        layers[strip], deps[strip] = MaterializedLayer(
            strips, collection_annotations={"chunks": strip_chunks, "dtype": a.dtype}), {a.name}
    layers[name], deps[name] = MaterializedLayer(
        tasks, collection_annotations={"chunks": chunks, "dtype": a.dtype}), {a.name} | ({strip} if strips else set())
    return da.Array(HighLevelGraph(layers, deps), name, chunks, meta=a._meta)


def _along(block, ax, s):
    return block[(slice(None),) * ax + (s,)]


def _cells(block, ax, start, stop):
    return _along(block, ax, slice(start, stop))


def _joined(left, block, right, ax):
    return np.concatenate([left, block, right], axis=ax)


def _padded(block, ax, d, boundary):
    """The one chunk of an axis extended at both ends: the boundary rule's cells, or periodic, its
    own other end's."""
    if boundary == "periodic":
        return _joined(_cells(block, ax, -d, None), block, _cells(block, ax, 0, d), ax)
    return _joined(_edge(block, ax, d, boundary, True), block, _edge(block, ax, d, boundary, False), ax)


def _edge(block, ax, d, boundary, first):
    n = block.shape[ax]
    if n < d:  # the caller rechunks first (ensure_minimum_chunksize); a short strip would misdeclare chunks
        raise ValueError(f"a halo of {d} cells needs chunks at least {d} long, got {n} along axis {ax}")
    if boundary == "reflect":
        return _along(block, ax, slice(d - 1, None, -1) if first else slice(n - 1, n - d - 1 if n > d else None, -1))
    if boundary == "nearest":
        return np.concatenate([_along(block, ax, slice(0, 1) if first else slice(n - 1, n))] * d, axis=ax)
    return np.full_like(_along(block, ax, slice(0, d)), boundary)  # the strip's shape, never 0-d


def rolled(a, shift, axis):
    """``a`` rolled as ``np.roll(a, shift, axis)`` (``axis`` not None, chunk lengths known), with ``a``'s
    chunks: a task a chunk joining the pieces of (at most a few) chunks it takes.

    ``dask.array.roll`` concatenates two slices, leaving chunks that differ from ``a``'s (``(1, 16, 15)``
    for ``(16, 16)`` rolled by 1), so the next elementwise op with ``a`` rechunked them back: a roll-based
    periodic stencil spent most of its step in slicing, concatenating and rechunk-merging tasks."""
    total = {}
    for s, ax in np.broadcast(shift, axis):  # (NumPy's: shifts on one axis add up)
        total[int(ax)] = total.get(int(ax), 0) + int(s)
    for ax, s in sorted(total.items()):
        a = _roll_axis(a, s, ax)
    return a


def _roll_axis(a, s, ax):
    n = a.shape[ax]
    s = s % n if n else 0
    token = tokenize(a.name, s, ax)
    name = "roll-" + token
    starts = np.cumsum((0,) + a.chunks[ax])
    sources = []  # per output chunk along ``ax``: (input chunk, start, stop) pieces, in order
    for lo, hi in zip(starts[:-1], starts[1:]):
        pieces, pos, left = [], (lo - s) % n if n else 0, hi - lo
        while left:
            c = int(np.searchsorted(starts, pos, side="right")) - 1
            take = min(left, int(starts[c + 1]) - pos)
            pieces.append((c, pos - int(starts[c]), pos - int(starts[c]) + take))
            pos, left = (pos + take) % n, left - take
        sources.append(pieces)
    tasks = {}
    for idx in np.ndindex(*a.numblocks):
        key = (name, *idx)
        args = []
        for c, start, stop in sources[idx[ax]] or [(idx[ax], 0, 0)]:  # (an empty chunk: itself)
            args += [TaskRef((a.name, *idx[:ax], c, *idx[ax + 1:])), start, stop]
        tasks[key] = Task(key, _pieces, ax, *args)
    layer = MaterializedLayer(tasks, collection_annotations={"chunks": a.chunks, "dtype": a.dtype})
    layers, deps = dict(a.dask.layers), dict(a.dask.dependencies)
    layers[name], deps[name] = layer, {a.name}
    return da.Array(HighLevelGraph(layers, deps), name, a.chunks, meta=a._meta)


def _pieces(ax, *parts):
    """A rolled chunk: the slices ``[start, stop)`` along ``ax`` of the blocks in ``parts`` (block,
    start, stop, block, start, stop, ...), joined in order."""
    pieces = [_cells(block, ax, start, stop) for block, start, stop in zip(parts[::3], parts[1::3], parts[2::3])]
    return pieces[0] if len(pieces) == 1 else np.concatenate(pieces, axis=ax)
