"""torch.nn.functional's layer functions, as compositions of daskgrad ops.

>>> y = F.gelu(F.linear(x, w, b))
"""
from __future__ import annotations

import math
import warnings

import dask.array as da
import numpy as np

from .. import _data, ops
from ..graph import guard, named, primitive, size_repr, type_repr
from .._modes import no_grad
from .._tensor import Tensor, rand as _rand, zeros as _zeros
from ..function import Function
from ..ops import mean, mse_loss, sigmoid, sqrt, tanh  # noqa: F401
from ..ops._util import TORCH_TYPE_NAMES, norm_axis, refuse_dtype_kinds
from ..ops.layers import (dropout_mask, embedding as _embedding, erf, gelu_p as _gelu_p, gelu_tanh_p as _gelu_tanh_p,
                          silu_p as _silu_p)
from ..ops.linalg import vector_norm as _vector_norm
from ..ops.products import _CPP_NAMES
from ..ops.nn import bce_p as _bce_p, bind_loss as _bind_loss, soft_margin_p as _soft_margin_p
from ..ops.nn import zeros_if_nonnegative as _zeros_if_nonnegative
from ..ops.nn import rows_checked as _rows_checked, same_shape as _same_shape, unknown_rows as _unknown_rows
from ._attention import multi_head_attention_forward, scaled_dot_product_attention  # noqa: F401
from ._ctc import ctc_loss  # noqa: F401
from ._conv import (adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_avg_pool3d, avg_pool1d,  # noqa: F401
                    avg_pool2d, avg_pool3d, conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d,
                    conv_transpose3d, fold, max_pool1d, max_pool1d_with_indices, max_pool2d, max_pool2d_with_indices,
                    max_pool3d, max_pool3d_with_indices, unfold)
from ._pool import (adaptive_max_pool1d, adaptive_max_pool1d_with_indices, adaptive_max_pool2d,  # noqa: F401
                    fractional_max_pool2d, fractional_max_pool2d_with_indices, fractional_max_pool3d,
                    fractional_max_pool3d_with_indices,
                    adaptive_max_pool2d_with_indices, adaptive_max_pool3d, adaptive_max_pool3d_with_indices,
                    channel_shuffle, lp_pool1d, lp_pool2d, lp_pool3d, max_unpool1d, max_unpool2d, max_unpool3d)
from ._norm import batch_norm, group_norm, instance_norm, rms_norm, _trailing_axes  # noqa: F401
from ._spatial import (interpolate, local_response_norm, pad, pixel_shuffle, pixel_unshuffle, upsample,  # noqa: F401
                       upsample_bilinear, upsample_nearest)


def linear(input, weight, bias=None):
    """``input @ weight.T + bias``, weight shaped (out_features, in_features) as in torch (whose
    errors for operands of two dtypes it gives)."""
    if bias is not None:
        name = TORCH_TYPE_NAMES.get
        if input.dtype != weight.dtype:
            raise RuntimeError(f"mat1 and mat2 must have the same dtype, but got {name(input.dtype.name)} and "
                               f"{name(weight.dtype.name)}")
        if getattr(bias, "dtype", weight.dtype) != weight.dtype:
            raise RuntimeError(f"self and mat2 must have the same dtype, but got {name(bias.dtype.name)} and "
                               f"{name(weight.dtype.name)}")
    out = input @ weight.T
    return out if bias is None else out + bias


@named("GeluBackward0")
def gelu(input, approximate="none"):
    """``x * Phi(x)``, or torch's tanh approximation with ``approximate="tanh"``."""
    own = isinstance(input, Tensor) and input.dtype in (np.float32, np.float64)  # (torch's backward: ops.layers)
    if approximate == "none":
        if own:
            return _gelu_p.bind(input)
        return guard(input * 0.5 * (1 + erf(input * (1 / math.sqrt(2)))), input)
    if approximate == "tanh":
        if own:
            return _gelu_tanh_p.bind(input)
        inner = math.sqrt(2 / math.pi) * (input + 0.044715 * input * input * input)
        return guard(0.5 * input * (1 + tanh(inner)), input)
    raise RuntimeError("approximate argument must be either none or tanh.")


def dropout(input, p=0.5, training=True, inplace=False):
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)``; identity unless training.
    ``inplace=True`` writes ``input`` (torch's in-place rules: a leaf requiring grad refuses, the version
    counter moves) and returns it."""
    if p < 0 or p > 1:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0:
        return input
    scale = 0.0 if p == 1 else dropout_mask(input, p)
    return input.mul_(scale) if inplace else input * scale


def _check_p(p):
    if p < 0 or p > 1:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")


_ALPHA = 1.7580993408473766  # SELU's scale * alpha: a dropped element goes to -_ALPHA (before the affine map)


def _dropout_impl(input, p, training, inplace, feature, alpha, batched=True):
    """ATen's ``_dropout_impl``: the input itself unless training with ``0 < p``; ``p = 1`` zeros it (NaN stays
    NaN); otherwise a Bernoulli(1 - p) ``noise``, one per element or (``feature``) one per (sample, channel),
    scaled by ``1 / (1 - p)``, or for ``alpha``: ``input * noise * a + b`` that keeps SELU's mean 0 and variance 1.
    ``batched=False``: ``input`` is the one sample of a feature dropout (its first axis the channels)."""
    if p == 0 or not training or 0 in input.shape:
        return input
    if p == 1:
        return input.mul_(0.0) if inplace else input * 0.0
    if feature:
        if input.ndim < 2 - (not batched):
            raise RuntimeError("Feature dropout requires at least 2 dimensions in the input")
        k = 2 if batched else 1
        if any(n != n for n in input.shape[:k]):  # (rows after a boolean mask: a draw per block of them, as they are)
            base = ops.zeros_like(input[(slice(None),) * k + (slice(0, 1),) * (input.ndim - k)].detach())
        else:
            base = _zeros(*input.shape[:k], *(1,) * (input.ndim - k), dtype=input.dtype,
                          chunks=input.chunks[:k] + ((1,),) * (input.ndim - k), device=input.device)
    else:
        base = input
    if not alpha:
        noise = dropout_mask(base, p)
        return input.mul_(noise) if inplace else input * noise
    a = 1.0 / math.sqrt((_ALPHA * _ALPHA * p + 1) * (1 - p))
    noise = dropout_mask(base, p, scale=1.0)
    b = (noise - 1) * (_ALPHA * a) + _ALPHA * a * p
    noise = noise * a
    return input.mul_(noise).add_(b) if inplace else input * noise + b


def dropout1d(input, p=0.5, training=True, inplace=False):
    """Channel-wise dropout of ``(N, C, L)`` or unbatched ``(C, L)`` input: each channel of each sample zeroed
    with probability ``p`` (the rest scaled by ``1 / (1 - p)``); identity unless training."""
    _check_p(p)
    if input.ndim not in (2, 3):
        raise RuntimeError(f"dropout1d: Expected 2D or 3D input, but received a {input.ndim}D input. Note that "
                           "dropout1d exists to provide channel-wise dropout on inputs with 1 spatial dimension, a "
                           "channel dimension, and an optional batch dimension (i.e. 2D or 3D inputs).")
    return _unbatched_feature_dropout(input, p, training, inplace, input.ndim == 3)


def _unbatched_feature_dropout(input, p, training, inplace, batched):
    """torch's feature dropout of a sample with no batch axis: on ``input.unsqueeze(0)``, squeezed back (in
    place: ``input`` itself, whose channels are its first axis)."""
    if batched:
        return _dropout_impl(input, p, training, inplace, feature=True, alpha=False)
    if inplace:
        return _dropout_impl(input, p, training, True, feature=True, alpha=False, batched=False)
    return _dropout_impl(input.unsqueeze(0), p, training, False, feature=True, alpha=False).squeeze(0)


def _nd_dropout_warning(name, n, ndim):
    warnings.warn(f"{name}: Received a {ndim}-D input to {name}, which is deprecated and will result in an error in "
                  f"a future release. To retain the behavior and silence this warning, please use dropout instead. "
                  f"Note that {name} exists to provide channel-wise dropout on inputs with {n} spatial dimensions, a "
                  f"channel dimension, and an optional batch dimension (i.e. {n + 1}D or {n + 2}D inputs).",
                  stacklevel=3)


def dropout2d(input, p=0.5, training=True, inplace=False):
    """Channel-wise dropout of ``(N, C, H, W)`` input: each channel of each sample zeroed with probability ``p``
    (the rest scaled by ``1 / (1 - p)``); identity unless training.  As torch's, a 3-D input is taken as
    ``(N, C, L)`` (with its warning), and another number of axes warns that it is deprecated."""
    _check_p(p)
    if input.ndim not in (3, 4):
        _nd_dropout_warning("dropout2d", 2, input.ndim)
    if input.ndim == 3:
        warnings.warn("dropout2d: Received a 3D input to dropout2d and assuming that channel-wise 1D dropout behavior "
                      "is desired - input is interpreted as shape (N, C, L), where C is the channel dim. This behavior "
                      "will change in a future release to interpret the input as one without a batch dimension, i.e. "
                      "shape (C, H, W). To maintain the 1D channel-wise dropout behavior, please switch to using "
                      "dropout1d instead.", stacklevel=2)
    return _dropout_impl(input, p, training, inplace, feature=True, alpha=False)


def dropout3d(input, p=0.5, training=True, inplace=False):
    """Channel-wise dropout of ``(N, C, D, H, W)`` or unbatched ``(C, D, H, W)`` input: each channel of each sample
    zeroed with probability ``p`` (the rest scaled by ``1 / (1 - p)``); identity unless training.  Another number
    of axes warns that it is deprecated, as torch's (the input taken as unbatched unless it has 5)."""
    _check_p(p)
    if input.ndim not in (4, 5):
        _nd_dropout_warning("dropout3d", 3, input.ndim)
    return _unbatched_feature_dropout(input, p, training, inplace, input.ndim == 5)


def alpha_dropout(input, p=0.5, training=False, inplace=False):
    """Dropout for SELU networks: each element dropped with probability ``p`` to SELU's negative saturation
    value, then an affine map that keeps the mean 0 and the variance 1 (torch's ``a``, ``b``); identity unless
    training (off by default, as torch's)."""
    _check_p(p)
    return _dropout_impl(input, p, training, inplace, feature=False, alpha=True)


def feature_alpha_dropout(input, p=0.5, training=False, inplace=False):
    """:func:`alpha_dropout` of whole channels: one draw per (sample, channel) of ``(N, C, ...)`` input."""
    _check_p(p)
    return _dropout_impl(input, p, training, inplace, feature=True, alpha=True)


