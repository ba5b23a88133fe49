"""Products, norms, triangles and diagonals, and the SVD, with their VJP rules
(contract: see ``elementwise.py``).

``matmul`` builds its own blockwise graph: when the contracted axis is one
chunk it is a pure ``blockwise`` task per output chunk, with no reduction
layer, so it fuses with the elementwise work before and after it (a logistic
regression's forward, loss cotangent and ``X.T @ g`` become one task per row
chunk plus one tree sum).  Otherwise each chunk pair contributes a partial
product and the partials are tree-summed, as in ``dask.array.matmul``.

Shapes follow NumPy (``dot``, ``inner``, ``outer``, ``vdot``, ``kron``, ``trace``, ``diagonal``
take NumPy's operands and ``axis`` arguments); errors and gradients follow torch.

The SVD (``daskgrad.linalg.svd``, and the 2 and nuclear matrix norms through it) comes in two
layouts.  A chunked tall-and-skinny matrix (many row chunks, columns in one chunk; or its
transpose) runs dask's TSQR, so it is never gathered, and so do the rules, whose products with the
long axis are blockwise or tree sums.  Everything else puts each matrix (the last two axes) in one
chunk and runs NumPy's (or cupy's) batched kernel per chunk: those matrices must fit in one
worker's memory.

The engine's nodes have one output each, so a decomposition's outputs are separate nodes
(torch's one ``LinalgSvdBackward0`` node sums the same terms: its VJP is linear in the output
cotangents).  A rule that needs another output recomputes it from the input and its own output
(R = Q^H A, S V^H = U^H A), or saves an output whose node saves nothing back, so the saved values
form no reference cycle.

"""
from __future__ import annotations

import collections
import contextlib
import numbers
import string
import warnings

import dask.array as da
import numpy as np
from dask.array.utils import meta_from_array

from .. import chunk
from ..graph import RESULT, primitive
from ._util import as_tensor, check_broadcast, check_same_device, norm_axis, public, reduce_array
from .elementwise import abs, astype, conj, ones_like, pow, sign, where
from .reductions import _reduce, _reduction, amax, amin, sum
from .shape import broadcast_to, expand_dims, moveaxis, reshape, squeeze, swapaxes, transpose


# ================================================================== chunk metas
def _real_dtype(dtype):
    return np.empty(0, dtype).real.dtype


def _meta(meta, ndim, dtype):
    """A meta of ``meta``'s array type (NumPy, cupy, ...) with ``ndim`` and ``dtype``."""
    if np.dtype(dtype).kind != "c" and meta.dtype.kind == "c":
        meta = np.real(meta)  # not a cast: casting complex to real warns
    return meta_from_array(meta, ndim=ndim, dtype=dtype)


