"""checkpoint_steps at Revolve's reference size, 1,000 steps and 20 snapshots, on a tiny state:
the step evaluations the tasks execute are Revolve's t + 1 (2,748, under 2.8 x the steps) and the
gradients are exact; and a one-chunk state past 50 steps (where its gradients' graphs are folded
twice under one name) gives the uncheckpointed gradients."""
import numpy as np

import daskgrad as dg
from daskgrad.utils import revolve
from daskgrad.utils.checkpoint import checkpoint_steps
from test_checkpoint_steps import counting  # a map_blocks identity counting the chunks it runs on

C = np.array([0.96, 0.98, 1.0, 1.02])
U0 = np.linspace(0.1, 0.4, 4)


def sine_map(count=lambda t: t):
    """u <- c sin(u) on 4 values in one chunk (the fewest ops a step can have: the client's graph
    building is most of the time), c a leaf requiring grad too."""
    u0 = dg.from_array(U0, chunks=4, requires_grad=True)
    c = dg.from_array(C, chunks=4, requires_grad=True)

    def step(u, i):
        return count(dg.sin(u) * c)

    return step, u0, c


def numpy_gradients(steps):
    """d sum(u_steps) / d(u0, c), by hand."""
    us = [U0]
    for _ in range(steps):
        us.append(np.sin(us[-1]) * C)
    gu, gc = np.ones(4), np.zeros(4)
    for u in reversed(us[:-1]):
        gc += gu * np.sin(u)
        gu = gu * C * np.cos(u)
    return gu, gc


def test_a_thousand_steps_with_twenty_snapshots_execute_revolve_s_2748_step_evaluations():
    count, runs = counting()
    step, u0, c = sine_map(count)
    checkpoint_steps(step, u0, 1000, snapshots=20).sum().backward()
    t = revolve.repetitions(1000, 20)
    # every step evaluation makes one state chunk: the forward sweep and the recomputations (Revolve's
    # t advances) and the last step; the recorded re-run inside each reversal makes no state
    assert runs[0] == t + 1 == 2748
    assert runs[0] <= 2.8 * 1000
    gu, gc = numpy_gradients(1000)
    np.testing.assert_allclose(u0.grad.numpy(), gu, rtol=1e-12)
    np.testing.assert_allclose(c.grad.numpy(), gc, rtol=1e-12)


def test_a_one_chunk_state_over_fifty_steps_gives_the_uncheckpointed_gradients():
    # 51 steps, 2 snapshots: a gradient's graph was folded twice under its own name, and the graph
    # optimization lost its tasks (KeyError: 'sin-vjp-...') before any task ran
    step, u0, c = sine_map()
    checkpoint_steps(step, u0, 51, snapshots=2).sum().backward()
    gu, gc = numpy_gradients(51)
    np.testing.assert_allclose(u0.grad.numpy(), gu, rtol=1e-12)
    np.testing.assert_allclose(c.grad.numpy(), gc, rtol=1e-12)
