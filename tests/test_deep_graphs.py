"""Deep graphs: planning is iterative and fusion is bounded, so cost grows linearly with depth."""
import gc
import operator
import re
import threading
import weakref

import numpy as np
import pytest

import daskgrad as dg
from daskgrad import _dask, graph, runtime
from daskgrad.engine import _route


def test_planning_a_100000_node_chain_needs_no_recursion():
    x = dg.ones(2, dtype="float64", requires_grad=True)
    head = graph.accumulate_node(x)
    for _ in range(100_000):
        node = graph._new_node("MulBackward0")
        node.next_functions, node._input_meta = ((head, 0),), (None,)
        head = node
    order, runs, targets = _route([head], None, True)
    assert len(order) == 100_001 and order[-1] is graph.accumulate_node(x)
    assert len(runs) == 100_000


def test_a_300_op_chain_differentiates_exactly_with_fusion_bounded():
    x0 = np.linspace(0.1, 1.0, 6)
    x = dg.from_array(x0, chunks=((1, 2, 3),), requires_grad=True)
    y = x
    for _ in range(300):
        y = dg.sin(y) * 0.9 + 0.1
    loss = y.sum()
    (g,) = dg.grad(loss, x, retain_graph=True, lazy=True)
    (blockwise,) = _dask.optimize([g.array], fuse_chunks=False)
    # Blockwise fusion never chains more than FUSE_DEPTH layers: the graph keeps a layer
    # boundary at least every FUSE_DEPTH of the ~1,500 layers of the reverse graph
    assert len(blockwise.dask.layers) >= len(g.array.dask.layers) // _dask.FUSE_DEPTH
    (opt,) = _dask.optimize([g.array], fuse_chunks=True)
    # with chunk fusion (the default) each chunk's whole forward-and-reverse chain is one task (the
    # numbers 0.9 and 0.1, read as 0-d values, are data, not tasks)
    tasks = [k for k in dict(opt.dask) if not k[0].startswith("scalar-")]
    assert len(tasks) == 3 + 3
    v, d = x0.copy(), np.ones_like(x0)
    for _ in range(300):
        d, v = d * np.cos(v) * 0.9, np.sin(v) * 0.9 + 0.1
    np.testing.assert_allclose(opt.compute(optimize_graph=False), d, rtol=1e-12)
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), d, rtol=1e-12)


def _layers_copied_by_backward(n, monkeypatch):
    """How many layers dask's HighLevelGraph constructor copies while backward builds the reverse
    graph of an ``n``-op chain (the work that used to grow with the square of ``n``)."""
    from dask.highlevelgraph import HighLevelGraph

    x = dg.ones(4, dtype="float64", requires_grad=True)
    y = x
    for _ in range(n):
        y = dg.sin(y) * 1.0
    loss = y.sum()
    copied = [0]
    init = HighLevelGraph.__init__

    def counting(self, layers, *args, **kwargs):
        copied[0] += len(layers)
        init(self, layers, *args, **kwargs)

    monkeypatch.setattr(runtime, "persist", lambda arrays, *a, **k: arrays)  # building only
    monkeypatch.setattr(HighLevelGraph, "__init__", counting)
    dg.grad(loss, x, lazy=True)
    monkeypatch.undo()
    return copied[0]


def test_building_the_reverse_graph_of_a_chain_costs_linear_work(monkeypatch):
    # rules build on stand-ins of their inputs (one layer each), not on arrays carrying the whole
    # lineage: doubling the chain doubles the layers copied instead of quadrupling them
    small, large = _layers_copied_by_backward(150, monkeypatch), _layers_copied_by_backward(300, monkeypatch)
    assert large <= 2.3 * small, (small, large)  # (none at all, recorded as a program: 0 and 0)


