"""The general eigendecomposition and the matrix exponential (``daskgrad.linalg.eig``, ``eigvals``,
``matrix_exp``), with torch's VJP rules (``linalg_eig_backward``, and ``matrix_exp``'s block-matrix
rule; contract: see ``elementwise.py``).  Each matrix sits in one chunk, as for ``inv`` and
``det``: batches of small and middle-sized matrices, not one matrix larger than a worker's memory.

The forward kernels use NumPy calls that dispatch on the chunk type (``np.linalg.eig`` and
``solve``, matrix products), so cupy chunks stay on the device.
"""
from __future__ import annotations

import collections
import math

import numpy as np

from ..graph import RESULT, primitive
from .._tensor import Tensor
from .composite import imag
from .elementwise import astype, conj, real_part, zeros_like
from .linalg import _gufunc, _matrix, _whole, solve
from .products import diag_embed, diagonal, matmul, mH
from .shape import concatenate, expand_dims

EigResult = collections.namedtuple("EigResult", ["eigenvalues", "eigenvectors"])
eig_l_p = primitive("eig_eigenvalues", torch="LinalgEigBackward0", save=("v",))
eig_v_p = primitive("eig_eigenvectors", torch="LinalgEigBackward0", save=("a", "r"))

_GAUGE_ERROR = ("linalg_eig_backward: The eigenvectors in the complex case are specified up to multiplication by "
                "e^{i phi}. The specified loss function depends on this quantity, so it is ill-defined.")


def _complex_dtype(dtype):
    return np.result_type(dtype, np.complex64)


def _eig_kernel(a):
    w, v = np.linalg.eig(a)
    c = _complex_dtype(a.dtype)
    return w.astype(c, copy=False), v.astype(c, copy=False)  # complex always, as torch's


def _conjugate_by_v(inner, v, real_input):
    """torch's last step: ``V^{-H} inner V^H``, its real part for a real ``A``."""
    ga = solve(mH(v), matmul(inner, mH(v)))
    return real_part(ga) if real_input else ga


@eig_l_p.vjp
def _eig_l_rule(g, s, *, real_input):
    v = s.v
    return (_conjugate_by_v(diag_embed(astype(g, v.dtype), 0, v.chunks[-2:]), v, real_input),)


def _gauge_block(im):
    """torch's check that the loss does not depend on the eigenvectors' phases: ``Im diag(V^H gV)``
    all close to 0 (``allclose`` with rtol = atol = 1e-2).  Lazy, so it runs in the task, and the
    error reaches the user from the submission, before any ``.grad`` is written."""
    if not bool((np.absolute(im) <= 1e-2).all()):
        raise RuntimeError(_GAUGE_ERROR)
    return np.zeros_like(im)


@eig_v_p.vjp
def _eig_v_rule(g, s, *, real_input):
    """torch's ``linalg_eig_backward`` with only gV; ``L = diag(V^{-1} A V)`` recomputed (the eigenvalue
    node saves ``V``, so this one cannot save ``L``)."""
    v = s.r
    a = astype(s.a, v.dtype) if s.a.dtype != v.dtype else s.a
    lam = diagonal(solve(v, matmul(a, v)), 0, -2, -1)
    vhgv = matmul(mH(v), g)
    d = diagonal(vhgv, 0, -2, -1)
    im = imag(d).detach().array
    check = Tensor._make(im.map_blocks(_gauge_block, dtype=im.dtype, meta=im._meta))  # zeros, or torch's error
    inner = vhgv - matmul(mH(v), v * expand_dims(real_part(d), -2))
    lc = conj(lam)
    e = expand_dims(lc, -2) - expand_dims(lc, -1)
    eye = diag_embed(astype(zeros_like(real_part(lam)) + 1, v.dtype), 0, v.chunks[-2:])
    inner = inner / (e + eye)
    inner = inner - diag_embed(diagonal(inner, 0, -2, -1), 0, v.chunks[-2:]) + expand_dims(check, -2)
    return (_conjugate_by_v(inner, v, real_input),)


