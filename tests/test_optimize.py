"""daskgrad.optimize.minimize: SciPy's optimizers on Tensors, one submission per evaluation."""
import sys

import dask
import dask.array as da
import numpy as np
import pytest

import daskgrad as dg

so = pytest.importorskip("scipy.optimize", reason="scipy comes with the test extra: pip install 'daskgrad[test]'")

ROSEN_X0 = np.array([-1.2, 1.0, -1.2, 1.0, 0.5, 0.3])


def rosen(x):
    return (100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()


def counting_scheduler():
    calls = []

    def get(dsk, keys, **kwargs):
        calls.append(keys)
        return dask.get(dsk, keys, **kwargs)
    return get, calls


@pytest.mark.parametrize("method", ["L-BFGS-B", "BFGS"])
def test_rosenbrock_on_chunked_vector_matches_scipy_with_exact_gradient(method):
    x0 = dg.from_array(ROSEN_X0, chunks=3)
    res = dg.optimize.minimize(rosen, x0, method=method)
    ref = so.minimize(so.rosen, ROSEN_X0, jac=so.rosen_der, method=method)
    assert res.success and ref.success
    assert isinstance(res.x, dg.Tensor) and not res.x.requires_grad
    assert (res.x.shape, res.x.dtype, res.x.chunks) == (x0.shape, x0.dtype, x0.chunks)
    np.testing.assert_allclose(res.x.numpy(), ref.x, rtol=1e-6)
    np.testing.assert_allclose(res.fun, ref.fun, atol=1e-12)
    assert res.nfev == ref.nfev


# a coupled, well-conditioned problem with NumPy derivatives, so CG and Newton-CG converge in a few steps
A = np.random.default_rng(1).standard_normal((6, 6))
B = np.arange(6.0)


def coupled(x):
    return ((A @ x - B) ** 2).sum() / 2 + (x ** 4).sum() / 4


def coupled_np(x):
    return ((A @ x - B) ** 2).sum() / 2 + (x ** 4).sum() / 4, A.T @ (A @ x - B) + x ** 3


def coupled_hessp(x, p):
    return A.T @ (A @ p) + 3 * x ** 2 * p


@pytest.mark.parametrize("method", ["CG", "Newton-CG", "trust-ncg"])
def test_cg_and_exact_hessian_vector_methods_match_scipy_with_exact_derivatives(method):
    x0 = dg.zeros(6, dtype="float64", chunks=2)
    res = dg.optimize.minimize(coupled, x0, method=method)
    hessp = None if method == "CG" else coupled_hessp
    ref = so.minimize(coupled_np, np.zeros(6), jac=True, hessp=hessp, method=method)
    assert res.success and ref.success and res.x.chunks == x0.chunks
    np.testing.assert_allclose(res.x.numpy(), ref.x, rtol=1e-6, atol=1e-9)
    assert (res.nfev, res.get("nhev")) == (ref.nfev, ref.get("nhev"))


def test_each_evaluation_is_one_submission():
    get, calls = counting_scheduler()
    with dask.config.set(scheduler=get):
        res = dg.optimize.minimize(coupled, dg.zeros(6, dtype="float64", chunks=2), method="L-BFGS-B")
    assert res.nfev > 5
    assert len(calls) == 1 + res.nfev  # computing the lazy x0, then loss and gradient together


def test_each_hessian_vector_product_is_one_submission():
    get, calls = counting_scheduler()
    with dask.config.set(scheduler=get):
        res = dg.optimize.minimize(coupled, np.zeros(6), method="Newton-CG")  # a NumPy x0: nothing to compute
    assert res.success and res.nhev > 0
    assert len(calls) == res.nfev + res.nhev


def test_x_keeps_x0_shape_dtype_chunks_inside_fun_and_in_result(rng):
    target = rng.standard_normal((5, 4)).astype(np.float32)
    x0 = dg.zeros(5, 4, dtype="float32", chunks=((3, 2), (1, 3)))
    seen = []

    def fun(x):
        seen.append((x.shape, x.dtype, x.chunks, x.is_leaf, x.requires_grad))
        return ((x - target) ** 2).sum()
    res = dg.optimize.minimize(fun, x0, method="BFGS")
    assert set(seen) == {(x0.shape, np.dtype("float32"), x0.chunks, True, True)}
    assert (res.x.dtype, res.x.chunks) == (np.float32, x0.chunks)
    assert (res.jac.shape, res.jac.dtype, res.jac.chunks) == (x0.shape, np.float32, x0.chunks)
    np.testing.assert_allclose(res.x.numpy(), target, rtol=1e-5, atol=1e-6)


def test_device_chunks_stay_device_chunks_inside_fun_and_in_result():
    from strict_array import StrictArray, to_strict  # fails like cupy on any implicit host conversion

    x0 = to_strict(dg.zeros(6, dtype="float64", chunks=4))
    metas = []

    def fun(x):
        metas.append(type(x.array._meta))
        return ((x - 1.5) ** 2).sum() + (x ** 4).sum() / 4
    for method in ("L-BFGS-B", "Newton-CG"):
        res = dg.optimize.minimize(fun, x0, method=method)
        assert res.success and set(metas) == {StrictArray}
        assert isinstance(res.x.array._meta, StrictArray) and res.x.chunks == x0.chunks
        assert isinstance(res.jac.array._meta, StrictArray)
        np.testing.assert_allclose(res.x.compute().get(), np.full(6, 1.0), rtol=1e-5)  # 2 (x - 1.5) + x^3 = 0 at x = 1


def test_integer_x0_is_optimised_in_float64_like_scipy():
    res = dg.optimize.minimize(lambda x: ((x - 0.5) ** 2).sum(), np.array([3, -2]))
    assert res.x.dtype == np.float64
    np.testing.assert_allclose(res.x.numpy(), [0.5, 0.5])


def test_args_reach_fun():
    res = dg.optimize.minimize(lambda x, a, b: ((x - a) ** 2).sum() * b, np.zeros(3), args=(2.0, 3.0))
    np.testing.assert_allclose(res.x.numpy(), [2.0, 2.0, 2.0], rtol=1e-6)


def test_bounds_are_respected_as_pairs_and_as_bounds_of_x0_shape():
    fun = lambda x: ((x - 3.0) ** 2).sum()  # noqa: E731  (unconstrained minimum: all 3)
    x0 = dg.zeros(2, 3, dtype="float64", chunks=(1, 2))
    upper = np.array([[1.0, 5.0, 2.0], [3.5, -1.0, 10.0]])
    seen = []
    res = dg.optimize.minimize(fun, x0, bounds=so.Bounds(-2.0, upper), callback=lambda x: seen.append(x.numpy()))
    assert res.success and seen
    assert all((s >= -2.0).all() and (s <= upper).all() for s in seen)
    np.testing.assert_allclose(res.x.numpy(), np.minimum(upper, 3.0), atol=1e-8)
    pairs = [(None, 1.0), (4.0, 6.0), (-1.0, 2.5), (0, None), (None, None), (3.5, 3.5)]
    res = dg.optimize.minimize(fun, x0, bounds=pairs)
    np.testing.assert_allclose(res.x.numpy().ravel(), [1.0, 4.0, 2.5, 3.0, 3.0, 3.5], atol=1e-8)


def test_callback_receives_x_as_tensor_like_x0():
    seen = []
    x0 = dg.zeros(6, dtype="float64", chunks=4)
    dg.optimize.minimize(coupled, x0, method="BFGS", callback=lambda x: seen.append(x))
    assert seen and all(isinstance(x, dg.Tensor) and x.chunks == x0.chunks for x in seen)


def test_methods_without_gradients_or_needing_full_hessian_raise_before_evaluating():
    def fun(x):
        raise AssertionError("fun must not be evaluated")
    with pytest.raises(ValueError, match="'dogleg' needs the full Hessian matrix: pass hess="):
        dg.optimize.minimize(fun, np.zeros(2), method="dogleg")
    with pytest.raises(ValueError, match="'Nelder-Mead' is not one daskgrad.optimize.minimize supports"):
        dg.optimize.minimize(fun, np.zeros(2), method="Nelder-Mead")


def test_fun_returning_a_non_scalar_raises_before_submitting():
    get, calls = counting_scheduler()
    with dask.config.set(scheduler=get), pytest.raises(ValueError, match=r"one element, got Tensor of shape \(3,\)"):
        dg.optimize.minimize(lambda x: x * 2, np.zeros(3))
    assert calls == []


def test_missing_scipy_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "scipy.optimize", None)
    with pytest.raises(ImportError, match=r"pip install 'daskgrad\[optimize\]'"):
        dg.optimize.minimize(rosen, ROSEN_X0)