def test_a_hook_and_a_custom_function_inside_a_long_chain_see_computable_tensors():
    seen = []

    class Double(dg.Function):
        @staticmethod
        def forward(ctx, t):
            return t * 2

        @staticmethod
        def backward(ctx, g):
            seen.append(g.numpy().copy())  # user code may compute what it is given
            return g * 2

    x = dg.from_array(np.arange(1.0, 5.0), chunks=2, requires_grad=True)
    y = x
    for i in range(60):
        y = dg.sin(y) * 0.5 + 0.1
        if i == 30:
            y = Double.apply(y)
            y.register_hook(lambda g: seen.append(g.numpy().copy()))
    y.sum().backward()
    v, d = np.arange(1.0, 5.0), np.ones(4)
    for i in range(60):
        d, v = d * np.cos(v) * 0.5, np.sin(v) * 0.5 + 0.1
        if i == 30:
            d, v = d * 2, v * 2
    assert len(seen) == 2 and seen[0].shape == (4,)
    np.testing.assert_allclose(x.grad.numpy(), d, rtol=1e-12)


def test_a_100000_op_graph_builds_and_plans_its_backward_without_recursion():
    x = dg.ones(4, chunks=2, dtype="float64", requires_grad=True)
    y = x
    for _ in range(100_000):
        y = -y
    # folded history: every array's graph stays a few layers, so each op costs the same
    assert len(y.array.dask.layers) <= _dask.LINEAGE_LAYERS + 1
    order, runs, _ = _route([y.sum().grad_fn], None, True)
    assert len(order) == 100_002 and len(runs) == 100_001


def test_recording_a_40000_node_chain_builds_no_dask_array_until_one_is_read():
    # torch's test_free_deep_graph (the port runs it at 100,000 nodes): elementwise results stay unbuilt (their shape,
    # dtype and chunks known), so a graph recorded and dropped costs recording only; freed without
    # recursing
    from daskgrad._dask.peaks import recording

    x = dg.randn(1, dtype="float64", requires_grad=True)
    y = x * 1
    first = weakref.ref(y.grad_fn)
    with recording() as made:
        for _ in range(20_000):
            y = y + y * 0.000001
        assert (y.shape, y.dtype, y.chunks, y.device) == ((1,), np.dtype("float64"), ((1,),), "cpu")
        assert y.grad_fn.name() == "AddBackward0" and y.grad_fn.next_functions[0][0].name() == "AddBackward0"
    assert made == []
    del y
    gc.collect()
    assert first() is None


def test_an_elementwise_chain_read_late_is_the_graph_dask_builds_op_by_op():
    x0 = np.linspace(-1.0, 1.0, 7)
    x = dg.from_array(x0, chunks=((3, 1, 3),), requires_grad=True)
    y = dg.sin(x * 2.0 + 1) / (x - 3) - x  # nothing built yet
    a = x.array
    want = _dask.elemwise(operator.sub, _dask.elemwise(operator.truediv, _dask.elemwise(
        np.sin, _dask.elemwise(operator.add, _dask.elemwise(operator.mul, a, 2.0), 1)),
        _dask.elemwise(operator.sub, a, 3)), a)
    # lowered as one fused layer (one function a chunk), not the five layers dask builds op by op
    assert y.array.chunks == want.chunks and y.array.dtype == want.dtype
    # (2.0 is read as a 0-d value: a layer of data)
    assert len([n for n in y.array.dask.layers if n != a.name and not n.startswith("scalar-")]) == 1
    np.testing.assert_array_equal(y.array.compute(), want.compute())
    np.testing.assert_allclose(y.detach().numpy(), np.sin(x0 * 2 + 1) / (x0 - 3) - x0, rtol=1e-15)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.cos(x0 * 2 + 1) / (x0 - 3) - np.sin(x0 * 2 + 1) / (x0 - 3) ** 2
                               - 1, rtol=1e-13)


def test_a_folded_history_computes_the_same_through_daskgrad_and_through_dask_directly():
    x0 = np.linspace(-1.0, 1.0, 7)
    x = dg.from_array(x0, chunks=((3, 1, 3),), requires_grad=True)
    y, v = x, x0.copy()
    for i in range(500):
        y, v = (y * 0.99 + 0.01, v * 0.99 + 0.01) if i % 2 else (dg.sin(y), np.sin(v))
    assert len(y.array.dask.layers) <= 64  # a history of 500 ops: a few layers, not one per op
    np.testing.assert_allclose(y.array.compute(), v, rtol=1e-12)  # dask's own optimization and cull
    np.testing.assert_allclose(y.detach().numpy(), v, rtol=1e-12)  # unfolded, fused, culled by daskgrad


