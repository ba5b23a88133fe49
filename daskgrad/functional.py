"""``torch.autograd.functional`` on daskgrad: vjp, jvp, hvp, vhp, jacobian, hessian.

All are built on :func:`daskgrad.grad`; ``jvp`` uses the double-vjp trick and
``jacobian`` builds every row lazily and submits them together.
"""
from __future__ import annotations

import dask.array as da
import numpy as np

from . import chunk, runtime
from .backward import grad
from .graph import size_repr
from .ops import ones_like, stack, zeros_like
from .tensor import Tensor


def _inputs(inputs, fn_name):
    if isinstance(inputs, Tensor):
        return (inputs,), True
    if not isinstance(inputs, tuple) or not all(isinstance(t, Tensor) for t in inputs):
        raise TypeError(f"The inputs given to {fn_name} must be either a Tensor or a tuple of Tensors but the "
                        f"given inputs has type {type(inputs)}.")
    return inputs, False


def _fresh(inputs):
    return tuple(t.detach().requires_grad_(True) for t in inputs)


def _check_v(v, like):
    if v.shape != like.shape:
        raise RuntimeError(f"v has invalid size: should be {size_repr(like.shape)} but got {size_repr(v.shape)}.")


def _out(ts, single):
    return ts[0] if single else tuple(ts)


def _grads(out, inputs, v, create_graph, strict, retain_graph=None):
    if not out.requires_grad:
        if strict:
            raise RuntimeError("Output 0 of the user-provided function does not require gradients. The outputs "
                               "must be computed in a differentiable manner from the input when running in "
                               "strict mode.")
        return tuple(zeros_like(t) for t in inputs)
    gs = grad(out, inputs, v, retain_graph=retain_graph, create_graph=create_graph, allow_unused=True)
    return tuple(zeros_like(t) if g is None else g for g, t in zip(gs, inputs))


def vjp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), vᵀJ)``."""
    inputs, single = _inputs(inputs, "vjp")
    inputs = _fresh(inputs)
    out = func(*inputs)
    if v is None:
        if out.numel() != 1:
            raise RuntimeError("The vector v can only be None if the user-provided function returns a single "
                               "Tensor with a single element.")
    else:
        _check_v(v, out)
    gs = _grads(out, inputs, v, create_graph, strict)
    return (out if create_graph else out.detach()), _out(gs, single)


def jvp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), J v)``, by differentiating a vjp with respect to its cotangent."""
    inputs, single = _inputs(inputs, "jvp")
    inputs = _fresh(inputs)
    if v is None:
        if sum(t.numel() for t in inputs) != 1:
            raise RuntimeError("The vector v can only be None if the input to the user-provided function is a "
                               "single Tensor with a single element.")
        v = tuple(ones_like(t) for t in inputs)
    v = (v,) if isinstance(v, Tensor) else tuple(v)
    for vi, t in zip(v, inputs):
        _check_v(vi, t)
    out = func(*inputs)
    u = zeros_like(out).requires_grad_(True)
    g = grad(out, inputs, u, create_graph=True, allow_unused=True)
    pairs = [(gi, vi) for gi, vi in zip(g, v) if gi is not None and gi.requires_grad]
    if not pairs:
        jv = zeros_like(out)
    else:
        (jv,) = grad([p[0] for p in pairs], u, [p[1] for p in pairs], create_graph=create_graph,
                     allow_unused=True, materialize_grads=True)
    return (out if create_graph else out.detach()), jv


def hvp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), H v)`` for a scalar ``func``."""
    inputs, single = _inputs(inputs, "hvp")
    inputs = _fresh(inputs)
    out = func(*inputs)
    if out.numel() != 1:
        raise RuntimeError("The Tensor returned by the function given to hvp should contain a single element")
    v = (v,) if isinstance(v, Tensor) else tuple(v)
    g = grad(out, inputs, create_graph=True)
    pairs = [(gi, vi) for gi, vi in zip(g, v) if gi.requires_grad]
    hv = grad([p[0] for p in pairs], inputs, [p[1] for p in pairs], create_graph=create_graph,
              allow_unused=True, materialize_grads=True) if pairs else tuple(zeros_like(t) for t in inputs)
    return (out if create_graph else out.detach()), _out(hv, single)


vhp = hvp  # the Hessian of a twice-differentiable scalar function is symmetric


def jacobian(func, inputs, create_graph=False, strict=False, vectorize=False, strategy="reverse-mode"):
    """Full Jacobian, shape ``out.shape + in.shape``: one lazy vjp per output element, one submission."""
    if strategy == "forward-mode" and not vectorize:
        raise ValueError("torch.autograd.functional.jacobian: `strategy=\"forward-mode\"` is only supported "
                         "with `vectorize=True`.")
    inputs, single = _inputs(inputs, "jacobian")
    inputs = _fresh(inputs)
    out = func(*inputs)
    n = out.numel()
    rows = [[] for _ in inputs]
    for i in range(n):
        index = np.unravel_index(i, out.shape)
        v = Tensor._make(da.map_blocks(chunk.one_hot, out.array, index=tuple(int(k) for k in index),
                                       dtype=out.dtype, meta=out.array._meta))
        if out.requires_grad:
            gs = grad(out, inputs, v, retain_graph=True, create_graph=create_graph, allow_unused=True,
                      lazy=True)
        elif strict:
            _grads(out, inputs, v, create_graph, strict)
        else:
            gs = (None,) * len(inputs)
        for r, g, t in zip(rows, gs, inputs):
            r.append(zeros_like(t) if g is None else g)
    jac = [stack(r).reshape(out.shape + t.shape) for r, t in zip(rows, inputs)]
    if not create_graph:
        jac = [Tensor._make(a) for a in runtime.persist([j.array for j in jac], phase="jacobian")]
    return _out(jac, single)


def hessian(func, inputs, create_graph=False, strict=False, vectorize=False, outer_jacobian_strategy="reverse-mode"):
    """Jacobian of the gradient of a scalar ``func``."""
    inputs_t, single = _inputs(inputs, "hessian")

    def gradient(*xs):
        out = func(*xs)
        if out.numel() != 1:
            raise RuntimeError("The function given to hessian should return a single Tensor with a single element")
        (g,) = grad(out, xs[:1], create_graph=True)
        return g

    if not single:
        raise NotImplementedError("hessian of several inputs: call it per input")
    return jacobian(gradient, inputs_t[0], create_graph=create_graph, strict=strict)
