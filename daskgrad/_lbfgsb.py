"""Bound-constrained L-BFGS with x on the cluster: ``minimize(..., method="L-BFGS-B")`` for an x0 too
big for the client (or ``options={"on_cluster": True}``).

The method is projected L-BFGS with an active set ("L-BFGS-B lite"), not L-BFGS-B's generalized
Cauchy point and subspace minimisation: a variable at a bound whose gradient pushes it outward is
held fixed; on the others the direction is the L-BFGS two-loop product with the gradient; the step
is a projected backtracking line search (Armijo's condition along the projected path
``clip(x + t d, lb, ub)``, quadratic interpolation between trials).  Convergence tests are SciPy's:
max-norm of the projected gradient ``<= gtol``, relative reduction of f ``<= ftol``.

A value no step can be measured against stops the run as SciPy's does, with ``"ABNORMAL: "``,
``status=2``, ``success=False`` (``fun`` the NaN or infinite objective met; ``x`` and ``jac`` the last
point accepted): a NaN objective or gradient (at x0 or at a trial point), an infinite gradient, an
objective of +inf at x0 or of -inf anywhere.  A trial point whose objective is +inf is too high:
the line search steps back from it.

x, the gradient, the direction and the ``maxcor`` pairs of history vectors are tensors chunked
like x0 and stored on the cluster (written in place, so each submission stores them with no
lineage); the client gets back only scalars (the loss, dot products, max-norms), a few per
function evaluation, so its memory does not depend on the number of unknowns.
"""
from __future__ import annotations

import warnings

import dask.array as da
import numpy as np

from . import chunk, runtime
from ._modes import no_grad
from ._tensor import Tensor, from_array
from .engine import grad
from .ops import clip, where, zeros_like

_MESSAGES = {"pgtol": "CONVERGENCE: NORM OF PROJECTED GRADIENT <= PGTOL",
             "ftol": "CONVERGENCE: RELATIVE REDUCTION OF F <= FACTR*EPSMCH",
             "maxiter": "STOP: TOTAL NO. OF ITERATIONS REACHED LIMIT",
             "maxfun": "STOP: TOTAL NO. OF F,G EVALUATIONS EXCEEDS LIMIT",
             "abnormal": "ABNORMAL: "}  # SciPy 1.15+'s words for a failed line search (and NaN)
_DEFAULTS = dict(maxcor=10, ftol=2.2204460492503131e-09, gtol=1e-5, maxiter=15000, maxfun=15000, maxls=20)


def _floats(*scalars):
    """Lazy 0-d tensors as Python floats, one submission (which also stores what was written in place)."""
    out = runtime.values(list(scalars))
    return [float(v.get() if hasattr(v, "get") else v) for v in out]


def _bound(b, like, default):
    """One side of the bounds: a Python float, or a tensor chunked like x (None and NaN: unbounded)."""
    if b is None:
        return default
    if isinstance(b, Tensor):
        b = b.array
    if not isinstance(b, da.Array):
        b = np.asarray(b, dtype=np.float64)
        if b.size == 1:  # SciPy's Bounds(0, 1) holds arrays of shape (1,)
            return default if np.isnan(b).all() else float(b.reshape(()))
        b = da.from_array(np.where(np.isnan(b), default, b), chunks=-1)
    b = da.broadcast_to(b, like.shape).rechunk(like.chunks).astype(like.dtype)
    meta = like._storage.value._meta
    if type(b._meta) is not type(meta):  # host bounds for device chunks: an explicit host-to-device copy
        b = b.map_blocks(chunk.like, meta, dtype=like.dtype, meta=meta)
    return from_array(b)


def bounds_of(bounds, like, so):
    """``(lb, ub)`` from SciPy's forms: ``Bounds`` (scalars or arrays: NumPy, dask, Tensors) or a sequence
    of ``(min, max)`` pairs, one per element of x0."""
    if bounds is None:
        return -np.inf, np.inf
    if isinstance(bounds, so.Bounds):
        lb, ub = bounds.lb, bounds.ub
    else:
        pairs = np.array(bounds, dtype=np.float64).reshape(-1, 2)
        lb, ub = pairs[:, 0].reshape(like.shape), pairs[:, 1].reshape(like.shape)
    return _bound(lb, like, -np.inf), _bound(ub, like, np.inf)


def _dot(a, b):
    return (a * b).sum()


