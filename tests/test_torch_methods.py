"""Tensor methods return what torch's return (values, named tuples, dtypes, gradients, errors) where
daskgrad's module-level functions of the same name are NumPy's; torch is the oracle throughout.
(tests/test_torch_op_db.py runs torch's own sample inputs over every method; these are the cases the
issue named, one by one.)"""
import re
import warnings

import numpy as np
import pytest

import daskgrad as dg

torch = pytest.importorskip("torch")

V = np.array([[3.0, -1.0, 2.0, 5.0], [0.5, 4.0, 4.0, -2.0], [1.0, 7.0, -3.0, 2.5]])


def pair(values=V, requires_grad=True, chunks=2):
    """The same float64 values as a daskgrad tensor (chunked) and a torch tensor, both leaves."""
    values = np.asarray(values)
    return (dg.from_array(values, chunks=chunks, requires_grad=requires_grad),
            torch.tensor(values, requires_grad=requires_grad))


def same(ours, theirs, rtol=1e-12):
    theirs = theirs.detach().numpy() if isinstance(theirs, torch.Tensor) else np.asarray(theirs)
    ours = ours.detach().numpy() if isinstance(ours, dg.Tensor) else np.asarray(ours)
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype, (ours, theirs)
    rtol = max(rtol, 1e-6) if ours.dtype == np.float32 else rtol  # (float32 kernels round differently)
    np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=1e-14, equal_nan=True)


def grads(x, t, ours, theirs, weights=None):
    """Backward of the same weighted sum on both; the leaves' gradients agree."""
    w = np.arange(1.0, 1.0 + np.prod(theirs.shape)).reshape(theirs.shape) if weights is None else weights
    (ours * w).sum().backward()
    (theirs * torch.tensor(w)).sum().backward()
    same(x.grad, t.grad)


# --------------------------------------------------------- (values, indices) results
@pytest.mark.parametrize("name", ["max", "min", "median", "nanmedian"])
@pytest.mark.parametrize("dim,keepdim", [(0, False), (1, True), (-1, False)])
def test_reductions_with_dim_return_torch_s_named_values_and_indices(name, dim, keepdim):
    x, t = pair()
    ours, theirs = getattr(x, name)(dim, keepdim=keepdim), getattr(t, name)(dim, keepdim=keepdim)
    assert type(ours).__name__ == type(theirs).__name__ == name
    assert ours._fields == type(theirs).__match_args__ == ("values", "indices")
    values, indices = ours  # a tuple: unpacking and [0] give the values, as torch's
    assert ours[0] is values and ours.values is values and ours.indices is indices
    same(values, theirs.values)
    same(indices, theirs.indices)
    assert type(values.grad_fn).__name__ == type(theirs.values.grad_fn).__name__  # MaxBackward0, ...
    grads(x, t, values, theirs.values)  # the gradient goes to the index alone
    assert repr(ours).startswith(f"daskgrad.return_types.{name}(\nvalues=")


def test_max_and_min_take_another_tensor_and_over_all_elements_share_ties_as_torch():
    x, t = pair()
    y, u = pair(V[::-1].copy())
    same(x.max(y), t.max(u))
    same(x.min(other=y), t.min(other=u))
    a, ta = pair([[1.0, 5.0, 5.0], [2.0, 2.0, 0.0]])
    grads(a, ta, a.max(), ta.max(), weights=np.array(3.0))  # MaxBackward1: ties share
    assert dg.max(a, axis=1).shape == (2,) and not isinstance(dg.max(a, axis=1), tuple)  # NumPy's function


def test_median_of_an_even_count_is_the_lower_middle_value_as_torch_and_numpy_s_function_averages():
    x, t = pair([4.0, 1.0, 3.0, 2.0])
    same(x.median(), t.median())
    assert x.median().item() == 2.0 and dg.median(x).item() == 2.5
    grads(x, t, x.median(), t.median(), weights=np.array(1.0))
    n, tn = pair([np.nan, 1.0, 3.0, 2.0])
    same(n.median(), tn.median())  # a NaN: NaN, as torch's
    same(n.nanmedian(), tn.nanmedian())
    same(n.median(0).indices, tn.median(0).indices)


