"""A fused chunk's arithmetic as one numexpr kernel (daskgrad._dask.kernels): NumPy's bits, or NumPy.

The kernel must give the very bits the op-by-op NumPy chain gives -- on random chains of ``+ - * /``
and negation, over float32 and float64, with broadcasting, numbers, and special values (inf, nan,
signed zeros, subnormals) -- and must step aside (NumPy runs) for anything it cannot run so: other
ops, dtypes, chunk types, NumPy scalars as numbers, small chunks.  Through the public API, a
gradient computed with kernels and without is the same array, bit for bit.
"""
import operator

import dask
import numpy as np
import pytest

import daskgrad as dg
from daskgrad._dask import kernels
from daskgrad._dask.lazy import Fused
from daskgrad.ops import stencil

pytest.importorskip("numexpr")

BIG = (3, 80, 80)  # 19,200 elements: above MIN_ELEMENTS here


@pytest.fixture(autouse=True)
def small_chunks_run_kernels(monkeypatch):
    """Kernels for chunks of this test's sizes (by default only chunks of a million elements run them)."""
    monkeypatch.setattr(kernels, "MIN_ELEMENTS", 1000)

OPS = [operator.add, operator.sub, operator.mul, operator.truediv, np.add, np.subtract, np.multiply,
       np.true_divide]


def _special(rng, shape, dtype):
    x = rng.standard_normal(shape).astype(dtype)
    flat = x.reshape(-1)
    tiny = np.finfo(dtype).tiny
    special = [np.inf, -np.inf, np.nan, 0.0, -0.0, tiny / 4, -tiny / 3, np.finfo(dtype).max]
    flat[:8] = special[:flat.size]
    return x


def _random_chain(rng, n_inputs, length):
    """A random chain in Fused's form: each step reads the last step, an input or a number."""
    steps = []
    for i in range(length):
        def operand():
            r = rng.random()
            if r < 0.5:
                return (0, int(rng.integers(n_inputs)))
            if r < 0.75 and i > 1:
                return (1, int(rng.integers(i - 1)))
            return (2, float(rng.standard_normal()) if rng.random() < 0.7 else int(rng.integers(-3, 4)))
        last = (1, i - 1) if i else (0, 0)
        if rng.random() < 0.15:
            steps.append((operator.neg, (last,)))
        else:
            fn = OPS[int(rng.integers(len(OPS)))]
            steps.append((fn, (last, operand()) if rng.random() < 0.5 else (operand(), last)))
    return steps


def _numpy(fused, blocks):
    with dask.config.set({"daskgrad.elementwise-kernels": False}):
        return fused(*blocks)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_random_chains_give_numpys_bits(dtype):
    rng = np.random.default_rng(0)
    shapes = [BIG, (1, 80, 80), (80,), (3, 1, 80), ()]
    ran = 0
    for _ in range(60):
        n_inputs = int(rng.integers(1, 4))
        blocks = [_special(rng, BIG, dtype)] + [_special(rng, shapes[int(rng.integers(len(shapes)))], dtype)
                                                for _ in range(n_inputs - 1)]
        fused = Fused(_random_chain(rng, n_inputs, int(rng.integers(1, 9))))
        kernel = kernels.Kernel.of(fused.steps)
        assert kernel is not None
        with np.errstate(all="ignore"):
            got, want = kernel(blocks), _numpy(fused, blocks)
        assert got is not None
        ran += 1
        assert got.dtype == want.dtype == np.dtype(dtype) and got.shape == want.shape
        _assert_same_bits(got, want, kernel.expression)
    assert ran > 30


def _assert_same_bits(got, want, what=""):
    """Equal bit for bit, but for a NaN's sign and payload (IEEE leaves which NaN an op returns open:
    x86 returns the first operand's, and a compiler may swap a product's operands)."""
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all(), what
    assert got[~nan].tobytes() == want[~nan].tobytes(), what


