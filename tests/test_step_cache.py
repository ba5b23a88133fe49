"""A step built once: the plain training loop instantiates the template of its step, and any
change of structure (shape, chunking, dtype, op, constant, hook, create_graph, retain_graph) builds
anew, with the same numbers as without the cache."""
import gc
import threading
import weakref

import dask
import numpy as np
import pytest

import daskgrad as dg

from conftest import example


@pytest.fixture(autouse=True)
def fresh_cache():
    dg.step_cache_clear()
    yield
    dg.step_cache_clear()


def _data(n=60, d=4, chunks=15, dtype="float64", seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)).astype(dtype)
    y = (rng.random(n) > 0.5).astype(dtype)
    return dg.from_array(X, chunks=(chunks, d)), dg.from_array(y, chunks=chunks)


def _train(X, y, steps, lr=0.1, loss_fn=dg.binary_cross_entropy_with_logits, hook=None, retain_graph=None):
    w = dg.zeros(X.shape[1], dtype=X.dtype, requires_grad=True)
    losses = []
    for _ in range(steps):
        z = X @ w
        if hook is not None:
            z.register_hook(hook)
        loss = loss_fn(z, y)
        loss.backward(retain_graph=retain_graph)
        losses.append(loss.item())
        with dg.no_grad():
            w -= lr * w.grad
        w.grad = None
    return w.detach().numpy(), losses


def _uncached(fn, *args, **kwargs):
    """``fn`` run with the step cache off: the reference.  On a cluster it makes the keys the cached
    run made first (the same values, named by what they are), lowered with other company (a value
    the cached run held is read anew): what the cached run let go must be gone from the scheduler
    first, or it logs a "different run_spec" for the key.  The values a cycle held go at a collection."""
    gc.collect()
    with dask.config.set({"daskgrad.step-cache.enabled": False}):
        return fn(*args, **kwargs)


def test_plain_loop_instantiates_its_step_and_computes_the_same_numbers_as_without_the_cache():
    X, y = _data()
    w, losses = _train(X, y, 12)
    info = dg.step_cache_info()
    # step 1 (no update pending yet) and step 2 are built; step 3, the second of its outline, makes
    # the template; steps 4..12 are instances of it
    assert info["hits"] >= 9 and info["misses"] <= 4, info  # (and the last update, computed by .numpy())
    w_ref, losses_ref = _uncached(_train, X, y, 12)
    np.testing.assert_array_equal(w, w_ref)
    assert losses == losses_ref