def relu(input, inplace=False):
    """``max(x, 0)``; ``inplace=True`` is ``input.relu_()``, with torch's in-place rules."""
    return input.relu_() if inplace else ops.relu(input)


def one_hot(tensor, num_classes=-1):
    """torch's ``one_hot``: int64 ``(*tensor.shape, num_classes)``.  ``num_classes=-1`` takes
    ``max + 1``, which computes the tensor's maximum (one submission, as torch reads it); with
    ``num_classes`` given nothing is computed and the class values are checked in the tasks that read them."""
    tensor = _tensor_of(tensor)
    if tensor.dtype != np.int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    if num_classes == -1:
        if 0 in tensor.shape:
            raise RuntimeError("Can not infer total number of classes from empty tensor.")
        num_classes = int(ops.amax(tensor).item()) + 1
    a = tensor.array
    return Tensor._make(da.map_blocks(_one_hot_block, a, classes=num_classes, new_axis=a.ndim,
                                      chunks=a.chunks + ((num_classes,),), dtype=np.int64,
                                      meta=da.utils.meta_from_array(a._meta, ndim=a.ndim + 1)))


def _one_hot_block(block, classes):
    if (block < 0).any():
        raise RuntimeError("Class values must be non-negative.")
    if (block >= classes).any():
        raise RuntimeError("Class values must be smaller than num_classes.")
    return (block[..., None] == np.arange(classes, like=block)).astype(np.int64)


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
              sparse=False):
    """Rows of ``weight`` picked by the integer tensor ``input``; the ``padding_idx`` row gets no gradient."""
    _refuse_embedding_options(max_norm, scale_grad_by_freq, sparse)
    padding_idx = _padding_index(padding_idx, weight.shape[0])
    out = _embedding(input, weight)
    if padding_idx is None:
        return out
    at_pad = ops.unsqueeze(ops.eq(_tensor_of(input), padding_idx), -1)
    return ops.where(at_pad, out.detach(), out)  # same values; the padding positions pass no gradient back


def _tensor_of(x):
    return x if isinstance(x, Tensor) else Tensor._make(da.from_array(np.asarray(x), chunks=-1))


def _padding_index(padding_idx, rows):
    """torch's check and normalisation of ``padding_idx`` (a negative one counts from the end)."""
    if padding_idx is None:
        return None
    if padding_idx > 0:
        assert padding_idx < rows, "Padding_idx must be within num_embeddings"
    elif padding_idx < 0:
        assert padding_idx >= -rows, "Padding_idx must be within num_embeddings"
        padding_idx = rows + padding_idx
    return padding_idx


def _refuse_embedding_options(max_norm, scale_grad_by_freq, sparse):
    """Options that would change torch's numbers or gradient layout: refused, not ignored."""
    for name, value, default in (("max_norm", max_norm, None), ("scale_grad_by_freq", scale_grad_by_freq, False),
                                 ("sparse", sparse, False)):
        if value != default and value is not default:
            raise NotImplementedError(f"embedding: {name}={value!r} is not supported (daskgrad gradients are dense "
                                      f"and weights are not renormalised in the forward); leave {name}={default}")


