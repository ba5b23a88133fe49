"""Linear algebra: norms give numpy.linalg.norm's numbers for every order and torch's gradients;
products follow NumPy's shape rules (forward and backward); daskgrad.linalg's decompositions give
torch's values and gradients, chunked tall-and-skinny matrices go through TSQR without being
gathered, and wrong shapes raise torch's errors before anything is submitted."""
import re

import numpy as np
import pytest

import daskgrad as dg
from daskgrad.ops.elementwise import conj, real_part

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(7)
X = RNG.standard_normal((6, 4))
Z = X + 1j * RNG.standard_normal((6, 4))
X3 = RNG.standard_normal((2, 6, 4))
Z3 = X3 + 1j * RNG.standard_normal((2, 6, 4))
ORDS = [None, 0, 1, -1, 2, -2, np.inf, -np.inf, 3, 0.5, -1.5, "fro", "nuc"]
AXES = [None, 0, -1, (0, 1), (1, 0), (-1, -2)]


def raises(exc, text):
    return pytest.raises(exc, match="^" + re.escape(text) + "$")


def chunked(values, chunks, requires_grad=False):
    return dg.from_array(np.asarray(values), chunks=chunks, requires_grad=requires_grad)


def torch_grad(fn, values, weights):
    t = torch.tensor(values, requires_grad=True)
    out = fn(t)
    (out * torch.tensor(weights)).real.sum().backward()
    return out.detach().numpy(), (np.zeros_like(values) if t.grad is None else t.grad.numpy())


def dg_grad(fn, values, weights, chunks):
    x = chunked(values, chunks, requires_grad=True)
    out = fn(x)
    loss = (out * dg.tensor(np.asarray(weights))).sum()
    (real_part(loss) if loss.dtype.kind == "c" else loss).backward()
    return out.detach().numpy(), (np.zeros_like(values) if x.grad is None else x.grad.numpy())


# ------------------------------------------------------------------------ norms
def test_matrix_one_norm_is_the_largest_column_sum_not_the_sum_of_all_entries():
    m = dg.ones(3, 3)
    assert np.linalg.norm(np.ones((3, 3)), 1) == 3
    assert dg.norm(m, ord=1).item() == 3
    assert dg.norm(m, ord=np.inf).item() == 3
    assert dg.linalg.norm(m, 1).item() == 3


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("values,chunks", [(X, (3, 2)), (Z, ((4, 2), (3, 1))), (X3, (1, 3, 2)), (Z3, (2, 6, 4))],
                         ids=["real", "complex", "batched", "complex_batched"])
def test_norm_gives_numpys_values_for_every_ord_and_axis(values, chunks, keepdims):
    x = chunked(values, chunks)
    for ord in ORDS:
        for axis in AXES:
            try:
                want = np.linalg.norm(values, ord, axis, keepdims)
            except ValueError:
                with pytest.raises((RuntimeError, TypeError)):
                    dg.norm(x, ord, axis, keepdims)
                continue
            got = dg.norm(x, ord, axis, keepdims)
            assert got.shape == np.shape(want), (ord, axis)
            assert got.dtype == np.asarray(want).dtype, (ord, axis)
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12, err_msg=f"{ord} {axis}")


def test_norm_of_integers_and_of_vectors_with_zeros_follows_numpy():
    v = np.array([3, 0, -4])
    for ord in [None, 0, 1, 2, np.inf, -np.inf, -1, 0.5]:
        with np.errstate(divide="ignore"):
            want = np.linalg.norm(v, ord)
        np.testing.assert_allclose(dg.norm(dg.tensor(v), ord).numpy(), want)


@pytest.mark.parametrize("values", [X, Z], ids=["real", "complex"])
@pytest.mark.parametrize("ord,axis", [(None, None), (2, 1), (1, 0), (3, -1), (0.5, 1), (-1.5, 0), (np.inf, 1),
                                      (-np.inf, 0), (0, 1), ("fro", None), ("nuc", None), (1, (0, 1)),
                                      (-1, (1, 0)), (np.inf, None), (-np.inf, (0, 1)), (2, None), (-2, (1, 0))])
def test_norm_gradients_are_torchs(values, ord, axis):
    """torch.linalg.norm (vector_norm / matrix_norm) as the oracle, over uneven chunks."""
    weights = RNG.standard_normal(np.shape(np.linalg.norm(values, ord, axis)))
    want, gwant = torch_grad(lambda t: torch.linalg.norm(t, ord, axis), values, weights)
    got, ggot = dg_grad(lambda x: dg.norm(x, ord, axis), values, weights, ((4, 2), (3, 1)))
    np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_allclose(ggot, gwant, rtol=1e-10, atol=1e-12)


