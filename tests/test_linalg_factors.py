"""daskgrad.linalg's LU, triangular solves and the composite functions (cond, matrix_rank,
multi_dot, cross, vecdot, tensorinv, tensorsolve, svd_compressed): torch's values, gradients and
errors; dask's for svd_compressed (gradchecks across chunkings are in tests/op_specs.py)."""
import re

import dask.array as da
import numpy as np
import pytest

import daskgrad as dg

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(18)


@pytest.fixture(autouse=True)
def _same_values_in_any_order():
    """Each test draws the same values however xdist orders the tests (tolerances were set on them)."""
    global RNG
    RNG = np.random.default_rng(18)


def _values(shape, complex_=False):
    v = RNG.standard_normal(shape)
    return v + 1j * RNG.standard_normal(shape) if complex_ else v


def _close(ours, theirs, tol=1e-9):
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().resolve_conj().numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("shape", [(4, 4), (5, 3), (3, 5), (2, 4, 4)], ids=["square", "tall", "wide", "batched"])
def test_lu_gives_torchs_factors_and_gradients(shape, complex_):
    A = _values(shape, complex_)
    wl, wu = _values(shape[:-1] + (min(shape[-2:]),)), _values(shape[:-2] + (min(shape[-2:]), shape[-1]))
    ta = torch.tensor(A, requires_grad=True)
    P, L, U = torch.linalg.lu(ta)
    ((L.abs() * torch.tensor(wl)).sum() + (U.abs() * torch.tensor(wu)).sum()).backward()
    a = dg.tensor(A, requires_grad=True, chunks=(2,) * len(shape))
    p, lo, u = dg.linalg.lu(a)
    ((dg.abs(lo) * wl).sum() + (dg.abs(u) * wu).sum()).backward()
    for ours, theirs in ((p, P), (lo, L), (u, U), (a.grad, ta.grad)):
        _close(ours, theirs)
    assert not p.requires_grad


def test_lu_matches_dask_and_scipy_convention():
    A = _values((5, 5))
    p, lo, u = dg.linalg.lu(dg.tensor(A, chunks=5))
    dp, dl, du = da.linalg.lu(da.from_array(A, chunks=5))
    for ours, theirs in ((p, dp), (lo, dl), (u, du)):
        np.testing.assert_allclose(ours.numpy(), theirs.compute(), atol=1e-12)
    np.testing.assert_allclose((p @ lo @ u).numpy(), A, atol=1e-12)


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("upper,left,unit", [(True, True, False), (False, True, True), (True, False, True),
                                             (False, False, False)])
def test_solve_triangular_gives_torchs_values_and_gradients_reading_one_triangle(upper, left, unit, complex_):
    A = _values((4, 4), complex_) + 3 * np.eye(4)
    B = _values((4, 3) if left else (3, 4), complex_)
    ta, tb = torch.tensor(A, requires_grad=True), torch.tensor(B, requires_grad=True)
    X = torch.linalg.solve_triangular(ta, tb, upper=upper, left=left, unitriangular=unit)
    (X.abs() ** 2).sum().backward()
    a, b = dg.tensor(A, requires_grad=True, chunks=2), dg.tensor(B, requires_grad=True, chunks=(3, 1))
    x = dg.linalg.solve_triangular(a, b, upper=upper, left=left, unitriangular=unit)
    (dg.abs(x) ** 2).sum().backward()
    _close(x, X)
    _close(a.grad, ta.grad)
    _close(b.grad, tb.grad)


def test_solve_triangular_takes_scipys_and_dasks_lower_spelling_with_a_vector():
    A, b = np.tril(_values((4, 4))) + 4 * np.eye(4), _values(4)
    ours = dg.linalg.solve_triangular(dg.tensor(A, chunks=2), dg.tensor(b, chunks=2), lower=True)
    theirs = da.linalg.solve_triangular(da.from_array(A, chunks=2), da.from_array(b, chunks=2), lower=True)
    np.testing.assert_allclose(ours.numpy(), theirs.compute())
    upper = dg.linalg.solve_triangular(dg.tensor(A.T), dg.tensor(b), lower=False)
    np.testing.assert_allclose(upper.numpy(), np.linalg.solve(A.T, b))


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_solve_gives_torchs_solution_and_full_matrix_gradient(upper):
    M = _values((4, 4))
    F = np.linalg.cholesky(M @ M.T + 4 * np.eye(4))
    F = F.T if upper else F
    B = _values((4, 2))
    tl, tb = torch.tensor(F, requires_grad=True), torch.tensor(B, requires_grad=True)
    X = torch.cholesky_solve(tb, tl, upper=upper)
    (X ** 2).sum().backward()
    lo, b = dg.tensor(F, requires_grad=True), dg.tensor(B, requires_grad=True, chunks=(4, 1))
    x = dg.linalg.cholesky_solve(b, lo, upper=upper)
    (x ** 2).sum().backward()
    _close(x, X)
    _close(lo.grad, tl.grad)
    _close(b.grad, tb.grad)


