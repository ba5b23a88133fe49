"""Cross entropy and NLL losses of rows of unknown count (after a boolean mask: ``x[mask]``, ``y[mask]``) compute
torch's numbers and gradients (reductions, class weights, ignore_index, label smoothing, class-probability targets);
their batch sizes, not known on the client, are checked where the rows are computed, with torch's error; softmax of
such rows is not taken for empty (``numel()`` of an unknown shape wrapped round to 0)."""
import numpy as np
import pytest
import torch

import daskgrad as dg
import daskgrad.nn.functional as F
from daskgrad import nn

N, C = 23, 4
CHUNKS = (6, 12, 5)


def _data(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, C))
    y = rng.integers(0, C, N)
    m = rng.random(N) < 0.6
    p = rng.random((N, C))
    return x, y, m, p / p.sum(1, keepdims=True)


def _ours(x, y, m, probabilities=False):
    X = dg.tensor(x, chunks=(CHUNKS, C), requires_grad=True)
    Y = dg.tensor(y, chunks=(CHUNKS,) + ((C,) if probabilities else ()), requires_grad=probabilities)
    M = dg.tensor(m, chunks=(CHUNKS,))
    xm, ym = X[M], Y[M]
    assert xm.shape[0] != xm.shape[0] and ym.shape[0] != ym.shape[0]  # (unknown: NaN)
    return X, Y, xm, ym


def _torch(x, y, m, probabilities=False):
    X = torch.tensor(x, requires_grad=True)
    Y = torch.tensor(y, requires_grad=probabilities)
    return X, Y, X[torch.tensor(m)], Y[torch.tensor(m)]


def _check(loss_of, probabilities=False, seed=0, **kw):
    x, y, m, p = _data(seed)
    t = p if probabilities else y
    X, Y, xm, ym = _ours(x, t, m, probabilities)
    tX, tY, txm, tym = _torch(x, t, m, probabilities)
    tkw = {k: torch.tensor(v.numpy()) if isinstance(v, dg.Tensor) else v for k, v in kw.items()}
    got = loss_of(dg)(xm, ym, **kw)
    want = loss_of(torch)(txm, tym, **tkw)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-12, atol=1e-14)
    got.sum().backward()
    want.sum().backward()
    np.testing.assert_allclose(X.grad.numpy(), tX.grad.numpy(), rtol=1e-12, atol=1e-14)
    if probabilities:
        np.testing.assert_allclose(Y.grad.numpy(), tY.grad.numpy(), rtol=1e-12, atol=1e-14)


def _module(name):
    return lambda lib: (lambda i, t, **kw: getattr(lib.nn, name)(**kw)(i, t))


def _functional(name):
    return lambda lib: (lambda i, t, **kw: getattr(F if lib is dg else torch.nn.functional, name)(i, t, **kw))


def _log_probs(name):  # nll_loss of log-probabilities
    def of(lib):
        f = F if lib is dg else torch.nn.functional
        return lambda i, t, **kw: getattr(f, name)(f.log_softmax(i, 1), t, **kw) if name == "nll_loss" else \
            getattr(lib.nn, name)(**kw)(f.log_softmax(i, 1), t)
    return of


LOSSES = [_module("CrossEntropyLoss"), _functional("cross_entropy")]
NLL = [_log_probs("nll_loss"), _log_probs("NLLLoss")]
OPTIONS = [{}, {"reduction": "sum"}, {"reduction": "none"}, {"weight": dg.tensor([1.0, 2.0, 0.5, 3.0],
                                                                                 dtype=dg.float64)},
           {"ignore_index": 1}, {"weight": dg.tensor([1.0, 2.0, 0.5, 3.0], dtype=dg.float64), "ignore_index": 2,
                                 "reduction": "mean"}]


@pytest.mark.parametrize("kw", OPTIONS)
@pytest.mark.parametrize("loss_of", LOSSES + NLL)
def test_class_index_losses_of_masked_rows_are_torch_s(loss_of, kw):
    _check(loss_of, **kw)


