"""CPU workers vs a GPU worker, same daskgrad graph: logistic-regression gradient and a 2-layer MLP.

    python benchmarks/bench_gpu.py        (make bench-gpu)

Needs cupy and a GPU that it can allocate on; otherwise it says so and exits 0. Writes
benchmarks/results/gpu.json. Each timing is the median of interleaved runs of one backward()
(one submission) on data already in (device) memory.
"""
import json
import os
import statistics
import sys
import time

import numpy as np

import daskgrad as dg

HERE = os.path.dirname(os.path.abspath(__file__))


def gpu_available():
    try:
        import cupy

        cupy.zeros(1)
        return True
    except Exception as exc:  # noqa: BLE001 - any failure means "no usable GPU"
        print(f"no usable GPU here ({exc}); nothing to measure")
        return False


def problems(device, n=2_000_000, d=50, nchunks=20, hidden=256):
    rng = np.random.default_rng(0)
    X = dg.from_array(rng.standard_normal((n, d), dtype=np.float32), chunks=(n // nchunks, d)).to(device).persist()
    y = dg.from_array((rng.random(n) < 0.5).astype(np.float32), chunks=n // nchunks).to(device).persist()
    labels = dg.from_array(rng.integers(0, 10, n), chunks=n // nchunks).to(device).persist()
    w = dg.zeros(d, device=device, requires_grad=True)
    w1 = (dg.randn(d, hidden, device=device) * 0.1).detach().persist().requires_grad_()
    w2 = (dg.randn(hidden, 10, device=device) * 0.1).detach().persist().requires_grad_()

    def logreg():
        dg.binary_cross_entropy_with_logits(X @ w, y).backward()
        w.grad = None

    def mlp():
        dg.cross_entropy(dg.relu(X @ w1) @ w2, labels).backward()
        w1.grad = w2.grad = None

    return {"logreg": logreg, "mlp": mlp}


def main(reps=7):
    if not gpu_available():
        return
    runs = {"cpu": problems("cpu"), "cuda": problems("cuda")}
    times = {f"{p}-{dev}": [] for dev in runs for p in runs[dev]}
    for dev in runs:
        for p, fn in runs[dev].items():
            fn()  # warm-up
    for _ in range(reps):
        for dev in runs:
            for p, fn in runs[dev].items():
                t0 = time.perf_counter()
                fn()
                times[f"{p}-{dev}"].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    report = {"seconds": med, "speedup": {p: med[f"{p}-cpu"] / med[f"{p}-cuda"] for p in ("logreg", "mlp")}}
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "gpu.json"), "w") as f:
        json.dump(report, f, indent=2)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