@contextlib.contextmanager
def _quiet_meta():
    """dask casts a complex meta to a real dtype (TSQR's S, tril's index mask): a meta only, no values,
    so no warning for users."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
        yield


def _quiet(fn, *args):
    with _quiet_meta():
        return fn(*args)


# ====================================================================== products
def _matmul_array(a, b, **_):
    if a.ndim > 2 or b.ndim > 2:
        return da.matmul(a, b)
    li = "ik"[2 - a.ndim:]           # "k" or "ik"
    ri = "kj"[: b.ndim]              # "k" or "kj"
    out = li.replace("k", "") + ri.replace("k", "")
    a, b = da.unify_chunks(a, li, b, ri)[1]
    dtype = np.result_type(a.dtype, b.dtype)
    meta = meta_from_array(a._meta, ndim=len(out), dtype=dtype)
    if len(a.chunks[a.ndim - 1]) == 1:
        return da.blockwise(chunk.matmul, out, a, li, b, ri, dtype=dtype, meta=meta)
    partial = da.blockwise(chunk.matmul_partial, "K" + out, a, li.replace("k", "K"), b, ri.replace("k", "K"),
                           dtype=dtype, adjust_chunks={"K": 1}, meta=meta_from_array(meta, ndim=len(out) + 1))
    if partial.numblocks[0] > FAN_IN:  # many partial products: a tree keeps each task small
        return partial.sum(axis=0, split_every=FAN_IN)
    # one fusable blockwise task adds the few partials (no separate per-chunk sum tasks)
    return da.blockwise(chunk.sum_blocks, out, partial, "K" + out, dtype=dtype, meta=meta)


FAN_IN = 32


def _matmul_operands(a, b):
    a, b = as_tensor(a), as_tensor(b)
    check_same_device(a, b)
    if a.ndim == 0 or b.ndim == 0:
        raise RuntimeError("both arguments to matmul need to be at least 1D, but they are "
                           f"{a.ndim}D and {b.ndim}D")
    _check_matmul(a.shape, b.shape)
    return a, b


# each operand is saved only when the other one needs a gradient, as torch's MmBackward0 does
matmul_p = primitive("matmul", torch=("MmBackward0", "MvBackward0", "DotBackward0", "SqueezeBackward4",
                                      "UnsafeViewBackward0"),
                     impl=_matmul_array, args=("a", "b"), save=(("a", 1), ("b", 0)), prepare=_matmul_operands)


@public("__matmul__", "__rmatmul__", "matmul")
def matmul(a, b):
    a, b = _matmul_operands(a, b)
    node = ("DotBackward0" if a.ndim == b.ndim == 1 else "MvBackward0" if b.ndim == 1 and a.ndim == 2
            else "SqueezeBackward4" if a.ndim == 1 and b.ndim == 2 else "MmBackward0" if a.ndim == b.ndim == 2
            else "UnsafeViewBackward0")
    return matmul_p.bind(a, b, node=node, na=a.ndim, nb=b.ndim)


def _check_matmul(sa, sb):
    """torch's error texts for a contracted size mismatch (dask would fail late or obscurely)."""
    k, kb = sa[-1], sb[-1] if len(sb) == 1 else sb[-2]
    if k == kb or k != k or kb != kb:
        if len(sa) > 2 or len(sb) > 2:  # batch axes must broadcast too
            check_broadcast(tuple(sa[:-2]), tuple(sb[:-2]))
        return
    if len(sa) == len(sb) == 1:
        raise RuntimeError(f"inconsistent tensor size, expected tensor [{k}] and src [{kb}] to have the same number "
                           f"of elements, but got {k} and {kb} elements respectively")
    rows = int(np.prod(sa[:-1]))
    if len(sb) == 1:
        raise RuntimeError(f"size mismatch, got input ({rows}), mat ({rows}x{k}), vec ({kb})")
    if len(sb) == 2:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({rows}x{k} and {kb}x{sb[-1]})")
    batch = int(np.prod(np.broadcast_shapes(tuple(sa[:-2]), tuple(sb[:-2]))))
    raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: [{batch}, {k}] but got: "
                       f"[{batch}, {kb}].")


@matmul_p.vjp
def _matmul_rule(g, s, *, na, nb):
    need_a, need_b = s.needs
    a = conj(s.a) if need_b else None  # torch's complex convention: each side meets the other's conjugate
    b = conj(s.b) if need_a else None
    if na == 1 and nb == 1:                              # dot: g is a scalar
        return (g * b if need_a else None), (g * a if need_b else None)
    if nb == 1 and na == 2:                              # matrix @ vector: no reshapes on the hot path
        return (expand_dims(g, -1) * b if need_a else None), (matmul(mT(a), g) if need_b else None)
    if na == 1 and nb == 2:                              # vector @ matrix
        return (matmul(b, g) if need_a else None), (expand_dims(a, -1) * expand_dims(g, -2) if need_b else None)
    # batched: a vector operand is a one-row (or one-column) matrix, as NumPy promotes it; the engine
    # sums the cotangents over the broadcast batch axes
    if na == 1:
        g = expand_dims(g, -2)
    if nb == 1:
        g = expand_dims(g, -1)
    ga = gb = None
    if need_a:
        ga = matmul(g, mT(expand_dims(b, -1) if nb == 1 else b))
        ga = squeeze(ga, -2) if na == 1 else ga
    if need_b:
        gb = matmul(mT(expand_dims(a, 0) if na == 1 else a), g)
        gb = squeeze(gb, -1) if nb == 1 else gb
    return ga, gb


