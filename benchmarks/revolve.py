"""Checkpointed time stepping (``daskgrad.utils.checkpoint.checkpoint_steps``): how many steps run
on the workers and how much memory the backward holds, against Revolve's theory.

A 1-D nonlinear wave equation ``u'' = c^2 (tanh u)_xx`` (the stencil is ``dg.correlate``, across
chunk boundaries) with a velocity model ``c`` requiring grad.  Every chunk of every state a step
produces goes through a counting kernel (a ``map_blocks`` identity whose task increments a
counter where it runs), so the counts are executed tasks, not calls of ``step`` on the client
(reported too).  The peak is the most result bytes held at once on dask's single-thread
scheduler (``daskgrad.memory.PeakTracker``), next to ``daskgrad.estimate_memory``'s prediction.

Used by the benchmark suite (benchmarks/run_all.py, component ``revolve``).
Usage: python benchmarks/revolve.py [steps] [snapshots] [n] [nchunks]
"""
from __future__ import annotations

import json
import sys
import threading
import time

import numpy as np

_lock = threading.Lock()
_executed = [0]


def _count(block):
    with _lock:
        _executed[0] += 1
    return block


def problem(steps, snapshots, n, nchunks, checkpointed=True, seed=0):
    """(loss, client-side calls of step) of the wave equation, built lazily."""
    import daskgrad as dg
    from daskgrad.utils.checkpoint import checkpoint_steps

    rng = np.random.default_rng(seed)
    u0 = dg.from_array(rng.standard_normal(n), chunks=-(-n // nchunks), requires_grad=True)
    c = dg.from_array(0.2 + 0.05 * rng.random(n), chunks=-(-n // nchunks), requires_grad=True)
    calls = []

    def step(state, i):
        prev, u = state
        calls.append(i)
        new = 2 * u - prev + c ** 2 * dg.correlate(dg.tanh(u), np.array([1.0, -2.0, 1.0]), mode="constant")
        return u, dg.map_blocks(_count, new, vjp=lambda g, block: g, name="step-count")

    state = (u0 * 1.0, u0)
    if checkpointed:
        out = checkpoint_steps(step, state, steps, snapshots=snapshots)
    else:
        out = state
        for i in range(steps):
            out = step(out, i)
    return (out[1] ** 2).sum(), calls, (u0, c)


def run(steps=1000, snapshots=20, n=20_000, nchunks=2):
    import dask

    import daskgrad as dg
    from daskgrad.memory import PeakTracker
    from daskgrad.utils.revolve import repetitions

    t0 = time.perf_counter()
    loss, calls, _ = problem(steps, snapshots, n, nchunks)
    forward_calls = len(calls)
    predicted = dg.estimate_memory(loss)  # builds the reverse graph once (and so calls step)
    backward_calls = len(calls) - forward_calls
    t1 = time.perf_counter()
    _executed[0] = 0
    with dask.config.set(scheduler="sync"), PeakTracker() as tracker:
        loss.backward()
    t2 = time.perf_counter()
    state_bytes = 2 * n * 8
    t = repetitions(steps, snapshots)
    out = {"steps": steps, "snapshots": snapshots, "n": n, "nchunks": nchunks,
           "state_bytes": state_bytes,
           "step_evaluations_on_workers": _executed[0] / nchunks,
           "revolve_t": t, "expected_t_plus_last_step": t + 1,
           "recompute_factor": _executed[0] / nchunks / steps,
           "client_calls_of_step": forward_calls + backward_calls, "expected_client_calls": t + steps,
           "peak_bytes": tracker.peak, "peak_states": tracker.peak / state_bytes,  # a state: (u_prev, u)
           "predicted_peak_bytes": int(predicted), "predicted_over_measured": int(predicted) / tracker.peak,
           "build_and_estimate_s": t1 - t0, "backward_s": t2 - t1}
    return out


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    print(json.dumps(run(*args), indent=1))
