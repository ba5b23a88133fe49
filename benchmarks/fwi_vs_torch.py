"""The FWI misfit gradient of examples/fwi.py against the same scheme written in PyTorch (the test
suite's oracle, tests/test_fwi.py): the tutorial's grid (101 x 101 + a 40-cell layer, 5 shots), 200
time steps, float64, one chunk per shot; daskgrad plain and checkpointed (``snapshots`` about
sqrt(steps), examples/fwi.py's default: 14; and with ``unroll=10``, about sqrt(steps / 10) snapshots of
blocks of 10 steps) on NumPy chunks (threads) and, where cupy and a GPU are
there, on cupy chunks; PyTorch on the CPU and, where there is one, on CUDA.  Medians of interleaved
rounds after a warm-up, each round the whole gradient (recording the forward, ``backward()``,
reading the gradient).  ``first_seconds``: each daskgrad variant's first two gradients, before its
program is a cached template (lowered, optimized and chunk-fused; then instantiated).

    python benchmarks/fwi_vs_torch.py [steps]       (make bench: component fwi_vs_torch)

Also, in full runs: the checkpointed gradient on a LocalCluster of 2 worker processes, and a
1,001^2 x 8-shot grid (:func:`run_all`).

Rate: useful grid-point updates a second, shots x grid points x steps x 2 (the forward and the
adjoint sweep) over the gradient's time (Devito's serial rate here: ~30 M/s).  Client time a step:
recording the misfit (the forward's ops, or checkpoint_steps' one trace of ``step``) over the steps;
tasks a step: the gradient submission's tasks over the steps.
"""
import json
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))


def torch_misfit(torch, sv, m, d_obs, device):
    """tests/test_fwi.py's oracle, on ``device``."""
    import fwi

    f = torch.nn.functional
    m = f.pad(m, (sv.nbl,) * 4, value=1.0 / fwi.BACKGROUND ** 2)
    lap = torch.from_numpy(sv.laplacian_kernel()[None]).to(device)
    damp = torch.from_numpy(sv.damp / (2 * sv.dt)).to(device)
    src = torch.from_numpy(sv.source_mask()).to(device)
    obs = torch.from_numpy(d_obs).to(device)
    u_prev = torch.zeros((sv.nshots,) + sv.shape, dtype=torch.float64, device=device)
    u, total = u_prev.clone(), torch.zeros((), dtype=torch.float64, device=device)
    a = m / sv.dt ** 2
    for i in range(sv.steps):
        laplace = f.conv2d(u[:, None], lap, padding=2)[:, 0]
        new = (laplace + a * (2 * u - u_prev) + damp * u_prev) / (a + damp)
        new = new + sv.dt ** 2 * float(sv.wavelet[i]) * src / m
        u_prev, u = u, new
        r = u[:, sv.rec_x, sv.rec_z[0]:sv.rec_z[1]] - obs[i]
        total = total + 0.5 * (r * r).sum()
    return total


def _importable(name):
    try:
        __import__(name)
        return True
    except Exception:  # noqa: BLE001 - a broken install is as good as none here
        return False


def _gpu():
    if not _importable("cupy"):
        return False
    import cupy

    try:
        cupy.zeros(1)
        return True
    except Exception:  # noqa: BLE001
        return False


UNROLL = 10  # the unrolled variant's steps a body (checkpoint_steps' unroll)


