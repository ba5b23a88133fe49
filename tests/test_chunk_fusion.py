"""One read of the data per step: after optimization, a chunk's forward and its VJP run as one task.

Blockwise fusion alone leaves two tasks reading each chunk of X in a logistic-regression gradient
(``X_i @ w`` with the forward around it, and ``X_i.T @ g_i``); runtime's chunk fusion merges the
tasks of one chunk, for any composition of ops, while chunks stay separate tasks (a parameter
every chunk reads joins none of them) and the gradient is unchanged.
"""
import dask
import numpy as np
import pytest
from dask._task_spec import DataNode, convert_legacy_graph
from dask.core import flatten

import daskgrad as dg
from daskgrad import runtime


@pytest.fixture
def optimized():
    """The graphs daskgrad submits, optimized, as each submission's observer sees them."""
    with dg.testing.submissions(graphs=True) as seen:
        yield seen.graphs


def readers(arrays, data):
    """{key of ``data``: the tasks of the submitted graph that read it}."""
    graph = {}
    for a in arrays:
        graph.update(a.dask)
    graph = convert_legacy_graph(graph)
    keys = set(flatten(data.array.__dask_keys__()))
    found = {k: [] for k in keys}
    for key, task in graph.items():
        for d in task.dependencies & keys:
            found[d].append(key)
    return found


def assert_each_chunk_read_by_one_task(arrays, *data):
    for t in data:
        found = readers(arrays, t)
        assert all(len(r) == 1 for r in found.values()), found
        # and by different tasks: chunks still run in parallel
        assert len({r[0] for r in found.values()}) == len(found)


def unfused(step):
    with dask.config.set({"daskgrad.fuse-chunks": False}):
        return step()


def logreg_data(n=4000, d=5, chunks=500):
    rng = np.random.default_rng(0)
    X = dg.from_array(rng.standard_normal((n, d)), chunks=(chunks, d))
    y = dg.from_array((rng.random(n) < 0.5).astype(float), chunks=chunks)
    return X, y, rng.standard_normal(d)


def test_logistic_regression_gradient_reads_each_chunk_of_x_and_y_in_one_task(optimized):
    X, y, w0 = logreg_data()

    def step():
        w = dg.from_array(w0, chunks=-1, requires_grad=True)
        dg.binary_cross_entropy_with_logits(X @ w, y).backward()
        return w.grad.numpy()

    optimized.clear()
    grad = unfused(step)
    (before,) = optimized
    assert all(len(r) == 2 for r in readers(before, X).values())  # what fusion removes
    optimized.clear()
    np.testing.assert_allclose(step(), grad, rtol=1e-12)
    (after,) = optimized
    assert_each_chunk_read_by_one_task(after, X, y)
    Xn, yn = X.numpy(), y.numpy()
    np.testing.assert_allclose(grad, Xn.T @ (1 / (1 + np.exp(-(Xn @ w0))) - yn) / len(yn), rtol=1e-10)


def test_mlp_training_step_reads_each_chunk_once_and_updates_the_same(optimized):
    rng = np.random.default_rng(1)
    X = dg.from_array(rng.standard_normal((600, 4)), chunks=(100, 4))
    t = dg.from_array(rng.integers(0, 3, 600), chunks=100)
    init = [rng.standard_normal((4, 8)), np.zeros(8), rng.standard_normal((8, 3)), np.zeros(3)]

    def step():
        w1, b1, w2, b2 = ps = [dg.from_array(p.copy(), chunks=-1, requires_grad=True) for p in init]
        loss = dg.cross_entropy(dg.relu(X @ w1 + b1) @ w2 + b2, t)
        loss.backward()
        with dg.no_grad():
            for p in ps:
                p -= 0.1 * p.grad
        return [loss.item()] + [p.detach().numpy() for p in ps]

    optimized.clear()
    expected = unfused(step)
    optimized.clear()
    got = step()
    assert_each_chunk_read_by_one_task(optimized[0], X, t)
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_per_sample_loss_through_an_elementwise_chain_reads_each_chunk_once(optimized):
    X, y, w0 = logreg_data(n=3000, d=4, chunks=300)

    def step():
        w = dg.from_array(w0, chunks=-1, requires_grad=True)
        z = X @ w
        per_sample = dg.log1p(dg.exp(-dg.tanh(z) * y)) + 0.1 * dg.softplus(z - y) ** 2
        per_sample.mean().backward()
        return w.grad.numpy()

    expected = unfused(step)
    optimized.clear()
    np.testing.assert_allclose(step(), expected, rtol=1e-12)
    assert_each_chunk_read_by_one_task(optimized[0], X, y)


