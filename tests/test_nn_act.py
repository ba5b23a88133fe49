"""torch.nn's activations (selu, softplus, mish, hardswish, hardsigmoid, logsigmoid, softsign, tanhshrink,
softshrink, hardshrink, glu, softmin, prelu, sigmoid, tanh and their modules) against torch (installed): float64
values and gradients equal to torch's at rtol 1e-12 on random inputs and on the points where torch's kernels
choose a side (the bounds, the threshold, 0, -0, huge values, infinities, NaN), in one chunk, even chunks and
uneven chunks; ``inplace=True`` writes the input as torch's; module reprs and errors are torch's.

NaN's gradient is torch's scalar kernels' (its ternaries, as daskgrad's elu and hardtanh): torch's vectorized
loops (blocks of 8 or 16 float64 elements, by the CPU) give selu, hardswish and the shrinks another one, so NaN
is checked in arrays of fewer than 8 elements, which torch computes with the scalar kernels on any CPU."""
import ast
import warnings

import numpy as np
import pytest

import daskgrad as dg
from daskgrad import nn
from daskgrad.nn import functional as F

torch = pytest.importorskip("torch")
# (NumPy's warning where torch's answer is NaN: inf * 0, inf / inf at the infinities)
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")

_SPECIAL = np.array([-1000.0, -20.5, -3.0, -2.0, -1.0, -0.5, -1e-300, 0.0, -0.0, 1e-300, 0.5, 1.0, 2.0, 3.0, 6.0,
                     10.0, 20.0, 20.5, 1000.0, -np.inf, np.inf])
X = np.concatenate([_SPECIAL, np.random.default_rng(0).standard_normal(19) * 4])  # 40 points
NON_FINITE = np.array([np.nan, -np.inf, np.inf, 0.0, -3.0, 3.0, 0.5])  # (fewer than 8: torch's scalar kernels)
CHUNKINGS = {"one": -1, "even": 10, "uneven": ((7, 13, 20),)}

ELEMENTWISE = [("selu", {}), ("softplus", {}), ("softplus", {"beta": 2.0, "threshold": 1.0}),
               ("softplus", {"beta": 0.5, "threshold": 10.0}), ("mish", {}), ("hardswish", {}), ("hardsigmoid", {}),
               ("logsigmoid", {}), ("softsign", {}), ("tanhshrink", {}), ("softshrink", {}),
               ("softshrink", {"lambd": 2.0}), ("hardshrink", {}), ("hardshrink", {"lambd": 3.0}), ("sigmoid", {}),
               ("tanh", {})]


def _same(ours, theirs, atol=0.0):
    np.testing.assert_allclose(ours, theirs.detach().numpy(), rtol=1e-12, atol=atol, equal_nan=True)


def _both(x, chunks):
    return dg.from_array(x, chunks=chunks, requires_grad=True), torch.tensor(x, requires_grad=True)


def _values_and_gradients(yd, yt, inputs, atol=0.0):
    """Both backward with the same random cotangent; our output and gradients in one submission, compared."""
    g = np.random.default_rng(1).standard_normal(tuple(yt.shape))
    yd.backward(dg.from_array(g, chunks=yd.chunks))
    yt.backward(torch.tensor(g))
    got = dg.compute(yd.detach(), *[d.grad for d, _ in inputs])
    for ours, theirs in zip(got, [yt] + [t.grad for _, t in inputs]):
        _same(ours, theirs, atol)


@pytest.mark.parametrize("chunking", list(CHUNKINGS))
@pytest.mark.parametrize("name,kwargs", ELEMENTWISE, ids=[f"{n}-{k}" if k else n for n, k in ELEMENTWISE])
def test_activation_values_and_gradients_are_torch_s_at_boundaries_and_random_points(name, kwargs, chunking):
    """tanh: ``1 - tanh(x)**2`` cancels for large ``|x|``, where torch's tanh and NumPy's may differ by an ulp (and
    torch's gradient is one fused multiply-add): equal to 1e-15 absolutely there, not relatively."""
    xd, xt = _both(X, CHUNKINGS[chunking])
    yd, yt = getattr(F, name)(xd, **kwargs), getattr(torch.nn.functional, name)(xt, **kwargs)
    _values_and_gradients(yd, yt, [(xd, xt)], atol=1e-15 if name == "tanh" else 0.0)
    assert getattr(F, name)(dg.from_array(X.astype("float32"), chunks=10), **kwargs).dtype == np.float32


