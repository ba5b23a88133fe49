"""First and second derivatives at degenerate points (a constant's std, 0 under sqrt, abs, norms
and powers, ties and edges of where/max/clip, zeros of prod, singular matrices of det), each the
number torch's autograd gives with ``create_graph=True``, NaN and inf included where torch's are.
Where torch's second derivative is a NaN its own formula makes (0 * inf inside a masked branch)
and the derivative of the same function along every line is 0, daskgrad gives 0: those cases
say so by name.  det's second derivative at low-rank and singular complex matrices is wrong in
torch; daskgrad's is checked against central differences instead."""
import numpy as np
import pytest

import daskgrad as dg

torch = pytest.importorskip("torch")

Z3 = np.zeros(3)


def _second(lib, g, x):
    """The gradient of ``g.sum()``, ``None`` where unused, or the error's words where the first
    derivative has no graph (a piecewise-constant one: torch raises, and so must we)."""
    try:
        (h,) = lib.autograd.grad(g.sum(), x, allow_unused=True)
    except RuntimeError as e:
        return str(e)
    return None if h is None else h.numpy(force=True) if lib is torch else h.numpy()


def _both(f, x0):
    """(torch's, ours) first and second derivatives of ``f(x).sum()`` at ``x0``."""
    tx = torch.tensor(x0, requires_grad=True)
    (tg,) = torch.autograd.grad(f(torch, tx).sum(), tx, create_graph=True)
    x = dg.tensor(x0, requires_grad=True, chunks=2)
    (g,) = dg.autograd.grad(f(dg, x).sum(), x, create_graph=True)
    return (tg.detach().numpy(), _second(torch, tg, tx)), (g.detach().numpy(), _second(dg, g, x))


def _assert_same(theirs, ours):
    for t, o in zip(theirs, ours):
        if t is None or isinstance(t, str):
            assert o == t
        else:
            np.testing.assert_allclose(o, t, rtol=1e-12, atol=1e-12, equal_nan=True)


def _row_prods(m, x):
    return x.reshape(2, 3).prod(1) if m is torch else dg.reshape(x, (2, 3)).prod(axis=1)


CASES = {
    "std_of_a_constant": (lambda m, x: x.std(), np.full(3, 2.0)),
    "var_of_a_constant": (lambda m, x: x.var(), np.full(3, 2.0)),
    "std_of_constant_rows": (lambda m, x: (x.reshape(2, 2).std(1) if m is torch else
                                           dg.reshape(x, (2, 2)).std(axis=1)), np.array([1.0, 1.0, -3.0, -3.0])),
    "sqrt_at_0": (lambda m, x: m.sqrt(x), Z3),
    "abs_at_0": (lambda m, x: m.abs(x), Z3),
    "abs_squared_at_0": (lambda m, x: m.abs(x) ** 2, Z3),
    "vector_norm_1_at_0": (lambda m, x: m.linalg.vector_norm(x, 1), Z3),
    "vector_norm_3_at_0": (lambda m, x: m.linalg.vector_norm(x, 3), Z3),
    "vector_norm_inf_at_0": (lambda m, x: m.linalg.vector_norm(x, float("inf")), Z3),
    "x_pow_float_2_at_0": (lambda m, x: x ** 2.0, Z3),
    "x_pow_int_2_at_0": (lambda m, x: x ** 2, Z3),
    "x_pow_3_at_0": (lambda m, x: x ** 3.0, Z3),
    "x_pow_1_5_at_0": (lambda m, x: x ** 1.5, Z3),
    "x_pow_0_5_at_0": (lambda m, x: x ** 0.5, Z3),
    "x_pow_0_at_0": (lambda m, x: x ** 0.0, Z3),
    "x_pow_1_at_0": (lambda m, x: x ** 1.0, Z3),
    "x_pow_x_at_0": (lambda m, x: m.pow(x, x), Z3),
    "where_sqrt_edge": (lambda m, x: m.where(x > 0, m.sqrt(x), x), Z3),
    "where_square_edge": (lambda m, x: m.where(x > 0, x ** 2, m.zeros_like(x)), np.array([0.0, 1.0, -1.0])),
    "relu_at_0": (lambda m, x: torch.relu(x) if m is torch else dg.relu(x), Z3),
    "maximum_tie": (lambda m, x: m.maximum(x, m.zeros_like(x)), Z3),
    "clip_edges": (lambda m, x: torch.clamp(x, 0.0, 1.0) if m is torch else dg.clip(x, 0.0, 1.0),
                   np.array([0.0, 1.0, 0.5])),
    "max_tie": (lambda m, x: x.max(), np.array([1.0, 1.0, 0.0])),
    "log_at_0": (lambda m, x: m.log(x), Z3),
    "x_log_x_at_0": (lambda m, x: x * m.log(x), Z3),
    "exp_abs_at_0": (lambda m, x: m.exp(m.abs(x)), Z3),
    "hypot_at_0": (lambda m, x: m.hypot(x, x), Z3),
    "sign_at_0": (lambda m, x: m.sign(x), Z3),
    "prod_with_one_zero": (lambda m, x: m.prod(x), np.array([0.0, 3.0, 2.0])),
    "prod_with_two_zeros": (lambda m, x: m.prod(x), np.array([0.0, 0.0, 2.0])),
    "prod_with_three_zeros": (lambda m, x: m.prod(x), np.array([0.0, 0.0, 0.0, 2.0])),
    "prod_of_rows_with_zeros": (lambda m, x: _row_prods(m, x) * _row_prods(m, x),
                                np.array([0.0, 3.0, 2.0, 0.0, 0.0, 5.0])),
    "masked_reciprocal_at_0": (lambda m, x: m.where(x == 0, 0.0, 1 / x), Z3),
    "logsumexp_of_minus_infs": (lambda m, x: torch.logsumexp(x, 0) if m is torch else dg.logsumexp(x, 0),
                                np.array([-np.inf, -np.inf])),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_first_and_second_derivatives_at_degenerate_points_are_torchs(name):
    f, x0 = CASES[name]
    theirs, ours = _both(f, x0)
    _assert_same(theirs, ours)


def _det_of(n):
    return lambda m, x: m.linalg.det(x.reshape(n, n) if m is torch else dg.reshape(x, (n, n)))


# torch's det gradient at a singular matrix is the adjugate (through the SVD) when it builds a graph;
# its plain backward() gives 0 where det is exactly 0 (g * det = 0 solved against A^H), which is not
# the derivative.  daskgrad gives the adjugate in both cases, so these compare with create_graph=True.
@pytest.mark.parametrize("matrix,finite", [
    (np.array([[1.0, 2.0], [2.0, 4.0]]), True),                             # rank 1
    (np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]]), True),  # rank 2
    (np.eye(3), True),
    (np.array([[2.0, 1.0], [1.0, 3.0]]), True),
], ids=["rank1", "rank2", "identity", "invertible"])
def test_det_derivatives_at_singular_matrices_are_torchs(matrix, finite):
    n = matrix.shape[0]
    theirs, ours = _both(_det_of(n), matrix.ravel())
    _assert_same(theirs, ours)
    assert np.isfinite(ours[0]).all()
    assert np.isfinite(ours[1]).all() == finite


