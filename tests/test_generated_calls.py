"""A task run inline as generated Python (daskgrad._dask.calls): what it makes once, and what it
calls directly, gives the task's own values.

On chunks of a few rows a step's cost is its Python calls: a chunk-fused task is one generated
function (``_Kernel``) that makes a constant part once, and a combine step over many chunks' results
is one generated expression (``_Expr``), not a call object per item.
"""
import operator

import dask
import numpy as np

import daskgrad as dg


def test_a_mean_s_gradient_constant_is_made_once_per_kernel_not_in_every_chunk(monkeypatch):
    """The gradient of a mean is ``ones(()) / n`` in every chunk's fused task; a generated kernel
    makes it once (a tenth of a tiny chunk's step), and the step's numbers stay torch's."""
    import torch

    rng = np.random.default_rng(0)
    Xn, yn = rng.standard_normal((80, 3)), (rng.random(80) > 0.5) * 1.0
    X, y = dg.from_array(Xn, chunks=(10, 3)), dg.from_array(yn, chunks=10)
    w = dg.zeros(3, dtype="float64", requires_grad=True)
    wt = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    made = []
    full_like = np.full_like
    monkeypatch.setattr(np, "full_like", lambda *a, **k: made.append(1) or full_like(*a, **k))
    with dask.config.set(scheduler="threads"):
        for step in range(5):
            made.clear()
            dg.binary_cross_entropy_with_logits(X @ w, y).backward()
            torch.nn.functional.binary_cross_entropy_with_logits(torch.from_numpy(Xn) @ wt,
                                                                 torch.from_numpy(yn)).backward()
            with dg.no_grad():
                w -= 0.1 * w.grad
            with torch.no_grad():
                wt -= 0.1 * wt.grad
            w.grad = wt.grad = None
            np.testing.assert_allclose(w.detach().numpy(), wt.detach().numpy(), rtol=1e-12, atol=0)
    assert made == []  # (8 chunks: 8 ones a step before)


def test_a_kernel_makes_a_constant_part_once_only_where_it_is_pure_small_and_not_an_output():
    from dask._task_spec import DataNode, Task, TaskRef

    from daskgrad import chunk
    from daskgrad._dask import calls

    def kernel(parts, outputs):
        order = tuple(calls._Call.of(p) for p in parts)
        fused = Task("out", calls._run_fused, order, ((),) * len(order), ("x",), outputs,
                     tuple(p.key for p in parts), TaskRef("x"))
        return fused, calls._Kernel(fused)

    meta = np.empty(0)
    one = Task("one", chunk.ones, DataNode(None, meta), (), np.dtype("float64"))
    half = Task("half", operator.truediv, TaskRef("one"), 2)
    scaled = Task("r", operator.mul, TaskRef("x"), TaskRef("half"))
    fused, k = kernel([one, half, scaled], "r")
    consts = [v for name, v in k.run.__globals__.items() if name.startswith("c")]
    assert any(isinstance(v, np.generic) and v == 0.5 for v in consts)  # made once, held by the kernel
    x = np.arange(4.0)
    np.testing.assert_array_equal(k.run({"x": x}), fused({"x": x}))
    # an output is the task's own: made on each call, writable
    fused, k = kernel([one], "one")
    a, b = k.run({"x": x}), k.run({"x": x})
    assert a is not b and a.flags.writeable
    # a part that raises (or warns) is left to each call, as before
    zero = Task("zero", operator.truediv, TaskRef("one"), 0.0)
    fused, k = kernel([one, zero, Task("r", operator.mul, TaskRef("x"), TaskRef("zero"))], "r")
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(k.run({"x": x}), fused({"x": x}))
    # not a random draw (only NumPy's pure arithmetic, ones and fills are made once)
    draw = Task("draw", np.random.random, ())
    fused, k = kernel([draw, Task("r", operator.mul, TaskRef("x"), TaskRef("draw"))], "r")
    assert not np.array_equal(k.run({"x": x}), k.run({"x": x}))


def test_a_combine_step_over_many_chunks_is_one_generated_expression_with_the_task_s_value():
    from dask._task_spec import List, Task, TaskRef

    from daskgrad._dask import calls

    parts = [Task(("p", i), np.full, (2,), float(i)) for i in range(50)]
    items = [Task(("g", i), operator.getitem, TaskRef(("p", i)), 1) for i in range(50)]
    total = Task("total", np.sum, Task("stack", np.stack, List(*items)))  # (a call nested in a call)
    fast = calls.fast(total)
    assert type(fast) is calls._Expr
    values = {p.key: p({}) for p in parts}
    assert fast(values) == total(values) == sum(range(50))
    assert fast.dependencies == total.dependencies