@pytest.mark.parametrize("name,kwargs", ELEMENTWISE, ids=[f"{n}-{k}" if k else n for n, k in ELEMENTWISE])
def test_activation_values_and_gradients_at_nan_and_infinities_are_torch_s(name, kwargs):
    xd, xt = _both(NON_FINITE, 3)
    yd, yt = getattr(F, name)(xd, **kwargs), getattr(torch.nn.functional, name)(xt, **kwargs)
    _values_and_gradients(yd, yt, [(xd, xt)])


@pytest.mark.parametrize("chunking", list(CHUNKINGS))
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_glu_and_softmin_along_each_axis_are_torch_s(dim, chunking):
    """softmin's gradient ``y * (g - sum(g * y))`` cancels, and its sum adds chunks in another order than torch's:
    equal to 1e-15 absolutely there."""
    a = X.reshape(10, 4)
    chunks = {"one": -1, "even": (5, 2), "uneven": ((3, 7), (1, 3))}[chunking]
    for name in ("glu", "softmin"):
        a = np.nan_to_num(a, nan=0.5, posinf=7.0, neginf=-7.0) if name == "softmin" else a
        xd, xt = _both(a, chunks)
        _values_and_gradients(getattr(F, name)(xd, dim), getattr(torch.nn.functional, name)(xt, dim), [(xd, xt)],
                              atol=1e-15 if name == "softmin" else 0.0)


def test_softmin_implicit_dim_and_dtype_are_torch_s():
    a = np.random.default_rng(2).standard_normal((5, 3))
    xd, xt = _both(a, 2)
    with pytest.warns(UserWarning, match="Implicit dimension choice for softmin has been deprecated"):
        ours = F.softmin(xd)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _same(ours.detach().numpy(), torch.nn.functional.softmin(xt))
    assert F.softmin(xd, 0, dtype="float32").dtype == np.float32


@pytest.mark.parametrize("chunking", list(CHUNKINGS))
@pytest.mark.parametrize("channels", [1, 4])
def test_prelu_input_and_weight_gradients_are_torch_s(channels, chunking):
    a = X.reshape(5, 4, 2)
    chunks = {"one": -1, "even": (1, 2, 2), "uneven": ((2, 3), (1, 3), (2,))}[chunking]
    xd, xt = _both(a, chunks)
    w = np.linspace(-0.5, 1.5, channels)
    wd, wt = _both(w, -1)
    _values_and_gradients(F.prelu(xd, wd), torch.nn.functional.prelu(xt, wt), [(xd, xt), (wd, wt)])


@pytest.mark.parametrize("name", ["selu", "mish", "hardswish", "hardsigmoid"])
def test_inplace_activations_write_their_input_with_torch_s_rules(name):
    x = np.linspace(-4.0, 4.0, 10)
    wd, wt = _both(x, 4)
    hd, ht = wd * 2.0, wt * 2.0
    outd = getattr(F, name)(hd, inplace=True)
    outt = getattr(torch.nn.functional, name)(ht, inplace=True)
    assert outd is hd and outt is ht
    _values_and_gradients(outd, outt, [(wd, wt)])
    _same(hd.detach().numpy(), ht)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
        getattr(F, name)(wd, inplace=True)


MODULES = ["SELU()", "SELU(inplace=True)", "Softplus()", "Softplus(2, 1.5)", "Mish()", "Mish(True)", "Hardswish()",
           "Hardswish(inplace=True)", "Hardsigmoid()", "Hardsigmoid(True)", "LogSigmoid()", "Softsign()",
           "Tanhshrink()", "Softshrink()", "Softshrink(1)", "Hardshrink()", "Hardshrink(lambd=1)", "GLU()", "GLU(0)",
           "Softmin(1)", "Softmin(dim=0)", "PReLU()", "PReLU(4, init=0.1)", "Sigmoid()", "Tanh()"]


