"""Loss modules over the functional losses, with torch's arguments (and their positional order).

>>> loss = nn.CrossEntropyLoss(ignore_index=-100, label_smoothing=0.1)(logits, labels)
"""
from __future__ import annotations

import dataclasses
import math
import warnings

from . import functional as F
from .functional import _tensor_of
from .layers import Linear
from .module import Module


class _Loss(Module):
    def __init__(self, size_average=None, reduce=None, reduction="mean"):
        super().__init__()
        self.reduction = F.legacy_reduction(size_average, reduce, reduction)  # checked when called, as torch


class _WeightedLoss(_Loss):
    """A loss with a per-class ``weight``, held as a buffer (in ``state_dict``, as torch's)."""

    def __init__(self, weight=None, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", None if weight is None else _tensor_of(weight))


class MSELoss(_Loss):
    """The squared error of ``input`` against ``target`` (torch's ``nn.MSELoss``; ``reduction`` ``'mean'``,
    ``'sum'`` or ``'none'``)."""
    def forward(self, input, target):
        return F.mse_loss(input, target, reduction=self.reduction)


class L1Loss(_Loss):
    """The absolute error of ``input`` against ``target`` (torch's ``nn.L1Loss``)."""
    def forward(self, input, target):
        return F.l1_loss(input, target, reduction=self.reduction)


class SmoothL1Loss(_Loss):
    """torch's ``nn.SmoothL1Loss``: squared below ``beta``, absolute above."""
    def __init__(self, size_average=None, reduce=None, reduction="mean", beta=1.0):
        super().__init__(size_average, reduce, reduction)
        self.beta = beta

    def forward(self, input, target):
        return F.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class HuberLoss(_Loss):
    """torch's ``nn.HuberLoss``: squared below ``delta``, ``delta`` times absolute above."""
    def __init__(self, reduction="mean", delta=1.0):
        if not isinstance(delta, (float, int)):
            raise TypeError(f"delta must be a float or int, got: {type(delta)}")
        super().__init__(reduction=reduction)
        self.delta = delta

    def forward(self, input, target):
        return F.huber_loss(input, target, reduction=self.reduction, delta=self.delta)


class CrossEntropyLoss(_WeightedLoss):
    """Logits (N, C) against class indices (N,) or class probabilities (N, C).  Targets equal to
    ``ignore_index`` are skipped (not counted in the mean); ``weight`` weighs classes; ``label_smoothing``
    mixes the targets with the uniform distribution."""

    def __init__(self, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean",
                 label_smoothing=0.0):
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing

    def forward(self, input, target):
        return F.cross_entropy(input, target, weight=self.weight, ignore_index=self.ignore_index,
                               reduction=self.reduction, label_smoothing=self.label_smoothing)


@dataclasses.dataclass(slots=True, frozen=True)
class LinearCrossEntropyOptions:
    """torch's ``nn.LinearCrossEntropyOptions``: the settings of torch's chunked (memory-saving) path of
    :func:`~daskgrad.nn.functional.linear_cross_entropy`, checked as torch checks them when made.  daskgrad
    accepts them and computes the same loss without reading them: its logits are made and reduced chunk by
    chunk of the batch anyway.

    Parameters
    ----------
    allow_retain_graph : bool, default False
        torch's: whether its chunked backward may run twice.
    batch_chunk_size : int, optional
        torch's rows per chunk (a positive int or None).
    chunking_method : str, optional
        ``'auto'`` (default), ``'aspect_ratio'``, ``'aspect_ratio:N'`` (N >= 1) or None.
    acc_policy : str, default "auto"
        ``'auto'``, ``'accurate'``, ``'balanced'`` or ``'compact'``.
    acc_dtype : dtype, optional
        float16, bfloat16, float32, float64 or None.

    Examples
    --------
    >>> nn.LinearCrossEntropyOptions(batch_chunk_size=64).batch_chunk_size
    64
    """

    allow_retain_graph: bool = False
    batch_chunk_size: int | None = None
    chunking_method: str | None = "auto"
    acc_policy: str = "auto"
    acc_dtype: object = None

    def __post_init__(self):
        if self.acc_policy not in {"auto", "accurate", "balanced", "compact"}:
            raise ValueError(f"invalid acc_policy: {self.acc_policy!r}")
        if self.chunking_method is not None and self.chunking_method != "auto":
            name, sep, factor = self.chunking_method.partition(":")
            if not sep:
                factor = "1"
            if not (name == "aspect_ratio" and factor.isdigit() and int(factor) > 0):
                raise ValueError(f"invalid chunking_method: {self.chunking_method!r}")
        if not (self.batch_chunk_size is None
                or (isinstance(self.batch_chunk_size, int) and self.batch_chunk_size > 0)):
            raise ValueError(f"batch_chunk_size must be positive int or None, got {self.batch_chunk_size!r}")
        if self.acc_dtype is not None and str(self.acc_dtype).removeprefix("torch.") not in {
                "float16", "bfloat16", "float32", "float64"}:
            raise ValueError(f"acc_dtype must be one of {{None, torch.float16, torch.bfloat16, torch.float32, "
                             f"torch.float64}}, got {self.acc_dtype!r}. Pass acc_dtype=None to let the op pick "
                             "automatically.")


class LinearCrossEntropyLoss(_WeightedLoss):
    """torch's ``nn.LinearCrossEntropyLoss``: the cross entropy of ``input`` mapped to logits by the module's own
    :class:`Linear` (``self.linear``, weight ``(C * prod(out_features), in_features)``, no bias by default)
    against ``target`` (:func:`~daskgrad.nn.functional.linear_cross_entropy`).

    Parameters
    ----------
    in_features : int
        The size of each input sample.
    num_classes : int
        The number of classes ``C``.
    out_features : tuple of int, default ()
        ``(d_1, ..., d_K)`` for a K-dimensional loss.
    bias : bool, default False
        Whether the linear map adds a bias.
    device, dtype : optional
        The linear weight's.
    reduction : str, default "mean"
        ``'none'``, ``'mean'`` or ``'sum'``.
    weight : Tensor, optional
        Per-class weights, ``(C,)`` (a buffer, as torch's).
    ignore_index : int, optional
        A class index whose targets are skipped (-100 when None).
    label_smoothing : float, default 0.0
        In ``[0, 1]``.
    options : LinearCrossEntropyOptions, optional
        torch's chunking options (its memory-saving path, the same loss): kept, not read; daskgrad's logits are
        made and reduced chunk by chunk of the batch anyway.

    Examples
    --------
    >>> loss = nn.LinearCrossEntropyLoss(4, 3)
    >>> loss(x, y).shape
    ()
    """

    def __init__(self, in_features, num_classes, *, out_features=(), bias=False, device=None, dtype=None,
                 reduction="mean", weight=None, ignore_index=None, label_smoothing=0.0, options=None):
        if weight is not None and tuple(weight.shape) != (num_classes,):
            raise RuntimeError(f"expected weight shape to be {(num_classes,)}, got {tuple(weight.shape)}")
        if label_smoothing < 0 or label_smoothing > 1.0:
            raise RuntimeError(f"expected label_smoothing to be in range [0, 1], got {label_smoothing}")
        super().__init__(weight=weight, reduction=reduction)
        self.num_classes, self.out_features = num_classes, out_features
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing
        # a 2-D weight (Linear's), reshaped for each forward, as torch's
        self.linear = Linear(in_features, math.prod(out_features, start=num_classes), bias=bias, device=device,
                             dtype=dtype)
        self.options = options

    def forward(self, input, target):
        linear_weight = self.linear.weight.reshape(self.num_classes, *self.out_features, self.linear.in_features)
        linear_bias = None if self.linear.bias is None else \
            self.linear.bias.reshape(self.num_classes, *self.out_features)
        return F.linear_cross_entropy(input, linear_weight, target, linear_bias=linear_bias, weight=self.weight,
                                      reduction=self.reduction, ignore_index=self.ignore_index,
                                      label_smoothing=self.label_smoothing, options=self.options)

    def extra_repr(self):
        return (f"in_features={self.linear.in_features}, num_classes={self.num_classes}, "
                f"out_features={self.out_features}, bias={self.linear.bias is not None}, reduction={self.reduction}, "
                f"ignore_index={self.ignore_index}, label_smoothing={self.label_smoothing}, options={self.options}")


class NLLLoss(_WeightedLoss):
    """Log-probabilities (N, C) against class indices, with ``weight`` and ``ignore_index``."""

    def __init__(self, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index

    def forward(self, input, target):
        return F.nll_loss(input, target, weight=self.weight, ignore_index=self.ignore_index, reduction=self.reduction)


class BCEWithLogitsLoss(_Loss):
    """Binary cross entropy from logits; ``weight`` scales each element, ``pos_weight`` the positive term."""

    def __init__(self, weight=None, size_average=None, reduce=None, reduction="mean", pos_weight=None):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", None if weight is None else _tensor_of(weight))
        self.register_buffer("pos_weight", None if pos_weight is None else _tensor_of(pos_weight))

    def forward(self, input, target):
        return F.binary_cross_entropy_with_logits(input, target, self.weight, pos_weight=self.pos_weight,
                                                  reduction=self.reduction)


class KLDivLoss(_Loss):
    """The Kullback-Leibler divergence of ``target`` from ``input`` (log-probabilities), torch's ``nn.KLDivLoss``
    (``reduction='batchmean'`` divides by the batch size; ``log_target``: the target is log-probabilities too)."""

    def __init__(self, size_average=None, reduce=None, reduction="mean", log_target=False):
        super().__init__(size_average, reduce, reduction)
        self.log_target = log_target

    def forward(self, input, target):
        return F.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)


class BCELoss(_WeightedLoss):
    """Binary cross entropy of probabilities ``input`` against ``target`` (torch's ``nn.BCELoss``; ``weight``
    scales each element)."""

    def forward(self, input, target):
        return F.binary_cross_entropy(input, target, weight=self.weight, reduction=self.reduction)


class PoissonNLLLoss(_Loss):
    """torch's ``nn.PoissonNLLLoss``: the negative log likelihood of ``target`` under Poisson(``input``)
    (``log_input``: the input is the log of the rate; ``full``: with Stirling's term)."""

    def __init__(self, log_input=True, full=False, size_average=None, eps=1e-8, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.log_input, self.full, self.eps = log_input, full, eps

    def forward(self, log_input, target):
        return F.poisson_nll_loss(log_input, target, log_input=self.log_input, full=self.full, eps=self.eps,
                                  reduction=self.reduction)


class GaussianNLLLoss(_Loss):
    """torch's ``nn.GaussianNLLLoss``: the negative log likelihood of ``target`` under N(``input``, ``var``)."""

    def __init__(self, *, full=False, eps=1e-6, reduction="mean"):
        super().__init__(None, None, reduction)
        self.full, self.eps = full, eps

    def forward(self, input, target, var):
        return F.gaussian_nll_loss(input, target, var, full=self.full, eps=self.eps, reduction=self.reduction)


class CTCLoss(_Loss):
    """torch's ``nn.CTCLoss``: the connectionist temporal classification loss of log-probabilities ``(T, N, C)``
    (or ``(T, C)``) against padded ``(N, S)`` or concatenated targets (see :func:`daskgrad.nn.functional.ctc_loss`).
    """

    def __init__(self, blank=0, reduction="mean", zero_infinity=False):
        super().__init__(reduction=reduction)
        self.blank, self.zero_infinity = blank, zero_infinity

    def forward(self, log_probs, targets, input_lengths, target_lengths):
        return F.ctc_loss(log_probs, targets, input_lengths, target_lengths, self.blank, self.reduction,
                          self.zero_infinity)


class MarginRankingLoss(_Loss):
    """torch's ``nn.MarginRankingLoss``: ``max(0, -target (input1 - input2) + margin)``."""

    def __init__(self, margin=0.0, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def forward(self, input1, input2, target):
        return F.margin_ranking_loss(input1, input2, target, margin=self.margin, reduction=self.reduction)


class HingeEmbeddingLoss(_Loss):
    """torch's ``nn.HingeEmbeddingLoss``: ``input`` where ``target`` is 1, ``max(0, margin - input)`` where -1."""

    def __init__(self, margin=1.0, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def forward(self, input, target):
        return F.hinge_embedding_loss(input, target, margin=self.margin, reduction=self.reduction)


class SoftMarginLoss(_Loss):
    """torch's ``nn.SoftMarginLoss``: ``log(1 + exp(-target * input))``."""

    def forward(self, input, target):
        return F.soft_margin_loss(input, target, reduction=self.reduction)


class MultiLabelSoftMarginLoss(_WeightedLoss):
    """torch's ``nn.MultiLabelSoftMarginLoss``: the logistic loss of each class, averaged over the classes."""

    def forward(self, input, target):
        return F.multilabel_soft_margin_loss(input, target, weight=self.weight, reduction=self.reduction)


class CosineEmbeddingLoss(_Loss):
    """torch's ``nn.CosineEmbeddingLoss``: ``1 - cos`` where ``target`` is 1, ``max(0, cos - margin)`` where -1."""

    def __init__(self, margin=0.0, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def forward(self, input1, input2, target):
        return F.cosine_embedding_loss(input1, input2, target, margin=self.margin, reduction=self.reduction)


class TripletMarginLoss(_Loss):
    """torch's ``nn.TripletMarginLoss``: ``max(0, margin + d(anchor, positive) - d(anchor, negative))``."""

    def __init__(self, margin=1.0, p=2.0, eps=1e-6, swap=False, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        if margin <= 0:
            raise ValueError(f"TripletMarginLoss: expected margin to be greater than 0, got {margin} instead")
        self.margin, self.p, self.eps, self.swap = margin, p, eps, swap

    def forward(self, anchor, positive, negative):
        return F.triplet_margin_loss(anchor, positive, negative, margin=self.margin, p=self.p, eps=self.eps,
                                     swap=self.swap, reduction=self.reduction)


class CosineSimilarity(Module):
    """torch's ``nn.CosineSimilarity``: the cosine of ``x1`` and ``x2`` along ``dim``."""

    def __init__(self, dim=1, eps=1e-8):
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1, x2):
        return F.cosine_similarity(x1, x2, self.dim, self.eps)


class PairwiseDistance(Module):
    """torch's ``nn.PairwiseDistance``: ``||x1 - x2 + eps||_p`` along the last axis (``p`` kept as ``norm``,
    as torch's)."""

    def __init__(self, p=2.0, eps=1e-6, keepdim=False):
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1, x2):
        return F.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)


class MultiMarginLoss(_WeightedLoss):
    """torch's ``nn.MultiMarginLoss``: the multi-class hinge loss ``max(0, margin - x[y] + x[i])^p`` over the other
    classes ``i``, averaged over the classes (``weight``: a per-class buffer, weighing each sample by its class)."""

    def __init__(self, p=1, margin=1.0, weight=None, size_average=None, reduce=None, reduction="mean"):
        super().__init__(weight, size_average, reduce, reduction)
        if p != 1 and p != 2:
            raise ValueError("only p == 1 and p == 2 supported")
        if weight is not None and self.weight.ndim != 1:
            raise ValueError(f"MultiMarginLoss: expected weight to be None or 1D tensor, got {self.weight.ndim}D "
                             "instead")
        self.p, self.margin = p, margin

    def forward(self, input, target):
        return F.multi_margin_loss(input, target, p=self.p, margin=self.margin, weight=self.weight,
                                   reduction=self.reduction)


class MultiLabelMarginLoss(_Loss):
    """torch's ``nn.MultiLabelMarginLoss``: the hinge ``max(0, 1 - (x[j] - x[i]))`` of each target class ``j``
    (the target's entries before its first -1) against each other class ``i``, averaged over the classes."""

    def forward(self, input, target):
        return F.multilabel_margin_loss(input, target, reduction=self.reduction)


class TripletMarginWithDistanceLoss(_Loss):
    """torch's ``nn.TripletMarginWithDistanceLoss``: ``max(0, margin + d(anchor, positive) - d(anchor,
    negative))`` with any distance ``d`` (by default a :class:`PairwiseDistance` submodule, as torch's)."""

    def __init__(self, *, distance_function=None, margin=1.0, swap=False, reduction="mean"):
        super().__init__(size_average=None, reduce=None, reduction=reduction)
        if margin <= 0:
            raise ValueError(f"TripletMarginWithDistanceLoss: expected margin to be greater than 0, got {margin} "
                             "instead")
        self.distance_function = distance_function if distance_function is not None else PairwiseDistance()
        self.margin, self.swap = margin, swap

    def forward(self, anchor, positive, negative):
        return F.triplet_margin_with_distance_loss(anchor, positive, negative, distance_function=self.distance_function,
                                                   margin=self.margin, swap=self.swap, reduction=self.reduction)


class NLLLoss2d(NLLLoss):
    """torch's deprecated ``nn.NLLLoss2d``: :class:`NLLLoss` (with torch's FutureWarning when made)."""

    def __init__(self, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
        warnings.warn("`NLLLoss2d` has been deprecated. Please use `NLLLoss` instead as a drop-in replacement and see "
                      "https://pytorch.org/docs/main/nn.html#torch.nn.NLLLoss for more details.", FutureWarning,
                      stacklevel=2)
        super().__init__(weight, size_average, ignore_index, reduce, reduction)