@named("NativeLayerNormBackward0")
def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Normalise over the trailing ``normalized_shape`` axes (biased variance, as torch)."""
    axes = _trailing_axes(input, normalized_shape, "*, ")
    centred = input - mean(input, axis=axes, keepdims=True)
    var = mean(centred * centred, axis=axes, keepdims=True)
    out = centred * (1 / sqrt(var + eps))
    if weight is not None:
        out = out * weight
    return guard(out if bias is None else out + bias, input, weight, bias)


# ------------------------------------------------------------------ activations
def _softmax_dim(name, ndim, dim, stacklevel):
    if dim is not None:
        return dim
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the call to include dim=X as "
                  "an argument.", stacklevel=stacklevel)
    return 0 if ndim in (0, 1, 3) else 1


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    """``exp(x) / sum(exp(x))`` along ``dim`` (torch's implicit choice, with its warning, when None)."""
    dim = _softmax_dim("softmax", input.ndim, dim, _stacklevel)
    return ops.softmax(input if dtype is None else ops.astype(input, dtype), axis=dim)


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    """``x - logsumexp(x)`` along ``dim`` (torch's implicit choice, with its warning, when None)."""
    dim = _softmax_dim("log_softmax", input.ndim, dim, _stacklevel)
    return ops.log_softmax(input if dtype is None else ops.astype(input, dtype), axis=dim)


def _refuse_inplace(name, inplace):
    if inplace:
        raise NotImplementedError(f"{name}: inplace=True is not supported (daskgrad writes no input in place); "
                                  "inplace=False gives the same numbers")


@named("SiluBackward0")
def silu(input, inplace=False):
    """``x * sigmoid(x)``."""
    _refuse_inplace("silu", inplace)
    if isinstance(input, Tensor) and input.dtype in (np.float32, np.float64):  # (torch's backward: ops.layers)
        return _silu_p.bind(input)
    return input * sigmoid(input)


@named(lambda input, negative_slope=0.01, inplace=False: f"LeakyReluBackward{int(bool(inplace))}")
def leaky_relu(input, negative_slope=0.01, inplace=False):
    """``x`` where ``x > 0``, else ``negative_slope * x`` (the slope's side at 0, as torch's gradient).
    ``inplace``: written into ``input``, whose backward then refuses a negative slope, as torch's."""
    out = ops.where(ops.gt(input, 0), input, input * negative_slope)
    if inplace:
        return input.copy_(_negative_inplace(out, negative_slope < 0, _LEAKY_NEGATIVE))
    return guard(out, input)


def _maybe_inplace(input, out, inplace):
    """``out``, or (``inplace``) ``input`` with ``out`` written into it, with torch's in-place rules
    (a leaf that requires grad refuses).  Out of place, ``out`` guards ``input`` as torch's op saves it
    (:func:`daskgrad.graph.guard`); in place, torch saves the result, which nothing can write before."""
    return input.copy_(out) if inplace else guard(out, input)


@named(lambda input, alpha=1.0, inplace=False: f"EluBackward{int(bool(inplace))}")
def elu(input, alpha=1.0, inplace=False):
    """``x`` where ``x > 0``, else ``alpha * (exp(x) - 1)`` (torch's gradient: ``alpha * exp(x)`` at 0).
    The unchosen side is computed at 0 where ``x > 0``: its gradient (``exp(1000)``) would be ``inf *
    0 = nan`` through ``where``.  ``inplace``: :func:`elu_`."""
    if inplace:
        return elu_(input, alpha)
    refuse_dtype_kinds("elu", "biu", input)
    return _maybe_inplace(input, _elu(input, alpha, 1.0), False)


@named(lambda input, alpha=1.0, inplace=False: f"CeluBackward{int(bool(inplace))}")
def celu(input, alpha=1.0, inplace=False):
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``; ``inplace``: :func:`celu_`."""
    if alpha == 0:
        raise RuntimeError("ZeroDivisionError: alpha cannot be 0 for CELU")  # (torch's words)
    if inplace:
        return celu_(input, alpha)
    refuse_dtype_kinds("elu", "biu", input)
    return _maybe_inplace(input, _elu(input, alpha, 1.0 / alpha), False)


def _elu(x, alpha, input_scale):
    """The values through ``expm1`` (exact near 0), the gradient through ``exp`` as torch's kernel (``expm1``'s
    rule, ``result + 1``, loses the digits of ``exp(x)`` below -10): ``e - e.detach()`` is 0 with ``exp``'s
    derivatives."""
    positive = ops.logical_not(ops.le(x, 0))  # (torch's test: NaN on the ``x`` side, its gradient passed on)
    scaled = ops.where(positive, 0.0, x) * input_scale
    e = ops.exp(scaled)
    return ops.where(positive, x, alpha * (ops.expm1(scaled.detach()) + (e - e.detach())))


@named("HardtanhBackward0")
def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    """``x`` clamped to ``[min_val, max_val]``, with torch's gradient: 1 strictly inside (and at NaN), 0
    elsewhere (``clamp``'s is 1 at the bounds too)."""
    if min_val > max_val:
        raise ValueError("min_val cannot be greater than max_val")
    if input.dtype == np.bool_:
        raise RuntimeError("Bool inputs not supported for hardtanh")
    low = ops.le(input, min_val)  # (torch's tests: NaN is inside, its gradient passed on)
    outside = ops.logical_or(low, ops.ge(input, max_val))
    bound = ops.where(low, min_val, max_val).to(input.dtype)
    return _maybe_inplace(input, ops.where(outside, bound, input), inplace)


def relu6(input, inplace=False):
    """``hardtanh(x, 0, 6)``."""
    return hardtanh(input, 0.0, 6.0, inplace)


@named(lambda input, threshold, value, inplace=False: f"ThresholdBackward{int(bool(inplace))}")
def threshold(input, threshold, value, inplace=False):
    """``value`` where ``x <= threshold``, else ``x`` (NaN stays NaN, as torch's)."""
    refuse_dtype_kinds("threshold", "b", input)
    return _maybe_inplace(input, ops.where(ops.le(input, threshold), value, input).to(input.dtype), inplace)

_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


@named(lambda input, inplace=False: f"EluBackward{int(bool(inplace))}")
def selu(input, inplace=False):
    """``scale * elu(x, alpha)`` with torch's constants (its gradient at 0: the negative side's)."""
    refuse_dtype_kinds("elu", "biu", input)
    return _maybe_inplace(input, _SELU_SCALE * _elu(input, _SELU_ALPHA, 1.0), inplace)


@named("SoftplusBackward0")
def softplus(input, beta=1.0, threshold=20.0):
    """``log(1 + exp(beta * x)) / beta``, and ``x`` itself where ``beta * x > threshold`` (gradient 1 there,
    as torch's; at the threshold the formula's).  The unchosen side is computed at 0."""
    refuse_dtype_kinds("softplus", "biu", input)
    scaled = input if beta == 1 else input * beta
    linear = ops.gt(scaled, threshold)
    soft = ops.softplus(ops.where(linear, 0.0, scaled))
    return guard(ops.where(linear, input, soft if beta == 1 else soft / beta), input)  # (torch's saves input)


@named("MishBackward0")
def mish(input, inplace=False):
    """``x * tanh(softplus(x))`` (``inplace``: of a copy, as the product saves its operands for the gradient)."""
    refuse_dtype_kinds("mish", "biu", input)
    x = ops.clone(input) if inplace else input
    return _maybe_inplace(input, x * tanh(ops.softplus(x)), inplace)


@named("HardswishBackward0")
def hardswish(input, inplace=False):
    """``x * relu6(x + 3) / 6``, with torch's gradient: ``x / 3 + 1 / 2`` strictly inside (-3, 3), 0 at and
    below -3, 1 at and above 3 (and at NaN).  The quadratic is computed at 0 outside, where its gradient
    (``inf`` at an infinity) would be ``inf * 0 = nan`` through ``where``."""
    refuse_dtype_kinds("hardswish", "biu", input)
    inside = ops.logical_and(ops.gt(input, -3), ops.lt(input, 3))
    x = ops.where(inside, input, 0.0)
    outside = ops.where(ops.le(input, -3), input * 0, input)  # (-0.0 below, NaN at -inf: torch's ``x * 0``)
    return _maybe_inplace(input, ops.where(inside, x * (x + 3) / 6, outside), inplace)


_ONE_SIXTH_F32 = float(np.float32(1 / 6))  # torch's hardsigmoid gradient: its kernel's ``1.0f / 6.0f``, any dtype


@named("HardsigmoidBackward0")
def hardsigmoid(input, inplace=False):
    """``relu6(x + 3) / 6``, with torch's gradient: its float32 ``1/6`` (0.16666667163..., in float64 too)
    strictly inside (-3, 3), else 0 (also at NaN).  The values are ``clip(x + 3, 0, 6) / 6`` of the detached
    input; ``c * (x - x.detach())``, 0, carries the gradient."""
    refuse_dtype_kinds("hardsigmoid", "biu", input)
    inside = ops.logical_and(ops.gt(input, -3), ops.lt(input, 3))
    detached = input.detach()
    value = ops.clip(detached + 3, 0, 6) / 6
    return _maybe_inplace(input, ops.where(inside, value + _ONE_SIXTH_F32 * (input - detached), value), inplace)


@named("LogSigmoidBackward0")
def logsigmoid(input):
    """``log(sigmoid(x)) = -softplus(-x)``, stably."""
    refuse_dtype_kinds("log_sigmoid", "biu", input)
    return guard(-ops.softplus(-input), input)


def softsign(input):
    """``x / (1 + |x|)`` (torch's composition, so its gradient)."""
    return input / (ops.abs(input) + 1)


def tanhshrink(input):
    """``x - tanh(x)``."""
    return input - tanh(input)


def _shrink_inside(input, kernel, lambd):
    if input.dtype.kind in "biu":
        raise NotImplementedError(f'"{kernel}" not implemented for \'{TORCH_TYPE_NAMES.get(input.dtype.name)}\'')
    return ops.logical_and(ops.ge(input, -lambd), ops.le(input, lambd))


@named("SoftshrinkBackward0")
def softshrink(input, lambd=0.5):
    """``x - lambd`` above ``lambd``, ``x + lambd`` below ``-lambd``, else 0 (gradient 0 on ``[-lambd, lambd]``,
    as torch's; ``lambd`` in ``[0, the dtype's max]``, torch's check and text)."""
    inside = _shrink_inside(input, "softshrink_check", lambd)
    limit = float(np.finfo(input.dtype).max)
    if not 0 <= lambd <= limit:
        raise RuntimeError(f"lambda must be in range [0, {limit:g}] for input dtype "
                           f"{TORCH_TYPE_NAMES.get(input.dtype.name)}, but found {lambd:g}")
    return guard(ops.where(inside, 0.0, ops.where(ops.gt(input, lambd), input - lambd, input + lambd)), input)


@named("HardshrinkBackward0")
def hardshrink(input, lambd=0.5):
    """``x`` outside ``[-lambd, lambd]``, else 0 (gradient 0 on the closed interval, as torch's)."""
    return guard(ops.where(_shrink_inside(input, "hardshrink_cpu", lambd), 0.0, input), input)


def glu(input, dim=-1):
    """``a * sigmoid(b)``, ``a`` and ``b`` the halves of ``input`` along ``dim`` (torch's errors for a scalar
    or an odd size)."""
    if input.ndim == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    axis = norm_axis(dim, input.ndim)
    if input.shape[axis] % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension {axis} is size {input.shape[axis]}")
    a, b = ops.split(input, 2, axis=axis)
    return a * sigmoid(b)


def softmin(input, dim=None, _stacklevel=3, dtype=None):
    """``softmax(-x)`` along ``dim`` (torch's implicit choice, with its warning, when None)."""
    dim = _softmax_dim("softmin", input.ndim, dim, _stacklevel)
    return ops.softmax(-(input if dtype is None else ops.astype(input, dtype)), axis=dim)


def prelu(input, weight):
    """``x`` where ``x > 0``, else ``weight * x``, ``weight`` one number or one per channel (axis 1), with
    torch's checks.  The negative side is computed at 0 where ``x > 0`` (an ``inf`` there would give the
    weight ``inf * 0 = nan``)."""
    n = math.prod(weight.shape)
    if weight.ndim > 1:
        raise RuntimeError(f"prelu: Expected `weight` to be a scalar or 1D tensor, but got: ndim = {weight.ndim}")
    if n != 1:
        if input.ndim == 0:
            raise RuntimeError("Not allow zero-dim input tensor.")
        channels = input.shape[1] if input.ndim >= 2 else 1
        if channels != n:
            raise RuntimeError(f"Mismatch of parameter numbers and input channel size. Found parameter numbers = {n} "
                               f"and channel size = {channels}.")
    if input.dtype != weight.dtype:
        name = TORCH_TYPE_NAMES.get
        raise RuntimeError(f"prelu: Type promoting not supported. Got {name(input.dtype.name)} and "
                           f"{name(weight.dtype.name)}")
    w = ops.reshape(weight, (n,) + (1,) * (input.ndim - 2) if n != 1 else ())
    positive = ops.gt(input, 0)
    return guard(ops.where(positive, input, w * ops.where(positive, 0.0, input)), input, weight)


def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    """``input / max(||input||_p, eps)`` along ``dim`` (torch's ``F.normalize``)."""
    if out is not None:
        raise NotImplementedError("normalize: out= is not supported (daskgrad writes no output in place)")
    if input.dtype.kind not in "fc":
        raise RuntimeError(f"linalg.vector_norm: Expected a floating point or complex tensor as input. Got "
                           f"{TORCH_TYPE_NAMES.get(str(input.dtype), input.dtype)}")
    denom = input.norm(p, dim, keepdim=True).clamp_min(eps)
    if any(n != n for n in input.shape):  # (rows after a boolean mask: the division broadcasts block by block, where
        return input / denom  # expand_as would need the rows' count)
    return input / denom.expand_as(input)


# ---------------------------------------------------------------------- losses
def legacy_reduction(size_average, reduce, reduction):
    """torch's ``_Reduction.legacy_get_string``: the deprecated ``size_average``/``reduce`` pair, when given,
    decides the reduction (with torch's warning)."""
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    ret = "mean" if size_average and reduce else "sum" if reduce else "none"
    warnings.warn(f"size_average and reduce args will be deprecated, please use reduction='{ret}' instead.",
                  stacklevel=3)
    return ret


def _check_reduction(reduction):
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{reduction} is not a valid value for reduction")


def _check_weight(weight, classes):
    if weight is None:
        return None
    weight = _tensor_of(weight)
    if weight.ndim != 1 or weight.shape[0] != classes:
        raise RuntimeError(f"weight tensor should be defined either for all {classes} classes or no classes but got "
                           f"weight tensor of shape: {list(weight.shape)}")
    return weight


def _row_weights(safe, keep, weight, dtype):
    """Per-row weights of class-index targets: ``weight[target]`` (1 without weights), 0 where ignored."""
    keep = ops.astype(keep, dtype)
    if weight is None:
        return keep
    picked = _embedding(safe, ops.reshape(ops.astype(weight, dtype), (weight.shape[0], 1)))
    return ops.reshape(picked, (safe.shape[0],)) * keep


def _as_rows(loss, input, target, reduction, *args):
    """torch's shapes for the class losses, as rows of classes: a ``(C,)`` input (no batch) is one row, a
    ``(N, C, d1, ..., dk)`` one has its class axis moved last and the rest flattened into rows (its
    class-index targets ``(N, d1, ..., dk)``, flattened alike), then ``loss(rows, targets, ...)``'s
    per-row result (``reduction='none'``) is shaped back to ``(N, d1, ..., dk)``."""
    if 1 < input.ndim <= 2 or input.ndim == 0:
        return loss(input, target, *args, reduction)
    probabilities = _same_shape(target.shape, input.shape) and target.dtype.kind not in "iu"
    if input.ndim == 1:
        out_shape = ()
        if not probabilities and target.ndim == 1 and target.shape[0] != 1:
            raise ValueError(f"For 1D input, 1D target must have size 1, but got target size: {target.shape[0]}")
    else:
        out_shape = (input.shape[0],) + tuple(input.shape[2:])
        if not probabilities and not _same_shape(tuple(target.shape), out_shape):
            raise RuntimeError(f"Expected target size {list(out_shape)}, got {list(target.shape)}")

    def rows(t):  # (N, C, d1, ..., dk) -> (N d1 ... dk, C); (C,) -> (1, C)
        return ops.reshape(ops.moveaxis(t, 1, -1) if t.ndim > 2 else t, (-1, input.shape[1 if input.ndim > 1 else 0]))

    target = rows(target) if probabilities else ops.reshape(target, (-1,))
    out = loss(rows(input), target, *args, reduction)
    return ops.reshape(out, out_shape) if reduction == "none" else out


def _class_index_loss(input, target, weight, ignore_index, reduction, label_smoothing):
    """torch's cross entropy of logits (N, C) against class indices: rows whose target is ``ignore_index`` count
    nowhere (nor in the mean's denominator), ``weight`` weighs each row by its class, and ``label_smoothing``
    mixes in the uniform distribution's loss, normalised as torch's."""
    safe, keep = _kept_rows(input, target, ignore_index)
    _same_weight_dtype(input, weight)
    nll = ops.cross_entropy(input, safe, reduction="none")  # checks dtype, rank, batch, bounds (as torch)
    w_row = _row_weights(safe, keep, weight, input.dtype)
    loss = nll * w_row
    if label_smoothing > 0:
        lsm = ops.log_softmax(input, axis=1)
        smooth = -ops.sum(lsm if weight is None else lsm * ops.astype(weight, input.dtype), axis=1)
        smooth = smooth * ops.astype(keep, input.dtype)
        classes = input.shape[1]
        loss = (1 - label_smoothing) * loss + (label_smoothing / classes) * smooth
    return _reduce_rows(loss, w_row, reduction)


def _class_probability_loss(input, target, weight, reduction, label_smoothing):
    """torch's cross entropy against class probabilities (N, C): smoothing mixes the targets with uniform,
    ``weight`` scales each class's term, and the mean divides by N whatever the weights."""
    if target.dtype.kind not in "fc":
        raise RuntimeError("Expected floating point type for target with class probabilities, got "
                           f"{type_repr(target.dtype)[len('daskgrad.'):-len('Tensor')]}")
    classes = input.shape[1]
    if label_smoothing > 0:
        target = target * (1 - label_smoothing) + label_smoothing / classes
    unknown = _unknown_rows(input, target)
    if unknown:  # (rows after a boolean mask: their counts checked where computed, the mean's counted there)
        target = _rows_checked(input, target)
    terms = ops.log_softmax(input, axis=1) * target
    if weight is not None:
        terms = terms * ops.astype(weight, input.dtype)
    if reduction == "none" or (unknown and reduction == "mean"):
        rows = -ops.sum(terms, axis=1)
        return rows if reduction == "none" else ops.mean(rows)
    total = -ops.sum(terms)
    return total if reduction == "sum" else total / (input.numel() // classes)


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean",
                  label_smoothing=0.0):
    """Softmax cross entropy of logits (N, C), (C,) or (N, C, d1, ..., dk) against class indices or class
    probabilities, as torch's."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    _check_reduction(reduction)
    input, target = _tensor_of(input), _tensor_of(target)
    if label_smoothing > 1.0:  # torch takes a negative one as no smoothing
        raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    weight = _check_weight(weight, input.shape[1] if input.ndim > 1 else input.shape[0])
    if _same_shape(target.shape, input.shape) and target.dtype.kind not in "iu":
        if target.dtype.kind in "fc" and ignore_index >= 0:
            raise RuntimeError("ignore_index is not supported for floating point target")
        # (torch's probability path keeps no version of the target: a write to it computes)
        return guard(_as_rows(lambda i, t, r: _class_probability_loss(i, t, weight, r, label_smoothing), input,
                              target, reduction), weight)
    # (torch's nll_loss saves the target and the weight: a write to one before the backward raises; its
    # log_softmax saves its result, so a write to the input does not)
    return guard(_as_rows(lambda i, t, r: _class_index_loss(i, t, weight, ignore_index, r, label_smoothing), input,
                          target, reduction), target, weight)


def linear_cross_entropy(input, linear_weight, target, *, linear_bias=None, weight=None, reduction="mean",
                         ignore_index=None, label_smoothing=0.0, options=None):
    """torch's ``F.linear_cross_entropy``: :func:`cross_entropy` of ``linear(input, linear_weight, linear_bias)``,
    the logits reshaped to ``(*batch, C, d_1, ..., d_K)`` for a ``(C, d_1, ..., d_K, in_features)`` weight.

    daskgrad computes torch's reference path (``options=None``): the logits of a chunk of the batch are made
    and reduced chunk by chunk, which bounds memory as torch's chunked ``options`` do; ``options`` is refused.

    Parameters
    ----------
    input : Tensor
        ``(in_features,)`` or ``(N, in_features)``.
    linear_weight : Tensor
        ``(C, in_features)`` or ``(C, d_1, ..., d_K, in_features)`` (then ``input`` must be batched).
    target : Tensor
        Class indices, ``()``, ``(N,)`` or ``(N, d_1, ..., d_K)``; or class probabilities, of the logits' shape.
    linear_bias : Tensor, optional
        ``(C, d_1, ..., d_K)``.
    weight : Tensor, optional
        Per-class weights, ``(C,)``.
    reduction : str, default "mean"
        ``'none'``, ``'mean'`` or ``'sum'``.
    ignore_index : int, optional
        A class index whose targets are skipped (-100 when None); not with class probabilities.
    label_smoothing : float, default 0.0
        Mixes the targets with the uniform distribution.
    options : nn.LinearCrossEntropyOptions, optional
        torch's chunking options (its memory-saving path, the same loss): not read; daskgrad's logits are made and
        reduced chunk by chunk of the batch anyway.

    Returns
    -------
    Tensor
        The loss.

    Examples
    --------
    >>> w = dg.randn(3, 4, requires_grad=True)
    >>> F.linear_cross_entropy(x, w, y).shape
    ()
    """
    input, linear_weight, target = _tensor_of(input), _tensor_of(linear_weight), _tensor_of(target)
    if input.ndim < 1 or input.ndim > 2:
        raise RuntimeError(f"expected input with dimensionality 1 or 2, got {input.ndim}")
    if linear_weight.ndim < 2:
        raise RuntimeError(f"expected linear_weight with dimensionality at least 2, got {linear_weight.ndim}")
    num_batches, in_features = input.shape[:-1], input.shape[-1]
    if in_features != linear_weight.shape[-1]:
        raise RuntimeError("expected equal input and linear_weight last dimensions (in_features), "
                           f"got {input.shape[-1]} and {linear_weight.shape[-1]}, respectively")
    num_classes, out_features = linear_weight.shape[0], tuple(linear_weight.shape[1:-1])
    if linear_bias is not None:
        linear_bias = _tensor_of(linear_bias)
        if tuple(linear_bias.shape) != (num_classes, *out_features):
            raise RuntimeError(f"expected linear_bias shape {(num_classes, *out_features)}, got "
                               f"{tuple(linear_bias.shape)}")
    if out_features and not num_batches:
        raise RuntimeError(f"K-dimensional loss defined by linear_weight shape {tuple(linear_weight.shape)} requires "
                           f"batched input, (N, {in_features}), got unbatched input with shape {tuple(input.shape)}")
    logits_shape = (*num_batches, num_classes, *out_features)
    # (cross_entropy reads class probabilities from a target of the logits' shape)
    if tuple(target.shape) == logits_shape and ignore_index is not None:
        raise RuntimeError("ignore_index cannot be specified when target contains probabilities")
    ignore_index = -100 if ignore_index is None else ignore_index
    if out_features:
        classes = math.prod(out_features, start=num_classes)
        linear_weight = linear_weight.reshape(classes, in_features)
        if linear_bias is not None:
            linear_bias = linear_bias.reshape(classes)
    logits = linear(input, linear_weight, linear_bias).reshape(logits_shape)
    return cross_entropy(logits, target, weight=weight, reduction=reduction, ignore_index=ignore_index,
                         label_smoothing=label_smoothing)


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
    """Negative log likelihood of class indices under log-probabilities (N, C), (C,) or (N, C, d1, ..., dk),
    with torch's options."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    _check_reduction(reduction)
    input, target = _tensor_of(input), _tensor_of(target)
    weight = _check_weight(weight, input.shape[1] if input.ndim > 1 else input.shape[0])
    # (torch's saves the input, the target and the weight: a write to one before the backward raises)
    return guard(_as_rows(lambda i, t, r: _nll_rows(i, t, weight, ignore_index, r), input, target, reduction),
                 input, target, weight)


def _nll_rows(input, target, weight, ignore_index, reduction):
    safe, keep = _kept_rows(input, target, ignore_index)
    _same_weight_dtype(input, weight)
    w_row = _row_weights(safe, keep, weight, input.dtype)
    return _reduce_rows(ops.nll_loss(input, safe, reduction="none") * w_row, w_row, reduction)


def _same_weight_dtype(input, weight):
    """torch's class-index kernels take class weights of the input's dtype only."""
    if weight is not None and weight.dtype != input.dtype:
        raise RuntimeError(f"expected scalar type {_data.TORCH_TYPE_NAMES.get(input.dtype.name, input.dtype.name)} "
                           f"but found {_data.TORCH_TYPE_NAMES.get(weight.dtype.name, weight.dtype.name)}")


def _kept_rows(input, target, ignore_index):
    """(targets, where kept) of class-index targets: rows whose target is ``ignore_index`` read class 0
    (their loss is multiplied by 0)."""
    if target.ndim >= 1 and input.ndim == 2 and _unknown_rows(input, target):  # (after a boolean mask: their
        target = _rows_checked(input, target)  # counts are checked where computed, as torch's check on the client)
    elif target.ndim >= 1 and input.ndim == 2 and target.shape[0] != input.shape[0]:
        raise ValueError(f"Expected input batch_size ({input.shape[0]}) to match target batch_size "
                         f"({target.shape[0]}).")
    else:
        target = ops.rechunk(target, (input.chunks[0],)) if target.ndim == 1 else target
    keep = ops.ne(target, ignore_index)
    return ops.where(keep, target, 0), keep


def _reduce_rows(loss, w_row, reduction):
    """Per-row losses reduced: the sum, or the mean weighted as torch's (``sum(loss) / sum(w_row)``: NaN
    when every target is ignored (0 / 0), with a zero gradient then, as torch's backward divides only the
    kept rows, and there are none)."""
    if reduction == "none":
        return loss
    if reduction == "sum":
        return ops.sum(loss)
    total = ops.sum(w_row)
    none_kept = total == 0
    return ops.where(none_kept, math.nan, ops.sum(loss) / ops.where(none_kept, 1, total))


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None, reduction="mean",
                                     pos_weight=None):
    """``-w [pos_weight y log sigmoid(x) + (1 - y) log(1 - sigmoid(x))]`` from logits, stably, as torch's."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    _check_reduction(reduction)
    if weight is None and pos_weight is None:
        return ops.binary_cross_entropy_with_logits(input, target, reduction=reduction)  # one fused node
    input, target = _tensor_of(input), _tensor_of(target)
    if not _same_shape(target.shape, input.shape):
        raise ValueError(f"Target size ({size_repr(target.shape)}) must be the same as input size "
                         f"({size_repr(input.shape)})")
    neg_log_sigmoid = ops.softplus(-input)  # -log sigmoid(x), stable
    if pos_weight is not None:
        log_weight = (_tensor_of(pos_weight) - 1) * target + 1
        neg_log_sigmoid = neg_log_sigmoid * log_weight
    loss = (1 - target) * input + neg_log_sigmoid
    if weight is not None:
        loss = loss * _tensor_of(weight)
    if reduction == "none":
        return loss
    return ops.sum(loss) if reduction == "sum" else ops.mean(loss)


def flatten(input, start_dim=0, end_dim=-1):
    """Merge the axes ``start_dim..end_dim`` into one, as ``torch.flatten``."""
    nd = max(input.ndim, 1)
    for d in (start_dim, end_dim):
        if not -nd <= d < nd:
            raise IndexError(f"Dimension out of range (expected to be in range of [{-nd}, {nd - 1}], but got {d})")
    start, end = start_dim % nd, end_dim % nd
    if start > end:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    shape = tuple(input.shape)
    return ops.reshape(input, shape[:start] + (math.prod(shape[start:end + 1]),) + shape[end + 1:])


# ------------------------------------------------------------------ losses of the difference
def _pointwise_loss(loss_of, input, target, reduction, weight, expand=False):
    """torch's pointwise losses (``l1_loss``, ``smooth_l1_loss``, ``huber_loss``): ``loss_of(|input -
    target|)`` over the broadcast shape (with torch's warning where the shapes differ), times ``weight``
    (the input's shape), then reduced.  ``expand``: both broadcast first, as torch's l1 and smooth l1
    do (so a 0-d float64 target gives a float64 loss)."""
    _check_reduction(reduction)
    input, target = _tensor_of(input), _tensor_of(target)
    if not _same_shape(target.shape, input.shape):
        warnings.warn(f"Using a target size ({size_repr(target.shape)}) that is different to the input size "
                      f"({size_repr(input.shape)}). This will likely lead to incorrect results due to broadcasting. "
                      "Please ensure they have the same size.", UserWarning, stacklevel=3)
        if expand:
            input, target = ops.broadcast_arrays(input, target)
    if weight is not None and not _same_shape(_tensor_of(weight).shape, input.shape):
        raise ValueError("Weights and input must have the same size.")
    loss = loss_of(ops.abs(input - target))
    if weight is not None:
        loss = loss * _tensor_of(weight)
    return loss if reduction == "none" else ops.sum(loss) if reduction == "sum" else ops.mean(loss)


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """``|input - target|``, averaged, summed or kept per element (torch's ``nn.functional.l1_loss``)."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    return _pointwise_loss(lambda d: d, input, target, reduction, weight, expand=True)


@named(lambda input, target, size_average=None, reduce=None, reduction="mean", beta=1.0:
       None if beta == 0 else "SmoothL1LossBackward0")  # (beta 0: torch's l1_loss, its reduction's node)
def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    """``0.5 d² / beta`` where ``d = |input - target| < beta``, else ``d - 0.5 beta`` (torch's
    ``nn.functional.smooth_l1_loss``; ``beta=0`` is the L1 loss)."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    if beta == 0:
        return _pointwise_loss(lambda d: d, input, target, reduction, None, expand=True)  # (torch's l1_loss)
    return guard(_pointwise_loss(lambda d: ops.where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta), input, target,
                                 reduction, None, expand=True), input, target)


@named(lambda input, target, reduction="mean", delta=1.0, weight=None: "HuberLossBackward0" if weight is None else None)
def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    """``0.5 d²`` where ``d = |input - target| < delta``, else ``delta (d - 0.5 delta)`` (torch's
    ``nn.functional.huber_loss``)."""
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    input, target = _tensor_of(input), _tensor_of(target)
    if target.dtype != input.dtype:  # (torch's kernel computes in the input's dtype)
        target = ops.astype(target, input.dtype)
    loss = _pointwise_loss(lambda d: ops.where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta)), input, target,
                           reduction, weight)
    return guard(loss, input, target)


# ------------------------------------------------------------------ more of torch's losses
def _checked_reduction(size_average, reduce, reduction):
    """torch's ``_Reduction.legacy_get_enum`` / ``get_enum``: the reduction string, checked."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    _check_reduction(reduction)
    return reduction


def _reduced(loss, reduction):
    """torch's ``apply_loss_reduction``."""
    return loss if reduction == "none" else ops.sum(loss) if reduction == "sum" else ops.mean(loss)


def _refuse_grad(name, argument, t):
    if getattr(t, "requires_grad", False):
        raise RuntimeError(f"The function '{name}' is not differentiable with respect to argument '{argument}'. "
                           "This input cannot have requires_grad True.")


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """torch's ``kl_div``: ``target (log target - input)`` (``exp(target) (target - input)`` with
    ``log_target``), as torch's composition (``xlogy(target, target) - target * input``: 0 where the target is
    0); ``'batchmean'`` divides the sum by the batch size, ``'mean'`` warns as torch's."""
    if size_average is not None or reduce is not None:
        enum = legacy_reduction(size_average, reduce, reduction)
    else:
        if reduction == "mean":
            warnings.warn("reduction: 'mean' divides the total loss by both the batch size and the support size."
                          "'batchmean' divides only by the batch size, and aligns with the KL div math definition."
                          "'mean' will be changed to behave the same as 'batchmean' in the next major release.",
                          stacklevel=2)
        enum = "sum" if reduction == "batchmean" else reduction
        _check_reduction(enum)
    input, target = _tensor_of(input), _tensor_of(target)
    for t in (input, target):
        if t.dtype.kind == "c":
            raise RuntimeError("kl_div: Complex inputs not supported.")
        if t.dtype.kind in "biu":
            raise RuntimeError("kl_div: Integral inputs not supported.")
    loss = ops.exp(target) * (target - input) if log_target else target.xlogy(target) - target * input
    loss = _reduced(loss, enum)
    if reduction != "batchmean" or input.ndim == 0:
        return loss
    rows = input.shape[0]
    return loss / (rows if rows == rows else ops.reductions.length(input[(slice(None),) + (0,) * (input.ndim - 1)], 0))


def _broadcast_shapes(shape, other):
    """torch's ``broadcast_shapes(shape, other)``, with its error."""
    result = [1] * (len(other) - len(shape)) + list(shape)
    for i in range(-1, -1 - len(other), -1):
        if other[i] != 1 and other[i] != result[i]:
            if result[i] != 1:
                raise RuntimeError(f"Attempting to broadcast a dimension of length {other[i]} at {i}! Mismatching "
                                   f"argument at index 1 had {size_repr(other)}; but expected shape should be "
                                   f"broadcastable to {result}")
            result[i] = other[i]
    return tuple(result)


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    """``-w (t max(log x, -100) + (1 - t) max(log(1 - x), -100))``, torch's kernel and its gradients (the
    input's ``(x - t) / max(x (1 - x), 1e-12)``); an input outside [0, 1] raises torch's error when computed."""
    reduction = _checked_reduction(size_average, reduce, reduction)
    input, target = _tensor_of(input), _tensor_of(target)
    if not _same_shape(target.shape, input.shape):
        raise ValueError(f"Using a target size ({size_repr(target.shape)}) that is different to the input size "
                         f"({size_repr(input.shape)}) is deprecated. Please ensure they have the same size.")
    if weight is None:
        return _bind_loss(_bce_p, input, target, reduction=reduction)
    weight = _tensor_of(weight)
    _refuse_grad("binary_cross_entropy", "weight", weight)
    weight = ops.broadcast_to(weight, _broadcast_shapes(target.shape, weight.shape))
    loss = _bce_p.bind(input, target, reduction="none", n=1) * weight
    return guard(_reduced(loss, reduction), weight)  # (torch's kernel saves the weight)


def poisson_nll_loss(input, target, log_input=True, full=False, size_average=None, eps=1e-8, reduce=None,
                     reduction="mean"):
    """``exp(input) - target * input`` (``input - target log(input + eps)`` without ``log_input``), plus
    Stirling's term where ``target > 1`` with ``full``: torch's composition."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(reduction + " is not a valid value for reduction")
    input, target = _tensor_of(input), _tensor_of(target)
    loss = ops.exp(input) - target * input if log_input else input - target * ops.log(input + eps)
    if full:
        stirling = target * ops.log(target) - target + 0.5 * ops.log(2 * math.pi * target)
        loss = loss + ops.where(target <= 1, 0.0, stirling)
    return _reduced(loss, reduction)


def gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean"):
    """``0.5 (log(max(var, eps)) + (input - target)² / max(var, eps))`` (plus ``0.5 log(2 pi)`` with
    ``full``), torch's composition: the clamp is written under ``no_grad``, so ``var``'s gradient passes it.
    ``var`` has the input's shape, or one axis of size 1 (or one axis fewer); a negative entry raises
    torch's ValueError when computed."""
    input, target = _tensor_of(input), _tensor_of(target)
    if isinstance(var, float):
        if var < 0:
            raise ValueError("var has negative entry/entries")
        var = var * ops.ones_like(input)
    else:
        var = _tensor_of(var)
        var = var + _zeros_if_nonnegative(var, "var has negative entry/entries")
    if not _same_shape(var.shape, input.shape):
        if tuple(input.shape[:-1]) == tuple(var.shape):
            var = ops.expand_dims(var, -1)
        elif not (input.ndim == var.ndim and sum(y for x, y in zip(input.shape, var.shape) if x != y) == 1):
            raise ValueError("var is of incorrect size")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(reduction + " is not valid")
    var = ops.clone(var)
    with no_grad():
        var.clamp_min_(eps)
    loss = 0.5 * (ops.log(var) + (input - target) ** 2 / var)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduced(loss, reduction)


def margin_ranking_loss(input1, input2, target, margin=0, size_average=None, reduce=None, reduction="mean"):
    """``max(0, -target (input1 - input2) + margin)``, torch's composition (its gradient passes at 0)."""
    reduction = _checked_reduction(size_average, reduce, reduction)
    input1, input2, target = _tensor_of(input1), _tensor_of(input2), _tensor_of(target)
    if not input1.ndim == input2.ndim == target.ndim:
        raise RuntimeError(f"margin_ranking_loss : All input tensors should have same dimension but got sizes: "
                           f"input1: {size_repr(input1.shape)}, input2: {size_repr(input2.shape)}, "
                           f"target: {size_repr(target.shape)} ")
    return _reduced((-target * (input1 - input2) + margin).clamp_min(0), reduction)


def hinge_embedding_loss(input, target, margin=1.0, size_average=None, reduce=None, reduction="mean"):
    """``input`` where ``target`` is 1, ``max(0, margin - input)`` where it is -1 (both where it is neither),
    torch's composition."""
    reduction = _checked_reduction(size_average, reduce, reduction)
    input, target = _tensor_of(input), _tensor_of(target)
    margin_clamp = (margin - input).clamp_min(0)
    return _reduced(ops.where(target != 1, margin_clamp, 0.0) + ops.where(target != -1, input, 0.0), reduction)


def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """``log(1 + exp(-target * input))``, torch's kernel and gradient (none for the target, as torch's)."""
    reduction = _checked_reduction(size_average, reduce, reduction)
    input, target = _tensor_of(input), _tensor_of(target)
    _refuse_grad("soft_margin_loss", "target", target)
    return _bind_loss(_soft_margin_p, input, target, reduction=reduction)


def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    """``-(t logsigmoid(x) + (1 - t) logsigmoid(-x))`` times ``weight``, averaged over the classes (the last
    axis), then reduced: torch's composition."""
    if size_average is not None or reduce is not None:
        reduction = legacy_reduction(size_average, reduce, reduction)
    input, target = _tensor_of(input), _tensor_of(target)
    loss = -(target * logsigmoid(input) + (1 - target) * logsigmoid(-input))
    if weight is not None:
        loss = loss * _tensor_of(weight)
    class_dim = input.ndim - 1
    loss = ops.sum(loss, axis=class_dim) / input.shape[class_dim]
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(reduction + " is not valid")
    return _reduced(loss, reduction)


_EPSILON = float(np.float32(1e-12))  # torch's ``EPSILON`` of its loss code, a C++ float


def cosine_embedding_loss(input1, input2, target, margin=0, size_average=None, reduce=None, reduction="mean"):
    """``1 - cos(input1, input2)`` where ``target`` is 1, ``max(0, cos - margin)`` where it is -1 (0 elsewhere),
    the cosine along the last axis of (N, D) or (D,) inputs: torch's composition (its ``1e-12`` in each squared
    magnitude)."""
    reduction = _checked_reduction(size_average, reduce, reduction)
    input1, input2, target = _tensor_of(input1), _tensor_of(input2), _tensor_of(target)
    if target.ndim not in (0, 1):
        raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
    if input1.ndim != 2 - (target.ndim == 0) or input2.ndim != input1.ndim:
        raise RuntimeError(f"{target.ndim}D target tensor expects {2 - (target.ndim == 0)}D input tensors, but found "
                           f"inputs with sizes {list(input1.shape)} and {list(input2.shape)}.")
    axis = target.ndim
    prod_sum = ops.sum(input1 * input2, axis=axis)
    mag_square1 = ops.sum(input1 * input1, axis=axis) + _EPSILON
    mag_square2 = ops.sum(input2 * input2, axis=axis) + _EPSILON
    cos = prod_sum / ops.sqrt(mag_square1 * mag_square2)
    loss = ops.where(target == 1, 1 - cos, 0.0) + ops.where(target == -1, (cos - margin).clamp_min(0), 0.0)
    return _reduced(loss, reduction)


def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """``||x1 - x2 + eps||_p`` along the last axis (of the broadcast shape), torch's composition and its norm's
    gradients."""
    x1, x2 = _tensor_of(x1), _tensor_of(x2)
    axis = max(x1.ndim, x2.ndim) - 1
    return _vector_norm(x1 - x2 + eps, p, axis=axis if axis >= 0 else None, keepdims=keepdim)


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2, eps=1e-6, swap=False, size_average=None,
                        reduce=None, reduction="mean"):
    """``max(0, margin + d(anchor, positive) - d(anchor, negative))``, ``d`` the pairwise distance
    (``swap``: the smaller of ``d(anchor, negative)`` and ``d(positive, negative)``), torch's composition."""
    reduction = _checked_reduction(size_average, reduce, reduction)
    if margin <= 0:
        raise ValueError(f"margin must be greater than 0, got {margin}")
    anchor, positive, negative = _tensor_of(anchor), _tensor_of(positive), _tensor_of(negative)
    if not anchor.ndim == positive.ndim == negative.ndim:
        raise RuntimeError(f"The anchor, positive, and negative tensors are expected to have the same number of "
                           f"dimensions, but got: anchor {anchor.ndim}D, positive {positive.ndim}D, and negative "
                           f"{negative.ndim}D inputs")
    dist_pos = pairwise_distance(anchor, positive, p, eps)
    dist_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        dist_neg = ops.minimum(dist_neg, pairwise_distance(positive, negative, p, eps))
    return _reduced((margin + dist_pos - dist_neg).clamp_min(0), reduction)


def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """``sum(x1 / max(||x1||, eps) * x2 / max(||x2||, eps))`` along ``dim`` (the two broadcast), torch's
    composition: the norms are clamped in place under ``no_grad``, so their gradient passes the clamp."""
    x1, x2 = _tensor_of(x1), _tensor_of(x2)
    if x1.dtype.kind not in "fc" and x2.dtype.kind not in "fc":
        name = TORCH_TYPE_NAMES.get(np.result_type(x1.dtype, x2.dtype).name)
        raise RuntimeError(f"expected common dtype to be floating point, yet common dtype is {name}")
    if x1.dtype.kind not in "fc" or x2.dtype.kind not in "fc":  # (the integer one cast to the other's dtype)
        x1, x2 = (ops.astype(x1, x2.dtype), x2) if x1.dtype.kind not in "fc" else (x1, ops.astype(x2, x1.dtype))
    x1, x2 = ops.broadcast_arrays(x1, x2)
    axis = norm_axis(dim, x1.ndim)
    n1 = ops.clone(_vector_norm(x1, 2, axis=axis, keepdims=True))
    n2 = ops.clone(_vector_norm(x2, 2, axis=axis, keepdims=True))
    with no_grad():
        n1.clamp_min_(eps)
        n2.clamp_min_(eps)
    return ops.sum((x1 / n1) * (x2 / n2), axis=axis)


# ------------------------------------------------------------------ in-place forms
class _RaisesInBackward(Function):
    """The identity, whose backward raises ``message``: torch's in-place ``leaky_relu_`` and ``elu_`` with a
    negative slope compute, but their backward (from the result, which they save) refuses."""

    @staticmethod
    def forward(ctx, x, message):
        ctx.message = message
        return ops.clone(x)

    @staticmethod
    def backward(ctx, g):
        raise RuntimeError(ctx.message)


_LEAKY_NEGATIVE = ("In-place leakyReLu backward calculation is triggered with a negative slope which is not supported. "
                   "This is caused by calling in-place forward function with a negative slope, please call "
                   "out-of-place version instead. File an issue at https://github.com/pytorch/pytorch if you do "
                   "require supporting in-place leakRelu backward calculation with negative slope")
_ELU_NEGATIVE = ("In-place elu backward calculation is triggered with a negative slope which is not supported. This "
                 "is caused by calling in-place forward function with a negative slope, please call out-of-place "
                 "version instead.")


def _negative_inplace(out, negative, message):
    """``out``, whose backward raises torch's ``message`` where ``negative`` (an in-place form's slope below 0)."""
    return _RaisesInBackward.apply(out, message) if negative and out.requires_grad else out


def relu_(input):
    """``relu`` written into ``input`` (torch's ``F.relu_``: the version counter moves, a leaf that requires grad
    refuses)."""
    return input.relu_()


@named("EluBackward1")
def elu_(input, alpha=1.0):
    """``elu`` written into ``input`` (torch's ``F.elu_``; with a negative ``alpha`` its backward raises)."""
    refuse_dtype_kinds("elu", "biu", input)
    return input.copy_(_negative_inplace(_elu(input, alpha, 1.0), alpha < 0, _ELU_NEGATIVE))


@named("CeluBackward1")
def celu_(input, alpha=1.0):
    """``celu`` written into ``input`` (torch's ``F.celu_``; with a negative ``alpha`` its backward raises)."""
    if alpha == 0:
        raise RuntimeError("ZeroDivisionError: alpha cannot be 0 for CELU")
    refuse_dtype_kinds("elu", "biu", input)
    return input.copy_(_negative_inplace(_elu(input, alpha, 1.0 / alpha), alpha < 0, _ELU_NEGATIVE))


def selu_(input):
    """``selu`` written into ``input`` (torch's ``F.selu_``)."""
    return selu(input, inplace=True)


def leaky_relu_(input, negative_slope=0.01):
    """``leaky_relu`` written into ``input`` (torch's ``F.leaky_relu_``; with a negative slope its backward
    raises)."""
    return leaky_relu(input, negative_slope, inplace=True)


def hardtanh_(input, min_val=-1.0, max_val=1.0):
    """``hardtanh`` written into ``input`` (torch's ``F.hardtanh_``, which takes ``min_val > max_val`` as its clamp
    does: everything goes to ``max_val``)."""
    return hardtanh(input, min(min_val, max_val), max_val, inplace=True)


@named("ThresholdBackward1")
def threshold_(input, threshold, value):
    """``threshold`` written into ``input`` (torch's ``F.threshold_``)."""
    refuse_dtype_kinds("threshold", "b", input)
    return input.copy_(ops.where(ops.le(input, threshold), value, input).to(input.dtype))


@named(lambda input, lower=1.0 / 8, upper=1.0 / 3, training=False, inplace=False:
       f"RreluWithNoiseBackward{int(bool(inplace))}")
def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, inplace=False):
    """torch's randomized leaky ReLU: training, each element ``x <= 0`` is multiplied by its own draw from
    U(``lower``, ``upper``) (its gradient that draw; NaN passes, gradient 1); otherwise ``leaky_relu`` with the
    mean slope ``(lower + upper) / 2``.  ``inplace``: written into ``input``."""
    if lower > upper:
        raise RuntimeError("Lower bound should be less than or equal to the upper bound")
    if not training:
        return leaky_relu(input, (lower + upper) / 2, inplace)
    draws = _rand(*input.shape, dtype=input.dtype, chunks=input.chunks, device=input.device)
    noise = ops.where(ops.le(input, 0), draws * (upper - lower) + lower, 1.0).to(input.dtype)
    return input.mul_(noise) if inplace else guard(input * noise, input)  # (torch's saves the input)


def rrelu_(input, lower=1.0 / 8, upper=1.0 / 3, training=False):
    """``rrelu`` written into ``input`` (torch's ``F.rrelu_``)."""
    return rrelu(input, lower, upper, training, inplace=True)


# ------------------------------------------------------------------ bilinear, pdist, gumbel_softmax
def bilinear(input1, input2, weight, bias=None):
    """``y[..., o] = input1[..., i] weight[o, i, j] input2[..., j] + bias[o]``, with torch's checks."""
    tensors = [("input1", input1), ("input2", input2), ("weight", weight)] + ([("bias", bias)] if bias is not None
                                                                              else [])
    if len({t.dtype for _, t in tensors}) > 1:
        raise RuntimeError("All tensors must have the same dtype, got " + ", ".join(
            f"{name}: {_CPP_NAMES.get(t.dtype.name, t.dtype.name)}" for name, t in tensors))
    if input1.ndim != input2.ndim:
        raise RuntimeError(f"bilinear(): input dimensions do not match: got {input1.ndim} and {input2.ndim}")
    for i in range(input1.ndim - 1):
        if input1.shape[i] != input2.shape[i]:
            raise RuntimeError(f"bilinear(): input batch dimensions do not match at dim {i}: got {input1.shape[i]} and "
                               f"{input2.shape[i]}")
    for name, x, axis in (("input1", input1, 1), ("input2", input2, 2)):
        if weight.ndim <= axis:
            raise IndexError(f"Dimension out of range (expected to be in range of [{-weight.ndim}, "
                             f"{weight.ndim - 1}], but got {axis})")
        if x.shape[-1] != weight.shape[axis]:
            raise RuntimeError(f"bilinear(): {name} size does not match weight size: got {x.shape[-1]} but "
                               f"expected {weight.shape[axis]}")
    if bias is not None and bias.shape[0] != weight.shape[0]:
        raise RuntimeError(f"bilinear(): bias size does not match weight size: got {bias.shape[0]} but expected "
                           f"{weight.shape[0]}")
    out = ops.einsum("...i,oij,...j->...o", input1, weight, input2)
    return guard(out if bias is None else out + bias, input1, input2, weight)


def pdist(input, p=2):
    """The ``p``-norm distances of each pair of rows ``i < j`` of the (N, M) ``input``, in ``triu``'s order (torch's
    ``F.pdist``), with torch's gradients: at a zero distance 0; for ``p = inf`` the whole gradient to every tied
    coordinate (where a norm's splits it)."""
    if input.ndim != 2:
        raise RuntimeError(f"pdist only supports 2D tensors, got: {input.ndim}D")
    if input.dtype.kind != "f":
        raise RuntimeError("pdist only supports floating-point dtypes")
    if p < 0:
        raise RuntimeError("pdist only supports non-negative p values")
    if input.shape[0] != input.shape[0]:  # rows of unknown count (after a boolean mask): joined into one block, the
        diff = _pair_diff_p.bind(ops.rechunk(input, {0: -1, 1: -1}))  # pairs' differences taken there
    else:
        i, j = np.triu_indices(input.shape[0], 1)
        diff = input[i] - input[j]
    if p == 0:  # (the count of differing coordinates; torch's gradient is 0, and its result requires grad)
        out = _vector_norm(diff.detach(), 0, axis=1) + ops.sum(ops.where(_tensor_of(False), diff, 0.0), axis=1)
    elif p != math.inf:
        out = _vector_norm(diff, p, axis=1)
    else:
        d = ops.abs(diff)
        top = ops.amax(d.detach(), axis=1, keepdims=True)
        ties = ops.sum(ops.where(ops.eq(d.detach(), top), d, 0.0), axis=1)  # (the gradient: each tie's sign)
        out = ops.reshape(top, (-1,)) + (ties - ties.detach())
    return guard(out, input)  # (torch's saves its input)


def _pair_diff_block(block):
    i, j = np.triu_indices(block.shape[0], 1)
    return block[i] - block[j]


def _pair_diff_array(a):
    return a.map_blocks(_pair_diff_block, chunks=((np.nan,), a.chunks[1]), dtype=a.dtype, meta=a._meta)


def _pair_sum_block(g, like):
    n = like.shape[0]
    i, j = np.triu_indices(n, 1)
    pairs = np.zeros_like(g, shape=(n, n) + g.shape[1:])  # (on g's device: an index assignment, no ufunc.at,
    pairs[i, j] = g                                        # which a device array takes host indices in)
    return pairs.sum(axis=1) - pairs.sum(axis=0)


def _pair_sum_array(g, like):
    return da.map_blocks(_pair_sum_block, g, like, chunks=like.chunks, dtype=g.dtype, meta=g._meta)


# pdist's pairs of rows of unknown count, in one block: ``x[i] - x[j]`` for each ``i < j`` (triu's order), and its
# adjoint, each row's cotangents added (as ``i``) and subtracted (as ``j``)
_pair_diff_p = primitive("pair_diff", torch="IndexBackward0", impl=_pair_diff_array, save=("x",))
_pair_sum_p = primitive("pair_diff_adjoint", torch="IndexPutBackward0", impl=_pair_sum_array, args=("g", "like"),
                        consts=("like",))
_pair_diff_p.vjp(lambda g, s: (_pair_sum_p.bind(g, s.x),))
_pair_sum_p.vjp(lambda g, s: (_pair_diff_p.bind(g),))


def gumbel_softmax(logits, tau=1, hard=False, eps=1e-10, dim=-1):
    """``softmax((logits + g) / tau)`` along ``dim``, ``g`` standard Gumbel draws (``-log`` of exponential ones);
    ``hard``: the one-hot of its largest entry, with the soft sample's gradient (straight through)."""
    if eps != 1e-10:
        warnings.warn("`eps` parameter is deprecated and has no effect.", stacklevel=2)
    u = _rand(*logits.shape, dtype=logits.dtype, chunks=logits.chunks, device=logits.device)
    gumbels = -ops.log(-ops.log1p(-u))  # (-log(1 - u): an Exp(1) draw, finite as u < 1)
    y_soft = ops.softmax((logits + gumbels) / tau, axis=dim)
    if not hard:
        return y_soft
    axis = norm_axis(dim, logits.ndim)
    index = ops.argmax(y_soft.detach(), axis=axis, keepdims=True)
    y_hard = ops.eq(index, ops.reshape(_tensor_of(np.arange(logits.shape[axis])),
                                       (-1,) + (1,) * (logits.ndim - 1 - axis))).to(logits.dtype)
    return y_hard - y_soft.detach() + y_soft


# ------------------------------------------------------------------ margin losses of class indices
def _checked_indices(target, low, high, message):
    """``target``, whose tasks raise torch's ``message`` (a RuntimeError) where a value is outside
    ``[low, high)``: torch reads the values eagerly, daskgrad when they are computed."""
    a = target.array
    return Tensor._make(da.map_blocks(_indices_block, a, low=low, high=high, message=message, dtype=a.dtype,
                                      meta=a._meta))


def _indices_block(block, low, high, message):
    bad = (block < low) | (block >= high)
    if bad.any():
        raise RuntimeError(message.format(bad=block[bad].ravel()[0]))
    return block


def _margin_shapes(input, target):
    """torch's shape checks of the margin losses: ``(C,)``, ``()`` or ``(N, C)`` input; (rows, classes)."""
    if not ((input.numel() > 0 and input.ndim <= 1) or (input.ndim == 2 and input.shape[1] > 0)):
        raise RuntimeError(f"Expected non-empty vector or matrix with optional 0-dim batch size, but got: "
                           f"{list(input.shape)}")
    if target.dtype != np.int64:
        raise RuntimeError(f"expected scalar type Long but found {TORCH_TYPE_NAMES.get(target.dtype.name)}")
    return (1, max(input.numel(), 1)) if input.ndim <= 1 else tuple(input.shape)


def _class_mask(target, classes):
    """``(N, ..., C)`` booleans: ``target[n, ...] == c``."""
    return ops.eq(ops.unsqueeze(target, -1), _tensor_of(np.arange(classes)))


def multi_margin_loss(input, target, p=1, margin=1.0, weight=None, size_average=None, reduce=None, reduction="mean"):
    """torch's multi-class hinge loss: per sample ``sum_{i != y} w[y] max(0, margin - x[y] + x[i])^p / C``
    (``p`` 1 or 2), with torch's gradient (0 where the hinge is exactly 0) and checks; a target outside
    ``[0, C)`` raises torch's error when computed."""
    reduction = _checked_reduction(size_average, reduce, reduction)
    if p != 1 and p != 2:
        raise ValueError("only p == 1 and p == 2 supported")
    if weight is not None and _tensor_of(weight).ndim != 1:
        raise ValueError("weight must be one-dimensional")
    input, target = _tensor_of(input), _tensor_of(target)
    rows, classes = _margin_shapes(input, target)
    if target.ndim > 1 or (not _unknown_rows(input, target) and target.numel() != rows):
        raise RuntimeError(f"multi_margin_loss: target tensor should be 1-D with size equal to the number of input "
                           f"samples (batch size). Expected target size [{rows}], but got {list(target.shape)}. "
                           f"Input has shape {list(input.shape)}.")
    if weight is not None:
        weight = _tensor_of(weight)
        if weight.numel() != classes:
            raise RuntimeError(f"inconsistent weight size, expected {classes} but got {list(weight.shape)}")
        _refuse_grad("multi_margin_loss", "weight", weight)
    x = ops.reshape(input, (rows, classes))
    t = _checked_indices(ops.reshape(target, (rows,)), 0, classes, "target out of range")
    is_y = _class_mask(t, classes)
    x_y = ops.sum(ops.where(is_y, x, 0.0), axis=1, keepdims=True)
    z = margin - x_y + x
    h = ops.where(ops.logical_and(ops.gt(z, 0), ops.logical_not(is_y)), z, 0.0)
    h = h * h if p == 2 else h
    if weight is not None:
        h = h * ops.sum(ops.where(is_y, weight, 0.0), axis=1, keepdims=True)
    loss = ops.sum(h, axis=1) / classes
    if reduction == "none":
        return loss if target.ndim > 0 else ops.reshape(loss, ())
    return guard(_reduced(loss, reduction), input, weight)


def multilabel_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """torch's multi-label hinge loss: per sample ``sum_{j, i} max(0, 1 - (x[j] - x[i])) / C`` over the target
    classes ``j`` (``target``'s entries before its first -1, each counted as often as it is listed) and the other
    classes ``i``, with torch's gradient (0 where the hinge is exactly 0) and checks; a target outside
    ``[-1, C)`` raises torch's error when computed."""
    reduction = _checked_reduction(size_average, reduce, reduction)
    input, target = _tensor_of(input), _tensor_of(target)
    rows, classes = _margin_shapes(input, target)
    if (target.ndim > 1 or target.numel() != classes) if input.ndim <= 1 else tuple(target.shape) != (rows, classes):
        raise RuntimeError(f"inconsistent target size: {list(target.shape)} for input of size: "
                           f"{list(input.shape)}")
    x = ops.reshape(input, (rows, classes))
    t = _checked_indices(ops.reshape(target, (rows, classes)), -1, classes, "argument #2 'target' is out of range")
    listed = ops.cumprod(ops.ne(t, -1).to(np.int64), axis=1) > 0  # (the entries before the first -1)
    slot_is = ops.logical_and(_class_mask(t, classes), ops.unsqueeze(listed, -1))  # (N, slot, class)
    is_target = ops.any(slot_is, axis=1)  # (N, class)
    x_slot = ops.sum(ops.where(slot_is, ops.unsqueeze(x, 1), 0.0), axis=2, keepdims=True)  # (N, slot, 1)
    z = 1 - x_slot + ops.unsqueeze(x, 1)
    counted = ops.logical_and(ops.unsqueeze(listed, -1), ops.logical_not(ops.unsqueeze(is_target, 1)))
    h = ops.where(ops.logical_and(ops.gt(z, 0), counted), z, 0.0)
    loss = ops.sum(h, axis=(1, 2)) / classes
    if reduction == "none":
        return loss if input.ndim == 2 else ops.reshape(loss, ())
    return guard(_reduced(loss, reduction), input)


def triplet_margin_with_distance_loss(anchor, positive, negative, *, distance_function=None, margin=1.0, swap=False,
                                      reduction="mean"):
    """``max(0, margin + d(anchor, positive) - d(anchor, negative))`` with any distance ``d`` (by default
    :func:`pairwise_distance`; ``swap``: the smaller of ``d(anchor, negative)`` and ``d(positive, negative)``),
    torch's composition."""
    _check_reduction(reduction)
    if margin <= 0:
        raise ValueError(f"margin must be greater than 0, got {margin}")
    if not anchor.ndim == positive.ndim == negative.ndim:
        raise RuntimeError(f"The anchor, positive, and negative tensors are expected to have the same number of "
                           f"dimensions, but got: anchor {anchor.ndim}D, positive {positive.ndim}D, and negative "
                           f"{negative.ndim}D inputs")
    distance_function = pairwise_distance if distance_function is None else distance_function
    dist_pos = distance_function(anchor, positive)
    dist_neg = distance_function(anchor, negative)
    if swap:
        dist_neg = ops.minimum(dist_neg, distance_function(positive, negative))
    loss = (margin + dist_pos - dist_neg).clamp_min(0)
    return _reduced(loss, reduction)


# ------------------------------------------------------------------ embedding_bag
def _torch_tensor_type(dtype):
    return f"torch.{TORCH_TYPE_NAMES.get(dtype.name, dtype.name)}Tensor"


def _checked_offsets(offsets, length):
    """``offsets`` in one chunk, whose task raises torch's errors for a first offset other than 0 and a last one
    past the input's ``length`` (torch reads them eagerly, daskgrad when computed)."""
    a = ops.rechunk(offsets, -1).array
    return Tensor._make(da.map_blocks(_offsets_block, a, length=length, type_name=_torch_tensor_type(a.dtype),
                                      dtype=a.dtype, meta=a._meta))


def _offsets_block(block, length, type_name):
    if block.size and block[0] != 0:
        raise RuntimeError(f"offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start from "
                           f"position 0. However, got {block[0]}\n[ {type_name}{{}} ]")
    if block.size and block[-1] > length:
        raise RuntimeError(f"offsets[-1] can not be greater than input's length {length} but got offsets[-1] of "
                           f"{block[-1]}")
    return block


def _bag_arguments(input, weight, offsets, per_sample_weights, include_last_offset):
    """torch's checks of ``embedding_bag``'s arguments, and the flat (indices, offsets, per-sample weights,
    include_last_offset) a 2-d input (one bag a row) stands for."""
    if per_sample_weights is not None and tuple(input.shape) != tuple(per_sample_weights.shape):
        raise ValueError(f"embedding_bag: If per_sample_weights ({size_repr(per_sample_weights.shape)}) is "
                         f"not None, then it must have the same shape as the input ({size_repr(input.shape)})")
    if weight.ndim != 2:
        raise ValueError(f"weight has to be a 2D Tensor, but got Tensor of dimension {weight.ndim}")
    if input.ndim == 2:
        if offsets is not None:
            raise ValueError("if input is 2D, then offsets has to be None, as input is treated is a mini-batch of "
                             f"fixed length sequences. However, found offsets of type {type(offsets)}")
        offsets = _tensor_of(np.arange(0, input.numel(), max(input.shape[1], 1), dtype=input.dtype))
        include_last_offset = False
        input = ops.reshape(input, (-1,))
        if per_sample_weights is not None:
            per_sample_weights = ops.reshape(per_sample_weights, (-1,))
    elif input.ndim == 1:
        if offsets is None:
            raise ValueError("offsets has to be a 1D Tensor but got None")
        offsets = _tensor_of(offsets)
        if offsets.ndim != 1:
            raise ValueError("offsets has to be a 1D Tensor")
    else:
        raise ValueError(f"input has to be 1D or 2D Tensor, but got Tensor of dimension {input.ndim}")
    return input, offsets, per_sample_weights, include_last_offset


def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2, scale_grad_by_freq=False, mode="mean",
                  sparse=False, per_sample_weights=None, include_last_offset=False, padding_idx=None):
    """torch's ``F.embedding_bag``: the sum, mean or max of the ``weight`` rows of each bag of indices (the bags of a
    1-d ``input`` start at ``offsets``; those of a 2-d one are its rows), ``per_sample_weights`` scaling each row
    (``'sum'``), entries equal to ``padding_idx`` left out (not counted in the mean), an empty bag zeros.  With
    ``include_last_offset`` the last offset is not a bag's start: torch documents it as the input's length; where
    it is not, the last bag ends with the input, as torch's CPU kernels (but the sums of float32 and half ones stop
    at the last offset: a mean still divides by the count to the end; the gradient is this forward's).
    ``'max'`` takes each coordinate from the first row of the bag holding its maximum (its gradient goes there).
    Built from a (bags, indices) mask: its size is the bag count times the index count (times the embedding size
    for ``'max'``).  ``max_norm``, ``scale_grad_by_freq`` and ``sparse`` are refused."""
    input, weight = _tensor_of(input), _tensor_of(weight)
    if weight.dtype == np.int64 and input.dtype.kind == "f":  # (torch's old argument order, still taken)
        warnings.warn("Argument order of nn.functional.embedding_bag was changed. Usage `embedding_bag(weight, input, "
                      "...)` is deprecated, and should now be `embedding_bag(input, weight, ...)`.", stacklevel=2)
        weight, input = input, weight
    per_sample_weights = None if per_sample_weights is None else _tensor_of(per_sample_weights)
    input, offsets, per_sample_weights, include_last_offset = _bag_arguments(input, weight, offsets,
                                                                             per_sample_weights, include_last_offset)
    if mode not in ("sum", "mean", "max"):
        raise ValueError("mode has to be one of sum, mean or max")
    if mode == "max" and scale_grad_by_freq:
        raise ValueError("max mode does not support scaling the gradient by the frequency")
    if mode == "max" and sparse:
        raise ValueError("max mode does not support sparse weights")
    _refuse_embedding_options(max_norm, scale_grad_by_freq, sparse)
    if per_sample_weights is not None and mode != "sum":
        raise NotImplementedError(f"embedding_bag: per_sample_weights was not None. per_sample_weights is only "
                                  f"supported for mode='sum' (got mode='{mode}'). Please open a feature request on "
                                  f"GitHub.")
    for name, t in (("indices", input), ("offsets", offsets)):
        if t.dtype not in (np.int64, np.int32):
            raise RuntimeError(f"Expected tensor for argument #1 '{name}' to have one of the following scalar types: "
                               f"Long, Int; but got {_torch_tensor_type(t.dtype)} instead (while checking arguments "
                               "for embedding_bag)")
    if per_sample_weights is not None and per_sample_weights.dtype != weight.dtype:
        raise RuntimeError(f"Expected tensor for argument #1 'weight' to have the same type as tensor for argument #1 "
                           f"'per_sample_weights'; but type {_torch_tensor_type(weight.dtype)} does not equal "
                           f"{_torch_tensor_type(per_sample_weights.dtype)} (while checking arguments for "
                           "embedding_bag)")
    rows = weight.shape[0]
    if padding_idx is not None:
        if not -rows <= padding_idx < rows:
            raise RuntimeError(f"padding_idx must be within the number of embeddings, -{rows} through {rows - 1}, "
                               f"but got {padding_idx}")
        padding_idx %= rows
    return _bags(input, weight, offsets, per_sample_weights, include_last_offset, padding_idx, mode)


