"""Normalisation layers: ``BatchNorm1d/2d/3d``, ``SyncBatchNorm``, ``InstanceNorm1d/2d/3d``, ``GroupNorm``,
``LocalResponseNorm``, ``CrossMapLRN2d``, ``RMSNorm``.

BatchNorm's batch statistics reduce over every chunk of the batch (and spatial) axes; its buffers
``running_mean``, ``running_var`` and ``num_batches_tracked`` are updated in place, lazily, in
training mode, as torch's (``momentum=None``: the cumulative average, ``1 / num_batches_tracked``),
and travel in ``state_dict`` under torch's names.

>>> bn = nn.BatchNorm2d(8); y = bn(images)     # images: (N, 8, H, W)
"""
from __future__ import annotations

import numbers
import warnings

import numpy as np

from .. import ops
from .._modes import no_grad
from .._tensor import ones, zeros
from ..function import Function
from ..ops._util import constant_like
from . import _norm, _spatial
from .layers import _affine, _check_size
from .module import Module, Parameter


class _BatchNorm(Module):
    _dims = ()
    _version = 2  # (torch's _NormBase: the version its state_dict metadata records)

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True, device=None,
                 dtype=None, *, bias=True):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        _check_size(num_features)
        _affine(self, affine, (num_features,), dtype, device, bias)
        if track_running_stats:
            self.register_buffer("running_mean", zeros(num_features, dtype=dtype, chunks=-1, device=device))
            self.register_buffer("running_var", ones(num_features, dtype=dtype, chunks=-1, device=device))
            self.register_buffer("num_batches_tracked", zeros((), dtype="int64", device=device))
        else:
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                self.register_buffer(name, None)

    def reset_running_stats(self):
        if self.track_running_stats:
            with no_grad():
                self.running_mean.zero_()
                self.running_var.fill_(1)
                self.num_batches_tracked.zero_()

    def reset_parameters(self):
        self.reset_running_stats()
        if self.affine:
            with no_grad():
                self.weight.fill_(1)
                if self.bias is not None:
                    self.bias.zero_()

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        """torch's: a checkpoint older than version 2 (or unversioned) has no ``num_batches_tracked``; the
        module keeps its own count (0 for a new one)."""
        version = local_metadata.get("version", None)
        key = prefix + "num_batches_tracked"
        if (version is None or version < 2) and self.track_running_stats and key not in state_dict:
            state_dict[key] = (self.num_batches_tracked.clone() if self.num_batches_tracked is not None
                               else zeros((), dtype="int64"))
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)

    def _check_input_dim(self, input):
        if input.ndim not in self._dims:
            want = " or ".join(f"{d}D" for d in self._dims)
            raise ValueError(f"expected {want} input (got {input.ndim}D input)")

    def forward(self, input):
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            with no_grad():
                self.num_batches_tracked += 1
            if self.momentum is None:  # the cumulative average: a lazy 1 / count, nothing is computed, in
                factor = 1.0 / self.num_batches_tracked.double()  # float64, as torch's 1.0 / float(count)
        use_batch = self.training or (self.running_mean is None and self.running_var is None)
        tracked = not self.training or self.track_running_stats
        return _norm.batch_norm(input, self.running_mean if tracked else None,
                                self.running_var if tracked else None, self.weight, self.bias, use_batch, factor,
                                self.eps)

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"bias={self.bias is not None}, track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Over ``(N, C)`` or ``(N, C, L)``."""
    _dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Over ``(N, C, H, W)``."""
    _dims = (4,)


class BatchNorm3d(_BatchNorm):
    """Over ``(N, C, D, H, W)``."""
    _dims = (5,)


class SyncBatchNorm(_BatchNorm):
    """torch's ``SyncBatchNorm``: batch normalisation over ``(N, C, +)`` (any input of 2 or more dimensions) with
    statistics over the whole batch.

    torch's synchronises the statistics of the batch's pieces across the processes of ``process_group``; in
    daskgrad a batch is one chunked tensor across every worker, so :class:`BatchNorm2d`'s statistics already
    reduce over the whole (global) batch, and this module's forward is BatchNorm's.  ``process_group`` is kept
    as an attribute and used for nothing.  torch raises (``SyncBatchNorm expected input tensor to be on GPU ...``)
    only in training under an initialised ``torch.distributed`` with a CPU input, because its collective needs a
    GPU; that reason does not apply here, so daskgrad computes, on CPU or GPU chunks.  Without a process group
    torch computes BatchNorm's forward too, as here.

    >>> sync = nn.SyncBatchNorm.convert_sync_batchnorm(nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3)))
    >>> sync[1]
    SyncBatchNorm(3, eps=1e-05, momentum=0.1, affine=True, bias=True, track_running_stats=True)
    """

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
                 process_group=None, device=None, dtype=None, *, bias=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype, bias=bias)
        self.process_group = process_group

    def _check_input_dim(self, input):
        if input.ndim < 2:
            raise ValueError(f"expected at least 2D input (got {input.ndim}D input)")

    def forward(self, input):
        self._check_input_dim(input)
        if input.shape[1] == 0:
            raise ValueError("SyncBatchNorm number of input channels should be non-zero")
        return super().forward(input)

    @classmethod
    def convert_sync_batchnorm(cls, module, process_group=None):
        """``module`` with every ``BatchNorm*d`` (any batch norm, not an instance norm) in it replaced by a
        ``SyncBatchNorm`` that shares its parameters and buffers and has its training flag (and ``qconfig``);
        a batch norm given itself comes back as a new module, anything else as itself, changed in place."""
        out = module
        if isinstance(module, _BatchNorm) and not isinstance(module, _InstanceNorm):
            out = SyncBatchNorm(module.num_features, module.eps, module.momentum, module.affine,
                                module.track_running_stats, process_group, bias=module.bias is not None)
            if module.affine:
                out.weight, out.bias = module.weight, module.bias
            out.running_mean, out.running_var = module.running_mean, module.running_var
            out.num_batches_tracked = module.num_batches_tracked
            out.training = module.training
            if hasattr(module, "qconfig"):
                out.qconfig = module.qconfig
        for name, child in module.named_children():
            out.add_module(name, cls.convert_sync_batchnorm(child, process_group))
        return out


class _InstanceNorm(_BatchNorm):
    _no_batch = 0

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=False, track_running_stats=False, device=None,
                 dtype=None, *, bias=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype, bias=bias)

    def _check_input_dim(self, input):
        if input.ndim not in self._dims:
            raise ValueError(f"expected {self._dims[0]}D or {self._dims[1]}D input (got {input.ndim}D input)")

    def forward(self, input):
        self._check_input_dim(input)
        feature_dim = input.ndim - self._no_batch
        if input.shape[feature_dim] != self.num_features:
            if self.affine:
                raise ValueError(f"expected input's size at dim={feature_dim} to match num_features "
                                 f"({self.num_features}), but got: {input.shape[feature_dim]}.")
            warnings.warn(f"input's size at dim={feature_dim} does not match num_features. You can silence this "
                          "warning by not passing in num_features, which is not used because affine=False",
                          stacklevel=2)
        unbatched = input.ndim == self._no_batch
        out = _norm.instance_norm(input[None] if unbatched else input, self.running_mean, self.running_var,
                                  self.weight, self.bias, self.training or not self.track_running_stats,
                                  self.momentum if self.momentum is not None else 0.0, self.eps)
        return out[0] if unbatched else out


class InstanceNorm1d(_InstanceNorm):
    """Each sample's each channel normalised over its length: ``(N, C, L)`` or ``(C, L)``."""
    _dims, _no_batch = (2, 3), 2


