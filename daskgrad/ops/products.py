"""Products, triangles and diagonals, with their VJP rules (contract: see ``elementwise.py``): the
shape rules of linear algebra.  Norms, solvers and decompositions, which build on these, are in
``linalg.py``.

``matmul`` builds its own blockwise graph: when the contracted axis is one
chunk it is a pure ``blockwise`` task per output chunk, with no reduction
layer, so it fuses with the elementwise work before and after it (a logistic
regression's forward, loss cotangent and ``X.T @ g`` become one task per row
chunk plus one tree sum).  Otherwise each chunk pair contributes a partial
product and the partials are tree-summed, as in ``dask.array.matmul``.

Shapes follow NumPy (``dot``, ``inner``, ``outer``, ``vdot``, ``kron``, ``trace``, ``diagonal``
take NumPy's operands and ``axis`` arguments); errors and gradients follow torch.
"""
from __future__ import annotations

import collections
import contextlib
import functools
import string
import warnings

import dask.array as da
import numpy as np
from dask.array.utils import meta_from_array

from .. import chunk
from ..graph import View, named, primitive
from ._util import TORCH_TYPE_NAMES, as_tensor, check_broadcast, check_same_device, norm_axis, public
from .elementwise import astype, clone, conj
from .reductions import sum
from .shape import broadcast_to, expand_dims, moveaxis, reshape, squeeze, stack, swapaxes, transpose


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


def _operands(a, b):
    """``a`` and ``b`` as tensors on one device (torch's error where they are not)."""
    a, b = as_tensor(a), as_tensor(b)
    check_same_device(a, b)
    return a, b


def _matmul_operands(a, b):
    a, b = _operands(a, b)
    if a.ndim == 0 or b.ndim == 0:
        raise RuntimeError("both arguments to matmul need to be at least 1D, but they are "
                           f"{a.ndim}D and {b.ndim}D")
    _check_matmul(a.shape, b.shape)
    return a, b


# each operand is saved only when the other one needs a gradient, as torch's MmBackward0 does
matmul_p = primitive("matmul", torch=("MmBackward0", "MvBackward0", "DotBackward0", "SqueezeBackward4",
                                      "UnsafeViewBackward0"),
                     impl=_matmul_array, args=("a", "b"), save=(("a", 1), ("b", 0)), prepare=_matmul_operands)


# torch's C++ type names in its matmul dtype error
_CPP_NAMES = {"float16": "c10::Half", "float32": "float", "float64": "double", "int64": "long int", "int32": "int",
              "int16": "short int", "int8": "signed char", "uint8": "unsigned char", "bool": "bool",
              "complex64": "c10::complex<float>", "complex128": "c10::complex<double>"}


def same_dtype(a, b):
    """torch's refusal of a matrix product of two dtypes (NumPy's ``matmul`` promotes; torch's Tensor
    methods raise, with the text of the kernel the shapes reach)."""
    a, b = as_tensor(a), as_tensor(b)
    if a.dtype == b.dtype:
        return a, b
    na, nb = TORCH_TYPE_NAMES.get(a.dtype.name, a.dtype.name), TORCH_TYPE_NAMES.get(b.dtype.name, b.dtype.name)
    if a.ndim == b.ndim == 1:
        raise RuntimeError(f"dot : expected both vectors to have same dtype, but found {na} and {nb}")
    if b.ndim == 1:
        raise RuntimeError(f"addmv input tensors must have the same dtype, but got {nb}, {na}, and {nb}")
    if b.ndim == 2:
        ca, cb = (_CPP_NAMES.get(x.dtype.name, x.dtype.name) for x in (a, b))
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: {ca} != {cb}")
    raise RuntimeError(f"expected scalar type {na} but found {nb}")


def _checked(matmul, swap=False, operator=False):
    def method(self, other):
        """torch's ``matmul`` (``@``): both operands of one dtype."""
        if operator and (type(other) in (int, float, bool, complex) or isinstance(other, np.generic)):  # (Python's
            return NotImplemented  # TypeError, as torch's: ``t @ 2``)
        a, b = (other, self) if swap else (self, other)
        return matmul(*same_dtype(a, b))
    return method


@public(("__matmul__", functools.partial(_checked, operator=True)),
        ("__rmatmul__", functools.partial(_checked, swap=True, operator=True)), ("matmul", _checked))
