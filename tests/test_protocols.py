"""Protocols, as their owners define them: a Tensor is a dask collection, a NumPy array-like that
dispatches to daskgrad's ops, and a DLPack producer; constructors take arrays from NumPy, dask,
Zarr, h5py, xarray and torch, lazily where the source is lazy.  torch and NumPy are the oracles."""
import logging
import os
import shutil
import warnings

import dask
import dask.array as da
import numpy as np
import pytest

import daskgrad as dg
from daskgrad import _dask as door

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


# ------------------------------------------------------------------------ a dask collection
def test_dask_compute_gives_the_values_as_t_compute_does_also_inside_structures(rng):
    x = rng.standard_normal((6, 4))
    w = dg.from_array(x, chunks=(3, 2), requires_grad=True)
    y = (w * 2).sum(axis=0)
    assert dask.is_dask_collection(w)
    (a, nested) = dask.compute(w, {"y": y, "n": 1})
    assert type(a) is np.ndarray and a.dtype == np.float64
    np.testing.assert_array_equal(a, x)
    np.testing.assert_allclose(nested["y"], (x * 2).sum(axis=0))
    assert nested["n"] == 1


def test_dask_persist_returns_the_tensor_itself_in_memory_with_its_autograd(rng, submissions):
    x = rng.standard_normal((6, 4))
    w = dg.from_array(x, chunks=(3, 2), requires_grad=True)
    y = (w.exp() * 3).sum()
    (pw, py) = dask.persist(w, y)
    # the same objects: a parameter an optimizer holds stays that parameter, and y keeps its graph
    assert pw is w and py is y and w.requires_grad and w.is_leaf
    assert type(y.grad_fn).__name__ == "SumBackward0"
    assert door.materialized(w.array) and door.materialized(y.array)
    before = sum(submissions.values())
    assert y.item() == pytest.approx(3 * np.exp(x).sum())
    assert sum(submissions.values()) == before  # persisted: reading it computes nothing
    y.backward()
    tw = torch.tensor(x, requires_grad=True)
    (tw.exp() * 3).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy())


@pytest.mark.cluster
def test_dask_persist_on_a_cluster_holds_futures_and_keeps_the_tensor(rng):
    from distributed import Client, LocalCluster

    x = rng.standard_normal((6, 4))
    # its own cluster: the module's tests after it read memory the client process shares
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        w = dg.from_array(x, chunks=(3, 2), requires_grad=True)
        y = (w * w).sum()
        (py,) = dask.persist(y, scheduler=client)
        assert py is y and door.materialized(y.array)
        assert type(dict(y.array.dask)[y.array.__dask_keys__()[0]]).__name__ == "Future"
        assert y.item() == pytest.approx((x * x).sum())
        (a,) = dask.compute(w * 2, scheduler=client)
        np.testing.assert_allclose(a, x * 2)
        y.backward()
        np.testing.assert_allclose(w.grad.numpy(), 2 * x)


def test_dask_optimize_returns_the_tensor_and_tokenize_names_it_without_computing(submissions):
    t = dg.arange(10, chunks=5) * 2
    assert dask.optimize(t)[0] is t
    assert dask.base.tokenize(t) == dask.base.tokenize(t)
    assert dask.base.tokenize(t) != dask.base.tokenize(t + 1)
    assert sum(submissions.values()) == 0  # tokenizing once pickled, and pickling computes


def test_dask_visualize_draws_the_tensor_graph(tmp_path):
    pytest.importorskip("graphviz")
    if shutil.which("dot") is None:
        pytest.skip("graphviz's dot program is not installed")
    t = (dg.ones(4, chunks=2, requires_grad=True) * 2).sum()
    dask.visualize(t, filename=str(tmp_path / "graph.png"))
    assert (tmp_path / "graph.png").stat().st_size > 0


