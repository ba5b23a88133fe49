"""torch.nn.functional's convolutions (and transposed convolutions), pooling, ``unfold`` and ``fold``, on tensors
chunked along any axis.

Each is built on :func:`daskgrad.ops.conv.unfold` (the window taps of every output position,
gathered with a halo across chunk boundaries): a convolution contracts them with the weight, max
pooling takes their ``amax`` and average pooling their mean, so every gradient (input, weight,
bias, and the second order) is the rule of an existing op, exact across chunks.  The output's
spatial chunks follow the input's.  torch's argument checks and error texts; padding modes other than zeros
are refused, not ignored.  Pooling's ``ceil_mode=True`` windows past the input's end read more padding on the
right (``-inf`` for max pooling).  Max pooling's ``return_indices`` gives torch's flat index of each window's
largest cell in its ``(n, c)`` plane.
"""
from __future__ import annotations

import math
import numbers

import dask.array as da
import numpy as np

from .. import ops
from ..graph import guard
from .._tensor import Tensor
from ..ops._util import as_tensor
from ..ops._util import norm_axis
from ..ops.conv import axis_windows, fold_p, unfold as _taps


def _tuple(value, n):
    if isinstance(value, numbers.Integral):
        return (int(value),) * n
    value = tuple(int(v) for v in value)
    return value * n if len(value) == 1 else value


def _batched(input, nsp, name):
    """The input with a batch axis (torch takes an unbatched ``(C, *spatial)`` too) and whether it had one."""
    input = as_tensor(input)
    if input.ndim not in (nsp + 1, nsp + 2):
        raise RuntimeError(f"Expected {nsp + 1}D (unbatched) or {nsp + 2}D (batched) input to {name}, but got "
                           f"input of size: {list(input.shape)}")
    return (input, True) if input.ndim == nsp + 2 else (ops.expand_dims(input, 0), False)


