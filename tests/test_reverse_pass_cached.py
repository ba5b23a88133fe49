"""A reverse pass taken before is made again: a loop's backward runs its VJP rules the second time its
graph's structure is seen, and never after (engine._reverse_pass_cached); every later backward makes the
same cotangents again on its own values (a :class:`daskgrad._dask.Piece`).  Each test compares
with the same loop with the cache off (every rule run), bit for bit, and counts the rule calls."""
import gc

import dask
import numpy as np
import pytest

import daskgrad as dg
from daskgrad import engine
from op_specs import Cube

CHUNKINGS = [(12, 3), (4, 3), (5, 3), (1, 3)]  # one chunk, even, uneven, size-1 rows


@pytest.fixture
def rules_run(monkeypatch):
    """How many VJP rules ran meanwhile (engine._call_rule)."""
    count = [0]
    call = engine._call_rule

    def counting(*args):
        count[0] += 1
        return call(*args)

    monkeypatch.setattr(engine, "_call_rule", counting)
    dg.step_cache_clear()
    return count


def _training(chunks, steps, data=None):
    """A plain loop as a user writes it: minibatches of new values each step, .grad accumulated over
    two steps, then an SGD step under no_grad.  Returns the gradients seen and the rules run per step."""
    rng = np.random.default_rng(0)
    w = dg.tensor(rng.standard_normal(3), requires_grad=True)
    b = dg.tensor(0.5, dtype=dg.float64, requires_grad=True)
    grads = []
    for i in range(steps):
        xn = rng.standard_normal((12, 3)) if data is None else data[i]
        X = dg.from_array(xn, chunks=chunks)
        y = dg.from_array(np.sin(xn[:, 0]), chunks=chunks[0])
        loss = ((dg.tanh(X @ w + b) - y) ** 2).mean() + 0.1 * (w * w).sum()
        loss.backward()
        grads.append((w.grad.numpy().copy(), b.grad.numpy().copy()))
        if i % 2:
            with dg.no_grad():
                w -= 0.1 * w.grad
                b -= 0.1 * b.grad
            w.grad = b.grad = None
    return grads


@pytest.mark.parametrize("chunks", CHUNKINGS)
def test_a_loop_runs_its_rules_twice_then_makes_the_same_cotangents_again(chunks, rules_run):
    counts = []
    for _ in range(6):  # (grad None and grad accumulated alternate: two structures of writes, one pass)
        before = rules_run[0]
        _training(chunks, 1)
        counts.append(rules_run[0] - before)
    assert counts[0] == counts[1] > 0 and counts[2:] == [0] * 4
    kept = _training(chunks, 6)
    with dask.config.set({"daskgrad.step-cache.enabled": False}):
        before = rules_run[0]
        fresh = _training(chunks, 6)
        assert rules_run[0] - before == 6 * counts[0]
    for (gw, gb), (fw, fb) in zip(kept, fresh):
        assert np.array_equal(gw, fw) and np.array_equal(gb, fb)


