"""torch's connectionist temporal classification loss (``F.ctc_loss``, ``nn.CTCLoss``) as one primitive with its
own VJP, as torch's native ``_ctc_loss`` and ``_ctc_loss_backward`` are: the log-space alpha recursion (and, in
the backward, the beta recursion) runs inside one task per chunk of the batch, in NumPy functions that dispatch on
the chunk (so cupy chunks stay on the device), vectorised over the samples and the extended label positions; the
only Python loop is over time.  A recursion of recorded ops per time step would record ``T`` steps of a few ops
each (a 50-step sample took minutes).

>>> log_probs = F.log_softmax(dg.randn(50, 4, 20, chunks=(50, 2, 20)), 2)
>>> targets = dg.tensor(np.random.default_rng(0).integers(1, 20, (4, 10)))
>>> loss = F.ctc_loss(log_probs, targets, (50, 50, 40, 50), (10, 8, 9, 10))
"""
from __future__ import annotations

import dask.array as da
import numpy as np
from dask.array.utils import meta_from_array

from .. import ops
from .._repr import in_memory_values
from .._tensor import Tensor
from ..graph import primitive
from ..ops._util import TORCH_TYPE_NAMES, as_tensor

_CHECKED = " (while checking arguments for ctc_loss_allocate_outputs)"
_SIGNATURES = (
    " * (Tensor log_probs, Tensor targets, tuple of ints input_lengths, tuple of ints target_lengths, int blank = 0, "
    "int reduction = at::Reduction::Mean, bool zero_infinity = False)\n"
    " * (Tensor log_probs, Tensor targets, Tensor input_lengths, Tensor target_lengths, int blank = 0, "
    "int reduction = at::Reduction::Mean, bool zero_infinity = False)")


# ------------------------------------------------------------------ the kernels (one chunk of the batch)
def _on(block, like):
    """``block`` as ``like``'s array type (host lengths beside device log-probabilities)."""
    return block if type(block) is type(like) else np.array(block, like=like)


def _padded_targets(lp, targets, starts, tl, width, blank):
    """``(n, width)`` labels of this chunk's samples, ``blank`` past each one's length.  ``starts``: each
    sample's first label in ``targets`` (its row of a padded ``(n, S)`` layout, or its offset in the 1-d
    concatenation), None for the padded layout."""
    pos = np.arange(width, like=lp)
    inside = pos[None, :] < tl[:, None]
    if width == 0 or targets.size == 0:
        return np.full_like(lp, blank, shape=(tl.shape[0], width), dtype=np.int64)
    if starts is None:
        labels = targets[:, :width]
    else:
        at = np.where(inside, starts[:, None] + pos[None, :], 0)
        labels = np.take(targets, np.minimum(at, targets.shape[0] - 1))
    labels = labels.astype(np.int64)
    outside = inside & ((labels < 0) | (labels >= lp.shape[2]))
    if outside.any():
        raise IndexError(f"Target {int(labels[outside][0])} is out of bounds.")
    return np.where(inside, labels, blank)


def _extended(lp, labels, tl, blank):
    """The extended labels ``l'`` (blank, l1, blank, l2, ..., blank), which positions each sample reaches
    (``s <= 2 * length``) and where the skip ``s - 2 -> s`` is allowed (``l'[s] != l'[s - 2]``)."""
    n, width = labels.shape
    ext = np.full_like(labels, blank, shape=(n, 2 * width + 1))
    ext[:, 1::2] = labels
    s = np.arange(2 * width + 1, like=lp)
    valid = s[None, :] <= 2 * tl[:, None]
    skip = np.zeros_like(valid)
    skip[:, 2:] = ext[:, 2:] != ext[:, :-2]
    return ext, valid, skip


def _shifted(a, k, fill):
    """``a`` moved ``k`` places along its last axis (right for ``k > 0``), ``fill`` where nothing came."""
    out = np.full_like(a, fill)
    if k > 0:
        out[:, k:] = a[:, :-k]
    else:
        out[:, :k] = a[:, -k:]
    return out


def _log_sum3(a, b, c):
    """torch's ``log(exp(a - m) + exp(b - m) + exp(c - m)) + m``, ``m`` the largest (0 when all are -inf)."""
    m = np.maximum(np.maximum(a, b), c)
    m = np.where(m == -np.inf, 0.0, m)
    return np.log(np.exp(a - m) + np.exp(b - m) + np.exp(c - m)) + m


