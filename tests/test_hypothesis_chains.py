"""Property: random chains of ops on randomly chunked inputs pass the gradient check and keep chunks."""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import daskgrad as dg
from daskgrad.testing import gradcheck

UNARY = {
    "tanh": dg.tanh, "sigmoid": dg.sigmoid, "sin": dg.sin, "exp_small": lambda t: dg.exp(t * 0.3),
    "square": dg.square, "softplus": dg.softplus, "neg": lambda t: -t, "scale": lambda t: t * 1.7 + 0.2,
    "cumsum0": lambda t: dg.cumsum(t, axis=0), "flip1": lambda t: dg.flip(t, 1),
    "softmax1": lambda t: dg.softmax(t, axis=1), "transpose2": lambda t: t.T.T,
    "slice": lambda t: dg.pad(t[1:, :], ((1, 0), (0, 0))), "roll": lambda t: dg.roll(t, 1, axis=0),
}
BINARY = {
    "add": lambda a, b: a + b, "mul": lambda a, b: a * b, "sub": lambda a, b: a - b,
    "maximum": dg.maximum, "div": lambda a, b: a / (dg.abs(b) + 1.0),
    "where": lambda a, b: dg.where(a > b, a, b * 2), "matmul_sq": lambda a, b: (a @ b.T) @ a * 0.1,
}
REDUCE = {
    "sum": dg.sum, "mean_axis": lambda t: dg.mean(t, axis=0), "logsumexp": lambda t: dg.logsumexp(t, axis=1),
    "max_axis": lambda t: dg.max(t, axis=1), "var": lambda t: dg.var(t, axis=0),
}


def chunks_for(n):
    return st.one_of(st.just(n), st.just(1), st.integers(1, n),
                     st.lists(st.integers(1, 3), min_size=1, max_size=n).map(lambda c: _fit(c, n)))


def _fit(parts, n):
    out, total = [], 0
    for p in parts:
        if total + p >= n:
            break
        out.append(p)
        total += p
    out.append(n - total)
    return tuple(out)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(st.tuples(st.sampled_from(sorted(UNARY)), st.sampled_from(sorted(BINARY))), min_size=1,
                    max_size=3),
       reduce=st.sampled_from(sorted(REDUCE)), rows=chunks_for(5), cols=chunks_for(4),
       seed=st.integers(0, 2**16))
def test_random_op_chains_pass_gradcheck_and_keep_chunks(ops, reduce, rows, cols, seed):
    rng = np.random.default_rng(seed)
    rows = (rows,) if isinstance(rows, int) else (rows,)
    cols = (cols,) if isinstance(cols, int) else (cols,)
    a = dg.from_array(rng.uniform(-1, 1, (5, 4)), chunks=rows + cols, requires_grad=True)
    b = dg.from_array(rng.uniform(-1, 1, (5, 4)), chunks=(2, 3), requires_grad=True)

    def f(x, y):
        for u, bi in ops:
            x = BINARY[bi](UNARY[u](x), y)
        return REDUCE[reduce](x)

    assert gradcheck(f, [a, b], eps=1e-6, atol=1e-5, rtol=1e-4)
    f(a, b).sum().backward()
    assert a.grad.chunks == a.chunks and b.grad.chunks == b.chunks
