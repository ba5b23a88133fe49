"""Fitting a logistic regression with L-BFGS-B: daskgrad.optimize.minimize vs dask-glm's lbfgs.

Same data (1M x 20 float64 in 10 chunks, in memory), same objective (dask-glm's: summed log-loss
+ lamduh |beta|^2 / 2, normalize=False), same SciPy L-BFGS-B settings (dask-glm's pgtol=tol and
factr=1e7, i.e. gtol=tol and ftol=1e7 * eps), local threaded scheduler.  daskgrad writes the loss
with its ops and gets the gradient by reverse mode; dask-glm uses its hand-written gradient.  Both
compute loss and gradient in one submission per evaluation.  Medians of interleaved rounds.
Writes benchmarks/results/optimize.json.  Usage: python benchmarks/bench_optimize.py [n] [rounds]
"""
import os

# one BLAS thread per dask task, as in bench_logreg.py (dask's threads are the parallelism)
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import dask  # noqa: E402
import dask.array as da  # noqa: E402
import numpy as np  # noqa: E402
import scipy  # noqa: E402

import daskgrad as dg  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TOL, LAMDUH = 1e-6, 1.0


def counted(fn):
    """Run ``fn`` with a scheduler that counts submissions; returns (result, seconds, submissions)."""
    calls = []

    def get(dsk, keys, **kwargs):
        calls.append(1)
        return dask.threaded.get(dsk, keys, **kwargs)
    with dask.config.set(scheduler=get):
        t0 = time.perf_counter()
        out = fn()
        return out, time.perf_counter() - t0, len(calls)


def main(n=1_000_000, d=20, nchunks=10, rounds=7):
    from dask_glm.algorithms import lbfgs

    rng = np.random.default_rng(0)
    Xn = rng.standard_normal((n, d))
    yn = (rng.random(n) < 1 / (1 + np.exp(-(Xn @ rng.standard_normal(d) * 0.5)))).astype(np.float64)
    X = da.from_array(Xn, chunks=(n // nchunks, d)).persist()
    y = da.from_array(yn, chunks=n // nchunks).persist()
    Xg, yg = dg.Tensor(X), dg.Tensor(y)

    def loss(beta):
        return (dg.binary_cross_entropy_with_logits(Xg @ beta, yg, reduction="sum")
                + LAMDUH / 2 * (beta ** 2).sum())

    def run_daskgrad():
        res = dg.optimize.minimize(loss, np.zeros(d), method="L-BFGS-B",
                                   options={"gtol": TOL, "ftol": 1e7 * np.finfo(float).eps})
        return res.x.numpy()

    def run_dask_glm():
        with warnings.catch_warnings():  # dask-glm's own FutureWarning/DeprecationWarning on each call
            warnings.simplefilter("ignore")
            return np.asarray(lbfgs(X, y, regularizer="l2", lamduh=LAMDUH, tol=TOL, normalize=False))

    variants = {"daskgrad_minimize": run_daskgrad, "dask_glm_lbfgs": run_dask_glm}
    first = {k: counted(fn) for k, fn in variants.items()}  # warm-up; keeps coefficients and counts
    times = {k: [] for k in variants}
    for _ in range(rounds):
        for k, fn in variants.items():
            times[k].append(counted(fn)[1])
    seconds = {k: statistics.median(v) for k, v in times.items()}
    subs = {k: first[k][2] for k in variants}
    beta, ref = first["daskgrad_minimize"][0], first["dask_glm_lbfgs"][0]
    report = {
        "problem": f"L2 logistic regression (lamduh={LAMDUH}), {n}x{d} float64, {nchunks} chunks, "
                   f"L-BFGS-B gtol={TOL}, ftol=1e7*eps",
        "seconds": seconds,
        "submissions_per_fit": subs,
        "seconds_per_submission": {k: seconds[k] / subs[k] for k in variants},
        "daskgrad_vs_dask_glm": seconds["daskgrad_minimize"] / seconds["dask_glm_lbfgs"],
        "max_relative_coefficient_difference": float(np.abs(beta - ref).max() / np.abs(ref).max()),
        "rounds": rounds,
        "blas_threads_per_dask_task": os.environ["OPENBLAS_NUM_THREADS"],
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "dask": dask.__version__,
                    "numpy": np.__version__, "scipy": scipy.__version__},
    }
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "optimize.json"), "w") as f:
        json.dump(report, f, indent=2)
    print(json.dumps(report, indent=2))
    print(f"daskgrad minimize / dask-glm lbfgs time ratio: {report['daskgrad_vs_dask_glm']:.2f}")


if __name__ == "__main__":
    main(*[int(a) for a in sys.argv[1:]])
