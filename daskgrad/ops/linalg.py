"""Norms, solvers and matrix decompositions (``daskgrad.linalg``), with their VJP rules (contract:
see ``elementwise.py``); the products, triangles and diagonals they are built from are in
``products.py`` (re-exported here, so ``daskgrad.ops.linalg.matmul`` still names them).

Decompositions come in two layouts.  A chunked tall-and-skinny matrix (many
row chunks, columns in one chunk; or its transpose) runs dask's TSQR (``qr``, ``svd``,
``lstsq``, ``pinv``, ``svdvals`` and the 2 / nuclear norms), so a 10^7 x 50 matrix is never
gathered, and so do the rules, whose products with the long axis are blockwise or tree sums.
Everything else puts each matrix (the last two axes) in one chunk and runs NumPy's (or cupy's)
batched kernel per chunk: those matrices must fit in one worker's memory.

The engine's nodes have one output each, so a decomposition's outputs are separate nodes
(torch's one ``LinalgSvdBackward0`` node sums the same terms: its VJP is linear in the output
cotangents).  A rule that needs another output recomputes it from the input and its own output
(R = Q^H A, S V^H = U^H A), or saves an output whose node saves nothing back, so the saved values
form no reference cycle.  Single-output ops bind their primitive (its ``impl`` is the forward);
decompositions compute their outputs together and ``record`` each, as einsum (variadic) does.
"""
from __future__ import annotations

import collections
import numbers

import dask.array as da
import numpy as np
from dask.array.utils import meta_from_array

from .. import chunk
from .._data import TORCH_TYPE_NAMES
from ..graph import RESULT, primitive
from .._modes import is_grad_enabled
from .._tensor import Tensor
from ._util import as_tensor, check_broadcast, check_same_device, norm_axis, public, reduce_array
from .elementwise import abs, astype, conj, ones_like, pow, real_part, sign, where, zeros_like
from .reductions import _reduce, _reduction, amax, amin, cumsum, prod, sum
from .shape import expand_dims, pad, reshape, squeeze, transpose
from .products import (_meta, _quiet_meta, _real_dtype, diag, diag_embed, diagonal, dot, einsum,  # noqa: F401
                       inner, kron, matmul, mH, mT, outer, tensordot, trace, tril, triu, vdot)


# ========================================================================= norms
def _sgn(x):
    """torch's ``sgn``: ``x / |x|`` (0 at 0) for complex ``x``, the sign for real."""
    if x.dtype.kind != "c":
        return sign(x)
    r = abs(x)
    return where(r == 0, 0, x / where(r == 0, 1, r))


def _vector_norm_local(gx, x, r, axes, p):
    """torch's ``norm_backward`` (FunctionsManual.cpp), every case of ``p``."""
    if p == 0:
        return None
    if p == 1:
        return _sgn(x) * gx
    if p == 2:
        return x * where(r == 0, 0, gx / where(r == 0, 1, r))
    if p in (np.inf, -np.inf):
        ax = abs(x)
        mask = (ax == r) | (ax != ax)  # the extreme positions, NaN ones included
        return _sgn(x) * (gx / sum(mask, axis=axes, keepdims=True).astype(gx.dtype)) * mask.astype(gx.dtype)
    if p < 1:
        scaled = _sgn(x) * where(x == 0, 0, pow(abs(x), p - 1))
        return scaled * gx * pow(r, 1 - p)
    scaled = _sgn(x) * pow(abs(x), p - 1) if p < 2 else x * pow(abs(x), p - 2)
    return scaled * where(r == 0, 0, gx / pow(where(r == 0, 1, r), p - 1))


vector_norm_p = _reduction("vector_norm", "LinalgVectorNormBackward0", _vector_norm_local, save=("x", "r"))


def _vector_norm_array(a, axes, keepdims, p):
    if a.dtype == np.float16:  # (torch's norm of float16 is taken in float32, rounded once)
        return _vector_norm_array(a.astype(np.float32), axes, keepdims, p).astype(np.float16)
    if p == 2:
        sq = a * a if a.dtype.kind != "c" else da.real(a * da.conj(a))
        return da.sqrt(reduce_array(sq, "sum", axes, keepdims))
    absa = da.absolute(a)
    if p == np.inf:
        return reduce_array(absa, "max", axes, keepdims)
    if p == -np.inf:
        return reduce_array(absa, "min", axes, keepdims)
    if p == 0:
        return reduce_array((a != 0).astype(absa.dtype), "sum", axes, keepdims)
    if p == 1:
        return reduce_array(absa, "sum", axes, keepdims)
    powered = da.map_blocks(_abs_pow, a, p, dtype=absa.dtype, meta=absa._meta)
    return reduce_array(powered, "sum", axes, keepdims) ** (1.0 / p)


def _abs_pow(block, p):
    """``|block| ** p``; a zero to a negative power is inf (its norm is 0), as in NumPy, not a warning."""
    with np.errstate(divide="ignore"):
        return np.absolute(block) ** p


def _inexact(x):
    """NumPy's norms work in floating point: integer and bool tensors become float64."""
    x = as_tensor(x)
    return x if x.dtype.kind in "fc" else astype(x, np.float64)


def _check_ord(ord, strings=()):
    if ord is None or ord in strings:
        return
    if isinstance(ord, bool) or not isinstance(ord, numbers.Real):
        raise TypeError(f"norm order must be a number{' or one of ' + repr(strings) if strings else ''}, "
                        f"not {type(ord).__name__}")


def vector_norm(x, ord=2, axis=None, keepdims=False):
    """torch's ``linalg.vector_norm`` (NumPy's vector orders): ``sum(|x|**ord)**(1/ord)`` over ``axis``
    (all axes by default), ``ord`` any real, ``inf`` / ``-inf`` the max / min of ``|x|``, 0 the count
    of non-zeros.  Gradients are torch's, 0 where the norm is 0."""
    if isinstance(ord, str):
        raise TypeError(f"linalg.vector_norm: ord must be a number, not str ({ord!r})")
    _check_ord(ord)
    x = _inexact(x)
    p = 2.0 if ord is None else float(ord)
    return _reduce(vector_norm_p, x, axis, keepdims, _vector_norm_fwd, (("p", p),), p=p)


def _vector_norm_fwd(a, n, n_out, *, axes, keepdims, p):
    return _vector_norm_array(a, axes, keepdims, p)


def matrix_norm(x, ord="fro", axis=(-2, -1), keepdims=False):
    """torch's ``linalg.matrix_norm``: ``'fro'``, ``'nuc'`` (sum of singular values), ``2`` / ``-2``
    (largest / smallest singular value), ``1`` / ``-1`` (max / min column sum of ``|x|``), ``inf`` /
    ``-inf`` (max / min row sum) of the ``axis`` planes."""
    x = _inexact(x)
    _check_ord(ord, ("fro", "nuc"))
    if x.ndim < 2:
        raise RuntimeError("linalg.matrix_norm: The input tensor A must have at least 2 dimensions.")
    if isinstance(axis, (int, np.integer)) or len(axis) != 2:
        raise RuntimeError(f"linalg.matrix_norm: dim must be a 2-tuple. Got {axis}")
    r, c = norm_axis(axis[0], x.ndim), norm_axis(axis[1], x.ndim)
    if r == c:
        raise RuntimeError(f"linalg.matrix_norm: dims must be different. Got ({r}, {c})")
    if ord == "fro" or ord is None:
        return vector_norm(x, 2, axis=(r, c), keepdims=keepdims)
    if ord not in ("nuc", 1, -1, 2, -2, np.inf, -np.inf):
        raise RuntimeError(f"linalg.matrix_norm: Order {ord} not supported.")
    if ord in ("nuc", 2, -2):
        s = svdvals(transpose(x, [i for i in range(x.ndim) if i not in (r, c)] + [r, c]))
        out = sum(s, axis=-1) if ord == "nuc" else amax(s, axis=-1) if ord == 2 else amin(s, axis=-1)
        return expand_dims(out, tuple(sorted((r, c)))) if keepdims else out
    if ord in (np.inf, -np.inf):  # the inf norm is the 1 norm of the transpose
        r, c = c, r
    if not keepdims and r < c:  # the first reduction removes an axis before c
        c -= 1
    return (amax if ord > 0 else amin)(vector_norm(x, 1, axis=r, keepdims=keepdims), axis=c, keepdims=keepdims)


