"""Regressions found by porting PyTorch's autograd tests (tests/torch_autograd/): each test here
failed before its fix."""
import warnings

import numpy as np
import pytest

import daskgrad as dg


def vec(values, chunks=2, requires_grad=True):
    return dg.from_array(np.asarray(values, dtype=np.float64), chunks=chunks, requires_grad=requires_grad)


@pytest.mark.parametrize("make, target", [(dg.no_grad, False), (dg.enable_grad, True),
                                          (lambda: dg.set_grad_enabled(False), False),
                                          (dg.inference_mode, False)],
                         ids=["no_grad", "enable_grad", "set_grad_enabled", "inference_mode"])
def test_grad_mode_decorator_reaches_generator_body_and_is_undone_between_yields(make, target):
    with dg.set_grad_enabled(not target):
        @make()
        def gen():
            for _ in range(2):
                yield dg.is_grad_enabled()

        seen = [(inside, dg.is_grad_enabled()) for inside in gen()]
    assert seen == [(target, not target)] * 2


def test_bare_no_grad_decorator_without_call():
    @dg.no_grad
    def f(x):
        return x * 2

    assert not f(vec([1.0, 2.0])).requires_grad


def test_detect_anomaly_check_nan_false_does_not_raise_for_nan():
    x = vec([0.0, 1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with dg.autograd.detect_anomaly(check_nan=False):
            (dg.sqrt(x) * 0).sum().backward()  # sqrt'(0) * 0 = inf * 0 = nan
    assert np.isnan(x.grad.numpy()[0])


def test_set_detect_anomaly_is_a_context_manager_that_restores():
    with dg.autograd.set_detect_anomaly(True, check_nan=False):
        assert dg.is_anomaly_enabled()
    assert not dg.is_anomaly_enabled()


def test_function_saving_its_own_output_has_the_right_second_derivative():
    class Exp(dg.Function):
        @staticmethod
        def forward(ctx, x):
            y = dg.exp(x)
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            return g * y

    x = vec([0.5, 1.0, -1.0])
    (g,) = dg.grad(Exp.apply(x).sum(), x, create_graph=True)
    (gg,) = dg.grad(g.sum(), x)
    np.testing.assert_allclose(gg.numpy(), np.exp([0.5, 1.0, -1.0]))


class _Double(dg.Function):
    @staticmethod
    def forward(ctx, a):
        a.mul_(2)
        ctx.mark_dirty(a)
        return a

    @staticmethod
    def backward(ctx, g):
        return 2 * g


def test_mark_dirty_returns_the_input_rebased_on_the_function_node():
    a = vec([1.0, 2.0, 3.0])
    b = a.clone()
    c = _Double.apply(b)
    assert c is b and type(b.grad_fn).__name__ == "_DoubleBackward"
    c.sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), [2.0, 2.0, 2.0])


def test_mark_dirty_on_a_leaf_that_requires_grad_raises():
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
        _Double.apply(vec([1.0, 2.0]))


def _square(b):
    return b * b


@pytest.mark.parametrize("vjp", [lambda g, b: (g[:1] * b[:1],), lambda g, b: ((2 * g * b).astype(np.float32),),
                                 lambda g, b: ((2 * g * b).sum(),), lambda g, b: (2 * g * b, g)],
                         ids=["shape", "dtype", "rank", "count"])
def test_map_blocks_vjp_with_wrong_blocks_raises_and_writes_no_grad(vjp):
    x = vec([1.0, 2.0, 3.0, 4.0, 5.0])
    with pytest.raises(RuntimeError, match="map_blocks vjp of _square returned"):
        dg.map_blocks(_square, x, vjp=vjp).sum().backward()
    assert x.grad is None


def test_map_blocks_vjp_wrong_shape_only_in_some_blocks_raises_per_block():
    def vjp(g, b):  # right on empty (meta) blocks and on full ones, wrong on the short last block
        return ((2 * g * b) if b.shape[0] != 1 else np.zeros(2),)

    x = vec([1.0, 2.0, 3.0, 4.0, 5.0])
    with pytest.raises(RuntimeError, match=r"returned a block of shape \(2,\).*block has shape \(1,\)"):
        dg.map_blocks(_square, x, vjp=vjp).sum().backward()
    assert x.grad is None


def test_function_backward_may_return_extra_none_gradients():
    class Id(dg.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, g):
            return g, None, None

    x = vec([1.0, 2.0])
    Id.apply(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 1.0])


def test_gradcheck_of_a_function_without_differentiable_outputs_checks_the_numerical_gradient_is_zero():
    x = vec([1.0, 2.0, 3.0])
    with pytest.raises(RuntimeError, match="Numerical gradient for function expected to be zero"):
        dg.testing.gradcheck(lambda t: t.detach(), x)
    assert dg.testing.gradcheck(lambda t: dg.zeros_like(t), x)


