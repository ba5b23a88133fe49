"""The PyTorch training loop, written as users write it (no persist()), stays flat.

Every submission materializes what user-held tensors need next (a parameter's value after
``w -= lr * w.grad``, the loss that backward just computed) and swaps it into their storage,
so a parameter's lineage never grows and no step recomputes an earlier one.
"""
from collections import Counter

import dask.array as da
import numpy as np
import pytest
from dask.callbacks import Callback
from dask.core import flatten

import daskgrad as dg

READS = Counter()


def counted_read(block):
    READS["chunks"] += 1
    return block


def data(n=400, d=5, chunks=100, seed=0):
    """Chunked data whose every chunk read is counted."""
    rng = np.random.default_rng(seed)
    X = dg.from_array(da.from_array(rng.standard_normal((n, d)), chunks=(chunks, d)).map_blocks(counted_read))
    y = dg.from_array(da.from_array(rng.standard_normal(n), chunks=chunks))
    return X, y


class TaskCounter(Callback):
    def __init__(self):
        super().__init__()
        self.tasks = 0

    def _pretask(self, key, dsk, state):
        self.tasks += 1


def test_plain_loop_1000_steps_keeps_graph_size_and_tasks_per_step_constant():
    X, y = data()
    w = dg.zeros(5, dtype="float64", requires_grad=True)
    graph_sizes, tasks = [], []
    for step in range(1000):
        counter = TaskCounter()
        with counter:
            loss = ((X @ w - y) ** 2).mean()
            loss.backward()
            with dg.no_grad():
                w -= 0.01 * w.grad
            w.grad = None
        graph_sizes.append(len(w.array.dask))
        tasks.append(counter.tasks)
    assert max(graph_sizes) <= 8  # the update on top of the stored value, never a lineage
    assert len(set(tasks[2:])) == 1, sorted(set(tasks))  # (step 2 computes X whole, read again: then held)
    # and it converged to the least-squares solution, as the same loop in numpy does
    Xn, yn = X.detach().numpy(), y.numpy()
    w_np = np.zeros(5)
    for _ in range(1000):
        w_np -= 0.01 * 2 * Xn.T @ (Xn @ w_np - yn) / len(yn)
    np.testing.assert_allclose(w.detach().numpy(), w_np, rtol=1e-10)


def test_loss_item_after_backward_reads_no_chunk_and_submits_nothing(submissions):
    X, y = data()
    w = dg.zeros(5, dtype="float64", requires_grad=True)
    loss = ((X @ w - y) ** 2).mean()
    READS.clear()
    loss.backward()
    assert READS["chunks"] == X.array.npartitions  # the forward ran once, inside backward
    before = sum(submissions.values())
    value = loss.detach().item()
    assert READS["chunks"] == X.array.npartitions  # item() read no chunk again
    assert sum(submissions.values()) == before
    assert value == pytest.approx(float(np.mean(y.numpy() ** 2)))


def test_each_training_step_with_logging_is_one_submission(submissions):
    X, y = data()
    w = dg.zeros(5, dtype="float64", requires_grad=True)
    b = dg.zeros(1, dtype="float64", requires_grad=True)
    losses = []
    for step in range(5):
        submissions.clear()
        loss = ((X @ w + b - y) ** 2).mean()
        loss.backward()
        with dg.no_grad():
            for p in (w, b):
                p -= 0.1 * p.grad
                p.grad = None
        losses.append(loss.item())
        assert sum(submissions.values()) == 1, dict(submissions)
    assert losses == sorted(losses, reverse=True)


def test_value_computed_once_is_not_computed_again():
    X, _ = data()
    s = (X * 2).sum()
    READS.clear()
    first = s.item()
    assert s.item() == first and float(s) == first
    assert READS["chunks"] == X.array.npartitions


def test_updated_leaf_nobody_reads_is_still_materialized_by_the_next_submission():
    state = dg.zeros(3, dtype="float64")  # e.g. a momentum buffer the loss does not read
    x = dg.ones(3, dtype="float64", requires_grad=True)
    for _ in range(50):
        with dg.no_grad():
            state *= 0.9
            state += 1
        (x * 2).sum().backward()
    assert len(state.array.dask) == 1  # computed by the last backward, not a 100-layer lineage
    np.testing.assert_allclose(state.numpy(), (1 - 0.9 ** 50) / (1 - 0.9))
    np.testing.assert_allclose(x.grad.numpy(), 100.0)