def test_the_same_step_fuses_to_the_same_keys():
    X, y, w0 = logreg_data()

    def keys():
        w = dg.from_array(w0, chunks=-1, requires_grad=True)
        loss = dg.binary_cross_entropy_with_logits(X @ w, y)
        (g,) = dg.grad(loss, [w], lazy=True)
        return set(dict(runtime.optimize([g.array, loss.array])[0].dask))

    first = keys()
    assert any("-fused-" in str(k) for k in first)
    assert keys() == first


def test_a_value_normalized_by_a_reduction_of_all_chunks_fuses_without_a_cycle():
    # x_i - mean(x) needs every chunk before any chunk can go on: the chunk's later tasks
    # cannot join its earlier ones (that would be a cycle through the mean)
    rng = np.random.default_rng(3)
    x0 = rng.standard_normal(60)
    x = dg.from_array(x0, chunks=10, requires_grad=True)
    (dg.tanh(x - x.mean()) ** 2).sum().backward()
    c = x0 - x0.mean()
    d = 2 * np.tanh(c) * (1 - np.tanh(c) ** 2)
    np.testing.assert_allclose(x.grad.numpy(), d - d.mean(), rtol=1e-10)


def lazy_submission(loss, w):
    """The optimized graph a backward of ``loss`` would submit (nothing runs: a module's cluster
    without GPU workers may be up)."""
    (g,) = dg.grad(loss, [w], lazy=True)
    return runtime.optimize([g.array, loss.array])


def test_fused_tasks_keep_the_gpu_placement_of_their_vjps():
    X, y, w0 = logreg_data()
    w = dg.from_array(w0, chunks=-1, requires_grad=True)
    with dask.config.set({"daskgrad.vjp-resources": {"GPU": 1}}):
        arrays = lazy_submission(dg.binary_cross_entropy_with_logits(X @ w, y), w)
    hlg = arrays[0].dask
    fused = {r[0] for r in readers(arrays, X).values()}
    for layer in hlg.layers.values():
        if fused & set(layer):
            assert layer.annotations == {"resources": {"GPU": 1}}
    assert all(any(k in layer for layer in hlg.layers.values()) for k in fused)


def test_fused_tasks_run_on_the_gpu_worker_of_a_cluster():
    from distributed import Client, Scheduler, SpecCluster, Worker, get_task_stream

    workers = {"gpu-worker": {"cls": Worker, "options": {"nthreads": 1, "resources": {"GPU": 1}}},
               "cpu-worker": {"cls": Worker, "options": {"nthreads": 1}}}
    with SpecCluster(workers=workers, scheduler={"cls": Scheduler, "options": {"dashboard_address": None}}) \
            as cluster, Client(cluster) as client:
        names = {addr: info["name"] for addr, info in client.scheduler_info()["workers"].items()}
        X, y, w0 = logreg_data(n=400, chunks=50)
        w = dg.from_array(w0, chunks=-1, requires_grad=True)
        with dask.config.set({"daskgrad.vjp-resources": {"GPU": 1}}), get_task_stream(client) as ts:
            dg.binary_cross_entropy_with_logits(X @ w, y).backward()
        fused = [t for t in ts.data if "-fused-" in str(t["key"])]
        assert len(fused) == 8 and {names[t["worker"]] for t in fused} == {"gpu-worker"}
        Xn, yn = X.numpy(), y.numpy()
        np.testing.assert_allclose(w.grad.numpy(), Xn.T @ (1 / (1 + np.exp(-(Xn @ w0))) - yn) / 400, rtol=1e-10)


