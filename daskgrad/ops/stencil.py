"""Stencils: ``correlate`` and ``convolve`` with a small constant kernel (contract: see ``elementwise.py``).

The forward extends each chunk by a halo from its neighbours, or from the boundary
rule at the array's edges (:func:`daskgrad._dask.halo`: three tasks a chunk and axis, where
dask's ``overlap`` makes ~16 a chunk in 2-D), followed by one blockwise task per
chunk that adds shifted slices of the halo'd block, one slice per nonzero tap.
That kernel uses only slicing, ``*`` and ``+``, so it runs on any array module
(NumPy, cupy) without scipy.

The op is linear: ``y = C P x`` where ``P`` extends ``x`` by the boundary rule
and ``C`` is the "valid" correlation of the extended array.  The rule is the
transpose ``Pᵀ Cᵀ g``: ``Cᵀ`` is correlation of the zero-padded cotangent with
the flipped kernel (a full convolution), and ``Pᵀ`` folds each halo cotangent
back onto the cells it was copied from (dropped for ``constant``, wrapped round
for ``wrap``, mirrored for ``reflect``, summed onto the edge cell for
``nearest``).  It is written with daskgrad ops, so it is differentiable again.
Boundary names are scipy.ndimage's; ``reflect`` is scipy's (the edge cell is
repeated, NumPy's ``symmetric``), which is also dask's.
"""
from __future__ import annotations

import dask.array as da
import numpy as np
from dask.array.overlap import ensure_minimum_chunksize

from .. import _dask as door
from .._dask import kernels
from ..graph import primitive
from .._tensor import Tensor
from ._util import as_tensor, public
from .elementwise import add, zeros_like
from .indexing import getitem
from .reductions import sum as sum_
from .shape import broadcast_to, concatenate, flip, pad, rechunk

MODES = {"constant": None, "reflect": "reflect", "nearest": "nearest", "wrap": "periodic", "periodic": "periodic"}


@public()
def correlate(x, weights, mode="reflect", cval=0.0, origin=0):
    """``scipy.ndimage.correlate`` on a chunked tensor: ``out[i] = sum_j w[j] x[i + j - c]``,
    ``c = k // 2 + origin`` per axis, same shape as ``x``.  ``weights`` is a small constant
    array with ``x.ndim`` axes; ``mode`` is ``constant`` (``cval``), ``reflect``, ``nearest``
    or ``wrap`` (alias ``periodic``).  Gradients flow to ``x`` across chunk boundaries."""
    x = as_tensor(x)
    w = _weights(weights, x.ndim)
    centre = _centre(w.shape, origin)
    _check(x, w, centre, mode)
    return correlate_p.bind(x, w=w, centre=centre, mode=mode, cval=cval)


@public()
def convolve(x, weights, mode="reflect", cval=0.0, origin=0):
    """``scipy.ndimage.convolve``: correlation with the flipped kernel (same origin convention,
    so even-sized kernels line up as in scipy)."""
    x = as_tensor(x)
    w = _weights(weights, x.ndim)
    origins = np.broadcast_to(np.array(origin, dtype=int), (w.ndim,))
    flipped_origin = tuple(-int(o) - (1 - k % 2) for o, k in zip(origins, w.shape))
    return correlate(x, w[(slice(None, None, -1),) * w.ndim], mode, cval, flipped_origin)


# --------------------------------------------------------------------------- checks
def _weights(weights, ndim):
    if isinstance(weights, Tensor):
        if weights.requires_grad:
            raise NotImplementedError("correlate/convolve: the kernel must be a constant (no gradient with "
                                      "respect to the weights); pass weights.detach()")
        weights = weights.cpu().numpy()
    w = np.array(weights, dtype=float)  # the kernel is a small host constant, never a chunk
    w.setflags(write=False)  # (its own copy, read-only: a program's key reads its values alone)
    if w.ndim != ndim:
        raise RuntimeError("filter weights array has incorrect shape.")  # scipy.ndimage's error
    if 0 in w.shape:
        raise ValueError("weights must not be empty")
    return w