def _alphas(lp, ext, valid, skip, il):
    """``log_alpha`` (T, n, 2 width + 1): torch's eq. (6)-(7) of Graves et al., rows past a sample's input
    length -inf."""
    T = lp.shape[0]
    picked = np.take_along_axis(lp, np.broadcast_to(ext[None], (T,) + ext.shape), axis=2)
    alpha = np.full_like(picked, -np.inf)
    s = np.arange(ext.shape[1], like=lp)
    alpha[0] = np.where((s[None, :] < 2) & valid & (il[:, None] > 0), picked[0], -np.inf)
    for t in range(1, T):
        prev = alpha[t - 1]
        la3 = np.where(skip, _shifted(prev, 2, -np.inf), -np.inf)
        new = _log_sum3(prev, _shifted(prev, 1, -np.inf), la3) + picked[t]
        alpha[t] = np.where(valid & (t < il[:, None]), new, -np.inf)
    return alpha, picked


def _nll(alpha, tl, il, width):
    """The negative log-likelihood from the last row of each sample: ``-logaddexp`` of its last two alphas
    (the last alone for an empty target; 0 or inf for an empty input)."""
    last = np.take_along_axis(alpha, np.maximum(il - 1, 0)[None, :, None], axis=0)[0]
    end = np.minimum(2 * tl, 2 * width)
    l1 = np.take_along_axis(last, end[:, None], axis=1)[:, 0]
    l2 = np.take_along_axis(last, np.maximum(end - 1, 0)[:, None], axis=1)[:, 0]
    l2 = np.where(tl > 0, l2, -np.inf)
    m = np.maximum(l1, l2)
    m = np.where(m == -np.inf, 0.0, m)
    nll = -(np.log(np.exp(l1 - m) + np.exp(l2 - m)) + m)
    nll = np.where(tl > width, np.inf, nll)  # (longer than the input: no alignment, never reached)
    return np.where(il == 0, np.where(tl == 0, 0.0, np.inf), nll).astype(alpha.dtype)


def _check_lengths(T, width, padded, il, tl, starts, index, total, n):
    """torch's checks of length values that were not on the client (lazy length tensors), raised by the task."""
    if (tl < 0).any():
        raise RuntimeError(f"Expected target_lengths to have value at least 0, but got value {int(tl[tl < 0][0])}"
                           + _CHECKED)
    if padded and (tl > width).any():
        raise RuntimeError(f"Expected tensor to have size at least {int(tl.max())} at dimension 1, but got size "
                           f"{width} for argument #2 'targets'" + _CHECKED)
    if not padded and index.size and int(index[-1]) == n - 1 and int(starts[-1] + tl[-1]) != total:
        raise RuntimeError(f"Expected tensor to have size {int(starts[-1] + tl[-1])} at dimension 0, but got size "
                           f"{total} for argument #2 'targets'" + _CHECKED)
    if (il < 0).any():
        raise RuntimeError(f"Expected input_lengths to have value at least 0, but got value {int(il[il < 0][0])}"
                           + _CHECKED)
    if (il > T).any():
        raise RuntimeError(f"Expected input_lengths to have value at most {T}, but got value {int(il[il > T][0])}"
                           + _CHECKED)


def _prepared(lp, targets, starts, il, tl, index, *, blank, width, padded, n):
    il, tl = _on(il, lp).astype(np.int64), _on(tl, lp).astype(np.int64)
    targets = _on(targets, lp)
    starts = None if padded else _on(starts, lp)
    _check_lengths(lp.shape[0], width, padded, il, tl, starts, index, targets.shape[-1], n)
    labels = _padded_targets(lp, targets, starts, tl, width, blank)
    ext, valid, skip = _extended(lp, labels, tl, blank)
    if not padded:  # (a target longer than the width, only when the width is the input length: unreachable)
        valid = valid & (tl[:, None] <= width)
    return il, tl, ext, valid, skip


def ctc_forward_block(lp, targets, starts, il, tl, index, *, blank, width, padded, n):
    """The negative log-likelihood (n,) of one chunk's samples: torch's ``ctc_loss_cpu_template``."""
    with np.errstate(all="ignore"):  # (-inf - -inf where no path reaches, as torch computes it)
        il, tl, ext, valid, skip = _prepared(lp, targets, starts, il, tl, index, blank=blank, width=width,
                                             padded=padded, n=n)
        alpha, _ = _alphas(lp, ext, valid, skip, il)
        return _nll(alpha, tl, il, width)


