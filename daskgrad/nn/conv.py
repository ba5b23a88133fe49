"""Convolution and pooling layers: ``Conv1d/2d/3d``, ``ConvTranspose1d/2d/3d``, ``MaxPool1d/2d/3d``,
``AvgPool1d/2d/3d``, ``AdaptiveAvgPool1d/2d/3d``, ``AdaptiveMaxPool1d/2d/3d``, ``FractionalMaxPool2d/3d``,
``MaxUnpool1d/2d/3d``,
``LPPool1d/2d/3d``, ``Unfold``, ``Fold``, on batches chunked along the batch and the spatial axes.

Weights get torch's default initialisation (``kaiming_uniform_(a=sqrt(5))``: U(-b, b) with
``b = 1 / sqrt(fan_in)``, the bias too), drawn from daskgrad's generator: copy torch's values in with
``load_state_dict`` for identical numbers.

>>> net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten())
"""
from __future__ import annotations

import math

from . import _conv, _pool, _spatial
from ..graph import size_repr
from .layers import _check_size, _uniform
from .module import Module

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def _check_groups(in_channels, out_channels, groups):
    """torch's checks of a convolution's ``groups`` (ValueError, its words)."""
    if groups <= 0:
        raise ValueError("groups must be a positive integer")
    if in_channels % groups != 0:
        raise ValueError("in_channels must be divisible by groups")
    if out_channels % groups != 0:
        raise ValueError("out_channels must be divisible by groups")