def _torch_norm_method(norm):
    """``x.norm(p="fro", dim=None, keepdim=False)`` as torch's method (its deprecated ``torch.norm``):
    a vector norm of the elements over ``dim`` (all of them by default, a matrix too), ``"nuc"`` the
    nuclear norm.  ``daskgrad.norm`` itself is ``numpy.linalg.norm``, whose ``ord=1`` of a matrix is
    the matrix 1-norm: the method keeps torch's number for torch's spelling."""
    def method(self, p="fro", dim=None, keepdim=False, dtype=None, *, axis=None, keepdims=None):
        dim = axis if dim is None else dim  # NumPy's spellings of the same arguments
        keepdim = keepdims if keepdims is not None else keepdim
        x = self if dtype is None else self.astype(dtype)
        if p == "nuc":
            return matrix_norm(x, "nuc", axis=(-2, -1) if dim is None else dim, keepdims=keepdim)
        return vector_norm(x, 2 if p == "fro" else p, axis=dim, keepdims=keepdim)
    method.__wrapped__ = norm  # (traceable to its op, as the lambdas of other methods are)
    return method


@public(("norm", _torch_norm_method))
def norm(x, ord=None, axis=None, keepdims=False):
    """``numpy.linalg.norm``: with ``axis`` None, the 2-norm of all entries when ``ord`` is None, else the
    vector norm of a 1-D or the matrix norm of a 2-D ``x``; an int ``axis`` gives vector norms, a pair
    matrix norms (see :func:`vector_norm`, :func:`matrix_norm`).  Gradients are torch's
    (``linalg.vector_norm`` and ``linalg.matrix_norm``)."""
    x = _inexact(x)
    _check_ord(ord, ("fro", "nuc"))
    if axis is None:
        if ord is None:
            return vector_norm(x, 2, None, keepdims)
        if x.ndim not in (1, 2):
            raise RuntimeError(f"linalg.norm: If dim is not specified but ord is, the input must be 1D or 2D. "
                               f"Got {x.ndim}D.")
        axis = tuple(range(x.ndim))
    elif isinstance(axis, (int, np.integer)) and not isinstance(axis, bool):
        axis = (axis,)
    elif not isinstance(axis, (tuple, list)):
        raise TypeError("'axis' must be None, an integer or a tuple of integers")
    if len(axis) == 1:
        if isinstance(ord, str):
            if x.ndim < 2:
                raise RuntimeError("linalg.matrix_norm: The input tensor A must have at least 2 dimensions.")
            raise RuntimeError(f"linalg.matrix_norm: dim must be a 2-tuple. Got {axis[0]}")
        return vector_norm(x, 2 if ord is None else ord, axis, keepdims)
    if len(axis) == 2:
        return matrix_norm(x, "fro" if ord is None else ord, tuple(axis), keepdims)
    raise RuntimeError(f"linalg.norm: If dim is specified, it must be of length 1 or 2. Got {list(axis)}")


# ================================================================ decompositions
def _check_float(x, name):
    if x.dtype.kind not in "fc":
        raise RuntimeError(f"linalg.{name}: Expected a floating point or complex tensor as input. Got "
                           f"{_TORCH_DTYPES.get(str(x.dtype), str(x.dtype))}")


_TORCH_DTYPES = {"int64": "Long", "int32": "Int", "int16": "Short", "int8": "Char", "uint8": "Byte", "bool": "Bool"}


def _matrix(x, name, square=False):
    """``x`` as a tensor of (batches of) matrices, with torch's errors for the wrong shape."""
    x = as_tensor(x)
    if x.ndim < 2:
        raise RuntimeError(f"linalg.{name}: The input tensor A must have at least 2 dimensions.")
    _check_float(x, name)
    if square and x.shape[-1] != x.shape[-2]:
        raise RuntimeError(f"linalg.{name}: A must be batches of square matrices, but they are "
                           f"{x.shape[-2]} by {x.shape[-1]} matrices")
    return x


def _whole(a, axes=2):
    """``a`` with each matrix (its last ``axes`` axes) in one chunk: a kernel sees whole matrices."""
    return a.rechunk({a.ndim - i: -1 for i in range(1, axes + 1)})


def _gufunc(kernel, signature, args, outs, sizes=None, **kwargs):
    """``da.apply_gufunc`` of a batched kernel over whole matrices; ``outs``: ``(ndim, dtype)`` of
    each output (a meta of the chunks' own type, so cupy and test doubles stay as they are)."""
    metas = tuple(_meta(args[0]._meta, nd, dt) for nd, dt in outs)
    return da.apply_gufunc(kernel, signature, *args, output_sizes=sizes or {},
                           meta=metas if len(metas) > 1 else metas[0], **kwargs)


def _tall(a):
    """Whether matrix ``a`` takes dask's TSQR path: 2-D, with several chunks along its long axis.
    Returns ``a`` rechunked for it (its short axis in one chunk), or None."""
    if a.ndim != 2:
        return None
    m, n = a.shape
    if m >= n and len(a.chunks[0]) > 1:
        return a.rechunk({1: -1})
    if m < n and len(a.chunks[1]) > 1:
        # dask's short-and-fat QR factors the first column chunk: it must be at least m wide
        return a.rechunk({0: -1, 1: a.chunks[1] if a.chunks[1][0] >= m else m})
    return None


# -------------------------------------------------------------------------- svd
SVDResult = collections.namedtuple("SVDResult", ["U", "S", "Vh"])
svd_u_p = primitive("svd_u", torch="LinalgSvdBackward0", save=("a", "r"))
svd_s_p = primitive("svd_s", torch="LinalgSvdBackward0", save=("u", "vh"))
svd_vh_p = primitive("svd_vh", torch="LinalgSvdBackward0", save=("a", "r"))


def _svd_kernel(a, full_matrices):
    return tuple(np.linalg.svd(a, full_matrices=full_matrices))


def _svd_arrays(a, full_matrices):
    """``(U, S, Vh)`` dask arrays: TSQR for a chunked tall (or wide) matrix, else one matrix per chunk."""
    tall = _tall(a)
    m, n = a.shape[-2:]
    if tall is not None:
        if full_matrices and m != n:
            raise ValueError(f"svd: full_matrices=True on a {m} x {n} matrix chunked along its long axis would "
                             "build a square factor of that size in one chunk; pass full_matrices=False")
        with _quiet_meta():
            return da.linalg.svd(tall)
    a, k = _whole(a), min(m, n)
    sig = "(m,n)->(m,m),(k),(n,n)" if full_matrices else "(m,n)->(m,k),(k),(k,n)"
    return _gufunc(_svd_kernel, sig, (a,), [(a.ndim, a.dtype), (a.ndim - 1, _real_dtype(a.dtype)),
                                            (a.ndim, a.dtype)], sizes={"k": k}, full_matrices=full_matrices)


def _svd_e(s2):
    """torch's E from the squared singular values: E_jk = S_k^2 - S_j^2 off the diagonal, 1 on it
    (the diagonal difference is exactly 0)."""
    return expand_dims(s2, -2) - expand_dims(s2, -1) + diag_embed(ones_like(s2), 0, (s2.chunks[-1],) * 2)


def _skew(x):
    return x - mH(x)