def test_sort_returns_torch_s_named_values_and_indices_stable_and_descending():
    x, t = pair([[3.0, 1.0, 3.0, np.nan, 1.0], [2.0, 2.0, -1.0, 0.0, 2.0]])
    for kwargs in ({}, {"descending": True}, {"dim": 0}, {"stable": True, "descending": True}):
        ours, theirs = x.sort(**kwargs), t.sort(**{"stable": True, **kwargs})
        assert type(ours).__name__ == "sort" and ours._fields == ("values", "indices")
        same(ours.values, theirs.values)
        same(ours.indices, theirs.indices)
        same(x.argsort(**kwargs), t.argsort(**{"stable": True, **kwargs}))
    grads(x, t, x.sort(descending=True).values[:, :3], t.sort(descending=True).values[:, :3])
    assert isinstance(dg.sort(x), dg.Tensor)  # NumPy's function: the values


def test_frexp_returns_the_named_mantissa_and_exponent():
    x, t = pair([0.75, 3.0, -10.0])
    ours, theirs = x.frexp(), t.frexp()
    assert type(ours).__name__ == "frexp" and ours._fields == ("mantissa", "exponent")
    same(ours.mantissa, theirs.mantissa)
    same(ours.exponent, theirs.exponent)
    assert np.frexp(x).exponent.dtype == np.frexp(V)[1].dtype  # NumPy's function: the same tuple


# ------------------------------------------------------------------ std and var
@pytest.mark.parametrize("name", ["std", "var"])
def test_std_and_var_methods_are_torch_s_and_the_functions_numpy_s(name):
    x, t = pair()
    for args, kwargs in [((), {}), ((1,), {}), ((0, True, True), {}), ((True,), {}), ((False,), {}),
                         ((), {"dim": 1, "correction": 0}), ((), {"dim": (0, 1), "unbiased": False, "keepdim": True}),
                         ((), {"correction": 2})]:
        same(getattr(x, name)(*args, **kwargs), getattr(t, name)(*args, **kwargs))
    grads(x, t, getattr(x, name)(1), getattr(t, name)(1))
    np.testing.assert_allclose(getattr(dg, name)(x).detach().numpy(), getattr(np, name)(V))  # ddof=0
    np.testing.assert_allclose(getattr(dg, name)(x, dim=1, correction=1).detach().numpy(),
                               getattr(np, name)(V, axis=1, ddof=1))  # torch's spellings, where they agree
    with pytest.raises(TypeError, match="give one of ddof, correction and unbiased"):
        getattr(dg, name)(x, ddof=1, unbiased=True)


def test_reductions_over_an_empty_dim_list_reduce_every_dim_as_torch():
    x, t = pair()
    for name in ("sum", "mean", "amax", "amin", "nansum", "nanmean", "std", "var"):
        same(getattr(x, name)(dim=()), getattr(t, name)(dim=()))
    assert dg.sum(x, axis=()).shape == (3, 4)  # NumPy's function: no axis reduced


# ------------------------------------------------------------------------ shapes
def test_transpose_of_a_matrix_swaps_its_dims():
    x, t = pair()
    same(x.transpose(0, 1), t.transpose(0, 1))
    same(x.transpose(1, 0), t.transpose(1, 0))
    same(x.transpose(dim0=-1, dim1=0), t.transpose(dim0=-1, dim1=0))
    grads(x, t, x.transpose(0, 1), t.transpose(0, 1))


