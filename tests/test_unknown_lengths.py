"""Tensors whose length is not known until computed (rows after a boolean mask: dask's NaN chunk sizes).
``numel()`` read NaN as 0, so every op that asked ``numel()`` whether its input was empty took its empty path and
gave a silently wrong result (softmax returned its input, median NaN, nonzero no rows, histc zeros, dropout dropped
nothing, local_response_norm returned its input).  Found by review (s64).  Each op here gives torch's numbers, or
raises; never another number."""
import numpy as np
import pytest

import daskgrad as dg

torch = pytest.importorskip("torch")

A = np.random.default_rng(0).standard_normal((7, 4))
M = A[:, 0] > 0


def _masked(chunks=(2, 4)):
    return dg.from_array(A, chunks=chunks)[dg.from_array(M, chunks=chunks[0])]


@pytest.mark.parametrize("chunks", [(7, 4), (2, 4), (3, 2), (1, 4)])
def test_numel_counts_rows_not_known_until_computed(chunks):
    x = _masked(chunks)
    assert x.shape[0] != x.shape[0]  # (the rows' count is NaN: not known)
    assert x.numel() == torch.tensor(A)[torch.tensor(M)].numel() == 8
    assert x.nelement() == 8 and np.size(x) == 8
    assert dg.zeros(0, 3).numel() == 0 and dg.zeros(2, 3).numel() == 6


def test_numel_of_a_tensor_that_requires_grad_leaves_its_graph_alone():
    x = dg.from_array(A, chunks=(2, 4), requires_grad=True)
    y = x[dg.from_array(M, chunks=2)]
    assert y.numel() == 8 and y.requires_grad
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.broadcast_to(M[:, None], A.shape) * 1.0)


def test_scalar_conversions_of_one_masked_element():
    x = dg.from_array(A[:, 0], chunks=3)
    one = x[x == float(A[2, 0])]
    assert one.item() == A[2, 0] and float(one) == A[2, 0] and bool(one)
    with pytest.raises(RuntimeError, match=f"a Tensor with {M.sum()} elements cannot be converted to Scalar"):
        x[x > 0].item()


CASES = {
    "softmax(1)": lambda t, F, M: t.softmax(1),
    "log_softmax(1)": lambda t, F, M: t.log_softmax(1),
    "log_softmax(0)": lambda t, F, M: t.log_softmax(0),
    "softmin(dim=1)": lambda t, F, M: F.softmin(t, dim=1),
    "median()": lambda t, F, M: t.median(),
    "nanmedian()": lambda t, F, M: t.nanmedian(),
    "aminmax()": lambda t, F, M: t.aminmax()[0],
    "nonzero()": lambda t, F, M: (t > 0).nonzero(),
    "argwhere()": lambda t, F, M: (t > 0).argwhere(),
    "histc": lambda t, F, M: t.histc(bins=4, min=-2, max=2),
    "histc lo == hi": lambda t, F, M: t.histc(bins=4),
    "scatter": lambda t, F, M: M.zeros(3, 4, dtype=t.dtype).scatter(0, (t.abs() * 10).long() % 3, t),
    "local_response_norm": lambda t, F, M: F.local_response_norm(t.reshape(-1, 2, 2), 2),
    "quantile": lambda t, F, M: t.quantile(0.5),
    "sum": lambda t, F, M: t.sum(),
    "mean(0)": lambda t, F, M: t.mean(0),
}


@pytest.mark.parametrize("name", list(CASES))
def test_ops_on_unknown_rows_give_torchs_numbers_or_raise(name):
    f = CASES[name]
    ref = f(torch.tensor(A)[torch.tensor(M)], torch.nn.functional, torch).numpy()
    try:
        got = f(_masked(), dg.nn.functional, dg).detach().numpy()
    except Exception:  # (dask needs these lengths: refused, not a silently different number)
        return
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=0)


def test_dropout_on_unknown_rows_drops():
    dg.manual_seed(0)
    y = dg.nn.functional.dropout(_masked() + 10, 0.9, training=True).numpy()
    kept = y != 0
    assert (~kept).any()  # (it dropped nothing: numel() read the unknown rows' count as 0)
    np.testing.assert_allclose(y[kept], (A[M] + 10)[kept] * 10, rtol=1e-12)


DIVIDED = {  # (each divided by the unknown count: NaN before)
    "kl_div(batchmean)": lambda t, F, M: F.kl_div(-t.abs(), t.abs(), reduction="batchmean"),
    "soft_margin_loss": lambda t, F, M: F.soft_margin_loss(t, t.sign()),
    "T.cov()": lambda t, F, M: t.T.cov(),
    "T.corrcoef()": lambda t, F, M: t.T.corrcoef(),
    "cross_entropy(probabilities)": lambda t, F, M: F.cross_entropy(t, t.softmax(1)),
}


@pytest.mark.parametrize("name", list(DIVIDED))
def test_ops_dividing_by_an_unknown_count_give_torchs_numbers(name):
    f = DIVIDED[name]
    ref = f(torch.tensor(A)[torch.tensor(M)], torch.nn.functional, torch).numpy()
    np.testing.assert_allclose(f(_masked(), dg.nn.functional, dg).detach().numpy(), ref, rtol=1e-12)


@pytest.mark.parametrize("order", [0, 1, 2, 3])
def test_moment_of_unknown_rows_is_numpys(order):
    from scipy import stats

    got = dg.moment(_masked(), order, axis=0).numpy()
    np.testing.assert_allclose(got, stats.moment(A[M], order, axis=0), rtol=1e-12, atol=1e-15)


def test_size_and_len_count_lengths_not_known_until_computed():
    """torch knows its lengths: ``size()``, ``size(d)``, the ``size`` attribute and ``len()`` of masked rows
    are the counts (a submission of one number a dim), never dask's NaN."""
    import torch

    x = np.arange(24.0).reshape(8, 3)
    m = x[:, 0] % 2 == 0
    for chunks in ((8, 3), (3, 2), (1, 1)):
        t = dg.tensor(x, chunks=chunks)[dg.tensor(m, chunks=chunks[0])]
        ref = torch.tensor(x)[torch.tensor(m)]
        assert tuple(t.size()) == tuple(ref.size())
        assert [t.size(d) for d in (0, 1, -2, -1)] == [ref.size(d) for d in (0, 1, -2, -1)]
        assert t.size == ref.numel() and len(t) == len(ref)
