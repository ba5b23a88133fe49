"""torch's older and rarer Tensor methods (daskgrad/ops/methods_legacy.py) against torch 2.13: ``type``, ``new``,
``qr``/``svd``/``lu``/``lu_solve``/``geqrf``/``orgqr``/``ormqr`` (named results, values, gradients of a weighted
sum, torch's deprecation warnings), the ``unsafe_`` splits, ``apply_``/``map_``/``map2_``, ``resize_``/
``resize_as_``, ``nonzero_static``, ``dim_order``, ``output_nr``, the memory answers and torch's errors, in
float64 over one and uneven chunkings."""
import warnings

import numpy as np
import pytest

import daskgrad as dg

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(5)
CHUNKINGS = {"one": (6, 4), "uneven": ((4, 2), (3, 1))}
A = RNG.standard_normal((6, 4))
SQUARE = RNG.standard_normal((4, 4)) + 4 * np.eye(4)
W = RNG.standard_normal((6, 4))


def error_of(fn):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn()
    except Exception as e:  # noqa: BLE001 (the type and text are compared)
        return type(e), str(e)
    return None


def same_error(ours, theirs):
    mine, torchs = error_of(ours), error_of(theirs)
    assert torchs is not None and mine == torchs, (mine, torchs)


def pair(values, chunks, requires_grad=True):
    return (dg.from_array(values, chunks=chunks, requires_grad=requires_grad),
            torch.tensor(values, requires_grad=requires_grad))


def quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


# ------------------------------------------------------------------ type()
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
                                   "bool", "complex64", "complex128", "uint16"])
def test_type_names_the_tensor_s_type_as_torch(dtype):
    assert dg.zeros(2, dtype=dtype).type() == torch.zeros(2, dtype=getattr(torch, dtype)).type()


def test_type_casts_to_a_dtype_or_a_type_name_and_is_itself_when_nothing_changes():
    x, t = pair(A, (4, 3))
    for target in (torch.float32, "torch.IntTensor", torch.IntTensor, "torch.DoubleTensor", dg.float16):
        ours, theirs = x.type(target), t.type(target if not isinstance(target, np.dtype) else torch.float16)
        assert ours.dtype == np.dtype(str(theirs.dtype).removeprefix("torch."))
        assert ours.requires_grad == theirs.requires_grad
        np.testing.assert_array_equal(ours.detach().numpy(), theirs.detach().numpy())
    assert x.type(torch.float64) is x and x.type("torch.DoubleTensor") is x
    y = x.type(torch.float32)
    (y.double() * W).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), W.astype(np.float32))


def test_type_errors_are_torch_s():
    x, t = pair(A, (4, 3))
    for arg in ("foo", "torch.float64", "float64"):
        same_error(lambda: x.type(arg), lambda: t.type(arg))
    same_error(lambda: x.type(3), lambda: t.type(3))
    same_error(lambda: x.type(torch.float32, foo=1), lambda: t.type(torch.float32, foo=1))


def test_bfloat16_and_chalf_refuse_as_daskgrad_refuses_those_dtypes():
    x = dg.ones(2)
    for fn in (x.bfloat16, x.chalf, lambda: x.type(torch.bfloat16), lambda: x.type("torch.BFloat16Tensor")):
        with pytest.raises(TypeError, match="not understood"):
            fn()
    with pytest.raises(TypeError, match="data type 'bfloat16' not understood"):
        x.to(torch.bfloat16)


# ------------------------------------------------------------------ new() and to_dense()
def test_new_as_torch_s_legacy_constructor():
    x, t = pair(A.astype(np.float32), (4, 3), requires_grad=False)
    for args in ((2, 3), ([1, 2],), ((2, 3),), ([[1, 2], [3, 4]],), (), ([],), (np.array([1, 2]),)):
        ours, theirs = x.new(*args), t.new(*args)
        assert ours.shape == tuple(theirs.shape) and ours.dtype == np.float32 and not ours.requires_grad
        if args and not all(isinstance(a, int) for a in args):  # (sizes: torch's memory is uninitialized)
            np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
        else:
            assert not ours.numpy().any()
    alias = x.new(x)
    assert alias._base is x and alias.shape == x.shape
    for args, kwargs in (((3.5,), {}), (("a",), {}), ((-1,), {}), ((2,), {"dtype": torch.int64}),
                         ((2,), {"requires_grad": True})):
        same_error(lambda: x.new(*args, **kwargs), lambda: t.new(*args, **kwargs))
    same_error(lambda: x.new(x.long()), lambda: t.new(t.long()))