def ctc_backward_block(g, lp, nll, targets, starts, il, tl, index, *, blank, width, padded, n, zero_infinity):
    """The gradient (T, n, C) of one chunk's log-probabilities: torch's ``ctc_loss_backward_cpu_template``, its
    ``(exp(lp) - exp(log_sum_s(alpha beta) + nll - lp)) * g`` (which is not the textbook gradient where the
    log-probabilities are not normalised), zero past each input length and, with ``zero_infinity``, for an
    infinite loss.  The alphas are computed again rather than kept from the forward."""
    with np.errstate(all="ignore"):
        il, tl, ext, valid, skip = _prepared(lp, targets, starts, il, tl, index, blank=blank, width=width,
                                             padded=padded, n=n)
        alpha, picked = _alphas(lp, ext, valid, skip, il)
        T, C = lp.shape[0], lp.shape[2]
        s = np.arange(ext.shape[1], like=lp)
        at_end = ((s[None, :] == 2 * tl[:, None]) | ((s[None, :] == 2 * tl[:, None] - 1) & (tl[:, None] > 0)))
        at_end = at_end & valid
        # torch assigns the last row's two entries in turn: a target label equal to blank overwrites blank's
        last_blank = np.take_along_axis(ext, np.clip(2 * tl - 1, 0, 2 * width)[:, None], axis=1)[:, 0]
        end_kept = at_end & ~((s[None, :] == 2 * tl[:, None]) & (tl[:, None] > 0) & (last_blank[:, None] == blank))
        chars = ext[:, :, None] == np.arange(C, like=lp)[None, None, :]  # (n, S', C): which label each s is
        grad = np.zeros_like(lp)
        beta = np.full_like(alpha[0], -np.inf)
        for t in range(T - 1, -1, -1):
            lb3 = np.where(_shifted(skip, -2, False), _shifted(beta, -2, -np.inf), -np.inf)
            rec = _log_sum3(beta, _shifted(beta, -1, -np.inf), lb3) + picked[t]
            first = (il - 1 == t)[:, None]
            beta = np.where(first, np.where(at_end, picked[t], -np.inf),
                            np.where(valid & (t < il[:, None] - 1), rec, -np.inf))
            ab = alpha[t] + beta
            ab = np.where(first & ~end_kept, -np.inf, ab)
            per_char = np.where(chars, ab[:, :, None], -np.inf)  # log-sum over the positions of each label
            m = per_char.max(axis=1)
            m = np.where(m == -np.inf, 0.0, m)
            collected = np.log(np.exp(per_char - m[:, None, :]).sum(axis=1)) + m
            row = (np.exp(lp[t]) - np.exp(collected + nll[:, None] - lp[t])) * g[:, None]
            grad[t] = np.where((t < il)[:, None], row, 0.0)
        if zero_infinity:
            grad = np.where((nll == np.inf)[None, :, None], 0.0, grad)
        return grad.astype(lp.dtype, copy=False)


# ------------------------------------------------------------------ the primitives (dask arrays)
def _aligned(lp, targets, il, tl, padded):
    """The operands of the blockwise kernels, each with its index: ``lp`` one chunk on time and classes, its batch
    chunks kept, and aligned on them the targets (a 1-d concatenation whole, with each sample's offset in it),
    the lengths and each sample's position in the batch."""
    lp = lp.rechunk({0: -1, 2: -1})
    rows = lp.chunks[1]
    il, tl = il.reshape(-1).rechunk((rows,)), tl.reshape(-1).rechunk((rows,))
    index = da.arange(lp.shape[1], chunks=(rows,))
    if padded:
        targets, starts = (targets.rechunk((rows, -1)), "nk"), (da.zeros(lp.shape[1], np.int64, chunks=(rows,)), "n")
    else:
        offsets = da.cumsum(tl.astype(np.int64)) - tl.astype(np.int64)
        targets, starts = (targets.rechunk(-1), "k"), (offsets.rechunk((rows,)), "n")
    return (lp, "tnc"), targets, starts, (il, "n"), (tl, "n"), (index, "n")


def _ctc_array(lp, targets, il, tl, *, blank, width, padded, zero_infinity):
    operands = _aligned(lp, targets, il, tl, padded)
    lp = operands[0][0]
    return da.blockwise(ctc_forward_block, "n", *[v for pair in operands for v in pair], blank=blank, width=width,
                        padded=padded, n=lp.shape[1], concatenate=True, dtype=lp.dtype,
                        meta=meta_from_array(lp._meta, ndim=1))