def mT(x):
    """The last two axes swapped (torch's ``Tensor.mT``)."""
    return swapaxes(x, -1, -2)


def mH(x):
    """The conjugate transpose of the last two axes (torch's ``Tensor.mH``)."""
    return conj(swapaxes(x, -1, -2))


@public("dot")
def dot(a, b):
    """NumPy's ``dot``: a product with a 0-d operand, the inner product of vectors, the matrix product,
    and for N-D operands the sum over the last axis of ``a`` and the second-to-last of ``b``."""
    a, b = as_tensor(a), as_tensor(b)
    check_same_device(a, b)
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    if a.ndim <= 2 and b.ndim <= 2:
        return matmul(a, b)
    return tensordot(a, b, axes=([-1], [-1 if b.ndim == 1 else -2]))


@public("inner")
def inner(a, b):
    """Sum over the last axes of ``a`` and ``b`` (a product when one is 0-d); shape ``a.shape[:-1] +
    b.shape[:-1]``."""
    a, b = as_tensor(a), as_tensor(b)
    check_same_device(a, b)
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    if a.shape[-1] != b.shape[-1]:
        raise RuntimeError(f"inner() the last dimension must match on both input tensors but got shapes "
                           f"{list(a.shape)} and {list(b.shape)}")
    if a.ndim == b.ndim == 1:
        return matmul(a, b)
    return tensordot(a, b, axes=([-1], [-1]))


@public("outer")
def outer(a, b):
    """``a.ravel()[:, None] * b.ravel()[None, :]`` (NumPy flattens; torch takes vectors only)."""
    a, b = as_tensor(a), as_tensor(b)
    check_same_device(a, b)
    return expand_dims(reshape(a, (-1,)), 1) * expand_dims(reshape(b, (-1,)), 0)


@public("vdot")
def vdot(a, b):
    """``sum(conj(a) * b)`` over the flattened operands (NumPy's ``vdot``; torch's ``vdot`` of vectors)."""
    a, b = as_tensor(a), as_tensor(b)
    check_same_device(a, b)
    return matmul(conj(reshape(a, (-1,))), reshape(b, (-1,)))


@public("kron")
def kron(a, b):
    """Kronecker product, NumPy's shape rule: the operand with fewer axes gets leading 1s."""
    a, b = as_tensor(a), as_tensor(b)
    check_same_device(a, b)
    nd = max(a.ndim, b.ndim)
    sa, sb = (1,) * (nd - a.ndim) + a.shape, (1,) * (nd - b.ndim) + b.shape
    # a on the even axes, b on the odd ones: the product's axes pair up (a_i, b_i)
    pa = reshape(a, tuple(x for n in sa for x in (n, 1)))
    pb = reshape(b, tuple(x for n in sb for x in (1, n)))
    return reshape(pa * pb, tuple(m * n for m, n in zip(sa, sb)))