def test_multi_dot_cross_vecdot_give_torchs_values_and_gradients():
    shapes = [(3,), (3, 5), (5, 2), (2, 4), (4,)]
    mats = [_values(s) for s in shapes]
    ts = [torch.tensor(m, requires_grad=True) for m in mats]
    torch.linalg.multi_dot(ts).backward()
    ds = [dg.tensor(m, requires_grad=True, chunks=2) for m in mats]
    out = dg.linalg.multi_dot(ds)
    out.backward()
    _close(out, torch.linalg.multi_dot([t.detach() for t in ts]))
    for d, t in zip(ds, ts):
        _close(d.grad, t.grad)
    X, Y = _values((2, 3, 4), True), _values((1, 3, 4), True)
    tx, ty = torch.tensor(X, requires_grad=True), torch.tensor(Y, requires_grad=True)
    x, y = dg.tensor(X, requires_grad=True), dg.tensor(Y, requires_grad=True)
    for f in (lambda m, a, b: m.linalg.cross(a, b, dim=1), lambda m, a, b: m.linalg.vecdot(a, b, dim=1)):
        r = f(torch, tx, ty)
        r.abs().sum().backward()
        ours = f(dg, x, y)
        dg.abs(ours).sum().backward()
        _close(ours, r)
        _close(x.grad, tx.grad)
        _close(y.grad, ty.grad)


@pytest.mark.parametrize("p", [None, 2, -2, "fro", "nuc", 1, -1, np.inf, -np.inf])
def test_cond_gives_torchs_value_and_the_gradient_of_its_formula(p):
    A = _values((4, 4))
    ta = torch.tensor(A, requires_grad=True)
    # torch's own backward of cond for the norm orders trips over an in-place inverse: the same formula
    ref = (torch.linalg.cond(ta, p) if p in (None, 2, -2) else
           torch.linalg.matrix_norm(ta, p) * torch.linalg.matrix_norm(torch.linalg.inv(ta), p))
    ref.backward()
    a = dg.tensor(A, requires_grad=True, chunks=2)
    c = dg.linalg.cond(a, p)
    c.backward()
    _close(c, torch.linalg.cond(torch.tensor(A), p))
    _close(a.grad, ta.grad)


def test_matrix_rank_counts_singular_values_as_torch_and_numpy_and_has_no_gradient():
    R = _values((6, 2)) @ _values((2, 4))
    r = dg.linalg.matrix_rank(dg.tensor(R, requires_grad=True, chunks=(2, 4)))
    assert not r.requires_grad and r.dtype == np.int64
    assert int(r.numpy()) == torch.linalg.matrix_rank(torch.tensor(R)).item() == np.linalg.matrix_rank(R) == 2
    assert int(dg.linalg.matrix_rank(dg.tensor(R), atol=1e30).numpy()) == 0
    batch = np.stack([R, np.eye(6)[:, :4]])
    np.testing.assert_array_equal(dg.linalg.matrix_rank(dg.tensor(batch)).numpy(), [2, 4])
    sym = R @ R.T
    assert int(dg.linalg.matrix_rank(dg.tensor(sym), hermitian=True).numpy()) == 2


def test_tensorinv_and_tensorsolve_give_torchs_values_and_gradients():
    T, B = _values((4, 6, 8, 3)), _values((4, 6))
    tt, tb = torch.tensor(T, requires_grad=True), torch.tensor(B, requires_grad=True)
    (torch.linalg.tensorinv(tt, ind=2).sum() + torch.linalg.tensorsolve(tt, tb).sum()).backward()
    t, b = dg.tensor(T, requires_grad=True, chunks=2), dg.tensor(B, requires_grad=True, chunks=2)
    (dg.linalg.tensorinv(t, ind=2).sum() + dg.linalg.tensorsolve(t, b).sum()).backward()
    _close(t.grad, tt.grad, 1e-7)
    _close(b.grad, tb.grad, 1e-7)


