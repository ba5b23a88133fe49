"""L-BFGS-B with x on the cluster keeps the client's memory independent of the number of unknowns:
a bounded problem whose x0 and data are made on the workers, solved for 10,000 and 1,000,000
unknowns, allocates the same at its peak in the client process (tracemalloc), while gathering the
1,000,000 values would allocate 8 MB there."""
import gc
import tracemalloc

import pytest

import daskgrad as dg

so = pytest.importorskip("scipy.optimize", reason="scipy comes with the test extra: pip install 'daskgrad[test]'")
distributed = pytest.importorskip("distributed")


def bounded_least_squares(n):
    """min ||x - t||^2 over 0.5 <= x <= 2, t = linspace(0, 3): x0, t and the answer all on the workers."""
    x0 = dg.zeros(n, dtype="float64", chunks=n // 4)
    target = dg.linspace(0.0, 3.0, n, chunks=n // 4)
    res = dg.optimize.minimize(lambda x: ((x - target) ** 2).sum(), x0, bounds=so.Bounds(0.5, 2.0),
                               options={"on_cluster": True})
    return res, target


def client_peak(fn, *args):
    """The most bytes the client process allocated at once (Python's allocations) while ``fn`` ran."""
    gc.collect()
    tracemalloc.start()
    try:
        out = fn(*args)
        return tracemalloc.get_traced_memory()[1], out
    finally:
        tracemalloc.stop()


def test_cluster_lbfgsb_client_peak_is_the_same_for_ten_thousand_and_a_million_unknowns():
    from distributed.deploy.subprocess import SubprocessCluster

    # the scheduler in a process of its own, as on a real cluster (LocalCluster's runs in the client's
    # process, and its per-task bookkeeping would count as the client's), and two small workers
    with SubprocessCluster(n_workers=2, threads_per_worker=1, worker_kwargs={"memory_limit": "1GB"},
                           dashboard_address=None) as cluster, distributed.Client(cluster):
        bounded_least_squares(1000)  # imports, first-use caches
        small, (res_small, _) = client_peak(bounded_least_squares, 10_000)
        large, (res_large, target) = client_peak(bounded_least_squares, 1_000_000)
        assert res_small.success and res_large.success and res_small.nit == res_large.nit
        with dg.no_grad():  # the answer checked where it lives: one number comes back
            error = float(abs(res_large.x - dg.clip(target, 0.5, 2.0)).max())
        assert error < 1e-6
        assert abs(large - small) < 2 ** 20, (small, large)
        # what the measurement would see if x came to the client: its 8 MB
        gathered, _ = client_peak(lambda: dg.zeros(1_000_000, dtype="float64", chunks=250_000).numpy())
        assert gathered >= 8e6 > 2 * large