def _norm_tensordot_axes(axes, a, b):
    na, nb = a.ndim, b.ndim
    if isinstance(axes, (int, np.integer)):
        if axes < 0:
            raise RuntimeError(f"tensordot expects dims >= 0, but got dims={axes}")
        if axes > min(na, nb):
            raise RuntimeError(f"tensordot expects dims < ndim_a or ndim_b, but got dims={axes}")
        xa, xb = list(range(na - axes, na)), list(range(axes))
    else:
        xa, xb = axes
        xa = [xa] if isinstance(xa, (int, np.integer)) else list(xa)
        xb = [xb] if isinstance(xb, (int, np.integer)) else list(xb)
        if len(xa) != len(xb):
            raise RuntimeError("both dimension lists should have same length")
        xa, xb = [norm_axis(i, na) for i in xa], [norm_axis(i, nb) for i in xb]
    for axs in (xa, xb):
        for i, ax in enumerate(axs):
            if ax in axs[:i]:
                raise RuntimeError(f"dim {ax} appears multiple times in the list of dims")
    for i, j in zip(xa, xb):
        if a.shape[i] != b.shape[j]:
            raise RuntimeError(f"contracted dimensions need to match, but first has size {a.shape[i]} in dim {i} "
                               f"and second has size {b.shape[j]} in dim {j}")
    return tuple(xa), tuple(xb)


def _tensordot_operands(a, b):
    a, b = as_tensor(a), as_tensor(b)
    check_same_device(a, b)
    return a, b


# torch's tensordot and einsum end in a reshape, so their nodes are ViewBackward0 too; the table
# names them apart (the dashboard's tensordot-vjp, einsum-vjp)
tensordot_p = primitive("tensordot", torch="ViewBackward0", args=("a", "b"), save=(("a", 1), ("b", 0)),
                        impl=lambda a, b, *, xa, xb, na, nb: da.tensordot(a, b, axes=(list(xa), list(xb))),
                        prepare=_tensordot_operands)


@public()
def tensordot(a, b, axes=2):
    """NumPy's ``tensordot``: ``axes`` an int N (the last N axes of ``a`` with the first N of ``b``)
    or a pair of axis lists."""
    a, b = _tensordot_operands(a, b)
    xa, xb = _norm_tensordot_axes(axes, a, b)
    return tensordot_p.bind(a, b, xa=xa, xb=xb, na=a.ndim, nb=b.ndim)


@tensordot_p.vjp
def _tensordot_rule(g, s, *, xa, xb, na, nb):
    xa, xb = list(xa), list(xb)
    free_a = [i for i in range(na) if i not in xa]
    free_b = [i for i in range(nb) if i not in xb]
    need_a, need_b = s.needs
    fa, fb = len(free_a), len(free_b)
    ga = gb = None
    if need_a:
        ga = tensordot(g, conj(s.b), axes=(list(range(fa, fa + fb)), free_b))
        order = free_a + [xa[xb.index(k)] for k in sorted(xb)]
        ga = transpose(ga, [int(i) for i in np.argsort(order)]) if ga.ndim > 1 else ga
    if need_b:
        gb = tensordot(conj(s.a), g, axes=(free_a, list(range(fa))))
        order = [xb[xa.index(k)] for k in sorted(xa)] + free_b
        gb = transpose(gb, [int(i) for i in np.argsort(order)]) if gb.ndim > 1 else gb
    return ga, gb


# ---------------------------------------------------------------------- einsum
_LETTERS = string.ascii_uppercase + string.ascii_lowercase  # NumPy's sublist integers 0..51


def _sublist(sub):
    out = []
    for k in sub:
        if k is Ellipsis:
            out.append("...")
        elif isinstance(k, (int, np.integer)) and 0 <= k < 52:
            out.append(_LETTERS[k])
        else:
            raise ValueError(f"subscript is not within the valid range [0, 52): {k!r}")
    return "".join(out)


def _einsum_args(args):
    """``(equation, operands)`` from ``einsum("ij,jk", a, b)``, ``einsum("ij,jk", [a, b])`` or
    NumPy's sublist form ``einsum(a, [0, 1], b, [1, 2], [0, 2])``."""
    if not args:
        raise TypeError("einsum(): must specify the equation string and at least one operand")
    if isinstance(args[0], str):
        ops = list(args[1:])
        if len(ops) == 1 and isinstance(ops[0], (list, tuple)):
            ops = list(ops[0])
        return args[0], ops
    ops, subs = list(args[0::2]), list(args[1::2])
    out = None
    if len(subs) < len(ops):  # an odd count: the last item is the output's sublist
        out = ops.pop()
    eq = ",".join(_sublist(s) for s in subs)
    return (eq + "->" + _sublist(out)) if out is not None else eq, ops


