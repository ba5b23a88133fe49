"""NumPy's, Dask's and xarray's functions on a Tensor: a differentiable Tensor back, or an error naming
what to call instead, never a plain array that silently dropped the gradient.

``np.linalg.*`` runs daskgrad.linalg's ops where NumPy's answer is the same; ``dask.array``'s functions
cannot return a Tensor (dask has no dispatch: each converts its arguments with ``da.asarray``), so a
tensor that requires grad refuses that conversion inside them; xarray runs NumPy's functions on a
Tensor (rolling, pad, quantile), so a DataArray over a leaf stays differentiable.  NumPy, xarray on
NumPy values, torch and central differences are the oracles."""
import dask.array as da
import numpy as np
import pytest

import daskgrad as dg

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(7)
S = RNG.standard_normal((4, 4))
SPD = S @ S.T + 4 * np.eye(4)  # symmetric positive definite: every routed function applies
B = RNG.standard_normal(4)


def leaf(values, chunks=2):
    return dg.from_array(np.asarray(values, dtype=np.float64), chunks=chunks, requires_grad=True)


# -------------------------------------------------------------------- numpy.linalg
@pytest.mark.parametrize("name,args", [
    ("solve", (SPD, B)), ("solve", (SPD, np.ones((4, 2)))), ("inv", (SPD,)), ("det", (SPD,)), ("slogdet", (SPD,)),
    ("cholesky", (SPD,)), ("eigh", (SPD,)), ("eigvalsh", (SPD,)), ("pinv", (S,)), ("norm", (S,)), ("svd", (S,)),
    ("qr", (S,)), ("matrix_power", (S, 3)), ("cond", (SPD,)), ("svdvals", (S,)), ("diagonal", (S,)),
    ("trace", (S,)), ("matrix_norm", (S,)), ("vector_norm", (B,)), ("multi_dot", ([S, SPD, S],)),
])
def test_numpy_linalg_on_tensors_runs_daskgrad_s_ops_with_numpy_s_answer(name, args):
    tensors = [leaf(a) if isinstance(a, np.ndarray) else [leaf(m) for m in a] if isinstance(a, list) else a
               for a in args]
    ours = getattr(np.linalg, name)(*tensors)
    theirs = getattr(np.linalg, name)(*args)
    ours = ours if isinstance(ours, tuple) else (ours,)
    theirs = theirs if isinstance(theirs, tuple) else (theirs,)
    assert len(ours) == len(theirs)
    for o, t in zip(ours, theirs):
        assert isinstance(o, dg.Tensor) and o.shape == np.shape(t)
        if name in ("svd", "qr", "eigh") and o.ndim == 2:  # vectors: NumPy's up to each one's sign
            o, t = np.abs(o.detach().numpy()), np.abs(t)
        np.testing.assert_allclose(o.detach().numpy() if isinstance(o, dg.Tensor) else o, t, rtol=1e-10, atol=1e-12)
    assert any(o.requires_grad for o in ours if o.dtype.kind == "f")


def test_numpy_linalg_gradients_are_torch_s():
    a, b = leaf(SPD), leaf(B)
    ta, tb = torch.tensor(SPD, requires_grad=True), torch.tensor(B, requires_grad=True)
    loss = np.linalg.solve(a, b).sum() + np.linalg.slogdet(a)[1] + np.linalg.inv(a)[0, 1] + np.linalg.det(a) / 100
    tloss = (torch.linalg.solve(ta, tb).sum() + torch.linalg.slogdet(ta)[1] + torch.linalg.inv(ta)[0, 1]
             + torch.linalg.det(ta) / 100)
    loss.backward()
    tloss.backward()
    np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-10)
    np.testing.assert_allclose(b.grad.numpy(), tb.grad.numpy(), rtol=1e-10)


@pytest.mark.parametrize("call", [lambda a: np.linalg.eig(a), lambda a: np.linalg.eigvals(a),
                                  lambda a: np.linalg.lstsq(a, a), lambda a: np.linalg.solve(a[None], a[:, 0][None])])
def test_numpy_linalg_functions_whose_answer_would_differ_raise_naming_daskgrad_s(call):
    with pytest.raises(TypeError, match="on a daskgrad Tensor.*daskgrad.linalg"):
        call(leaf(SPD))


