"""Edge cases of running a large chunk's fused step over blocks of rows
(``daskgrad._dask.rows``): broadcasting, transposed and 3-d values, contractions handed over as
lists, reductions that are not sums, dtypes, and chunks whose rows do not fill the blocks.  Every
result equals the one computed on whole chunks, or the task is refused and runs whole."""
import functools
import operator
import warnings

import dask
import numpy as np
import pytest

import daskgrad as dg
from daskgrad import chunk
from daskgrad._dask import rows


@pytest.fixture
def taken(monkeypatch):
    """How many fused tasks ran over row blocks."""
    seen = {"rows": 0}
    run = rows.run

    def spy(*args, **kwargs):
        out = run(*args, **kwargs)
        seen["rows"] += out is not None
        return out
    monkeypatch.setattr(rows, "run", spy)
    return seen


def _grads(loss_fn, leaves, block):
    with dask.config.set({"daskgrad.row-block-bytes": block}):
        ts = [dg.from_array(v, chunks=c, requires_grad=g) for v, c, g in leaves]
        loss = loss_fn(*ts)
        loss.backward()
        return loss.item(), [None if t.grad is None else t.grad.numpy() for t in ts]


def _same_as_whole(loss_fn, leaves, rtol):
    loss_b, grads_b = _grads(loss_fn, leaves, 1024)   # first: a step run again may be an instance run inline
    loss_w, grads_w = _grads(loss_fn, leaves, 0)
    assert loss_b == pytest.approx(loss_w, rel=rtol, abs=rtol)
    for gb, gw in zip(grads_b, grads_w):
        assert (gb is None) == (gw is None)
        if gw is not None:
            assert gb.shape == gw.shape and gb.dtype == gw.dtype
            np.testing.assert_allclose(gb, gw, rtol=rtol, atol=rtol * max(1.0, np.abs(gw).max()))


def _leaves(R, chunks, dtype=np.float64, x_grad=True):
    """X (R, 5), c (R, 1), r (1, 5), y (R,), v (5,)."""
    rng = np.random.default_rng(5)
    return [(rng.standard_normal((R, 5)).astype(dtype), (chunks, 5), x_grad),
            (rng.standard_normal((R, 1)).astype(dtype), (chunks, 1), True),
            (rng.standard_normal((1, 5)).astype(dtype), -1, True),
            (rng.standard_normal(R).astype(dtype), (chunks,), True),
            (rng.standard_normal(5).astype(dtype), -1, True)]


CHUNKINGS = {"rows_not_a_multiple_of_the_block": (900, 900), "uneven_chunks": (1000, (256, 744)),
             "four_blocks_exactly": (512, 256)}


def _edges():
    """(name, loss of (X, c, r, y, v)): whatever of them runs over row blocks must equal the whole run
    (today most chunk tasks here are refused, a reshape or a max over rows inside; they guard the
    rules as they widen)."""
    return [
        ("column_broadcast", lambda X, c, r, y, v: ((X * c + r) @ v).sum()),
        ("row_vector_broadcast", lambda X, c, r, y, v: ((X - r) ** 2 * c).sum()),
        ("vector_plus_transposed_column", lambda X, c, r, y, v: ((y + c.T) * (X @ v)).sum()),
        ("gram", lambda X, c, r, y, v: ((X.T @ X) @ v).sum() + (X.T @ y) @ v),
        ("vector_times_rows", lambda X, c, r, y, v: (y @ X) @ v + y @ y),
        ("sum_keepdims_negative_axis", lambda X, c, r, y, v: (X.sum(axis=-1, keepdims=True) * c).sum(axis=0)
         @ dg.ones(1, dtype="float64") + (X * y[:, None]).sum(axis=-2, keepdims=True).sum()),
        ("sum_axis_none", lambda X, c, r, y, v: dg.sum(X * X) * dg.sum(y) + (X @ v).sum()),
        ("comparison_and_where", lambda X, c, r, y, v: (dg.where(X > r, X * c, -X) @ v).sum()
         + ((X > 0).sum(axis=1) * y).sum()),
        ("max_over_rows", lambda X, c, r, y, v: dg.max(X, axis=0) @ v + (X @ v).max()),  # (NumPy's max: the
        ("max_over_columns", lambda X, c, r, y, v: (dg.max(X, axis=1) * y).sum()),  # method gives torch's pair)
        ("prod_over_rows", lambda X, c, r, y, v: (1 + 0.01 * X).prod(axis=0) @ v),
        ("var_over_rows", lambda X, c, r, y, v: X.var(axis=0) @ v + (X * c).std()),
        ("logsumexp_over_rows", lambda X, c, r, y, v: dg.logsumexp(X @ v, axis=0) + dg.logsumexp(X, axis=0) @ v),
        ("logsumexp_over_columns", lambda X, c, r, y, v: (dg.logsumexp(X, axis=1) * y).sum()),
        ("transposes", lambda X, c, r, y, v: (X.T * v[:, None]).T.sum(axis=1) @ y + (c.T @ X) @ v),
        ("relu_abs_clip", lambda X, c, r, y, v: (dg.relu(X) @ v + dg.abs(y) + dg.clip(X, -0.5, 0.5).sum(1)).sum()),
    ]