def test_fused_tasks_merge_the_annotations_of_their_parts():
    # a forward layer asking for retries, VJPs asking for a GPU: the chunk's task asks for both
    X, y, w0 = logreg_data()
    w = dg.from_array(w0, chunks=-1, requires_grad=True)
    with dask.annotate(retries=2):
        z = X @ w
    with dask.config.set({"daskgrad.vjp-resources": {"GPU": 1}}):
        arrays = lazy_submission(dg.binary_cross_entropy_with_logits(z, y), w)
    hlg = arrays[0].dask
    fused = {r[0] for r in readers(arrays, X).values()}
    (layer,) = [layer for layer in hlg.layers.values() if fused & set(layer)]
    assert fused <= set(layer) and layer.annotations == {"retries": 2, "resources": {"GPU": 1}}


def test_a_blockwise_chain_inside_a_fused_task_frees_each_temporary_after_its_last_reader():
    """A Blockwise-fused chain joins a chunk's task whole and runs its inner tasks in an order
    computed on the client: it must still free each intermediate chunk as soon as it is read, or a
    30-op chain would hold 30 chunks at once."""
    import tracemalloc

    import dask.array as da
    from dask._task_spec import Task, _execute_subgraph
    from dask.blockwise import optimize_blockwise

    from daskgrad._dask import calls

    x = da.from_array(np.random.default_rng(0).standard_normal(1_000_000), chunks=-1)  # 8 MB
    y = x
    for i in range(30):
        y = da.tanh(y) if i % 2 else y * 0.9 + 0.05
    graph = convert_legacy_graph(dict(optimize_blockwise(y.dask, keys=list(flatten(y.__dask_keys__())))))
    (task,) = [t for t in graph.values() if isinstance(t, Task) and t.func is _execute_subgraph]
    assert calls._Subgraph.applies(task)
    sub = calls._Subgraph(task)
    inputs = {k: graph[k]({}) for k in task.dependencies}
    tracemalloc.start()
    try:
        out = sub(inputs)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    np.testing.assert_allclose(out, y.compute())
    assert peak < 4 * x.nbytes, peak / x.nbytes


@pytest.mark.parametrize("loss", ["bce_mean", "sum_of_squares", "max"])
def test_a_small_result_over_many_chunks_is_reduced_by_a_wide_tree_not_dasks_four_per_task(optimized, loss):
    rng = np.random.default_rng(3)
    Xn, yn, w0 = rng.standard_normal((256 * 4, 3)), (rng.random(256 * 4) > 0.5) * 1.0, rng.standard_normal(3)
    X, y = dg.from_array(Xn, chunks=(4, 3)), dg.from_array(yn, chunks=4)
    w = dg.from_array(w0, requires_grad=True)
    z = X @ w
    out = {"bce_mean": lambda: dg.binary_cross_entropy_with_logits(z, y),
           "sum_of_squares": lambda: (z ** 2).sum(), "max": lambda: z.max()}[loss]()
    optimized.clear()
    out.backward()
    (arrays,) = optimized
    graph = convert_legacy_graph({k: v for a in arrays for k, v in a.dask.items()})
    tasks = [t for t in graph.values() if not isinstance(t, DataNode)]
    tree = [t for t in tasks if len(t.dependencies) > 4]  # a chunk's task reads its X, y, w and g
    # 256 chunks -> 8 -> 1 for the loss, and the same for the gradient's partial products (dask's
    # default tree, 4 per task, adds 64 + 16 + 4 + 1 tasks to each)
    assert len(tree) <= 3 * (8 + 1) and max(len(t.dependencies) for t in tree) <= 32
    if loss != "max":  # (max's rule needs the result, then a count, in each chunk: more tasks)
        assert len(tasks) <= 256 + 2 * (8 + 1) + 4
    zn = Xn @ w0
    expected = {"bce_mean": Xn.T @ (1 / (1 + np.exp(-zn)) - yn) / len(yn), "sum_of_squares": Xn.T @ (2 * zn),
                "max": Xn[np.argmax(zn)]}[loss]
    np.testing.assert_allclose(w.grad.numpy(), expected, rtol=1e-10)


