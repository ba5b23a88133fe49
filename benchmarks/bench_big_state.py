"""Checkpointed time stepping (``checkpoint_steps``) of a state larger than one worker's memory limit,
chunked across the workers of a LocalCluster.

A 2-D wave equation ``u_next = 2 u - u_prev + c^2 lap(u)`` (the 5-point Laplacian is
``dg.correlate``, across chunk boundaries) on an ``n x n`` grid cut into ``bands`` row bands, several
per worker; the state ``(u_prev, u)`` is generated lazily on the workers (never on the client), the
velocity ``c`` is a leaf requiring grad, and the loss is ``sum(u_final ** 2)``.  ``estimate_memory``
of the same loss without checkpointing says it would not fit the workers' limits; through
``checkpoint_steps`` the backward runs to completion.

The default (float64 7,200 x 7,200: a state of 829 MB on workers of 800 MB) cuts the fields into 32
bands, not one per worker: the largest fused task of a step's reversal holds about 9 band chunks at
once (its inputs and the values it makes inside), 933 MB with 4 bands of 104 MB, more than a worker's
limit whatever dask holds besides; with 8 bands workers were still restarted by their nannies, with
16 the busiest reached 93% of its limit, with 32 it peaks near 83%.

Each worker samples, in a background thread, its process memory (RSS, as benchmarks/out_of_core.py)
and the bytes of results it holds (distributed's managed memory, what ``estimate_memory`` predicts),
in memory and spilled to disk, and what it holds at its peak by task prefix.  The prediction of the
issue, ``snapshots x one state chunk + a constant`` (a state chunk: a worker's share of the state),
is reported next to it.  Every chunk of every state a step makes goes through a counting kernel, so
the recompute factor counts steps run on the workers, next to Revolve's ``t(steps, snapshots) + 1``.
``source=True`` adds a dense per-step source term ``wavelet[i] * src`` (a field that depends on no
state) to check whether dask runs those early.  A worker restarted by its nanny is reported
(``restarted``).

Used by the benchmark suite (benchmarks/run_all.py, component ``big_state``).
Usage: python benchmarks/bench_big_state.py [n] [steps] [snapshots] [memory_limit_MB] [n_workers] [source] [bands]
       [dtype]
"""
from __future__ import annotations

import json
import sys
import threading
import time

import numpy as np

LAP = np.array([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]])


def _count(block):
    from distributed import get_worker

    w = get_worker()
    w._daskgrad_steps = getattr(w, "_daskgrad_steps", 0) + 1
    return block


def _vjp(g, block):
    return g


def _start_sampler(interval=0.005, dask_worker=None):
    """On a worker: a daemon thread recording peak RSS, peak managed bytes (in memory and spilled) and
    peak bytes in memory only, every ``interval`` s."""
    import psutil

    proc = psutil.Process()
    state = {"rss": proc.memory_info().rss, "managed": 0, "in_memory": 0, "spilled": 0, "stop": False,
             "held_at_peak": {}}

    def spilled():
        total = getattr(dask_worker.data, "spilled_total", None)
        return total.memory if total is not None else 0

    def loop():
        while not state["stop"]:
            held, out = dask_worker.state.nbytes, spilled()
            state["rss"] = max(state["rss"], proc.memory_info().rss)
            if held > state["managed"]:
                state["managed"], state["held_at_peak"] = held, _held(dask_worker)
            state["in_memory"] = max(state["in_memory"], held - out)
            state["spilled"] = max(state["spilled"], out)
            time.sleep(interval)

    dask_worker._daskgrad_steps = 0
    threading.Thread(target=loop, daemon=True, name="daskgrad-big-state-sampler").start()
    dask_worker._daskgrad_big = state
    return state["rss"]


def _held(dask_worker):
    """What a worker holds, MB by task prefix (``key_split``): which values make up its peak."""
    from dask.utils import key_split

    out = {}
    for key, ts in list(dask_worker.state.tasks.items()):
        if ts.state == "memory" and ts.nbytes:
            out[key_split(key)] = out.get(key_split(key), 0) + ts.nbytes / 1e6
    return {k: round(v, 1) for k, v in sorted(out.items(), key=lambda kv: -kv[1])}


def _identity(dask_worker=None):
    import os

    return dask_worker.name, os.getpid()


def _stop_sampler(dask_worker=None):
    state = dask_worker._daskgrad_big
    state["stop"] = True
    return {"peak_rss": state["rss"], "peak_managed": state["managed"], "peak_in_memory": state["in_memory"],
            "peak_spilled": state["spilled"], "chunk_steps": dask_worker._daskgrad_steps,
            "held_at_peak_MB": state["held_at_peak"],
            "memory_limit": dask_worker.memory_manager.memory_limit}


def _warm():
    import dask.array  # noqa: F401

    import daskgrad  # noqa: F401


