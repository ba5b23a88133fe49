"""Gradient checking shipped with the package (like ``autograd.test_util``).

:func:`gradcheck` is a dot-product test: for random directions ``u`` (input
space) and ``v`` (output space) it compares ``<VJP(v), u>`` with
``<v, (f(x + eps u) - f(x - eps u)) / 2 eps>``.  One scalar per input, so it
scales to large chunked inputs; every number is computed in one submission.
"""
from __future__ import annotations

import collections
import contextlib
import functools
import operator
import warnings

import dask.array as da
import numpy as np

from . import runtime
from .engine import grad
from ._modes import enable_grad, no_grad
from ._tensor import Tensor
from .ops import concatenate, zeros_like


class Submissions(collections.Counter):
    """How many submissions daskgrad made meanwhile, by phase ("forward", "backward", "compute");
    ``graphs``: what each submitted, optimized into one graph (kept only when asked for: holding a
    graph holds the values it reads in cluster memory)."""

    graphs: list


@contextlib.contextmanager
def submissions(graphs=False):
    """Observe daskgrad's submissions: a training step that logs its loss is one,
    ``sum(subs.values()) == 1``.  ``graphs=True`` also keeps each submitted graph in ``subs.graphs``."""
    seen = Submissions()
    seen.graphs = []

    def observer(phase, arrays):
        seen[phase] += 1
        if graphs:
            seen.graphs.append(arrays)

    with runtime.observe(observer):
        yield seen


class GradcheckError(RuntimeError):
    """Analytic and numerical gradients disagree."""


def _random_block(block, seed, block_id=None):
    rng = np.random.default_rng([seed, *(block_id or ())])
    like = block if hasattr(block, "__array_function__") else np.empty(0)  # 0-d chunks may be scalars
    return np.array(rng.standard_normal(np.shape(block)), like=like).astype(block.dtype)


def random_like(t: Tensor, seed: int) -> Tensor:
    """Standard-normal values with ``t``'s shape, chunks and chunk type."""
    a = t.array
    return Tensor._make(da.map_blocks(_random_block, a, seed=seed, dtype=a.dtype, meta=a._meta))


def _as_outputs(out):
    """A function's outputs as a tuple of tensors (torch's gradcheck takes a tensor or a tuple)."""
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return tuple(o for o in outs if isinstance(o, Tensor))


def gradcheck(func, inputs, *, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True, seed=0, check_chunks=True,
              nondet_tol=0.0, check_undefined_grad=True, check_grad_dtypes=False, check_batched_grad=False,
              check_batched_forward_grad=False, check_forward_ad=False, check_backward_ad=True, fast_mode=False,
              masked=None):
    """True when ``func``'s VJP matches central differences for every input that requires grad, and
    is zero for a zero cotangent (torch's "backward not multiplied by grad_output").

    torch's keywords are accepted; the check is always torch's fast mode (random projections), and
    forward-mode AD (``check_forward_ad``), which daskgrad does not have, is refused."""
    if check_forward_ad:
        raise NotImplementedError("daskgrad has no forward-mode AD: gradcheck checks backward mode only")
    inputs = (inputs,) if isinstance(inputs, Tensor) else tuple(inputs)
    wrt = [i for i, t in enumerate(inputs) if isinstance(t, Tensor) and t.requires_grad]
    if not wrt:
        raise ValueError("gradcheck expects at least one input tensor to require gradient, but none of them "
                         "have requires_grad=True.")
    for i in wrt:
        if inputs[i].dtype != np.float64:
            warnings.warn(f"Input #{i} requires gradient and is not a double precision floating point or "
                          "complex. This check will likely fail if all the inputs are not of double precision "
                          "floating point or complex. ", UserWarning, stacklevel=2)
    outs = _as_outputs(func(*inputs))
    vs = [random_like(o.detach(), seed + 1000 * j) for j, o in enumerate(outs)]
    diff = [j for j, o in enumerate(outs) if o.requires_grad]
    grads, zero_grads = [None] * len(wrt), [None] * len(wrt)
    if diff:
        roots, wanted = [outs[j] for j in diff], [inputs[i] for i in wrt]
        grads = grad(roots, wanted, [vs[j] for j in diff], retain_graph=True, allow_unused=True, lazy=True)
        zero_grads = grad(roots, wanted, [zeros_like(vs[j]) for j in diff], retain_graph=True, allow_unused=True,
                          lazy=True)
    checks = []
    for k, (i, g, g0) in enumerate(zip(wrt, grads, zero_grads)):
        x = inputs[i]
        if check_chunks and g is not None and g.chunks != x.chunks:
            raise GradcheckError(f"gradient chunks {g.chunks} differ from input {i}'s chunks {x.chunks}")
        u = random_like(x.detach(), seed + 1 + k)
        numeric = _central_difference(func, inputs, x, u, outs, vs, eps)
        zero = Tensor._make(da.zeros((), dtype=x.dtype))
        analytic = (g * u).sum() if g is not None else zero
        checks.append((i, numeric.array, analytic.array, (abs(g0).sum() if g0 is not None else zero).array))
    values = runtime.persist([c for _, n, a, z in checks for c in (n, a, z)], phase="gradcheck")
    for (i, _, _, _), num, ana, z in zip(checks, values[0::3], values[1::3], values[2::3]):
        error = _mismatch(i, float(num.compute()), float(ana.compute()), float(z.compute()), bool(diff), atol, rtol)
        if error is not None:
            if not raise_exception:
                return False
            raise GradcheckError(error)
    return True