def test_a_fused_part_with_a_list_keyword_of_references_gets_the_values():
    from daskgrad._dask import calls, fuse
    from daskgrad._dask.internals import List, Task, TaskRef

    def f(a, xs=None):
        return a + sum(xs)

    values = {"a": 1, "b": 2, "c": 3}
    task = Task("k", f, TaskRef("a"), xs=List(TaskRef("b"), TaskRef("c")))
    fused = fuse._fused_task("k", [task], ["k"])
    assert task(values) == calls._Call.of(task)(values) == fused(values) == calls.fast(fused)(values) == 6
    positional = Task("p", lambda a, xs: a + sum(xs), TaskRef("a"), List(TaskRef("b"), TaskRef("c")))
    assert isinstance(calls._Call.of(positional), calls._Call) and calls._Call.of(positional)(values) == 6



def mlp_step(X, t, shift=0.0):
    """A step of an nn.Sequential MLP under nn.CrossEntropyLoss: every chunk's VJP reads the loss's
    normalizer (how many targets are not ``ignore_index``), a reduction of all chunks made in the
    chunks' forward tasks."""
    from daskgrad import nn

    dg.manual_seed(1)
    model = nn.Sequential(nn.Linear(4, 8, dtype="float64"), nn.ReLU(), nn.Linear(8, 3, dtype="float64"))
    with dg.no_grad():
        for p in model.parameters():
            p += shift
    loss = nn.CrossEntropyLoss()(model(X), t)
    loss.backward()
    return [loss.item()] + [p.grad.numpy() for p in model.parameters()]


def mlp_data(n=600, chunk=100):
    rng = np.random.default_rng(2)
    X = dg.from_array(rng.standard_normal((n, 4)), chunks=(chunk, 4))
    return X, dg.from_array(rng.integers(0, 3, n), chunks=chunk)


def test_a_chunk_whose_vjp_waits_for_a_reduction_of_its_forward_is_a_few_tasks_not_one_per_op(optimized):
    # the chunk's VJP waits for a sum over all chunks (CrossEntropyLoss's count of valid targets):
    # what feeds that sum is a small task of its own, and the chunk's forward and VJP are one task,
    # its activations handed on inside it.  (It was 140 tasks for these 6 chunks, one per op of
    # each chunk's VJP; then 48, the forward and the VJP split in two.)
    X, t = mlp_data()
    expected = unfused(lambda: mlp_step(X, t))
    optimized.clear()
    got = mlp_step(X, t)
    arrays = optimized[0]
    graph = convert_legacy_graph({k: v for a in arrays for k, v in a.dask.items()})
    tasks = [k for k, v in graph.items() if not isinstance(v, DataNode)]
    x_readers, t_readers = readers(arrays, X), readers(arrays, t)
    assert all(len(r) == 1 for r in x_readers.values())  # (the forward and the VJP: one task)
    assert all(len(r) == 2 for r in t_readers.values())  # (and the count of valid targets)
    assert len({r[0] for r in x_readers.values()}) == len(x_readers)
    # per chunk: the count, the forward and VJP, and the loss's partial sum handed on from it; then
    # the count's and the loss's sums, the four gradients' sums and the transposes of the weights
    assert len(tasks) <= 3 * 6 + 24, sorted(map(str, tasks))
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_a_key_names_one_computation_in_every_submission(optimized):
    # the same data fused with one step's parameters, then with the next step's: each fused group,
    # each value handed on from one and each task reading one has a key of its own.  (A key kept with
    # another computation hung a cluster: a worker that still knew the key from the step before waited
    # for that step's group, which nobody computes again.)
    X, t = mlp_data()
    with dask.config.set({"daskgrad.step-cache.enabled": False}):  # (each step lowered and fused anew)
        mlp_step(X, t)
        mlp_step(X, t, shift=1.0)
    first, second = ({k: v for a in arrays for k, v in convert_legacy_graph(dict(a.dask)).items()}
                     for arrays in optimized[-2:])
    assert any("-fused-" in str(k) for k in first)
    shared = first.keys() & second.keys()
    assert shared  # (the data's chunks, and what the targets alone make: the normalizer)
    for k in shared:
        assert first[k].dependencies == second[k].dependencies, k


def fused_keys_alone_and_beside():
    """The keys of a logistic-regression gradient's optimized graph submitted alone, and submitted with
    unrelated arrays beside it."""
    X, y, w0 = logreg_data()
    Z = dg.from_array(np.random.default_rng(5).standard_normal((400, 3)), chunks=(100, 3))

    def keys(*extra):
        w = dg.from_array(w0, chunks=-1, requires_grad=True)
        loss = dg.binary_cross_entropy_with_logits(X @ w, y)
        (g,) = dg.grad(loss, [w], lazy=True)
        return set(dict(runtime.optimize([g.array, loss.array] + [e.array for e in extra])[0].dask))

    return keys(), keys(dg.tanh(Z).sum(), (Z * 2).sum(axis=0))