def run(steps=200, snapshots=None, rounds=5, n=101, nbl=40, nshots=5, rec_offset=None, cluster=False,
        checkpointed=True, start_velocity=None):
    """``cluster``: also the checkpointed gradient on a LocalCluster of 2 worker processes
    (``daskgrad_localcluster_checkpointed``), interleaved with the others.  ``start_velocity``: the
    starting model's (default: the background's; a short run on a large grid, whose wave never
    reaches the model's anomaly, needs another one for a gradient that is not zero)."""
    import fwi

    import daskgrad as dg

    snapshots = snapshots or fwi.default_snapshots(steps)
    sv = fwi.survey(n=n, nbl=nbl, nshots=nshots, steps=steps)
    if rec_offset is not None:  # the receivers a few cells from the sources: a short run reaches them
        sv.rec_x = sv.src[0][0] + rec_offset
    vp_true = fwi.camembert(n)
    start = np.full(vp_true.shape, start_velocity or fwi.BACKGROUND)
    variants, grads, recording, tasks, first = {}, {}, {}, {}, {}

    def daskgrad_variant(name, device, snaps, client=None, unroll=1):
        fwd = fwi.Modelling(sv, device=device)
        d_obs = fwd.shot_records(fwd.slowness(vp_true))

        def run_():
            if client is not None:
                with client.as_current():
                    return local_run()
            return local_run()

        def local_run():
            t0 = time.perf_counter()
            m = fwd.slowness(start, requires_grad=True)
            loss = fwd.misfit(m, d_obs, snaps, unroll)
            recording.setdefault(name, []).append(time.perf_counter() - t0)
            with dg.testing.submissions(graphs=True) as seen:
                loss.backward()
            tasks[name] = sum(len(a.__dask_graph__()) for a in seen.graphs[0][:1])
            return m.grad.numpy()

        times = []
        for _ in range(2):  # its first two gradients: lowered (the second keeps a template)
            t0 = time.perf_counter()
            run_()
            times.append(time.perf_counter() - t0)
        first[name] = times
        return run_, d_obs

    variants["daskgrad_cpu"], d_obs_np = daskgrad_variant("daskgrad_cpu", "cpu", None)
    if checkpointed:
        variants["daskgrad_cpu_checkpointed"] = daskgrad_variant("daskgrad_cpu_checkpointed", "cpu", snapshots)[0]
        if steps >= 2 * UNROLL:  # blocks of UNROLL steps, about sqrt(blocks) snapshots
            name = f"daskgrad_cpu_checkpointed_unroll{UNROLL}"
            variants[name] = daskgrad_variant(name, "cpu", fwi.default_snapshots(steps // UNROLL), unroll=UNROLL)[0]
    if _gpu():
        variants["daskgrad_cuda"] = daskgrad_variant("daskgrad_cuda", "cuda", None)[0]
        variants["daskgrad_cuda_checkpointed"] = daskgrad_variant("daskgrad_cuda_checkpointed", "cuda",
                                                                  snapshots)[0]
    d_obs = d_obs_np  # (a NumPy array: shot_records reads it to the host)
    if _importable("torch"):
        import torch

        devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
        for device in devices:
            def torch_run(device=device):
                m = torch.tensor(1.0 / start ** 2, dtype=torch.float64, device=device, requires_grad=True)
                torch_misfit(torch, sv, m, d_obs, device).backward()
                return m.grad.cpu().numpy()
            variants[f"pytorch_{device}"] = torch_run
    times = {k: [] for k in variants}
    for r in range(rounds + 1):
        for k, fn in variants.items():
            t0 = time.perf_counter()
            grads[k] = fn()
            if r:  # round 0 warms up
                times[k].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    updates = sv.nshots * int(np.prod(sv.shape)) * steps * 2
    out = {"grid": list(sv.shape), "shots": sv.nshots, "steps": steps, "snapshots": snapshots, "rounds": rounds,
           "seconds": med, "updates_per_second": {k: updates / v for k, v in med.items()},
           "first_seconds": first,
           "client_microseconds_per_step": {k: 1e6 * statistics.median(v) / steps for k, v in recording.items()},
           "tasks_per_step": {k: v / steps for k, v in tasks.items()}}
    ref = grads.get("pytorch_cpu")
    if ref is not None:
        scale = np.abs(ref).max() or 1.0  # (a wave that has not reached the receivers: no gradient)
        out["max_abs_difference_vs_pytorch_cpu"] = {k: float(np.abs(g - ref).max() / scale) for k, g in grads.items()}
        out["ratio_vs_pytorch_cpu"] = {k: v / med["pytorch_cpu"] for k, v in med.items()}
        out["gradient_norm_pytorch_cpu"] = float(np.linalg.norm(ref))
    if "pytorch_cuda" in med:
        out["ratio_vs_pytorch_cuda"] = {k: v / med["pytorch_cuda"] for k, v in med.items()}
    if cluster:
        out["localcluster"] = _on_a_local_cluster(daskgrad_variant, variants["daskgrad_cpu_checkpointed"],
                                                  snapshots, rounds, grads, first, tasks, steps)
    return out


def _on_a_local_cluster(daskgrad_variant, threaded, snapshots, rounds, grads, first, tasks, steps):
    """The checkpointed gradient on a LocalCluster of 2 worker processes against the same on threads,
    in rounds of their own after the others (idle worker processes slowed PyTorch's rounds 1.5x:
    its OpenMP threads wait spinning), as the issue's target reads: the cluster's time over the
    threads'."""
    import daskgrad as dg

    client = dg.connect("local", n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                        set_as_default=False)  # (not the default client: the threaded variant stays threaded)
    try:
        name = "daskgrad_localcluster_checkpointed"
        pair = {name: daskgrad_variant(name, "cpu", snapshots, client)[0], "daskgrad_cpu_checkpointed": threaded}
        times = {k: [] for k in pair}
        for r in range(rounds + 1):
            for k, fn in pair.items():
                t0 = time.perf_counter()
                g = fn()
                if r:
                    times[k].append(time.perf_counter() - t0)
        ref = grads["daskgrad_cpu_checkpointed"]
        med = {k: statistics.median(v) for k, v in times.items()}
        return {"workers": 2, "seconds": med, "ratio_vs_threads": med[name] / med["daskgrad_cpu_checkpointed"],
                "first_seconds": first[name], "tasks_per_step": tasks[name] / steps,
                "max_abs_difference_vs_threads": float(np.abs(g - ref).max() / (np.abs(ref).max() or 1.0))}
    finally:
        client.close()
        client.cluster.close()


def run_all(steps=200):
    import fwi

    """The tutorial grid (threads, and a LocalCluster of 2 processes) and, under ``large_grid``, the
    1,001^2 (+ the layer) x 8-shot grid's plain gradient at 20 steps (the receivers 3 cells from the
    sources, so that 20 steps reach them; the start 5% above the background), 2 rounds."""
    out = run(steps=steps, cluster=True)
    out["large_grid"] = run(steps=20, rounds=2, n=1001, nshots=8, rec_offset=3, checkpointed=False,
                            start_velocity=1.05 * fwi.BACKGROUND)
    return out


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    out = run_all(steps=steps)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "fwi_vs_torch.json"), "w") as f:
        json.dump(out, f, indent=2)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