def test_to_dense_of_a_dense_tensor_is_itself():
    x, t = pair(A, (4, 3))
    assert x.to_dense() is x and t.to_dense() is t
    assert x.to_dense(torch.float32).dtype == np.float32 and x.to_dense(torch.float32).requires_grad


# ------------------------------------------------------------------ the old linear algebra
@pytest.mark.parametrize("chunking", list(CHUNKINGS))
@pytest.mark.parametrize("some", [True, False])
def test_qr_is_torch_s_named_tuple_values_and_gradients(chunking, some):
    x, t = pair(A, CHUNKINGS[chunking])
    with pytest.warns(UserWarning, match="torch.qr is deprecated"):
        q = x.qr(some)
    tq = quiet(t.qr, some)
    assert type(q).__name__ == "qr" and q._fields == ("Q", "R")
    for ours, theirs in zip(q, tq):
        np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), atol=1e-10)
    cq, cr = RNG.standard_normal(q.Q.shape), RNG.standard_normal(q.R.shape)
    if some:  # (torch's complete-mode gradient of a tall matrix raises)
        ((q.Q * cq).sum() + (q.R * cr).sum()).backward()
        ((tq.Q * torch.tensor(cq)).sum() + (tq.R * torch.tensor(cr)).sum()).backward()
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), atol=1e-8)


@pytest.mark.parametrize("chunking", list(CHUNKINGS))
@pytest.mark.parametrize("some", [True, False])
def test_svd_is_torch_s_named_tuple_with_v_and_gauge_free_gradients(chunking, some):
    x, t = pair(A, CHUNKINGS[chunking])
    s, ts = x.svd(some), t.svd(some)
    assert type(s).__name__ == "svd" and s._fields == ("U", "S", "V")
    k = min(A.shape)
    for ours, theirs in zip(s, ts):  # (each singular vector up to its sign; U's columns past k: any basis)
        assert ours.shape == tuple(theirs.shape)
        np.testing.assert_allclose(np.abs(ours.detach().numpy()[..., :k]), np.abs(theirs.detach().numpy()[..., :k]),
                                   atol=1e-10)
    rebuilt = (s.U[:, :k] * s.S) @ s.V[:, :k].T
    np.testing.assert_allclose(rebuilt.detach().numpy(), A, atol=1e-10)
    (rebuilt * W).sum().backward()  # (a loss that does not depend on the signs: the same gradient)
    ((ts.U[:, :k] * ts.S) @ ts.V[:, :k].T * torch.tensor(W)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), atol=1e-8)


def test_svd_without_uv_gives_zero_u_and_v_and_the_gradient_of_s():
    x, t = pair(A, (4, 3))
    s, ts = x.svd(compute_uv=False), t.svd(compute_uv=False)
    assert s.U.shape == (6, 6) and s.V.shape == (4, 4) and not s.U.requires_grad and not s.V.numpy().any()
    (s.S * np.arange(4.0)).sum().backward()
    (ts.S * torch.arange(4.0, dtype=torch.float64)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), atol=1e-8)


@pytest.mark.parametrize("chunking", [(4, 4), ((3, 1), (2, 2))])
@pytest.mark.parametrize("get_infos", [False, True])
def test_lu_and_lu_solve_as_torch_s(chunking, get_infos):
    x, t = pair(SQUARE, chunking)
    with pytest.warns(UserWarning, match="torch.lu is deprecated"):
        out = x.lu(get_infos=get_infos)
    tout = quiet(t.lu, get_infos=get_infos)
    assert type(out) is tuple and len(out) == len(tout) == (3 if get_infos else 2)
    np.testing.assert_allclose(out[0].detach().numpy(), tout[0].detach().numpy(), atol=1e-12)
    np.testing.assert_array_equal(out[1].numpy(), tout[1].numpy())
    assert out[1].dtype == np.int32 and out[0].grad_fn.name() == tout[0].grad_fn.name()
    b, tb = pair(A[:4, :3], ((2, 2), (3,)))
    with pytest.warns(UserWarning, match="torch.lu_solve is deprecated"):
        X = b.lu_solve(out[0], out[1])
    tX = quiet(tb.lu_solve, tout[0], tout[1])
    np.testing.assert_allclose(X.detach().numpy(), tX.detach().numpy(), atol=1e-10)
    assert X.grad_fn.name() == tX.grad_fn.name() == "LinalgLuSolveBackward0"
    (X * W[:4, :3]).sum().backward()
    (tX * torch.tensor(W[:4, :3])).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), atol=1e-8)
    np.testing.assert_allclose(b.grad.numpy(), tb.grad.numpy(), atol=1e-8)