@pytest.mark.parametrize("iterator,power", [("power", 0), ("power", 2), ("QR", 1)])
def test_svd_compressed_gives_dasks_factors_for_the_same_seed(iterator, power):
    A = _values((40, 12))
    theirs = da.linalg.svd_compressed(da.from_array(A, chunks=(10, 12)), 3, iterator=iterator,
                                      n_power_iter=power, seed=0)
    ours = dg.linalg.svd_compressed(dg.tensor(A, chunks=(10, 12)), 3, iterator=iterator, n_power_iter=power)
    for o, t in zip(ours, theirs):
        np.testing.assert_allclose(o.numpy(), t.compute(), atol=1e-10)


def test_svd_compressed_of_a_full_rank_matrix_has_the_exact_singular_value_gradient():
    # a sketch of min(m, n) = 8 columns (dask's compression level: at least 20, at most n) of a rank-8
    # matrix spans its range: the singular values and their gradient are exact, and the sketch's QR,
    # which the gradient passes through, has a well-conditioned R
    A = np.random.default_rng(3).standard_normal((30, 8))
    ta = torch.tensor(A, requires_grad=True)
    torch.linalg.svdvals(ta)[:3].sum().backward()
    a = dg.tensor(A, requires_grad=True, chunks=(10, 8))
    dg.linalg.svd_compressed(a, 3)[1].sum().backward()
    _close(a.grad, ta.grad, 1e-10)


def test_svd_compressed_of_a_low_rank_matrix_raises_in_backward_where_the_sketch_has_no_derivative():
    # rank 3 sketched by 8 columns: the sketch's R is singular, and the QR of a rank-deficient matrix has no
    # derivative (torch's is R^{-H} of that R: inf, or roundoff amplified 1e15 times): a clear error, not noise
    rng = np.random.default_rng(4)
    a = dg.tensor(rng.standard_normal((30, 3)) @ rng.standard_normal((3, 8)), requires_grad=True, chunks=(10, 8))
    s = dg.linalg.svd_compressed(a, 3)[1]
    np.testing.assert_allclose(s.detach().numpy(), np.linalg.svd(a.detach().numpy(), compute_uv=False)[:3],
                               rtol=1e-12)  # the values are exact: the sketch spans the range
    with pytest.raises(dg.linalg.LinAlgError, match="R is singular .A has rank below its number of columns"):
        s.sum().backward()
    assert a.grad is None
    with pytest.raises(dg.linalg.LinAlgError, match="torch.linalg.solve: The solver failed because the input "
                                                    "matrix is singular."):
        dg.linalg.solve(dg.zeros((3, 3), dtype=dg.float64), dg.ones(3, dtype=dg.float64)).numpy()
    assert issubclass(dg.linalg.LinAlgError, RuntimeError)  # as torch.linalg.LinAlgError


