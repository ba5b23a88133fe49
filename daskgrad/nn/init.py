"""``torch.nn.init``: fill a tensor in place, under ``no_grad``, with torch's distributions, fans and gains.

The values are drawn from daskgrad's generator (reproducible with :func:`daskgrad.manual_seed`), not
torch's, chunk by chunk: the tensor keeps its shape, dtype, chunks and device, and nothing is computed
until the next submission (the write is a pending update, like an optimizer step).

>>> nn.init.kaiming_uniform_(layer.weight, a=math.sqrt(5))
Parameter containing:
tensor(dask.array<shape=(8, 4), dtype=float32, ...>, requires_grad=True)
>>> _ = nn.init.zeros_(layer.bias)   # (returns the tensor, as torch's)
"""
from __future__ import annotations

import math
import warnings

import dask.array as da
import numpy as np

from .. import _tensor
from .._modes import no_grad
from .._tensor import rand, randn

__all__ = ["calculate_gain", "uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_",
           "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_"]


def _check_generator(generator):
    if generator is not None:
        raise TypeError("generator= is not supported: daskgrad draws from its own generator; seed it with "
                        "daskgrad.manual_seed")


def _like(tensor, make):
    """``make(shape, dtype, chunks, device)`` written into ``tensor`` in place, gradient-free."""
    with no_grad():
        return tensor.copy_(make(tensor.shape, tensor.dtype, tensor.chunks, tensor.device))


def _uniform(tensor, a, b):
    return _like(tensor, lambda shape, dtype, chunks, device:
                 rand(*shape, dtype=dtype, chunks=chunks, device=device) * (b - a) + a)


def _normal(tensor, mean, std):
    return _like(tensor, lambda shape, dtype, chunks, device:
                 randn(*shape, dtype=dtype, chunks=chunks, device=device) * std + mean)


def calculate_gain(nonlinearity, param=None):
    """torch's recommended gain for a nonlinearity (``leaky_relu`` takes its negative slope as ``param``)."""
    linear_fns = ["linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"]
    if nonlinearity in linear_fns or nonlinearity == "sigmoid":
        return 1
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            negative_slope = 0.01
        elif not isinstance(param, bool) and isinstance(param, int) or isinstance(param, float):
            negative_slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + negative_slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def uniform_(tensor, a=0.0, b=1.0, generator=None):
    """U(a, b)."""
    _check_generator(generator)
    return _uniform(tensor, a, b)


def normal_(tensor, mean=0.0, std=1.0, generator=None):
    """N(mean, std**2)."""
    _check_generator(generator)
    return _normal(tensor, mean, std)


def constant_(tensor, val):
    """Fill ``tensor`` with ``val`` in place, unrecorded (torch's ``nn.init.constant_``)."""
    with no_grad():
        return tensor.fill_(val)


def ones_(tensor):
    """Fill ``tensor`` with ones in place, unrecorded (torch's ``nn.init.ones_``)."""
    return constant_(tensor, 1.0)


def zeros_(tensor):
    """Fill ``tensor`` with zeros in place, unrecorded (torch's ``nn.init.zeros_``)."""
    with no_grad():
        return tensor.zero_()


def _norm_cdf(x):
    return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0


def _trunc_normal_block(block, seed, mean, std, a, b, block_id=None):
    """Chunk kernel: N(mean, std) truncated to [a, b], by rejection as torch 2.13 samples it (redraw the
    normals outside [a, b] when the interval holds over 30 % of the mass, else uniform proposals accepted
    with the normal's density), from a generator seeded by the draw seed and the block id."""
    rng = np.random.default_rng([seed, *block_id])
    shape = np.shape(block)
    if _norm_cdf((b - mean) / std) - _norm_cdf((a - mean) / std) > 0.3:
        out = rng.normal(mean, std, shape)
        bad = (out < a) | (out > b)
        while bad.any():
            out[bad] = rng.normal(mean, std, int(bad.sum()))
            bad = (out < a) | (out > b)
    else:
        log_peak = -0.5 * ((max(a, min(mean, b)) - mean) / std) ** 2
        out, pending = np.empty(shape), np.ones(shape, dtype=bool)
        while pending.any():
            cand = rng.uniform(a, b, int(pending.sum()))
            accept = np.log(rng.uniform(size=cand.shape)) <= -0.5 * ((cand - mean) / std) ** 2 - log_peak
            idx = np.flatnonzero(pending)[accept]
            out.flat[idx] = cand[accept]
            pending.flat[idx] = False
    return out.astype(block.dtype)


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
    """N(mean, std**2) truncated to [a, b] (exactly: rejection, never clamping), as torch's."""
    _check_generator(generator)
    if mean < a - 2 * std or mean > b + 2 * std:
        warnings.warn("mean is more than 2 std from [a, b] in nn.init.trunc_normal_. The distribution of values "
                      "may be incorrect.", stacklevel=2)
    seed = int(_tensor._rng.integers(2**63))

    def make(shape, dtype, chunks, device):
        host = da.zeros(shape, dtype=dtype, chunks=chunks)
        arr = da.map_blocks(_trunc_normal_block, host, seed=seed, mean=mean, std=std, a=a, b=b, dtype=dtype)
        t = _tensor.Tensor._make(arr)
        return t if device == "cpu" else t.to(device)
    return _like(tensor, make)


def _calculate_fan_in_and_fan_out(tensor):
    if tensor.ndim < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 dimensions")
    receptive_field_size = math.prod(tensor.shape[2:])
    return tensor.shape[1] * receptive_field_size, tensor.shape[0] * receptive_field_size


def _calculate_correct_fan(tensor, mode):
    mode = mode.lower()
    valid_modes = ["fan_in", "fan_out"]
    if mode not in valid_modes:
        raise ValueError(f"Mode {mode} not supported, please use one of {valid_modes}")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def xavier_uniform_(tensor, gain=1.0, generator=None):
    """U(-a, a) with ``a = gain * sqrt(6 / (fan_in + fan_out))`` (Glorot)."""
    _check_generator(generator)
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    a = math.sqrt(3.0) * gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return _uniform(tensor, -a, a)


def xavier_normal_(tensor, gain=1.0, generator=None):
    """N(0, std**2) with ``std = gain * sqrt(2 / (fan_in + fan_out))`` (Glorot)."""
    _check_generator(generator)
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return _normal(tensor, 0.0, gain * math.sqrt(2.0 / float(fan_in + fan_out)))


def _kaiming_std(tensor, a, mode, nonlinearity):
    return calculate_gain(nonlinearity, a) / math.sqrt(_calculate_correct_fan(tensor, mode))


def kaiming_uniform_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """U(-bound, bound) with ``bound = gain * sqrt(3 / fan)`` (He)."""
    _check_generator(generator)
    if 0 in tensor.shape:
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=2)
        return tensor
    bound = math.sqrt(3.0) * _kaiming_std(tensor, a, mode, nonlinearity)
    return _uniform(tensor, -bound, bound)


def kaiming_normal_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """N(0, std**2) with ``std = gain / sqrt(fan)`` (He)."""
    _check_generator(generator)
    if 0 in tensor.shape:
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=2)
        return tensor
    return _normal(tensor, 0.0, _kaiming_std(tensor, a, mode, nonlinearity))