def _train_with_dropout(steps):
    dg.manual_seed(0)
    X = dg.from_array(np.random.default_rng(1).standard_normal((40, 6)), chunks=(15, 6))  # (uneven chunks)
    model = dg.nn.Sequential(dg.nn.Linear(6, 8), dg.nn.ReLU(), dg.nn.Dropout(0.5), dg.nn.Linear(8, 1)).double()
    opt = dg.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = model(X).pow(2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model[0].weight.detach().numpy()


def test_a_training_loop_with_dropout_instantiates_its_step_and_equals_the_uncached_run():
    # each step draws a new mask from a seed the program reads as a value (as a param, the seed made every
    # step a new program, lowered anew: a model with dropout never hit the cache)
    before = dg.step_cache_info()["hits"]
    losses, w = _train_with_dropout(8)
    assert dg.step_cache_info()["hits"] - before >= 5
    losses_ref, w_ref = _uncached(_train_with_dropout, 8)
    assert losses == losses_ref
    np.testing.assert_array_equal(w, w_ref)


def _train_with_noise(steps):
    dg.manual_seed(0)
    X = dg.from_array(np.random.default_rng(1).standard_normal((40, 6)), chunks=(15, 6))
    w = dg.from_array(np.random.default_rng(2).standard_normal((6, 3)) * 0.1, chunks=-1, requires_grad=True)
    losses = []
    for _ in range(steps):  # a variational autoencoder's reparameterization: new noise every step
        h = X @ w
        loss = ((h + dg.randn_like(h) * 0.1) ** 2).mean()
        loss.backward()
        with dg.no_grad():
            w -= 0.1 * w.grad
        w.grad = None
        losses.append(loss.item())
    return losses, w.detach().numpy()


def test_a_loop_drawing_randn_like_every_step_instantiates_its_step_and_equals_the_uncached_run():
    before = dg.step_cache_info()["hits"]
    losses, w = _train_with_noise(8)
    assert dg.step_cache_info()["hits"] - before >= 5
    losses_ref, w_ref = _uncached(_train_with_noise, 8)
    assert losses == losses_ref
    np.testing.assert_array_equal(w, w_ref)


_DRAWS = {  # a new (40, 3) float64 tensor every step, drawn by a module function or a method
    "randn": lambda: dg.randn(40, 3, chunks=(15, 3), dtype=dg.float64),
    "rand": lambda: dg.rand((40, 3), chunks=(15, 3), dtype=dg.float64),
    "multinomial": lambda: dg.from_array(np.linspace(1, 2, 30), chunks=20).multinomial(120, replacement=True)
                           .reshape(40, 3).double() / 30,
}


def _train_with_fresh_noise(steps, draw):
    dg.manual_seed(0)
    X = dg.from_array(np.random.default_rng(1).standard_normal((40, 6)), chunks=(15, 6))
    w = dg.from_array(np.random.default_rng(2).standard_normal((6, 3)) * 0.1, chunks=-1, requires_grad=True)
    losses = []
    for _ in range(steps):  # noise injection
        loss = ((X @ w + _DRAWS[draw]() * 0.1) ** 2).mean()
        loss.backward()
        with dg.no_grad():
            w -= 0.1 * w.grad
        w.grad = None
        losses.append(loss.item())
    return losses, w.detach().numpy()


@pytest.mark.parametrize("draw", list(_DRAWS))
def test_a_loop_drawing_randn_every_step_instantiates_its_step_and_equals_the_uncached_run(draw):
    # the run seed is a value the program reads, as randn_like's (dask's generator named its graph by the seed,
    # multinomial's kernel took it as a param: every step was a new program, lowered anew)
    before = dg.step_cache_info()["hits"]
    losses, w = _train_with_fresh_noise(8, draw)
    assert dg.step_cache_info()["hits"] - before >= 5
    losses_ref, w_ref = _uncached(_train_with_fresh_noise, 8, draw)
    assert losses == losses_ref
    np.testing.assert_array_equal(w, w_ref)
    assert len(set(losses)) == len(losses)  # (a new draw every step)


def test_an_instance_of_the_step_matches_numpy_gradient_descent():
    X, y = _data(n=40, d=3, chunks=7)  # uneven chunks
    w, _ = _train(X, y, 8, lr=0.5)
    Xn, yn = X.numpy(), y.numpy()
    wn = np.zeros(3)
    for _ in range(8):
        p = 1 / (1 + np.exp(-(Xn @ wn)))
        wn = wn - 0.5 * Xn.T @ (p - yn) / len(yn)
    np.testing.assert_allclose(w, wn, rtol=1e-12)
    assert dg.step_cache_info()["hits"] > 0


def _misses(fn):
    before = dg.step_cache_info()["misses"]
    out = fn()
    return dg.step_cache_info()["misses"] - before, out


CHANGES = {
    "shape": lambda: _train(*_data(n=75), 3),
    "chunking": lambda: _train(*_data(chunks=20), 3),
    "dtype": lambda: _train(*_data(dtype="float32"), 3),
    "op": lambda: _train(*_data(), 3, loss_fn=lambda z, y: ((z - y) ** 2).mean()),
    "constant": lambda: _train(*_data(), 3, lr=0.25),
    "hook": lambda: _train(*_data(), 3, hook=lambda g: g * 2),
    "retain_graph": lambda: _train(*_data(), 3, retain_graph=True),
}


def _fwi_gradients(starts):
    """The checkpointed misfit gradient of examples/fwi.py at each start velocity: its graphs carry
    layers no result reads (the backward's), and dask merges a graph's layers in an order that follows
    their names, random tokens from one evaluation to the next."""
    fwi = example("fwi")
    sv = fwi.survey(n=13, nbl=4, nshots=2, tn=100.0, f0=0.04, steps=9)
    fwd = fwi.Modelling(sv, chunk=8)
    d_obs = fwd.shot_records(fwd.slowness(fwi.camembert(13, radius=3)))
    grads = []
    for vp in starts:
        m = fwd.slowness(np.full((13, 13), vp), requires_grad=True)
        fwd.misfit(m, d_obs, snapshots=3).backward()
        grads.append(m.grad.numpy())
    return grads


def test_a_checkpointed_gradient_at_a_new_point_instantiates_the_first_s_template_with_its_numbers():
    starts = [2.5, 2.6, 2.4, 2.55]
    got = _fwi_gradients(starts)
    assert dg.step_cache_info()["hits"] == 2  # (a graph is kept the second time it is seen)
    with dask.config.set({"daskgrad.step-cache.enabled": False}):
        for g, want in zip(got, _fwi_gradients(starts)):
            np.testing.assert_allclose(g, want, rtol=1e-13)



def _unrolled_gradient(c, steps):
    """The gradient of an unrolled plain time loop (3 ops a step): a program of ~10 equations a step."""
    u = dg.zeros(6, chunks=(2, 4))
    for _ in range(steps):
        u = u * 0.99 + c
    (u ** 2).sum().backward()
    g, c.grad = c.grad.numpy(), None
    return g


def test_a_long_program_keeps_its_template_from_its_first_submission_and_a_short_one_from_its_second():
    c = dg.linspace(0.5, 1.0, 6, chunks=(2, 4)).requires_grad_()
    with dask.config.set({"daskgrad.step-cache.enabled": False}):
        want = _unrolled_gradient(c, 200)
    got = []
    for steps in (200, 200, 200, 3, 3, 3):
        before = dg.step_cache_info()
        g = _unrolled_gradient(c, steps)
        after = dg.step_cache_info()
        got.append((g, after["misses"] - before["misses"], after["hits"] - before["hits"]))
    # 200 steps (> LONG_PROGRAM equations): lowered once, then instances; 3 steps: lowered twice
    assert [(m, h) for _, m, h in got] == [(1, 0), (0, 1), (0, 1), (1, 0), (1, 0), (0, 1)]
    for g, _, _ in got[:3]:
        np.testing.assert_array_equal(g, want)
    u = np.zeros(6)
    cn = np.linspace(0.5, 1.0, 6)
    for _ in range(200):  # the gradient by hand: u_t = 0.99 u_{t-1} + c, d(sum u^2)/dc = 2 u_T sum_k 0.99^k
        u = u * 0.99 + cn
    np.testing.assert_allclose(want, 2 * u * sum(0.99 ** k for k in range(200)), rtol=1e-12)


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_changed_structure_builds_anew_and_computes_what_it_would_without_the_cache(change):
    _train(*_data(), 3)  # the loop's steps are kept
    misses, (w, losses) = _misses(CHANGES[change])
    assert misses >= 1
    w_ref, losses_ref = _uncached(CHANGES[change])
    np.testing.assert_array_equal(w, w_ref)
    assert losses == losses_ref


def test_same_structure_with_other_data_values_instantiates_with_the_new_values():
    _train(*_data(seed=0), 3)
    hits = dg.step_cache_info()["hits"]
    w, losses = _train(*_data(seed=1), 3)
    assert dg.step_cache_info()["hits"] > hits
    w_ref, losses_ref = _uncached(_train, *_data(seed=1), 3)
    np.testing.assert_array_equal(w, w_ref)
    assert losses == losses_ref


def test_create_graph_builds_its_own_graph_and_double_backward_is_right():
    X, _ = _data(n=12, d=3, chunks=5)
    for _ in range(3):
        w = dg.tensor([0.5, -1.0, 2.0], dtype="float64", requires_grad=True)
        loss = (dg.tanh(X @ w) ** 2).sum()
        (g,) = dg.grad(loss, w, create_graph=True)
        (g ** 2).sum().backward()
        ref = w.grad.numpy()
    w2 = dg.tensor([0.5, -1.0, 2.0], dtype="float64", requires_grad=True)
    with dask.config.set({"daskgrad.step-cache.enabled": False}):
        loss = (dg.tanh(X @ w2) ** 2).sum()
        (g,) = dg.grad(loss, w2, create_graph=True)
        (g ** 2).sum().backward()
    np.testing.assert_array_equal(ref, w2.grad.numpy())


def test_cache_holds_at_most_its_configured_entries_and_tasks():
    with dask.config.set({"daskgrad.step-cache.entries": 2}):
        for n in (30, 45, 60, 75):
            _train(*_data(n=n), 2)
        assert dg.step_cache_info()["entries"] <= 2
    dg.step_cache_clear()
    with dask.config.set({"daskgrad.step-cache.tasks": 5}):
        _train(*_data(), 3)
        assert dg.step_cache_info()["tasks"] <= 5


def test_a_graph_submitted_once_is_not_kept():
    X, y = _data()
    w = dg.zeros(4, dtype="float64", requires_grad=True)
    dg.binary_cross_entropy_with_logits(X @ w, y).backward()
    assert dg.step_cache_info()["entries"] == 0


def test_a_kept_step_holds_none_of_the_data_it_read():
    rng = np.random.default_rng(0)
    Xn = rng.standard_normal((60, 4))
    ref = weakref.ref(Xn)
    X, y = dg.from_array(Xn, chunks=(15, 4)), _data()[1]
    _train(X, y, 3)
    assert dg.step_cache_info()["entries"] >= 1
    del X, Xn
    gc.collect()
    assert ref() is None


def test_disabled_by_config_instantiates_nothing():
    with dask.config.set({"daskgrad.step-cache.enabled": False}):
        _train(*_data(), 4)
    assert dg.step_cache_info()["hits"] == 0


def test_an_instance_of_large_chunks_runs_on_dask_s_threads_with_the_same_numbers(monkeypatch):
    from daskgrad._dask import program as stepcache

    monkeypatch.setattr(stepcache, "SMALL_CHUNK", 0)  # every chunk counts as large here
    X, y = _data()
    w, losses = _train(X, y, 6)
    assert dg.step_cache_info()["hits"] >= 3
    w_ref, losses_ref = _uncached(_train, X, y, 6)
    np.testing.assert_array_equal(w, w_ref)
    assert losses == losses_ref


def test_an_error_in_an_instance_is_raised_as_without_the_cache_and_grad_is_untouched():
    rng = np.random.default_rng(0)

    def run(matrices):
        A = dg.tensor(matrices[0], requires_grad=True)
        for M in matrices:
            with dg.no_grad():
                A.copy_(dg.tensor(M))
            dg.linalg.cholesky(A).sum().backward()
        return A

    B = rng.standard_normal((4, 4))
    pd = [B @ B.T + 4 * np.eye(4) + k * np.eye(4) for k in range(3)]
    errors = []
    for enabled in (True, False):
        with dask.config.set({"daskgrad.step-cache.enabled": enabled}):
            A = run(pd)
            grad = A.grad.numpy().copy()
            with pytest.raises(Exception) as info:
                run(pd + [-np.eye(4)])
            errors.append((type(info.value), str(info.value)))
            assert np.array_equal(A.grad.numpy(), grad)
    assert errors[0] == errors[1]
    assert dg.step_cache_info()["hits"] > 0


def test_a_module_function_redefined_under_its_name_is_not_instantiated_as_the_old_one(monkeypatch):
    import sys
    import types

    module = types.ModuleType("stepcache_user_kernels")  # a module the user edits and reloads
    monkeypatch.setitem(sys.modules, module.__name__, module)
    X, _ = _data()

    def run():
        return [dg.map_blocks(module.kernel, X).sum().item() for _ in range(4)]

    exec("def kernel(b):\n    return b * 2\n", module.__dict__)
    doubled = run()
    exec("def kernel(b):\n    return b * 3\n", module.__dict__)
    tripled = run()
    np.testing.assert_allclose(np.array(tripled), 1.5 * np.array(doubled), rtol=1e-12)


def test_an_instance_on_a_cluster_keeps_its_tasks_gpu_placement():
    from distributed import Client, Scheduler, SpecCluster, Worker, get_task_stream

    workers = {"gpu-worker": {"cls": Worker, "options": {"nthreads": 1, "resources": {"GPU": 1}}},
               "cpu-worker": {"cls": Worker, "options": {"nthreads": 1}}}
    with SpecCluster(workers=workers, scheduler={"cls": Scheduler, "options": {"dashboard_address": None}}) \
            as cluster, Client(cluster) as client, dask.config.set({"daskgrad.vjp-resources": {"GPU": 1}}):
        names = {addr: info["name"] for addr, info in client.scheduler_info()["workers"].items()}
        X, y = _data()
        w = dg.zeros(X.shape[1], dtype=X.dtype, requires_grad=True)
        for _ in range(6):
            with get_task_stream(client) as ts:
                dg.binary_cross_entropy_with_logits(X @ w, y).backward()
            with dg.no_grad():
                w -= 0.1 * w.grad
            w.grad = None
        assert dg.step_cache_info()["hits"] >= 2
        fused = [t for t in ts.data if "-fused-" in str(t["key"])]  # the last step's, an instance
        assert fused and {names[t["worker"]] for t in fused} == {"gpu-worker"}  # (not one task: see
        # test_on_a_cluster_an_instance_of_small_chunks_is_one_task_with_the_numbers_of_its_tasks)


def _mlp_train(steps, chunks=(15, 2)):
    rng = np.random.default_rng(3)
    X = dg.from_array(rng.standard_normal((60, 4)), chunks=chunks)  # features in two chunks: contractions sum blocks
    t = dg.from_array(rng.integers(0, 3, 60), chunks=chunks[0])
    W1 = dg.from_array(rng.standard_normal((4, 5)) * 0.5, chunks=(chunks[1], 5), requires_grad=True)
    W2 = dg.from_array(rng.standard_normal((5, 3)) * 0.5, chunks=(5, 3), requires_grad=True)
    losses = []
    for _ in range(steps):
        h = dg.tanh(X @ W1)
        loss = dg.cross_entropy(dg.where(h > 0, h, 0.1 * h) @ W2, t) + 1e-3 * (W1 ** 2).sum()
        loss.backward()
        losses.append(loss.item())
        with dg.no_grad():
            W1 -= 0.1 * W1.grad
            W2 -= 0.1 * W2.grad
        W1.grad = W2.grad = None
    return W1.detach().numpy(), W2.detach().numpy(), losses


def test_an_instance_runs_each_fused_chunk_as_a_generated_kernel_with_the_same_numbers():
    W1, W2, losses = _mlp_train(8)
    assert dg.step_cache_info()["hits"] >= 4
    W1_ref, W2_ref, losses_ref = _uncached(_mlp_train, 8)
    np.testing.assert_array_equal(W1, W1_ref)
    np.testing.assert_array_equal(W2, W2_ref)
    assert losses == losses_ref


def _mlp_steps(seed=5, n=200, d=6, h=8, c=3, nchunks=10):
    """A step as benchmarks/run_all.py's MLP: biases, relu, cross-entropy, every parameter updated."""
    rng = np.random.default_rng(seed)
    X = dg.from_array(rng.standard_normal((n, d)).astype("float32"), chunks=(n // nchunks, d))
    t = dg.from_array(rng.integers(0, c, n), chunks=n // nchunks)
    shapes = [(d, h), (h,), (h, c), (c,)]
    ps = [dg.from_array((rng.standard_normal(s) * 0.3).astype("float32"), chunks=-1, requires_grad=True)
          for s in shapes]

    def step():
        w1, b1, w2, b2 = ps
        loss = dg.cross_entropy(dg.relu(X @ w1 + b1) @ w2 + b2, t)
        loss.backward()
        with dg.no_grad():
            for p in ps:
                p -= 0.1 * p.grad
                p.grad = None
        return loss.item()
    return step, ps


def _two_loops_alternating(steps):
    (a, pa), (b, pb) = _mlp_steps(), _mlp_steps()
    losses = [(a(), b()) for _ in range(steps)]
    return [p.detach().numpy() for p in pa + pb], losses


def test_an_instance_whose_results_read_each_other_renames_them_all_on_dask_s_scheduler(monkeypatch):
    # two loops of one structure take turns (a benchmark's variants): each instance renames the
    # parameters' updates, which the tasks of other results (the gradients) read
    from daskgrad._dask import program as stepcache

    monkeypatch.setattr(stepcache, "SMALL_CHUNK", 0)  # run by dask's scheduler: the renamed tasks are made
    params, losses = _two_loops_alternating(5)
    assert dg.step_cache_info()["hits"] >= 4
    params_ref, losses_ref = _uncached(_two_loops_alternating, 5)
    for p, r in zip(params, params_ref):
        np.testing.assert_array_equal(p, r)
    assert losses == losses_ref


def test_each_generated_kernel_gives_what_its_fused_task_gives(monkeypatch):
    from daskgrad._dask import calls, program as stepcache

    checked = []

    class Both:  # an instance's part run both ways: the generated kernel and dask's task
        def __init__(self, task):
            self.task, self.fast = task, calls.fast(task)
            self.key, self.dependencies = task.key, task.dependencies

        def __call__(self, values):
            got, want = self.fast(values), self.task(values)
            if isinstance(self.fast, calls._Kernel):
                checked.append(self.key)
                assert type(got) is type(want)
                for g, w in zip(got, want) if isinstance(want, tuple) else [(got, want)]:
                    np.testing.assert_array_equal(g, w)
            return want

    monkeypatch.setattr(stepcache, "fast", Both)
    _mlp_train(6)
    assert len(checked) >= 8


def _instance_sum(i):
    from daskgrad._dask import program

    x = dg.from_array(np.arange(6.0) + i, chunks=2)  # values in memory: the program's slot
    return program.instantiate(program.Program.of([(x * 2 + 1).sum()._storage.value]))


def test_an_instance_s_arrays_compute_and_cull_as_dasks_own():
    # (what an observer of submissions gets: runtime.observe, testing.submissions)
    for i in range(3):
        (out,) = _instance_sum(i)
    assert dg.step_cache_info()["hits"] == 1
    layer = next(iter(out.dask.layers.values()))
    assert len(list(layer.values())) == len(layer)
    assert out.compute() == 2 * (np.arange(6.0) + 2).sum() + 6
    assert dask.compute(out, optimize_graph=False, scheduler="sync")[0] == out.compute()


def test_an_instance_holds_its_inputs_no_longer_than_its_arrays():
    for i in range(3):
        (out,) = _instance_sum(i)
    ref = weakref.ref(next(iter(out.dask.layers.values())))
    gc.disable()
    try:
        del out
        assert ref() is None  # no reference cycle: the inputs go with the arrays, not at the next gc
    finally:
        gc.enable()


def _threaded_calls(monkeypatch):
    """A list that gains an item each time dask's threaded scheduler runs a graph."""
    from dask import threaded as dask_threaded

    threaded, get_async = [], dask_threaded.get_async
    monkeypatch.setattr(dask_threaded, "get_async", lambda *a, **k: (threaded.append(1), get_async(*a, **k))[1])
    return threaded


def test_a_step_of_whole_arrays_runs_inline_whatever_their_size(monkeypatch):
    """Arrays of one chunk each (PyTorch's two-layer net as a user ports it, 64 x 1,000 rows) give
    dask's threads only whole ops to run, one after another: the instance runs inline, with the
    numbers dask's threads give."""
    from daskgrad._dask import program

    threaded = _threaded_calls(monkeypatch)
    rng = np.random.default_rng(0)
    x, y = dg.tensor(rng.standard_normal((64, 1000))), dg.tensor(rng.standard_normal((64, 10)))
    assert x.array.nbytes > program.SMALL_CHUNK and x.array.npartitions == 1

    def train(steps):
        w1 = dg.tensor(rng.standard_normal((1000, 100)) * 0.01, requires_grad=True)
        w2 = dg.tensor(np.ones((100, 10)) * 0.01, requires_grad=True)
        losses = []
        for _ in range(steps):
            loss = (x.mm(w1).clamp(min=0).mm(w2) - y).pow(2).sum()
            loss.backward()
            losses.append(loss.item())
            with dg.no_grad():
                w1 -= 1e-6 * w1.grad
                w2 -= 1e-6 * w2.grad
                w1.grad.zero_()
                w2.grad.zero_()
        return w1.detach().numpy(), losses

    with dask.config.set(scheduler="threads"):
        train(3)
        threaded.clear()
        rng = np.random.default_rng(1)
        w1, losses = train(4)
        assert dg.step_cache_info()["hits"] >= 3
        assert not threaded
        monkeypatch.setattr(program, "_whole_arrays", lambda prog: False)  # by dask's threads
        dg.step_cache_clear()
        rng = np.random.default_rng(1)
        w1_ref, losses_ref = train(4)
    assert threaded
    # (OpenBLAS may split a matmul otherwise when two threads call it at once: the last bits may differ)
    np.testing.assert_allclose(losses, losses_ref, rtol=1e-12)
    np.testing.assert_allclose(w1, w1_ref, rtol=1e-12)


def test_a_mean_s_step_orders_nothing_when_it_runs(monkeypatch):
    """A mean's division reads its sum's aggregate as a list per axis (a list of lists): the step's
    fused task runs it as a direct call too (calls._Subgraph), where dask's task ordered its
    subgraph with dask.order on every call (a third of pytorch/examples' regression step)."""
    import dask.order

    rng = np.random.default_rng(0)
    X, target = dg.tensor(rng.standard_normal((32, 4))), dg.tensor(rng.standard_normal((32, 1)))
    fc = dg.nn.Linear(4, 1, dtype="float64")

    def step():
        fc.zero_grad()
        d = (fc(X) - target).abs()
        loss = dg.where(d < 1.0, 0.5 * d * d, d - 0.5).mean()
        loss.backward()
        with dg.no_grad():
            for p in fc.parameters():
                p -= 0.1 * p.grad
        return loss.item()

    with dask.config.set(scheduler="threads"):
        for _ in range(3):
            step()
        ordered, order, me = [], dask.order.order, threading.get_ident()

        def counted(*args, **kwargs):  # (on this thread: another test's cluster may still be winding down)
            ordered.extend([1] if threading.get_ident() == me else [])
            return order(*args, **kwargs)

        monkeypatch.setattr(dask.order, "order", counted)
        step()
    assert dg.step_cache_info()["hits"] >= 1
    assert not ordered


def test_a_reductions_combining_tasks_run_as_direct_calls_with_the_numbers_of_dask_s_tasks(monkeypatch):
    """A loss over many chunks is summed by a tree whose tasks read ``getitem`` s of fused tasks
    (tasks inside a task's arguments): they run as direct calls too (calls._Call), where dask's
    task walked and checked each nested task on every call (a fifth of a 200-chunk step)."""
    from daskgrad._dask import calls, program as stepcache
    from daskgrad._dask.internals import Task

    checked, slow = [], []

    class Both:  # an instance's part run both ways: the direct call and dask's task
        def __init__(self, task):
            self.task, self.fast = task, calls.fast(task)
            self.key, self.dependencies = task.key, task.dependencies
            if type(self.fast) is Task:
                slow.append(task.key)

        def __call__(self, values):
            got, want = self.fast(values), self.task(values)
            checked.append(type(self.fast))
            for g, w in zip(got, want) if isinstance(want, tuple) else [(got, want)]:
                np.testing.assert_array_equal(g, w)
            return want

    monkeypatch.setattr(stepcache, "fast", Both)
    X, y = _data(n=64 * 4, chunks=4)
    with dask.config.set(scheduler="threads"):
        w, losses = _train(X, y, 4)
    assert calls._Call in checked and calls._Kernel in checked
    assert not slow
    w_ref, losses_ref = _uncached(_train, X, y, 4)
    np.testing.assert_array_equal(w, w_ref)


def test_a_stencil_time_loops_steps_order_nothing_when_they_run(monkeypatch):
    """The README's checkpointed wave (a stencil: each chunk reads its neighbours' edges): a step's
    Blockwise-fused parts that read a fused task's value through a ``getitem`` task run as direct
    calls too; dask's Task ordered each with dask.order on every call (40% of the block)."""
    import dask.order

    from daskgrad.utils.checkpoint import checkpoint_steps

    def gradient(steps=40):
        c = dg.full(200, 0.5, dtype="float64", chunks=50, requires_grad=True)
        u0 = dg.from_array(np.exp(-0.01 * (np.arange(200) - 100.0) ** 2), chunks=50)
        lap = np.array([1.0, -2.0, 1.0])

        def step(state, i):
            u_prev, u = state
            return u, 2 * u - u_prev + c ** 2 * dg.correlate(u, lap, mode="constant")

        u_prev, u = checkpoint_steps(step, (u0, u0 * 1.0), steps, snapshots=6)
        (u ** 2).sum().backward()
        return c.grad.numpy()

    with dask.config.set(scheduler="threads"):
        first, second = gradient(), gradient()
        ordered, order, me = [], dask.order.order, threading.get_ident()

        def counted(*args, **kwargs):  # (on this thread)
            ordered.extend([1] if threading.get_ident() == me else [])
            return order(*args, **kwargs)

        monkeypatch.setattr(dask.order, "order", counted)
        third = gradient()
        monkeypatch.setattr(dask.order, "order", order)
        uncached = _uncached(gradient)
    assert not ordered
    assert np.abs(first).max() > 0
    assert first.tobytes() == second.tobytes() == third.tobytes()
    np.testing.assert_allclose(third, uncached, rtol=1e-13)


def test_a_time_loop_s_template_runs_in_the_loop_s_own_order_without_dask_order(monkeypatch):
    """The submission that makes a checkpointed loop's template plans its inline run in the order the
    loop made its tasks (Revolve's schedule, as the uncached run goes), not with dask.order over the
    whole loop: that took 4 of the 11 s of a 2-D diffusion's second run at 200 steps."""
    from daskgrad._dask import program
    from daskgrad.utils.checkpoint import checkpoint_steps

    def gradient(steps=60):
        c = dg.tensor(1.0, dtype="float64", requires_grad=True)
        u0 = dg.from_array(np.random.default_rng(0).standard_normal((16, 16)), chunks=8)

        def step(u, i):
            return u + 0.01 * (dg.roll(u, 1, 0) + dg.roll(u, -1, 1) - 2 * u) * c

        u = checkpoint_steps(step, u0, steps, snapshots=5)
        (u ** 2).sum().backward()
        return c.grad.numpy()

    ordered, order = [], program.order

    def counted(graph, *args, **kwargs):
        ordered.append(len(graph))
        return order(graph, *args, **kwargs)

    with dask.config.set(scheduler="threads"):
        first = gradient()
        monkeypatch.setattr(program, "order", counted)
        second, third = gradient(), gradient()  # the template made, then instantiated
    assert program._stats["hits"] >= 1
    assert not ordered
    assert first.tobytes() == second.tobytes() == third.tobytes()


def test_a_step_traced_every_step_points_its_inputs_at_placeholders_made_once():
    # checkpoint_steps traces step(state, i) anew for every i; each trace rebinds the step's inputs to
    # placeholder slots, which were a new dask array each time (README block, 1,000 steps: 1.5 -> 1.35 s)
    from daskgrad._dask import scan

    a = dg.from_array(np.zeros((8, 6)), chunks=(4, 3)).array
    first = scan._placeholder_slot(a, "scan-in0")
    assert scan._placeholder_slot(a, "scan-in0") is first
    assert scan._placeholder_slot(a.rechunk((2, 3)), "scan-in0") is not first
    assert scan._placeholder_slot(a.astype("float32"), "scan-in0").dtype == np.float32
    assert scan._placeholder_slot(a, "scan-in1").name == "scan-in1"


def _minibatches(X, y, batch, epochs):
    """An Adam loop over the minibatches ``X[i * batch:(i + 1) * batch]``, as examples/demo.py writes
    it: its weights, its losses and the cache's misses after each step."""
    w = dg.zeros(X.shape[1], dtype=X.dtype, requires_grad=True)
    opt = dg.optim.Adam([w], lr=0.1)
    losses, misses = [], []
    for _ in range(epochs):
        for i in range(X.shape[0] // batch):
            xb, yb = X[i * batch:(i + 1) * batch], y[i * batch:(i + 1) * batch]
            opt.zero_grad()
            loss = dg.binary_cross_entropy_with_logits(xb @ w, yb)
            loss.backward()
            opt.step()
            losses.append(loss.item())
            misses.append(dg.step_cache_info()["misses"])
    return w.detach().numpy(), losses, misses


@pytest.mark.parametrize("chunks, batch", [(3, 3), (3, 6), (6, 3), (12, 3), (4, 3), (5, 5)])
def test_a_loop_over_more_minibatches_than_the_cache_holds_is_one_program(chunks, batch):
    """A minibatch that is whole chunks of a dataset in memory, or part of one chunk, or (dask's local
    schedulers) parts of two chunks no longer than one, is a value in memory, a slot of the step's
    program: its offsets were part of the program's key, so 20 minibatches were 20 programs, more than
    the cache's 16 templates, each lowered anew at every sighting and never instantiated.  Now the
    loop's step is lowered at its first steps and instantiated for every later one."""
    X, y = _data(n=60, chunks=chunks)
    w, losses, misses = _minibatches(X, y, batch, 3)
    assert misses[-1] == misses[3]  # (Adam's first steps differ: its state is made at the first)
    assert dg.step_cache_info()["hits"] == len(losses) - misses[-1]
    w_ref, losses_ref, _ = _uncached(_minibatches, X, y, batch, 3)
    np.testing.assert_array_equal(w, w_ref)
    assert losses == losses_ref


def _lazy_minibatches(chunks=3, batch=6):
    """examples/demo.py's loop on a dataset made chunk by chunk: 3 epochs of ``60 // batch`` minibatches."""
    dg.manual_seed(0)
    X = dg.randn(60, 4, chunks=(chunks, 4), dtype="float64")
    y = (dg.randn(60, chunks=chunks, dtype="float64") > 0).astype("float64")
    return _minibatches(X, y, batch, 3) + (X, y)


def test_minibatches_of_a_lazy_dataset_are_one_program_once_it_is_held():
    """The first epoch computes and holds the dataset; from the second on every step is an instance
    of one template."""
    w, losses, misses, _, _ = _lazy_minibatches()
    assert misses[-1] == misses[10 + 3]
    w_ref, losses_ref, _, _, _ = _uncached(_lazy_minibatches)
    np.testing.assert_array_equal(w, w_ref)
    assert losses == losses_ref


def test_whole_chunks_of_a_value_in_memory_are_a_value_in_memory_and_a_view_of_it():
    """``X[2:6]`` of X in chunks of 2 rows holds X's own chunks (no task, no copy); ``X[1:5]`` is
    an op, as before.  Both are torch's views: a write through one reaches the other."""
    from daskgrad import _dask as door

    torch = pytest.importorskip("torch")
    a = np.arange(24.0).reshape(8, 3)
    X, t = dg.from_array(a.copy(), chunks=(2, 3)), torch.tensor(a)
    v, tv = X[2:6], t[2:6]
    assert door.is_data(v.array) and v.array.chunks == ((2, 2), (3,))
    held = dict(X.array.dask)
    assert [dict(v.array.dask)[k] for k in door.flat_keys(v.array)] == [held[(X.array.name, 1, 0)],
                                                                       held[(X.array.name, 2, 0)]]
    assert not door.is_data(X[1:5].array)  # (parts of three chunks: a task joins them)
    joined = X[1:3].array  # (parts of two, no longer than one: one chunk, made at once on dask's local schedulers)
    assert door.is_data(joined) and joined.chunks == ((2,), (3,))
    np.testing.assert_array_equal(X[1:3].numpy(), a[1:3])
    part = X[4:5].array  # (part of one chunk: made at once, as dask's task makes it, on dask's local schedulers)
    assert door.is_data(part) and part.chunks == ((1,), (3,))
    v.mul_(2)
    tv.mul_(2)
    np.testing.assert_array_equal(X.numpy(), t.numpy())
    X.add_(1)
    t.add_(1)
    np.testing.assert_array_equal(v.numpy(), tv.numpy())
    w, tw = dg.from_array(a.copy(), chunks=(2, 3)).requires_grad_(), torch.tensor(a, requires_grad=True)
    (w[4:8] ** 2).sum().backward()
    (tw[4:8] ** 2).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), tw.grad.numpy())
    assert w.grad.array.chunks == w.array.chunks


def test_a_compiled_function_or_a_time_loop_slicing_its_inputs_reads_each_call_s_values():
    """A compiled function's argument and a time loop's carry and row are rebound at each call, and
    a tensor it reads may be written between calls: whole chunks or part of one of them are taken at
    each call, never made once at the first (they were: every call gave the first call's numbers)."""
    from daskgrad.utils.checkpoint import scan

    @dg.compile
    def f(x):
        return (x[2:4] * 2).sum(0) + x[3:4].sum(0)

    for k in range(4):
        a = np.arange(24.0).reshape(8, 3) + 100 * k
        np.testing.assert_array_equal(f(dg.from_array(a, chunks=(2, 3))).numpy(), (a[2:4] * 2).sum(0) + a[3:4].sum(0))
    w = dg.from_array(np.arange(4.0), chunks=2)

    @dg.compile
    def g(x):
        return x * w[0:2] + w[3:4]

    x = dg.ones(2, chunks=2, dtype="float64")
    for k in range(3):
        np.testing.assert_array_equal(g(x).numpy(), np.arange(2.0) + k + 3 + k)
        w.add_(1)
    init = dg.from_array(np.arange(4.0), chunks=2)
    xs = np.arange(12.0).reshape(3, 4) * 10
    c, _ = scan(lambda c, x: (c + c[0:2].sum() + c[3:4].sum() + x[2:4].sum(), None), init,
                dg.from_array(xs, chunks=(1, 2)))
    ref = np.arange(4.0)
    for row in xs:
        ref = ref + ref[0:2].sum() + ref[3:4].sum() + row[2:4].sum()
    np.testing.assert_array_equal(c.numpy(), ref)


def test_a_slice_of_a_value_in_memory_of_unknown_chunk_sizes_is_dask_s_own():
    from daskgrad import _dask as door

    x = dg.from_array(np.arange(10.0), chunks=5)
    m = x[x > 3]
    m.numpy()  # (computed and held: a value in memory whose chunk sizes are unknown, NaN)
    assert door.is_data(m.array)
    np.testing.assert_array_equal(m[:].numpy(), np.arange(4.0, 10.0))
    with pytest.raises(ValueError, match="unknown"):
        m[0:2]


def test_a_time_loops_steps_run_inline_whatever_the_length_of_its_per_step_data(monkeypatch):
    """A loop's per-step data is one chunk of every step's rows (an FWI's observed traces), which a
    step reads a row of: 600 steps of 64 make a 300 kB chunk, but the steps' tasks are small and
    their instance runs inline, with the numbers dask's threads give."""
    from dask import threaded as dask_threaded

    from daskgrad._dask import program
    from daskgrad.utils.checkpoint import checkpoint_steps

    threaded, get_async = [], dask_threaded.get_async
    monkeypatch.setattr(dask_threaded, "get_async", lambda *a, **k: (threaded.append(1), get_async(*a, **k))[1])
    xs = dg.from_array(np.random.default_rng(0).standard_normal((600, 64)), chunks=(600, 64))
    assert xs.array.chunksize[0] * 64 * 8 > program.SMALL_CHUNK

    def gradient():
        c = dg.full((64,), 0.5, dtype="float64", requires_grad=True)
        u = checkpoint_steps(lambda u, x: u * 0.99 + c * x, dg.zeros(64, dtype="float64"), 600, snapshots=8, xs=xs)
        (u * u).sum().backward()
        return c.grad.numpy()

    with dask.config.set(scheduler="threads"):
        first, second = gradient(), gradient()
        threaded.clear()
        third = gradient()
    assert dg.step_cache_info()["hits"] == 1
    assert not threaded  # (the instance ran inline: dask's threaded scheduler was not called)
    with dask.config.set({"daskgrad.step-cache.enabled": False}):
        np.testing.assert_allclose(third, gradient(), rtol=1e-13)
    assert first.tobytes() == second.tobytes() == third.tobytes()


def test_a_time_loops_steps_order_nothing_when_they_run(monkeypatch):
    """A step's fused tasks run their Blockwise-fused parts as direct calls (calls._Subgraph), nested
    ones too: dask's Task of a fused subgraph orders that subgraph with dask.order on every call,
    which was 40% of a checkpointed FWI gradient."""
    import dask.order

    fwi = example("fwi")
    sv = fwi.survey(n=15, nbl=3, nshots=2, steps=12)
    sv.rec_x = sv.src[0][0] + 3  # (receivers the wave reaches in 12 steps)
    fwd = fwi.Modelling(sv)
    d_obs = fwd.shot_records(fwd.slowness(fwi.camembert(15)))

    def gradient():
        m = fwd.slowness(np.full((15, 15), fwi.BACKGROUND), requires_grad=True)
        fwd.misfit(m, d_obs, 3).backward()
        return m.grad.numpy()

    with dask.config.set(scheduler="threads"):
        first, second = gradient(), gradient()
        ordered, order, me = [], dask.order.order, threading.get_ident()

        def counted(*args, **kwargs):  # (on this thread: another test's cluster may still be winding down)
            ordered.extend([1] if threading.get_ident() == me else [])
            return order(*args, **kwargs)

        monkeypatch.setattr(dask.order, "order", counted)
        third = gradient()
    assert dg.step_cache_info()["hits"] == 1
    assert not ordered
    assert np.abs(first).max() > 0
    assert first.tobytes() == second.tobytes() == third.tobytes()


def test_a_worker_keeps_the_fused_parts_it_unpickled_by_their_bytes_within_a_bound(monkeypatch):
    """Each pickled parts' bytes are unpickled once in a process and kept by those bytes (no two
    tasks' parts mistaken), the oldest let go past the bound on their bytes: a count of 1,024 let a
    template of 1,100 chunk-fused tasks unpickle them again at every step."""
    import pickle

    from daskgrad._dask import calls
    from daskgrad._dask.internals import Task, TaskRef

    monkeypatch.setattr(calls, "_worker_parts", __import__("collections").OrderedDict())
    monkeypatch.setattr(calls, "_worker_bytes", [0])
    loads = []
    real = calls.cloudpickle.loads
    monkeypatch.setattr(calls.cloudpickle, "loads", lambda b: loads.append(b) or real(b))

    def parts(i):
        task = Task(("t", i), calls._run_fused, (), (), (("x", i),), ("x", i), ("part",), TaskRef(("x", i)))
        return pickle.loads(pickle.dumps(calls.ShippedParts.of(task)))  # (as a worker receives them)

    sizes = [len(parts(i).blob) for i in range(3)]
    monkeypatch.setattr(calls, "_WORKER_PARTS_BYTES", sum(sizes[:2]))
    for _ in range(3):
        for i in range(2):
            assert parts(i).args()[2] == (("x", i),)
    assert len(loads) == 2 and calls._worker_bytes[0] == sum(sizes[:2])
    parts(2).args()  # (past the bound: the oldest goes)
    assert list(calls._worker_parts) == [parts(1).blob, parts(2).blob] and len(loads) == 3


# last: the module's client fixture stays up for the tests after it (this test's cluster case, last of
# its cases, starts it)
@pytest.mark.parametrize("chunks, batch, on_a_cluster", [(4, 6, False), (5, 7, False), (4, 10, False), (4, 6, True)])
def test_minibatches_longer_than_a_chunk_are_one_program_for_each_way_they_lie_across_chunks(request, chunks, batch,
                                                                                             on_a_cluster):
    """A minibatch longer than a chunk that is not whole chunks is a getitem of the chunks it spans:
    its offsets within them are in its program's key, the chunks' places are not.  40 minibatches an
    epoch were 40 programs, more than the cache's 16 (none ever instantiated); now one per offset
    within a chunk (at most ``chunks``), none lowered after the second epoch."""
    if on_a_cluster:
        request.getfixturevalue("client")
    X, y = _data(n=40 * batch, chunks=chunks)
    w, losses, misses = _minibatches(X, y, batch, 3)
    assert misses[-1] == misses[2 * 40]
    assert misses[-1] <= 2 * chunks + 2
    w_ref, losses_ref, _ = _uncached(_minibatches, X, y, batch, 3)
    np.testing.assert_array_equal(w, w_ref)
    assert losses == losses_ref


def test_on_a_cluster_the_step_is_instantiated_with_the_same_numbers_as_without_the_cache(client):
    X, y = _data()
    w, losses = _train(X, y, 8)
    assert dg.step_cache_info()["hits"] >= 5
    w_ref, losses_ref = _uncached(_train, X, y, 8)
    np.testing.assert_array_equal(w, w_ref)
    assert losses == losses_ref


def test_on_a_cluster_every_task_of_an_instance_has_a_key_no_earlier_step_had(client):
    from distributed import get_task_stream

    X, y = _data()
    w = dg.zeros(X.shape[1], dtype=X.dtype, requires_grad=True)
    seen = []
    for _ in range(6):
        with get_task_stream(client) as ts:
            dg.binary_cross_entropy_with_logits(X @ w, y).backward()
            with dg.no_grad():
                w -= 0.1 * w.grad
            w.grad = None
        data = {X.array.name, y.array.name}  # the chunks of X and y, sent with each step's graph as without the cache
        # (and the step's numbers, 0.1 here: values sent with the graph too, named by their value)
        seen.append({k for t in ts.data if (k := t["key"])[0] not in data and not k[0].startswith("scalar-")})
    assert dg.step_cache_info()["hits"] >= 3
    for i, keys in enumerate(seen):
        assert keys and not any(keys & earlier for earlier in seen[:i])


@pytest.mark.parametrize("change", list(CHANGES))
def test_on_a_cluster_a_changed_structure_builds_anew_with_the_numbers_it_would_without_the_cache(client, change):
    _train(*_data(), 3)
    misses, (w, losses) = _misses(CHANGES[change])
    assert misses >= 1
    w_ref, losses_ref = _uncached(CHANGES[change])
    np.testing.assert_array_equal(w, w_ref)
    assert losses == losses_ref


def test_on_a_cluster_an_instance_leaves_grad_and_parameters_readable(client):
    def run():
        X, y = _data()
        w = dg.zeros(X.shape[1], dtype=X.dtype, requires_grad=True)
        for _ in range(5):
            w.grad = None
            loss = dg.binary_cross_entropy_with_logits(X @ w, y)
            loss.backward()
            with dg.no_grad():
                w -= 0.1 * w.grad
        grad = w.grad.numpy()
        np.testing.assert_array_equal(w.grad.numpy(), grad)  # read again: still held
        return grad, w.detach().numpy(), loss.item()

    grad, value, last = run()
    assert dg.step_cache_info()["hits"] >= 2
    grad_ref, value_ref, last_ref = _uncached(run)
    np.testing.assert_array_equal(grad, grad_ref)
    np.testing.assert_array_equal(value, value_ref)
    assert last == last_ref


def test_on_a_cluster_an_instance_reads_its_scalars_inside_its_tasks(client):
    """Adam's step sizes change every step: slots of its template, each a task of its own on the
    scheduler (run, and sent to the tasks that read it) before; now inside the tasks that read them.
    The numbers are those of the loop without the cache, bit for bit."""
    from daskgrad import runtime
    from daskgrad._dask.internals import DataNode

    def run(graphs):
        X, y = _data()
        w = dg.zeros(X.shape[1], dtype=X.dtype, requires_grad=True)
        opt = dg.optim.Adam([w], lr=0.1)
        losses = []
        with runtime.observe(lambda phase, arrays: graphs.append(dict(arrays[0].__dask_graph__()))):
            for _ in range(6):
                opt.zero_grad()
                loss = dg.binary_cross_entropy_with_logits(X @ w, y)
                loss.backward()
                opt.step()
                losses.append(loss.item())
        return w.detach().numpy(), losses

    graphs, plain = [], []
    w, losses = run(graphs)
    assert dg.step_cache_info()["hits"] >= 2
    scalars = [k for k, t in graphs[-1].items() if isinstance(t, DataNode) and np.ndim(t.value) == 0]
    assert not scalars, scalars
    w_ref, losses_ref = _uncached(run, plain)
    assert any(isinstance(t, DataNode) and np.ndim(t.value) == 0 for t in plain[-1].values())  # (lowered: keys)
    np.testing.assert_array_equal(w, w_ref)
    assert losses == losses_ref


def test_on_a_cluster_a_loop_run_again_from_the_same_start_is_instantiated_with_the_same_numbers(client):
    X, y = _data()
    first = _train(X, y, 6)
    hits = dg.step_cache_info()["hits"]
    second = _train(X, y, 6)  # the same names as the first run: the same keys, the same tasks
    assert dg.step_cache_info()["hits"] > hits
    np.testing.assert_array_equal(first[0], second[0])
    assert first[1] == second[1]


def test_on_a_cluster_the_same_step_sent_again_while_its_results_are_kept_sends_the_same_tasks(client):
    # the losses kept in a list (or freed only by Python's cycle collector, later): an instance's task for
    # such a key would differ from the one the scheduler holds (the client fixture fails on its warning)
    X, y = _data()
    kept = []
    for _ in range(4):
        w = dg.zeros(X.shape[1], dtype=X.dtype, requires_grad=True)
        loss = dg.binary_cross_entropy_with_logits(X @ w, y)
        loss.backward()
        kept.append((loss, w))
    assert len({loss.item() for loss, _ in kept}) == 1
    for _, w in kept[1:]:
        np.testing.assert_array_equal(w.grad.numpy(), kept[0][1].grad.numpy())


def _steps_tasks(client, steps=6):
    """A training loop's final weights and, per step, the keys of the tasks the scheduler ran
    (the data's chunks and the step's numbers, sent with each graph, left out)."""
    from distributed import get_task_stream

    X, y = _data()
    w = dg.zeros(X.shape[1], dtype=X.dtype, requires_grad=True)
    tasks = []
    for _ in range(steps):
        with get_task_stream(client) as ts:
            dg.binary_cross_entropy_with_logits(X @ w, y).backward()
            with dg.no_grad():
                w -= 0.1 * w.grad
            w.grad = None
        data = {X.array.name, y.array.name}
        tasks.append([k for t in ts.data if (k := t["key"])[0] not in data and not k[0].startswith("scalar-")])
    return w.detach().numpy(), tasks


def test_on_a_cluster_an_instance_of_small_chunks_is_one_task_with_the_numbers_of_its_tasks(client, monkeypatch):
    """Small chunks: an instance goes to the cluster as one task running the template inline on a
    worker (and a getitem per result), not as its ~20 tasks of microseconds each; where the most it
    holds at once is over ``daskgrad.step-cache.one-task-bytes`` (or that is 0), or over a quarter
    of the room of the worker with the least, it keeps its tasks.  The numbers are the same, bit
    for bit, and the cache's own."""
    from daskgrad import _dask as door

    w, tasks = _steps_tasks(client)
    assert dg.step_cache_info()["hits"] >= 3

    def runs(step):
        return [k for k in step if (k[0] if isinstance(k, tuple) else k).startswith("instance-")]

    assert len(runs(tasks[-1])) == 1 and len(runs(tasks[-2])) == 1
    for limit, room in ((0, None), ("1 kiB", None), ("512 MiB", 4000)):  # (~10 values of <= 120 bytes held)
        dg.step_cache_clear()
        monkeypatch.setattr(door, "task_room", lambda client: room)
        with dask.config.set({"daskgrad.step-cache.one-task-bytes": limit}):
            w_tasks, many = _steps_tasks(client)
        assert dg.step_cache_info()["hits"] >= 3
        assert not any(runs(step) for step in many) and len(many[-1]) > len(tasks[-1])
        np.testing.assert_array_equal(w_tasks, w)
    w_ref, _ = _uncached(_steps_tasks, client)
    np.testing.assert_array_equal(w, w_ref)


def test_on_a_cluster_a_while_loop_forcing_a_norm_instantiates_it_with_the_values_of_each_pass(client):
    def doublings():
        x = dg.from_array(np.array([0.5, -1.2, 0.3, 2.0]), chunks=1, requires_grad=True)
        y = x * x
        n = 0
        while y.norm() < 1000:  # each pass reads the values the pass before computed
            y = y * 2
            n += 1
        y.sum().backward()
        return n, x.grad.numpy()

    n, grad = doublings()
    assert dg.step_cache_info()["hits"] >= 3
    n_ref, grad_ref = _uncached(doublings)
    assert n == n_ref
    np.testing.assert_array_equal(grad, grad_ref)


@pytest.mark.parametrize("index", [np.s_[3:6], np.s_[2:5, 1:3], np.s_[7:11, :2], np.s_[6:9, 1:2]])
def test_on_a_cluster_a_part_across_a_chunk_s_edge_has_numpy_s_values_and_torch_s_gradient(client, index):
    """Parts of two chunks of a tensor held on the cluster (one task cuts and joins them there, with
    parts of the other axis too) hold NumPy's values, write through as torch's views do, and their
    gradient is torch's."""
    torch = pytest.importorskip("torch")
    a = np.arange(48.0).reshape(12, 4)
    W = dg.from_array(a.copy(), chunks=(4, 4)) * 1.0
    W.numpy()  # (held on the cluster from here on)
    W.requires_grad_()
    Wt = torch.tensor(a, requires_grad=True)
    v = W[index]
    assert len(v.array.chunks[0]) == 1 and any(n.startswith("cut_across") for n in v.array.dask.layers)
    np.testing.assert_array_equal(v.detach().numpy(), a[index])
    (v * v).sum().backward()
    (Wt[index] * Wt[index]).sum().backward()
    np.testing.assert_array_equal(W.grad.numpy(), Wt.grad.numpy())
    with dg.no_grad():
        v.mul_(-1.0)
    b = a.copy()
    b[index] *= -1
    np.testing.assert_array_equal(W.detach().numpy(), b)


@pytest.mark.parametrize("one_task", [True, False])
@pytest.mark.parametrize("chunks, batch", [(3, 6), (12, 3), (4, 3)])
def test_on_a_cluster_a_minibatch_step_reads_the_dataset_s_keys_with_the_numbers_of_the_uncached_loop(client,
                                                                                                    one_task,
                                                                                                    chunks, batch):
    """Minibatches of a dataset made and held on the cluster, whole chunks, part of one chunk or parts
    of two (a batch of 3 rows in chunks of 4: two in three cross a chunk's edge): every step after
    the first few is an instance of one template, whose tasks read the dataset's own keys (no task
    aliasing them; a part's start goes inside the task that cuts it), as one task or as the
    template's tasks renamed."""
    from daskgrad import runtime
    from daskgrad._dask.internals import Alias

    graphs = []
    with dask.config.set({} if one_task else {"daskgrad.step-cache.one-task-bytes": 0}):
        with runtime.observe(lambda phase, arrays: graphs.append(dict(arrays[0].__dask_graph__()))):
            w, losses, misses, X, y = _lazy_minibatches(chunks, batch)
        graphs = graphs[-2:]  # (the others' keys let go: the uncached run computes its first step again)
        w_ref, losses_ref, _, _, _ = _uncached(_lazy_minibatches, chunks, batch)
    assert misses[-1] == misses[60 // batch + 3]
    step = graphs[-2]  # (the last is w.numpy()'s)
    assert any(k.startswith("instance-") for k in step if isinstance(k, str)) == one_task
    assert not any(isinstance(t, Alias) for t in step.values())
    names = {k[0] for k in step if isinstance(k, tuple)}
    assert not any(n.startswith("getitem-") for n in names)
    assert {X.array.name, y.array.name} <= names
    np.testing.assert_array_equal(w, w_ref)
    assert losses == losses_ref


def test_on_a_cluster_an_instance_ships_its_fused_tasks_parts_pickled_once_per_template(client):
    """A renamed instance's chunk-fused tasks carry their parts as bytes pickled once per template
    (the scheduler unpickles every task of every submission; the parts as objects were most of a
    step's graph), unpickled once per worker process; the numbers are the uncached loop's."""
    import pickle

    from daskgrad import runtime
    from daskgrad._dask.calls import ShippedParts
    from daskgrad._dask.internals import Task

    def parts(graph):
        return [t.args[0] for t in graph.values() if isinstance(t, Task) and t.args and type(t.args[0]) is ShippedParts]

    graphs = []
    X, y = _data(n=60, chunks=15)
    with dask.config.set({"daskgrad.step-cache.one-task-bytes": 0}):
        with runtime.observe(lambda phase, arrays: graphs.append(dict(arrays[0].__dask_graph__()))):
            w, losses = _train(X, y, 8)
        w_ref, losses_ref = _uncached(_train, X, y, 8)
    last, before = parts(graphs[-2]), parts(graphs[-4])  # (two steps of the loop: backward, then .item())
    assert last and {id(p) for p in last} == {id(p) for p in before}
    got = pickle.loads(pickle.dumps(last[0]))
    assert got.blob == last[0].blob and got.args() is pickle.loads(pickle.dumps(last[0])).args()
    assert len(got.args()) == 5
    np.testing.assert_array_equal(w, w_ref)
    assert losses == losses_ref
