"""PyTorch's test/autograd/test_functional.py (TestAutogradFunctional), ported to run on torch
and daskgrad (one chunk, chunks of 2) through the name-only adapter.

Upstream runs each test on plain tensors and on LoggingTensor; only plain tensors are ported.
Rewritten calls with the same meaning: ``a.narrow(0, 0, 3)`` -> ``a[:3]``,
``x.unsqueeze(0).repeat(4)`` -> ``x * T.ones(4)``, ``a.long().float().requires_grad_().clone()``
(a value cut off from the input that requires grad) -> ``a.detach().requires_grad_().clone()``,
``torch.eye(4)`` -> ``np.eye(4)``, ``torch.mm(jac, v.unsqueeze(1)).squeeze(1)`` -> ``T.matmul(jac, v)``.

Not ported (category: reason), upstream names:
* LoggingTensor variants (``ctors=logging_tensor``): a torch tensor subclass with no daskgrad counterpart.
* forward AD (``strategy="forward-mode"``, ``outer_jacobian_strategy="forward-mode"``): the forward-mode
  halves of _check_jacobian_vectorize_correctness / _check_hessian_vectorize_correctness.
* internals: test_construct_standard_basis_for (autogradF._construct_standard_basis_for),
  test_jacobian_vectorize_raises_no_warnings / test_hessian_vectorize_raises_no_warnings (vmap's
  prototype warning).
* devices: TestAutogradFunctionalDeviceType (CUDA only).
"""
import numpy as np
import pytest

from adapter import T, dg_xfail  # noqa: F401


def _assert_same_struct(T, res, base):
    if isinstance(base, T.Tensor):
        assert isinstance(res, T.Tensor)
        assert tuple(base.shape) == tuple(res.shape)
    elif isinstance(base, tuple):
        assert isinstance(res, tuple) and len(base) == len(res)
        for el_base, el_res in zip(base, res):
            assert isinstance(el_base, T.Tensor) and isinstance(el_res, T.Tensor)
            assert tuple(el_base.shape) == tuple(el_res.shape)
    else:
        raise RuntimeError("The base given to `_assert_same_struct` doesn't have the right structure.")


def _assert_interleaved_struct(T, res, base1, base2):
    s = lambda t: tuple(t.shape)  # noqa: E731
    if isinstance(base1, T.Tensor) and isinstance(base2, T.Tensor):
        assert isinstance(res, T.Tensor)
        assert s(res) == s(base1) + s(base2)
    elif isinstance(base1, tuple) and isinstance(base2, T.Tensor):
        assert isinstance(res, tuple) and len(res) == len(base1)
        for el_res, el_base1 in zip(res, base1):
            assert s(el_res) == s(el_base1) + s(base2)
    elif isinstance(base1, T.Tensor) and isinstance(base2, tuple):
        assert isinstance(res, tuple) and len(res) == len(base2)
        for el_res, el_base2 in zip(res, base2):
            assert s(el_res) == s(base1) + s(el_base2)
    elif isinstance(base1, tuple) and isinstance(base2, tuple):
        assert isinstance(res, tuple) and len(res) == len(base1)
        for el_res, el_base1 in zip(res, base1):
            assert isinstance(el_res, tuple) and len(el_res) == len(base2)
            for el_el_res, el_base2 in zip(el_res, base2):
                assert s(el_el_res) == s(el_base1) + s(el_base2)
    else:
        raise RuntimeError("The bases given to `_assert_interleaved_struct` don't have the right structure.")


def _torch_only_if_vectorized(T, vectorize):
    if vectorize and T.name != "torch":
        pytest.skip("daskgrad's vectorize=True runs the vectorize=False code (no vmap); its slow create_graph "
                    "variant runs once, as vectorize=False")


def _not_equal(T, a, b):
    return not np.allclose(T.values(a), T.values(b))


def test_vjp_err_check(T):
    F = T.functional

    def foo(a):
        return 3 * a[:3]

    def bar(a):
        return 3 * a[:3], "bar"

    inp = T.rand(4)
    v = T.ones(3)
    with pytest.raises(TypeError, match="The inputs given to vjp must be either a Tensor"):
        F.vjp(foo, (inp, 2), v)
    with pytest.raises(TypeError, match="The outputs of the user-provided function given to vjp must"):
        F.vjp(bar, inp, v)
    with pytest.raises(RuntimeError, match="The vector v can only be None if the user-provided function returns"):
        F.vjp(foo, inp)
    with pytest.raises(RuntimeError, match="The given v should contain a single Tensor."):
        F.vjp(foo, inp, (T.ones_like(inp), T.ones_like(inp)))
    with pytest.raises(RuntimeError, match=f"v has invalid size: should be {T.name}.Size"):
        F.vjp(foo, inp, v[:2])
    res = F.vjp(foo, inp, v)[1]
    _assert_same_struct(T, res, inp)


