"""Several steps a body (``unroll=K`` of checkpoint_steps and scan, as ``jax.lax.scan``'s): the unrolled
loop's values and gradients for any K (a whole number of blocks, steps left over, K past the steps),
``step`` called once a step of one block when its data enters as ``xs``, a chunk that reads only
itself advancing K steps in one task (fewer tasks a step), Revolve's count over blocks, and a bad K
refused before anything is submitted."""
import re

import numpy as np
import pytest

import daskgrad as dg
from daskgrad.utils import revolve
from daskgrad.utils.checkpoint import MAX_UNROLL, UNROLL_BYTES, auto_unroll, checkpoint_steps, scan

from test_checkpoint_steps import LAP1, _rnn, assert_close, counting, wave_1d


def _wave_grads(chunks, steps, snapshots=None, unroll=None, with_xs=False):
    """The 1-D wave's gradients (of u0, c and, ``with_xs``, a per-step source ``xs``): the plain loop
    where ``unroll`` is None, else checkpoint_steps with ``unroll``; and the calls of ``step``."""
    step, state, leaves = wave_1d(chunks)
    xs = dg.from_array(np.random.default_rng(5).standard_normal((steps, 17)), chunks=((3,) * (steps // 3) +
                       ((steps % 3,) if steps % 3 else ()), chunks), requires_grad=True)
    leaves = leaves + ((xs,) if with_xs else ())
    calls = []

    def counted(s, x):
        calls.append(x if not with_xs else None)
        prev, u = step(s, 0)
        return prev, u + 0.01 * (x if with_xs else float(x))  # (the index enters the value too)

    for t in leaves:
        t.grad = None
    s = state()
    if unroll is None:
        for i in range(steps):
            s = counted(s, xs[i] if with_xs else i)
    else:
        s = checkpoint_steps(counted, s, steps, snapshots=snapshots, xs=xs if with_xs else None, unroll=unroll)
    ((s[1] ** 2).sum() + (s[0] * dg.sin(s[1])).sum()).backward()
    return [t.grad.numpy() for t in leaves], calls


@pytest.mark.parametrize("with_xs", [False, True])
@pytest.mark.parametrize("chunks,steps,snapshots,unroll", [
    (17, 12, 3, 4),         # whole blocks, one chunk
    ((6, 6, 5), 10, 2, 3),  # a step left over, uneven chunks
    (6, 11, 4, 4),          # three steps left over, even chunks
    (1, 7, 2, 2),           # chunks of one element
    ((6, 6, 5), 5, 3, 5),   # one block: the whole loop
    ((4, 9, 4), 4, 2, 9),   # K past the steps: the loop as it is
])
def test_unrolled_steps_give_the_unrolled_loop_s_gradients(chunks, steps, snapshots, unroll, with_xs):
    want, plain_calls = _wave_grads(chunks, steps, with_xs=with_xs)
    got, calls = _wave_grads(chunks, steps, snapshots, unroll, with_xs)
    assert_close(got, want)
    if not with_xs:  # the index each step gets is the plain loop's
        assert sorted(set(calls)) == plain_calls


def test_with_xs_step_is_called_once_a_step_of_one_block_and_once_for_the_steps_left_over():
    for steps, unroll, left in ((30, 5, 0), (30, 7, 2)):
        _, calls = _wave_grads((6, 6, 5), steps, 3, unroll, with_xs=True)
        assert len(calls) == unroll + (left > 0), (steps, unroll, calls)


def test_revolve_runs_its_binomial_count_over_the_blocks():
    count, runs = counting()
    step, state, (u0, c) = wave_1d((6, 6, 5), count)
    steps, unroll, snapshots = 24, 4, 2
    (checkpoint_steps(step, state(), steps, snapshots=snapshots, unroll=unroll)[1] ** 2).sum().backward()
    blocks = steps // unroll
    # every state a step makes, in 3 chunks: Revolve's advances over the blocks (the forward sweep and the
    # recomputations) and the last block, each block its unroll steps; and inside each block's reversal, the
    # block recomputed from its first state: the states its later steps' VJPs read (all but its last)
    advances = revolve.repetitions(blocks, snapshots)
    assert runs[0] == 3 * (unroll * (advances + 1) + blocks * (unroll - 1))
    assert c.grad is not None and u0.grad is not None


def _shots(unroll, steps=12, snapshots=3):
    """A step each chunk of which reads only itself (a shot's grid, chunked one shot a chunk): the
    gradient and the tasks of its submission."""
    rng = np.random.default_rng(2)
    u0 = dg.from_array(rng.standard_normal((4, 16)), chunks=(1, 16))
    c = dg.from_array(0.3 + 0.1 * rng.random(16), chunks=16, requires_grad=True)
    xs = dg.from_array(rng.standard_normal((steps, 4, 1)), chunks=(steps, 1, 1))

    def step(state, x):
        prev, u = state
        new = 2 * u - prev + c ** 2 * dg.correlate(dg.tanh(u), LAP1[None], mode="constant")
        return u, new + 0.01 * x

    state = checkpoint_steps(step, (u0 * 1.0, u0), steps, snapshots=snapshots, xs=xs, unroll=unroll)
    loss = (state[1] ** 2).sum()
    with dg.testing.submissions(graphs=True) as seen:
        loss.backward()
    tasks = sum(len(a.__dask_graph__()) for a in seen.graphs[0][:1])
    return c.grad.numpy(), tasks


def test_a_chunk_that_reads_only_itself_advances_several_steps_a_task():
    want, tasks_1 = _shots(1)
    got, tasks_4 = _shots(4, snapshots=2)
    assert_close([got], [want])
    assert tasks_4 < 0.5 * tasks_1, (tasks_4, tasks_1)


@pytest.mark.parametrize("unroll", [2, 3, 8, 11])
@pytest.mark.parametrize("snapshots", [None, 2])
def test_scan_with_unroll_stacks_every_step_s_output_and_gives_the_unrolled_gradients(unroll, snapshots):
    f, h0, X, leaves = _rnn()
    weights = dg.arange(8.0, dtype="float64")

    def grads(k):
        for t in leaves:
            t.grad = None
        h, (y, z) = scan(f, h0, X, snapshots=snapshots, unroll=k)
        assert y.shape == (8,) and z.shape == (8, 2)
        value = (y * weights).sum() + (z ** 2).sum() + h.sum()
        value.backward()
        return [value.item(), y.detach().numpy(), z.detach().numpy()] + [t.grad.numpy() for t in leaves]

    want, got = grads(1), grads(unroll)
    assert abs(got[0] - want[0]) <= 1e-12 * abs(want[0])
    assert_close(got[1:], want[1:])


def test_scan_without_xs_and_with_unroll_runs_length_steps_with_x_none():
    seen = []

    def f(c, x):
        seen.append(x)
        return c * 2.0, None

    c, ys = scan(f, dg.ones(3, dtype="float64"), length=7, unroll=3)
    assert ys is None and c.tolist() == [128.0] * 3 and set(seen) == {None}


@pytest.mark.parametrize("unroll", [0, -1, 1.5, True, "2", "AUTO"])
def test_a_bad_unroll_is_refused_before_anything_is_submitted(unroll):
    step, state, _ = wave_1d(6)
    with dg.testing.submissions() as subs:
        with pytest.raises(ValueError, match=re.escape(f"unroll should be a positive integer value or 'auto', but got "
                                                       f"unroll={unroll!r}")):
            checkpoint_steps(step, state(), 4, snapshots=2, unroll=unroll)
        with pytest.raises(ValueError, match="unroll should be a positive integer value"):
            scan(lambda c, x: (c, None), dg.ones(2), length=3, unroll=unroll)
    assert sum(subs.values()) == 0


@pytest.mark.parametrize("unroll,steps", [(1, 4), (2, 4), (2, 5), (4, 4)])
def test_a_write_to_xs_before_the_backward_raises_as_the_unrolled_loop_s_does(unroll, steps):
    # each step saves its row of xs (c * x), as torch's unrolled loop saves xs[i]: a write to xs after the loop
    # raises torch's in-place error at the backward, also where the row is a row of a block's data
    a = dg.from_array(np.arange(1.0, steps + 1), chunks=2)
    h0 = dg.ones(3, dtype="float64", requires_grad=True)
    c = checkpoint_steps(lambda c, x: c * x, h0, steps, snapshots=2, xs=a, unroll=unroll)
    with dg.no_grad():
        a.mul_(0.0)
    with pytest.raises(RuntimeError, match="one of the variables needed for gradient computation has been modified "
                                           "by an inplace operation"):
        dg.autograd.grad(c.sum(), [h0])


def test_a_step_returning_a_one_tuple_for_a_tensor_state_runs_in_blocks_as_in_one():
    want = checkpoint_steps(lambda u, i: (u * 0.9 + 1,), dg.zeros(2, dtype="float64"), 5, snapshots=2)
    got = checkpoint_steps(lambda u, i: (u * 0.9 + 1,), dg.zeros(2, dtype="float64"), 5, snapshots=2, unroll=2)
    assert got.tolist() == want.tolist()
    c, ys = scan(lambda c, x: ((c * 2.0,), c), dg.ones(2, dtype="float64"), length=5, unroll=2)
    assert c.tolist() == [32.0, 32.0] and ys[:, 0].tolist() == [1.0, 2.0, 4.0, 8.0, 16.0]


# ------------------------------------------------------------------ unroll="auto"
def test_auto_unroll_holds_a_block_s_states_of_a_chunk_within_its_bytes_and_prefers_a_k_dividing_the_steps():
    shot = dg.zeros((5, 261, 261), dtype="float64", chunks=(1, 261, 261))  # the tutorial FWI's state: 1.1 MB a chunk
    acc = dg.zeros(5, dtype="float64", chunks=1)
    assert auto_unroll((shot, shot, acc), 200) == 10  # 15 fit; 10 divides 200
    assert auto_unroll((shot, shot, acc), 7) == 7  # no more than the steps
    assert auto_unroll((shot, shot, acc), 199) == 15  # no K from 8 to 15 divides 199: the most that fit
    tiny = dg.zeros(10, dtype="float64")
    assert auto_unroll(tiny, 1000) == 25 and auto_unroll(tiny, 997) == MAX_UNROLL
    big = dg.zeros(UNROLL_BYTES // 8 + 1, dtype="float64")  # one chunk's state past the bytes: one step a body
    assert auto_unroll(big, 100) == 1
    half = dg.zeros((2, UNROLL_BYTES // 16), dtype="float32", chunks=(1, -1))  # a chunk of 1/4 of them: 4
    assert auto_unroll(half, 100) == 4 and auto_unroll(half.to(dtype="float64"), 100) == 2


@pytest.mark.parametrize("with_xs", [False, True])
@pytest.mark.parametrize("steps", [12, 40, 37])
def test_auto_unroll_gives_the_unrolled_loop_s_gradients_with_its_k(steps, with_xs):
    want, plain_calls = _wave_grads((6, 6, 5), steps, with_xs=with_xs)
    got, calls = _wave_grads((6, 6, 5), steps, 3, "auto", with_xs)
    assert_close(got, want)
    k = auto_unroll(dg.zeros(17, dtype="float64", chunks=(6, 6, 5)), steps)
    assert k == {12: 12, 40: 20, 37: 32}[steps]
    if with_xs:  # one block's steps recorded, and the left-over loop's step
        assert len(calls) == k + (steps % k > 0)  # (the left-over loop records its step once)
    else:
        assert sorted(set(calls)) == plain_calls


def test_scan_with_auto_unroll_stacks_the_same_outputs_and_gradients():
    def run(unroll):
        c = dg.tensor(0.9, dtype="float64", requires_grad=True)
        xs = dg.from_array(np.arange(1.0, 10.0).reshape(9, 1), chunks=(2, 1)).requires_grad_()
        carry, ys = scan(lambda h, x: (h * c + x, h * 2.0), dg.zeros(1, dtype="float64"), xs, unroll=unroll)
        (carry.sum() * ys.sum()).backward()
        return carry.detach().numpy(), ys.detach().numpy(), c.grad.numpy(), xs.grad.numpy()
    assert_close(run("auto"), run(1))