def test_reading_a_folded_history_s_value_never_lists_every_task_of_the_history():
    x0 = np.linspace(-1.0, 1.0, 7)
    y, v = dg.from_array(x0, chunks=3, requires_grad=True), x0
    for _ in range(200):
        y, v = dg.sin(y), np.sin(v)
        if len(y.array.dask.layers) == 1:  # y's whole history is one fold
            break
    (fold,) = y.array.dask.layers.values()
    assert isinstance(fold, _dask.Folded)
    np.testing.assert_allclose(y.detach().numpy(), v, rtol=1e-13)  # is y in memory already?  No: a fold
    assert not fold.is_materialized()  # is a lineage, known without listing its tasks


def test_culling_keeps_exactly_the_tasks_dask_keeps():
    import dask.array as da

    from dask.core import flatten

    a = da.arange(100.0, chunks=10)
    b = (a * 2).rechunk(15)[3:40] + da.ones(37, chunks=37)
    c = da.concatenate([b[:5], (a[::7] ** 2)[:5]]).sum()
    for arr in (b, c, b[7:9]):
        keys = list(flatten(arr.__dask_keys__()))
        assert dict(_dask.cull(arr.dask, keys)).keys() == dict(arr.dask.cull(set(keys))).keys()


def test_a_6000_op_chain_of_one_element_tensors_differentiates_and_frees_every_node():
    # torch's test_free_deep_graph, with a backward: six times Python's recursion limit of nodes,
    # each op on a one-element tensor as cheap as dask allows (no op walks or copies the graph so far)
    x = dg.ones(1, dtype="float64", requires_grad=True)
    y = x * 1
    first = weakref.ref(y.grad_fn)
    middle = None
    for i in range(3_000):
        y = y + y * 0.000001
        if i == 1_500:
            middle = weakref.ref(y.grad_fn)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.000001 ** 3_000], rtol=1e-12)
    del y
    gc.collect()
    assert first() is None and middle() is None  # the whole graph is freed, without recursing


def test_a_chain_freed_without_backward_lets_go_of_every_node():
    x = dg.ones(1, dtype="float64", requires_grad=True)
    y = x * 1
    first = weakref.ref(y.grad_fn)
    for _ in range(5_000):
        y = y * 1.0
    del y
    gc.collect()
    assert first() is None


@pytest.mark.parametrize("dtype", ["float64", "float32", "int64", "int8", "bool", "complex128"])
def test_elementwise_layers_built_directly_are_the_ones_dask_builds(dtype):
    # _dask.elemwise builds an elementwise layer without dask's per-op signature inspection: same
    # name, dtype, meta and values as dask's elemwise, and dask's own error (or NotImplemented)
    # wherever dask's path raises
    import dask.array as da

    arrays = [da.ones((3, 4), chunks=(2, 3), dtype=dtype), da.from_array(np.array(3, dtype=dtype)),
              da.arange(5, chunks=2).astype(dtype)]
    ops = [operator.add, operator.sub, operator.mul, operator.truediv, operator.pow, da.maximum, da.hypot,
           da.sin, operator.neg, da.absolute]
    for a in arrays:
        for op in ops:
            unary = op in (da.sin, operator.neg, da.absolute)
            for args in [(a,)] if unary else [(a, a), (a, 2), (2.5, a), (a, -1), (a, 1j), (True, a), (a, 300)]:
                try:
                    expected = op(*args)
                except Exception as e:  # noqa: BLE001 - the same error is expected
                    with pytest.raises(type(e), match=re.escape(str(e))):
                        _dask.elemwise(op, *args)
                    continue
                got = _dask.elemwise(op, *args)
                if expected is NotImplemented:
                    assert got is NotImplemented
                    continue
                assert (got.name, got.dtype, got.chunks) == (expected.name, expected.dtype, expected.chunks)
                assert type(got._meta) is type(expected._meta) and got._meta.ndim == expected._meta.ndim
                assert got._meta.dtype == expected._meta.dtype
                with np.errstate(all="ignore"):
                    value, want = got.compute(), expected.compute()
                assert type(value) is type(want) and value.dtype == want.dtype
                np.testing.assert_array_equal(value, want)