def test_vjp_err_check_strict(T):
    F = T.functional

    def foo(a):
        return a.detach()

    def bar(a):
        return a.detach().requires_grad_().clone()

    inp = T.rand(4)
    v = T.rand(4)
    with pytest.raises(RuntimeError, match="Output 0 of the user-provided function does not require gradients."):
        F.vjp(foo, inp, v, strict=True)
    res = F.vjp(foo, inp, v, strict=False)
    _assert_same_struct(T, res[1], inp)
    T.assert_equal(res[1].abs().sum(), 0.0)
    with pytest.raises(RuntimeError, match="The output of the user-provided function is independent of input 0"):
        F.vjp(bar, inp, v, strict=True)
    res = F.vjp(bar, inp, v, strict=False)
    _assert_same_struct(T, res[1], inp)
    T.assert_equal(res[1].abs().sum(), 0.0)

    def foo(a):
        return a.clone()

    inp.requires_grad_()
    with pytest.raises(RuntimeError, match="jacobian of the user-provided function is independent of input 0."):
        F.vjp(foo, inp, v, create_graph=True, strict=True)
    res = F.vjp(foo, inp, v, create_graph=True, strict=False)
    _assert_same_struct(T, res[1], inp)
    T.assert_equal(res[1], v)


def test_vjp_no_grad(T):
    F = T.functional

    def reducer(x):
        return T.sum(x, dim=1)

    inputs = T.rand(4, 4)
    v = T.ones(4)
    with T.no_grad():
        res = F.vjp(reducer, inputs, v)
    assert res[0].grad_fn is None
    assert res[1].grad_fn is None
    assert _not_equal(T, res[1], T.zeros(4, 4))
    inputs.requires_grad_()
    v.requires_grad_()
    with T.no_grad():
        res = F.vjp(reducer, inputs, v, create_graph=True)
    assert res[0].grad_fn is not None
    assert res[1].grad_fn is not None
    assert _not_equal(T, res[1], T.zeros(4, 4))


def test_vjp_output(T):
    F = T.functional

    def reducer(x):
        return T.sum(x, dim=1)

    inputs = T.rand(4, 4)
    v = T.ones(4)
    res = F.vjp(reducer, inputs, v)
    _assert_same_struct(T, res[1], inputs)
    assert res[0].grad_fn is None
    assert res[1].grad_fn is None

    def adder(x, y):
        return 2 * x + 3 * y

    inputs = (T.rand(2), T.rand(2))
    v = T.ones(2)
    out, vjp_val = F.vjp(adder, inputs, v)
    _assert_same_struct(T, vjp_val, inputs)
    assert out.grad_fn is None
    assert vjp_val[0].grad_fn is None and vjp_val[1].grad_fn is None

    def adder(x, y):
        return 2 * x + 3 * y, x + y

    inputs = (T.rand(2), T.rand(2))
    v = (T.tensor([1.0, 0.0]), T.tensor([1.0, 0.0]))
    out, vjp_val = F.vjp(adder, inputs, v)
    _assert_same_struct(T, vjp_val, inputs)
    assert out[0].grad_fn is None and out[1].grad_fn is None
    assert vjp_val[0].grad_fn is None and vjp_val[1].grad_fn is None


def test_vjp_scalar(T):
    F = T.functional

    def reducer(x):
        return x.sum()

    inputs = T.rand(4, 4)
    v = T.ones([])
    res = F.vjp(reducer, inputs, v)
    _assert_same_struct(T, res[0], v)
    _assert_same_struct(T, res[1], inputs)
    res = F.vjp(reducer, inputs)
    _assert_same_struct(T, res[0], v)
    _assert_same_struct(T, res[1], inputs)

    def expander(x):
        return x * T.ones(4)

    inputs = T.rand([])
    v = T.ones(4)
    res = F.vjp(expander, inputs, v)
    _assert_same_struct(T, res[0], v)
    _assert_same_struct(T, res[1], inputs)


def test_vjp_create_graph(T):
    F = T.functional

    def reducer(x):
        return T.sum(x, dim=1)

    inputs = T.rand(2, 2, dtype=T.double)
    v = T.ones(2, dtype=T.double)
    inputs.requires_grad_()
    v.requires_grad_()
    res = F.vjp(reducer, inputs, v, create_graph=True)
    _assert_same_struct(T, res[1], inputs)
    assert res[0].grad_fn is not None
    assert res[1].grad_fn is not None
    T.gradcheck(lambda inp, v: F.vjp(reducer, inputs, v, create_graph=True), (inputs, v))
    T.gradgradcheck(lambda inp, v: F.vjp(reducer, inputs, v, create_graph=True), (inputs, v))

    def adder(x, y):
        return 2 * x + 3 * y, x * y

    inputs = (T.rand(2, dtype=T.double, requires_grad=True), T.rand(2, dtype=T.double, requires_grad=True))
    v = (T.tensor([1.0, 0.0], dtype=T.double, requires_grad=True),
         T.tensor([1.0, 0.0], dtype=T.double, requires_grad=True))
    T.gradcheck(lambda *args: F.vjp(adder, args[:2], args[2:], create_graph=True)[1], inputs + v)
    T.gradgradcheck(lambda *args: F.vjp(adder, args[:2], args[2:], create_graph=True)[1], inputs + v)

    def foo(*args):
        x, y = args[:2]
        v = args[2:]
        x = x.cos()
        val, grad = F.vjp(adder, (x, y), v, create_graph=True)
        return val[0].exp() + val[1].exp() + grad[0].exp() + grad[1].exp() + x.exp() + y.exp()

    T.gradcheck(foo, inputs + v)
    T.gradgradcheck(foo, inputs + v)


