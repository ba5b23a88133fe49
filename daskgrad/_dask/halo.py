"""Halos for stencils: each chunk extended by its neighbours' edge cells, or by the boundary rule at
the array's edges.

dask's ``overlap`` spends ~16 tasks a chunk on a 2-D halo (a slicing per strip and per corner,
concatenations per axis, constant-boundary blocks made from nothing): in a wave equation's
checkpointed gradient two thirds of the tasks were halo tasks.  Here an axis costs one task per
chunk, which concatenates inside, and one slicing task per strip a neighbour sends (so on a
cluster only the strip travels); an axis in one chunk costs that one task.  Axes are extended one
after another, so the corners come with the second axis's strips, already extended along the first.
"""
from __future__ import annotations

import numpy as np
from dask.base import tokenize

import dask.array as da

from .. import chunk
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
    token = tokenize(a.name, ax, d, boundary)
    name, lo, hi = "halo-" + token, "halo-lo-" + token, "halo-hi-" + token
    n = a.numblocks[ax]
    periodic = boundary == "periodic"
    tasks, firsts, lasts = {}, {}, {}
    for idx in np.ndindex(*a.numblocks):
        i = idx[ax]

        def at(j):
            return idx[:ax] + (j,) + idx[ax + 1:]

        left = i - 1 if i else (n - 1 if periodic else None)
        right = i + 1 if i < n - 1 else (0 if periodic else None)
        if left is not None:  # the left neighbour's last d cells
            key = (hi, *at(left))
            lasts[key] = Task(key, _cells, TaskRef((a.name, *at(left))), ax, -d, None)
        if right is not None:  # the right neighbour's first d cells
            key = (lo, *at(right))
            firsts[key] = Task(key, _cells, TaskRef((a.name, *at(right))), ax, 0, d)
        key = (name, *idx)
        tasks[key] = Task(key, _extended, TaskRef((a.name, *idx)),
                          None if left is None else TaskRef((hi, *at(left))),
                          None if right is None else TaskRef((lo, *at(right))), ax, d, boundary)
    layers, deps = dict(a.dask.layers), dict(a.dask.dependencies)
    for strip, dsk in ((lo, firsts), (hi, lasts)):
        if dsk:
            layers[strip], deps[strip] = MaterializedLayer(dsk), {a.name}
    layers[name] = MaterializedLayer(tasks)
    deps[name] = {a.name} | {s for s in (lo, hi) if s in layers}
    chunks = a.chunks[:ax] + (tuple(c + 2 * d for c in a.chunks[ax]),) + a.chunks[ax + 1:]
    return da.Array(HighLevelGraph(layers, deps), name, chunks, meta=a._meta)


def _along(block, ax, s):
    return block[(slice(None),) * ax + (s,)]


def _cells(block, ax, start, stop):
    return _along(block, ax, slice(start, stop))


def _extended(block, left, right, ax, d, boundary):
    """``block`` with the strips ``left`` and ``right`` (None at the array's edges: the boundary
    rule's cells) concatenated along ``ax``."""
    if left is None:
        left = _edge(block, ax, d, boundary, first=True)
    if right is None:
        right = _edge(block, ax, d, boundary, first=False)
    return np.concatenate([left, block, right], axis=ax)


def _edge(block, ax, d, boundary, first):
    n = block.shape[ax]
    if n < d:  # the caller rechunks first (ensure_minimum_chunksize); a short strip would misdeclare chunks
        raise ValueError(f"a halo of {d} cells needs chunks at least {d} long, got {n} along axis {ax}")
    if boundary == "reflect":
        return _along(block, ax, slice(d - 1, None, -1) if first else slice(n - 1, n - d - 1 if n > d else None, -1))
    if boundary == "nearest":
        return np.concatenate([_along(block, ax, slice(0, 1) if first else slice(n - 1, n))] * d, axis=ax)
    shape = block.shape[:ax] + (d,) + block.shape[ax + 1:]
    return chunk.filled(block, shape, block.dtype, boundary)