class _Search:
    """The state of one run: x, f, g on the cluster; history pairs; counters."""

    def __init__(self, fun, args, x0, lb, ub, opts):
        self.fun, self.args, self.lb, self.ub, self.opts = fun, args, lb, ub, opts
        self.s, self.y, self.rho = [], [], []
        self.nfev = 0
        self.met = None  # the objective value of a point that stopped the run (a NaN, say)
        with no_grad():
            self.x = self._stored(clip(x0, lb, ub))
        self.f, self.g, self.pg_max, self.g_max = self._evaluate(self.x, lambda g: g.abs().max())

    def _stored(self, t):
        """``t`` written in place into a tensor made like x0: the next submission stores it."""
        return zeros_like(t).copy_(t)

    def _projected_gradient(self, x, g):
        return x - clip(x - g, self.lb, self.ub)

    def _evaluate(self, x, *more):
        """f and the stored gradient g at ``x``, the max-norm of the projected gradient there, and the
        lazy scalars each of ``more`` makes of g: all in one submission."""
        leaf = Tensor._make(x.array, requires_grad=True)
        loss = self.fun(leaf, *self.args)
        if not isinstance(loss, Tensor) or loss.numel() != 1:
            got = f"Tensor of shape {loss.shape}" if isinstance(loss, Tensor) else type(loss).__name__
            raise ValueError(f"fun must return a Tensor with one element, got {got}")
        (g,) = grad(loss, leaf, lazy=True)
        with no_grad():
            g = self._stored(g.detach())
            extra = [m(g) for m in more]
            f, pg_max, *values = _floats(loss.detach().reshape(()), self._projected_gradient(x, g).abs().max(),
                                         *extra)
        self.nfev += 1
        return f, g, pg_max, *values

    def direction(self):
        """The L-BFGS direction on the free variables, stored; its slope ``g . d`` (steepest descent
        on the free variables if the history gives no descent)."""
        x, g = self.x, self.g
        free = where(((x <= self.lb) & (g > 0)) | ((x >= self.ub) & (g < 0)), 0.0, 1.0)
        q = -g * free
        al = [None] * len(self.s)
        for i in range(len(self.s) - 1, -1, -1):
            al[i] = _dot(self.s[i], q) * self.rho[i]
            q = q - al[i] * self.y[i] * free
        if self.s:
            q = q * self.gamma
        for i in range(len(self.s)):
            be = _dot(self.y[i], q) * self.rho[i]
            q = q + (al[i] - be) * self.s[i] * free
        d = self._stored(q * free)
        gtd, d_max = _floats(_dot(g, d), d.abs().max())
        if gtd >= 0:  # the free-variable restriction broke descent: forget the history
            self.s, self.y, self.rho = [], [], []
            d = self._stored(-g * free)
            gtd, d_max = _floats(_dot(g, d), d.abs().max())
        return d, gtd, d_max

    def line_search(self, d, gtd, t):
        """Projected backtracking: the first ``x(t) = clip(x + t d)`` with Armijo's decrease
        ``f(x(t)) <= f + c1 g . (x(t) - x)``; on failure the quadratic minimiser along d, kept in
        ``[t/10, t/2]``.  Returns the new x, f, g, ``|pg|``, ``s . y``, ``y . y``, or None."""
        for _ in range(self.opts["maxls"]):
            with no_grad():
                x_new = self._stored(clip(self.x + t * d, self.lb, self.ub))
                step = x_new - self.x
            f, g, pg_max, decrease, sy, yy = self._evaluate(
                x_new, lambda g_: _dot(self.g, step), lambda g_: _dot(step, g_ - self.g),
                lambda g_: _dot(g_ - self.g, g_ - self.g))
            if np.isnan(f) or f == -np.inf or not (np.isfinite(pg_max) and np.isfinite(yy)):  # nothing to go by
                self.met = None if np.isfinite(f) else f  # (a finite f of a NaN gradient: x's own is reported)
                return None
            if f <= self.f + 1e-4 * decrease:
                return x_new, f, g, pg_max, sy, yy, step
            if self.nfev >= self.opts["maxfun"]:
                return None
            curvature = f - self.f - t * gtd
            t_q = -gtd * t * t / (2 * curvature) if curvature > 0 else t / 2
            t = min(max(t_q, t / 10), t / 2)
        return None

    def accept(self, found):
        x, f, g, pg_max, sy, yy, step = found
        if sy > np.finfo(np.float64).eps * yy:
            with no_grad():
                self.s.append(self._stored(step))
                self.y.append(self._stored(g - self.g))
            self.rho.append(1.0 / sy)
            self.gamma = sy / yy
            if len(self.s) > self.opts["maxcor"]:
                self.s.pop(0), self.y.pop(0), self.rho.pop(0)
        self.x, self.f, self.g, self.pg_max = x, f, g, pg_max


def minimize_on_cluster(fun, x0, args, lb, ub, options, callback, so):
    """Projected L-BFGS (module docstring) from the Tensor ``x0``; SciPy's ``OptimizeResult`` with
    ``x`` and ``jac`` as tensors chunked like x0, on the cluster."""
    unknown = sorted(set(options) - set(_DEFAULTS))
    if unknown:  # SciPy's words and warning class for an option its solver does not take
        warnings.warn(f"Unknown solver options: {', '.join(unknown)}", so.OptimizeWarning, stacklevel=3)
    opts = {**_DEFAULTS, **{k: v for k, v in options.items() if k in _DEFAULTS}}
    run = _Search(fun, args, x0, lb, ub, opts)
    nit, why = 0, "pgtol"
    if not (np.isfinite(run.f) and np.isfinite(run.g_max)):  # (`while pg_max > gtol` would end on a NaN)
        why, run.met = "abnormal", run.f
    while why == "pgtol" and run.pg_max > opts["gtol"]:
        if nit >= opts["maxiter"]:
            why = "maxiter"
            break
        if run.nfev >= opts["maxfun"]:
            why = "maxfun"
            break
        d, gtd, d_max = run.direction()
        # a first step (no history to scale d) moves no variable by more than 1
        t = 1.0 if run.s or d_max <= 1.0 else 1.0 / d_max
        f_old = run.f
        found = run.line_search(d, gtd, t)
        if found is None:
            why = "abnormal"
            break
        run.accept(found)
        nit += 1
        if callback is not None:
            callback(run.x)
        if (f_old - run.f) / max(abs(f_old), abs(run.f), 1.0) <= opts["ftol"]:
            why = "ftol"
            break
    status = {"pgtol": 0, "ftol": 0, "maxiter": 1, "maxfun": 1, "abnormal": 2}[why]
    fun = run.f if run.met is None else run.met  # SciPy reports the value that stopped it
    return so.OptimizeResult(x=run.x, fun=fun, jac=run.g, nit=nit, nfev=run.nfev, njev=run.nfev, status=status,
                             success=status == 0, message=_MESSAGES[why])
