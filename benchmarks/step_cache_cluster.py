"""The step cache on a distributed client: a tiny-chunk logistic-regression step (the ``overhead``
component's) on a LocalCluster of 2 workers, the cache on vs off, steps interleaved in rounds.

Per step: client seconds (the whole ``backward`` + update, as the user waits for it), tasks the
workers ran (the task stream), and the scheduler's time per task: seconds in ``update_graph``
(receiving and materializing the graph, its transitions: distributed's ``update-graph-duration``)
and CPU seconds of the event-loop thread the scheduler runs on (with ``processes=False`` the
workers' messages are handled on that thread too).

    PYTHONPATH=. python benchmarks/step_cache_cluster.py [--processes] [--chunks 200] [--rounds 5]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import dask
import numpy as np


def _loop_clock(dask_scheduler=None):
    return time.thread_time(), dask_scheduler.digests_total["update-graph-duration"]


def run(processes=False, nchunks=200, rows=10, d=10, rounds=5, steps_per_round=4, lr=0.1):
    from distributed import Client, LocalCluster, get_task_stream

    import daskgrad as dg

    rng = np.random.default_rng(0)
    Xn, yn = rng.standard_normal((nchunks * rows, d)), (rng.random(nchunks * rows) > 0.5) * 1.0
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=processes, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        X, y = dg.from_array(Xn, chunks=(rows, d)), dg.from_array(yn, chunks=rows)
        X, y = X.persist(), y.persist()  # the data in cluster memory, as a cluster user holds it
        ws = {k: dg.zeros(d, dtype="float64", requires_grad=True) for k in ("cache_on", "cache_off")}
        rec = {k: {"seconds": [], "tasks": [], "update_graph_s": [], "loop_cpu_s": []} for k in ws}

        def step(name):
            w = ws[name]
            with dask.config.set({"daskgrad.step-cache.enabled": name == "cache_on"}):
                dg.binary_cross_entropy_with_logits(X @ w, y).backward()
                with dg.no_grad():
                    w -= lr * w.grad
                w.grad = None

        for name in ws:  # warm-up: the cache keeps the step at its third submission of that outline
            for _ in range(4):
                step(name)
        hits = dg.step_cache_info()["hits"]
        order = list(ws)
        for r in range(rounds):
            for name in (order if r % 2 == 0 else order[::-1]):
                for _ in range(steps_per_round):
                    cpu0, ug0 = client.run_on_scheduler(_loop_clock)
                    with get_task_stream(client) as ts:
                        t0 = time.perf_counter()
                        step(name)
                        seconds = time.perf_counter() - t0
                    cpu1, ug1 = client.run_on_scheduler(_loop_clock)
                    rec[name]["seconds"].append(seconds)
                    rec[name]["tasks"].append(len(ts.data))
                    rec[name]["update_graph_s"].append(ug1 - ug0)
                    rec[name]["loop_cpu_s"].append(cpu1 - cpu0)
        replayed = dg.step_cache_info()["hits"] - hits
        wn = {k: w.detach().numpy() for k, w in ws.items()}
    out = {"problem": f"logistic-regression step, {nchunks} chunks of {rows}x{d} float64, LocalCluster "
                      f"2 workers x 1 thread, processes={processes}", "steps_replayed": replayed,
           "same_parameters": bool(np.array_equal(wn["cache_on"], wn["cache_off"]))}
    for name, r in rec.items():
        tasks = statistics.median(r["tasks"])
        out[name] = {"ms_per_step": 1e3 * statistics.median(r["seconds"]), "tasks_per_step": tasks,
                     "update_graph_us_per_task": 1e6 * statistics.median(r["update_graph_s"]) / tasks,
                     "scheduler_loop_cpu_us_per_task": 1e6 * statistics.median(r["loop_cpu_s"]) / tasks}
    return out


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--processes", action="store_true")
    p.add_argument("--chunks", type=int, default=200)
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    print(json.dumps(run(processes=a.processes, nchunks=a.chunks, rounds=a.rounds), indent=1))