def eig(A):
    """torch's ``linalg.eig``: complex eigenvalues and unit eigenvectors (LAPACK's ``geev``, as NumPy's
    and torch's, in its order) of (batches of) square matrices, each matrix in one chunk.  Gradients
    are torch's (distinct eigenvalues); a loss that depends on the eigenvectors' phases raises
    torch's ``RuntimeError`` when the gradient is computed."""
    return _eig(A, "eig")


def _eig(A, name):
    A = _matrix(A, name, square=True)
    a = _whole(A.array)
    c = _complex_dtype(a.dtype)
    w, v = _gufunc(_eig_kernel, "(n,n)->(n),(n,n)", (a,), [(a.ndim - 1, c), (a.ndim, c)])
    real_input = A.dtype.kind != "c"
    V = eig_v_p.record(v, A, save={"a": A, "r": RESULT}, real_input=real_input)
    return EigResult(eig_l_p.record(w, A, save={"v": V}, real_input=real_input), V)


def eigvals(A):
    """torch's ``linalg.eigvals``: the eigenvalues of :func:`eig`, with its gradient."""
    return _eig(A, "eigvals").eigenvalues


# ------------------------------------------------------------------ matrix_exp
# Pade [13/13] for exp with scaling and squaring (Higham 2005): b_j = (26 - j)! 13! / (26! j! (13 - j)!),
# scaled so b_13 = 1; theta_13 the largest 1-norm that degree reaches double precision at
_PADE13 = [math.factorial(26 - j) * math.factorial(13) / (math.factorial(26) * math.factorial(j)
                                                           * math.factorial(13 - j)) for j in range(14)]
_PADE13 = [b / _PADE13[13] for b in _PADE13]
_THETA13 = 5.371920351148152


def _expm_block(a):
    """``exp`` of each matrix of the chunk by NumPy calls that dispatch on its type."""
    norm1 = np.max(np.sum(np.absolute(a), axis=-2), axis=-1)
    with np.errstate(divide="ignore"):
        s = np.maximum(0, np.ceil(np.log2(norm1 / _THETA13)))
    s = np.where(np.isfinite(s), s, 0)
    steps = int(np.max(s)) if s.size else 0
    a = a / (2.0 ** s)[..., None, None].astype(a.dtype)
    b = _PADE13
    eye = np.linalg.matrix_power(a, 0)  # the chunk type's identity (np.eye(like=) passes device=: cupy lacks it)
    a2 = a @ a
    a4 = a2 @ a2
    a6 = a4 @ a2
    u = a @ (a6 @ (b[13] * a6 + b[11] * a4 + b[9] * a2) + b[7] * a6 + b[5] * a4 + b[3] * a2 + b[1] * eye)
    v = a6 @ (b[12] * a6 + b[10] * a4 + b[8] * a2) + b[6] * a6 + b[4] * a4 + b[2] * a2 + b[0] * eye
    r = np.linalg.solve(v - u, v + u)
    for i in range(steps):  # each matrix squared its own s times
        r = np.where((s > i)[..., None, None], r @ r, r)
    return r


def _matrix_exp_impl(a):
    a = _whole(a)
    return _gufunc(_expm_block, "(n,n)->(n,n)", (a,), [(a.ndim, a.dtype)])


matrix_exp_p = primitive("matrix_exp", torch="LinalgMatrixExpBackward0", impl=_matrix_exp_impl, save=("x",),
                         prepare=lambda x: (_matrix(x, "matrix_exp", square=True),))


@matrix_exp_p.vjp
def _matrix_exp_rule(g, s):
    """torch's rule for an analytic function of a matrix: the top-right block of
    ``exp([[A^H, G], [0, A^H]])`` (differentiable again, being matrix_exp itself)."""
    ah = mH(s.x)
    n = ah.shape[-1]
    meta = concatenate([concatenate([ah, g], axis=-1), concatenate([zeros_like(ah), ah], axis=-1)], axis=-2)
    return (matrix_exp(meta)[..., :n, n:],)


def matrix_exp(A):
    """torch's ``linalg.matrix_exp`` (and ``torch.matrix_exp``): ``exp`` of (batches of) square matrices,
    each in one chunk, by Pade [13/13] with scaling and squaring; torch's gradient."""
    return matrix_exp_p.bind(A)