def test_shape_methods_take_torch_s_arguments():
    x, t = pair(V.reshape(3, 1, 4, 1))
    for name, args, kwargs in [("squeeze", (0,), {}), ("squeeze", (1,), {}), ("squeeze", ((0, 1, 3),), {}),
                               ("expand", (-1, 2, -1, 3), {}), ("expand", (2, 3, -1, 4, -1), {}),
                               ("flip", (0, 2), {}), ("flip", (), {"dims": (1, -1)}), ("flip", ((0,),), {}),
                               ("flatten", (), {}), ("flatten", (), {"start_dim": 1}),
                               ("flatten", (), {"start_dim": 0, "end_dim": -2}), ("narrow", (2, -3, 2), {}),
                               ("select", (2, -1), {}), ("movedim", ((0, 1), (2, 0)), {})]:
        same(getattr(x, name)(*args, **kwargs), getattr(t, name)(*args, **kwargs))
    m, tm = pair()
    same(m.t(), tm.t())
    same(m[0].t(), tm[0].t())
    with pytest.raises(RuntimeError, match="t\\(\\) expects a tensor with <= 2 dimensions, but self is 4D"):
        x.t()
    with pytest.raises(ValueError, match="cannot select an axis to squeeze out"):
        dg.squeeze(x, 0)  # NumPy's function
    for call, error in [(lambda a: a.narrow(2, 5, 1), IndexError), (lambda a: a.narrow(2, 2, 3), RuntimeError),
                        (lambda a: a.select(2, 4), IndexError),
                        (lambda a: a.expand(-1, 3, 4, 1, 1), RuntimeError)]:
        with pytest.raises(error) as theirs:
            call(t)
        with pytest.raises(error, match=re.escape(str(theirs.value).replace("torch.", "daskgrad."))):
            call(x)
    grads(x, t, x.narrow(2, 1, 2).squeeze(), t.narrow(2, 1, 2).squeeze())


def test_a_boolean_mask_of_fewer_dims_selects_rows_and_its_gradient_is_torch_s():
    a = np.arange(24.0).reshape(4, 3, 2)
    for mask in (lambda v: v[:, 0, 0] > 5, lambda v: v[:, :, 0] > 5, lambda v: v > 5):
        x, t = pair(a)
        ours, theirs = x[mask(x)], t[mask(t)]
        assert ours.shape[1:] == tuple(theirs.shape)[1:]  # (the rows' count is known when computed)
        same(ours, theirs)
        ((ours ** 3).sum()).backward()
        (theirs ** 3).sum().backward()
        same(x.grad, t.grad)
    x, t = pair(a)
    host = a[:, 0, 0] > 5
    assert x[host].shape == tuple(t[torch.tensor(host)].shape)  # a host mask: the rows' count is known
    same(x[host], t[torch.tensor(host)])


def test_writing_through_a_mask_with_an_in_place_operator_is_torch_s():
    for mask in (lambda v: v > 5, lambda v: v[:, 0] > 5):
        x0, t0 = pair(np.arange(12.0).reshape(4, 3))
        x, t = x0 * 1, t0 * 1
        x[mask(x)] += 1
        t[mask(t)] += 1
        x[mask(x)] *= x[mask(x)]
        t[mask(t)] *= t[mask(t)]
        same(x, t)
        grads(x0, t0, x, t)


# ---------------------------------------------------------------------- casts
def test_to_takes_a_dtype_a_device_or_another_tensor_as_torch():
    x, t = pair()
    for ours, theirs in [(x.to(dg.float32), t.to(torch.float32)), (x.to(dtype=dg.float32), t.to(dtype=torch.float32)),
                         (x.to("cpu", dg.float32), t.to("cpu", torch.float32)),
                         (x.to(dg.device("cpu")), t.to(torch.device("cpu"))),
                         (x.to(dg.ones(1, dtype=dg.float32)), t.to(torch.ones(1)))]:
        same(ours, theirs, rtol=1e-6)
    assert x.to(dg.float64) is x and x.to("cpu") is x  # nothing to change: the tensor itself, as torch's
    copied = x.to(dg.float64, copy=True)
    assert copied is not x and copied.grad_fn is not None
    assert x.to(dg.float32, memory_format=dg.channels_last).dtype == np.float32
    grads(x, t, x.to(dg.float32).double(), t.to(torch.float32).double())
    assert x.device == "cpu" and x.device.type == "cpu" and x.device.index is None
    assert dg.device("cuda:1").type == "cuda" and dg.device("cuda:1").index == 1
    assert repr(dg.device("cuda", 0)) == repr(torch.device("cuda", 0))
    assert isinstance(dg.cuda.is_available(), bool)
    assert dg.cuda.device_count() == (1 if dg.cuda.is_available() else 0) or dg.cuda.is_available()


