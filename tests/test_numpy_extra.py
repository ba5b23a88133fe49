"""The rest of dask.array's NumPy functions: values as NumPy's (or dask's), gradients and node
names as torch's where torch has the op, and the non-differentiable ones return tensors that do
not require grad (or, where torch records a node whose backward raises, raise the same words)."""
import re

import dask.array as da
import numpy as np
import pytest

import daskgrad as dg

CHUNKS = [(6, 5), (2, 2), (4, 3), (1, 1)]


def _values(seed=0, shape=(6, 5)):
    return np.random.default_rng(seed).standard_normal(shape)


def _grads(dg_fn, torch_fn, v, chunks, w_seed=9):
    """(daskgrad's result and gradient, torch's) for ``sum(f(x) * w)`` with a random weight ``w``."""
    torch = pytest.importorskip("torch")
    x = dg.from_array(v, chunks=chunks, requires_grad=True)
    t = torch.tensor(v, requires_grad=True)
    y, ty = dg_fn(x), torch_fn(t)
    w = np.random.default_rng(w_seed).standard_normal(ty.shape)
    (y * dg.tensor(w)).sum().backward()
    (ty * torch.tensor(w)).sum().backward()
    return y.detach().numpy(), x.grad.numpy(), ty.detach().numpy(), t.grad.numpy(), y


@pytest.mark.parametrize("chunks", CHUNKS)
@pytest.mark.parametrize("axis", [0, 1])
def test_cumprod_gradient_is_torch_s_with_zeros_in_the_input(chunks, axis):
    torch = pytest.importorskip("torch")
    v = _values()
    v[1, 2] = v[4, 2] = v[3, 0] = v[0, 4] = v[2, 1] = 0.0  # two zeros in one column, zeros at chunk edges
    y, g, ty, tg, out = _grads(lambda x: dg.cumprod(x, axis=axis), lambda t: torch.cumprod(t, axis), v, chunks)
    np.testing.assert_allclose(y, np.cumprod(v, axis), rtol=1e-13)
    np.testing.assert_allclose(g, tg, rtol=1e-12, atol=1e-14)
    assert out.grad_fn.name() == "CumprodBackward0"


def test_cumprod_second_derivative_and_complex_gradient_are_torch_s():
    torch = pytest.importorskip("torch")
    v = _values(1)
    v[2, 1] = 0.0
    w = _values(2)
    x = dg.from_array(v, chunks=2, requires_grad=True)
    (g,) = dg.grad((dg.cumprod(x, 0) * dg.tensor(w)).sum(), [x], create_graph=True)
    (gg,) = dg.grad((g * g).sum(), [x])
    t = torch.tensor(v, requires_grad=True)
    (tg,) = torch.autograd.grad((torch.cumprod(t, 0) * torch.tensor(w)).sum(), [t], create_graph=True)
    (tgg,) = torch.autograd.grad((tg * tg).sum(), [t])
    np.testing.assert_allclose(gg.numpy(), tgg.numpy(), rtol=1e-11, atol=1e-12)
    vc = v + 1j * _values(3)
    y, g, ty, tg, _ = _grads(lambda z: dg.real(dg.cumprod(z, axis=1)), lambda z: torch.cumprod(z, 1).real, vc, 2)
    np.testing.assert_allclose(g, tg, rtol=1e-12)


