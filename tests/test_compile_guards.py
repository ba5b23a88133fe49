"""daskgrad.compile: what a replay used to repeat silently (found by review), each against the uncompiled
function and torch: a tensor argument's layout (strides, contiguity, storage offset), results that are views of
each other or of a tensor made inside (views again, as eagerly), and draws from a random generator or an
iterator the function reaches (it runs as usual)."""
import itertools
import random
import warnings

import numpy as np
import pytest
import torch

import daskgrad as dg

A = np.arange(16.0).reshape(4, 4)


@pytest.fixture(autouse=True)
def _warnings_are_errors():
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        yield


# ------------------------------------------------------------------ a tensor argument's layout
@pytest.mark.parametrize("fn", [
    lambda x: x * (2.0 if x.is_contiguous() else 3.0),
    lambda x: x * float(x.stride()[0]),
    lambda x: x * float(x.stride(1) + 10 * x[1:].stride(0)),
], ids=["is_contiguous", "stride", "stride-of-a-view"])
def test_a_function_reading_an_argument_s_strides_is_traced_again_for_another_layout(fn):
    cf = dg.compile(fn)
    X = dg.from_array(A, chunks=2)
    for x, t in [(X, torch.tensor(A)), (X.T, torch.tensor(A).T), (X, torch.tensor(A)), (X.T, torch.tensor(A).T)]:
        got = cf(x).numpy()
        np.testing.assert_array_equal(got, fn(x).numpy())
        np.testing.assert_array_equal(got, fn(t).numpy())
    assert cf.cache_info() == {"replays": 2, "traces": 2, "eager": 0, "entries": 2}


def test_a_view_of_a_non_contiguous_argument_raises_as_eagerly_after_a_trace_with_a_contiguous_one():
    def f(x):
        return x.view(-1) * 2

    cf = dg.compile(f)
    X = dg.from_array(A, chunks=2)
    np.testing.assert_array_equal(cf(X).numpy(), f(torch.tensor(A)).numpy())
    with pytest.raises(RuntimeError) as want:
        f(torch.tensor(A).T)
    for call in (lambda: f(X.T), lambda: cf(X.T), lambda: cf(X.T)):
        with pytest.raises(RuntimeError) as got:
            call()
        assert str(got.value) == str(want.value)
    np.testing.assert_array_equal(cf(X).numpy(), f(torch.tensor(A)).numpy())  # (the first kind still replays)
    assert cf.cache_info()["replays"] == 1


def test_a_function_reading_a_storage_offset_is_traced_again_for_another_offset():
    def h(x):
        return x * float(x.storage_offset()) + float(x.T[1:].storage_offset())

    ch = dg.compile(h)
    B = np.arange(32.0).reshape(8, 4)
    Y, T = dg.from_array(B, chunks=2), torch.tensor(B)
    for i in (2, 4, 2, 4, 0):
        got = ch(Y[i:i + 4]).numpy()
        np.testing.assert_array_equal(got, h(Y[i:i + 4]).numpy())
        np.testing.assert_array_equal(got, h(T[i:i + 4]).numpy())
    got = ch(Y[2:6].view(dg.float32)).numpy()  # (another dtype: another kind)
    np.testing.assert_array_equal(got, h(T[2:6].view(torch.float32)).numpy())
    assert ch.cache_info()["replays"] == 2


def test_a_function_not_reading_offsets_replays_every_minibatch_view():
    def f(x):  # (strides read, views of the argument made: no offset read)
        return (x.T @ x).sum(0) + x.reshape(-1)[:4] * float(x.stride(0)) + x.view(4, 2)[1:].T.sum()

    cf = dg.compile(f)
    B = np.arange(32.0).reshape(8, 4)
    Y, T = dg.from_array(B, chunks=(2, 4)), torch.tensor(B)
    for i in range(0, 8, 2):
        got = cf(Y[i:i + 2]).numpy()
        np.testing.assert_array_equal(got, f(T[i:i + 2]).numpy())
    assert cf.cache_info() == {"replays": 3, "traces": 1, "eager": 0, "entries": 1}