class _ConvNd(Module):
    _nsp = 0

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True,
                 padding_mode="zeros", device=None, dtype=None):
        super().__init__()
        n = self._nsp
        _check_groups(in_channels, out_channels, groups)
        self.kernel_size, self.stride = _conv._tuple(kernel_size, n), _conv._tuple(stride, n)
        self.dilation = _conv._tuple(dilation, n)
        if isinstance(padding, str):
            if padding not in ("valid", "same"):
                raise ValueError(f"Invalid padding string {padding!r}, should be one of {{'valid', 'same'}}")
            if padding == "same" and any(s != 1 for s in self.stride):
                raise ValueError("padding='same' is not supported for strided convolutions")
            self.padding = padding
        else:
            self.padding = _conv._tuple(padding, n)
        if padding_mode not in _PADDING_MODES:
            raise ValueError(f"padding_mode must be one of {set(_PADDING_MODES)}, but got "
                             f"padding_mode='{padding_mode}'")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.padding_mode = padding_mode
        # F.pad's widths (last axis first) for the other modes, as torch's: 'same' pads the extra cell at the end
        if self.padding == "same":
            totals = [d * (k - 1) for d, k in zip(self.dilation, self.kernel_size)]
            widths = [(t // 2, t - t // 2) for t in totals]
        else:
            widths = [(0, 0)] * n if self.padding == "valid" else [(p, p) for p in self.padding]
        self._reversed_padding_repeated_twice = [w for pair in reversed(widths) for w in pair]
        self.output_padding, self.transposed = (0,) * n, False
        _check_size(out_channels, in_channels // groups, *self.kernel_size)
        fan_in = in_channels // groups * math.prod(self.kernel_size)
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        self.weight = _uniform((out_channels, in_channels // groups) + self.kernel_size, bound, dtype, device)
        if bias:
            self.bias = _uniform((out_channels,), bound, dtype, device)
        else:
            self.register_parameter("bias", None)

    def forward(self, input):
        if self.padding_mode != "zeros":  # torch's: padded by F.pad in that mode, then convolved unpadded
            input = _spatial.pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode)
            return _conv.conv(input, self.weight, self.bias, self.stride, (0,) * self._nsp, self.dilation, self.groups,
                              self._nsp)
        return _conv.conv(input, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups,
                          self._nsp)

    def extra_repr(self):
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * len(self.padding):
            s += f", padding={self.padding}"
        if self.dilation != (1,) * len(self.dilation):
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * len(self.output_padding):
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        s += ", bias=False" if self.bias is None else ""
        return s + (f", padding_mode={self.padding_mode}" if self.padding_mode != "zeros" else "")


class Conv1d(_ConvNd):
    """Cross-correlation over one spatial axis: ``(N, C_in, L) -> (N, C_out, L_out)``."""
    _nsp = 1


class Conv2d(_ConvNd):
    """Cross-correlation over two spatial axes: ``(N, C_in, H, W) -> (N, C_out, H_out, W_out)``."""
    _nsp = 2


class Conv3d(_ConvNd):
    """Cross-correlation over three spatial axes: ``(N, C_in, D, H, W) -> (N, C_out, D_out, H_out, W_out)``."""
    _nsp = 3


class _ConvTransposeNd(_ConvNd):
    """What ConvTranspose1d/2d/3d share: torch's arguments (``output_padding`` before ``groups``), a weight
    ``(in_channels, out_channels / groups, *kernel_size)``, and forward's ``output_size``."""
    _nsp = 0

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1,
                 bias=True, dilation=1, padding_mode="zeros", device=None, dtype=None):
        if padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for {type(self).__name__}')
        Module.__init__(self)
        n = self._nsp
        _check_groups(in_channels, out_channels, groups)
        self.kernel_size, self.stride = _conv._tuple(kernel_size, n), _conv._tuple(stride, n)
        self.padding, self.dilation = _conv._tuple(padding, n), _conv._tuple(dilation, n)
        self.output_padding, self.transposed = _conv._tuple(output_padding, n), True
        self.in_channels, self.out_channels, self.groups, self.padding_mode = in_channels, out_channels, groups, "zeros"
        _check_size(in_channels, out_channels // groups, *self.kernel_size)
        fan_in = out_channels // groups * math.prod(self.kernel_size)  # (the weight's axis 1 times the kernel)
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        self.weight = _uniform((in_channels, out_channels // groups) + self.kernel_size, bound, dtype, device)
        if bias:
            self.bias = _uniform((out_channels,), bound, dtype, device)
        else:
            self.register_parameter("bias", None)

    def _output_padding(self, input, output_size):
        """torch's: ``self.output_padding``, or what makes the output ``output_size`` (its spatial sizes, or
        with the batch and channel axes too)."""
        if output_size is None:
            return self.output_padding
        n, ndim = self._nsp, input.ndim
        lead = 2 if ndim == n + 2 else 1
        if len(output_size) == lead + n:
            output_size = output_size[lead:]
        if len(output_size) != n:
            raise ValueError(f"ConvTranspose{n}D: for {ndim}D input, output_size must have {n} or {lead + n} "
                             f"elements (got {len(output_size)})")
        min_sizes = [(input.shape[d + lead] - 1) * self.stride[d] - 2 * self.padding[d]
                     + self.dilation[d] * (self.kernel_size[d] - 1) + 1 for d in range(n)]
        max_sizes = [m + s - 1 for m, s in zip(min_sizes, self.stride)]
        for size, lo, hi in zip(output_size, min_sizes, max_sizes):
            if size < lo or size > hi:
                raise ValueError(f"requested an output size of {output_size}, but valid sizes range from "
                                 f"{min_sizes} to {max_sizes} (for an input of {size_repr(input.shape[2:])})")
        return [size - lo for size, lo in zip(output_size, min_sizes)]

    def forward(self, input, output_size=None):
        return _conv.conv_transpose(input, self.weight, self.bias, self.stride, self.padding,
                                    self._output_padding(input, output_size), self.groups, self.dilation, self._nsp)


class ConvTranspose1d(_ConvTransposeNd):
    """The gradient of a ``Conv1d`` with respect to its input, as a layer: ``(N, C_in, L) -> (N, C_out, L_out)``
    with ``L_out = (L - 1) * stride - 2 * padding + dilation * (kernel_size - 1) + output_padding + 1``."""
    _nsp = 1


class ConvTranspose2d(_ConvTransposeNd):
    """The gradient of a ``Conv2d`` with respect to its input, as a layer: ``(N, C_in, H, W) ->
    (N, C_out, H_out, W_out)``; ``forward(input, output_size)`` picks the output padding that gives that size."""
    _nsp = 2


class ConvTranspose3d(_ConvTransposeNd):
    """The gradient of a 3-d convolution with respect to its input, as a layer: ``(N, C_in, D, H, W) ->
    (N, C_out, D_out, H_out, W_out)``."""
    _nsp = 3


class _MaxPoolNd(Module):
    _nsp = 0

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False, ceil_mode=False):
        super().__init__()
        self.kernel_size, self.stride = kernel_size, stride if stride is not None else kernel_size
        self.padding, self.dilation, self.return_indices, self.ceil_mode = padding, dilation, return_indices, ceil_mode

    def forward(self, input):
        return _conv.max_pool(input, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
                              self.return_indices, self._nsp)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class MaxPool1d(_MaxPoolNd):
    """Max over sliding windows of the last axis (torch's ``nn.MaxPool1d``); the gradient goes to each
    window's first largest cell, as torch's."""
    _nsp = 1


class MaxPool2d(_MaxPoolNd):
    """Max over sliding windows of the last two axes (torch's ``nn.MaxPool2d``), chunked spatial axes
    included; the gradient goes to each window's first largest cell, as torch's."""
    _nsp = 2


class MaxPool3d(_MaxPoolNd):
    """Max over sliding windows of the last three axes (torch's ``nn.MaxPool3d``), chunked spatial axes
    included; the gradient goes to each window's first largest cell, as torch's."""
    _nsp = 3


class AvgPool1d(Module):
    """Mean over sliding windows of the last axis (torch's ``nn.AvgPool1d``)."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
        super().__init__()
        self.kernel_size = _conv._tuple(kernel_size, 1)
        self.stride = _conv._tuple(stride if stride is not None else kernel_size, 1)
        self.padding, self.ceil_mode, self.count_include_pad = _conv._tuple(padding, 1), ceil_mode, count_include_pad

    def forward(self, input):
        return _conv.avg_pool(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                              self.count_include_pad, None, 1)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class _AvgPoolNd(Module):
    _nsp = 0

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                 divisor_override=None):
        super().__init__()
        self.kernel_size, self.stride = kernel_size, stride if stride is not None else kernel_size
        self.padding, self.ceil_mode, self.count_include_pad = padding, ceil_mode, count_include_pad
        self.divisor_override = divisor_override

    def forward(self, input):
        return _conv.avg_pool(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                              self.count_include_pad, self.divisor_override, self._nsp)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool2d(_AvgPoolNd):
    """Mean over sliding windows of the last two axes (torch's ``nn.AvgPool2d``), chunked spatial axes
    included."""
    _nsp = 2


class AvgPool3d(_AvgPoolNd):
    """Mean over sliding windows of the last three axes (torch's ``nn.AvgPool3d``), chunked spatial axes
    included."""
    _nsp = 3


class _AdaptiveAvgPoolNd(Module):
    _nsp = 0

    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, input):
        return _conv.adaptive_avg_pool(input, self.output_size, self._nsp)

    def extra_repr(self):
        return f"output_size={self.output_size}"


class AdaptiveAvgPool1d(_AdaptiveAvgPoolNd):
    """Mean over torch's adaptive windows of the last axis; ``AdaptiveAvgPool1d(1)`` is global pooling."""
    _nsp = 1


class AdaptiveAvgPool2d(_AdaptiveAvgPoolNd):
    """Mean over torch's adaptive windows; ``AdaptiveAvgPool2d(1)`` is global average pooling."""
    _nsp = 2


class AdaptiveAvgPool3d(_AdaptiveAvgPoolNd):
    """Mean over torch's adaptive windows of the last three axes; ``AdaptiveAvgPool3d(1)`` is global pooling."""
    _nsp = 3


class _AdaptiveMaxPoolNd(Module):
    _nsp = 0

    def __init__(self, output_size, return_indices=False):
        super().__init__()
        self.output_size, self.return_indices = output_size, return_indices

    def forward(self, input):
        return _pool.adaptive_max_pool(input, self.output_size, self.return_indices, self._nsp)

    def extra_repr(self):
        return f"output_size={self.output_size}"


class AdaptiveMaxPool1d(_AdaptiveMaxPoolNd):
    """Max over torch's adaptive windows of the last axis; ``return_indices=True`` gives their positions too."""
    _nsp = 1


class AdaptiveMaxPool2d(_AdaptiveMaxPoolNd):
    """Max over torch's adaptive windows of the last two axes (``None`` in ``output_size`` keeps a size)."""
    _nsp = 2


class AdaptiveMaxPool3d(_AdaptiveMaxPoolNd):
    """Max over torch's adaptive windows of the last three axes (``None`` in ``output_size`` keeps a size)."""
    _nsp = 3


class _FractionalMaxPoolNd(Module):
    _nsp = 0

    def __init__(self, kernel_size, output_size=None, output_ratio=None, return_indices=False, _random_samples=None):
        super().__init__()
        n, name = self._nsp, type(self).__name__
        if n == 3 and ((isinstance(kernel_size, int) and kernel_size <= 0) or
                       (isinstance(kernel_size, (tuple, list)) and not all(k > 0 for k in kernel_size))):
            raise ValueError(f"kernel_size must be greater than 0, but got {kernel_size}")
        self.kernel_size = _pool._ntuple(kernel_size, n)
        self.return_indices = return_indices
        self.register_buffer("_random_samples", _random_samples)
        self.output_size = _pool._ntuple(output_size, n) if output_size is not None else None
        self.output_ratio = _pool._ntuple(output_ratio, n) if output_ratio is not None else None
        if output_size is None and output_ratio is None:
            raise ValueError(f"{name} requires specifying either an output size, or a pooling ratio")
        if output_size is not None and output_ratio is not None:
            raise ValueError("only one of output_size and output_ratio may be specified")
        if self.output_ratio is not None and not all(0 < r < 1 for r in self.output_ratio):
            raise ValueError(f"output_ratio must be between 0 and 1 (got {output_ratio})")

    def forward(self, input):
        return _pool.fractional_max_pool(input, self.kernel_size, self.output_size, self.output_ratio,
                                         self.return_indices, self._random_samples, self._nsp)

    def extra_repr(self):
        return ""


class FractionalMaxPool2d(_FractionalMaxPoolNd):
    """Max over pseudo-random ``kernel_size`` windows of the last two axes, ``output_size`` of them (or
    ``output_ratio`` of the input's size); the buffer ``_random_samples`` ``(N, C, 2)``, when given, places them
    as in torch (its values, indices and gradients then), else each forward draws them from daskgrad's generator
    (not torch's, so the windows differ from a torch run's).
    See :func:`~daskgrad.nn.functional.fractional_max_pool2d`."""
    _nsp = 2


class FractionalMaxPool3d(_FractionalMaxPoolNd):
    """Max over pseudo-random ``kernel_size`` windows of the last three axes, as :class:`FractionalMaxPool2d` with
    ``(N, C, 3)`` samples."""
    _nsp = 3


class _MaxUnpoolNd(Module):
    _nsp = 0

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        n = self._nsp
        self.kernel_size = _conv._tuple(kernel_size, n)
        self.stride = _conv._tuple(stride if stride is not None else kernel_size, n)
        self.padding = _conv._tuple(padding, n)

    def forward(self, input, indices, output_size=None):
        return _pool.max_unpool(input, indices, self.kernel_size, self.stride, self.padding, output_size, self._nsp)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxUnpool1d(_MaxUnpoolNd):
    """``MaxPool1d``'s partial inverse: each value put back at its index, zeros elsewhere."""
    _nsp = 1


class MaxUnpool2d(_MaxUnpoolNd):
    """``MaxPool2d``'s partial inverse: each value put back at its index, zeros elsewhere."""
    _nsp = 2


class MaxUnpool3d(_MaxUnpoolNd):
    """``MaxPool3d``'s partial inverse: each value put back at its index, zeros elsewhere."""
    _nsp = 3


class _LPPoolNd(Module):
    _nsp = 0

    def __init__(self, norm_type, kernel_size, stride=None, ceil_mode=False):
        super().__init__()
        self.norm_type, self.kernel_size, self.stride, self.ceil_mode = norm_type, kernel_size, stride, ceil_mode

    def forward(self, input):
        return _pool.lp_pool(input, float(self.norm_type), self.kernel_size, self.stride, self.ceil_mode, self._nsp)

    def extra_repr(self):
        return (f"norm_type={self.norm_type}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"ceil_mode={self.ceil_mode}")


class LPPool1d(_LPPoolNd):
    """Power-average pooling over the last axis: ``(sum of x ** p over each window) ** (1 / p)``."""
    _nsp = 1


class LPPool2d(_LPPoolNd):
    """Power-average pooling over the last two axes: ``(sum of x ** p over each window) ** (1 / p)``."""
    _nsp = 2


class LPPool3d(_LPPoolNd):
    """Power-average pooling over the last three axes: ``(sum of x ** p over each window) ** (1 / p)``."""
    _nsp = 3


class Unfold(Module):
    """Sliding windows as columns: ``(N, C, H, W) -> (N, C * prod(kernel_size), L)``
    (:func:`~daskgrad.nn.functional.unfold`)."""

    def __init__(self, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.kernel_size, self.dilation, self.padding, self.stride = kernel_size, dilation, padding, stride

    def forward(self, input):
        return _conv.unfold(input, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, dilation={self.dilation}, padding={self.padding}, "
                f"stride={self.stride}")


class Fold(Module):
    """Columns back onto an image, overlaps summed: ``(N, C * prod(kernel_size), L) -> (N, C, *output_size)``
    (:func:`~daskgrad.nn.functional.fold`, Unfold's transpose)."""

    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.output_size, self.kernel_size = output_size, kernel_size
        self.dilation, self.padding, self.stride = dilation, padding, stride

    def forward(self, input):
        return _conv.fold(input, self.output_size, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self):
        return (f"output_size={self.output_size}, kernel_size={self.kernel_size}, dilation={self.dilation}, "
                f"padding={self.padding}, stride={self.stride}")