def _parse_einsum(equation, ts):
    """Subscripts with ellipses expanded to letters and an explicit output, checked with torch's errors."""
    eq = equation.replace(" ", "")
    lhs, out = eq.split("->") if "->" in eq else (eq, None)
    ins = lhs.split(",")
    if len(ins) > len(ts):
        raise RuntimeError("einsum(): fewer operands were provided than specified in the equation")
    if len(ins) < len(ts):
        raise RuntimeError("einsum(): more operands were provided than specified in the equation")
    for c in eq.replace("...", "").replace(",", "").replace("->", ""):
        if c not in _LETTERS:
            raise RuntimeError(f"einsum(): invalid subscript given at index {eq.index(c)} in the equation string, "
                               "subscripts must be in [a-zA-Z]")
    free = [c for c in _LETTERS if c not in eq]
    ranks = []
    for k, (sub, t) in enumerate(zip(ins, ts)):
        named = len(sub.replace("...", ""))
        if "..." in sub:
            if named > t.ndim:
                raise RuntimeError(f"einsum(): the number of subscripts in the equation ({named}) is more than the "
                                   f"number of dimensions ({t.ndim}) for operand {k}")
            ranks.append(t.ndim - named)
        elif named != t.ndim:
            raise RuntimeError(f"einsum(): the number of subscripts in the equation ({named}) does not match the "
                               f"number of dimensions ({t.ndim}) for operand {k} and no ellipsis was given")
    ell = "".join(free[:max(ranks, default=0)])
    ins = [sub.replace("...", ell[len(ell) - (t.ndim - len(sub) + 3):]) if "..." in sub else sub
           for sub, t in zip(ins, ts)]
    if out is None:  # NumPy's implicit output: the broadcast axes, then the letters seen once, sorted
        counts = collections.Counter("".join(ins))
        out = ell + "".join(sorted((c for c in counts if counts[c] == 1 and c not in ell),
                                   key=_LETTERS.index))
    else:
        out = out.replace("...", ell)
    for i, c in enumerate(out):
        if c in out[:i]:
            raise RuntimeError(f"einsum(): output subscript {c} appears more than once in the output")
        if not any(c in sub for sub in ins):
            raise RuntimeError(f"einsum(): output subscript {c} does not appear in the equation for any input "
                               "operand")
    return ins, out


@public()
def einsum(*args, optimize=False):
    """NumPy's and torch's ``einsum``: ellipses, an implicit output, a repeated index within one
    operand (its diagonal) and NumPy's sublist form; a size-1 axis broadcasts against its index."""
    equation, operands = _einsum_args(args)
    ts = [as_tensor(t) for t in operands]
    check_same_device(*ts)
    ins, out = _parse_einsum(equation, ts)
    for k, t in enumerate(ts):  # a repeated index is the diagonal of those axes
        sub = ins[k]
        while len(set(sub)) != len(sub):
            c = next(c for i, c in enumerate(sub) if c in sub[:i])
            i, j = sub.index(c), sub.index(c, sub.index(c) + 1)
            if t.shape[i] != t.shape[j]:
                raise RuntimeError(f"einsum(): subscript {c} is repeated for operand {k} but the sizes don't match, "
                                   f"{t.shape[j]} != {t.shape[i]}")
            t, sub = diagonal(t, 0, i, j), sub[:i] + sub[i + 1:j] + sub[j + 1:] + c
        ts[k], ins[k] = t, sub
    seen = {}
    for k, (sub, t) in enumerate(zip(ins, ts)):
        for c, n in zip(sub, t.shape):
            if seen.setdefault(c, n) != n and n != 1 and seen[c] != 1:
                raise RuntimeError(f"einsum(): subscript {c} has size {n} for operand {k} which does not broadcast "
                                   f"with previously seen size {seen[c]}")
            seen[c] = max(seen[c], n)
    for k, (sub, t) in enumerate(zip(ins, ts)):  # a size-1 axis broadcasting against its index: drop it
        drop = tuple(i for i, c in enumerate(sub) if t.shape[i] == 1 and seen[c] != 1)
        if drop:
            ts[k], ins[k] = squeeze(t, drop), "".join(c for i, c in enumerate(sub) if i not in drop)
    expr = ",".join(ins) + "->" + out
    return einsum_p.record(da.einsum(expr, *[t.array for t in ts]), *ts,
                           save={f"t{j}": t for j, t in enumerate(ts)}, ins=tuple(ins), out=out)