def test_new_linalg_errors_are_torchs_and_raise_before_anything_is_submitted():
    A, v = dg.ones((3, 3)), dg.ones(3)
    cases = [
        (lambda: dg.linalg.lu(v), RuntimeError, "linalg.lu: Expected tensor with 2 or more dimensions. Got size: [3] "
                                                "instead"),
        (lambda: dg.linalg.solve_triangular(A, dg.ones((3, 2))), TypeError,
         'linalg_solve_triangular() missing 1 required positional arguments: "upper"'),
        (lambda: dg.linalg.solve_triangular(A, v, upper=True), RuntimeError,
         "linalg.solve_triangular: The input tensor B must have at least 2 dimensions."),
        (lambda: dg.linalg.solve_triangular(A, dg.ones((4, 2)), upper=True), RuntimeError,
         "linalg.solve_triangular: Incompatible shapes of A and B for the equation AX = B (3x3 and 4x2)"),
        (lambda: dg.linalg.solve_triangular(dg.ones((3, 4)), dg.ones((3, 2)), upper=True), RuntimeError,
         "linalg.solve_triangular: A must be batches of square matrices, but they are 3 by 4 matrices"),
        (lambda: dg.linalg.cross(dg.ones((3, 2)), dg.ones((3, 2))), RuntimeError,
         "linalg.cross: inputs dimension -1 must have length 3. Got 2 and 2"),
        (lambda: dg.linalg.multi_dot([A]), RuntimeError, "multi_dot(): expected at least 2 tensors but got 1"),
        (lambda: dg.linalg.multi_dot([A, dg.ones((2, 3))]), RuntimeError,
         "multi_dot(): tensors 0 and 1 with shapes [3, 3] and [2, 3] cannot be multiplied"),
        (lambda: dg.linalg.matrix_rank(v), RuntimeError,
         "torch.linalg.matrix_rank: The input tensor input must have at least 2 dimensions."),
        (lambda: dg.linalg.cond(dg.ones((3, 4)), 1), RuntimeError,
         "linalg.cond(ord=1): A must be batches of square matrices, but they are 3 by 4 matrices"),
        (lambda: dg.linalg.cholesky_solve(dg.ones((4, 2)), A), RuntimeError,
         "Incompatible matrix sizes for cholesky_solve: each A matrix is 3 by 3 but each b matrix is 4 by 2"),
    ]
    for call, kind, msg in cases:
        with pytest.raises(kind, match="^" + re.escape(msg) + "$"):
            call()


def test_building_the_new_ops_and_their_backward_graph_computes_nothing():
    x = dg.tensor(_values((12, 4)), chunks=(4, 4), requires_grad=True)
    sq = x.mT @ x + 4 * dg.tensor(np.eye(4))
    with dg.testing.submissions() as subs:
        outs = [*dg.linalg.lu(x)[1:], dg.linalg.solve_triangular(sq, x.mT, upper=True),
                dg.linalg.cholesky_solve(x.mT, dg.linalg.cholesky(sq)), dg.linalg.cond(x), dg.linalg.det(sq),
                dg.linalg.multi_dot([x, sq, x.mT]), *dg.linalg.svd_compressed(x, 2), dg.linalg.lu_factor(x).LU,
                dg.linalg.lu_solve(*dg.linalg.lu_factor(sq), x.mT), dg.abs(dg.linalg.eig(sq).eigenvectors),
                dg.linalg.matrix_exp(sq / 8)]
        loss = sum((o * o).sum() for o in outs)
        (g,) = dg.grad(loss, [x], lazy=True)
        dg.linalg.matrix_rank(x)
    assert sum(subs.values()) == 0
    assert np.isfinite(g.numpy()).all()


def test_solve_triangular_gradient_reaches_a_alone_when_b_is_a_constant():
    A, B = np.triu(_values((3, 3))) + 3 * np.eye(3), _values((3, 2))
    ta = torch.tensor(A, requires_grad=True)
    torch.linalg.solve_triangular(ta, torch.tensor(B), upper=True).sum().backward()
    a = dg.tensor(A, requires_grad=True)
    dg.linalg.solve_triangular(a, dg.tensor(B), upper=True).sum().backward()
    _close(a.grad, ta.grad)


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("shape", [(4, 4), (5, 3), (3, 5), (2, 4, 4)], ids=["square", "tall", "wide", "batched"])
def test_lu_factor_gives_torchs_packed_factors_pivots_and_gradient(shape, complex_):
    A = _values(shape, complex_)
    w = _values(shape)
    ta = torch.tensor(A, requires_grad=True)
    LU, piv = torch.linalg.lu_factor(ta)
    (LU.abs() * torch.tensor(w)).sum().backward()
    a = dg.tensor(A, requires_grad=True, chunks=(2,) * len(shape))
    lu, p = dg.linalg.lu_factor(a)
    (dg.abs(lu) * w).sum().backward()
    _close(lu, LU)
    _close(a.grad, ta.grad)
    np.testing.assert_array_equal(p.numpy(), piv.numpy())
    assert p.dtype == np.int32 and not p.requires_grad
    ex = dg.linalg.lu_factor_ex(a)
    np.testing.assert_array_equal(ex.info.numpy(), torch.linalg.lu_factor_ex(ta).info.numpy())


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("left,adjoint", [(True, False), (True, True), (False, False), (False, True)])
def test_lu_solve_gives_torchs_solution_and_gradients_to_lu_and_b(left, adjoint, complex_):
    A = _values((2, 5, 5), complex_)
    B = _values((2, 5, 3) if left else (2, 3, 5), complex_)
    w = _values(B.shape, complex_)
    LU0, piv0 = torch.linalg.lu_factor(torch.tensor(A))
    tlu, tb = LU0.clone().requires_grad_(), torch.tensor(B, requires_grad=True)
    tx = torch.linalg.lu_solve(tlu, piv0, tb, left=left, adjoint=adjoint)
    torch.real(tx * torch.tensor(w)).sum().backward()
    lu, b = dg.tensor(LU0.numpy(), requires_grad=True), dg.tensor(B, requires_grad=True, chunks=(1, 2, 2))
    x = dg.linalg.lu_solve(lu, dg.tensor(piv0.numpy()), b, left=left, adjoint=adjoint)
    dg.real(x * w).sum().backward()
    _close(x, tx.resolve_conj())
    _close(lu.grad, tlu.grad.resolve_conj())
    _close(b.grad, tb.grad.resolve_conj())