def problem(n, steps, snapshots, nchunks, checkpointed=True, source=False, seed=0, dtype="float32"):
    """(loss, c): the wave equation's loss, built lazily, its fields in ``nchunks`` row bands;
    ``snapshots=None`` or ``checkpointed=False``: the plain loop."""
    import daskgrad as dg
    from daskgrad.utils.checkpoint import checkpoint_steps

    dg.manual_seed(seed)
    rows = -(-n // nchunks)
    dtype = np.dtype(dtype)
    u0 = dg.randn(n, n, chunks=(rows, n), dtype=dtype)
    c = (0.3 + 0.1 * dg.rand(n, n, chunks=(rows, n), dtype=dtype)).requires_grad_()
    wavelet = np.sin(np.arange(steps) * 0.3)
    src = dg.exp(-dg.rand(n, n, chunks=(rows, n), dtype=dtype)) if source else None

    def step(state, i):
        prev, u = state
        new = 2 * u - prev + c * c * dg.correlate(u, LAP, mode="constant")
        if source:
            new = new + float(wavelet[i]) * src
        return u, dg.map_blocks(_count, new, vjp=_vjp, name="step-count")

    state = (u0 * 1.0, u0)
    if checkpointed:
        out = checkpoint_steps(step, state, steps, snapshots=snapshots)
    else:
        out = state
        for i in range(steps):
            out = step(out, i)
    return (out[1] ** 2).sum(), c


def run(n=7200, steps=8, snapshots=3, memory_limit=800e6, n_workers=4, source=False, bands=32, dtype="float64"):
    import daskgrad as dg
    from daskgrad.utils.revolve import repetitions
    from distributed import Client, LocalCluster

    bands = bands or n_workers
    field = n * n * np.dtype(dtype).itemsize
    state_bytes = 2 * field
    kw = dict(source=source, dtype=dtype)
    with LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, memory_limit=int(memory_limit),
                      dashboard_address=None, worker_dashboard_address=None) as cluster, Client(cluster) as client:
        client.run(_warm)
        before = client.run(_identity)
        plain = dg.estimate_memory(problem(n, steps, snapshots, bands, checkpointed=False, **kw)[0])
        t0 = time.perf_counter()
        loss, c = problem(n, steps, snapshots, bands, **kw)
        predicted = dg.estimate_memory(loss, report=True)
        t1 = time.perf_counter()
        baseline = client.run(_start_sampler)
        loss.backward()
        grad = c.grad.numpy()
        t2 = time.perf_counter()
        workers = client.run(_stop_sampler)
        after = client.run(_identity)
        events = [str(e) for topic in ("all", "scheduler") for _, e in client.get_events(topic)
                  if "restart" in str(e).lower()]
    chunk = state_bytes / n_workers
    t = repetitions(steps, snapshots)
    executed = sum(w["chunk_steps"] for w in workers.values()) / bands
    peak = max(workers.values(), key=lambda w: w["peak_managed"])
    return {
        "problem": f"2-D wave equation {n}x{n} {dtype}, state (u_prev, u) in {bands} row bands, {steps} steps, "
                   f"{snapshots} snapshots, {n_workers} worker processes x 1 thread"
                   + (", dense per-step source term" if source else ""),
        "n": n, "steps": steps, "snapshots": snapshots, "n_workers": n_workers, "bands": bands, "dtype": dtype,
        "source": source, "state_bytes": state_bytes, "state_chunk_bytes_per_worker": chunk,
        "band_chunk_bytes": field / bands, "memory_limit": int(memory_limit),
        "state_over_worker_limit": state_bytes / memory_limit,
        "uncheckpointed_estimate": int(plain),
        "uncheckpointed_over_cluster_limit": int(plain) / (memory_limit * n_workers),
        "checkpointed_estimate": int(predicted.peak),
        "checkpointed_estimate_per_worker": int(predicted.peak) / n_workers,
        "snapshots_times_state_chunk": snapshots * chunk,
        "peak_managed_per_worker": peak["peak_managed"], "peak_managed_in_state_chunks": peak["peak_managed"] / chunk,
        "estimate_per_worker_over_peak_managed": int(predicted.peak) / n_workers / peak["peak_managed"],
        "peak_in_memory_per_worker": max(w["peak_in_memory"] for w in workers.values()),
        "peak_spilled_per_worker": max(w["peak_spilled"] for w in workers.values()),
        "peak_rss_per_worker": max(w["peak_rss"] for w in workers.values()),
        "baseline_rss_per_worker": max(baseline.values()),
        "restarted": before != after or bool(events), "restart_events": events,
        "workers": list(workers.values()),
        "step_evaluations_on_workers": executed, "revolve_t_plus_last_step": t + 1,
        "recompute_factor": executed / steps, "revolve_factor": (t + 1) / steps,
        "build_and_estimate_s": t1 - t0, "backward_s": t2 - t1,
        "grad_norm": float(np.sqrt((grad.astype(np.float64) ** 2).sum())), "grad_finite": bool(np.isfinite(grad).all()),
    }


if __name__ == "__main__":
    keys = ["n", "steps", "snapshots", "memory_limit", "n_workers", "source", "bands", "dtype"]
    conv = {"memory_limit": lambda a: float(a) * 1e6, "source": lambda a: a not in ("0", "", "False"), "dtype": str}
    kw = {k: conv.get(k, int)(a) for k, a in zip(keys, sys.argv[1:])}
    print(json.dumps(run(**kw), indent=1))
