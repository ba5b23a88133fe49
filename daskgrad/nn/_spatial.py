"""torch.nn.functional's spatial functions ``pad``, ``pixel_shuffle``, ``pixel_unshuffle``,
``local_response_norm`` and ``interpolate``, as compositions of daskgrad ops (slices, flips, joins,
reshapes, gathers), so they work on inputs chunked along every axis and their gradients are their parts' (but
where torch's interpolation backward takes a shortcut its forward does not: a Function gives torch's gradient).

>>> y = F.pad(x, (1, 2), mode="reflect")          # the last axis: 1 before, 2 after (torch's order)
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from .. import ops
from ..graph import guard
from ..function import Function
from ..ops._util import TORCH_TYPE_NAMES, as_tensor
from ._conv import adaptive_avg_pool

_PAD_MODES = ("constant", "reflect", "replicate", "circular")


def _fresh(out, input):
    """``out``, or a copy of it where it is ``input`` or a view (of it): torch's functions here return new
    tensors, which an in-place write changes alone."""
    return ops.clone(out) if out is input or out._base is not None else out


def pad(input, pad, mode="constant", value=None):
    """torch's ``F.pad``: ``pad`` is ``(before, after)`` pairs from the last axis backwards; ``constant``
    (``value``, 0 by default), ``reflect``, ``replicate`` or ``circular``.  A negative width crops."""
    input = as_tensor(input)
    pad = [int(p) for p in pad]
    if mode not in _PAD_MODES:
        raise NotImplementedError(f"Unrecognised padding mode {mode}")
    if len(pad) % 2:
        raise RuntimeError("Padding length must be divisible by 2")
    if len(pad) > 2 * input.ndim:
        raise RuntimeError(f"Padding length should be less than or equal to two times the input dimension but got "
                           f"padding length {len(pad)} and input of dimension {input.ndim}")
    pairs = [(input.ndim - 1 - i, pad[2 * i], pad[2 * i + 1]) for i in range(len(pad) // 2)]
    if mode == "constant":
        return _fresh(_crop(_pad_constant(input, pairs, 0 if value is None else value), pairs), input)
    if value is not None and value != 0:
        raise RuntimeError(f'Padding mode "{mode}" doesn\'t take in value argument')
    _check_non_constant(input, len(pad), mode, pairs)
    if input.dtype == bool and mode != "circular":
        raise NotImplementedError(f'"{"reflection" if mode == "reflect" else "replication"}_pad{len(pad) // 2}d" not '
                                  f"implemented for 'Bool'")
    out = _crop(input, pairs) if mode == "circular" else input  # (torch's circular wraps the cropped input)
    for axis, before, after in pairs:
        out = _PADDERS[mode](out, axis, max(before, 0), max(after, 0))
    out = _fresh(out if mode == "circular" else _crop(out, pairs), input)
    return out if mode == "circular" else guard(out, input)  # (torch's reflection/replication kernels save it)


def _pad_constant(input, pairs, value):
    widths = [(0, 0)] * input.ndim
    for axis, before, after in pairs:
        widths[axis] = (max(before, 0), max(after, 0))
    if not any(b or a for b, a in widths):
        return input
    return ops.pad(input, widths, constant_values=value)


def _crop(x, pairs):
    """The negative widths cut off (after the positive ones were added: torch's result)."""
    index = [slice(None)] * x.ndim
    for axis, before, after in pairs:
        if before < 0 or after < 0:
            n = x.shape[axis]
            lo, hi = -min(before, 0), n + min(after, 0)
            if hi < lo:
                raise RuntimeError("narrow(): length must be non-negative.")
            index[axis] = slice(lo, hi)
    return x[tuple(index)] if any(s != slice(None) for s in index) else x


def _check_non_constant(input, length, mode, pairs):
    if input.ndim not in (length // 2 + 1, length // 2 + 2):
        raise NotImplementedError(
            f"Padding size {length} is not supported for {input.ndim}D input tensor.\nSupported combinations for "
            "non-constant padding:\n  - 2D or 3D input: padding size = 2 (pads last dimension)\n  - 3D or 4D input: "
            "padding size = 4 (pads last 2 dimensions)\n  - 4D or 5D input: padding size = 6 (pads last 3 dimensions)")
    for i, (axis, before, after) in enumerate(pairs):
        n = input.shape[axis]
        if mode == "reflect" and (before >= n or after >= n):
            raise RuntimeError(f"Argument #{4 + 2 * i}: Padding size should be less than the corresponding input "
                               f"dimension, but got: padding ({before}, {after}) at dimension {axis} of input "
                               f"{list(input.shape)}")
        if mode == "circular" and (before > n or after > n):
            raise RuntimeError("Padding value causes wrapping around more than once.")
        if mode == "circular" and n + before + after < 0:
            raise RuntimeError("Negative padding value is resulting in an empty dimension")
        if mode != "circular" and length == 2 and n + before + after < 1:
            raise RuntimeError(f"input (W: {n}) is too small. Calculated output W: {n + before + after}")


def _along(x, axis, lo, hi, step=None):
    return x[(slice(None),) * axis + (slice(lo, hi, step),)]


def _reflect(x, axis, before, after):
    n = x.shape[axis]
    parts = [ops.flip(_along(x, axis, 1, before + 1), axis)] if before else []
    parts.append(x)
    if after:
        parts.append(ops.flip(_along(x, axis, n - 1 - after, n - 1), axis))
    return ops.concatenate(parts, axis=axis) if len(parts) > 1 else x


def _replicate(x, axis, before, after):
    n = x.shape[axis]

    def edge(i, width):
        shape = list(x.shape)
        shape[axis] = width
        return ops.broadcast_to(_along(x, axis, i, i + 1), tuple(shape))

    parts = ([edge(0, before)] if before else []) + [x] + ([edge(n - 1, after)] if after else [])
    return ops.concatenate(parts, axis=axis) if len(parts) > 1 else x


def _circular(x, axis, before, after):
    n = x.shape[axis]
    parts = ([_along(x, axis, n - before, n)] if before else []) + [x] + ([_along(x, axis, 0, after)] if after else [])
    return ops.concatenate(parts, axis=axis) if len(parts) > 1 else x


_PADDERS = {"reflect": _reflect, "replicate": _replicate, "circular": _circular}


# ------------------------------------------------------------------ pixel shuffle
def _check_factor(name, what, factor, input):
    if input.ndim < 3:
        raise RuntimeError(f"{name} expects input to have at least 3 dimensions, but got input with {input.ndim} "
                           f"dimension(s)")
    if factor <= 0:
        raise RuntimeError(f"{name} expects a positive {what}, but got {factor}")


def pixel_shuffle(input, upscale_factor):
    """``(*, C r^2, H, W)`` to ``(*, C, H r, W r)`` (torch's ``F.pixel_shuffle``, its checks and texts)."""
    input, r = as_tensor(input), int(upscale_factor)
    _check_factor("pixel_shuffle", "upscale_factor", r, input)
    *lead, c, h, w = input.shape
    if c % (r * r):
        raise RuntimeError(f"pixel_shuffle expects its input's 'channel' dimension to be divisible by the square of "
                           f"upscale_factor, but input.size(-3)={c} is not divisible by {r * r}")
    k = len(lead)
    x = ops.reshape(input, (*lead, c // (r * r), r, r, h, w))
    x = ops.transpose(x, tuple(range(k)) + (k, k + 3, k + 1, k + 4, k + 2))
    return _fresh(ops.reshape(x, (*lead, c // (r * r), h * r, w * r)), input)


def pixel_unshuffle(input, downscale_factor):
    """``(*, C, H r, W r)`` to ``(*, C r^2, H, W)``, the inverse of ``pixel_shuffle``."""
    input, r = as_tensor(input), int(downscale_factor)
    _check_factor("pixel_unshuffle", "downscale_factor", r, input)
    *lead, c, h, w = input.shape
    for what, n, dim in (("height", h, -2), ("width", w, -1)):
        if n % r:
            raise RuntimeError(f"pixel_unshuffle expects {what} to be divisible by downscale_factor, but "
                               f"input.size({dim})={n} is not divisible by {r}")
    k = len(lead)
    x = ops.reshape(input, (*lead, c, h // r, r, w // r, r))
    x = ops.transpose(x, tuple(range(k)) + (k, k + 2, k + 4, k + 1, k + 3))
    return _fresh(ops.reshape(x, (*lead, c * r * r, h // r, w // r)), input)


# ------------------------------------------------------------------ local response norm
def local_response_norm(input, size, alpha=1e-4, beta=0.75, k=1.0):
    """``x / (k + alpha * mean(x^2 over size neighbouring channels)) ** beta``, torch's composition: the
    squares zero-padded along the channels (``size // 2`` before, ``(size - 1) // 2`` after), each
    window summed in order and divided by ``size`` (an integer division for integers, as torch's pooling)."""
    input = as_tensor(input)
    if input.ndim < 3:
        raise ValueError(f"Expected 3D or higher dimensionality                          input (got {input.ndim} "
                         f"dimensions)")
    if 0 in input.shape:
        return input
    sq = ops.pad(input * input, [(0, 0), (size // 2, (size - 1) // 2)] + [(0, 0)] * (input.ndim - 2))
    c = input.shape[1]
    total = _along(sq, 1, 0, c)
    for i in range(1, size):
        total = total + _along(sq, 1, i, i + c)
    mean_sq = total // size if input.dtype.kind in "iu" else total / size  # (torch's avg_pool of integers)
    div = (mean_sq * alpha + k) ** beta
    return input / div


# ------------------------------------------------------------------ interpolate
_NEEDS = {"linear": 3, "bilinear": 4, "trilinear": 5}
_TORCH_MODES = ("nearest", "nearest-exact", "area", "linear", "bilinear", "trilinear", "bicubic", "lanczos")
_BUILT = {("nearest", 3), ("nearest", 4), ("nearest", 5), ("nearest-exact", 3), ("nearest-exact", 4),
          ("nearest-exact", 5), ("area", 3), ("area", 4), ("area", 5), ("linear", 3), ("bilinear", 4), ("trilinear", 5),
          ("bicubic", 4)}


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """torch's ``F.interpolate`` for ``mode`` ``nearest`` and ``nearest-exact`` (3D to 5D inputs), ``area``
    (3D to 5D: adaptive average pooling), ``linear`` (3D), ``bilinear`` and ``bicubic`` (4D), ``trilinear`` (5D),
    ``size`` or ``scale_factor``, ``align_corners``, ``recompute_scale_factor``: a gather of the source cells along
    each spatial axis (and their weighted sum), with torch's source indices and weights, and its kernels' shortcuts
    (the gradient too where torch's backward takes one its forward does not).  ``lanczos`` and
    ``antialias=True`` are refused."""
    input = as_tensor(input)
    if mode in ("nearest", "area", "nearest-exact"):
        if align_corners is not None:
            raise ValueError("align_corners option can only be set with the interpolating modes: linear | bilinear | "
                             "bicubic | trilinear")
    elif align_corners is None:
        align_corners = False
    recompute = recompute_scale_factor or (mode == "area" and size is None)  # (torch's area always recomputes)
    sizes, scales = _output_sizes(input, size, scale_factor, recompute)
    if antialias and not (mode in ("bilinear", "bicubic", "lanczos") and input.ndim == 4):
        raise ValueError("Anti-alias option is restricted to bilinear, bicubic, and lanczos modes and requires a 4-D "
                         "tensor as input")
    _check_mode(input.ndim, mode, antialias)
    if mode == "area":
        return _fresh(adaptive_avg_pool(input, sizes, input.ndim - 2), input)
    _check_interpolated(input, sizes, mode)
    if mode == "bicubic" and list(sizes) == list(input.shape[2:]):  # (torch's backward copies; its forward not)
        return _ValueOfOneGradientOfAnother.apply(input, lambda v: _resample(v, mode, sizes, scales, align_corners),
                                                  _identity)
    return _fresh(_resample(input, mode, sizes, scales, align_corners), input)


def _resample(input, mode, sizes, scales, align_corners):
    out = input
    for i in reversed(range(len(sizes))):  # (the last axis first: torch's kernels' order of sums)
        n_out, scale, axis, n_in = sizes[i], scales[i], i + 2, input.shape[i + 2]
        if mode in _NEEDS:
            out = _linear_axis(out, axis, n_in, n_out, scale, align_corners)
        elif mode == "bicubic":
            out = _cubic_axis(out, axis, n_in, n_out, scale, align_corners)
        else:
            out = _nearest_axis(out, axis, n_in, n_out, scale, mode == "nearest-exact", input.ndim == 4)
    return out


def _check_mode(ndim, mode, antialias):
    need = _NEEDS.get(mode)
    if need is not None and ndim in (3, 4, 5) and ndim != need:
        raise NotImplementedError(f"Got {ndim}D input, but {mode} mode needs {need}D input")
    if mode not in _TORCH_MODES or ndim not in (3, 4, 5) or (mode in ("bicubic", "lanczos") and ndim != 4):
        raise NotImplementedError(
            f"Input Error: Only 3D, 4D and 5D input Tensors supported (got {ndim}D) for the modes: nearest | "
            f"linear | bilinear | bicubic | trilinear | lanczos | area | nearest-exact (got {mode})")
    if (mode, ndim) not in _BUILT or antialias:
        raise NotImplementedError(f"interpolate: mode={mode!r}{' with antialias=True' if antialias else ''} is not "
                                  f"supported for {ndim}D input (built: nearest, nearest-exact, area, linear, "
                                  f"bilinear)")


def _check_interpolated(input, sizes, mode):
    """torch's kernels' checks: sizes above 0, and the dtypes they are built for (nearest: also uint8)."""
    if min(sizes + list(input.shape[2:])) <= 0:
        names = "DHW"[3 - len(sizes):]
        def show(ns):
            return ", ".join(f"{a}: {n}" for a, n in zip(names, ns))
        raise RuntimeError(f"Input and output sizes should be greater than 0, but got input ({show(input.shape[2:])})"
                           f"{' and' if len(sizes) == 1 else ''} output ({show(sizes)})")
    kind = "nearest" if mode.startswith("nearest") else "cubic" if mode == "bicubic" else "linear"
    if input.dtype.kind in "biu" and not (kind == "nearest" and input.dtype == np.uint8):
        raise NotImplementedError(f'"compute_indices_weights_{kind}" not implemented for '
                                  f"'{TORCH_TYPE_NAMES.get(input.dtype.name)}'")


def _output_sizes(input, size, scale_factor, recompute_scale_factor):
    """torch's checks, the output sizes and the scales its kernels are given (None: ``in / out``)."""
    dim = input.ndim - 2
    if size is not None and scale_factor is not None:
        raise ValueError("only one of size or scale_factor should be defined")
    if size is not None:
        if isinstance(size, (list, tuple)) and len(size) != dim:
            raise ValueError(f"Input and output must have the same number of spatial dimensions, but got input with "
                             f"spatial dimensions of {list(input.shape[2:])} and output size of {size}. Please provide "
                             f"input tensor in (N, C, d1, d2, ...,dK) format and output size in (o1, o2, ...,oK) "
                             f"format.")
        if recompute_scale_factor:
            raise ValueError("recompute_scale_factor is not meaningful with an explicit size.")
        sizes = [int(s) for s in size] if isinstance(size, (list, tuple)) else [int(size)] * dim
        return sizes, [None] * dim
    if scale_factor is None:
        raise ValueError("either size or scale_factor should be defined")
    if isinstance(scale_factor, (list, tuple)):
        if len(scale_factor) != dim:
            raise ValueError(f"Input and scale_factor must have the same number of spatial dimensions, but got input "
                             f"with spatial dimensions of {list(input.shape[2:])} and scale_factor of shape "
                             f"{scale_factor}. Please provide input tensor in (N, C, d1, d2, ...,dK) format and "
                             f"scale_factor in (s1, s2, ...,sK) format.")
        factors = [float(s) for s in scale_factor]
    else:
        factors = [float(scale_factor)] * dim
    sizes = [math.floor(n * s) for n, s in zip(input.shape[2:], factors)]
    return sizes, [None] * dim if recompute_scale_factor else factors


def _nearest_axis(x, axis, n_in, n_out, scale, exact, shortcuts):
    """The gather along ``axis``; torch's 1-d and 3-d nearest kernels take no shortcut forward but their
    backward does (where the size is unchanged or doubles under another scale): its gradient is theirs."""
    fwd = _nearest_index(n_in, n_out, scale, exact, shortcuts)
    bwd = fwd if exact else _nearest_index(n_in, n_out, scale, exact, True)
    if np.array_equal(fwd, bwd):
        return ops.take(x, fwd, axis=axis)
    vjp = _identity if n_out == n_in else (lambda g: _along(g, axis, 0, n_out, 2) + _along(g, axis, 1, n_out, 2))
    return _ValueOfOneGradientOfAnother.apply(x, lambda v: ops.take(v, fwd, axis=axis), vjp)


def _identity(g):
    return g


class _ValueOfOneGradientOfAnother(Function):
    """``forward(x)``, whose gradient is ``vjp(g)``, whose gradient is ``forward`` again: torch's kernels whose
    backward takes a shortcut (a copy; pairs summed where the size doubles) that their forward does not, and
    whose double backward is their forward."""

    @staticmethod
    def forward(ctx, x, forward, vjp):
        ctx.forward, ctx.vjp = forward, vjp
        return forward(x)

    @staticmethod
    def backward(ctx, g):
        return _ValueOfOneGradientOfAnother.apply(g, ctx.vjp, ctx.forward), None, None


def _nearest_index(n_in, n_out, scale, exact, shortcuts):
    """torch's ``nearest_idx``: ``min(floor(i * s), n_in - 1)`` with ``s`` in float32; ``nearest_exact_idx``:
    ``floor((i + 0.5) * s)``, the product in float64 rounded to float32.  torch's 2-d nearest kernel (only)
    takes ``nearest_idx``'s shortcuts: ``i`` where the size is unchanged, ``i // 2`` where it doubles, whatever
    the scale."""
    i = np.arange(n_out)
    if shortcuts and not exact and n_out == n_in:
        return i
    if shortcuts and not exact and n_out == 2 * n_in:
        return i >> 1
    s = np.float32(1.0 / scale) if scale is not None and scale > 0 else np.float32(n_in) / np.float32(n_out)
    src = ((i + 0.5) * np.float64(s)).astype(np.float32) if exact else i.astype(np.float32) * s
    return np.minimum(np.floor(src).astype(np.int64), n_in - 1)


def _source_positions(n_in, n_out, scale, align_corners, t):
    """torch's ``area_pixel_compute_source_index`` of each output cell (not clamped at 0: the caller's)."""
    i = np.arange(n_out).astype(t)
    if align_corners:
        return i * (t(n_in - 1) / t(n_out - 1) if n_out > 1 else t(0))
    s = t(1.0 / scale) if scale is not None and scale > 0 else t(n_in) / t(n_out)
    return s * (i + t(0.5)) - t(0.5)


_A = -0.75  # torch's bicubic kernel's parameter


def _cubic_axis(x, axis, n_in, n_out, scale, align_corners):
    """``sum_j c_j x[clamp(i0 - 1 + j)]`` along ``axis``, torch's cubic convolution coefficients (``A = -0.75``)
    of the weight ``t`` (float64 for float64, else float32), the indices clamped to the axis."""
    t = np.float64 if x.dtype == np.float64 else np.float32
    i0, lam = _index_and_lambda(_source_positions(n_in, n_out, scale, align_corners, t), n_in, t)
    a = t(_A)

    def near(v):
        return ((a + 2) * v - (a + 3)) * v * v + 1

    def far(v):
        return ((a * v - 5 * a) * v + 8 * a) * v - 4 * a

    far_lam = 1 - lam
    coeffs = (far(lam + 1), near(lam), near(far_lam), far(far_lam + 1))
    shape = (n_out,) + (1,) * (x.ndim - 1 - axis)
    out = None
    for j, c in enumerate(coeffs):
        term = ops.take(x, np.clip(i0 - 1 + j, 0, n_in - 1), axis=axis) * c.astype(x.dtype).reshape(shape)
        out = term if out is None else out + term
    return out


def _index_and_lambda(src, n_in, t):
    """torch's ``guard_index_and_lambda``: the index ``floorf(src)`` (the source position rounded to float32
    first), at most ``n_in - 1``, and the weight ``src - index`` clamped to [0, 1]."""
    i0 = np.minimum(np.floor(src.astype(np.float32)).astype(np.int64), n_in - 1)
    return i0, np.clip(src - i0.astype(t), t(0), t(1))


def _linear_axis(x, axis, n_in, n_out, scale, align_corners):
    """``w0 * x[i0] + w1 * x[i1]`` along ``axis``, torch's source indices and weights (computed in float64 for
    float64, else in float32: torch's ``opmath_t``).  An axis whose size does not change is copied, whatever
    the scale, as torch's kernels do."""
    if n_out == n_in:
        return x
    t = np.float64 if x.dtype == np.float64 else np.float32
    src = _source_positions(n_in, n_out, scale, align_corners, t)
    i0, w1 = _index_and_lambda(src if align_corners else np.maximum(src, t(0)), n_in, t)
    i1 = i0 + (i0 < n_in - 1)
    w0 = (t(1) - w1).astype(x.dtype)
    w1 = w1.astype(x.dtype)
    shape = (n_out,) + (1,) * (x.ndim - 1 - axis)
    return (ops.take(x, i0, axis=axis) * w0.reshape(shape)) + (ops.take(x, i1, axis=axis) * w1.reshape(shape))


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    """``interpolate`` (torch's deprecated spelling, with its warning)."""
    warnings.warn("`nn.functional.upsample` is deprecated. Use `nn.functional.interpolate` instead.", stacklevel=2)
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):
    """``interpolate`` in mode ``nearest`` (torch's deprecated spelling, with its warning)."""
    warnings.warn("`nn.functional.upsample_nearest` is deprecated. Use `nn.functional.interpolate` instead.",
                  stacklevel=2)
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input, size=None, scale_factor=None):
    """``interpolate`` in mode ``bilinear`` with ``align_corners=True`` (torch's deprecated spelling, with its
    warning)."""
    warnings.warn("`nn.functional.upsample_bilinear` is deprecated. Use `nn.functional.interpolate` instead.",
                  stacklevel=2)
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)