def test_geqrf_orgqr_and_ormqr_as_torch_s():
    x, t = pair(A, (4, 3))
    g, tg = x.geqrf(), t.geqrf()
    assert type(g).__name__ == "geqrf" and g._fields == ("a", "tau")
    assert g.a.grad_fn.name() == tg.a.grad_fn.name() == "GeqrfBackward0"
    same_error(lambda: g.a.sum().backward(), lambda: tg.a.sum().backward())
    for ours, theirs in zip(g, tg):
        np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), atol=1e-10)
    a, ta = pair(tg.a.detach().numpy(), (4, 3))
    tau, ttau = pair(tg.tau.detach().numpy(), 2)
    q, tq = a.orgqr(tau), ta.orgqr(ttau)
    np.testing.assert_allclose(q.detach().numpy(), tq.detach().numpy(), atol=1e-10)
    (q * W).sum().backward()
    (tq * torch.tensor(W)).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), atol=1e-8)
    np.testing.assert_allclose(tau.grad.numpy(), ttau.grad.numpy(), atol=1e-8)
    c = RNG.standard_normal((6, 3))
    for left, transpose, other in ((True, False, c), (True, True, c), (False, False, c.T), (False, True, c.T)):
        a.grad = tau.grad = ta.grad = ttau.grad = None
        o, to = pair(other, (2, 3))
        out, tout = a.ormqr(tau, o, left, transpose), ta.ormqr(ttau, to, left, transpose)
        np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), atol=1e-10)
        weights = RNG.standard_normal(out.shape)
        (out * weights).sum().backward()
        (tout * torch.tensor(weights)).sum().backward()
        for ours, theirs in ((a, ta), (tau, ttau), (o, to)):
            np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), atol=1e-8)


# ------------------------------------------------------------------ unsafe splits
@pytest.mark.parametrize("chunking", list(CHUNKINGS))
def test_unsafe_splits_are_split_s_pieces_not_tracked_as_views(chunking):
    x, t = pair(A, CHUNKINGS[chunking])
    for name, args in (("unsafe_chunk", (3,)), ("unsafe_chunk", (2, 1)), ("unsafe_split", (4,)),
                       ("unsafe_split", (3, 1)), ("unsafe_split_with_sizes", ([1, 5],)),
                       ("unsafe_split_with_sizes", ([1, 3], 1))):
        ours, theirs = getattr(x, name)(*args), getattr(t, name)(*args)
        assert type(ours) is tuple and len(ours) == len(theirs)
        loss, tloss = 0, 0
        for k, (o, p) in enumerate(zip(ours, theirs)):
            np.testing.assert_array_equal(o.detach().numpy(), p.detach().numpy())
            assert o._base is None and p._base is None and o.grad_fn.name() == p.grad_fn.name()
            weights = RNG.standard_normal(o.shape)
            loss, tloss = loss + (o * weights * (k + 1)).sum(), tloss + (p * torch.tensor(weights) * (k + 1)).sum()
        x.grad = t.grad = None
        loss.backward()
        tloss.backward()
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy())
    with dg.no_grad():
        piece = x.detach().unsafe_chunk(2)[0]
        piece.add_(1)  # (writable: no view of x)
    same_error(lambda: x.unsafe_split([1, 5]), lambda: t.unsafe_split([1, 5]))
    same_error(lambda: x.unsafe_split_with_sizes([1, 1], dim=1), lambda: t.unsafe_split_with_sizes([1, 1], dim=1))


# ------------------------------------------------------------------ apply_, map_, map2_
@pytest.mark.parametrize("chunking", list(CHUNKINGS))
def test_apply_and_map_write_in_place_chunk_by_chunk(chunking):
    x, t = pair(A, CHUNKINGS[chunking], requires_grad=False)
    assert x.apply_(lambda v: v * 2 + 1) is x and x._version == 1  # (torch's stays 0: see apply_'s docstring)
    t.apply_(lambda v: v * 2 + 1)
    np.testing.assert_array_equal(x.numpy(), t.numpy())
    y, ty = pair(A, CHUNKINGS[chunking], requires_grad=False)
    other, tother = pair(W[0], 4, requires_grad=False)  # (broadcast over the rows)
    y.map_(other, lambda a, b: a * b - 1)
    ty.map_(tother, lambda a, b: a * b - 1)
    np.testing.assert_array_equal(y.numpy(), ty.numpy())
    y.map2_(other, x, lambda a, b, c: a + b * c)
    ty.map2_(tother, t, lambda a, b, c: a + b * c)
    np.testing.assert_array_equal(y.numpy(), ty.numpy())
    ints, tints = pair(np.arange(12).reshape(3, 4), (2, 3), requires_grad=False)
    ints.apply_(lambda v: v * 2.7)
    tints.apply_(lambda v: v * 2.7)
    np.testing.assert_array_equal(ints.numpy(), tints.numpy())


