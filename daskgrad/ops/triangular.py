"""Triangular factors and solves (``daskgrad.linalg``): ``lu``, ``solve_triangular`` and
``cholesky_solve``, with torch's VJP rules (``linalg_lu_backward``,
``linalg_solve_triangular_backward``; contract: see ``elementwise.py``).

Each matrix of ``A`` sits in one chunk, as for ``solve``; a right-hand side keeps its column chunks,
so a long ``B`` is solved chunk by chunk.  The kernels run SciPy's (NumPy chunks) or cupyx's (cupy
chunks) triangular solver and LU; any other array type gets plain NumPy calls that dispatch on it
(``linalg.solve`` on the triangle, a column-by-column partial-pivoting LU), so chunks never move to
the host.
"""
from __future__ import annotations

import collections

import numpy as np

from ..graph import RESULT, primitive
from .._tensor import Tensor
from ._util import as_tensor, check_broadcast, check_same_device
from .elementwise import conj
from .linalg import _gufunc, _matrix, _solve_arrays, _whole, solve
from .products import _meta, matmul, mH, mT, tril, triu
from .shape import concatenate, expand_dims, pad, squeeze


def _scipy_linalg(block):
    """SciPy's linalg for NumPy chunks, cupyx's for cupy ones, None for other array types."""
    try:
        if type(block) is np.ndarray:
            import scipy.linalg as sl
            return sl
        if type(block).__module__.split(".")[0] == "cupy":
            import cupyx.scipy.linalg as sl
            return sl
    except ImportError:
        pass
    return None


# ------------------------------------------------------------ solve_triangular
def _triangle_of(a, upper, unit):
    """The matrix a triangular solver reads: one triangle, its diagonal 1 when ``unit``."""
    t = np.triu(a) if upper else np.tril(a)
    if unit:
        n = a.shape[-1]
        eye = np.diag(np.ones_like(a, shape=(n,)))  # (cupy's eye takes no like=-dispatched device)
        t = t * (1 - eye) + eye
    return t


def _tri_block(a, b, upper, unit):
    sl = _scipy_linalg(a)
    if sl is not None and (a.ndim == 2 or sl.__name__.startswith("scipy")):  # cupyx's is 2-D only
        return sl.solve_triangular(a, b, lower=not upper, unit_diagonal=unit)
    if sl is not None:
        out = np.empty_like(b)
        for idx in np.ndindex(*a.shape[:-2]):
            out[idx] = sl.solve_triangular(a[idx], b[idx], lower=not upper, unit_diagonal=unit)
        return out
    return np.linalg.solve(_triangle_of(a, upper, unit), b)


def _solve_triangular_impl(a, b, *, upper, unit):
    """``A^{-1} B`` for triangular ``A``, ``b`` of shape (..., n, k) keeping its column chunks."""
    return _solve_arrays(a, b, _tri_block, upper=upper, unit=unit)


solve_triangular_p = primitive("solve_triangular", torch="LinalgSolveTriangularBackward0",
                               impl=_solve_triangular_impl, args=("a", "b"), save=("a", "r"))


@solve_triangular_p.vjp
def _solve_triangular_rule(g, s, *, upper, unit):
    # torch's linalg_solve_triangular_backward (left=True): gB = A^{-H} gX, gA = -gB X^H on A's triangle
    gb = _solve_tri(mH(s.a), g, not upper, unit)
    if not s.needs[0]:
        return None, gb
    ga = -matmul(gb, mH(s.r))
    return (triu(ga, 1 if unit else 0) if upper else tril(ga, -1 if unit else 0)), gb


def _solve_tri(a, b, upper, unit):
    return solve_triangular_p.bind(a, b, upper=upper, unit=unit)


def _upper_flag(upper, lower):
    if upper is None and lower is None:
        raise TypeError('linalg_solve_triangular() missing 1 required positional arguments: "upper"')
    if upper is not None and lower is not None and bool(upper) == bool(lower):
        raise TypeError("solve_triangular() got both upper= (torch) and lower= (SciPy) and they disagree")
    return bool(upper) if upper is not None else not lower


