"""torch.func's vjp, jvp, jacrev, jacfwd, hessian, functional_call and stack_module_state against torch's
(float64, values and layouts; one, even, uneven and size-1 chunks), and their errors in torch's words."""
import re

import numpy as np
import pytest

import daskgrad as dg
import daskgrad.func as df

torch = pytest.importorskip("torch")
tf = torch.func

RNG = np.random.default_rng(7)
A = RNG.standard_normal((3, 5))
X, Y, V = RNG.standard_normal(5), RNG.standard_normal(3), RNG.standard_normal(5)
CHUNKS = [5, 2, (1, 3, 1), 1]


def _np(t):
    return t.detach().numpy()


def _close(ours, theirs):
    if isinstance(theirs, (tuple, list)):
        assert type(ours) is type(theirs) and len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            _close(a, b)
    elif isinstance(theirs, dict):
        assert ours.keys() == theirs.keys()
        for k in theirs:
            _close(ours[k], theirs[k])
    else:
        assert tuple(ours.shape) == tuple(theirs.shape)
        np.testing.assert_allclose(_np(ours), _np(theirs), rtol=1e-12, atol=1e-14)


def _f(m):
    """A function of two arguments with a vector output: ``tanh(A @ x) * y`` and its sum."""
    def f(x, y):
        z = m.tanh(m.tensor(A) @ x) * y
        return z, z.sum()
    return f


def _args(m, chunks):
    if m is torch:
        return torch.tensor(X), torch.tensor(Y)
    return dg.tensor(X, chunks=chunks), dg.tensor(Y)


@pytest.mark.parametrize("chunks", CHUNKS)
def test_jacrev_and_jacfwd_give_torch_s_jacobians_and_layouts(chunks):
    for transform in ("jacrev", "jacfwd"):
        for argnums in (0, 1, (0, 1), (1, 0)):
            ours = getattr(df, transform)(lambda x, y: _f(dg)(x, y)[0], argnums)(*_args(dg, chunks))
            theirs = getattr(tf, transform)(lambda x, y: _f(torch)(x, y)[0], argnums)(*_args(torch, chunks))
            _close(ours, theirs)
        # pytree outputs and arguments, and the aux output
        ours = getattr(df, transform)(lambda p: (_f(dg)(p["x"], p["y"]), p["x"] * 2), has_aux=True)(
            dict(zip("xy", _args(dg, chunks))))
        theirs = getattr(tf, transform)(lambda p: (_f(torch)(p["x"], p["y"]), p["x"] * 2), has_aux=True)(
            dict(zip("xy", _args(torch, chunks))))
        _close(ours, theirs)


@pytest.mark.parametrize("chunks", CHUNKS)
def test_hessian_is_torch_s(chunks):
    for argnums in (0, (0, 1)):
        _close(df.hessian(lambda x, y: _f(dg)(x, y)[1], argnums)(*_args(dg, chunks)),
               tf.hessian(lambda x, y: _f(torch)(x, y)[1], argnums)(*_args(torch, chunks)))


@pytest.mark.parametrize("chunks", CHUNKS)
def test_vjp_gives_the_output_and_a_function_called_again(chunks):
    out, fn = df.vjp(_f(dg), *_args(dg, chunks))
    tout, tfn = tf.vjp(_f(torch), *_args(torch, chunks))
    _close(out, tout)
    for seed in (1.0, -2.5):
        _close(fn((dg.tensor(Y * seed), dg.tensor(seed))), tfn((torch.tensor(Y * seed), torch.tensor(seed))))
    with pytest.raises(RuntimeError, match="Expected pytree structure of cotangents to be the same"):
        tfn(torch.tensor(Y))
    with pytest.raises(RuntimeError, match="Expected pytree structure of cotangents to be the same"):
        fn(dg.tensor(Y))
    out, fn, aux = df.vjp(lambda x: (dg.sin(x), x.sum()), dg.tensor(X, chunks=chunks), has_aux=True)
    tout, tfn, taux = tf.vjp(lambda x: (torch.sin(x), x.sum()), torch.tensor(X), has_aux=True)
    _close((out, aux, fn(dg.tensor(V))), (tout, taux, tfn(torch.tensor(V))))


@pytest.mark.parametrize("chunks", CHUNKS)
def test_jvp_gives_torch_s_directional_derivative(chunks):
    ours = df.jvp(_f(dg), _args(dg, chunks), (dg.tensor(V, chunks=chunks), dg.tensor(Y)))
    theirs = tf.jvp(_f(torch), _args(torch, chunks), (torch.tensor(V), torch.tensor(Y)))
    _close(ours, theirs)
    message = "jvp(f, primals, tangents): Expected primals to be a tuple"
    with pytest.raises(RuntimeError, match=re.escape(message)):
        tf.jvp(torch.sin, torch.tensor(X), (torch.tensor(V),))
    with pytest.raises(RuntimeError, match=re.escape(message)):
        df.jvp(dg.sin, dg.tensor(X), (dg.tensor(V),))


def test_transforms_nest_a_gradient_of_a_jacobian():
    def ours(x):
        return df.jacrev(lambda z: dg.sin(z) * z.sum())(x).sum()

    def theirs(x):
        return tf.jacrev(lambda z: torch.sin(z) * z.sum())(x).sum()
    _close(df.grad(ours)(dg.tensor(X, chunks=2)), tf.grad(theirs)(torch.tensor(X)))