@svd_u_p.vjp
def _svd_u_rule(g, s, *, m, n, full):
    """torch's ``svd_backward`` with only gU.  ``W = A^H U = V S`` stands for ``V S`` (S V^H = W^H), so
    no S is divided by unless torch's formula divides by it (the tall and complex terms): a zero
    singular value leaves the gradient, and its derivative, finite as torch's."""
    k = min(m, n)
    u, gu = (s.r[..., :k], g[..., :k]) if full and m > k else (s.r, g)
    w = matmul(mH(s.a), u)                          # V S, (n, k)
    s2 = sum(real_part(w * conj(w)) if w.dtype.kind == "c" else w * w, axis=-2)
    uhgu = _skew(matmul(mH(u), gu))
    ga = matmul(u, uhgu / _svd_e(s2))               # times S Vh = W^H below
    if u.dtype.kind == "c":  # half of torch's i Im(diag(U^H gU)) / S; the Vh node adds the other half
        ga = ga + u * expand_dims(diagonal(uhgu, 0, -2, -1) / (4 * s2), -2)
    if m > n:
        sv = pow(s2, 0.5)
        gusinv = gu / expand_dims(sv, -2)
        ga = ga + (gusinv - matmul(u, matmul(mH(u), gusinv))) / expand_dims(sv, -2)
    return (matmul(ga, mH(w)),)


@svd_vh_p.vjp
def _svd_vh_rule(g, s, *, m, n, full):
    """torch's ``svd_backward`` with only gVh; ``W = A V = U S`` stands for ``U S`` (see the U rule)."""
    k = min(m, n)
    vh, gvh = (s.r[..., :k, :], g[..., :k, :]) if full and n > k else (s.r, g)
    w = matmul(s.a, mH(vh))                         # U S, (m, k)
    s2 = sum(real_part(w * conj(w)) if w.dtype.kind == "c" else w * w, axis=-2)
    vhgv = _skew(matmul(vh, mH(gvh)))
    ga = matmul(vhgv / _svd_e(s2), vh)              # U S times this
    if vh.dtype.kind == "c":
        ga = ga - expand_dims(diagonal(vhgv, 0, -2, -1) / (4 * s2), -1) * vh
    if m < n:
        sv = pow(s2, 0.5)
        sinvgvh = gvh / expand_dims(sv, -1)
        ga = ga + (sinvgvh - matmul(matmul(sinvgvh, mH(vh)), vh)) / expand_dims(sv, -1)
    return (matmul(w, ga),)


@svd_s_p.vjp
def _svd_s_rule(g, s, *, m, n, full):
    k = min(m, n)
    u, vh = (s.u[..., :k], s.vh[..., :k, :]) if full else (s.u, s.vh)
    g = astype(g, u.dtype) if u.dtype.kind == "c" else g
    if m >= n:
        return (matmul(u, expand_dims(g, -1) * vh),)
    return (matmul(u * expand_dims(g, -2), vh),)


def svd(A, full_matrices=True, compute_uv=True):
    """torch's ``linalg.svd``: ``(U, S, Vh)`` with ``A = U diag(S) Vh``.  A chunked tall-and-skinny
    (or short-and-wide) matrix runs dask's TSQR-based SVD and needs ``full_matrices=False``; other
    matrices are decomposed one matrix per chunk.  Gradients are torch's (distinct singular values;
    for complex inputs the loss must not depend on the singular vectors' phases).  NumPy's
    ``compute_uv=False`` returns ``S`` alone (:func:`svdvals`)."""
    if not compute_uv:
        return svdvals(A)
    A = _matrix(A, "svd")
    u, s, vh = _svd_arrays(A.array, full_matrices)
    m, n = A.shape[-2:]
    # on record, not impl: one computation, one node per output (the engine's nodes have one output)
    U = svd_u_p.record(u, A, save={"a": A, "r": RESULT}, m=m, n=n, full=full_matrices)
    Vh = svd_vh_p.record(vh, A, save={"a": A, "r": RESULT}, m=m, n=n, full=full_matrices)
    S = svd_s_p.record(s, A, save={"u": U, "vh": Vh}, m=m, n=n, full=full_matrices)
    return SVDResult(U, S, Vh)


def svdvals(A):
    """torch's ``linalg.svdvals`` (descending); its gradient is ``U diag(gS) Vh``, as torch's."""
    return svd(A, full_matrices=False).S


# ----------------------------------------------------------------------- solve
_SINGULAR = "torch.linalg.solve: The solver failed because the input matrix is singular."


def _solve_block(a, b, singular=None):
    """``a^{-1} b``; a singular ``a`` raises torch's LinAlgError.  ``singular``: the message for a
    triangular ``a`` whose rank is checked first (its diagonal against roundoff), where a solve would
    succeed on the roundoff and return noise."""
    if singular is not None and a.size:
        d = np.abs(np.diagonal(a, axis1=-2, axis2=-1))
        if (d <= a.shape[-1] * np.finfo(d.dtype).eps * d.max(axis=-1, keepdims=True)).any():
            raise chunk.LinAlgError(singular)
    try:
        return np.linalg.solve(a, b)
    except np.linalg.LinAlgError:
        raise chunk.LinAlgError(_SINGULAR) from None


def _solve_arrays(a, b, block=_solve_block, **params):
    """``A^{-1} B`` batched, ``b`` of shape (..., n, k): each matrix of ``a`` in one chunk, ``b``'s
    columns (and both batches) keep their chunks, so a right-hand side with a long axis of many chunks
    is solved chunk by chunk, never gathered.  ``block(a, b, **params)`` solves one pair of chunks."""
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = _whole(da.broadcast_to(a, batch + a.shape[-2:]))
    b = da.broadcast_to(b, batch + b.shape[-2:]).rechunk({len(batch): -1})
    ind = tuple(range(len(batch)))
    i, j, k = len(batch), len(batch) + 1, len(batch) + 2
    dtype = np.result_type(a.dtype, b.dtype)
    return da.blockwise(block, ind + (i, k), a, ind + (i, j), b, ind + (j, k), concatenate=True, dtype=dtype,
                        meta=meta_from_array(b._meta, ndim=len(batch) + 2, dtype=dtype), **params)


def _vector_rhs(a, b):
    """torch's rule: B is a (batch of) vector(s) when 1-D or shaped as A without its last axis."""
    return b.ndim == 1 or (b.ndim == a.ndim - 1 and b.shape == a.shape[:-1])


def _solve_operands(a, b, left=True):
    a, b = _matrix(a, "solve", square=True), as_tensor(b)
    check_same_device(a, b)
    vec = _vector_rhs(a, b)
    rows = b.shape[-1 if vec else -2] if b.ndim else 0
    if (b.ndim < 1 or rows != a.shape[-1]) and left:
        cols = 1 if vec else b.shape[-1]
        raise RuntimeError(f"linalg.solve: Incompatible shapes of A and B for the equation AX = B "
                           f"({a.shape[-2]}x{a.shape[-1]} and {rows}x{cols})")
    if not left and (vec or b.shape[-1] != a.shape[-2]):
        raise RuntimeError(f"linalg.solve: Incompatible shapes of A and B for the equation XA = B "
                           f"({a.shape[-2]}x{a.shape[-1]} and {b.shape[-2] if b.ndim > 1 else 1}x{b.shape[-1]})")
    check_broadcast(a.shape[:-2], b.shape[:-1 if vec else -2])
    return a, b, vec


def _solve_impl(a, b, *, vec, singular=None):
    extra = {} if singular is None else {"singular": singular}
    return _solve_arrays(a, b[..., None], **extra)[..., 0] if vec else _solve_arrays(a, b, **extra)


solve_p = primitive("solve", torch="LinalgSolveExBackward0", impl=_solve_impl, args=("a", "b"), save=("a", "r"))


def solve(A, B, *, left=True):
    """torch's ``linalg.solve``: ``X`` with ``A X = B`` (``X A = B`` when ``left=False``), batched.  Each
    matrix of ``A`` is solved in one chunk (it must fit a worker); ``B``'s columns keep their chunks,
    so a long right-hand side is solved chunk by chunk.  A singular ``A`` raises torch's
    :class:`LinAlgError` when computed."""
    A, B, vec = _solve_operands(A, B, left)
    if not left:
        return mT(solve(mT(A), mT(B)))
    return solve_p.bind(A, B, vec=vec)