def _adjugate(a):
    """adj(A) from its cofactors (NumPy's det of each minor): exact at every rank."""
    n = a.shape[0]
    out = np.zeros_like(a)
    for i in range(n):
        for j in range(n):
            out[j, i] = (-1) ** (i + j) * np.linalg.det(np.delete(np.delete(a, i, 0), j, 1))
    return out


def _low_rank(rng, n, r, complex_=False):
    def draw(*shape):
        return rng.normal(size=shape) + (1j * rng.normal(size=shape) if complex_ else 0)
    return draw(n, r) @ draw(r, n) if r else np.zeros((n, n), complex if complex_ else float)


# the first derivative of Re(c det A) is conj(c adj(A)^T), a polynomial in A: its derivative (the
# second derivative of det) exists at every rank.  torch's comes from the SVD and is wrong at rank
# n-2 and below (real) and at singular complex matrices (a defect of torch's, not copied); daskgrad's
# is measured against central differences of the cofactor adjugate.
@pytest.mark.parametrize("n,rank,complex_", [
    (3, 1, False), (4, 2, False), (4, 1, False), (5, 3, False), (5, 2, False), (3, 0, False),
    (2, 1, True), (3, 2, True), (4, 3, True), (4, 2, True), (3, 0, True)])
def test_det_second_derivative_at_low_rank_and_complex_singular_matrices_is_exact(n, rank, complex_):
    rng = np.random.default_rng(n * 10 + rank)
    A = _low_rank(rng, n, rank, complex_)
    W, E = _low_rank(rng, n, n, complex_), _low_rank(rng, n, n, complex_)
    c = 0.7 - 0.4j if complex_ else 1.0
    a = dg.tensor(A, requires_grad=True, chunks=2)
    (g,) = dg.autograd.grad(dg.real(dg.linalg.det(a) * c), a, create_graph=True)

    def first(m):
        return np.conj(c * _adjugate(m).T)

    np.testing.assert_allclose(g.detach().numpy(), first(A), atol=1e-10)
    (h,) = dg.autograd.grad(dg.real(dg.conj(dg.tensor(W)) * g).sum(), a)

    def phi(m):
        return np.real(np.sum(np.conj(W) * first(m)))

    step = 1e-5
    central = (phi(A + step * E) - phi(A - step * E)) / (2 * step)
    np.testing.assert_allclose(np.real(np.sum(np.conj(h.numpy()) * E)), central, rtol=1e-6, atol=1e-7)


def test_det_second_derivative_at_repeated_zero_singular_values_is_finite_where_torchs_is_nan():
    for matrix in (np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]), np.zeros((3, 3))):
        theirs, ours = _both(_det_of(3), matrix.ravel())
        assert np.isnan(theirs[1]).any()
        # the sum of the adjugate's transpose along all-ones directions: d/dt sum(adj(M + t 1)^T)
        step = 1e-5
        central = (_adjugate(matrix + step).sum() - _adjugate(matrix - step).sum()) / (2 * step)
        np.testing.assert_allclose(ours[0], _adjugate(matrix).T.ravel(), atol=1e-12)
        np.testing.assert_allclose(ours[1].sum(), central, atol=1e-8)


