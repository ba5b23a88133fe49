"""torch.nn.functional's adaptive max pooling, max unpooling, power-average (Lp) pooling and ``channel_shuffle``,
as compositions of daskgrad ops (gathers, the max pooling's first-largest mask, a scatter, reshapes), so their
gradients are their parts' and they work on inputs chunked along every axis.

>>> y, i = F.adaptive_max_pool2d(images, (2, 3), return_indices=True)
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Iterable

import numpy as np
from dask.array.utils import meta_from_array

from .. import chunk, ops
from .._tensor import Tensor, rand as _rand, zeros
from ..graph import guard
from ..ops._util import TORCH_TYPE_NAMES, as_tensor, constant_like
from ._spatial import _fresh
from ._conv import _check_adaptive_input, _first_max, _flat_positions, _tuple, avg_pool, max_pool


# ------------------------------------------------------------------ adaptive max pooling
def _list_with_default(out_size, defaults):
    """torch's ``_list_with_default``: ``None`` entries of ``out_size`` take the input's sizes."""
    if isinstance(out_size, numbers.Integral):
        return out_size
    if len(defaults) <= len(out_size):
        raise ValueError(f"Input dimension should be at least {len(out_size) + 1}")
    return [v if v is not None else d for v, d in zip(out_size, defaults[-len(out_size):])]


def _adaptive_max_checks(input, nsp, name):
    _check_adaptive_input(input, nsp, name)
    if input.dtype.kind not in "f":
        raise NotImplementedError(f'"{name}" not implemented for \'{TORCH_TYPE_NAMES.get(input.dtype.name)}\'')


def adaptive_max_pool(input, output_size, return_indices, nsp):
    """The largest cell of each of torch's adaptive windows ``[floor(i n / o), ceil((i + 1) n / o))`` (a box
    per output cell).  Each window's cells are gathered (its taps, padded with ``-inf`` to the longest window's
    length along each axis) and the first largest in row-major order is picked, as torch's kernel does: the
    gradient goes to that one cell, and ``return_indices`` gives its flat position in its ``(n, c)`` plane."""
    name = f"adaptive_max_pool{nsp}d"
    given = input = as_tensor(input)
    if nsp == 1:
        _check_adaptive_input(input, 1, name)
        sizes = _tuple(output_size, 1)
        if len(sizes) != 1:
            raise RuntimeError(f"adaptive_max_pool1d() argument 'output_size' should contain one int (got "
                               f"{len(sizes)})")
    else:
        sizes = _list_with_default(output_size, input.shape)
        sizes = (sizes,) * nsp if isinstance(sizes, numbers.Integral) else tuple(int(s) for s in sizes)
        if len(sizes) != nsp:
            raise RuntimeError(f"{name}(): internal error: output_size.size() must be {nsp}")
    _adaptive_max_checks(input, nsp, name)
    batched = input.ndim == nsp + 2
    x = input if batched else ops.expand_dims(input, 0)
    if 0 in sizes:  # (torch's empty output: no window to take a maximum of)
        return _empty_pooled(x, sizes, batched, return_indices)
    taps = _adaptive_taps(x, sizes, -math.inf)
    first = _first_max(taps)
    out = ops.sum(ops.where(first, taps, 0.0), axis=2)
    out = guard(out if batched else ops.squeeze(out, 0), given)  # (torch's saves the input)
    if not return_indices:
        return out
    cells = _adaptive_taps(_flat_positions(x), sizes, 0.0)
    indices = ops.astype(ops.sum(ops.where(first, cells, 0.0), axis=2), np.int64)
    return out, (indices if batched else ops.squeeze(indices, 0))


def _empty_pooled(x, sizes, batched, return_indices):
    shape = tuple(x.shape[:2]) + tuple(sizes)
    out = ops.reshape(ops.getitem(x, (slice(None), slice(None)) + (slice(0, 0),) * len(sizes)), shape)
    out = out if batched else ops.squeeze(out, 0)
    return (out, ops.astype(out.detach(), np.int64)) if return_indices else out


def _adaptive_taps(x, sizes, fill):
    """``(N, C, K, *sizes)``: the cells of each adaptive window (``K`` the product of the longest windows'
    lengths, row-major; a shorter window's missing cells ``fill``), gathered one spatial axis at a time."""
    nsp = len(sizes)
    lengths = []
    for i, o in enumerate(sizes):
        axis, n = 2 + i * 2, x.shape[2 + i * 2]  # (each pooled axis before this one became two)
        j = np.arange(o)
        starts, ends = (j * n) // o, -((-(j + 1) * n) // o)
        length = int((ends - starts).max()) if o else 0
        cell = starts[:, None] + np.arange(length)[None, :]
        valid = cell < ends[:, None]
        x = ops.take(x, np.minimum(cell, n - 1).ravel(), axis=axis)
        x = ops.reshape(x, x.shape[:axis] + (o, length) + x.shape[axis + 1:])
        if not valid.all():
            x = ops.where(valid.reshape((o, length) + (1,) * (x.ndim - axis - 2)), x, fill)
        lengths.append(length)
    # (N, C, o1, L1, o2, L2, ...) -> (N, C, L1, L2, ..., o1, o2, ...) -> (N, C, K, o1, o2, ...)
    x = ops.transpose(x, (0, 1) + tuple(3 + 2 * i for i in range(nsp)) + tuple(2 + 2 * i for i in range(nsp)))
    x = ops.reshape(x, x.shape[:2] + (math.prod(lengths),) + tuple(sizes))
    return x if len(x.chunks[2]) == 1 else ops.rechunk(x, {2: -1})


def adaptive_max_pool1d(input, output_size, return_indices=False):
    return adaptive_max_pool(input, output_size, return_indices, 1)


def adaptive_max_pool2d(input, output_size, return_indices=False):
    return adaptive_max_pool(input, output_size, return_indices, 2)


def adaptive_max_pool3d(input, output_size, return_indices=False):
    return adaptive_max_pool(input, output_size, return_indices, 3)


def adaptive_max_pool1d_with_indices(input, output_size, return_indices=False):
    return adaptive_max_pool(input, output_size, True, 1)


def adaptive_max_pool2d_with_indices(input, output_size, return_indices=False):
    return adaptive_max_pool(input, output_size, True, 2)


def adaptive_max_pool3d_with_indices(input, output_size, return_indices=False):
    return adaptive_max_pool(input, output_size, True, 3)


# ------------------------------------------------------------------ max unpooling
def _unpool_output_size(input, kernel_size, stride, padding, output_size):
    """torch's ``_unpool_output_size``: the default ``(n - 1) * stride + kernel - 2 * padding`` or the size
    asked for, within a stride of it."""
    shape = input.shape
    default = [(shape[-len(kernel_size) + d] - 1) * stride[d] + kernel_size[d] - 2 * padding[d]
               for d in range(len(kernel_size))]
    if output_size is None:
        return default
    if len(output_size) == len(kernel_size) + 2:
        output_size = output_size[2:]
    if len(output_size) != len(kernel_size):
        raise ValueError(f"output_size should be a sequence containing {len(kernel_size)} or {len(kernel_size) + 2} "
                         f"elements, but it has a length of '{len(output_size)}'")
    for d in range(len(kernel_size)):
        lo, hi = default[d] - stride[d], default[d] + stride[d]
        if not lo < output_size[d] < hi:
            raise ValueError(f'invalid output_size "{output_size}" (dim {d} must be between {lo} and {hi})')
    return list(output_size)


def max_unpool(input, indices, kernel_size, stride, padding, output_size, nsp):
    """Each input value written at its index (flat in its ``(n, c)`` plane of the output), zeros elsewhere:
    a scatter, whose gradient is the gather of the output's gradient at the indices (torch's)."""
    input, indices = as_tensor(input), as_tensor(indices)
    kernel = _tuple(kernel_size, nsp)
    stride = kernel if stride is None else _tuple(stride, nsp)
    padding = _tuple(padding, nsp)
    sizes = _unpool_output_size(input, kernel, stride, padding, output_size)
    native = 2 if nsp == 1 else nsp  # (torch's 1-d is its 2-d kernel on a trailing axis of length 1)
    if indices.dtype != np.int64:
        raise RuntimeError(f"elements in indices should be type int64 but got: "
                           f"{TORCH_TYPE_NAMES.get(indices.dtype.name)}")
    ndim = input.ndim + (nsp == 1)
    if ndim not in (native + 1, native + 2):
        raise RuntimeError(f"Input to max_unpooling{native}d should be a {native + 1}d or {native + 2}d Tensor, but "
                           f"got a tensor with {ndim} dimensions.")
    if tuple(indices.shape) != tuple(input.shape):
        shown = [list(s) + [1] * (nsp == 1) for s in (input.shape, indices.shape)]
        raise RuntimeError(f"Expected shape of indices to be same as that of the input tensor ({shown[0]}) but got "
                           f"indices tensor with shape: {shown[1]}")
    if nsp == 3 and min(stride) <= 0:
        raise RuntimeError(f"strides should be greater than zero, but got stride: {list(stride)}")
    batched = input.ndim == nsp + 2
    x, i = (input, indices) if batched else (ops.expand_dims(input, 0), ops.expand_dims(indices, 0))
    n, c = x.shape[:2]
    flat = ops.reshape(x, (n, c, -1))
    plane = zeros((n, c, math.prod(sizes)), dtype=x.dtype, chunks=(flat.chunks[0], flat.chunks[1], -1), device=x.device)
    out = ops.reshape(plane.scatter(2, ops.reshape(i, (n, c, -1)), flat), (n, c) + tuple(sizes))
    return out if batched else ops.squeeze(out, 0)


def max_unpool1d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    return max_unpool(input, indices, kernel_size, stride, padding, output_size, 1)


def max_unpool2d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    return max_unpool(input, indices, kernel_size, stride, padding, output_size, 2)


def max_unpool3d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    return max_unpool(input, indices, kernel_size, stride, padding, output_size, 3)


# ------------------------------------------------------------------ power-average pooling
def lp_pool(input, norm_type, kernel_size, stride, ceil_mode, nsp):
    """torch's composition: ``(sign(s) * relu(|s|) * prod(kernel)) ** (1 / p)`` with ``s`` the average of
    ``x ** p`` over each window (no padding); ``p = +-inf`` is a max pooling of ``|x|`` (or its negation)."""
    input = as_tensor(input)
    if isinstance(norm_type, (int, float)):
        if norm_type == math.inf:
            return max_pool(ops.abs(input), kernel_size, stride, 0, 1, ceil_mode, False, nsp)
        if norm_type == -math.inf:
            return -max_pool(-ops.abs(input), kernel_size, stride, 0, 1, ceil_mode, False, nsp)
    out = avg_pool(input ** norm_type, kernel_size, stride, 0, ceil_mode, True, None, nsp)
    size = math.prod(_tuple(kernel_size, nsp))
    return ((ops.sign(out) * ops.relu(ops.abs(out))) * size) ** (1.0 / norm_type)


def lp_pool1d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    return lp_pool(input, norm_type, kernel_size, stride, ceil_mode, 1)


def lp_pool2d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    return lp_pool(input, norm_type, kernel_size, stride, ceil_mode, 2)


def lp_pool3d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    return lp_pool(input, norm_type, kernel_size, stride, ceil_mode, 3)


# ------------------------------------------------------------------ channel shuffle
def channel_shuffle(input, groups):
    """``(N, g * k, *)`` to ``(N, k * g, *)``: the channels, seen as a ``(g, k)`` grid, transposed (torch's
    ``F.channel_shuffle``, its checks and texts)."""
    input, groups = as_tensor(input), int(groups)
    if input.ndim <= 2:
        raise RuntimeError(f"channel_shuffle expects input with > 2 dims, but got input with sizes "
                           f"{list(input.shape)}")
    if groups <= 0:
        raise RuntimeError(f"Number of groups to divide channels in must be positive. Value of groups:{groups}")
    n, c, *rest = input.shape
    if c % groups:
        raise RuntimeError(f"Number of channels must be divisible by groups. Got {c} channels and {groups} groups.")
    x = ops.reshape(input, (n, groups, c // groups, *rest))
    return _fresh(ops.reshape(ops.swapaxes(x, 1, 2), (n, c, *rest)), input)


# ------------------------------------------------------------------ fractional max pooling
_FRACTIONAL_AXES = {2: ("height", "width"), 3: ("time", "height", "width")}


def _ntuple(value, n):
    """torch's ``_pair`` / ``_triple``: an iterable as a tuple, as it is; anything else ``n`` times."""
    return tuple(value) if isinstance(value, Iterable) else (value,) * n


def _fractional_sizes(name, input, kernel_size, output_size, output_ratio, nsp):
    """torch's Python checks and ``output_size`` (from ``output_ratio``: ``int(n * ratio)`` per axis)."""
    if output_size is None and output_ratio is None:
        raise ValueError(f"{name} requires specifying either an output_size or an output_ratio")
    if output_size is None:
        if nsp == 2 and len(output_ratio) > 2:
            raise ValueError(f"{name} requires output_ratio to either be a single Int or tuple of Ints.")
        ratio = _ntuple(output_ratio, nsp)
        output_size = [int(input.shape[-nsp + d] * ratio[d]) for d in range(nsp)]
    kernel, sizes = _ntuple(kernel_size, nsp), _ntuple(output_size, nsp)
    of = "Int or tuple of Ints" if nsp == 2 else "Int or tuple of three Ints"
    if len(kernel) != nsp:
        raise RuntimeError(f"{name}: kernel_size must either be a single {of}")
    if len(sizes) != nsp:
        raise RuntimeError(f"{name}: output_size must either be a single {of}")
    return tuple(int(k) for k in kernel), tuple(int(s) for s in sizes)


def _fractional_checks(name, input, samples, kernel, sizes, nsp):
    """torch's kernel's checks (its texts: ``fractional_max_pool3d_out()`` for the 3-d ones), before anything is
    computed; a kernel of no cells, where torch reads outside the input, is refused."""
    where = name if nsp == 2 else "fractional_max_pool3d_out"
    if input.ndim not in (nsp + 1, nsp + 2):
        raise RuntimeError(f"{where}(): Expected {nsp + 1}D or {nsp + 2}D tensor, but got: {list(input.shape)}")
    for d in range(1, input.ndim):
        if input.shape[d] == 0:
            raise RuntimeError(f"{where}(): Expected input to have non-zero size for non-batch dimensions, but "
                               f"got{list(input.shape)} with dimension {d} being empty.")
    if min(kernel) <= 0:
        raise ValueError(f"kernel_size must be greater than 0, but got {kernel}")
    for axis, k, o, n in zip(_FRACTIONAL_AXES[nsp], kernel, sizes, input.shape[-nsp:]):
        if o + k - 1 > n:
            raise RuntimeError(f"{where}(): pool {axis} {k} too large relative to input {axis} {n}")
    if samples.dtype != input.dtype:
        raise RuntimeError("Expect _random_samples to have the same dtype as input")
    if samples.ndim != 3:
        raise RuntimeError(f"Expect _random_samples to have 3 dimensions, got {samples.ndim}")
    batch = input.shape[0] if input.ndim == nsp + 2 else 1
    if samples.shape[2] != nsp:
        raise RuntimeError(f"Expect _random_samples.size(2) equals to {nsp}; got {samples.shape[2]}.")
    if samples.shape[0] < batch:
        raise RuntimeError("Expect _random_samples.size(0) no less then input batch size.")
    if samples.shape[1] != input.shape[-nsp - 1]:
        raise RuntimeError("Expect _random_samples.size(1) equals to input channel size.")


def _fractional_starts(sample, n, o, k):
    """``(N, C, o)`` int64, each plane's windows' first cells along one axis: torch's ``generate_intervals``,
    ``int((i + u) * alpha) - int(u * alpha)`` with ``alpha = (n - k) / (o - 1)`` computed in the input's dtype
    (``u`` the plane's sample), the last window ending at the input's end."""
    dtype = np.dtype(sample.dtype)
    if o == 1:
        return ops.astype(ops.zeros_like(sample), np.int64) + (n - k)
    alpha = float(dtype.type(n - k) / dtype.type(o - 1))  # (torch's scalar_t arithmetic, also in float32)
    like = sample.array._meta  # (constants on the samples' chunk type: they meet device chunks)
    seq = ops.astype((sample + constant_like(np.arange(o).astype(dtype), like)) * alpha, np.int64) - \
        ops.astype(sample * alpha, np.int64)
    return ops.where(constant_like(np.arange(o) == o - 1, like), n - k, seq)


def fractional_max_pool(input, kernel_size, output_size, output_ratio, return_indices, _random_samples, nsp):
    """The largest cell of each of torch's pseudo-random windows: along each axis ``o`` windows of ``k`` cells
    starting at ``generate_intervals``' positions, drawn from a sample in ``[0, 1)`` per plane and axis
    (``_random_samples``, ``(N, C, nsp)``; torch's order of axes: width then height for 2-d, time, height,
    width for 3-d).  Given the samples, values, indices and gradients are torch's; without them they are drawn
    from daskgrad's generator (:func:`daskgrad.manual_seed`), not torch's, so the windows differ from a torch
    run's.  The windows' cells are gathered and the first largest (the last NaN) picked, as torch's kernel."""
    name = f"fractional_max_pool{nsp}d"
    given = input = as_tensor(input)
    kernel, sizes = _fractional_sizes(name, input, kernel_size, output_size, output_ratio, nsp)
    batched = input.ndim == nsp + 2
    if _random_samples is None:
        if input.dtype.kind != "f":
            raise NotImplementedError(f"\"check_uniform_bounds\" not implemented for "
                                      f"'{TORCH_TYPE_NAMES.get(input.dtype.name)}'")
        n = input.shape[0] if batched else 1
        drawn = _rand(n, input.shape[-nsp - 1], nsp, dtype=input.dtype, device=input.device).array
        meta = input.array._meta  # (the draw's chunks on the input's chunk type, as its other constants)
        _random_samples = Tensor._make(drawn.map_blocks(chunk.like, meta, dtype=drawn.dtype,
                                                        meta=meta_from_array(meta, 3, drawn.dtype)))
    samples = as_tensor(_random_samples)
    _fractional_checks(name, input, samples, kernel, sizes, nsp)
    x = input if batched else ops.expand_dims(input, 0)
    n, c, spatial = x.shape[0], x.shape[1], tuple(x.shape[2:])
    if 0 in sizes or n == 0:  # (torch's empty output)
        return _empty_pooled(x, sizes, batched, return_indices)
    samples = ops.getitem(samples.detach(), (slice(0, n),))
    order = (1, 0) if nsp == 2 else (0, 1, 2)  # the sample of each spatial axis
    # each tap's flat position in its plane: (N, C, K, *sizes), K the kernel's cells in row-major order
    flat = 0
    for d in range(nsp):
        starts = _fractional_starts(ops.getitem(samples, (Ellipsis, slice(order[d], order[d] + 1))),
                                    spatial[d], sizes[d], kernel[d])
        offsets = np.indices(kernel)[d].reshape(-1)
        shape = (n, c, 1) + tuple(sizes[e] if e == d else 1 for e in range(nsp))
        cells = ops.reshape(starts, shape) + constant_like(offsets.reshape((1, 1, -1) + (1,) * nsp), x.array._meta)
        flat = flat * spatial[d] + cells
    flat = ops.broadcast_to(flat, (n, c, math.prod(kernel)) + sizes)
    planes = ops.reshape(x, (n, c, -1))
    taps = ops.reshape(planes.gather(2, ops.reshape(flat, (n, c, -1))), flat.shape)
    if len(taps.chunks[2]) > 1:
        taps = ops.rechunk(taps, {2: -1})
    first = _first_max(taps)
    out = guard(ops.sum(ops.where(first, taps, 0.0), axis=2), given)  # (torch's saves the input)
    if not return_indices:
        return out if batched else ops.squeeze(out, 0)
    indices = ops.sum(ops.where(first, flat, 0), axis=2)
    return (out, indices) if batched else (ops.squeeze(out, 0), ops.squeeze(indices, 0))


def fractional_max_pool2d_with_indices(input, kernel_size, output_size=None, output_ratio=None,
                                       return_indices=False, _random_samples=None):
    """torch's ``fractional_max_pool2d_with_indices``: ``(values, indices)``; see :func:`fractional_max_pool2d`."""
    return fractional_max_pool(input, kernel_size, output_size, output_ratio, True, _random_samples, 2)


def fractional_max_pool3d_with_indices(input, kernel_size, output_size=None, output_ratio=None,
                                       return_indices=False, _random_samples=None):
    """torch's ``fractional_max_pool3d_with_indices``: ``(values, indices)``; see :func:`fractional_max_pool3d`."""
    return fractional_max_pool(input, kernel_size, output_size, output_ratio, True, _random_samples, 3)


def fractional_max_pool2d(input, kernel_size, output_size=None, output_ratio=None, return_indices=False,
                          _random_samples=None):
    """torch's ``fractional_max_pool2d`` over ``(N, C, H, W)`` or ``(C, H, W)``: the largest cell of each of
    ``output_size`` (or ``int(size * output_ratio)``) pseudo-random ``kernel_size`` windows; ``_random_samples``
    ``(N, C, 2)`` in ``[0, 1)`` places them (torch's values then), else they are drawn from daskgrad's generator
    (not torch's: the windows differ from a torch run's)."""
    return fractional_max_pool(input, kernel_size, output_size, output_ratio, return_indices, _random_samples, 2)


def fractional_max_pool3d(input, kernel_size, output_size=None, output_ratio=None, return_indices=False,
                          _random_samples=None):
    """torch's ``fractional_max_pool3d`` over ``(N, C, T, H, W)`` or ``(C, T, H, W)``, as
    :func:`fractional_max_pool2d` with ``(N, C, 3)`` samples."""
    return fractional_max_pool(input, kernel_size, output_size, output_ratio, return_indices, _random_samples, 3)
