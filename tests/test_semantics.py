"""Autograd semantics beyond the error catalog: leaves, hooks, grad mode, higher order, laziness."""
import threading
import warnings

import dask
from dask._task_spec import DataNode, GraphNode
from dask.utils import key_split
import numpy as np
import pytest

import daskgrad as dg


def x3(**kw):
    return dg.tensor([1.0, 2.0, 3.0], requires_grad=True, **kw)


def test_leaf_and_requires_grad_propagation():
    a, c = x3(), dg.ones(3)
    assert a.is_leaf and a.grad_fn is None
    y = a * c
    assert not y.is_leaf and y.requires_grad and type(y.grad_fn).__name__ == "MulBackward0"
    z = c + c
    assert z.is_leaf and not z.requires_grad and z.grad_fn is None
    fn, nr = y.grad_fn.next_functions[0]
    assert type(fn).__name__ == "AccumulateGrad" and fn.variable is a and nr == 0
    assert y.grad_fn.next_functions[1] == (None, 0)


def test_grad_fn_names_follow_torch():
    a = x3()
    names = {
        "AddBackward0": a + 2, "RsubBackward1": 2 - a, "SubBackward0": a - a, "MulBackward0": a * 2,
        "DivBackward0": a / 2, "PowBackward0": a ** 2, "PowBackward1": a ** a, "PowBackward2": 2 ** a,
        "SumBackward0": a.sum(), "SumBackward1": a.sum(axis=0), "MeanBackward0": a.mean(),
        "MaxBackward1": a.max(), "AmaxBackward0": dg.max(dg.reshape(a, (1, 3)), axis=1),
        "MaxBackward0": a.max(0).values, "MedianBackward0": a.median(), "SortBackward0": a.sort().values,
        "SliceBackward0": a[1:], "SelectBackward0": a[0], "IndexBackward0": a[[0, 2]],
        "DotBackward0": a @ a, "ExpBackward0": a.exp(), "SoftmaxBackward0": dg.softmax(a),
    }
    for name, t in names.items():
        assert t.grad_fn.name() == name == type(t.grad_fn).__name__


def test_unused_leaf_keeps_grad_none_and_constants_get_none():
    a, b, c = x3(), x3(), dg.ones(3)
    (a * c).sum().backward()
    assert b.grad is None and c.grad is None


def test_non_leaf_grad_is_none_with_warning_unless_retained():
    a = x3()
    y = a * 2
    z = y * 3
    with pytest.warns(UserWarning, match="The .grad attribute of a Tensor that is not a leaf Tensor"):
        assert y.grad is None
    y.retain_grad()
    assert y.retains_grad
    z.sum().backward(retain_graph=True)
    np.testing.assert_allclose(y.grad.numpy(), [3, 3, 3])
    z.sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), [6, 6, 6])  # accumulates like a leaf


def test_retain_grad_on_leaf_is_a_noop():
    a = x3()
    a.retain_grad()
    assert not a.retains_grad


def test_hooks_run_in_order_replace_the_gradient_and_retain_grad_sees_post_hook_value():
    a = x3()
    y = a * 2
    calls = []
    y.retain_grad()
    y.register_hook(lambda g: calls.append("first") or g + 1)
    h = y.register_hook(lambda g: calls.append("removed"))
    y.register_hook(lambda g: calls.append("second") or g * 10)
    h.remove()
    y.sum().backward()
    assert calls == ["first", "second"]
    np.testing.assert_allclose(y.grad.numpy(), [20, 20, 20])
    np.testing.assert_allclose(a.grad.numpy(), [40, 40, 40])


def test_leaf_hook_runs_before_accumulation_and_post_accumulate_hook_after():
    a = x3()
    seen = []
    a.register_hook(lambda g: g * 0 + 5)
    a.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.numpy().tolist()))
    a.sum().backward()
    assert seen == [[5, 5, 5]]


def test_hooks_receive_lazy_gradients():
    a = x3()
    seen = []
    a.register_hook(lambda g: seen.append(type(g.array).__name__))
    (a * 2).sum().backward()
    assert seen == ["Array"]