# --------------------------------------------------------------------- dask-glm
def _logistic_data(n=20_000, d=5):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, d))
    y = (rng.random(n) < 1 / (1 + np.exp(-(X @ np.array([1.0, -2.0, 0.5, 0.0, 0.3]) + 0.7)))).astype(float)
    return da.from_array(X, chunks=(n // 4, d)), da.from_array(y, chunks=n // 4)


@pytest.mark.filterwarnings("ignore:Dask configuration key 'fuse_ave_width':FutureWarning")  # dask-glm's own
@pytest.mark.filterwarnings("ignore:scipy.optimize. The `disp` and `iprint`:DeprecationWarning")
@pytest.mark.parametrize("lamduh,intercept", [(0.0, False), (50.0, True)])
def test_logistic_regression_coefficients_match_dask_glm_lbfgs(lamduh, intercept):
    algorithms = pytest.importorskip("dask_glm.algorithms",
                                     reason="dask-glm is installed by `make test` (pip install dask-glm)")
    X, y = _logistic_data()
    n, d = X.shape
    # dask-glm's loss is the summed log-loss + lamduh * |beta|^2 / 2, on standardised columns unless
    # normalize=False; an intercept is a column of ones (penalised too)
    Xa = da.concatenate([X, da.ones((n, 1), chunks=(X.chunks[0], 1))], axis=1) if intercept else X
    regularizer = "l2" if lamduh else None
    ref = algorithms.lbfgs(Xa, y, regularizer=regularizer, lamduh=lamduh, tol=1e-10, normalize=False)

    Xg, yg = dg.from_array(X), dg.from_array(y)

    def loss(beta):  # the mean log-loss: the same minimiser as dask-glm's sum, better scaled for SciPy
        z = Xg @ beta[:d] + beta[d] if intercept else Xg @ beta
        return dg.binary_cross_entropy_with_logits(z, yg) + lamduh / (2 * n) * (beta ** 2).sum()
    res = dg.optimize.minimize(loss, np.zeros(d + intercept), options={"gtol": 1e-12, "ftol": 1e-15})
    assert res.success
    np.testing.assert_allclose(res.x.numpy(), ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


# last in the file: the module-scoped client stays up until the module ends, and dask-glm would use it
def test_runs_on_a_distributed_client(client):
    target = np.arange(6.0)
    res = dg.optimize.minimize(lambda x: ((x - target) ** 2).sum(), dg.zeros(6, dtype="float64", chunks=3))
    np.testing.assert_allclose(res.x.numpy(), target, rtol=1e-6)


# ------------------------------------------------------------ L-BFGS-B with x on the cluster
def _quadratic(x):
    return ((x - 2.0) ** 2 * dg.from_array(np.arange(1.0, 13.0), chunks=5)).sum()


def _tv_problem():
    rng = np.random.default_rng(0)
    blocks = np.repeat(np.repeat(rng.random((2, 2)) > 0.5, 4, 0), 4, 1)
    noisy = np.clip(blocks + 0.3 * rng.standard_normal((8, 8)), -0.2, 1.2)

    def tv_denoise(x):  # smoothed total variation: the minimiser sits on both bounds in places
        dx, dy = x[1:, :] - x[:-1, :], x[:, 1:] - x[:, :-1]
        fit = 0.5 * ((x - dg.from_array(noisy, chunks=5)) ** 2).sum()
        return fit + 0.2 * (((dx ** 2) + 1e-2).sqrt().sum() + ((dy ** 2) + 1e-2).sqrt().sum())
    return tv_denoise, np.full((8, 8), 0.5), so.Bounds(0.0, 1.0)


CLUSTER_PROBLEMS = {
    "bounded-quadratic": lambda: (_quadratic, np.random.default_rng(1).standard_normal(12),
                                  [(-1, 1.5)] * 6 + [(None, None)] * 6),
    "bounded-rosenbrock": lambda: (rosen, np.zeros(12), [(-2, 0.5)] * 6 + [(-2, 2)] * 6),
    "tv-denoise": _tv_problem,
}


@pytest.mark.parametrize("problem", list(CLUSTER_PROBLEMS))
def test_lbfgsb_on_the_cluster_reaches_scipys_minimizer_within_1_5x_its_iterations(problem):
    fun, x0, bounds = CLUSTER_PROBLEMS[problem]()
    opts = {"ftol": 1e-15, "gtol": 1e-9}
    ours = dg.optimize.minimize(fun, dg.from_array(x0, chunks=5), bounds=bounds, options={"on_cluster": True, **opts})
    scipy_ = dg.optimize.minimize(fun, dg.from_array(x0, chunks=5), bounds=bounds, options=opts)
    assert ours.success and scipy_.success
    x, xs = ours.x.detach().numpy(), scipy_.x.detach().numpy()
    assert np.max(np.abs(x - xs)) <= 1e-6 * np.max(np.abs(xs))
    assert ours.nit <= 1.5 * scipy_.nit
    np.testing.assert_allclose(ours.fun, scipy_.fun, rtol=1e-12)
    box = so.Bounds(*np.array(bounds, dtype=float).T) if isinstance(bounds, list) else bounds
    lb, ub = np.nan_to_num(box.lb, nan=-np.inf), np.nan_to_num(box.ub, nan=np.inf)
    assert np.all(x.ravel() >= lb) and np.all(x.ravel() <= ub)


def test_x0_over_the_host_limit_is_solved_on_the_cluster_and_x_comes_back_chunked_not_gathered():
    x0 = dg.from_array(np.linspace(-3, 3, 400), chunks=64)
    with dask.config.set({"daskgrad.optimize.host-limit": "1 KiB"}):  # 400 float64 are 3.2 KB
        res = dg.optimize.minimize(lambda x: ((x - 1.0) ** 2).sum() + (x ** 4).sum() / 4, x0,
                                   bounds=so.Bounds(0.0, 0.7))
    assert isinstance(res, so.OptimizeResult) and res.success and "hess_inv" not in res  # SciPy's would hold one
    assert isinstance(res.x, dg.Tensor) and res.x.chunks == x0.chunks and isinstance(res.jac, dg.Tensor)
    # one stored value per chunk: what the cluster holds, not a graph to recompute
    assert len(res.x.array.dask) == res.x.array.npartitions
    np.testing.assert_allclose(res.x.numpy(), np.full(400, 0.7))  # 2 (x - 1) + x^3 < 0 below 0.77: x at its bound


def test_lbfgsb_on_the_cluster_never_converts_chunks_to_host_arrays():
    from strict_array import to_strict  # fails like cupy on any implicit host conversion

    x0 = to_strict(dg.zeros(10, dtype="float64", chunks=4))
    res = dg.optimize.minimize(lambda x: ((x - 1.5) ** 2).sum() + (x ** 4).sum() / 4, x0,
                               bounds=so.Bounds(np.full(10, -1.0), 0.8), options={"on_cluster": True})
    assert res.success and type(res.x.array._meta) is type(x0.array._meta)
    np.testing.assert_allclose(res.x.compute().get(), np.full(10, 0.8))


def test_on_cluster_with_another_method_raises_before_evaluating():
    calls = []
    with pytest.raises(ValueError, match="needs method='L-BFGS-B'"):
        dg.optimize.minimize(lambda x: calls.append(x) or (x ** 2).sum(), np.ones(3), method="BFGS",
                             options={"on_cluster": True})
    assert not calls


def test_on_cluster_unknown_option_warns_as_scipy_and_scipys_options_apply():
    with pytest.warns(so.OptimizeWarning, match="^Unknown solver options: foo$"):
        res = dg.optimize.minimize(rosen, dg.from_array(ROSEN_X0, chunks=4), options={"on_cluster": True, "foo": 1,
                                                                                      "maxiter": 3})
    assert res.nit == 3 and res.status == 1 and not res.success
    assert res.message == "STOP: TOTAL NO. OF ITERATIONS REACHED LIMIT"


def test_lbfgsb_on_a_distributed_client_leaves_x_in_worker_memory(client):
    target = np.arange(12.0)
    res = dg.optimize.minimize(lambda x: ((x - target) ** 2).sum(), dg.zeros(12, dtype="float64", chunks=3),
                               bounds=so.Bounds(1.0, 8.0), options={"on_cluster": True})
    held = client.who_has()
    assert all(held.get(k) for k in dask.core.flatten(res.x.array.__dask_keys__()))
    np.testing.assert_allclose(res.x.numpy(), np.clip(target, 1.0, 8.0), rtol=1e-6)


# ------------------------------------------------------------------ NaN and Inf: never "CONVERGENCE"
def _sqrt_abs(lib, x):  # finite at x0 = 0, its gradient NaN there (0 * inf, as in torch)
    return lib.sqrt(lib.abs(x)).sum() + (x * x).sum()


NONFINITE = {
    "a NaN objective at x0": (lambda lib, x: (x * float("nan")).sum(), np.ones(4)),
    "a NaN gradient at x0": (_sqrt_abs, np.array([0.0, 1.0, 2.0, 0.5])),
    "a NaN at the first step's point": (lambda lib, x: lib.sqrt(x).sum() + ((x + 3) ** 2).sum(),
                                        np.array([0.5, 1.0, 2.0, 0.1])),
}


def _torch_value_and_grad(fn):
    """The oracle's objective: SciPy's minimize on NumPy vectors, value and gradient by torch."""
    torch = pytest.importorskip("torch")

    def value_and_grad(x):
        t = torch.tensor(x, requires_grad=True)
        value = fn(torch, t)
        value.backward()
        return value.item(), t.grad.numpy()
    return value_and_grad


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning", "ignore:divide by zero:RuntimeWarning")
@pytest.mark.parametrize("on_cluster", [False, True], ids=["through SciPy", "on the cluster"])
@pytest.mark.parametrize("case", list(NONFINITE))
def test_a_nan_objective_or_gradient_is_reported_abnormal_as_scipy_reports_it(case, on_cluster):
    fn, x0 = NONFINITE[case]
    want = so.minimize(_torch_value_and_grad(fn), x0, jac=True, method="L-BFGS-B")
    got = dg.optimize.minimize(lambda x: fn(dg, x), dg.from_array(x0, chunks=2), options={"on_cluster": on_cluster})
    assert want.message == "ABNORMAL: " and want.status == 2 and not want.success and np.isnan(want.fun)
    assert (got.message, got.status, got.success, got.nit) == (want.message, want.status, want.success, want.nit)
    # the NaN is in what it reports (SciPy's fun is the NaN of a last trial; here x's own value and jac)
    assert np.isnan(got.fun) or np.isnan(got.jac.numpy()).any()
    np.testing.assert_array_equal(got.x.numpy(), want.x)  # where it stopped: x0, never a NaN point


def test_an_infinite_objective_at_x0_is_no_success_on_the_cluster_either():
    def fn(lib, x):
        return (x * float("inf")).sum()

    want = so.minimize(_torch_value_and_grad(fn), np.ones(4), jac=True, method="L-BFGS-B", options={"maxfun": 30})
    got = dg.optimize.minimize(lambda x: fn(dg, x), dg.ones(4, dtype="float64", chunks=2),
                               options={"on_cluster": True, "maxfun": 30})
    assert not want.success and not got.success  # SciPy spends maxfun evaluations (status 1); here one is enough
    assert got.status == 2 and got.fun == np.inf and got.nfev == 1


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning", "ignore:divide by zero:RuntimeWarning")
def test_a_nan_gradient_met_mid_run_stops_the_cluster_run_as_scipy_stops():
    def fn(lib, x):  # NaN gradient beyond x = 3 (0 * inf), the objective finite: SciPy ends ABNORMAL
        return _sqrt_abs(lib, lib.where(x > 3, 0.0 * x, x - 5)) + ((x - 5) ** 2).sum()

    want = so.minimize(_torch_value_and_grad(fn), np.zeros(3), jac=True, method="L-BFGS-B")
    got = dg.optimize.minimize(lambda x: fn(dg, x), dg.zeros(3, dtype="float64", chunks=2),
                               options={"on_cluster": True})
    assert (got.message, got.status, got.success) == (want.message, want.status, want.success) == \
        ("ABNORMAL: ", 2, False)
    assert np.all(np.isfinite(got.x.numpy()))
