"""Attention: ``scaled_dot_product_attention`` and ``multi_head_attention_forward``, torch's math composed of
daskgrad ops (matmul, softmax, where), so that their gradients are the ops' own.

Heads are an axis of their own here, ``(batch, heads, length, head_dim)``, where torch's multi-head attention
folds them into the batch (``batch * heads``): the batch axis stays chunked as the input's and is never merged
with another axis; each head's products are torch's.

>>> q = dg.randn(8, 2, 5, 4, chunks=(4, 2, 5, 4))       # (N, heads, L, E), the batch in two chunks
>>> out = F.scaled_dot_product_attention(q, q, q, is_causal=True)
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from .. import ops
from .._tensor import ones, zeros
from ..graph import size_repr
from ..ops._util import TORCH_TYPE_NAMES
from ..ops.elementwise import zeros_like
from ..ops.layers import dropout_mask

_INF = float("-inf")


def _dtype_name(t):
    return TORCH_TYPE_NAMES.get(t.dtype.name, t.dtype.name).lower()


def _check_sdpa(query, key, value):
    """aten's ``validate_sdpa_input``: one dtype, two dimensions at least."""
    if not query.dtype == key.dtype == value.dtype:
        raise RuntimeError(f"Expected query, key, and value to have the same dtype, but got query.dtype: "
                           f"{_dtype_name(query)} key.dtype: {_dtype_name(key)} and value.dtype: "
                           f"{_dtype_name(value)} instead.")
    if min(query.ndim, key.ndim, value.ndim) < 2:
        raise RuntimeError(f"Expected query, key, and value to all be  at least 2 dimensional, but got query.dim: "
                           f"{query.ndim} key.dim: {key.ndim} and value.dim: {value.ndim} instead.")