@pytest.mark.parametrize("kw", [{"label_smoothing": 0.2}, {"label_smoothing": 0.1, "reduction": "sum"},
                                {"label_smoothing": 0.3, "reduction": "none", "ignore_index": 0},
                                {"label_smoothing": 0.2, "weight": dg.tensor([1.0, 2.0, 0.5, 3.0], dtype=dg.float64)}])
@pytest.mark.parametrize("loss_of", LOSSES)
def test_label_smoothing_of_masked_rows_is_torch_s(loss_of, kw):
    _check(loss_of, **kw)


@pytest.mark.parametrize("kw", [{}, {"reduction": "sum"}, {"reduction": "none"}, {"label_smoothing": 0.25},
                                {"weight": dg.tensor([1.0, 2.0, 0.5, 3.0], dtype=dg.float64)}])
@pytest.mark.parametrize("loss_of", LOSSES)
def test_class_probability_targets_of_masked_rows_are_torch_s(loss_of, kw):
    _check(loss_of, probabilities=True, **kw)


def test_every_masked_row_ignored_gives_torch_s_nan():
    x, y, m, _ = _data(1)
    y = np.full_like(y, 3)
    X, _, xm, ym = _ours(x, y, m)
    tX, _, txm, tym = _torch(x, y, m)
    got, want = F.cross_entropy(xm, ym, ignore_index=3), torch.nn.functional.cross_entropy(txm, tym, ignore_index=3)
    assert np.isnan(got.item()) and np.isnan(want.item())
    got.backward()
    want.backward()
    np.testing.assert_array_equal(X.grad.numpy(), tX.grad.numpy())


def test_softmax_of_masked_rows_is_torch_s():
    x, _, m, _ = _data(2)
    X, _, xm, _ = _ours(x, np.zeros(N, dtype=np.int64), m)
    want = torch.tensor(x)[torch.tensor(m)]
    np.testing.assert_allclose(F.log_softmax(xm, 1).detach().numpy(), torch.log_softmax(want, 1).numpy(), rtol=1e-12)
    np.testing.assert_allclose(F.softmax(xm, 1).detach().numpy(), torch.softmax(want, 1).numpy(), rtol=1e-12)
    assert xm.numel() == want.numel() and X[X[:, 0] > 100].numel() == 0 and X[:0].numel() == 0


@pytest.mark.parametrize("f", [F.cross_entropy, lambda i, t: F.nll_loss(F.log_softmax(i, 1), t)])
def test_masked_rows_of_other_counts_raise_torch_s_error(f):
    x, y, m, _ = _data(3)
    X = dg.tensor(x, chunks=(CHUNKS, C))
    Y = dg.tensor(y, chunks=(CHUNKS,))
    m2 = m.copy()
    m2[np.flatnonzero(~m)[:2]] = True  # two rows more in the target
    xm, ym = X[dg.tensor(m, chunks=(CHUNKS,))], Y[dg.tensor(m2, chunks=(CHUNKS,))]
    with pytest.raises(ValueError) as ours:
        f(xm, ym).item()
    with pytest.raises(ValueError) as theirs:
        torch.nn.functional.cross_entropy(torch.tensor(x)[torch.tensor(m)], torch.tensor(y)[torch.tensor(m2)])
    assert str(ours.value) == str(theirs.value)


def test_probability_targets_of_other_counts_raise_torch_s_error():
    x, _, m, p = _data(4)
    X = dg.tensor(x, chunks=(CHUNKS, C))
    P = dg.tensor(p, chunks=(CHUNKS, C))
    m2 = m.copy()
    m2[np.flatnonzero(m)[:1]] = False  # one row fewer in the target
    with pytest.raises(ValueError) as ours:
        F.cross_entropy(X[dg.tensor(m, chunks=(CHUNKS,))], P[dg.tensor(m2, chunks=(CHUNKS,))]).item()
    with pytest.raises(ValueError) as theirs:
        torch.nn.functional.cross_entropy(torch.tensor(x)[torch.tensor(m)], torch.tensor(p)[torch.tensor(m2)])
    assert str(ours.value) == str(theirs.value)


