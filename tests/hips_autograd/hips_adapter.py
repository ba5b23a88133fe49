"""HIPS autograd's own test suite, run on daskgrad with HIPS autograd as the oracle.

The vendored files ``test_hips_*.py`` beside this one are autograd's ``tests/test_numpy.py``,
``test_systematic.py``, ``test_scalar_ops.py``, ``test_linalg.py`` and ``test_binary_ops.py``
(github.com/HIPS/autograd at bff107b, MIT licence, Copyright (c) 2014 by the Authors), with their
imports pointed here.  Their bodies are upstream's; where one was changed, a comment there says why.

How a check runs.  Upstream writes ``np.sum(x)`` with ``np`` = ``autograd.numpy``.  Here ``np`` is
a late-bound namespace: each name is looked up when it is *called*, in the module under test, so
``check_grads(fun)(x)`` runs ``fun`` twice: once with ``np`` = ``autograd.numpy`` (the oracle:
autograd's value, its VJP for a random cotangent, and the VJP of that VJP), and once with ``np`` =
``daskgrad`` on inputs chunked in two along every axis (a Python float becomes a 0-d tensor,
a list of them a list of 0-d tensors, as autograd treats them: differentiable containers).
daskgrad must give autograd's values (shape, real or complex, numbers), autograd's VJP of
``fun``, and, where upstream checks second order, autograd's VJP of that VJP with respect to
both the input and the cotangent (computed with ``create_graph=True``).  Upstream's numerical
check is replaced by the oracle; its forward mode has no daskgrad counterpart and is not run.

Complex numbers: daskgrad's cotangents are torch's (conjugate Wirtinger), autograd's are the
conjugates, so daskgrad's VJP of ``v`` is ``conj(autograd_vjp(conj(v)))``.

``np.random``, ``np.dtype`` and NumPy's scalar types and constants (``np.float64``, ``np.inf``)
are NumPy's own in both runs: they make inputs and name dtypes, they are not functions under test.
"""
from __future__ import annotations

import builtins
import contextlib
import itertools

import numpy as onp
import numpy.random as npr
import pytest

import daskgrad as dg

autograd = pytest.importorskip("autograd")
anp = pytest.importorskip("autograd.numpy")
from autograd.builtins import tuple as ag_tuple  # noqa: E402
from autograd.core import vspace  # noqa: E402

_MODULE = [anp]  # what ``np`` means now: autograd.numpy (the oracle) or daskgrad
_NUMPYS_OWN = {"random", "dtype", "newaxis"}


@contextlib.contextmanager
def _numpy_is(module):
    _MODULE.append(module)
    try:
        yield
    finally:
        _MODULE.pop()


class _Late:
    """``np.<path>`` of the module under test, looked up when called or indexed (``np.r_[...]``)."""

    def __init__(self, path):
        self._path = path

    def _now(self):
        obj = _MODULE[-1]
        for part in self._path:
            obj = getattr(obj, part)
        return obj

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Late(self._path + (name,))

    def __call__(self, *args, **kwargs):
        return self._now()(*args, **kwargs)

    def __getitem__(self, key):
        return self._now()[key]

    def __repr__(self):
        return "np." + ".".join(self._path)

    @property
    def __name__(self):
        return self._path[-1]


class _Numpy:
    def __getattr__(self, name):
        own = getattr(onp, name, None)
        if name in _NUMPYS_OWN or isinstance(own, (int, float)) or (
                isinstance(own, type) and issubclass(own, onp.generic)):
            return own
        return _Late((name,))


np = _Numpy()


def container_tuple(items):
    """Upstream's ``from autograd import tuple``: autograd's differentiable tuple in the oracle's run, a
    plain tuple in daskgrad's (a tuple of tensors is already differentiable)."""
    return ag_tuple(items) if _MODULE[-1] is anp else builtins.tuple(items)


