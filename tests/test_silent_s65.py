"""Silent wrong results found by the s65 review, each checked against torch (Tensor methods) or NumPy (module
functions), over one chunk and several."""
import warnings

import numpy as np
import pytest

import daskgrad as dg

torch = pytest.importorskip("torch")


def _same(d, t):
    """daskgrad's tensor ``d`` holds what torch's (or NumPy's) ``t`` holds: values (NaN and signed zeros included)
    and dtype."""
    t = t.detach().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
    d = d.detach().numpy() if isinstance(d, dg.Tensor) else np.asarray(d)
    assert d.dtype == t.dtype, (d.dtype, t.dtype)
    np.testing.assert_array_equal(d, t)
    np.testing.assert_array_equal(np.signbit(d), np.signbit(t)) if d.dtype.kind == "f" else None


# ----------------------------------------------------------------- 1. Tensor.cumsum / cumprod accumulate wide
CUMSUM = {np.float32: [1e8, 1, -1e8, 0, 3.5, -1e8, 1e8, 0.25], np.float16: [2048, 1, -2048, 0, 3.5, -2048, 2048, 0.25]}
CUMPROD = {np.float32: [3.4e38, -7.5, 3.25, 1e-4, -0.0, 2.0], np.float16: [65000, -7.5, 3.25, 1e-4, -0.0, 2.0]}


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("chunks", [-1, 2, 3, 1])
def test_tensor_cumsum_accumulates_as_torch(dtype, chunks):
    x = np.array(CUMSUM[dtype], dtype=dtype)
    _same(dg.from_array(x, chunks=chunks).cumsum(0), torch.tensor(x).cumsum(0))
    _same(dg.from_array(x, chunks=chunks).cumsum(dim=0), torch.tensor(x).cumsum(dim=0))
    # the backward, a reverse cumsum of the cotangent, accumulates the same way
    d, t = dg.zeros(len(x), dtype=dtype, requires_grad=True), torch.zeros(len(x), dtype=torch.tensor(x).dtype,
                                                                           requires_grad=True)
    d.cumsum(0).backward(dg.from_array(x[::-1].copy(), chunks=chunks))
    t.cumsum(0).backward(torch.tensor(x[::-1].copy()))
    _same(d.grad, t.grad)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("chunks", [-1, 2, 4])
def test_tensor_cumprod_accumulates_as_torch(dtype, chunks):
    x = np.array(CUMPROD[dtype], dtype=dtype)
    _same(dg.from_array(x, chunks=chunks).cumprod(0), torch.tensor(x).cumprod(0))


def test_tensor_cumprod_backward_accumulates_as_torch():
    x = np.array([1e4, 1e4, 1.0, -1e-8, 1.0], dtype=np.float32)
    g = np.array([1e8, 1.0, -1e8, 3.0, 1.0], dtype=np.float32)
    for chunks in (-1, 2):
        d = dg.from_array(x, chunks=chunks, requires_grad=True)
        t = torch.tensor(x, requires_grad=True)
        d.cumprod(0).backward(dg.tensor(g))
        t.cumprod(0).backward(torch.tensor(g))
        np.testing.assert_allclose(d.grad.numpy(), t.grad.numpy(), rtol=1e-6)


def test_tensor_cumsum_2d_and_in_place_and_dtype():
    x = np.array([[1e8, 1, -1e8, 0], [3, 1e-8, 1, -3]], dtype=np.float32)
    for chunks in (-1, (1, 2), (2, (1, 3))):
        _same(dg.from_array(x, chunks=chunks).cumsum(1), torch.tensor(x).cumsum(1))
        _same(dg.from_array(x, chunks=chunks).cumprod(1), torch.tensor(x).cumprod(1))
        _same(dg.from_array(x, chunks=chunks).cumsum(1, dtype=dg.float64),
              torch.tensor(x).cumsum(1, dtype=torch.float64))
        d, t = dg.from_array(x, chunks=chunks), torch.tensor(x)
        d.cumsum_(1), t.cumsum_(1)
        _same(d, t)