def test_vector_and_matrix_norm_keep_torchs_node_names():
    x = chunked(X, (3, 2), requires_grad=True)
    assert dg.norm(x).grad_fn.name() == "LinalgVectorNormBackward0"
    assert dg.norm(x, 1).grad_fn.name() == "AmaxBackward0"
    assert dg.norm(x, 1).grad_fn.next_functions[0][0].name() == "LinalgVectorNormBackward0"
    assert dg.norm(x, 2).grad_fn.next_functions[0][0].name() == "LinalgSvdBackward0"
    assert dg.norm(x, "nuc").grad_fn.name() == "SumBackward1"


def test_norm_gradient_at_zero_is_zero_as_torchs():
    for ord in (2, 1, 3, np.inf):
        x = dg.zeros(4, requires_grad=True)
        dg.norm(x, ord).backward()
        np.testing.assert_array_equal(x.grad.numpy(), np.zeros(4))


def test_wrong_norm_orders_and_axes_raise_torchs_errors():
    m, v, t3 = chunked(X, 2), chunked(X[0], 2), chunked(X3, 2)
    with raises(RuntimeError, "linalg.norm: If dim is not specified but ord is, the input must be 1D or 2D. Got 3D."):
        dg.norm(t3, 1)
    with raises(RuntimeError, "linalg.matrix_norm: Order 3 not supported."):
        dg.norm(m, 3)
    with raises(RuntimeError, "linalg.matrix_norm: Order 0 not supported."):
        dg.norm(m, 0)
    with raises(RuntimeError, "linalg.matrix_norm: The input tensor A must have at least 2 dimensions."):
        dg.norm(v, "fro")
    with raises(RuntimeError, "linalg.matrix_norm: dims must be different. Got (0, 0)"):
        dg.norm(m, "fro", axis=(0, -2))
    with raises(RuntimeError, "linalg.norm: If dim is specified, it must be of length 1 or 2. Got [0, 1, 2]"):
        dg.norm(t3, axis=(0, 1, 2))
    with raises(IndexError, "Dimension out of range (expected to be in range of [-2, 1], but got 2)"):
        dg.norm(m, axis=2)
    with pytest.raises(TypeError):
        dg.norm(m, "abc", axis=0)
    with pytest.raises(TypeError):
        dg.linalg.vector_norm(v, "fro")


# --------------------------------------------------------------------- products
def check_against_torch(dg_fn, torch_fn, arrays, chunks, rtol=1e-10):
    """Forward values and the gradient of every operand (a random cotangent) against torch, on
    chunked operands."""
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    want = torch_fn(*ts)
    weights = RNG.standard_normal(tuple(want.shape))
    (want * torch.tensor(weights)).real.sum().backward()
    xs = [chunked(a, c, requires_grad=True) for a, c in zip(arrays, chunks)]
    got = dg_fn(*xs)
    assert got.shape == tuple(want.shape)
    loss = (got * dg.tensor(weights)).sum()
    (real_part(loss) if loss.dtype.kind == "c" else loss).backward()
    np.testing.assert_allclose(got.detach().numpy(), want.detach().resolve_conj().numpy(), rtol=rtol, atol=1e-12)
    for x, t in zip(xs, ts):
        np.testing.assert_allclose(x.grad.numpy(), t.grad.resolve_conj().numpy(), rtol=rtol, atol=1e-12)
        assert x.grad.chunks == x.chunks


def r(*shape, complex_=False):
    v = RNG.standard_normal(shape)
    return v + 1j * RNG.standard_normal(shape) if complex_ else v


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("sa,sb", [((3,), (2, 3, 4)), ((2, 2, 3), (3,)), ((2, 1, 3, 4), (5, 4, 2)), ((3,), (3,)),
                                   ((4, 3), (3,)), ((3,), (3, 5)), ((4, 3), (3, 5)), ((5, 4, 3), (3, 2))])
def test_matmul_follows_numpys_shape_rules_forward_and_backward(sa, sb, complex_):
    a, b = r(*sa, complex_=complex_), r(*sb, complex_=complex_)
    np.testing.assert_allclose(dg.matmul(dg.tensor(a), dg.tensor(b)).numpy(), np.matmul(a, b))
    check_against_torch(dg.matmul, torch.matmul, [a, b], [2, 2])


@pytest.mark.parametrize("sa,sb", [((), (2, 3)), ((2, 3), ()), ((2, 3, 4), (4,)), ((4,), (2, 4, 3)),
                                   ((3, 2, 4), (2, 4, 5)), ((2, 3), (3, 4)), ((3,), (3,))])
