"""Linear algebra: products follow NumPy's shape rules (forward and backward, torch's gradients),
and wrong shapes raise torch's errors before anything is submitted."""
import re

import numpy as np
import pytest

import daskgrad as dg
from daskgrad.ops.elementwise import real

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
    (real(loss) if loss.dtype.kind == "c" else loss).backward()
    return out.detach().numpy(), (np.zeros_like(values) if x.grad is None else x.grad.numpy())


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
    (real(loss) if loss.dtype.kind == "c" else loss).backward()
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
