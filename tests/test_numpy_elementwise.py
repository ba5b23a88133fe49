"""NumPy's elementwise functions beyond the first table: values as NumPy's, gradients and node
names as torch's (the oracle, when installed), torch's aliases as the same ops."""
import numpy as np
import pytest

import daskgrad as dg

UNARY = [  # (numpy name, torch name, low, high)
    ("arcsin", "asin", -0.9, 0.9), ("arccos", "acos", -0.9, 0.9), ("arctan", "atan", -3, 3),
    ("arcsinh", "asinh", -3, 3), ("arccosh", "acosh", 1.1, 3), ("arctanh", "atanh", -0.9, 0.9),
    ("log2", "log2", 0.2, 3), ("log10", "log10", 0.2, 3), ("exp2", "exp2", -2, 2),
    ("reciprocal", "reciprocal", 0.3, 2), ("floor", "floor", -3, 3), ("ceil", "ceil", -3, 3),
    ("trunc", "trunc", -3, 3), ("round", "round", -3, 3), ("i0", "i0", -4, 4),
]
BINARY = [("arctan2", "atan2"), ("hypot", "hypot"), ("logaddexp", "logaddexp"), ("logaddexp2", "logaddexp2"),
          ("fmod", "fmod"), ("mod", "remainder")]


def values(low, high, seed=0):
    return np.random.default_rng(seed).uniform(low, high, (5, 4))


@pytest.mark.parametrize("name,torch_name,low,high", UNARY)
def test_unary_values_are_numpy_s_and_gradients_and_nodes_torch_s(name, torch_name, low, high):
    torch = pytest.importorskip("torch")
    v = values(low, high)
    x = dg.from_array(v, chunks=(2, 3), requires_grad=True)
    y = getattr(dg, name)(x)
    np.testing.assert_allclose(y.detach().numpy(), getattr(np, name)(v), rtol=1e-14)
    w = np.random.default_rng(1).standard_normal(v.shape)
    (y * dg.tensor(w)).sum().backward()
    tx = torch.tensor(v, requires_grad=True)
    ty = getattr(torch, torch_name)(tx)
    (ty * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)
    assert type(y.grad_fn).__name__ == type(ty.grad_fn).__name__
    assert getattr(dg, torch_name) is getattr(dg, name) and getattr(x, torch_name)().shape == x.shape


@pytest.mark.parametrize("name,torch_name", BINARY)
@pytest.mark.parametrize("second", ["tensor", "number"])
def test_binary_values_are_numpy_s_and_gradients_and_nodes_torch_s(name, torch_name, second):
    torch = pytest.importorskip("torch")
    a, b = values(0.3, 2, 0), values(0.3, 2, 1)
    x = dg.from_array(a, chunks=(2, 3), requires_grad=True)
    y = dg.from_array(b, chunks=(3, 2), requires_grad=True) if second == "tensor" else 0.7
    out = getattr(dg, name)(x, y)
    np.testing.assert_allclose(out.detach().numpy(), getattr(np, name)(a, b if second == "tensor" else 0.7),
                               rtol=1e-14)
    out.sum().backward()
    tx = torch.tensor(a, requires_grad=True)
    ty = torch.tensor(b, requires_grad=True) if second == "tensor" else torch.tensor(0.7, dtype=torch.float64)
    tout = getattr(torch, torch_name)(tx, ty if second == "tensor" or name in ("fmod", "mod") else ty)
    tout.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)
    if second == "tensor":
        np.testing.assert_allclose(y.grad.numpy(), ty.grad.numpy(), rtol=1e-12)
        assert type(out.grad_fn).__name__ == type(tout.grad_fn).__name__


def test_operator_percent_and_round_decimals_as_numpy():
    v = values(-3, 3)
    x = dg.from_array(v, chunks=2)
    np.testing.assert_allclose((x % 0.7).numpy(), v % 0.7)
    np.testing.assert_allclose((2.5 % (x + 4)).numpy(), 2.5 % (v + 4))
    np.testing.assert_array_equal(dg.round(x, decimals=1).numpy(), np.round(v, 1))
    np.testing.assert_array_equal(dg.around(x).numpy(), np.around(v))
    with pytest.raises(TypeError, match="decimals"):
        dg.round(x, decimals=1.5)


