"""``scipy.optimize.minimize`` driven by daskgrad: value and gradient in one submission.

SciPy's optimizers work on a flat float64 vector in host memory; ``fun`` works on a
chunked Tensor.  Each evaluation rebuilds the Tensor from SciPy's vector (x0's
shape, dtype, chunks and chunk type), records ``fun``, takes the gradient lazily and
computes loss and gradient together, so the forward runs once per evaluation.
SciPy is an optional dependency (the ``optimize`` extra).

An x0 too big for the client (``daskgrad.optimize.host-limit`` bytes as float64, default 256 MiB;
or ``options={"on_cluster": True}``) is solved with ``method="L-BFGS-B"`` by a projected L-BFGS that
keeps x on the cluster (:mod:`daskgrad._lbfgsb`): only scalars come to the client.
"""
from __future__ import annotations

import functools
import weakref

import dask
import dask.array as da
import numpy as np
from dask.utils import parse_bytes

from . import chunk, runtime
from ._lbfgsb import bounds_of, minimize_on_cluster
from .compiler import Compiled, compile
from .func import grad_and_value
from .engine import grad
from ._tensor import Tensor, from_array

_GRADIENT = {"cg", "bfgs", "l-bfgs-b", "tnc", "slsqp", "trust-constr"}
_HESSP = {"newton-cg", "trust-ncg", "trust-krylov"}  # exact H @ p by double backward if none is given
_HESS = {"dogleg", "trust-exact"}  # need the whole Hessian matrix
_HOST_LIMIT = 256 * 2 ** 20  # bytes of SciPy's float64 copy of x0; larger x0 stays on the cluster


def minimize(fun, x0, args=(), method="L-BFGS-B", bounds=None, constraints=(), tol=None, callback=None,
             options=None, hess=None, hessp=None):
    """Minimise the scalar Tensor ``fun(x, *args)`` over ``x`` with :func:`scipy.optimize.minimize`.

    ``x0`` is a Tensor, dask or NumPy array (integers become float64); ``fun``
    receives a Tensor like it and returns a one-element Tensor.  Gradients are
    exact (reverse mode); for Newton-CG, trust-ncg and trust-krylov the
    Hessian-vector products are too, unless ``hess``/``hessp`` are given.
    ``bounds`` takes SciPy's forms; a ``Bounds`` may hold arrays of x0's shape.
    ``callback(x)`` receives x as a Tensor.  Returns SciPy's ``OptimizeResult``
    with ``x`` (and ``jac`` where present) as Tensors shaped, typed and chunked like x0.

    With ``method="L-BFGS-B"``, an x0 whose float64 copy exceeds ``daskgrad.optimize.host-limit``
    (dask config, bytes; default 256 MiB), or ``options={"on_cluster": True}``, is solved on the
    cluster by projected L-BFGS (:mod:`daskgrad._lbfgsb`: active set, two-loop direction, projected
    Armijo backtracking; not SciPy's Cauchy point): x, the gradient and the history stay chunked
    like x0 there and only scalars reach the client.  Its options are SciPy's (``maxcor``,
    ``ftol``, ``gtol``, ``maxiter``, ``maxfun``, ``maxls``); ``x`` and ``jac`` are not gathered.  A NaN
    objective or gradient ends it as it ends SciPy's: ``"ABNORMAL: "``, ``status=2``, ``success=False``.
    """
    try:
        import scipy.optimize as so
    except ImportError:
        raise ImportError("daskgrad.optimize needs SciPy: pip install 'daskgrad[optimize]'") from None
    name = _check_method(method, hess)
    options = dict(options or {})
    on_cluster = options.pop("on_cluster", None)
    like = _tensor_of(x0)
    if on_cluster is None:
        limit = dask.config.get("daskgrad.optimize.host-limit", _HOST_LIMIT)
        on_cluster = name == "l-bfgs-b" and like.numel() * 8 > parse_bytes(limit)
    if on_cluster:
        if name != "l-bfgs-b":
            raise ValueError(f"options={{'on_cluster': True}} needs method='L-BFGS-B', got {method!r}")
        if tol is not None:
            options = {"ftol": tol, "gtol": tol, **options}
        options = {k: v for k, v in options.items() if k not in ("disp", "iprint", "eps")}
        fun = fun._fn if isinstance(fun, Compiled) else fun  # (x stays on the cluster: nothing to replay)
        return minimize_on_cluster(fun, like, args, *bounds_of(bounds, like, so), options, callback, so)
    start = _start(x0, like)
    problem = _Problem(fun, args, like)
    if name in _HESSP and hess is None and hessp is None:
        hessp = problem.exact_hessp
    res = so.minimize(problem.value_and_grad, start, args=args,
                      method=method, jac=True, hess=hess, hessp=hessp, bounds=_flat_bounds(bounds, like.shape, so),
                      constraints=constraints, tol=tol, options=options,
                      callback=None if callback is None else lambda xk, *_: callback(problem.tensor(xk)))
    res.x = problem.tensor(res.x)
    if isinstance(res.get("jac"), np.ndarray) and res.jac.size == like.numel():
        res.jac = problem.tensor(res.jac)
    return res