def test_dot_follows_numpys_rules_for_every_rank(sa, sb):
    a, b = r(*sa), r(*sb)
    want = np.dot(a, b)

    def torch_dot(x, y):
        if x.ndim == 0 or y.ndim == 0:
            return x * y
        return torch.tensordot(x, y, dims=([x.ndim - 1], [max(y.ndim - 2, 0)]))

    got = dg.dot(dg.tensor(a), dg.tensor(b))
    assert got.shape == want.shape
    np.testing.assert_allclose(got.numpy(), want)
    check_against_torch(dg.dot, torch_dot, [a, b], [2, 2])


@pytest.mark.parametrize("name,sa,sb", [("inner", (2, 3, 4), (5, 4)), ("inner", (4,), (4,)), ("inner", (), (3,)),
                                        ("outer", (2, 3), (4,)), ("vdot", (2, 3), (3, 2)), ("kron", (2, 3), (4, 1, 2)),
                                        ("kron", (3,), (2, 2))])
def test_inner_outer_vdot_kron_give_numpys_values_and_torchs_gradients(name, sa, sb):
    a, b = r(*sa, complex_=name == "vdot"), r(*sb, complex_=name == "vdot")
    want = getattr(np, name)(a, b)
    got = getattr(dg, name)(dg.tensor(a), dg.tensor(b))
    assert got.shape == np.shape(want)
    np.testing.assert_allclose(got.numpy(), want)
    torch_fn = {"inner": torch.inner, "outer": lambda x, y: torch.outer(x.reshape(-1), y.reshape(-1)),
                "vdot": lambda x, y: torch.vdot(x.reshape(-1), y.reshape(-1)), "kron": torch.kron}[name]
    check_against_torch(getattr(dg, name), torch_fn, [a, b], [2, 2])


@pytest.mark.parametrize("axes", [0, 1, 2, ([0, 2], [1, 0]), ([-1], [0]), (1, 2)])
def test_tensordot_axes_follow_numpy(axes):
    a, b = r(3, 4, 2), r(2, 3, 4)
    if axes in (1, 2):
        b = r(*((2, 5) if axes == 1 else (4, 2, 5)))
    if axes == (1, 2):
        b = r(4, 2, 4)
    want = np.tensordot(a, b, axes)
    np.testing.assert_allclose(dg.tensordot(dg.tensor(a), dg.tensor(b), axes).numpy(), want)
    dims = ([axes[0]], [axes[1]]) if isinstance(axes, tuple) and isinstance(axes[0], int) else axes
    check_against_torch(lambda x, y: dg.tensordot(x, y, axes), lambda x, y: torch.tensordot(x, y, dims=dims),
                        [a, b], [2, 2])


@pytest.mark.parametrize("eq,shapes", [
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]), ("...ij,jk", [(2, 3, 4), (4, 5)]), ("ij,jk", [(3, 4), (4, 5)]),
    ("ii->i", [(4, 4)]), ("ii", [(4, 4)]), ("iij->j", [(3, 3, 2)]), ("ij,ij->ij", [(1, 4), (3, 4)]),
    ("b...,b...->b...", [(2, 3, 4), (2, 1, 4)]), ("ba", [(3, 4)]), ("i,i", [(5,), (5,)]), ("i,j->ij", [(2,), (3,)]),
    ("iji->j", [(3, 2, 3)]), ("...", [(2, 3)])])
def test_einsum_takes_ellipses_implicit_outputs_and_diagonals(eq, shapes):
    arrays = [r(*s) for s in shapes]
    want = np.einsum(eq, *arrays)
    got = dg.einsum(eq, *[dg.tensor(a) for a in arrays])
    assert got.shape == np.shape(want)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
    check_against_torch(lambda *xs: dg.einsum(eq, *xs), lambda *ts: torch.einsum(eq, *ts), arrays, [2] * len(arrays))


def test_einsum_sums_ellipsis_axes_left_out_of_the_output_as_torch_does():
    a = r(2, 3, 4)
    check_against_torch(lambda x: dg.einsum("b...,b...->b", x, x), lambda t: torch.einsum("b...,b...->b", t, t),
                        [a], [(1, 2, 3)])


def test_einsum_sublist_form_and_operand_list():
    a, b = r(3, 4), r(4, 5)
    want = np.einsum(a, [0, 1], b, [1, 2], [0, 2])
    np.testing.assert_allclose(dg.einsum(dg.tensor(a), [0, 1], dg.tensor(b), [1, 2], [0, 2]).numpy(), want)
    np.testing.assert_allclose(dg.einsum(dg.tensor(a), [Ellipsis, 1], dg.tensor(b), [1, 2]).numpy(),
                               np.einsum(a, [Ellipsis, 1], b, [1, 2]))
    np.testing.assert_allclose(dg.einsum("ij,jk->ik", [dg.tensor(a), dg.tensor(b)]).numpy(), a @ b)


