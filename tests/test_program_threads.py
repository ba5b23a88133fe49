"""Threads submitting at once: on dask's local schedulers, a Lazy value one thread's submission
computes (and holds) while another makes a program that reads it; on a cluster, threads storing
equal values (the same graph names) at once."""
import threading

import dask
import numpy as np
import pytest

import daskgrad as dg
from daskgrad import _dask as door


def _train(X, labels, i, out):
    w = dg.ones(4, dtype=dg.float64, requires_grad=True)
    for k in range(8):
        y, rows = labels[(i + k) % len(labels)], slice(100 * (k % 4), 100 * (k % 4) + 100)
        loss = ((X[rows] @ w - y[rows]) ** 2).mean()
        loss.backward()
        out.append(loss.item())
        w.grad = None


def _dataset(lazy):
    dg.manual_seed(0)
    X = dg.randn(400, 4, chunks=(100, 4), dtype=dg.float64)
    if not lazy:
        X = dg.from_array(X.numpy(), chunks=(100, 4))
    return X, [dg.sin(X.sum(1) * (j + 1)) for j in range(4)]


def _six_threads(X, labels):
    outs, errors = [[] for _ in range(6)], []

    def train(i):
        try:
            _train(X, labels, i, outs[i])
        except Exception as e:  # (a thread's error would only be printed)
            errors.append(e)

    threads = [threading.Thread(target=train, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return outs


def _one_thread(lazy):
    with dask.config.set({"daskgrad.hold-sources": 0}):
        X, labels = _dataset(lazy)
        outs = [[] for _ in range(6)]
        for i in range(6):
            _train(X, labels, i, outs[i])
    return outs


@pytest.mark.parametrize("lazy", [True, False], ids=["lazy", "in-memory"])
def test_threads_training_on_one_dataset_get_the_numbers_of_one_thread(lazy):
    """A Lazy value computed by one thread's submission (held, Lazy.becomes) while another thread
    makes a program reading it: the other waits (``_dask.building``), and lowers what it keyed.
    Before, it lowered a program half changed: KeyErrors, and losses of another program."""
    assert _six_threads(*_dataset(lazy)) == _one_thread(lazy)


def test_a_lazy_value_computed_meanwhile_waits_for_a_program_being_made():
    node = (dg.ones(3, dtype=dg.float64) * 2)._storage.value
    done = threading.Event()
    with door.building:
        t = threading.Thread(target=lambda: (node.becomes(dg.ones(3, dtype=dg.float64).array), done.set()))
        t.start()
        assert not done.wait(0.2)  # (it waits for the lock: the program being made sees it unchanged)
        assert node.computed is None
    t.join()
    assert node.computed is not None


@pytest.fixture(scope="module")
def cluster_client():
    """A LocalCluster as the ``client`` fixture's, without its check of the scheduler's log: threads
    computing one value at once may send its key with two tasks (computed from its source by one
    submission, read from memory by another that started after the value was computed), which the
    scheduler logs as a "different run_spec".  The value is the same; the scheduler keeps the task
    it has.  (Program keys on a cluster of their own for a program seen once: not done.)"""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as c:
        yield c


@pytest.mark.parametrize("lazy", [True, False], ids=["lazy", "in-memory"])
def test_threads_storing_equal_values_on_a_cluster_keep_their_own(cluster_client, lazy):
    """Six threads whose programs compute equal values (the same graph names: equal parameters,
    equal minibatches) store them on the cluster at once.  Each store files its values under a name
    of its own: with one name per graph, a thread letting go of its loss released the keys another
    thread was filing, about one run in five (a LostTensorError, "forgotten"; a KeyError before).
    (Within 1e-12 of one thread's numbers: a chunk copied to a worker misaligned sums in another order.)"""
    ref = _one_thread(lazy)
    for _ in range(3):
        outs = _six_threads(*_dataset(lazy))
        for got, want in zip(outs, ref):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
