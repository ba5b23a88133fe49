"""Layers: ``Linear``, ``Sequential``, activations, ``Dropout``, ``Embedding``, ``LayerNorm``.

Parameters get torch's default initialisations, drawn lazily from daskgrad's
generator (reproducible with :func:`daskgrad.manual_seed`), in one chunk each.

>>> model = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 1))
>>> y = model(x)                     # x: (N, 4), chunked along N
"""
from __future__ import annotations

import math
from collections import OrderedDict

from .._tensor import ones, rand, randn, zeros
from . import functional as F
from .module import Module, Parameter


def _check_size(*shape):
    """torch's error for a negative size: its layers allocate their parameters with ``torch.empty``.
    dask would make an array of negative shape and fail later, far from the cause."""
    for n in shape:
        if n < 0:
            raise RuntimeError(f"Trying to create tensor with negative dimension {n}: {list(shape)}")


def _uniform(shape, bound, dtype, device):
    """U(-bound, bound): torch's kaiming_uniform(a=sqrt(5)) for a Linear weight, and its bias."""
    return Parameter(rand(*shape, dtype=dtype, chunks=-1, device=device) * (2 * bound) - bound)


class Linear(Module):
    """``y = x @ weight.T + bias``."""

    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        _check_size(out_features, in_features)
        bound = 1 / math.sqrt(in_features) if in_features > 0 else 0
        self.weight = _uniform((out_features, in_features), bound, dtype, device)
        self.bias = _uniform((out_features,), bound, dtype, device) if bias else None
        if not bias:
            self.register_parameter("bias", None)

    def forward(self, input):
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Sequential(Module):
    """Modules applied in order: ``Sequential(a, b)(x) == b(a(x))``."""

    def __init__(self, *args):
        super().__init__()
        items = args[0].items() if len(args) == 1 and isinstance(args[0], OrderedDict) else \
            ((str(i), m) for i, m in enumerate(args))
        for name, m in items:
            self.add_module(name, m)

    def __getitem__(self, idx):
        mods = list(self._modules.values())
        if isinstance(idx, slice):
            return Sequential(OrderedDict(list(self._modules.items())[idx]))
        if not -len(mods) <= idx < len(mods):
            raise IndexError(f"index {idx} is out of range")
        return mods[idx]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def forward(self, input):
        for m in self:
            input = m(input)
        return input


class ReLU(Module):
    def forward(self, input):
        return F.relu(input)


class Tanh(Module):
    def forward(self, input):
        return F.tanh(input)


class Sigmoid(Module):
    def forward(self, input):
        return F.sigmoid(input)


class GELU(Module):
    """Exact GELU (``approximate="none"``, via erf) or the tanh approximation."""

    def __init__(self, approximate="none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, input):
        return F.gelu(input, self.approximate)

    def extra_repr(self):
        return f"approximate='{self.approximate}'"


class Dropout(Module):
    """Random zeros with probability ``p`` while training (one mask per chunk); identity in eval."""

    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        if p < 0 or p > 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, input):
        return F.dropout(input, self.p, self.training)

    def extra_repr(self):
        return f"p={self.p}, inplace={self.inplace}"


class Embedding(Module):
    """A lookup table of ``num_embeddings`` rows of size ``embedding_dim``, initialised N(0, 1)."""

    def __init__(self, num_embeddings, embedding_dim, device=None, dtype=None):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        _check_size(num_embeddings, embedding_dim)
        self.weight = Parameter(randn(num_embeddings, embedding_dim, dtype=dtype, chunks=-1, device=device))

    def forward(self, input):
        return F.embedding(input, self.weight)

    def extra_repr(self):
        return f"{self.num_embeddings}, {self.embedding_dim}"


class LayerNorm(Module):
    """Normalise the trailing ``normalized_shape`` axes; weight ones, bias zeros."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, device=None, dtype=None):
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.normalized_shape, self.eps, self.elementwise_affine = shape, eps, elementwise_affine
        if elementwise_affine:  # torch checks only what it allocates
            _check_size(*shape)
        self.weight = Parameter(ones(*shape, dtype=dtype, chunks=-1, device=device)) if elementwise_affine else None
        self.bias = Parameter(zeros(*shape, dtype=dtype, chunks=-1, device=device)) \
            if elementwise_affine and bias else None
        for name in ("weight", "bias"):
            if getattr(self, name) is None:
                self.register_parameter(name, None)

    def forward(self, input):
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