def test_gradcheck_of_a_function_with_tuple_outputs():
    x = vec([1.0, 2.0, 3.0])
    assert dg.testing.gradcheck(lambda t: (t * t, dg.exp(t)), x)

    class Wrong(dg.Function):
        @staticmethod
        def forward(ctx, t):
            return t * t

        @staticmethod
        def backward(ctx, g):
            return g  # should be 2 t g

    with pytest.raises(dg.testing.GradcheckError):
        dg.testing.gradcheck(lambda t: (dg.exp(t), Wrong.apply(t)), x)


def test_anomaly_mode_names_the_node_whose_saved_value_was_modified():
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            with dg.autograd.detect_anomaly():
                a = vec([1.0, 2.0, 3.0])
                d1 = a + 1
                d2 = d1 ** 2
                d1 += 1
                dg.grad(d2.sum(), a)
    assert "Error detected in PowBackward0" in str(w[-1].message)


def test_functional_jacobian_of_several_outputs_and_inputs_is_nested_like_torch():
    x, y = vec([1.0, 2.0]), vec([3.0, 4.0, 5.0])
    (jxx, jxy), (jyx, jyy) = dg.functional.jacobian(lambda a, b: (a * 2, b.sum()), (x, y))
    np.testing.assert_allclose(jxx.numpy(), 2 * np.eye(2))
    np.testing.assert_allclose(jxy.numpy(), np.zeros((2, 3)))
    np.testing.assert_allclose(jyx.numpy(), np.zeros(2))
    np.testing.assert_allclose(jyy.numpy(), np.ones(3))


def test_functional_hessian_of_several_inputs():
    x, y = vec([1.0, 2.0]), vec([3.0, 4.0])
    (hxx, hxy), (hyx, hyy) = dg.functional.hessian(lambda a, b: (a * b).sum(), (x, y))
    np.testing.assert_allclose(hxy.numpy(), np.eye(2))
    np.testing.assert_allclose(hxx.numpy(), np.zeros((2, 2)))


def test_functional_vjp_strict_raises_for_an_output_independent_of_the_input():
    with pytest.raises(RuntimeError, match="The output of the user-provided function is independent of input 0"):
        dg.functional.vjp(lambda a: a.detach().requires_grad_().clone(), vec([1.0, 2.0]), vec([1.0, 1.0]),
                          strict=True)


def test_gradcheck_perturbs_the_input_itself_so_closures_see_it():
    x = vec([1.0, 2.0, 3.0])
    assert dg.testing.gradcheck(lambda t: (x * x, t * 1), x)


def test_gradgradcheck_of_tuple_outputs():
    x = vec([1.0, 2.0, 3.0])
    assert dg.testing.gradgradcheck(lambda t: (t ** 3, dg.exp(t)), x)


def test_function_without_forward_raises_torchs_text():
    class BadFw(dg.Function):
        @staticmethod
        def backward(ctx, g):
            return g

    with pytest.raises(NotImplementedError, match="You must implement the forward function for custom autograd"):
        BadFw.apply(vec([1.0]))


class _TwoOut(dg.Function):
    @staticmethod
    def forward(ctx, x, materialize):
        ctx.set_materialize_grads(materialize)
        return x * 1, x * 2

    @staticmethod
    def backward(ctx, ga, gb):
        _TwoOut.seen = (ga is None, gb is None)
        return (ga if ga is not None else 0) + 2 * (gb if gb is not None else 0), None


@pytest.mark.parametrize("materialize", [True, False])
def test_function_with_two_outputs_and_set_materialize_grads(materialize):
    x = vec([1.0, 2.0, 3.0])
    a, b = _TwoOut.apply(x, materialize)
    assert type(a.grad_fn).__name__ == "_TwoOutBackward"
    b.sum().backward()  # a unused: torch passes zeros, or None when not materialized
    assert _TwoOut.seen == (not materialize, False)
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0, 2.0])
    assert dg.testing.gradgradcheck(lambda t: _TwoOut.apply(t, materialize)[0] ** 2, x)


def test_grad_fn_metadata_keeps_what_is_written_to_it_as_torch():
    x = dg.tensor([1.0, 2.0], requires_grad=True)
    y = (x * 2).sum()
    y.grad_fn.metadata["tag"] = "loss"
    assert y.grad_fn.metadata == {"tag": "loss"}
    assert y.grad_fn.next_functions[0][0].metadata == {}
    torch = pytest.importorskip("torch")
    t = (torch.tensor([1.0, 2.0], requires_grad=True) * 2).sum()
    t.grad_fn.metadata["tag"] = "loss"
    assert t.grad_fn.metadata == {"tag": "loss"}