def _centre(shape, origin):
    origins = np.broadcast_to(np.array(origin, dtype=int), (len(shape),))
    centre = tuple(k // 2 + int(o) for k, o in zip(shape, origins))
    if any(not 0 <= c < k for c, k in zip(centre, shape)):
        raise ValueError("invalid origin")
    return centre


def _check(x, w, centre, mode):
    if mode not in MODES:
        raise ValueError(f"boundary mode not supported: {mode!r} (one of {', '.join(MODES)})")
    for n, d in zip(x.shape, _depths(w.shape, centre)):
        if d > n:
            raise ValueError(f"the kernel reaches {d} cells past an axis of length {n}")


def _depths(shape, centre):
    return tuple(max(c, k - 1 - c) for k, c in zip(shape, centre))


# -------------------------------------------------------------------------- forward
def _correlate_array(a, *, w, centre, mode, cval):
    if a.dtype.kind not in "fc":
        a = a.astype(np.float64)
    depth = _depths(w.shape, centre)
    taps = tuple((tuple(j - c for j, c in zip(idx, centre)), float(v)) for idx, v in np.ndenumerate(w) if v != 0)
    a = a.rechunk(tuple(ensure_minimum_chunksize(d, c) if d else c for d, c in zip(depth, a.chunks)))
    boundary = cval if MODES[mode] is None else MODES[mode]
    halo = door.halo(a, depth, boundary)
    return da.map_blocks(_correlate_block, halo, taps=taps, depth=depth, chunks=a.chunks, dtype=a.dtype,
                         meta=a._meta)


# w: the small host kernel (a NumPy constant, never a chunk)
correlate_p = primitive("correlate", torch="ConvolutionBackward0", impl=_correlate_array)
correlate_p.vjp(lambda g, s, *, w, centre, mode, cval: (_adjoint(g, w, centre, mode),))


def _correlate_block(block, taps, depth):
    """One chunk's correlation from its halo'd block: a sum of shifted slices (any array module).

    The taps of one weight are summed before their multiply, into a buffer this function owns (a
    symmetric stencil's: a 4th-order Laplacian's 9 taps are 3 weights), so a chunk costs a pass per
    tap and one per weight instead of two per tap, and no temporary per tap."""
    groups, zero = _tap_groups(taps, depth, block.shape)

    def shifted(index):
        return block[index]

    out = kernels.weighted_sum([[shifted(o) for o in offsets] for offsets in groups.values()], list(groups)) \
        if groups and block.size >= kernels.MIN_ELEMENTS else None
    if out is not None:  # one pass, numexpr's (the same bits as below)
        return out
    for weight, offsets in groups.items():
        if len(offsets) == 1:
            part = shifted(offsets[0]) * weight
        else:
            part = shifted(offsets[0]) + shifted(offsets[1])
            for offset in offsets[2:]:
                part += shifted(offset)
            if weight != 1.0:
                part *= weight
        if out is None:
            out = part
        else:
            out += part
    if out is None:  # an all-zero kernel
        out = np.zeros_like(shifted(zero))
    return out


def _tap_groups(taps, depth, shape):
    """``(weight -> the indices of its taps' shifted slices of a halo'd block of ``shape``, in the
    kernel's order; the index of the unshifted one)``: worked out once per kernel and block shape (a
    time loop's step runs it on every chunk, where on small chunks it cost as much as the sums)."""
    key = (taps, depth, shape)
    hit = _groups.get(key)
    if hit is None:
        size = tuple(n - 2 * d for n, d in zip(shape, depth))

        def index(offset):
            return tuple(slice(d + o, d + o + n) for d, o, n in zip(depth, offset, size))

        groups = {}
        for offset, weight in taps:
            groups.setdefault(weight, []).append(index(offset))
        hit = groups, index((0,) * len(shape))
        if len(_groups) >= 256:
            _groups.clear()
        _groups[key] = hit
    return hit


_groups = {}  # (taps, depth, block shape) -> _tap_groups's (never changed once made)


# ------------------------------------------------------------------------- backward
def _adjoint(g, w, centre, mode):
    """``Pᵀ Cᵀ g``: full convolution of ``g`` (zero-padded by the halo), then each halo folded back."""
    depth = _depths(w.shape, centre)
    flipped = w[(slice(None, None, -1),) * w.ndim]
    flipped_centre = tuple(k - 1 - c for k, c in zip(w.shape, centre))
    if mode == "constant":  # Pᵀ drops the halo: the full convolution's centre is a zero-boundary one
        return correlate_p.bind(g, w=flipped, centre=flipped_centre, mode="constant", cval=0.0)
    full = correlate_p.bind(pad(g, [(d, d) for d in depth]), w=flipped, centre=flipped_centre, mode="constant",
                            cval=0.0)
    shape = g.shape  # the output's, which is the input's
    for ax, (n, d) in enumerate(zip(shape, depth)):
        if d == 0:
            continue

        def part(lo, hi, t=full, ax=ax):
            return getitem(t, (slice(None),) * ax + (slice(lo, hi),))

        centre_part, left, right = part(d, d + n), part(0, d), part(n + d, n + 2 * d)

        def onto(strip, lo, hi, ax=ax, target=centre_part):
            # the halo strip put back at its place along the axis, zeros elsewhere, on the centre's
            # chunks: no fragmenting add.  Not pad: dask pads in chunks of the strip's width, n / d
            # tasks per fold and per step
            parts = [_zeros_along(strip, ax, lo), strip, _zeros_along(strip, ax, hi)]
            return rechunk(concatenate([t for t in parts if t.shape[ax]], axis=ax), target.chunks)

        if mode in ("wrap", "periodic"):  # the left halo holds x[n-d:], the right one x[:d]
            full = add(add(centre_part, onto(left, n - d, 0)), onto(right, 0, n - d))
        elif mode == "reflect":  # the left halo holds x[d-1::-1], the right one x[:n-d-1:-1]
            full = add(add(centre_part, onto(flip(left, ax), 0, n - d)), onto(flip(right, ax), n - d, 0))
        else:  # nearest: every left halo cell is a copy of x[0], every right one of x[n-1]
            full = add(add(centre_part, onto(sum_(left, axis=ax, keepdims=True), 0, n - 1)),
                       onto(sum_(right, axis=ax, keepdims=True), n - 1, 0))
    return full


def _zeros_along(t, ax, n):
    """Zeros like ``t`` (its chunk type) but ``n`` long along ``ax``, in one chunk along it."""
    edge = getitem(t, (slice(None),) * ax + (slice(0, 1),))
    shape = t.shape[:ax] + (n,) + t.shape[ax + 1:]
    return broadcast_to(zeros_like(edge), shape)