def test_a_fused_group_s_key_does_not_change_with_unrelated_parts_of_the_submission():
    # fusion's own keys are named by what each task is and the keys it reads: a step submitted with
    # something else beside it runs its tasks under the keys it has alone
    alone, beside = fused_keys_alone_and_beside()
    assert any("-fused-" in str(k) for k in alone)
    assert alone <= beside


# the test above in a process of its own (the hash seed is read when Python starts)
_FUSED_KEYS = """
import sys
sys.path.insert(0, {here!r})
from test_chunk_fusion import fused_keys_alone_and_beside
alone, beside = fused_keys_alone_and_beside()
print(any("-fused-" in str(k) for k in alone), sorted(map(str, alone - beside)))
"""


@pytest.mark.parametrize("seed", [6, 11, 12])
def test_a_fused_group_s_key_does_not_change_with_unrelated_parts_under_any_hash_seed(seed):
    # the test above, under hash seeds where the order of a group's independent tasks differed with the
    # parts beside it: its groups were named after another of their tasks (matmul_partial-fused, sum-fused)
    import os
    import subprocess
    import sys

    env = dict(os.environ, PYTHONHASHSEED=str(seed))
    script = _FUSED_KEYS.format(here=os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", script], env=env, check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "True []"


@pytest.mark.parametrize("dtype", ["float64", "float32", "int64"])
def test_a_generated_kernel_casts_an_elementwise_result_as_dask_s_enforce_dtype_does(dtype):
    """dask's elemwise wraps a function to cast its result to the inferred dtype; a generated kernel
    calls the function itself and casts after, with the same results and errors as dask's task."""
    from dask._task_spec import Task, TaskRef

    from daskgrad._dask import calls
    from daskgrad._dask.internals import enforce_dtype

    x = np.linspace(0.5, 4.0, 8)
    part = calls._Call.of(Task("r", enforce_dtype, TaskRef("x"), enforce_dtype=np.dtype(dtype),
                               enforce_dtype_function=np.sqrt))
    fused = Task("out", calls._run_fused, (part,), ((),), ("x",), "r", ("sqrt",), TaskRef("x"))
    kernel = calls._Kernel(fused)
    assert calls._as_dtype in kernel.run.__globals__.values()  # (the function called as itself)
    if dtype == "int64":  # (float64 -> int64 is not a same-kind cast: dask refuses it)
        with pytest.raises(ValueError, match="can't be cast"):
            fused({"x": x})
        with pytest.raises(ValueError, match="can't be cast"):
            kernel.run({"x": x})
        return
    want, got = fused({"x": x}), kernel.run({"x": x})
    assert got.dtype == want.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, want)


# The cluster tests last: the module's client fixture stays up once started, and daskgrad submits to any
# live Client, so a test after them would run on the cluster.
def test_a_step_resubmitted_on_a_cluster_reuses_its_keys_without_run_spec_warnings(client):
    # the client fixture fails the test on the scheduler's "Detected different run_spec"
    X, y, w0 = logreg_data(n=800, chunks=100)
    grads = []
    for _ in range(3):
        w = dg.from_array(w0, chunks=-1, requires_grad=True)
        loss = dg.binary_cross_entropy_with_logits(X @ w, y)
        loss.backward()
        grads.append((loss.item(), w.grad.numpy()))
    for loss, g in grads[1:]:
        assert loss == grads[0][0]
        np.testing.assert_array_equal(g, grads[0][1])


def test_a_training_loop_of_an_mlp_under_cross_entropy_runs_on_a_cluster(client):
    # make demo's loop on a cluster: the step after the one that made the template hung now and then
    X, t = mlp_data()
    runs = [mlp_step(X, t, shift=0.1 * (i % 2)) for i in range(6)]
    for got, expected in zip(runs[2:], runs):
        for a, b in zip(got, expected):
            np.testing.assert_array_equal(a, b)