def _torch_det_grad(A, loss=lambda d: d.sum()):
    ta = torch.tensor(A, requires_grad=True)
    (g,) = torch.autograd.grad(loss(torch.linalg.det(ta)), ta, create_graph=True)
    return g.detach().numpy()


def test_det_gradient_of_a_batch_mixing_singular_and_invertible_matrices_is_torchs():
    A = np.stack([np.array([[1.0, 2.0], [2.0, 4.0]]), np.array([[2.0, 1.0], [1.0, 3.0]]), np.zeros((2, 2))])
    a = dg.tensor(A, requires_grad=True, chunks=(1, 2, 2))
    dg.linalg.det(a).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), _torch_det_grad(A), atol=1e-12)


def test_complex_det_gradient_at_a_singular_matrix_is_torchs():
    A = np.array([[1 + 1j, 2.0], [2 + 2j, 4.0]])
    a = dg.tensor(A, requires_grad=True)
    d = dg.linalg.det(a)
    (dg.real(d) + 0.5 * dg.imag(d)).backward()  # |det| has a kink at 0: a smooth real part instead
    np.testing.assert_allclose(a.grad.numpy(), _torch_det_grad(A, lambda d: d.real + 0.5 * d.imag), atol=1e-12)


# torch's second derivative is NaN here only because its rule divides by 0 in a branch it masks out
# (x * (g / r).masked_fill(r == 0, 0), where(x == 0 & y >= 0, 0, r * log x)); the function is
# 0 or linear along every line through the point, so daskgrad's second derivative is 0.
MASKED_NAN = {
    "norm_at_0": (lambda m, x: m.linalg.norm(x), Z3),
    "norm_times_x_at_0": (lambda m, x: m.linalg.norm(x) * x, Z3),
    "atan2_at_origin": (lambda m, x: torch.atan2(x, x) if m is torch else dg.arctan2(x, x), Z3),
    "pow_of_zero_base": (lambda m, y: (torch.pow(torch.zeros_like(y), y) if m is torch else
                                       dg.pow(dg.zeros_like(y), y)), np.array([0.5, 1.0, 2.0, 0.0])),
}


@pytest.mark.parametrize("name", sorted(MASKED_NAN))
def test_where_torchs_second_derivative_is_a_masked_nan_ours_is_zero_and_the_first_is_torchs(name):
    f, x0 = MASKED_NAN[name]
    (tg, th), (g, h) = _both(f, x0)
    np.testing.assert_allclose(g, tg, equal_nan=True)
    assert np.isnan(th).all()
    np.testing.assert_array_equal(h, np.zeros_like(h))


def _in_the_cotangent(lib, f, x0, v0):
    """The derivative in the cotangent ``v`` of ``f``'s VJP (the backward of a backward, as HIPS autograd's
    check_grads takes it): ``J w`` for ``w`` = 1."""
    x = (torch.tensor(x0, requires_grad=True) if lib is torch else dg.tensor(x0, requires_grad=True, chunks=2))
    v = (torch.tensor(v0, requires_grad=True) if lib is torch else dg.tensor(v0, requires_grad=True, chunks=2))
    (g,) = lib.autograd.grad(f(lib, x), x, v, create_graph=True)
    (h,) = lib.autograd.grad(g.sum(), v)
    return h.numpy(force=True) if lib is torch else h.numpy()


def test_the_derivative_of_pows_exponent_gradient_in_its_cotangent_is_torchs_zero_under_the_mask():
    # (found by HIPS autograd's test_power_arg1_zero: daskgrad gave NaN, a 0 * log 0 inside the mask)
    y = np.array([0.5, 1.0, 2.0, 0.0, -0.5])
    for f in (lambda m, t: m.pow(0.0, t), lambda m, t: m.pow(m.zeros_like(t), t)):
        np.testing.assert_array_equal(_in_the_cotangent(dg, f, y, np.full(5, 0.7)),
                                      _in_the_cotangent(torch, f, y, np.full(5, 0.7)))


def test_the_std_of_one_element_has_a_rule_whose_derivative_in_the_cotangent_is_zero_not_torchs_nan():
    # the rule is 0 for every cotangent; torch's NaN is (g / (2 r)).masked_fill(r == 0, 0) at r = 0
    # (found by HIPS autograd's test_std)
    def f(m, t):
        return t.reshape(3, 1).std(1, correction=0) if m is torch else dg.std(dg.reshape(t, (3, 1)), axis=1)

    assert np.isnan(_in_the_cotangent(torch, f, np.ones(3), np.full(3, 0.7))).all()
    np.testing.assert_array_equal(_in_the_cotangent(dg, f, np.ones(3), np.full(3, 0.7)), np.zeros(3))