def test_elementwise_layers_of_operands_broadcast_block_by_block_are_the_ones_dask_builds():
    # operands of other shapes whose blocks line up (an axis the same chunks, or one element long)
    # are built directly too (a wavefield times a model, times a per-shot factor); chunks that do
    # not line up go to dask, which rechunks: either way the layer dask builds
    import dask.array as da

    rng = np.random.default_rng(0)
    field = da.from_array(rng.random((5, 6, 7)), chunks=(1, 4, 3))
    others = [da.from_array(rng.random((6, 7)), chunks=(4, 3)), da.from_array(rng.random((5, 1, 1)), chunks=1),
              da.from_array(rng.random((1, 6, 1)), chunks=(1, 4, 1)), da.from_array(rng.random(7), chunks=3),
              da.from_array(rng.random((6, 7)), chunks=(3, 3)), 2.5]
    for other in others:
        for args in [(field, other), (other, field)]:
            for op in (operator.add, operator.mul, da.maximum):
                got, expected = _dask.elemwise(op, *args), op(*args)
                assert (got.name, got.dtype, got.chunks) == (expected.name, expected.dtype, expected.chunks)
                assert type(got._meta) is type(expected._meta) and got._meta.shape == expected._meta.shape
                np.testing.assert_array_equal(got.compute(), expected.compute())
    # a 0-d operand's chunk may be a Python or NumPy scalar: the result is cast to the declared dtype
    import dask

    single = da.ones((4, 3), chunks=2, dtype="float32")
    scalar = da.from_delayed(dask.delayed(lambda: 2.0)(), (), dtype="float64")
    for args in [(single, scalar), (scalar, single)]:
        got, expected = _dask.elemwise(operator.mul, *args), operator.mul(*args)
        assert got.name == expected.name and got.dtype == expected.dtype == got.compute().dtype


@pytest.mark.parametrize("dtype", ["float64", "float32", "int8", "bool", "complex128"])
def test_reductions_of_a_0d_tensor_are_numpys(dtype):
    # a 0-d tensor's reduction is one blockwise task (a nested backward's `.sum()` each level)
    value = np.array(3, dtype=dtype)
    t = dg.tensor(value)
    for name in ["sum", "mean", "prod"] + ([] if dtype == "complex128" else ["max", "min"]):
        got, want = getattr(dg, name)(t), getattr(np, name)(value)  # (NumPy's functions: x.mean() of ints raises)
        assert got.shape == () and got.dtype == want.dtype, name
        out = got.numpy()
        assert isinstance(out, np.ndarray) and out.dtype == want.dtype and out == want, name
    x = dg.tensor(2.0, requires_grad=True)
    (x * 3).sum().backward()
    assert x.grad.item() == 3.0


def test_500_nested_reentrant_backwards_each_accumulate_and_leave_no_thread_behind():
    # each level's backward calls backward again (torch's test_deep_reentrant): deeper than one
    # thread's stack holds, so the engine hops to a fresh thread now and then; every level adds
    # its gradient into the shared leaf
    w = dg.tensor(1.0, requires_grad=True)

    class Nest(dg.Function):
        @staticmethod
        def forward(ctx, x, depth):
            ctx.depth = depth
            return x * 1

        @staticmethod
        def backward(ctx, g):
            if ctx.depth > 0:
                with dg.enable_grad():
                    Nest.apply(w, ctx.depth - 1).sum().backward()
            return g, None

    Nest.apply(w, 500).sum().backward()
    assert w.grad.item() == 501.0
    assert not [t for t in threading.enumerate() if t.name.startswith("daskgrad-reentrant")]