def test_numpy_cumsum_stays_numpys():
    # (in the dtype, each step rounded; over several chunks dask adds each chunk's carry after its own running sum,
    # which can round otherwise than NumPy's one pass: one chunk here)
    for dtype in (np.float32, np.float16):
        x = np.array(CUMSUM[dtype], dtype=dtype)
        _same(dg.cumsum(dg.from_array(x, chunks=-1)), np.cumsum(x))
        _same(dg.cumsum(dg.from_array(x[:4], chunks=2)), np.cumsum(x[:4]))


# ------------------------------------------------------------------ 2. float16 (op) integer tensors
HALF = np.array([0.001, 2.0, 65000.0, -3.5], dtype=np.float16)
INTS = [np.array([100000, 70000, 2**31 - 5, 2049], dtype=np.int32), np.array([100000, -70000, 2**40, 2049]),
        np.array([2049, 30001, 2**15 - 5, 7], dtype=np.int16), np.array([255, 3, 1, 0], dtype=np.uint8)]


@pytest.mark.parametrize("ints", INTS, ids=lambda a: a.dtype.name)
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "atan2", "pow", "hypot", "remainder"])
def test_half_with_int_tensor_casts_the_int_to_half(ints, op):
    for a, b in ((HALF, ints), (ints, HALF)):
        for chunks in (-1, 2):
            _same(getattr(dg.from_array(a, chunks=chunks), op)(dg.from_array(b, chunks=chunks)),
                  getattr(torch.tensor(a), op)(torch.tensor(b)))


@pytest.mark.parametrize("op", ["mul_", "div_", "add_", "sub_", "__imul__", "__itruediv__"])
def test_half_with_int_tensor_in_place(op):
    d, t = dg.tensor(HALF), torch.tensor(HALF)
    getattr(d, op)(dg.tensor(INTS[0])), getattr(t, op)(torch.tensor(INTS[0]))
    _same(d, t)


def test_half_with_0d_int_reads_it_as_float():  # (torch's CPU scalar: not rounded to half first)
    h, s = dg.tensor(HALF), dg.tensor(np.int64(100000))
    th, ts = torch.tensor(HALF), torch.tensor(100000)
    _same(h * s, th * ts), _same(h / s, th / ts), _same(s * h, ts * th)


def test_float32_with_large_int64():
    f, i = np.array([1.0, 3.0], np.float32), np.array([2**53 + 1, 2**40 + 1])
    for op in ("mul", "div", "add", "sub"):
        _same(getattr(dg.tensor(f), op)(dg.tensor(i)), getattr(torch.tensor(f), op)(torch.tensor(i)))
        _same(getattr(dg.tensor(i), op)(dg.tensor(f)), getattr(torch.tensor(i), op)(torch.tensor(f)))


# ------------------------------------------------------------ 3. NumPy statistics of integers and bools
A64 = np.array([2**40 + 1, 3, 2**40 + 7, 5, 16777217], dtype=np.int64)
A32 = np.array([16777217, 1, 3, 16777219], dtype=np.int32)
BOOL = np.array([True, False, True, False])
U8 = np.array([200, 100, 3, 250], dtype=np.uint8)
STATS = {"nanmax": lambda m, x: m.nanmax(x), "nanmin": lambda m, x: m.nanmin(x), "nanmean": lambda m, x: m.nanmean(x),
         "median": lambda m, x: m.median(x), "nanmedian": lambda m, x: m.nanmedian(x),
         "percentile": lambda m, x: m.percentile(x, 50), "quantile": lambda m, x: m.quantile(x, 0.75),
         "quantile2": lambda m, x: m.quantile(x, [0.25, 0.5]), "nanvar": lambda m, x: m.nanvar(x),
         "nanstd": lambda m, x: m.nanstd(x), "nanpercentile": lambda m, x: m.nanpercentile(x, 30)}