def test_the_dask_array_attributes_of_a_tensor_are_those_of_its_dask_array():
    a = np.arange(70.0).reshape(7, 10)
    t = dg.from_array(a, chunks=(3, 4), requires_grad=True) * 2
    d = da.from_array(a, chunks=(3, 4)) * 2
    assert (t.nbytes, t.chunksize, t.numblocks) == (d.nbytes, d.chunksize, d.numblocks) == (560, (3, 4), (3, 3))
    assert set(dict(t.dask)) == set(dict(t.to_dask().dask)) and t.dask is t.to_dask().dask
    delayed, expected = t.to_delayed(), d.to_delayed()
    assert delayed.shape == expected.shape == (3, 3)
    for got, want in zip(dask.compute(*delayed.ravel()), dask.compute(*expected.ravel())):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("index", [0, -1, (1,), (slice(1, None), [0, 2]), ([2, 0],), (-1, -1),
                                   (slice(None, None, 2),)], ids=repr)
def test_blocks_selects_the_chunks_dask_s_blocks_selects_and_is_differentiable(index):
    a = np.arange(70.0).reshape(7, 10)
    t = dg.from_array(a, chunks=(3, 4), requires_grad=True)
    d = da.from_array(a, chunks=(3, 4))
    got, want = t.blocks[index], d.blocks[index]
    assert got.shape == want.shape and got.chunks == want.chunks
    np.testing.assert_array_equal(got.detach().numpy(), want.compute())
    got.sum().backward()
    ones = da.from_array(np.arange(a.size).reshape(a.shape), chunks=(3, 4)).blocks[index].compute().ravel()
    expected = np.zeros(a.size)
    np.add.at(expected, ones.astype(int), 1.0)  # each selected element once (a block picked twice: twice)
    np.testing.assert_array_equal(t.grad.numpy(), expected.reshape(a.shape))


def test_blocks_refuses_an_index_beyond_the_blocks_as_dask_does():
    t = dg.ones((4, 4), chunks=2)
    for index in [(2,), (0, [0, 5])]:
        with pytest.raises(IndexError):
            da.ones((4, 4), chunks=2).blocks[index]
        with pytest.raises(IndexError, match="out of bounds"):
            t.blocks[index]


def test_map_blocks_as_a_method_is_differentiable_with_a_chunk_vjp_and_equals_dask_s_values():
    a = np.linspace(-2, 2, 12).reshape(3, 4)
    t = dg.from_array(a, chunks=(1, 2), requires_grad=True)
    y = t.map_blocks(np.sin, vjp=lambda g, b: (g * np.cos(b),))
    np.testing.assert_array_equal(y.detach().numpy(), da.from_array(a, chunks=(1, 2)).map_blocks(np.sin).compute())
    assert y.chunks == t.chunks and y.requires_grad
    y.sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), torch.cos(torch.tensor(a)).numpy(), rtol=1e-15)


def test_map_blocks_without_a_vjp_on_a_tensor_that_requires_grad_says_so_instead_of_dropping_the_gradient():
    t = dg.from_array(np.ones((2, 2)), chunks=1, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"map_blocks: input 0 requires grad, but no vjp= was given"):
        t.map_blocks(np.sin)
    with pytest.raises(RuntimeError, match="no vjp= was given"):
        dg.map_blocks(np.sin, t)
    np.testing.assert_array_equal(t.detach().map_blocks(np.sin).numpy(), np.sin(np.ones((2, 2))))
    with dg.no_grad():
        assert not t.map_blocks(np.sin).requires_grad


def test_tensor_visualize_draws_the_graph_as_dask_arrays_do(tmp_path):
    pytest.importorskip("graphviz")
    if shutil.which("dot") is None:
        pytest.skip("graphviz's dot program is not installed")
    t = dg.ones(4, chunks=2, requires_grad=True) * 2
    t.visualize(filename=str(tmp_path / "t.png"))
    t.to_dask().visualize(filename=str(tmp_path / "d.png"))
    assert (tmp_path / "t.png").stat().st_size == (tmp_path / "d.png").stat().st_size > 0


def test_to_dask_is_detached_data_that_da_to_zarr_writes(tmp_path, rng):
    pytest.importorskip("zarr")
    x = rng.standard_normal((6, 4)).astype(np.float32)
    w = dg.from_array(x, chunks=(3, 2), requires_grad=True)
    y = w * 2
    arr = y.to_dask()  # a requires-grad tensor gives its data, as detach() would
    assert isinstance(arr, da.Array) and arr.chunks == y.chunks and arr.dtype == np.float32
    da.to_zarr(arr, str(tmp_path / "y.zarr"))
    np.testing.assert_array_equal(da.from_zarr(str(tmp_path / "y.zarr")).compute(), x * 2)
    assert isinstance(da.asarray(w), da.Array)  # dask.array.asarray takes a Tensor through to_dask_array
    snapshot = w.detach().to_dask()
    with dg.no_grad():
        w.add_(1)
    np.testing.assert_array_equal(snapshot.compute(), x)  # dask arrays are immutable: a snapshot