def test_new_tensors_take_self_s_dtype_and_device_as_torch():
    x, t = pair()
    for name, args in [("new_zeros", (2, 3)), ("new_ones", ((2, 3),)), ("new_full", ((2,), 3)),
                       ("new_tensor", ([1, 2],)), ("new_empty", (0, 2))]:
        ours, theirs = getattr(x, name)(*args), getattr(t, name)(*args)
        same(ours, theirs)
        assert ours.is_leaf and not ours.requires_grad
    assert x.new_zeros(2, dtype=dg.int64, requires_grad=False).dtype == np.int64
    assert x.new_ones(2, requires_grad=True).requires_grad


def test_from_numpy_keeps_the_dtype_and_refuses_what_is_not_an_array():
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    same(dg.from_numpy(a), torch.from_numpy(a))
    with pytest.raises(TypeError, match="expected np.ndarray \\(got list\\)"):
        dg.from_numpy([1, 2])


# ----------------------------------------------------------------- elementwise
def test_clamp_with_bounds_crossed_gives_max_and_its_gradient_as_torch():
    x, t = pair([-1.0, 0.5, 2.0, 0.7])
    lo, tlo = pair([1.0, 1.0, 1.0, 0.0])
    hi, thi = pair([0.0, 0.0, 3.0, 0.8])
    for name in ("clamp", "clip"):
        for leaf in (x, t, lo, tlo, hi, thi):
            leaf.grad = None
        ours, theirs = getattr(x, name)(lo, hi), getattr(t, name)(tlo, thi)
        same(ours, theirs)
        (ours * np.arange(1.0, 5.0)).sum().backward()
        (theirs * torch.arange(1.0, 5.0, dtype=torch.float64)).sum().backward()
        for ours_leaf, theirs_leaf in ((x, t), (lo, tlo), (hi, thi)):
            same(ours_leaf.grad, theirs_leaf.grad)


def test_one_sided_clamp_is_torch_s_and_numpy_s():
    x, t = pair()
    for args, kwargs in [((0,), {}), ((), {"min": 0}), ((), {"max": 1.5}), ((None, 2.0), {}),
                         ((torch.zeros(4),), {})]:
        ours_args = tuple(dg.zeros(4, dtype=dg.float64) if isinstance(a, torch.Tensor) else a for a in args)
        same(x.clamp(*ours_args, **kwargs), t.clamp(*args, **kwargs))
    same(np.clip(x, 0, None), np.clip(V, 0, None))
    grads(x, t, x.clamp(min=0), t.clamp(min=0))
    with pytest.raises(RuntimeError, match="At least one of 'min' or 'max' must not be None"):
        x.clamp()


def test_take_along_dim_without_dim_reads_the_flattened_tensor():
    x, t = pair()
    idx = np.array([[0, 5], [11, 3]])
    same(x.take_along_dim(dg.tensor(idx)), t.take_along_dim(torch.tensor(idx)))
    rows = np.array([[0], [3], [2]])
    same(x.take_along_dim(dg.tensor(rows), 1), t.take_along_dim(torch.tensor(rows), 1))
    grads(x, t, x.take_along_dim(dg.tensor(idx)), t.take_along_dim(torch.tensor(idx)))