def _central_difference(func, inputs, x, u, outs, vs, eps):
    """``<v, (f(x + eps u) - f(x - eps u)) / 2 eps>``, perturbing the input itself, as torch does, so
    a func that closes over it sees the shift (and runs in the caller's grad mode, as torch's: it
    may register hooks); refuses outputs whose shape or dtype then changes."""
    def shifted(sign):
        orig = x.array
        with no_grad():
            x.data = x.detach() + u * (sign * eps)
        try:
            outputs = _as_outputs(func(*inputs))
            with no_grad():  # cloned: an output that aliases the input must keep the shifted value
                got = tuple(o.detach().clone() for o in outputs)
        finally:
            x.data = orig
        for o, p in zip(outs, got):
            _same_shape_and_dtype(o, p, eps)
        return got

    plus, minus = shifted(1), shifted(-1)
    with no_grad():  # a func with no outputs: zero, made like x (a NumPy zero would meet cupy chunks)
        terms = [((p - m) * v).sum() for p, m, v in zip(plus, minus, vs)] or [(x.detach() * 0).sum()]
        return functools.reduce(operator.add, terms) / (2 * eps)


def _same_shape_and_dtype(output1, output2, eps):
    what = ("shape", "shapes", output1.shape, output2.shape) if output1.shape != output2.shape else (
        ("dtype", "dtypes", output1.dtype, output2.dtype) if output1.dtype != output2.dtype else None)
    if what is not None:
        raise AssertionError(f"Expected `func` to return outputs with the same {what[0]} when inputs are perturbed "
                             f"by {eps}, but got: {what[1]} {what[2]} and {what[3]}.")


def _mismatch(i, num, ana, zero_cotangent_grad, any_diff, atol, rtol):
    """torch's error text for what the numbers of input ``i`` show, or None."""
    if not any_diff and abs(num) > atol:  # torch: outputs that do not require grad must be constant
        return "Numerical gradient for function expected to be zero"
    if not abs(num - ana) <= atol + rtol * abs(num):
        return f"Jacobian mismatch for output 0 with respect to input {i},\nnumerical:{num}\nanalytical:{ana}\n"
    if zero_cotangent_grad != 0:
        return "backward not multiplied by grad_output"
    return None


def gradgradcheck(func, inputs, grad_outputs=None, *, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True,
                  seed=0, gen_non_contig_grad_outputs=False, nondet_tol=0.0, check_undefined_grad=True,
                  check_grad_dtypes=False, check_batched_grad=False, check_fwd_over_rev=False,
                  check_rev_over_rev=True, fast_mode=False, masked=False):
    """True when second derivatives are right: :func:`gradcheck` of the map
    ``(inputs, v) -> vᵀJ`` built with ``create_graph=True``, so the VJP rules' own VJPs are
    checked against central differences of the first-order VJP.  torch's keywords are accepted;
    forward-over-reverse (``check_fwd_over_rev``) needs forward-mode AD, which daskgrad has not."""
    if check_fwd_over_rev:
        raise NotImplementedError("daskgrad has no forward-mode AD: gradgradcheck checks reverse over reverse")
    inputs = (inputs,) if isinstance(inputs, Tensor) else tuple(inputs)
    wrt = [i for i, t in enumerate(inputs) if isinstance(t, Tensor) and t.requires_grad]
    if grad_outputs is None:  # (func runs in the caller's grad mode, as torch's: it may assert on requires_grad)
        outs = _as_outputs(func(*inputs))
        grad_outputs = tuple(random_like(o, seed + 101 + j) for j, o in enumerate(outs))
    vs = tuple(g.detach().requires_grad_() for g in _as_outputs(grad_outputs))

    def vjp(*args):
        xs, cots = args[:len(inputs)], args[len(inputs):]
        with enable_grad():
            outs = _as_outputs(func(*xs))
            pairs = [(o, c) for o, c in zip(outs, cots) if o.requires_grad]
            if not pairs:
                return tuple(zeros_like(xs[i]) for i in wrt)
            gs = grad([o for o, _ in pairs], [xs[i] for i in wrt], [c for _, c in pairs], create_graph=True,
                      materialize_grads=True)
        return gs[0] if len(gs) == 1 else concatenate([g.reshape(-1) for g in gs])

    return gradcheck(vjp, inputs + vs, eps=eps, atol=atol, rtol=rtol, raise_exception=raise_exception,
                     seed=seed, check_chunks=False)