def test_dask_persist_of_a_tensor_written_in_place_meanwhile_keeps_the_newer_value():
    t = dg.ones(4, chunks=2)
    rebuild, state = t.__dask_postpersist__()
    (stale,) = dask.persist(dg.ones(4, chunks=2).array)
    t.add_(1)  # the storage moved on: the persisted old value must not come back
    assert rebuild(dict(stale.dask), *state) is t
    np.testing.assert_array_equal(t.numpy(), [2, 2, 2, 2])


# ---------------------------------------------------------------------------------- NumPy
def test_np_asarray_and_numpy_refuse_a_tensor_requiring_grad_in_torchs_words(rng):
    x = rng.standard_normal(3).astype(np.float32)
    t, tt = dg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    same_error(lambda: np.asarray(tt), lambda: np.asarray(t))
    same_error(lambda: tt.numpy(), lambda: t.numpy())
    with dg.no_grad(), torch.no_grad():  # torch allows it under no_grad
        np.testing.assert_array_equal(np.asarray(t), np.asarray(tt))
    np.testing.assert_array_equal(t.numpy(force=True), tt.numpy(force=True))
    out = np.asarray(t.detach(), dtype=np.float64)
    assert type(out) is np.ndarray and out.dtype == np.float64
    np.testing.assert_array_equal(out, x)


def test_np_asarray_is_a_new_array_and_copy_false_raises_as_numpy_says():
    t = dg.from_array(np.arange(4.0), chunks=4)
    a = np.asarray(t)
    a[0] = 100
    np.testing.assert_array_equal(np.asarray(t), [0, 1, 2, 3])  # the kept chunk was not written
    with pytest.raises(ValueError, match="Unable to avoid copy"):
        np.array(t, copy=False)


def test_ufuncs_run_differentiable_ops_with_torchs_values_and_gradients(rng):
    x = rng.uniform(0.5, 2.0, (4, 3))
    c = rng.standard_normal((4, 3))
    t, tt = dg.from_array(x, chunks=2, requires_grad=True), torch.tensor(x, requires_grad=True)
    tc = torch.tensor(c)

    def f(np_, v, k):  # the NumPy spelling; `np_` is numpy for daskgrad, torch for the oracle
        return np_.sum(np_.exp(v) * k + np_.sin(v) - k / v + v ** 2 + np_.sqrt(v) * np_.tanh(v) - np_.log(v))

    out = f(np, t, c)
    assert isinstance(out, dg.Tensor) and out.grad_fn is not None
    ref = f(torch, tt, tc)
    assert out.item() == pytest.approx(ref.item())
    out.backward()
    ref.backward()
    np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy(), rtol=1e-10)


def test_numpy_array_on_the_left_gives_a_tensor_of_torchs_dtype_not_an_object_array():
    t, tt = dg.ones(3, requires_grad=True), torch.ones(3, requires_grad=True)
    a = np.arange(3.0)  # float64 on the left of a float32 tensor
    for op in (np.add, np.subtract, np.multiply, np.true_divide, np.maximum, np.less):
        ours = op(a, t)
        theirs = getattr(torch, op.__name__ if op is not np.true_divide else "true_divide")(torch.tensor(a), tt)
        assert isinstance(ours, dg.Tensor) and ours.dtype == np_dtype(theirs.dtype), op
        np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy())
    for ours in (a + t, a - t, a * t, a / t, a ** t, a @ t, a < t, a == t):
        assert isinstance(ours, dg.Tensor) and ours.dtype != object
    (a * t).sum().backward()
    np.testing.assert_array_equal(t.grad.numpy(), a)