def solve_triangular(A, B, *, upper=None, left=True, unitriangular=False, lower=None, unit_diagonal=None):
    """torch's ``linalg.solve_triangular(A, B, *, upper, left=True, unitriangular=False)``: ``X`` with
    ``A X = B`` (``X A = B`` when ``left=False``) reading only ``A``'s ``upper`` (else lower) triangle,
    its diagonal taken as ones when ``unitriangular``.  SciPy's and dask's spelling works too:
    ``solve_triangular(a, b, lower=False, unit_diagonal=False)``, where ``b`` may be a vector.  Each
    matrix of ``A`` sits in one chunk; ``B``'s columns keep theirs."""
    upper = _upper_flag(upper, lower)
    unit = bool(unitriangular or unit_diagonal)
    A, B = _matrix(A, "solve_triangular", square=True), as_tensor(B)
    check_same_device(A, B)
    scipy_vector = lower is not None and B.ndim == 1
    if B.ndim < 2 and not scipy_vector:
        raise RuntimeError("linalg.solve_triangular: The input tensor B must have at least 2 dimensions.")
    Bm = expand_dims(B, -1) if scipy_vector else B
    n = A.shape[-1]
    if (Bm.shape[-2] if left else Bm.shape[-1]) != n:
        eq = "AX = B" if left else "XA = B"
        raise RuntimeError(f"linalg.solve_triangular: Incompatible shapes of A and B for the equation {eq} "
                           f"({n}x{n} and {Bm.shape[-2]}x{Bm.shape[-1]})")
    check_broadcast(A.shape[:-2], Bm.shape[:-2])
    if not left:  # X A = B is A^T X^T = B^T, the other triangle
        return mT(_solve_tri(mT(A), mT(Bm), not upper, unit))
    X = _solve_tri(A, Bm, upper, unit)
    return squeeze(X, -1) if scipy_vector else X


# ------------------------------------------------------------------ cholesky_solve
def cholesky_solve(B, L, upper=False):
    """torch's ``cholesky_solve(B, L, upper=False)``: ``X`` with ``A X = B`` where ``A = L L^H``
    (``U^H U`` when ``upper``) from ``L``'s triangle; gradients flow to ``B`` and ``L`` as torch's."""
    B, L = as_tensor(B), as_tensor(L)
    check_same_device(B, L)
    L = _matrix(L, "cholesky_solve", square=True)
    if B.ndim < 2:
        raise RuntimeError(f"b should have at least 2 dimensions, but has {B.ndim} dimensions instead")
    if B.shape[-2] != L.shape[-1]:
        raise RuntimeError(f"Incompatible matrix sizes for cholesky_solve: each A matrix is {L.shape[-1]} by "
                           f"{L.shape[-1]} but each b matrix is {B.shape[-2]} by {B.shape[-1]}")
    # torch reads one triangle but differentiates A = L L^H in every entry of L: the triangle's
    # values, the full matrix's gradient -(G X^H + X G^H) L (cholesky_solve_backward)
    tri = triu(L) if upper else tril(L)
    rest = L - tri
    L = tri + (rest - rest.detach())
    A = matmul(mH(L), L) if upper else matmul(L, mH(L))
    return solve(A, B)


# ------------------------------------------------------------------------- lu
LUResult = collections.namedtuple("LUResult", ["P", "L", "U"])
lu_l_p = primitive("lu_l", torch="LinalgLuBackward0", save=("p", "a", "r"))
lu_u_p = primitive("lu_u", torch="LinalgLuBackward0", save=("p", "l", "r"))


def _lu_fallback(a):
    """Partial-pivoting LU of one matrix with NumPy calls only (any array type); LAPACK's pivots
    (the first largest magnitude in each column)."""
    m, n = a.shape
    k = min(m, n)
    u = np.copy(a)
    lo = np.zeros_like(a, shape=(m, k))
    perm = list(range(m))
    for j in range(k):
        p = j + int(np.argmax(np.abs(u[j:, j])))
        if p != j:
            u[[j, p]], lo[[j, p]], perm[j], perm[p] = u[[p, j]], lo[[p, j]], perm[p], perm[j]
        piv = u[j, j]
        if bool(piv != 0):
            lo[j + 1:, j] = u[j + 1:, j] / piv
            u[j + 1:] = u[j + 1:] - lo[j + 1:, j][:, None] * u[j][None, :]
    eye = np.diag(np.ones_like(a, shape=(m,)))
    lo = lo + eye[:, :k]
    return eye[:, perm], lo, np.triu(u[:k])