def _conv_padding(padding, kernel, dilation, stride, nsp):
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0),) * nsp
        if padding != "same":
            raise RuntimeError(f"Invalid padding string: {padding!r}")
        if any(s != 1 for s in stride):
            raise RuntimeError("padding='same' is not supported for strided convolutions")
        total = [d * (k - 1) for k, d in zip(kernel, dilation)]
        return tuple((t // 2, t - t // 2) for t in total)  # torch puts the odd cell on the right
    padding = _tuple(padding, nsp)
    if any(p < 0 for p in padding):
        raise RuntimeError("negative padding is not supported")
    return tuple((p, p) for p in padding)


def conv(input, weight, bias, stride, padding, dilation, groups, nsp):
    """``conv1d``/``conv2d``: cross-correlation of ``(N, C, *spatial)`` with ``weight``
    ``(O, C / groups, *kernel)``, as torch's."""
    name = f"conv{nsp}d"
    given, weight = input, as_tensor(weight)
    input, batched = _batched(input, nsp, name)
    stride, dilation = _tuple(stride, nsp), _tuple(dilation, nsp)
    if any(s <= 0 for s in stride):
        raise RuntimeError("non-positive stride is not supported")
    if any(d <= 0 for d in dilation):
        raise RuntimeError("dilation should be greater than zero")
    kernel = tuple(weight.shape[2:])
    pads = _conv_padding(padding, kernel, dilation, stride, nsp)
    out_ch, per_group = weight.shape[:2]
    if input.shape[1] != per_group * groups:
        raise RuntimeError(f"Given groups={groups}, weight of size {list(weight.shape)}, expected "
                           f"input{list(input.shape)} to have {per_group * groups} channels, but got "
                           f"{input.shape[1]} channels instead")
    padded = [n + lo + hi for n, (lo, hi) in zip(input.shape[2:], pads)]
    reach = [d * (k - 1) + 1 for k, d in zip(kernel, dilation)]
    if any(p < r for p, r in zip(padded, reach)):
        raise RuntimeError(f"Calculated padded input size per channel: ({' x '.join(map(str, padded))}). Kernel size: "
                           f"({' x '.join(map(str, reach))}). Kernel size can't be greater than actual input size")
    taps = _taps(input, kernel, stride, dilation, pads)  # (N, C, K, *out)
    n, k, spatial = input.shape[0], math.prod(kernel), taps.shape[3:]
    taps = ops.reshape(taps, (n, groups, per_group, k) + spatial)
    # a weight is small: one chunk, so the contraction is one block per taps block (no chunk blow-up)
    w = ops.rechunk(weight, -1) if any(len(c) > 1 for c in weight.chunks) else weight
    w = ops.reshape(w, (groups, out_ch // groups, per_group, k))
    out = ops.reshape(ops.einsum("ngck...,gock->ngo...", taps, w), (n, out_ch) + spatial)
    if bias is not None:
        out = out + ops.reshape(as_tensor(bias), (out_ch,) + (1,) * nsp)
    # (torch's saves the input and the weight: a write to either before the backward raises)
    return guard(out if batched else ops.squeeze(out, 0), given, weight)


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return conv(input, weight, bias, stride, padding, dilation, groups, 1)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return conv(input, weight, bias, stride, padding, dilation, groups, 2)


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return conv(input, weight, bias, stride, padding, dilation, groups, 3)


# ------------------------------------------------------------------------ transposed
def _expand(name, value, nsp):
    """torch's ``expand_param_if_needed``: an int, or a list of ``nsp`` ints."""
    if isinstance(value, str):
        raise TypeError(f"conv_transpose{nsp}d(): argument '{name}' must be tuple of ints, not str")
    if isinstance(value, numbers.Integral):
        return (int(value),) * nsp
    value = tuple(int(v) for v in value)
    if len(value) == 1:
        return value * nsp
    if len(value) != nsp:
        raise RuntimeError(f"expected {name} to be a single integer value or a list of {nsp} values to match the "
                           f"convolution dimensions, but got {name}={list(value)}")
    return value


def _transpose_chunks(chunks, n, stride, lo, reach):
    """The chunks of a conv's input of length ``n`` whose layout (:func:`~daskgrad.ops.conv.axis_windows`) gives its
    output the ``chunks`` given: a boundary before output ``b`` is at the input cell that holds the middle of
    ``b``'s window (boundaries that fall together merge)."""
    bounds = np.cumsum((0,) + tuple(chunks))[1:-1] * stride - lo + reach // 2
    cuts = sorted({0, n, *(int(b) for b in bounds if 0 < b < n)})
    return tuple(int(c) for c in np.diff(cuts))


def conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation, nsp):
    """``conv_transpose1d``/``conv_transpose2d``: the gradient of ``conv`` with respect to its input.  ``input``
    ``(N, C_in, *spatial)`` is a conv's output cotangent, ``weight`` ``(C_in, C_out / groups, *kernel)`` that conv's
    weight; each input cell's products with the kernel (one contraction with the weight) are the taps of the
    output's windows, added back onto the output's cells by ``fold`` (unfold's rule), so the gradients are
    those rules' again: with respect to the input a conv, to the weight a contraction.  The output has
    ``(n - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1`` cells along each spatial axis,
    chunked so that its windows follow the input's chunks.

    Long because it checks torch's arguments, in torch's order, before it builds anything."""
    name = f"conv_transpose{nsp}d"
    given, weight = input, as_tensor(weight)
    input, batched = _batched(input, nsp, name)
    if weight.ndim < 3:
        raise RuntimeError("weight should have at least three dimensions")
    stride, padding = _expand("stride", stride, nsp), _expand("padding", padding, nsp)
    output_padding, dilation = _expand("output_padding", output_padding, nsp), _expand("dilation", dilation, nsp)
    if any(s <= 0 for s in stride):
        raise RuntimeError("non-positive stride is not supported")
    if any(p < 0 for p in padding):
        raise RuntimeError("negative padding is not supported")
    if any(p < 0 for p in output_padding):
        raise RuntimeError("negative output_padding is not supported")
    if any(d <= 0 for d in dilation):
        raise RuntimeError("dilation should be greater than zero")
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")
    in_ch, per_group = weight.shape[:2]
    if in_ch % groups:
        raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by {groups} at dimension 0, but "
                           f"got weight of size [{list(weight.shape)}] instead")
    if input.shape[1] != in_ch:
        raise RuntimeError(f"Given transposed=1, weight of size {list(weight.shape)}, expected input"
                           f"{list(input.shape)} to have {in_ch} channels, but got {input.shape[1]} channels instead")
    out_ch = per_group * groups
    if bias is not None and (as_tensor(bias).ndim != 1 or as_tensor(bias).shape[0] != out_ch):
        raise RuntimeError(f"Given transposed=1, weight of size {list(weight.shape)}, expected bias to be "
                           f"1-dimensional with {out_ch} elements, but got bias of size {list(as_tensor(bias).shape)} "
                           "instead")
    if any(op >= s and op >= d for op, s, d in zip(output_padding, stride, dilation)):
        axes = [(0, 1, 1)] * (2 - nsp) + list(zip(output_padding, stride, dilation))  # (a 1-d one as 2-d)
        names = ("depth", "height", "width")[-len(axes):]
        raise RuntimeError("output padding must be smaller than either stride or dilation, but got " + " ".join(
            f"{what}_{name}: {values[i]}" for i, what in enumerate(("output_padding", "stride", "dilation"))
            for name, values in zip(names, axes)))
    kernel = tuple(weight.shape[2:])
    reach = [d * (k - 1) for k, d in zip(kernel, dilation)]
    sizes = [(n - 1) * s - 2 * p + r + op + 1
             for n, s, p, r, op in zip(input.shape[2:], stride, padding, reach, output_padding)]
    if any(n <= 0 for n in sizes) or any(n == 0 for n in input.shape[2:]):
        raise RuntimeError(f"Given input size per channel: ({' x '.join(map(str, input.shape[2:]))}). Calculated "
                           f"output size per channel: ({' x '.join(map(str, sizes))}). Output size is too small")
    # the conv whose input gradient this is: padding (p, p - output_padding) makes its output exactly this input's
    pads = tuple((p, p - op) for p, op in zip(padding, output_padding))
    chunks = tuple(_transpose_chunks(c, n, s, lo, r)
                   for c, n, s, (lo, _), r in zip(input.chunks[2:], sizes, stride, pads, reach))
    layouts = tuple(axis_windows(n, c, k, s, d, lo, hi)
                  for n, c, k, s, d, (lo, hi) in zip(sizes, chunks, kernel, stride, dilation, pads))
    n, k, spatial = input.shape[0], math.prod(kernel), tuple(input.shape[2:])
    w = ops.rechunk(weight, -1) if any(len(c) > 1 for c in weight.chunks) else weight
    # each cell's channels times the weight: (n, g, *spatial, c_in / g) @ (g, 1.., c_in / g, per_group * k), a
    # matmul, which keeps the input's chunks (dask's einsum would split them, the product being k * per_group / c_in
    # times as big as the input)
    w = ops.reshape(w, (groups,) + (1,) * (nsp - 1) + (in_ch // groups, per_group * k))
    y = ops.moveaxis(ops.reshape(input, (n, groups, in_ch // groups) + spatial), 2, -1)
    cols = ops.reshape(ops.matmul(y, w), (n, groups) + spatial + (per_group, k))
    cols = ops.reshape(ops.moveaxis(cols, (-2, -1), (2, 3)), (n, out_ch, k) + spatial)
    # the spatial chunks the layout's (where boundaries merged; the gradient goes back in the input's)
    want = (input.chunks[0], (out_ch,), (k,)) + tuple(layout[1] for layout in layouts)
    cols = cols if cols.chunks == want else ops.rechunk(cols, want)
    out = fold_p.bind(cols, taps=tuple(zip(kernel, stride, dilation)), layouts=layouts, shape=(n, out_ch, *sizes),
                      chunks=cols.chunks[:2] + chunks)
    if bias is not None:
        out = out + ops.reshape(as_tensor(bias), (out_ch,) + (1,) * nsp)
    # (torch's saves the input and the weight: a write to either before the backward raises)
    return guard(out if batched else ops.squeeze(out, 0), given, weight)


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    return conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation, 1)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    return conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation, 2)


def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    return conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation, 3)


# ------------------------------------------------------------------------ unfold, fold
def _pair(name, value):
    """torch's ``_pair`` (an iterable as it is, else twice) and im2col's check that it has two entries."""
    value = tuple(value) if hasattr(value, "__iter__") else (value, value)
    if len(value) != 2:
        raise RuntimeError(f"It is expected {name} equals to 2, but got size {len(value)}")
    return tuple(int(v) for v in value)


def _window_checks(kernel, dilation, padding, stride, order):
    """im2col's / col2im's checks of the window, in ``order``."""
    checks = {"kernel": (min(kernel) > 0, f"kernel size should be greater than zero, but got kernel_height: "
                                          f"{kernel[0]} kernel_width: {kernel[1]}"),
              "dilation": (min(dilation) > 0, f"dilation should be greater than zero, but got dilation_height: "
                                              f"{dilation[0]} dilation_width: {dilation[1]}"),
              "padding": (min(padding) >= 0, f"padding should be non-negative, but got pad_height: {padding[0]} "
                                             f"pad_width: {padding[1]}"),
              "stride": (min(stride) > 0, f"stride should be greater than zero, but got stride_height: {stride[0]} "
                                          f"stride_width: {stride[1]}")}
    for name in order:
        ok, text = checks[name]
        if not ok:
            raise RuntimeError(text)


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """torch's ``unfold`` (im2col): ``(N, C, H, W)`` (or ``(C, H, W)``) to ``(N, C * K, L)``, the ``K`` cells of each
    of the ``L`` sliding windows (row-major), zero padding, stride and dilation as a convolution's.  Its gradient
    is :func:`fold`."""
    kernel, dilation = _pair("kernel_size", kernel_size), _pair("dilation", dilation)
    padding, stride = _pair("padding", padding), _pair("stride", stride)
    _window_checks(kernel, dilation, padding, stride, ("kernel", "dilation", "padding", "stride"))
    input = as_tensor(input)
    shape = input.shape
    for axis in (1, 2):  # (torch's reads of these sizes: an IndexError for fewer axes)
        norm_axis(axis, input.ndim)
    if not ((input.ndim == 3 and shape[0] and shape[1] and shape[2]) or (input.ndim == 4 and all(shape[1:]))):
        raise RuntimeError("Expected 3D or 4D (batch mode) tensor with possibly 0 batch size and other non-zero "
                           f"dimensions for input, but got: {list(shape)}")
    batched = input.ndim == 4
    x = input if batched else ops.expand_dims(input, 0)
    blocks = [(n + 2 * p - (d * (k - 1) + 1)) // s + 1
              for n, k, d, p, s in zip(x.shape[2:], kernel, dilation, padding, stride)]
    if min(blocks) < 1:
        raise RuntimeError(f"Given input with spatial size ({x.shape[2]}, {x.shape[3]}), kernel_size=({kernel[0]}, "
                           f"{kernel[1]}), dilation=({dilation[0]}, {dilation[1]}), padding=({padding[0]}, "
                           f"{padding[1]}), calculated shape of the array of sliding blocks as ({blocks[0]}, "
                           f"{blocks[1]}), but its components must be at least one.")
    taps = _taps(x, kernel, stride, dilation, tuple((p, p) for p in padding))  # (N, C, K, *blocks)
    out = ops.reshape(taps, (x.shape[0], x.shape[1] * math.prod(kernel), math.prod(blocks)))
    return out if batched else ops.squeeze(out, 0)


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """torch's ``fold`` (col2im), :func:`unfold`'s transpose: ``(N, C * K, L)`` (or ``(C * K, L)``) to
    ``(N, C, *output_size)``, each window's ``K`` cells added onto the cells it covers (overlaps summed).  The
    output's spatial chunks follow the windows' chunks where it can.  Its gradient is :func:`unfold`."""
    output_size, kernel = _pair("output_size", output_size), _pair("kernel_size", kernel_size)
    dilation, padding, stride = _pair("dilation", dilation), _pair("padding", padding), _pair("stride", stride)
    _window_checks(kernel, dilation, padding, stride, ("kernel", "stride", "dilation", "padding"))
    input = as_tensor(input)
    shape = input.shape
    if not ((input.ndim == 2 and shape[0] and shape[1]) or (input.ndim == 3 and shape[1] and shape[2])):
        raise RuntimeError("Expected 2D or 3D (batch mode) tensor for input with possibly 0 batch size and non-zero "
                           f"dimensions for input, but got: {list(shape)}")
    batched = input.ndim == 3
    x = input if batched else ops.expand_dims(input, 0)
    k = math.prod(kernel)
    if x.shape[1] % k:
        raise RuntimeError(f"Expected size of input's dimension 1 to be divisible by the product of kernel_size, but "
                           f"got input.size(1)={x.shape[1]} and kernel_size=({kernel[0]}, {kernel[1]}).")
    reach = [d * (kk - 1) for kk, d in zip(kernel, dilation)]
    blocks = [(o + 2 * p - r - 1) // s + 1 for o, p, r, s in zip(output_size, padding, reach, stride)]
    given = (f"Given output_size=({output_size[0]}, {output_size[1]}), kernel_size=({kernel[0]}, {kernel[1]}), "
             f"dilation=({dilation[0]}, {dilation[1]}), padding=({padding[0]}, {padding[1]}), stride=({stride[0]}, "
             f"{stride[1]}), ")
    if x.shape[2] != blocks[0] * blocks[1]:
        raise RuntimeError(f"{given}expected size of input's dimension 2 to match the calculated number of sliding "
                           f"blocks {blocks[0]} * {blocks[1]} = {blocks[0] * blocks[1]}, but got "
                           f"input.size(2)={x.shape[2]}.")
    if min(blocks) < 1:
        raise RuntimeError(f"{given}calculated shape of the array of sliding blocks as ({blocks[0]}, {blocks[1]}), "
                           "which is too small (non-positive)")
    n, c = x.shape[0], x.shape[1] // k
    cols = ops.reshape(x, (n, c, k, *blocks))
    chunks = tuple(_transpose_chunks(ch, o, s, p, r)
                   for ch, o, s, p, r in zip(cols.chunks[3:], output_size, stride, padding, reach))
    layouts = tuple(axis_windows(o, ch, kk, s, d, p, p)
                  for o, ch, kk, s, d, p in zip(output_size, chunks, kernel, stride, dilation, padding))
    want = (x.chunks[0], (c,), (k,)) + tuple(layout[1] for layout in layouts)
    cols = cols if cols.chunks == want else ops.rechunk(cols, want)
    out = fold_p.bind(cols, taps=tuple(zip(kernel, stride, dilation)), layouts=layouts, shape=(n, c, *output_size),
                      chunks=want[:2] + chunks)
    return out if batched else ops.squeeze(out, 0)


# ----------------------------------------------------------------------------- pooling
def _pooled_size(n, k, s, p, d, ceil_mode):
    """torch's ``pooling_output_shape``: with ``ceil_mode`` a last, partial window, kept only if it starts inside
    the input or its left padding."""
    out = (n + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= n + p:
        out -= 1
    return out


def _pool_args(name, input, kernel_size, stride, padding, dilation, nsp, effective, ceil_mode):
    """Normalised ``(kernel, stride, pads, dilation)`` after torch's checks of a pooling call; ``pads`` is
    ``(lo, hi)`` per spatial axis, ``hi`` past ``padding`` where a ``ceil_mode`` window reaches further."""
    kernel = _tuple(kernel_size, nsp)
    stride = kernel if stride is None or (not isinstance(stride, numbers.Integral) and len(stride) == 0) \
        else _tuple(stride, nsp)
    padding, dilation = _tuple(padding, nsp), _tuple(dilation, nsp)
    if nsp == 3:  # (torch's 3-d checks; the 1-d and 2-d ones are as they were)
        if len(kernel) != 3:
            raise RuntimeError(f"{name}: kernel_size must either be a single int, or a tuple of three ints")
        if 0 in stride:
            raise RuntimeError("stride should not be zero")
        if min(dilation) <= 0:
            raise RuntimeError("dilation should be greater than zero, but got dilationT: {} dilationH: {} "
                               "dilationW: {}".format(*dilation))
    for k, p, d in zip(kernel, padding, dilation):
        if name == "max_pool1d" and p > k // 2:
            raise RuntimeError(f"max_pool1d() padding should be at most half of kernel size, but got padding={p} and "
                               f"kernel_size={k}")
        if p > ((d * (k - 1) + 1) if effective else k) // 2:
            raise RuntimeError(f"pad should be at most half of effective kernel size, but got pad={p}, "
                               f"kernel_size={k} and dilation={d}")
    if name == "avg_pool3d" and any(n < k for n, k in zip(input.shape[2:], kernel)):
        raise RuntimeError("input image (T: {} H: {} W: {}) smaller than kernel size (kT: {} kH: {} kW: {})".format(
            *input.shape[2:], *kernel))
    sizes = [_pooled_size(n, k, s, p, d, ceil_mode)
             for n, k, s, p, d in zip(input.shape[2:], kernel, stride, padding, dilation)]
    if any(n <= 0 for n in sizes):
        if name == "max_pool1d":
            raise RuntimeError(f"max_pool1d() Invalid computed output size: {sizes[0]}")
        lead = (1,) if nsp == 1 else ()
        given = "x".join(map(str, (input.shape[1],) + lead + tuple(input.shape[2:])))
        got = "x".join(map(str, (input.shape[1],) + lead + tuple(sizes)))
        raise RuntimeError(f"Given input size: ({given}). Calculated output size: ({got}). Output size is too small")
    # the right padding that makes the last window whole (never less than torch's own: the windows are the same)
    pads = tuple((p, max(p, (o - 1) * s + d * (k - 1) + 1 - p - n))
                 for n, k, s, p, d, o in zip(input.shape[2:], kernel, stride, padding, dilation, sizes))
    return kernel, stride, pads, dilation


def _pool3d_input(input, name):
    """torch's checks of a 3-d pooling's input (its texts: the 1-d and 2-d ones keep :func:`_batched`'s)."""
    input = as_tensor(input)
    if input.ndim not in (4, 5):
        raise RuntimeError("non-empty 4D or 5D (batch mode) tensor expected for input")
    if 0 in input.shape[input.ndim - 4:]:  # (torch's text names dimension 0 whichever is empty)
        raise RuntimeError(f"{name}(): Expected input's non-batch dimensions to have positive length, but input "
                           f"has a shape of {list(input.shape)} and non-batch dimension 0 has length zero!")
    return (input, True) if input.ndim == 5 else (ops.expand_dims(input, 0), False)


def _pool_input(input, nsp, name, texts_of):
    if nsp == 2 and name.startswith("max_pool") and as_tensor(input).ndim not in (3, 4):
        raise RuntimeError("non-empty 3D or 4D (batch mode) tensor expected for input")  # (torch's max_pool2d's)
    return _pool3d_input(input, texts_of) if nsp == 3 else _batched(input, nsp, name)


def max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, nsp):
    """The largest tap of each window (padding never wins).  As torch's, the gradient goes to one cell
    per window, the first largest in row-major order, also where a window holds equal largest values;
    ``return_indices=True`` gives ``(values, indices)``, the indices those cells' flat positions in their
    ``(n, c)`` planes (int64, as torch's)."""
    name = f"max_pool{nsp}d"
    given = input
    input, batched = _pool_input(input, nsp, name, "max_pool3d_with_indices_out_cpu_template")
    kernel, stride, pads, dilation = _pool_args(name, input, kernel_size, stride, padding, dilation, nsp, True,
                                                ceil_mode)
    taps = _taps(input, kernel, stride, dilation, pads, fill=-math.inf)
    first = _first_max(taps)
    out = ops.sum(ops.where(first, taps, 0.0), axis=2)  # the max; its gradient to one tap
    out = guard(out if batched else ops.squeeze(out, 0), given)  # (torch's saves the input)
    if not return_indices:
        return out
    # the same windows over the cells' flat positions pick the positions of the largest taps
    cell_taps = _taps(_flat_positions(input), kernel, stride, dilation, pads)
    indices = ops.astype(ops.sum(ops.where(first, cell_taps, 0.0), axis=2), np.int64)
    return out, (indices if batched else ops.squeeze(indices, 0))


def _flat_positions(input):
    """``(1, 1, *spatial)``: each cell's flat position in its plane (float64: exact to 2**53), chunked as
    ``input``'s spatial axes, a constant."""
    spatial = tuple(input.shape[2:])
    a = input.array
    cells = da.arange(math.prod(spatial), dtype=np.float64, like=a._meta).reshape((1, 1) + spatial)
    return Tensor._make(cells.rechunk(((1,), (1,)) + tuple(input.chunks[2:])))


def _first_max(taps):
    """A constant mask over the taps axis (2, one chunk): True at each window's first largest tap (its last NaN
    where it holds one, as torch's)."""
    a = taps.array
    return Tensor._make(da.map_blocks(_first_max_block, a, dtype=bool, meta=a._meta.astype(bool)))


def _first_max_block(block):
    # torch's kernel keeps a tap when `val > max || isnan(val)`: the first largest, but the last NaN of a window that
    # holds one (NumPy's argmax takes the first NaN: the gradient went to another cell, the index differed)
    nan = block != block
    last_nan = block.shape[2] - 1 - np.argmax(np.flip(nan, axis=2), axis=2)
    first = np.expand_dims(np.where(nan.any(axis=2), last_nan, np.argmax(block, axis=2)), 2)
    return np.arange(block.shape[2], like=block).reshape((1, 1, -1) + (1,) * (block.ndim - 3)) == first


def avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, nsp):
    """The mean of each window; padding counts as zeros unless ``count_include_pad=False``;
    ``divisor_override`` replaces the divisor, as torch's.  A ``ceil_mode`` window past the input's right
    padding is divided by its cells up to that padding's end (torch's ``pool_size``)."""
    name = f"avg_pool{nsp}d"
    given = input
    input, batched = _pool_input(input, nsp, name, name)
    kernel, stride, pads, _ = _pool_args(name, input, kernel_size, stride, padding, 1, nsp, False, ceil_mode)
    ones = (1,) * nsp
    total = ops.sum(_taps(input, kernel, stride, ones, pads), axis=2)
    clipped = any(hi > lo for lo, hi in pads)  # a ceil_mode window past the right padding
    if divisor_override:
        out = total / divisor_override
    elif count_include_pad and not clipped:
        out = total / math.prod(kernel)
    elif count_include_pad:
        out = total / _padded_window_sizes(total, input.shape[2:], kernel, stride, pads)
    elif not any(hi for _, hi in pads):
        out = total / math.prod(kernel)
    else:  # the cells of each window inside the input: the same windows over a constant one
        cells = ops.ones_like(ops.getitem(input.detach(), (slice(0, 1), slice(0, 1))))
        out = total / ops.sum(_taps(cells, kernel, stride, ones, pads), axis=2)
    return guard(out if batched else ops.squeeze(out, 0), given)  # (torch's saves the input)


def _padded_window_sizes(total, sizes, kernel, stride, pads):
    """``(1, 1, *out)``, a constant chunked as ``total``'s spatial axes: each window's cells inside the input and
    its padding ``padding`` on each side (torch's ``pool_size``: a ``ceil_mode`` window is clipped there)."""
    a, nsp = total.array, len(kernel)
    div = None
    for i, (n, k, s, (lo, _), chunks) in enumerate(zip(sizes, kernel, stride, pads, total.chunks[2:])):
        starts = da.arange(sum(chunks), dtype=np.int64, like=a._meta).rechunk((chunks,)) * s
        axis = da.minimum(k, n + 2 * lo - starts).reshape((1, 1) + (1,) * i + (-1,) + (1,) * (nsp - 1 - i))
        div = axis if div is None else div * axis  # (integers: their product is exact, as torch's)
    return Tensor._make(div.astype(total.dtype))


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    return max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 1)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    return max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 2)


def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    return max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 3)


def max_pool1d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                            return_indices=False):
    return max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, True, 1)