def test_what_the_kernel_does_not_run_is_left_to_numpy():
    x = np.ones(BIG)
    chain = [(operator.mul, ((0, 0), (2, 2.5))), (operator.add, ((1, 0), (0, 1)))]
    kernel = kernels.Kernel.of(chain)
    assert kernel([x, x]) is not None
    assert kernel([x[:1, :10, :10], x[:1, :10, :10]]) is None  # small: NumPy's call is cheaper
    assert kernel([x.astype(np.float16), x.astype(np.float16)]) is None  # another dtype
    assert kernel([x, x.astype(np.float32)]) is None  # mixed dtypes: NumPy's promotion
    assert kernel([x.astype(np.int64), x.astype(np.int64)]) is None
    assert kernels.Kernel.of([(np.exp, ((0, 0),))]) is None  # numexpr's exp may round differently
    assert kernels.Kernel.of([(operator.mul, ((0, 0), (2, np.float64(2.0))))]) is None  # a NumPy scalar's dtype
    assert kernels.Kernel.of([(operator.mul, ((0, 0), (2, True)))]) is None
    assert kernels.Kernel.of([(operator.pow, ((0, 0), (2, 2)))]) is None


def test_a_chain_on_strict_chunks_runs_in_numpy():
    from strict_array import StrictArray, register

    register()
    x = StrictArray(np.arange(np.prod(BIG), dtype=float).reshape(BIG))
    fused = Fused([(operator.mul, ((0, 0), (2, 2.0))), (operator.sub, ((1, 0), (0, 0)))])
    out = fused(x)
    assert type(out) is StrictArray
    np.testing.assert_array_equal(out.arr, x.arr)


def test_the_kernel_runs_for_a_fused_chain_and_gives_the_same_gradient(monkeypatch):
    calls = []
    call = kernels.Kernel.__call__

    def counted(self, blocks):
        out = call(self, blocks)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(kernels.Kernel, "__call__", counted)

    def gradient():
        rng = np.random.default_rng(1)
        a = dg.from_array(rng.standard_normal((240, 240)), chunks=(120, 240)).requires_grad_()
        b = dg.from_array(rng.standard_normal((240, 240)) + 3.0, chunks=(120, 240))
        loss = ((2.0 * a - b) * (a + 0.5) / (b * b + 1.0) - a / 3.0).sum()
        loss.backward()
        return loss.item(), a.grad.numpy()

    with dask.config.set(scheduler="threads"):
        loss, grad = gradient()
        assert any(calls), "no fused chain ran as a kernel"
        with dask.config.set({"daskgrad.elementwise-kernels": False}):
            calls.clear()
            loss_np, grad_np = gradient()
            assert not any(calls)
    assert loss == loss_np
    assert grad.tobytes() == grad_np.tobytes()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_stencil_block_gives_numpys_bits(dtype):
    rng = np.random.default_rng(2)
    w = np.array([[0, 0, -1 / 12, 0, 0], [0, 0, 4 / 3, 0, 0], [-1 / 12, 4 / 3, -5.0, 4 / 3, -1 / 12],
                  [0, 0, 4 / 3, 0, 0], [0, 0, -1 / 12, 0, 0]])
    taps = tuple(((0,) + tuple(j - 2 for j in idx), float(v)) for idx, v in np.ndenumerate(w) if v != 0)
    block = _special(rng, (2, 124, 124), dtype)
    got = stencil._correlate_block(block, taps, (0, 2, 2))
    with dask.config.set({"daskgrad.elementwise-kernels": False}):
        want = stencil._correlate_block(block, taps, (0, 2, 2))
    assert kernels.weighted_sum([[block]], [1.0]) is not None  # (the kernel path is there to compare)
    assert got.dtype == want.dtype
    _assert_same_bits(got, want)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_softplus_of_a_tiny_chunk_is_log1p_and_agrees_with_a_large_chunks(dtype):
    """A chunk of fewer than 64 elements takes ``log1p`` (one NumPy call); a larger one the vectorized
    form: the two agree within 3 ulp, and each with the exact value computed in float64 (float32) or
    with ``np.logaddexp`` (float64)."""
    from daskgrad import chunk

    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(500) * 10, [0.0, -0.0, 1e-30, -1e-30, 40.0, -40.0, 800.0, -800.0]])
    x = x.astype(dtype)
    small = np.concatenate([chunk.softplus(x[i:i + 10]) for i in range(0, x.size, 10)])
    large = chunk.softplus(x)
    ulp = np.spacing(np.abs(large).astype(dtype))
    assert np.all(np.abs(small - large) <= 3 * ulp)
    exact = np.logaddexp(0, x.astype("float64"))
    assert np.all(np.abs(small - exact.astype(dtype)) <= 2 * ulp)
