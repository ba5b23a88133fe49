"""Sliding windows for convolution and pooling (contract: see ``elementwise.py``).

``unfold`` is torch's im2col on chunked spatial axes: ``(N, C, *spatial)`` becomes
``(N, C, K, *out)``, the ``K = prod(kernel)`` taps of each output position (zero padding,
stride and dilation as in torch; pooling pads with ``fill``).  Convolution is then a
contraction of the taps with the weight, max pooling their ``amax`` and average pooling their
mean, so the weight's and the input's gradients come from ops that already have rules.

Chunks: each output position belongs to the input chunk that holds the middle of its window,
so the output's spatial chunks follow the input's, for any stride (no rechunk to multiples of
it).  Each output chunk reads one window of the input: its own cells plus a halo of at most
``dilation * (kernel - 1)`` cells from its neighbours (and the padding at the array's edges),
gathered by slicing, as dask's ``overlap`` does.  Inside a window the taps are strided slices,
a kernel of slicing and ``stack`` that runs on any array module.

The rule of ``unfold`` is ``fold``: each tap scattered back into its window (the block
kernel's transpose), then the windows added onto the input's chunks where they overlap
(the halo cotangents folded back onto the cells they were copied from, as the stencil's
rule does).  ``fold``'s rule is ``unfold`` with zero fill: both are linear, so this is exact
across chunk boundaries, and differentiable again.
"""
from __future__ import annotations

import itertools

import dask.array as da
import numpy as np
from dask.array.utils import meta_from_array

from ..graph import primitive
from ._util import as_tensor


