"""CPU workers vs a GPU worker, same daskgrad graph: logistic-regression gradient and a 2-layer MLP;
then the fraction of the GPU's memory bandwidth a gradient over chunks of >= 1 GB reaches, and the
checkpointed FWI gradient of examples/fwi.py at the tutorial's grid on NumPy and on cupy chunks.

    python benchmarks/bench_gpu.py        (make bench-gpu)

Needs cupy and a GPU that it can allocate on; otherwise it says so and exits 0. Writes
benchmarks/results/gpu.json. Each timing is the median of interleaved runs of one backward()
(one submission) on data already in (device) memory, timed until the device has finished
(cupy's kernels run asynchronously: a backward returns when they are queued).

Bandwidth: bytes a gradient must move at the least (its inputs read once, its gradients written
once) over its time, against what the device moves in a plain copy (``b[...] = a``, bytes read and
written) measured in the same run.
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


def _sync():
    import cupy

    cupy.cuda.runtime.deviceSynchronize()


def _median_seconds(fn, reps):
    fn()
    _sync()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        _sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bandwidth(chunk_bytes=2 ** 32, nchunks=8, d=64, reps=5):
    """Gradients over float32 chunks of ``chunk_bytes`` on the GPU (the elementwise one over chunks
    a quarter that size: its backward holds a few temporaries per chunk), each as the user's loop
    (``backward()``) and as a compiled step (``daskgrad.compile``: no graph built per call): the
    fraction of the device's copy bandwidth each reaches, counting only the bytes it must move
    (logreg: X and y read once, though its two products read X twice; elementwise: x read once,
    its gradient written once)."""
    import cupy

    pair = [cupy.ones(2 ** 28, dtype=cupy.float32), cupy.empty(2 ** 28, dtype=cupy.float32)]

    def copy():
        pair[1][...] = pair[0]
    copy_bw = 2 * 2 ** 30 / _median_seconds(copy, reps)
    pair.clear()
    out = {"chunk_bytes": chunk_bytes, "chunks": nchunks, "copy_bytes_per_s": copy_bw, "rows": {}}

    def record(name, fn, moved):
        t = _median_seconds(fn, reps)
        out["rows"][name] = {"seconds": t, "min_bytes_moved": moved, "bytes_per_s": moved / t,
                             "fraction_of_copy_bandwidth": moved / t / copy_bw}

    _logreg_rows(record, chunk_bytes, nchunks, d)  # (its data freed before the next is made)
    _elementwise_rows(record, chunk_bytes // 4, nchunks)
    return out


def _logreg_rows(record, chunk_bytes, nchunks, d):
    rows = chunk_bytes // (4 * d)
    n = rows * nchunks
    X = dg.randn(n, d, chunks=(rows, d), dtype="float32", device="cuda").persist()
    y = (dg.rand(n, chunks=rows, dtype="float32", device="cuda") < 0.5).astype("float32").persist()
    w = dg.zeros(d, dtype="float32", device="cuda", requires_grad=True)

    def loss(v):
        return dg.binary_cross_entropy_with_logits(X @ v, y)

    def step():
        loss(w).backward()
        w.grad = None
    compiled = dg.compile(dg.func.grad(loss))
    record("logreg_gradient", step, n * d * 4 + n * 4)
    record("logreg_gradient_compiled", lambda: compiled(w.detach()), n * d * 4 + n * 4)


def _elementwise_rows(record, chunk_bytes, nchunks):
    m = chunk_bytes // 4 * nchunks
    x = dg.randn(m, chunks=m // nchunks, dtype="float32", device="cuda").persist().requires_grad_()

    def loss(v):
        return (dg.tanh(v) * 0.5).sum()

    def step():
        loss(x).backward()
        x.grad = None
    compiled = dg.compile(dg.func.grad(loss))
    record("elementwise_gradient", step, 2 * m * 4)
    record("elementwise_gradient_compiled", lambda: compiled(x.detach()), 2 * m * 4)


def fwi_gradient(steps=40, snapshots=6, reps=3, devices=("cpu", "cuda")):
    """The checkpointed FWI gradient of examples/fwi.py at the tutorial's grid (101 x 101 + 40-cell
    layer, 5 shots, one chunk per shot) over ``steps`` time steps, NumPy chunks on the threaded
    scheduler against cupy chunks: the median seconds of building the forward (``misfit``) and of
    ``backward()`` (building the reversal and running both), interleaved rounds after a warm-up."""
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
    import fwi

    sv = fwi.survey(steps=steps)
    vp_true = fwi.camembert()
    runs = {}
    for device in devices:
        fwd = fwi.Modelling(sv, device=device)
        runs[device] = fwd, fwd.shot_records(fwd.slowness(vp_true))
    times = {f"{device}-{part}": [] for device in runs for part in ("build", "backward")}
    for r in range(reps + 1):
        for device, (fwd, d_obs) in runs.items():
            m = fwd.slowness(np.full(vp_true.shape, fwi.BACKGROUND), requires_grad=True)
            t0 = time.perf_counter()
            loss = fwd.misfit(m, d_obs, snapshots)
            t1 = time.perf_counter()
            loss.backward()
            _sync()
            if r:  # round 0 warms up
                times[f"{device}-build"].append(t1 - t0)
                times[f"{device}-backward"].append(time.perf_counter() - t1)
    med = {k: statistics.median(v) for k, v in times.items()}
    out = {"grid": list(sv.shape), "shots": sv.nshots, "steps": steps, "snapshots": snapshots, "seconds": med}
    if len(runs) == 2:
        out["speedup"] = (med["cpu-build"] + med["cpu-backward"]) / (med["cuda-build"] + med["cuda-backward"])
    return out


def main(reps=7):
    if not gpu_available():
        return
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(0)
    runs = {"cpu": problems("cpu"), "cuda": problems("cuda")}
    times = {f"{p}-{dev}": [] for dev in runs for p in runs[dev]}
    for dev in runs:
        for p, fn in runs[dev].items():
            fn()  # warm-up
            _sync()
    for _ in range(reps):
        for dev in runs:
            for p, fn in runs[dev].items():
                t0 = time.perf_counter()
                fn()
                _sync()
                times[f"{p}-{dev}"].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    del runs
    report = {"device": props["name"].decode() if isinstance(props["name"], bytes) else props["name"],
              "cpus": os.cpu_count(), "seconds": med,
              "speedup": {p: med[f"{p}-cpu"] / med[f"{p}-cuda"] for p in ("logreg", "mlp")},
              "bandwidth": bandwidth(), "fwi": fwi_gradient()}
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "gpu.json"), "w") as f:
        json.dump(report, f, indent=2)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
