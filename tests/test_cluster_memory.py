"""Memory on a distributed cluster: released graphs leave no key behind, retained graphs are reused."""
import time
from collections import Counter

import numpy as np
from dask.core import flatten
import pytest

import daskgrad as dg

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def memory_keys(client):
    def count(dask_scheduler):
        return sorted(str(k) for k, ts in dask_scheduler.tasks.items() if ts.state == "memory")
    return client.run_on_scheduler(count)


def settle(client, expected, timeout=10):
    """Release is asynchronous: wait until exactly ``expected`` keys are held in memory."""
    deadline = time.time() + timeout
    while True:
        keys = memory_keys(client)
        if len(keys) == expected or time.time() > deadline:
            return keys
        time.sleep(0.02)


def replicas_in_memory(client):
    """The scheduler's count of in-memory keys on workers: a key two workers hold counts twice."""
    def count(dask_scheduler):
        return sum(len(ts.who_has) for ts in dask_scheduler.tasks.values() if ts.state == "memory")
    return client.run_on_scheduler(count)


def managed_bytes(client, timeout=10):
    """Bytes the workers hold, once they agree with the scheduler's view (replicas included: counted
    against the keys alone, workers that each held a copy never agreed, and every call waited the
    whole timeout)."""
    deadline = time.time() + timeout
    while True:
        sizes = client.run(lambda dask_worker: (len(dask_worker.data), dask_worker.state.nbytes))
        held = sum(n for n, _ in sizes.values())
        if held == replicas_in_memory(client) or time.time() > deadline:
            return sum(b for _, b in sizes.values())
        time.sleep(0.05)


CALLS = Counter()


def counted_square(b):
    CALLS["forward"] += 1
    return b * b


def counted_square_vjp(g, b):
    return (2 * b * g,)


def test_backward_without_retain_graph_leaves_only_grad_and_the_held_loss(client):
    x = dg.from_array(np.arange(12.0).reshape(4, 3), chunks=(2, 3), requires_grad=True)
    loss = (dg.exp(x / 10) * dg.tanh(x)).sum()
    loss.backward()
    keys = settle(client, x.array.npartitions + 1)
    # x.grad's chunks and the loss value backward computed (the user holds `loss`; item() reads it)
    assert keys == sorted(str(k) for k in [*flatten(x.grad.array.__dask_keys__()),
                                           *flatten(loss.array.__dask_keys__())])
    np.testing.assert_allclose(x.grad.numpy(), (np.exp(x.detach().numpy() / 10) / 10 * np.tanh(x.detach().numpy())
                                                + np.exp(x.detach().numpy() / 10) / np.cosh(x.detach().numpy()) ** 2))
    del loss
    assert settle(client, x.array.npartitions) == sorted(str(k) for k in flatten(x.grad.array.__dask_keys__()))


def test_retained_graph_is_persisted_reused_without_forward_tasks_and_released(client):
    CALLS.clear()
    x = dg.from_array(np.arange(8.0), chunks=2, requires_grad=True)
    y = dg.map_blocks(counted_square, x, vjp=counted_square_vjp)
    z = dg.exp(y / 100).sum()
    z.backward(retain_graph=True)
    first = CALLS["forward"]
    assert first == 4
    held = memory_keys(client)
    assert len(held) > x.array.npartitions  # saved forward values are pinned
    report = dg.memory_report()
    assert report and any(r["keys"] and sum(r["bytes"].values()) > 0 for r in report)
    z.backward()
    assert CALLS["forward"] == first  # the second backward ran no forward task
    np.testing.assert_allclose(x.grad.numpy(), 2 * 2 * np.arange(8.0) * np.exp(np.arange(8.0) ** 2 / 100) / 100)
    settle(client, x.array.npartitions + 1)
    assert len(memory_keys(client)) == x.array.npartitions + 1  # only x.grad's chunks and z's value remain
    with pytest.raises(RuntimeError, match="second time"):
        z.backward()