# ----------------------------------------------------------------------------- layout
def axis_windows(n, chunks, kernel, stride, dilation, lo, hi):
    """Host metadata for one spatial axis of length ``n`` (no chunk is read): the output length,
    the output's chunks and each output chunk's window ``[start, stop)`` in input coordinates
    (negative or past ``n`` where it reaches into the padding)."""
    reach = dilation * (kernel - 1)
    n_out = (n + lo + hi - reach - 1) // stride + 1
    starts = np.arange(max(n_out, 0)) * stride - lo
    bounds = np.cumsum((0,) + tuple(chunks))
    owner = np.searchsorted(bounds, np.clip(starts + reach // 2, 0, n - 1), side="right") - 1
    counts = [int(c) for c in np.bincount(owner, minlength=len(chunks)) if c]
    windows, first = [], 0
    for c in counts:
        windows.append((first * stride - lo, (first + c - 1) * stride - lo + reach + 1))
        first += c
    return n_out, tuple(counts), tuple(windows)


def _at(axis, index):
    return (slice(None),) * axis + (index,)


# -------------------------------------------------------------------------- windows
def _window_axis(a, axis, windows, fill):
    """One chunk per window along ``axis``: the window's cells, ``fill`` where it is padding."""
    n, parts = a.shape[axis], []
    for lo, hi in windows:
        before, after = max(0, min(hi, 0) - lo), max(0, hi - max(lo, n))
        inner = a[_at(axis, slice(min(max(lo, 0), n), max(min(hi, n), 0)))]
        if inner.shape[axis] == 0:  # all padding
            shape = a.shape[:axis] + (hi - lo,) + a.shape[axis + 1:]
            piece = da.broadcast_to(da.full_like(a[_at(axis, slice(0, 1))], fill), shape)
        elif before or after:
            widths = [(0, 0)] * a.ndim
            widths[axis] = (before, after)
            piece = da.pad(inner, widths, constant_values=fill)
        else:
            piece = inner
        parts.append(piece.rechunk({axis: hi - lo}))
    return da.concatenate(parts, axis=axis)


def _unwindow_axis(w, axis, windows, n, chunks):
    """The transpose of :func:`_window_axis` (zero fill): each input chunk is the sum of the window
    cells copied from it, padding dropped; the result has ``chunks`` along ``axis``."""
    offsets = np.cumsum((0,) + tuple(hi - lo for lo, hi in windows))
    los, his = np.array([lo for lo, _ in windows]), np.array([hi for _, hi in windows])
    segments, c0 = [], 0
    for size in chunks:
        c1, total = c0 + size, None
        # both ends of the windows increase: only a few windows, found by bisection, meet this chunk
        for j in range(int(np.searchsorted(his, c0, side="right")), int(np.searchsorted(los, c1, side="left"))):
            (lo, hi), off = windows[j], offsets[j]
            a, b = max(lo, c0), min(hi, c1)
            if a >= b:
                continue
            widths = [(0, 0)] * w.ndim
            widths[axis] = (a - c0, c1 - b)
            piece = da.pad(w[_at(axis, slice(off + a - lo, off + b - lo))], widths)
            total = piece if total is None else total + piece
        if total is None:  # no window reads these cells (a stride past the kernel, or the trailing cells)
            shape = w.shape[:axis] + (size,) + w.shape[axis + 1:]
            total = da.broadcast_to(da.zeros_like(w[_at(axis, slice(0, 1))]), shape)
        segments.append(total.rechunk({axis: size}))
        c0 = c1
    return da.concatenate(segments, axis=axis)


# -------------------------------------------------------------------- block kernels
def _counts(window_shape, taps):
    return tuple((n - d * (k - 1) - 1) // s + 1 for n, (k, s, d) in zip(window_shape, taps))


def _tap_index(offsets, taps, counts):
    return (Ellipsis,) + tuple(slice(j * d, j * d + (c - 1) * s + 1, s)
                               for j, (_, s, d), c in zip(offsets, taps, counts))


def _taps_block(block, taps):
    """One window block ``(..., *window)`` to its taps ``(..., K, *counts)`` (slicing and stack only)."""
    nsp = len(taps)
    counts = _counts(block.shape[-nsp:], taps)
    parts = [block[_tap_index(offs, taps, counts)] for offs in itertools.product(*(range(k) for k, _, _ in taps))]
    return np.stack(parts, axis=block.ndim - nsp)


def _untaps_block(g, taps):
    """The transpose of :func:`_taps_block`: each tap added back onto the window cells it read."""
    nsp = len(taps)
    counts, ax = g.shape[-nsp:], g.ndim - nsp - 1
    window = tuple((c - 1) * s + d * (k - 1) + 1 for c, (k, s, d) in zip(counts, taps))
    out = np.zeros_like(g, shape=g.shape[:ax] + window)
    for t, offs in enumerate(itertools.product(*(range(k) for k, _, _ in taps))):
        idx = _tap_index(offs, taps, counts)
        out[idx] = out[idx] + g[_at(ax, t)]
    return out


# ------------------------------------------------------------------------ primitives
def _unfold_array(a, *, taps, layouts, fill, shape, chunks):
    nsp = len(taps)
    lead = a.ndim - nsp
    for i, (_, _, windows) in enumerate(layouts):
        a = _window_axis(a, lead + i, windows, fill)
    k = int(np.prod([t[0] for t in taps]))
    chunks = a.chunks[:lead] + ((k,),) + tuple(out_chunks for _, out_chunks, _ in layouts)
    return da.map_blocks(_taps_block, a, taps=taps, new_axis=lead, chunks=chunks, dtype=a.dtype,
                         meta=meta_from_array(a._meta, ndim=a.ndim + 1))


def _fold_array(g, *, taps, layouts, shape, chunks):
    nsp = len(taps)
    lead = g.ndim - nsp - 1
    windows = tuple(tuple(hi - lo for lo, hi in layout[2]) for layout in layouts)
    g = g.rechunk({lead: -1, **{lead + 1 + i: layout[1] for i, layout in enumerate(layouts)}})
    w = da.map_blocks(_untaps_block, g, taps=taps, drop_axis=lead,
                      chunks=g.chunks[:lead] + windows, dtype=g.dtype, meta=meta_from_array(g._meta, ndim=g.ndim - 1))
    for i in reversed(range(nsp)):
        w = _unwindow_axis(w, lead + i, layouts[i][2], shape[lead + i], chunks[lead + i])
    return w


# taps: ((kernel, stride, dilation), ...) per spatial axis; layouts: axis_windows's per spatial axis
unfold_p = primitive("unfold", torch="Im2ColBackward0", impl=_unfold_array)
unfold_p.vjp(lambda g, s, *, taps, layouts, fill, shape, chunks: (
    fold_p.bind(g, taps=taps, layouts=layouts, shape=shape, chunks=chunks),))
fold_p = primitive("fold", torch="Col2ImBackward0", impl=_fold_array)
fold_p.vjp(lambda g, s, *, taps, layouts, shape, chunks: (
    unfold_p.bind(g, taps=taps, layouts=layouts, fill=0.0, shape=shape, chunks=chunks),))


def unfold(x, kernel, stride, dilation, padding, fill=0.0):
    """The taps ``(*lead, K, *out)`` of the trailing ``len(kernel)`` axes of ``x``: output position
    ``o`` along an axis reads ``x[o * stride + j * dilation - lo]`` for ``j < kernel``, ``fill`` outside
    ``x``.  ``padding`` is ``(lo, hi)`` per spatial axis.  Output lengths must be positive (callers
    raise torch's error first)."""
    x = as_tensor(x)
    nsp = len(kernel)
    lead = x.ndim - nsp
    taps = tuple(zip(kernel, stride, dilation))
    layouts = tuple(axis_windows(x.shape[lead + i], x.chunks[lead + i], k, s, d, lo, hi)
                  for i, ((k, s, d), (lo, hi)) in enumerate(zip(taps, padding)))
    return unfold_p.bind(x, taps=taps, layouts=layouts, fill=float(fill), shape=x.shape, chunks=x.chunks)