# ---------------------------------------------------------------------- dask.array
@pytest.mark.parametrize("call,name,op", [
    (lambda t: da.sum(t), "sum", True), (lambda t: da.concatenate([t, t]), "concatenate", True),
    (lambda t: da.matmul(t, t), "matmul", True), (lambda t: da.dot(t, t), "dot", True),
    (lambda t: da.around(t, 1), "around", True),
    (lambda t: da.apply_along_axis(np.sort, 0, t), "apply_along_axis", False),
])
def test_dask_functions_refuse_a_tensor_that_requires_grad_naming_the_function(call, name, op):
    t = leaf(SPD)
    with pytest.raises(TypeError, match=f"dask.array.{name}\\(\\) of a Tensor that requires grad would return a dask "
                                        "array without its gradient: call "
                                        + (f"daskgrad.{name}" if op else f"daskgrad has no op named '{name}'")):
        call(t)


def test_dask_s_own_conversion_and_ufuncs_and_tensors_without_grad_keep_working():
    t = leaf(SPD)
    assert isinstance(da.asarray(t), da.Array)  # the explicit conversion: to_dask()
    assert isinstance(da.exp(t), dg.Tensor) and da.exp(t).requires_grad  # dask's ufuncs call NumPy's
    plain = dg.from_array(SPD, chunks=2)
    np.testing.assert_allclose(da.sum(plain).compute(), SPD.sum())  # nothing to lose: dask's answer
    with dg.no_grad():
        np.testing.assert_allclose(da.concatenate([t, t]).compute(), np.concatenate([SPD, SPD]))
    np.testing.assert_allclose(np.sum(t).detach().numpy(), SPD.sum())  # NumPy's spelling runs the op


# -------------------------------------------------------------------------- xarray
def _dataarrays(values):
    xr = pytest.importorskip("xarray")
    labels = {"dims": ("time", "x"), "coords": {"time": np.arange(values.shape[0]) * 1.0,
                                                 "x": np.arange(values.shape[1]) * 0.5}}
    w = leaf(values, chunks=(3, 2))
    return w, w.to_xarray(**labels), xr.DataArray(values, **labels)


V = RNG.standard_normal((7, 4))


@pytest.mark.parametrize("call", [
    lambda a: a.rolling(time=3).mean(), lambda a: a.rolling(time=3, center=True, min_periods=1).sum(),
    lambda a: a.rolling(time=2, x=2).max(), lambda a: a.pad(time=(1, 2)), lambda a: a.pad(x=1, constant_values=0.5),
    lambda a: a.quantile([0.25, 0.5], dim="time"), lambda a: a.quantile(0.3, dim=["time", "x"], method="nearest"),
], ids=["rolling_mean", "rolling_sum_centered", "rolling_2d_max", "pad", "pad_constant", "quantile",
        "quantile_nearest"])
def test_xarray_operations_on_a_wrapped_tensor_give_xarray_s_values_and_stay_differentiable(call):
    w, a, plain = _dataarrays(V)
    ours, theirs = call(a), call(plain)
    assert isinstance(ours.data, dg.Tensor) and ours.data.requires_grad
    assert ours.dims == theirs.dims
    np.testing.assert_allclose(ours.data.detach().numpy(), theirs.values, rtol=1e-12, equal_nan=True)


def test_xarray_rolling_pad_and_quantile_gradients_match_central_differences_and_torch():
    xr = pytest.importorskip("xarray")

    def f(w):
        a = xr.DataArray(w, dims=("time", "x"))
        rolled = a.rolling(time=3, min_periods=1).mean()
        return (rolled * a.pad(time=(1, 0), constant_values=0.0).isel(time=slice(0, 7))
                + a.quantile(0.4, dim="time")).data

    assert dg.testing.gradcheck(f, (leaf(V, chunks=(3, 2)),))
    w, a, _ = _dataarrays(V)
    a.quantile(0.4, dim="time").sum().data.backward()
    t = torch.tensor(V, requires_grad=True)
    torch.quantile(t, 0.4, dim=0).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), t.grad.numpy(), rtol=1e-12)
    w, a, _ = _dataarrays(V)
    a.pad(time=(2, 1)).sum().data.backward()
    np.testing.assert_array_equal(w.grad.numpy(), np.ones_like(V))


def test_xarray_interp_on_a_wrapped_tensor_raises_because_scipy_computes_it_on_values():
    # xarray interpolates with SciPy, which reads the values as a NumPy array: torch's refusal, not a
    # gradient lost without a word; without a gradient (detached), xarray's own answer
    w, a, plain = _dataarrays(V)
    with pytest.raises(RuntimeError, match="Can't call numpy\\(\\) on Tensor that requires grad"):
        a.interp(time=[0.5, 1.5])
    with dg.no_grad():
        detached = w.detach().to_xarray(dims=("time", "x"), coords=plain.coords)
        np.testing.assert_allclose(detached.interp(time=[0.5, 1.5]).values, plain.interp(time=[0.5, 1.5]).values)