def max_pool2d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                            return_indices=False):
    return max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, True, 2)


def max_pool3d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                            return_indices=False):
    return max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, True, 3)


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    return avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, None, 1)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    return avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 2)


def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    return avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 3)


def adaptive_avg_pool(input, output_size, nsp):
    """torch's adaptive windows ``[floor(i n / o), ceil((i + 1) n / o))`` per axis; the mean over a box
    is the mean over each of its axes in turn, so each axis is pooled alone.  Output size 1 is one
    mean over the spatial axes (global pooling)."""
    given = input = as_tensor(input)
    _check_adaptive_input(input, nsp, f"adaptive_avg_pool{nsp}d")
    batched = input.ndim == nsp + 2
    input = input if batched else ops.expand_dims(input, 0)
    sizes = (output_size,) * nsp if isinstance(output_size, numbers.Integral) or output_size is None \
        else tuple(output_size)
    out = input
    for i, o in enumerate(sizes):
        axis, n = 2 + i, input.shape[2 + i]
        if o is None or o == n:
            continue
        if o == 1:
            out = ops.mean(out, axis=axis, keepdims=True)
            continue
        if o == 0:  # (torch's empty output)
            out = ops.getitem(out, (slice(None),) * axis + (slice(0, 0),))
            continue
        parts = [ops.mean(ops.getitem(out, (slice(None),) * axis + (slice((j * n) // o, -((-(j + 1) * n) // o)),)),
                          axis=axis, keepdims=True) for j in range(o)]
        out = ops.concatenate(parts, axis=axis)
    if out is input:  # (every size kept: a new tensor, as torch's, not the input: a write to it stays in it)
        out = ops.clone(input)
    return guard(out if batched else ops.squeeze(out, 0), given)  # (torch's saves the input)


def _check_adaptive_input(input, nsp, name):
    """torch's checks of an adaptive pooling's input: its number of axes, no empty axis but the batch."""
    if nsp == 1 and input.ndim not in (2, 3):
        raise RuntimeError(f"Expected 2 to 3 dimensions, but got {input.ndim}-dimensional tensor for argument #1 "
                           f"'self' (while checking arguments for {name})")
    if input.ndim not in (nsp + 1, nsp + 2):
        got = f"{'got: ' if name.startswith('adaptive_max') else 'got '}{list(input.shape)}"
        raise RuntimeError(f"{name}(): Expected {nsp + 1}D or {nsp + 2}D tensor, but {got}")
    for i in range(1, input.ndim):
        if input.shape[i] == 0:
            raise RuntimeError(f"{name}(): Expected input to have non-zero size for non-batch dimensions, but input "
                               f"has sizes {list(input.shape)} with dimension {i} being empty")


def adaptive_avg_pool1d(input, output_size):
    return adaptive_avg_pool(input, output_size, 1)


def adaptive_avg_pool2d(input, output_size):
    return adaptive_avg_pool(input, output_size, 2)


def adaptive_avg_pool3d(input, output_size):
    return adaptive_avg_pool(input, output_size, 3)
