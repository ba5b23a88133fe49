"""Complex gradients follow torch's convention (the conjugate Wirtinger derivative), checked against
torch; ops without such a rule refuse complex inputs under autograd instead of giving a wrong number."""
import re

import numpy as np
import pytest

import daskgrad as dg

torch = pytest.importorskip("torch")

Z = np.array([1 + 2j, -0.5 + 0.3j, 2 - 1j, 0.7 + 0.1j])
C = np.array([0.6 + 0.8j, -1 + 0.5j, 0.3 - 0.2j, 2 + 1j])
M = np.array([[1 + 1j, 2 - 1j], [0.5j, -1 + 0.2j], [3 + 0j, 1 - 1j], [0.1 + 0.4j, -2j]])

CASES = {
    "abs_of_product": lambda m, z, c: m.abs(z * c).sum(),
    "add_sub_neg": lambda m, z, c: m.abs(-(z + c) - z * 2 + 1j).sum(),
    "div_both_sides": lambda m, z, c: m.abs(z / c + c / z).sum(),
    "exp_log": lambda m, z, c: m.abs(m.exp(z * 0.3) + m.log(z)).sum(),
    "real_power": lambda m, z, c: m.abs(z ** 3 + z ** 0.5).sum(),
    "sum_mean_of_abs_squared": lambda m, z, c: (m.abs(z.sum() * c) + m.abs((z * c).mean())).sum(),
    "matmul_vector": lambda m, z, c: m.abs(z @ c),
    "matmul_matrix": lambda m, z, c: m.abs(z.reshape(2, 2) @ c.reshape(2, 2)).sum(),
    "reshape_transpose_index": lambda m, z, c: m.abs(z.reshape(2, 2).T[1] * c[:2]).sum(),
    "sin_cos_tanh": lambda m, z, c: m.abs(m.sin(z) * m.cos(c) + m.tanh(z * 0.2)).sum(),
    "sqrt_times_complex_scalar": lambda m, z, c: m.abs(m.sqrt(z) * (2 - 3j)).sum(),
    "vector_norms": lambda m, z, c: m.linalg.norm(z * c) + m.linalg.norm(z, 3) + m.linalg.norm(c, float("inf")),
    "matrix_norms": lambda m, z, c: m.linalg.norm(z.reshape(2, 2), 1) + m.linalg.norm(c.reshape(2, 2), "nuc"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_complex_gradient_matches_torch(name):
    f = CASES[name]
    tz, tc = torch.tensor(Z, requires_grad=True), torch.tensor(C, requires_grad=True)
    f(torch, tz, tc).backward()
    z, c = dg.tensor(Z, requires_grad=True), dg.tensor(C, requires_grad=True)
    f(dg, z, c).backward()
    for ours, theirs in ((z, tz), (c, tc)):
        if theirs.grad is None:
            assert ours.grad is None
        else:
            np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-10)


def test_abs_of_complex_product_gives_torchs_gradient_not_the_unconjugated_one():
    z = dg.tensor(np.array([1 + 2j]), requires_grad=True)
    dg.abs(z * dg.tensor(np.array([0.6 + 0.8j]))).sum().backward()
    np.testing.assert_allclose(z.grad.numpy(), [(1 + 2j) / abs(1 + 2j)])


def test_tensordot_and_einsum_conjugate_the_other_operand():
    for f in (lambda m, a, b: m.abs(m.tensordot(a, b, dims=([0], [0])) if m is torch else
                                  dg.tensordot(a, b, axes=([0], [0]))).sum(),
              lambda m, a, b: m.abs(m.einsum("ij,i->j", a, b)).sum()):
        ta, tb = torch.tensor(M, requires_grad=True), torch.tensor(C, requires_grad=True)
        f(torch, ta, tb).backward()
        a, b = dg.tensor(M, requires_grad=True), dg.tensor(C, requires_grad=True)
        f(dg, a, b).backward()
        np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-10)
        np.testing.assert_allclose(b.grad.numpy(), tb.grad.numpy(), rtol=1e-10)


def test_real_input_times_complex_constant_gets_the_real_part():
    tx = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    torch.abs(tx * torch.tensor([1 + 1j, 2 - 1j]) + 1j).sum().backward()
    x = dg.tensor(np.array([1.0, 2.0]), requires_grad=True)
    dg.abs(x * dg.tensor(np.array([1 + 1j, 2 - 1j])) + 1j).sum().backward()
    assert x.grad.dtype == np.float64
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())


