"""Making tensors from other libraries' arrays: torch's dtype rules for ``daskgrad.tensor``, and NumPy,
dask, Zarr, h5py, xarray and torch arrays taken by ``from_array``/``as_tensor``/``from_torch``, lazily
where the source is lazy.  torch and NumPy are the oracles."""
import logging
import warnings

import dask.array as da
import numpy as np
import pytest

import daskgrad as dg

torch = pytest.importorskip("torch")


def torch_error(fn):
    """(type, message) of the error torch raises for ``fn()``: the text daskgrad must match."""
    with pytest.raises(Exception) as info:
        fn()
    return info.type, str(info.value)


def same_error(torch_fn, ours):
    kind, message = torch_error(torch_fn)
    with pytest.raises(kind) as info:
        ours()
    assert str(info.value) == message


def np_dtype(torch_dtype):
    return np.dtype(str(torch_dtype).removeprefix("torch."))


# ------------------------------------------------------------------------ constructors
DTYPE_CASES = {
    "python float": 1.0, "python int": 1, "bool": True, "complex": 1j, "ints and a float": [1, 2.0],
    "numpy float64 scalar and a float": [np.float64(1), 2.0], "a float and a numpy float64": [1.0, np.float64(2)],
    "int32 and an int": [np.int32(1), 2], "float16 and an int": [np.float16(1), 2],
    "float16 and a float": [np.float16(1), 2.0], "bool and int": [True, 1], "empty": [], "nested empty": [[]],
    "list of float64 arrays": [np.ones(2), np.ones(2)], "float32 array and floats": [np.ones(2, np.float32), [1.0, 2]],
    "numpy float64": np.float64(1), "numpy int32": np.int32(3), "int and complex": [1, 1j],
    "float64 and complex": [np.float64(1), 1j], "complex64 and float64": [np.complex64(1), np.float64(2)],
    "uint8 and int8": [np.uint8(1), np.int8(1)], "int64 and float32": [np.int64(1), np.float32(1)],
    "float64 array": np.ones((2, 3)), "int32 array": np.ones(2, np.int32), "nested tuples": ((1, 2), (3, 4)),
    "bool array": np.array([True, False]), "complex128 array": np.ones(2, np.complex128),
}