def _solve_triangular_checked(A, B, singular):
    """``A^{-1} B`` for a triangular ``A`` that raises ``singular`` when ``A`` is singular to roundoff."""
    A, B, vec = _solve_operands(A, B)
    return solve_p.bind(A, B, vec=vec, singular=singular)


@solve_p.vjp
def _solve_rule(g, s, *, vec, singular=None):
    # gB = A^{-H} gX, gA = -gB X^H (torch's linalg_solve_backward)
    gb = solve(mH(s.a), g) if singular is None else _solve_triangular_checked(mH(s.a), g, singular)
    if not s.needs[0]:
        return None, gb
    x = s.r
    ga = -(expand_dims(gb, -1) * expand_dims(conj(x), -2) if vec else matmul(gb, mH(x)))
    return ga, gb


def _solve_right(y, m, singular=None):
    """``Y M^{-1}``, by a solve with ``Y``'s rows as right-hand sides (they keep their chunks); for a
    triangular ``M``, ``singular`` is the error when it is singular to roundoff."""
    return mH(solve(mH(m), mH(y)) if singular is None else _solve_triangular_checked(mH(m), mH(y), singular))


# ------------------------------------------------------------------- inv / det
def _square_operand(name):
    return lambda x: (_matrix(x, name, square=True),)


def _per_matrix(kernel, out_ndim=2):
    """The forward of a square op: ``kernel`` on each whole matrix, ``out_ndim`` core axes out."""
    sig = "(n,n)->" + ("(n,n)" if out_ndim == 2 else "()")

    def impl(a, **_):
        a = _whole(a)
        return _gufunc(kernel, sig, (a,), [(a.ndim - 2 + out_ndim, a.dtype)])
    return impl


inv_p = primitive("inv", torch="LinalgInvExBackward0", impl=_per_matrix(np.linalg.inv), save=("r",),
                  prepare=_square_operand("inv"))
inv_p.vjp(lambda g, s: (-matmul(mH(s.r), matmul(g, mH(s.r))),))


def inv(A):
    """torch's ``linalg.inv`` of (batches of) square matrices, each in one chunk."""
    return inv_p.bind(A)


det_p = primitive("det", torch="LinalgDetBackward0", impl=_per_matrix(np.linalg.det, 0), args=("a",), save=("a", "r"),
                  prepare=_square_operand("det"))


@det_p.vjp
def _det_rule(g, s):
    """torch's ``linalg_det_backward``: ``g conj(det) A^{-H}`` for an invertible matrix; for a singular
    one (``|det|`` at most ``n eps max|A|^n``) the adjugate through the SVD, ``det(U Vh)^* g U
    diag(prod_{j != i} S_j) Vh``, finite where the inverse is not.  Each branch runs on a stand-in
    where the other is taken (the identity to invert, ``diag(1..n)`` to decompose), so neither fails
    nor leaks NaN into a second derivative.  Differentiated again (``create_graph``), the singular
    branch keeps the SVD's value but takes its derivative from the adjugate as a polynomial in ``A``
    (:func:`_adjugate_polynomial`), defined at every rank, where the SVD's is not (torch's defect at
    rank n-2 and below, and at complex singular matrices); for n up to ``_ADJ_POLY_MAX``."""
    a, d = s.a, s.r
    n = a.shape[-1]
    if n == 0:  # an empty matrix's determinant is 1, whatever no entry is: its gradient is empty
        return (zeros_like(a),)
    eps = np.finfo(_real_dtype(a.dtype)).eps
    ones = ones_like(real_part(a[..., 0]) if a.dtype.kind == "c" else a[..., 0])
    eye = diag_embed(ones, 0, a.chunks[-2:])
    scale = amax(abs(a), axis=(-2, -1))
    singular = expand_dims(abs(d) <= n * eps * pow(scale, n), (-2, -1))
    gm = expand_dims(g, (-2, -1))
    regular = gm * conj(expand_dims(d, (-2, -1))) * mH(inv(where(singular, eye, a)))
    u, sv, vh = svd(where(singular, a, diag_embed(cumsum(ones, axis=-1), 0, a.chunks[-2:])))
    others = prod(where(eye != 0, 1, expand_dims(sv, -2)), axis=-1)  # prod_{j != i} S_j, exact with zeros
    adj_h = matmul(u * expand_dims(expand_dims(conj(det(u) * det(vh)), -1) * others, -2), vh)  # adj(A)^H
    if is_grad_enabled() and n <= _ADJ_POLY_MAX and (a.requires_grad or adj_h.requires_grad):
        poly = mH(_adjugate_polynomial(where(singular, a, eye), eye, scale.detach()))
        adj_h = adj_h.detach() + (poly - poly.detach())
    return (where(singular, gm * adj_h, regular),)


_ADJ_POLY_MAX = 16  # the polynomial's n matrix products and its cancellation stay small up to here


def _adjugate_polynomial(a, eye, scale):
    """adj(A) by Faddeev-LeVerrier: M_1 = I, M_k = A M_{k-1} - tr(A M_{k-1}) / (k-1) I, adj(A) =
    (-1)^(n-1) M_n, a polynomial in ``A`` (so its derivative exists at every rank), computed on
    ``A / scale`` (entries at most 1; ``scale`` a constant) and scaled back by ``scale^(n-1)``."""
    n = a.shape[-1]
    scale = expand_dims(where(scale == 0, 1, scale), (-2, -1))
    b = a / scale
    m = eye if eye.dtype == b.dtype else astype(eye, b.dtype)
    for k in range(2, n + 1):
        bm = matmul(b, m)
        m = bm - expand_dims(sum(diagonal(bm, 0, -2, -1), axis=-1) / (k - 1), (-2, -1)) * eye
    return (-1) ** (n - 1) * pow(scale, n - 1) * m


def det(A):
    """torch's ``linalg.det``; its gradient is torch's, finite at singular matrices too."""
    return det_p.bind(A)


SlogdetResult = collections.namedtuple("SlogdetResult", ["sign", "logabsdet"])
slogdet_sign_p = primitive("slogdet_sign", torch="LinalgSlogdetBackward0", save=("a", "r"))
slogdet_logabs_p = primitive("slogdet_logabsdet", torch="LinalgSlogdetBackward0", save=("a",))
slogdet_logabs_p.vjp(lambda g, s: (expand_dims(expand_dims(g, -1), -1) * mH(inv(s.a)),))


@slogdet_sign_p.vjp
def _slogdet_sign_rule(g, s):
    if s.r.dtype.kind != "c":  # the sign of a real determinant is locally constant
        return (None,)
    # (d sign)*(g) = -i Im(conj(g) sign) A^{-H} (torch's slogdet_backward)
    c = real_part(conj(g) * s.r * -1j) * -1j
    return (expand_dims(expand_dims(c, -1), -1) * mH(inv(s.a)),)


def _slogdet_kernel(a):
    return tuple(np.linalg.slogdet(a))


def slogdet(A):
    """torch's ``linalg.slogdet``: ``(sign, logabsdet)`` with ``det = sign * exp(logabsdet)``."""
    A = _matrix(A, "slogdet", square=True)
    a = _whole(A.array)
    sgn, logabs = _gufunc(_slogdet_kernel, "(n,n)->(),()", (a,),
                          [(a.ndim - 2, a.dtype), (a.ndim - 2, _real_dtype(a.dtype))])
    return SlogdetResult(slogdet_sign_p.record(sgn, A, save={"a": A, "r": RESULT}),
                         slogdet_logabs_p.record(logabs, A, save={"a": A}))


# -------------------------------------------------------------------- cholesky
def _cholesky_impl(a, *, upper):
    lo = _per_matrix(np.linalg.cholesky)(a)
    return da.conj(da.swapaxes(lo, -1, -2)) if upper else lo


cholesky_p = primitive("cholesky", torch="LinalgCholeskyExBackward0", impl=_cholesky_impl, save=("r",),
                       prepare=_square_operand("cholesky"))