@pytest.mark.parametrize("chunks", CHUNKS)
def test_take_and_take_along_axis_are_torch_s_take_and_gather(chunks):
    torch = pytest.importorskip("torch")
    v = _values(4)
    flat = np.array([[0, 29, 7], [7, 7, 12]])  # repeated indices accumulate in backward
    y, g, ty, tg, _ = _grads(lambda x: dg.take(x, flat), lambda t: torch.take(t, torch.tensor(flat)), v, chunks)
    np.testing.assert_array_equal(y, np.take(v, flat))
    np.testing.assert_allclose(g, tg)
    idx = np.random.default_rng(5).integers(-5, 5, (6, 7))
    y, g, ty, tg, out = _grads(lambda x: dg.take_along_axis(x, idx, axis=1),
                               lambda t: torch.take_along_dim(t, torch.tensor(idx % 5), dim=1), v, chunks)
    np.testing.assert_array_equal(y, np.take_along_axis(v, idx, 1))
    np.testing.assert_allclose(g, tg)
    assert out.grad_fn.name() == "GatherBackward0"
    x = dg.from_array(v, chunks=chunks)
    np.testing.assert_array_equal(dg.take_along_axis(x, dg.argsort(x, axis=0), axis=0).numpy(), np.sort(v, 0))
    np.testing.assert_array_equal(dg.take(x, [4, 0], axis=1).numpy(), np.take(v, [4, 0], axis=1))


def test_take_along_axis_refuses_an_out_of_range_index_before_computing():
    x = dg.from_array(_values(), chunks=2, requires_grad=True)
    with pytest.raises(IndexError, match="index 5 is out of bounds for axis 1 with size 5"):
        dg.take_along_axis(x, np.full((6, 1), 5), axis=1)
    assert x.grad is None


@pytest.mark.parametrize("edge_order", [1, 2])
@pytest.mark.parametrize("chunks", [(6, 5), (2, 2), (1, 1)])
def test_gradient_is_numpy_s_and_differentiable_as_torch_s(edge_order, chunks):
    torch = pytest.importorskip("torch")
    v = _values(6)
    rows = np.array([0.0, 0.3, 1.0, 1.2, 2.5, 3.0])
    for spacing, tspacing in [((), {}), ((0.5,), {"spacing": 0.5}),
                              ((rows, 2.0), {"spacing": (torch.tensor(rows), torch.tensor(np.arange(5) * 2.0))})]:
        y, g, ty, tg, _ = _grads(lambda x: dg.stack(dg.gradient(x, *spacing, edge_order=edge_order)),
                                 lambda t: torch.stack(torch.gradient(t, **tspacing, edge_order=edge_order)), v,
                                 chunks)
        np.testing.assert_allclose(y, np.stack(np.gradient(v, *spacing, edge_order=edge_order)), rtol=1e-12)
        np.testing.assert_allclose(y, ty, rtol=1e-12)
        np.testing.assert_allclose(g, tg, rtol=1e-12)
    x = dg.from_array(v, chunks=chunks)
    np.testing.assert_allclose(dg.gradient(x, 0.5, axis=1).numpy(), np.gradient(v, 0.5, axis=1))
    with pytest.raises(ValueError, match="at least \\(edge_order \\+ 1\\) elements"):
        dg.gradient(x[:2], axis=0, edge_order=2)


def test_fmax_fmin_ignore_nans_and_give_ties_to_the_first_operand_as_torch():
    torch = pytest.importorskip("torch")
    a, b = _values(7), _values(8)
    a[0, 0], b[1, 1], a[2, 2], b[2, 2] = np.nan, np.nan, np.nan, np.nan
    b[3] = a[3]  # ties
    for name in ("fmax", "fmin"):
        x = dg.from_array(a, chunks=2, requires_grad=True)
        y = dg.from_array(b, chunks=3, requires_grad=True)
        out = getattr(dg, name)(x, y)
        np.testing.assert_array_equal(out.detach().numpy(), getattr(np, name)(a, b))
        out.sum().backward()
        tx, ty = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
        getattr(torch, name)(tx, ty).sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())
        np.testing.assert_array_equal(y.grad.numpy(), ty.grad.numpy())