def _bags(input, weight, offsets, per_sample_weights, include_last_offset, padding_idx, mode):
    """The bags as a (bags, indices) mask ``in_bag``: index ``k`` is in bag ``b`` where ``start[b] <= k < end[b]``
    (and it is not ``padding_idx``); ``'sum'`` and ``'mean'`` are then a product with the picked rows."""
    length = input.shape[0]
    offsets = _checked_offsets(offsets, length)
    bags = offsets.shape[0] - bool(include_last_offset)
    input = _checked_indices(input, 0, weight.shape[0], "embedding_bag: Expected idx >= 0 && idx < num_embeddings "
                             "but found idx to be {bad}")
    starts = offsets[:bags]
    # (the last bag runs to the end of the input, with include_last_offset too, where offsets[-1] is not the input's
    # length, which torch's docs ask for: torch's kernels' forward, but for the sums of its float32 and half ones,
    # which stop at offsets[-1] (a mean still divides by the count to the end))
    ends = ops.concatenate([offsets[1:bags], _tensor_of(np.array([length], dtype=offsets.dtype))])
    k = _tensor_of(np.arange(length))
    in_bag = ops.logical_and(ops.le(ops.unsqueeze(starts, 1), k), ops.lt(k, ops.unsqueeze(ends, 1)))
    if padding_idx is not None:
        in_bag = ops.logical_and(in_bag, ops.ne(input, padding_idx))
    summed = in_bag
    if include_last_offset and mode != "max" and weight.dtype != np.float64:
        summed = ops.logical_and(in_bag, ops.lt(k, ops.unsqueeze(offsets[1:], 1)))
    picked = _embedding(input, weight)  # (indices, D)
    if per_sample_weights is not None:
        picked = picked * ops.unsqueeze(per_sample_weights, 1)
    if mode != "max":
        out = ops.astype(summed, weight.dtype) @ picked
        if mode == "mean":
            count = ops.unsqueeze(ops.sum(ops.astype(in_bag, weight.dtype), axis=1), 1)
            out = out / ops.where(count == 0, 1.0, count)  # (an empty bag's sum, 0, stays 0)
        return guard(out, weight, per_sample_weights)
    mask = ops.unsqueeze(in_bag, 2)  # (bags, indices, 1)
    candidates = ops.where(mask, ops.unsqueeze(picked.detach(), 0), -math.inf)
    top = ops.amax(candidates, axis=1, keepdims=True)
    at_top = ops.logical_and(mask, ops.eq(candidates, top))
    first = ops.logical_and(at_top, ops.eq(ops.cumsum(ops.astype(at_top, np.int64), axis=1), 1))
    return guard(ops.sum(ops.where(first, ops.unsqueeze(picked, 0), 0.0), axis=1), weight)


def _tensor_hardshrink(self, lambd=0.5):
    """torch's ``Tensor.hardshrink(lambd=0.5)``: :func:`daskgrad.nn.functional.hardshrink` of this tensor."""
    return hardshrink(self, lambd)


def _tensor_prelu(self, weight):
    """torch's ``Tensor.prelu(weight)``: :func:`daskgrad.nn.functional.prelu` of this tensor."""
    return prelu(self, weight)


# (installed here, not with the other methods: nn.functional sits on a floor above the ops)
_tensor_hardshrink.__name__, _tensor_hardshrink.__qualname__ = "hardshrink", "Tensor.hardshrink"
_tensor_prelu.__name__, _tensor_prelu.__qualname__ = "prelu", "Tensor.prelu"
Tensor.hardshrink, Tensor.prelu = _tensor_hardshrink, _tensor_prelu