einsum_p = primitive("einsum", torch="ViewBackward0")


@einsum_p.vjp
def _einsum_rule(g, s, *, ins, out):
    grads = []
    for k, (sub, need) in enumerate(zip(ins, s.needs)):
        if not need:
            grads.append(None)
            continue
        others = [(ins[j], getattr(s, f"t{j}")) for j in range(len(ins)) if j != k]
        have = set(out).union(*[set(o) for o, _ in others])
        target = "".join(c for c in sub if c in have)
        expr = ",".join([out] + [o for o, _ in others]) + "->" + target
        gk = einsum(expr, g, *[conj(t) for _, t in others])
        missing = tuple(i for i, c in enumerate(sub) if c not in target)
        if missing:  # an index summed away in forward: broadcast back over it
            gk = broadcast_to(expand_dims(gk, missing), getattr(s, f"t{k}").shape)
        grads.append(gk)
    return tuple(grads)


# ============================================================ diagonals, triangles
def _int_arg(v, what):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{what} must be an int, not {type(v).__name__}")
    return int(v)


def _diagonal_operand(x):
    return (as_tensor(x),)


diagonal_p = primitive("diagonal", torch="DiagonalBackward0", prepare=_diagonal_operand,
                       impl=lambda a, *, offset, axis1, axis2, chunks: da.diagonal(a, offset, axis1, axis2))
diag_embed_p = primitive("diag_embed", torch="DiagEmbedBackward0", prepare=_diagonal_operand,
                         impl=lambda a, *, offset, chunks: _embed_array(a, offset, chunks))


@public("diagonal")
def diagonal(x, offset=0, axis1=0, axis2=1):
    """NumPy's ``diagonal``: the ``offset`` diagonal of the ``axis1`` x ``axis2`` planes, as a new last axis."""
    x = as_tensor(x)
    offset = _int_arg(offset, "offset")
    if x.ndim < 2:
        raise RuntimeError(f"diagonal(): expected a tensor with at least 2 dimensions, but got {x.ndim}")
    a1, a2 = norm_axis(axis1, x.ndim), norm_axis(axis2, x.ndim)
    if a1 == a2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {axis1}, {axis2}")
    return diagonal_p.bind(x, offset=offset, axis1=a1, axis2=a2, chunks=(x.chunks[a1], x.chunks[a2]))


@diagonal_p.vjp
def _diagonal_rule(g, s, *, offset, axis1, axis2, chunks):
    e = diag_embed(g, offset, chunks)  # the planes as the last two axes, then back where they were
    return (moveaxis(moveaxis(e, -2, min(axis1, axis2)), -1, max(axis1, axis2)) if axis1 < axis2 else
            moveaxis(moveaxis(e, -1, axis2), -1, axis1),)


def _embed_block(g, rows, cols, offset):
    """This chunk of the matrices holding ``g`` (the whole diagonals) on the ``offset`` diagonal;
    ``rows``/``cols`` are the chunk's global row and column numbers, on the chunk's device."""
    on = (cols[None, :] - rows[:, None]) == offset
    n = g.shape[-1]
    if n == 0:
        return np.zeros_like(g, shape=g.shape[:-1] + on.shape)
    pos = np.clip(rows if offset >= 0 else cols, 0, n - 1)  # where each row (column) meets the diagonal
    vals = np.take(g, pos, axis=-1)
    vals = vals[..., :, None] if offset >= 0 else vals[..., None, :]
    return np.where(on, vals, np.zeros_like(vals, shape=(1,) * vals.ndim))