def _ctc_backward_array(g, lp, nll, targets, il, tl, *, blank, width, padded, zero_infinity):
    given = lp.chunks
    operands = _aligned(lp, targets, il, tl, padded)
    lp = operands[0][0]
    rows = lp.chunks[1]
    out = da.blockwise(ctc_backward_block, "tnc", g.rechunk((rows,)), "n", lp, "tnc", nll.rechunk((rows,)), "n",
                       *[v for pair in operands[1:] for v in pair], blank=blank, width=width, padded=padded,
                       n=lp.shape[1], zero_infinity=zero_infinity, concatenate=True, dtype=lp.dtype, meta=lp._meta)
    return out.rechunk(given)


ctc_p = primitive("ctc_loss", torch="CtcLossBackward0", impl=_ctc_array, args=("lp", "targets", "il", "tl"),
                  save=("lp", "r", "targets", "il", "tl"), consts=("targets", "il", "tl"))
ctc_p.vjp(lambda g, s, *, blank, width, padded, zero_infinity: (
    ctc_backward_p.bind(g, s.lp, s.r, s.targets, s.il, s.tl, node="NotImplemented", blank=blank, width=width,
                        padded=padded, zero_infinity=zero_infinity),))


def _no_double_backward(g, s, **params):
    raise RuntimeError("derivative for aten::_ctc_loss_backward is not implemented")


# torch's _ctc_loss_backward has no derivative: its node (NotImplemented, named when it binds) raises when reached
ctc_backward_p = primitive("ctc_loss_backward", impl=_ctc_backward_array,
                           args=("g", "lp", "nll", "targets", "il", "tl"), consts=("targets", "il", "tl"))
ctc_backward_p.vjp(_no_double_backward)


# ------------------------------------------------------------------ the public function
def _kind(x):
    """An argument's type as torch's parser names it (``Tensor``, ``list``, ``numpy.ndarray``)."""
    if isinstance(x, Tensor):
        return "Tensor"
    t = type(x)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__name__}"


def _lengths(input_lengths, target_lengths, args):
    """The lengths as (values on the client or None, tensor) pairs: torch's overloads take both as tuples of
    ints or both as integer tensors (a tensor's values are read where they are in memory here, else checked by
    the tasks that read them)."""
    tensors = [isinstance(x, Tensor) for x in (input_lengths, target_lengths)]
    # (flat tuples or lists of ints only: torch's parser refuses a NumPy array and a nested list)
    sequences = [isinstance(x, (tuple, list)) and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                                                      for v in x)
                 for x in (input_lengths, target_lengths)]
    if not (all(tensors) or all(sequences)):
        got = ", ".join(_kind(a) for a in args)
        raise TypeError(f"ctc_loss() received an invalid combination of arguments - got ({got}), but expected one "
                        f"of:\n{_SIGNATURES}")
    out = []
    for name, x in (("input_lengths", input_lengths), ("target_lengths", target_lengths)):
        if isinstance(x, Tensor):
            if x.dtype.kind not in "iu":
                raise RuntimeError(f"{name} must be integral")
            values = in_memory_values(x.array)
            values = None if values is None else values.reshape(-1).astype(np.int64)
            out.append((values, ops.reshape(x.detach(), (-1,))))
        else:
            values = np.asarray(x, dtype=np.int64).reshape(-1)
            out.append((values, Tensor._make(da.from_array(values, chunks=-1))))
    return out


def _check_host(T, N, padded, targets, il, tl):
    """torch's ``ctc_loss_allocate_outputs`` checks of the lengths, in its order; ``il`` or ``tl`` None where they
    are lazy (their tasks check them)."""
    for v in [] if tl is None else tl.tolist():
        if v < 0:
            raise RuntimeError(f"Expected target_lengths to have value at least 0, but got value {v}" + _CHECKED)
    if not padded and tl is not None and int(tl.sum()) != targets.shape[0]:
        raise RuntimeError(f"Expected tensor to have size {int(tl.sum())} at dimension 0, but got size "
                           f"{targets.shape[0]} for argument #2 'targets'" + _CHECKED)
    if padded and targets.shape[0] != N:
        raise RuntimeError(f"Expected tensor to have size {N} at dimension 0, but got size {targets.shape[0]} for "
                           "argument #2 'targets'" + _CHECKED)
    if padded and tl is not None and int(tl.max()) > targets.shape[1]:
        raise RuntimeError(f"Expected tensor to have size at least {int(tl.max())} at dimension 1, but got size "
                           f"{targets.shape[1]} for argument #2 'targets'" + _CHECKED)
    for v in [] if il is None else il.tolist():
        if v < 0:
            raise RuntimeError(f"Expected input_lengths to have value at least 0, but got value {v}" + _CHECKED)
        if v > T:
            raise RuntimeError(f"Expected input_lengths to have value at most {T}, but got value {v}" + _CHECKED)