def _make(module, call):
    """``module.Name(args...)`` from the text ``"Name(args...)"``, the arguments as Python literals."""
    name, args = call.split("(", 1)
    positional, keywords = [], {}
    for part in filter(None, args.rstrip(")").split(", ")):
        if "=" in part:
            key, value = part.split("=")
            keywords[key] = ast.literal_eval(value)
        else:
            positional.append(ast.literal_eval(part))
    return getattr(module, name)(*positional, **keywords)


@pytest.mark.parametrize("call", MODULES)
def test_modules_are_torch_s_in_repr_values_and_gradients(call):
    ours, theirs = _make(nn, call), _make(torch.nn, call)
    assert repr(ours) == repr(theirs)
    if isinstance(theirs, torch.nn.PReLU):
        assert ours.weight.dtype == np.float32 and ours.weight.tolist() == theirs.weight.tolist()
    ours, theirs = ours.double(), theirs.double()
    a = np.random.default_rng(3).standard_normal((6, 4))
    xd, xt = _both(a, (4, 4))
    inputs = [(xd, xt)]
    if isinstance(theirs, torch.nn.PReLU):  # (a learned weight: torch's gradient too)
        assert ours.weight.dtype == np.float64 and ours.weight.shape == tuple(theirs.weight.shape)
        assert [n for n, _ in ours.named_parameters()] == ["weight"]
        inputs.append((ours.weight, theirs.weight))
    _values_and_gradients(ours(xd * 1.0), theirs(xt * 1.0), inputs,
                          atol=1e-15 if type(theirs).__name__ in ("Tanh", "Softmin") else 0.0)


def _same_error(ours, theirs):
    with pytest.raises(Exception) as expected:
        theirs()
    with pytest.raises(Exception) as got:
        ours()
    assert type(got.value) is type(expected.value) and str(got.value) == str(expected.value), (got.value,
                                                                                             expected.value)


def test_bad_arguments_and_dtypes_raise_torch_s_errors():
    xd, xt = dg.ones((3, 5), dtype="float64"), torch.ones((3, 5), dtype=torch.float64)
    _same_error(lambda: F.glu(xd), lambda: torch.nn.functional.glu(xt))
    _same_error(lambda: F.glu(xd, 0), lambda: torch.nn.functional.glu(xt, 0))
    _same_error(lambda: F.glu(xd, 2), lambda: torch.nn.functional.glu(xt, 2))
    _same_error(lambda: F.glu(dg.tensor(1.0)), lambda: torch.nn.functional.glu(torch.tensor(1.0)))
    for lambd in (-1.0, -1e-40, float("nan")):
        _same_error(lambda: F.softshrink(xd, lambd), lambda: torch.nn.functional.softshrink(xt, lambd))
    _same_error(lambda: F.softshrink(xd.float(), 1e39), lambda: torch.nn.functional.softshrink(xt.float(), 1e39))
    for w in (np.ones(2), np.ones((1, 1)), np.ones(5, dtype="float32")):
        _same_error(lambda: F.prelu(xd, dg.tensor(w)), lambda: torch.nn.functional.prelu(xt, torch.tensor(w)))
    _same_error(lambda: F.prelu(dg.tensor(1.0), dg.ones(2)), lambda: torch.nn.functional.prelu(torch.tensor(1.0),
                                                                                              torch.ones(2)))
    for values in (np.array([1, -2, 3]), np.array([True, False])):
        for name in ("selu", "softplus", "mish", "hardswish", "hardsigmoid", "logsigmoid", "softshrink", "hardshrink"):
            _same_error(lambda: getattr(F, name)(dg.tensor(values)),
                        lambda: getattr(torch.nn.functional, name)(torch.tensor(values)))