@pytest.mark.filterwarnings("ignore:Creating a tensor from a list of numpy.ndarrays")
@pytest.mark.parametrize("name", list(DTYPE_CASES))
def test_tensor_infers_dtype_and_shape_as_torch_tensor_does(name):
    data = DTYPE_CASES[name]
    ours, theirs = dg.tensor(data), torch.tensor(data)
    assert ours.dtype == np_dtype(theirs.dtype)
    assert ours.shape == tuple(theirs.shape)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_tensor_of_torch_tensors_keeps_their_dtype_and_copies_them_detached():
    for tt in (torch.arange(6, dtype=torch.float64).reshape(2, 3), torch.ones(2, dtype=torch.int16),
               torch.ones(3, requires_grad=True)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch warns for torch.tensor(tensor); daskgrad does not
            theirs = torch.tensor(tt)
        ours = dg.tensor(tt)
        assert ours.dtype == np_dtype(theirs.dtype) and not ours.requires_grad
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    assert dg.tensor([torch.tensor(1.0, dtype=torch.float64), 2.0]).dtype == np.float64


@pytest.mark.parametrize("bad", [None, object(), {1: 2}, "abc", [[1.0], [2.0, 3.0]], [[1, 2], 3],
                                 np.array([1, "a"], dtype=object), np.array(["a"])],
                         ids=["None", "object", "dict", "str", "ragged", "scalar for a row", "object array",
                              "str array"])
def test_tensor_raises_torchs_errors_for_data_it_cannot_hold(bad):
    same_error(lambda: torch.tensor(bad), lambda: dg.tensor(bad))


def test_in_memory_arrays_are_copied_when_made_as_dask_array_from_array_does():
    a = np.arange(4.0)
    tt = torch.arange(4.0, dtype=torch.float64)
    made = [dg.tensor(a), dg.from_array(a, chunks=2), dg.as_tensor(a), dg.from_torch(tt), dg.tensor(tt)]
    a[0] = 100  # torch.as_tensor would share this write; a lazy value must not change with it
    tt[0] = 100
    for t in made:
        np.testing.assert_array_equal(t.numpy(), [0, 1, 2, 3])


def test_as_tensor_returns_the_tensor_itself_and_casts_it_differentiably_as_torch():
    t, tt = dg.ones(3, requires_grad=True), torch.ones(3, requires_grad=True)
    assert dg.as_tensor(t) is t and torch.as_tensor(tt) is tt
    ours, theirs = dg.as_tensor(t, dtype=np.float64), torch.as_tensor(tt, dtype=torch.float64)
    assert ours.dtype == np.float64 and type(ours.grad_fn).__name__ == type(theirs.grad_fn).__name__
    assert dg.as_tensor([1.0, 2.0]).dtype == np_dtype(torch.as_tensor([1.0, 2.0]).dtype)
    assert dg.tensor([1, 2], dtype=torch.float64).dtype == np.float64  # torch's dtypes are understood


def test_tensor_refuses_lazy_sources_and_points_to_from_array(tmp_path):
    zarr = pytest.importorskip("zarr")
    sources = [da.ones(4, chunks=2), zarr.create_array(str(tmp_path / "z.zarr"), shape=(4,), dtype="f8")]
    for src in sources:
        with pytest.raises(TypeError, match=r"lazy array: use daskgrad\.from_array"):
            dg.tensor(src)
    with pytest.raises(TypeError, match=r"daskgrad\.stack"):
        dg.tensor([dg.ones(()), dg.ones(())])


@pytest.fixture
def zarr_store(tmp_path):
    """A (100,) float64 Zarr array in chunks of 10, opened through a store that counts its reads."""
    zarr = pytest.importorskip("zarr")
    z = zarr.create_array(str(tmp_path / "a.zarr"), shape=(100,), chunks=(10,), dtype="f8")
    z[:] = np.arange(100.0)
    store = counting_store(zarr, tmp_path / "a.zarr")
    return zarr.open_array(store, mode="r"), store


def counting_store(zarr, path):
    """The Zarr store at ``path``, counting its reads (``store.counter["get"]``), quietly."""
    return zarr.storage.LoggingStore(zarr.storage.LocalStore(str(path), read_only=True), log_level="WARNING",
                                     log_handler=logging.NullHandler())


def chunk_reads(store):
    return store.counter["get"]


def test_from_array_reads_a_zarr_array_lazily_chunk_by_chunk_keeping_float64(zarr_store):
    z, store = zarr_store
    before = chunk_reads(store)
    t = dg.from_array(z, chunks=10, requires_grad=True)
    y = (t * 2)[:15]
    assert chunk_reads(store) == before  # nothing read to make the tensor and record ops on it
    assert t.dtype == np.float64 and t.chunks == ((10,) * 10,)
    np.testing.assert_array_equal(y.detach().numpy(), np.arange(15.0) * 2)
    assert chunk_reads(store) - before == 2  # the two chunks [:15] needs, no more
    assert dg.as_tensor(z).dtype == np.float64


def test_from_array_reads_a_lazily_loaded_xarray_variable_chunk_by_chunk(tmp_path):
    xr = pytest.importorskip("xarray")
    zarr = pytest.importorskip("zarr")
    xr.Dataset({"v": (("x", "y"), np.arange(40.0).reshape(10, 4))}).to_zarr(
        str(tmp_path / "d.zarr"), mode="w", zarr_format=3, consolidated=False)
    store = counting_store(zarr, tmp_path / "d.zarr")
    ds = xr.open_zarr(store, chunks=None, consolidated=False)  # lazily loaded, no dask
    before = chunk_reads(store)
    t = dg.from_array(ds["v"], chunks=(5, 4))
    assert chunk_reads(store) == before and t.chunks == ((5, 5), (4,)) and t.dtype == np.float64
    np.testing.assert_array_equal(t[:5].numpy(), np.arange(20.0).reshape(5, 4))
    with pytest.raises(TypeError, match="lazy array"):
        dg.tensor(ds["v"])
    in_memory = xr.DataArray(np.ones((2, 3), np.float64), dims=("a", "b"))
    assert dg.from_array(in_memory).dtype == np.float64
    dask_backed = in_memory.chunk({"a": 1})
    assert dg.from_array(dask_backed).chunks == ((1, 1), (3,))


def test_from_array_reads_an_h5py_dataset_only_when_computed(tmp_path):
    h5py = pytest.importorskip("h5py")
    with h5py.File(tmp_path / "a.h5", "w") as f:
        dset = f.create_dataset("x", data=np.zeros(10, np.float64))
        t = dg.from_array(dset, chunks=5)
        dset[...] = np.arange(10.0)  # written after: a tensor that had read it would hold zeros
        assert t.dtype == np.float64 and t.chunks == ((5, 5),)
        np.testing.assert_array_equal((t * 2).numpy(), np.arange(10.0) * 2)
        with pytest.raises(TypeError, match=r"from_array"):
            dg.tensor(dset)


def test_from_torch_keeps_dtype_and_chunks_and_refuses_a_tensor_requiring_grad():
    tt = torch.arange(6, dtype=torch.float64).reshape(2, 3)
    t = dg.from_torch(tt, chunks=(1, 3))
    assert t.dtype == np.float64 and t.chunks == ((1, 1), (3,)) and not t.requires_grad
    np.testing.assert_array_equal(t.numpy(), tt.numpy())
    leaf = dg.from_torch(tt.float(), requires_grad=True)
    assert leaf.is_leaf and leaf.requires_grad and leaf.dtype == np.float32
    assert dg.from_array(tt.to(torch.int32)).dtype == np.int32
    rg = torch.ones(3, requires_grad=True)
    same_error(rg.__dlpack__, lambda: dg.from_torch(rg))
    same_error(rg.__dlpack__, lambda: dg.from_array(rg))
    with pytest.raises(TypeError, match="expected a torch.Tensor"):
        dg.from_torch(np.ones(3))