@pytest.mark.parametrize("name,loss_fn", _edges(), ids=[e[0] for e in _edges()])
@pytest.mark.parametrize("chunking", list(CHUNKINGS))
def test_edge_op_chain_over_row_blocks_equals_whole_chunks_float64(name, loss_fn, chunking):
    _same_as_whole(loss_fn, _leaves(*CHUNKINGS[chunking]), rtol=1e-10)


def _taken_chains():
    """Chains whose chunk tasks run over row blocks today (losses of (X, c, r, y, v))."""
    return [
        ("sigmoid_softplus", lambda X, c, r, y, v: (dg.sigmoid(X @ v) * dg.softplus(-(X @ v)) * y).sum()),
        ("mse_mean", lambda X, c, r, y, v: ((X @ v - y) ** 2).mean()),
        ("abs_exp", lambda X, c, r, y, v: dg.abs(X @ v - y).sum() + dg.exp(-(X @ v) ** 2).sum()),
    ]


@pytest.mark.parametrize("name,loss_fn", _taken_chains(), ids=[e[0] for e in _taken_chains()])
@pytest.mark.parametrize("dtype,rtol", [(np.float64, 1e-10), (np.float32, 1e-4)], ids=["float64", "float32"])
def test_chains_taken_over_row_blocks_on_uneven_chunks_equal_whole_chunks(name, loss_fn, dtype, rtol, taken):
    _same_as_whole(loss_fn, _leaves(1000, (256, 744), dtype, x_grad=False), rtol)
    assert taken["rows"] >= 2


# ------------------------------------------------------------------ rows.run on parts made by hand
class _C(str):
    """A string constant, not a value's name."""


def _part(key, func, *args, **kwargs):
    """A part reading the values named by strings; ``[name]`` hands a one-element list over."""
    def spec(a):
        if isinstance(a, str) and not isinstance(a, _C):
            return ("r", a)
        if isinstance(a, list):
            return ("s", list, tuple((True, e) for e in a))
        return ("c", a)
    args, kwargs = tuple(map(spec, args)), {k: spec(a) for k, a in kwargs.items()}
    reads = [a[1] for a in (*args, *kwargs.values()) if a[0] == "r"]
    reads += [e for a in (*args, *kwargs.values()) if a[0] == "s" for _, e in a[2]]
    return rows.Part(key, getattr(func, "__name__", "part"), func, args, kwargs, tuple(reads))


def _whole(parts, env):
    env = dict(env)
    for p in parts:
        env[p.key] = p(env)
    return env


def _check(parts, values, outputs, block_bytes=256, seconds=None):
    """rows.run's outputs equal the parts run on the whole values (and some ran over blocks): to
    rounding in float32, whose totals are sums of the blocks' sums."""
    want = _whole(parts, values)
    got = rows.run(lambda: parts, list(values), list(values.values()), outputs, block_bytes, seconds)
    assert got is not None
    for k in outputs:
        assert np.shape(got[k]) == np.shape(want[k]) and got[k].dtype == want[k].dtype, k
        tol = 1e-5 if want[k].dtype == np.float32 else 1e-12
        np.testing.assert_allclose(got[k], want[k], rtol=tol, atol=tol)
    return got


def test_rows_moved_by_a_transpose_of_a_3d_value_are_kept_on_their_axis_and_summed_on_it():
    rng = np.random.default_rng(6)
    T, w = rng.standard_normal((1000, 2, 3)), rng.standard_normal(3)
    parts = [_part("t", np.transpose, "T", (1, 2, 0)),           # rows last: (2, 3, R)
             _part("e", np.tanh, "t"),
             _part("s", np.sum, "e", axis=-1, keepdims=True),     # a total over rows
             _part("m", np.sum, "t", axis=(0, 1)),                # rows kept, alone: (R,)
             _part("k", np.transpose, "t"),                       # back to (R, 3, 2)
             _part("g", np.multiply, "k", "m")]                   # refused: (R,3,2) * (R,) do not line up
    with pytest.raises(rows.Refused):
        rows.run(lambda: parts, ["T", "w"], [T, w], ["s", "e"], 256)
    _check(parts[:5], {"T": T, "w": w}, ["s", "e", "m", "k"])