def diag_embed(g, offset, chunks):
    """Matrices, chunked ``chunks`` over the two new last axes, holding ``g``'s last axis on their
    ``offset`` diagonal and zeros elsewhere (torch's ``diag_embed``)."""
    return diag_embed_p.bind(g, offset=offset, chunks=tuple(tuple(c) for c in chunks))


def _embed_array(a, offset, chunks):
    n1, n2 = (int(np.sum(c)) for c in chunks)
    a = a.rechunk({a.ndim - 1: -1})
    nb = a.ndim - 1
    ind = tuple(range(nb))
    like = _meta(a._meta, 1, np.int64)
    rows = da.arange(n1, chunks=(chunks[0],), like=like)
    cols = da.arange(n2, chunks=(chunks[1],), like=like)
    return da.blockwise(_embed_block, ind + (nb, nb + 1), a, ind + (nb + 2,), rows, (nb,), cols, (nb + 1,),
                        offset=offset, concatenate=True, dtype=a.dtype,
                        meta=meta_from_array(a._meta, ndim=nb + 2, dtype=a.dtype))


diag_embed_p.vjp(lambda g, s, *, offset, chunks: (diagonal(g, offset, -2, -1),))


@public("diag")
def diag(x, k=0):
    """NumPy's ``diag``: a vector becomes a square matrix with it on the ``k`` diagonal, a matrix gives
    its ``k`` diagonal."""
    x = as_tensor(x)
    k = _int_arg(k, "k")
    if x.ndim == 1:
        n = x.shape[0] + (k if k > 0 else -k)
        c = x.chunks[0]
        return diag_embed(x, k, (c + (n - x.shape[0],) if n > x.shape[0] else c,) * 2)
    if x.ndim != 2:
        raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {x.ndim}D")
    return diagonal(x, k)


@public("trace")
def trace(x, offset=0, axis1=0, axis2=1):
    """NumPy's ``trace``: sums of the ``offset`` diagonal of the ``axis1`` x ``axis2`` planes."""
    x = as_tensor(x)
    if x.ndim < 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {x.ndim}")
    return sum(diagonal(x, offset, axis1, axis2), axis=-1)


def _triangle(name, node, fn):
    p = primitive(name, torch=node, prepare=_diagonal_operand, impl=lambda a, *, k: _quiet(fn, a, k))
    p.vjp(lambda g, s, *, k: (op(g, k),))

    def op(x, k=0):
        x = as_tensor(x)
        k = _int_arg(k, "k")
        if x.ndim < 2:
            raise RuntimeError(f"{name}: input tensor must have at least 2 dimensions")
        return p.bind(x, k=k)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"NumPy's ``{name}`` of the last two axes (``k`` the diagonal); gradient node ``{node}``."
    return public(name)(op)


tril = _triangle("tril", "TrilBackward0", da.tril)
triu = _triangle("triu", "TriuBackward0", da.triu)


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
    return _reduce(vector_norm_p, x, axis, keepdims,
                   lambda a, axes, n, n_out: _vector_norm_array(a, axes, keepdims, p), p=p)


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


@public("norm")
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
    u, s, vh = np.linalg.svd(a, full_matrices=full_matrices)
    return u, s, vh


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


def _svd_e(s):
    """torch's E: E_jk = S_k^2 - S_j^2 off the diagonal, 1 on it (the diagonal difference is exactly 0)."""
    s2 = s * s
    return expand_dims(s2, -2) - expand_dims(s2, -1) + diag_embed(ones_like(s2), 0, (s.chunks[-1],) * 2)


def _skew(x):
    return x - mH(x)


