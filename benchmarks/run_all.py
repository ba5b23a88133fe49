"""The benchmark suite (``make bench``): every comparison side by side in one run.

    python benchmarks/run_all.py [component ...]      BENCH_QUICK=1 for a smoke run at tiny sizes

Components (each a function below, each returning a JSON-able dict):

* ``logreg``     logistic-regression gradient, 2M x 50 float32 in 20 chunks: daskgrad vs a hand-written
                 dask gradient, a hand-fused one, PyTorch and JAX (when importable), with the default
                 BLAS threading and with one BLAS thread per dask task;
* ``mlp``        a 2-layer MLP training step (200k x 20 -> 64 -> 3, cross-entropy, 10 chunks) vs PyTorch;
* ``chain``      a 50-op elementwise chain and its gradient vs plain dask;
* ``graph_cost`` client-side cost of building forward + backward, and task counts, 10 to 100,000 chunks;
* ``out_of_core`` backward over lazily generated data 3x a LocalCluster's memory: peak worker memory
                 and estimate_memory's prediction;
* ``cluster``    logreg and MLP on a LocalCluster of 2 worker processes vs the threaded scheduler;
* ``overhead``   a training step on tiny chunks (pure graph-building and scheduling cost), 20 to 2,000
                 chunks, vs the same step in hand-written dask: ms per chunk and tasks per step; and at
                 200 chunks on a LocalCluster (threads, processes), the step cache on vs off: ms per
                 step, tasks per step, scheduler time per task (benchmarks/step_cache_cluster.py);
* ``loop``       training-loop flatness: late steps vs early steps of the plain loop, and graph sizes;
* ``glm``        L-BFGS-B on dask-glm's benchmark problem (make_classification, 1000 x 100, 10 chunks):
                 ``daskgrad.optimize.minimize`` vs dask-glm's ``lbfgs`` and SciPy on NumPy, threaded
                 scheduler and a LocalCluster: seconds, iterations, final loss (goal <= 0.1 x dask-glm);
* ``protection`` the cost of keeping two copies of every kept value on a cluster (``daskgrad.copies``
                 2 vs 1): an nn + Adam step and the plain loop, and TV denoising's managed memory
                 for a 1 GB unknown (benchmarks/bench_protection.py);
* ``revolve``    checkpointed time stepping (``checkpoint_steps``), 1,000 steps with 20 snapshots and more:
                 steps run on the workers against Revolve's binomial count, peak memory, its prediction
                 (benchmarks/revolve.py);
* ``fwi``        a checkpointed FWI gradient (examples/fwi.py) on a LocalCluster worker whose memory limit
                 is below what the uncheckpointed backward would hold: time, peak worker memory against
                 estimate_memory's prediction, recompute factor (benchmarks/bench_fwi.py);
* ``big_state``  checkpoint_steps of a 2-D wave equation whose state is larger than one worker's memory
                 limit, in 32 row bands across 4 workers: time, peak per worker (RSS, managed, spilled) against
                 snapshots x state chunk and estimate_memory, steps run vs Revolve's count
                 (benchmarks/bench_big_state.py);
* ``memory_soak`` 2,000 steps of the plain loop on a cluster: scheduler, worker and client memory,
                 scheduler tasks and spans, with and without daskgrad's span (benchmarks/memory_soak.py);
* ``deterministic`` ``use_deterministic_algorithms(True)`` on a 16-chunk ``X.T @ (X @ w)`` gradient: seconds
                 with the mode off and on (3 worker processes; the threaded scheduler), and the distinct bit
                 patterns of repeated runs in each mode;
* ``programs``   five small public example programs (PyTorch's two_layer_net_autograd and regression example,
                 HIPS autograd's logistic_regression, neural_net with adam, rosenbrock), each in its original
                 framework and ported to daskgrad: seconds per iteration, the ratio, results equal to rtol 1e-10
                 (benchmarks/bench_programs.py);
* ``plain_loop`` ms per chunk of the plain-loop step (``overhead``'s) on 200 tiny chunks, no compile, and
                 PyTorch's time for the same step on the whole data;
* ``checkpoint_block`` README's checkpoint_steps example (1,000 steps, 20 snapshots) and a 32x32 diffusion in
                 4 chunks: seconds for forward + backward + reading c.grad, calls of ``step``, PyTorch's plain loop;
* ``demo_step``  seconds per training step of ``make demo``'s job (examples/demo.py on its LocalCluster) after
                 its first two epochs (timed apart: they make the dataset and the step's template) and
                 of the same step in PyTorch on the same data;
* ``minibatch_loop`` seconds per step of demo.py's model over 96 minibatches of 500 rows of a held dataset in
                 chunks of 2,000 rows, on threads, and of the same loop in PyTorch; programs lowered after
                 the first epoch;
* ``package``    non-blank lines of daskgrad/**/*.py.

Timings are medians of interleaved rounds (the variants run round-robin, so drift on a shared
machine hits all alike).  Writes benchmarks/results/suite.json and one PNG per component.
"""
from __future__ import annotations

import contextlib
import json
import os
import platform
import statistics
import sys
import time

# NumPy's OpenBLAS threads spin ~2**28 cycles (~0.1 s) after each BLAS call, on the cores PyTorch's
# threads then need: measured here, a 0.75 ms PyTorch step took 14-21 ms right after one NumPy matmul.
# A user runs one framework, not both in one process; 2**4 cycles stops that without slowing either.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")  # (read when NumPy loads OpenBLAS: before the import)

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
QUICK = os.environ.get("BENCH_QUICK", "") not in ("", "0")
RESULTS = os.environ.get("BENCH_RESULTS", os.path.join(HERE, "results"))


def interleaved(fns, rounds):
    """Median seconds per variant over ``rounds`` rounds, after one warm-up each.

    Each round runs the variants in a new (seeded) random order: a variant run right after
    PyTorch pays for PyTorch's spinning OpenMP threads, and one run first after another's memory
    was freed pays more (measured: the same MLP step took 1.8x the time in such a place).
    BENCH_QUICK=1 runs one round: a smoke run checks that every variant runs and reports, not its
    median."""
    import random

    if QUICK:
        rounds = 1
    for fn in fns.values():
        fn()
    times = {k: [] for k in fns}
    names, rng = list(fns), random.Random(0)
    for _ in range(rounds):
        rng.shuffle(names)
        for k in names:
            t0 = time.perf_counter()
            fns[k]()
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


@contextlib.contextmanager
def blas_threads(n):
    """``n`` BLAS threads (None: the library's default, what users get)."""
    if n is None:
        yield
        return
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=n, user_api="blas"):
        yield


def _importable(name):
    import importlib.util

    return importlib.util.find_spec(name) is not None


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _jax():
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None, None
    return jax, jnp


# ------------------------------------------------------------------ (a) logistic regression
def _sigmoid(z):
    return 1 / (1 + np.exp(-z))


def _chunk_grad(X, y, w):
    return (X.T @ (_sigmoid(X @ w) - y))[None]


