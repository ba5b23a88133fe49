"""HIPS autograd as a second oracle for NumPy's semantics: for every op both have (autograd defines
a VJP for it), daskgrad's float64 gradient of ``sum(f(x) ** 2)`` equals autograd's, on one chunk
and on uneven chunks.  (autograd has no VJP for cumprod, the nan* reductions, quantile/median,
ptp, average, cov, corrcoef, flip, take, delete, modf, frexp, fmod, copysign, float_power, vdot,
cbrt and positive, and its broadcast_to VJP takes no new leading axes; torch and the op table's
gradchecks cover those.)"""
import numpy as np
import pytest

import daskgrad as dg

U, B = "unary", "binary"
M = (6, 4)
TABLE = [  # (name, kind, positional args after the operands, keyword args, low, high)
    *[(n, U, (), {}, -2, 2) for n in (
        "exp", "exp2", "expm1", "sin", "cos", "tanh", "sinh", "cosh", "arctan", "arcsinh", "square", "sign", "floor",
        "ceil", "trunc", "rint", "fix", "abs", "absolute", "fabs", "negative", "deg2rad", "rad2deg", "radians",
        "degrees", "nan_to_num", "real", "conj", "imag", "angle", "around", "round", "ravel", "transpose", "flipud",
        "fliplr", "atleast_3d", "sinc")],
    *[(n, U, (), {}, 0.5, 2) for n in ("log", "log2", "log10", "log1p", "sqrt", "reciprocal")],
    ("arccosh", U, (), {}, 1.2, 3),
    *[(n, U, (), {}, -0.9, 0.9) for n in ("arcsin", "arccos", "arctanh", "tan")],
    *[(n, U, args, kw, -2, 2) for n, args, kw in (
        ("sum", (), {"axis": 0}), ("mean", (), {"axis": 1}), ("prod", (), {"axis": 0}),
        ("var", (), {"axis": 0, "ddof": 1}), ("std", (), {"axis": 1}), ("amax", (), {"axis": 0}),
        ("amin", (), {"axis": 1}), ("max", (), {}), ("min", (), {}), ("cumsum", (), {"axis": 0}),
        ("diff", (), {"n": 2, "axis": 0}), ("roll", (2,), {"axis": 0}), ("rot90", (), {}), ("tile", ((2, 1),), {}),
        ("repeat", (2,), {"axis": 1}), ("tril", (), {"k": -1}), ("triu", (), {}), ("trace", (), {}),
        ("swapaxes", (0, 1), {}), ("moveaxis", (0, 1), {}), ("rollaxis", (1,), {}), ("expand_dims", (1,), {}),
        ("reshape", ((4, 6),), {}), ("clip", (-1.0, 1.0), {}), ("split", (2,), {"axis": 0}),
        ("array_split", (3,), {"axis": 0}))],
    *[(n, B, (), {}, 0.5, 2) for n in (
        "add", "subtract", "multiply", "divide", "true_divide", "power", "maximum", "minimum", "fmax", "fmin",
        "arctan2", "hypot", "logaddexp", "logaddexp2", "mod", "remainder", "kron")],
    *[(n, B, (), {}, -2, 2) for n in ("dot", "inner", "matmul", "tensordot")],
]
SECOND_SHAPE = {"dot": (4, 3), "matmul": (4, 3), "inner": (5, 4)}


def _call(fn, operands, args, kwargs):
    out = fn(*operands, *args, **kwargs)
    return out[0] if isinstance(out, (tuple, list)) or type(out).__name__ == "SequenceBox" else out  # split


def test_the_table_names_daskgrad_ops():
    assert {name for name, *_ in TABLE} <= set(dg.ops.__all__)


@pytest.mark.filterwarnings("ignore:Output seems independent of input")  # autograd, at a zero gradient (sign)
@pytest.mark.parametrize("chunks", [M, (4, 3)], ids=["one", "uneven"])
@pytest.mark.parametrize("name,kind,args,kwargs,low,high", TABLE, ids=[t[0] for t in TABLE])
def test_gradient_matches_autograd(name, kind, args, kwargs, low, high, chunks):
    autograd = pytest.importorskip("autograd")
    anp = pytest.importorskip("autograd.numpy")
    rng = np.random.default_rng(0)
    values = [rng.uniform(low, high, M)] + ([rng.uniform(low, high, SECOND_SHAPE.get(name, M))] if kind == B else [])
    expected = autograd.grad(lambda *xs: anp.sum(_call(getattr(anp, name), xs, args, kwargs) ** 2),
                             tuple(range(len(values))))(*values)
    xs = [dg.from_array(v, chunks=chunks if v.shape == M else 2, requires_grad=True) for v in values]
    (_call(getattr(dg, name), xs, args, kwargs) ** 2).sum().backward()
    for x, g in zip(xs, expected):
        np.testing.assert_allclose(x.grad.numpy(), g, rtol=1e-10, atol=1e-12)