def _check_labels(targets, tl, padded, C):
    """A label outside ``[0, C)`` refused on the client where the targets and their lengths are in memory (torch's
    kernel reads past the row: its loss is whatever memory holds; the tasks check lazy targets)."""
    values = in_memory_values(targets.array)
    if values is None or tl is None:
        return
    used = values[np.arange(values.shape[1])[None, :] < tl[:, None]] if padded else values
    used = used.astype(np.int64)
    bad = used[(used < 0) | (used >= C)]
    if bad.size:
        raise IndexError(f"Target {int(bad[0])} is out of bounds.")


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean", zero_infinity=False):
    """The connectionist temporal classification loss (torch's ``nn.functional.ctc_loss``): the negative
    log-likelihood of each target under all alignments of ``log_probs`` (T, N, C), or (T, C) unbatched.

    Parameters
    ----------
    log_probs : Tensor
        Log-probabilities (T, N, C) or (T, C), float32 or float64.
    targets : Tensor
        Class indices, padded (N, S) or concatenated (sum(target_lengths),).
    input_lengths, target_lengths : Tensor or tuple of int
        Each sample's input and target length (both tensors of an integer dtype, or both sequences).
    blank : int
        The blank label.
    reduction : str
        ``'none'``, ``'sum'``, or ``'mean'``: each loss divided by its target length (at least 1), averaged.
    zero_infinity : bool
        Infinite losses (targets no alignment reaches) and their gradients set to zero.

    Returns
    -------
    Tensor
        The losses (N,) or the reduced loss.

    Notes
    -----
    One primitive (node ``CtcLossBackward0``) whose forward and gradient (torch's formula, also where
    ``log_probs`` are not normalised) run per chunk of the batch; it has no second derivative, as torch's.
    """
    if reduction not in ("mean", "sum", "none"):  # (torch's _Reduction.get_enum, before its argument parser)
        raise ValueError(f"{reduction} is not a valid value for reduction")
    args = (log_probs, targets, input_lengths, target_lengths, blank, 0, zero_infinity)
    (il, il_t), (tl, tl_t) = _lengths(input_lengths, target_lengths, args)
    lp, targets = as_tensor(log_probs), as_tensor(targets)
    batched = lp.ndim == 3
    if lp.ndim == 0:
        raise IndexError("Dimension out of range (expected to be in range of [-1, 0], but got 1)")
    x = lp if batched else ops.expand_dims(lp, 1)
    if lp.dtype not in (np.float32, np.float64):
        raise NotImplementedError(f'"ctc_loss_cpu" not implemented for \'{TORCH_TYPE_NAMES.get(lp.dtype.name)}\'')
    if lp.size == 0:
        raise RuntimeError("log_probs tensor must not be empty")
    if x.ndim != 3:
        raise RuntimeError(f"Expected 3-dimensional tensor, but got {x.ndim}-dimensional tensor for argument #1 "
                           "'log_probs'" + _CHECKED)
    if targets.ndim not in (1, 2):
        raise RuntimeError(f"Expected 1 to 2 dimensions, but got {targets.ndim}-dimensional tensor for argument #2 "
                           "'targets'" + _CHECKED)
    T, N, C = x.shape
    if not 0 <= blank < C:
        raise RuntimeError("blank must be in label range")
    if il_t.shape[0] != N:
        raise RuntimeError("input_lengths must be of size batch_size")
    if tl_t.shape[0] != N:
        raise RuntimeError("target_lengths must be of size batch_size")
    padded = targets.ndim == 2
    _check_host(T, N, padded, targets, il, tl)
    _check_labels(targets, tl, padded, C)
    if padded:
        width = targets.shape[1]
    else:
        width = int(tl.max()) if tl is not None else min(targets.shape[0], T)
    res = ctc_p.bind(x, targets.detach(), il_t, tl_t, blank=int(blank), width=int(width), padded=padded,
                     zero_infinity=bool(zero_infinity))
    if zero_infinity:
        res = ops.where(res == np.inf, 0.0, res)
    if reduction == "mean":
        if tl is not None:
            divisor = Tensor._make(da.from_array(np.maximum(tl, 1).astype(res.dtype), chunks=-1))
        else:
            divisor = ops.astype(ops.maximum(tl_t, 1), res.dtype)
        return ops.mean(res / divisor)
    if reduction == "sum":
        return ops.sum(res)
    return res if batched else ops.squeeze(res, 0)
