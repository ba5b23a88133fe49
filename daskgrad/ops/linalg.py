"""Matrix products and their (bilinear) VJP rules (contract: see ``elementwise.py``).

``matmul`` builds its own blockwise graph: when the contracted axis is one
chunk it is a pure ``blockwise`` task per output chunk, with no reduction
layer, so it fuses with the elementwise work before and after it (a logistic
regression's forward, loss cotangent and ``X.T @ g`` become one task per row
chunk plus one tree sum).  Otherwise each chunk pair contributes a partial
product and the partials are tree-summed, as in ``dask.array.matmul``.
"""
from __future__ import annotations

import dask.array as da
import numpy as np
from dask.array.utils import meta_from_array

from .. import chunk
from ..graph import primitive
from ._util import as_tensor, check_same_device, norm_axis, public
from .elementwise import conj
from .shape import broadcast_to, expand_dims, swapaxes, transpose


def _matmul_array(a, b):
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


matmul_p = primitive("matmul", torch=("MmBackward0", "MvBackward0", "DotBackward0", "SqueezeBackward4",
                                      "UnsafeViewBackward0"))


@public("__matmul__", "__rmatmul__", "matmul")
def matmul(a, b):
    a, b = as_tensor(a), as_tensor(b)
    check_same_device(a, b)
    if a.ndim == 0 or b.ndim == 0:
        raise RuntimeError("both arguments to matmul need to be at least 1D, but they are "
                           f"{a.ndim}D and {b.ndim}D")
    _check_matmul(a.shape, b.shape)
    node = ("DotBackward0" if a.ndim == b.ndim == 1 else "MvBackward0" if b.ndim == 1 and a.ndim == 2
            else "SqueezeBackward4" if a.ndim == 1 else "MmBackward0" if a.ndim == b.ndim == 2
            else "UnsafeViewBackward0")
    return matmul_p.record(_matmul_array(a.array, b.array), a, b, save={"a": a, "b": b}, node=node)


def _check_matmul(sa, sb):
    """torch's error texts for a contracted size mismatch (dask would fail late or obscurely)."""
    k, kb = sa[-1], sb[-1] if len(sb) == 1 else sb[-2]
    if k == kb or k != k or kb != kb:
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
def _matmul_rule(g, s):
    na, nb = s.needs
    a, b = conj(s.a), conj(s.b)  # torch's complex convention: each side meets the other's conjugate
    if a.ndim == 1 and b.ndim == 1:                      # dot: g is a scalar
        return (g * b if na else None), (g * a if nb else None)
    if b.ndim == 1:                                       # matrix @ vector: no reshapes on the hot path
        return (expand_dims(g, -1) * b if na else None), (matmul(swapaxes(a, -1, -2), g) if nb else None)
    if a.ndim == 1:                                       # vector @ matrix
        return (matmul(b, g) if na else None), (expand_dims(a, -1) * expand_dims(g, -2) if nb else None)
    return (matmul(g, swapaxes(b, -1, -2)) if na else None), (matmul(swapaxes(a, -1, -2), g) if nb else None)


@public("dot")
def dot(a, b):
    a, b = as_tensor(a), as_tensor(b)
    if a.ndim <= 2 and b.ndim <= 2:
        return matmul(a, b)
    return tensordot(a, b, axes=([-1], [-2]))


def _norm_tensordot_axes(axes, na, nb):
    if isinstance(axes, int):
        return list(range(na - axes, na)), list(range(axes))
    xa, xb = axes
    xa = [xa] if isinstance(xa, int) else list(xa)
    xb = [xb] if isinstance(xb, int) else list(xb)
    return [norm_axis(i, na) for i in xa], [norm_axis(i, nb) for i in xb]


@public()
def tensordot(a, b, axes=2):
    a, b = as_tensor(a), as_tensor(b)
    check_same_device(a, b)
    xa, xb = _norm_tensordot_axes(axes, a.ndim, b.ndim)
    for i, j in zip(xa, xb):
        if a.shape[i] != b.shape[j]:
            raise RuntimeError(f"contracted dimensions need to match, but first has size {a.shape[i]} in dim {i} "
                               f"and second has size {b.shape[j]} in dim {j}")
    return tensordot_p.record(da.tensordot(a.array, b.array, axes=(xa, xb)), a, b, save={"a": a, "b": b},
                              xa=tuple(xa), xb=tuple(xb))


# torch's tensordot and einsum end in a reshape, so their nodes are ViewBackward0 too; the table
# names them apart (the dashboard's tensordot-vjp, einsum-vjp)
tensordot_p = primitive("tensordot", torch="ViewBackward0")


@tensordot_p.vjp
def _tensordot_rule(g, s, *, xa, xb):
    xa, xb = list(xa), list(xb)
    free_a = [i for i in range(s.a.ndim) if i not in xa]
    free_b = [i for i in range(s.b.ndim) if i not in xb]
    na, nb = s.needs
    fa, fb = len(free_a), len(free_b)
    ga = gb = None
    if na:
        ga = tensordot(g, conj(s.b), axes=(list(range(fa, fa + fb)), free_b))
        order = free_a + [xa[xb.index(k)] for k in sorted(xb)]
        ga = transpose(ga, list(np.argsort(order)))
    if nb:
        gb = tensordot(conj(s.a), g, axes=(free_a, list(range(fa))))
        order = [xb[xa.index(k)] for k in sorted(xa)] + free_b
        gb = transpose(gb, list(np.argsort(order)))
    return ga, gb


@public()
def einsum(subscripts, *operands):
    """Explicit-output einsum (``"ij,jk->ik"``); each operand's rule is another einsum."""
    ts = [as_tensor(t) for t in operands]
    check_same_device(*ts)
    if "->" not in subscripts or "." in subscripts:
        raise NotImplementedError("einsum needs an explicit '->' output and no ellipsis")
    ins, out = subscripts.replace(" ", "").split("->")
    ins = ins.split(",")
    seen = {}
    for k, (sub, t) in enumerate(zip(ins, ts)):
        for c, n in zip(sub, t.shape):
            if seen.setdefault(c, n) != n and n != 1 and seen[c] != 1:
                raise RuntimeError(f"einsum(): subscript {c} has size {n} for operand {k} which does not broadcast "
                                   f"with previously seen size {seen[c]}")
    if any(len(set(sub)) != len(sub) for sub in ins):
        raise NotImplementedError("einsum with a repeated index inside one operand is not differentiable here")

    return einsum_p.record(da.einsum(subscripts, *[t.array for t in ts]), *ts,
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
        target = "".join(c for c in dict.fromkeys(sub) if c in have)
        expr = ",".join([out] + [o for o, _ in others]) + "->" + target
        gk = einsum(expr, g, *[conj(t) for _, t in others])
        missing = tuple(i for i, c in enumerate(sub) if c not in target)
        if missing:  # an index summed away in forward: broadcast back over it
            gk = broadcast_to(expand_dims(gk, missing), getattr(s, f"t{k}").shape)
        grads.append(gk)
    return tuple(grads)