def int64(x):
    """Upstream's ``np.int64(x)``, a cast by NumPy's scalar type (which unboxes, in autograd's run);
    daskgrad's dtypes are torch's, not callable, so in its run the cast is ``astype``."""
    return anp.int64(x) if _MODULE[-1] is anp else x.astype(onp.int64)


@pytest.fixture(autouse=True)
def random_seed():
    """Upstream's conftest.py: every test starts from seed 42 (imported by each test module)."""
    onp.random.seed(42)


# ------------------------------------------------------------------ inputs and outputs
def _halves(shape):
    return tuple(builtins.max(1, (n + 1) // 2) for n in shape)


def _to_daskgrad(value, requires_grad):
    """An input as a daskgrad user would pass it: arrays chunked in two along every axis; a
    differentiated float a 0-d float64 tensor; lists and tuples element by element."""
    if isinstance(value, (list, tuple)):
        return type(value)(_to_daskgrad(v, requires_grad) for v in value)
    if isinstance(value, onp.ndarray) and value.dtype != object:
        t = dg.from_array(value, chunks=_halves(value.shape) if value.ndim else ())
        return t.requires_grad_(True) if requires_grad and value.dtype.kind in "fc" else t
    if requires_grad and isinstance(value, (float, complex, onp.floating, onp.complexfloating)):
        return dg.tensor(onp.asarray(value, dtype=complex if onp.iscomplexobj(value) else onp.float64),
                         requires_grad=True)
    return value


def _leaves(tree):
    """The arrays of an output or gradient (tensors, arrays, numbers) in order."""
    if isinstance(tree, (list, builtins.tuple)) or type(tree).__name__ in ("SequenceBox", "SequenceVSpace"):
        return [leaf for item in tree for leaf in _leaves(item)]
    return [tree]


def _np(x):
    return x.detach() if isinstance(x, dg.Tensor) else x


def _assert_same(actual, expected, what, rtol):
    expected = onp.asarray(expected)
    actual = onp.asarray(actual)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape}, autograd's {expected.shape}"
    assert onp.iscomplexobj(actual) == onp.iscomplexobj(expected), \
        f"{what}: dtype {actual.dtype}, autograd's {expected.dtype}"
    onp.testing.assert_allclose(actual, expected, rtol=rtol, atol=1e-9, err_msg=what)


# ------------------------------------------------------------------ the check
def _split(args, argnums):
    return [args[i] for i in argnums]


def _join(args, argnums, diff):
    full = list(args)
    for i, d in zip(argnums, diff):
        full[i] = d
    return full


def _oracle(fun, args, kwargs, argnums, order):
    """autograd's value, cotangent, VJP and (order 2) second cotangent and VJP of the VJP."""
    def f(*diff):
        return fun(*_join(args, argnums, diff), **kwargs)

    with _numpy_is(anp):
        vjp, y = autograd.make_vjp(f, tuple(range(len(argnums))))(*_split(args, argnums))
        v = vspace(y).randn()
        conj = onp.conj  # daskgrad's cotangents are the conjugates of autograd's (see the top)
        vjp_v = [conj(g) for g in _leaves(vjp(_tree_conj(v)))]
        second = None
        if order > 1 and _second_order_applies(args, argnums, y):
            n = len(argnums)

            def vjp_of(*diff_and_cot):
                grads = autograd.make_vjp(f, tuple(range(n)))(*diff_and_cot[:n])[0](anp.conj(diff_and_cot[n]))
                return ag_tuple(anp.conj(g) for g in grads)

            vjp2, gx = autograd.make_vjp(vjp_of, tuple(range(n + 1)))(*_split(args, argnums), v)
            w = vspace(gx).randn()
            second = (w, [conj(g) for g in _leaves(vjp2(_tree_conj(w)))])
    return y, v, vjp_v, second


def _tree_conj(tree):
    if isinstance(tree, (list, builtins.tuple)):
        return type(tree)(_tree_conj(t) for t in tree)
    return onp.conj(tree)


def _second_order_applies(args, argnums, y):
    """Second order is checked where the differentiated inputs and the output are arrays or
    numbers, not containers (autograd's VJP of a VJP is then one array function)."""
    return all(not isinstance(args[i], (list, builtins.tuple)) for i in argnums) and \
        not isinstance(y, (list, builtins.tuple)) and type(y).__name__ != "SequenceBox"


def _tensor(value):
    return dg.from_array(onp.asarray(value), chunks=_halves(onp.shape(value))) if onp.ndim(value) else dg.tensor(value)


class _Case:
    """One call of ``fun`` checked against the oracle: autograd's answers, and daskgrad's forward with
    the tensors its gradients are taken with (:func:`_run` takes daskgrad's gradients and compares)."""

    def __init__(self, fun, argnums, order, args, kwargs, rtol):
        self.what = f"{getattr(fun, '__name__', fun)} at {args!r:.200} {kwargs}"
        self.rtol = rtol
        self.y_ag, v, self.vjp_ag, self.second = _oracle(fun, args, kwargs, argnums, order)
        with _numpy_is(dg):
            xs = [_to_daskgrad(a, True) for a in _split(args, argnums)]
            rest = [_to_daskgrad(a, False) for a in args]
            y = fun(*_join(rest, argnums, xs), **kwargs)
        self.x_leaves, self.y_leaves = _leaves(xs), _leaves(y)
        assert len(self.y_leaves) == len(_leaves(self.y_ag)), \
            f"{self.what}: {len(self.y_leaves)} outputs, autograd's {len(_leaves(self.y_ag))}"
        self.inputs = [x for x in self.x_leaves if isinstance(x, dg.Tensor) and x.requires_grad]
        self.live = [(o, _tensor(c)) for o, c in zip(self.y_leaves, _leaves(v))
                     if isinstance(o, dg.Tensor) and o.requires_grad]
        if not self.live:
            self.second = None
        for _, c in self.live:
            c.requires_grad_(self.second is not None)
        self.grads, self.second_grads = {}, []

    def second_order_pairs(self):
        """(first-order gradient, its cotangent) for the second order: the VJP of the VJP, with respect to
        the inputs and the cotangent (one output here, as :func:`_second_order_applies` asks)."""
        pairs = [(self.grads.get(id(x)), _tensor(w)) for x, w in zip(self.x_leaves, _leaves(self.second[0]))]
        return [(g, w) for g, w in pairs if g is not None and g.requires_grad]

    def tensors(self):
        return [t for t in self.y_leaves + [self.grads.get(id(x)) for x in self.x_leaves] + self.second_grads
                if isinstance(t, dg.Tensor)]

    def compare(self, computed):
        def value(t, like):
            if t is None:
                return onp.zeros(onp.shape(like), dtype=onp.result_type(like))
            return computed[id(t)] if isinstance(t, dg.Tensor) else t

        for i, (got, want) in enumerate(zip(self.y_leaves, _leaves(self.y_ag))):
            _assert_same(value(got, want), want, f"{self.what}: output {i}", self.rtol)
        for i, (x, want) in enumerate(zip(self.x_leaves, self.vjp_ag)):
            g = self.grads.get(id(x))
            _assert_same(value(g, want), want, f"{self.what}: VJP, input {i}", self.rtol)
            assert g is None or g.dtype == x.dtype, f"{self.what}: gradient dtype {g.dtype}, input's {x.dtype}"
        if self.second is not None:
            wants = self.second[1]
            assert len(wants) == len(self.x_leaves) + 1
            differentiated = {id(x) for x in self.inputs}
            where = [i for i, x in enumerate(self.x_leaves) if id(x) in differentiated] + [len(self.x_leaves)]
            got = self.second_grads or [None] * len(where)
            for k, i in enumerate(where):  # the inputs, then the cotangent
                _assert_same(value(got[k], wants[i]), wants[i], f"{self.what}: second order, input {i}", self.rtol)


def _run(cases):
    """daskgrad's gradients of every case in one ``grad`` call (the cases' graphs are disjoint, so each
    input gets its own case's VJP), the second order in another, the values in one ``compute``."""
    live = [case for case in cases if case.live]
    if live:
        inputs = [x for case in live for x in case.inputs]
        found = dg.grad([o for case in live for o, _ in case.live], inputs,
                        grad_outputs=[c for case in live for _, c in case.live], allow_unused=True,
                        create_graph=any(case.second is not None for case in live))
        found = dict(zip(map(id, inputs), found))
        for case in live:
            case.grads = {id(x): found[id(x)] for x in case.inputs}
    second = [(case, case.second_order_pairs()) for case in live if case.second is not None]
    second = [(case, pairs) for case, pairs in second if pairs]
    if second:
        wrt = [t for case, _ in second for t in case.inputs + [c for _, c in case.live]]
        found = dg.grad([g for _, pairs in second for g, _ in pairs], wrt,
                        grad_outputs=[w for _, pairs in second for _, w in pairs], allow_unused=True)
        found = dict(zip(map(id, wrt), found))
        for case, _ in second:
            case.second_grads = [found[id(t)] for t in case.inputs + [c for _, c in case.live]]
    tensors = [t for case in cases for t in case.tensors()]
    computed = dict(zip(map(id, tensors), dg.compute(*[_np(t) for t in tensors])))
    for case in cases:
        case.compare(computed)


def check_grads(fun, argnum=0, modes=None, order=2, rtol=1e-6):
    """Upstream's ``autograd.test_util.check_grads``, with autograd as the oracle (see the top)."""
    argnums = (argnum,) if isinstance(argnum, int) else builtins.tuple(argnum)

    def check(*args, **kwargs):
        _run([_Case(fun, argnums, order, args, kwargs, rtol)])
    return check


def combo_check(fun, *args, **kwargs):
    """Upstream's ``combo_check``: every combination of the arguments and keywords given.  The second
    order is checked on the first combination (the rule's derivative is the same code for the others),
    the values and first order on all of them."""
    def _combo_check(*cargs, **ckwargs):
        kwarg_key_vals = [[(k, x) for x in xs] for k, xs in ckwargs.items()]
        combos = [(a, dict(k)) for a in itertools.product(*cargs) for k in itertools.product(*kwarg_key_vals)]
        for n, (_args, _kwargs) in enumerate(combos):
            order = kwargs.get("order", 2) if n == 0 else 1
            check_grads(fun, *args, **dict(kwargs, order=order))(*_args, **_kwargs)
    return _combo_check


def grad(fun, argnum=0):
    """autograd's ``grad`` on daskgrad: the gradient of a scalar ``fun`` with respect to one argument,
    as NumPy.  As autograd's, an output that does not depend on the argument (a comparison) has a
    zero gradient."""
    def gradfun(*args):
        with _numpy_is(dg):
            x = _to_daskgrad(args[argnum], True)
            out = fun(*_join([_to_daskgrad(a, False) for a in args], (argnum,), [x]))
        if not (isinstance(out, dg.Tensor) and out.requires_grad):
            return onp.zeros(onp.shape(args[argnum]))
        (g,) = dg.grad(out, [x])
        return g.numpy()
    return gradfun


def value_and_grad(fun, argnum=0):
    """autograd's ``value_and_grad`` on daskgrad."""
    def both(*args):
        with _numpy_is(dg):
            value = fun(*_join([_to_daskgrad(a, False) for a in args], (argnum,), [_to_daskgrad(args[argnum], True)]))
        return _np(value).numpy() if isinstance(value, dg.Tensor) else value, grad(fun, argnum)(*args)
    return both


# ------------------------------------------------------------------ upstream's tests/numpy_utils.py
def stat_check(fun, test_complex=True, **kwargs):
    # Tests functions that compute statistics, like sum, mean, etc
    x = 3.5
    A = npr.randn()
    B = npr.randn(3)
    C = npr.randn(2, 3)
    D = npr.randn(1, 3)
    check = combo_check(fun, (0,), **kwargs)
    check([x, A])
    check([B, C, D], axis=[None, 0], keepdims=[True, False])
    check([C, D], axis=[None, 0, 1], keepdims=[True, False])
    if test_complex:
        c = npr.randn() + 0.1j * npr.randn()
        E = npr.randn(2, 3) + 0.1j * npr.randn(2, 3)
        check([x, c, A])
        check([B, C, D, E], axis=[None, 0], keepdims=[True, False])


def unary_ufunc_check(fun, lims=None, test_complex=True, **kwargs):
    if lims is None:
        lims = [-2, 2]
    scalar = transform(lims, 0.4)
    vector = transform(lims, npr.rand(2))
    mat = transform(lims, npr.rand(3, 2))
    mat2 = transform(lims, npr.rand(1, 2))
    check = combo_check(fun, (0,), **kwargs)
    check([scalar, vector, mat, mat2])
    if test_complex:
        comp = transform(lims, 0.4) + 0.1j * transform(lims, 0.3)
        matc = transform(lims, npr.rand(3, 2)) + 0.1j * npr.rand(3, 2)
        check([comp, matc])


def binary_ufunc_check(fun, lims_A=None, lims_B=None, test_complex=True, **kwargs):
    if lims_B is None:
        lims_B = [-2, 2]
    if lims_A is None:
        lims_A = [-2, 2]
    T_A = lambda x: transform(lims_A, x)  # noqa: E731
    T_B = lambda x: transform(lims_B, x)  # noqa: E731
    scalar = 0.6
    vector = npr.rand(2)
    mat = npr.rand(3, 2)
    mat2 = npr.rand(1, 2)
    check = combo_check(fun, (0, 1), **kwargs)
    check([T_A(scalar), T_A(vector), T_A(mat), T_A(mat2)], [T_B(scalar), T_B(vector), T_B(mat), T_B(mat2)])
    if test_complex:
        comp = 0.6 + 0.3j
        matc = npr.rand(3, 2) + 0.1j * npr.rand(3, 2)
        check(
            [T_A(scalar), T_A(comp), T_A(vector), T_A(matc), T_A(mat2)],
            [T_B(scalar), T_B(comp), T_B(vector), T_B(matc), T_B(mat2)],
        )


def binary_ufunc_check_no_same_args(fun, lims_A=None, lims_B=None, test_complex=True, **kwargs):
    if lims_B is None:
        lims_B = [-2, 2]
    if lims_A is None:
        lims_A = [-2, 2]
    T_A = lambda x: transform(lims_A, x)  # noqa: E731
    T_B = lambda x: transform(lims_B, x)  # noqa: E731
    scalar1 = 0.6
    scalar2 = 0.7
    vector1 = npr.rand(2)
    vector2 = npr.rand(2)
    mat11 = npr.rand(3, 2)
    mat12 = npr.rand(3, 2)
    mat21 = npr.rand(1, 2)
    mat22 = npr.rand(1, 2)
    check = combo_check(fun, (0, 1), **kwargs)
    check(
        [T_A(scalar1), T_A(vector1), T_A(mat11), T_A(mat21)],
        [T_B(scalar2), T_B(vector2), T_B(mat12), T_B(mat22)],
    )
    if test_complex:
        comp1 = 0.6 + 0.3j
        comp2 = 0.1 + 0.2j
        matc1 = npr.rand(3, 2) + 0.1j * npr.rand(3, 2)
        matc2 = npr.rand(3, 2) + 0.1j * npr.rand(3, 2)
        check(
            [T_A(scalar1), T_A(comp1), T_A(vector1), T_A(matc1), T_A(mat21)],
            [T_B(scalar2), T_B(comp2), T_B(vector2), T_B(matc2), T_B(mat22)],
        )


def transform(lims, x):
    return x * (lims[1] - lims[0]) + lims[0]
