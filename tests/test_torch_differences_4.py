"""Silent numeric differences from torch a gradient fuzz left (s64), each against torch on the exact inputs, in float32
and float64, on one chunk and on chunks of one and two elements: silu/gelu with an infinite cotangent (torch's
backward kernels' one product: an infinity, not the composition's NaN), xlogy at ``y = inf`` or a zero cotangent,
copysign at an infinite or NaN ``x``, prod's gradient by whether the whole input holds a zero (torch's two formulas),
nanquantile of an all-NaN slice; and torch's errors for quantile's ``q`` outside ``[0, 1]`` and lerp's dtypes."""
import itertools
import warnings

import numpy as np
import pytest

import daskgrad as dg
import daskgrad.nn.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional

inf, nan = float("inf"), float("nan")
DTYPES = ("float32", "float64")
CHUNKS = (-1, 1, 2)


def _leaf(lib, values, dtype, chunks=-1):
    v = np.array(values, dtype=dtype)
    if lib is torch:
        return torch.tensor(v, requires_grad=True)
    return (dg.from_array(v, chunks=chunks) if v.ndim else dg.tensor(v)).requires_grad_()


def _np(t):
    return t.detach().numpy() if isinstance(t, torch.Tensor) else np.asarray(t.detach().numpy())


def _same(ours, theirs):
    """Equal values, NaN where torch's is and the signs of zeros and infinities."""
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(np.signbit(ours) | np.isnan(ours), np.signbit(theirs) | np.isnan(theirs))


def _grads(fn, leaves, cotangent, dtype, chunks):
    """The output and each leaf's gradient of ``fn`` in both libraries, the backward seeded with ``cotangent``."""
    results = []
    for lib in (torch, dg):
        xs = [_leaf(lib, v, dtype, chunks) for v in leaves]
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            out = fn(lib, *xs)
            g = np.broadcast_to(np.array(cotangent, dtype=dtype), tuple(out.shape)).copy()
            out.backward(lib.tensor(g))
            results.append([_np(out)] + [_np(x.grad) for x in xs])
    (out_theirs, *theirs), (out_ours, *ours) = results
    # (the forward to rounding: float32 activations differ from torch's vectorized kernels in the last bits)
    np.testing.assert_allclose(out_ours, out_theirs, rtol=2e-6 if dtype == "float32" else 1e-15,
                               atol=1e-6 if dtype == "float32" else 0)
    for t, o in zip(theirs, ours):
        _same(o, t)


_ACTIVATION_POINTS = [-50.0, -3.0, -1.0, -0.0, 0.0, 1.0, 3.0, 50.0, inf, -inf, nan]
_ACTIVATIONS = {
    "silu": lambda L, x: (TF if L is torch else F).silu(x),
    "gelu": lambda L, x: (TF if L is torch else F).gelu(x),
    "gelu tanh": lambda L, x: (TF if L is torch else F).gelu(x, approximate="tanh"),
}