def test_lu_solve_takes_scipys_spelling_with_torchs_pivots():
    scipy_linalg = pytest.importorskip("scipy.linalg")
    A, b = _values((4, 4), True), _values((4,), True)
    factors = dg.linalg.lu_factor(dg.tensor(A))
    for trans in (0, 1, 2):
        np.testing.assert_allclose(dg.linalg.lu_solve(factors, dg.tensor(b), trans=trans).numpy(),
                                   scipy_linalg.lu_solve(scipy_linalg.lu_factor(A), b, trans=trans), rtol=1e-10)


def test_lu_solve_errors_are_torchs_and_raise_before_anything_is_submitted():
    LU, piv = dg.linalg.lu_factor(dg.tensor(_values((3, 3))))
    cases = [
        (lambda: dg.linalg.lu_factor(dg.ones(3)), "torch.lu_factor: Expected tensor with 2 or more dimensions. Got "
                                                  "size: [3] instead"),
        (lambda: dg.linalg.lu_solve(dg.ones((3, 4)), piv, dg.ones((3, 1))),
         "torch.linalg.lu_solve: A must be batches of square matrices, but they are 3 by 4 matrices"),
        (lambda: dg.linalg.lu_solve(LU, piv, dg.ones((4, 1))),
         "linalg.lu_solve: Incompatible shapes of A and B for the equation AX = B (3x3 and 4x1)"),
        (lambda: dg.linalg.lu_solve(LU, piv, dg.ones((1, 2)), left=False),
         "linalg.lu_solve: Incompatible shapes of A and B for the equation XA = B (3x3 and 1x2)"),
        (lambda: dg.linalg.lu_solve(LU, piv, dg.ones(3)), "linalg.lu_solve: The input tensor B must have at least 2 "
                                                           "dimensions."),
        (lambda: dg.linalg.lu_solve(LU, piv[:2], dg.ones((3, 1))),
         "linalg.lu_solve: Number of pivots per batch should be same as the dimension of the matrix"),
        (lambda: dg.linalg.lu_solve(LU, piv.astype(np.int64), dg.ones((3, 1))),
         "linalg.lu_solve: pivots should be a Tensor of scalar type torch.int32"),
    ]
    cases += [(lambda f=f: getattr(dg.linalg, f)(dg.ones((3, 4))),
               f"linalg.{f}: A must be batches of square matrices, but they are 3 by 4 matrices")
              for f in ("eig", "eigvals", "matrix_exp")]
    with dg.testing.submissions() as subs:
        for call, msg in cases:
            with pytest.raises(RuntimeError, match="^" + re.escape(msg) + "$"):
                call()
    assert sum(subs.values()) == 0


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
def test_eig_gives_torchs_eigenpairs_and_gradients(complex_):
    A = _values((3, 4, 4), complex_)
    wl, wv = _values((3, 4), True), _values((3, 4, 4))
    ta = torch.tensor(A, requires_grad=True)
    tL, tV = torch.linalg.eig(ta)
    (torch.real(tL * torch.tensor(wl)).sum() + (tV.abs() * torch.tensor(wv)).sum()).backward()
    a = dg.tensor(A, requires_grad=True, chunks=(1, 2, 2))
    L, V = dg.linalg.eig(a)
    (dg.real(L * wl).sum() + (dg.abs(V) * wv).sum()).backward()
    _close(L, tL)
    _close(V, tV)
    _close(a.grad, ta.grad)
    assert L.dtype == np.complex128 and a.grad.dtype == A.dtype
    assert type(L.grad_fn).__name__ == type(V.grad_fn).__name__ == "LinalgEigBackward0"
    _close(dg.linalg.eigvals(a), torch.linalg.eigvals(ta))