def test_release_graph_frees_a_retained_graph(client):
    x = dg.from_array(np.arange(8.0), chunks=2, requires_grad=True)
    z = (dg.exp(x) * x).sum()
    z.backward(retain_graph=True)
    assert len(memory_keys(client)) > 4
    assert dg.release_graph(z) > 0
    assert len(settle(client, 5)) == 5  # x.grad's chunks and z's value
    with pytest.raises(RuntimeError, match="second time"):
        z.backward()


def test_values_forced_while_building_are_not_recomputed_by_backward(client):
    CALLS.clear()
    x = dg.from_array(np.array([0.5, -1.2, 0.3, 2.0]), chunks=1, requires_grad=True)
    y = dg.map_blocks(counted_square, x, vjp=counted_square_vjp)
    y = dg.exp(y)
    while float(y.sum()) < 100:
        y = y * 2
    forced = CALLS["forward"]
    y.backward(dg.ones(4, dtype="float64", chunks=1))
    assert CALLS["forward"] == forced
    settle(client, 4)


def test_comparisons_forced_by_while_persist_what_backward_needs(client):
    CALLS.clear()
    x = dg.from_array(np.array([0.5, -1.2, 0.3, 2.0]), chunks=1, requires_grad=True)
    y = dg.map_blocks(counted_square, x, vjp=counted_square_vjp)
    doublings = 0
    while y.norm() < 1000:  # the tutorial's loop: each test computes the norm, hence y
        y = y * 2
        doublings += 1
    forced = CALLS["forward"]
    y.backward(dg.ones(4, dtype="float64", chunks=1))
    assert CALLS["forward"] == forced
    np.testing.assert_allclose(x.grad.numpy(), 2 ** doublings * 2 * x.detach().numpy())


def test_backward_is_one_submission_and_gradients_equal_local(client, submissions):
    from distributed import get_task_stream

    rng = np.random.default_rng(1)
    a = dg.from_array(rng.standard_normal((6, 4)), chunks=(3, 2), requires_grad=True)
    b = dg.from_array(rng.standard_normal((4, 3)), chunks=(2, 3), requires_grad=True)
    with get_task_stream(client) as ts:
        dg.log_softmax(a @ b, axis=1).sum().backward()
    assert dict(submissions) == {"backward": 1}
    from dask.utils import key_split

    # (by prefix: a gradient fusion made the tasks of is a key of its own, its name with a token)
    names = Counter(key_split(t["key"]) for t in ts.data)
    assert any(n.endswith("-vjp") for n in names), names
    ga, gb = a.grad.numpy(), b.grad.numpy()
    import dask

    with dask.config.set(scheduler="sync"):
        from distributed.client import _set_global_client  # noqa: F401  (the local scheduler check below)
        a2 = dg.from_array(a.detach().numpy(), chunks=(3, 2), requires_grad=True)
        b2 = dg.from_array(b.detach().numpy(), chunks=(2, 3), requires_grad=True)
        (g1, g2) = dg.grad(dg.log_softmax(a2 @ b2, axis=1).sum(), [a2, b2], lazy=True)
        np.testing.assert_allclose(ga, g1.array.compute(scheduler="sync"), rtol=1e-7)
        np.testing.assert_allclose(gb, g2.array.compute(scheduler="sync"), rtol=1e-7)


def test_readme_while_loop_twice_on_a_client_logs_no_run_spec_warning(client):
    from conftest import run_spec_warnings

    before = run_spec_warnings(client)
    for _ in range(2):
        x = dg.tensor([0.5, -1.2, 0.3], requires_grad=True)
        y = x * 2
        while y.norm() < 1000:
            y = y * 2
        y.backward(dg.tensor([0.1, 1.0, 0.0001]))
        np.testing.assert_allclose(x.grad.numpy(), [102.4, 1024.0, 0.1024], rtol=1e-6)
    assert run_spec_warnings(client) == before
