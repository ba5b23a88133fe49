"""Logistic-regression gradient on 2M x 50 float32 in 20 chunks, side by side in one run:

* PyTorch CPU (reference, when installed),
* a hand-written dask gradient  ``X.T @ (sigmoid(X @ w) - y) / n``,
* a hand-fused per-chunk dask gradient (one map_blocks task per chunk, then a sum),
* daskgrad: ``binary_cross_entropy_with_logits(X @ w, y).backward()`` (graph building included).

All dask variants use the same in-memory chunks and the local threaded scheduler.
Writes benchmarks/results/logreg.json and logreg.png.  Usage: python benchmarks/bench_logreg.py [n] [reps]
"""
import os

# Dask tasks are the parallelism: one BLAS thread per task, as distributed's nanny sets for worker
# processes (without it, 2 dask threads x 2 BLAS threads oversubscribe 2 cores for every dask variant).
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import json  # noqa: E402
import platform
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import dask  # noqa: E402
import dask.array as da  # noqa: E402
import numpy as np  # noqa: E402

import daskgrad as dg  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def interleaved(fns, reps):
    """Median seconds per variant, running the variants round-robin so drift hits all alike."""
    for fn in fns.values():
        fn()  # warm-up
    times = {k: [] for k in fns}
    for _ in range(reps):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def _sigmoid(z):
    return 1 / (1 + np.exp(-z))


def _chunk_grad(X, y, w):
    return (X.T @ (_sigmoid(X @ w) - y))[None]


def main(n=2_000_000, d=50, nchunks=20, reps=15):
    rng = np.random.default_rng(0)
    Xn = rng.standard_normal((n, d), dtype=np.float32)
    yn = (rng.random(n) < 0.5).astype(np.float32)
    wn = (0.01 * rng.standard_normal(d)).astype(np.float32)
    X = da.from_array(Xn, chunks=(n // nchunks, d)).persist()
    y = da.from_array(yn, chunks=n // nchunks).persist()
    w = da.from_array(wn, chunks=-1).persist()
    results = {}

    try:
        import torch

        torch.set_num_threads(os.cpu_count() or 1)
        Xt, yt = torch.from_numpy(Xn), torch.from_numpy(yn)

        def run_torch():
            wt = torch.from_numpy(wn.copy()).requires_grad_()
            torch.nn.functional.binary_cross_entropy_with_logits(Xt @ wt, yt).backward()
            return wt.grad
        variants = {"pytorch_cpu": run_torch}
        g_ref = run_torch().numpy()
    except ImportError:
        variants, g_ref = {}, None

    def run_dask():
        return (X.T @ (1 / (1 + da.exp(-(X @ w))) - y) / n).compute()
    variants["dask_handwritten"] = run_dask

    def run_fused():
        parts = da.blockwise(_chunk_grad, "ij", X, "ij", y, "i", w, "j", adjust_chunks={"i": 1},
                             concatenate=True, dtype=np.float32, meta=np.empty((0, 0), np.float32))
        return (parts.sum(axis=0) / n).compute()
    variants["dask_hand_fused"] = run_fused

    Xg, yg = dg.Tensor(X), dg.Tensor(y)

    def run_daskgrad():
        wg = dg.Tensor(w, requires_grad=True)
        dg.binary_cross_entropy_with_logits(Xg @ wg, yg).backward()
        return wg.grad
    variants["daskgrad"] = run_daskgrad
    results.update(interleaved(variants, reps))
    g = run_daskgrad().numpy()
    np.testing.assert_allclose(g, run_dask(), rtol=2e-3, atol=1e-6)
    if g_ref is not None:
        np.testing.assert_allclose(g, g_ref, rtol=2e-3, atol=1e-6)

    base = results.get("pytorch_cpu")
    report = {"problem": f"logistic regression gradient, {n}x{d} float32, {nchunks} chunks",
              "seconds": results, "ratio_to_pytorch": {k: v / base for k, v in results.items()} if base else None,
              "daskgrad_vs_dask_handwritten": results["daskgrad"] / results["dask_handwritten"],
              "blas_threads_per_dask_task": os.environ["OPENBLAS_NUM_THREADS"],
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                          "dask": dask.__version__, "numpy": np.__version__}}
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "logreg.json"), "w") as f:
        json.dump(report, f, indent=2)
    print(json.dumps(report, indent=2))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 3))
        names = list(results)
        ax.barh(names, [results[k] for k in names], color=["#888" if k != "daskgrad" else "#d62" for k in names])
        ax.set_xlabel("seconds (median)")
        ax.set_title(report["problem"], fontsize=9)
        fig.tight_layout()
        fig.savefig(os.path.join(HERE, "results", "logreg.png"), dpi=100)
    except ImportError:
        print("matplotlib missing: no plot")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
