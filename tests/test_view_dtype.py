"""``Tensor.view(dtype)``, ``stride()`` and ``storage_offset()`` against torch 2.13: the same memory read
as another dtype, sharing its storage and version counter but no history (torch's non-differentiable
view), with torch's strides and errors; the write through it reaches the base, cached or not."""
from __future__ import annotations

import dask
import numpy as np
import pytest

import daskgrad as dg
from strict_array import StrictArray, to_strict

torch = pytest.importorskip("torch")

BASE = np.arange(24, dtype=np.float32).reshape(4, 6) - 7.5
CHUNKINGS = [-1, 2, ((1, 3), (1, 5)), 1]
PRELUDES = {  # views as torch lays them out, before the dtype view
    "whole": lambda t: t, "columns 1:3": lambda t: t[:, 1:3], "columns 2:": lambda t: t[:, 2:],
    "transposed": lambda t: t.t(), "rows 1:": lambda t: t[1:], "strided rows": lambda t: t[::2, 2:4],
    "row": lambda t: t[0], "every other column": lambda t: t[:, ::2], "0-d": lambda t: t[1, 1],
}
DTYPES = ["float64", "int32", "int8", "int16", "float16", "bool", "uint8", "complex64", "float32", "int64"]


def _bytes(a):
    return np.ascontiguousarray(a).view(np.uint8)


def _both(prelude, dtype, chunks):
    t, d = torch.from_numpy(BASE.copy()), dg.from_array(BASE.copy(), chunks=chunks)
    out = []
    for x, lib in ((t, torch), (d, dg)):
        try:
            out.append((x, prelude(x).view(getattr(lib, dtype)), None))
        except Exception as e:  # noqa: BLE001 - compared below
            out.append((x, None, f"{type(e).__name__}: {e}"))
    return out


@pytest.mark.parametrize("chunks", CHUNKINGS, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("prelude", PRELUDES)
def test_view_dtype_reads_the_same_bytes_with_torchs_strides_and_errors(prelude, dtype, chunks):
    (t, r, e1), (d, q, e2) = _both(PRELUDES[prelude], dtype, chunks)
    assert e1 == e2
    if r is None:
        return
    assert q.dtype == dg.__dict__[dtype] and tuple(q.shape) == tuple(r.shape)
    assert (q.stride(), q.storage_offset(), q.is_contiguous()) == (r.stride(), r.storage_offset(), r.is_contiguous())
    np.testing.assert_array_equal(_bytes(q.numpy()), _bytes(r.numpy()))
    assert not q.requires_grad and q.grad_fn is None and q._base is None and not q._is_view()


@pytest.mark.parametrize("chunks", CHUNKINGS, ids=str)
@pytest.mark.parametrize("dtype", ["int32", "float64", "int8", "int16"])
@pytest.mark.parametrize("prelude", ["whole", "columns 2:", "transposed", "row", "strided rows"])
def test_writes_through_a_dtype_view_reach_the_base_and_back(prelude, dtype, chunks):
    (t, r, e1), (d, q, _) = _both(PRELUDES[prelude], dtype, chunks)
    if r is None:
        return
    for x in (r, q):  # a part of the view written, then all of it
        x[..., :1] = 3
        x.add_(1)
    np.testing.assert_array_equal(_bytes(d.numpy()), _bytes(t.numpy()))
    assert d._version == t._version
    t.mul_(-2)
    d.mul_(-2)  # (the base written: the view reads it)
    np.testing.assert_array_equal(_bytes(q.numpy()), _bytes(r.numpy()))
    np.testing.assert_array_equal(_bytes(q[0].numpy()), _bytes(r[0].numpy()))


def test_a_write_through_a_dtype_view_changes_what_autograd_reads_as_torchs():
    """Not an autograd view: the write reaches the values, not the history (torch's gradient, however odd)."""
    grads = []
    for lib in (torch, dg):
        x = lib.tensor(np.arange(3.0), requires_grad=True)
        h = x * 2
        v = h.view(lib.int64)
        assert not v.requires_grad
        v.add_(1)
        grads.append(lib.autograd.grad((h * h).sum(), x)[0])
        y = x.view(lib.float64)
        assert not y.requires_grad and y.grad_fn is None
    np.testing.assert_array_equal(grads[1].numpy(), grads[0].numpy())


def test_a_loop_writing_through_a_dtype_view_is_the_same_cached_and_not():
    def run(lib, cache):
        with dask.config.set({"daskgrad.step-cache.enabled": cache}):
            w = (lib.from_array(BASE[:2, :4].copy(), chunks=(1, 2), requires_grad=True) if lib is dg
                 else torch.tensor(BASE[:2, :4].copy(), requires_grad=True))
            seen = []
            for k in range(6):
                loss = (w * w).sum()
                loss.backward()
                with lib.no_grad():
                    w -= 0.1 * w.grad
                    w.grad.zero_()
                    w.view(lib.int32)[:, k % 4].add_(1)
                seen.append(w.detach().numpy().copy())
            return seen

    for a, b, c in zip(run(dg, True), run(dg, False), run(torch, None)):
        np.testing.assert_array_equal(_bytes(a), _bytes(b))
        np.testing.assert_array_equal(_bytes(a), _bytes(c))


def test_view_dtype_keeps_chunks_on_the_device():
    x = to_strict(dg.from_array(BASE.copy(), chunks=2))
    v = x[:, 2:].view(dg.float64)
    v[:, 0] = 1.5
    blocks = dask.compute(*x.array.to_delayed().ravel(), *v.array.to_delayed().ravel())
    assert all(isinstance(b, StrictArray) for b in blocks)
    expect = BASE.copy()
    expect[:, 2:].view(np.float64)[:, 0] = 1.5
    host = x.array.map_blocks(lambda s: s.get(), meta=np.empty(0, np.float32)).compute()
    np.testing.assert_array_equal(_bytes(host), _bytes(expect))


def test_view_forms_and_stride_errors_as_torchs():
    for lib in (torch, dg):
        x = lib.ones(3) if lib is torch else dg.ones(3)
        assert x.view(dtype=lib.int32).dtype == lib.int32
    checks = [lambda lib: lib.tensor(1.0).stride(0), lambda lib: lib.zeros(2, 3).stride(2),
              lambda lib: lib.zeros(2, 3).stride(-3), lambda lib: lib.zeros(2, 3).stride(1.5)]
    for check in checks:
        errors = []
        for lib in (torch, dg):
            with pytest.raises((IndexError, TypeError)) as info:
                check(lib)
            errors.append((info.type, str(info.value)))
        assert errors[0] == errors[1]
    assert dg.zeros(2, 3).stride(-1) == torch.zeros(2, 3).stride(-1) and dg.tensor(1.0).stride() == ()


def test_review_findings_on_dtype_views():
    """torch.Size is a shape, not a dtype; a write through ``expand(...).view(dtype)``; unknown lengths refused
    with the reason where the item size changes."""
    x = dg.from_array(np.arange(6.0, dtype="f4"), chunks=3)
    assert tuple(x.view(torch.Size([2, 3])).shape) == (2, 3)
    t, d = torch.zeros(4), dg.zeros(4)
    t.expand(3, 4).view(torch.int32)[0].fill_(1)
    d.expand(3, 4).view(dg.int32)[0].fill_(1)
    np.testing.assert_array_equal(_bytes(d.numpy()), _bytes(t.numpy()))
    m = x[x > 0]
    with pytest.raises(NotImplementedError, match="unknown length"):
        m.view(dg.float16)