def logreg_variants(Xn, yn, wn, nchunks, blas=None):
    """{name: zero-argument function computing the gradient}; data already in memory."""
    import dask
    import dask.array as da

    import daskgrad as dg

    n = Xn.shape[0]
    rows = -(-n // nchunks)
    X, y = dg.from_array(Xn, chunks=(rows, Xn.shape[1])).persist(), dg.from_array(yn, chunks=rows).persist()
    Xd, yd, wd = X.array, y.array, da.from_array(wn, chunks=-1)
    variants = {}

    def limited(fn):
        def run():
            with blas_threads(blas):
                return fn()
        return run

    def run_dask():
        return (Xd.T @ (1 / (1 + da.exp(-(Xd @ wd))) - yd) / n).compute()
    variants["dask_handwritten"] = limited(run_dask)

    def run_fused():
        parts = da.blockwise(_chunk_grad, "ij", Xd, "ij", yd, "i", wd, "j", adjust_chunks={"i": 1},
                             concatenate=True, dtype=np.float32, meta=np.empty((0, 0), np.float32))
        return (parts.sum(axis=0) / n).compute()
    variants["dask_hand_fused"] = limited(run_fused)

    def run_daskgrad():
        w = dg.from_array(wn, chunks=-1, requires_grad=True)
        dg.binary_cross_entropy_with_logits(X @ w, y).backward()
        return w.grad.numpy()
    variants["daskgrad"] = limited(run_daskgrad)

    grad = dg.compile(dg.func.grad(lambda w: dg.binary_cross_entropy_with_logits(X @ w, y)))

    def run_daskgrad_compiled():  # the same gradient, traced once and replayed (daskgrad.compile)
        return grad(dg.from_array(wn, chunks=-1)).numpy()
    variants["daskgrad_compiled"] = limited(run_daskgrad_compiled)

    def run_daskgrad_unfused():  # chunk fusion off: each chunk of X read by two tasks
        with dask.config.set({"daskgrad.fuse-chunks": False}):
            return run_daskgrad()
    variants["daskgrad_unfused"] = limited(run_daskgrad_unfused)

    def run_daskgrad_row_blocks():  # each chunk read once from memory, in blocks of 2 MiB (opt-in)
        with dask.config.set({"daskgrad.row-block-bytes": "2 MiB"}):
            return run_daskgrad()
    variants["daskgrad_row_blocks"] = limited(run_daskgrad_row_blocks)
    return variants


def logreg_references(Xn, yn, wn):
    refs = {}
    torch = _torch()
    if torch is not None:
        Xt, yt = torch.from_numpy(Xn), torch.from_numpy(yn)

        def run_torch():
            wt = torch.from_numpy(wn.copy()).requires_grad_()
            torch.nn.functional.binary_cross_entropy_with_logits(Xt @ wt, yt).backward()
            return wt.grad.numpy()
        refs["pytorch_cpu"] = run_torch
    jax, jnp = _jax()
    if jax is not None:
        Xj, yj = jnp.asarray(Xn), jnp.asarray(yn)

        def loss(w):
            z = Xj @ w
            return jnp.mean(jnp.maximum(z, 0) - z * yj + jnp.log1p(jnp.exp(-jnp.abs(z))))
        g = jax.jit(jax.grad(loss))

        def run_jax():
            return np.asarray(g(jnp.asarray(wn)).block_until_ready())
        refs["jax_cpu_jit"] = run_jax
    return refs


def logreg(n=2_000_000, d=50, nchunks=20, rounds=7):
    if QUICK:
        n, d, nchunks, rounds = 20_000, 10, 4, 2
    rng = np.random.default_rng(0)
    Xn = rng.standard_normal((n, d), dtype=np.float32)
    yn = (rng.random(n) < 0.5).astype(np.float32)
    wn = (0.01 * rng.standard_normal(d)).astype(np.float32)
    import dask
    import dask.array as da

    out = {"problem": f"logistic-regression gradient, {n}x{d} float32, {nchunks} chunks, threaded scheduler",
           "notes": []}
    refs = logreg_references(Xn, yn, wn)
    if "jax_cpu_jit" not in refs:
        out["notes"].append("jax not importable: skipped")
    if "pytorch_cpu" not in refs:
        out["notes"].append("torch not importable: skipped")
    fns = dict(refs)
    with dask.config.set(scheduler="threads"):
        modes = [("default_blas", None)]
        if _importable("threadpoolctl"):
            modes.append(("one_blas_thread_per_task", 1))
        else:
            out["notes"].append("threadpoolctl not importable: one-BLAS-thread mode skipped")
        for mode, blas in modes:
            fns.update({f"{k}[{mode}]": v for k, v in logreg_variants(Xn, yn, wn, nchunks, blas=blas).items()})
        ref = fns["dask_handwritten[default_blas]"]()
        for k, fn in fns.items():
            np.testing.assert_allclose(fn(), ref, rtol=3e-3, atol=1e-6, err_msg=k)
        Xd = da.from_array(Xn, chunks=(-(-n // nchunks), d)).persist()

        def read_x():  # one read of X: every chunk summed over its rows, on the same threads
            return Xd.sum(axis=0).compute()
        fns["one_read_of_x"] = read_x
        seconds = interleaved(fns, rounds)
    out["seconds"] = seconds
    base = seconds.get("pytorch_cpu")
    if base:
        out["ratio_to_pytorch"] = {k: v / base for k, v in seconds.items()}
    for mode, _ in modes:
        out[f"daskgrad_vs_dask_handwritten[{mode}]"] = (seconds[f"daskgrad[{mode}]"]
                                                         / seconds[f"dask_handwritten[{mode}]"])
        out[f"reads_of_x[{mode}]"] = seconds[f"daskgrad[{mode}]"] / seconds["one_read_of_x"]
        out[f"reads_of_x_compiled[{mode}]"] = seconds[f"daskgrad_compiled[{mode}]"] / seconds["one_read_of_x"]
        out[f"compiled_vs_daskgrad[{mode}]"] = seconds[f"daskgrad_compiled[{mode}]"] / seconds[f"daskgrad[{mode}]"]
        out[f"row_blocks_vs_whole_chunks[{mode}]"] = (seconds[f"daskgrad_row_blocks[{mode}]"]
                                                       / seconds[f"daskgrad[{mode}]"])
    _bars("logreg", out["problem"], seconds)
    return out


# ------------------------------------------------------------------ (b) MLP training step
def mlp_problem(n, d, h, c, nchunks, seed=0):
    rng = np.random.default_rng(seed)
    Xn = rng.standard_normal((n, d), dtype=np.float32)
    tn = rng.integers(0, c, n)
    params = [(rng.standard_normal((d, h)) / np.sqrt(d)).astype(np.float32), np.zeros(h, np.float32),
              (rng.standard_normal((h, c)) / np.sqrt(h)).astype(np.float32), np.zeros(c, np.float32)]
    return Xn, tn, params


def mlp_daskgrad_step(Xn, tn, params, nchunks, lr=0.1, persisted=False):
    """A zero-argument training step written as a user would: functional ops, backward, p -= lr * p.grad."""
    import daskgrad as dg

    rows = -(-Xn.shape[0] // nchunks)
    X, t = dg.from_array(Xn, chunks=(rows, Xn.shape[1])), dg.from_array(tn, chunks=rows)
    if persisted:
        X, t = X.persist(), t.persist()
    w1, b1, w2, b2 = ps = [dg.from_array(p.copy(), chunks=-1, requires_grad=True) for p in params]

    def step():
        loss = dg.cross_entropy(dg.relu(X @ w1 + b1) @ w2 + b2, t)
        loss.backward()
        with dg.no_grad():
            for p in ps:
                p -= lr * p.grad
                p.grad = None
        return loss
    return step, ps


def mlp_torch_step(Xn, tn, params, lr=0.1):
    torch = _torch()
    X, t = torch.from_numpy(Xn), torch.from_numpy(tn)
    w1, b1, w2, b2 = ps = [torch.from_numpy(p.copy()).requires_grad_() for p in params]

    def step():
        loss = torch.nn.functional.cross_entropy(torch.relu(X @ w1 + b1) @ w2 + b2, t)
        loss.backward()
        with torch.no_grad():
            for p in ps:
                p -= lr * p.grad
                p.grad = None
        return loss
    return step, ps


def mlp(n=200_000, d=20, h=64, c=3, nchunks=10, rounds=7):
    if QUICK:
        n, nchunks, rounds = 2_000, 2, 2
    import dask

    Xn, tn, params = mlp_problem(n, d, h, c, nchunks)
    out = {"problem": f"2-layer MLP training step, {n}x{d} -> {h} -> {c}, cross-entropy, {nchunks} chunks, "
                      "threaded scheduler (forward, backward, p -= lr * p.grad)"}
    fns = {}
    if _torch() is not None:
        fns["pytorch_cpu"], _ = mlp_torch_step(Xn, tn, params)
    with dask.config.set(scheduler="threads"):
        fns["daskgrad[default_blas]"], ps = mlp_daskgrad_step(Xn, tn, params, nchunks)
        step0, ps0 = mlp_daskgrad_step(Xn, tn, params, nchunks)

        def unfused():  # chunk fusion off
            with dask.config.set({"daskgrad.fuse-chunks": False}):
                return step0()
        fns["daskgrad_unfused[default_blas]"], ps = unfused, ps + ps0
        if _importable("threadpoolctl"):
            step1, ps1 = mlp_daskgrad_step(Xn, tn, params, nchunks)

            def one_blas_thread():
                with blas_threads(1):
                    return step1()
            fns["daskgrad[one_blas_thread_per_task]"], ps = one_blas_thread, ps + ps1
        seconds = interleaved(fns, rounds)
        for p in ps:
            assert np.all(np.isfinite(p.detach().numpy()))
    out["seconds"] = seconds
    if "pytorch_cpu" in seconds:
        out["daskgrad_over_pytorch"] = {k: v / seconds["pytorch_cpu"] for k, v in seconds.items()}
    _bars("mlp", out["problem"], seconds)
    return out


# ------------------------------------------------------------------ (c) elementwise chain
def _chain_np(x, ops, xp):
    """The chain on arrays of module ``xp`` (numpy or dask.array) with its derivative, forward mode."""
    y, dy = x, 1.0
    for i in range(ops):
        if i % 2:
            y, dy = y * 0.9 + 0.05, dy * 0.9
        else:
            y = xp.tanh(y)
            dy = dy * (1 - y * y)
    return y, dy


def chain(n=20_000_000, ops=50, nchunks=20, rounds=5):
    """1e8 elements in the brief; 2e7 here (x, its gradient and the temporaries of 2 threads fit
    comfortably and one round stays ~1 s on 2 cores); the per-element work is the same."""
    if QUICK:
        n, nchunks, rounds = 20_000, 2, 2
    import dask
    import dask.array as da

    import daskgrad as dg

    xn = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    xd = da.from_array(xn, chunks=-(-n // nchunks)).persist()
    x = dg.from_array(xd)

    def daskgrad_chain(t):
        for i in range(ops):
            t = t * 0.9 + 0.05 if i % 2 else dg.tanh(t)
        return t

    def run_dask_forward():
        return _chain_np(xd, ops, da)[0].sum().compute()

    def run_daskgrad_forward():
        return daskgrad_chain(x).sum().item()

    def run_dask_gradient():  # hand-derived forward-mode gradient of sum(chain(x)), one dask graph
        return _chain_np(xd, ops, da)[1].compute()

    def run_daskgrad_gradient():
        xg = dg.from_array(xd, requires_grad=True)
        daskgrad_chain(xg).sum().backward()
        return xg.grad.numpy()

    fns = {"dask_forward": run_dask_forward, "daskgrad_forward": run_daskgrad_forward,
           "dask_handwritten_gradient": run_dask_gradient, "daskgrad_backward": run_daskgrad_gradient}
    with dask.config.set(scheduler="threads"):
        np.testing.assert_allclose(run_daskgrad_gradient(), run_dask_gradient(), rtol=1e-4, atol=1e-6)
        seconds = interleaved(fns, rounds)
    out = {"problem": f"{ops}-op elementwise chain (tanh, affine alternating) on {n:.0e} float32 elements, "
                      f"{nchunks} chunks, threaded scheduler", "seconds": seconds,
           "forward_ratio": seconds["daskgrad_forward"] / seconds["dask_forward"],
           "gradient_ratio": seconds["daskgrad_backward"] / seconds["dask_handwritten_gradient"]}
    if not QUICK:
        out["note"] = "scaled down from 1e8 to 2e7 elements to keep the suite within ~10 minutes on 2 cores"
    _bars("chain", out["problem"], seconds)
    return out


# ------------------------------------------------------------------ (d) graph cost
def _lowered(tensors):
    """The dask arrays a submission of ``tensors`` would send: their program instantiated (lowered and
    optimized the first times it is seen, an instance of its template after)."""
    from daskgrad import _dask as door

    return door.instantiate(door.Program.of([t._storage.value for t in tensors]), local=True)


def graph_cost(sizes=(10, 100, 1_000, 10_000, 100_000), budget_s=90.0):
    """Client-side cost of one backward before anything runs: building the forward and reverse
    graphs and optimizing the submission (what runtime does), with the task counts."""
    if QUICK:
        sizes, budget_s = (10, 100), 20.0
    from dask.base import collections_to_expr

    import daskgrad as dg

    rows = []
    spent = 0.0
    for nchunks in sizes:
        X = dg.zeros(nchunks * 4, 8, chunks=(4, 8))
        y = dg.zeros(nchunks * 4, chunks=4)
        t0 = time.perf_counter()
        w = dg.from_array(np.zeros(8, dtype="float32")).requires_grad_()  # a parameter's values, in memory
        loss = dg.binary_cross_entropy_with_logits(X @ w, y)
        t1 = time.perf_counter()
        (g,) = dg.grad(loss, [w], lazy=True)
        t2 = time.perf_counter()
        (opt_g, opt_loss) = _lowered([g, loss])  # the program lowered to dask and optimized
        t3 = time.perf_counter()
        _lowered([g, loss])  # (seen twice: cached as a template)
        # the task graph the scheduler gets (Blockwise layers expand here, or in chunk fusion)
        tasks = len(dict(collections_to_expr([opt_g, opt_loss], optimize_graph=False).__dask_graph__()))
        t4 = time.perf_counter()
        raw_tasks = len(dict(g.array.__dask_graph__()))
        # the next step of a loop: the same structure on a new parameter, its graph replayed
        hits = dg.step_cache_info()["hits"]
        r0 = time.perf_counter()
        w2 = dg.from_array(np.full(8, 0.5, dtype="float32")).requires_grad_()
        loss2 = dg.binary_cross_entropy_with_logits(X @ w2, y)
        (g2,) = dg.grad(loss2, [w2], lazy=True)
        _lowered([g2, loss2])
        r1 = time.perf_counter()
        rows.append({"chunks": nchunks, "forward_s": t1 - t0, "backward_build_s": t2 - t1,
                     "optimize_s": t3 - t2, "materialize_s": t4 - t3, "total_s": t4 - t0,
                     "repeated_step_s": r1 - r0, "repeated_over_first": (r1 - r0) / (t3 - t0),
                     "repeated_step_replayed": dg.step_cache_info()["hits"] > hits,
                     "tasks_unoptimized": raw_tasks, "tasks_submitted": tasks})
        spent += time.perf_counter() - t0
        if spent > budget_s:
            break
    out = {"problem": "logistic-regression loss over n chunks: build forward, build reverse graph, optimize; "
                      "then the same step on a new parameter (its optimized graph replayed: repeated_step_s)",
           "rows": rows, "largest_measured": rows[-1]["chunks"], "goal_repeated_over_first": 0.1}
    if rows[-1]["chunks"] != sizes[-1]:
        out["note"] = f"stopped after {rows[-1]['chunks']} chunks: the time budget ({budget_s} s) was spent"
    _plot_graph_cost(out)
    return out


# ------------------------------------------------------------------ (d') depth
def depth(sizes=(250, 500, 1_000, 2_000), budget_s=120.0):
    """Backward through a chain of n recorded ops (4 elements, 2 chunks: all graph, no data) vs
    plain dask building and computing the same n-op forward.  Goal: within 2x at 2,000 ops."""
    if QUICK:
        sizes, budget_s = (50, 100), 20.0
    import dask.array as da

    import daskgrad as dg

    rows, spent = [], 0.0
    for n in sizes:
        t0 = time.perf_counter()
        y = da.ones(4, chunks=2)
        for _ in range(n):
            y = da.sin(y)
        y.sum().compute(scheduler="threads")
        t1 = time.perf_counter()
        x = dg.ones(4, chunks=2, dtype="float64", requires_grad=True)
        z = x
        for _ in range(n):
            z = dg.sin(z)
        loss = z.sum()
        t2 = time.perf_counter()
        loss.backward()
        t3 = time.perf_counter()
        rows.append({"ops": n, "dask_forward_build_and_compute_s": t1 - t0, "daskgrad_forward_build_s": t2 - t1,
                     "daskgrad_backward_s": t3 - t2, "backward_over_dask_forward": (t3 - t2) / (t1 - t0)})
        spent += t3 - t0
        if spent > budget_s:
            break
    return {"problem": "chain of n sin ops on 4 elements in 2 chunks: backward() vs plain dask forward "
                       "(build + compute)", "rows": rows}


# ------------------------------------------------------------------ (e) out of core
def out_of_core():
    import out_of_core as ooc

    if QUICK:
        r = ooc.run(n=200_000, d=10, nchunks=10, memory_limit=400e6)
    else:
        r = ooc.run(n=22_500_000, d=20, nchunks=150, memory_limit=300e6)
    r.pop("grad")
    # the prediction is the bytes of task results held at once on one thread; the measured number
    # each worker adds over its idle process (RSS) includes allocator slack and NumPy temporaries
    r["measured_peak_over_baseline"] = max(w["peak_rss"] - r["baseline_rss"][a] for a, w in r["workers"].items())
    return r


# ------------------------------------------------------------------ (f) cluster vs threads
def _logreg_generated(n, d, nchunks, wn):
    """daskgrad's logreg gradient on data generated where it runs (the workers' memory for a
    cluster: 400 MB are not shipped through the scheduler)."""
    import daskgrad as dg

    rows = -(-n // nchunks)
    dg.manual_seed(0)
    X, y = dg.randn(n, d, chunks=(rows, d)).persist(), dg.rand(n, chunks=rows).persist()

    def run():
        w = dg.from_array(wn, chunks=-1, requires_grad=True)
        dg.binary_cross_entropy_with_logits(X @ w, y).backward()
        return w.grad.numpy()
    return run


def cluster(rounds=5):
    if QUICK:
        rounds = 1
    import dask
    from distributed import Client, LocalCluster

    n, d, nchunks = (20_000, 10, 4) if QUICK else (2_000_000, 50, 20)
    wn = (0.01 * np.random.default_rng(0).standard_normal(d)).astype(np.float32)
    mn, mchunks = (2_000, 2) if QUICK else (200_000, 10)
    mX, mt, mparams = mlp_problem(mn, 20, 64, 3, mchunks)
    out = {"problem": f"logreg gradient ({n}x{d}, {nchunks} chunks) and MLP step ({mn}x20->64->3, {mchunks} "
                      "chunks): LocalCluster of 2 worker processes x 1 thread vs the threaded scheduler"}
    with dask.config.set(scheduler="threads"):
        fns = {"logreg_threads": _logreg_generated(n, d, nchunks, wn),
               "mlp_threads": mlp_daskgrad_step(mX, mt, mparams, mchunks, persisted=True)[0]}
        out["threads_seconds"] = interleaved(fns, rounds)
    # quick mode (the smoke test) starts in-process workers: process start-up would dominate its time
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=not QUICK, dashboard_address=None,
                      worker_dashboard_address=None) as lc, Client(lc):
        fns = {"logreg_cluster": _logreg_generated(n, d, nchunks, wn),
               "mlp_cluster": mlp_daskgrad_step(mX, mt, mparams, mchunks, persisted=True)[0]}
        out["cluster_seconds"] = interleaved(fns, rounds)
    s = {**out["threads_seconds"], **out["cluster_seconds"]}
    out["cluster_over_threads"] = {"logreg": s["logreg_cluster"] / s["logreg_threads"],
                                   "mlp": s["mlp_cluster"] / s["mlp_threads"]}
    out["note"] = ("cluster rounds run after the threaded ones (a cluster cannot be interleaved with "
                   "the threaded scheduler cheaply); data is in (worker) memory before timing, the logreg data "
                   "generated there")
    _bars("cluster", out["problem"], s)
    return out


# ------------------------------------------------------------------ (g) training-loop flatness
def loop(steps=310, n=20_000, d=10, nchunks=4, lr=0.05):
    """The plain loop; late steps (last 100) vs early ones (10-110), and the graph each step sends."""
    if QUICK:
        steps = 30
    import dask

    import daskgrad as dg
    from daskgrad import runtime

    window = min(100, steps // 3)
    rng = np.random.default_rng(0)
    Xn = rng.standard_normal((n, d)).astype(np.float32)
    yn = (Xn @ np.linspace(-1, 1, d, dtype=np.float32)).astype(np.float32)
    X, y = dg.from_array(Xn, chunks=(n // nchunks, d)), dg.from_array(yn, chunks=n // nchunks)
    w = dg.zeros(d, requires_grad=True)
    tasks = []

    def counted(phase, arrays):  # the size of the first and last submitted graphs, after optimization
        if len(times) in (0, steps - 1):
            tasks.append(len(arrays[0].__dask_graph__()))

    times = []
    with runtime.observe(counted), dask.config.set(scheduler="threads"):
        for _ in range(steps):
            t0 = time.perf_counter()
            loss = ((X @ w - y) ** 2).mean()
            loss.backward()
            with dg.no_grad():
                w -= lr * w.grad
            w.grad = None
            times.append(time.perf_counter() - t0)
        final = loss.item()
    early = statistics.median(times[10:10 + window])
    late = statistics.median(times[-window - 1:-1])  # the last step also counted its graph
    out = {"problem": f"loss = ((X @ w - y) ** 2).mean(); loss.backward(); w -= lr * w.grad; {steps} steps, "
                      f"X {n}x{d} in {nchunks} chunks, threaded scheduler",
           "early_window": [10, 10 + window], "late_window": [steps - window - 1, steps - 1],
           "early_step_s": early, "late_step_s": late, "late_over_early": late / early, "goal": 1.3,
           "tasks_per_submission_first_last": [tasks[0], tasks[-1]],
           "w_graph_keys_at_end": len(w.array.__dask_graph__()), "final_loss": final,
           "step_times_s": times}
    out["scheduler_keys"] = _loop_scheduler_keys(Xn, yn, lr, 12 if QUICK else 150)
    _plot_loop(out)
    return out


def _loop_scheduler_keys(Xn, yn, lr, steps):
    """The same loop on a (in-process) distributed cluster: keys the scheduler holds after a few
    steps and at the end; flat means the parameter's lineage is not kept alive."""
    import daskgrad as dg
    from distributed import Client, LocalCluster

    counts = {}
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as lc, \
            Client(lc) as client:
        n, d = Xn.shape
        X, y = dg.from_array(Xn, chunks=(n // 4, d)), dg.from_array(yn, chunks=n // 4)
        w = dg.zeros(d, requires_grad=True)
        for i in range(steps):
            loss = ((X @ w - y) ** 2).mean()
            loss.backward()
            with dg.no_grad():
                w -= lr * w.grad
            w.grad = None
            if i + 1 in (10, steps):
                time.sleep(0.2)  # releases reach the scheduler asynchronously
                counts[f"after_step_{i + 1}"] = client.run_on_scheduler(
                    lambda dask_scheduler: len(dask_scheduler.tasks))
    return counts


# ------------------------------------------------------------------ (g') per-step overhead
def overhead(sizes=(20, 200, 2_000), rows=10, d=10, lr=0.1):
    """A logistic-regression training step on tiny chunks (``rows`` x ``d``), so the step is
    nearly all graph building and scheduling: daskgrad's plain loop vs the same step written by
    hand in dask, on the threaded scheduler; ms per chunk, and the tasks each step submits."""
    if QUICK:
        sizes = (20, 200)
    import dask
    import dask.array as da

    from dask._task_spec import DataNode, GraphNode

    import daskgrad as dg
    from daskgrad import runtime

    out = {"problem": f"logistic-regression step, chunks of {rows}x{d} float64, threaded scheduler: "
                      "loss.backward(); w -= lr * w.grad (daskgrad) vs the gradient formula in dask "
                      "and a NumPy update (hand-written)", "rows": []}
    for nchunks in sizes:
        rng = np.random.default_rng(0)
        Xn, yn = rng.standard_normal((nchunks * rows, d)), (rng.random(nchunks * rows) > 0.5) * 1.0
        X, y = dg.from_array(Xn, chunks=(rows, d)), dg.from_array(yn, chunks=rows)
        Xd, yd = da.from_array(Xn, chunks=(rows, d)), da.from_array(yn, chunks=rows)
        w = dg.zeros(d, dtype="float64", requires_grad=True)
        wn = [np.zeros(d)]

        def daskgrad_step():
            nonlocal w
            dg.binary_cross_entropy_with_logits(X @ w, y).backward()
            with dg.no_grad():
                w -= lr * w.grad
            w.grad = None

        def daskgrad_no_step_cache():  # every step built anew, as before the step cache
            with dask.config.set({"daskgrad.step-cache.enabled": False}):
                daskgrad_step()

        @dg.compile
        def compiled_update(v):  # the step as a function (JAX's style): traced once, then replayed
            return v - lr * dg.func.grad(lambda u: dg.binary_cross_entropy_with_logits(X @ u, y))(v)
        wc = [dg.zeros(d, dtype="float64")]

        def daskgrad_compiled_step():
            wc[0] = compiled_update(wc[0])

        def dask_step():
            p = 1 / (1 + da.exp(-(Xd @ wn[0])))
            wn[0] = wn[0] - lr * (Xd.T @ (p - yd) / len(yn)).compute()

        tasks = []

        def count(phase, arrays):  # tasks to run: the graph's keys less the chunks already in memory
            graph = dict(arrays[0].__dask_graph__())
            tasks.append(sum(isinstance(v, GraphNode) and not isinstance(v, DataNode) for v in graph.values()))

        with dask.config.set(scheduler="threads"):
            rounds = 3 if nchunks >= 2_000 or QUICK else 7
            for _ in range(3):  # steady state: the template is made at the second submission, instantiated after
                daskgrad_step()
                daskgrad_compiled_step()
            hits = dg.step_cache_info()["hits"]
            # each variant runs a few steps in a row, as a loop does: the first step after another
            # variant pays for its leftovers (BLAS threads still spinning, caches cold), not its own
            block = 1 if QUICK else 2 if nchunks >= 2_000 else 5

            def steps(fn):
                return lambda: [fn() for _ in range(block)]

            seconds = interleaved({"daskgrad": steps(daskgrad_step),
                                   "daskgrad_compiled": steps(daskgrad_compiled_step),
                                   "daskgrad_no_step_cache": steps(daskgrad_no_step_cache),
                                   "dask_handwritten": steps(dask_step)}, rounds)
            seconds = {k: v / block for k, v in seconds.items()}
            replayed = dg.step_cache_info()["hits"] - hits
            with runtime.observe(count):  # (not while timed: reading a replayed graph makes its tasks)
                daskgrad_step()
        out["rows"].append({"chunks": nchunks, "seconds": seconds,
                            "ms_per_chunk": {k: 1e3 * v / nchunks for k, v in seconds.items()},
                            "daskgrad_over_handwritten": seconds["daskgrad"] / seconds["dask_handwritten"],
                            "compiled_over_handwritten": seconds["daskgrad_compiled"] / seconds["dask_handwritten"],
                            "steps_replayed": replayed,
                            "tasks_per_step": tasks[-1], "tasks_per_chunk": tasks[-1] / nchunks})
    out["goal_ms_per_chunk"] = 0.1
    # the same step on a LocalCluster (2 workers), the step cache on vs off: client ms per step, tasks
    # per step, scheduler time per task (benchmarks/step_cache_cluster.py)
    import step_cache_cluster

    out["cluster"] = [step_cache_cluster.run(processes=p, nchunks=20 if QUICK else 200, rounds=1 if QUICK else 4)
                      for p in (False, True)]
    _plot_overhead(out)
    return out


# ------------------------------------------------------------------ (g'') L-BFGS vs dask-glm
def _glm_problem(n, d, chunksize):
    """dask-glm's benchmark problem (its ``make_classification``, seeded), in memory; the same recipe
    when dask-glm is missing.  Made once, so the threaded and cluster runs fit the same data."""
    import dask
    import dask.array as da

    da.random.seed(0)
    np.random.seed(0)  # the informative columns and their coefficients
    try:
        from dask_glm.datasets import make_classification
    except ImportError:
        X = da.random.normal(0, 1, size=(n, d), chunks=(chunksize, d))
        informative = np.random.choice(d, 2)
        beta = np.random.random(d) - 1
        z0 = X[:, informative].dot(beta[informative])
        y = da.random.random(z0.shape, chunks=(chunksize,)) < 1 / (1 + da.exp(-z0))
    else:
        X, y = make_classification(n_samples=n, n_features=d, chunksize=chunksize)
    return dask.compute(X, y, scheduler="threads")


def _glm_data(Xn, yn, chunksize):
    """The problem as dask arrays chunked as dask-glm's, persisted where the scheduler runs."""
    import dask
    import dask.array as da

    return dask.persist(da.from_array(Xn, chunks=(chunksize, Xn.shape[1])), da.from_array(yn, chunks=chunksize))


def _dask_glm_fit(X, y, max_iter, tol, normalize):
    """dask-glm's ``lbfgs``; it returns only beta, so SciPy's info dict is read on the way out."""
    import warnings

    import dask_glm.algorithms as alg
    from dask_glm.families import Logistic

    info, real = {}, alg.fmin_l_bfgs_b

    def recorded(*args, **kwargs):
        out = real(*args, **kwargs)
        info.update(out[2])
        return out
    alg.fmin_l_bfgs_b = recorded
    try:
        with warnings.catch_warnings():  # dask-glm's FutureWarning on its fuse_ave_width config key, each call
            warnings.simplefilter("ignore")
            beta = alg.lbfgs(X, y, regularizer=None, family=Logistic, max_iter=max_iter, tol=tol,
                             normalize=normalize)
    finally:
        alg.fmin_l_bfgs_b = real
    return np.asarray(beta), info["nit"], info["funcalls"]


def _glm_variants(X, y, max_iter, tol, with_dask_glm, extras):
    """{name: zero-argument fit returning (beta, iterations, evaluations)}, and the NumPy loss;
    ``extras``: also daskgrad without its step cache and dask-glm's default call."""
    import dask
    import scipy.optimize as so

    import daskgrad as dg

    d = X.shape[1]
    Xn, yn = dask.compute(X, y.astype(np.float64))
    # as a daskgrad user loads data (its persist notes the Futures, so the step cache works on a cluster too)
    Xg, yg = dg.from_array(Xn, chunks=X.chunks).persist(), dg.from_array(yn, chunks=y.chunks).persist()
    # dask-glm calls fmin_l_bfgs_b(pgtol=tol, maxiter=max_iter) with its defaults factr=1e7, m=10
    options = {"maxiter": max_iter, "gtol": tol, "ftol": 1e7 * np.finfo(float).eps}

    def loss(beta):  # dask-glm's Logistic loss: sum(Xb + log1p(exp(-Xb))) - y . Xb
        return dg.binary_cross_entropy_with_logits(Xg @ beta, yg, reduction="sum")

    def run_daskgrad():
        r = dg.optimize.minimize(loss, np.zeros(d), method="L-BFGS-B", options=options)
        return r.x.numpy(), r.nit, r.nfev

    compiled = dg.compile(loss)

    def run_daskgrad_compiled():  # each evaluation after the first replays its graph (daskgrad.compile)
        r = dg.optimize.minimize(compiled, np.zeros(d), method="L-BFGS-B", options=options)
        return r.x.numpy(), r.nit, r.nfev

    def run_daskgrad_no_step_cache():  # every evaluation's graph built and optimized anew
        with dask.config.set({"daskgrad.step-cache.enabled": False}):
            return run_daskgrad()

    def numpy_loss(b):
        z = Xn @ b
        return float(np.sum(np.logaddexp(0, z)) - yn @ z), Xn.T @ (1 / (1 + np.exp(-z)) - yn)

    def run_scipy_numpy():  # the floor: the same fit on the in-memory arrays, no dask
        b, _, info = so.fmin_l_bfgs_b(numpy_loss, np.zeros(d), pgtol=tol, maxiter=max_iter)
        return b, info["nit"], info["funcalls"]

    fns = {"daskgrad_minimize": run_daskgrad, "daskgrad_minimize_compiled": run_daskgrad_compiled,
           "scipy_numpy_in_memory": run_scipy_numpy}
    if extras:
        fns["daskgrad_minimize_no_step_cache"] = run_daskgrad_no_step_cache
    if with_dask_glm:
        fns["dask_glm_lbfgs"] = lambda: _dask_glm_fit(X, y, max_iter, tol, normalize=False)
    if with_dask_glm and extras:
        # what its default call does: standardise the columns first (one more submission), solve that
        fns["dask_glm_lbfgs_normalize_default"] = lambda: _dask_glm_fit(X, y, max_iter, tol, normalize=True)
    if extras and _importable("threadpoolctl"):
        # the whole fit on one BLAS thread, SciPy's L-BFGS-B update on the client included (daskgrad limits
        # BLAS only inside its own submissions): OpenBLAS's threads cost most on a busy machine
        for k in [k for k in ("daskgrad_minimize", "daskgrad_minimize_compiled", "scipy_numpy_in_memory",
                              "dask_glm_lbfgs") if k in fns]:
            fns[f"{k}[one_blas_thread]"] = _one_blas_thread(fns[k])
    return fns, numpy_loss


def _one_blas_thread(fn):
    def run():
        with blas_threads(1):
            return fn()
    return run


def _glm_measure(X, y, max_iter, tol, rounds, with_dask_glm, extras):
    """One fit of each variant (iterations, evaluations, final loss), step-cache counts of one daskgrad
    fit, then the interleaved timing."""
    import daskgrad as dg

    fns, numpy_loss = _glm_variants(X, y, max_iter, tol, with_dask_glm, extras)
    fits = {k: fn() for k, fn in fns.items()}
    before = dg.step_cache_info()
    fns["daskgrad_minimize"]()
    after = dg.step_cache_info()
    seconds = interleaved(fns, rounds)
    out = {"seconds": seconds, "iterations": {k: int(f[1]) for k, f in fits.items()},
           "evaluations": {k: int(f[2]) for k, f in fits.items()},
           "final_loss": {k: numpy_loss(f[0])[0] for k, f in fits.items()},
           "ms_per_evaluation": {k: 1e3 * seconds[k] / fits[k][2] for k in fns},
           "step_cache_in_one_daskgrad_fit": {k: after[k] - before[k] for k in ("hits", "misses", "uncached")}}
    if with_dask_glm:
        ref = fits["dask_glm_lbfgs"][0]
        out["max_abs_beta_difference_to_dask_glm"] = {k: float(np.max(np.abs(f[0] - ref))) for k, f in fits.items()}
        out["daskgrad_over_dask_glm"] = seconds["daskgrad_minimize"] / seconds["dask_glm_lbfgs"]
        out["daskgrad_compiled_over_dask_glm"] = seconds["daskgrad_minimize_compiled"] / seconds["dask_glm_lbfgs"]
        if "dask_glm_lbfgs[one_blas_thread]" in seconds:
            for k in ("daskgrad_minimize", "daskgrad_minimize_compiled"):
                name = "daskgrad_over_dask_glm" if k == "daskgrad_minimize" else "daskgrad_compiled_over_dask_glm"
                out[f"{name}[one_blas_thread]"] = (seconds[f"{k}[one_blas_thread]"]
                                                   / seconds["dask_glm_lbfgs[one_blas_thread]"])
    return out


def glm(n=1_000, d=100, chunksize=100, max_iter=100, tol=1e-4, rounds=7, cluster_rounds=3):
    """L-BFGS on dask-glm's benchmark problem: ``daskgrad.optimize.minimize`` vs dask-glm's ``lbfgs``
    (same data, loss and SciPy settings), with SciPy on in-memory NumPy as the floor; the threaded
    scheduler (dask-glm's default), then a LocalCluster of 2 worker processes.  Goal: <= 0.1 x dask-glm."""
    if QUICK:
        n, d, chunksize, max_iter, rounds, cluster_rounds = 200, 10, 50, 3, 1, 1
    import dask
    from distributed import Client, LocalCluster

    with_dask_glm = _importable("dask_glm")
    out = {"problem": f"logistic regression by L-BFGS-B on dask-glm's make_classification, {n}x{d} float64 in "
                      f"{n // chunksize} chunks, no regularizer, max_iter={max_iter}, tol={tol} (pgtol), "
                      "dask-glm's normalize=False (the same objective) unless named", "goal": 0.1, "notes": []}
    if not with_dask_glm:
        out["notes"].append("dask-glm not importable (pip install dask-glm): its variants skipped")
    Xn, yn = _glm_problem(n, d, chunksize)
    with dask.config.set(scheduler="threads"):
        out["threads"] = _glm_measure(*_glm_data(Xn, yn, chunksize), max_iter, tol, rounds, with_dask_glm,
                                      extras=not QUICK)
    # quick mode (the smoke test) starts in-process workers: process start-up would dominate its time
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=not QUICK, dashboard_address=None,
                      worker_dashboard_address=None) as lc, Client(lc):
        out["local_cluster"] = _glm_measure(*_glm_data(Xn, yn, chunksize), max_iter, tol, cluster_rounds,
                                            with_dask_glm, extras=False)
    out["note"] = ("cluster rounds run after the threaded ones; data persisted (in worker memory) before timing; "
                   "each fit starts from zeros")
    _bars("glm", f"L-BFGS-B on dask-glm's make_classification, {n}x{d}, {n // chunksize} chunks",
          {f"{k} [{where}]": v for where in ("threads", "local_cluster")
           for k, v in out[where]["seconds"].items()})
    return out


# ------------------------------------------------------------------ (h) protection of kept values
def protection():
    """Two copies of every kept value (daskgrad.copies=2, the default) vs one: step time, memory."""
    import bench_protection

    out = bench_protection.run(QUICK)
    _plot_protection(out)
    return out


# ------------------------------------------------------------------ (i) memory soak
def memory_soak():
    """Memory of scheduler, workers and client over a long plain loop, daskgrad's span on and off."""
    import memory_soak as soak

    out = soak.soak(QUICK)
    _plot_soak(out)
    return out


# ------------------------------------------------------------------ (j) checkpointed time stepping
def revolve():
    """checkpoint_steps: steps run on the workers vs Revolve's t(steps, snapshots), peak memory in
    states vs the snapshots, estimate_memory's prediction (benchmarks/revolve.py)."""
    import revolve as rv

    pairs = [(20, 3)] if QUICK else [(1000, 20), (300, 20), (300, 5)]
    return {"rows": [rv.run(steps, snapshots, n=2_000 if QUICK else 20_000) for steps, snapshots in pairs]}


# ------------------------------------------------------------------ (k) checkpointed FWI on a small worker
def fwi():
    """An FWI gradient through checkpoint_steps on a worker whose memory limit the uncheckpointed
    backward would exceed (benchmarks/bench_fwi.py)."""
    import bench_fwi as bench

    if QUICK:
        return bench.run(n=15, nbl=3, steps=12, snapshots=3, memory_limit=400e6, rec_offset=3)
    return bench.run()


# ------------------------------------------------------------------ (l) a state larger than a worker's memory
def big_state():
    """checkpoint_steps of a wave equation whose state exceeds one worker's memory limit, in row bands
    across 4 workers (benchmarks/bench_big_state.py)."""
    import bench_big_state as bench

    if QUICK:
        return bench.run(n=128, steps=6, snapshots=2, memory_limit=400e6, n_workers=2, bands=4)
    return bench.run()


# ------------------------------------------------------------------ (m) deterministic mode
def deterministic(runs=8, rounds=5):
    """``daskgrad.use_deterministic_algorithms(True)``: what it costs and what it buys, on the
    16-chunk gradient ``X.T @ (X @ w)`` of issue 32 (the data sent with the graph, as ``from_array``
    of a NumPy array does).  On a LocalCluster of 3 worker processes (in-process workers in quick
    mode): the seconds per gradient with the mode off, on, off again (the mode's one-time cost,
    registering its worker plugin, apart), and how many distinct bit patterns ``runs`` runs gave in
    each phase; on the threaded scheduler, the seconds of one gradient off and on, interleaved."""
    import hashlib

    import dask
    from distributed import Client, LocalCluster

    import daskgrad as dg

    if QUICK:
        runs, rounds = 3, 1
    n, d, nchunks = (16 * 100, 8, 16) if QUICK else (16 * 5_000, 64, 16)
    rng = np.random.default_rng(0)
    Xn, wn = rng.standard_normal((n, d)), rng.standard_normal(d)

    def grad():
        X = dg.from_array(Xn, chunks=(n // nchunks, d))
        w = dg.from_array(wn, chunks=d, requires_grad=True)
        (0.5 * ((X @ w) ** 2).sum()).backward()
        return w.grad.numpy()

    def phase(enabled):
        dg.use_deterministic_algorithms(enabled)
        t0 = time.perf_counter()
        grad()  # warm-up: turned on, it registers the workers' plugin
        first = time.perf_counter() - t0
        times, patterns = [], set()
        for _ in range(runs):
            t0 = time.perf_counter()
            g = grad()
            times.append(time.perf_counter() - t0)
            patterns.add(hashlib.sha1(g.tobytes()).hexdigest())
        return {"seconds": statistics.median(times), "first_run_seconds": first, "distinct_bit_patterns": len(patterns),
                "runs": runs}

    def toggled(enabled):
        def run():
            dg.use_deterministic_algorithms(enabled)
            grad()
        return run

    out = {"problem": f"gradient X.T @ (X @ w), X {n}x{d} float64 in {nchunks} chunks"}
    try:
        with dask.config.set(scheduler="threads"):
            out["threads_seconds"] = interleaved({"off": toggled(False), "on": toggled(True)}, rounds)
        with LocalCluster(n_workers=3, threads_per_worker=1, processes=not QUICK, dashboard_address=None,
                          worker_dashboard_address=None) as lc, Client(lc):
            out["cluster"] = {"off": phase(False), "on": phase(True), "off_again": phase(False)}
    finally:
        dg.use_deterministic_algorithms(False)
    c = out["cluster"]
    off = statistics.mean([c["off"]["seconds"], c["off_again"]["seconds"]])
    out["on_over_off"] = {"cluster": c["on"]["seconds"] / off,
                          "threads": out["threads_seconds"]["on"] / out["threads_seconds"]["off"]}
    _bars("deterministic", out["problem"], {"cluster_off": off, "cluster_on": c["on"]["seconds"],
                                            "threads_off": out["threads_seconds"]["off"],
                                            "threads_on": out["threads_seconds"]["on"]})
    return out


# ------------------------------------------------------------------ (n) "One program, many runs"
def programs():
    """Five small public example programs in their original framework and in daskgrad
    (benchmarks/bench_programs.py): seconds per iteration, ratio, agreement to rtol 1e-10."""
    import bench_programs

    out = bench_programs.run(quick=QUICK, interleaved=interleaved)
    _bars("programs", out["problem"], {f"{k} [{v}]": r["seconds_per_iteration"][v]
                                       for k, r in out["rows"].items() for v in ("original", "daskgrad")})
    return out


def plain_loop():
    """ms per chunk of the plain-loop logistic-regression step on 200 tiny chunks (no compile), and
    PyTorch's step on the whole data."""
    import bench_programs

    return bench_programs.plain_loop(QUICK, interleaved, nchunks=200)


def checkpoint_block():
    """The README's checkpoint_steps example as one block (forward, backward, c.grad): seconds, step calls."""
    import bench_programs

    return bench_programs.checkpoint_block(QUICK, interleaved)


def demo_step():
    """Seconds per training step of make demo's job and of the same step in PyTorch."""
    import bench_programs

    return bench_programs.demo_step(QUICK, interleaved)


def minibatch_loop():
    """Seconds per step of a training loop over many small minibatches of a held dataset, and PyTorch's."""
    import bench_programs

    return bench_programs.minibatch_loop(QUICK, interleaved)


def package():
    """The package's size: non-blank lines of daskgrad/**/*.py."""
    import bench_programs

    return bench_programs.package_lines(os.path.dirname(HERE))


def fwi_vs_torch():
    """The FWI misfit gradient against the same scheme in PyTorch (CPU, and CUDA where there is one):
    seconds, ratios, grid-point updates a second (benchmarks/fwi_vs_torch.py)."""
    import fwi_vs_torch as bench

    out = bench.run(steps=10, snapshots=2, rounds=1, n=15, nbl=3, nshots=2, rec_offset=3) if QUICK else bench.run_all()
    _plot_fwi_vs_torch(out)
    return out


def _plot_fwi_vs_torch(out):
    """The seconds of each variant; the LocalCluster's from its own rounds (with the threads' there)."""
    seconds = dict(out["seconds"])
    for k, v in out.get("localcluster", {}).get("seconds", {}).items():
        seconds[k if "localcluster" in k else f"{k} (LocalCluster rounds)"] = v
    _bars("fwi_vs_torch", f"FWI gradient, {out['grid'][0]}^2 x {out['shots']} shots, {out['steps']} steps "
          f"(snapshots={out['snapshots']}), float64", seconds)


# ------------------------------------------------------------------ plots and driver
def _plt():
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _bars(name, title, seconds):
    plt = _plt()
    if plt is None:
        return
    names = list(seconds)
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(names) + 1.2))
    ax.barh(names, [seconds[k] for k in names], color=["#d62" if "daskgrad" in k else "#888" for k in names])
    ax.invert_yaxis()
    ax.set_xlabel("seconds (median of interleaved rounds)")
    ax.set_title(title, fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(RESULTS, f"{name}.png"), dpi=100)
    plt.close(fig)


def _plot_graph_cost(out):
    plt = _plt()
    if plt is None:
        return
    rows = out["rows"]
    x = [r["chunks"] for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(8, 3))
    for key in ("forward_s", "backward_build_s", "optimize_s", "total_s", "repeated_step_s"):
        a.loglog(x, [r[key] for r in rows], marker="o", label=key)
    a.set_xlabel("chunks")
    a.set_ylabel("seconds")
    a.legend(fontsize=7)
    b.loglog(x, [r["tasks_unoptimized"] for r in rows], marker="o", label="gradient graph")
    b.loglog(x, [r["tasks_submitted"] for r in rows], marker="o", label="submitted (optimized)")
    b.set_xlabel("chunks")
    b.set_ylabel("tasks")
    b.legend(fontsize=7)
    fig.suptitle(out["problem"], fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(RESULTS, "graph_cost.png"), dpi=100)
    plt.close(fig)


def _plot_loop(out):
    plt = _plt()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(7, 3))
    ax.plot([1e3 * t for t in out["step_times_s"]], lw=0.7)
    for lo, hi in (out["early_window"], out["late_window"]):
        ax.axvspan(lo, hi, alpha=0.15)
    ax.set_xlabel("step")
    ax.set_ylabel("ms per step")
    ax.set_title(f"{out['problem']}\nlate/early = {out['late_over_early']:.2f}", fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(RESULTS, "loop.png"), dpi=100)
    plt.close(fig)


def _plot_overhead(out):
    plt = _plt()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(6, 3.5))
    xs = [r["chunks"] for r in out["rows"]]
    for variant in ("daskgrad", "daskgrad_compiled", "daskgrad_no_step_cache", "dask_handwritten"):
        ax.plot(xs, [r["ms_per_chunk"][variant] for r in out["rows"]], marker="o", label=variant)
    ax.axhline(out["goal_ms_per_chunk"], color="grey", linestyle=":", label="goal")
    ax.set_xscale("log")
    ax.set_xlabel("chunks")
    ax.set_ylabel("ms per chunk per step")
    ax.set_title(out["problem"], fontsize=6)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(RESULTS, "overhead.png"), dpi=100)
    plt.close(fig)


def _plot_protection(out):
    plt = _plt()
    if plt is None:
        return
    st, mem = out["step_time"], out["memory"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3))
    rows = [(f"{name} {k}", v) for name in ("mlp_adam", "plain_loop") if name in st
            for k, v in st[name]["seconds_per_step"].items()]
    a.barh([r[0] for r in rows], [r[1] for r in rows], color=["#d62" if "copies=2" in r[0] else "#888" for r in rows])
    a.invert_yaxis()
    a.set_xlabel("seconds per step (median of interleaved rounds)")
    a.tick_params(labelsize=7)
    unknown = mem["unknown_bytes"]
    for k in ("copies=2", "copies=1"):
        after = mem[k]["managed_bytes_after_each_step"]
        b.plot(range(1, len(after) + 1), [x / unknown for x in after], marker="o", label=k)
    b.axhline(2, ls="--", c="k", lw=0.7)
    b.set_xlabel("after step")
    b.set_ylabel("managed bytes / unknown bytes")
    b.legend(fontsize=7)
    fig.suptitle(f"protection cost; unknown {unknown / 1e9:.2f} GB", fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(RESULTS, "protection.png"), dpi=100)
    plt.close(fig)


def _plot_soak(out):
    plt = _plt()
    if plt is None:
        return
    fig, axes = plt.subplots(1, 3, figsize=(11, 3))
    for variant, style in (("with_daskgrad_span", "-"), ("without_daskgrad_span", "--")):
        r = out.get(variant)
        if not r:
            continue
        steps = [s["step"] for s in r["samples"]]
        for key, label in (("scheduler_rss", "scheduler"), ("worker_rss_sum", "workers"), ("client_rss", "client")):
            axes[0].plot(steps, [s[key] / 1e6 for s in r["samples"]], style, label=f"{label} {variant}")
        axes[1].plot(steps, [s["tasks"] for s in r["samples"]], style, label=f"tasks {variant}")
        axes[2].plot(steps, [s["spans"] for s in r["samples"]], style, label=f"spans {variant}")
    axes[0].set_ylabel("RSS (MB)")
    for ax in axes:
        ax.set_xlabel("step")
        ax.legend(fontsize=5)
    fig.suptitle(out["problem"], fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(RESULTS, "memory_soak.png"), dpi=100)
    plt.close(fig)


COMPONENTS = {"logreg": logreg, "mlp": mlp, "chain": chain, "graph_cost": graph_cost, "depth": depth,
              "out_of_core": out_of_core, "cluster": cluster, "loop": loop, "overhead": overhead,
              "glm": glm, "protection": protection, "memory_soak": memory_soak, "revolve": revolve, "fwi": fwi,
              "big_state": big_state, "deterministic": deterministic, "programs": programs,
              "plain_loop": plain_loop, "checkpoint_block": checkpoint_block, "demo_step": demo_step,
              "minibatch_loop": minibatch_loop, "package": package, "fwi_vs_torch": fwi_vs_torch}


def main(names=None):
    import dask

    os.makedirs(RESULTS, exist_ok=True)
    names = names or list(COMPONENTS)
    report = {"quick": QUICK, "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                          "dask": dask.__version__, "numpy": np.__version__,
                                          "load_average_at_start": os.getloadavg(),
                                          "OPENBLAS_THREAD_TIMEOUT": os.environ["OPENBLAS_THREAD_TIMEOUT"]}}
    for name in names:
        t0 = time.perf_counter()
        report[name] = COMPONENTS[name]()
        report[name]["component_seconds"] = time.perf_counter() - t0
        print(f"{name}: {time.perf_counter() - t0:.1f} s", flush=True)
        with open(os.path.join(RESULTS, "suite.json" if not QUICK else "suite-quick.json"), "w") as f:
            json.dump(report, f, indent=2, default=str)
    report["machine"]["load_average_at_end"] = os.getloadavg()
    with open(os.path.join(RESULTS, "suite.json" if not QUICK else "suite-quick.json"), "w") as f:
        json.dump(report, f, indent=2, default=str)
    print(summary(report))
    return report


def summary(report):
    """The headline numbers as a Markdown table (what the README shows)."""
    lines = ["| benchmark | variant | seconds | ratio |", "|---|---|---|---|"]
    if "logreg" in report:
        r = report["logreg"]
        base = r["seconds"].get("pytorch_cpu")
        for k, v in r["seconds"].items():
            lines.append(f"| logreg | {k} | {v:.4f} | {v / base:.2f} x PyTorch |" if base
                         else f"| logreg | {k} | {v:.4f} | |")
    if "mlp" in report:
        r = report["mlp"]
        base = r["seconds"].get("pytorch_cpu")
        for k, v in r["seconds"].items():
            lines.append(f"| MLP step | {k} | {v:.4f} | {v / base:.2f} x PyTorch |" if base
                         else f"| MLP step | {k} | {v:.4f} | |")
    if "chain" in report:
        r = report["chain"]
        for k, v in r["seconds"].items():
            lines.append(f"| 50-op chain | {k} | {v:.4f} | |")
        lines.append(f"| 50-op chain | daskgrad / dask | | forward {r['forward_ratio']:.2f}, "
                     f"gradient {r['gradient_ratio']:.2f} |")
    if "cluster" in report:
        r = report["cluster"]
        for k, v in {**r["threads_seconds"], **r["cluster_seconds"]}.items():
            lines.append(f"| cluster vs threads | {k} | {v:.4f} | |")
    if "graph_cost" in report:
        for row in report["graph_cost"]["rows"]:
            lines.append(f"| graph cost | {row['chunks']} chunks | {row['total_s']:.3f} | "
                         f"{row['tasks_submitted']} tasks submitted |")
    if "depth" in report:
        for row in report["depth"]["rows"]:
            lines.append(f"| deep chain | {row['ops']} ops: backward vs dask forward | "
                         f"{row['daskgrad_backward_s']:.2f} / {row['dask_forward_build_and_compute_s']:.2f} | "
                         f"{row['backward_over_dask_forward']:.2f} (goal <= 2 at 2,000 ops) |")
    if "out_of_core" in report:
        r = report["out_of_core"]
        lines.append(f"| out of core | {r['data_bytes'] / 1e9:.2f} GB over {r['cluster_memory_limit'] / 1e9:.2f} GB "
                     f"limit | {r['seconds']:.2f} | peak RSS {r['peak_rss'] / 1e6:.0f} MB of "
                     f"{r['cluster_memory_limit'] / 2e6:.0f} MB per worker; "
                     f"predicted {r['predicted_peak_bytes'] / 1e6:.0f} MB, "
                     f"measured over idle {r['measured_peak_over_baseline'] / 1e6:.0f} MB |")
    if "loop" in report:
        r = report["loop"]
        lines.append(f"| training loop | steps 10-110 vs last 100 | {r['early_step_s']:.4f} / {r['late_step_s']:.4f} | "
                     f"{r['late_over_early']:.2f} (goal <= 1.3); "
                     f"tasks/submission {r['tasks_per_submission_first_last']}; "
                     f"scheduler keys {r['scheduler_keys']} |")
    if "overhead" in report:
        for row in report["overhead"]["rows"]:
            ms = row["ms_per_chunk"]
            lines.append(f"| tiny-chunk step, {row['chunks']} chunks | daskgrad / compiled / hand-written dask | "
                         f"{ms['daskgrad']:.3f} / {ms['daskgrad_compiled']:.3f} / {ms['dask_handwritten']:.3f} "
                         "ms per chunk | "
                         f"{row['daskgrad_over_handwritten']:.2f} (goal <= 0.1 ms per chunk); "
                         f"{row['tasks_per_chunk']:.1f} tasks per chunk |")
        for r in report["overhead"].get("cluster", ()):
            on, off = r["cache_on"], r["cache_off"]
            lines.append(f"| {r['problem']} | step cache on / off | {on['ms_per_step']:.0f} / "
                         f"{off['ms_per_step']:.0f} ms per step | {on['tasks_per_step']:.0f} / "
                         f"{off['tasks_per_step']:.0f} tasks per step; update_graph "
                         f"{on['update_graph_us_per_task']:.0f} / {off['update_graph_us_per_task']:.0f} us per task |")
    if "glm" in report:
        for where in ("threads", "local_cluster"):
            r = report["glm"].get(where)
            if not r:
                continue
            base = r["seconds"].get("dask_glm_lbfgs")
            for k, v in r["seconds"].items():
                ratio = f"{v / base:.2f} x dask-glm" + (" (goal <= 0.1)" if k.startswith("daskgrad_minimize") else "")
                if k.endswith("[one_blas_thread]") and "dask_glm_lbfgs[one_blas_thread]" in r["seconds"]:
                    ratio = f"{v / r['seconds']['dask_glm_lbfgs[one_blas_thread]']:.2f} x dask-glm[one_blas_thread]"
                lines.append(f"| L-BFGS vs dask-glm ({where}) | {k} | {v:.4f} | {ratio if base else ''}; "
                             f"{r['iterations'][k]} iterations, {r['evaluations'][k]} evaluations, "
                             f"loss {r['final_loss'][k]:.6g} |")
    if "protection" in report:
        r = report["protection"]
        for name in ("mlp_adam", "plain_loop"):
            if name in r["step_time"]:
                sec = r["step_time"][name]["seconds_per_step"]
                lines.append(f"| protection ({name}) | copies=2 / copies=1 | {sec['copies=2']:.4f} / "
                             f"{sec['copies=1']:.4f} | {sec['copies=2'] / sec['copies=1']:.2f}x (goal <= 1.1) |")
        m = r["memory"]
        for k in ("copies=2", "copies=1"):
            lines.append(f"| protection (TV memory) | {k}, unknown {m['unknown_bytes'] / 1e9:.2f} GB | | peak between "
                         f"steps {m[k]['peak_between_steps_bytes'] / 1e9:.2f} GB = {m[k]['peak_over_unknown']:.2f}x; "
                         f"u alone {m[k]['u_alone_over_unknown']:.2f}x |")
    if "revolve" in report:
        for r in report["revolve"]["rows"]:
            lines.append(f"| checkpoint_steps | {r['steps']} steps, {r['snapshots']} snapshots | "
                         f"{r['backward_s']:.1f} | "
                         f"{r['step_evaluations_on_workers']:.0f} steps run (t+1 = {r['expected_t_plus_last_step']}, "
                         f"{r['recompute_factor']:.2f}x); peak {r['peak_states']:.1f} states, predicted "
                         f"{r['predicted_over_measured']:.2f}x |")
    if "fwi" in report:
        r = report["fwi"]
        lines.append(f"| checkpointed FWI gradient | {r['uncheckpointed_estimate'] / 1e6:.0f} MB uncheckpointed on a "
                     f"{r['memory_limit'] / 1e6:.0f} MB worker | {r['backward_s']:.1f} | peak managed "
                     f"{r['peak_managed'] / 1e6:.0f} MB, predicted {r['checkpointed_estimate'] / 1e6:.0f} MB "
                     f"({r['estimate_over_measured']:.2f}x); {r['recompute_factor']:.2f} step calls per step |")
    for r in ([report["fwi_vs_torch"], report["fwi_vs_torch"].get("large_grid")] if "fwi_vs_torch" in report else []):
        if not r:
            continue
        base = r["seconds"].get("pytorch_cpu")
        for k, v in r["seconds"].items():
            rate = r["updates_per_second"][k] / 1e6
            ratio = f"{v / base:.2f} x PyTorch CPU, " if base else ""
            lines.append(f"| FWI gradient {r['grid'][0]}^2 x {r['shots']}, {r['steps']} steps | {k} | {v:.3f} | "
                         f"{ratio}{rate:.1f} M updates/s |")
        c = r.get("localcluster")
        if c:
            seconds = c["seconds"]["daskgrad_localcluster_checkpointed"]
            lines.append(f"| FWI gradient {r['grid'][0]}^2 x {r['shots']}, {r['steps']} steps | checkpointed, "
                         f"LocalCluster of {c['workers']} processes | {seconds:.3f} | "
                         f"{c['ratio_vs_threads']:.2f} x the same on threads |")
    if "big_state" in report:
        r = report["big_state"]
        lines.append(f"| checkpoint_steps, state > a worker's limit | {r['state_bytes'] / 1e6:.0f} MB state in "
                     f"{r.get('bands', r['n_workers'])} bands on "
                     f"{r['n_workers']} x {r['memory_limit'] / 1e6:.0f} MB workers, {r['steps']} steps, "
                     f"{r['snapshots']} snapshots | {r['backward_s']:.1f} | peak managed per worker "
                     f"{r['peak_managed_per_worker'] / 1e6:.0f} MB ({r['peak_managed_in_state_chunks']:.1f} state "
                     f"chunks; {r['peak_spilled_per_worker'] / 1e6:.0f} MB of it spilled), RSS "
                     f"{r['peak_rss_per_worker'] / 1e6:.0f} MB; estimate "
                     f"{r['checkpointed_estimate_per_worker'] / 1e6:.0f} MB; uncheckpointed estimate "
                     f"{r['uncheckpointed_over_cluster_limit']:.1f}x the cluster's limit; "
                     f"{r['recompute_factor']:.2f} steps per step (Revolve {r['revolve_factor']:.2f}) |")
    if "memory_soak" in report:
        for variant in ("with_daskgrad_span", "without_daskgrad_span"):
            r = report["memory_soak"].get(variant)
            if r:
                sl = r["slopes_kB_per_step"]
                lines.append(f"| memory soak ({variant}) | {r['steps']} steps | {r['loop_s']:.1f} | kB/step: scheduler "
                             f"{sl['scheduler_rss']:.2f}, workers {sl['worker_rss_sum']:.2f}, client "
                             f"{sl['client_rss']:.2f}; spans {r['samples'][-1]['spans']} |")
    if "programs" in report:
        r = report["programs"]
        for name, row in r["rows"].items():
            s = row["seconds_per_iteration"]
            lines.append(f"| program {name} | {row['original_framework']} / daskgrad | {s['original']:.5f} / "
                         f"{s['daskgrad']:.5f} s per iteration | {row['daskgrad_over_original']:.2f} x original; "
                         f"results agree to {row['max_relative_difference']:.1e}"
                         + (" (missing in daskgrad: see result)" if row.get("missing_in_daskgrad") else "") + " |")
        lines.append(f"| programs | median over {len(r['rows'])} | | {r['median_daskgrad_over_original']:.2f} x "
                     "original |")
    if "plain_loop" in report:
        r = report["plain_loop"]
        key = f"ms_per_chunk_plain_loop_{r['chunks']}_tiny_chunks_no_compile"
        lines.append(f"| plain loop, {r['chunks']} tiny chunks, no compile | daskgrad / PyTorch (whole data) | "
                     f"{r['seconds_per_step']['daskgrad_plain_loop']:.4f} / "
                     f"{r['seconds_per_step']['pytorch_whole_data']:.5f} | {r[key]:.3f} ms per chunk; "
                     f"{r['daskgrad_over_pytorch']:.0f} x PyTorch |")
    if "checkpoint_block" in report:
        r = report["checkpoint_block"]
        for name, row in r["rows"].items():
            s = row["seconds"]
            lines.append(f"| checkpoint_steps block ({name}), {r['steps']} steps, {r['snapshots']} snapshots | "
                         f"daskgrad / PyTorch plain loop | {s['daskgrad_checkpoint_steps']:.2f} / "
                         f"{s['pytorch_plain_loop']:.3f} | {row['daskgrad_over_pytorch']:.0f} x PyTorch; "
                         f"step called {row['step_calls']} times |")
    if "demo_step" in report:
        r = report["demo_step"]
        s = r["seconds_per_step"]
        lines.append(f"| make demo's training step | daskgrad / PyTorch | {s['daskgrad_demo_step']:.4f} / "
                     f"{s['pytorch_step']:.4f} | {r['daskgrad_over_pytorch']:.1f} x PyTorch (first two epochs: "
                     f"{r['daskgrad_seconds_per_step_first_two_epochs']:.3f} s a step) |")
    if "minibatch_loop" in report:
        r = report["minibatch_loop"]
        s = r["seconds_per_step"]
        lines.append(f"| training loop over small minibatches, threads | daskgrad / PyTorch | {s['daskgrad']:.4f} / "
                     f"{s['pytorch']:.4f} | {r['daskgrad_over_pytorch']:.1f} x PyTorch (first epoch: "
                     f"{r['daskgrad_seconds_per_step_first_epoch']:.3f} s a step; programs lowered after it: "
                     f"{r['programs_lowered_after_first_epoch']}) |")
    if "package" in report:
        n = report["package"]["non_blank_lines"]
        lines.append(f"| package size | daskgrad/**/*.py | | {n:,} non-blank lines |")
    return "\n".join(lines)


if __name__ == "__main__":
    main(sys.argv[1:] or None)