def test_user_assigned_grad_is_accumulated_into():
    a = dg.tensor(1.0, requires_grad=True)
    a.grad = dg.tensor(5.0)
    (2 * a).backward()
    assert a.grad.item() == 7


def test_grad_is_persisted_data_with_leaf_dtype_and_chunks():
    a = dg.from_array(np.arange(10.0, dtype=np.float32), chunks=3, requires_grad=True)
    (a * dg.ones(10, dtype="float64", chunks=5)).sum().backward()
    assert a.grad.dtype == np.float32 and a.grad.chunks == a.chunks
    assert len(a.grad.array.__dask_graph__()) == a.array.npartitions  # only its chunks: nothing to recompute


def test_accumulation_over_many_calls_does_not_grow_the_graph():
    a = dg.from_array(np.ones(6), chunks=2, requires_grad=True)
    for _ in range(20):
        (a * 3).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), 60)
    assert len(a.grad.array.__dask_graph__()) == 3


def test_no_grad_enable_grad_set_grad_enabled_and_thread_locality():
    a = x3()
    with dg.no_grad():
        y = a * 2
        with dg.enable_grad():
            z = a * 2
    assert not y.requires_grad and y.is_leaf and z.requires_grad

    @dg.no_grad()
    def f(t):
        return t * 2

    assert not f(a).requires_grad
    dg.set_grad_enabled(False)
    assert not dg.is_grad_enabled()
    dg.set_grad_enabled(True)
    with dg.set_grad_enabled(False):
        assert not (a * 2).requires_grad
    assert dg.is_grad_enabled()
    seen = []
    with dg.no_grad():
        t = threading.Thread(target=lambda: seen.append(dg.is_grad_enabled()))
        t.start(), t.join()
    assert seen == [True]


def test_backward_works_under_no_grad_and_optimizer_step():
    w = x3()
    loss = (w * w).sum()
    with dg.no_grad():
        loss.backward()
        w -= 0.1 * w.grad
    assert w.is_leaf and w.requires_grad and w._version == 1
    np.testing.assert_allclose(w.detach().numpy(), [0.8, 1.6, 2.4], rtol=1e-6)


def test_factory_requires_grad_inside_no_grad_gives_a_leaf():
    with dg.no_grad():
        t = dg.ones(3, requires_grad=True)
    assert t.is_leaf and t.requires_grad


def test_detach_shares_storage_and_version():
    a = x3()
    d = a.detach()
    assert d.is_leaf and not d.requires_grad
    d.add_(1)
    np.testing.assert_allclose(a.detach().numpy(), [2, 3, 4])
    assert a._version == 1
    y = x3() * 1
    y.detach_()
    assert y.is_leaf and not y.requires_grad


def test_backward_inputs_accumulates_only_there_and_retains_non_leaf():
    a, b = x3(), x3()
    y = a * b
    s = y.sum()
    s.backward(inputs=[a, y])
    assert b.grad is None and y.retains_grad
    np.testing.assert_allclose(a.grad.numpy(), [1, 2, 3])
    np.testing.assert_allclose(y.grad.numpy(), [1, 1, 1])


def test_autograd_backward_several_roots_add_up():
    a = x3()
    dg.backward([(2 * a).sum(), (3 * a).sum()])
    np.testing.assert_allclose(a.grad.numpy(), [5, 5, 5])


def test_grad_returns_tuple_or_dict_never_touches_grad_and_frees():
    a, b = x3(), x3()
    y = (a * b).sum()
    ga, gb, ga2 = dg.grad(y, [a, b, a], retain_graph=True)
    np.testing.assert_allclose(ga.numpy(), [1, 2, 3])
    np.testing.assert_allclose(ga2.numpy(), ga.numpy())
    assert a.grad is None
    d = dg.grad(y, {"a": a, "b": b})
    assert set(d) == {"a", "b"}
    with pytest.raises(RuntimeError, match="second time"):
        dg.grad(y, [a])