def test_gradients_agree_with_torch_when_the_pass_is_made_again(rules_run):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    data = [rng.standard_normal((12, 3)) for _ in range(5)]
    got = _training((5, 3), 5, data)
    w = torch.tensor(np.random.default_rng(0).standard_normal(3), requires_grad=True)
    b = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    for i, xn in enumerate(data):
        X, y = torch.from_numpy(xn), torch.from_numpy(np.sin(xn[:, 0]))
        loss = ((torch.tanh(X @ w + b) - y) ** 2).mean() + 0.1 * (w * w).sum()
        loss.backward()
        np.testing.assert_allclose(got[i][0], w.grad.numpy(), rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(got[i][1], b.grad.numpy(), rtol=1e-12, atol=1e-15)
        if i % 2:
            with torch.no_grad():
                w -= 0.1 * w.grad
                b -= 0.1 * b.grad
            w.grad = b.grad = None
    assert rules_run[0] > 0


def test_one_value_saved_by_two_nodes_and_two_values_of_one_kind_are_different_passes(rules_run):
    """``x * c + x * c`` saves one value at two nodes, ``x * c + x * d`` two values of the same
    shape, chunks and dtype: the key holds which saved values are one, so the second pass is not
    made from the first (it would read ``c`` twice)."""
    x = dg.from_array(np.arange(1.0, 7.0), chunks=4, requires_grad=True)
    c = dg.from_array(np.full(6, 10.0), chunks=4)
    d = dg.from_array(np.full(6, 3.0), chunks=4)
    for _ in range(3):
        ((x * c).sum() + (x * c).sum()).backward()
        np.testing.assert_array_equal(x.grad.numpy(), np.full(6, 20.0))
        x.grad = None
    ran = rules_run[0]
    ((x * c).sum() + (x * d).sum()).backward()
    assert rules_run[0] > ran
    np.testing.assert_array_equal(x.grad.numpy(), np.full(6, 13.0))


def test_grad_and_func_grad_make_their_pass_again(rules_run):
    def f(v):
        return (dg.sin(v) * v).sum()

    df = dg.func.grad(f)
    v = dg.from_array(np.linspace(0, 1, 7), chunks=3) * 1.0  # (a value not computed yet, as every later v)
    counts, results = [], []
    for _ in range(5):
        before = rules_run[0]
        results.append(df(v).numpy())
        counts.append(rules_run[0] - before)
        v = v - 0.1 * dg.tensor(results[-1])
    assert counts[2:] == [0, 0, 0]
    x = dg.from_array(np.linspace(0, 1, 7), chunks=3, requires_grad=True)
    for _ in range(3):
        (g,) = dg.autograd.grad((x ** 3).sum(), x)
        np.testing.assert_allclose(g.numpy(), 3 * np.linspace(0, 1, 7) ** 2, rtol=1e-15)


def _hooked(x):
    y = x * 2.0
    y.register_hook(lambda g: g * 3.0)
    return y.sum()


@pytest.mark.parametrize("make", [_hooked, lambda x: Cube.apply(x).sum()], ids=["tensor-hook", "custom-function"])
def test_user_code_in_a_backward_runs_every_time(make, rules_run):
    """A hook or a custom Function's backward: user code in the pass, which is never made again
    from a record."""
    x = dg.from_array(np.arange(1.0, 5.0), chunks=2, requires_grad=True)
    counts, grads = [], []
    for _ in range(4):
        before = rules_run[0]
        make(x).backward()
        counts.append(rules_run[0] - before)
        grads.append(x.grad.numpy().copy())
        x.grad = None
    assert counts[-1] == counts[0] > 0
    assert all(np.array_equal(g, grads[0]) for g in grads)


def test_a_pass_that_creates_a_graph_runs_its_rules_every_time(rules_run):
    """With create_graph the cotangents are the graph's own tensors, with nodes of their own: the
    pass is taken every time; a backward through that graph is a pass like any other."""
    x = dg.from_array(np.arange(1.0, 5.0), chunks=2, requires_grad=True)
    counts = []
    for _ in range(4):
        before = rules_run[0]
        (g,) = dg.autograd.grad((x ** 3).sum(), x, create_graph=True)
        counts.append(rules_run[0] - before)
        assert g.requires_grad and g.grad_fn is not None
        (g * g).sum().backward()  # d/dx (3x^2)^2 = 36 x^3
        np.testing.assert_allclose(x.grad.numpy(), 36 * np.arange(1.0, 5.0) ** 3, rtol=1e-14)
        x.grad = None
    assert counts == [counts[0]] * 4 and counts[0] > 0


def test_a_submission_holds_the_garbage_collector_off_and_gives_it_back():
    x = dg.from_array(np.arange(4.0), chunks=2, requires_grad=True)
    seen = []
    x.register_hook(lambda g: seen.append(gc.isenabled()) or g)  # (runs inside the reverse pass)
    assert gc.isenabled()
    (x * x).sum().backward()
    assert seen == [False] and gc.isenabled()
    gc.disable()
    try:  # switched off by the user: it stays off
        (x * x).sum().backward()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_cotangent_handed_on_as_it_is_stays_the_callers_tensor(rules_run):
    """``grad(x, x, v, lazy=True)`` returns ``v`` itself, as torch does, every time: a pass whose
    gradient is a cotangent the caller gave is not made again from a recipe."""
    for i in range(4):
        x = dg.from_array(np.arange(6.0), chunks=3, requires_grad=True)
        y = x * 2.0
        v = dg.from_array(np.full(6, i + 1.0), chunks=3)
        (g,) = dg.autograd.grad(x, x, v, lazy=True)
        (gy,) = dg.autograd.grad(y, y, v, lazy=True)
        assert g is v and gy is v
        with dg.no_grad():
            v.add_(100.0)
        assert g.numpy()[0] == gy.numpy()[0] == 101.0 + i


class _Cycle:
    alive = 0
    most = 0

    def __init__(self):
        self.me = self  # (garbage only the cyclic collector frees)
        _Cycle.alive += 1
        _Cycle.most = max(_Cycle.most, _Cycle.alive)

    def __del__(self):
        _Cycle.alive -= 1


def _drops_a_cycle(block):
    _Cycle()
    return block * 2.0


def _notes_the_collector(block, seen):
    seen.append(gc.isenabled())
    return block * 2.0


def test_tasks_run_with_a_collector_while_a_submission_holds_it_off():
    """An inline run (small chunks) collects the youngest generation every 1,024 tasks: the cycles its
    tasks drop do not pile up until the submission ends; tasks that dask's scheduler runs (large
    chunks) run with the collector on."""
    x = dg.from_array(np.ones((2048, 4)), chunks=(1, 4))
    with dask.config.set(scheduler="threads"):
        for _ in range(3):  # (the third runs inline, an instance of the template the second made)
            gc.collect()
            _Cycle.alive = _Cycle.most = 0
            assert float(dg.map_blocks(_drops_a_cycle, x, dtype=np.float64).sum()) == 2 * 2048 * 4
        assert _Cycle.most < 1200  # (2,048 tasks: 911 here, 685 with the collector as it is, 2,048 with none)
        seen = []
        big = dg.from_array(np.ones((2, 100_000)), chunks=(1, 100_000))  # (800 kB chunks: not inline)
        float(dg.map_blocks(_notes_the_collector, big, seen=seen, dtype=np.float64).sum())
        assert seen == [True, True]
    assert gc.isenabled()
