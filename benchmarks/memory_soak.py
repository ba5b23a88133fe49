"""Memory growth of a long training loop on a cluster: does anything grow by a step every step?

The README's plain loop (``loss.backward(); w -= lr * w.grad`` under ``no_grad``) on small data
(4000 x 5 in 4 chunks), 2,000 steps, on a cluster whose scheduler, workers and client are separate
processes (distributed's ``SubprocessCluster``: in a LocalCluster the scheduler shares the client's
process, and their memory could not be told apart).  Every 200 steps it records the resident memory
(RSS) of the scheduler, of each worker and of the client, the scheduler's task count and the span
objects of distributed's spans extension; the slopes (bytes per step) are fitted over the second half.

Run twice: as is, and with daskgrad's per-submission ``span("daskgrad", phase)`` replaced by a null
context (``distributed.span`` patched: daskgrad imports it at each submission), to tell distributed's
span bookkeeping from daskgrad's own.  The protection (two copies of every kept value) is on, as
users get it.

Used by the benchmark suite (benchmarks/run_all.py, component ``memory_soak``).
Usage: python benchmarks/memory_soak.py [steps]    (BENCH_QUICK=1: 100 steps, in-process cluster;
       SOAK_JSON=path writes the whole record there)
"""
from __future__ import annotations

import contextlib
import json
import sys
import time

import numpy as np


def _scheduler_counts(dask_scheduler=None):
    import psutil

    ext = dask_scheduler.extensions.get("spans")
    keeper = dask_scheduler.plugins.get("daskgrad-keeper")
    return {"rss": psutil.Process().memory_info().rss, "tasks": len(dask_scheduler.tasks),
            "spans": len(getattr(ext, "spans", {})), "root_spans": len(getattr(ext, "root_spans", [])),
            "task_groups": len(dask_scheduler.task_groups), "task_prefixes": len(dask_scheduler.task_prefixes),
            "kept_keys": len(keeper.kept) if keeper is not None else None,
            # distributed's bounded logs (deques), suspects for growth that is not the task count
            "transition_log": len(getattr(dask_scheduler, "transition_log", ())),
            "events": sum(len(v) for v in getattr(dask_scheduler, "_events", {}).values()),
            "computations": len(getattr(dask_scheduler, "computations", ()))}


def _worker_rss():
    import psutil

    return psutil.Process().memory_info().rss


def _worker_logs(dask_worker=None):
    state = dask_worker.state
    return {"log": len(state.log), "stimulus_log": len(state.stimulus_log),
            "transfer_incoming_log": len(getattr(state, "transfer_incoming_log", ())),
            "transfer_outgoing_log": len(getattr(dask_worker, "transfer_outgoing_log", ()))}


@contextlib.contextmanager
def _no_daskgrad_span():
    """``distributed.span`` as a null context while the block runs (daskgrad.runtime imports it
    from ``distributed`` at each submission, so patching the package attribute reaches it)."""
    import distributed

    real = distributed.span
    distributed.span = lambda *args, **kwargs: contextlib.nullcontext()
    try:
        yield
    finally:
        distributed.span = real


def _slope(xs, ys):
    return float(np.polyfit(np.asarray(xs, float), np.asarray(ys, float), 1)[0]) if len(xs) >= 2 else float("nan")


