"""One program, many runs: ops record Lazy values (no dask graph), a submission's program is lowered to
dask once per structure and instantiated for every later run -- the plain loop, a compiled function's
calls and a time loop's steps alike -- and a functional update loop stays the size of one step."""
import importlib
import itertools
import sys

import dask
import numpy as np
import pytest
from dask.highlevelgraph import HighLevelGraph

import daskgrad as dg
from daskgrad import _dask as door
from daskgrad.graph import PRIMITIVES
from daskgrad.utils.checkpoint import checkpoint_steps


@pytest.fixture
def graphs_built(monkeypatch):
    """How many HighLevelGraphs dask made meanwhile."""
    count = [0]
    init = HighLevelGraph.__init__

    def counting(self, *args, **kwargs):
        count[0] += 1
        init(self, *args, **kwargs)

    monkeypatch.setattr(HighLevelGraph, "__init__", counting)
    return count


def test_recording_a_hundred_thousand_ops_builds_no_dask_graph_until_a_value_is_read(graphs_built):
    x = dg.from_array(np.arange(4.0), chunks=2, requires_grad=True)
    y = x
    before = graphs_built[0]
    for i in range(25_000):
        y = dg.sin(y * 0.5 + 1.0) - 0.25
    assert graphs_built[0] == before  # 100,000 ops recorded
    np.testing.assert_allclose(y.detach().numpy(), _chain(np.arange(4.0), 25_000))
    assert graphs_built[0] > before


def _chain(v, n):
    for _ in range(n):
        v = np.sin(v * 0.5 + 1.0) - 0.25
    return v


def test_ops_of_a_kind_seen_before_build_no_dask_graph_either(graphs_built):
    x = dg.from_array(np.ones((6, 4)), chunks=(3, 2))

    def record():
        return (dg.tanh(x @ dg.ones((4, 3), dtype="float64")).sum(axis=0) ** 2).mean()

    record()  # the first of each kind runs its forward once on stand-ins, for its chunks
    before = graphs_built[0]
    for _ in range(100):
        record()
    assert graphs_built[0] == before


def test_a_number_read_every_step_is_one_dask_array_made_once(graphs_built):
    # a learning rate lifted to a 0-d value (lazy.Constant) in each step's x - 0.1 * g: its array is
    # made by the first step's submission and found again by every later one, keyed by dtype and bits
    from daskgrad._dask.lazy import Constant

    first = Constant(np.float64(0.1)).array
    before = graphs_built[0]
    assert Constant(np.float64(0.1)).array is first
    assert graphs_built[0] == before
    assert Constant(np.float32(0.1)).array.dtype == np.float32
    assert Constant(np.float64(-0.0)).array.name != Constant(np.float64(0.0)).array.name


def test_a_number_lowered_under_dask_annotate_keeps_its_annotations_to_that_program():
    # the one array per number is not made under dask.annotate: a scalar layer made there carries its
    # annotations (GPU resources), and a later program reading the same number outside must not
    x = dg.from_array(np.arange(4.0), chunks=2)
    with dask.annotate(resources={"GPU": 1}):
        inside = (x * 0.37).array
    outside = (x * 0.37).array
    notes = {n: layer.annotations for n, layer in outside.dask.layers.items() if n.startswith("scalar")}
    assert notes and not any(notes.values())
    notes = {n: layer.annotations for n, layer in inside.dask.layers.items() if n.startswith("scalar")}
    assert notes and all(v == {"resources": {"GPU": 1}} for v in notes.values())


def _loop(steps, X, y, w):
    losses = []
    for _ in range(steps):
        loss = ((X @ w - y) ** 2).mean()
        loss.backward()
        losses.append(loss.item())
        with dg.no_grad():
            w -= 0.1 * w.grad
            w.grad = None
    return losses


def _data():
    rng = np.random.default_rng(0)
    X = dg.from_array(rng.standard_normal((40, 3)), chunks=(10, 3))
    y = dg.from_array(rng.standard_normal(40), chunks=10)
    return X, y


