"""``torch.nn.utils.parametrizations``: weight normalization and spectral normalization written as
parametrizations (:mod:`.parametrize`), torch's replacements of the hook-based :func:`.weight_norm` and
:func:`.spectral_norm`."""
from __future__ import annotations

from enum import Enum, auto

import numpy as np

from ..._modes import no_grad
from ..._tensor import Tensor, randn
from ...graph import size_repr
from ...ops import add, allclose, cat, eye, vdot, where, zeros_like
from ...ops.linalg import _geqrf, _sgn, householder_product, solve
from ...ops.spectral import matrix_exp
from .. import functional as F
from ..conv import ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from ..module import Module
from . import parametrize

__all__ = ["orthogonal", "spectral_norm", "weight_norm"]


def _is_orthogonal(Q):
    """torch's test: ``Q^H Q`` within ``10 n eps`` of the identity (computed: the answer picks a branch)."""
    n, k = Q.shape[-2:]
    eps = 10.0 * n * float(np.finfo(Q.dtype).eps)
    return bool(allclose(Q.mH @ Q, eye(k, dtype=Q.dtype, device=Q.device), atol=eps))


def _make_orthogonal(A):
    """The ``Q`` of ``A = QR`` (``A`` tall) with ``R``'s diagonal real and non-negative, as torch's: LAPACK's
    compact QR, its reflectors multiplied out, each column times the sign of ``R``'s diagonal entry."""
    X, tau = _geqrf(A)
    Q = householder_product(X, tau)
    return Q * _sgn(X.diagonal(dim1=-2, dim2=-1)).unsqueeze(-2)


def _randn_like_dtype(shape, like):
    """Standard normal numbers of ``like``'s dtype and device; complex ones as torch's, real and imaginary parts
    each of variance 1/2 (daskgrad's ``randn`` draws real numbers only)."""
    if like.dtype.kind != "c":
        return randn(*shape, dtype=like.dtype, device=like.device)
    real = np.finfo(like.dtype).dtype
    parts = [randn(*shape, dtype=real, device=like.device) for _ in range(2)]
    return ((parts[0] + 1j * parts[1]) * float(np.sqrt(0.5))).astype(like.dtype)


class _OrthMaps(Enum):
    matrix_exp = auto()
    cayley = auto()
    householder = auto()


class _Orthogonal(Module):
    """The orthogonal parametrization of :func:`orthogonal`: a tall (or transposed wide) matrix mapped to one with
    orthonormal columns by ``orthogonal_map``; with ``use_trivialization``, times the buffer ``base``."""

    def __init__(self, weight, orthogonal_map, *, use_trivialization=True):
        super().__init__()
        # (a complex matrix's reflectors do not determine the ``tau`` that would make their product unitary)
        if weight.is_complex() and orthogonal_map == _OrthMaps.householder:
            raise ValueError("The householder parametrization does not support complex tensors.")
        self.shape = weight.shape
        self.orthogonal_map = orthogonal_map
        if use_trivialization:
            self.register_buffer("base", None)

    def forward(self, X):
        n, k = X.shape[-2:]
        transposed = n < k
        if transposed:
            X, n, k = X.mT, k, n
        if self.orthogonal_map in (_OrthMaps.matrix_exp, _OrthMaps.cayley):
            X = X.tril()
            if n != k:  # embedded in a square matrix
                X = cat([X, X.new_zeros(n, n - k).expand(*X.shape[:-2], -1, -1)], dim=-1)
            A = X - X.mH  # skew-symmetric (skew-Hermitian)
            if self.orthogonal_map == _OrthMaps.matrix_exp:
                Q = matrix_exp(A)
            else:  # the Cayley retraction (I + A/2)(I - A/2)^{-1}
                Id = eye(n, dtype=A.dtype, device=A.device)
                Q = solve(add(Id, A, alpha=-0.5), add(Id, A, alpha=0.5))
            if n != k:
                Q = Q[..., :k]
        else:
            A = X.tril(diagonal=-1)
            tau = 2.0 / (1.0 + (A * A).sum(dim=-2))
            Q = householder_product(A, tau)
            # X's diagonal holds 1's and -1's: a sign, cast to int so that no gradient reaches it (torch's)
            Q = Q * X.diagonal(dim1=-2, dim2=-1).int().unsqueeze(-2)
        if hasattr(self, "base"):
            Q = self.base @ Q
        return Q.mT if transposed else Q

    def right_inverse(self, Q):
        with no_grad():
            return self._right_inverse(Q)

    def _right_inverse(self, Q):
        if Q.shape != self.shape:
            raise ValueError(f"Expected a matrix or batch of matrices of shape {size_repr(self.shape)}. "
                             f"Got a tensor of shape {size_repr(Q.shape)}.")
        Q_init = Q
        n, k = Q.shape[-2:]
        transpose = n < k
        if transpose:
            Q, n, k = Q.mT, k, n
        if not hasattr(self, "base"):
            if self.orthogonal_map in (_OrthMaps.cayley, _OrthMaps.matrix_exp):
                raise NotImplementedError("It is not possible to assign to the matrix exponential or the Cayley "
                                          "parametrizations when use_trivialization=False.")
            # Q's reflectors, the diagonal holding the signs of R's (flipped where LAPACK used no reflection,
            # tau exactly 0), so that householder_product gives Q back with a non-negative R
            A, tau = _geqrf(Q)
            on_diagonal = eye(n, k, dtype=bool, device=A.device)
            signs = A.diagonal(dim1=-2, dim2=-1).sign()
            signs = where(tau == 0.0, -signs, signs)
            A = where(on_diagonal, signs.unsqueeze(-2), A)
            return A.mT if transpose else A
        if n == k:
            Q = Q.clone() if _is_orthogonal(Q) else _make_orthogonal(Q)
        else:  # completed to an n x n orthogonal matrix
            N = _randn_like_dtype(Q.shape[:-2] + (n, n - k), Q)
            Q = _make_orthogonal(cat([Q, N], dim=-1))
        self.base = Q
        # -Id: householder(zeros) is the identity, and the householder map reads the signs on the diagonal
        neg_Id = zeros_like(Q_init)
        return where(eye(*Q_init.shape[-2:], dtype=bool, device=Q_init.device), -1.0, neg_Id).astype(Q_init.dtype)


