"""Loss modules over the functional losses, with torch's arguments (and their positional order).

>>> loss = nn.CrossEntropyLoss(ignore_index=-100, label_smoothing=0.1)(logits, labels)
"""
from __future__ import annotations

from . import functional as F
from .functional import _tensor_of
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