def test_a_repeated_plain_loop_step_calls_no_op_forward_and_no_dask_optimizer(monkeypatch):
    X, y = _data()
    w = dg.from_array(np.zeros(3), chunks=3, requires_grad=True)
    _loop(4, X, y, w)  # the first steps: each kind of op inferred, the program lowered and kept
    lazy, layers = importlib.import_module("daskgrad._dask.lazy"), importlib.import_module("daskgrad._dask.layers")
    program = importlib.import_module("daskgrad._dask.program")
    inferred = (len(lazy._avals), len(layers._inferred))  # an op's forward runs only where these grow
    lowerings, optimized = [0], [0]
    monkeypatch.setattr(program, "lower", _counting(program.lower, lowerings))
    monkeypatch.setattr(program, "optimize_layers", _counting(program.optimize_layers, optimized))
    hits = dg.step_cache_info()["hits"]
    _loop(5, X, y, w)
    assert dg.step_cache_info()["hits"] == hits + 5
    assert (len(lazy._avals), len(layers._inferred)) == inferred
    assert lowerings == [0] and optimized == [0]


def _counting(fn, count):
    def counted(*args, **kwargs):
        count[0] += 1
        return fn(*args, **kwargs)
    return counted


def test_only_the_lowering_module_calls_an_op_s_forward(monkeypatch):
    callers = set()

    def watched(fn):
        def call(*args, **kwargs):
            frame = sys._getframe(1)
            callers.add(frame.f_code.co_filename.replace("\\", "/").rsplit("/daskgrad/", 1)[-1])
            return fn(*args, **kwargs)
        return call

    for p in PRIMITIVES.values():
        if p.impl is not None:
            monkeypatch.setattr(p, "impl", watched(p.impl))
    X, y = _data()
    w = dg.from_array(np.zeros(3), chunks=3, requires_grad=True)
    _loop(3, X, y, w)
    assert callers == {"_dask/lazy.py"}


def test_a_functional_update_loop_stays_the_size_of_one_step_and_computes_gradient_descent():
    X, y = _data()
    grad = dg.func.grad(lambda w: ((X @ w - y) ** 2).mean())
    w = dg.from_array(np.zeros(3), chunks=3)
    Xn, yn, wn = X.numpy(), y.numpy(), np.zeros(3)
    sizes = []
    for i in range(60):
        w = w - 0.1 * grad(w)  # HIPS autograd's and optax's way: a new value every step, no in-place write
        wn = wn - 0.1 * (2 / len(yn)) * Xn.T @ (Xn @ wn - yn)
        sizes.append(len(door.Program.of([w._storage.value]).eqns))
    np.testing.assert_allclose(w.numpy(), wn, rtol=1e-12)
    assert sizes[10] == sizes[-1] <= 4  # not a chain of 60 updates
    assert dg.step_cache_info()["hits"] >= 50


def test_a_functional_update_loop_holds_only_the_last_steps_values():
    """A value computed for good lets go of what it was computed from: each step's ``w`` read the
    last one's, so a loop that never reads ``w`` kept every step's values and records alive."""
    import gc
    import weakref

    X, y = _data()
    grad = dg.func.grad(lambda w: ((X @ w - y) ** 2).mean())
    w = dg.from_array(np.zeros(3), chunks=3)
    seen = []
    for _ in range(40):
        w = w - 0.1 * grad(w)
        seen.append(weakref.ref(w._storage.value))
    gc.collect()
    assert sum(r() is not None for r in seen) <= 3  # (was 40: a chain of every step's w)
    np.testing.assert_allclose(w.numpy(), _uncached_descent(X, y, 40), rtol=1e-12)


def _read_lazily(reads):
    """A (600, 4) dataset read chunk by chunk from a source (here: made), each chunk read noted in ``reads``."""
    import dask.array as da

    # (a name of its own: a graph of the same name is the same computation to dask, and a program reading it
    # is instantiated from the same template, which runs the first one's function)
    source = next(_sources)
    _reads[source] = reads
    return dg.from_array(da.map_blocks(_read_chunk, source, chunks=((100,) * 6, (4,)), dtype=np.float64,
                                       name=f"read-{source}"))


def _read_chunk(source, block_info=None):
    (r0, r1), _ = block_info[None]["array-location"]
    _reads[source].append(r0)  # (a module's dict: a worker in this process finds the same one)
    return np.cos(np.arange(r0, r1, dtype=np.float64)[:, None] * np.arange(1, 5))


_sources, _reads = itertools.count(), {}


def _minibatch_loop(steps, reads):
    """Linear regression over 3 minibatches of a lazily read dataset, with labels made from it."""
    X = _read_lazily(reads)
    y = dg.tanh(X @ dg.from_array(np.arange(4.0), chunks=4))
    w = dg.zeros(4, dtype=dg.float64, requires_grad=True)
    losses = []
    for i in range(steps):
        j = 200 * (i % 3)
        loss = ((X[j:j + 200] @ w - y[j:j + 200]) ** 2).mean()
        loss.backward()
        losses.append(loss.item())
        with dg.no_grad():
            w -= 0.1 * w.grad
            w.grad = None
    return X, y, losses