def test_softmax_div_argmax_and_mm_take_torch_s_arguments():
    x, t = pair()
    y, u = pair(np.abs(V) + 1)
    same(x.float().softmax(1, dtype=dg.float64), t.float().softmax(1, dtype=torch.float64))
    same(x.log_softmax(0, dtype=dg.float32), t.log_softmax(0, dtype=torch.float32))
    for mode in ("trunc", "floor"):
        same(x.div(y, rounding_mode=mode), t.div(u, rounding_mode=mode))
        same(dg.tensor([7, -7]).div(2, rounding_mode=mode), torch.tensor([7, -7]).div(2, rounding_mode=mode))
    grads(x, t, x.div(y, rounding_mode="floor") + x, t.div(u, rounding_mode="floor") + t)
    with pytest.raises(RuntimeError, match="div expected rounding_mode to be one of None, 'trunc', or 'floor'"):
        x.div(y, rounding_mode="round")
    for name in ("argmax", "argmin"):
        for kwargs in ({"dim": 1, "keepdim": True}, {"keepdim": True}, {"dim": 0}):
            same(getattr(x, name)(**kwargs), getattr(t, name)(**kwargs))
    same(x.mm(y.T), t.mm(u.T))
    with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied \\(3x4 and 3x4\\)"):
        x.mm(y)
    same(x.add(y, alpha=2), t.add(u, alpha=2))
    same(x // y, t // u)


def test_out_writes_into_the_given_tensor_with_torch_s_errors():
    a, b = dg.ones(3, dtype=dg.float64), dg.arange(3, dtype=dg.float64)
    out = dg.zeros(3, dtype=dg.float64)
    assert dg.add(a, b, out=out) is out and out._version == 1
    np.testing.assert_array_equal(out.numpy(), [1.0, 2.0, 3.0])
    assert dg.sum(b, axis=0, out=out[0].detach()).item() == 3.0
    assert np.multiply(a, b, out=(out,)) is out and np.sum(b, out=out).shape == ()
    for call, match in [(lambda: dg.add(a, b, out=dg.zeros(3, dtype=dg.int64)),
                         "result type Double can't be cast to the desired output type Long"),
                        (lambda: dg.add(dg.ones(3, requires_grad=True), 1, out=dg.zeros(3)),
                         "add\\(\\): functions with out=... arguments don't support automatic differentiation"),
                        (lambda: dg.exp(a, out=dg.zeros(3, dtype=dg.float64, requires_grad=True)),
                         "exp\\(\\): functions with out=... arguments don't support automatic differentiation")]:
        with pytest.raises(RuntimeError, match=match):
            call()
    with pytest.raises(TypeError, match="add\\(\\): argument 'out' must be Tensor, not numpy.ndarray"):
        dg.add(a, b, out=np.zeros(3))
    with pytest.warns(UserWarning, match="An output with one or more elements was resized"):
        small = dg.zeros(2, dtype=dg.float64)
        dg.mul(a, b, out=small)
    np.testing.assert_array_equal(small.numpy(), [0.0, 1.0, 2.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        empty = dg.zeros(0, dtype=dg.float64)
        assert dg.mul(a, b, out=empty).shape == (3,)  # an empty out is resized silently, as torch's
    with dg.no_grad():
        leaf = dg.zeros(3, requires_grad=True)
        dg.add(a, 1, out=leaf)  # (as torch's: allowed when nothing records)
    np.testing.assert_array_equal(leaf.detach().numpy(), [2.0, 2.0, 2.0])


def test_a_0d_tensor_formats_its_value_and_others_refuse_a_format_as_torch():
    loss = dg.tensor(3.14159, dtype=dg.float64, requires_grad=True) * 2
    assert f"{loss:.4f}" == f"{torch.tensor(3.14159, dtype=torch.float64) * 2:.4f}" == "6.2832"
    with pytest.raises(TypeError, match="unsupported format string passed to Tensor.__format__"):
        f"{dg.ones(2):.2f}"
    assert f"{dg.ones(2)}" == str(dg.ones(2))
