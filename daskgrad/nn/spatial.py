"""Padding, pixel-shuffle and upsampling layers: ``ConstantPad1d/2d/3d``, ``ZeroPad1d/2d/3d``,
``ReflectionPad1d/2d/3d``, ``ReplicationPad1d/2d/3d``, ``CircularPad1d/2d/3d``, ``PixelShuffle``, ``PixelUnshuffle``,
``Upsample``, ``UpsamplingNearest2d``, ``UpsamplingBilinear2d``, with torch's arguments and reprs (no parameters).

>>> up = nn.Sequential(nn.ReflectionPad2d(1), nn.Conv2d(8, 4, 3), nn.Upsample(scale_factor=2, mode="bilinear"))
>>> up(images).shape
(8, 4, 10, 10)
"""
from __future__ import annotations

from collections.abc import Iterable

from . import functional as F
from .module import Module


def _widths(padding, n):
    return tuple(padding) if isinstance(padding, Iterable) else (padding,) * n


class _PadNd(Module):
    _mode = "constant"
    _n = 2

    def __init__(self, padding):
        super().__init__()
        self.padding = _widths(padding, self._n)

    def forward(self, input):
        return F.pad(input, self.padding, self._mode)

    def extra_repr(self):
        return f"{self.padding}"


class _ConstantPadNd(_PadNd):
    def __init__(self, padding, value):
        super().__init__(padding)
        self.value = value

    def forward(self, input):
        return F.pad(input, self.padding, "constant", self.value)

    def extra_repr(self):
        return f"padding={self.padding}, value={self.value}"


class ConstantPad1d(_ConstantPadNd):
    """Pads the last axis with ``value``: ``padding`` an int or ``(left, right)``."""


class ConstantPad2d(_ConstantPadNd):
    """Pads the last two axes with ``value``: ``padding`` an int or ``(left, right, top, bottom)``."""
    _n = 4


class ConstantPad3d(_ConstantPadNd):
    """Pads the last three axes with ``value``: ``padding`` an int or ``(left, right, top, bottom, front, back)``."""
    _n = 6


class _ZeroPadNd(_ConstantPadNd):
    def __init__(self, padding):
        super().__init__(padding, 0.0)

    def extra_repr(self):
        return f"{self.padding}"


class ZeroPad1d(_ZeroPadNd):
    """Pads the last axis with zeros: ``padding`` an int or ``(left, right)``."""


class ZeroPad2d(_ZeroPadNd):
    """Pads the last two axes with zeros: ``padding`` an int or ``(left, right, top, bottom)``."""
    _n = 4


class ZeroPad3d(_ZeroPadNd):
    """Pads the last three axes with zeros: ``padding`` an int or ``(left, right, top, bottom, front, back)``."""
    _n = 6


class ReflectionPad1d(_PadNd):
    """Pads the last axis with its reflection (the edge not repeated)."""
    _mode = "reflect"


class ReflectionPad2d(ReflectionPad1d):
    """Pads the last two axes with their reflection (the edges not repeated)."""
    _n = 4


class ReflectionPad3d(ReflectionPad1d):
    """Pads the last three axes with their reflection (the edges not repeated)."""
    _n = 6


class ReplicationPad1d(_PadNd):
    """Pads the last axis with copies of its edge values."""
    _mode = "replicate"


class ReplicationPad2d(ReplicationPad1d):
    """Pads the last two axes with copies of their edge values."""
    _n = 4


class ReplicationPad3d(ReplicationPad1d):
    """Pads the last three axes with copies of their edge values."""
    _n = 6


class _CircularPadNd(_PadNd):
    _mode = "circular"

    def forward(self, input):
        dims = (self._n // 2 + 1, self._n // 2 + 2)
        if input.ndim not in dims:
            raise ValueError(f"expected {dims[0]}D or {dims[1]}D input (got {input.ndim}D input)")
        return super().forward(input)


class CircularPad1d(_CircularPadNd):
    """Pads the last axis by wrapping it around."""


class CircularPad2d(_CircularPadNd):
    """Pads the last two axes by wrapping them around."""
    _n = 4


class CircularPad3d(_CircularPadNd):
    """Pads the last three axes by wrapping them around."""
    _n = 6


class PixelShuffle(Module):
    """``(*, C r^2, H, W)`` to ``(*, C, H r, W r)``."""

    def __init__(self, upscale_factor):
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, input):
        return F.pixel_shuffle(input, self.upscale_factor)

    def extra_repr(self):
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    """``(*, C, H r, W r)`` to ``(*, C r^2, H, W)``."""

    def __init__(self, downscale_factor):
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, input):
        return F.pixel_unshuffle(input, self.downscale_factor)

    def extra_repr(self):
        return f"downscale_factor={self.downscale_factor}"


class Upsample(Module):
    """``F.interpolate`` with fixed ``size`` or ``scale_factor``, ``mode`` (``nearest``, ``linear``,
    ``bilinear``), ``align_corners`` and ``recompute_scale_factor``."""

    def __init__(self, size=None, scale_factor=None, mode="nearest", align_corners=None, recompute_scale_factor=None):
        super().__init__()
        self.name = type(self).__name__
        self.size = size
        if isinstance(scale_factor, tuple):
            self.scale_factor = tuple(float(factor) for factor in scale_factor)
        else:
            self.scale_factor = float(scale_factor) if scale_factor else None
        self.mode, self.align_corners, self.recompute_scale_factor = mode, align_corners, recompute_scale_factor

    def forward(self, input):
        return F.interpolate(input, self.size, self.scale_factor, self.mode, self.align_corners,
                             recompute_scale_factor=self.recompute_scale_factor)

    def extra_repr(self):
        info = f"scale_factor={self.scale_factor!r}" if self.scale_factor is not None else f"size={self.size!r}"
        return f"{info}, mode={self.mode!r}"


class UpsamplingNearest2d(Upsample):
    """``Upsample`` in mode ``nearest`` (torch's older spelling)."""

    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    """``Upsample`` in mode ``bilinear`` with ``align_corners=True`` (torch's older spelling)."""

    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)
