"""Ops on rows whose count is not known until computed (after a boolean mask: dask's NaN chunk sizes) that raised
where torch computes (review s64: flip, cumsum, max(dim), logsumexp, sort, topk, roll, normalize, median, quantile,
the losses' shape checks, batch_norm, pdist, unique, feature dropout, log_softmax(0)).  Each is compared with torch on
the same rows, values and gradients, over one chunk, uneven chunks, and chunks some of which hold no selected row;
and recording any of them submits nothing."""
import numpy as np
import pytest

import daskgrad as dg

torch = pytest.importorskip("torch")

A = np.random.default_rng(0).standard_normal((9, 4))
M = A[:, 0] > -0.5  # (the last row block of (2, 3, 4) and some of (1,) * 9 hold no row)
TARGET = (np.abs(A[:, 1]) * 3).astype(np.int64) % 4
CHUNKS = [((9,), (4,)), ((2, 3, 4), (4,)), ((3, 1, 5), (3, 1)), ((1,) * 9, (2, 2))]

CASES = {
    "flip(0)": lambda t, F, k: t.flip(0),
    "flip((0, 1))": lambda t, F, k: t.flip((0, 1)),
    "cumsum(0)": lambda t, F, k: t.cumsum(0),
    "cumprod(0)": lambda t, F, k: t.cumprod(0),
    "logcumsumexp(0)": lambda t, F, k: t.logcumsumexp(0),
    "masked_select.cumsum(0)": lambda t, F, k: k["x"].masked_select(k["m"].unsqueeze(1)).cumsum(0),
    "x[m.nonzero()[:, 0]]": lambda t, F, k: k["x"][k["m"].nonzero()[:, 0]],
    "max(0).values": lambda t, F, k: t.max(0).values,
    "min(0).values": lambda t, F, k: t.min(0).values,
    "max(0).indices": lambda t, F, k: t.max(0).indices,
    "argmin(0)": lambda t, F, k: t.argmin(0),
    "amax(0)": lambda t, F, k: t.amax(0),
    "max()": lambda t, F, k: t.max(),
    "logsumexp(0)": lambda t, F, k: t.logsumexp(0),
    "softmax(0)": lambda t, F, k: t.softmax(0),
    "log_softmax(0)": lambda t, F, k: t.log_softmax(0),
    "sort(1)": lambda t, F, k: t.sort(1).values,
    "sort(0)": lambda t, F, k: t.sort(0).values,
    "sort(0).indices": lambda t, F, k: t.sort(0).indices,
    "msort": lambda t, F, k: t.msort(),
    "topk(2, 1)": lambda t, F, k: t.topk(2, 1).values,
    "roll(1, 1)": lambda t, F, k: t.roll(1, 1),
    "roll(2, 0)": lambda t, F, k: t.roll(2, 0),
    "roll((1, -1), (0, 1))": lambda t, F, k: t.roll((1, -1), (0, 1)),
    "normalize(dim=1)": lambda t, F, k: F.normalize(t, dim=1),
    "normalize(dim=0)": lambda t, F, k: F.normalize(t, dim=0),
    "median(0)": lambda t, F, k: t.median(0).values,
    "median(0).indices": lambda t, F, k: t.median(0).indices,
    "nanmedian(0)": lambda t, F, k: t.nanmedian(0).values,
    "median()": lambda t, F, k: t.median(),
    "quantile(0.3)": lambda t, F, k: t.quantile(0.3),
    "quantile(0.3, dim=0)": lambda t, F, k: t.quantile(0.3, dim=0),
    "binary_cross_entropy_with_logits": lambda t, F, k: F.binary_cross_entropy_with_logits(t, t.sigmoid().detach()),
    "binary_cross_entropy": lambda t, F, k: F.binary_cross_entropy(t.sigmoid(), t.detach().sigmoid()),
    "l1_loss": lambda t, F, k: F.l1_loss(t, t.detach().flip(1)),
    "nll_loss": lambda t, F, k: F.nll_loss(t.log_softmax(1), k["target"]),
    "cross_entropy": lambda t, F, k: F.cross_entropy(t, k["target"]),
    "cross_entropy(probabilities)": lambda t, F, k: F.cross_entropy(t, t.softmax(1).detach()),
    "multi_margin_loss": lambda t, F, k: F.multi_margin_loss(t, k["target"]),
    "batch_norm(training)": lambda t, F, k: F.batch_norm(t, None, None, training=True),
    "pdist": lambda t, F, k: F.pdist(t),
    "pdist(p=1)": lambda t, F, k: F.pdist(t, 1),
    "unique()": lambda t, F, k: (t > 0).long().unique(),
    "unique(dim=0, counts)": lambda t, F, k: (t > 0).long().unique(dim=0, return_counts=True)[1],
    "unique(inverse)": lambda t, F, k: (t > 0).long().unique(return_inverse=True)[1],
    "dropout1d(p=0)": lambda t, F, k: F.dropout1d(t, 0.0),
    "cummax(0)": lambda t, F, k: t.cummax(0).values,
    "cummin(0).indices": lambda t, F, k: t.cummin(0).indices,
    "mode(0)": lambda t, F, k: (t * 2).round().mode(0).values,
    "instance_norm": lambda t, F, k: F.instance_norm(t.T.unsqueeze(0)),
    "cosine_similarity(dim=0)": lambda t, F, k: F.cosine_similarity(t, t.flip(1), dim=0),
    "layer_norm": lambda t, F, k: F.layer_norm(t, (4,)),
    "gaussian_nll_loss": lambda t, F, k: F.gaussian_nll_loss(t, t.detach() * 2, t.detach().abs() + 1),
    "column_stack": lambda t, F, k: k["M"].column_stack([t[:, 0], t[:, 1]]),
    "cat(dim=1)": lambda t, F, k: k["M"].cat([t, t[:, :2] * 2], 1),
    "t[:, None, 1:3] * t[:, 2:, None]": lambda t, F, k: t[:, None, 1:3] * t[:, 2:, None],
    "t[..., 0] * t[:, -1]": lambda t, F, k: t[..., 0] * t[:, -1],
    # (combined with the rows as they are: each result holds as many rows per block as its input, so the blocks line
    # up; a flip as blocks reversed, or a sort in one joined block, met them misaligned, or broadcast a block of one)
    "t * t.flip(0)": lambda t, F, k: (t * t.flip(0)).cumsum(0),
    "t * t.sort(0).values": lambda t, F, k: t * t.sort(0).values,
    "t * t.argsort(0)": lambda t, F, k: t * t.argsort(0),
    "t * t.roll(2, 0)": lambda t, F, k: t * t.roll(2, 0),
}