@pytest.mark.parametrize("arr", [A64, A32, BOOL, U8], ids=lambda a: a.dtype.name)
@pytest.mark.parametrize("name", sorted(STATS))
def test_numpy_statistics_of_integers(arr, name):
    if arr.dtype == bool and name in ("nanpercentile", "percentile", "quantile", "quantile2"):
        with pytest.raises(TypeError, match="numpy boolean subtract"):
            STATS[name](np, arr)
        with pytest.raises(TypeError, match="numpy boolean subtract"):
            STATS[name](dg, dg.tensor(arr))
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = STATS[name](np, arr)
    for chunks in (-1, 2):
        got = STATS[name](dg, dg.from_array(arr, chunks=chunks)).numpy()
        assert got.dtype == np.asarray(want).dtype, (got.dtype, np.asarray(want).dtype)
        np.testing.assert_allclose(got, want, rtol=1e-15)


def test_numpy_statistics_axis_of_integers():
    x = np.arange(24, dtype=np.int32).reshape(4, 6) * 1677721
    for chunks in (-1, (3, 4)):
        d = dg.from_array(x, chunks=chunks)
        _same(dg.nanmax(d, axis=1), np.nanmax(x, axis=1))
        _same(dg.median(d, axis=0), np.median(x, axis=0))
        _same(dg.nanmean(d, axis=1, keepdims=True), np.nanmean(x, axis=1, keepdims=True))


def test_numpy_dtype_only_differences():
    for chunks in (-1, 2):
        _same(dg.median(dg.from_array(BOOL, chunks=chunks)), np.median(BOOL))
        _same(dg.sum(dg.from_array(U8, chunks=chunks)), np.sum(U8))
        _same(dg.cumsum(dg.from_array(U8, chunks=chunks)), np.cumsum(U8))
        _same(dg.cumprod(dg.from_array(U8, chunks=chunks)), np.cumprod(U8))
        _same(dg.nansum(dg.from_array(U8, chunks=chunks)), np.nansum(U8))
        for kw in ({"prepend": 1}, {"append": 1.5}, {"prepend": np.int8(1)}, {"append": True}):
            _same(dg.diff(dg.from_array(A32, chunks=chunks), **kw), np.diff(A32, **kw))


def test_tensor_methods_of_unsigned_stay_torchs():
    d, t = dg.tensor(U8), torch.tensor(U8)
    for name in ("sum", "nansum"):
        _same(getattr(d, name)(), getattr(t, name)())
    _same(d.cumsum(0), t.cumsum(0))
    _same(d.cumprod(0), t.cumprod(0))
    with pytest.raises(RuntimeError, match="quantile\\(\\) input tensor must be either float or double dtype"):
        dg.tensor(A32).quantile(0.5)


# ----------------------------------------------------------------- 4. tensordot of narrow integers
@pytest.mark.parametrize("dtypes", [(np.int8, np.int8), (np.int8, np.uint8), (np.int16, np.int32),
                                    (np.uint8, np.uint8), (np.int64, np.int64), (np.bool_, np.bool_)])
def test_tensordot_integers_as_numpy_whatever_the_chunks(dtypes):
    rng = np.random.default_rng(0)
    if dtypes[0] is np.bool_:
        a, b = rng.random((3, 40)) < 0.05, rng.random((40, 2)) < 0.05
    else:
        a, b = rng.integers(0, 127, (3, 40)).astype(dtypes[0]), rng.integers(0, 127, (40, 2)).astype(dtypes[1])
    want = np.tensordot(a, b, 1)
    for ch in ((3, 40), ((2, 1), (20, 20)), ((3,), (25, 15))):
        _same(dg.tensordot(dg.from_array(a, chunks=ch), dg.from_array(b, chunks=(ch[1], (2,))), 1), want)


def test_tensordot_int8_wraps_as_numpy():
    a, b = np.full((3, 40), 100, np.int8), np.full((40, 2), 100, np.int8)
    for ch in ((3, 40), ((2, 1), (20, 20)), ((3,), (25, 15))):
        _same(dg.tensordot(dg.from_array(a, chunks=ch), dg.from_array(b, chunks=(ch[1], (2,))), 1),
              np.tensordot(a, b, 1))


