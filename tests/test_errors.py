"""Each error users meet has torch's type and text, and nothing is written when it fires."""
import re
import sys
import warnings

import numpy as np
import pytest

import daskgrad as dg


def raises(exc, text):
    return pytest.raises(exc, match="^" + re.escape(text) + "$")


def x3():
    return dg.tensor([1.0, 2.0, 3.0], requires_grad=True)


def test_implicit_grad_only_for_scalar_outputs():
    with raises(RuntimeError, "grad can be implicitly created only for scalar outputs"):
        (x3() * 2).backward()


@pytest.mark.parametrize("out_shape,grad_shape", [((3,), (4,)), ((2, 3), (3,)), ((2, 3), (3, 2)), ((), (1,))])
def test_gradient_shape_mismatch(out_shape, grad_shape):
    x = dg.ones(*out_shape, requires_grad=True)
    with raises(RuntimeError, f"Mismatch in shape: grad_output[0] has a shape of daskgrad.Size({list(grad_shape)}) "
                              f"and output[0] has a shape of daskgrad.Size({list(out_shape)})."):
        (x * 2).backward(dg.ones(*grad_shape))
    assert x.grad is None


def test_second_backward_through_freed_graph():
    x = x3()
    y = x.exp().sum()
    y.backward()
    with raises(RuntimeError, dg.graph.FREED_MESSAGE):
        y.backward()
    with raises(RuntimeError, dg.graph.FREED_MESSAGE):
        y.grad_fn.next_functions[0][0]._saved_r


def test_nodes_that_saved_nothing_can_be_traversed_twice():
    x = x3()
    y = (x + 2).sum()
    y.backward()
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [2, 2, 2])


@pytest.mark.parametrize("make", [lambda: dg.ones(3), lambda: x3().detach(), lambda: _no_grad_out()])
def test_backward_on_tensor_without_grad(make):
    with raises(RuntimeError, "element 0 of tensors does not require grad and does not have a grad_fn"):
        make().sum().backward()


def _no_grad_out():
    x = x3()
    with dg.no_grad():
        return x * 2


def test_first_order_grad_without_create_graph_is_not_differentiable():
    x = dg.tensor(2.0, requires_grad=True)
    (g,) = dg.grad(x ** 3, x)
    assert g.grad_fn is None
    with raises(RuntimeError, "element 0 of tensors does not require grad and does not have a grad_fn"):
        dg.grad(g, x)


def test_integer_tensors_cannot_require_grad():
    with raises(RuntimeError, "Only Tensors of floating point and complex dtype can require gradients"):
        dg.tensor([1, 2], requires_grad=True)
    with raises(RuntimeError, "Only Tensors of floating point and complex dtype can require gradients"):
        dg.ones(3, dtype="int64", requires_grad=True)
    t = dg.tensor([1, 2])
    with raises(RuntimeError, "only Tensors of floating point and complex dtype can require gradients"):
        t.requires_grad = True
    with raises(RuntimeError, "only Tensors of floating point dtype can require gradients"):
        t.requires_grad_()


def test_inplace_change_of_saved_output():
    x = x3()
    y = (x * 1).exp()
    z = y.sum()
    y.mul_(2)
    with raises(RuntimeError, "one of the variables needed for gradient computation has been modified by an "
                              "inplace operation: [daskgrad.FloatTensor [3]], which is output 0 of Exp, is at "
                              "version 1; expected version 0 instead. Hint: enable anomaly detection to find the "
                              "operation that failed to compute its gradient, with "
                              "daskgrad.autograd.set_detect_anomaly(True, check_nan=False)."):
        z.backward()
    assert x.grad is None


def test_inplace_change_of_saved_leaf_under_no_grad():
    x = x3()
    z = (x * x).sum()
    with dg.no_grad():
        x.add_(1)
    with raises(RuntimeError, "one of the variables needed for gradient computation has been modified by an "
                              "inplace operation: [daskgrad.FloatTensor [3]] is at version 1; expected version 0 "
                              "instead. Hint: enable anomaly detection to find the operation that failed to "
                              "compute its gradient, with daskgrad.autograd.set_detect_anomaly(True, "
                              "check_nan=False)."):
        z.backward()