def test_sort_is_numpy_s_and_its_gradient_torch_s_across_chunkings():
    torch = pytest.importorskip("torch")
    v = np.random.default_rng(3).standard_normal((5, 7))
    w = np.random.default_rng(4).standard_normal((5, 7))
    for chunks in [(5, 7), (2, 3), (1, 1)]:
        for axis in (0, 1, -1):
            x = dg.from_array(v, chunks=chunks, requires_grad=True)
            y = dg.sort(x, axis=axis)
            np.testing.assert_array_equal(y.detach().numpy(), np.sort(v, axis=axis))
            (y * dg.tensor(w)).sum().backward()
            t = torch.tensor(v, requires_grad=True)
            (torch.sort(t, dim=axis).values * torch.tensor(w)).sum().backward()
            np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy())
            assert type(y.grad_fn).__name__ == "SortBackward0"
            np.testing.assert_array_equal(dg.argsort(x, axis=axis).numpy(), np.argsort(v, axis=axis, kind="stable"))
    np.testing.assert_array_equal(dg.sort(dg.from_array(v, chunks=2), axis=None).numpy(), np.sort(v, axis=None))


def test_quantile_and_nan_reductions_give_torch_s_gradients_with_nans_present():
    torch = pytest.importorskip("torch")
    v = np.random.default_rng(5).standard_normal((6, 5))
    v[2, 1] = np.nan
    for name, dg_fn, torch_fn in [
        ("nansum", lambda a: dg.nansum(a, axis=0), lambda t: torch.nansum(t, dim=0)),
        ("nanmean", lambda a: dg.nanmean(a, axis=1), lambda t: torch.nanmean(t, dim=1)),
        ("quantile", lambda a: dg.quantile(a[3:], [0.2, 0.75], axis=0), lambda t: torch.quantile(t[3:], torch.tensor(
            [0.2, 0.75], dtype=torch.float64), dim=0)),
        ("nan_to_num", lambda a: dg.nan_to_num(a, nan=1.5), lambda t: torch.nan_to_num(t, nan=1.5)),
    ]:
        x = dg.from_array(v, chunks=(4, 2), requires_grad=True)
        t = torch.tensor(v, requires_grad=True)
        y, ty = dg_fn(x), torch_fn(t)
        np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-12, err_msg=name)
        w = np.random.default_rng(6).standard_normal(ty.shape)
        (y * dg.tensor(w)).sum().backward()
        (ty * torch.tensor(w)).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-12, err_msg=name)


@pytest.mark.parametrize("name", ["logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or",
                                  "bitwise_xor"])
def test_logical_ops_give_booleans_on_integers_and_bitwise_ops_bits_as_numpy_and_torch(name):
    a, b = np.array([1, 2, 0, -3, 6]), np.array([2, 2, 3, 0, 5])
    x, y = dg.from_array(a, chunks=2), dg.from_array(b, chunks=3)
    np.testing.assert_array_equal(getattr(dg, name)(x, y).numpy(), getattr(np, name)(a, b))
    np.testing.assert_array_equal(getattr(x, name)(y).numpy(), getattr(np, name)(a, b))
    torch = pytest.importorskip("torch")
    np.testing.assert_array_equal(getattr(dg, name)(x, y).numpy(),
                                  getattr(torch, name)(torch.tensor(a), torch.tensor(b)).numpy())