def test_array_functions_run_the_ops_of_the_same_name_with_torchs_node_names(rng):
    x = rng.standard_normal((4, 3))
    t = dg.from_array(x, chunks=2, requires_grad=True)
    tt = torch.tensor(x, requires_grad=True)
    cases = [
        (lambda v: np.sum(v, axis=0), lambda v: v.sum(0)),
        (lambda v: np.mean(v, axis=1, keepdims=True), lambda v: v.mean(1, keepdim=True)),
        (lambda v: np.concatenate([v, np.ones((1, 3))]), lambda v: torch.cat([v, torch.ones(1, 3, dtype=v.dtype)])),
        (lambda v: np.stack([v, v], axis=1), lambda v: torch.stack([v, v], 1)),
        (lambda v: np.transpose(v), lambda v: v.T),  # NumPy's transpose reverses every axis: torch's .T (a permute)
        (lambda v: np.reshape(v, (3, 4)), lambda v: v.reshape(3, 4)),
        (lambda v: np.clip(v, -0.5, 0.5), lambda v: v.clamp(-0.5, 0.5)),
        (lambda v: np.where(v > 0, v, 0.0), lambda v: torch.where(v > 0, v, 0.0)),
        (lambda v: np.linalg.norm(v), lambda v: torch.linalg.vector_norm(v)),
        (lambda v: np.dot(v, np.ones(3)), lambda v: v @ torch.ones(3, dtype=v.dtype)),
        (lambda v: np.copy(v), lambda v: v.clone()),
        (lambda v: np.abs(v), lambda v: v.abs()),
    ]
    for ours_fn, torch_fn in cases:
        ours, theirs = ours_fn(t), torch_fn(tt)
        assert isinstance(ours, dg.Tensor)
        assert type(ours.grad_fn).__name__ == type(theirs.grad_fn).__name__
        np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-12)
        (g,) = dg.grad(ours.sum(), [t])
        (tg,) = torch.autograd.grad(theirs.sum(), [tt])
        np.testing.assert_allclose(g.numpy(), tg.numpy(), rtol=1e-12)


def test_shape_queries_answer_without_computing(submissions):
    t = dg.ones(4, 3, chunks=2) * 2
    assert np.shape(t) == (4, 3) and np.ndim(t) == 2 and np.size(t) == 12 and np.size(t, 1) == 3
    assert np.result_type(t, np.float64) == np.float64 and not np.iscomplexobj(t)
    assert sum(submissions.values()) == 0


@pytest.mark.parametrize("call, named", [
    (lambda t: np.unwrap(t), "numpy.unwrap"),
    (lambda t: np.interp(0.5, t, t), "numpy.interp"),
    (lambda t: np.fft.fft(t), "numpy.fft.fft"),
    (lambda t: np.add.reduce(t), "numpy.add.reduce"),
    (lambda t: np.trapezoid(t), "numpy.trapezoid"),
])
def test_numpy_functions_without_an_op_raise_a_type_error_naming_them(call, named, submissions):
    t = dg.ones(4, chunks=2, requires_grad=True) * 2
    with pytest.raises(TypeError, match=named.replace(".", r"\.")) as info:
        call(t)
    assert "daskgrad.ops" in str(info.value)
    assert sum(submissions.values()) == 0  # refused before anything ran


def test_numpy_arguments_an_op_does_not_take_raise_instead_of_being_ignored():
    t = dg.ones(4, chunks=2)
    with pytest.raises(TypeError, match=r"sum\(\): argument 'out' must be Tensor, not numpy\.ndarray"):
        np.sum(t, out=np.empty(()))  # (torch's words: a Tensor out= is written, see test_torch_methods)
    with pytest.raises(TypeError, match=r"numpy\.mean: daskgrad\.mean.*'dtype'"):
        np.mean(t, dtype=np.float64)
    with pytest.raises(TypeError, match=r"numpy\.exp: daskgrad\.exp takes no where"):
        np.exp(t, where=np.array([True, False, True, True]))
    a = np.ones(4)
    with pytest.raises(TypeError, match=r"out=\.\.\.\) cannot write"):
        a += t  # NumPy would write a lazy result into `a`: it cannot
    np.testing.assert_array_equal(np.sum(t, out=None), 4)  # NumPy's defaults ask nothing


