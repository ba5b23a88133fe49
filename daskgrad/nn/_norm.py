"""torch.nn.functional's ``batch_norm``, ``group_norm`` and ``rms_norm``, as compositions of daskgrad ops
(so their gradients, and second derivatives, are their parts').

Batch statistics are reductions over the batch and spatial axes, across every chunk of them.  The
running statistics are updated in place, lazily (no submission), as torch updates its buffers:
``running = (1 - momentum) * running + momentum * batch``, the variance unbiased (``n / (n - 1)``).
"""
from __future__ import annotations

import numpy as np

from .. import ops
from .._modes import no_grad
from ..graph import guard, size_repr
from ..ops import mean, sqrt
from ..ops._util import TORCH_TYPE_NAMES, as_tensor
from ..ops.reductions import length


def _channel_shape(input):
    return (1, input.shape[1]) + (1,) * (input.ndim - 2)


def _update_running(running, batch, momentum):
    """``running = (1 - momentum) running + momentum batch``, in place and lazily; ``momentum`` may be
    a 0-d tensor (the cumulative average's ``1 / num_batches_tracked``)."""
    with no_grad():
        running.mul_(1 - momentum)
        running += ops.reshape(batch.detach(), running.shape) * momentum


def _check_running(name, running, channels):
    if running is not None and running.shape[0] != channels:
        raise RuntimeError(f"{name} should contain {channels} elements not {running.shape[0]}")


