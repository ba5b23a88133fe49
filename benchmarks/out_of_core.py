"""Backward over data larger than the cluster's memory: logistic regression on lazily generated data.

``X = dg.randn(n, d, chunks=...)`` and ``y = dg.rand(n, ...)`` are never held whole: each chunk is
generated, used by the forward ``X @ w`` and by its VJP ``X.T @ g``, and dropped.  The gradient of
``binary_cross_entropy_with_logits(X @ w, y)`` is computed on a LocalCluster of worker processes
whose total memory limit is a third of the data; each worker samples its own process memory (RSS)
in a background thread while it runs, next to distributed's own monitor.

Used by tests/test_out_of_core.py and by the benchmark suite (benchmarks/run_all.py).
Usage: python benchmarks/out_of_core.py [n] [d] [nchunks] [memory_limit_MB]
"""
from __future__ import annotations

import json
import sys
import time

import numpy as np


def _start_sampler(interval=0.005, dask_worker=None):
    """On a worker: a daemon thread recording the process's peak RSS every ``interval`` seconds."""
    import threading

    import psutil

    proc = psutil.Process()
    state = {"peak": proc.memory_info().rss, "stop": False, "samples": 0}

    def loop():
        while not state["stop"]:
            state["peak"] = max(state["peak"], proc.memory_info().rss)
            state["samples"] += 1
            time.sleep(interval)

    threading.Thread(target=loop, daemon=True, name="daskgrad-rss-sampler").start()
    dask_worker._daskgrad_rss = state
    return state["peak"]


def _stop_sampler(dask_worker=None):
    state = dask_worker._daskgrad_rss
    state["stop"] = True
    monitor_peak = max(dask_worker.monitor.quantities["memory"], default=0)
    return {"peak_rss": state["peak"], "samples": state["samples"], "monitor_peak": monitor_peak,
            "memory_limit": dask_worker.memory_manager.memory_limit}


def _warm():
    import dask.array  # noqa: F401

    import daskgrad  # noqa: F401


def _identity(dask_worker=None):
    import os

    return dask_worker.name, os.getpid()


def problem(n, d, nchunks, seed=0):
    """The loss's inputs, all lazy: X (n x d float32 standard normal), targets in [0, 1), w."""
    import daskgrad as dg

    dg.manual_seed(seed)
    rows = -(-n // nchunks)
    X = dg.randn(n, d, chunks=(rows, d))
    y = dg.rand(n, chunks=rows)
    w = dg.from_array(np.linspace(-0.5, 0.5, d, dtype=np.float32), chunks=-1, requires_grad=True)
    return X, y, w


def loss_of(X, y, w):
    import daskgrad as dg

    return dg.binary_cross_entropy_with_logits(X @ w, y)


def numpy_gradient(X, y, w):
    """The same gradient, chunk by chunk in NumPy (float64 accumulation), on the sync scheduler."""
    import dask

    wn = w.detach().numpy().astype(np.float64)
    total = np.zeros_like(wn)
    n = X.shape[0]
    with dask.config.set(scheduler="sync"):
        for i in range(X.array.numblocks[0]):
            Xi = X.array.blocks[i].compute().astype(np.float64)
            yi = y.array.blocks[i].compute().astype(np.float64)
            total += Xi.T @ (1 / (1 + np.exp(-(Xi @ wn))) - yi)
    return total / n


def run(n=22_500_000, d=20, nchunks=150, memory_limit=300e6, n_workers=2, check=True):
    """Runs ``loss.backward()`` on a fresh LocalCluster; returns a dict of what was measured."""
    import daskgrad as dg
    from distributed import Client, LocalCluster

    data_bytes = n * d * 4
    with LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, memory_limit=int(memory_limit),
                      dashboard_address=None, worker_dashboard_address=None) as cluster, Client(cluster) as client:
        client.run(_warm)  # the baseline includes the modules tasks import
        before = client.run(_identity)
        baseline = client.run(_start_sampler)
        X, y, w = problem(n, d, nchunks)
        predicted = dg.estimate_memory(loss_of(X, y, w)) if hasattr(dg, "estimate_memory") else None
        t0 = time.perf_counter()
        loss = loss_of(X, y, w)
        loss.backward()
        seconds = time.perf_counter() - t0
        workers = client.run(_stop_sampler)
        after = client.run(_identity)
        grad = w.grad.numpy()
        events = [e for topic in ("all", "scheduler") for _, e in client.get_events(topic)
                  if "restart" in str(e).lower()]
    report = {
        "problem": f"logistic-regression gradient, X {n}x{d} float32 generated lazily in {nchunks} chunks",
        "data_bytes": data_bytes,
        "cluster_memory_limit": int(memory_limit) * n_workers,
        "data_over_limit": data_bytes / (int(memory_limit) * n_workers),
        "seconds": seconds,
        "baseline_rss": baseline,
        "workers": workers,
        "peak_rss": max(v["peak_rss"] for v in workers.values()),
        "peak_over_limit": max(v["peak_rss"] / v["memory_limit"] for v in workers.values()),
        "restarted": before != after or bool(events),
        "restart_events": [str(e) for e in events],
        "predicted_peak_bytes": int(predicted) if predicted is not None else None,
    }
    if check:
        report["max_abs_error"] = float(np.max(np.abs(grad - numpy_gradient(X, y, w))))
    report["grad"] = grad.tolist()
    return report


if __name__ == "__main__":
    args = [float(a) for a in sys.argv[1:]]
    kw = dict(zip(["n", "d", "nchunks"], (int(a) for a in args[:3])))
    if len(args) > 3:
        kw["memory_limit"] = args[3] * 1e6
    out = run(**kw)
    out.pop("grad")
    print(json.dumps(out, indent=2, default=str))