class InstanceNorm2d(_InstanceNorm):
    """Each sample's each channel normalised over its plane: ``(N, C, H, W)`` or ``(C, H, W)``."""
    _dims, _no_batch = (3, 4), 3


class InstanceNorm3d(_InstanceNorm):
    """Each sample's each channel normalised over its volume: ``(N, C, D, H, W)`` or ``(C, D, H, W)``."""
    _dims, _no_batch = (4, 5), 4


class LocalResponseNorm(Module):
    """Each channel divided by ``(k + alpha * mean of the squares of size neighbouring channels) ** beta``."""

    def __init__(self, size, alpha=1e-4, beta=0.75, k=1.0):
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def forward(self, input):
        return _spatial.local_response_norm(input, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self):
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"


def _lrn_windows(channels, size):
    """torch's legacy ``CrossMapLRN2d`` windows as ``(channels, channels)`` 0/1 matrices, read off its loops:
    row ``c`` of the first says which channels' squares its forward sums into channel ``c``'s scale (a running
    sum that never drops channel 0, as torch's), row ``c`` of the second which channels' ratios its backward
    sums into channel ``c``'s gradient (a window ``size`` wide, offset as torch's)."""
    pre_pad = int((size - 1) / 2 + 1)
    forward = np.zeros((channels, channels))
    forward[0, :min(pre_pad, channels)] = 1
    for c in range(1, channels):
        forward[c] = forward[c - 1]
        if c < channels - pre_pad + 1:
            forward[c, c + pre_pad - 1] += 1
        if c > pre_pad:
            forward[c, c - pre_pad] -= 1
    start = int(size - (size - 1) / 2)  # where channel 0's ratio sits in torch's padded buffer
    padded = np.arange(channels) + start
    backward = ((padded[None, :] >= np.arange(channels)[:, None])
                & (padded[None, :] <= np.arange(channels)[:, None] + size - 1)).astype(float)
    return forward, backward, start