# ------------------------------------------------------- 5. dg.save / dg.load keep tensors sharing a storage
def _shared(lib):
    base = lib.arange(24.0).reshape(4, 6) if lib is torch else dg.arange(24.0, dtype=dg.float32).reshape(4, 6)
    own = lib.ones(3)
    return {"wT": base.T, "w": base, "row": base[1], "sl": base[1:3, ::2], "diag": base.diagonal(),
            "exp": base[0].unsqueeze(0).expand(2, 6), "own": own, "alias": own.detach(), "flat": base.reshape(-1)[5:],
            "list": [base.T, base[2]]}


def test_save_load_keeps_views_sharing_storage(tmp_path):
    torch.save(_shared(torch), tmp_path / "t.pt")
    dg.save(_shared(dg), tmp_path / "d")
    t, d = torch.load(tmp_path / "t.pt"), dg.load(tmp_path / "d")
    for ck in (t, d):
        ck["w"].add_(100)
        ck["own"].mul_(7)
        ck["sl"].mul_(-1)  # a write through a view shows in its base and the other views
    flat = {k: v for k, v in t.items() if k != "list"} | {"list0": t["list"][0], "list1": t["list"][1]}
    for k, tv in flat.items():
        dv = d[k] if not k.startswith("list") else d["list"][int(k[-1])]
        assert dv.stride() == tv.stride() and dv.storage_offset() == tv.storage_offset(), k
        _same(dv, tv)
    assert d["list"][0] is not d["wT"]  # (two views are two tensors, as torch's)


def test_save_load_parameter_and_its_state_dict(tmp_path):
    m = dg.nn.Linear(3, 2)
    dg.save({"sd": m.state_dict(), "p": m.weight, "pT": m.weight.T}, tmp_path / "d")
    ck = dg.load(tmp_path / "d")
    assert isinstance(ck["p"], dg.nn.Parameter) and ck["p"].requires_grad and ck["pT"].requires_grad
    assert not ck["sd"]["weight"].requires_grad and ck["pT"].grad_fn is None
    with dg.no_grad():
        ck["p"].mul_(2)
    _same(ck["sd"]["weight"], ck["p"].detach().numpy())
    _same(ck["pT"], ck["p"].detach().numpy().T)


# ------------------------------------------- 6. embedding_bag(include_last_offset=True), offsets[-1] != len(input)
@pytest.mark.parametrize("offsets", [[0, 3, 3, 7], [0, 3, 3], [0, 3, 3, 7, 10], [0, 10]])
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_embedding_bag_last_bag_runs_to_the_end(offsets, mode, dtype):
    import torch.nn.functional as TF

    W = (np.arange(40, dtype=np.float64).reshape(10, 4) % 7).astype(dtype)
    flat = np.array([1, 2, 0, 9, 4, 3, 0, 1, 2, 5])
    tw, dw = torch.tensor(W, requires_grad=True), dg.tensor(W, requires_grad=True)
    t = TF.embedding_bag(torch.tensor(flat), tw, torch.tensor(offsets), mode=mode, include_last_offset=True)
    d = dg.nn.functional.embedding_bag(dg.tensor(flat), dw, dg.tensor(offsets), mode=mode, include_last_offset=True)
    np.testing.assert_allclose(d.detach().numpy(), t.detach().numpy(), rtol=1e-6)
    if dtype != np.float64:  # (torch's float32 backward where offsets[-1] < len(input) reads memory it did not set)
        return
    g = np.arange(t.numel(), dtype=np.float64).reshape(t.shape)
    t.backward(torch.tensor(g)), d.backward(dg.tensor(g))
    np.testing.assert_allclose(dw.grad.numpy(), tw.grad.numpy(), rtol=1e-12)


# --------------------------------------------------------------------- qr(mode='r'): Q an empty tensor
def test_qr_mode_r_gives_an_empty_q():
    a = np.random.default_rng(0).standard_normal((5, 3))
    tq, tr = torch.linalg.qr(torch.tensor(a), mode="r")
    for chunks in (-1, (2, 3)):
        q, r = dg.linalg.qr(dg.from_array(a, chunks=chunks), mode="r")
        _same(q, tq)
        np.testing.assert_allclose(np.abs(r.numpy()), np.abs(tr.numpy()), rtol=1e-12)