def test_nan_reductions_are_numpy_s_and_nanquantile_s_gradient_torch_s():
    torch = pytest.importorskip("torch")
    v = _values(9, (7, 5))
    v[1, 2] = v[0, 0] = v[5, 4] = np.nan
    x = dg.from_array(v, chunks=(3, 2))
    for name, kw in [("nancumsum", {"axis": 0}), ("nancumprod", {"axis": 1}), ("nanprod", {"axis": 0}),
                     ("nanvar", {"axis": 1, "ddof": 1}), ("nanstd", {"axis": 0, "keepdims": True}),
                     ("nanmedian", {"axis": 1}), ("nanpercentile", {"q": [10, 70], "axis": 0}),
                     ("nanargmax", {"axis": 0}), ("nanargmin", {})]:
        np.testing.assert_allclose(getattr(dg, name)(x, **kw).numpy(), getattr(np, name)(v, **kw), rtol=1e-12,
                                   err_msg=name)
    q = torch.tensor([0.25, 0.9], dtype=torch.float64)
    y, g, ty, tg, _ = _grads(lambda t: dg.nanquantile(t, [0.25, 0.9], axis=1),
                             lambda t: torch.nanquantile(t, q, dim=1), v, (3, 2))
    np.testing.assert_allclose(y, ty, rtol=1e-12)
    np.testing.assert_allclose(g, tg, rtol=1e-12)


@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid_is_differentiable_as_torch_s(indexing):
    torch = pytest.importorskip("torch")
    a, b = np.arange(3.0), np.arange(4.0) * 2
    x, y = (dg.from_array(v, chunks=2, requires_grad=True) for v in (a, b))
    tx, ty = (torch.tensor(v, requires_grad=True) for v in (a, b))
    gx, gy = dg.meshgrid(x, y, indexing=indexing)
    tgx, tgy = torch.meshgrid(tx, ty, indexing=indexing)
    np.testing.assert_array_equal(gx.detach().numpy(), np.meshgrid(a, b, indexing=indexing)[0])
    (gx * gy * gy).sum().backward()
    (tgx * tgy * tgy).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())
    np.testing.assert_allclose(y.grad.numpy(), ty.grad.numpy())


def test_bincount_with_weights_and_floor_divide_require_grad_and_their_backward_raises_as_torch():
    torch = pytest.importorskip("torch")
    w = dg.from_array(_values()[:, 0], chunks=4, requires_grad=True)
    counts = dg.bincount(dg.tensor(np.array([0, 1, 1, 3, 0, 2])), weights=w)
    np.testing.assert_allclose(counts.detach().numpy(), np.bincount([0, 1, 1, 3, 0, 2], _values()[:, 0]))
    tcounts = torch.bincount(torch.tensor([0, 1, 1, 3, 0, 2]), weights=torch.tensor(_values()[:, 0],
                                                                                   requires_grad=True))
    assert counts.requires_grad and tcounts.requires_grad
    for out, tout in [(counts, tcounts), (dg.floor_divide(w, 0.3), torch.floor_divide(torch.ones(2,
                                                                                                requires_grad=True),
                                                                                     0.3))]:
        with pytest.raises(RuntimeError) as torch_error:
            tout.sum().backward()
        with pytest.raises(RuntimeError, match="^derivative for aten::") as error:
            out.sum().backward()
        assert str(error.value) == str(torch_error.value)
    assert w.grad is None
    assert not dg.bincount(dg.tensor(np.array([0, 1, 1]))).requires_grad


def test_searching_counting_and_sets_are_numpy_s_and_never_require_grad():
    v = np.round(_values(10) * 2) / 2
    x = dg.from_array(v, chunks=(4, 3), requires_grad=True)
    s = np.sort(v[:, 0])
    cases = [
        (dg.searchsorted(dg.from_array(s, chunks=2), x[:, 1], side="right"), np.searchsorted(s, v[:, 1], "right")),
        (dg.digitize(x, [-1.0, 0.0, 1.0]), np.digitize(v, [-1.0, 0.0, 1.0])),
        (dg.count_nonzero(x, axis=0), np.count_nonzero(v, axis=0)),
        (dg.argwhere(x > 1), np.argwhere(v > 1)), (dg.flatnonzero(x > 1), np.flatnonzero(v > 1)),
        (dg.nonzero(x > 1)[1], np.nonzero(v > 1)[1]), (dg.isin(x, [0.5, 1.0]), np.isin(v, [0.5, 1.0])),
        (dg.unique(x), np.unique(v)), (dg.unique(x, return_counts=True)[1], np.unique(v, return_counts=True)[1]),
        (dg.histogram(x, bins=4, range=(-2, 2))[0], np.histogram(v, bins=4, range=(-2, 2))[0]),
        (dg.histogram2d(x[:, 0], x[:, 1], bins=3, range=((-2, 2), (-2, 2)))[0],
         np.histogram2d(v[:, 0], v[:, 1], bins=3, range=((-2, 2), (-2, 2)))[0]),
        (dg.all(x > -5, axis=1), np.all(v > -5, axis=1)), (dg.any(x > 1), np.any(v > 1)),
        (dg.isclose(x, x + 1e-9), np.isclose(v, v + 1e-9)), (~(x > 0), ~(v > 0)),
        (dg.argtopk(x, 2, axis=0), np.argsort(v, axis=0, kind="stable")[::-1][:2]),
    ]
    for out, expected in cases:
        assert not out.requires_grad
        np.testing.assert_array_equal(out.numpy(), expected)


