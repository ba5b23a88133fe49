"""torch.nn.functional's layer functions, as compositions of daskgrad ops.

>>> y = F.gelu(F.linear(x, w, b))
"""
from __future__ import annotations

import math
import warnings

import dask.array as da
import numpy as np

from .. import ops
from ..graph import guard, size_repr, type_repr
from .._modes import no_grad
from .._tensor import Tensor, zeros as _zeros
from ..ops import mean, mse_loss, sigmoid, sqrt, tanh  # noqa: F401
from ..ops._util import TORCH_TYPE_NAMES, norm_axis, refuse_dtype_kinds
from ..ops.layers import dropout_mask, embedding as _embedding, erf
from ..ops.linalg import vector_norm as _vector_norm
from ..ops.nn import bce_p as _bce_p, soft_margin_p as _soft_margin_p, zeros_if_nonnegative as _zeros_if_nonnegative
from ._attention import multi_head_attention_forward, scaled_dot_product_attention  # noqa: F401
from ._conv import (adaptive_avg_pool1d, adaptive_avg_pool2d, avg_pool1d, avg_pool2d, conv1d, conv2d,  # noqa: F401
                    conv_transpose1d, conv_transpose2d, conv_transpose3d, fold, max_pool1d, max_pool2d, unfold)
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


def gelu(input, approximate="none"):
    """``x * Phi(x)``, or torch's tanh approximation with ``approximate="tanh"``."""
    if approximate == "none":
        return guard(input * 0.5 * (1 + erf(input * (1 / math.sqrt(2)))), input)
    if approximate == "tanh":
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
    if p == 0 or not training or input.numel() == 0:
        return input
    if p == 1:
        return input.mul_(0.0) if inplace else input * 0.0
    if feature:
        if input.ndim < 2 - (not batched):
            raise RuntimeError("Feature dropout requires at least 2 dimensions in the input")
        k = 2 if batched else 1
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
        if tensor.numel() == 0:
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


def silu(input, inplace=False):
    """``x * sigmoid(x)``."""
    _refuse_inplace("silu", inplace)
    return input * sigmoid(input)


def leaky_relu(input, negative_slope=0.01, inplace=False):
    """``x`` where ``x > 0``, else ``negative_slope * x`` (the slope's side at 0, as torch's gradient)."""
    _refuse_inplace("leaky_relu", inplace)
    return guard(ops.where(ops.gt(input, 0), input, input * negative_slope), input)


def _maybe_inplace(input, out, inplace):
    """``out``, or (``inplace``) ``input`` with ``out`` written into it, with torch's in-place rules
    (a leaf that requires grad refuses).  Out of place, ``out`` guards ``input`` as torch's op saves it
    (:func:`daskgrad.graph.guard`); in place, torch saves the result, which nothing can write before."""
    return input.copy_(out) if inplace else guard(out, input)


def elu(input, alpha=1.0, inplace=False):
    """``x`` where ``x > 0``, else ``alpha * (exp(x) - 1)`` (torch's gradient: ``alpha * exp(x)`` at 0).
    The unchosen side is computed at 0 where ``x > 0``: its gradient (``exp(1000)``) would be ``inf *
    0 = nan`` through ``where``."""
    refuse_dtype_kinds("elu", "biu", input)
    return _maybe_inplace(input, _elu(input, alpha, 1.0), inplace)


