"""``torch.nn.utils.parametrizations``: weight normalization and spectral normalization written as
parametrizations (:mod:`.parametrize`), torch's replacements of the hook-based :func:`.weight_norm` and
:func:`.spectral_norm`."""
from __future__ import annotations

from ..._modes import no_grad
from ..._tensor import Tensor
from ...ops import vdot
from .. import functional as F
from ..conv import ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from ..module import Module
from . import parametrize

__all__ = ["spectral_norm", "weight_norm"]


def _norm_except_dim(v, pow, dim):
    """``torch.norm_except_dim``: the ``pow``-norm over every axis but ``dim``, kept as length-1 axes
    (``dim=-1``: the norm of the whole tensor, 0-d)."""
    if dim == -1:
        return v.norm(pow)
    dim = dim % v.ndim
    return v.norm(pow, dim=tuple(d for d in range(v.ndim) if d != dim), keepdim=True)


def _weight_norm(v, g, dim=0):
    """``torch._weight_norm``: ``v`` rescaled to the norm ``g`` along ``dim``."""
    return v * (g / _norm_except_dim(v, 2, dim))


class _WeightNorm(Module):
    """The weight-norm parametrization: ``(g, v) -> v * g / ||v||`` (``g`` is ``original0``, ``v``
    ``original1``)."""

    def __init__(self, dim=0):
        super().__init__()
        self.dim = -1 if dim is None else dim

    def forward(self, weight_g, weight_v):
        return _weight_norm(weight_v, weight_g, self.dim)

    def right_inverse(self, weight):
        return _norm_except_dim(weight, 2, self.dim), weight


def weight_norm(module, name="weight", dim=0):
    """Weight normalization of ``module.<name>`` as a parametrization (torch's
    ``parametrizations.weight_norm``): the magnitude ``g`` and the direction ``v`` are trained apart,
    ``weight = g * v / ||v||`` with the norm over all axes but ``dim``.

    Parameters
    ----------
    module : Module
        The module holding the weight.
    name : str, default "weight"
        The parameter's name.
    dim : int or None, default 0
        The axis kept by the norm; None: the norm of the whole tensor.

    Returns
    -------
    Module
        ``module``, with ``parametrizations.<name>.original0`` (``g``) and ``original1`` (``v``).

    Examples
    --------
    >>> m = nn.utils.parametrizations.weight_norm(nn.Linear(4, 3))
    >>> m.parametrizations.weight.original0.shape, m.parametrizations.weight.original1.shape
    ((3, 1), (3, 4))
    """
    parametrize.register_parametrization(module, name, _WeightNorm(dim), unsafe=True)
    return module


class _SpectralNorm(Module):
    """The spectral-norm parametrization: ``weight / sigma``, ``sigma`` the largest singular value
    estimated by power iteration on the buffers ``_u`` and ``_v`` (updated at each forward in training)."""

    def __init__(self, weight, n_power_iterations=1, dim=0, eps=1e-12):
        super().__init__()
        ndim = weight.ndim
        if dim >= ndim or dim < -ndim:
            raise IndexError(f"Dimension out of range (expected to be in range of [-{ndim}, {ndim - 1}] but got {dim})")
        if n_power_iterations <= 0:
            raise ValueError("Expected n_power_iterations to be positive, but got "
                             f"n_power_iterations={n_power_iterations}")
        self.dim = dim if dim >= 0 else dim + ndim
        self.eps = eps
        if ndim > 1:  # (a vector is normalized exactly: nothing to estimate)
            self.n_power_iterations = n_power_iterations
            weight_mat = self._reshape_weight_to_matrix(weight.detach())
            h, w = weight_mat.shape
            u = weight_mat.new_empty(h).normal_(0, 1)
            v = weight_mat.new_empty(w).normal_(0, 1)
            self.register_buffer("_u", F.normalize(u, dim=0, eps=self.eps))
            self.register_buffer("_v", F.normalize(v, dim=0, eps=self.eps))
            self._power_method(weight_mat, 15)

    def _reshape_weight_to_matrix(self, weight):
        if weight.ndim <= 1:
            raise AssertionError(f"Expected weight to have more than 1 dimension, got {weight.ndim}")
        if self.dim != 0:
            weight = weight.permute(self.dim, *(d for d in range(weight.ndim) if d != self.dim))
        return weight.flatten(1)

    def _power_method(self, weight_mat, n_power_iterations):
        # The buffers are written in place (torch's out=), so the module's _u and _v objects keep the state
        with no_grad():
            for _ in range(n_power_iterations):
                self._u.copy_(F.normalize(weight_mat.mv(self._v), dim=0, eps=self.eps))
                self._v.copy_(F.normalize(weight_mat.H.mv(self._u), dim=0, eps=self.eps))

    def forward(self, weight):
        if weight.ndim == 1:
            return F.normalize(weight, dim=0, eps=self.eps)
        weight_mat = self._reshape_weight_to_matrix(weight)
        if self.training:
            self._power_method(weight_mat, self.n_power_iterations)
        # cloned: a later forward's in-place update must not change what this one's backward reads
        u, v = self._u.clone(), self._v.clone()
        sigma = vdot(u, weight_mat.mv(v))
        return weight / sigma

    def right_inverse(self, value):
        return value


def spectral_norm(module, name="weight", n_power_iterations=1, eps=1e-12, dim=None):
    """Spectral normalization of ``module.<name>`` as a parametrization (torch's
    ``parametrizations.spectral_norm``): the weight divided by its largest singular value, estimated by
    ``n_power_iterations`` steps of power iteration at each forward in training mode (none in eval mode).

    Parameters
    ----------
    module : Module
        The module holding the weight.
    name : str, default "weight"
        The parameter's name.
    n_power_iterations : int, default 1
        Power-iteration steps per forward in training.
    eps : float, default 1e-12
        The smallest norm divided by when normalizing ``u`` and ``v``.
    dim : int, optional
        The output axis: 1 for ConvTranspose modules, else 0.

    Returns
    -------
    Module
        ``module``, with ``parametrizations.<name>.original`` and the buffers ``parametrizations.<name>.0._u``
        and ``._v``.

    Examples
    --------
    >>> m = nn.utils.parametrizations.spectral_norm(nn.Linear(4, 3))
    >>> sorted(m.state_dict())
    ['bias', 'parametrizations.weight.0._u', 'parametrizations.weight.0._v', 'parametrizations.weight.original']
    """
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    if dim is None:
        dim = 1 if isinstance(module, (ConvTranspose1d, ConvTranspose2d, ConvTranspose3d)) else 0
    parametrize.register_parametrization(module, name, _SpectralNorm(weight, n_power_iterations, dim, eps))
    return module
