"""Time loops (checkpoint_steps, scan) with ``daskgrad.fuse-chunks`` off: the graph run in the calling
thread then holds dask's legacy tasks as dask made them (a reduction's aggregate: a tuple), which must run
as tasks, not be read as values (the backward raised a TypeError or a ValueError in ``chunk.where``).
The values and gradients are the fused run's, bit for bit, and the unrolled loop's."""
import dask
import numpy as np
import pytest

import daskgrad as dg
from daskgrad import nn
from daskgrad.utils.checkpoint import checkpoint_steps, scan

N, F, C = 30, 6, 4
ROWS = (10, 15, 5)  # uneven chunks


def _data():
    rng = np.random.default_rng(3)
    S = dg.tensor(rng.standard_normal((N, F)), chunks=(ROWS, F), requires_grad=True)
    W = dg.tensor(rng.standard_normal((F, F)) * 0.4, requires_grad=True)
    V = dg.tensor(rng.standard_normal((C, F)), requires_grad=True)
    y = dg.tensor(rng.integers(0, C, N), chunks=(ROWS,))
    xs = dg.tensor(rng.standard_normal((7, N, F)) * 0.1, chunks=((3, 4), ROWS, F), requires_grad=True)
    return S, W, V, y, xs


def _step(W):
    def step(s, i):  # a reduction inside the step too (a legacy aggregate task in the body)
        h = dg.tanh(s @ W.T)
        return h - 0.1 * h.mean(0)
    return step


def _steps_run(loss_kind, snapshots, unroll, fuse, plain=False, steps=5):
    with dask.config.set({"daskgrad.fuse-chunks": fuse}):
        S, W, V, y, _ = _data()
        step = _step(W)
        if plain:
            out = S
            for i in range(steps):
                out = step(out, i)
        else:
            out = checkpoint_steps(step, S, steps, snapshots=snapshots, unroll=unroll)
        if loss_kind == "ce":
            loss = nn.CrossEntropyLoss(label_smoothing=0.1)(out @ V.T, y)
        else:
            loss = (out ** 2).mean()
        loss.backward()
        return [loss.detach().numpy()] + [t.grad.numpy() for t in (S, W, V) if t.grad is not None]


@pytest.mark.parametrize("loss_kind", ["ce", "mean"])
@pytest.mark.parametrize("snapshots,unroll", [(2, 1), (3, 1), (5, 1), (2, 2), (2, 3)])
def test_checkpoint_steps_unfused_gives_the_fused_run_s_values(loss_kind, snapshots, unroll):
    got = _steps_run(loss_kind, snapshots, unroll, fuse=False)
    fused = _steps_run(loss_kind, snapshots, unroll, fuse=True)
    plain = _steps_run(loss_kind, snapshots, unroll, fuse=False, plain=True)
    assert len(got) == len(fused) == len(plain)
    for g, f, p in zip(got, fused, plain):
        np.testing.assert_array_equal(g, f)
        np.testing.assert_allclose(g, p, rtol=1e-12, atol=1e-14)


def test_checkpoint_steps_unfused_tuple_state_with_xs():
    def run(fuse, plain=False):
        with dask.config.set({"daskgrad.fuse-chunks": fuse}):
            S, W, _, _, xs = _data()

            def step(s, x):
                a, b = s
                return b, dg.tanh(a @ W.T) + x - b.sum(0) / N

            state = (S * 1.0, S * 0.5)
            if plain:
                for i in range(xs.shape[0]):
                    state = step(state, xs[i])
            else:
                state = checkpoint_steps(step, state, xs.shape[0], snapshots=3, xs=xs, unroll=2)
            loss = (state[0] * state[1]).sum() / (state[1].abs().sum() + 1)
            loss.backward()
            return [loss.detach().numpy(), S.grad.numpy(), W.grad.numpy(), xs.grad.numpy()]

    got, fused, plain = run(False), run(True), run(False, plain=True)
    for g, f, p in zip(got, fused, plain):
        np.testing.assert_array_equal(g, f)
        np.testing.assert_allclose(g, p, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("snapshots,unroll", [(None, 1), (2, 1), (3, 2), (None, 3)])
def test_scan_unfused_gives_the_fused_run_s_values(snapshots, unroll):
    def run(fuse, plain=False):
        with dask.config.set({"daskgrad.fuse-chunks": fuse}):
            S, W, V, y, xs = _data()

            def f(c, x):
                h = dg.tanh(c @ W.T + x)
                return h - h.mean(0), (h ** 2).sum(1)

            if plain:
                carry, ys = S, []
                for i in range(xs.shape[0]):
                    carry, yi = f(carry, xs[i])
                    ys.append(yi)
                ys = dg.stack(ys)
            else:
                carry, ys = scan(f, S, xs, snapshots=snapshots, unroll=unroll)
            loss = nn.CrossEntropyLoss()(carry @ V.T, y) + ys.mean() / (ys.abs().sum() + 1)
            loss.backward()
            return [loss.detach().numpy(), carry.detach().numpy(), ys.detach().numpy(), S.grad.numpy(), W.grad.numpy(),
                    V.grad.numpy(), xs.grad.numpy()]

    got, fused, plain = run(False), run(True), run(False, plain=True)
    for g, f, p in zip(got, fused, plain):
        np.testing.assert_array_equal(g, f)
        np.testing.assert_allclose(g, p, rtol=1e-12, atol=1e-14)
