"""A large chunk's fused step runs over blocks of rows (``daskgrad._dask.rows``): the data is read
from memory once, and every gradient equals the one computed on whole chunks."""
import dask
import numpy as np
import pytest
import test_hypothesis_chains as chains
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import daskgrad as dg
from daskgrad._dask import rows


@pytest.fixture
def taken(monkeypatch):
    """How many fused tasks ran over row blocks, and how many were refused."""
    seen = {"rows": 0, "refused": 0}
    run = rows.run

    def spy(*args, **kwargs):
        try:
            out = run(*args, **kwargs)
        except rows.Refused:
            seen["refused"] += 1
            raise
        seen["rows"] += out is not None
        return out
    monkeypatch.setattr(rows, "run", spy)
    return seen


def _grads(loss_fn, leaves, block):
    with dask.config.set({"daskgrad.row-block-bytes": block}):
        ts = [dg.from_array(v, chunks=c, requires_grad=g) for v, c, g in leaves]
        loss = loss_fn(*ts)
        loss.backward()
        return loss.item(), [None if t.grad is None else t.grad.numpy() for t in ts if t.requires_grad]


def test_logistic_regression_gradient_over_row_blocks_equals_whole_chunks_and_torch(taken):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((400_000, 20), dtype=np.float32)   # two chunks of 16 MB: 8 blocks each
    y = (rng.random(400_000) < 0.5).astype(np.float32)
    w = (0.1 * rng.standard_normal(20)).astype(np.float32)
    leaves = [(X, (200_000, 20), False), (y, 200_000, False), (w, -1, True)]

    def loss_fn(X, y, w):
        return dg.binary_cross_entropy_with_logits(X @ w, y)
    whole = _grads(loss_fn, leaves, 0)
    assert taken["rows"] == 0
    blocked = _grads(loss_fn, leaves, "2 MiB")
    assert taken["rows"] == 2  # each chunk's fused task
    assert blocked[0] == pytest.approx(whole[0], rel=1e-6)
    np.testing.assert_allclose(blocked[1][0], whole[1][0], rtol=1e-5, atol=1e-7)
    torch = pytest.importorskip("torch")
    wt = torch.from_numpy(w.copy()).requires_grad_()
    ref = torch.nn.functional.binary_cross_entropy_with_logits(torch.from_numpy(X) @ wt, torch.from_numpy(y))
    ref.backward()
    assert blocked[0] == pytest.approx(ref.item(), rel=1e-5)
    np.testing.assert_allclose(blocked[1][0], wt.grad.numpy(), rtol=1e-4, atol=1e-6)


def _chains():
    """(name, loss of (X, y, W, v), whether its chunk tasks run in row blocks today; "X": X requires
    grad)."""
    return [
        ("logistic", lambda X, y, W, v: dg.binary_cross_entropy_with_logits(X @ v, y), True),
        ("least_squares", lambda X, y, W, v: (((X @ W).sum(axis=1) + v[0] - y) ** 2).mean(), None),
        ("gram", lambda X, y, W, v: ((X.T @ X) * (W @ W.T)).sum(), True),
        ("transposed", lambda X, y, W, v: ((X.T * v[:, None]).T @ W).sum() + (X * v).sum(), True),
        ("leaky", lambda X, y, W, v: (dg.where(X > 0, X, 0.1 * X) @ v * y).sum(), True),
        ("sigmoid_mse", lambda X, y, W, v: ((dg.sigmoid(X @ v) - y) ** 2).sum(), True),
        ("tanh_mlp", lambda X, y, W, v: dg.tanh(X @ W).sum(axis=0) @ W.T @ v, None),
        ("softmax_rows", lambda X, y, W, v: (dg.softmax(X @ W, axis=1) * y[:, None]).sum(), None),
        ("cumsum_rows", lambda X, y, W, v: (dg.cumsum(X, axis=0) @ v).sum(), None),
        ("row_norm", lambda X, y, W, v: (X / dg.sqrt((X * X).sum(axis=1, keepdims=True)) @ v).sum(), None),
        ("centered", lambda X, y, W, v: ((X - X.mean(axis=0)) @ v * y).sum(), None),
        ("input_gradient", lambda X, y, W, v: dg.binary_cross_entropy_with_logits(X @ v, y), "X"),
    ]