def test_inplace_on_leaf_that_requires_grad():
    a = x3()
    with raises(RuntimeError, "a leaf Variable that requires grad is being used in an in-place operation."):
        a.add_(1)
    with raises(RuntimeError, "a view of a leaf Variable that requires grad is being used in an in-place operation."):
        a[0] = 5
    with raises(RuntimeError, "a view of a leaf Variable that requires grad is being used in an in-place operation."):
        a[:2].add_(1)


def test_inplace_on_non_leaf_is_recorded():
    a = x3()
    b = a * 1
    b.add_(1)
    assert type(b.grad_fn).__name__ == "AddBackward0"
    b.sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), [1, 1, 1])


def test_grad_on_unused_input():
    x, w = x3(), x3()
    with raises(RuntimeError, "The differentiated Tensor at index 1 appears to not have been used in the graph. "
                              "Set allow_unused=True if this is the desired behavior."):
        dg.grad((x * 2).sum(), [x, w])
    assert dg.grad((x * 2).sum(), [x, w], allow_unused=True)[1] is None
    np.testing.assert_array_equal(dg.grad((x * 2).sum(), [x, w], materialize_grads=True)[1].numpy(), [0, 0, 0])
    with raises(ValueError, "Expected allow_unused to be True or not passed when materialize_grads=True, but got: "
                            "allow_unused=False."):
        dg.grad((x * 2).sum(), [x], allow_unused=False, materialize_grads=True)


def test_grad_argument_errors():
    x = x3()
    y = (x * 2).sum()
    with raises(RuntimeError, "One of the differentiated Tensors does not require grad"):
        dg.grad(y, [dg.ones(3)])
    with raises(RuntimeError, "`inputs` argument to `grad()` cannot be empty."):
        dg.grad(y, [])
    with raises(RuntimeError, "`inputs` argument to `backward()` cannot be empty."):
        y.backward(inputs=[])
    with raises(RuntimeError, "can't retain_grad on Tensor that has requires_grad=False"):
        y.backward(inputs=[dg.ones(3)])
    with raises(RuntimeError, "got 2 tensors and 1 gradients"):
        dg.backward([y, y], [dg.tensor(1.0)])


def test_gradient_argument_types():
    y = (x3() * 2).sum()
    with raises(TypeError, "'float' object is not iterable"):
        y.backward(1.0)
    with raises(TypeError, "gradients can be either Tensors or None, but got float"):
        (x3() * 2).backward([0.1, 1.0, 0.0])


def test_requires_grad_flags_of_non_leaf():
    y = x3() * 2
    with raises(RuntimeError, "you can only change requires_grad flags of leaf variables. If you want to use a "
                              "computed variable in a subgraph that doesn't require differentiation use "
                              "var_no_grad = var.detach()."):
        y.requires_grad = False
    with raises(RuntimeError, "you can only change requires_grad flags of leaf variables."):
        y.requires_grad = True  # (torch 2.13's setter refuses it too, with the short text)
    assert y.requires_grad_() is y and y.requires_grad_(True).requires_grad  # (the method takes it as a no-op)


def test_hook_and_retain_grad_errors():
    t = dg.ones(3)
    with raises(RuntimeError, "can't retain_grad on Tensor that has requires_grad=False"):
        t.retain_grad()
    with raises(RuntimeError, "cannot register a hook on a tensor that doesn't require gradient"):
        t.register_hook(lambda g: g)
    x = x3()
    x.register_hook(lambda g: g.sum())
    with raises(RuntimeError, "hook '<lambda>' has changed the size of value"):
        (x * 2).sum().backward()
    assert x.grad is None


def test_grad_assignment_checks():
    x = x3()
    with raises(RuntimeError, "attempting to assign a gradient of size '[4]' to a tensor of size '[3]'. Please "
                              "ensure that the gradient and the tensor are the same size"):
        x.grad = dg.ones(4)
    with raises(RuntimeError, "attempting to assign a gradient with dtype 'double' to a tensor with grad_dtype "
                              "'Float'. The gradient must match the tensor's grad_dtype (defaults to the tensor's "
                              "dtype). You can set the tensor's grad_dtype attribute with a specific dtype, or None "
                              "to allow any dtype. Set grad_dtype with caution. Diverging the dtypes of a tensor "
                              "and its gradient may break downstream systems that assume they match."):
        x.grad = dg.ones(3, dtype="float64")
    with raises(TypeError, "assigned grad expected to be a Tensor or None but got grad of type int"):
        x.grad = 3
    with raises(AttributeError, "'NoneType' object has no attribute 'zero_'"):
        x.grad.zero_()