def test_jvp_err_check(T):
    F = T.functional

    def foo(a):
        return 3 * a[:3]

    def bar(a):
        return 3 * a[:3], "bar"

    inp = T.rand(4)
    v = T.rand(4)
    with pytest.raises(TypeError, match="The inputs given to jvp must be either a Tensor"):
        F.jvp(foo, (inp, 2), v)
    with pytest.raises(TypeError, match="The outputs of the user-provided function given to jvp must"):
        F.jvp(bar, inp, v)
    with pytest.raises(RuntimeError, match="The vector v can only be None if the input to the user-provided function"):
        F.jvp(foo, inp)
    with pytest.raises(RuntimeError, match="The given v should contain a single Tensor."):
        F.jvp(foo, inp, (v, v))
    with pytest.raises(RuntimeError, match=f"v has invalid size: should be {T.name}.Size"):
        F.jvp(foo, inp, v[:2])
    res = F.jvp(foo, inp, v)[1]
    _assert_same_struct(T, res, foo(inp))


def test_jvp_err_check_strict(T):
    F = T.functional

    def foo(a):
        return a.detach()

    def bar(a):
        return a.detach().requires_grad_().clone()

    inp = T.rand(4)
    v = T.rand(4)
    with pytest.raises(RuntimeError, match="Output 0 of the user-provided function does not require gradients."):
        F.jvp(foo, inp, v, strict=True)
    res = F.jvp(foo, inp, v, strict=False)
    _assert_same_struct(T, res[1], res[0])
    T.assert_equal(res[1].abs().sum(), 0.0)
    with pytest.raises(RuntimeError, match="The output of the user-provided function is independent of input 0"):
        F.jvp(bar, inp, v, strict=True)
    res = F.jvp(bar, inp, v, strict=False)
    _assert_same_struct(T, res[1], res[0])
    T.assert_equal(res[1].abs().sum(), 0.0)

    def foo(a):
        return a.clone()

    inp.requires_grad_()
    with pytest.raises(RuntimeError, match="jacobian of the user-provided function is independent of input 0."):
        F.jvp(foo, inp, v, create_graph=True, strict=True)
    res = F.jvp(foo, inp, v, create_graph=True, strict=False)
    _assert_same_struct(T, res[1], inp)
    T.assert_equal(res[1], v)


def test_jvp_no_grad(T):
    F = T.functional

    def reducer(x):
        return T.sum(x, dim=1)

    inputs = T.rand(4, 4)
    v = T.ones(4, 4)
    with T.no_grad():
        res = F.jvp(reducer, inputs, v)
    assert res[0].grad_fn is None and res[1].grad_fn is None
    assert _not_equal(T, res[1], T.zeros(4))
    inputs.requires_grad_()
    v.requires_grad_()
    with T.no_grad():
        res = F.jvp(reducer, inputs, v, create_graph=True)
    assert res[0].grad_fn is not None and res[1].grad_fn is not None
    assert _not_equal(T, res[1], T.zeros(4))


def test_jvp_output(T):
    F = T.functional

    def reducer(x):
        return T.sum(x, dim=1)

    inputs = T.rand(4, 4)
    v = T.ones(4, 4)
    res = F.jvp(reducer, inputs, v)
    _assert_same_struct(T, res[1], res[0])
    assert res[0].grad_fn is None and res[1].grad_fn is None

    def adder(x, y):
        return 2 * x + 3 * y

    inputs = (T.rand(2), T.rand(2))
    v = (T.ones(2), T.ones(2))
    out, jvp_val = F.jvp(adder, inputs, v)
    _assert_same_struct(T, jvp_val, out)
    assert out.grad_fn is None and jvp_val.grad_fn is None

    def adder(x, y):
        return 2 * x + 3 * y, x + y

    inputs = (T.rand(2), T.rand(2))
    v = (T.tensor([1.0, 0.0]), T.tensor([1.0, 0.0]))
    out, jvp_val = F.jvp(adder, inputs, v)
    _assert_same_struct(T, jvp_val, out)
    assert out[0].grad_fn is None and out[1].grad_fn is None
    assert jvp_val[0].grad_fn is None and jvp_val[1].grad_fn is None


def test_jvp_scalar(T):
    F = T.functional

    def reducer(x):
        return x.sum()

    inputs = T.rand(4, 4)
    v = T.ones(4, 4)
    res = F.jvp(reducer, inputs, v)
    _assert_same_struct(T, res[0], T.zeros([]))
    _assert_same_struct(T, res[1], res[0])

    def expander(x):
        return x * T.ones(4)

    inputs = T.rand([])
    v = T.ones([])
    res = F.jvp(expander, inputs, v)
    _assert_same_struct(T, res[0], T.zeros(4))
    _assert_same_struct(T, res[1], res[0])
    res = F.jvp(expander, inputs)
    _assert_same_struct(T, res[0], T.zeros(4))
    _assert_same_struct(T, res[1], res[0])