def test_lazy_grad_composes_without_computing():
    a = x3()
    (g,) = dg.grad((a ** 2).sum(), a, lazy=True)
    with dask.config.set(scheduler=_forbid_compute):
        h = g * 2 + 1
    np.testing.assert_allclose(h.compute(), [5, 9, 13])


def _forbid_compute(*args, **kwargs):
    raise AssertionError("a graph was computed while only being built")


def test_building_forward_and_backward_graphs_never_computes():
    calls = []

    def counting(dsk, keys, **kw):
        calls.append(keys)
        return dask.get(dsk, keys, **kw)

    a = dg.from_array(np.arange(12.0).reshape(3, 4), chunks=2, requires_grad=True)
    with dask.config.set(scheduler=counting):
        loss = dg.log_softmax(dg.tanh(a @ dg.ones(4, 5, dtype="float64")), axis=1).sum()
        repr(loss), repr(a)
        assert calls == []
        dg.grad(loss, a, retain_graph=True, lazy=True)
        assert calls == []
        loss.backward()
    assert len(calls) == 1  # backward itself is exactly one submission


def _is_task(v):
    from dask.core import istask

    return isinstance(v, GraphNode) and not isinstance(v, DataNode) or istask(v)


def test_create_graph_double_backward_and_hessian_vector_product():
    x = dg.tensor(2.0, requires_grad=True)
    (g,) = dg.grad(x ** 3, x, create_graph=True)
    assert g.detach().item() == pytest.approx(12) and g.grad_fn is not None
    (gg,) = dg.grad(g, x)
    assert gg.item() == pytest.approx(12)  # 6x
    with pytest.warns(UserWarning, match="Using backward\\(\\) with create_graph=True"):
        (x ** 3).backward(create_graph=True)
    assert x.grad.requires_grad


def test_functional_vjp_jvp_hvp_jacobian_hessian():
    f = dg.functional
    x = dg.tensor([1.0, 2.0, 3.0], dtype="float64")
    out, v = f.vjp(lambda t: t ** 2, x, dg.ones(3, dtype="float64"))
    np.testing.assert_allclose(v.numpy(), [2, 4, 6])
    _, jv = f.jvp(lambda t: t ** 2, x, dg.tensor([1.0, 0.0, 1.0], dtype="float64"))
    np.testing.assert_allclose(jv.numpy(), [2, 0, 6])
    _, hv = f.hvp(lambda t: (t ** 3).sum(), x, dg.ones(3, dtype="float64"))
    np.testing.assert_allclose(hv.numpy(), [6, 12, 18])
    np.testing.assert_allclose(f.jacobian(lambda t: t ** 2, x).numpy(), np.diag([2, 4, 6]))
    np.testing.assert_allclose(f.hessian(lambda t: (t ** 3).sum(), x).numpy(), np.diag([6, 12, 18]))
    np.testing.assert_allclose(f.jacobian(lambda t: dg.ones(2) * 1.0, x).numpy(), np.zeros((2, 3)))


def test_custom_function_with_saved_tensors_and_needs_input_grad():
    class Cube(dg.Function):
        @staticmethod
        def forward(ctx, x, k):
            ctx.save_for_backward(x)
            ctx.flags = ctx.needs_input_grad
            return x ** 3 * k

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 3 * x ** 2 * g * 2.0, None

    x = x3()
    y = Cube.apply(x, 2.0)
    assert type(y.grad_fn).__name__ == "CubeBackward"
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [6, 24, 54])
    with pytest.raises(RuntimeError, match="second time"):
        y.sum().backward()


def test_map_blocks_with_chunk_level_vjp_names_its_vjp_layer():
    def cube(b):
        return b ** 3

    def cube_vjp(g, b):
        return (3 * b ** 2 * g,)

    x = dg.from_array(np.arange(6.0), chunks=2, requires_grad=True)
    y = dg.map_blocks(cube, x, vjp=cube_vjp)
    (g,) = dg.grad(y.sum(), x, lazy=True, retain_graph=True)
    assert any(str(k).startswith("cube-vjp") for k in g.array.__dask_graph__().layers)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 3 * np.arange(6.0) ** 2)