def _run(M, F, f, chunks):
    if M is torch:
        x, m = torch.tensor(A, requires_grad=True), torch.tensor(M_)
        target = torch.tensor(TARGET)[m]
    else:
        x, m = dg.from_array(A, chunks=chunks, requires_grad=True), dg.from_array(M_, chunks=chunks[0])
        target = dg.from_array(TARGET, chunks=chunks[0])[m]
    y = f(x[m], F, {"x": x, "m": m, "target": target, "M": M})
    v = y.detach().numpy()
    if not np.issubdtype(v.dtype, np.floating):
        return v, None
    (y * (y.detach() * 3 + 1).cos()).sum().backward()  # (a cotangent that varies, read from the values)
    return v, x.grad.numpy()


M_ = M


@pytest.mark.parametrize("chunks", CHUNKS, ids=lambda c: "x".join(map(str, map(len, c))))
@pytest.mark.parametrize("name", list(CASES))
def test_ops_on_unknown_rows_compute_torchs_values_and_gradients(name, chunks):
    f = CASES[name]
    ref, ref_grad = _run(torch, torch.nn.functional, f, chunks)
    got, got_grad = _run(dg, dg.nn.functional, f, chunks)
    assert got.shape == ref.shape and got.dtype == ref.dtype
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-15)
    if ref_grad is not None:
        np.testing.assert_allclose(got_grad, ref_grad, rtol=1e-10, atol=1e-14)


def test_recording_them_submits_nothing(monkeypatch):
    """Each op works block by block, lengths unknown: nothing is computed until asked."""
    from daskgrad import runtime

    x = dg.from_array(A, chunks=((2, 3, 4), (4,)), requires_grad=True)
    t = x[dg.from_array(M, chunks=(2, 3, 4))]
    calls = []
    monkeypatch.setattr(runtime, "_submit", lambda *a, **k: calls.append(a) or pytest.fail("submitted"))
    F = dg.nn.functional
    ys = [t.flip(0), t.cumsum(0), t.max(0).values, t.logsumexp(0), t.sort(1).values, t.sort(0).values,
          t.topk(2, 1).values, t.roll(1, 0), F.normalize(t, dim=0), t.median(0).values, t.quantile(0.3, dim=0),
          F.batch_norm(t, None, None, training=True), F.pdist(t), t.log_softmax(0), (t > 0).long().unique()]
    loss = sum(y.sum() for y in ys if y.dtype.kind == "f")
    assert calls == [] and loss.requires_grad


