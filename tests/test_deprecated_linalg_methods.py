"""torch's deprecated linear-algebra Tensor methods (``qr``, ``svd``, ``lu``, ``lu_solve``) and ``orgqr``,
``to_dense``: results, result types, warnings and gradients against torch on the same values, over one
chunk and several."""
import re
import warnings

import numpy as np
import pytest

import daskgrad as dg

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _warn_as_if_first():
    """Each test sees the warnings a process's first call gives (torch's and daskgrad's: once a process)."""
    from daskgrad.ops import methods
    torch.set_warn_always(True)
    methods._warned_once.clear()
    yield
    torch.set_warn_always(False)


def _warned(fn):
    from daskgrad.ops import methods
    methods._warned_once.clear()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = fn()
    return out, [re.sub(r" \(Triggered internally at .*\)$", "", str(w.message), flags=re.S) for w in seen]


def _pair(shape, chunks, seed=0):
    a = np.random.default_rng(seed).standard_normal(shape)
    return dg.from_array(a, chunks=chunks), torch.from_numpy(a)


@pytest.mark.parametrize("chunks", [-1, (2, 3), (3, 3)])
@pytest.mark.parametrize("some", [True, False])
def test_qr_is_torch_s_warned_named_and_a_factorization(chunks, some):
    x, t = _pair((6, 3), chunks)
    if not some and chunks != -1:  # (a complete Q of a row-chunked matrix: linalg.qr's own limit)
        return
    (q, r), words = _warned(lambda: x.qr(some=some))
    (tq, tr), twords = _warned(lambda: t.qr(some=some))
    assert words == twords and type(x.qr(some)).__name__ == "qr" and x.qr(some).Q is not None
    assert q.shape == tuple(tq.shape) and r.shape == tuple(tr.shape)
    np.testing.assert_allclose((q @ r).numpy(), t.numpy(), atol=1e-12)
    np.testing.assert_allclose(np.abs(r.numpy()), np.abs(tr.numpy()), atol=1e-12)  # (signs: a valid choice)


@pytest.mark.parametrize("chunks", [-1, (2, 3)])
def test_svd_gives_v_not_vh_and_torch_s_singular_values_and_gradients(chunks):
    x, t = _pair((5, 3), chunks)
    x.requires_grad_()
    t.requires_grad_()
    u, s, v = x.svd()
    tu, ts, tv = t.svd()
    assert type(x.svd()).__name__ == "svd" and x.svd().V.shape == tuple(tv.shape) == (3, 3)
    np.testing.assert_allclose(s.detach().numpy(), ts.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(((u * s) @ v.T).detach().numpy(),
                               t.detach().numpy(), atol=1e-12)
    (s.sum() + ((u * s) @ v.T * 2.0).sum()).backward()
    (ts.sum() + ((tu * ts) @ tv.T * 2.0).sum()).backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_svd_without_uv_gives_zero_u_and_v_of_torch_s_shapes():
    x, t = _pair((4, 3), -1)
    got, want = x.svd(compute_uv=False), t.svd(compute_uv=False)
    for a, b in zip(got, want):
        assert a.shape == tuple(b.shape) and a.dtype == b.numpy().dtype
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12)


@pytest.mark.parametrize("batch", [(), (2,)])
def test_lu_and_lu_solve_are_torch_s_with_its_warnings(batch):
    x, t = _pair(batch + (4, 4), -1, seed=3)
    b, tb = _pair(batch + (4, 2), -1, seed=4)
    (lu, piv), words = _warned(lambda: x.lu())
    (tlu, tpiv), twords = _warned(lambda: t.lu())
    assert words == twords and type(x.lu()) is tuple
    np.testing.assert_allclose(lu.numpy(), tlu.numpy(), rtol=1e-12)
    np.testing.assert_array_equal(piv.numpy(), tpiv.numpy())
    lu3, tlu3 = x.lu(get_infos=True), t.lu(get_infos=True)
    assert len(lu3) == 3 and lu3[2].dtype == tlu3[2].numpy().dtype
    np.testing.assert_array_equal(lu3[2].numpy(), tlu3[2].numpy())
    sol, words = _warned(lambda: b.lu_solve(lu, piv))
    tsol, twords = _warned(lambda: tb.lu_solve(tlu, tpiv))
    assert words == twords
    np.testing.assert_allclose(sol.numpy(), tsol.numpy(), rtol=1e-10)
    with pytest.raises(RuntimeError, match="LU without pivoting is not implemented on the CPU"):
        x.lu(pivot=False)
    with pytest.raises(RuntimeError, match="LU without pivoting is not implemented on the CPU"):
        t.lu(pivot=False)


def test_orgqr_is_householder_product_and_to_dense_is_the_tensor_itself():
    x, t = _pair((5, 3), -1)
    tau, ttau = _pair((3,), -1, seed=9)
    np.testing.assert_allclose(x.orgqr(tau).numpy(), t.orgqr(ttau).numpy(), rtol=1e-12)
    assert x.to_dense() is x and t.to_dense() is t
    assert x.to_dense(dtype=dg.float32).dtype == t.to_dense(dtype=torch.float32).numpy().dtype


def test_a_deprecated_method_warns_once_a_process_as_torch_s():
    from daskgrad.ops import methods
    torch.set_warn_always(False)
    x = dg.eye(3, dtype="float64")
    methods._warned_once.clear()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        x.qr()
        x.qr()
        x.lu()
    assert len(seen) == 2