def _linear(m):
    lin = m.nn.Linear(5, 3, dtype=m.float64)
    weights = {"weight": np.cos(np.arange(15.0)).reshape(3, 5), "bias": np.sin(np.arange(3.0))}
    lin.load_state_dict({k: m.tensor(v) for k, v in weights.items()})
    return lin


def test_functional_call_uses_the_given_tensors_for_one_call_and_differentiates_through_them():
    W = RNG.standard_normal((3, 5))
    for m, f in ((torch, tf), (dg, df)):
        lin = _linear(m)
        before = _np(lin.weight).copy()
        out = f.functional_call(lin, {"weight": m.tensor(W)}, (m.tensor(X),))
        np.testing.assert_allclose(_np(out), W @ X + _np(lin.bias), rtol=1e-12)
        np.testing.assert_array_equal(_np(lin.weight), before)  # restored
        assert isinstance(lin.weight, m.nn.Parameter)
        out = f.functional_call(lin, ({"weight": m.tensor(W)}, {"bias": m.tensor(Y)}), m.tensor(X))
        np.testing.assert_allclose(_np(out), W @ X + Y, rtol=1e-12)
    grads = [f.grad(lambda p, x: f.functional_call(lin, p, (x,)).pow(2).sum())(dict(lin.named_parameters()),
                                                                                  m.tensor(X))
             for m, f, lin in ((torch, tf, _linear(torch)), (dg, df, _linear(dg)))]
    _close(grads[1], grads[0])


def test_functional_call_errors_are_torch_s_and_the_module_is_restored_after_one():
    for m, f in ((torch, tf), (dg, df)):
        lin = _linear(m)
        x = m.tensor(X)
        with pytest.raises(ValueError, match=re.escape("['weight'] appeared in multiple dictionaries; behavior of "
                                                       "functional call is ambiguous")):
            f.functional_call(lin, ({"weight": lin.weight}, {"weight": lin.weight}), (x,))
        message = "Error(s) in reparametrizing for Linear:\n\tUnexpected key(s): 'foo'.\n\tMissing key(s): 'bias'."
        with pytest.raises(RuntimeError, match=re.escape(message)):
            f.functional_call(lin, {"weight": lin.weight, "foo": x}, (x,), strict=True)
        with pytest.raises(ValueError, match="Expected parameter_and_buffer_dicts to be a dict"):
            f.functional_call(lin, 3, (x,))
        before = _np(lin.weight).copy()
        with pytest.raises(RuntimeError):
            f.functional_call(lin, {"weight": m.tensor(np.ones((2, 2)))}, (x,))  # the call itself fails
        np.testing.assert_array_equal(_np(lin.weight), before)


def test_functional_call_replaces_a_tied_weight_under_all_its_names():
    for m, f in ((torch, tf), (dg, df)):
        a, b = m.nn.Linear(3, 3, bias=False, dtype=m.float64), m.nn.Linear(3, 3, bias=False, dtype=m.float64)
        b.weight = a.weight
        net = m.nn.Sequential(a, b)
        W = m.tensor(np.eye(3) * 2)
        x = m.tensor(np.arange(3.0))
        np.testing.assert_allclose(_np(f.functional_call(net, {"0.weight": W}, (x,))), np.arange(3.0) * 4)
        np.testing.assert_allclose(_np(f.functional_call(net, {"0.weight": W}, (x,), tie_weights=False)),
                                   _np(b(m.tensor(np.arange(3.0) * 2))))
        with pytest.raises(ValueError, match="which are tied"):
            f.functional_call(net, {"0.weight": W, "1.weight": m.tensor(np.eye(3))}, (x,))


def test_stack_module_state_stacks_each_name_and_the_parameters_require_grad():
    ours = df.stack_module_state([_linear(dg), _linear(dg)])
    theirs = tf.stack_module_state([_linear(torch), _linear(torch)])
    _close(ours, theirs)
    assert all(p.requires_grad and p.is_leaf for p in ours[0].values())


@pytest.mark.parametrize("chunks", CHUNKS)
def test_linearize_gives_the_output_and_a_jvp_called_for_many_tangents(chunks):
    out, fn = df.linearize(lambda x, y: _f(dg)(x, y)[0], *_args(dg, chunks))
    tout, tfn = tf.linearize(lambda x, y: _f(torch)(x, y)[0], *_args(torch, chunks))
    _close(out, tout)
    for scale in (1.0, -3.0):
        _close(fn(dg.tensor(V * scale, chunks=chunks), dg.tensor(Y)), tfn(torch.tensor(V * scale), torch.tensor(Y)))
    message = "tangent:0 with shape torch.Size([4]) in flattened pytree doesn't match the shape torch.Size([5])"
    with pytest.raises(RuntimeError, match=re.escape(message)):
        tfn(torch.ones(4, dtype=torch.float64), torch.tensor(Y))
    with pytest.raises(RuntimeError, match=re.escape(message.replace("torch.Size", "daskgrad.Size"))):
        fn(dg.ones(4, dtype=dg.float64), dg.tensor(Y))