@pytest.mark.parametrize("chunks", CHUNKS, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cotangent", [inf, -inf, 0.0, nan], ids=str)
@pytest.mark.parametrize("name", ["silu", "gelu tanh"])
def test_silu_and_gelu_with_an_infinite_cotangent(name, cotangent, dtype, chunks):
    """torch's ``silu_backward``/``GeluBackward`` multiply the cotangent once by the derivative: an infinite cotangent
    gives an infinity of the derivative's sign (NaN only where the derivative is 0 or NaN); the composition's
    sum of two products gave inf - inf = NaN."""
    _grads(_ACTIVATIONS[name], [_ACTIVATION_POINTS], cotangent, dtype, chunks)


@pytest.mark.parametrize("chunks", CHUNKS, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cotangent", [inf, -inf], ids=str)
def test_exact_gelu_with_an_infinite_cotangent(cotangent, dtype, chunks):
    """The exact ``gelu``'s derivative ``cdf + x pdf``, once times the cotangent (away from float32's far tail, where
    torch's vectorized float32 ``erf`` differs in the last bits, and at inf, whose float32 gelu is NaN there)."""
    points = [p for p in _ACTIVATION_POINTS if dtype == "float64" or abs(p) != inf]
    _grads(_ACTIVATIONS["gelu"], [points], cotangent, dtype, chunks)


@pytest.mark.parametrize("name", list(_ACTIVATIONS))
def test_silu_and_gelu_first_and_second_derivatives_are_torchs(name):
    """Their own nodes (torch's names), differentiable again: torch's values to rounding."""
    x0 = np.linspace(-6, 6, 25)
    outs = []
    for lib in (torch, dg):
        x = _leaf(lib, x0, "float64", 7)
        y = _ACTIVATIONS[name](lib, x)
        (g,) = lib.autograd.grad(y.sum(), [x], create_graph=True)
        (h,) = lib.autograd.grad((g * g).sum(), [x])
        outs.append((type(y.grad_fn).__name__, _np(y), _np(g), _np(h)))
    assert outs[1][0] == outs[0][0]
    for ours, theirs in zip(outs[1][1:], outs[0][1:]):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-14)


def test_silu_and_gelu_guard_their_input():
    """A write to the input before the backward raises torch's in-place error (the node saved it)."""
    for name, fn in _ACTIVATIONS.items():
        x = dg.tensor([0.5, -1.0], requires_grad=True)
        a = x * 1
        y = fn(dg, a)
        a.add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()


_SPECIAL = [0.0, -0.0, 1.0, -2.0, 3.0, inf, -inf, nan]
_PAIRS = list(zip(*itertools.product(_SPECIAL, _SPECIAL)))


@pytest.mark.parametrize("chunks", CHUNKS, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cotangent", [1.0, 0.0, inf, -1.0], ids=str)
@pytest.mark.parametrize("op", ["xlogy", "copysign"])
def test_xlogy_and_copysign_at_special_points(op, cotangent, dtype, chunks):
    """``xlogy``: torch's ``xlogy(g, y)`` masked to 0 where ``x`` is 0 and ``y <= 0`` (so ``log(inf)`` at ``x = 0``,
    0 for a zero cotangent), ``g x / y`` to ``y``; ``copysign``: ``g * result / x``, 0 where ``x`` is 0 (NaN at an
    infinite or NaN ``x``), zeros to the sign's tensor."""
    _grads(lambda L, x, y: getattr(x, op)(y), [list(_PAIRS[0]), list(_PAIRS[1])], cotangent, dtype, chunks)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("other", [inf, -2.0, 0.0, 2.5])
@pytest.mark.parametrize("op", ["xlogy", "copysign"])
def test_xlogy_and_copysign_of_a_number(op, other, dtype):
    _grads(lambda L, x: getattr(x, op)(other), [_SPECIAL], inf, dtype, 2)
    _grads(lambda L, x: getattr(x, op)(other), [_SPECIAL], 0.0, dtype, -1)


_PROD_INPUTS = {
    "inf beside a zero": [[0.0, inf, 2.0], [1.5, -inf, 3.0]],
    "inf, a zero in another row": [[1.5, inf, 2.0], [0.0, -2.0, 3.0]],
    "nan, a zero in another row": [[1.5, nan, 2.0], [0.0, -2.0, 3.0]],
    "inf, no zero": [[1.5, inf, 2.0], [0.5, -2.0, 3.0]],
    "two zeros and an inf": [[0.0, 0.0, inf], [1.0, 2.0, 3.0]],
    "finite with a zero": [[0.3, 0.7, 1.9], [0.0, -2.0, 3.0]],
}


@pytest.mark.parametrize("chunks", CHUNKS, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [None, 0, 1, (1, True)], ids=str)
@pytest.mark.parametrize("case", list(_PROD_INPUTS))
def test_prod_gradient_chooses_torchs_formula_by_the_whole_input(case, dim, dtype, chunks):
    """torch's ``prod_backward``: ``g * result / x`` where the whole input holds no zero, else the product of the others
    from both ends (exclusive cumulative products), for every slice, even one without a zero."""
    dims = () if dim is None else (dim if isinstance(dim, tuple) else (dim,))
    for cotangent in (1.0, inf, -2.0):
        _grads(lambda L, x: x.prod(*dims), [_PROD_INPUTS[case]], cotangent, dtype, chunks)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("values", [[[inf, 2.0, nan]], [[inf, 0.0, nan]], [[0.0, -inf, 1.0]]], ids=str)
def test_prod_over_a_dim_of_length_one(values, dtype):
    """Over a dim of length one torch's gradient is the cotangent itself where the input holds a zero, else
    ``g * result / x`` (NaN at an infinity or NaN)."""
    for keepdim in (False, True):
        _grads(lambda L, x: x.prod(0, keepdim=keepdim), [values], 1.0, dtype, 1)


@pytest.mark.parametrize("chunks", [-1, 2], ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("interpolation", ["linear", "lower", "higher", "midpoint", "nearest"])
@pytest.mark.parametrize("q", [0.0, 0.5, 1.0, 0.3])
def test_nanquantile_of_an_all_nan_slice(q, interpolation, dtype, chunks):
    """torch's ranks of an all-NaN slice are clamped to 0: the quantile reads its first sorted value (a NaN), whose
    gradient is the cotangent."""
    x0 = [[nan, nan, nan], [1.0, nan, 3.0], [2.0, 5.0, 4.0]]
    for dim in (1, -1):
        _grads(lambda L, x: x.nanquantile(q, dim=dim, interpolation=interpolation), [x0], [1.0, 2.0, 3.0], dtype,
               chunks)


def _error(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 (the error is the answer compared)
        return type(e).__name__, str(e)
    return None


@pytest.mark.parametrize("method", ["quantile", "nanquantile"])
@pytest.mark.parametrize("q", [1.5, -0.1, 2, nan, 1e10, [0.5, 2.0], [nan], [-1.0]], ids=str)
@pytest.mark.parametrize("x", [[1.0, 2.0, 3.0], [], [[1.0, 2.0], [3.0, 4.0]]], ids=str)
def test_quantile_q_outside_0_1_raises_torchs_error(x, q, method):
    for kwargs in ({}, {"dim": 0}, {"dim": 5}):
        answers = [_error(lambda L=L: getattr(L.tensor(np.array(x, np.float32)), method)(
            L.tensor(np.array(q, np.float32)) if isinstance(q, list) else q, **kwargs)) for L in (torch, dg)]
        assert answers[1] == answers[0]
        assert answers[0] is not None


def test_module_level_quantile_keeps_numpys_error():
    with pytest.raises(ValueError, match=r"Quantiles must be in the range \[0, 1\]"):
        dg.quantile(dg.tensor([1.0, 2.0]), 1.5)


_LERP_DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64", "complex64",
                "complex128"]


@pytest.mark.parametrize("self_dtype", _LERP_DTYPES)
def test_lerp_dtype_errors_name_torchs_types(self_dtype):
    """torch's lerp names the C++ types (``long int``, ``bool``, ``c10::Half``) in its dtype errors."""
    for end_dtype in _LERP_DTYPES:
        for weight in (0.5, 2, self_dtype, "float64"):
            def run(L):
                a, b = L.zeros(2, dtype=getattr(L, self_dtype)), L.zeros(2, dtype=getattr(L, end_dtype))
                return a.lerp(b, L.zeros(2, dtype=getattr(L, weight)) if isinstance(weight, str) else weight)
            assert _error(lambda: run(dg)) == _error(lambda: run(torch)), (end_dtype, weight)