def orthogonal(module, name="weight", orthogonal_map=None, *, use_trivialization=True):
    """An orthogonal (unitary) parametrization of the matrix or batch of matrices ``module.<name>`` (torch's
    ``parametrizations.orthogonal``): ``Q^H Q = I`` if ``Q`` is tall, ``Q Q^H = I`` if wide.

    ``orthogonal_map`` is ``"matrix_exp"`` (``exp(A)``), ``"cayley"`` (``(I + A/2)(I - A/2)^{-1}``), both of a
    skew-symmetric ``A``, or ``"householder"`` (a product of Householder reflectors,
    :func:`daskgrad.linalg.householder_product`).  With ``use_trivialization`` the map's result is multiplied by
    the buffer ``base``, reset at each assignment.  The initial value is the weight itself if orthogonal, else the
    ``Q`` of its QR decomposition (a wide or tall non-square weight is completed with random columns first).

    Parameters
    ----------
    module : Module
        The module holding the weight.
    name : str, default "weight"
        The parameter's name.
    orthogonal_map : str, optional
        ``"matrix_exp"``, ``"cayley"`` or ``"householder"``; default ``"matrix_exp"`` for square or complex
        matrices, else ``"householder"``.
    use_trivialization : bool, default True
        Whether to keep the ``base`` buffer (torch's "dynamic trivialization").

    Returns
    -------
    Module
        ``module``, with ``parametrizations.<name>.original`` (and ``parametrizations.<name>.0.base``).

    Examples
    --------
    >>> m = nn.utils.parametrizations.orthogonal(nn.Linear(3, 5).double())
    >>> bool(dg.allclose(m.weight.T @ m.weight, dg.eye(3, dtype="float64")))
    True
    """
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    # (a vector could be mapped onto the sphere, but torch refuses it)
    if weight.ndim < 2:
        raise ValueError(f"Expected a matrix or batch of matrices. Got a tensor of {weight.ndim} dimensions.")
    if orthogonal_map is None:
        orthogonal_map = ("matrix_exp" if weight.shape[-2] == weight.shape[-1] or weight.is_complex()
                          else "householder")
    orth_enum = getattr(_OrthMaps, orthogonal_map, None)
    if orth_enum is None:
        raise ValueError('orthogonal_map has to be one of "matrix_exp", "cayley", "householder". '
                         f"Got: {orthogonal_map}")
    orth = _Orthogonal(weight, orth_enum, use_trivialization=use_trivialization)
    parametrize.register_parametrization(module, name, orth, unsafe=True)
    return module


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
        ``module``, with ``parametrizations.<name>.original0`` (``g``) and ``original1`` (``v``); a state dict
        of the hook-based :func:`~daskgrad.nn.utils.weight_norm` (``<name>_g``, ``<name>_v``) loads into it.

    Examples
    --------
    >>> m = nn.utils.parametrizations.weight_norm(nn.Linear(4, 3))
    >>> m.parametrizations.weight.original0.shape, m.parametrizations.weight.original1.shape
    ((3, 1), (3, 4))
    """
    parametrize.register_parametrization(module, name, _WeightNorm(dim), unsafe=True)

    def _weight_norm_compat_hook(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                 error_msgs):
        """A checkpoint of the hook-based ``weight_norm`` (``<name>_g``, ``<name>_v``) loads, as torch's."""
        g_key, v_key = f"{prefix}{name}_g", f"{prefix}{name}_v"
        if g_key in state_dict and v_key in state_dict:
            original0, original1 = state_dict.pop(g_key), state_dict.pop(v_key)
            state_dict[f"{prefix}parametrizations.{name}.original0"] = original0
            state_dict[f"{prefix}parametrizations.{name}.original1"] = original1

    module._register_load_state_dict_pre_hook(_weight_norm_compat_hook)
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