def matmul(a, b):
    """The matrix product ``a @ b`` (NumPy's and torch's ``matmul``): 1-d operands are vectors, leading
    axes broadcast as batches."""
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


@public("mm")
def mm(a, b):
    """torch's ``mm``: the product of two matrices (``matmul`` of 2-d tensors only)."""
    a, b = as_tensor(a), as_tensor(b)
    if a.ndim != 2:
        raise RuntimeError("self must be a matrix")
    if b.ndim != 2:
        raise RuntimeError("mat2 must be a matrix")
    if a.shape[1] != b.shape[0]:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({a.shape[0]}x{a.shape[1]} and "
                           f"{b.shape[0]}x{b.shape[1]})")
    return matmul(*same_dtype(a, b))


def _vectors_only(dot):
    def method(self, other):
        """torch's ``dot`` (``vdot``: of the conjugate of ``self``): the inner product of two 1-d tensors of one
        dtype."""
        a, b = as_tensor(self), as_tensor(other)
        if a.ndim != 1 or b.ndim != 1:
            raise RuntimeError(f"1D tensors expected, but got {a.ndim}D and {b.ndim}D tensors")
        return dot(*same_dtype(a, b))
    return method


@public(("dot", _vectors_only))
def dot(a, b):
    """NumPy's ``dot``: a product with a 0-d operand, the inner product of vectors, the matrix product,
    and for N-D operands the sum over the last axis of ``a`` and the second-to-last of ``b``."""
    a, b = _operands(a, b)
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    if a.ndim <= 2 and b.ndim <= 2:
        return matmul(a, b)
    return tensordot(a, b, axes=([-1], [-1 if b.ndim == 1 else -2]))


@public("inner")
def inner(a, b):
    """Sum over the last axes of ``a`` and ``b`` (a product when one is 0-d); shape ``a.shape[:-1] +
    b.shape[:-1]``."""
    a, b = _operands(a, b)
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    if a.shape[-1] != b.shape[-1]:
        raise RuntimeError(f"inner() the last dimension must match on both input tensors but got shapes "
                           f"{list(a.shape)} and {list(b.shape)}")
    if a.ndim == b.ndim == 1:
        return matmul(a, b)
    return tensordot(a, b, axes=([-1], [-1]))


def _outer_method(outer):
    def method(self, vec2):
        """torch's ``outer``/``ger``: the outer product of two 1-d tensors (NumPy's flattens others; torch
        refuses them)."""
        for name, t in (("self", self), ("vec2", vec2)):
            if getattr(t, "ndim", 1) != 1:
                raise RuntimeError(f"outer: Expected 1-D argument {name}, but got {t.ndim}-D")
        return outer(self, vec2)
    return method


@public(("outer", _outer_method))
def outer(a, b):
    """``a.ravel()[:, None] * b.ravel()[None, :]`` (NumPy flattens; torch takes vectors only)."""
    a, b = _operands(a, b)
    return expand_dims(reshape(a, (-1,)), 1) * expand_dims(reshape(b, (-1,)), 0)


@public(("vdot", _vectors_only))
def vdot(a, b):
    """``sum(conj(a) * b)`` over the flattened operands (NumPy's ``vdot``; torch's ``vdot`` of vectors)."""
    a, b = _operands(a, b)
    return matmul(conj(reshape(a, (-1,))), reshape(b, (-1,)))


@public("kron")
@named("UnsafeViewBackward0")
def kron(a, b):
    """Kronecker product, NumPy's shape rule: the operand with fewer axes gets leading 1s."""
    a, b = _operands(a, b)
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


# torch's tensordot and einsum end in a reshape, so their nodes are ViewBackward0 too; the table
# names them apart (the dashboard's tensordot-vjp, einsum-vjp)
def _tensordot_array(a, b, *, xa, xb, na, nb):
    dtype = np.result_type(a.dtype, b.dtype)
    if dtype.kind not in "biu":
        return da.tensordot(a, b, axes=(list(xa), list(xb)))
    # integers and bools: in int64, cast to NumPy's dtype after (each chunk's product in a narrow dtype, summed across
    # the contraction chunks in int64, would wrap or not by the chunking; the wrap of the int64 sum is the same);
    # NumPy's product of bools is a logical or of ands
    wide = np.uint64 if dtype == np.uint64 else np.int64
    out = da.tensordot(a.astype(wide), b.astype(wide), axes=(list(xa), list(xb)))
    return out != 0 if dtype.kind == "b" else out.astype(dtype)