def _repeat_heads(query, key, value):
    """``enable_gqa``: each key and value head (axis -3) repeated for the query heads it serves, torch's checks."""
    if query.ndim < 3:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-query.ndim}, {query.ndim - 1}], "
                         "but got -3)")
    heads = query.shape[-3]
    if heads % key.shape[-3] or heads % value.shape[-3]:
        raise RuntimeError("Number of heads in key and value must divide the number of heads in ")
    return (key.repeat_interleave(heads // key.shape[-3], -3),
            value.repeat_interleave(heads // value.shape[-3], -3))


def _dropout(weights, p):
    """``F.dropout(weights, p)`` (training): zeros with probability ``p``, the rest scaled by ``1 / (1 - p)``."""
    if p == 0.0:
        return weights
    return weights * (0.0 if p == 1 else dropout_mask(weights, p))


def _safe_softmax(scores):
    """aten's ``_safe_softmax``: softmax over the last axis, a row whose scores are all -inf (every key masked)
    zeros (softmax's would be nan), with zero gradient.  The masked rows' scores are replaced by zeros before the
    softmax, so that no nan reaches the backward pass."""
    masked = (scores == _INF).all(-1, keepdim=True)
    out = ops.softmax(ops.where(masked, 0.0, scores), -1)
    return ops.where(masked, 0.0, out)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """``softmax(query @ key.T * scale + mask) @ value`` over the last two axes, torch's math kernel: ``scale``
    ``1 / sqrt(E)`` unless given; a boolean ``attn_mask`` keeps the keys where True, a float one is added to the
    scores; ``is_causal`` keeps key ``j <= i`` for query ``i``; a query whose keys are all masked gives zeros;
    ``dropout_p`` drops attention weights (always, as torch's: pass 0.0 in eval); ``enable_gqa`` repeats the
    key and value heads (axis -3) to the query's."""
    _check_sdpa(query, key, value)
    if is_causal and attn_mask is not None:
        raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True")
    L, S = query.shape[-2], key.shape[-2]
    scale = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
    if enable_gqa:
        key, value = _repeat_heads(query, key, value)
    # torch's math kernel: both operands scaled by sqrt(|scale|) before the product (so it saves the scaled
    # copies, not the query and key: a write to them after the call leaves its backward, as torch's)
    root = math.sqrt(abs(scale))
    scores = (query * (-root if scale < 0 else root)) @ (key.transpose(-2, -1) * root)
    if is_causal:
        attn_mask = ones(L, S, dtype=bool, chunks=-1, device=query.device).tril()
    if attn_mask is not None:
        if attn_mask.dtype == bool:
            scores = ops.where(attn_mask, scores, _INF)
        else:
            scores = scores + attn_mask
    weights = _safe_softmax(scores)
    return _dropout(weights, dropout_p) @ value


# ------------------------------------------------------------------------------------- multi-head attention
def _mha_shape_check(query, key, value, key_padding_mask, attn_mask, num_heads):
    """torch's checks of the inputs' dimensions (AssertionError, its words); whether the query is batched."""
    if query.ndim == 3:
        if key.ndim != 3 or value.ndim != 3:
            raise AssertionError("For batched (3-D) `query`, expected `key` and `value` to be 3-D"
                                 f" but found {key.ndim}-D and {value.ndim}-D tensors respectively")
        if key_padding_mask is not None and key_padding_mask.ndim != 2:
            raise AssertionError("For batched (3-D) `query`, expected `key_padding_mask` to be `None` or 2-D"
                                 f" but found {key_padding_mask.ndim}-D tensor instead")
        if attn_mask is not None and attn_mask.ndim not in (2, 3):
            raise AssertionError("For batched (3-D) `query`, expected `attn_mask` to be `None`, 2-D or 3-D"
                                 f" but found {attn_mask.ndim}-D tensor instead")
        return True
    if query.ndim == 2:
        if key.ndim != 2 or value.ndim != 2:
            raise AssertionError("For unbatched (2-D) `query`, expected `key` and `value` to be 2-D"
                                 f" but found {key.ndim}-D and {value.ndim}-D tensors respectively")
        if key_padding_mask is not None and key_padding_mask.ndim != 1:
            raise AssertionError("For unbatched (2-D) `query`, expected `key_padding_mask` to be `None` or 1-D"
                                 f" but found {key_padding_mask.ndim}-D tensor instead")
        if attn_mask is not None:
            if attn_mask.ndim not in (2, 3):
                raise AssertionError("For unbatched (2-D) `query`, expected `attn_mask` to be `None`, 2-D or 3-D"
                                     f" but found {attn_mask.ndim}-D tensor instead")
            expected = (num_heads, query.shape[0], key.shape[0])
            if attn_mask.ndim == 3 and tuple(attn_mask.shape) != expected:
                raise AssertionError(f"Expected `attn_mask` shape to be {expected} but got "
                                     f"{size_repr(attn_mask.shape)}")
        return False
    raise AssertionError(f"query should be unbatched 2D or batched 3D tensor but received {query.ndim}-D query tensor")


def _canonical_mask(mask, mask_name, other_type, other_name, target_type, check_other=True):
    """torch's ``F._canonical_mask``: a boolean mask as a float one (-inf where True), other dtypes refused."""
    if mask is None:
        return None
    is_float = np.issubdtype(mask.dtype, np.floating)
    if mask.dtype != bool and not is_float:
        raise AssertionError(f"only bool and floating types of {mask_name} are supported")
    if check_other and other_type is not None and mask.dtype != other_type:
        warnings.warn(f"Support for mismatched {mask_name} and {other_name} is deprecated. Use same type for both "
                      "instead.", stacklevel=2)
    if not is_float:
        mask = zeros_like(mask, dtype=target_type).masked_fill(mask, _INF)
    return mask


def _none_or_dtype(t):
    return None if t is None else t.dtype


def _in_projection(query, key, value, weights, biases):
    return [ops.matmul(x, w.T) + b if b is not None else ops.matmul(x, w.T)
            for x, w, b in zip((query, key, value), weights, biases)]


def _pad_last(t):
    """One more key, unmasked (torch's ``pad(mask, (0, 1))``)."""
    return ops.cat([t, zeros(*t.shape[:-1], 1, dtype=t.dtype, chunks=-1, device=t.device)], -1)


def _heads(t, bsz, num_heads, head_dim, static, name):
    """(length, batch, E) -> (batch, heads, length, head_dim); or torch's ``static_k`` (batch * heads, S, hd)."""
    if static is None:
        return t.reshape(t.shape[0], bsz, num_heads, head_dim).permute(1, 2, 0, 3)
    if static.shape[0] != bsz * num_heads:
        raise AssertionError(f"expecting {name}.size(0) of {bsz * num_heads}, but got {static.shape[0]}")
    if static.shape[2] != head_dim:
        raise AssertionError(f"expecting {name}.size(2) of {head_dim}, but got {static.shape[2]}")
    return static.reshape(bsz, num_heads, static.shape[1], head_dim)


def _checked_masks(query, key, key_padding_mask, attn_mask, need_weights, is_causal):
    """torch's canonical masks and the ``is_causal`` hint's rules (attn_mask dropped where the hint replaces it)."""
    key_padding_mask = _canonical_mask(key_padding_mask, "key_padding_mask", _none_or_dtype(attn_mask), "attn_mask",
                                       query.dtype)
    if is_causal and attn_mask is None:
        raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use the Transformer module "
                           "method `generate_square_subsequent_mask` to create this mask.")
    if is_causal and key_padding_mask is None and not need_weights:
        return key_padding_mask, None, True
    attn_mask = _canonical_mask(attn_mask, "attn_mask", None, "", query.dtype, check_other=False)
    return key_padding_mask, attn_mask, is_causal and key_padding_mask is None


def _check_projections(query, key, value, embed_dim_to_check, num_heads, use_separate_proj_weight, in_proj_weight,
                       q_proj_weight, k_proj_weight, v_proj_weight):
    embed_dim = query.shape[2]
    if embed_dim != embed_dim_to_check:
        raise AssertionError(f"was expecting embedding dimension of {embed_dim_to_check}, but got {embed_dim}")
    if (embed_dim // num_heads) * num_heads != embed_dim:
        raise AssertionError(f"embed_dim {embed_dim} not divisible by num_heads {num_heads}")
    if use_separate_proj_weight:
        if tuple(key.shape[:2]) != tuple(value.shape[:2]):
            raise AssertionError(f"key's sequence and batch dims {size_repr(key.shape[:2])} do not match value's "
                                 f"{size_repr(value.shape[:2])}")
        for name, w in (("q", q_proj_weight), ("k", k_proj_weight), ("v", v_proj_weight)):
            if w is None:
                raise AssertionError(f"use_separate_proj_weight is True but {name}_proj_weight is None")
    else:
        if tuple(key.shape) != tuple(value.shape):
            raise AssertionError(f"key shape {size_repr(key.shape)} does not match value shape "
                                 f"{size_repr(value.shape)}")
        if in_proj_weight is None:
            raise AssertionError("use_separate_proj_weight is False but in_proj_weight is None")


def _attn_mask_4d(attn_mask, bsz, num_heads, tgt_len, src_len):
    """torch's 2-D (L, S) or 3-D (batch * heads, L, S) attn_mask checks; as (1 or batch, 1 or heads, L, S)."""
    if attn_mask.ndim == 2:
        if tuple(attn_mask.shape) != (tgt_len, src_len):
            raise RuntimeError(f"The shape of the 2D attn_mask is {size_repr(attn_mask.shape)}, but should be "
                               f"{(tgt_len, src_len)}.")
        return attn_mask.reshape(1, 1, tgt_len, src_len)
    if attn_mask.ndim == 3:
        if tuple(attn_mask.shape) != (bsz * num_heads, tgt_len, src_len):
            raise RuntimeError(f"The shape of the 3D attn_mask is {size_repr(attn_mask.shape)}, but should be "
                               f"{(bsz * num_heads, tgt_len, src_len)}.")
        return attn_mask.reshape(bsz, num_heads, tgt_len, src_len)
    raise RuntimeError(f"attn_mask's dimension {attn_mask.ndim} is not supported")


def multi_head_attention_forward(query, key, value, embed_dim_to_check, num_heads, in_proj_weight, in_proj_bias,
                                 bias_k, bias_v, add_zero_attn, dropout_p, out_proj_weight, out_proj_bias,
                                 training=True, key_padding_mask=None, need_weights=True, attn_mask=None,
                                 use_separate_proj_weight=False, q_proj_weight=None, k_proj_weight=None,
                                 v_proj_weight=None, static_k=None, static_v=None, average_attn_weights=True,
                                 is_causal=False):
    """torch's ``F.multi_head_attention_forward``: inputs (L, N, E) (or unbatched (L, E)), projections, heads,
    masks (``key_padding_mask`` (N, S) and ``attn_mask`` (L, S) or (N * heads, L, S), boolean True = masked, or
    float, added), ``bias_k``/``bias_v`` and ``add_zero_attn`` (one more key each), the output projection; the
    attention weights (averaged over the heads unless not ``average_attn_weights``) when ``need_weights``,
    else None (then torch's ``scaled_dot_product_attention``, whose fully masked rows are zeros).

    Long because it is torch's function, one step after another: checks, masks, projections, extra keys, the
    two ways of attending."""
    is_batched = _mha_shape_check(query, key, value, key_padding_mask, attn_mask, num_heads)
    if not is_batched:
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.unsqueeze(0)
    tgt_len, bsz, embed_dim = query.shape
    key_padding_mask, attn_mask, is_causal = _checked_masks(query, key, key_padding_mask, attn_mask, need_weights,
                                                            is_causal)
    _check_projections(query, key, value, embed_dim_to_check, num_heads, use_separate_proj_weight, in_proj_weight,
                       q_proj_weight, k_proj_weight, v_proj_weight)
    head_dim = embed_dim // num_heads
    if use_separate_proj_weight:
        weights = (q_proj_weight, k_proj_weight, v_proj_weight)
    else:
        weights = (in_proj_weight[:embed_dim], in_proj_weight[embed_dim:2 * embed_dim], in_proj_weight[2 * embed_dim:])
    biases = (None,) * 3 if in_proj_bias is None else (in_proj_bias[:embed_dim],
                                                       in_proj_bias[embed_dim:2 * embed_dim],
                                                       in_proj_bias[2 * embed_dim:])
    q, k, v = _in_projection(query, key, value, weights, biases)
    if attn_mask is not None:
        attn_mask = _attn_mask_4d(attn_mask, bsz, num_heads, tgt_len, key.shape[0])
    if bias_k is not None and bias_v is not None:
        if static_k is not None:
            raise AssertionError("bias cannot be added to static key.")
        if static_v is not None:
            raise AssertionError("bias cannot be added to static value.")
        k = ops.cat([k, bias_k.expand(1, bsz, embed_dim)])
        v = ops.cat([v, bias_v.expand(1, bsz, embed_dim)])
        attn_mask = None if attn_mask is None else _pad_last(attn_mask)
        key_padding_mask = None if key_padding_mask is None else _pad_last(key_padding_mask)
    elif bias_k is not None:
        raise AssertionError("bias_k is set but bias_v is None")
    elif bias_v is not None:
        raise AssertionError("bias_v is set but bias_k is None")
    q = _heads(q, bsz, num_heads, head_dim, None, "")
    k = _heads(k, bsz, num_heads, head_dim, static_k, "static_k")
    v = _heads(v, bsz, num_heads, head_dim, static_v, "static_v")
    if add_zero_attn:
        k = ops.cat([k, zeros(*k.shape[:2], 1, head_dim, dtype=k.dtype, chunks=-1, device=k.device)], 2)
        v = ops.cat([v, zeros(*v.shape[:2], 1, head_dim, dtype=v.dtype, chunks=-1, device=v.device)], 2)
        attn_mask = None if attn_mask is None else _pad_last(attn_mask)
        key_padding_mask = None if key_padding_mask is None else _pad_last(key_padding_mask)
    src_len = k.shape[2]
    if key_padding_mask is not None:
        _check_key_padding_mask(key_padding_mask, src_len, bsz)
        key_padding_mask = key_padding_mask.reshape(bsz, 1, 1, src_len)
        attn_mask = key_padding_mask if attn_mask is None else attn_mask + key_padding_mask
    if not training:
        dropout_p = 0.0
    if need_weights:
        if is_causal and attn_mask is None:
            raise AssertionError("FIXME: is_causal not implemented for need_weights")
        scores = (q * math.sqrt(1.0 / float(head_dim))) @ k.transpose(-2, -1)
        if attn_mask is not None:
            scores = attn_mask + scores
        weights = ops.softmax(scores, -1)
        weights = _dropout(weights, dropout_p)
        out = weights @ v
    else:
        weights = None
        out = scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal)
    out = out.permute(2, 0, 1, 3).reshape(tgt_len, bsz, embed_dim) @ out_proj_weight.T
    if out_proj_bias is not None:
        out = out + out_proj_bias
    if weights is not None and average_attn_weights:
        weights = weights.mean(1)
    if not is_batched:
        out = out.squeeze(1)
        weights = None if weights is None else weights.squeeze(0)
    return out, weights


def _check_key_padding_mask(key_padding_mask, src_len, bsz):
    if key_padding_mask.shape[0] != bsz:
        raise AssertionError(f"Expected key_padded_mask.shape[0] to be {bsz}, but got {key_padding_mask.shape[0]}")
    if key_padding_mask.shape[1] != src_len:
        raise AssertionError(f"Expected key_padded_mask.shape[1] to be {src_len}, but got "
                             f"{key_padding_mask.shape[1]}")