@cholesky_p.vjp
def _cholesky_rule(g, s, *, upper):
    # torch's cholesky_backward (Murray 2016): gA = L^{-H} Phi(L^H gL) L^{-1}
    lo, gl = (mH(s.r), mH(g)) if upper else (s.r, g)
    ga = tril(matmul(mH(lo), gl))
    ga = 0.5 * (ga + mH(tril(ga, -1)))
    return (_solve_right(solve(mH(lo), ga), lo),)


def cholesky(A, *, upper=False):
    """torch's ``linalg.cholesky``: ``L`` lower triangular with ``A = L L^H`` (``U = L^H`` when
    ``upper``), each matrix in one chunk.  A matrix that is not positive-definite raises when computed."""
    return cholesky_p.bind(A, upper=upper)


# --------------------------------------------------------------------------- qr
QRResult = collections.namedtuple("QRResult", ["Q", "R"])
qr_q_p = primitive("qr_q", torch="LinalgQrBackward0", save=("a", "r"))
qr_r_p = primitive("qr_r", torch="LinalgQrBackward0", save=("q", "r"))

_QR_MODE_ERROR = ("The derivative of linalg.qr depends on Q, which is not computed when mode='r'. Please use "
                  "linalg.qr(A, mode='reduced') if you are going to differentiate through linalg.qr.")
_QR_COMPLETE_ERROR = "The QR decomposition is not differentiable when mode='complete' and nrows > ncols."
# torch's gradient there is R^{-H} of a singular R: inf, or roundoff amplified by 1e15
_QR_RANK_ERROR = ("linalg.qr backward: R is singular (A has rank below its number of columns): the QR decomposition "
                  "of a rank-deficient matrix is not differentiable")


def _syminvadj(x):
    y = x + mH(x)
    return y - 0.5 * diag_embed(real_part(diagonal(y, 0, -2, -1)), 0, y.chunks[-2:])


def _tril_im_inv_adj_skew(x):
    y = tril(x - mH(x))
    return y - 0.5 * diag_embed(diagonal(y, 0, -2, -1), 0, y.chunks[-2:])


def _qr_backward(gq, gr, q, r, m, n):
    """torch's ``linalg_qr_backward`` with either cotangent ``None`` (zero)."""
    if gq is not None and gr is not None:
        small = matmul(gr, mH(r)) - matmul(mH(q), gq)
    elif gq is not None:
        small = -matmul(mH(q), gq)
    else:
        small = matmul(gr, mH(r))
    if m >= n:
        ga = matmul(q, _syminvadj(triu(small)))
        if gq is not None:
            ga = ga + gq
        return _solve_right(ga, mH(r), _QR_RANK_ERROR)  # ga R^{-H}
    ga = matmul(q, _tril_im_inv_adj_skew(-small))
    ga = _solve_right(ga, mH(r[..., :, :m]), _QR_RANK_ERROR)
    ga = pad(ga, [(0, 0)] * (ga.ndim - 1) + [(0, n - m)])  # zero gradient for R's columns past m
    if gr is not None:
        ga = ga + matmul(q, gr)
    return ga


@qr_q_p.vjp
def _qr_q_rule(g, s, *, m, n, mode):
    if mode == "complete" and m > n:
        raise RuntimeError(_QR_COMPLETE_ERROR)
    q = s.r
    r = triu(matmul(mH(q), s.a))  # R = Q^H A, recomputed: the R node saves Q, so Q's node cannot save R
    return (_qr_backward(g, None, q, r, m, n),)


@qr_r_p.vjp
def _qr_r_rule(g, s, *, m, n, mode):
    if mode == "r":
        raise RuntimeError(_QR_MODE_ERROR)
    if mode == "complete" and m > n:
        raise RuntimeError(_QR_COMPLETE_ERROR)
    return (_qr_backward(None, g, s.q, s.r, m, n),)


def _qr_kernel(a, mode):
    return tuple(np.linalg.qr(a, mode=mode))


def qr(A, mode="reduced"):
    """torch's ``linalg.qr``: ``(Q, R)`` with ``A = Q R``; ``mode`` ``'reduced'``, ``'complete'`` or ``'r'``
    (``Q`` empty).  A chunked tall-and-skinny matrix runs dask's TSQR (never gathered; its Q keeps the
    row chunks, its R is one chunk); other matrices are factored one matrix per chunk, and so is
    ``'complete'`` mode, whose m x m ``Q`` must fit a worker."""
    if mode not in ("reduced", "complete", "r"):
        raise RuntimeError(f"qr received unrecognized mode '{mode}' but expected one of 'reduced' (default), 'r', "
                           "or 'complete'")
    A = _matrix(A, "qr")
    m, n = A.shape[-2:]
    tall = _tall(A.array) if mode != "complete" else None
    if tall is not None:
        with _quiet_meta():
            q, r = da.linalg.qr(tall)
        if m < n:  # dask's short-and-fat QR forms R = Q^T A: wrong for complex A, so R = Q^H A here
            r = da.matmul(da.conj(q.T), tall)
    else:
        a, k = _whole(A.array), min(m, n)
        kq = m if mode == "complete" else k
        q, r = _gufunc(_qr_kernel, "(m,n)->(m,p),(p,n)" if kq == k else "(m,n)->(m,m),(m,n)", (a,),
                       [(a.ndim, a.dtype), (a.ndim, a.dtype)], sizes={"p": kq},
                       mode="reduced" if mode == "r" else mode)
    Q = qr_q_p.record(q, A, save={"a": A, "r": RESULT}, m=m, n=n, mode=mode)
    R = qr_r_p.record(r, A, save={"q": Q if mode != "r" else None, "r": RESULT}, m=m, n=n, mode=mode)
    if mode == "r":
        empty = meta_from_array(A._storage.value._meta, ndim=1, dtype=A.dtype)  # (shape (0,), on A's device)
        Q = Tensor._make(da.from_array(empty, chunks=-1, asarray=False))
    return QRResult(Q, R)


# ------------------------------------------------------------ householder_product
def _hh_check(A, tau):
    """torch's checks of ``linalg.householder_product``'s arguments, in its order."""
    name = "torch.linalg.householder_product"
    if A.ndim < 2:
        raise RuntimeError(f"{name}: input must have at least 2 dimensions.")
    if A.shape[-2] < A.shape[-1]:
        raise RuntimeError(f"{name}: input.shape[-2] must be greater than or equal to input.shape[-1]")
    if A.shape[-1] < (tau.shape[-1] if tau.ndim else 1):
        raise RuntimeError(f"{name}: input.shape[-1] must be greater than or equal to tau.shape[-1]")
    if A.ndim - tau.ndim != 1:
        raise RuntimeError(f"{name}: Expected tau to have one dimension less than input, but got tau.ndim equal to "
                           f"{tau.ndim} and input.ndim is equal to {A.ndim}")
    if A.ndim > 2 and tau.shape[:-1] != A.shape[:-2]:
        raise RuntimeError(f"{name}: Expected batch dimensions of tau to be equal to input.shape[:-2], but got "
                           f"{list(tau.shape[:-1])}")
    if tau.dtype != A.dtype:
        raise RuntimeError(f"{name}: tau dtype {TORCH_TYPE_NAMES.get(str(tau.dtype), tau.dtype)} does not match "
                           f"input dtype {TORCH_TYPE_NAMES.get(str(A.dtype), A.dtype)}")


