"""Channel-wise and alpha dropout (F.dropout1d/2d/3d, alpha_dropout, feature_alpha_dropout and their modules)
against torch (installed).  A random mask cannot equal torch's draws, so what is checked is what does not depend
on them: every output element is one of the two values torch's formula allows (checked on torch's output too),
the mask is constant over each channel of the feature forms, the dropped fraction and (alpha) the mean and
variance, the gradient equals the mask (scaled), reproducibility under ``manual_seed``; and, equal to torch's:
the identity in eval and at ``p = 0`` (the same object where torch returns it), ``p = 1``, the shape checks'
errors and warnings, ``inplace``, signatures and module reprs.  In one chunk, even and uneven chunks."""
import inspect
import math
import warnings

import numpy as np
import pytest

import daskgrad as dg
from daskgrad import nn
from daskgrad.nn import functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional

ALPHA = 1.7580993408473766
FEATURE = ["dropout1d", "dropout2d", "dropout3d", "feature_alpha_dropout"]
ALL = FEATURE + ["alpha_dropout"]
MODULES = {"dropout1d": "Dropout1d", "dropout2d": "Dropout2d", "dropout3d": "Dropout3d",
           "alpha_dropout": "AlphaDropout", "feature_alpha_dropout": "FeatureAlphaDropout"}
# (function, shape, chunks: one / even / uneven), the channel axes are the first two (one for unbatched)
CASES = [("dropout1d", (40, 6, 5), {"one": -1, "even": (10, 3, 5), "uneven": ((7, 33), (1, 5), (2, 3))}),
         ("dropout1d", (60, 7), {"one": -1, "even": (20, 7), "uneven": ((13, 47), (3, 4))}),
         ("dropout2d", (20, 8, 3, 4), {"one": -1, "even": (10, 4, 3, 2), "uneven": ((3, 17), (5, 3), (1, 2), (4,))}),
         ("dropout3d", (10, 12, 2, 3, 2), {"one": -1, "even": (5, 6, 1, 3, 2),
                                           "uneven": ((9, 1), (7, 5), (2,), (1, 2), (2,))}),
         ("dropout3d", (50, 2, 3, 2), {"one": -1, "even": (25, 1, 3, 2), "uneven": ((1, 49), (2,), (2, 1), (2,))}),
         ("feature_alpha_dropout", (30, 10, 4), {"one": -1, "even": (15, 5, 2), "uneven": ((4, 26), (9, 1), (3, 1))}),
         ("alpha_dropout", (30, 10, 4), {"one": -1, "even": (15, 5, 2), "uneven": ((4, 26), (9, 1), (3, 1))})]
IDS = [f"{n}-{len(s)}d" for n, s, _ in CASES]


def _values(name, x, p):
    """The two values torch's formula gives each element: (kept, dropped)."""
    if "alpha" not in name:
        return x / (1 - p), np.zeros_like(x)
    a = 1.0 / math.sqrt((ALPHA * ALPHA * p + 1) * (1 - p))
    return x * a + ALPHA * a * p, np.full_like(x, -ALPHA * a + ALPHA * a * p)


def _channel_axes(name, ndim):
    if name == "alpha_dropout":
        return ndim
    return 1 if (name == "dropout1d" and ndim == 2) or (name == "dropout3d" and ndim == 4) else 2


def _kept(name, out, x, p):
    """Which elements were kept, after checking that each is one of its two allowed values."""
    kept, dropped = _values(name, x, p)
    is_kept = np.isclose(out, kept, rtol=1e-13, atol=0)
    assert (is_kept | np.isclose(out, dropped, rtol=1e-13, atol=0)).all()
    return is_kept