def _check_method(method, hess):
    """SciPy's method name, lower-cased, once it is one daskgrad can feed gradients to."""
    name = method.lower() if isinstance(method, str) else None
    if name in _HESS and hess is None:
        raise ValueError(f"method {method!r} needs the full Hessian matrix: pass hess=, or use a method that "
                         f"needs only gradients ('L-BFGS-B', 'BFGS', 'CG') or Hessian-vector products "
                         f"('Newton-CG', 'trust-ncg', 'trust-krylov')")
    if name not in _GRADIENT | _HESSP | _HESS:
        raise ValueError(f"method {method!r} is not one daskgrad.optimize.minimize supports (it computes gradients "
                         f"for SciPy): use one of {sorted(_GRADIENT | _HESSP | _HESS)}, or call "
                         f"scipy.optimize.minimize directly for a gradient-free method")
    return name


class _Problem:
    """``fun(x, *args)`` as SciPy calls it: on flat float64 vectors, with x made a Tensor shaped,
    typed and chunked like x0 (on x0's device) each time."""

    def __init__(self, fun, args, like):
        self.fun, self.args = fun, args
        self.shape, self.dtype, self.chunks, self.meta = like.shape, like.dtype, like.chunks, like._storage.value._meta
        # fun given as daskgrad.compile(fun): each evaluation of the same kind replays the first's graph
        self._compiled = None
        if isinstance(fun, Compiled):
            self.fun = fun._fn
            self._compiled = _value_and_grad.get(fun)
            if self._compiled is None:  # (kept with fun: a second minimize replays the first's graph)
                self._compiled = _value_and_grad[fun] = compile(grad_and_value(_scalar(fun._fn)),
                                                                 fullgraph=fun._fullgraph)

    def tensor(self, flat, requires_grad=False):
        arr = da.from_array(np.asarray(flat).reshape(self.shape).astype(self.dtype, copy=False), chunks=self.chunks)
        if type(self.meta) is not np.ndarray:  # cupy (or other device) chunks: an explicit host-to-device copy
            arr = arr.map_blocks(chunk.like, self.meta, dtype=self.dtype, meta=self.meta)
        return from_array(arr, requires_grad=requires_grad)

    def loss_at(self, flat):
        x = self.tensor(flat, requires_grad=True)
        loss = self.fun(x, *self.args)
        _check_loss(loss)
        return x, loss

    def value_and_grad(self, flat, *_):
        if self._compiled is not None:
            g, value = self._compiled(self.tensor(flat), *self.args)
            _check_loss(value)
            value, g = runtime.values([value, g])
            return float(_host(value).reshape(())), _host(g).astype(np.float64).ravel()
        x, loss = self.loss_at(flat)
        (g,) = grad(loss, x, lazy=True)
        value, g = runtime.values([loss.detach(), g])  # one submission: the forward runs once
        return float(_host(value).reshape(())), _host(g).astype(np.float64).ravel()

    def exact_hessp(self, flat, p, *_):
        x, loss = self.loss_at(flat)
        (g,) = grad(loss, x, create_graph=True, lazy=True)
        if not g.requires_grad:  # fun is linear in x
            return np.zeros_like(p, dtype=np.float64)
        (hp,) = grad(g, x, self.tensor(p), lazy=True, allow_unused=True, materialize_grads=True)
        (hp,) = runtime.values([hp])
        return _host(hp).astype(np.float64).ravel()


_value_and_grad = weakref.WeakKeyDictionary()  # daskgrad.compile(fun) -> its value and gradient, compiled


def _scalar(fun):
    @functools.wraps(fun)  # (daskgrad.compile guards the names fun reads through __wrapped__)
    def scalar(x, *args):
        loss = fun(x, *args)
        _check_loss(loss)
        return loss.reshape(())
    return scalar


def _check_loss(loss):
    if not isinstance(loss, Tensor) or loss.numel() != 1:
        got = f"Tensor of shape {loss.shape}" if isinstance(loss, Tensor) else type(loss).__name__
        raise ValueError(f"fun must return a Tensor with one element, got {got}")


def _tensor_of(x0):
    """x0 as a floating-point Tensor (SciPy would make integers float64 too), lazily."""
    arr = x0.array if isinstance(x0, Tensor) else x0
    if not isinstance(arr, da.Array):
        arr = da.from_array(x0 if hasattr(x0, "__array_function__") else np.asarray(x0), chunks="auto", asarray=False)
    if not np.issubdtype(arr.dtype, np.floating):
        arr = arr.astype(np.float64)
    return from_array(arr)


def _start(x0, like):
    """SciPy's flat float64 vector of x0 (one submission if it is lazy)."""
    if isinstance(x0, (Tensor, da.Array)):
        (host,) = runtime.values([like])
    else:
        host = x0 if hasattr(x0, "__array_function__") else np.asarray(x0)
    return _host(host).astype(np.float64).ravel()


def _host(a):
    """A computed result as a NumPy array: SciPy works in host memory (cupy chunks come back with .get())."""
    return np.asarray(a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else a)


def _flat_bounds(bounds, shape, so):
    if isinstance(bounds, so.Bounds):
        lb, ub = (np.broadcast_to(np.asarray(b, dtype=np.float64), shape).ravel() for b in (bounds.lb, bounds.ub))
        keep = np.broadcast_to(np.asarray(bounds.keep_feasible), shape).ravel()
        return so.Bounds(lb, ub, keep_feasible=keep)
    return bounds