def test_factories_take_torch_s_keywords_and_default_dtype():
    e = dg.eye(3, 4, k=1)
    assert e.dtype == np.float32 and e.is_leaf and not e.requires_grad
    np.testing.assert_array_equal(e.numpy(), np.eye(3, 4, k=1))
    assert dg.eye(3, dtype=dg.float64, requires_grad=True).requires_grad
    np.testing.assert_array_equal(dg.tri(4, 3, -1, dtype="float64").numpy(), np.tri(4, 3, -1))
    np.testing.assert_array_equal(dg.identity(2).numpy(), np.identity(2))
    np.testing.assert_array_equal(dg.indices((2, 3)).numpy(), np.indices((2, 3)))
    np.testing.assert_array_equal(dg.fromfunction(lambda i, j: i * 10 + j, (2, 3)).numpy(),
                                  np.fromfunction(lambda i, j: i * 10 + j, (2, 3)))
    assert dg.empty(2, 3).shape == (2, 3) and dg.empty_like(e, requires_grad=True).requires_grad
    np.testing.assert_array_equal(dg.tril_indices(3, 1)[1].numpy(), np.tril_indices(3, 1)[1])


def test_choosing_and_thinning_are_numpy_s():
    v, u = _values(11), _values(12)
    x, y = dg.from_array(v, chunks=2), dg.from_array(u, chunks=3)
    np.testing.assert_array_equal(dg.select([x > 1, x < -1], [x, y], default=-7.0).numpy(),
                                  np.select([v > 1, v < -1], [v, u], default=-7.0))
    np.testing.assert_allclose(dg.piecewise(x, [x < 0, x > 1], [lambda t: t ** 2, lambda t: t * 3, 0.5]).numpy(),
                               np.piecewise(v, [v < 0, v > 1], [lambda t: t ** 2, lambda t: t * 3, 0.5]))
    k = (v > 0).astype(int)
    np.testing.assert_array_equal(dg.choose(dg.tensor(k), [x, y]).numpy(), np.choose(k, [v, u]))
    np.testing.assert_array_equal(dg.compress([True, False, True], x, axis=0).numpy(),
                                  np.compress([True, False, True], v, axis=0))
    np.testing.assert_array_equal(dg.extract(x > 0, x).numpy(), np.extract(v > 0, v))
    np.testing.assert_array_equal(dg.diff(x, 2, axis=0, prepend=0.5, append=y[:1]).numpy(),
                                  np.diff(v, 2, axis=0, prepend=0.5, append=u[:1]))
    np.testing.assert_array_equal(dg.delete(x, [0, 2], axis=1).numpy(), np.delete(v, [0, 2], axis=1))
    np.testing.assert_array_equal(dg.insert(x, 2, y[0], axis=0).numpy(), np.insert(v, 2, u[0], axis=0))
    np.testing.assert_array_equal(dg.insert(x, -1, 9.0).numpy(), np.insert(v, -1, 9.0))
    np.testing.assert_array_equal(dg.ediff1d(x, to_begin=[1.0, 2.0], to_end=3.0).numpy(),
                                  np.ediff1d(v, to_begin=[1.0, 2.0], to_end=3.0))
    np.testing.assert_array_equal(dg.rollaxis(dg.reshape(x, (2, 3, 5)), 2, 1).shape,
                                  np.rollaxis(v.reshape(2, 3, 5), 2, 1).shape)
    np.testing.assert_array_equal(dg.block([[x, y[:, :1]], [y[:1], x[:1, :1]]]).numpy(),
                                  np.block([[v, u[:, :1]], [u[:1], v[:1, :1]]]))
    np.testing.assert_allclose(dg.coarsen(np.mean, x, {0: 3, 1: 5}).numpy(),
                               da.coarsen(np.mean, da.from_array(v, chunks=(3, 5)), {0: 3, 1: 5}).compute())
    np.testing.assert_array_equal(dg.topk(x, 2, axis=0).numpy(), da.topk(da.from_array(v, chunks=2), 2, axis=0))
    np.testing.assert_array_equal(dg.topk(x, -2).numpy(), da.topk(da.from_array(v, chunks=2), -2))
    np.testing.assert_allclose(dg.moment(x, 3, axis=0).numpy(), da.moment(da.from_array(v), 3, axis=0).compute())
    frac, whole = dg.modf(x)
    np.testing.assert_array_equal(frac.numpy(), np.modf(v)[0])
    mant, ex = dg.frexp(x)
    np.testing.assert_array_equal(mant.numpy(), np.frexp(v)[0])
    np.testing.assert_array_equal(dg.ldexp(x, 3).numpy(), np.ldexp(v, 3))


