"""The cost of daskgrad's protection of kept values: two copies of every value it keeps on a
cluster (parameters, optimizer state, ``.grad``, loss values; :mod:`daskgrad._dask.replicas`), so a killed
worker loses nothing.  ``daskgrad.copies`` = 2 (the default) vs 1 (protection off), on a cluster made
as users make it: ``daskgrad.connect("local", n_workers=3, processes=True, threads_per_worker=1)``
(in-process workers with BENCH_QUICK=1: process start-up would dominate a smoke run).

* step time: ``nn.Sequential(Linear(10, 16), Tanh, Linear(16, 1)).double()`` + MSELoss + Adam on
  X 20000 x 10 float64 in 4 chunks, ``zero_grad, forward, backward, step, loss.item()`` per step;
  the two settings train their own (identical) models on the same cluster, in interleaved rounds
  (seeded random order per round, as the rest of the suite); also the README's plain loop
  (``w -= lr * w.grad``) on 2M x 50 float32 in 20 chunks (generated on the workers);
* memory: total-variation denoising (examples/tv_denoise.py) of an 11585 x 11585 float64 image
  (the unknown ``u``: 1.07 GB) in 4 x 4 chunks, plain gradient steps; the cluster's managed memory
  (bytes of every in-memory key times its holders) after each step, with each setting.

Used by the benchmark suite (benchmarks/run_all.py, component ``protection``).
"""
from __future__ import annotations

import os
import random
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(os.path.dirname(HERE), "examples")
QUICK = os.environ.get("BENCH_QUICK", "") not in ("", "0")


def managed_bytes(client):
    """Bytes the cluster holds: every in-memory key's size times the number of workers holding it."""
    return client.run_on_scheduler(lambda dask_scheduler: sum(
        ts.nbytes * len(ts.who_has) for ts in dask_scheduler.tasks.values() if ts.state == "memory"))


def by_array(client):
    """Managed bytes per array name (key prefix) and number of holders, largest first."""
    def count(dask_scheduler=None):
        c = {}
        for ts in dask_scheduler.tasks.values():
            if ts.state == "memory":
                name = ts.key[0] if isinstance(ts.key, tuple) else ts.key
                k = f"{name} x{len(ts.who_has)}"
                c[k] = c.get(k, 0) + ts.nbytes * len(ts.who_has)
        return dict(sorted(c.items(), key=lambda kv: -kv[1]))
    return client.run_on_scheduler(count)


def holders(client, tensors):
    """How many workers hold each chunk of ``tensors`` (sorted distinct counts)."""
    from daskgrad import _dask

    keys = [k for t in tensors for k in _dask.flat_keys(t.detach().array)]
    counts = client.run_on_scheduler(lambda keys, dask_scheduler: sorted({
        len(dask_scheduler.tasks[k].who_has) if k in dask_scheduler.tasks else 0 for k in keys}), keys=keys)
    return counts


def _holders_now(client, tensors, copies):
    """:func:`holders` after a submission under ``copies`` (the optimizer's last update is pending)."""
    import dask

    with dask.config.set({"daskgrad.copies": copies}):
        tensors[0].detach().sum().item()
    return holders(client, tensors)


def _flush():
    """Compute the updates left pending (an optimizer's or ``w -= ...``'s) now, under this variant's
    ``daskgrad.copies``: they are computed by the next submission, which in interleaved rounds is the
    other variant's, under the other setting.  One extra submission per round, for each variant."""
    from daskgrad import runtime

    runtime.persist([])


def _connect(quick):
    import daskgrad as dg

    t0 = time.perf_counter()
    client = dg.connect("local", n_workers=3, processes=not quick, threads_per_worker=1, dashboard_address=None)
    return client, time.perf_counter() - t0


class _Timed:
    """Seconds spent in ``daskgrad._dask``'s ``store`` and ``keep`` (the protection's RPCs)
    per variant: which one runs is set by the caller."""

    def __init__(self):
        from daskgrad import _dask

        self.runtime, self.current, self.acc = _dask, None, {}
        self.real = {name: getattr(_dask, name) for name in ("store", "keep")}
        for name, fn in self.real.items():
            setattr(_dask, name, self._wrap(name, fn))

    def _wrap(self, name, fn):
        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                if self.current is not None:
                    a = self.acc.setdefault(self.current, {}).setdefault(name, [0.0, 0])
                    a[0] += time.perf_counter() - t0
                    a[1] += 1
        return timed

    def restore(self):
        for name, fn in self.real.items():
            setattr(self.runtime, name, fn)


