"""A NumPy array made into a tensor (``dg.tensor``, ``dg.from_array``) is copied into chunks named by a
hash of its values, dtype and chunks, without dask's general hashing and constructor: the chunks, values,
copy semantics and key names' determinism are dask's ``from_array``'s."""
import dask
import dask.array as da
import numpy as np
import pytest

import daskgrad as dg


@pytest.mark.parametrize("shape, chunks", [((7,), "auto"), ((7,), -1), ((7,), 3), ((6, 4), (3, 2)),
                                           ((6, 4), ((1, 5), (4,))), ((6, 4), {0: 2}), ((), "auto"),
                                           ((0, 3), "auto"), ((5, 3), [2, -1])])
@pytest.mark.parametrize("make", [dg.tensor, dg.from_array])
def test_chunks_and_values_are_dasks(make, shape, chunks):
    x = np.arange(int(np.prod(shape)), dtype="float64").reshape(shape)
    t = make(x, chunks=chunks)
    ref = da.from_array(x, chunks=chunks)
    assert t.chunks == ref.chunks
    np.testing.assert_array_equal(t.numpy(), x)
    for block, ref_block in zip(t.array.to_delayed().ravel(), ref.to_delayed().ravel()):
        np.testing.assert_array_equal(block.compute(), ref_block.compute())


def test_a_copy_named_by_its_values():
    x = np.zeros((4, 3))
    a, b = dg.tensor(x, chunks=2), dg.from_array(x, chunks=2)
    x[0] = 5  # a later write to the source is not seen (torch.tensor copies too)
    assert a.numpy().sum() == 0 and b.numpy().sum() == 0
    assert not np.shares_memory(a.numpy(), x)
    assert a.array.name == b.array.name  # the same values and chunks: the same keys, as dask's
    others = [dg.tensor(x, chunks=2), dg.tensor(np.zeros((4, 3)), chunks=3),
              dg.tensor(np.zeros((4, 3), "f4"), chunks=2), dg.tensor(np.zeros((3, 4)).T, chunks=2)]
    assert len({a.array.name} | {t.array.name for t in others}) == 4  # (the transposed zeros: the same bytes)


def test_a_strided_source_and_other_dtypes():
    x = np.arange(12.0).reshape(3, 4).T  # not contiguous
    np.testing.assert_array_equal(dg.tensor(x, chunks=(2, 3)).numpy(), x)
    for v in (np.array([True, False]), np.array([1 + 2j]), np.arange(3, dtype="int8"), np.float32(2.5)):
        t = dg.tensor(v)
        assert t.dtype == np.asarray(v).dtype
        np.testing.assert_array_equal(t.numpy(), v)


def test_the_chunk_size_setting_is_read_each_time():
    x = np.ones(1000)
    with dask.config.set({"array.chunk-size": "1KiB"}):
        small = dg.tensor(x).chunks
    assert small == da.from_array(x, chunks=(128,)).chunks
    assert dg.tensor(x).chunks == ((1000,),)