def _lu_kernel(a):
    sl = _scipy_linalg(a)
    if sl is not None and (a.ndim == 2 or sl.__name__.startswith("scipy")):
        p, lo, u = sl.lu(a)
        return p.astype(a.dtype), lo, u  # torch's P has A's dtype (SciPy's is real)
    m, n = a.shape[-2:]
    k = min(m, n)
    outs = (np.empty_like(a, shape=a.shape[:-2] + (m, m)), np.empty_like(a, shape=a.shape[:-2] + (m, k)),
            np.empty_like(a, shape=a.shape[:-2] + (k, n)))
    for idx in np.ndindex(*a.shape[:-2]):
        for out, f in zip(outs, sl.lu(a[idx]) if sl is not None else _lu_fallback(a[idx])):
            out[idx] = f
    return outs


def _lu_backward(gl, gu, p, lo, u, m, n):
    """torch's ``linalg_lu_backward`` (pivot=True), either cotangent ``None`` (zero)."""
    k = min(m, n)
    if m == n:
        phi = tril(matmul(mH(lo), gl), -1) if gl is not None else None
        if gu is not None:
            t = triu(matmul(gu, mH(u)))
            phi = t if phi is None else phi + t
        ga = _solve_tri(mH(lo), mT(_solve_tri(mT(mH(u)), mT(phi), True, False)), True, True)  # L^-H phi U^-H
    elif m < n:  # wide: U = [U1 U2]
        u1 = u[..., :, :k]
        phi = matmul(mH(lo), gl) if gl is not None else None
        if gu is not None:
            t = -matmul(triu(gu), mH(u))
            phi = t if phi is None else phi + t
        ga = mT(_solve_tri(mT(mH(u1)), mT(tril(phi, -1)), True, False))  # (.) U1^-H
        if gu is not None:
            ga = concatenate([ga + triu(gu[..., :, :k]), gu[..., :, k:]], axis=-1)
        ga = _solve_tri(mH(lo), ga, True, True)
        if gu is None:
            ga = pad(ga, [(0, 0)] * (ga.ndim - 1) + [(0, n - k)])
    else:  # tall: L = [L1; L2]
        l1 = lo[..., :k, :]
        phi = matmul(gu, mH(u)) if gu is not None else None
        if gl is not None:
            t = -matmul(mH(lo), tril(gl, -1))
            phi = t if phi is None else phi + t
        ga = _solve_tri(mH(l1), triu(phi), True, True)
        if gl is not None:
            ga = concatenate([ga + tril(gl[..., :k, :], -1), gl[..., k:, :]], axis=-2)
        ga = mT(_solve_tri(mT(mH(u)), mT(ga), True, False))  # (.) U^-H
        if gl is None:
            ga = pad(ga, [(0, 0)] * (ga.ndim - 2) + [(0, m - k), (0, 0)])
    return matmul(p, ga)




@lu_l_p.vjp
def _lu_l_rule(g, s, *, m, n):
    # U = L1^{-1} (P^T A)[:k], recomputed: the U node saves L, so L's node cannot save U
    k = min(m, n)
    u = _solve_tri(s.r[..., :k, :], matmul(mT(s.p), s.a)[..., :k, :], False, True)
    return (_lu_backward(g, None, s.p, s.r, u, m, n),)


lu_u_p.vjp(lambda g, s, *, m, n: (_lu_backward(None, g, s.p, s.l, s.r, m, n),))


def lu(A, *, pivot=True):
    """torch's ``linalg.lu`` and ``dask.array.linalg.lu``: ``(P, L, U)`` with ``A = P L U`` (SciPy's
    convention), ``L`` unit lower triangular (m x k), ``U`` upper (k x n), ``k = min(m, n)``, for
    (batches of) rectangular matrices, each in one chunk.  ``L`` and ``U`` carry torch's gradients;
    ``P`` carries none."""
    x = as_tensor(A)
    if x.ndim < 2:
        raise RuntimeError(f"linalg.lu: Expected tensor with 2 or more dimensions. Got size: {list(x.shape)} "
                           "instead")
    A = _matrix(x, "lu")
    if not pivot:
        raise RuntimeError("linalg.lu_factor: LU without pivoting is not implemented on the CPU")
    a = _whole(A.array)
    m, n = A.shape[-2:]
    k = min(m, n)
    p, lo, u = _gufunc(_lu_kernel, "(m,n)->(m,m),(m,k),(k,n)", (a,), [(a.ndim, a.dtype)] * 3, sizes={"k": k})
    P = Tensor._make(p)  # a permutation: no gradient, as torch's
    L = lu_l_p.record(lo, A, save={"p": P, "a": A, "r": RESULT}, m=m, n=n)
    U = lu_u_p.record(u, A, save={"p": P, "l": L, "r": RESULT}, m=m, n=n)
    return LUResult(P, L, U)



