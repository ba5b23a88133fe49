"""daskgrad.compile: a function traced once per kind of call and replayed after gives the numbers the
uncompiled function gives, bit for bit; any change a replay could not see (a shape, chunking, dtype,
argument value, mode, a global rebound, a tensor read from outside updated) traces again; and a
function doing what a replay cannot repeat runs as usual, with a warning (an error with
fullgraph=True)."""
import array
import random
import threading
import time
import types
import warnings

import dask
import numpy as np
import pytest

import daskgrad as dg
from daskgrad import nn, optim
from daskgrad.utils.checkpoint import checkpoint_steps


def _data(n=40, d=3, chunks=10, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = (rng.random(n) > 0.5).astype(float)
    return dg.from_array(X, chunks=(chunks, d)), dg.from_array(y, chunks=chunks)


def _loss(w, X, y):
    return dg.binary_cross_entropy_with_logits(X @ w, y, reduction="sum") + 0.1 * (w * w).sum()


def _ws(d=3, n=4):
    rng = np.random.default_rng(1)
    return [dg.from_array(rng.standard_normal(d), chunks=d) for _ in range(n)]


@pytest.fixture(autouse=True)
def _warnings_are_errors():
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        yield


def test_a_compiled_gradient_step_is_traced_once_then_replayed_with_the_same_numbers_bit_for_bit():
    X, y = _data()
    step = dg.compile(dg.func.grad_and_value(_loss))
    plain = dg.func.grad_and_value(_loss)
    for w in _ws():
        g, value = step(w, X, y)
        g_ref, value_ref = plain(w, X, y)
        np.testing.assert_array_equal(g.numpy(), g_ref.numpy())
        assert value.item() == value_ref.item()
        assert not g.requires_grad and g.grad_fn is None
        assert (g.shape, g.chunks, g.dtype) == (w.shape, w.chunks, w.dtype)
    assert step.cache_info() == {"replays": 3, "traces": 1, "eager": 0, "entries": 1}


def test_a_parameter_that_requires_grad_is_named_as_the_reason_and_its_detached_value_replays():
    # the README's example after its quick start: w is a leaf made with requires_grad=True
    X, y = _data()
    w = dg.zeros(3, dtype="float64", requires_grad=True)
    step = dg.compile(dg.func.grad_and_value(_loss))
    with pytest.warns(UserWarning, match=r"its result requires grad because argument 'w' requires grad .*"
                                         r"pass it detached \(\.detach\(\)"):
        step(w, X, y)
    assert "grad_and_value" not in str(step._warned)  # not the circular advice: the user calls it already
    step = dg.compile(dg.func.grad_and_value(_loss))
    w = w.detach()
    for _ in range(4):
        g, value = step(w, X, y)
        with dg.no_grad():
            w -= 0.1 * g
    assert step.cache_info() == {"replays": 3, "traces": 1, "eager": 0, "entries": 1}


def test_a_replay_does_not_run_the_function():
    X, y = _data()
    calls = array.array("q", [0])  # (guarded by identity: an attribute would be guarded by value, an iterator's
    # state compared after the trace)

    def loss(w):
        calls[0] += 1
        return _loss(w, X, y)

    step = dg.compile(dg.func.grad(loss))
    for w in _ws():
        step(w)
    assert calls[0] == 1


def test_gradients_inside_a_compiled_function_join_its_one_submission(submissions):
    X, y = _data()

    @dg.compile
    def step(w):
        w = w.detach().requires_grad_()
        loss = _loss(w, X, y)
        (g,) = dg.autograd.grad(loss, w)
        return g, loss.detach()

    ws = _ws()
    step(ws[0])
    before = sum(submissions.values())
    for w in ws[1:]:
        g, loss = step(w)
    assert sum(submissions.values()) - before == 3
    g_ref = dg.func.grad(_loss)(ws[-1], X, y)
    np.testing.assert_array_equal(g.numpy(), g_ref.numpy())


@pytest.mark.parametrize("change", ["shape", "chunks", "dtype", "requires_grad", "number", "grad_mode"])
def test_a_call_of_another_kind_is_traced_again_and_computes_its_own_numbers(change):
    X, y = _data()

    def loss(w, scale):
        return (dg.tanh(X[:, : w.shape[0]].type_as(w) @ w) * scale).sum()

    step = dg.compile(lambda w, scale: loss(w, scale).detach())
    w = dg.from_array(np.arange(3.0), chunks=3)
    other = {"shape": (dg.from_array(np.arange(2.0), chunks=2), 2.0),
             "chunks": (dg.from_array(np.arange(3.0), chunks=2), 2.0),
             "dtype": (dg.from_array(np.arange(3.0, dtype="float32"), chunks=3), 2.0),
             "requires_grad": (dg.from_array(np.arange(3.0), chunks=3, requires_grad=True), 2.0),
             "number": (w, 3.0), "grad_mode": (w, 2.0)}[change]
    step(w, 2.0)
    step(w, 2.0)
    assert step.cache_info()["traces"] == 1
    if change == "grad_mode":
        with dg.no_grad():
            out = step(*other)
    else:
        out = step(*other)
    assert step.cache_info()["traces"] == 2
    assert out.item() == loss(*other).item()
    assert out.dtype == loss(*other).dtype


def test_a_global_name_rebound_between_calls_is_traced_again():
    global _SCALE, _DATA
    _SCALE, _DATA = 2.0, _data()[0]
    step = dg.compile(_scaled)
    w = dg.from_array(np.ones(3), chunks=3)
    first = step(w).item()
    _SCALE = 5.0
    assert step(w).item() == pytest.approx(first * 2.5, rel=1e-12)
    _DATA = _DATA * 2
    assert step(w).item() == pytest.approx(first * 5, rel=1e-12)
    assert step.cache_info()["traces"] == 3


_SCALE, _DATA = 1.0, None


def _scaled(w):
    return ((_DATA @ w) * _SCALE).sum()


def test_a_closure_variable_rebound_between_calls_is_traced_again():
    X, _ = _data()
    box = {"X": X}
    target = X

    def make():
        def f(w):
            return (target @ w).sum()
        return f

    step = dg.compile(make())
    w = dg.from_array(np.ones(3), chunks=3)
    first = step(w).item()
    target = X * 3  # noqa: F841 - the closure reads the rebound name
    assert step(w).item() == pytest.approx(3 * first, rel=1e-12)
    assert box["X"] is X


def test_a_model_updated_in_place_by_its_optimizer_is_read_anew_each_step():
    X, y = _data()
    model = nn.Linear(3, 1, dtype="float64")
    opt = optim.SGD(model.parameters(), lr=0.1)
    predict = dg.compile(lambda x: model(x).detach())
    seen = []
    for _ in range(3):
        out = predict(X)
        np.testing.assert_array_equal(out.numpy(), model(X).detach().numpy())
        seen.append(out.numpy())
        loss = ((model(X).reshape(-1) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert not np.array_equal(seen[0], seen[1])
    # traced once: each replay reads the parameters' values of that step
    assert predict.cache_info()["traces"] == 1 and predict.cache_info()["replays"] == 2


def test_a_captured_tensor_updated_in_place_between_calls_is_read_anew_by_each_replay():
    w = dg.from_array(np.ones(3), chunks=3)
    f = dg.compile(lambda x: (x * w).sum())
    x = dg.from_array(np.arange(3.0), chunks=3)
    for i in range(5):
        with dg.no_grad():
            w += 1
        assert f(x).item() == (np.arange(3.0) * (2 + i)).sum()
    assert f.cache_info() == {"replays": 4, "traces": 1, "eager": 0, "entries": 1}


def test_a_lazy_argument_an_in_place_update_left_is_computed_and_the_loop_equals_the_uncompiled_one():
    X, y = _data()
    step = dg.compile(dg.func.grad_and_value(_loss))

    def train(fn):
        w = dg.zeros(3, dtype="float64")
        losses = []
        for _ in range(5):
            g, loss = fn(w, X, y)
            losses.append(loss.item())
            with dg.no_grad():
                w -= 0.05 * g
        return w.numpy(), losses

    w, losses = train(step)
    w_ref, losses_ref = train(dg.func.grad_and_value(_loss))
    np.testing.assert_array_equal(w, w_ref)
    assert losses == losses_ref
    assert step.cache_info()["replays"] >= 3


@pytest.mark.parametrize("what", ["item", "backward", "hook", "random", "python_random", "requires_grad", "inplace"])
def test_a_function_a_replay_cannot_repeat_runs_as_usual_every_call_with_one_warning(what):
    X, y = _data()
    w = dg.from_array(np.ones(3), chunks=3, requires_grad=True)
    state = dg.from_array(np.zeros(3), chunks=3)
    seen = []

    def f(v):
        if what == "item":
            seen.append(v.sum().item())
            return (X @ v).sum()
        if what == "backward":
            _loss(w, X, y).backward()
            return w.grad.detach() * 1
        if what == "hook":
            u = v.detach().requires_grad_()
            z = X @ u
            z.register_hook(lambda g: seen.append(1))
            return dg.autograd.grad(z.sum(), u)[0]
        if what == "random":
            return v * dg.rand(3, chunks=3, dtype="float64")
        if what == "python_random":
            return v * random.random()
        if what == "requires_grad":
            return (X @ w).sum()
        with dg.no_grad():
            state.add_(v)
        return state * 1

    step = dg.compile(f)
    v = dg.from_array(np.arange(3.0), chunks=3)
    with pytest.warns(UserWarning, match="runs without replay"):
        outs = [step(v) for _ in range(3)]
    assert step.cache_info()["replays"] == 0
    if what == "item":
        assert len(seen) == 3
    if what == "backward":
        np.testing.assert_allclose(w.grad.numpy(), 3 * dg.func.grad(_loss)(w.detach(), X, y).numpy())
    if what == "hook":
        assert len(seen) == 3
    if what in ("random", "python_random"):
        assert not np.array_equal(outs[0].numpy(), outs[1].numpy())
    if what == "requires_grad":
        assert outs[0].requires_grad and outs[0].grad_fn is not None
    if what == "inplace":
        np.testing.assert_array_equal(state.numpy(), 3 * np.arange(3.0))


def test_another_thread_drawing_from_python_s_random_does_not_break_a_trace():
    """tornado's periodic callbacks and a LocalCluster's scheduler draw from Python's ``random`` in the
    client's process while a function is traced: only the traced thread's draws break a trace (a
    changed global state made a checkpointed FWI's step unrecordable on a LocalCluster)."""

    def elsewhere():  # another thread draws while the trace runs, every time
        other = threading.Thread(target=random.random)
        other.start()
        other.join()

    def f(v):
        elsewhere()
        return v * 2 + 1

    def step_fn(u, i):
        elsewhere()
        return u * 0.5 + 1

    step = dg.compile(f, fullgraph=True)
    v = dg.from_array(np.arange(3.0), chunks=3)
    for _ in range(3):
        np.testing.assert_array_equal(step(v).numpy(), np.arange(3.0) * 2 + 1)
    out = checkpoint_steps(step_fn, v * 1, 20, snapshots=3)
    np.testing.assert_allclose(out.numpy(), _affine(np.arange(3.0), 20))
    assert step.cache_info()["traces"] == 1 and step.cache_info()["eager"] == 0
    assert random.random == random._inst.random  # the counting wrappers are gone after the trace
    with pytest.raises(RuntimeError, match="step 0 cannot be recorded once for every step: it draws random numbers"):
        checkpoint_steps(lambda u, i: u * random.random(), v * 1, 5, snapshots=2)
    assert random.random == random._inst.random


def _affine(u, steps):
    for _ in range(steps):
        u = u * 0.5 + 1
    return u


def test_fullgraph_raises_where_the_function_cannot_be_replayed():
    step = dg.compile(lambda v: v * v.sum().item(), fullgraph=True)
    with pytest.raises(RuntimeError, match="fullgraph=True.*computes a value"):
        step(dg.ones(3, chunks=3))


def test_compile_takes_torch_s_signature():
    def f(v):
        return v * 2
    assert dg.compile(f, disable=True) is f
    g = dg.compile(fullgraph=True, mode="reduce-overhead", dynamic=False)(f)
    assert g(dg.ones(2)).numpy().tolist() == [2.0, 2.0]
    assert g.__name__ == "f"


def test_replays_on_strict_chunks_never_convert_them_to_host_arrays():
    from strict_array import StrictArray, to_strict

    X, y = _data()
    X, y = to_strict(X), to_strict(y)
    step = dg.compile(dg.func.grad_and_value(_loss))
    for w in _ws():
        g, value = step(to_strict(w), X, y)
        g_ref, _ = dg.func.grad_and_value(_loss)(to_strict(w), X, y)
        assert type(g.array._meta) is StrictArray
        np.testing.assert_array_equal(np.asarray(g.array.compute().get()), np.asarray(g_ref.array.compute().get()))
    assert step.cache_info()["replays"] == 3


def test_minimize_with_a_compiled_objective_replays_its_evaluations_and_finds_the_same_point():
    pytest.importorskip("scipy")
    X, y = _data(n=60, d=4, chunks=15)

    def loss(beta):
        return dg.binary_cross_entropy_with_logits(X @ beta, y, reduction="sum")

    plain = dg.optimize.minimize(loss, np.zeros(4), method="L-BFGS-B")
    compiled = dg.compile(loss)
    fast = dg.optimize.minimize(compiled, np.zeros(4), method="L-BFGS-B")
    again = dg.optimize.minimize(compiled, np.zeros(4), method="L-BFGS-B")
    np.testing.assert_array_equal(fast.x.numpy(), plain.x.numpy())
    assert (fast.nit, fast.nfev, fast.fun) == (plain.nit, plain.nfev, plain.fun)
    np.testing.assert_array_equal(again.x.numpy(), plain.x.numpy())


# ------------------------------------------------------------------ daskgrad.func against torch.func
def test_func_grad_and_grad_and_value_equal_torch_func():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(4), rng.standard_normal(4)

    def f(x, y):
        return (x.sin() * y).sum() + (x * x).sum()

    ta, tb = torch.tensor(a), torch.tensor(b)
    da_, db = dg.from_array(a, chunks=2), dg.from_array(b, chunks=3)
    g_ref = torch.func.grad(f, argnums=(0, 1))(ta, tb)
    g = dg.func.grad(f, argnums=(0, 1))(da_, db)
    for x, r in zip(g, g_ref):
        np.testing.assert_allclose(x.numpy(), r.numpy(), rtol=1e-14)
    (gx, (value, aux)) = dg.func.grad_and_value(lambda x, y: (f(x, y), y * 2), has_aux=True)(da_, db)
    (tgx, (tvalue, taux)) = torch.func.grad_and_value(lambda x, y: (f(x, y), y * 2), has_aux=True)(ta, tb)
    np.testing.assert_allclose(gx.numpy(), tgx.numpy(), rtol=1e-14)
    assert value.item() == pytest.approx(tvalue.item(), rel=1e-14)
    assert not value.requires_grad
    # nested: the second derivative of a scalar function
    h = dg.func.grad(dg.func.grad(lambda x: x.sin().sum() * x.sum()))
    th = torch.func.grad(torch.func.grad(lambda x: x.sin().sum() * x.sum()))
    s, ts = dg.from_array(np.array(0.7)), torch.tensor(0.7, dtype=torch.float64)
    assert h(s).item() == pytest.approx(th(ts).item(), rel=1e-14)


@pytest.mark.parametrize("call", [
    lambda m: m.grad(lambda x: x)(m_ones(m, 3)),
    lambda m: m.grad(lambda x: x.sum(), argnums=2)(m_ones(m, 3)),
    lambda m: m.grad(lambda x, y: x.sum(), argnums=(0, -2))(m_ones(m, 3), m_ones(m, 3)),
    lambda m: m.grad(lambda x: x.sum(), argnums=())(m_ones(m, 3)),
    lambda m: m.grad(lambda x: x.sum(), argnums=[0])(m_ones(m, 3)),
    lambda m: m.grad(lambda x: 3.0)(m_ones(m, 3)),
    lambda m: m.grad(lambda x: x.sum(), has_aux=True)(m_ones(m, 3)),
    lambda m: m.grad(lambda x: x)(3.0),
], ids=["not-scalar", "argnum-out-of-range", "argnums-not-unique", "argnums-empty", "argnums-list", "not-tensor",
        "aux-not-tuple", "input-not-tensor"])
def test_func_grad_raises_torch_s_errors(call):
    torch = pytest.importorskip("torch")
    with pytest.raises(Exception) as expected:
        call(torch.func)
    with pytest.raises(type(expected.value)) as got:
        call(dg.func)
    assert str(got.value) == str(expected.value).replace("torch.", "daskgrad.")


def m_ones(module, n):
    return dg.ones(n, dtype="float64") if module is dg.func else __import__("torch").ones(n, dtype=__import__(
        "torch").float64)


# ------------------------------------------------------------------ what a review found (each silently wrong before)
def test_arguments_of_equal_content_are_not_taken_for_each_other_nor_for_values_made_alike():
    f64 = {"dtype": "float64"}
    sub = dg.compile(lambda a, b: a - b)
    sub(dg.ones(3, **f64), dg.ones(3, **f64))  # dask names both alike: equal content
    np.testing.assert_array_equal(sub(dg.ones(3, **f64), dg.full((3,), 2.0, **f64)).numpy(), [-1, -1, -1])
    add_ones = dg.compile(lambda x: x + dg.ones(3, **f64))
    add_ones(dg.ones(3, **f64))
    np.testing.assert_array_equal(add_ones(dg.from_array(np.arange(3.0))).numpy(), [1, 2, 3])
    A = dg.from_array(np.arange(3.0))
    A2 = A * 2  # read from outside, built on the first call's argument
    add = dg.compile(lambda a: a + A2)
    add(A)
    np.testing.assert_array_equal(add(dg.from_array(np.full(3, 100.0))).numpy(), [100, 102, 104])


def test_a_tensor_reached_through_a_container_or_a_grad_runs_the_function_as_usual():
    X, _ = _data(n=4, d=2, chunks=2)
    w = dg.from_array(np.ones(2), requires_grad=True)
    update = dg.compile(lambda w: w.detach() - 0.5 * w.grad)
    params = [dg.from_array(np.ones(2))]
    project = dg.compile(lambda x: x @ params[0])
    with pytest.warns(UserWarning, match="through an object, a container or .grad"):
        for i in range(3):
            w.grad = None
            ((X @ w) ** 2).sum().mul(i + 1).backward()
            np.testing.assert_array_equal(update(w).numpy(), (w.detach() - 0.5 * w.grad).numpy())
        project(X)
    params[0] = dg.from_array(np.full(2, 3.0))
    np.testing.assert_array_equal(project(X).numpy(), (X @ params[0]).numpy())


def test_python_values_the_function_reads_are_guarded_by_value():
    X, _ = _data(n=4, d=2, chunks=2)
    weights = np.ones(2)
    project = dg.compile(lambda x: x @ dg.from_array(weights))
    project(X)
    weights[:] = 3
    np.testing.assert_array_equal(project(X).numpy(), X.numpy() @ weights)
    config = {"scale": 1.0}
    scaled = dg.compile(lambda x: (x * config["scale"]).sum())
    scaled(X)
    config["scale"] = 3.0
    assert scaled(X).item() == 3 * X.numpy().sum()
    global _HELPER_SCALE
    through_helper = dg.compile(lambda x: _helper(x).sum())
    _HELPER_SCALE = 2.0
    through_helper(X)
    _HELPER_SCALE = 10.0
    assert through_helper(X).item() == 10 * X.numpy().sum()


_HELPER_SCALE = 1.0


# ------------------------------------------------------------------ guards on what a trace read, as torch.compile's
def _scaled_module(lib):
    """The same module in torch and daskgrad: a plain attribute and a buffer scale the sum."""
    class Scaled((torch_nn() if lib is not dg else nn).Module):
        def __init__(self):
            super().__init__()
            self.scale = 1.0
            self.register_buffer("b", lib.tensor(1.0, dtype=lib.float64))

        def forward(self, x):
            return (x * self.scale * self.b).sum()
    return Scaled()


def torch_nn():
    return pytest.importorskip("torch").nn


def _object_attribute(lib):
    cfg = types.SimpleNamespace(scale=1.0)
    return (lambda x: (x * cfg.scale).sum()), lambda: setattr(cfg, "scale", 3.0)


_GUARDED_SCALE = 1.0


def _scaled_by_a_global(x):
    return (x * _GUARDED_SCALE).sum()


def _global(lib):
    global _GUARDED_SCALE
    _GUARDED_SCALE = 1.0

    def change():
        global _GUARDED_SCALE
        _GUARDED_SCALE = 3.0
    return _scaled_by_a_global, change


def _closure_cell(lib):
    scale = 1.0

    def f(x):
        return (x * scale).sum()

    def change():
        nonlocal scale
        scale = 3.0
    return f, change


def _module_buffer_written_in_place(lib):
    m = _scaled_module(lib)
    return (lambda x: m(x)), lambda: m.b.fill_(3.0)


def _module_buffer_assigned(lib):
    m = _scaled_module(lib)
    return (lambda x: m(x)), lambda: setattr(m, "b", lib.tensor(3.0, dtype=lib.float64))


def _module_plain_attribute(lib):
    m = _scaled_module(lib)
    return (lambda x: m(x)), lambda: setattr(m, "scale", 3.0)


def _compiled_module_plain_attribute(lib):
    m = _scaled_module(lib)
    return m, lambda: setattr(m, "scale", 3.0)


READS = {"object attribute": _object_attribute, "global": _global, "closure cell": _closure_cell,
         "module buffer written in place": _module_buffer_written_in_place,
         "module buffer assigned": _module_buffer_assigned, "module plain attribute": _module_plain_attribute,
         "plain attribute of the compiled module": _compiled_module_plain_attribute}


@pytest.mark.parametrize("read", list(READS))
def test_a_python_value_the_trace_read_and_changed_between_calls_gives_torch_compile_s_numbers(read):
    torch = pytest.importorskip("torch")
    torch._dynamo.reset()
    runs = {}
    for lib, compile_ in ((torch, lambda f: torch.compile(f, backend="eager")), (dg, dg.compile)):
        fn, change = READS[read](lib)
        step = compile_(fn)
        x = lib.ones(3, dtype=lib.float64)
        runs[lib] = [step(x).item()]
        change()  # between calls: module.scale = 3.0, a buffer filled, a global rebound, ...
        runs[lib] += [step(x).item(), step(x).item()]
    assert runs[dg] == runs[torch] == [3.0, 9.0, 9.0]
    # traced again once, then replayed: never the stale 3, 3, 3 of a replay that missed the change; a
    # buffer written in place is a tensor the program reads (an input of every replay, as for
    # torch.compile, which does not recompile either): replayed with its new value
    traces = 1 if read == "module buffer written in place" else 2
    assert step.cache_info()["traces"] == traces and step.cache_info()["replays"] == 3 - traces


def _helper(x):
    return x * _HELPER_SCALE


def test_a_module_in_eval_mode_replays_and_in_train_mode_runs_as_usual():
    X, _ = _data(n=8, d=2, chunks=4)
    bn = nn.BatchNorm1d(2, dtype="float64")
    predict = dg.compile(lambda x: bn(x).detach())
    bn.eval()
    for _ in range(2):
        np.testing.assert_array_equal(predict(X).numpy(), bn(X).detach().numpy())
    assert predict.cache_info()["replays"] == 1
    bn.train()  # updates the running statistics in place: each call must
    with pytest.warns(UserWarning, match="writes a tensor in place"):
        out = predict(X)
    expected = nn.BatchNorm1d(2, dtype="float64")
    expected(X)
    np.testing.assert_array_equal(bn.running_mean.numpy(), expected.running_mean.numpy())
    np.testing.assert_array_equal(out.numpy(), nn.BatchNorm1d(2, dtype="float64")(X).detach().numpy())


def test_anomaly_mode_runs_the_function_as_usual_and_raises_as_without_compile():
    step = dg.compile(dg.func.grad(lambda v: dg.sqrt(v).sum()))
    step(dg.from_array(np.array([1.0, 4.0])))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (anomaly mode's own warning)
        with dg.detect_anomaly(), pytest.raises(RuntimeError, match="SqrtBackward0' returned nan"):
            step(dg.from_array(np.array([0.0, -4.0])))


def test_an_inference_tensor_argument_raises_as_without_compile():
    step = dg.compile(dg.func.grad(lambda v: (v * v).sum()))
    step(dg.from_array(np.ones(2)))
    with dg.inference_mode():
        x = dg.from_array(np.ones(2))
    with pytest.raises(RuntimeError, match="Setting requires_grad=True on inference tensor"):
        step(x)


def test_setting_grad_of_a_tensor_it_did_not_make_runs_as_usual_every_call():
    def set_grad(w):
        g = dg.func.grad(lambda v: (v * v).sum())(w.detach())
        w.grad = g
        return g * 1

    w = dg.from_array(np.ones(2), requires_grad=True)
    step = dg.compile(set_grad)
    with pytest.warns(UserWarning, match="sets .grad of a tensor it did not make"):
        for _ in range(2):
            w.grad = None
            step(w)
            np.testing.assert_array_equal(w.grad.numpy(), [2, 2])


def test_in_place_writes_on_its_own_tensors_still_replay():
    step = dg.compile(lambda w: (w * 2).add_(1))
    for i in range(3):
        assert step(dg.full((2,), float(i), dtype="float64")).numpy().tolist() == [2 * i + 1] * 2
    assert step.cache_info()["replays"] == 2


def test_a_compiled_method_keeps_no_instance_alive():
    import gc
    import weakref

    class Model:
        def __init__(self, scale):
            self.scale = scale

        @dg.compile
        def predict(self, x):
            return x * 2

    refs = []
    for i in range(10):
        m = Model(i)
        m.predict(dg.ones(2))
        refs.append(weakref.ref(m))
        del m
    gc.collect()
    assert not any(r() for r in refs)
    assert Model.predict.cache_info()["eager"] == 0 and Model.predict.cache_info()["entries"] == 0


def test_a_compiled_function_called_inside_another_is_part_of_its_trace():
    inner = dg.compile(lambda x: x * 2)
    outer = dg.compile(lambda x: inner(x) + 1)
    for i in range(3):
        assert outer(dg.full((2,), float(i), dtype="float64")).numpy().tolist() == [2 * i + 1] * 2
    assert outer.cache_info()["replays"] == 2


def test_threads_calling_a_new_kind_at_once_trace_it_once():
    import concurrent.futures

    step = dg.compile(dg.func.grad(lambda v: (v * v).sum()))
    xs = [dg.from_array(np.full(3, float(i))) for i in range(8)]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(step, xs))
    for i, g in enumerate(outs):
        np.testing.assert_array_equal(g.numpy(), [2.0 * i] * 3)
    assert step.cache_info()["traces"] == 1


def test_compile_raises_torch_s_errors_for_bad_arguments():
    torch = pytest.importorskip("torch")
    for kwargs in ({"mode": "bogus"}, {"mode": "default", "options": {}}):
        with pytest.raises(RuntimeError) as expected:
            torch.compile(lambda x: x, **kwargs)(torch.ones(1))
        with pytest.raises(RuntimeError) as got:
            dg.compile(lambda x: x, **kwargs)
        assert str(got.value) == str(expected.value)
    with pytest.raises(AssertionError) as expected:
        torch.compile(3)
    with pytest.raises(AssertionError) as got:
        dg.compile(3)
    assert str(got.value) == str(expected.value)


def test_func_grad_on_constants_containers_and_aux_as_torch_func():
    torch = pytest.importorskip("torch")
    a = np.array([1.0, 2.0])
    zeros = dg.func.grad(lambda x: (x * 0).detach().sum())(dg.from_array(a))
    tzeros = torch.func.grad(lambda x: (x * 0).detach().sum())(torch.tensor(a))
    np.testing.assert_array_equal(zeros.numpy(), tzeros.numpy())
    g = dg.func.grad(lambda p: (p["w"] * p["v"][0]).sum())({"w": dg.from_array(a), "v": (dg.from_array(2 * a),)})
    tg = torch.func.grad(lambda p: (p["w"] * p["v"][0]).sum())({"w": torch.tensor(a), "v": (torch.tensor(2 * a),)})
    np.testing.assert_array_equal(g["w"].numpy(), tg["w"].numpy())
    np.testing.assert_array_equal(g["v"][0].numpy(), tg["v"][0].numpy())
    _, aux = dg.func.grad(lambda x: ((x * x).sum(), x * 3), has_aux=True)(dg.from_array(a))
    _, taux = torch.func.grad(lambda x: ((x * x).sum(), x * 3), has_aux=True)(torch.tensor(a))
    assert aux.requires_grad == taux.requires_grad is False


def test_a_step_of_large_chunks_replays_on_dask_s_scheduler_with_the_same_numbers():
    rng = np.random.default_rng(3)
    X = dg.from_array(rng.standard_normal((16000, 5)), chunks=(8000, 5))  # 320,000-byte chunks: not run inline
    y = dg.from_array((rng.random(16000) > 0.5) * 1.0, chunks=8000)
    step = dg.compile(dg.func.grad_and_value(_loss))
    with dask.config.set(scheduler="threads"):
        for w in _ws(d=5, n=3):
            g, value = step(w, X, y)
            g_ref, value_ref = dg.func.grad_and_value(_loss)(w, X, y)
            np.testing.assert_array_equal(g.numpy(), g_ref.numpy())
            assert value.item() == value_ref.item()
    assert step.cache_info()["replays"] == 2


def _memory_keys(client):
    return set(client.run_on_scheduler(lambda dask_scheduler: [k for k, ts in dask_scheduler.tasks.items()
                                                               if ts.state == "memory"]))


# ------------------------------------------------------------------ what a function reaches (a fuzzing review's cases)
_REACHED = {  # source of a user's module defining ``f(w)`` and ``change(v)``: what f reads, changed between calls
    "a class's attribute": "class Cfg:\n    scale = 1.0\ndef f(w):\n    return (X @ w) * Cfg.scale\n"
                           "def change(v):\n    Cfg.scale = v\n",
    "a class's attribute read through an object": "class Cfg:\n    scale = 1.0\ncfg = Cfg()\n"
                                                  "def f(w):\n    return (X @ w) * cfg.scale\n"
                                                  "def change(v):\n    Cfg.scale = v\n",
    "a module's attribute": "import types\ncfg = types.ModuleType('cfg')\ncfg.scale = 1.0\n"
                            "def f(w):\n    return (X @ w) * cfg.scale\ndef change(v):\n    cfg.scale = v\n",
    "a global of a user module's function": "import types\nhelpers = types.ModuleType('helpers')\n"
                                            "exec('SCALE = 1.0\\ndef scale():\\n    return SCALE\\n',\n"
                                            "     helpers.__dict__)\n"
                                            "def f(w):\n    return (X @ w) * helpers.scale()\n"
                                            "def change(v):\n    helpers.SCALE = v\n",
    "a __slots__ attribute": "class Cfg:\n    __slots__ = ('scale',)\ncfg = Cfg()\ncfg.scale = 1.0\n"
                             "def f(w):\n    return (X @ w) * cfg.scale\ndef change(v):\n    cfg.scale = v\n",
    "an attribute three levels down": "class NS:\n    pass\ncfg = NS(); cfg.a = NS(); cfg.a.b = NS()\n"
                                      "cfg.a.b.scale = 1.0\n"
                                      "def f(w):\n    return (X @ w) * cfg.a.b.scale\n"
                                      "def change(v):\n    cfg.a.b.scale = v\n",
    "an object in a list attribute": "class NS:\n    pass\nh = NS(); h.items = [NS()]; h.items[0].scale = 1.0\n"
                                     "def f(w):\n    return (X @ w) * h.items[0].scale\n"
                                     "def change(v):\n    h.items[0].scale = v\n",
    "a global a method reads": "LR = 1.0\nclass Sched:\n    def get(self):\n        return LR\nsched = Sched()\n"
                               "def f(w):\n    return (X @ w) * sched.get()\n"
                               "def change(v):\n    global LR\n    LR = v\n",
    "a global a function in a dict reads": "LR = 1.0\ndef lr():\n    return LR\nfns = {'lr': lr}\n"
                                           "def f(w):\n    return (X @ w) * fns['lr']()\n"
                                           "def change(v):\n    global LR\n    LR = v\n",
    "a default argument": "def f(w, scale=1.0):\n    return (X @ w) * scale\n"
                          "def change(v):\n    f.__defaults__ = (v,)\n",
    "a global read through globals()": "LR = 1.0\ndef f(w):\n    return (X @ w) * globals()['LR']\n"
                                       "def change(v):\n    global LR\n    LR = v\n",
    # a review's, after the first fix
    "__slots__ given as a dict": "class Cfg:\n    __slots__ = {'scale': 'doc'}\ncfg = Cfg()\ncfg.scale = 1.0\n"
                                 "def f(w):\n    return (X @ w) * cfg.scale\ndef change(v):\n    cfg.scale = v\n",
    "a private (mangled) slot": "class Cfg:\n    __slots__ = ('__scale',)\n"
                                "    def get(self):\n        return self.__scale\n"
                                "    def set(self, v):\n        self.__scale = v\ncfg = Cfg()\ncfg.set(1.0)\n"
                                "def f(w):\n    return (X @ w) * cfg.get()\ndef change(v):\n    cfg.set(v)\n",
    "getattr of a module": "import types\ncfg = types.ModuleType('cfg')\ncfg.scale = 1.0\n"
                           "def f(w):\n    return (X @ w) * getattr(cfg, 'scale')\ndef change(v):\n    cfg.scale = v\n",
    "an attrgetter of a module": "import types, operator\ncfg = types.ModuleType('cfg')\ncfg.scale = 1.0\n"
                                 "get = operator.attrgetter('scale')\n"
                                 "def f(w):\n    return (X @ w) * get(cfg)\ndef change(v):\n    cfg.scale = v\n",
    "a partial of a function reading a global": "import functools\nS = 1.0\ndef g(x, k):\n    return x * S * k\n"
                                                "p = functools.partial(g, k=1.0)\ndef f(w):\n    return p(X @ w)\n"
                                                "def change(v):\n    global S\n    S = v\n",
    "an attribute five levels down": "class NS:\n    pass\ncfg = NS(); cfg.a = NS(); cfg.a.b = NS(); cfg.a.b.c = NS()\n"
                                     "cfg.a.b.c.d = NS(); cfg.a.b.c.d.scale = 1.0\n"
                                     "def f(w):\n    return (X @ w) * cfg.a.b.c.d.scale\n"
                                     "def change(v):\n    cfg.a.b.c.d.scale = v\n",
    "an OrderedDict changed in place": "import collections\nCFG = collections.OrderedDict(scale=1.0)\n"
                                       "def f(w):\n    return (X @ w) * CFG['scale']\n"
                                       "def change(v):\n    CFG['scale'] = v\n",
    "a deque appended to": "import collections\nQ = collections.deque([1.0])\n"
                           "def f(w):\n    return (X @ w) * Q[-1]\ndef change(v):\n    Q.append(v)\n",
    "a dict subclass's class attribute": "class D(dict):\n    scale = 1.0\nd = D()\n"
                                         "def f(w):\n    return (X @ w) * d.scale\ndef change(v):\n    D.scale = v\n",
    "a global a class's __init__ reads": "SCALE = 1.0\nclass Helper:\n    def __init__(self):\n        self.s = SCALE\n"
                                         "def f(w):\n    return (X @ w) * Helper().s\n"
                                         "def change(v):\n    global SCALE\n    SCALE = v\n",
    "vars of a module": "import types\ncfg = types.ModuleType('cfg')\ncfg.scale = 1.0\n"
                        "def f(w):\n    return (X @ w) * vars(cfg)['scale']\ndef change(v):\n    cfg.scale = v\n",
    "an object holding a dict that holds itself": "class NS:\n    pass\nh = NS(); h.scale = 1.0\n"
                                                  "h.d = {}; h.d['me'] = h.d\n"
                                                  "def f(w):\n    return (X @ w) * h.scale\n"
                                                  "def change(v):\n    h.scale = v\n",
}


@pytest.mark.parametrize("case", list(_REACHED))
def test_a_value_the_function_reaches_changed_between_calls_is_never_replayed_stale(case):
    """What the function reads through a class, a module of the user's, slots, attributes a few levels
    down, a method, a function held in a dict or its defaults changes between calls: each call gives
    what the function itself gives (traced again, or run as usual where it reads names it computes),
    never the first call's value replayed."""
    user = types.ModuleType("user_case")
    user.X = dg.from_array(np.arange(6.0).reshape(3, 2), chunks=(2, 2))
    exec(_REACHED[case], user.__dict__)
    w = dg.from_array(np.array([1.0, -1.0]), chunks=1)
    compiled = dg.compile(user.f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (globals(): runs as usual, with a warning)
        for i in range(4):
            user.change(float(i + 1))
            np.testing.assert_array_equal(compiled(w).numpy(), user.f(w).numpy())
        info = compiled.cache_info()
        if case == "a global read through globals()":
            assert info["eager"] == 4
        else:
            assert info["traces"] == 4
        user.change(4.0)  # the same again: replayed
        np.testing.assert_array_equal(compiled(w).numpy(), user.f(w).numpy())
    if case not in ("a global read through globals()", "a deque appended to"):  # (appended again: another value)
        assert compiled.cache_info()["replays"] == 1


def test_a_model_of_an_abc_metaclass_compiles_and_replays():
    """A model class with another metaclass (``abc.ABC``) reached by the guards is a class, not a
    module to read parameters from (it raised a TypeError)."""
    import abc

    class Base(nn.Module, abc.ABC):
        @abc.abstractmethod
        def forward(self, x):
            ...

    class Lin(Base):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 2)

        def forward(self, x):
            return self.lin(x)

    model, x = Lin(), dg.from_array(np.ones((4, 3), dtype="float32"), chunks=2)
    run = dg.compile(lambda x: model(x).detach())
    for _ in range(3):
        np.testing.assert_array_equal(run(x).numpy(), model(x).detach().numpy())
    assert run.cache_info()["replays"] == 2


def test_a_function_reaching_more_values_than_a_guard_describes_runs_as_usual_with_a_warning():
    """A model holding 50,000 objects: describing them all at each call cost 0.4 s; past 20,000
    values the function runs as usual, with a warning saying why."""
    class Sample:
        def __init__(self, i):
            self.i = i

    class Holder(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 2)
            self.samples = [Sample(i) for i in range(50_000)]

        def forward(self, x):
            return self.lin(x)

    model, x = Holder(), dg.from_array(np.ones((4, 3), dtype="float32"), chunks=2)
    run = dg.compile(lambda x: model(x).detach())
    with pytest.warns(UserWarning, match="too many to guard"):
        np.testing.assert_array_equal(run(x).numpy(), model(x).detach().numpy())
    assert run.cache_info()["eager"] == 1


# The cluster tests last: the module's client fixture stays up once started, and daskgrad submits to any
# live Client, so a test after them would run on the cluster.
# ------------------------------------------------------------------ on a cluster (the module's client lives on after)
def test_a_compiled_step_on_a_cluster_replays_and_leaves_no_key_of_its_graph_in_memory(client):
    X, y = _data()
    step = dg.compile(dg.func.grad_and_value(_loss))
    plain = dg.func.grad_and_value(_loss)
    before = _memory_keys(client)
    for w in _ws():
        g, value = step(w, X, y)
        g_ref, value_ref = plain(w, X, y)
        np.testing.assert_array_equal(g.numpy(), g_ref.numpy())
        assert value.item() == value_ref.item()
        del g, value, g_ref, value_ref
    assert step.cache_info()["replays"] == 3
    deadline = time.time() + 10
    while _memory_keys(client) != before and time.time() < deadline:  # (release is asynchronous)
        time.sleep(0.02)
    assert _memory_keys(client) == before


def test_minimize_with_a_compiled_objective_on_a_cluster_finds_the_same_point(client):
    pytest.importorskip("scipy")
    X, y = _data(n=60, d=4, chunks=15)

    def loss(beta):
        return dg.binary_cross_entropy_with_logits(X @ beta, y, reduction="sum")

    plain = dg.optimize.minimize(loss, np.zeros(4), method="L-BFGS-B")
    fast = dg.optimize.minimize(dg.compile(loss), np.zeros(4), method="L-BFGS-B")
    np.testing.assert_array_equal(fast.x.numpy(), plain.x.numpy())
    assert (fast.nit, fast.nfev) == (plain.nit, plain.nfev)