def test_eig_refuses_a_loss_that_depends_on_the_eigenvector_phases_as_torch():
    A = np.array([[1.0, -1.0], [1.0, 1.0]])
    ta = torch.tensor(A, requires_grad=True)
    with pytest.raises(RuntimeError) as theirs:
        torch.linalg.eig(ta)[1].real.sum().backward()
    a = dg.tensor(A, requires_grad=True)
    with pytest.raises(RuntimeError) as ours:
        dg.real(dg.linalg.eig(a).eigenvectors).sum().backward()
    assert str(ours.value) == str(theirs.value)
    assert a.grad is None


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
def test_matrix_exp_gives_torchs_values_and_first_and_second_derivatives(complex_):
    A = _values((2, 4, 4), complex_) * np.array([0.3, 3.0])[:, None, None]  # one norm below theta_13, one above
    w = _values(A.shape, complex_)
    ta = torch.tensor(A, requires_grad=True)
    (tg,) = torch.autograd.grad(torch.real(torch.linalg.matrix_exp(ta) * torch.tensor(w)).sum(), ta, create_graph=True)
    (th,) = torch.autograd.grad(torch.real(tg * torch.tensor(w)).sum(), ta)
    a = dg.tensor(A, requires_grad=True, chunks=(1, 2, 2))
    x = dg.linalg.matrix_exp(a)
    (g,) = dg.autograd.grad(dg.real(x * w).sum(), a, create_graph=True)
    (h,) = dg.autograd.grad(dg.real(g * w).sum(), a)
    _close(x, torch.linalg.matrix_exp(ta), 1e-12)
    _close(g, tg, 1e-11)
    _close(h, th, 1e-10)
    assert type(x.grad_fn).__name__ == "LinalgMatrixExpBackward0"


def test_matrix_exp_of_large_norms_and_zero_matches_scipy():
    scipy_linalg = pytest.importorskip("scipy.linalg")
    A = np.stack([_values((3, 3)) * 40, np.zeros((3, 3)), np.diag([1.0, -2.0, 0.5])])
    ours = dg.linalg.matrix_exp(dg.tensor(A)).numpy()
    for o, m in zip(ours, A):
        expected = scipy_linalg.expm(m)
        # many squarings of a large norm: both Pade-13 methods agree to ~1e-11 there
        np.testing.assert_allclose(o, expected, rtol=1e-10, atol=1e-10 * np.abs(expected).max())


def test_tsqr_sfqr_and_the_compression_helpers_are_dasks():
    A = _values((40, 5))
    x = dg.tensor(A, chunks=(10, 5))
    q, r = dg.linalg.tsqr(x)
    dq, dr = da.linalg.tsqr(da.from_array(A, chunks=(10, 5)))
    np.testing.assert_allclose(np.abs(q.numpy()), np.abs(dq.compute()), atol=1e-12)
    np.testing.assert_allclose(np.abs(r.numpy()), np.abs(dr.compute()), atol=1e-12)
    u, s, vh = dg.linalg.tsqr(x, compute_svd=True)
    np.testing.assert_allclose(s.numpy(), np.linalg.svd(A, compute_uv=False), rtol=1e-12)
    q, r = dg.linalg.sfqr(dg.tensor(A.T, chunks=(5, 10)))
    np.testing.assert_allclose((q @ r).numpy(), A.T, atol=1e-12)
    assert dg.linalg.compression_level(40, 3) == da.linalg.compression_level(40, 3)
    c = dg.linalg.compression_matrix(x, 3, seed=1)
    dc = da.linalg.compression_matrix(da.from_array(A, chunks=(10, 5)), 3, seed=1)
    assert c.shape == dc.shape
    np.testing.assert_allclose(np.abs(c.numpy() @ A), np.abs(dc.compute() @ A), atol=1e-10)  # same subspace basis