def test_a_lazily_read_dataset_read_again_is_held_once_it_fits_and_the_numbers_stay_the_same():
    """A loop over minibatches of a dataset generated or read chunk by chunk (``dg.randn``, Zarr)
    read every chunk again at every step: the second step that reads it computes it whole, and the
    labels made from it, and holds them (as a computed value), within ``daskgrad.hold-sources``."""
    reads = []
    X, y, losses = _minibatch_loop(9, reads)
    assert door.is_data(X.array) and door.in_memory(y._storage.value) is not None
    assert len(reads) == 2 + 6  # step 1: its minibatch's 2 chunks (for X and y); step 2: all 6, then none
    streamed = []
    with dask.config.set({"daskgrad.hold-sources": 0}):
        X0, y0, losses0 = _minibatch_loop(9, streamed)
    assert losses == losses0  # bit for bit
    assert not door.is_data(X0.array) and len(streamed) == 9 * 2  # each step reads its minibatch's chunks
    del X, y, X0, y0  # (what is held counts against the bound)
    too_big = []
    with dask.config.set({"daskgrad.hold-sources": "10 kB"}):  # (X is 19.2 kB, y 4.8 kB: y alone fits)
        X1, y1, losses1 = _minibatch_loop(9, too_big)
    assert losses1 == losses0 and not door.is_data(X1.array) and door.in_memory(y1._storage.value) is not None
    assert len(too_big) == 2 + 6 + 7 * 2  # y made once whole, X's minibatch read at every step


def _read_file(block_info=None):
    """A chunk of a (400, 4) "file" whose every value is ``_file["value"]`` (rewritten by a test)."""
    (r0, r1), (c0, c1) = block_info[None]["array-location"]
    return np.full((r1 - r0, c1 - c0), _file["value"])


_file = {"value": 1.0}


def test_every_tensor_over_a_lazy_dataset_read_again_holds_it():
    import dask.array as da

    X1 = dg.from_array(da.ones((400, 4), chunks=(100, 4)) * 2)
    X2 = dg.from_array(X1.array)  # (another tensor over the same dask array: only X1 is read)
    w = dg.ones(4, dtype=dg.float64, requires_grad=True)
    for i in range(6):
        (X1[100 * (i % 4):100 * (i % 4) + 100] @ w).mean().backward()
        w.grad = None
    assert door.is_data(X1.array) and X2.array is X1.array  # (before: X2's, the last made, alone)


def _uncached_descent(X, y, steps):
    Xn, yn, wn = X.numpy(), y.numpy(), np.zeros(3)
    for _ in range(steps):
        wn = wn - 0.1 * (2 / len(yn)) * Xn.T @ (Xn @ wn - yn)
    return wn


def test_a_compiled_call_leaves_the_caller_s_tensors_untouched_while_it_traces():
    X, y = _data()
    w = dg.from_array(np.zeros(3), chunks=3)
    value, version = w._storage.value, w._storage.version
    held = id(value)  # (the dask array itself, read by the function, would be guarded by its attributes)
    seen = []
    record = seen.append  # (a builtin method: guarded by identity, not by what the list holds, which grows)

    def loss(v):
        record((id(v._storage.value) == held, id(w._storage.value) == held))
        return ((X @ v - y) ** 2).mean()

    step = dg.compile(dg.func.grad_and_value(loss))
    for _ in range(3):
        step(w)
    assert list(seen) == [(True, True)]  # traced once, the caller's value in place, then replayed
    assert w._storage.value is value and w._storage.version == version


def test_checkpoint_steps_the_plain_loop_and_compile_share_one_cache_of_programs():
    rng = np.random.default_rng(1)
    u0 = dg.from_array(rng.standard_normal(12), chunks=4)
    c = dg.from_array(np.full(12, 0.2), chunks=4, requires_grad=True)
    xs = dg.from_array(rng.standard_normal((20, 12)), chunks=(5, 4))
    calls = []

    def step(u, x):
        calls.append(1)
        return dg.tanh(u + c * x)

    def gradient():
        c.grad = None
        (checkpoint_steps(step, u0, 20, snapshots=3, xs=xs) ** 2).sum().backward()
        return c.grad.numpy()

    first = gradient()
    hits = dg.step_cache_info()["hits"]
    for _ in range(3):
        np.testing.assert_array_equal(gradient(), first)
    assert dg.step_cache_info()["hits"] >= hits + 2  # each gradient after the second an instance
    assert len(calls) == 4  # step recorded once per gradient


