"""daskgrad.use_deterministic_algorithms(True): a run's numbers do not depend on where its tasks ran
or on thread counts.  Real `dask scheduler` / `dask worker` processes on 127.0.0.1 (where chunks
travel between processes and arrive at any byte offset), repeated runs: the same bits every time,
and the bits of dask's local scheduler."""
import hashlib
import re

import numpy as np
import pytest

import daskgrad as dg
from daskgrad import nn, optim

from test_cluster_processes import Processes


@pytest.fixture(autouse=True)
def _mode_off_after():
    yield
    dg.use_deterministic_algorithms(False)


def bits(*arrays):
    return hashlib.sha1(b"".join(np.ascontiguousarray(a).tobytes() for a in arrays)).hexdigest()


def gradient():
    """The 16-chunk gradient X.T @ (X @ w) of 0.5 |X w|^2 (issue 32: 12 runs, 12 bit patterns)."""
    rng = np.random.default_rng(0)
    X = dg.from_array(rng.standard_normal((16 * 500, 32)), chunks=(500, 32))
    w = dg.from_array(rng.standard_normal(32), chunks=32, requires_grad=True)
    (0.5 * ((X @ w) ** 2).sum()).backward()
    return bits(w.grad.numpy())


def adam_steps(steps=2):
    dg.manual_seed(0)
    rng = np.random.default_rng(1)
    X = dg.from_array(rng.standard_normal((800, 16)), chunks=(100, 16))
    y = dg.from_array(rng.standard_normal((800, 1)), chunks=(100, 1))
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1)).double()
    opt = optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(steps):
        opt.zero_grad()
        nn.MSELoss()(model(X), y).backward()
        opt.step()
    return bits(*[p.detach().numpy() for p in model.parameters()])


def test_the_switch_has_torch_s_names_defaults_and_errors():
    torch = pytest.importorskip("torch")
    assert dg.are_deterministic_algorithms_enabled() is torch.are_deterministic_algorithms_enabled() is False
    for lib in (torch, dg):
        lib.use_deterministic_algorithms(True, warn_only=True)
    assert dg.are_deterministic_algorithms_enabled() and dg.is_deterministic_algorithms_warn_only_enabled()
    for lib in (torch, dg):
        lib.use_deterministic_algorithms(False)
    assert not dg.are_deterministic_algorithms_enabled() and not dg.is_deterministic_algorithms_warn_only_enabled()
    for args, kwargs in [((1,), {}), (("yes",), {}), ((True,), {"warn_only": 1})]:
        with pytest.raises(TypeError) as want:
            torch.use_deterministic_algorithms(*args, **kwargs)
        with pytest.raises(TypeError, match="^" + re.escape(str(want.value)) + "$"):
            dg.use_deterministic_algorithms(*args, **kwargs)
    torch.use_deterministic_algorithms(False)


@pytest.mark.cluster
@pytest.mark.timeout(400)
def test_repeated_runs_on_three_worker_processes_give_the_local_scheduler_s_bits_every_time():
    dg.use_deterministic_algorithms(True)
    local = gradient(), adam_steps()  # dask's synchronous scheduler, here: no chunk travels
    procs = Processes([["--nthreads", "2"]] * 3)
    try:
        client = procs.client()
        runs = [(gradient(), adam_steps()) for _ in range(3)]
        assert runs == [local] * 3
        client.close()
    finally:
        procs.close()


def test_threads_of_an_in_process_cluster_and_the_threaded_scheduler_give_the_same_bits():
    import dask
    from distributed import Client, LocalCluster

    dg.use_deterministic_algorithms(True)
    local = gradient()
    with dask.config.set(scheduler="threads"):
        assert gradient() == local
    with LocalCluster(n_workers=2, threads_per_worker=2, processes=False, dashboard_address=None) as cluster, \
            Client(cluster):
        assert [gradient() for _ in range(2)] == [local] * 2


def test_without_threadpoolctl_turning_the_mode_on_says_what_to_install(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "threadpoolctl" else real(name, *a))
    with pytest.raises(ImportError, match=re.escape("pip install 'daskgrad[deterministic]'")):
        dg.use_deterministic_algorithms(True)
    assert not dg.are_deterministic_algorithms_enabled()
    dg.use_deterministic_algorithms(False)  # (turning it off needs nothing)