def test_apply_through_a_view_writes_its_base():
    x, t = pair(A, (4, 3), requires_grad=False)
    x[1].apply_(lambda v: -v)
    t[1].apply_(lambda v: -v)
    np.testing.assert_array_equal(x.numpy(), t.numpy())


def test_apply_and_map_errors_are_torch_s():
    x, t = pair(A, (4, 3))
    same_error(lambda: x.apply_(lambda v: v), lambda: t.apply_(lambda v: v))
    same_error(lambda: (x * 1).apply_(lambda v: v), lambda: (t * 1).apply_(lambda v: v))
    same_error(lambda: x.map_(x, lambda a, b: a), lambda: t.map_(t, lambda a, b: a))
    y, ty = pair(A, (4, 3), requires_grad=False)
    same_error(lambda: y.map_(x, lambda a, b: a), lambda: ty.map_(t, lambda a, b: a))
    same_error(lambda: y.map_(3, lambda a, b: a), lambda: ty.map_(3, lambda a, b: a))
    same_error(lambda: y.map_(y.long(), lambda a, b: a), lambda: ty.map_(ty.long(), lambda a, b: a))
    same_error(lambda: y.map_(dg.ones(4, 6, dtype=dg.float64), lambda a, b: a),
               lambda: ty.map_(torch.ones(4, 6, dtype=torch.float64), lambda a, b: a))
    same_error(lambda: y.apply_(3), lambda: ty.apply_(3))
    for fn in (lambda v: "a", lambda v: None):  # (a result torch cannot convert: raised when computed here)
        same_error(lambda: y.clone().apply_(fn).numpy(), lambda: ty.clone().apply_(fn))
    ints, tints = pair(np.arange(4, dtype=np.int32), 2, requires_grad=False)
    for fn in (lambda v: 2**40, lambda v: float("nan"), lambda v: "a"):
        same_error(lambda: ints.clone().apply_(fn).numpy(), lambda: tints.clone().apply_(fn))


# ------------------------------------------------------------------ resize_
@pytest.mark.parametrize("sizes", [(4, 6), (24,), (3, 2), (2, 20), (0,), ((4, 6),), ([6, 4],)])
def test_resize_keeps_the_elements_in_c_order(sizes):
    x, t = pair(A, (4, 3), requires_grad=False)
    x.resize_(*sizes)
    t.resize_(*sizes)
    assert x.shape == tuple(t.shape) and x._version == t._version
    n = min(A.size, t.numel())
    np.testing.assert_array_equal(x.numpy().ravel()[:n], t.numpy().ravel()[:n])  # (torch's rest: uninitialized)
    y, ty = pair(A, (4, 3), requires_grad=False)
    assert y.resize_as_(dg.ones(*x.shape)) is y and y.shape == x.shape
    ty.resize_as_(torch.ones(*t.shape))
    np.testing.assert_array_equal(y.numpy().ravel()[:n], ty.numpy().ravel()[:n])


def test_resize_to_the_same_shape_is_nothing_and_errors_are_torch_s():
    x, t = pair(A, (4, 3), requires_grad=False)
    assert x.resize_(6, 4) is x and x._version == 0
    g, tg = pair(A, (4, 3))
    for fn in (lambda u: u.resize_(3, 8), lambda u: (u * 1).resize_(24), lambda u: u.resize_(-1),
               lambda u: u.detach().resize_(2, 3.5), lambda u: u.detach().resize_(),
               lambda u: u.detach().resize_as_(3),
               lambda u: u.detach().resize_(2, 12, memory_format=getattr(dg if isinstance(u, dg.Tensor) else torch,
                                                                          "channels_last"))):
        same_error(lambda: fn(g), lambda: fn(tg))
    v = x[1]
    with pytest.raises(NotImplementedError, match="resize_"):
        v.resize_(2, 2)
    with pytest.raises(NotImplementedError, match="resize_"):
        x.resize_(24)


