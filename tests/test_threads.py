"""Backward from several client threads at once behaves as in torch."""
import threading

import numpy as np
import pytest

import daskgrad as dg


def run_threads(n, target):
    barrier = threading.Barrier(n)
    errors, results = [], [None] * n

    def body(i):
        barrier.wait()
        try:
            results[i] = target(i)
        except Exception as e:  # noqa: BLE001 - collected and asserted on by the test
            errors.append(e)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, errors


@pytest.mark.parametrize("scheduler", ["sync", "threads"])
def test_ten_threads_accumulating_into_one_leaf_give_the_sum(scheduler):
    import dask

    x = dg.from_array(np.ones(6), chunks=2, requires_grad=True)
    with dask.config.set(scheduler=scheduler):
        _, errors = run_threads(10, lambda i: (x * float(i)).sum().backward())
    assert not errors
    np.testing.assert_allclose(x.grad.numpy(), np.full(6, 45.0))


def test_two_threads_backpropagating_through_one_graph_one_gets_the_second_time_error():
    x = dg.from_array(np.arange(4.0), chunks=2, requires_grad=True)
    loss = (dg.exp(x) * x).sum()
    _, errors = run_threads(2, lambda i: loss.backward())
    assert len(errors) == 1
    assert isinstance(errors[0], RuntimeError) and "backward through the graph a second time" in str(errors[0])
    np.testing.assert_allclose(x.grad.numpy(), np.exp(np.arange(4.0)) * (np.arange(4.0) + 1))


def test_ten_threads_through_a_retained_graph_all_accumulate():
    x = dg.from_array(np.arange(4.0), chunks=2, requires_grad=True)
    loss = (x * x).sum()
    _, errors = run_threads(10, lambda i: loss.backward(retain_graph=True))
    assert not errors
    np.testing.assert_allclose(x.grad.numpy(), 10 * 2 * np.arange(4.0))


def test_grad_mode_is_thread_local():
    x = dg.ones(3, requires_grad=True)

    def body(i):
        if i % 2:
            with dg.no_grad():
                return (x * 2).requires_grad
        return (x * 2).requires_grad

    results, errors = run_threads(10, body)
    assert not errors
    assert results == [True, False] * 5


def test_backward_from_a_leaf_nobody_references_and_duplicate_roots():
    (dg.tensor([1.0, 2.0], requires_grad=True) + 1).sum().backward()  # used to raise AttributeError
    x = dg.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    g = dg.ones(2)
    dg.backward([y, y], [g, g])
    np.testing.assert_allclose(x.grad.numpy(), [4.0, 4.0])
    (gx,) = dg.grad([x, x], x, [g, g])
    np.testing.assert_allclose(gx.numpy(), [2.0, 2.0])
    gx1, gx2 = dg.grad([(x * x).sum()], [x, x])
    np.testing.assert_allclose(gx1.numpy(), [2.0, 4.0])
    np.testing.assert_allclose(gx2.numpy(), [2.0, 4.0])
