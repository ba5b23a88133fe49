"""A checkpointed FWI gradient (examples/fwi.py) on a LocalCluster worker whose memory limit is below
what the uncheckpointed backward would hold.

``daskgrad.estimate_memory`` of the uncheckpointed misfit says it would not fit the worker's limit;
the same gradient through ``checkpoint_steps`` runs on it.  The worker samples its own process
memory (RSS, as benchmarks/out_of_core.py) and the bytes of results it holds (distributed's managed
memory, what ``estimate_memory`` predicts) in a background thread.  The recompute factor is the
number of times ``step`` was called on the client (building the forward and the backward) over the
number of steps, next to Revolve's count (forward sweep + recomputations + last step, and the
recorded re-run of each step in its reversal).

Used by the benchmark suite (benchmarks/run_all.py, component ``fwi``).
Usage: python benchmarks/bench_fwi.py [n] [nbl] [steps] [snapshots] [memory_limit_MB]
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time

import numpy as np
from distributed import WorkerPlugin

HERE = os.path.dirname(os.path.abspath(__file__))


def _example():
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
    import fwi

    return fwi


class _PeakManaged(WorkerPlugin):
    """A worker plugin: the most result bytes the worker held (distributed's managed memory, what
    ``estimate_memory`` predicts), read after every task transition.  Exact where a sampling thread
    misses a peak shorter than its interval (the quick problem's tasks take microseconds)."""

    name = "daskgrad-fwi-peak-managed"

    def setup(self, worker):
        self.worker, self.peak = worker, 0
        worker._daskgrad_fwi_peak = self

    def transition(self, key, start, finish, **kwargs):
        self.peak = max(self.peak, self.worker.state.nbytes)


def _start_sampler(interval=0.005, dask_worker=None):
    """On a worker: a daemon thread recording peak RSS every ``interval`` s (RSS has no event to
    hook; it is reported, not asserted on)."""
    import psutil

    proc = psutil.Process()
    state = {"rss": proc.memory_info().rss, "stop": False}

    def loop():
        while not state["stop"]:
            state["rss"] = max(state["rss"], proc.memory_info().rss)
            time.sleep(interval)

    baseline = state["rss"]
    threading.Thread(target=loop, daemon=True, name="daskgrad-fwi-sampler").start()
    dask_worker._daskgrad_fwi = state
    dask_worker._daskgrad_fwi_peak.peak = dask_worker.state.nbytes
    return baseline


def _stop_sampler(dask_worker=None):
    state = dask_worker._daskgrad_fwi
    state["stop"] = True
    return {"peak_rss": state["rss"], "peak_managed": dask_worker._daskgrad_fwi_peak.peak,
            "memory_limit": dask_worker.memory_manager.memory_limit}


def _warm():
    import dask.array  # noqa: F401

    import daskgrad  # noqa: F401


def run(n=561, nbl=40, steps=120, snapshots=11, memory_limit=1000e6, nshots=2, rec_offset=8, vp_start=2.4):
    import daskgrad as dg
    from daskgrad.utils.revolve import repetitions
    from distributed import Client, LocalCluster

    fwi = _example()
    sv = fwi.survey(n=n, nbl=nbl, nshots=nshots, steps=steps)
    if rec_offset is not None:  # the receivers a few cells from the sources: the wave reaches them in few steps
        sv.rec_x = sv.src[0][0] + rec_offset
    fwd = fwi.Modelling(sv)
    calls = [0]
    update = fwd.update

    def counted(*args):
        calls[0] += 1
        return update(*args)

    vp_true = fwi.camembert(n, radius=max(1, round(15 * n / 101)))
    start = np.full_like(vp_true, vp_start)  # off the true background: the misfit is not zero before the
    # wave reaches the disk, which a short run does not
    field = nshots * sv.shape[0] * sv.shape[1] * 8
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, memory_limit=int(memory_limit),
                      dashboard_address=None, worker_dashboard_address=None) as cluster, Client(cluster) as client:
        client.run(_warm)
        client.register_plugin(_PeakManaged(), name=_PeakManaged.name)
        d_obs = fwd.shot_records(fwd.slowness(vp_true))
        plain = dg.estimate_memory(fwd.misfit(fwd.slowness(start, requires_grad=True), d_obs, None))
        fwd.update = counted
        t0 = time.perf_counter()
        m = fwd.slowness(start, requires_grad=True)
        loss = fwd.misfit(m, d_obs, snapshots)
        forward_calls = calls[0]
        predicted = dg.estimate_memory(loss, report=True)
        estimate_calls = calls[0] - forward_calls
        t1 = time.perf_counter()
        baseline = client.run(_start_sampler)
        calls[0] = 0
        loss.backward()
        backward_calls = calls[0]
        t2 = time.perf_counter()
        (worker,) = client.run(_stop_sampler).values()
        grad_norm = float(np.linalg.norm(m.grad.numpy()))
    (base,) = baseline.values()
    t = repetitions(steps, snapshots)
    return {
        "problem": f"FWI gradient, {sv.shape[0]}x{sv.shape[1]} grid ({n} + 2 x {nbl}), {nshots} shots, {steps} steps, "
                   f"{snapshots} snapshots, receivers {sv.rec_x - sv.src[0][0]} cells from the sources, "
                   f"1 worker process x 1 thread",
        "n": n, "nbl": nbl, "nshots": nshots, "steps": steps, "snapshots": snapshots,
        "state_bytes": 2 * field, "snapshots_times_state": snapshots * 2 * field,
        "field_bytes": field, "memory_limit": int(memory_limit),
        "uncheckpointed_estimate": int(plain), "uncheckpointed_over_limit": int(plain) / memory_limit,
        "checkpointed_estimate": int(predicted.peak), "estimate_unknown_sizes": predicted.unknown_sizes,
        "peak_managed": worker["peak_managed"], "peak_rss": worker["peak_rss"], "baseline_rss": base,
        "peak_rss_over_baseline": worker["peak_rss"] - base, "peak_rss_over_limit": worker["peak_rss"] / memory_limit,
        "estimate_over_measured": int(predicted.peak) / max(worker["peak_managed"], 1),
        "client_calls_of_step": forward_calls + backward_calls, "calls_in_estimate": estimate_calls,
        # the steps the workers run per step of the loop (the client records ``step`` once: a program
        # instantiated for every step, :mod:`daskgrad._dask.scan`)
        "recompute_factor": (t + 1 + steps - 1) / steps,
        "revolve_forward_steps": t + 1, "revolve_factor_with_reversals": (t + 1 + steps - 1) / steps,
        "build_and_estimate_s": t1 - t0, "backward_s": t2 - t1, "grad_norm": grad_norm,
    }


if __name__ == "__main__":
    keys = ["n", "nbl", "steps", "snapshots", "memory_limit"]
    kw = {k: float(a) * 1e6 if k == "memory_limit" else int(a) for k, a in zip(keys, sys.argv[1:])}
    print(json.dumps(run(**kw), indent=1))