def test_importing_daskgrad_leaves_dask_config_alone():
    import subprocess
    import sys

    code = ("import dask; before = dask.config.get('optimization.fuse.active', 'unset'); import daskgrad; "
            "print(before == dask.config.get('optimization.fuse.active', 'unset'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


@pytest.mark.parametrize("make_optimizer", [
    lambda ps: dg.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3),
    lambda ps: dg.optim.Adam(ps, lr=0.01, amsgrad=True),
    lambda ps: dg.optim.AdamW(ps, lr=0.01),
    lambda ps: dg.optim.RMSprop(ps, lr=0.01, momentum=0.9, centered=True),
    lambda ps: dg.optim.Adagrad(ps, lr=0.1, lr_decay=1e-3),
], ids=["sgd-nesterov", "adam-amsgrad", "adamw", "rmsprop-centered-momentum", "adagrad"])
def test_nn_optim_training_step_with_logging_is_one_submission_and_stays_flat(make_optimizer, submissions):
    X, _ = data(d=5)
    labels = dg.from_array(da.from_array(np.arange(400) % 3, chunks=100))
    dg.manual_seed(0)
    model = dg.nn.Sequential(dg.nn.Linear(5, 8, dtype="float64"), dg.nn.Tanh(), dg.nn.Linear(8, 3, dtype="float64"))
    criterion = dg.nn.CrossEntropyLoss()
    optimizer = make_optimizer(model.parameters())
    sizes = []
    for step in range(60):
        submissions.clear()
        loss = criterion(model(X), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        loss.item()
        assert sum(submissions.values()) == 1, (step, dict(submissions))
        sizes.append(max(len(t.array.dask) for t in [*model.parameters(), *optimizer_state(optimizer)]))
    assert len(set(sizes[5:])) == 1, sizes  # parameters and optimizer state never grow a lineage


def optimizer_state(optimizer):
    return [v for state in optimizer.state.values() for v in state.values() if isinstance(v, dg.Tensor)]


# last: the module's client fixture stays up for the tests after it (daskgrad submits to it)
@pytest.mark.cluster
def test_plain_loop_on_a_client_keeps_scheduler_memory_flat(client):
    from tests.test_cluster_memory import managed_bytes, settle

    rng = np.random.default_rng(0)
    X = dg.from_array(rng.standard_normal((400, 5)), chunks=(100, 5))
    t = dg.from_array(rng.standard_normal(400), chunks=100)
    w = dg.from_array(np.zeros(5), chunks=5, requires_grad=True)
    counts, sizes, tasks = [], [], []
    for step in range(120):
        loss = dg.mse_loss(X @ w, t)
        loss.backward()
        with dg.no_grad():
            w -= 0.05 * w.grad
        w.grad = None
        if step % 20 == 19:
            # held now: w's stored value, the last gradient (the lazy update reads it), the loss
            counts.append(len(settle(client, 3)))
            sizes.append(managed_bytes(client))
            # every task the scheduler knows, released ones included: no lineage of earlier steps
            tasks.append(client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks)))
    assert counts == [3] * 6
    assert max(sizes) == min(sizes)
    assert len(set(tasks)) == 1, tasks
    loss.item()  # read from memory: still three keys
    del loss
    assert len(settle(client, 2)) == 2
    w.detach().numpy()  # the pending update is computed and replaces the old value and gradient
    assert len(settle(client, 1)) == 1


@pytest.mark.cluster
def test_optimizer_state_lives_in_cluster_memory_and_stays_flat(client):
    from tests.test_cluster_memory import memory_keys, settle

    rng = np.random.default_rng(0)
    X = dg.from_array(rng.standard_normal((400, 5)), chunks=(100, 5))
    t = dg.from_array(rng.standard_normal(400), chunks=100)
    model = dg.nn.Linear(5, 1, dtype="float64")
    optimizer = dg.optim.Adam(model.parameters(), lr=0.01)
    counts = []
    for step in range(60):
        loss = dg.nn.MSELoss()(model(X)[:, 0], t)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 20 == 19:
            # weight, bias, their .grad and both Adam moments, the loss (release is asynchronous)
            counts.append(len(settle(client, 9)))
    assert counts == [9, 9, 9]
    dg.nn.MSELoss()(model(X)[:, 0], t).backward()  # the next submission computes the last step()
    state = optimizer_state(optimizer)
    assert state and all(len(s.array.dask) == 1 for s in state)  # stored values, no lineage
    keys = set(memory_keys(client))
    assert all(str(k) in keys for s in state for k in flatten(s.array.__dask_keys__()))  # in cluster memory