def _check_dtypes(input, *params):
    """torch's CPU checks of batch_norm's dtypes: parameters (weight, bias, running mean and variance, those given)
    whose first is not of the input's dtype are a "mixed" call, which takes float32 parameters of a half input
    only; otherwise each is of the input's dtype."""
    params = [p for p in params if p is not None]
    if not params:
        return
    if params[0].dtype != input.dtype:
        if any(p.dtype != np.float32 for p in params):
            raise RuntimeError("mixed dtype (CPU): expect parameter to have scalar type of Float")
        if input.dtype != np.float16:
            raise RuntimeError("mixed dtype (CPU): all inputs must share same datatype.")
        return
    for p in params:
        if p.dtype != input.dtype:
            raise RuntimeError(f"expected scalar type {TORCH_TYPE_NAMES.get(input.dtype.name, input.dtype.name)} but "
                               f"found {TORCH_TYPE_NAMES.get(p.dtype.name, p.dtype.name)}")


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5):
    """Normalise each channel (axis 1) over the batch and spatial axes: with the batch's statistics
    when ``training`` (updating ``running_mean``/``running_var`` in place when given), else with the
    running ones.  Rows of unknown count (after a boolean mask): the count of each channel's values is taken
    lazily (torch's refusal of one value per channel is then not checked)."""
    input = as_tensor(input)
    channels, shape = input.shape[1], _channel_shape(input)
    _check_running("running_mean", running_mean, channels)
    _check_running("running_var", running_var, channels)
    _check_dtypes(input, *(None if p is None else as_tensor(p) for p in (weight, bias, running_mean, running_var)))
    axes = (0,) + tuple(range(2, input.ndim))
    if training and any(input.shape[a] != input.shape[a] for a in axes):
        n = length(input, axes, keepdims=True)  # (a lazy count: its update of the running variance is unbiased by it)
    elif training:
        n = int(np.prod([input.shape[a] for a in axes]))
    if training:
        if isinstance(n, int) and n == 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got input size "
                             f"{size_repr(input.shape)}")
        if eps <= 0.0:
            raise ValueError(f"batch_norm eps must be positive during training, but got {eps}")
        batch_mean = mean(input, axis=axes, keepdims=True)
        centred = input - batch_mean
        var = mean(centred * centred, axis=axes, keepdims=True)
        # an empty batch leaves the running statistics as they are, as torch's (its mean would be NaN)
        if running_mean is not None and (not isinstance(n, int) or n):
            _update_running(running_mean, batch_mean, momentum)
        if running_var is not None and (not isinstance(n, int) or n):
            _update_running(running_var, var * (n / (n - 1)), momentum)
        out = centred * (1 / sqrt(var + eps))
    else:
        if eps < 0.0:
            raise ValueError(f"batch_norm eps must be non-negative, but got {eps}")
        if running_mean is None or running_var is None:
            raise RuntimeError("running_mean must be defined in evaluation mode")
        out = (input - ops.reshape(running_mean, shape)) * (1 / sqrt(ops.reshape(running_var, shape) + eps))
    if weight is not None:
        out = out * ops.reshape(weight, shape)
    # (torch's saves the input and the weight: a write to either before the backward raises)
    return guard(out if bias is None else out + ops.reshape(bias, shape), input, weight)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    """Normalise each sample's channels in ``num_groups`` groups (over the group's channels and the
    spatial axes), then scale and shift per channel."""
    input = as_tensor(input)
    n, channels = input.shape[:2]
    if channels % num_groups:
        raise RuntimeError(f"Expected number of channels in input to be divisible by num_groups, but got input of "
                           f"shape {list(input.shape)} and num_groups={num_groups}")
    for w in (weight, bias):
        if w is not None and (w.ndim != 1 or w.shape[0] != channels):
            raise RuntimeError(f"Expected weight to be a vector of size equal to the number of channels in input, "
                               f"but got weight of shape {list(w.shape)} and input of shape {list(input.shape)}")
    spatial = tuple(input.shape[2:])
    grouped = ops.reshape(input, (n, num_groups, channels // num_groups) + spatial)  # splits the channel axis only
    axes = tuple(range(2, grouped.ndim))
    centred = grouped - mean(grouped, axis=axes, keepdims=True)
    var = mean(centred * centred, axis=axes, keepdims=True)
    out = ops.reshape(centred * (1 / sqrt(var + eps)), input.shape)
    shape = _channel_shape(input)
    if weight is not None:
        out = out * ops.reshape(weight, shape)
    # (torch's saves the input and the weight: a write to either before the backward raises)
    return guard(out if bias is None else out + ops.reshape(bias, shape), input, weight)


def _trailing_axes(input, normalized_shape, star="*"):
    """The trailing axes that ``normalized_shape`` (an int or a tuple) names, refused as torch refuses a
    mismatch (``star``: how torch's message for this function begins the expected shape)."""
    normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if tuple(input.shape[input.ndim - len(normalized_shape):]) != normalized_shape:
        raise RuntimeError(f"Given normalized_shape={list(normalized_shape)}, expected input with shape "
                           f"[{star}{', '.join(map(str, normalized_shape))}], but got input of size{list(input.shape)}")
    return tuple(range(input.ndim - len(normalized_shape), input.ndim))


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """``x / sqrt(mean(x^2) + eps) * weight`` over the trailing ``normalized_shape`` axes; ``eps=None`` is
    the machine epsilon of the input's dtype, as torch's."""
    input = as_tensor(input)
    axes = _trailing_axes(input, normalized_shape)
    eps = float(np.finfo(input.dtype).eps) if eps is None else eps
    out = input * (1 / sqrt(mean(input * input, axis=axes, keepdims=True) + eps))
    return out if weight is None else out * weight


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True,
                  momentum=0.1, eps=1e-5):
    """Normalise each sample's each channel over its spatial axes (biased variance); ``running_mean`` and
    ``running_var``, when given, are updated in place with the batch's mean of the instance statistics
    (the variance unbiased), as torch's; ``use_input_stats=False`` normalises with them instead."""
    input = as_tensor(input)
    if not use_input_stats:
        if running_mean is None or running_var is None:
            raise RuntimeError("Expected running_mean and running_var to be defined when use_input_stats is false")
        return batch_norm(input, running_mean, running_var, None if weight is None else ops.clone(weight), bias, False,
                          momentum, eps)  # (torch's batch norm reads a repeat of the weight: see below)
    axes = tuple(range(2, input.ndim))
    unknown = any(input.shape[a] != input.shape[a] for a in axes)  # (after a boolean mask: counted lazily)
    n = length(input, axes, keepdims=True) if unknown else int(np.prod(input.shape[2:]))
    if not unknown and n == 1:
        raise ValueError(f"Expected more than 1 spatial element when training, got input size "
                         f"{size_repr(input.shape)}")
    inst_mean = mean(input, axis=axes, keepdims=True)
    centred = input - inst_mean
    var = mean(centred * centred, axis=axes, keepdims=True)
    unbias = n / ops.maximum(n - 1, 1) if unknown else n / max(n - 1, 1)
    for running, batch in ((running_mean, inst_mean), (running_var, var * unbias)):
        if running is not None and input.shape[0]:
            _update_running(running, mean(ops.reshape(batch, input.shape[:2]), axis=0), momentum)
    out = centred * (1 / sqrt(var + eps))
    shape = _channel_shape(input)
    if weight is not None:  # (torch's composition saves a repeat of the weight: a write to the weight is not seen)
        out = out * ops.clone(ops.reshape(weight, shape))
    return guard(out if bias is None else out + ops.reshape(bias, shape), input)  # (and the input, reshaped)