def test_jvp_create_graph(T):
    F = T.functional

    def reducer(x):
        return T.sum(x, dim=1)

    inputs = T.rand(2, 2, dtype=T.double)
    v = T.ones(2, 2, dtype=T.double)
    inputs.requires_grad_()
    v.requires_grad_()
    res = F.jvp(reducer, inputs, v, create_graph=True)
    _assert_same_struct(T, res[1], res[0])
    assert res[0].grad_fn is not None and res[1].grad_fn is not None
    T.gradcheck(lambda inp, v: F.jvp(reducer, inp, v, create_graph=True), (inputs, v))
    T.gradgradcheck(lambda inp, v: F.jvp(reducer, inp, v, create_graph=True), (inputs, v))

    def adder(x, y):
        return 2 * x + 3 * y, x * y

    inputs = (T.rand(2, dtype=T.double, requires_grad=True), T.rand(2, dtype=T.double, requires_grad=True))
    v = (T.tensor([1.0, 0.0], dtype=T.double, requires_grad=True),
         T.tensor([1.0, 0.0], dtype=T.double, requires_grad=True))
    T.gradcheck(lambda *args: F.jvp(adder, args[:2], args[2:], create_graph=True)[1], inputs + v)
    T.gradgradcheck(lambda *args: F.jvp(adder, args[:2], args[2:], create_graph=True)[1], inputs + v)

    def foo(*args):
        x, y = args[:2]
        v = args[2:]
        x = x.cos()
        val, grad = F.jvp(adder, (x, y), v, create_graph=True)
        return val[0].exp() + val[1].exp() + grad[0].exp() + grad[1].exp() + x.exp() + y.exp()

    T.gradcheck(foo, inputs + v)
    T.gradgradcheck(foo, inputs + v)


@pytest.mark.parametrize("vectorize", [True, False])
def test_jacobian_err_check(T, vectorize):
    F = T.functional

    def foo(a):
        return 3 * a[:3]

    def bar(a):
        return 3 * a[:3], "bar"

    inp = T.rand(4)
    with pytest.raises(TypeError, match="The inputs given to jacobian must be either a Tensor"):
        F.jacobian(foo, (inp, 2), vectorize=vectorize)
    with pytest.raises(TypeError, match="The outputs of the user-provided function given to jacobian must"):
        F.jacobian(bar, inp, vectorize=vectorize)
    res = F.jacobian(foo, inp, vectorize=vectorize)
    _assert_interleaved_struct(T, res, foo(inp), inp)

    def foo(a, b):
        return b, 3 * a[:3]

    inp = (T.rand(4), T.rand(5))
    res = F.jacobian(foo, inp, vectorize=vectorize)
    _assert_interleaved_struct(T, res, foo(*inp), inp)


def test_jacobian_err_check_strict(T):
    F = T.functional

    def foo(a):
        return a.detach()

    def bar(a):
        return a.detach().requires_grad_().clone()

    inp = T.rand(4)
    with pytest.raises(RuntimeError, match="Output 0 of the user-provided function does not require gradients."):
        F.jacobian(foo, inp, strict=True)
    res = F.jacobian(foo, inp, strict=False)
    _assert_interleaved_struct(T, res, foo(inp), inp)
    T.assert_equal(res.abs().sum(), 0.0)
    with pytest.raises(RuntimeError, match="Output 0 of the user-provided function is independent of input 0."):
        F.jacobian(bar, inp, strict=True)
    res = F.jacobian(bar, inp, strict=False)
    _assert_interleaved_struct(T, res, foo(inp), inp)
    T.assert_equal(res.abs().sum(), 0.0)

    def foo(a):
        return a.clone()

    inp.requires_grad_()
    with pytest.raises(RuntimeError, match="jacobian of the user-provided function is independent of input 0."):
        F.jacobian(foo, inp, create_graph=True, strict=True)
    res = F.jacobian(foo, inp, create_graph=True, strict=False)
    _assert_interleaved_struct(T, res, inp, inp)
    T.assert_equal(res, np.eye(4))


def test_jacobian_err_check_strict_vectorize(T):
    def foo(x):
        return x

    inp = T.rand(4)
    with pytest.raises(RuntimeError, match="not supported together"):
        T.functional.jacobian(foo, inp, strict=True, vectorize=True)


def test_jacobian_no_grad(T):
    F = T.functional

    def exp_reducer(x):
        return T.sum(x.exp(), dim=1)

    inputs = T.rand(4, 4)
    with T.no_grad():
        res = F.jacobian(exp_reducer, inputs)
    assert res.grad_fn is None
    assert _not_equal(T, res, T.zeros(4, 4, 4))
    with T.no_grad():
        res = F.jacobian(exp_reducer, inputs, create_graph=True)
    assert res.grad_fn is not None
    assert _not_equal(T, res, T.zeros(4, 4, 4))


@pytest.mark.parametrize("vectorize", [True, False])
def test_jacobian_output(T, vectorize):
    F = T.functional

    def exp_reducer(x):
        return T.sum(x.exp(), dim=1)

    inputs = T.rand(4, 4)
    res = F.jacobian(exp_reducer, inputs, vectorize=vectorize)
    _assert_interleaved_struct(T, res, exp_reducer(inputs), inputs)
    assert res.grad_fn is None

    def identity(x):
        return x.clone()

    inputs = T.rand(4)
    res = F.jacobian(identity, inputs, vectorize=vectorize)
    _assert_interleaved_struct(T, res, identity(inputs), inputs)
    assert res.grad_fn is None
    T.assert_equal(res, np.eye(4))

    def add_exp_reducer(x, y):
        return T.sum(x + y.exp(), dim=1)

    inputs = (T.rand(4, 4), T.rand(4, 4))
    res = F.jacobian(add_exp_reducer, inputs, vectorize=vectorize)
    _assert_interleaved_struct(T, res, add_exp_reducer(*inputs), inputs)
    assert res[0].grad_fn is None and res[1].grad_fn is None


