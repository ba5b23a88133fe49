"""``torch.func``'s gradient transforms: ``grad`` and ``grad_and_value``, functions in, functions out.

``grad(f)(*args)`` is the gradient of the scalar ``f(*args)`` with respect to ``args[argnums]``,
taken with :func:`daskgrad.autograd.grad` on fresh leaves holding the arguments' values (an
argument need not require grad; one that does keeps its graph, so transforms nest).  Composed with
:func:`daskgrad.compile` it is a training step traced once and replayed, as ``jax.jit(jax.grad(f))``::

    step = dg.compile(dg.func.grad_and_value(loss))
    g, value = step(w, X, y)
"""
from __future__ import annotations

import functools

from .engine import grad as _autograd_grad
from ._modes import enable_grad
from ._tensor import Tensor


def grad(func, argnums=0, has_aux=False):
    """``torch.func.grad``: a function returning the gradient of ``func`` (and its aux output)."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        g, (_, aux) = _grad_and_value(func, argnums, args, kwargs, has_aux)
        return (g, aux) if has_aux else g
    return wrapper


def grad_and_value(func, argnums=0, has_aux=False):
    """``torch.func.grad_and_value``: a function returning ``(gradient, value)`` of ``func``."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        g, (value, aux) = _grad_and_value(func, argnums, args, kwargs, has_aux)
        return (g, (value, aux)) if has_aux else (g, value)
    return wrapper


def _grad_and_value(func, argnums, args, kwargs, has_aux):
    name = "grad_and_value"  # (torch.func.grad's errors say so too: it calls grad_and_value)
    positions = _argnums(argnums, len(args))
    outer = False  # an argument already requires grad: the gradients stay differentiable (a nested transform)
    with enable_grad():
        args = list(args)
        for i in positions:
            x = args[i]
            if not isinstance(x, Tensor):
                raise ValueError(f"Thing passed to transform API must be Tensor, got {type(x)}")
            outer = outer or x.requires_grad
            args[i] = x if x.requires_grad else x.detach().requires_grad_()  # a leaf holding x's values
        output = func(*args, **kwargs)
        aux = None
        if has_aux:
            if not (isinstance(output, tuple) and len(output) == 2):
                raise RuntimeError(f"{name}(f)(*args): output of function f should be a tuple: (output, aux) "
                                   "if has_aux is True")
            output, aux = output
        if not isinstance(output, Tensor):
            raise RuntimeError(f"{name}(f)(*args): Expected f(*args) to return a Tensor, got {type(output)}")
        if output.ndim != 0:
            raise RuntimeError(f"{name}(f)(*args): Expected f(*args) to return a scalar Tensor, got tensor with "
                               f"{output.ndim} dims. Maybe you wanted to use the vjp or jacrev APIs instead?")
        grads = _autograd_grad(output, [args[i] for i in positions], allow_unused=True, materialize_grads=True,
                               create_graph=outer)
    g = grads if isinstance(argnums, tuple) else grads[0]
    return g, (output if outer else output.detach(), aux)


def _argnums(argnums, n):
    """``argnums`` checked and wrapped as torch does, as a tuple of positions."""
    if not isinstance(argnums, (int, tuple)):
        raise RuntimeError(f"argnums must be int or Tuple[int, ...], got: {type(argnums)}")
    out = []
    for a in (argnums,) if isinstance(argnums, int) else argnums:
        if not isinstance(a, int):
            raise RuntimeError(f"argnum must be int, got: {type(a)}")
        if not -n <= a < n:
            raise RuntimeError(f"Got argnum={a}, but only {n} positional inputs")
        out.append(a % n)
    if isinstance(argnums, tuple):
        if not out:
            raise RuntimeError("argnums must be non-empty")
        if len(set(out)) != len(out):
            raise RuntimeError(f"argnums elements must be unique, got {tuple(out)}")
    return tuple(out)