def test_a_view_dtype_of_an_offset_argument_raises_as_torch_after_a_trace_at_an_even_offset():
    cf = dg.compile(lambda x: x.view(dg.float64) * 2)
    B = np.arange(16.0, dtype=np.float32)
    Y, T = dg.from_array(B, chunks=4), torch.tensor(B)
    np.testing.assert_array_equal(cf(Y[2:6]).numpy(), (T[2:6].view(torch.float64) * 2).numpy())
    with pytest.raises(RuntimeError) as want:
        T[1:5].view(torch.float64)
    with pytest.raises(RuntimeError) as got:
        cf(Y[1:5])
    assert str(got.value) == str(want.value)


# ------------------------------------------------------------------ results that share memory
def _views(x):
    y = x * 2
    return y, y[1:], y.T


@pytest.mark.parametrize("call", range(3))  # (a trace, then replays)
def test_results_that_are_views_of_each_other_are_views_on_every_call(call):
    cf = dg.compile(_views)
    X = dg.from_array(A[:3], chunks=2)
    for _ in range(call + 1):
        y, v, t = cf(X)
    yt, vt, tt = _views(torch.tensor(A[:3]))
    assert v._base is y and t._base is y and vt._base is yt
    for a, b in ((y, yt), (v, vt), (t, tt)):
        assert (a.stride(), a.storage_offset(), a.is_contiguous()) == (b.stride(), b.storage_offset(),
                                                                       b.is_contiguous())
    y.mul_(10)
    yt.mul_(10)
    t[0, 1] = -1.0
    tt[0, 1] = -1.0
    for a, b in ((y, yt), (v, vt), (t, tt)):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert cf.cache_info()["replays"] == call


def test_a_tensor_returned_twice_is_one_tensor_and_a_detached_one_shares_its_storage():
    def g(x):
        y = x * 2
        return y, y, y.detach()

    cg = dg.compile(g)
    X = dg.from_array(A, chunks=2)
    for _ in range(2):
        a, b, c = cg(X)
        at, bt, ct = g(torch.tensor(A))
        assert a is b and c is not a and (at is bt and ct is not at)
        a.add_(100)
        at.add_(100)
        np.testing.assert_array_equal(b.numpy(), bt.numpy())
        np.testing.assert_array_equal(c.numpy(), ct.numpy())
    assert cg.cache_info()["replays"] == 1


def test_a_view_of_a_tensor_made_inside_keeps_its_layout():
    def f(x):
        return (x * 2).T[:, 1:]

    cf = dg.compile(f)
    X = dg.from_array(A, chunks=2)
    for _ in range(2):
        r, rt = cf(X), f(torch.tensor(A))
        assert (r.stride(), r.storage_offset(), r.is_contiguous()) == (rt.stride(), rt.storage_offset(), False)
        np.testing.assert_array_equal(r.numpy(), rt.numpy())
        with pytest.raises(RuntimeError) as want:
            rt.view(-1)
        with pytest.raises(RuntimeError) as got:
            r.view(-1)
        assert str(got.value) == str(want.value)
        np.testing.assert_array_equal(r.reshape(-1).numpy(), rt.reshape(-1).numpy())
    assert cf.cache_info()["replays"] == 1


def test_a_view_of_an_argument_returned_is_a_view_of_it_on_every_call():
    def h(x):
        return x[1:], x.T, (x * 2).T

    ch = dg.compile(h)
    for _ in range(3):
        x, xt = dg.from_array(A.copy(), chunks=2), torch.tensor(A.copy())
        a, t, u = ch(x)
        at, tt, ut = h(xt)
        assert a._base is x and t._base is x and u._base is not x
        assert (a.stride(), a.storage_offset(), t.stride()) == (at.stride(), at.storage_offset(), tt.stride())
        a.mul_(10)
        at.mul_(10)
        for p, q in ((x, xt), (a, at), (t, tt), (u, ut)):
            np.testing.assert_array_equal(p.numpy(), q.numpy())
    assert ch.cache_info()["replays"] == 2


def test_a_view_of_an_argument_that_is_a_view_runs_as_usual_and_writes_through():
    def h(x):
        return x[1:]

    ch = dg.compile(h)
    for _ in range(2):
        base, bt = dg.from_array(A.copy(), chunks=2), torch.tensor(A.copy())
        if not ch.cache_info()["traces"]:
            with pytest.warns(UserWarning, match="returns a view of a tensor read from outside or of an argument"):
                a = ch(base.T)
        else:  # (warned once)
            a = ch(base.T)
        at = h(bt.T)
        a.mul_(10)
        at.mul_(10)
        np.testing.assert_array_equal(base.numpy(), bt.numpy())
    assert ch.cache_info()["replays"] == 0