def test_contractions_handed_over_as_lists_and_partial_products_over_row_blocks():
    rng = np.random.default_rng(7)
    X, W, y = rng.standard_normal((700, 4)), rng.standard_normal((4, 3)), rng.standard_normal(700)
    parts = [_part("z", chunk.matmul, ["X"], "W"),                # rows of a: rows of the product
             _part("zt", np.transpose, "z"),                       # (3, R)
             _part("p", chunk.matmul_partial, "zt", "y"),        # contracted over rows: (1, 3), a total
             _part("q", chunk.matmul_partial, "W", np.ones((3, 2))),  # no rows: once
             _part("h", chunk.matmul_partial, np.ones((2, 3)), "zt"),  # columns of b: (1, 2, R)
             _part("n", operator.matmul, "y", "X"),                # a 1-d with rows times rows: a total
             _part("nn", np.sum, "n"),                             # reads a total: after the blocks
             _part("o", operator.mul, "p", "nn")]
    _check(parts, {"X": X, "W": W, "y": y}, ["z", "zt", "p", "q", "h", "n", "nn", "o"])


def test_chunk_reductions_over_row_blocks_keep_rows_or_sum_them_and_refuse_a_max_over_them():
    rng = np.random.default_rng(8)
    X = rng.standard_normal((640, 5))
    parts = [_part("mx", chunk.reduce, ["X"], _C("max"), 1, False),       # over columns: rows kept
             _part("va", chunk.reduce, "X", _C("var"), -1, True),        # (R, 1)
             _part("sm", chunk.reduce, ["X"], _C("sum"), (0, 1), True),  # over everything: a total
             _part("t", np.add, "mx", "sm")]                          # a total meeting rows: refused
    _check(parts[:3], {"X": X}, ["mx", "va", "sm"])
    with pytest.raises(rows.Refused):
        rows.run(lambda: parts, ["X"], [X], ["t"], 256)
    over_rows = [_part("m", chunk.reduce, "X", _C("max"), 0, False), _part("s", np.sum, "X")]
    with pytest.raises(rows.Refused):
        rows.run(lambda: over_rows, ["X"], [X], ["m", "s"], 256)


def test_values_made_without_rows_that_span_them_are_cut_and_ones_that_lie_across_them_refused():
    rng = np.random.default_rng(9)
    X = rng.standard_normal((600, 3))
    made = [_part("o", np.ones, (600, 1)), _part("a", np.multiply, "X", "o"), _part("s", np.sum, "a", axis=0)]
    _check(made, {"X": X}, ["o", "a", "s"])
    across = [_part("o", np.ones, (1, 600)), _part("xt", np.transpose, "X"), _part("a", np.multiply, "xt", "o"),
              _part("s", np.sum, "a", axis=1)]
    with pytest.raises(rows.Refused):
        rows.run(lambda: across, ["X"], [X], ["s"], 256)


@pytest.mark.parametrize("dtype", [np.int64, np.bool_, np.complex128, np.float32])
def test_dtypes_over_row_blocks_equal_the_whole_run(dtype):
    rng = np.random.default_rng(10)
    X = (rng.standard_normal((650, 4)) * 3).astype(dtype)
    if dtype is np.complex128:
        X = X + 1j * rng.standard_normal((650, 4))
    parts = [_part("g", operator.gt, "X", 0) if dtype is not np.complex128 else _part("g", np.conj, "X"),
             _part("w", np.where, "g", "X", 1) if dtype is not np.complex128 else _part("w", np.multiply, "g", "X"),
             _part("xt", np.transpose, "w"),
             _part("gram", operator.matmul, "xt", "w"),
             _part("s", np.sum, "g", axis=0)]
    got = _check(parts, {"X": X}, ["g", "w", "gram", "s"])
    assert got["gram"].dtype == np.result_type(X.dtype, np.int64 if dtype is np.bool_ else X.dtype)