# ------------------------------------------------------------ lu_factor / lu_solve
LUFactorResult = collections.namedtuple("LUFactorResult", ["LU", "pivots"])
LUFactorExResult = collections.namedtuple("LUFactorExResult", ["LU", "pivots", "info"])


def _swap(order, i, j, cols):
    """``order`` with entries ``i`` and ``j[..., 0]`` exchanged in each row (elementwise calls only:
    NumPy, cupy and test doubles alike)."""
    oi = order[..., i:i + 1]
    oj = np.take_along_axis(order, j, axis=-1)
    return np.where(cols == i, oj, np.where(cols == j, oi, order))


def _pivots_block(p, k):
    """LAPACK's pivots (1-based, int32) of the permutation ``p`` of ``A = P L U``: the row swapped with
    row ``i`` at step ``i``, replayed on the row order."""
    m = p.shape[-1]
    perm = np.argmax(p, axis=-2)                    # P^T A has A's row perm[i] at row i
    cols = np.arange(m, like=perm)
    cur = np.zeros_like(perm) + cols
    pivots = []
    for i in range(k):
        j = np.argmax(cur == perm[..., i:i + 1], axis=-1)[..., None]
        pivots.append(j)
        cur = _swap(cur, i, j, cols)
    if not pivots:  # an empty matrix
        return np.zeros_like(perm, shape=perm.shape[:-1] + (0,), dtype=np.int32)
    return (np.concatenate(pivots, axis=-1) + 1).astype(np.int32)


def _permutation_block(piv, m, out_dtype):
    """``P`` (``m x m``, ``A = P L U``) from LAPACK's 1-based pivots, the swaps replayed in order."""
    cols = np.arange(m, like=piv)
    perm = np.zeros_like(piv, shape=piv.shape[:-1] + (m,), dtype=np.int64) + cols
    for i in range(piv.shape[-1]):
        perm = _swap(perm, i, piv[..., i:i + 1].astype(np.int64) - 1, cols)
    return (cols[:, None] == perm[..., None, :]).astype(out_dtype)


def lu_factor(A, *, pivot=True):
    """torch's ``linalg.lu_factor``: ``(LU, pivots)``, ``L`` (unit diagonal, not stored) and ``U``
    packed in one m x n matrix and LAPACK's 1-based int32 row swaps, for (batches of) matrices each in
    one chunk.  ``LU`` carries torch's gradient (``lu_factor_ex_backward``: :func:`lu`'s, with ``L``'s
    cotangent the strict lower triangle of ``LU``'s, ``U``'s the upper); ``pivots`` none.  SciPy's
    ``lu_factor`` returns the same pair with 0-based pivots: daskgrad keeps torch's, which
    :func:`lu_solve` reads in either spelling."""
    x = as_tensor(A)
    if x.ndim < 2:
        raise RuntimeError(f"torch.lu_factor: Expected tensor with 2 or more dimensions. Got size: "
                           f"{list(x.shape)} instead")
    P, L, U = lu(x, pivot=pivot)
    m, n = x.shape[-2:]
    k = min(m, n)
    strict = tril(L, -1)
    LU = (pad(strict, [(0, 0)] * (L.ndim - 1) + [(0, n - k)]) if n > k else strict) + \
        (pad(U, [(0, 0)] * (U.ndim - 2) + [(0, m - k), (0, 0)]) if m > k else U)
    p = P.array
    piv = p.map_blocks(_pivots_block, k=k, drop_axis=p.ndim - 1, chunks=p.chunks[:-2] + ((k,),),
                       dtype=np.int32, meta=_meta(p._meta, p.ndim - 1, np.int32))
    return LUFactorResult(LU, Tensor._make(piv))