@pytest.mark.parametrize("fn,args", [("diagonal", (1,)), ("diagonal", (-2, 1, 0)), ("trace", (1,)), ("tril", (-1,)),
                                     ("triu", (1,)), ("diag", ()), ("diag", (2,))])
def test_diagonals_and_triangles_give_numpys_values_and_torchs_gradients(fn, args):
    a = r(5, 4) if fn != "diag" or not args else r(3)
    want = getattr(np, fn)(a, *args)
    got = getattr(dg, fn)(dg.tensor(a), *args)
    np.testing.assert_allclose(got.numpy(), want)
    torch_fn = {"diagonal": lambda t: torch.diagonal(t, *args), "tril": lambda t: torch.tril(t, *args),
                "triu": lambda t: torch.triu(t, *args), "diag": lambda t: torch.diag(t, *args),
                "trace": lambda t: torch.diagonal(t, *args).sum()}[fn]
    check_against_torch(lambda x: getattr(dg, fn)(x, *args), torch_fn, [a], [((2, 3), (1, 3)) if a.ndim == 2 else 2])


def test_the_diagonal_diag_gives_is_a_copy_as_torchs():
    a = r(3, 3)
    for x in (dg.tensor(a), dg.tensor(a, requires_grad=True).clone()):  # (a plain one, and one with history)
        d, t = x.diag(), torch.tensor(a).diag()
        d.mul_(0), t.mul_(0)  # (torch's diag copies: the matrix keeps its diagonal; a view would write through)
        np.testing.assert_allclose(x.detach().numpy(), a)
        assert d._base is None and d._version == t._version == 1
    x = dg.tensor(a, requires_grad=True)
    d = dg.diag(x * 1)
    d.mul_(2).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.eye(3))


def test_batched_diagonal_trace_and_triangles_act_on_numpys_axes():
    a = r(2, 5, 4)
    np.testing.assert_allclose(dg.diagonal(dg.tensor(a), 1, 1, 2).numpy(), np.diagonal(a, 1, 1, 2))
    np.testing.assert_allclose(dg.trace(dg.tensor(a), 0, 0, 2).numpy(), np.trace(a, 0, 0, 2))
    np.testing.assert_allclose(dg.tril(dg.tensor(a), 1).numpy(), np.tril(a, 1))
    check_against_torch(lambda x: dg.diagonal(x, -1, 2, 0), lambda t: torch.diagonal(t, -1, 2, 0), [a], [(1, 2, 3)])


def test_product_shape_errors_are_torchs_and_raise_before_anything_is_submitted():
    m23, m45 = dg.ones(2, 3), dg.ones(4, 5)
    with dg.testing.submissions() as subs:
        with raises(RuntimeError, "both arguments to matmul need to be at least 1D, but they are 0D and 2D"):
            dg.matmul(dg.tensor(2.0), m23)
        with raises(RuntimeError, "inner() the last dimension must match on both input tensors but got shapes "
                                  "[2, 3] and [4, 5]"):
            dg.inner(m23, m45)
        with raises(RuntimeError, "both dimension lists should have same length"):
            dg.tensordot(m23, m23, axes=([0, 1], [0]))
        with raises(RuntimeError, "einsum(): subscript i is repeated for operand 0 but the sizes don't match, 3 != 2"):
            dg.einsum("ii->i", m23)
        with raises(RuntimeError, "einsum(): output subscript i appears more than once in the output"):
            dg.einsum("ij->ii", m23)
        with raises(RuntimeError, "einsum(): fewer operands were provided than specified in the equation"):
            dg.einsum("ij,jk", m23)
        with raises(RuntimeError, "einsum(): output subscript k does not appear in the equation for any input "
                                  "operand"):
            dg.einsum("ij->k", m23)
        with raises(RuntimeError, "diagonal dimensions cannot be identical 0, 0"):
            dg.diagonal(m23, 0, 0, 0)
        with raises(RuntimeError, "Expected size for first two dimensions of batch2 tensor to be: [2, 3] but got: "
                                  "[2, 4]."):
            dg.ones(2, 2, 3) @ dg.ones(2, 4, 5)
        with raises(RuntimeError, "The size of tensor a (2) must match the size of tensor b (3) at non-singleton "
                                  "dimension 0"):
            dg.ones(2, 2, 3) @ dg.ones(3, 3, 5)
    assert sum(subs.values()) == 0


