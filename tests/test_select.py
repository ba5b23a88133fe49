"""``chunk.where``: NumPy's ``where`` bit for bit, selecting without branches on large NumPy chunks (a
ReLU's random condition made NumPy's branchy ``where`` the largest part of ``make demo``'s fused task),
and torch's ``relu``/``where``/``clamp`` values and gradients through it."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import daskgrad as dg
from daskgrad import chunk

torch = pytest.importorskip("torch")

BIG = 2 * chunk._SELECT_BLOCK + 17  # (an odd tail block)
SPECIAL = np.array([0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 1e-310, -1e-310, 1.5, -2.5])


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint8)


def _values(dtype, shape, rng):
    if np.dtype(dtype).kind == "f":
        x = np.asarray(rng.standard_normal(shape) * 100)
        n = min(x.size, len(SPECIAL))
        x.reshape(-1)[:n] = SPECIAL[:n]
        with np.errstate(over="ignore"):
            return x.astype(dtype)
    if np.dtype(dtype).kind == "b":
        return rng.standard_normal(shape) < 0
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


@pytest.mark.parametrize("shape", [(BIG,), (3, BIG // 3 + 1), (100, 7), ()], ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int8", "uint16", "int32", "int64", "bool",
                                   "complex64"])
def test_where_gives_numpys_bits(dtype, shape):
    rng = np.random.default_rng(0)
    if dtype == "complex64":
        x, y = (rng.standard_normal(shape) + 1j).astype(dtype), (rng.standard_normal(shape) - 1j).astype(dtype)
    else:
        x, y = _values(dtype, shape, rng), _values(dtype, shape, rng)
    c = rng.standard_normal(shape) < 0
    numbers = [0, -0.0, 1.5, np.nan, True, 300, -1, 2 ** 40, np.float32(2), np.array(3, dtype=x.dtype)]
    pairs = [(x, y), (y, x), (x, y[::-1] if x.ndim else y)]
    pairs += [(x, v) for v in numbers] + [(v, x) for v in numbers]
    for a, b in pairs:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            try:
                expect = np.where(c, a, b)
            except Exception as e:  # noqa: BLE001 - the same error from both
                with pytest.raises(type(e)):
                    chunk.where(c, a, b)
                continue
            got = chunk.where(c, a, b)
        assert got.dtype == expect.dtype and got.shape == expect.shape
        np.testing.assert_array_equal(_bits(got), _bits(expect))


def test_large_chunks_select_without_branches_and_others_go_to_numpy():
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((2, BIG)).astype(np.float32)
    c = x < 0
    assert chunk._select(c, x, y) is not None and chunk._select(c, 0, x) is not None
    assert chunk._select(c[:100], x[:100], y[:100]) is None  # small: NumPy's
    assert chunk._select(c, x, y.astype(np.float64)) is None  # dtypes that differ
    assert chunk._select(c[::-1], x, y) is None  # not contiguous
    assert chunk._select(c.reshape(1, -1), x[:1], y) is None  # broadcast


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_relu_where_and_clamp_match_torch_on_large_chunks(dtype):
    rng = np.random.default_rng(2)
    xn = _values(dtype, (4, BIG // 2), rng)
    gn = rng.standard_normal(xn.shape).astype(dtype)
    results = []
    for lib in (torch, dg):
        x = (torch.tensor(xn, requires_grad=True) if lib is torch
             else dg.from_array(xn, chunks=(2, -1), requires_grad=True))
        g = torch.tensor(gn) if lib is torch else dg.from_array(gn, chunks=(2, -1))
        outs = [lib.relu(x), lib.where(x > 1, x, g), lib.clamp(x, min=-1.0), lib.clamp(x, max=0.5)]
        grads = lib.autograd.grad(sum((o * g).sum() for o in outs), x)
        results.append([o.detach().numpy() for o in outs] + [grads[0].numpy()])
    for ours, theirs in zip(results[1], results[0]):
        np.testing.assert_array_equal(_bits(ours), _bits(theirs))


def test_relus_double_backward_still_reads_its_input():
    x = dg.tensor(np.array([-1.0, 0.0, 2.0]), requires_grad=True)
    (g,) = dg.autograd.grad(dg.relu(x).sum(), x, create_graph=True)
    xt = torch.tensor([-1.0, 0.0, 2.0], requires_grad=True)
    (gt,) = torch.autograd.grad(torch.relu(xt).sum(), xt, create_graph=True)
    assert g.requires_grad == gt.requires_grad
    np.testing.assert_array_equal(g.detach().numpy(), gt.detach().numpy())


def test_bool_bytes_other_than_one_select_as_true():
    """A bool chunk may hold any non-zero byte (a ``view(bool)`` of uint8): NumPy reads it as True."""
    u = np.zeros(BIG, np.uint8)
    u[::2] = 2
    a, b = np.full(BIG, 1.0, np.float32), np.full(BIG, 0.1, np.float32)
    np.testing.assert_array_equal(_bits(chunk.where(u.view(bool), a, b)), _bits(np.where(u.view(bool), a, b)))