@pytest.mark.parametrize("name,loss_fn,blocked", _chains(), ids=[c[0] for c in _chains()])
def test_op_chain_over_row_blocks_equals_whole_chunks_float64(name, loss_fn, blocked, taken):
    rng = np.random.default_rng(1)
    X = rng.standard_normal((20_000, 6))          # chunks of 10,000 rows: 7 blocks of 64 KiB each
    y = rng.standard_normal(20_000)
    W = rng.standard_normal((6, 6)) / 3
    v = rng.standard_normal(6)
    leaves = [(X, (10_000, 6), blocked == "X"), (y, 10_000, True), (W, -1, True), (v, -1, True)]
    loss_w, grads_w = _grads(loss_fn, leaves, 0)
    loss_b, grads_b = _grads(loss_fn, leaves, "64 KiB")
    assert loss_b == pytest.approx(loss_w, rel=1e-12, abs=1e-9)
    for gb, gw in zip(grads_b, grads_w):
        assert (gb is None) == (gw is None)
        if gw is not None:
            np.testing.assert_allclose(gb, gw, rtol=1e-10, atol=1e-11 * np.abs(gw).max())
    if blocked is True:
        assert taken["rows"] >= 2


def test_a_part_without_a_row_rule_runs_its_chunk_whole_and_is_not_tried_again(taken):
    rng = np.random.default_rng(2)
    X = rng.standard_normal((20_000, 6))
    v = rng.standard_normal(6)
    leaves = [(X, (10_000, 6), True), (v, -1, True)]

    def loss_fn(X, v):
        return (dg.cumsum(X @ v, axis=0) * (X @ v)).sum()   # a running sum down the rows: no rule
    first = _grads(loss_fn, leaves, 0)
    for _ in range(2):
        again = _grads(loss_fn, leaves, "64 KiB")
        np.testing.assert_array_equal(again[1][0], first[1][0])
    assert taken["rows"] == 0


def test_an_operand_without_rows_must_broadcast_along_them():
    """``x.T + c`` where ``c`` (1, R) has no rows of its own yet spans them: splitting ``x`` (R, 3)
    alone would add the wrong columns of ``c``, so the task is refused."""
    R = 4096
    x, c = np.ones((R, 3)), np.arange(R, dtype=float)[None]
    parts = [rows.Part("xt", "transpose", np.transpose, (("r", "x"),), {}, ("x",)),
             rows.Part("s", "add", np.add, (("r", "xt"), ("r", "c")), {}, ("xt", "c")),
             rows.Part("t", "sum", np.sum, (("r", "s"),), {"axis": ("c", 1)}, ("s",))]
    with pytest.raises(rows.Refused):
        rows.run(lambda: parts, ["x", "c"], [x, c], ["t"], 256)
    parts[1] = rows.Part("s", "add", np.add, (("r", "xt"), ("r", "c1")), {}, ("xt", "c1"))
    out = rows.run(lambda: parts, ["x", "c1"], [x, c[:, :1]], ["t"], 256)   # (1, 1) broadcasts along rows
    np.testing.assert_allclose(out["t"], x.T.sum(axis=1))