def _interleaved(fns, rounds, timed, steps_per_round):
    """Median seconds per step of each variant over ``rounds`` rounds (each ``steps_per_round``
    steps), after one warm-up round each; a new seeded random order every round."""
    for k, fn in fns.items():
        fn()
    times = {k: [] for k in fns}
    names, rng = list(fns), random.Random(0)
    timed.acc.clear()
    for _ in range(rounds):
        rng.shuffle(names)
        for k in names:
            timed.current = k
            t0 = time.perf_counter()
            fns[k]()
            times[k].append((time.perf_counter() - t0) / steps_per_round)
            timed.current = None
    steps = rounds * steps_per_round
    inner = {k: {name: {"seconds_per_step": s / steps, "calls_per_step": c / steps} for name, (s, c) in v.items()}
             for k, v in timed.acc.items()}
    return {k: statistics.median(v) for k, v in times.items()}, times, inner


def step_time(quick=QUICK):
    import dask

    import daskgrad as dg

    rounds, per_round = (1, 2) if quick else (9, 8)
    client, startup = _connect(quick)
    timed = _Timed()
    out = {"cluster": ("daskgrad.connect('local', n_workers=3, threads_per_worker=1, processes="
                       f"{not quick})"), "cluster_startup_s": startup}
    try:
        rng = np.random.default_rng(0)
        Xn = rng.standard_normal((20_000, 10))
        yn = np.tanh(Xn @ np.linspace(-1, 1, 10))[:, None]
        X = dg.from_array(Xn, chunks=(5_000, 10)).persist()
        y = dg.from_array(yn, chunks=(5_000, 1)).persist()

        def make(copies):
            # a different initialisation per variant: identical models would share every key on the
            # scheduler (daskgrad's names are deterministic), and each setting would act on the other's
            dg.manual_seed(copies)
            model = dg.nn.Sequential(dg.nn.Linear(10, 16), dg.nn.Tanh(), dg.nn.Linear(16, 1)).double()
            opt = dg.optim.Adam(model.parameters(), lr=1e-2)
            loss_fn = dg.nn.MSELoss()
            losses = []

            def steps():
                with dask.config.set({"daskgrad.copies": copies}):
                    for _ in range(per_round):
                        opt.zero_grad()
                        loss = loss_fn(model(X), y)
                        loss.backward()
                        opt.step()
                        losses.append(loss.item())
                    _flush()
            return steps, model, opt, losses

        variants = {c: make(c) for c in (2, 1)}
        fns = {f"copies={c}": v[0] for c, v in variants.items()}
        med, all_times, inner = _interleaved(fns, rounds, timed, per_round)
        l2, l1 = variants[2][3], variants[1][3]
        assert np.all(np.isfinite(l2 + l1)) and l2[-1] < l2[0] and l1[-1] < l1[0]
        out["mlp_adam"] = {
            "problem": ("nn.Sequential(Linear(10,16), Tanh, Linear(16,1)).double() + MSELoss + Adam, X 20000x10 "
                        "float64 in 4 chunks; zero_grad, forward, backward, step, loss.item() per step"),
            "rounds": rounds, "steps_per_round": per_round, "seconds_per_step": med,
            "protected_over_unprotected": med["copies=2"] / med["copies=1"], "goal": 1.1,
            "round_seconds_per_step": all_times, "inside_daskgrad_runtime": inner,
            "holders_of_parameter_chunks": {f"copies={c}": _holders_now(client, list(v[1].parameters()), c)
                                            for c, v in variants.items()},
            "loss_first_last": {"copies=2": [l2[0], l2[-1]], "copies=1": [l1[0], l1[-1]]}}

        # the README's plain loop on data generated on the workers (400 MB are not shipped)
        n, d, nchunks, prounds = (20_000, 10, 4, 1) if quick else (2_000_000, 50, 20, 5)
        rows = -(-n // nchunks)
        dg.manual_seed(0)
        PX = dg.randn(n, d, chunks=(rows, d), dtype="float32").persist()
        Py = dg.rand(n, chunks=rows, dtype="float32").persist()

        def plain(copies):
            w = dg.from_array(np.full(d, 1e-3 * copies, np.float32), chunks=-1, requires_grad=True)  # distinct keys

            def step():
                nonlocal w
                with dask.config.set({"daskgrad.copies": copies}):
                    loss = ((PX @ w - Py) ** 2).mean()
                    loss.backward()
                    with dg.no_grad():
                        w -= 0.05 * w.grad
                    w.grad = None
                    _flush()
            return step, w

        pv = {c: plain(c) for c in (2, 1)}
        pmed, ptimes, pinner = _interleaved({f"copies={c}": v[0] for c, v in pv.items()}, prounds, timed, 1)
        assert all(np.all(np.isfinite(v[1].detach().numpy())) for v in pv.values())
        out["plain_loop"] = {
            "problem": f"README loop: ((X @ w - y) ** 2).mean(); backward; w -= lr * w.grad; X {n}x{d} float32 "
                       f"in {nchunks} chunks (generated on the workers)",
            "rounds": prounds, "seconds_per_step": pmed,
            "protected_over_unprotected": pmed["copies=2"] / pmed["copies=1"],
            "round_seconds_per_step": ptimes, "inside_daskgrad_runtime": pinner}
    finally:
        timed.restore()
        client.close()
        client.cluster.close()
    return out


def memory(quick=QUICK, size=None, steps=None):
    """TV denoising's unknown on the cluster: managed bytes after each step, copies=2 and copies=1."""
    import dask
    import dask.array as da

    import daskgrad as dg

    sys.path.insert(0, EXAMPLES)
    import tv_denoise as tvd

    size = size or (512 if quick else 11585)
    steps = steps or (3 if quick else 3)
    chunk = -(-size // 4)
    client, startup = _connect(quick)
    out = {"problem": (f"TV denoising (examples/tv_denoise.py, tv_with_slices), {size}x{size} float64 unknown u "
                       f"in 4x4 chunks of {chunk}, plain gradient steps u -= lr * u.grad, {steps} steps per "
                       "setting; managed bytes = sum over in-memory keys of nbytes x holders, after each step"),
           "cluster": f"daskgrad.connect('local', n_workers=3, threads_per_worker=1, processes={not quick})",
           "cluster_startup_s": startup, "unknown_bytes": size * size * 8}
    try:
        clean = tvd.test_image(size, chunk)
        noise = dg.from_array(da.random.default_rng(0).standard_normal(clean.shape, chunks=clean.chunks))
        f = (clean + 0.15 * noise).detach()  # lazy, as in the example: regenerated where it is used
        lam, eps = 0.08, 0.02
        lr = 1.0 / (1.0 + 8 * lam / eps)
        order = [2, 1]
        random.Random(0).shuffle(order)
        out["order"] = order
        for copies in order:
            baseline = managed_bytes(client)
            u = f.clone().requires_grad_()
            after, seconds = [], []
            with dask.config.set({"daskgrad.copies": copies}):
                for _ in range(steps):
                    t0 = time.perf_counter()
                    residual = u - f
                    loss = 0.5 * dg.sum(residual * residual) + lam * tvd.tv_with_slices(u, eps)
                    loss.backward()
                    with dg.no_grad():
                        u -= lr * u.grad
                    u.grad = None
                    seconds.append(time.perf_counter() - t0)
                    after.append(managed_bytes(client))
                time.sleep(0.3)
                at_end = by_array(client)
                del loss, residual  # the loop's last loss and residual pin the u they were computed from
                time.sleep(0.3)
                without_loss = managed_bytes(client)
                u.detach().sum().item()  # the pending update (it holds the old u and u.grad) computed
                time.sleep(0.3)
                update_computed = managed_bytes(client)
                held = holders(client, [u])
            del u
            for _ in range(50):  # let the releases reach the scheduler before the other setting starts
                if managed_bytes(client) <= baseline:
                    break
                time.sleep(0.1)
            peak = max(after)
            out[f"copies={copies}"] = {
                "baseline_bytes": baseline, "managed_bytes_after_each_step": after,
                "peak_between_steps_bytes": peak, "peak_over_unknown": peak / out["unknown_bytes"],
                "extra_over_unknown": (peak - out["unknown_bytes"]) / out["unknown_bytes"],
                "after_last_step_by_array": at_end,
                "after_dropping_loss_and_residual_bytes": without_loss,
                "after_pending_update_computed_bytes": update_computed,
                "u_alone_over_unknown": update_computed / out["unknown_bytes"],
                "holders_of_u_chunks": held, "step_seconds": seconds}
        out["protected_over_unprotected_peak"] = (out["copies=2"]["peak_between_steps_bytes"]
                                                  / out["copies=1"]["peak_between_steps_bytes"])
    finally:
        client.close()
        client.cluster.close()
    return out


def run(quick=QUICK):
    t0 = time.perf_counter()
    out = {"step_time": step_time(quick)}
    out["step_time"]["component_seconds"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    out["memory"] = memory(quick)
    out["memory"]["component_seconds"] = time.perf_counter() - t1
    return out


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=1, default=str))