# --------------------------------------------------------------- decompositions
def well_conditioned(*shape, complex_=False):
    a = r(*shape, complex_=complex_)
    return a + 3 * np.eye(shape[-1])


def spd(*shape, complex_=False):
    a = r(*shape, complex_=complex_)
    return a @ np.conj(np.swapaxes(a, -1, -2)) + shape[-1] * np.eye(shape[-1])


L = dg.linalg
T = torch.linalg


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("case", ["matrix", "vector", "batched_broadcast", "batch_of_vectors", "right"])
def test_solve_gives_torchs_values_and_gradients(case, complex_):
    a, b = {"matrix": ((4, 4), (4, 3)), "vector": ((4, 4), (4,)), "batched_broadcast": ((2, 1, 4, 4), (3, 4, 2)),
            "batch_of_vectors": ((2, 4, 4), (2, 4)), "right": ((4, 4), (3, 4))}[case]
    left = case != "right"
    check_against_torch(lambda x, y: L.solve(x, y, left=left), lambda x, y: T.solve(x, y, left=left),
                        [well_conditioned(*a, complex_=complex_), r(*b, complex_=complex_)], [2, 2])


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("name", ["inv", "det", "slogdet_logabsdet", "slogdet_sign", "cholesky", "cholesky_upper",
                                  "pinv", "pinv_wide", "matrix_power_3", "matrix_power_-2", "matrix_power_0"])
def test_square_ops_give_torchs_values_and_gradients(name, complex_):
    if name == "slogdet_sign" and not complex_:
        pytest.skip("the sign of a real determinant has no gradient")
    a = spd(2, 4, 4, complex_=complex_) if name.startswith("cholesky") else well_conditioned(2, 4, 4, complex_=complex_)
    if name.startswith("pinv"):
        a = r(2, 5, 3, complex_=complex_) if name == "pinv" else r(2, 3, 5, complex_=complex_)
    fns = {"inv": (L.inv, T.inv), "det": (L.det, T.det),
           "slogdet_logabsdet": (lambda x: L.slogdet(x).logabsdet, lambda t: T.slogdet(t).logabsdet),
           "slogdet_sign": (lambda x: L.slogdet(x).sign, lambda t: T.slogdet(t).sign),
           "cholesky": (L.cholesky, T.cholesky),
           "cholesky_upper": (lambda x: L.cholesky(x, upper=True), lambda t: T.cholesky(t, upper=True)),
           "pinv": (L.pinv, T.pinv), "pinv_wide": (L.pinv, T.pinv)}
    if name.startswith("matrix_power"):
        n = int(name.rsplit("_", 1)[1])
        fns[name] = (lambda x: L.matrix_power(x, n), lambda t: T.matrix_power(t, n))
    ours, theirs = fns[name]
    if name.startswith("cholesky"):  # torch's gradient assumes a Hermitian input: differentiate through one
        ours, theirs = (lambda x, f=ours: f((x + conj(x.mT)) * 0.5),
                        lambda t, f=theirs: f((t + t.mH) * 0.5))
    check_against_torch(ours, theirs, [a], [(1, 3, 2)], rtol=1e-9)


def test_slogdet_and_det_agree_with_numpy():
    a = well_conditioned(3, 4, 4)
    sign, logabs = L.slogdet(dg.tensor(a))
    np.testing.assert_allclose(sign.numpy(), np.linalg.slogdet(a)[0])
    np.testing.assert_allclose(logabs.numpy(), np.linalg.slogdet(a)[1])
    np.testing.assert_allclose(L.det(dg.from_array(a, chunks=(1, 2, 3))).numpy(), np.linalg.det(a))


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("shape,chunks", [((6, 4), (2, 4)), ((6, 4), -1), ((4, 6), (4, 2)), ((2, 5, 3), (1, 2, 2)),
                                          ((4, 4), 2)], ids=["tall_tsqr", "tall_one_chunk", "wide_tsqr", "batched",
                                                             "square"])