def test_row_blocks_sum_what_the_rows_add_up_to():
    R = 4096
    rng = np.random.default_rng(3)
    X, w, y = rng.standard_normal((R, 3)), rng.standard_normal(3), rng.standard_normal(R)
    parts = [rows.Part("z", "matmul", np.matmul, (("r", "X"), ("r", "w")), {}, ("X", "w")),
             rows.Part("r", "sub", np.subtract, (("r", "z"), ("r", "y")), {}, ("z", "y")),
             rows.Part("xt", "transpose", np.transpose, (("r", "X"),), {}, ("X",)),
             rows.Part("g", "matmul", np.matmul, (("r", "xt"), ("r", "r")), {}, ("xt", "r")),
             rows.Part("n", "sum", np.sum, (("r", "r"),), {}, ("r",)),
             rows.Part("h", "mul", np.multiply, (("r", "g"), ("r", "n")), {}, ("g", "n"))]
    out = rows.run(lambda: parts, ["X", "w", "y"], [X, w, y], ["g", "n", "h"], 8 * 3 * 256)
    r = X @ w - y
    np.testing.assert_allclose(out["g"], X.T @ r, rtol=1e-12)
    np.testing.assert_allclose(out["n"], r.sum(), rtol=1e-12)
    np.testing.assert_allclose(out["h"], (X.T @ r) * r.sum(), rtol=1e-12)   # after the totals


def test_small_chunks_run_whole():
    x = np.ones((100, 3))
    parts = [rows.Part("t", "sum", np.sum, (("r", "x"),), {}, ("x",))]
    assert rows.run(lambda: parts, ["x"], [x], ["t"], 1 << 20) is None


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(st.tuples(st.sampled_from(sorted(chains.UNARY)), st.sampled_from(sorted(chains.BINARY))),
                    min_size=1, max_size=3),
       reduce=st.sampled_from(sorted(chains.REDUCE)), rows_per_chunk=st.sampled_from([300, 256, 600]),
       seed=st.integers(0, 2**16))
def test_random_op_chains_over_row_blocks_equal_whole_chunks(ops, reduce, rows_per_chunk, seed):
    """The property tests' chains on tall chunks, cut into blocks of 64 rows, then reduced and
    contracted with a weight: the loss and every gradient equal the whole-chunk run's."""
    rng = np.random.default_rng(seed)
    a, b = rng.uniform(-1, 1, (600, 4)), rng.uniform(-1, 1, (600, 4))
    w = rng.uniform(-1, 1, 4)

    def loss_fn(x, y, w):
        for u, bi in ops:
            x = chains.BINARY[bi](chains.UNARY[u](x), y)
        out = chains.REDUCE[reduce](x)
        return out.sum() + ((x @ w) ** 2).sum() if out.ndim else out + ((x @ w) ** 2).sum()

    leaves = [(a, (rows_per_chunk, 4), True), (b, (rows_per_chunk, 4), True), (w, -1, True)]
    # instances of chunks this small run inline (generated kernels, never row blocks): off,
    # so every example's blocked run goes through the fused tasks
    with dask.config.set({"daskgrad.step-cache.enabled": False}):
        loss_b, grads_b = _grads(loss_fn, leaves, 1024)
        loss_w, grads_w = _grads(loss_fn, leaves, 0)
    assert loss_b == pytest.approx(loss_w, rel=1e-10, abs=1e-10)
    for gb, gw in zip(grads_b, grads_w):
        np.testing.assert_allclose(gb, gw, rtol=1e-9, atol=1e-10 * max(1.0, np.abs(gw).max()))


# The cluster tests last: the module's client fixture stays up once started, and daskgrad submits to any
# live Client, so a test after them would run on the cluster.
def test_row_blocks_on_a_cluster_equal_whole_chunks(client, taken):
    rng = np.random.default_rng(4)
    X = rng.standard_normal((20_000, 6))
    y = (rng.random(20_000) < 0.5).astype(float)
    w = rng.standard_normal(6) / 3
    leaves = [(X, (10_000, 6), False), (y, 10_000, False), (w, -1, True)]

    def loss_fn(X, y, w):
        return dg.binary_cross_entropy_with_logits(X @ w, y)
    whole = _grads(loss_fn, leaves, 0)
    blocked = _grads(loss_fn, leaves, "64 KiB")
    assert taken["rows"] >= 2
    np.testing.assert_allclose(blocked[1][0], whole[1][0], rtol=1e-12, atol=1e-15)
