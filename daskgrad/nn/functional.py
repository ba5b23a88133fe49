"""torch.nn.functional's layer functions, as compositions of daskgrad ops.

>>> y = F.gelu(F.linear(x, w, b))
"""
from __future__ import annotations

import math

from ..ops import (binary_cross_entropy_with_logits, cross_entropy, log_softmax, mean, mse_loss,  # noqa: F401
                   nll_loss, relu, sigmoid, softmax, sqrt, tanh)
from ..ops.layers import dropout_mask, embedding as _embedding, erf


def linear(input, weight, bias=None):
    """``input @ weight.T + bias``, weight shaped (out_features, in_features) as in torch."""
    out = input @ weight.T
    return out if bias is None else out + bias


def gelu(input, approximate="none"):
    """``x * Phi(x)``, or torch's tanh approximation with ``approximate="tanh"``."""
    if approximate == "none":
        return input * 0.5 * (1 + erf(input * (1 / math.sqrt(2))))
    if approximate == "tanh":
        inner = math.sqrt(2 / math.pi) * (input + 0.044715 * input * input * input)
        return 0.5 * input * (1 + tanh(inner))
    raise RuntimeError("approximate argument must be either none or tanh.")


def dropout(input, p=0.5, training=True):
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)``; identity unless training."""
    if p < 0 or p > 1:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0:
        return input
    if p == 1:
        return input * 0.0
    return input * dropout_mask(input, p)


def embedding(input, weight):
    """Rows of ``weight`` picked by the integer tensor ``input``."""
    return _embedding(input, weight)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Normalise over the trailing ``normalized_shape`` axes (biased variance, as torch)."""
    normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if tuple(input.shape[input.ndim - len(normalized_shape):]) != normalized_shape:
        raise RuntimeError(f"Given normalized_shape={list(normalized_shape)}, expected input with shape "
                           f"[*, {', '.join(map(str, normalized_shape))}], but got input of size{list(input.shape)}")
    axes = tuple(range(input.ndim - len(normalized_shape), input.ndim))
    centred = input - mean(input, axis=axes, keepdims=True)
    var = mean(centred * centred, axis=axes, keepdims=True)
    out = centred * (1 / sqrt(var + eps))
    if weight is not None:
        out = out * weight
    return out if bias is None else out + bias
