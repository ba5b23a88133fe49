"""Where a submission runs is dask's choice, as in dask's own ``compute``: on the current distributed
Client, unless dask's config names a local scheduler (``dask.config.set(scheduler="threads")``),
which wins over the client."""
import dask
import numpy as np
import pytest
from distributed import Client, LocalCluster

import daskgrad as dg


@pytest.fixture(scope="module")
def client():
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as c:
        yield c


def _tasks_on_the_scheduler(client):
    """Transitions of tasks the cluster's scheduler has made so far."""
    return client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.transition_counter)


def _gradient():
    w = dg.from_array(np.arange(6.0), chunks=2).requires_grad_()
    (w * w).sum().backward()
    return w.grad


@pytest.mark.parametrize("scheduler", ["threads", "sync", "processes"])
def test_a_local_scheduler_in_dask_s_config_wins_over_the_client(client, scheduler):
    x = dask.array.ones(4, chunks=2)
    before = _tasks_on_the_scheduler(client)
    with dask.config.set(scheduler=scheduler):
        assert x.sum().compute() == 4.0 and _tasks_on_the_scheduler(client) == before  # (dask's own choice)
        g = _gradient()
        np.testing.assert_array_equal(g.numpy(), 2 * np.arange(6.0))
    assert _tasks_on_the_scheduler(client) == before


def test_without_a_scheduler_in_the_config_the_client_runs_it(client):
    before = _tasks_on_the_scheduler(client)
    g = _gradient()
    assert _tasks_on_the_scheduler(client) > before
    np.testing.assert_array_equal(g.numpy(), 2 * np.arange(6.0))