@svd_u_p.vjp
def _svd_u_rule(g, s, *, m, n, full):
    """torch's ``svd_backward`` with only gU; S and V come from ``A^H U = V S``."""
    k = min(m, n)
    u, gu = (s.r[..., :k], g[..., :k]) if full and m > k else (s.r, g)
    w = matmul(mH(s.a), u)                          # V S, (n, k)
    sv = vector_norm(w, 2, axis=-2)
    vh = mH(w / expand_dims(sv, -2))
    uhgu = _skew(matmul(mH(u), gu))
    ret = (uhgu / _svd_e(sv)) * expand_dims(sv, -2)
    if u.dtype.kind == "c":  # half of torch's i Im(diag(U^H gU)) / S; the Vh node adds the other half
        ret = ret + diag_embed(diagonal(uhgu, 0, -2, -1) / (4 * sv), 0, ret.chunks[-2:])
    if m > n:
        ga = matmul(u, ret)
        gusinv = gu / expand_dims(sv, -2)
        ga = ga + gusinv - matmul(u, matmul(mH(u), gusinv))
        return (matmul(ga, vh),)
    return (matmul(matmul(u, ret), vh),)


@svd_vh_p.vjp
def _svd_vh_rule(g, s, *, m, n, full):
    """torch's ``svd_backward`` with only gVh; U and S come from ``A V = U S``."""
    k = min(m, n)
    vh, gvh = (s.r[..., :k, :], g[..., :k, :]) if full and n > k else (s.r, g)
    w = matmul(s.a, mH(vh))                         # U S, (m, k)
    sv = vector_norm(w, 2, axis=-2)
    u = w / expand_dims(sv, -2)
    vhgv = _skew(matmul(vh, mH(gvh)))
    ret = expand_dims(sv, -1) * (vhgv / _svd_e(sv))
    if vh.dtype.kind == "c":
        ret = ret - diag_embed(diagonal(vhgv, 0, -2, -1) / (4 * sv), 0, ret.chunks[-2:])
    if m < n:
        ga = matmul(ret, vh)
        sinvgvh = gvh / expand_dims(sv, -1)
        ga = ga + sinvgvh - matmul(matmul(sinvgvh, mH(vh)), vh)
        return (matmul(u, ga),)
    return (matmul(u, matmul(ret, vh)),)


@svd_s_p.vjp
def _svd_s_rule(g, s, *, m, n, full):
    k = min(m, n)
    u, vh = (s.u[..., :k], s.vh[..., :k, :]) if full else (s.u, s.vh)
    g = astype(g, u.dtype) if u.dtype.kind == "c" else g
    if m >= n:
        return (matmul(u, expand_dims(g, -1) * vh),)
    return (matmul(u * expand_dims(g, -2), vh),)


def svd(A, full_matrices=True):
    """torch's ``linalg.svd``: ``(U, S, Vh)`` with ``A = U diag(S) Vh``.  A chunked tall-and-skinny
    (or short-and-wide) matrix runs dask's TSQR-based SVD and needs ``full_matrices=False``; other
    matrices are decomposed one matrix per chunk.  Gradients are torch's (distinct singular values;
    for complex inputs the loss must not depend on the singular vectors' phases)."""
    A = _matrix(A, "svd")
    u, s, vh = _svd_arrays(A.array, full_matrices)
    m, n = A.shape[-2:]
    U = svd_u_p.record(u, A, save={"a": A, "r": RESULT}, m=m, n=n, full=full_matrices)
    Vh = svd_vh_p.record(vh, A, save={"a": A, "r": RESULT}, m=m, n=n, full=full_matrices)
    S = svd_s_p.record(s, A, save={"u": U, "vh": Vh}, m=m, n=n, full=full_matrices)
    return SVDResult(U, S, Vh)


def svdvals(A):
    """torch's ``linalg.svdvals`` (descending); its gradient is ``U diag(gS) Vh``, as torch's."""
    return svd(A, full_matrices=False).S