tensordot_p = primitive("tensordot", torch="ViewBackward0", args=("a", "b"), save=(("a", 1), ("b", 0)),
                        impl=_tensordot_array, prepare=_operands)


@public()
def tensordot(a, b, axes=2):
    """NumPy's ``tensordot``: ``axes`` an int N (the last N axes of ``a`` with the first N of ``b``)
    or a pair of axis lists."""
    a, b = _operands(a, b)
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
    if set("".join(ins)) - set(out) and any(t.dtype.kind in "biu" for t in ts):
        # torch sums one operand (int64 for integers and bools: NumPy's einsum of bools is a logical or)
        # and contracts several with bmm, which has no bool kernel
        if len(ts) > 1 and any(t.dtype == bool for t in ts):
            raise NotImplementedError("\"bmm\" not implemented for 'Bool'")
        if len(ts) == 1 and ts[0].dtype != np.int64:
            ts = [astype(ts[0], np.int64)]
    expr = ",".join(ins) + "->" + out
    arr = da.einsum(expr, *[t.array for t in ts])
    if len(ts) > 1 and all(t.dtype.kind in "iu" for t in ts):  # (bmm's dtype: dask's says int64 or uint64)
        arr = arr.astype(np.result_type(*[t.dtype for t in ts]))
    # on record, not impl: a variable number of operands, each saved under its own name
    return einsum_p.record(arr, *ts,
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


def _diagonal_layout(x_shape, x_strides, x_offset, out_shape, *, offset, axis1, axis2, chunks):
    """torch's diagonal: one step along both axes at once, from the diagonal's first element."""
    s1, s2 = x_strides[axis1], x_strides[axis2]
    if out_shape[-1]:
        x_offset += offset * s2 if offset >= 0 else -offset * s1
    return tuple(s for i, s in enumerate(x_strides) if i not in (axis1, axis2)) + (s1 + s2,), x_offset


def _planes_back(e, axis1, axis2):
    """Matrices on the last two axes moved back to ``axis1`` and ``axis2``."""
    return (da.moveaxis(da.moveaxis(e, -2, axis1), -1, axis2) if axis1 < axis2 else
            da.moveaxis(da.moveaxis(e, -1, axis2), -1, axis1))


def _diagonal_put(a, new, *, offset, axis1, axis2, chunks):
    """``a`` with ``new`` on its diagonal (torch's ``diagonal_scatter``)."""
    on = _planes_back(_embed_array(da.ones_like(new, dtype=bool), offset, chunks), axis1, axis2)
    return da.where(on, _planes_back(_embed_array(new, offset, chunks), axis1, axis2), a)


diagonal_p = primitive("diagonal", torch="DiagonalBackward0", prepare=_diagonal_operand,
                       impl=lambda a, *, offset, axis1, axis2, chunks: da.diagonal(a, offset, axis1, axis2),
                       view=View(_diagonal_layout, _diagonal_put))
diag_embed_p = primitive("diag_embed", torch="DiagEmbedBackward0", prepare=_diagonal_operand,
                         impl=lambda a, *, offset, chunks: _embed_array(a, offset, chunks))


@public("diagonal")
def diagonal(x, offset=0, axis1=0, axis2=1, *, dim1=None, dim2=None):
    """NumPy's ``diagonal``: the ``offset`` diagonal of the ``axis1`` x ``axis2`` planes (torch's ``dim1``,
    ``dim2``), as a new last axis."""
    axis1, axis2 = (axis1 if dim1 is None else dim1), (axis2 if dim2 is None else dim2)
    x = as_tensor(x)
    offset = _int_arg(offset, "offset")
    a1, a2 = norm_axis(axis1, x.ndim), norm_axis(axis2, x.ndim)  # (fewer than 2 dims: torch's IndexError, or
    if a1 == a2:  # this error, as torch's)
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
@named(lambda x, k=0: "DiagEmbedBackward0" if np.ndim(x) == 1 else "DiagonalBackward0_copy")
def diag(x, k=0):
    """NumPy's ``diag``: a vector becomes a square matrix with it on the ``k`` diagonal, a matrix gives
    its ``k`` diagonal, a copy (torch's: NumPy's is a read-only view; a view here would write through)."""
    x = as_tensor(x)
    k = _int_arg(k, "k")
    if x.ndim == 1:
        n = x.shape[0] + (k if k > 0 else -k)
        c = x.chunks[0]
        return diag_embed(x, k, (c + (n - x.shape[0],) if n > x.shape[0] else c,) * 2)
    if x.ndim != 2:
        raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {x.ndim}D")
    return clone(diagonal(x, k))


@public("trace")
@named("TraceBackward0")
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


# ============================================================ composite products
def multi_dot(tensors):
    """torch's ``linalg.multi_dot`` (NumPy's ``linalg.multi_dot``): the chained product of 2-D
    tensors, the first and last may be vectors, multiplied in the order of fewest scalar products
    (NumPy's dynamic program).  Gradients are matmul's."""
    ts = [as_tensor(t) for t in tensors]
    if len(ts) < 2:
        raise RuntimeError(f"multi_dot(): expected at least 2 tensors but got {len(ts)}")
    check_same_device(*ts)
    if ts[0].ndim not in (1, 2):
        raise RuntimeError(f"multi_dot(): the first tensor must be 1D or 2D but got {ts[0].ndim}D")
    if ts[-1].ndim not in (1, 2):
        raise RuntimeError(f"multi_dot(): the last tensor must be 1D or 2D but got {ts[-1].ndim}D")
    for i, t in enumerate(ts[1:-1], 1):
        if t.ndim != 2:
            raise RuntimeError(f"multi_dot(): tensor {i} must be 2D but got {t.ndim}D")
    first_vec, last_vec = ts[0].ndim == 1, ts[-1].ndim == 1
    mats = [expand_dims(ts[0], 0) if first_vec else ts[0], *ts[1:-1],
            expand_dims(ts[-1], 1) if last_vec else ts[-1]]
    for i in range(len(mats) - 1):
        if mats[i].shape[1] != mats[i + 1].shape[0]:
            raise RuntimeError(f"multi_dot(): tensors {i} and {i + 1} with shapes {list(ts[i].shape)} and "
                               f"{list(ts[i + 1].shape)} cannot be multiplied")
    order = _chain_order([m.shape[0] for m in mats] + [mats[-1].shape[1]])
    out = _chain(mats, order, 0, len(mats) - 1)
    if first_vec:
        out = squeeze(out, 0)
    return squeeze(out, -1) if last_vec else out


def _chain_order(dims):
    """``split[i][j]``: where the cheapest product of matrices i..j splits (the matrix-chain DP)."""
    n = len(dims) - 1
    cost = [[0] * n for _ in range(n)]
    split = [[0] * n for _ in range(n)]
    for length in range(1, n):
        for i in range(n - length):
            j = i + length
            cost[i][j], split[i][j] = min((cost[i][k] + cost[k + 1][j] + dims[i] * dims[k + 1] * dims[j + 1], k)
                                          for k in range(i, j))
    return split


def _chain(mats, split, i, j):
    if i == j:
        return mats[i]
    k = split[i][j]
    return matmul(_chain(mats, split, i, k), _chain(mats, split, k + 1, j))


def vecdot(x, y, *, axis=-1):
    """torch's ``linalg.vecdot`` (NumPy's ``vecdot``): ``sum(conj(x) * y)`` over ``axis``, the operands
    broadcast."""
    x, y = as_tensor(x), as_tensor(y)
    check_same_device(x, y)
    return sum(conj(x) * y, axis=axis)


@named("LinalgCrossBackward0")
def cross(x, y, *, axis=-1):
    """torch's ``linalg.cross`` (NumPy's ``linalg.cross``): the cross product of 3-vectors along
    ``axis``, the operands broadcast."""
    x, y = as_tensor(x), as_tensor(y)
    check_same_device(x, y)
    if x.ndim != y.ndim:
        raise RuntimeError("linalg.cross: inputs must have the same number of dimensions.")
    ax, ay = norm_axis(axis, x.ndim), norm_axis(axis, y.ndim)
    if x.shape[ax] != 3 or y.shape[ay] != 3:
        raise RuntimeError(f"linalg.cross: inputs dimension {axis} must have length 3. Got {x.shape[ax]} and "
                           f"{y.shape[ay]}")
    check_broadcast(x.shape, y.shape)
    x, y = moveaxis(x, ax, -1), moveaxis(y, ay, -1)
    a = [x[..., i] for i in range(3)]
    b = [y[..., i] for i in range(3)]
    parts = [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]
    out = stack(parts, axis=-1)
    return moveaxis(out, -1, axis if axis >= 0 else out.ndim + axis)