def test_reverse_graph_layers_are_named_after_their_rule():
    x = dg.from_array(np.arange(6.0), chunks=2, requires_grad=True)
    (g,) = dg.grad((x.exp() * 2).sum(), x, lazy=True)
    layers = " ".join(map(str, g.array.__dask_graph__().layers))
    assert "exp-vjp-" in layers and "mul-vjp-" in layers and "sum-vjp-" in layers


def test_a_rules_own_output_is_named_without_a_relabel_op():
    """A value a rule made carries its name to lowering: the backward records no op for it (a rule
    handing its cotangent on as it is, add's, still gets one: its layer is the rule's only trace)."""
    from daskgrad._dask import Lazy, relabel
    from daskgrad._dask.program import _order

    x = dg.from_array(np.arange(6.0), chunks=2, requires_grad=True)
    (g,) = dg.grad((x.exp() * 2).sum(), x, lazy=True)
    nodes = _order([g._storage.value])
    assert type(g._storage.value) is Lazy and not [n for n in nodes if n.fn is relabel]
    assert {n.label for n in nodes} >= {"exp-vjp", "mul-vjp", "sum-vjp"}
    (g,) = dg.grad((x + 1).sum() + (x * 3).sum(), x, lazy=True)
    assert sum(n.fn is relabel for n in _order([g._storage.value])) == 3  # (add's rule: the sums' two, x + 1's one)


def test_detect_anomaly_names_the_op_and_the_forward_line():
    x = dg.tensor([0.0, 1.0], requires_grad=True)
    with pytest.warns(UserWarning, match="Anomaly Detection has been enabled"):
        ctx = dg.detect_anomaly()
    with ctx:
        y = dg.sqrt(x) * 0.0  # forward line named in the error
        with pytest.raises(RuntimeError, match=r"^Function 'MulBackward0' returned nan values in its 0th output.|"
                                                r"^Function 'SqrtBackward0' returned nan values") as err, \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")
            y.sum().backward()
    assert "y = dg.sqrt(x) * 0.0" in str(err.value)
    assert x.grad is None


def test_repr_never_computes_and_names_grad_fn():
    a = x3()
    with dask.config.set(scheduler=_forbid_compute):
        assert "requires_grad=True" in repr(a)
        assert "grad_fn=<MulBackward0>" in repr(a * 2)


def test_item_warns_for_requires_grad_and_forced_values_are_not_computed_twice():
    calls = []

    def counting(dsk, keys, **kw):  # the names of the tasks each submission runs (data is not a task)
        graph = dsk.__dask_graph__()
        calls.append({key_split(k) for k, v in graph.items() if _is_task(v)})
        return dask.get(dsk, keys, **kw)

    x = dg.from_array(np.array([0.5, -1.2, 0.3]), chunks=1, requires_grad=True)
    with dask.config.set(scheduler=counting):
        y = dg.exp(x) * 2
        with pytest.warns(UserWarning, match="Converting a tensor with requires_grad=True to a scalar"):
            float(y.sum())  # torch 2.13 warns in float(), not in item()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            y.sum().item()
        y.sum().backward()
    # the backward submission reuses the persisted exp(x): it has no exp task of its own
    assert "exp" in calls[0]
    assert not any("exp" in c for c in calls[1:])


def test_progress_bar_on_the_local_scheduler(capsys):
    x = dg.from_array(np.arange(4.0), chunks=2, requires_grad=True)
    dg.set_progress(True)
    try:
        with dask.config.set(scheduler="threads"):
            (x * 3).sum().backward()
    finally:
        dg.set_progress(False)
    assert "100%" in capsys.readouterr().out