def test_metered_row_blocks_equal_the_generated_block_function_and_meter_every_part():
    rng = np.random.default_rng(11)
    X, v, y = rng.standard_normal((1000, 4)), rng.standard_normal(4), rng.standard_normal(1000)
    parts = [_part("z", np.matmul, "X", "v"), _part("r", chunk.bce_with_logits, "z", "y"),
             _part("l", np.sum, "r"), _part("d", chunk.bce_with_logits_grad, "z", "y", 1.0),
             _part("xt", np.transpose, "X"), _part("g", np.matmul, "xt", "d"),
             _part("h", np.multiply, "g", "l")]
    seconds = {}
    metered = _check(parts, {"X": X, "v": v, "y": y}, ["l", "g", "h", "d"], seconds=seconds)
    plain = _check(parts, {"X": X, "v": v, "y": y}, ["l", "g", "h", "d"])
    for k in metered:
        np.testing.assert_array_equal(metered[k], plain[k])
    assert set(seconds) == {p.name for p in parts}


UNARY = [np.tanh, np.negative, np.abs, np.sin, chunk.sigmoid, chunk.softplus]
BINARY = [np.add, np.multiply, operator.sub, np.maximum, operator.gt, chunk.bce_with_logits]


def _random_part(rng, k, keys, R, d):
    """One part on values drawn from ``keys``: any rule's kernel, or one that lies across the rows."""
    a, b, c = (keys[i] for i in rng.integers(len(keys), size=3))
    kind = rng.integers(11)
    if kind == 0:
        return _part(k, UNARY[rng.integers(len(UNARY))], a)
    if kind in (1, 2):
        return _part(k, BINARY[rng.integers(len(BINARY))], a, b)
    if kind == 3:
        return _part(k, np.where, a, b, c)
    if kind == 4:
        axes = [None, (1, 2, 0), (0, 2, 1)][rng.integers(3)]
        return _part(k, np.transpose, a) if axes is None else _part(k, np.transpose, a, axes)
    if kind in (5, 6):
        mm = [np.matmul, operator.matmul, chunk.matmul, chunk.matmul_partial][rng.integers(4)]
        return _part(k, mm, [a] if mm is chunk.matmul and rng.random() < 0.5 else a, b)
    if kind == 7:
        total = np.sum if rng.random() < 0.7 else functools.partial(np.sum, dtype=np.float64)
        return _part(k, total, a, axis=[None, 0, 1, -1, (0, 1), -2][rng.integers(6)],
                     keepdims=bool(rng.integers(2)))
    if kind == 8:
        fn = _C(["sum", "max", "mean", "prod"][rng.integers(4)])
        return _part(k, chunk.reduce, [a] if rng.random() < 0.5 else a, fn,
                     [0, 1, -1, (0, 1), None][rng.integers(5)], bool(rng.integers(2)))
    if kind == 9:
        return _part(k, np.ones, [(R,), (R, 1), (1, R), (d, R)][rng.integers(4)])
    spans = [rng.standard_normal(shape) for shape in [(R, 1), (R,), (1, R), (d, R)]]
    return _part(k, BINARY[rng.integers(len(BINARY))], a, spans[rng.integers(len(spans))])


def test_random_programs_over_row_blocks_equal_the_whole_run_or_are_refused():
    """Random programs of every rule's kernel on tall values (rows on any axis, operands that span
    the rows without being cut): whatever runs over blocks gives the whole run's values."""
    ran = 0
    for seed in range(300):
        rng = np.random.default_rng(seed)
        R, d = int(rng.choice([256, 300, 650])), int(rng.choice([3, 4]))
        values = {"X": rng.standard_normal((R, d)), "y": rng.standard_normal(R), "c": rng.standard_normal((R, 1)),
                  "w": rng.standard_normal(d), "W": rng.standard_normal((d, d)), "r": rng.standard_normal((1, d)),
                  "T": rng.standard_normal((R, 2, d)), "ct": rng.standard_normal((1, R)),
                  "i": rng.integers(-3, 3, (R, d)), "b": rng.random(R) < 0.5}
        env, parts = dict(values), []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for i in range(int(rng.integers(3, 12))):
                part = _random_part(rng, f"p{i}", list(env), R, d)
                try:
                    out = part(env)
                except Exception:
                    continue
                if isinstance(out, np.ndarray) or np.isscalar(out):
                    env[part.key] = out
                    parts.append(part)
            if not parts:
                continue
            outputs = sorted({parts[-1].key, *(parts[j].key for j in rng.integers(len(parts), size=2))})
            try:
                got = rows.run(lambda: parts, list(values), list(values.values()), outputs,
                               int(rng.choice([64, 1024])), {} if rng.random() < 0.3 else None)
            except rows.Refused:
                continue
        ran += 1
        for k in outputs:
            assert np.shape(got[k]) == np.shape(env[k]) and got[k].dtype == env[k].dtype, (seed, k)
            np.testing.assert_allclose(got[k], env[k], rtol=1e-9, atol=1e-9, err_msg=f"seed {seed}, {k}")
    assert ran >= 40, ran
