"""torch.nn.functional's adaptive max pooling, max unpooling, power-average (Lp) pooling and ``channel_shuffle``,
as compositions of daskgrad ops (gathers, the max pooling's first-largest mask, a scatter, reshapes), so their
gradients are their parts' and they work on inputs chunked along every axis.

>>> y, i = F.adaptive_max_pool2d(images, (2, 3), return_indices=True)
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from .. import ops
from .._tensor import zeros
from ..graph import guard
from ..ops._util import TORCH_TYPE_NAMES, as_tensor
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
