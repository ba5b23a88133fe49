"""Loss modules over the functional losses in ``daskgrad.ops.nn``.

>>> loss = nn.CrossEntropyLoss()(logits, labels)
"""
from __future__ import annotations

from . import functional as F
from .module import Module


class _Loss(Module):
    def __init__(self, reduction="mean"):
        super().__init__()
        if reduction not in ("mean", "sum", "none"):
            raise ValueError(f"{reduction} is not a valid value for reduction")
        self.reduction = reduction


class MSELoss(_Loss):
    def forward(self, input, target):
        return F.mse_loss(input, target, reduction=self.reduction)


class CrossEntropyLoss(_Loss):
    """Logits (N, C) against class indices (N,) or class probabilities (N, C)."""

    def __init__(self, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
        super().__init__(reduction)
        if weight is not None or ignore_index != -100 or label_smoothing != 0.0:
            raise NotImplementedError("CrossEntropyLoss: weight, ignore_index and label_smoothing are not "
                                      "supported yet")

    def forward(self, input, target):
        return F.cross_entropy(input, target, reduction=self.reduction)


class BCEWithLogitsLoss(_Loss):
    def __init__(self, weight=None, reduction="mean", pos_weight=None):
        super().__init__(reduction)
        if weight is not None or pos_weight is not None:
            raise NotImplementedError("BCEWithLogitsLoss: weight and pos_weight are not supported yet")

    def forward(self, input, target):
        return F.binary_cross_entropy_with_logits(input, target, reduction=self.reduction)
