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
from .graph import AccumulateGrad, toposort
from ._modes import enable_grad
from .ops import clone, zeros_like
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
    with enable_grad():
        args, fresh, diff = list(args), set(), []
        for i in positions:
            args[i] = _map(args[i], lambda x: _differentiable(x, fresh, diff), every_leaf=True)
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
        # the gradients stay differentiable where the output reaches a tensor requiring grad from
        # outside (an outer transform's input, a weight the function closes over): torch's levels
        outer = output.grad_fn is not None and any(
            isinstance(n, AccumulateGrad) and id(n.variable) not in fresh for n in toposort([output.grad_fn]))
        if output.requires_grad:
            grads = iter(_autograd_grad(output, diff, allow_unused=True, materialize_grads=True, create_graph=outer))
        else:  # a constant output: zeros, as torch gives
            grads = iter([zeros_like(x.detach()) for x in diff])
    g = tuple(_map(args[i], lambda _: next(grads), every_leaf=True) for i in positions)
    if not outer:
        output, aux = output.detach(), _map(aux, lambda x: x.detach())
    return (g if isinstance(argnums, tuple) else g[0]), (output, aux)


def _differentiable(x, fresh, diff):
    """A tensor to differentiate with respect to, standing for ``x`` at this position only: a leaf
    holding its values, or (if ``x`` requires grad) an identity op on it, so the outer graph goes on."""
    if not isinstance(x, Tensor):
        raise ValueError(f"Thing passed to transform API must be Tensor, got {type(x)}")
    if x.requires_grad:
        alias = clone(x)
    else:
        alias = x.detach().requires_grad_()
        fresh.add(id(alias))
    diff.append(alias)
    return alias


def _map(tree, fn, every_leaf=False):
    """``fn`` on every tensor (``every_leaf``: every value) of a nested tuple, list or dict, in order;
    other values kept."""
    if type(tree) in (tuple, list):
        return type(tree)(_map(t, fn, every_leaf) for t in tree)
    if type(tree) is dict:
        return {k: _map(v, fn, every_leaf) for k, v in tree.items()}
    return fn(tree) if every_leaf or isinstance(tree, Tensor) else tree


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