def celu(input, alpha=1.0, inplace=False):
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``."""
    if alpha == 0:
        raise RuntimeError("ZeroDivisionError: alpha cannot be 0 for CELU")  # (torch's words)
    refuse_dtype_kinds("elu", "biu", input)
    return _maybe_inplace(input, _elu(input, alpha, 1.0 / alpha), inplace)


def _elu(x, alpha, input_scale):
    """The values through ``expm1`` (exact near 0), the gradient through ``exp`` as torch's kernel (``expm1``'s
    rule, ``result + 1``, loses the digits of ``exp(x)`` below -10): ``e - e.detach()`` is 0 with ``exp``'s
    derivatives."""
    positive = ops.logical_not(ops.le(x, 0))  # (torch's test: NaN on the ``x`` side, its gradient passed on)
    scaled = ops.where(positive, 0.0, x) * input_scale
    e = ops.exp(scaled)
    return ops.where(positive, x, alpha * (ops.expm1(scaled.detach()) + (e - e.detach())))


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


def threshold(input, threshold, value, inplace=False):
    """``value`` where ``x <= threshold``, else ``x`` (NaN stays NaN, as torch's)."""
    refuse_dtype_kinds("threshold", "b", input)
    return _maybe_inplace(input, ops.where(ops.le(input, threshold), value, input).to(input.dtype), inplace)

_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def selu(input, inplace=False):
    """``scale * elu(x, alpha)`` with torch's constants (its gradient at 0: the negative side's)."""
    refuse_dtype_kinds("elu", "biu", input)
    return _maybe_inplace(input, _SELU_SCALE * _elu(input, _SELU_ALPHA, 1.0), inplace)


def softplus(input, beta=1.0, threshold=20.0):
    """``log(1 + exp(beta * x)) / beta``, and ``x`` itself where ``beta * x > threshold`` (gradient 1 there,
    as torch's; at the threshold the formula's).  The unchosen side is computed at 0."""
    refuse_dtype_kinds("softplus", "biu", input)
    scaled = input if beta == 1 else input * beta
    linear = ops.gt(scaled, threshold)
    soft = ops.softplus(ops.where(linear, 0.0, scaled))
    return guard(ops.where(linear, input, soft if beta == 1 else soft / beta), input)  # (torch's saves input)


def mish(input, inplace=False):
    """``x * tanh(softplus(x))`` (``inplace``: of a copy, as the product saves its operands for the gradient)."""
    refuse_dtype_kinds("mish", "biu", input)
    x = ops.clone(input) if inplace else input
    return _maybe_inplace(input, x * tanh(ops.softplus(x)), inplace)


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


def hardsigmoid(input, inplace=False):
    """``relu6(x + 3) / 6``, with torch's gradient: its float32 ``1/6`` (0.16666667163..., in float64 too)
    strictly inside (-3, 3), else 0 (also at NaN).  The values are ``clip(x + 3, 0, 6) / 6`` of the detached
    input; ``c * (x - x.detach())``, 0, carries the gradient."""
    refuse_dtype_kinds("hardsigmoid", "biu", input)
    inside = ops.logical_and(ops.gt(input, -3), ops.lt(input, 3))
    detached = input.detach()
    value = ops.clip(detached + 3, 0, 6) / 6
    return _maybe_inplace(input, ops.where(inside, value + _ONE_SIXTH_F32 * (input - detached), value), inplace)


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


def softshrink(input, lambd=0.5):
    """``x - lambd`` above ``lambd``, ``x + lambd`` below ``-lambd``, else 0 (gradient 0 on ``[-lambd, lambd]``,
    as torch's; ``lambd`` in ``[0, the dtype's max]``, torch's check and text)."""
    inside = _shrink_inside(input, "softshrink_check", lambd)
    limit = float(np.finfo(input.dtype).max)
    if not 0 <= lambd <= limit:
        raise RuntimeError(f"lambda must be in range [0, {limit:g}] for input dtype "
                           f"{TORCH_TYPE_NAMES.get(input.dtype.name)}, but found {lambd:g}")
    return guard(ops.where(inside, 0.0, ops.where(ops.gt(input, lambd), input - lambd, input + lambd)), input)


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
    return input / input.norm(p, dim, keepdim=True).clamp_min(eps).expand_as(input)


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
    probabilities = target.shape == input.shape and target.dtype.kind not in "iu"
    if input.ndim == 1:
        out_shape = ()
        if not probabilities and target.ndim == 1 and target.shape[0] != 1:
            raise ValueError(f"For 1D input, 1D target must have size 1, but got target size: {target.shape[0]}")
    else:
        out_shape = (input.shape[0],) + tuple(input.shape[2:])
        if not probabilities and tuple(target.shape) != out_shape:
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
    terms = ops.log_softmax(input, axis=1) * target
    if weight is not None:
        terms = terms * ops.astype(weight, input.dtype)
    if reduction == "none":
        return -ops.sum(terms, axis=1)
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
    if target.shape == input.shape and target.dtype.kind not in "iu":
        return _as_rows(lambda i, t, r: _class_probability_loss(i, t, weight, r, label_smoothing), input, target,
                        reduction)
    return _as_rows(lambda i, t, r: _class_index_loss(i, t, weight, ignore_index, r, label_smoothing), input, target,
                    reduction)


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
    w_row = _row_weights(safe, keep, weight, input.dtype)
    return _reduce_rows(ops.nll_loss(input, safe, reduction="none") * w_row, w_row, reduction)


def _kept_rows(input, target, ignore_index):
    """(targets, where kept) of class-index targets: rows whose target is ``ignore_index`` read class 0
    (their loss is multiplied by 0)."""
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
    if target.shape != input.shape:
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
    if target.shape != input.shape:
        warnings.warn(f"Using a target size ({size_repr(target.shape)}) that is different to the input size "
                      f"({size_repr(input.shape)}). This will likely lead to incorrect results due to broadcasting. "
                      "Please ensure they have the same size.", UserWarning, stacklevel=3)
        if expand:
            input, target = ops.broadcast_arrays(input, target)
    if weight is not None and tuple(_tensor_of(weight).shape) != tuple(input.shape):
        raise ValueError("Weights and input must have the same size.")
    loss = loss_of(ops.abs(input - target))
    if weight is not None:
        loss = loss * _tensor_of(weight)
    return loss if reduction == "none" else ops.sum(loss) if reduction == "sum" else ops.mean(loss)


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """``|input - target|``, averaged, summed or kept per element (torch's ``nn.functional.l1_loss``)."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    return _pointwise_loss(lambda d: d, input, target, reduction, weight, expand=True)


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
    return loss / input.shape[0] if reduction == "batchmean" and input.ndim != 0 else loss


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
    if target.shape != input.shape:
        raise ValueError(f"Using a target size ({size_repr(target.shape)}) that is different to the input size "
                         f"({size_repr(input.shape)}) is deprecated. Please ensure they have the same size.")
    if weight is None:
        return _bce_p.bind(input, target, reduction=reduction, n=input.numel())
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
    if tuple(var.shape) != tuple(input.shape):
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
    return _soft_margin_p.bind(input, target, reduction=reduction, n=input.numel())


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
