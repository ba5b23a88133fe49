"""What a checkpointed time loop costs, counted (not timed): a small step's tasks that one task of the
step reads alone (a halo's one-cell strips, a fused VJP's getitems) run inside it, so the README's
1-D wave runs one task per chunk per step forward and about half the tasks in its reversal, with the
same bits; and recording a step per ``i`` stays refused where one step draws random numbers."""
import dask
import numpy as np
import pytest

import daskgrad as dg
from daskgrad import compiler
from daskgrad._dask import ScanLayer, scan
from daskgrad.utils import revolve
from daskgrad.utils.checkpoint import checkpoint_steps

LAP = np.array([1.0, -2.0, 1.0])


def wave(n, chunks):
    """The README's 1-D wave (state (u_prev, u), wave speed c requiring grad), ``n`` points in chunks of ``chunks``."""
    c = dg.full(n, 0.5, dtype="float64", chunks=chunks, requires_grad=True)
    u0 = dg.from_array(np.exp(-0.05 * (np.arange(n) - n / 2) ** 2), chunks=chunks)

    def step(state, i):
        u_prev, u = state
        return u, 2 * u - u_prev + c ** 2 * dg.correlate(u, LAP, mode="constant")

    return step, c, u0


def _loop_tasks(array):
    return sum(len(layer) for layer in array.dask.layers.values() if isinstance(layer, ScanLayer))


def test_a_small_stencil_step_runs_one_task_per_chunk_of_its_state_forward():
    step, c, u0 = wave(44, 11)
    with dg.no_grad():
        u_prev, u = checkpoint_steps(step, (u0, u0 * 1.0), 10, snapshots=3)
    # the new u's 4 chunks a step (u_prev is the last u: no task); its halo strips run inside them
    assert _loop_tasks(u.array) == 10 * 4
    ref_prev, ref = u0.numpy(), u0.numpy()
    cc = c.detach().numpy() ** 2
    for _ in range(10):
        p = np.pad(ref, 1)
        ref_prev, ref = ref, 2 * ref - ref_prev + cc * (p[:-2] - 2 * p[1:-1] + p[2:])
    np.testing.assert_allclose(u.numpy(), ref, rtol=1e-13)


def _reversal(monkeypatch, chained):
    """The reversal's loop (its dask graph's task count) and c.grad, the loop's bodies and programs made anew."""
    monkeypatch.setattr(scan, "_bodies", {})
    if not chained:
        monkeypatch.setattr(scan, "_chained", lambda graph, order, runs, kind, out_keys: (order, runs))
    made = []
    revolve_fn = dg._dask.scan_revolve

    def counting(*args, **kwargs):
        out = revolve_fn(*args, **kwargs)
        made.append(_loop_tasks(out[0]))
        return out

    monkeypatch.setattr(dg._dask, "scan_revolve", counting)
    step, c, u0 = wave(52, 13)
    with dask.config.set({"daskgrad.step-cache.enabled": False, "scheduler": "threads"}):
        u_prev, u = checkpoint_steps(step, (u0, u0 * 1.0), 40, snapshots=4)
        (u ** 2).sum().backward()
    return made, c.grad.numpy()


def test_a_small_stencil_step_s_reversal_runs_about_half_the_tasks_with_the_same_bits(monkeypatch):
    with monkeypatch.context() as m:
        before, grad_before = _reversal(m, chained=False)
    after, grad_after = _reversal(monkeypatch, chained=True)
    assert len(before) == len(after) == 1
    assert after[0] <= 0.6 * before[0], (after, before)
    t = revolve.repetitions(40, 4)
    # each step evaluation (Revolve's t + 1, the sweep's included) runs 4 tasks; each reversal its 22 and
    # the waits and sums around it (2,123 in all here, 3,755 before)
    assert after[0] <= 4 * (t + 1) + 45 * 40
    assert grad_after.tobytes() == grad_before.tobytes()


def test_the_legacy_generator_s_state_is_read_as_get_state_gives_it():
    before = np.random.get_state()
    try:
        for act in (lambda: None, np.random.rand, lambda: np.random.seed(7), lambda: np.random.standard_normal(700),
                    lambda: np.random.set_state(before)):
            start = np.random.get_state()
            start = (start[1][:4].tobytes(), *start[2:])
            act()
            legacy = np.random.get_state()
            want = (legacy[1][:4].tobytes(), *legacy[2:])
            assert compiler._legacy_state() == want
            assert (compiler._legacy_state(start) == start) == (want == start)  # (the read after a trace)
    finally:
        np.random.set_state(before)


@pytest.mark.parametrize("cached", [False, True])
def test_a_step_drawing_a_cached_normal_is_refused(cached):
    # NumPy's legacy randn draws normals in pairs and answers every other draw from its cache, without moving the
    # generator's position: a step drawing that cached normal was recorded once and its number replayed
    step, c, u0 = wave(44, 11)
    before = np.random.get_state()
    try:
        np.random.seed(0)
        if cached:
            np.random.randn()  # (one normal of the pair left in the cache)

        def drawing(state, x):
            return step(state, 0)[0], step(state, 0)[1] + float(np.random.randn())

        xs = dg.zeros(4, dtype="float64")
        with pytest.raises(RuntimeError, match="it draws random numbers"):
            checkpoint_steps(drawing, (u0, u0 * 1.0), 4, snapshots=2, xs=xs)
    finally:
        np.random.set_state(before)


def test_recording_works_with_another_global_bit_generator():
    before = np.random.get_state()
    try:
        np.random.set_bit_generator(np.random.PCG64(3))
        step, c, u0 = wave(44, 11)
        u_prev, u = checkpoint_steps(step, (u0, u0 * 1.0), 6, snapshots=2)
        (u ** 2).sum().backward()
        assert c.grad is not None
    finally:
        np.random.set_bit_generator(np.random.MT19937())
        np.random.set_state(before)


@pytest.mark.parametrize("at", [0, 5])
def test_a_step_drawing_from_numpy_s_global_generator_is_refused_and_named(at):
    step, c, u0 = wave(44, 11)

    def drawing(state, i):
        if i == at:
            np.random.rand()
        return step(state, i)

    with pytest.raises(RuntimeError, match=f"checkpoint_steps: step {at} cannot be recorded once for every step: "
                                           "it draws random numbers"):
        checkpoint_steps(drawing, (u0, u0 * 1.0), 10, snapshots=3)


def test_python_s_random_is_restored_after_a_loop_is_recorded():
    import random

    step, c, u0 = wave(44, 11)
    checkpoint_steps(step, (u0, u0 * 1.0), 10, snapshots=3)
    assert random.random == random._inst.random