def test_copy_into_a_non_leaf_gives_the_source_the_gradient_and_the_old_value_zero():
    a, b = x3(), x3()
    c = b * 1
    c.copy_(a * 2)
    assert c._version == 1 and type(c.grad_fn).__name__ == "CopyBackwards"
    c.sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), [2, 2, 2])
    np.testing.assert_allclose(b.grad.numpy(), [0, 0, 0])  # torch's CopyBackwards: zeros for self


def test_numpy_and_python_operands_on_either_side_keep_the_tensor_and_torch_dtypes():
    a = dg.tensor([1.0, 2.0], requires_grad=True)
    assert a.dtype == np.float32  # Python floats become float32, as in torch
    assert dg.tensor([1, 2]).dtype == np.int64
    out = np.ones(2) + a * 2.0 - 1
    assert isinstance(out, dg.Tensor) and type(out.grad_fn).__name__ == "SubBackward0"
    assert (a * 2.0).dtype == np.float32  # Python scalars do not promote
    out.sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), [2, 2])


def test_inference_mode_records_nothing_and_marks_results_as_inference_tensors():
    w = dg.ones(3, requires_grad=True)
    with dg.inference_mode():
        assert dg.is_inference_mode_enabled() and not dg.is_grad_enabled()
        y = w * 2
        z = dg.zeros(3)
        assert y.grad_fn is None and not y.requires_grad and y.is_leaf and y.is_inference() and z.is_inference()
        z.add_(1)  # in place inside the mode is fine
        with dg.inference_mode(False):  # records again, and makes normal tensors
            assert dg.is_grad_enabled() and not dg.is_inference_mode_enabled()
            n = w * 2
            assert n.grad_fn is not None and not n.is_inference()
    assert not dg.is_inference_mode_enabled() and dg.is_grad_enabled() and not w.is_inference()
    # outside: usable where nothing is saved, and a clone is a normal tensor
    (w + y).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), 1)
    c = y.clone()
    assert not c.is_inference()
    c.requires_grad_()
    (c * w).sum().backward()
    np.testing.assert_allclose(c.grad.numpy(), 1)


def test_inference_mode_works_as_decorator_with_and_without_the_call():
    @dg.inference_mode
    def f(x):
        return x * 2

    @dg.inference_mode()
    def g(x):
        return x * 3

    x = dg.ones(2, requires_grad=True)
    assert f(x).is_inference() and g(x).is_inference() and not f(x).requires_grad
    assert dg.is_grad_enabled() and not dg.is_inference_mode_enabled()


def test_grad_with_is_grads_batched_maps_over_cotangents_in_one_submission():
    from daskgrad import functional as F

    calls = []

    def counting(dsk, keys, **kw):
        calls.append(keys)
        return dask.get(dsk, keys, **kw)

    x = dg.from_array(np.array([[1.0, 2.0], [3.0, 4.0]]), chunks=1, requires_grad=True)
    m = dg.from_array(np.array([[1.0, -1.0], [0.5, 2.0]]), chunks=1)
    y = dg.sin(x) @ m
    with dask.config.set(scheduler=counting):
        (jac,) = dg.grad(y, x, dg.from_array(np.eye(4).reshape(4, 2, 2), chunks=2), is_grads_batched=True)
    assert len(calls) == 1 and jac.shape == (4, 2, 2) and jac.chunks[1:] == x.chunks
    expected = F.jacobian(lambda t: dg.sin(t) @ m, x.detach()).numpy().reshape(4, 2, 2)
    np.testing.assert_allclose(jac.numpy(), expected, rtol=1e-12)
    with pytest.raises(RuntimeError, match="^Trying to backward through the graph a second time"):
        dg.grad(y, x, dg.ones(3, 2, 2), is_grads_batched=True)
    z = x * 3.0  # unused input with materialize_grads: a batch of zeros
    w = dg.ones(2, requires_grad=True)
    gz, gw = dg.grad(z, [x, w], dg.ones(5, 2, 2), is_grads_batched=True, materialize_grads=True)
    assert gz.shape == (5, 2, 2) and gw.shape == (5, 2) and not gw.numpy().any()
    np.testing.assert_allclose(gz.numpy(), 3.0)