def test_operators_and_or_xor_invert_are_bitwise_and_never_write_in_place():
    a, b = np.array([1, 2, 0, 5]), np.array([3, 2, 1, 4])
    x, y = dg.from_array(a, chunks=2), dg.from_array(b, chunks=2)
    np.testing.assert_array_equal((x & y).numpy(), a & b)
    np.testing.assert_array_equal((x | y).numpy(), a | b)
    np.testing.assert_array_equal((x ^ y).numpy(), a ^ b)
    np.testing.assert_array_equal((3 & x).numpy(), 3 & a)
    np.testing.assert_array_equal((~x).numpy(), ~a)
    np.testing.assert_array_equal(x.numpy(), a)  # `~x` made a new tensor, as in torch
    np.testing.assert_array_equal(dg.logical_not(x).numpy(), np.logical_not(a))
    m = dg.from_array(np.array([True, False]))
    np.testing.assert_array_equal((~m).numpy(), [False, True])
    with pytest.raises(TypeError, match=r"only implemented on integer and Boolean-type tensors"):
        ~dg.from_array(np.array([1.0]))


def test_cbrt_is_the_real_cube_root_with_an_infinite_derivative_at_zero_not_nan():
    x = dg.from_array(np.array([-8.0, 0.0, 27.0]), chunks=2, requires_grad=True)
    y = dg.cbrt(x)
    y.sum().backward()
    np.testing.assert_allclose(y.detach().numpy(), [-2.0, 0.0, 3.0])
    np.testing.assert_allclose(x.grad.numpy(), [1 / 12, np.inf, 1 / 27])  # 1 / (3 cbrt(x)^2)
    with pytest.raises(RuntimeError, match="does not support automatic differentiation for outputs with complex"):
        dg.cbrt(dg.from_array(np.array([1 + 1j]), requires_grad=True))  # NumPy has no complex cbrt


def test_i0_second_derivative_and_i1_over_the_whole_range_are_torch_s():
    torch = pytest.importorskip("torch")
    from daskgrad.ops.elementwise import special_i1
    v = np.concatenate([np.linspace(-60, 60, 241), [0.0, 24.999, 25.0, 25.001, 700.0, -700.0]])
    x = dg.tensor(v, chunks=50, requires_grad=True)
    tx = torch.tensor(v, requires_grad=True)
    np.testing.assert_allclose(special_i1(x).detach().numpy(), torch.special.i1(tx).detach().numpy(), rtol=1e-14)
    (g,) = dg.autograd.grad(dg.i0(x).sum(), x, create_graph=True)
    (h,) = dg.autograd.grad(g.sum(), x)
    (tg,) = torch.autograd.grad(torch.i0(tx).sum(), tx, create_graph=True)
    (th,) = torch.autograd.grad(tg.sum(), tx)
    np.testing.assert_allclose(g.detach().numpy(), tg.detach().numpy(), rtol=1e-14)
    np.testing.assert_allclose(h.numpy(), th.numpy(), rtol=1e-13)  # i1' = i0 - i1/x, 1/2 at 0
    assert h.numpy()[241] == 0.5 and type(g.grad_fn).__name__ == "MulBackward0"
    with pytest.raises(TypeError, match="complex"):
        dg.i0(dg.tensor(np.ones(2, complex)))


def test_nextafter_gradient_is_torch_s_where_the_operands_differ_and_where_they_are_equal():
    torch = pytest.importorskip("torch")
    nan, inf = float("nan"), float("inf")
    a = np.array([1.0, 2.0, 3.0, nan, 1.0, nan, inf, inf, 0.0, -0.0, 5.0, -1.0])
    b = np.array([1.0, 3.0, 0.0, 1.0, nan, nan, inf, 0.0, -0.0, 0.0, 5.0, 2.0])
    w = np.arange(1.0, 13.0)
    x, y = (dg.from_array(v, chunks=5, requires_grad=True) for v in (a, b))
    xt, yt = (torch.tensor(v, requires_grad=True) for v in (a, b))
    out, ref = dg.nextafter(x, y), torch.nextafter(xt, yt)
    np.testing.assert_array_equal(out.detach().numpy(), np.nextafter(a, b))
    assert type(out.grad_fn).__name__ == type(ref.grad_fn).__name__
    (out * dg.from_array(w, chunks=5)).sum().backward()
    (ref * torch.tensor(w)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), xt.grad.numpy())
    np.testing.assert_array_equal(y.grad.numpy(), yt.grad.numpy())