@pytest.mark.parametrize("chunking", ["one", "even", "uneven"])
@pytest.mark.parametrize("name,shape,chunks", CASES, ids=IDS)
def test_mask_values_channels_statistics_and_gradient(name, shape, chunks, chunking):
    p = 0.3
    x = np.random.default_rng(0).standard_normal(shape) + 3.0  # (no element at 0: kept and dropped differ)
    xd = dg.from_array(x, chunks=chunks[chunking], requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # dropout2d's 3-D warning is checked below
        yt = getattr(TF, name)(torch.tensor(x), p, True).numpy()
        dg.manual_seed(1)
        yd = getattr(F, name)(xd, p, True)
    _kept(name, yt, x, p)  # (the formula is torch's)
    g = np.random.default_rng(2).standard_normal(shape)
    yd.backward(dg.from_array(g, chunks=yd.chunks))
    out, grad = dg.compute(yd.detach(), xd.grad)
    kept = _kept(name, out, x, p)
    k = _channel_axes(name, len(shape))
    per_channel = kept.reshape(shape[:k] + (-1,))
    assert (per_channel == per_channel[..., :1]).all()  # one draw per channel (per element for alpha_dropout)
    draws = per_channel[..., 0]
    assert abs((~draws).mean() - p) < 4 * math.sqrt(p * (1 - p) / draws.size)
    scale = 1 / (1 - p) if "alpha" not in name else 1.0 / math.sqrt((ALPHA * ALPHA * p + 1) * (1 - p))
    np.testing.assert_allclose(grad, g * kept * scale, rtol=1e-14, atol=0)
    dg.manual_seed(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = getattr(F, name)(dg.from_array(x, chunks=chunks[chunking]), p, True).numpy()
    np.testing.assert_array_equal(again, out)


@pytest.mark.parametrize("name", ["alpha_dropout", "feature_alpha_dropout"])
def test_alpha_dropout_keeps_a_standard_normal_standard(name):
    x = np.random.default_rng(0).standard_normal((400, 50, 10))
    dg.manual_seed(0)
    y = getattr(F, name)(dg.from_array(x, chunks=(100, 25, 10)), 0.2, True).numpy()
    assert abs(y.mean()) < 0.03 and abs(y.var() - 1) < 0.03


def _signature(f):
    """Names, kinds and defaults (torch's annotations aside)."""
    return [(n, q.kind, q.default) for n, q in inspect.signature(f).parameters.items()]


def _outcome(f):
    """What a call does: (error type, text) or the output's shape, and the warnings' texts."""
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        try:
            out = f()
        except Exception as e:  # noqa: BLE001  (compared with torch's)
            out = (type(e).__name__, str(e))
        else:
            out = tuple(out.shape)
    return out, [str(m.message) for m in w]


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("training", [True, False])
def test_shape_checks_errors_and_warnings_are_torch_s(name, training):
    for shape in [(), (3,), (2, 3), (2, 3, 4), (1, 2, 3, 2), (1, 2, 1, 2, 2), (1, 1, 2, 1, 1, 2), (0,), (0, 3)]:
        x = np.ones(shape)
        ours = _outcome(lambda: getattr(F, name)(dg.from_array(x), 0.5, training))
        theirs = _outcome(lambda: getattr(TF, name)(torch.tensor(x), 0.5, training))
        assert ours == theirs, shape
    for p in (-0.1, 1.5):
        assert _outcome(lambda: getattr(F, name)(dg.ones(2, 3, 4), p)) == \
            _outcome(lambda: getattr(TF, name)(torch.ones(2, 3, 4), p))
        assert _outcome(lambda: getattr(nn, MODULES[name])(p)) == _outcome(lambda: getattr(torch.nn, MODULES[name])(p))


@pytest.mark.parametrize("name", ALL)
def test_identity_where_torch_s_is_p_one_zeroes_and_signatures(name):
    shapes = {"dropout1d": [(2, 3, 4), (3, 4)], "dropout3d": [(1, 2, 2, 3, 2), (2, 2, 3, 2)]}.get(name, [(2, 3, 4)])
    for shape in shapes:
        x = np.random.default_rng(0).standard_normal(shape)
        x.flat[0], x.flat[1] = np.nan, np.inf
        xd, xt = dg.from_array(x), torch.tensor(x)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for p, training in ((0.5, False), (0.0, True), (0.0, False)):
                yd, yt = getattr(F, name)(xd, p, training), getattr(TF, name)(xt, p, training)
                assert (yd is xd) == (yt is xt)
                np.testing.assert_array_equal(yd.numpy(), yt.numpy())
            yd, yt = getattr(F, name)(xd, 1.0, True), getattr(TF, name)(xt, 1.0, True)  # zeros; NaN, inf: NaN
            np.testing.assert_array_equal(yd.numpy(), yt.numpy())
    assert _signature(getattr(F, name)) == _signature(getattr(TF, name))
    assert _signature(getattr(nn, MODULES[name])) == _signature(getattr(torch.nn, MODULES[name]))
    for args in ((), (0.2,), (0.2, True)):
        assert repr(getattr(nn, MODULES[name])(*args)) == repr(getattr(torch.nn, MODULES[name])(*args))


@pytest.mark.parametrize("name", ALL)
def test_modules_drop_while_training_only(name):
    m = getattr(nn, MODULES[name])(0.4)
    x = dg.from_array(np.random.default_rng(0).standard_normal((20, 6, 5)) + 3, chunks=(5, 3, 5))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = m(x).numpy()
        _kept(name, y, x.numpy(), 0.4)
        assert not (y == x.numpy()).all()
        m.eval()
        xt = torch.tensor(x.numpy())
        assert (m(x) is x) == (getattr(torch.nn, MODULES[name])(0.4).eval()(xt) is xt) and not m.training
        np.testing.assert_array_equal(m(x).numpy(), x.numpy())


@pytest.mark.parametrize("name", FEATURE + ["alpha_dropout"])
def test_inplace_writes_the_input_as_torch_s(name):
    shape = {"dropout1d": (4, 3, 4), "dropout3d": (4, 3, 2, 2, 1)}.get(name, (4, 3, 2, 2))
    x = np.random.default_rng(0).standard_normal(shape) + 3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        leaf_d, leaf_t = dg.from_array(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        assert _outcome(lambda: getattr(F, name)(leaf_d, 0.5, True, True)) == \
            _outcome(lambda: getattr(TF, name)(leaf_t, 0.5, True, True))
        h = leaf_d * 1.0
        version = h._version
        out = getattr(F, name)(h, 0.5, True, True)
        assert out is h and h._version > version
        kept = _kept(name, h.detach().numpy(), x, 0.5)
        out.sum().backward()
        scale = 2.0 if "alpha" not in name else 1.0 / math.sqrt((ALPHA * ALPHA * 0.5 + 1) * 0.5)
        np.testing.assert_allclose(leaf_d.grad.numpy(), kept * scale, rtol=1e-14)
        if name in ("dropout1d", "dropout3d"):  # unbatched, in place: the input itself, per channel
            u = dg.from_array(x[0])
            out = getattr(F, name)(u, 0.5, True, True)
            assert out is u and out.shape == u.shape
            got = u.numpy().reshape(u.shape[0], -1)
            assert ((got == 0).all(axis=1) | (got != 0).all(axis=1)).all()