def test_running_statistics_of_unknown_rows_are_torchs():
    rm, rv = dg.zeros(4, dtype=dg.float64), dg.ones(4, dtype=dg.float64)
    rmt, rvt = torch.zeros(4, dtype=torch.float64), torch.ones(4, dtype=torch.float64)
    x = dg.from_array(A, chunks=((2, 3, 4), (4,)))[dg.from_array(M, chunks=(2, 3, 4))]
    dg.nn.functional.batch_norm(x, rm, rv, training=True, momentum=0.3)
    torch.nn.functional.batch_norm(torch.tensor(A)[torch.tensor(M)], rmt, rvt, training=True, momentum=0.3)
    np.testing.assert_allclose(rm.numpy(), rmt.numpy(), rtol=1e-12)
    np.testing.assert_allclose(rv.numpy(), rvt.numpy(), rtol=1e-12)


@pytest.mark.parametrize("method", ["linear", "lower", "higher", "midpoint", "nearest"])
@pytest.mark.parametrize("q", [0.0, 0.5, 1.0, [0.1, 0.7]])
def test_quantile_of_unknown_rows_every_method(method, q):
    def run(M, x, m):
        qq = M.tensor(q, dtype=M.float64) if isinstance(q, list) else q
        y = x[m].quantile(qq, dim=0, interpolation=method)
        (y * (y.detach() + 1).cos()).sum().backward()
        return y.detach().numpy(), x.grad.numpy()
    ref = run(torch, torch.tensor(A, requires_grad=True), torch.tensor(M))
    got = run(dg, dg.from_array(A, chunks=((2, 3, 4), (4,)), requires_grad=True), dg.from_array(M, chunks=(2, 3, 4)))
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], ref[1], rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("f", [lambda t, F: F.dropout1d(t, 0.5),
                               lambda t, F: F.dropout2d(t.unsqueeze(2).unsqueeze(3), 0.5),
                               lambda t, F: F.feature_alpha_dropout(t.unsqueeze(2), 0.5, training=True)])
def test_feature_dropout_of_unknown_rows_drops_whole_channels(f):
    dg.manual_seed(0)
    x = dg.from_array(A + 10, chunks=((2, 3, 4), (4,)), requires_grad=True)
    y = f(x[dg.from_array(M, chunks=(2, 3, 4))], dg.nn.functional)
    assert y.detach().numpy().shape[0] == M.sum()
    y.sum().backward()
    g = x.grad.numpy()
    assert (g[~M] == 0).all()
    assert len(np.unique(np.round(g[M], 12))) == 2 and (g[M] == 0).any()  # (dropped: 0; kept: one scale)


def test_topk_and_kthvalue_along_the_unknown_axis_refuse_clearly_before_submitting():
    t = dg.from_array(A, chunks=((2, 3, 4), (4,)))[dg.from_array(M, chunks=(2, 3, 4))]
    for op in (lambda: t.topk(2, 0), lambda: t.kthvalue(1, 0)):
        with pytest.raises(NotImplementedError, match="whose length is not known until computed"):
            op()


@pytest.mark.parametrize("x_dtype, stats, params", [
    ("float64", "float32", None), ("float64", "float32", "float32"), ("float64", "float64", "float32"),
    ("float64", "float32", "float64"), ("float32", "float64", "float32"), ("float32", "float32", "float64"),
    ("float64", None, "float32"), ("float32", "float16", None), ("float64", "float64", "float64")])
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_mixed_dtypes_as_torchs_cpu(x_dtype, stats, params, training):
    if stats is None and not training:
        return
    out = []
    for M in (torch, dg):
        x = M.ones(4, 3, dtype=getattr(M, x_dtype))
        rm = None if stats is None else M.zeros(3, dtype=getattr(M, stats))
        rv = None if stats is None else M.ones(3, dtype=getattr(M, stats))
        w = None if params is None else M.ones(3, dtype=getattr(M, params))
        b = None if params is None else M.zeros(3, dtype=getattr(M, params))
        try:
            out.append(M.nn.functional.batch_norm(x, rm, rv, w, b, training=training).detach().numpy())
        except RuntimeError as e:
            out.append(str(e))
    if isinstance(out[0], str):
        assert out[1] == out[0]
    else:
        np.testing.assert_allclose(out[1], out[0])
        assert out[1].dtype == out[0].dtype