def test_numpy_on_requires_grad_and_detach_views():
    with raises(RuntimeError, "Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead."):
        x3().numpy()
    with pytest.raises(RuntimeError, match="^Can't detach views in-place. Use detach"):
        x3()[1:].detach_()


def test_custom_function_errors():
    class TooFew(dg.Function):
        @staticmethod
        def forward(ctx, a, b):
            return a * b

        @staticmethod
        def backward(ctx, g):
            return g

    class WrongShape(dg.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def backward(ctx, g):
            return dg.ones(5)

    class GradForNonTensor(dg.Function):
        @staticmethod
        def forward(ctx, a, b, k):
            return a * k

        @staticmethod
        def backward(ctx, g):
            return g, None, g

    class SaveInt(dg.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(3)
            return a

    a = dg.tensor([1.0, 2.0], requires_grad=True)
    with raises(RuntimeError, "function TooFewBackward returned an incorrect number of gradients (expected 2, got 1)"):
        TooFew.apply(a, a).sum().backward()
    with raises(RuntimeError, "Function WrongShapeBackward returned an invalid gradient at index 0 - got [5] but "
                              "expected shape compatible with [2]"):
        WrongShape.apply(a).sum().backward()
    with raises(RuntimeError, "function GradForNonTensorBackward returned a gradient different than None at "
                              "position 3, but the corresponding forward input was not a Variable"):
        GradForNonTensor.apply(a, a, 2.0).sum().backward()
    with raises(TypeError, "save_for_backward can only save variables, but argument 0 is of type int"):
        SaveInt.apply(a)
    assert a.grad is None


def test_functional_errors():
    f = dg.functional
    with raises(RuntimeError, "The vector v can only be None if the user-provided function returns a single Tensor "
                              "with a single element."):
        f.vjp(lambda t: t * 2, x3())
    with raises(RuntimeError, "v has invalid size: should be daskgrad.Size([3]) but got daskgrad.Size([4])."):
        f.vjp(lambda t: t * 2, x3(), dg.ones(4))
    with raises(TypeError, "The inputs given to vjp must be either a Tensor or a tuple of Tensors but the given "
                           "inputs has type <class 'list'>."):
        f.vjp(lambda t: t * 2, [x3()])
    with raises(RuntimeError, "The Tensor returned by the function given to hvp should contain a single element"):
        f.hvp(lambda t: t * 2, x3(), dg.ones(3))
    with raises(RuntimeError, "Output 0 of the user-provided function does not require gradients. The outputs must "
                              "be computed in a differentiable manner from the input when running in strict mode."):
        f.jacobian(lambda t: dg.ones(3), x3(), strict=True)


def test_gradcheck_errors():
    from daskgrad.testing import GradcheckError, gradcheck

    with raises(ValueError, "gradcheck expects at least one input tensor to require gradient, but none of them have "
                            "requires_grad=True."):
        gradcheck(lambda t: t * 2, [dg.ones(3, dtype="float64")])

    class Wrong(dg.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def backward(ctx, g):
            return g * 3

    x = dg.ones(3, dtype="float64", requires_grad=True)
    with pytest.raises(GradcheckError, match="^Jacobian mismatch for output 0 with respect to input 0,\nnumerical:"):
        gradcheck(Wrong.apply, [x])
    assert gradcheck(Wrong.apply, [x], raise_exception=False) is False


def test_backward_from_an_output_of_unknown_size_is_refused_before_submitting():
    x = x3()
    y = x[x > 1.5]
    with pytest.raises(RuntimeError, match=r"^output\[0\] has unknown chunk sizes"):
        y.backward(dg.ones(2))
    y.sum().backward()  # the reduced loss has a known shape
    np.testing.assert_allclose(x.grad.numpy(), [0, 1, 1])


def _gpu_present():
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001
        return False


@pytest.mark.skipif(_gpu_present(), reason="a GPU is present")
def test_asking_for_cuda_without_a_gpu_raises_torchs_error_at_the_call():
    pytest.importorskip("cupy")
    x = dg.ones(3, requires_grad=True)
    for make in (lambda: dg.ones(3, device="cuda"), lambda: dg.randn(2, device="cuda:0"), lambda: x.cuda(),
                 lambda: x.to("cuda"), lambda: dg.tensor([1.0], device="cuda")):
        with pytest.raises(RuntimeError, match="^No CUDA GPUs are available$"):
            make()
    assert x.grad is None and x.device == "cpu"


def test_asking_for_cuda_without_cupy_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    monkeypatch.setattr(sys.modules["daskgrad._tensor"], "_cuda_ok", False)
    with pytest.raises(AssertionError, match=r"cupy is missing\): pip install 'daskgrad\[gpu\]'"):
        dg.zeros(2, device="cuda")


def test_inference_tensors_cannot_be_saved_given_requires_grad_or_written_outside_the_mode():
    w = dg.ones(3, requires_grad=True)
    with dg.inference_mode():
        y = dg.ones(3) * 2
    with raises(RuntimeError, "Inference tensors cannot be saved for backward. Please do not use Tensors created "
                              "in inference mode in computation tracked by autograd. To work around this, you can "
                              "make a clone to get a normal tensor and use it in autograd, or use "
                              "`daskgrad.no_grad()` instead of `daskgrad.inference_mode()`."):
        y * w
    with raises(RuntimeError, "Setting requires_grad=True on inference tensor outside InferenceMode is not allowed."):
        y.requires_grad_()
    inplace = ("Inplace update to inference tensor outside InferenceMode is not allowed.You can make a clone to "
               "get a normal tensor before doing inplace update.See https://github.com/pytorch/rfcs/pull/17 for "
               "more details.")
    for write in (lambda: y.add_(1), lambda: y.zero_(), lambda: y.__setitem__(0, 5.0)):
        with raises(RuntimeError, inplace):
            write()
    with dg.no_grad(), raises(RuntimeError, inplace):
        y.mul_(2)
    assert y._version == 0 and w.grad is None
    with raises(RuntimeError, "element 0 of tensors does not require grad and does not have a grad_fn"):
        y.sum().backward()


def test_is_grads_batched_checks_the_trailing_shape_before_submitting():
    x = x3()
    with raises(RuntimeError, "If `is_grads_batched=True`, we interpret the first dimension of each grad_output as "
                              "the batch dimension. The sizes of the remaining dimensions are expected to match the "
                              "shape of corresponding output, but a mismatch was detected: grad_output[0] has a "
                              "shape of daskgrad.Size([]) and output[0] has a shape of daskgrad.Size([3]). If "
                              "you only want some tensors in `grad_output` to be considered batched, consider "
                              "using vmap."):
        dg.grad(x * 2, x, dg.ones(4, 2), is_grads_batched=True)
    y = x * 2
    (g,) = dg.grad(y, x, dg.ones(2, 3), is_grads_batched=True)  # the failed call freed nothing
    np.testing.assert_allclose(g.numpy(), 2)


# ------------------------------------------------------------------ sizes no tensor can have: refused at once
MAKERS = {"zeros": lambda lib, *s: lib.zeros(*s), "ones": lambda lib, *s: lib.ones(*s),
          "full": lambda lib, *s: lib.full(s, 1.0), "empty": lambda lib, *s: lib.empty(*s),
          "rand": lambda lib, *s: lib.rand(*s), "randn": lambda lib, *s: lib.randn(*s)}


@pytest.mark.parametrize("make", list(MAKERS))
@pytest.mark.parametrize("shape", [(-1,), (2, -3)])
def test_a_negative_dimension_raises_torch_s_error(make, shape):
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError) as want:
        MAKERS[make](torch, *shape)
    with raises(RuntimeError, str(want.value)):
        MAKERS[make](dg, *shape)


def test_arange_s_impossible_steps_raise_torch_s_errors():
    torch = pytest.importorskip("torch")
    for args in [(0, 10, 0), (0, -10, 1), (5, 1, 2)]:
        with pytest.raises(RuntimeError) as want:
            torch.arange(*args)
        with raises(RuntimeError, str(want.value)):
            dg.arange(*args)


HUGE = {"zeros": lambda: dg.zeros(10**15), "ones": lambda: dg.ones(10**8, 10**7), "full": lambda: dg.full(10**15, 2.0),
        "empty": lambda: dg.empty(10**15), "rand": lambda: dg.rand(10**15), "randn": lambda: dg.randn(10**15),
        "arange": lambda: dg.arange(10**15), "eye": lambda: dg.eye(10**8),
        "linspace": lambda: dg.linspace(0, 1, 10**15), "chunks=1": lambda: dg.zeros(10**7, chunks=1)}


@pytest.mark.parametrize("make", list(HUGE))
def test_a_tensor_of_impossibly_many_chunks_is_refused_before_dask_lays_them_out(make, monkeypatch):
    torch = pytest.importorskip("torch")
    import dask.array as da

    def lay_out(*args, **kwargs):
        raise AssertionError("dask was asked to lay out the chunks")

    for name in ("zeros", "ones", "full", "arange", "eye", "linspace", "tri"):
        monkeypatch.setattr(da, name, lay_out)
    monkeypatch.setattr(da.random, "default_rng", lay_out)
    with pytest.raises(RuntimeError, match=r"you tried to make a tensor of \d+ elements \(\d+ bytes of \w+\) in "
                                           r"\d+ chunks, more than the 1000000 chunks .* pass larger chunks="):
        HUGE[make]()
    with pytest.raises(RuntimeError, match="can't allocate memory: you tried to allocate"):  # torch: at once too
        torch.zeros(10**15)


def test_the_chunk_bound_is_a_dask_setting_and_a_big_tensor_in_big_chunks_is_made_lazily():
    import dask

    assert dg.zeros(10**12).array.npartitions == 29803  # 4 TB in 128 MiB chunks: lazy, nothing allocated
    with dask.config.set({"daskgrad.max-chunks": 10}):
        with pytest.raises(RuntimeError, match="in 11 chunks, more than the 10 chunks"):
            dg.ones(110, chunks=10)
        assert dg.ones(100, chunks=10).array.npartitions == 10


def test_calling_an_instantiated_function_raises_torch_s_legacy_error():
    class Legacy(dg.autograd.Function):
        def forward(self, a):
            return a

    with pytest.warns(DeprecationWarning, match="should not be instantiated"):
        legacy = Legacy()
    with raises(RuntimeError, "Legacy autograd function with non-static forward method is deprecated. Please use "
                              "new-style autograd function with static forward method. (Example: "
                              "https://pytorch.org/docs/stable/autograd.html#torch.autograd.Function)"):
        legacy(x3())


VARIANCE_CALLS = {"var()": lambda x: x.var(), "std()": lambda x: x.std(), "var(True)": lambda x: x.var(True),
                  "var(0, correction=3)": lambda x: x.var(0, correction=3),
                  "var(correction=0)": lambda x: x.var(correction=0),
                  "std(unbiased=False)": lambda x: x.std(unbiased=False),
                  "var(dim=(0, 1), correction=6)": lambda x: x.var(dim=(0, 1), correction=6),
                  "std(1, keepdim=True)": lambda x: x.std(1, keepdim=True)}


@pytest.mark.parametrize("call", VARIANCE_CALLS)
def test_var_and_std_warn_as_torch_where_degrees_of_freedom_are_not_positive(call):
    """torch's UserWarning at the call (without its "Triggered internally at" suffix), and only where it warns."""
    torch = pytest.importorskip("torch")
    shape = {"var()": (1,), "std()": (1,), "var(True)": (1,), "std(1, keepdim=True)": (3, 1)}.get(call, (3, 2))

    def user_warnings(lib):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            VARIANCE_CALLS[call](lib.ones(shape, dtype=lib.float64))
        return [str(w.message).split(" (Triggered internally")[0] for w in caught if w.category is UserWarning]
    assert user_warnings(dg) == user_warnings(torch)