@pytest.mark.parametrize("vectorize", [True, False])
def test_jacobian_scalar(T, vectorize):
    F = T.functional

    def reducer(x):
        return x.sum()

    inputs = T.rand(4, 4)
    res = F.jacobian(reducer, inputs, vectorize=vectorize)
    _assert_same_struct(T, res, inputs)

    def expander(x):
        return x * T.ones(4)

    inputs = T.rand([])
    res = F.jacobian(expander, inputs, vectorize=vectorize)
    _assert_same_struct(T, res, T.zeros(4))


@pytest.mark.parametrize("vectorize", [True, False])
def test_jacobian_create_graph(T, vectorize, request):
    _torch_only_if_vectorized(T, vectorize)
    F = T.functional

    def exp_reducer(x):
        return T.sum(x.exp(), dim=1)

    inputs = T.rand(4, 4, dtype=T.double, requires_grad=True)
    res = F.jacobian(exp_reducer, inputs, create_graph=True, vectorize=vectorize)
    _assert_interleaved_struct(T, res, exp_reducer(inputs), inputs)
    assert res.grad_fn is not None
    T.gradcheck(lambda inp: F.jacobian(exp_reducer, inp, create_graph=True, vectorize=vectorize), inputs)
    T.gradgradcheck(lambda inp: F.jacobian(exp_reducer, inp, create_graph=True, vectorize=vectorize), inputs)

    def add_exp_reducer(x, y):
        return T.sum((x + y).exp(), dim=1)

    inputs = (T.rand(4, 4, dtype=T.double, requires_grad=True), T.rand(4, 4, dtype=T.double, requires_grad=True))
    res = F.jacobian(add_exp_reducer, inputs, create_graph=True, vectorize=vectorize)
    _assert_interleaved_struct(T, res, add_exp_reducer(*inputs), inputs)
    assert res[0].grad_fn is not None and res[1].grad_fn is not None
    T.gradcheck(lambda *inp: F.jacobian(add_exp_reducer, inp, create_graph=True, vectorize=vectorize), inputs)
    T.gradgradcheck(lambda *inp: F.jacobian(add_exp_reducer, inp, create_graph=True, vectorize=vectorize), inputs)

    def foo(x, y):
        x = x.cos()
        val, jac = F.jacobian(add_exp_reducer, (x, y), create_graph=True, vectorize=vectorize)
        res = val[0].exp().sum() + val[1].exp().sum() + jac[0].exp().sum()
        return res + jac[1].exp().sum() + x.exp().sum() + y.exp().sum()

    T.gradcheck(foo, inputs)
    T.gradgradcheck(foo, inputs)


def _check_jacobian_vectorize_correctness(T, f, inputs):
    expected = T.functional.jacobian(f, inputs, vectorize=False)
    result_backward_mode = T.functional.jacobian(f, inputs, vectorize=True)
    T.assert_equal(result_backward_mode, expected)


def _check_hessian_vectorize_correctness(T, f, inputs):
    expected = T.functional.hessian(f, inputs, vectorize=False)
    result = T.functional.hessian(f, inputs, vectorize=True)
    T.assert_equal(result, expected)


def test_jacobian_vectorize_correctness_simple(T):
    def f(x):
        return 3 * x ** 2

    _check_jacobian_vectorize_correctness(T, f, T.randn(2, 3, 5))


def test_jacobian_vectorize_correctness_multi_input(T):
    def f(x, y):
        return T.matmul(x.cos() * x, y.sin())

    _check_jacobian_vectorize_correctness(T, f, (T.randn(2, 3), T.randn(3, 5)))


def test_jacobian_vectorize_correctness_multi_input_multi_output(T):
    def f(x, y):
        return T.matmul(x * x, y), T.matmul(x, T.sum(x, dim=1) * y), y.sum()

    _check_jacobian_vectorize_correctness(T, f, (T.randn(5, 3), T.randn(3, 5)))


def test_jacobian_vectorize_correctness_unrelated_outputs(T):
    def f(x, y):
        return x, y, x, y

    _check_jacobian_vectorize_correctness(T, f, (T.randn(2), T.randn(3)))


def test_jacobian_vectorize_correctness_zero_dim(T):
    def f(x, y):
        return x.sum(), y.sum(), x * y

    _check_jacobian_vectorize_correctness(T, f, (T.randn(3), T.randn(3)))

    def g(x):
        return T.stack([x, x, x])

    _check_jacobian_vectorize_correctness(T, g, T.randn([]))

    def h(x, y):
        return y.sum(), x * y

    _check_jacobian_vectorize_correctness(T, h, (T.randn([]), T.randn(1)))


def test_jacobian_vectorize_correctness_different_dtype(T):
    def f(x, y):
        return (x * y).float(), (x * y).double()

    _check_jacobian_vectorize_correctness(T, f, (T.randn(3), T.randn(3)))


def test_hessian_vectorize_correctness_simple(T):
    def f(x):
        return (3 * x ** 2).sum()

    _check_hessian_vectorize_correctness(T, f, T.randn(2, 3, 5))