def test_svd_values_and_gradients_of_phase_invariant_losses_are_torchs(shape, chunks, complex_):
    a = r(*shape, complex_=complex_)
    ts = torch.tensor(a, requires_grad=True)
    tu, tsv, tvh = T.svd(ts, full_matrices=False)
    weights = [RNG.standard_normal(tuple(t.shape)) for t in (tu, tsv, tvh)]

    def loss(u, s, vh, m):  # |U|^2 and |Vh|^2 do not depend on the vectors' signs (phases)
        w = [m.tensor(v) for v in weights]
        return (abs(u) ** 2 * w[0]).sum() + (s * w[1]).sum() + (abs(vh) ** 2 * w[2]).sum()

    loss(tu, tsv, tvh, torch).backward()
    x = chunked(a, chunks, requires_grad=True)
    u, s, vh = L.svd(x, full_matrices=False)
    np.testing.assert_allclose(s.detach().numpy(), tsv.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose((u * s[..., None, :] @ vh).detach().numpy(), a, atol=1e-12)
    loss(u, s, vh, dg).backward()
    np.testing.assert_allclose(x.grad.numpy(), ts.grad.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(L.svdvals(x).detach().numpy(), np.linalg.svd(a, compute_uv=False), rtol=1e-12)


def test_full_matrices_svd_of_one_chunk_matches_numpy_and_refuses_a_chunked_tall_matrix():
    a = r(5, 3)
    u, s, vh = L.svd(dg.tensor(a))
    assert u.shape == (5, 5) and vh.shape == (3, 3)
    np.testing.assert_allclose(np.abs(u.numpy()), np.abs(np.linalg.svd(a)[0]), atol=1e-12)
    check_against_torch(lambda x: L.svd(x).S, lambda t: T.svd(t).S, [a], [-1])
    with pytest.raises(ValueError, match="full_matrices=False"):
        L.svd(dg.from_array(a, chunks=(2, 3)))


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("shape,chunks,mode", [((6, 4), (2, 4), "reduced"), ((6, 4), -1, "reduced"),
                                               ((4, 6), (4, 3), "reduced"), ((2, 5, 3), (1, 2, 2), "reduced"),
                                               ((4, 6), -1, "complete"), ((3, 3), 2, "complete")])
def test_qr_gives_torchs_values_and_gradients(shape, chunks, mode, complex_):
    a = r(*shape, complex_=complex_)
    ts = torch.tensor(a, requires_grad=True)
    tq, tr = T.qr(ts, mode=mode)
    wq, wr = RNG.standard_normal(tuple(tq.shape)), RNG.standard_normal(tuple(tr.shape))
    # Householder signs differ between TSQR and LAPACK: compare a sign-invariant loss, Q R's parts
    # normalised by the sign of R's diagonal
    def norm_signs(q, rr, m):
        ph = m.diagonal(rr, 0, -2, -1) / abs(m.diagonal(rr, 0, -2, -1))
        return q * ph[..., None, :], rr * (ph.conj() if m is torch else conj(ph))[..., :, None]
    q1, r1 = norm_signs(tq, tr, torch)
    ((q1 * torch.tensor(wq)).real.sum() + (r1 * torch.tensor(wr)).real.sum()).backward()
    x = chunked(a, chunks, requires_grad=True)
    q, rr = L.qr(x, mode=mode)
    q2, r2 = norm_signs(q, rr, dg)
    np.testing.assert_allclose(q2.detach().numpy(), q1.detach().numpy(), atol=1e-12)
    np.testing.assert_allclose(r2.detach().numpy(), r1.detach().numpy(), atol=1e-12)
    loss = (q2 * dg.tensor(wq)).sum() + (r2 * dg.tensor(wr)).sum()
    (real_part(loss) if loss.dtype.kind == "c" else loss).backward()
    np.testing.assert_allclose(x.grad.numpy(), ts.grad.numpy(), rtol=1e-9, atol=1e-11)


def test_qr_modes_that_torch_cannot_differentiate_raise_its_errors_in_backward():
    x = chunked(r(6, 3), -1, requires_grad=True)
    q, rr = L.qr(x, mode="r")
    assert q.shape == (0,)
    with raises(RuntimeError, "The derivative of linalg.qr depends on Q, which is not computed when mode='r'. "
                              "Please use linalg.qr(A, mode='reduced') if you are going to differentiate through "
                              "linalg.qr."):
        rr.sum().backward()
    with raises(RuntimeError, "The QR decomposition is not differentiable when mode='complete' and nrows > ncols."):
        L.qr(x, mode="complete").Q.sum().backward()


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh_gives_torchs_values_and_gradients(uplo, complex_):
    a = spd(2, 4, 4, complex_=complex_)
    ts = torch.tensor(a, requires_grad=True)
    tl, tv = T.eigh(ts, UPLO=uplo)
    wl, wv = RNG.standard_normal(tuple(tl.shape)), RNG.standard_normal(tuple(tv.shape))
    ((tl * torch.tensor(wl)).sum() + (tv.abs() ** 2 * torch.tensor(wv)).sum()).backward()
    x = chunked(a, (1, 3, 2), requires_grad=True)
    lam, v = L.eigh(x, UPLO=uplo)
    np.testing.assert_allclose(lam.detach().numpy(), tl.detach().numpy(), rtol=1e-12)
    ((lam * dg.tensor(wl)).sum() + (dg.abs(v) ** 2 * dg.tensor(wv)).sum()).backward()
    np.testing.assert_allclose(x.grad.numpy(), ts.grad.numpy(), rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(L.eigvalsh(x, uplo).detach().numpy(), np.linalg.eigvalsh(a, uplo), rtol=1e-12)


@pytest.mark.parametrize("shape_b,ca,cb", [((6, 2), ((2, 4), (2, 1)), ((2, 4), (1, 1))), ((6,), (3, 2), ((2, 4),)),
                                           ((6, 2), -1, -1), ((2, 6, 2), (1, 3, 2), (1, 3, 1))],
                         ids=["tsqr", "tsqr_vector", "one_chunk", "batched"])
def test_lstsq_gives_torchs_solution_residuals_and_gradients(shape_b, ca, cb):
    a, b = r(*((2, 6, 3) if len(shape_b) == 3 else (6, 3))), r(*shape_b)
    for part in ("solution", "residuals"):
        check_against_torch(lambda x, y: getattr(L.lstsq(x, y), part),
                            lambda x, y: getattr(T.lstsq(x, y, driver="gelsd"), part), [a, b], [ca, cb], rtol=1e-9)
    out = L.lstsq(dg.tensor(a), dg.tensor(b))
    want = torch.linalg.lstsq(torch.tensor(a), torch.tensor(b), driver="gelsd")
    np.testing.assert_array_equal(out.rank.numpy(), want.rank.numpy())
    np.testing.assert_allclose(out.singular_values.numpy(), want.singular_values.numpy(), rtol=1e-12)


def test_wide_lstsq_has_empty_residuals_and_the_minimum_norm_solution():
    a, b = r(3, 5), r(3, 2)
    out = L.lstsq(dg.tensor(a), dg.tensor(b))
    assert out.residuals.shape == (0,)
    np.testing.assert_allclose(out.solution.numpy(), np.linalg.pinv(a) @ b, atol=1e-12)


def test_decomposition_shape_errors_are_torchs_and_raise_before_anything_is_submitted():
    m34, v3 = dg.ones(3, 4), dg.ones(3)
    with dg.testing.submissions() as subs:
        for name in ("inv", "det", "slogdet", "cholesky", "eigh", "matrix_power"):
            args = (m34, 2) if name == "matrix_power" else (m34,)
            with raises(RuntimeError, f"linalg.{name}: A must be batches of square matrices, but they are 3 by 4 "
                                      "matrices"):
                getattr(L, name)(*args)
        for name in ("inv", "det", "qr", "svd"):
            with raises(RuntimeError, f"linalg.{name}: The input tensor A must have at least 2 dimensions."):
                getattr(L, name)(v3)
        with raises(RuntimeError, "linalg.solve: A must be batches of square matrices, but they are 3 by 4 matrices"):
            L.solve(m34, v3)
        with raises(RuntimeError, "linalg.solve: Incompatible shapes of A and B for the equation AX = B (3x3 and 4x2)"):
            L.solve(dg.ones(3, 3), dg.ones(4, 2))
        with raises(RuntimeError, "linalg.solve: Incompatible shapes of A and B for the equation AX = B (3x3 and 4x1)"):
            L.solve(dg.ones(3, 3), dg.ones(4))
        with raises(RuntimeError, "The size of tensor a (3) must match the size of tensor b (2) at non-singleton "
                                  "dimension 0"):
            L.solve(dg.ones(3, 3, 3), dg.ones(2, 3, 1))
        with raises(RuntimeError, "torch.linalg.lstsq: input.size(-2) should match other.size(-2)"):
            L.lstsq(m34, dg.ones(4, 2))
        with raises(RuntimeError, "qr received unrecognized mode 'x' but expected one of 'reduced' (default), 'r', "
                                  "or 'complete'"):
            L.qr(m34, mode="x")
        with raises(RuntimeError, "Expected UPLO argument to be 'L' or 'U', but got X"):
            L.eigh(dg.ones(3, 3), UPLO="X")
        with raises(TypeError, "linalg_matrix_power(): argument 'n' (position 2) must be int, not float"):
            L.matrix_power(dg.ones(3, 3), 2.0)
        with raises(RuntimeError, "linalg.inv: Expected a floating point or complex tensor as input. Got Long"):
            L.inv(dg.tensor(np.eye(3, dtype=np.int64)))
    assert sum(subs.values()) == 0


def test_torch_node_names_of_the_decompositions():
    x = chunked(well_conditioned(4, 4), 2, requires_grad=True)
    names = {"LinalgSolveExBackward0": L.solve(x, x), "LinalgInvExBackward0": L.inv(x),
             "LinalgDetBackward0": L.det(x), "LinalgSlogdetBackward0": L.slogdet(x).logabsdet,
             "LinalgCholeskyExBackward0": L.cholesky(x @ x.mT), "LinalgQrBackward0": L.qr(x).R,
             "LinalgSvdBackward0": L.svd(x).S, "LinalgEighBackward0": L.eigh(x).eigenvalues,
             "LinalgPinvBackward0": L.pinv(x), "LinalgLstsqBackward0": L.lstsq(x, x).solution}
    for name, out in names.items():
        assert out.grad_fn.name() == name


# ------------------------------------------------------------ tall and skinny
class LargestResult:
    """The most bytes any one task returned while it was active (dask's scheduler callbacks)."""

    def __init__(self):
        self.nbytes = 0

    def _posttask(self, key, result, dsk, state, worker_id):
        self.nbytes = max(self.nbytes, _nbytes(result))

    def __enter__(self):
        from dask.callbacks import Callback

        self._cb = Callback(posttask=self._posttask)
        self._cb.__enter__()
        return self

    def __exit__(self, *exc):
        self._cb.__exit__(*exc)


def _nbytes(v):
    if isinstance(v, (tuple, list)):
        return sum(_nbytes(x) for x in v)
    if isinstance(v, dict):
        return sum(_nbytes(x) for x in v.values())
    return getattr(v, "nbytes", 0)


def test_tall_and_skinny_qr_svd_lstsq_pinv_and_their_gradients_never_hold_the_whole_matrix():
    """A 40,000 x 5 matrix in 20 row chunks: no task returns more than a few chunks (a fused task returns
    each value its group's readers need), in the forward and in the backward (the rules' products with
    the long axis are blockwise or tree sums)."""
    m, n, rows = 40_000, 5, 2_000
    dg.manual_seed(0)
    x = dg.randn(m, n, chunks=(rows, n), requires_grad=True)
    y = dg.randn(m, 2, chunks=(rows, 2))
    w = dg.randn(m, n, chunks=(rows, n))
    chunk = rows * n * 8
    with LargestResult() as biggest:
        q, rr = L.qr(x)
        u, s, vh = L.svd(x, full_matrices=False)
        sol = L.lstsq(x, y)
        p = L.pinv(x)
        loss = ((q * w).sum() + rr.sum() + (u * w).sum() ** 2 + s.sum() + vh.sum() ** 2 + sol.solution.sum()
                + sol.residuals.sum() + (p * w.mT).sum() + dg.norm(x, 2) + dg.norm(x, "nuc"))
        loss.backward()
        total = float(x.grad.sum())
    assert np.isfinite(total)
    assert 0 < biggest.nbytes <= 4 * chunk <= m * n * 8 / 5, (biggest.nbytes, m * n * 8)
    assert q.chunks[0] == x.chunks[0] and u.chunks[0] == x.chunks[0] and p.chunks[1] == x.chunks[0]


def test_tall_and_skinny_results_and_gradients_match_numpy_and_torch():
    a, b = r(300, 4), r(300, 2)
    x = chunked(a, (30, 4), requires_grad=True)
    q, rr = L.qr(x)
    np.testing.assert_allclose((q @ rr).detach().numpy(), a, atol=1e-12)
    np.testing.assert_allclose((q.mT @ q).detach().numpy(), np.eye(4), atol=1e-12)
    np.testing.assert_allclose(L.lstsq(x, dg.tensor(b)).solution.detach().numpy(), np.linalg.lstsq(a, b)[0],
                               atol=1e-12)
    np.testing.assert_allclose(L.pinv(x).detach().numpy(), np.linalg.pinv(a), atol=1e-12)
    check_against_torch(lambda t: L.pinv(t), T.pinv, [a], [(30, 4)])
    check_against_torch(lambda t, y: L.lstsq(t, y).solution, lambda t, y: T.lstsq(t, y).solution, [a, b],
                        [(30, 4), (30, 2)])


def test_building_decompositions_and_their_backward_graph_computes_nothing():
    x = chunked(r(60, 3), (10, 3), requires_grad=True)
    with dg.testing.submissions() as subs:
        outs = [L.qr(x).Q, L.svd(x, full_matrices=False).U, L.lstsq(x, x[:, :1]).solution, L.pinv(x),
                dg.norm(x, 2), L.solve(x.mT @ x, x.mT), L.eigh(x.mT @ x).eigenvectors, L.slogdet(x.mT @ x).logabsdet]
        loss = sum((o * o).sum() for o in outs)
        (g,) = dg.grad(loss, [x], lazy=True)
    assert sum(subs.values()) == 0
    assert np.isfinite(g.numpy()).all()