# ------------------------------------------------------------------ nonzero_static, dim_order, output_nr, memory
@pytest.mark.parametrize("chunking", list(CHUNKINGS))
def test_nonzero_static_pads_or_cuts_torch_s_indices(chunking):
    values = np.where(A > 0.3, A, 0)
    x, t = pair(values, CHUNKINGS[chunking], requires_grad=False)
    for size, fill in ((30, -1), (3, -1), (0, 5), (24, 7)):
        ours, theirs = x.nonzero_static(size=size, fill_value=fill), t.nonzero_static(size=size, fill_value=fill)
        assert ours.shape == (size, 2) and ours.dtype == np.int64
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    np.testing.assert_array_equal(dg.tensor(1.0).nonzero_static(size=3).numpy(),
                                  torch.tensor(1.0).nonzero_static(size=3).numpy())
    for args, kwargs in (((), {}), ((3,), {}), ((), {"size": -1}), ((), {"size": 2.0}), ((), {"size": True}),
                         ((), {"size": 2, "fill_value": 1.5})):
        same_error(lambda: x.nonzero_static(*args, **kwargs), lambda: t.nonzero_static(*args, **kwargs))


def test_dim_order_reads_torch_s_strides():
    for make in (lambda lib: lib.ones(2, 3, 4), lambda lib: lib.ones(2, 3, 4).permute(2, 0, 1),
                 lambda lib: lib.ones(2, 3, 4).transpose(0, 1), lambda lib: lib.ones(4, 6)[:, ::2],
                 lambda lib: lib.ones(3, 4).expand(2, 3, 4), lambda lib: lib.ones(()), lambda lib: lib.ones(5),
                 lambda lib: lib.ones(2, 1, 3)):
        assert make(dg).dim_order() == make(torch).dim_order()
    for check in (True, [dg.contiguous_format]):
        tcheck = check if check is True else [torch.contiguous_format]
        assert dg.ones(2, 3).dim_order(ambiguity_check=check) == torch.ones(2, 3).dim_order(ambiguity_check=tcheck)
        assert dg.ones(2, 1, 3).dim_order(ambiguity_check=[dg.contiguous_format]) == (0, 1, 2)
    same_error(lambda: dg.ones(2, 1, 3).dim_order(ambiguity_check=True),
               lambda: torch.ones(2, 1, 3).dim_order(ambiguity_check=True))
    same_error(lambda: dg.ones(2).dim_order(ambiguity_check="x"), lambda: torch.ones(2).dim_order(ambiguity_check="x"))


def test_output_nr_of_multi_view_outputs():
    x, t = pair(A, (4, 3))
    assert x.output_nr == t.output_nr == 0 and (x * 2).output_nr == 0
    assert [p.output_nr for p in x.unbind(1)] == [p.output_nr for p in t.unbind(1)]
    assert [p.output_nr for p in x.split(2)] == [p.output_nr for p in t.split(2)]


def test_pinned_and_shared_memory_answers():
    x, t = pair(A, (4, 3), requires_grad=False)
    assert x.is_pinned() is t.is_pinned() is False
    assert x.is_shared() is t.is_shared() is False
    assert x.share_memory_() is x and t.share_memory_() is t
    assert x.is_shared() is t.is_shared() is True
    assert x[1].is_shared()  # (a view shares its base's storage)
    if not dg.cuda.is_available() and not torch.cuda.is_available():
        same_error(x.pin_memory, t.pin_memory)
    with pytest.warns(DeprecationWarning, match="is_pinned"):
        assert x.is_pinned("cpu") is False


@pytest.mark.skipif(not dg.cuda.is_available(), reason="needs cupy and a GPU")
def test_cupy_chunks_are_torch_s_cuda_tensors_here():
    x = dg.ones(2, 3, device="cuda")
    assert x.type() == "torch.cuda.FloatTensor" and x.double().type() == "torch.cuda.DoubleTensor"
    assert x.type("torch.cuda.FloatTensor") is x
    moved = x.type("torch.DoubleTensor")
    assert not moved.is_cuda and moved.dtype == np.float64
    assert x.is_shared() and not x.is_pinned()
    with pytest.raises(TypeError, match="apply_ is only implemented on CPU tensors"):
        x.apply_(lambda v: v)
    with pytest.raises(RuntimeError, match="cannot pin 'torch.cuda.FloatTensor'"):
        x.pin_memory()
    pinned = dg.ones(2).pin_memory()
    assert not pinned.is_cuda and pinned.numpy().tolist() == [1.0, 1.0]