def test_hessian_vectorize_correctness_multi_input(T):
    def f(x, y, z):
        return T.matmul(T.matmul(x.relu() * x, y.sin()), z).sum()

    _check_hessian_vectorize_correctness(T, f, (T.randn(2, 3), T.randn(3, 5), T.randn(5, 5)))


def test_hessian_vectorize_correctness_unrelated_outputs(T):
    def f(x, y):
        return (x ** 2).sum()

    _check_hessian_vectorize_correctness(T, f, (T.randn(2), T.randn(3)))

    def f(x, y):
        return T.ones([])

    _check_hessian_vectorize_correctness(T, f, (T.randn(2), T.randn(3)))


@pytest.mark.parametrize("vectorize", [True, False])
def test_hessian_err_check(T, vectorize):
    F = T.functional

    def foo(a):
        return 3 * a[:3].exp().sum()

    def bar(a):
        return 3 * a[:3], "bar"

    def bar2(a):
        return 3 * a[:3]

    def bar3(a):
        return 3 * a[:3], 3 * a[:3]

    inp = T.rand(4)
    with pytest.raises(TypeError, match="The inputs given to hessian must be either a Tensor"):
        F.hessian(foo, (inp, 2), vectorize=vectorize)
    with pytest.raises(TypeError, match="The outputs of the user-provided function given to hessian must"):
        F.hessian(bar, inp, vectorize=vectorize)
    with pytest.raises(RuntimeError, match="The Tensor returned by the function given to hessian should contain a "
                                           "single element"):
        F.hessian(bar2, inp, vectorize=vectorize)
    with pytest.raises(RuntimeError, match="The function given to hessian should return a single Tensor"):
        F.hessian(bar3, inp, vectorize=vectorize)
    res = F.hessian(foo, inp, vectorize=vectorize)
    _assert_interleaved_struct(T, res, inp, inp)

    def foo(a, b):
        return (3 * b[:3] * a[:3]).sum()

    inp = (T.rand(4), T.rand(5))
    res = F.hessian(foo, inp, vectorize=vectorize)
    _assert_interleaved_struct(T, res, inp, inp)


def test_hessian_err_check_strict(T):
    F = T.functional

    def foo(a):
        return a.detach().sum()

    def bar(a):
        return a.detach().requires_grad_().clone().sum()

    def bar2(a):
        return (3 * a).sum()

    inp = T.rand(4)
    with pytest.raises(RuntimeError, match="Output 0 of the user-provided function does not require gradients."):
        F.hessian(foo, inp, strict=True)
    res = F.hessian(foo, inp, strict=False)
    _assert_interleaved_struct(T, res, inp, inp)
    T.assert_equal(res.abs().sum(), 0.0)
    with pytest.raises(RuntimeError, match="jacobian of the user-provided function with respect to input 0"):
        F.hessian(bar, inp, strict=True)
    res = F.hessian(bar, inp, strict=False)
    _assert_interleaved_struct(T, res, inp, inp)
    T.assert_equal(res.abs().sum(), 0.0)
    with pytest.raises(RuntimeError, match="jacobian of the user-provided function with respect to input 0 is"):
        F.hessian(bar2, inp, strict=True)
    res = F.hessian(bar2, inp, strict=False)
    _assert_interleaved_struct(T, res, inp, inp)
    T.assert_equal(res.abs().sum(), 0.0)


def test_hessian_err_check_strict_vectorize(T):
    def foo(x):
        return (x ** 3).sum()

    inp = T.rand(4)
    with pytest.raises(RuntimeError, match="not supported together"):
        T.functional.hessian(foo, inp, strict=True, vectorize=True)


def test_hessian_no_grad(T):
    F = T.functional

    def pow_reducer(x):
        return x.pow(3).sum()

    inputs = T.rand(2, 2)
    with T.no_grad():
        res = F.hessian(pow_reducer, inputs)
    assert res[0][0].grad_fn is None and res[1][1].grad_fn is None
    assert _not_equal(T, res, T.zeros(2, 2, 2, 2))
    with T.no_grad():
        res = F.hessian(pow_reducer, inputs, create_graph=True)
    assert res[0][0].grad_fn is not None and res[1][1].grad_fn is not None
    assert _not_equal(T, res, T.zeros(2, 2, 2, 2))


@pytest.mark.parametrize("vectorize", [True, False])
def test_hessian_output(T, vectorize):
    F = T.functional

    def pow_reducer(x):
        return x.pow(3).sum()

    inputs = T.rand(2, 2)
    res = F.hessian(pow_reducer, inputs, vectorize=vectorize)
    _assert_interleaved_struct(T, res, inputs, inputs)
    assert res.grad_fn is None

    def add_pow_reducer(x, y):
        return (x + y).pow(3).sum()

    inputs = (T.rand(2, 2), T.rand(2, 2))
    res = F.hessian(add_pow_reducer, inputs, vectorize=vectorize)
    _assert_interleaved_struct(T, res, inputs, inputs)
    assert all(res[i][j].grad_fn is None for i in range(2) for j in range(2))


@pytest.mark.parametrize("vectorize", [True, False])
def test_hessian_scalar(T, vectorize):
    F = T.functional

    def reducer(x):
        return x.sum()

    inputs = T.rand(4, 4)
    res = F.hessian(reducer, inputs, vectorize=vectorize)
    _assert_interleaved_struct(T, res, inputs, inputs)
    inputs = T.rand([])
    res = F.hessian(reducer, inputs, vectorize=vectorize)
    _assert_same_struct(T, res, inputs)

    def bad_reducer(x):
        return T.reshape(x.sum(), (1, 1, 1))

    inputs = T.rand(4, 4)
    res = F.hessian(bad_reducer, inputs, vectorize=vectorize)
    _assert_interleaved_struct(T, res, inputs, inputs)