def householder_product(A, tau):
    """torch's ``linalg.householder_product`` (LAPACK's ``orgqr``/``ungqr``): the first ``n`` columns of
    ``H_1 H_2 ... H_k``, ``H_i = I - tau_i v_i v_i^H``, where ``v_i`` is column ``i`` of ``A`` below the
    diagonal with a 1 on it (``k = tau.shape[-1]``); ``A`` is ``(..., m, n)`` with ``m >= n``.

    Composed of differentiable ops (one rank-one update per reflector), so its gradient is the
    composition's, torch's ``householder_product_backward`` value: zero for ``A``'s diagonal and upper
    triangle.  Each matrix is one chunk; meant for parameter-sized matrices.

    Parameters
    ----------
    A : Tensor
        The reflectors below the diagonals, ``(..., m, n)``.
    tau : Tensor
        Their scale factors, ``(..., k)`` with ``k <= n``.

    Returns
    -------
    Tensor
        ``(..., m, n)``.

    Examples
    --------
    >>> A = dg.tensor([[1.0, 0.0], [0.5, 1.0], [0.5, 2.0]])
    >>> dg.linalg.householder_product(A, dg.tensor([1.0, 0.0])).numpy()
    array([[ 0.  , -0.5 ],
           [-0.5 ,  0.75],
           [-0.5 , -0.25]], dtype=float32)
    """
    A, tau = as_tensor(A), as_tensor(tau)
    _hh_check(A, tau)
    _check_float(A, "householder_product")
    m, n = A.shape[-2:]
    batch = [(0, 0)] * (A.ndim - 2)
    ones = ones_like(diagonal(A, 0, -2, -1))
    eye_n = diag_embed(ones, 0, (ones.chunks[-1],) * 2)
    if m > n:  # (dask cannot pad an empty array: no column, no identity to pad)
        eye_mn = pad(eye_n, batch + [(0, m - n), (0, 0)]) if n else zeros_like(A)
    else:
        eye_mn = eye_n
    V = tril(A, -1) + eye_mn  # column i: v_i
    Q = eye_mn
    for i in reversed(range(tau.shape[-1])):
        v = V[..., :, i]
        w = sum(expand_dims(conj(v), -1) * Q, axis=-2)  # v^H Q
        Q = Q - expand_dims(expand_dims(tau[..., i], -1) * v, -1) * expand_dims(w, -2)
    if tau.shape[-1] == 0 and (A.requires_grad or tau.requires_grad) and is_grad_enabled():  # no reflector: torch's
        # node, whose backward gives neither input a gradient (None, not zeros)
        return _no_reflector_p.record(Q.array, A if A.requires_grad else None, tau if tau.requires_grad else None)
    return Q


_no_reflector_p = primitive("householder_product_empty", torch="LinalgHouseholderProductBackward0")
_no_reflector_p.vjp(lambda g, s: (None, None))


def _geqrf_kernel(a):
    h, t = np.linalg.qr(a, mode="raw")  # LAPACK's geqrf; h is its result transposed
    return np.swapaxes(h, -1, -2), t


def _geqrf(A):
    """``torch.geqrf`` (not differentiable, as torch's): LAPACK's compact QR, ``(a, tau)``: ``R`` on and above
    ``a``'s diagonals, the Householder vectors below, their factors in ``tau``."""
    A = _matrix(A, "geqrf")
    a = _whole(A.array)
    m, n = A.shape[-2:]
    out, tau = _gufunc(_geqrf_kernel, "(m,n)->(m,n),(k)", (a,), [(a.ndim, a.dtype), (a.ndim - 1, a.dtype)],
                       sizes={"k": min(m, n)})
    return Tensor._make(out), Tensor._make(tau)


# ------------------------------------------------------------------------- eigh
EighResult = collections.namedtuple("EighResult", ["eigenvalues", "eigenvectors"])
eigh_l_p = primitive("eigh_eigenvalues", torch="LinalgEighBackward0", save=("v",))
eigh_v_p = primitive("eigh_eigenvectors", torch="LinalgEighBackward0", save=("a", "r"))
eigh_l_p.vjp(lambda g, s: (matmul(s.v * expand_dims(astype(g, s.v.dtype) if s.v.dtype.kind == "c" else g, -2),
                                  mH(s.v)),))


def _hermitian_part(a, uplo):
    """The matrix eigh reads: the ``uplo`` triangle and its conjugate transpose."""
    if uplo == "L":
        return tril(a) + mH(tril(a, -1))
    return triu(a) + mH(triu(a, 1))


@eigh_v_p.vjp
def _eigh_v_rule(g, s, *, uplo):
    """torch's ``linalg_eig_backward`` (Hermitian) with only gV; L = diag(V^H A V)."""
    v = s.r
    lam = real_part(diagonal(matmul(mH(v), matmul(_hermitian_part(s.a, uplo), v)), 0, -2, -1))
    vhgv = matmul(mH(v), g)
    vhgv = 0.5 * (vhgv - mH(vhgv))
    e = expand_dims(lam, -2) - expand_dims(lam, -1) + diag_embed(ones_like(lam), 0, (lam.chunks[-1],) * 2)
    return (matmul(v, matmul(vhgv / e, mH(v))),)


def _eigh_kernel(a, UPLO):
    return tuple(np.linalg.eigh(a, UPLO=UPLO))


def eigh(A, UPLO="L"):
    """torch's ``linalg.eigh``: ascending eigenvalues and orthonormal eigenvectors of (batches of)
    Hermitian matrices, read from the ``UPLO`` triangle, each matrix in one chunk.  Gradients are torch's
    (distinct eigenvalues), the full Hermitian matrix rather than one triangle."""
    if UPLO not in ("L", "U"):
        raise RuntimeError(f"Expected UPLO argument to be 'L' or 'U', but got {UPLO}")
    A = _matrix(A, "eigh", square=True)
    a = _whole(A.array)
    w, v = _gufunc(_eigh_kernel, "(n,n)->(n),(n,n)", (a,), [(a.ndim - 1, _real_dtype(a.dtype)), (a.ndim, a.dtype)],
                   UPLO=UPLO)
    V = eigh_v_p.record(v, A, save={"a": A, "r": RESULT}, uplo=UPLO)
    return EighResult(eigh_l_p.record(w, A, save={"v": V}), V)


def eigvalsh(A, UPLO="L"):
    """torch's ``linalg.eigvalsh`` (ascending)."""
    return eigh(A, UPLO).eigenvalues


# ------------------------------------------------------------------------- pinv
def _pinv_impl(a, *, atol, rtol, m, n):
    if not min(m, n):  # the n x m zero matrix, as empty as ``a`` (no singular value to take a maximum of)
        return da.conj(da.swapaxes(a, -1, -2))
    u, s, vh = _svd_arrays(a, False)
    cutoff = da.maximum(atol or 0.0, rtol * s.max(axis=-1, keepdims=True))
    sinv = da.where(s > cutoff, 1 / da.where(s > cutoff, s, 1), 0).astype(s.dtype)
    return da.matmul(da.conj(da.swapaxes(vh, -1, -2)) * sinv[..., None, :], da.conj(da.swapaxes(u, -1, -2)))


pinv_p = primitive("pinv", torch="LinalgPinvBackward0", impl=_pinv_impl, args=("a",), save=("a", "r"),
                   prepare=lambda x: (_matrix(x, "pinv"),))


@pinv_p.vjp
def _pinv_rule(g, s, *, atol, rtol, m, n):
    return (_pinv_backward(g, s.r, s.a, m, n),)


def _pinv_backward(g, p, a, m, n):
    """torch's ``pinv_backward``, with each product grouped so the long axis of a tall matrix never
    meets itself (no m x m intermediate)."""
    ph, gh = mH(p), mH(g)
    if m <= n:
        k = matmul(gh, p)                                    # (m, m)
        kph = matmul(k, ph)
        return (-mH(matmul(p, k)) + kph - matmul(a, matmul(p, kph)) +
                matmul(ph, matmul(p, gh - matmul(k, a))))
    k = matmul(p, gh)                                        # (n, n)
    phk = matmul(ph, k)
    return -mH(matmul(k, p)) + matmul(gh - matmul(a, k), matmul(p, ph)) + phk - matmul(phk, matmul(p, a))