def test_an_op_added_to_the_table_is_reachable_from_numpy_with_no_other_change(monkeypatch):
    from daskgrad.ops._util import OPS

    calls = []

    def arctan(x):
        calls.append(x)
        return x * 1

    monkeypatch.setitem(OPS, "arctan", (arctan, ()))
    t = dg.ones(3)
    assert isinstance(np.arctan(t), dg.Tensor) and calls[0] is t


def test_numpy_defers_to_other_operand_types_it_does_not_know():
    class Other:  # a duck array of another library
        def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
            return "other"

        def __array_function__(self, func, types, args, kwargs):
            return "other"

    t = dg.ones(3)
    assert np.add(t, Other()) == "other" and np.concatenate([t, Other()]) == "other"


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


def test_a_dataarray_over_a_leaf_keeps_dims_and_coords_through_differentiable_xarray_ops():
    xr = pytest.importorskip("xarray")
    v = np.random.default_rng(0).standard_normal((6, 4))
    u = xr.DataArray(v, dims=("time", "x"), coords={"time": np.arange(6), "x": [0.0, 0.5, 1.0, 1.5]},
                     name="u", attrs={"units": "m/s"}).chunk({"time": 2})
    w = dg.from_array(u, requires_grad=True)
    a = w.to_xarray()
    assert isinstance(a.data, dg.Tensor) and a.data is w and a.dims == ("time", "x") and a.attrs == {"units": "m/s"}
    anomaly = a - a.mean("time")
    assert isinstance(anomaly.data, dg.Tensor) and anomaly.data.requires_grad
    np.testing.assert_array_equal(anomaly.coords["x"].values, u.coords["x"].values)
    loss = (anomaly.sel(x=slice(0.5, 1.5)) ** 2).sum()
    loss.data.backward()
    grad = w.grad.to_xarray()
    assert grad.dims == u.dims and grad.name == "u" and grad.attrs == {}  # a gradient is not in m/s
    assert isinstance(grad.data, da.Array) and grad.chunks == u.chunks
    np.testing.assert_array_equal(grad.coords["time"].values, np.arange(6))
    expected = 2 * (v - v.mean(0))
    expected[:, 0] = 0
    np.testing.assert_allclose(grad.values, expected, rtol=1e-13)
    assert dg.from_array(v).to_xarray(dims=("a", "b")).dims == ("a", "b")  # plain tensors: labels given


def test_to_xarray_without_xarray_says_how_to_install_it(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "xarray", None)  # `import xarray` raises ImportError
    with pytest.raises(ImportError, match=r"pip install 'daskgrad\[xarray\]'"):
        dg.ones(3).to_xarray()


def test_the_xarray_example_writes_a_gradient_of_a_zarr_field_back_to_zarr_with_its_coords(tmp_path):
    pytest.importorskip("xarray")
    pytest.importorskip("zarr")
    import runpy

    example = runpy.run_path(os.path.join(os.path.dirname(os.path.dirname(__file__)), "examples",
                                          "xarray_gradient.py"))
    u, saved = example["main"](str(tmp_path))
    assert saved.dims == u.dims and saved.chunks == u.chunks
    np.testing.assert_array_equal(saved.coords["x"].values, u.coords["x"].values)
    un = u.values
    np.testing.assert_allclose(saved.values, 2 * (un - un.mean(0)) / un.size, rtol=1e-10, atol=1e-18)


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


# ------------------------------------------------------------------------------- torch
def test_torch_as_tensor_and_from_dlpack_read_a_computed_tensor(rng):
    x = rng.standard_normal((4, 3))
    t = dg.from_array(x, chunks=2) * 2
    for conv in (torch.as_tensor, torch.from_dlpack, lambda v: v.to_torch()):
        out = conv(t)
        assert out.dtype == torch.float64 and not out.requires_grad
        np.testing.assert_array_equal(out.numpy(), x * 2)
    assert t.__dlpack_device__() == torch.ones(1).__dlpack_device__()


def test_exporting_a_tensor_requiring_grad_to_torch_raises_torchs_export_error():
    t, tt = dg.ones(3, requires_grad=True), torch.ones(3, requires_grad=True)
    for ours in (lambda: torch.as_tensor(t), lambda: torch.from_dlpack(t), t.to_torch):
        same_error(tt.__dlpack__, ours)
    with dg.no_grad(), torch.no_grad():  # torch's exporter refuses under no_grad too
        same_error(tt.__dlpack__, t.to_torch)
    assert torch.equal(t.detach().to_torch(), torch.ones(3))