@pytest.mark.parametrize("vectorize", [True, False])
def test_hessian_create_graph(T, vectorize, request):
    _torch_only_if_vectorized(T, vectorize)
    F = T.functional

    def pow_reducer(x):
        return x.pow(3).sum()

    inputs = T.rand(2, 2, dtype=T.double, requires_grad=True)
    res = F.hessian(pow_reducer, inputs, create_graph=True, vectorize=vectorize)
    _assert_interleaved_struct(T, res, inputs, inputs)
    assert res.grad_fn is not None
    T.gradcheck(lambda inp: F.hessian(pow_reducer, inp, create_graph=True, vectorize=vectorize), inputs)
    T.gradgradcheck(lambda inp: F.hessian(pow_reducer, inp, create_graph=True, vectorize=vectorize), inputs)

    def add_pow_reducer(x, y):
        return (x + y).pow(3).sum()

    inputs = (T.rand(2, 2, dtype=T.double, requires_grad=True), T.rand(2, 2, dtype=T.double, requires_grad=True))
    res = F.hessian(add_pow_reducer, inputs, create_graph=True, vectorize=vectorize)
    _assert_interleaved_struct(T, res, inputs, inputs)
    assert all(res[i][j].grad_fn is not None for i in range(2) for j in range(2))

    def flatten(inp):
        return tuple(el_lvl2 for el_lvl1 in inp for el_lvl2 in el_lvl1)

    T.gradcheck(lambda *inp: flatten(F.hessian(add_pow_reducer, inp, create_graph=True, vectorize=vectorize)),
                inputs)
    T.gradgradcheck(lambda *inp: flatten(F.hessian(add_pow_reducer, inp, create_graph=True, vectorize=vectorize)),
                    inputs)

    def foo(x, y):
        x = x.cos()
        val, hess = F.hessian(add_pow_reducer, (x, y), create_graph=True, vectorize=vectorize)
        res = val[0].cos().sum() + val[1].cos().sum() + hess[0].cos().sum()
        return res + hess[1].cos().sum() + x.cos().sum() + y.cos().sum()

    T.gradcheck(foo, inputs)
    T.gradgradcheck(foo, inputs)


@pytest.mark.parametrize("api", ["vhp", "hvp"])
def test_vhp_hvp_err_check(T, api):
    fn = getattr(T.functional, api)

    def foo(a):
        return 3 * a[:3].exp().sum()

    def bar(a):
        return 3 * a[:3], "bar"

    def bar2(a):
        return 3 * a[:3]

    inp = T.rand(4)
    v = T.rand(4)
    with pytest.raises(TypeError, match=f"The inputs given to {api} must be either a Tensor"):
        fn(foo, (inp, 2), v)
    with pytest.raises(TypeError, match=f"The outputs of the user-provided function given to {api} must"):
        fn(bar, inp, v)
    with pytest.raises(RuntimeError, match=f"The Tensor returned by the function given to {api} should contain a "
                                           "single element"):
        fn(bar2, inp, v)
    with pytest.raises(RuntimeError, match="v has invalid size:"):
        fn(foo, inp, T.rand(5))
    with pytest.raises(TypeError, match=f"The v given to {api} must be either a Tensor or a tuple of Tensors"):
        fn(foo, inp, (v, 2))
    res = fn(foo, inp, v)
    _assert_same_struct(T, res[1], inp)

    def foo(a, b):
        return (3 * b[:3] * a[:3]).sum()

    inp = (T.rand(4), T.rand(5))
    v = (T.rand(4), T.rand(5))
    res = fn(foo, inp, v)
    _assert_same_struct(T, res[1], inp)


@pytest.mark.parametrize("api", ["vhp", "hvp"])
def test_vhp_hvp_err_check_strict(T, api):
    fn = getattr(T.functional, api)

    def foo(a):
        return a.detach().sum()

    def bar(a):
        return a.detach().requires_grad_().clone().sum()

    def bar2(a):
        return (3 * a).sum()

    inp = T.rand(4)
    v = T.rand(4)
    with pytest.raises(RuntimeError, match="Output 0 of the user-provided function does not require gradients."):
        fn(foo, inp, v, strict=True)
    res = fn(foo, inp, v, strict=False)
    _assert_same_struct(T, res[1], inp)
    T.assert_equal(res[1].abs().sum(), 0.0)
    with pytest.raises(RuntimeError, match="The output of the user-provided function is independent of input 0"):
        fn(bar, inp, v, strict=True)
    res = fn(bar, inp, v, strict=False)
    _assert_same_struct(T, res[1], inp)
    T.assert_equal(res[1].abs().sum(), 0.0)
    with pytest.raises(RuntimeError, match="jacobian of the user-provided function with respect to input 0 is"):
        fn(bar2, inp, v, strict=True)
    res = fn(bar2, inp, v, strict=False)
    _assert_same_struct(T, res[1], inp)
    T.assert_equal(res[1].abs().sum(), 0.0)