def pinv(A, *, atol=None, rtol=None, hermitian=False, rcond=None):
    """torch's ``linalg.pinv`` from the SVD: singular values at most ``max(atol, rtol * S_max)`` count as
    zero (``rtol`` defaults to ``eps * max(m, n)`` when ``atol`` is not given; NumPy's ``rcond`` is
    ``rtol``).  A chunked tall-and-skinny matrix uses the TSQR path; ``hermitian`` is accepted and
    computes the same result through the SVD."""
    A = _matrix(A, "pinv")
    m, n = A.shape[-2:]
    rtol = rcond if rtol is None else rtol
    if rtol is None:
        rtol = 0.0 if atol else np.finfo(_real_dtype(A.dtype)).eps * max(m, n)
    return pinv_p.bind(A, atol=atol, rtol=rtol, m=m, n=n)


# ------------------------------------------------------------------------ lstsq
LstsqResult = collections.namedtuple("LstsqResult", ["solution", "residuals", "rank", "singular_values"])
lstsq_x_p = primitive("lstsq_solution", torch="LinalgLstsqBackward0", args=("a", "b"), save=("a", "b"))
lstsq_res_p = primitive("lstsq_residuals", torch="LinalgLstsqBackward0", args=("a", "b"), save=("a", "b", "x"))


@lstsq_x_p.vjp
def _lstsq_x_rule(g, s, *, vec):
    # torch's linalg_lstsq_backward, gradient from the solution
    a, b = s.a, (expand_dims(s.b, -1) if vec else s.b)
    gx = expand_dims(g, -1) if vec else g
    p = pinv(a)
    ga = gb = None
    if s.needs[0]:
        ga = _pinv_backward(matmul(gx, mH(b)), p, a, a.shape[-2], a.shape[-1])
    if s.needs[1]:
        gb = matmul(mH(p), gx)
        gb = squeeze(gb, -1) if vec else gb
    return ga, gb


@lstsq_res_p.vjp
def _lstsq_res_rule(g, s, *, vec):
    # torch's linalg_lstsq_backward, gradient from the residuals (Danskin: X as a constant)
    a = s.a
    b, x = (expand_dims(s.b, -1), expand_dims(s.x, -1)) if vec else (s.b, s.x)
    r = matmul(a, x) - b
    gl = expand_dims(g, -2)
    ga = 2 * matmul(gl * r, mH(x)) if s.needs[0] else None
    gb = -2 * gl * r if s.needs[1] else None
    return ga, (squeeze(gb, -1) if vec and gb is not None else gb)


def _svdvals_block(a):
    return np.linalg.svd(a, compute_uv=False)


def _rank_block(s, m, n, rcond):
    """The numerical rank from the singular values (NumPy's ``matrix_rank`` tolerance)."""
    tol = np.max(s, axis=-1, keepdims=True) * (max(m, n) * np.finfo(s.dtype).eps if rcond is None else rcond)
    return np.sum(s > tol, axis=-1)


def _lstsq_kernel(a, b, rcond):
    """Least squares of each matrix pair (NumPy's ``lstsq`` takes one matrix at a time)."""
    if a.ndim == 2:
        return np.linalg.lstsq(a, b, rcond=rcond)[0]
    out = np.zeros_like(a, shape=a.shape[:-2] + (a.shape[-1], b.shape[-1]),
                        dtype=np.result_type(a.dtype, b.dtype))
    for idx in np.ndindex(*a.shape[:-2]):
        out[idx] = np.linalg.lstsq(a[idx], b[idx], rcond=rcond)[0]
    return out


def lstsq(A, B, rcond=None, *, driver=None):
    """torch's ``linalg.lstsq``: ``(solution, residuals, rank, singular_values)`` minimising
    ``||A X - B||``.  A chunked tall-and-skinny ``A`` (and its ``B``) runs TSQR, never gathered, and
    assumes full column rank; other matrices are solved one pair per chunk (NumPy's ``lstsq``, rank
    deficiency handled with ``rcond``).  ``residuals`` are the squared column norms of ``A X - B`` when
    m > n (whatever the rank), else empty; ``rank`` and ``singular_values`` carry no gradient.
    ``driver`` is accepted for torch's signature and ignored."""
    A = as_tensor(A)
    B = as_tensor(B)
    check_same_device(A, B)
    if A.ndim < 2:
        raise RuntimeError("torch.linalg.lstsq: input must have at least 2 dimensions.")
    _check_float(A, "lstsq")
    vec = B.ndim == A.ndim - 1
    if B.shape[-1 if vec else -2] != A.shape[-2]:
        raise RuntimeError("torch.linalg.lstsq: input.size(-2) should match other.size(-2)")
    m, n = A.shape[-2:]
    a, b = A.array, (B.array[..., None] if vec else B.array)
    tall = _tall(a) if m >= n else None
    if tall is not None:
        with _quiet_meta():
            q, r = da.linalg.tsqr(tall)
        x = _solve_arrays(r, da.matmul(da.conj(q.T), b.rechunk({0: tall.chunks[0]})))
        s = _gufunc(_svdvals_block, "(n,n)->(n)", (r,), [(1, _real_dtype(a.dtype))])
    else:
        a = _whole(a)
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        a, b = _whole(da.broadcast_to(a, batch + a.shape[-2:])), _whole(da.broadcast_to(b, batch + b.shape[-2:]))
        x = _gufunc(_lstsq_kernel, "(m,n),(m,k)->(n,k)", (a, b), [(a.ndim, np.result_type(a.dtype, b.dtype))],
                    rcond=rcond)
        s = _gufunc(_svdvals_block, "(m,n)->(k)", (a,), [(a.ndim - 1, _real_dtype(a.dtype))], sizes={"k": min(m, n)})
    rank = da.map_blocks(_rank_block, s, m=m, n=n, rcond=rcond, drop_axis=s.ndim - 1, dtype=np.int64,
                         meta=_meta(s._meta, s.ndim - 1, np.int64))
    X = lstsq_x_p.record(x[..., 0] if vec else x, A, B, save={"a": A, "b": B}, vec=vec)
    if m > n:  # one residual per column of B, a vector B's included (torch's shape)
        res = da.sum(da.absolute(da.matmul(a, x) - b) ** 2, axis=-2)
        res = lstsq_res_p.record(res, A, B, save={"a": A, "b": B, "x": X}, vec=vec)
    else:
        res = Tensor._make(da.zeros((0,), dtype=_real_dtype(A.dtype), like=a._meta))
    return LstsqResult(X, res, Tensor._make(rank), Tensor._make(s))


# ----------------------------------------------------------------- matrix_power
def matrix_power(A, n):
    """torch's ``linalg.matrix_power``: ``A`` to the integer power ``n`` by repeated squaring (``n < 0``
    inverts first); ``n == 0`` gives identities whose gradient is 0."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"linalg_matrix_power(): argument 'n' (position 2) must be int, not {type(n).__name__}")
    A = _matrix(A, "matrix_power", square=True)
    if n == 0:
        eye = diag_embed(ones_like(A[..., 0]), 0, A.chunks[-2:])
        return where(eye == eye, eye, A)  # exact identities, with A's (zero) gradient path
    if n < 0:
        A, n = inv(A), -n
    result, base = None, A
    while n:
        if n & 1:
            result = base if result is None else matmul(result, base)
        n >>= 1
        if n:
            base = matmul(base, base)
    return result



# ------------------------------------------------------------ composite functions
def cond(A, p=None):
    """torch's ``linalg.cond``: ``p`` None or 2 (-2) the ratio of the largest (smallest) to the smallest
    (largest) singular value, any matrix; otherwise ``matrix_norm(A, p) * matrix_norm(inv(A), p)`` of
    square matrices.  Differentiable through those ops, as torch's."""
    _check_ord(p, ("fro", "nuc"))
    if p in (None, 2, -2):
        s = svdvals(_matrix(A, "cond"))
        big, small = s[..., 0], s[..., -1]
        return big / small if p != -2 else small / big
    if p not in ("fro", "nuc", 1, -1, np.inf, -np.inf):
        raise RuntimeError(f"linalg.cond got an invalid norm type: {p}")
    x = as_tensor(A)
    if x.ndim >= 2 and x.shape[-1] != x.shape[-2]:
        raise RuntimeError(f"linalg.cond(ord={p}): A must be batches of square matrices, but they are "
                           f"{x.shape[-2]} by {x.shape[-1]} matrices")
    A = _matrix(x, "cond", square=True)
    return matrix_norm(A, p) * matrix_norm(inv(A), p)


