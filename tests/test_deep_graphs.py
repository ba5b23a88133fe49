"""Deep graphs: planning is iterative and fusion is bounded, so cost grows linearly with depth."""
import numpy as np

import daskgrad as dg
from daskgrad import graph, runtime
from daskgrad.backward import _plan


def test_planning_a_100000_node_chain_needs_no_recursion():
    x = dg.ones(2, dtype="float64", requires_grad=True)
    head = graph.accumulate_node(x)
    for _ in range(100_000):
        node = graph._new_node("MulBackward0")
        node.next_functions, node._input_meta = ((head, 0),), (None,)
        head = node
    order, runs, targets = _plan([head], None, True)
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
    (blockwise,) = runtime._optimize([g.array], fuse_chunks=False)
    # Blockwise fusion never chains more than FUSE_DEPTH layers: the graph keeps a layer
    # boundary at least every FUSE_DEPTH of the ~1,500 layers of the reverse graph
    assert len(blockwise.dask.layers) >= len(g.array.dask.layers) // runtime.FUSE_DEPTH
    (opt,) = runtime._optimize([g.array])
    # then each chunk's whole forward-and-reverse chain is one task: 3 input chunks, 3 tasks
    assert len(dict(opt.dask)) == 3 + 3
    v, d = x0.copy(), np.ones_like(x0)
    for _ in range(300):
        d, v = d * np.cos(v) * 0.9, np.sin(v) * 0.9 + 0.1
    np.testing.assert_allclose(opt.compute(optimize_graph=False), d, rtol=1e-12)
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), d, rtol=1e-12)
