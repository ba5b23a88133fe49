import importlib.util
import pathlib
import sys

import dask
import distributed
import numpy as np
import pytest

import daskgrad as dg

# one-chunk, even, uneven and size-1 chunkings of a (6, 4) array and a length-10 vector
CHUNKINGS_2D = {"one": (6, 4), "even": (3, 2), "uneven": ((4, 2), (3, 1)), "size1": (1, 1)}
CHUNKINGS_1D = {"one": 10, "even": 5, "uneven": ((3, 3, 4),), "size1": 1}


@pytest.fixture(autouse=True)
def _sync_scheduler():
    """Small graphs run fastest on the synchronous scheduler, where no Client is set up: a test of a module
    whose cluster is up (a module-scoped Client) runs on it, as the user's program would, and a Client made
    inside a test sets dask's config to itself until it closes.  (A local scheduler in dask's config wins
    over a client, in dask's compute as in daskgrad's.)"""
    try:
        distributed.default_client()
    except ValueError:  # (none)
        pass
    else:
        yield
        return
    with dask.config.set(scheduler="sync"):
        yield


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def example(name):
    """``examples/<name>.py`` as a module, loaded once (registered under its name: dataclasses look
    their module up there)."""
    if name not in sys.modules:
        path = pathlib.Path(__file__).resolve().parents[1] / "examples" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def leaf(values, chunks, requires_grad=True):
    return dg.from_array(np.asarray(values, dtype=np.float64), chunks=chunks, requires_grad=requires_grad)


@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as c:
        yield c


def run_spec_warnings(client) -> int:
    """How many times the scheduler logged a key resubmitted with a different task."""
    return sum("Detected different `run_spec`" in msg for _, msg in client.get_scheduler_logs(n=10_000))


@pytest.fixture(autouse=True)
def _no_run_spec_warnings(request):
    """Cluster tests fail on the scheduler's "different run_spec" warning (a reused key name)."""
    if "client" not in request.fixturenames:
        yield
        return
    client = request.getfixturevalue("client")
    before = run_spec_warnings(client)
    yield
    assert run_spec_warnings(client) == before, "the scheduler logged 'Detected different `run_spec`'"


@pytest.fixture
def submissions():
    """Counts daskgrad's submissions by phase (every compute is one submission)."""
    with dg.testing.submissions() as count:
        yield count
