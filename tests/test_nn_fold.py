"""F.unfold / F.fold and nn.Unfold / nn.Fold against torch (installed): values and gradients equal torch's
(float64) for kernel, dilation, padding and stride, batched and unbatched, on inputs in one chunk, even and
uneven chunks (batch, spatial and the columns' axes); gradcheck and gradgradcheck over those chunkings; the
gradient keeps the input's chunks; torch's errors (types and texts), signatures and reprs."""
import inspect

import numpy as np
import pytest

import daskgrad as dg
from daskgrad import nn
from daskgrad.nn import functional as F
from daskgrad.testing import gradcheck, gradgradcheck

torch = pytest.importorskip("torch")
TF = torch.nn.functional

SHAPE = (2, 3, 7, 8)
OPTIONS = {"k2": dict(kernel_size=2),
           "k2x3-s2-p1-d1x2": dict(kernel_size=(2, 3), stride=2, padding=1, dilation=(1, 2)),
           "k3-s1x2-p2x0": dict(kernel_size=3, stride=(1, 2), padding=(2, 0)),
           "k2-s3-gaps": dict(kernel_size=2, stride=3, dilation=2, padding=1)}
CHUNKS = {"one": -1, "even": (1, 3, (4, 3), (4, 4)), "uneven": ((1, 1), (1, 2), (1, 6), (5, 3))}


def _close(ours, theirs):
    np.testing.assert_allclose(ours, theirs.detach().numpy(), rtol=1e-12, atol=1e-14)


def _both_ways(fd, ft, xd, xt):
    """Outputs and input gradients (one random cotangent) equal torch's; the gradient in the input's chunks."""
    yd, yt = fd(xd), ft(xt)
    g = np.random.default_rng(1).standard_normal(tuple(yt.shape))
    yd.backward(dg.from_array(g, chunks=yd.chunks))
    yt.backward(torch.tensor(g))
    y, gx = dg.compute(yd.detach(), xd.grad)
    _close(y, yt)
    _close(gx, xt.grad)
    assert xd.grad.chunks == xd.chunks