# ------------------------------------------------------------------ state a call advances
def _draws(make, draw):
    """The compiled function's numbers over three calls, and the uncompiled one's from the same state."""
    X = dg.zeros(3, chunks=3, dtype="float64")

    def function(src):
        return lambda x: x + float(draw(src))

    cf = dg.compile(function(make()))
    with pytest.warns(UserWarning, match="draws from a random generator or advances an iterator"):
        got = [float(cf(X).numpy()[0]) for _ in range(3)]
    f = function(make())
    return got, [float(f(X).numpy()[0]) for _ in range(3)], cf.cache_info()


@pytest.mark.parametrize("make, draw", [
    (lambda: np.random.default_rng(0), lambda g: g.standard_normal()),
    (lambda: np.random.Generator(np.random.MT19937(1)), lambda g: g.integers(1000)),
    (lambda: np.random.RandomState(0), lambda g: g.randn()),
    (lambda: np.random.PCG64(0), lambda g: g.random_raw() % 1000),
    (lambda: random.Random(0), lambda g: g.random()),
    (lambda: random.Random(0), lambda g: g.randint(1, 1000)),
    (lambda: itertools.count(1), next),
    (lambda: iter(range(10)), next),
    (lambda: zip(range(10), range(10)), lambda z: next(z)[0]),
    (lambda: (i * i for i in range(10)), next),
], ids=["Generator", "Generator-MT19937", "RandomState", "bit-generator", "random.Random", "randint",
        "itertools.count", "range-iterator", "zip", "generator"])
def test_a_function_drawing_from_a_generator_or_an_iterator_it_reaches_runs_as_usual(make, draw):
    got, want, info = _draws(make, draw)
    assert got == want and len(set(got)) == 3
    assert info == {"replays": 0, "traces": 1, "eager": 2, "entries": 1}


def test_a_generator_passed_as_an_argument_or_held_by_an_attribute_is_watched_too():
    X = dg.zeros(3, chunks=3, dtype="float64")

    class Noise:
        def __init__(self):
            self.rng = np.random.default_rng(0)

    def f(x, rng):
        return x + float(rng.standard_normal())

    def g(x, noise):
        return x + float(noise.rng.standard_normal())

    for fn, arg in ((f, np.random.default_rng(0)), (g, Noise())):
        cf = dg.compile(fn)
        with pytest.warns(UserWarning, match="draws from a random generator"):
            got = [float(cf(X, arg).numpy()[0]) for _ in range(3)]
        assert got == list(np.random.default_rng(0).standard_normal(3))


def test_a_generator_the_function_reaches_but_does_not_draw_from_lets_it_replay():
    rng = np.random.default_rng(0)
    it = itertools.count()
    X = dg.ones(3, chunks=3)

    def f(x, use=False):
        return x * 2 + (float(next(it)) + rng.standard_normal() if use else 0.0)

    cf = dg.compile(f)
    for _ in range(3):
        np.testing.assert_array_equal(cf(X).numpy(), 2.0)
    assert cf.cache_info() == {"replays": 2, "traces": 1, "eager": 0, "entries": 1}


def test_a_file_read_line_by_line_runs_as_usual_and_one_reached_but_not_read_replays(tmp_path):
    path = tmp_path / "numbers.txt"
    path.write_text("".join(f"{i}\n" for i in range(10)))
    X = dg.zeros(3, chunks=3, dtype="float64")
    with open(path) as lines, open(path) as unread:
        cf = dg.compile(lambda x: x + float(next(lines)))
        with pytest.warns(UserWarning, match="advances an iterator"):
            assert [float(cf(X).numpy()[0]) for _ in range(3)] == [0.0, 1.0, 2.0]
        cg = dg.compile(lambda x, f=unread: x * 2)
        for _ in range(3):
            np.testing.assert_array_equal(cg(X).numpy(), 0.0)
        assert cg.cache_info()["replays"] == 2


def test_a_draw_raises_where_the_trace_ends_with_fullgraph():
    rng = random.Random(0)
    cf = dg.compile(lambda x: x + rng.random(), fullgraph=True)
    with pytest.raises(RuntimeError, match="cannot be replayed: it draws from a random generator"):
        cf(dg.zeros(3, chunks=3))