@pytest.mark.parametrize("chunks, echunks", [(-1, -1), (2, 2), (((1, 2), (3, 2, 1)), ((3, 2, 1),)), (1, 1)])
def test_ldexp_is_one_node_with_torch_s_gradients(chunks, echunks):
    """``ldexp`` is torch's LdexpBackward0 (it saves the exponent and the result): gradients of a real
    and a complex mantissa equal torch's; a real exponent's gradient of a complex result is refused as
    torch's engine refuses it."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    e = rng.standard_normal(6)
    for m in (rng.standard_normal((3, 6)), rng.standard_normal((3, 6)) + 1j * rng.standard_normal((3, 6))):
        g = np.cos(m) + 0.5
        real = m.dtype.kind == "f"
        tm, te = torch.tensor(m, requires_grad=True), torch.tensor(e, requires_grad=real)
        torch.ldexp(tm, te).backward(torch.tensor(g))
        dm = dg.from_array(m, chunks=chunks).requires_grad_()
        de = dg.from_array(e, chunks=echunks).requires_grad_(real)
        out = dg.ldexp(dm, de)
        assert type(out.grad_fn).__name__ == "LdexpBackward0"
        out.backward(dg.from_array(g, chunks=chunks))
        np.testing.assert_allclose(dm.grad.numpy(), tm.grad.numpy(), rtol=1e-15)
        if real:
            np.testing.assert_allclose(de.grad.numpy(), te.grad.numpy(), rtol=1e-14)
    message = "Expected isFloatingType(grad.scalar_type()) || (input_is_complex == grad_is_complex)"
    with pytest.raises(RuntimeError, match=re.escape(message)):
        torch.ldexp(torch.tensor(m), torch.tensor(e, requires_grad=True)).sum().abs().backward()
    exponent = dg.from_array(e, chunks=echunks).requires_grad_()
    with pytest.raises(RuntimeError, match=re.escape(message)):
        dg.ldexp(dg.from_array(m, chunks=chunks), exponent).sum().abs().backward()


def test_new_ops_take_torch_s_keywords_and_are_reached_from_numpy():
    v = _values(13)
    x = dg.from_array(v, chunks=2, requires_grad=True)
    np.testing.assert_allclose(dg.cumprod(x, dim=0).detach().numpy(), np.cumprod(v, axis=0))
    np.testing.assert_allclose(dg.nanvar(x, dim=1, keepdim=True).detach().numpy(), np.nanvar(v, 1, keepdims=True))
    np.testing.assert_array_equal(dg.count_nonzero(x > 0, dim=0).numpy(), np.count_nonzero(v > 0, axis=0))
    idx = np.zeros((6, 1), dtype=int)
    np.testing.assert_array_equal(dg.take_along_dim(x, idx, dim=1).detach().numpy(), v[:, :1])
    y = np.cumprod(x, axis=1)  # NumPy's function on a Tensor runs the op, lazily
    assert isinstance(y, dg.Tensor) and y.grad_fn.name() == "CumprodBackward0"
    assert isinstance(np.gradient(x)[0], dg.Tensor) and isinstance(np.fmax(x, 0.0), dg.Tensor)
    assert isinstance(np.take_along_axis(x, idx, axis=1), dg.Tensor)
    with pytest.raises(TypeError, match="out="):
        np.fmax(x, 0.0, out=np.empty(v.shape))


def test_digitize_refuses_lazy_bins_before_computing_them_and_searchsorted_does_the_same_job():
    v = np.array([-2.0, -0.5, 0.0, 0.7, 3.0])
    x, bins = dg.from_array(v, chunks=2), dg.from_array(np.array([-1.0, 0.0, 1.0]))
    with pytest.raises(TypeError, match="bins in host memory"):
        dg.digitize(x, bins)
    np.testing.assert_array_equal(dg.searchsorted(bins, x, side="right").numpy(), np.digitize(v, [-1.0, 0.0, 1.0]))


INSERT_CASES = [  # (obj, values, axis): NumPy's readings of positions and of values' broadcasting
    (1, 7.0, 0), ([1, 3], 9.0, 0), ([3, 1, 1], np.arange(3.0)[:, None], 0),
    (slice(0, 4, 2), np.arange(8.0).reshape(2, 4), 0), ([1, 3], np.arange(10.0).reshape(5, 2), 1),
    ([-1, 0], 1.0, None), ([2], np.arange(8.0).reshape(2, 4), 0), ([], 1.0, 0),
    (np.array([True, False, True, False, False]), 2.0, 0), (2, np.arange(10.0).reshape(2, 5), 1), ([4, 4], 5.0, 1)]


@pytest.mark.parametrize("obj,values,axis", INSERT_CASES)
def test_insert_at_several_positions_is_numpy_s_and_differentiable_in_both(obj, values, axis):
    v = np.random.default_rng(0).normal(size=(5, 4))
    x = dg.tensor(v, chunks=2, requires_grad=True)
    vals = dg.tensor(np.asarray(values, dtype=float), requires_grad=True)
    out = dg.insert(x, obj, vals, axis=axis)
    expected = np.insert(v, obj, values, axis=axis)
    np.testing.assert_array_equal(out.detach().numpy(), expected)
    w = np.random.default_rng(1).normal(size=expected.shape)
    (out * dg.tensor(w)).sum().backward()
    # the gradients read NumPy's insert backwards: where each entry of arr landed, and the sum of
    # the slots values filled (each broadcast copy counts)
    ref = np.insert(np.arange(v.size, dtype=float).reshape(v.shape), obj, -np.ones_like(np.asarray(values, float)),
                    axis=axis)
    gx = np.zeros(v.size)
    np.add.at(gx, ref[ref >= 0].astype(int), w[ref >= 0])
    np.testing.assert_allclose(x.grad.numpy().reshape(-1), gx, rtol=1e-14)
    if vals.grad is None:  # nothing inserted: values took no part
        assert not (ref < 0).any()
    else:
        np.testing.assert_allclose(vals.grad.numpy().sum(), w[ref < 0].sum(), rtol=1e-12)


def test_insert_refuses_positions_numpy_refuses():
    x = dg.tensor(np.zeros((5, 4)))
    with pytest.raises(IndexError):
        dg.insert(x, [1, 9], 1.0, axis=0)
    with pytest.raises(ValueError, match="one dimensional"):
        dg.insert(x, [[1, 2]], 1.0, axis=0)