def test_to_torch_never_shares_memory_with_the_chunks_daskgrad_keeps():
    t = dg.from_array(np.arange(4.0), chunks=4)
    t.persist()
    tt = t.to_torch()
    tt += 1
    np.testing.assert_array_equal(t.numpy(), [0, 1, 2, 3])


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
    round_trip = dg.from_torch(dg.from_array(np.arange(3.0)).to_torch())
    np.testing.assert_array_equal(round_trip.numpy(), [0, 1, 2])


def test_cuda_tensors_cross_on_the_gpu_without_visiting_the_host():
    cupy = pytest.importorskip("cupy")
    try:
        cupy.zeros(1)
    except Exception as exc:  # no device, no driver
        pytest.skip(f"cupy cannot allocate on a GPU here: {exc}")
    if not torch.cuda.is_available():
        pytest.skip("this torch has no CUDA")
    tt = torch.arange(6, dtype=torch.float64, device="cuda")
    t = dg.from_torch(tt, chunks=3)
    assert t.device == "cuda" and isinstance(t.array._meta, cupy.ndarray)
    out = (t * 2).to_torch()
    assert out.device.type == "cuda" and torch.equal(out, tt * 2)
    assert dg.tensor(tt).device == "cuda"


def test_the_user_guide_interop_example_runs(tmp_path, monkeypatch):
    import pathlib

    text = (pathlib.Path(__file__).resolve().parent.parent / "docs" / "user-guide" / "interop.md").read_text()
    section = text[text.index("# NumPy, Dask, xarray and torch"):]
    code = section[section.index("```python") + len("```python"):section.index("```\n", section.index("```python"))]
    monkeypatch.chdir(tmp_path)  # it writes w.zarr
    scope = {}
    exec(compile(code, "README.md", "exec"), scope)
    assert type(scope["y"].grad_fn).__name__ == "SumBackward1" and scope["values"].shape == (10,)
    assert (tmp_path / "w.zarr").exists()


def test_numpy_functions_added_to_the_op_table_are_reached_from_numpy():
    v = np.array([3.0, np.nan, 1.0, 2.0])
    t = dg.from_array(v, chunks=2)
    np.testing.assert_array_equal(np.isnan(t).numpy(), np.isnan(v))
    np.testing.assert_array_equal(np.sort(t[::2]).numpy(), np.sort(v[::2]))
    w = dg.from_array(np.array([0.5, 1.5]), chunks=1, requires_grad=True)
    np.arcsinh(w).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), 1 / np.sqrt(np.array([0.5, 1.5]) ** 2 + 1))


def test_a_list_of_tensors_in_a_ufunc_is_stacked_lazily_not_computed(submissions):
    a = dg.from_array(np.arange(3.0), chunks=2, requires_grad=True)
    out = np.add(dg.ones((2, 3)), [a, a * 2])
    assert sum(submissions.values()) == 0 and out.requires_grad
    np.testing.assert_allclose(out.detach().numpy(), 1 + np.array([[0, 1, 2], [0, 2, 4]]))


@pytest.mark.parametrize("spelling", ["array_plugins", "array-plugins"])
def test_dask_s_array_plugins_run_on_the_arrays_daskgrad_makes(spelling):
    """dask's ``array_plugins`` (either spelling of the key, as ``dask.config.get`` reads it) run on
    each array daskgrad makes for itself, as dask's constructor runs them."""
    from daskgrad._dask.internals import HighLevelGraph, MaterializedLayer, array

    seen = []
    graph = HighLevelGraph({"made": MaterializedLayer({("made", 0): np.ones(2)})}, {"made": set()})
    with dask.config.set({spelling: [lambda a: seen.append(a.name) or a]}):
        made = array(graph, "made", ((2,),), np.empty(0))
        x = dg.from_array(np.arange(4.0), chunks=2)
        assert (x * 2).numpy().tolist() == [0.0, 2.0, 4.0, 6.0]
    assert "made" in seen and made.compute().tolist() == [1.0, 1.0]
    assert array(graph, "made", ((2,),), np.empty(0)).dask.layers["made"].collection_annotations["chunksize"] == (2,)