def test_a_training_step_on_masked_rows_matches_torch():
    x, y, m, _ = _data(5)
    w0 = np.random.default_rng(6).standard_normal((C, C))
    lin, tlin = nn.Linear(C, C, dtype=dg.float64), torch.nn.Linear(C, C, dtype=torch.float64)
    with dg.no_grad():
        lin.weight.copy_(dg.tensor(w0))
        lin.bias.zero_()
    with torch.no_grad():
        tlin.weight.copy_(torch.tensor(w0))
        tlin.bias.zero_()
    M = dg.tensor(m, chunks=(CHUNKS,))
    X, Y = dg.tensor(x, chunks=(CHUNKS, C)), dg.tensor(y, chunks=(CHUNKS,))
    loss = nn.CrossEntropyLoss(label_smoothing=0.1)(lin(X)[M], Y[M])
    tm = torch.tensor(m)
    tloss = torch.nn.CrossEntropyLoss(label_smoothing=0.1)(tlin(torch.tensor(x))[tm], torch.tensor(y)[tm])
    loss.backward()
    tloss.backward()
    np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-12)
    np.testing.assert_allclose(lin.weight.grad.numpy(), tlin.weight.grad.numpy(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(lin.bias.grad.numpy(), tlin.bias.grad.numpy(), rtol=1e-12, atol=1e-14)


def test_masked_rows_that_do_not_line_up_are_refused():
    x, y, m, _ = _data(7)
    X, Y = dg.tensor(x, chunks=(CHUNKS, C)), dg.tensor(y, chunks=(CHUNKS,))
    m2 = np.roll(m, 7)  # as many rows, in other blocks
    xm, ym = X[dg.tensor(m, chunks=(CHUNKS,))], Y[dg.tensor(m2, chunks=(CHUNKS,))]
    with pytest.raises(NotImplementedError, match="other counts of rows"):
        F.cross_entropy(xm, ym).item()
    other = dg.tensor(y, chunks=((12, 11),))[dg.tensor(m, chunks=((12, 11),))]  # other row blocks: refused here
    with pytest.raises(NotImplementedError, match="as many row blocks"):
        F.cross_entropy(X[dg.tensor(m, chunks=(CHUNKS,))], other)


@pytest.mark.parametrize("kw", [{}, {"reduction": "none"}, {"reduction": "sum", "label_smoothing": 0.2},
                                {"ignore_index": 0, "weight": dg.tensor([1.0, 0.5, 2.0], dtype=dg.float64)}])
def test_k_dimensional_losses_of_masked_rows_are_torch_s(kw):
    rng = np.random.default_rng(8)
    x, y, m = rng.standard_normal((12, 3, 5)), rng.integers(0, 3, (12, 5)), rng.random(12) < 0.6
    X = dg.tensor(x, chunks=((4, 8), 3, 5), requires_grad=True)
    M = dg.tensor(m, chunks=((4, 8),))
    got = F.cross_entropy(X[M], dg.tensor(y, chunks=((4, 8), 5))[M], **kw)
    tX = torch.tensor(x, requires_grad=True)
    tkw = {k: torch.tensor(v.numpy()) if isinstance(v, dg.Tensor) else v for k, v in kw.items()}
    want = torch.nn.functional.cross_entropy(tX[torch.tensor(m)], torch.tensor(y)[torch.tensor(m)], **tkw)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-12, atol=1e-14)
    got.sum().backward()
    want.sum().backward()
    np.testing.assert_allclose(X.grad.numpy(), tX.grad.numpy(), rtol=1e-12, atol=1e-14)