@pytest.mark.parametrize("chunking", list(CHUNKS))
@pytest.mark.parametrize("option", list(OPTIONS))
@pytest.mark.parametrize("batched", [True, False])
def test_unfold_and_fold_values_and_gradients_are_torch_s(option, chunking, batched):
    kw = OPTIONS[option]
    x = np.random.default_rng(0).standard_normal(SHAPE if batched else SHAPE[1:])
    chunks = CHUNKS[chunking] if batched or chunking == "one" else CHUNKS[chunking][1:]
    xd, xt = dg.from_array(x, chunks=chunks, requires_grad=True), torch.tensor(x, requires_grad=True)
    _both_ways(lambda t: F.unfold(t, **kw), lambda t: TF.unfold(t, **kw), xd, xt)
    cols = TF.unfold(torch.tensor(x), **kw).numpy()
    col_chunks = -1 if chunking == "one" else \
        tuple((1,) * n if i == 0 and batched else (n // 2, n - n // 2) for i, n in enumerate(cols.shape))
    cd, ct = dg.from_array(cols, chunks=col_chunks, requires_grad=True), torch.tensor(cols, requires_grad=True)
    _both_ways(lambda t: F.fold(t, SHAPE[2:], **kw), lambda t: TF.fold(t, SHAPE[2:], **kw), cd, ct)


@pytest.mark.parametrize("chunking", ["one", "uneven"])
@pytest.mark.parametrize("option", ["k2x3-s2-p1-d1x2", "k2-s3-gaps"])
def test_gradcheck_and_gradgradcheck(option, chunking):
    kw = OPTIONS[option]
    x = dg.from_array(np.random.default_rng(0).standard_normal(SHAPE), chunks=CHUNKS[chunking], requires_grad=True)
    assert gradcheck(lambda t: F.unfold(t, **kw), (x,))
    assert gradgradcheck(lambda t: F.unfold(t, **kw), (x,))
    cols = F.unfold(x.detach(), **kw).detach().requires_grad_()
    assert gradcheck(lambda t: F.fold(t, SHAPE[2:], **kw), (cols,))


def test_fold_of_unfold_counts_each_cell_s_windows():
    """torch's documented identity: fold(unfold(x)) == x * fold(unfold(ones))."""
    x = dg.from_array(np.random.default_rng(0).standard_normal(SHAPE), chunks=CHUNKS["uneven"])
    kw = dict(kernel_size=(2, 3), padding=1, stride=(1, 2))
    counts = F.fold(F.unfold(dg.ones_like(x), **kw), SHAPE[2:], **kw)
    np.testing.assert_allclose(F.fold(F.unfold(x, **kw), SHAPE[2:], **kw).numpy(), (x * counts).numpy(), rtol=1e-14)


def _error(f):
    try:
        f()
    except Exception as e:  # noqa: BLE001  (compared with torch's)
        return type(e).__name__, str(e)
    return None


UNFOLD_ERRORS = [((2, 3, 5, 6), dict(kernel_size=7)), ((2, 3, 5, 6), dict(kernel_size=0)),
                 ((2, 3, 5, 6), dict(kernel_size=2, stride=0)), ((2, 3, 5, 6), dict(kernel_size=2, padding=-1)),
                 ((2, 3, 5, 6), dict(kernel_size=2, dilation=0)), ((2, 3, 5, 6), dict(kernel_size=(1, 2, 3))),
                 ((2, 3, 5, 6), dict(kernel_size=2, padding=(1, 2, 3))), ((2, 3, 5, 6), dict(kernel_size=(2,))),
                 ((2, 3, 5, 6), dict(kernel_size=0, stride=0)), ((5, 6), dict(kernel_size=2)),
                 ((6,), dict(kernel_size=2)), ((1, 2, 3, 4, 5), dict(kernel_size=2)),
                 ((2, 0, 3, 4), dict(kernel_size=2)), ((0, 3, 4), dict(kernel_size=2)),
                 ((2, 3, 1, 6), dict(kernel_size=2, dilation=(1, 9)))]
FOLD_ERRORS = [((2, 12, 20), (6, 6), dict(kernel_size=2)), ((2, 12, 20), (5, 6), dict(kernel_size=3)),
               ((2, 12, 20), (5, 6), dict(kernel_size=0)), ((2, 12, 20), (5, 6), dict(kernel_size=2, stride=0)),
               ((2, 12, 20), (5, 6), dict(kernel_size=2, padding=-1)),
               ((2, 12, 20), (5, 6), dict(kernel_size=2, dilation=0)), ((2, 12, 20), (5,), dict(kernel_size=2)),
               ((2, 12, 20), 5, dict(kernel_size=2)), ((2, 12, 20), (1, 1), dict(kernel_size=2)),
               ((2, 12), (5, 6), dict(kernel_size=2)), ((1, 2, 12, 20), (5, 6), dict(kernel_size=2)),
               ((2, 13, 20), (5, 6), dict(kernel_size=2)), ((2, 0, 20), (5, 6), dict(kernel_size=2)),
               ((12,), (5, 6), dict(kernel_size=2))]


@pytest.mark.parametrize("shape,kw", UNFOLD_ERRORS, ids=[f"{s}-{k}" for s, k in UNFOLD_ERRORS])
def test_unfold_bad_arguments_raise_torch_s_errors(shape, kw):
    x = np.ones(shape)
    ours, theirs = _error(lambda: F.unfold(dg.from_array(x), **kw)), _error(lambda: TF.unfold(torch.tensor(x), **kw))
    assert ours == theirs and ours is not None


@pytest.mark.parametrize("shape,size,kw", FOLD_ERRORS, ids=[f"{s}-{o}-{k}" for s, o, k in FOLD_ERRORS])
def test_fold_bad_arguments_raise_torch_s_errors(shape, size, kw):
    x = np.ones(shape)
    ours = _error(lambda: F.fold(dg.from_array(x), size, **kw))
    assert ours == _error(lambda: TF.fold(torch.tensor(x), size, **kw)) and ours is not None


def test_modules_reprs_signatures_and_outputs_are_torch_s():
    for cls, args, kw in [("Unfold", (2,), {}), ("Unfold", ((2, 3),), dict(padding=1, stride=(1, 2))),
                          ("Fold", ((7, 8), 2), {}), ("Fold", ([7, 8], (2, 3)), dict(dilation=2, padding=(1, 0)))]:
        ours, theirs = getattr(nn, cls)(*args, **kw), getattr(torch.nn, cls)(*args, **kw)
        assert repr(ours) == repr(theirs)
        x = np.random.default_rng(0).standard_normal(SHAPE if cls == "Unfold" else
                                                     tuple(TF.unfold(torch.ones(SHAPE), *args[1:], **kw).shape))
        _close(ours(dg.from_array(x, chunks=1)).numpy(), theirs(torch.tensor(x)))
    for name in ("unfold", "fold"):
        assert [(n, p.default) for n, p in inspect.signature(getattr(F, name)).parameters.items()] == \
            [(n, p.default) for n, p in inspect.signature(getattr(TF, name)).parameters.items()]
    for cls in ("Unfold", "Fold"):
        assert [(n, p.default) for n, p in inspect.signature(getattr(nn, cls)).parameters.items()] == \
            [(n, p.default) for n, p in inspect.signature(getattr(torch.nn, cls)).parameters.items()]
