"""Pointwise indexing by several integer arrays and boolean-mask assignment (dask.array has neither):
values and gradients equal NumPy's and torch's, on one chunk, uneven and size-1 chunks, and on
chunks that refuse host conversion."""
import numpy as np
import pytest

import daskgrad as dg
from daskgrad.testing import gradcheck

from strict_array import StrictArray, to_strict

CHUNKINGS = {"one": -1, "uneven": ((1, 3), (2, 1), (3, 1)), "ones": 1}
INDEXES = [([1, 2], [2, 0]), (slice(None), [0, 2, 2], [1, 1, 3]), ([[1, 0], [3, 3]], slice(None), [[0, 1], [2, 2]]),
           (1, [0, 2]), ([3, 3, 0], [1, 1, 1])]


@pytest.mark.parametrize("chunks", CHUNKINGS, ids=list(CHUNKINGS))
@pytest.mark.parametrize("idx", INDEXES, ids=[repr(i) for i in INDEXES])
def test_pointwise_indexing_by_several_arrays_matches_numpy_and_gradchecks(idx, chunks):
    x0 = np.arange(48.0).reshape(4, 3, 4) / 7
    x = dg.from_array(x0, chunks=CHUNKINGS[chunks], requires_grad=True)
    y = x[idx]
    np.testing.assert_array_equal(y.detach().numpy(), x0[idx])
    y.sum().backward()
    expected = np.zeros_like(x0)
    np.add.at(expected, idx, 1.0)  # repeated points accumulate
    np.testing.assert_array_equal(x.grad.numpy(), expected)
    assert gradcheck(lambda t: (t[idx] ** 2).sum(), [dg.from_array(x0, chunks=CHUNKINGS[chunks], requires_grad=True)])


def _as_tensors(idx, chunks):
    """``idx`` with each integer list an index tensor (chunked ``chunks``: lazy, its values unknown here)."""
    return tuple(dg.from_array(np.array(i), chunks=chunks) if isinstance(i, list) else i for i in idx)


@pytest.mark.parametrize("index_chunks", [-1, 1], ids=["one-chunk-index", "size1-index-chunks"])
@pytest.mark.parametrize("chunks", CHUNKINGS, ids=list(CHUNKINGS))
@pytest.mark.parametrize("idx", INDEXES, ids=[repr(i) for i in INDEXES])
def test_pointwise_indexing_by_several_index_tensors_matches_numpy_and_gradchecks(idx, chunks, index_chunks):
    # torch indexes by tensors on several axes as by lists (op_db's __getitem__ sample 12 mixes both)
    x0 = np.arange(48.0).reshape(4, 3, 4) / 7
    x = dg.from_array(x0, chunks=CHUNKINGS[chunks], requires_grad=True)
    tidx = _as_tensors(idx, index_chunks)
    y = x[tidx]
    np.testing.assert_array_equal(y.detach().numpy(), x0[idx])
    y.sum().backward()
    expected = np.zeros_like(x0)
    np.add.at(expected, idx, 1.0)
    np.testing.assert_array_equal(x.grad.numpy(), expected)
    assert gradcheck(lambda t: (t[tidx] ** 2).sum(), [dg.from_array(x0, chunks=CHUNKINGS[chunks], requires_grad=True)])


def test_index_tensors_on_several_axes_on_chunks_that_refuse_host_conversion():
    x = to_strict(dg.from_array(np.arange(12.0).reshape(3, 4), chunks=2)).requires_grad_()
    i, j = (to_strict(dg.from_array(np.array(v), chunks=1)) for v in ([0, 2], [1, 3]))
    (x[i, j] ** 2).sum().backward()
    expected = np.zeros((3, 4))
    expected[0, 1], expected[2, 3] = 2.0, 22.0
    assert isinstance(x.grad.array._meta, StrictArray)
    np.testing.assert_array_equal(x.grad.numpy().get(), expected)