def run(steps=2000, every=200, n=4000, d=5, nchunks=4, lr=0.05, spans=True, n_workers=2, processes=True):
    """The loop on a fresh cluster; samples every ``every`` steps; slopes over the second half."""
    import psutil
    from distributed import Client, LocalCluster

    import daskgrad as dg

    t_start = time.perf_counter()
    if processes:
        from distributed.deploy.subprocess import SubprocessCluster

        cluster = SubprocessCluster(n_workers=n_workers, threads_per_worker=1, dashboard_address=None)
    else:  # quick mode: in-process (scheduler, workers and client share one process)
        cluster = LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=False,
                               dashboard_address="127.0.0.1:0", worker_dashboard_address=None)
    client = Client(cluster)
    client.wait_for_workers(n_workers)
    startup = time.perf_counter() - t_start
    me = psutil.Process()
    rng = np.random.default_rng(0)
    Xn = rng.standard_normal((n, d)).astype(np.float32)
    yn = (Xn @ np.linspace(-1, 1, d, dtype=np.float32)).astype(np.float32)
    X, y = dg.from_array(Xn, chunks=(n // nchunks, d)), dg.from_array(yn, chunks=n // nchunks)
    w = dg.zeros(d, requires_grad=True)
    samples = []

    def sample(step):
        time.sleep(0.1)  # releases reach the scheduler asynchronously
        s = client.run_on_scheduler(_scheduler_counts)
        workers = client.run(_worker_rss)
        s["worker_logs"] = client.run(_worker_logs)
        samples.append({"step": step, "elapsed_s": time.perf_counter() - t0, "scheduler_rss": s.pop("rss"),
                        "worker_rss": dict(sorted(workers.items())), "worker_rss_sum": sum(workers.values()),
                        "client_rss": me.memory_info().rss, "client_futures": len(client.futures), **s})

    ctx = contextlib.nullcontext() if spans else _no_daskgrad_span()
    step_times = []
    with ctx:
        t0 = time.perf_counter()
        sample(0)
        for i in range(steps):
            ts = time.perf_counter()
            loss = ((X @ w - y) ** 2).mean()
            loss.backward()
            with dg.no_grad():
                w -= lr * w.grad
            w.grad = None
            step_times.append(time.perf_counter() - ts)
            if (i + 1) % every == 0 or i + 1 == steps:
                sample(i + 1)
        final_loss = loss.item()
    loop_s = time.perf_counter() - t0
    client.close()
    cluster.close()
    half = [s for s in samples if s["step"] >= steps / 2]
    xs = [s["step"] for s in half]
    slopes = {k: _slope(xs, [s[k] for s in half])
              for k in ("scheduler_rss", "worker_rss_sum", "client_rss", "tasks", "spans", "task_groups")}
    per_worker = {}
    for addr in samples[-1]["worker_rss"]:
        per_worker[addr] = _slope(xs, [s["worker_rss"].get(addr, np.nan) for s in half])
    slopes["worker_rss_max_single"] = max(per_worker.values(), default=float("nan"))
    return {"daskgrad_span": spans, "steps": steps, "every": every, "problem_size": [n, d, nchunks],
            "cluster": (f"SubprocessCluster: scheduler and {n_workers} worker processes (1 thread each), client "
                        "in this process" if processes else f"in-process LocalCluster, {n_workers} workers"),
            "startup_s": startup, "loop_s": loop_s, "median_step_s": float(np.median(step_times)),
            "first_100_median_step_s": float(np.median(step_times[:100])),
            "last_100_median_step_s": float(np.median(step_times[-100:])),
            "final_loss": final_loss, "slopes_per_step_second_half": slopes,
            "slopes_kB_per_step": {k: v / 1e3 for k, v in slopes.items() if k.endswith("rss") or "rss_" in k},
            "samples": samples}


def soak(quick=False):
    """Both variants (daskgrad's span on, then off), each on a fresh cluster."""
    kw = dict(steps=100, every=20, processes=False) if quick else {}
    out = {"problem": "plain loop ((X @ w - y) ** 2).mean(); backward; w -= lr * w.grad, X 4000x5 float32 in 4 "
                      f"chunks, {kw.get('steps', 2000)} steps, copies=2; RSS and scheduler counts every "
                      f"{kw.get('every', 200)} steps, slopes over the second half"}
    for spans in (True, False):
        out["with_daskgrad_span" if spans else "without_daskgrad_span"] = run(spans=spans, **kw)
    return out


if __name__ == "__main__":
    import os

    quick = os.environ.get("BENCH_QUICK", "") not in ("", "0")
    if len(sys.argv) > 1:
        r = {"with_daskgrad_span": run(steps=int(sys.argv[1]), every=max(1, int(sys.argv[1]) // 10))}
    else:
        r = soak(quick)
    out = os.environ.get("SOAK_JSON")  # the whole record (samples included), when asked
    if out:
        with open(out, "w") as f:
            json.dump(r, f, indent=1, default=str)
    for k, v in r.items():
        if isinstance(v, dict):
            print(k, json.dumps({"loop_s": v["loop_s"], "slopes_kB_per_step": v["slopes_kB_per_step"],
                                 "last": {x: v["samples"][-1][x] for x in ("tasks", "spans", "kept_keys")}}))