@pytest.mark.parametrize("op,call", [
    ("relu", lambda z: dg.relu(z)),
    ("maximum", lambda z: dg.maximum(z, 0)), ("clamp", lambda z: dg.clip(z, 0, 1)),
    ("softmax", lambda z: dg.softmax(z)),
    ("logsumexp", lambda z: z.logsumexp(0)),
    ("pow", lambda z: z ** z), ("sign", lambda z: dg.sign(z)),
])
def test_ops_without_a_complex_rule_refuse_complex_inputs_that_require_grad(op, call):
    z = dg.tensor(Z, requires_grad=True)
    msg = f"{op} does not support automatic differentiation for outputs with complex dtype."
    with pytest.raises(RuntimeError, match="^" + re.escape(msg) + "$"):
        call(z)
    with dg.no_grad():  # without autograd there is no gradient to get wrong
        call(z)


@pytest.mark.parametrize("call,kind,msg", [
    (lambda z: z.max(), NotImplementedError, "\"max_all\" not implemented for 'ComplexDouble'"),
    (lambda z: z.min(), NotImplementedError, "\"min_all\" not implemented for 'ComplexDouble'"),
    (lambda z: z.amax(0), NotImplementedError, "\"max_values_cpu\" not implemented for 'ComplexDouble'"),
    (lambda z: z.amin(0), NotImplementedError, "\"min_values_cpu\" not implemented for 'ComplexDouble'"),
    (lambda z: z.max(0), RuntimeError, "max(): does not support complex input"),
])
def test_max_and_min_methods_of_complex_refuse_with_torchs_words_with_or_without_autograd(call, kind, msg):
    with pytest.raises(kind, match="^" + re.escape(msg) + "$"):
        call(torch.tensor(Z))
    for grad in (True, False):
        with pytest.raises(kind, match="^" + re.escape(msg) + "$"):
            call(dg.tensor(Z, requires_grad=grad))


@pytest.mark.parametrize("name", ["max", "min", "amax", "amin"])
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_module_level_max_and_min_of_complex_are_numpys_with_autograds_gradient(name, axis):
    autograd = pytest.importorskip("autograd")
    anp = pytest.importorskip("autograd.numpy")
    values = np.array([[1 + 2j, 2 - 1j, 2 - 1j], [2 + 0.5j, -3 + 9j, 2 - 1j]])  # ties share the gradient
    expected_out = getattr(np, name)(values, axis=axis)
    weights = (np.arange(1.0, expected_out.size + 1) * (0.5 - 1j)).reshape(expected_out.shape)
    z = dg.from_array(values, chunks=(1, 2), requires_grad=True)
    out = getattr(dg, name)(z, axis=axis)
    np.testing.assert_array_equal(out.detach().numpy(), expected_out)
    dg.real(out * weights).sum().backward()
    expected = autograd.grad(lambda v: anp.sum(anp.real(getattr(anp, name)(v, axis=axis) * weights)))(values)
    np.testing.assert_allclose(z.grad.numpy(), np.conj(expected))  # torch's convention: autograd's conjugate


@pytest.mark.parametrize("ddof", [0, 1])
@pytest.mark.parametrize("op", ["var", "std"])
def test_var_and_std_of_complex_are_real_with_torchs_gradients(op, ddof):
    tz = torch.tensor(M, requires_grad=True)
    tout = getattr(tz, op)(dim=0, correction=ddof)
    (tout * torch.arange(1.0, 3.0, dtype=torch.float64)).sum().backward()
    z = dg.tensor(M, requires_grad=True, chunks=(3, 1))
    out = getattr(z, op)(axis=0, ddof=ddof)
    assert out.dtype == np.float64
    (out * np.arange(1.0, 3.0)).sum().backward()
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(z.grad.numpy(), tz.grad.numpy(), rtol=1e-10)


def test_real_and_imag_are_attributes_as_in_torch_and_differentiable_and_imag_of_a_real_tensor_is_numpys_zeros():
    v = np.array([1 + 2j, 3 - 1j])
    x = dg.from_array(v, chunks=1, requires_grad=True)
    np.testing.assert_array_equal(x.real.detach().numpy(), v.real)
    np.testing.assert_array_equal(x.imag.detach().numpy(), v.imag)
    (x.real * 2 + x.imag * 3).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full(2, 2 + 3j))  # torch's convention: d/dRe + i d/dIm
    y = dg.from_array(np.array([1.0, 2.0]))
    assert y.real is y  # torch hands back the tensor itself
    # NumPy's zeros where torch raises: xarray probes duck arrays with hasattr(t, "imag")
    np.testing.assert_array_equal(y.imag.numpy(), [0.0, 0.0])
    np.testing.assert_array_equal(dg.imag(y).numpy(), [0.0, 0.0])