def test_index_tensors_on_several_axes_out_of_bounds_raise_torchs_index_error():
    torch = pytest.importorskip("torch")
    x = dg.from_array(np.zeros((5, 4)), chunks=2)
    with pytest.raises(IndexError) as expected:
        torch.zeros(5, 4)[torch.tensor([1]), torch.tensor([4])]
    with pytest.raises(IndexError) as got:
        x[dg.tensor([1]), dg.tensor([4])].numpy()
    assert str(got.value) == str(expected.value)
    x[dg.tensor([1, 3]), dg.tensor([2, 0])] = dg.tensor([1.0, 2.0], dtype="float64")  # (lazy indices assign too)
    t = torch.zeros(5, 4, dtype=torch.float64)
    t[torch.tensor([1, 3]), torch.tensor([2, 0])] = torch.tensor([1.0, 2.0], dtype=torch.float64)
    np.testing.assert_array_equal(x.numpy(), t.numpy())


def test_index_tensors_on_several_axes_that_daskgrad_cannot_combine_are_refused_before_submitting():
    import dask.array as da

    x = dg.from_array(np.arange(12.0).reshape(3, 4), chunks=2)
    unknown = dg.from_array(da.from_array(np.array([0, 2, 1, 0]), chunks=2)[da.from_array(np.array([1, 1, 0, 1]),
                                                                                         chunks=2) > 0])
    with pytest.raises(NotImplementedError, match="known lengths"):  # (dask cannot broadcast unknown lengths)
        x[unknown, dg.tensor([1])]
    # a tensor mask beside another index: its True places read, as torch's (x[[0, 1], [0, 2]])
    np.testing.assert_array_equal(x[dg.tensor([0, 1]), dg.tensor([True, False, True, False])].numpy(), [0.0, 6.0])
    assert x[dg.tensor([0]), []].shape == (0,)  # (an empty list beside a tensor: NumPy's empty result)


def test_pointwise_indexing_and_mask_assignment_on_chunks_that_refuse_host_conversion():
    x = to_strict(dg.from_array(np.arange(12.0).reshape(3, 4), chunks=2)).requires_grad_()
    (x[[0, 2], [1, 3]] ** 2).sum().backward()
    expected = np.zeros((3, 4))
    expected[0, 1], expected[2, 3] = 2.0, 22.0
    assert isinstance(x.grad.array._meta, StrictArray)
    np.testing.assert_array_equal(x.grad.numpy().get(), expected)
    mask = to_strict(dg.from_array(np.arange(12).reshape(3, 4) % 3 == 0, chunks=2))
    y = dg.zeros(3, 4, chunks=2, dtype="float64")
    v = to_strict(dg.from_array(np.arange(1.0, 5.0), chunks=2)).requires_grad_()
    y = to_strict(y)
    y[mask] = v
    (y * y).sum().backward()
    np.testing.assert_array_equal(y.detach().numpy().get()[np.arange(12).reshape(3, 4) % 3 == 0], [1, 2, 3, 4])
    np.testing.assert_array_equal(v.grad.numpy().get(), [2, 4, 6, 8])


@pytest.mark.parametrize("lazy_mask", [False, True], ids=["numpy-mask", "tensor-mask"])
def test_assigning_a_tensor_through_a_2d_mask_fills_its_true_places_in_order(lazy_mask):
    m = np.array([[True, False, True], [False, True, True]])
    x = dg.from_array(np.zeros((2, 3)), chunks=(1, 2), requires_grad=True)
    v = dg.from_array(np.array([1.0, 2.0, 3.0, 4.0]), chunks=3, requires_grad=True)
    y = x * 1
    y[dg.tensor(m) if lazy_mask else m] = v
    out = np.zeros((2, 3))
    out[m] = [1, 2, 3, 4]
    np.testing.assert_array_equal(y.detach().numpy(), out)
    w = np.arange(6.0).reshape(2, 3)
    (y * dg.tensor(w)).sum().backward()
    np.testing.assert_array_equal(v.grad.numpy(), w[m])
    np.testing.assert_array_equal(x.grad.numpy(), np.where(m, 0.0, w))


def test_a_value_of_the_wrong_length_for_a_mask_raises_torchs_error_before_submitting():
    y = dg.zeros(2, 3, dtype="float64")
    with pytest.raises(RuntimeError, match=r"shape mismatch: value tensor of shape \[3\] cannot be broadcast "
                                           r"to indexing result of shape \[4\]"):
        y[np.array([[True, False, True], [False, True, True]])] = dg.ones(3, dtype="float64")