def test_a_program_with_a_value_of_no_exact_key_is_lowered_anew_each_time_with_the_same_numbers():
    x = dg.from_array(np.arange(6.0), chunks=3)
    info = dg.step_cache_info()
    k = np.array([2.0], dtype=object)  # a parameter with no exact hashable form
    out = [dg.map_blocks(lambda b, k: b * k.astype(float), x, k=k).sum().item() for _ in range(3)]
    assert out == [30.0] * 3
    assert dg.step_cache_info()["uncached"] >= info["uncached"] + 3


# The cluster tests last: the module's client fixture stays up once started, and daskgrad submits to any
# live Client, so a test after them would run on the cluster.
def test_a_lazily_read_dataset_held_on_a_cluster_is_held_on_two_workers(client):
    reads = []
    X, y, losses = _minibatch_loop(6, reads)
    with dask.config.set({"daskgrad.hold-sources": 0}):
        assert _minibatch_loop(6, [])[2] == losses
    assert door.is_data(X.array) and len(reads) == 2 + 6
    who_has = client.sync(client.scheduler.who_has, keys=door.flat_keys(X.array))
    assert len(who_has) == 6 and all(len(workers) == 2 for workers in who_has.values())
    del X, y
    with dask.config.set({"daskgrad.hold-sources": "30 kB"}):  # (X 19.2 kB, y 4.8 kB: twice each on a cluster)
        X, y, _ = _minibatch_loop(4, [])
    assert not door.is_data(X.array) and door.in_memory(y._storage.value) is not None


def test_a_held_source_is_held_under_keys_of_its_own_on_a_cluster(client):
    """A graph's name says how to read it, not what it held when read (``da.from_zarr`` names by
    path): a file rewritten after one tensor over it was held is read as it is now by a new one."""
    import dask.array as da

    def over_file():
        return dg.from_array(da.map_blocks(_read_file, chunks=((100,) * 4, (4,)), dtype=np.float64, name="file"))

    _file["value"] = 1.0
    X1 = over_file()
    w = dg.ones(4, dtype=dg.float64, requires_grad=True)
    for i in range(3):
        (X1[100 * i:100 * i + 100] @ w).mean().backward()
        w.grad = None
    assert door.is_data(X1.array) and X1.array.name != "file"
    _file["value"] = 5.0  # the file rewritten
    X2 = over_file()
    assert (X2 @ w).mean().item() == 20.0 and X1.sum().item() == 1600.0


def test_a_training_step_on_a_cluster_asks_the_keeper_once(client):
    """The step's stored parameters and its gradients are held on two workers in one call to the
    scheduler's Keeper (each call is a round trip the step waits for)."""
    X, y = _data()
    model = dg.nn.Linear(3, 1, dtype=dg.float64)
    opt = dg.optim.SGD(model.parameters(), lr=0.1)
    scheduler, keep, calls = client.cluster.scheduler, [], []

    async def counting(**kwargs):
        calls.append(kwargs)
        return await keep[0](**kwargs)

    for step in range(5):
        if step == 2:  # (the Keeper is installed by the first step that needs it)
            keep.append(scheduler.handlers["daskgrad_keep"])
            scheduler.handlers["daskgrad_keep"] = counting
        opt.zero_grad()
        ((model(X)[:, 0] - y) ** 2).mean().backward()
        opt.step()
    scheduler.handlers["daskgrad_keep"] = keep[0]
    assert len(calls) == 3  # one a step: the stores' filing, with the gradients
    assert all(any("-vjp-" in str(k) for k in c["keys"]) and c["who_has"] for c in calls)


def test_a_distributed_client_gets_each_instance_under_keys_of_its_own(client):
    X, y = _data()
    w = dg.from_array(np.zeros(3), chunks=3, requires_grad=True)
    losses = _loop(6, X, y, w)
    w_ref = dg.from_array(np.zeros(3), chunks=3, requires_grad=True)
    with dask.config.set({"daskgrad.step-cache.enabled": False}):
        assert _loop(6, X, y, w_ref) == losses