def matrix_rank(A, tol=None, hermitian=False, *, atol=None, rtol=None):
    """torch's ``linalg.matrix_rank`` (and NumPy's, whose ``tol`` is ``atol``): the number of singular
    values above ``max(atol, rtol * S_max)``, ``rtol`` defaulting to ``eps * max(m, n)`` when neither
    tolerance is given; an int64 tensor with no gradient."""
    x = as_tensor(A)
    if x.ndim < 2:
        raise RuntimeError("torch.linalg.matrix_rank: The input tensor input must have at least 2 dimensions.")
    x = _matrix(x, "matrix_rank").detach()
    atol = tol if atol is None else atol
    m, n = x.shape[-2:]
    if rtol is None:
        rtol = 0.0 if atol else np.finfo(_real_dtype(x.dtype)).eps * max(m, n)
    s = abs(eigvalsh(x)) if hermitian else svdvals(x)
    s = s.array
    if s.shape[-1] == 0:
        return Tensor._make(da.zeros(s.shape[:-1], dtype=np.int64, like=s._meta))
    cutoff = da.maximum(atol or 0.0, rtol * s.max(axis=-1, keepdims=True))
    return Tensor._make((s > cutoff).sum(axis=-1).astype(np.int64))


def tensorinv(A, ind=2):
    """torch's ``linalg.tensorinv`` (NumPy's): the inverse of ``A`` read as a matrix of the first
    ``ind`` axes by the rest; shape ``A.shape[ind:] + A.shape[:ind]``."""
    A = as_tensor(A)
    if ind <= 0:
        raise RuntimeError(f"Expected a strictly positive integer for 'ind', but got {ind}")
    rows, cols = A.shape[:ind], A.shape[ind:]
    if int(np.prod(rows)) != int(np.prod(cols)):
        raise RuntimeError(f"Expected self to satisfy the requirement prod(self.shape[ind:]) == "
                           f"prod(self.shape[:ind]), but got {int(np.prod(cols))} != {int(np.prod(rows))}")
    return reshape(inv(reshape(A, (int(np.prod(rows)), int(np.prod(cols))))), cols + rows)


def tensorsolve(A, B, dims=None):
    """torch's ``linalg.tensorsolve`` (NumPy's): ``X`` with ``tensordot(A, X, X.ndim) == B``, ``dims``
    the axes of ``A`` moved to the end first."""
    A, B = as_tensor(A), as_tensor(B)
    check_same_device(A, B)
    if dims is not None:
        dims = [norm_axis(d, A.ndim) for d in dims]
        A = transpose(A, [i for i in range(A.ndim) if i not in dims] + dims)
    rest = A.shape[B.ndim:]
    n = int(np.prod(rest))
    if int(np.prod(B.shape)) != n:
        raise RuntimeError(f"Expected self to satisfy the requirement prod(self.shape[other.ndim:]) == "
                           f"prod(self.shape[:other.ndim]), but got {n} != {int(np.prod(B.shape))}")
    return reshape(solve(reshape(A, (n, n)), reshape(B, (n,))), rest)


def compression_level(n, q, n_oversamples=10, min_subspace_size=20):
    """``dask.array.linalg.compression_level``: the sketch width of a rank-``q`` approximation of a
    matrix whose short side is ``n`` (a plain int)."""
    return da.linalg.compression_level(n, q, n_oversamples=n_oversamples, min_subspace_size=min_subspace_size)


def compression_matrix(data, q, iterator="power", n_power_iter=0, n_oversamples=10, seed=0, compute=False):
    """``dask.array.linalg.compression_matrix``: ``Q^H`` of an orthonormal basis ``Q`` of the range of
    ``data`` sketched by a Gaussian ``Omega`` (dask's draw from ``seed``, 0 by default so reruns and
    gradients agree; dask's default is a fresh draw), after ``n_power_iter`` power (or ``'QR'``)
    iterations, differentiable with ``Omega`` fixed.  ``compute`` is accepted and ignored (lazy)."""
    A = _matrix(data, "compression_matrix")
    if A.ndim != 2:
        raise ValueError(f"compression_matrix expects a 2-D matrix, got {A.ndim} dimensions")
    if iterator not in ("power", "QR"):
        raise ValueError(f"Iterator '{iterator}' not valid, must one one of ['power', 'QR']")
    m, n = A.shape
    level = compression_level(min(m, n), q, n_oversamples=n_oversamples)
    real = _real_dtype(A.dtype)
    omega = da.random.default_rng(seed).standard_normal(size=(n, level), chunks=(A.chunks[1], (level,)))
    omega = omega.astype(np.float32 if real == np.float32 else np.float64, copy=False)
    omega = Tensor._make(omega.map_blocks(chunk.like, A._storage.value._meta, dtype=omega.dtype,
                                          meta=_meta(A._storage.value._meta, 2, omega.dtype)))
    sketch = matmul(A, omega)
    if iterator == "power":
        for _ in range(n_power_iter):
            sketch = matmul(A, matmul(mH(A), sketch))
        return mH(qr(sketch).Q)
    q_ = qr(sketch).Q
    for _ in range(n_power_iter):
        q_ = qr(matmul(A, qr(matmul(mH(A), q_)).Q)).Q
    return mH(q_)


def tsqr(data, compute_svd=False, _max_vchunk_size=None):
    """``dask.array.linalg.tsqr``: ``(Q, R)`` of a tall-and-skinny matrix (``(U, S, Vh)`` when
    ``compute_svd``), which is :func:`qr` (:func:`svd` with ``full_matrices=False``): dask's TSQR
    when the matrix has several row chunks, with torch's gradients."""
    if compute_svd:
        return tuple(svd(data, full_matrices=False))
    return tuple(qr(data))


def sfqr(data, name=None):
    """``dask.array.linalg.sfqr``: ``(Q, R)`` of a short-and-fat matrix, which is :func:`qr` (dask's
    short-and-fat QR when the matrix has several column chunks), with torch's gradients."""
    return tuple(qr(data))


def svd_compressed(a, k, iterator="power", n_power_iter=0, n_oversamples=10, seed=0, compute=False,
                   coerce_signs=True):
    """``dask.array.linalg.svd_compressed``: the approximate rank-``k`` SVD ``(U, S, Vh)`` of a 2-D
    matrix by randomized compression (Halko et al.), built from differentiable ops: the sketch
    ``A @ Omega`` (``Omega`` Gaussian, drawn as dask draws it from ``seed``, 0 by default so reruns and
    gradients agree), ``n_power_iter`` power (or ``'QR'``) iterations, TSQR of the sketch
    (:func:`compression_matrix`), then the SVD of the small ``Q^H A``.  Gradients are those of this
    computation with ``Omega`` fixed (distinct singular values assumed, as for ``svd``).  ``compute``
    is accepted and ignored: the graph stays lazy."""
    A = _matrix(a, "svd_compressed")
    if A.ndim != 2:
        raise ValueError(f"svd_compressed expects a 2-D matrix, got {A.ndim} dimensions")
    q = mH(compression_matrix(A, k, iterator, n_power_iter, n_oversamples, seed))
    u, s, vh = svd(matmul(mH(q), A), full_matrices=False)
    u, s, vh = matmul(q, u)[:, :k], s[:k], vh[:k, :]
    if coerce_signs:  # dask's svd_flip: each row of Vh in the half-space of the ones vector (constant signs)
        signs = vh.detach().array.sum(axis=1, keepdims=True).T
        signs = Tensor._make(2.0 * ((signs >= 0) - 0.5).astype(vh.dtype))
        u, vh = u * signs, vh * mT(signs)
    return u, s, vh