def lu_factor_ex(A, *, pivot=True, check_errors=False):
    """torch's ``linalg.lu_factor_ex``: :func:`lu_factor` and ``info`` (int32 zeros: a singular
    ``U`` is factored as LAPACK factors it, and a solve with it gives inf or NaN)."""
    LU, piv = lu_factor(A, pivot=pivot)
    return LUFactorExResult(LU, piv, Tensor._make(piv.array[..., 0] * 0))  # zeros of the pivots' batch and device


def _lu_solve_checks(LU, pivots, B, left):
    LU = _matrix(LU, "lu_solve")
    if LU.shape[-1] != LU.shape[-2]:
        raise RuntimeError(f"torch.linalg.lu_solve: A must be batches of square matrices, but they are "
                           f"{LU.shape[-2]} by {LU.shape[-1]} matrices")
    if B.ndim < 2:
        raise RuntimeError("linalg.lu_solve: The input tensor B must have at least 2 dimensions.")
    n = LU.shape[-1]
    if (B.shape[-2] if left else B.shape[-1]) != n:
        raise RuntimeError(f"linalg.lu_solve: Incompatible shapes of A and B for the equation "
                           f"{'AX = B' if left else 'XA = B'} ({n}x{n} and {B.shape[-2]}x{B.shape[-1]})")
    if pivots.shape[-1:] != (n,):
        raise RuntimeError("linalg.lu_solve: Number of pivots per batch should be same as the dimension of the "
                           "matrix")
    if pivots.dtype != np.int32:
        raise RuntimeError("linalg.lu_solve: pivots should be a Tensor of scalar type torch.int32")
    check_same_device(LU, B)
    check_broadcast(LU.shape[:-2], B.shape[:-2])
    return LU


def lu_solve(LU, pivots, B=None, *, left=True, adjoint=False, trans=None):
    """torch's ``linalg.lu_solve(LU, pivots, B, *, left=True, adjoint=False)``: ``X`` with ``A X = B``
    (``A^H X = B`` when ``adjoint``; ``X A = B`` when not ``left``) for ``A = P L U`` as
    :func:`lu_factor` packs it.  SciPy's spelling ``lu_solve((LU, pivots), b, trans=0)`` works too
    (``trans`` 0, 1, 2: ``A``, ``A^T``, ``A^H``; a vector ``b``), with torch's 1-based pivots.  Built
    from two triangular solves reading ``LU``'s triangles, so ``LU`` and ``B`` get torch's gradients
    (``linalg_lu_solve_LU``); ``pivots`` none."""
    if isinstance(LU, tuple):  # SciPy's: lu_solve((lu, piv), b, trans=0)
        (LU, pivots), B = LU, pivots
        x = as_tensor(B)
        vec = x.ndim == 1
        t = trans or 0
        if t == 1 and as_tensor(LU).dtype.kind == "c":  # A^T x = b is A^H conj(x) = conj(b)
            out = lu_solve(LU, pivots, conj(expand_dims(x, -1) if vec else x), adjoint=True)
            out = conj(out)
        else:
            out = lu_solve(LU, pivots, expand_dims(x, -1) if vec else x, adjoint=t in (1, 2))
        return squeeze(out, -1) if vec else out
    if trans is not None:
        raise TypeError("lu_solve(): trans= is SciPy's spelling, with lu_solve((LU, pivots), b); torch's is "
                        "adjoint=")
    B, pivots = as_tensor(B), as_tensor(pivots)
    LU = _lu_solve_checks(LU, pivots, B, left)
    if not left:  # X A = B is A^H X^H = B^H; X A^H = B is A X^H = B^H
        return mH(lu_solve(LU, pivots, mH(B), adjoint=not adjoint))
    n = LU.shape[-1]
    p = _whole(pivots.detach().array, 1)
    meta = _meta(LU._storage.value._meta, p.ndim + 1, LU.dtype)
    P = Tensor._make(p.map_blocks(_permutation_block, m=n, out_dtype=LU.dtype, dtype=LU.dtype, new_axis=p.ndim,
                                  chunks=p.chunks[:-1] + ((n,), (n,)), meta=meta))
    if not adjoint:  # X = U^-1 L^-1 P^T B
        y = _solve_tri(LU, matmul(mT(P), B), False, True)
        return _solve_tri(LU, y, True, False)
    y = _solve_tri(mH(LU), B, False, False)        # U^H y = B
    return matmul(P, _solve_tri(mH(LU), y, True, True))  # L^H z = y, X = P z
