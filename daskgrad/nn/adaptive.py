"""torch.nn's ``AdaptiveLogSoftmaxWithLoss``: the adaptive softmax of Grave et al. (a head over the frequent
classes and one entry per cluster of the rare ones, each cluster a low-rank tail), with torch's parameters,
outputs, gradients and errors.

torch's forward runs each cluster's tail on the rows whose target falls in that cluster only, and reads the
targets' values to find them.  Here each tail a target falls in runs on every row and each row's
log-probability is picked from the full distribution at its target: the same values and gradients (the rows
a tail did not need give it zero cotangent).  Which clusters hold a target is read as torch reads it (one
submission of a few numbers, not the targets), so a tail no target falls in is left out of the graph and its
parameters get no gradient (``None``, as torch's: an optimizer leaves them alone).

>>> asm = nn.AdaptiveLogSoftmaxWithLoss(8, 10, cutoffs=[4, 7])
>>> out = asm(dg.randn(5, 8), dg.tensor([0, 3, 5, 9, 1]))
>>> out.output.shape, out.loss.shape
((5,), ())
"""
from __future__ import annotations

import itertools
from collections import namedtuple

import numpy as np

from .. import ops
from ..graph import size_repr
from . import functional as F
from .layers import Linear, ModuleList, Sequential
from .module import Module

__all__ = ["AdaptiveLogSoftmaxWithLoss"]

_ASMoutput = namedtuple("_ASMoutput", ["output", "loss"])


class AdaptiveLogSoftmaxWithLoss(Module):
    """torch's ``AdaptiveLogSoftmaxWithLoss(in_features, n_classes, cutoffs, div_value=4.0, head_bias=False)``:
    ``forward(input, target)`` gives ``_ASMoutput(output, loss)``, each row's log-probability of its target and
    their negated mean; :meth:`log_prob` the full ``(N, n_classes)`` log-probabilities, :meth:`predict` the
    most probable class.  Each tail runs on every row (see the module's note)."""

    def __init__(self, in_features, n_classes, cutoffs, div_value=4.0, head_bias=False, device=None, dtype=None):
        super().__init__()
        cutoffs = list(cutoffs)
        if len(cutoffs) == 0:
            raise ValueError("cutoffs should be a sequence of length larger than 0")
        if (cutoffs != sorted(cutoffs) or min(cutoffs) <= 0 or max(cutoffs) > (n_classes - 1)
                or len(set(cutoffs)) != len(cutoffs) or any(int(c) != c for c in cutoffs)):
            raise ValueError("cutoffs should be a sequence of unique, positive integers sorted in an increasing "
                             "order, where each value is between 1 and n_classes-1")
        self.in_features, self.n_classes = in_features, n_classes
        self.cutoffs = cutoffs + [n_classes]
        self.div_value, self.head_bias = div_value, head_bias
        self.shortlist_size = self.cutoffs[0]
        self.n_clusters = len(self.cutoffs) - 1
        self.head_size = self.shortlist_size + self.n_clusters
        self.head = Linear(in_features, self.head_size, bias=head_bias, device=device, dtype=dtype)
        self.tail = ModuleList()
        for i in range(self.n_clusters):
            hsz = int(in_features // (div_value ** (i + 1)))
            osz = self.cutoffs[i + 1] - self.cutoffs[i]
            self.tail.append(Sequential(Linear(in_features, hsz, bias=False, device=device, dtype=dtype),
                                        Linear(hsz, osz, bias=False, device=device, dtype=dtype)))

    def reset_parameters(self):
        """The head's and tails' parameters drawn again, as at construction."""
        self.head.reset_parameters()
        for i2h, h2o in self.tail:
            i2h.reset_parameters()
            h2o.reset_parameters()

    def forward(self, input_, target_):
        targ_dim = target_.ndim
        if targ_dim == 1:
            if input_.shape[0] != target_.shape[0]:
                raise RuntimeError("Input and target should have the same size in the batch dimension.")
            if input_.ndim != 2:
                raise RuntimeError(f"1D target tensor expects 2D input tensors, but found inputs with size "
                                   f"{size_repr(input_.shape)}")
        elif targ_dim == 0:
            if input_.ndim != 1:
                raise RuntimeError(f"0D target tensor expects 1D input tensors, but found inputs with size "
                                   f"{size_repr(input_.shape)}")
        else:
            raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
        if np.dtype(target_.dtype) not in (np.int32, np.int64):
            raise RuntimeError("gather(): Expected dtype int32/int64 for index")
        batched = targ_dim > 0
        input = input_ if batched else ops.reshape(input_, (1, -1))
        target = target_ if batched else ops.reshape(target_, (1,))
        used = self._clusters_with_targets(target)
        # torch adds the head's log-probability of the row's cluster to the tail's; here they are added before
        # the pick, the same sum
        full = self._get_full_log_prob(input, self.head(input), used)
        output = ops.reshape(full.gather(1, ops.reshape(target, (-1, 1))), (-1,))
        loss = ops.mean(-output)
        return _ASMoutput(output if batched else ops.reshape(output, ()), loss)

    def _clusters_with_targets(self, target):
        """Whether each cluster holds a target, and torch's error for a target outside the classes: torch's
        forward reads both from the targets' values; here the targets' minimum, maximum and one flag a
        cluster, in one submission (no chunk of the targets is read whole)."""
        if 0 in target.shape:
            return [False] * self.n_clusters
        t = target.detach()
        stats = [ops.min(t), ops.max(t)] + [ops.astype(ops.any((t >= low) & (t < high)), t.dtype)
                                           for low, high in itertools.pairwise(self.cutoffs)]
        low, high, *used = (int(v) for v in ops.stack(stats).numpy())
        if low < 0 or high >= self.n_classes:
            raise RuntimeError(f"Target values should be in [0, {self.n_classes - 1}], but values in range "
                               f"[{low}, {high}] were found. ")
        return [bool(u) for u in used]

    def _get_full_log_prob(self, input, head_output, used=None):
        """The log-probabilities of all the classes: the head's over the shortlist, then each cluster's tail's
        plus the head's entry for that cluster (``used``: which clusters to compute; the others are zeros
        that no tail's parameters reach, for a forward whose targets none of them hold)."""
        head_logprob = F.log_softmax(head_output, dim=1)
        parts = [head_logprob[:, :self.shortlist_size]]
        for i, (low, high) in enumerate(itertools.pairwise(self.cutoffs)):
            if used is not None and not used[i]:
                parts.append(ops.broadcast_to(ops.zeros_like(head_logprob.detach()[:, :1]),
                                              (head_logprob.shape[0], high - low)))
                continue
            cluster_logprob = F.log_softmax(self.tail[i](input), dim=1)
            parts.append(cluster_logprob + head_logprob[:, self.shortlist_size + i:self.shortlist_size + i + 1])
        return ops.concatenate(parts, axis=1)

    def log_prob(self, input):
        """The log-probabilities of every class, ``(N, n_classes)``."""
        return self._get_full_log_prob(input, self.head(input))

    def predict(self, input):
        """The most probable class of each row, ``(N,)``: the head's choice where it is a shortlist class (no
        rarer class can beat it), else the full distribution's (computed for every row here, used where the
        head chose a cluster, as torch's picks)."""
        head_output = self.head(input)
        output = ops.argmax(head_output, axis=1)
        full = ops.argmax(self._get_full_log_prob(input, head_output), axis=1)
        return ops.where(output < self.shortlist_size, output, full)