def _over_channels(x, window):
    """``sum_j window[c, j] x[:, j]`` for each channel ``c`` of an ``(N, C, H, W)`` tensor."""
    return ops.einsum("dc,nchw->ndhw", constant_like(window.astype(x.dtype), x.array._meta), x)


class _CrossMapLRN2dFn(Function):
    """torch's ``_cross_map_lrn2d``: its forward, and its own backward (which is not its forward's derivative:
    its window is offset from the forward's, and the forward's never drops channel 0), so that gradients are
    torch's numbers."""

    @staticmethod
    def forward(ctx, input, size, alpha, beta, k):
        if input.ndim != 4:
            raise ValueError(f"CrossMapLRN2d: Expected input to be 4D, got {input.ndim}D instead.")
        forward, ctx.window, ctx.start = _lrn_windows(input.shape[1], size)
        scale = _over_channels(input * input, forward) * (alpha / size) + k
        output = scale ** -beta * input
        ctx.size, ctx.beta, ctx.ratio = size, beta, 2 * alpha * beta / size
        ctx.save_for_backward(input, output, scale)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        input, output, scale = ctx.saved_tensors
        channels = input.shape[1]
        if ctx.start + channels > channels + ctx.size - 1:  # torch's narrow of its padded buffer fails
            raise RuntimeError(f"start ({ctx.start}) + length ({channels}) exceeds dimension size "
                               f"({channels + ctx.size - 1}).")
        accum = _over_channels(grad_output * output / scale, ctx.window)
        return scale ** -ctx.beta * grad_output - ctx.ratio * (input * accum), None, None, None, None


class CrossMapLRN2d(Module):
    """torch's legacy ``CrossMapLRN2d(size, alpha=1e-4, beta=0.75, k=1)`` on ``(N, C, H, W)``: each channel times
    ``(k + alpha / size * sum of squares over a window of channels) ** -beta``, with torch's own windows and
    backward, so values and gradients are torch's.  These are not :class:`LocalResponseNorm`'s: torch's running
    window sum never drops channel 0, and its backward (not the forward's derivative) sums over a window offset
    from the forward's; with ``size=1`` the backward raises torch's error.

    >>> nn.CrossMapLRN2d(3)(images).shape
    (8, 8, 5, 5)
    """

    def __init__(self, size, alpha=1e-4, beta=0.75, k=1):
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def forward(self, input):
        return _CrossMapLRN2dFn.apply(input, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self):
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"


class GroupNorm(Module):
    """Each sample's channels normalised in ``num_groups`` groups; weight ones, bias zeros."""

    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, device=None, dtype=None, *, bias=True):
        super().__init__()
        if num_channels % num_groups != 0:
            raise ValueError(f"num_channels ({num_channels}) must be divisible by num_groups ({num_groups})")
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        if affine:
            _check_size(num_channels)
        _affine(self, affine, (num_channels,), dtype, device, bias)

    def forward(self, input):
        return _norm.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
                f"bias={self.bias is not None}")


class RMSNorm(Module):
    """``x / sqrt(mean(x^2) + eps) * weight`` over the trailing ``normalized_shape`` axes (torch 2.4's API;
    ``eps=None`` is the input dtype's machine epsilon)."""

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None, dtype=None):
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, numbers.Integral) else tuple(normalized_shape)
        self.normalized_shape, self.eps, self.elementwise_affine = shape, eps, elementwise_affine
        if elementwise_affine:
            _check_size(*shape)
        self.register_parameter("weight", Parameter(ones(*shape, dtype=dtype, chunks=-1, device=device))
                                if elementwise_affine else None)

    def reset_parameters(self):
        if self.weight is not None:
            with no_grad():
                self.weight.fill_(1)

    def forward(self, input):
        return _norm.rms_norm(input, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