@pytest.mark.parametrize("api", ["vhp", "hvp"])
def test_vhp_hvp_no_grad(T, api):
    fn = getattr(T.functional, api)

    def reducer(x):
        return x.exp().sum()

    inputs = T.rand(4, 4)
    v = T.ones(4, 4)
    with T.no_grad():
        res = fn(reducer, inputs, v)
    assert res[0].grad_fn is None and res[1].grad_fn is None
    assert _not_equal(T, res[1], T.zeros(4, 4))
    with T.no_grad():
        res = fn(reducer, inputs, v, create_graph=True)
    assert res[0].grad_fn is not None and res[1].grad_fn is not None
    assert _not_equal(T, res[1], T.zeros(4, 4))


@pytest.mark.parametrize("api", ["vhp", "hvp"])
def test_vhp_hvp_output(T, api):
    fn = getattr(T.functional, api)

    def foo(a):
        return 3 * a[:3].exp().sum()

    inputs = T.rand(4, 4)
    v = T.ones(4, 4)
    res = fn(foo, inputs, v)
    _assert_same_struct(T, res[1], inputs)
    assert res[0].grad_fn is None and res[1].grad_fn is None

    def bar(a, b):
        return (a + 3 * b[:3]).exp().sum()

    inputs = (T.rand(3), T.rand(4))
    v = (T.ones(3), T.ones(4))
    out, val = fn(bar, inputs, v)
    _assert_same_struct(T, val, inputs)
    assert out.grad_fn is None and val[0].grad_fn is None and val[1].grad_fn is None


@pytest.mark.parametrize("api", ["vhp", "hvp"])
def test_vhp_hvp_scalar(T, api):
    fn = getattr(T.functional, api)

    def reducer(x):
        return x.exp().sum()

    inputs = T.rand(4, 4)
    v = T.ones(4, 4)
    res = fn(reducer, inputs, v)
    _assert_same_struct(T, res[1], inputs)
    inputs = T.rand([])
    v = T.rand([])
    res = fn(reducer, inputs, v)
    _assert_same_struct(T, res[1], inputs)
    res = fn(reducer, inputs)
    _assert_same_struct(T, res[1], inputs)

    def bad_reducer(x):
        return T.reshape(x.exp().sum(), (1, 1, 1))

    inputs = T.rand(4, 4)
    v = T.rand(4, 4)
    res = fn(bad_reducer, inputs, v)
    _assert_same_struct(T, res[1], inputs)


@pytest.mark.parametrize("api", ["vhp", "hvp"])
def test_vhp_hvp_create_graph(T, api):
    fn = getattr(T.functional, api)

    def foo(a):
        return 3 * a[:3].exp().sum()

    inputs = T.rand(4, 4, dtype=T.double, requires_grad=True)
    v = T.ones(4, 4, dtype=T.double, requires_grad=True)
    res = fn(foo, inputs, v, create_graph=True)
    _assert_same_struct(T, res[1], inputs)
    assert res[0].grad_fn is not None and res[1].grad_fn is not None
    T.gradcheck(lambda inp, v: fn(foo, inp, v, create_graph=True), (inputs, v))
    T.gradgradcheck(lambda inp, v: fn(foo, inp, v, create_graph=True), (inputs, v))

    def bar(a, b):
        return (a + 3 * b[:3]).exp().sum()

    inputs = (T.rand(3, dtype=T.double, requires_grad=True), T.rand(4, dtype=T.double, requires_grad=True))
    v = (T.ones(3, dtype=T.double, requires_grad=True), T.ones(4, dtype=T.double, requires_grad=True))
    out, val = fn(bar, inputs, v, create_graph=True)
    _assert_same_struct(T, val, inputs)
    assert out.grad_fn is not None and val[0].grad_fn is not None and val[1].grad_fn is not None
    T.gradcheck(lambda *args: fn(bar, args[:2], args[2:], create_graph=True)[1], inputs + v)
    T.gradgradcheck(lambda *args: fn(bar, args[:2], args[2:], create_graph=True)[1], inputs + v)

    def foo(*args):
        x, y = args[:2]
        v = args[2:]
        x = x.cos()
        val, grad = fn(bar, (x, y), v, create_graph=True)
        return val.cos() + grad[0].cos().sum() + grad[1].cos() + x.cos().sum() + y.cos()

    T.gradcheck(foo, inputs + v)
    T.gradgradcheck(foo, inputs + v)


def test_jacobian_match_vjp_jvp(T):
    F = T.functional

    def foo(x):
        return x ** 3 + x.sum()

    inputs = T.rand(4)
    v = T.rand(4)
    jac = F.jacobian(foo, inputs)
    jvp = F.jvp(foo, inputs, v)[1]
    vjp = F.vjp(foo, inputs, v)[1]
    T.assert_equal(jvp, T.matmul(jac, v))
    T.assert_equal(vjp, T.matmul(v, jac))


def test_hessian_match_vhp_hvp(T):
    F = T.functional

    def foo(a):
        return 3 * a[:3].exp().sum()

    inputs = T.rand(4)
    v = T.rand(4)
    hes = F.hessian(foo, inputs)
    hvp = F.hvp(foo, inputs, v)[1]
    vhp = F.vhp(foo, inputs, v)[1]
    T.assert_equal(hvp, T.matmul(hes, v))
    T.assert_equal(vhp, T.matmul(v, hes))
