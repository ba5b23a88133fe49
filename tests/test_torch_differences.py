"""Silent differences from torch a fuzzing review found (values, gradients, dtypes), each against torch:
a tie across column chunks in a flattened argmax, a variance with a correction of at least its
count, maximum/minimum/abs gradients at NaN, an integer input's floating result dtype, and casts
to integer or bool types that kept ``requires_grad``."""
import numpy as np
import pytest

import daskgrad as dg

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("chunks", [(2, 1), (1, 1), (1, 2), (2, 3)])
@pytest.mark.parametrize("fn", ["argmax", "argmin"])
def test_a_flattened_argmax_breaks_ties_at_the_first_in_row_order_whatever_the_chunks(chunks, fn):
    a = np.array([[1.0, 3.0, 0.0], [3.0, 2.0, 0.0]])
    x = dg.from_array(a, chunks=chunks)
    assert getattr(x, fn)().item() == getattr(torch.tensor(a), fn)().item()
    assert getattr(dg, fn)(x, keepdims=True).shape == (1, 1)


@pytest.mark.parametrize("correction", [1, 3, 4])
@pytest.mark.parametrize("fn", ["var", "std"])
def test_a_variance_whose_correction_reaches_its_count_is_torch_s_inf_or_nan(fn, correction):
    values = np.array([1.0, 2.0, 4.0])
    xd, xt = dg.from_array(values, chunks=2, requires_grad=True), torch.tensor(values, requires_grad=True)
    with np.errstate(all="ignore"):
        yd, yt = getattr(xd, fn)(correction=correction), getattr(xt, fn)(correction=correction)
        yd.backward()
        yt.backward()
        np.testing.assert_allclose(yd.item(), yt.item(), rtol=1e-6)
        np.testing.assert_allclose(xd.grad.numpy(), xt.grad.numpy(), rtol=1e-6)
        one_d, one_t = dg.from_array(np.array([[1.0, 2.0]]), requires_grad=True), torch.tensor([[1.0, 2.0]],
                                                                                                 requires_grad=True)
        getattr(one_d, fn)(0).sum().backward()  # (a dim of one element: default correction 1; was a ZeroDivisionError)
        getattr(one_t, fn)(0).sum().backward()
        np.testing.assert_array_equal(one_d.grad.numpy(), one_t.grad.numpy())
        assert np.isinf(dg.var(dg.tensor(values), ddof=3).item())  # (NumPy's too)


@pytest.mark.parametrize("fn", ["maximum", "minimum"])
def test_maximum_and_minimum_give_a_nan_s_gradient_to_both_sides_as_torch(fn):
    a, b = np.array([1.0, 2.0, np.nan, 3.0, 5.0, np.nan]), np.array([2.0, 2.0, 1.0, np.nan, 4.0, np.nan])
    ad, bd = dg.from_array(a, chunks=4, requires_grad=True), dg.from_array(b, chunks=4, requires_grad=True)
    at, bt = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    getattr(dg, fn)(ad, bd).sum().backward()
    getattr(torch, fn)(at, bt).sum().backward()
    np.testing.assert_array_equal(ad.grad.numpy(), at.grad.numpy())
    np.testing.assert_array_equal(bd.grad.numpy(), bt.grad.numpy())


def test_abs_s_gradient_at_nan_is_torch_s_zero():
    a = np.array([1.0, -2.0, np.nan, 0.0, -0.0])
    xd, xt = dg.from_array(a, chunks=2, requires_grad=True), torch.tensor(a, requires_grad=True)
    xd.abs().sum().backward()
    xt.abs().sum().backward()
    np.testing.assert_array_equal(xd.grad.numpy(), xt.grad.numpy())


@pytest.mark.parametrize("dtype", ["int64", "int16", "int8", "uint8", "bool"])
@pytest.mark.parametrize("fn", ["exp", "sigmoid", "erf", "tanh"])
def test_a_floating_op_of_an_integer_tensor_says_the_dtype_its_values_have(fn, dtype):
    """torch's default float (NumPy's was float64 of int64: tests/test_type_promotion.py); sigmoid and erf
    said int64 and held float64 values."""
    x = dg.tensor(np.array([1, 0]).astype(dtype))
    r = getattr(x, fn)()
    assert r.dtype == r.numpy().dtype == np.float32 == getattr(torch.tensor(np.array([1, 0]).astype(dtype)), fn)(
        ).numpy().dtype


@pytest.mark.parametrize("cast", [lambda t: t.long(), lambda t: t.int(), lambda t: t.bool(),
                                  lambda t: t.to(dg.int32 if hasattr(dg, "int32") else "int32")])
def test_a_cast_to_an_integer_or_bool_type_does_not_require_grad(cast):
    x = dg.from_array(np.array([1.5, -2.5]), requires_grad=True)
    y = cast(x)
    assert y.requires_grad is False and y.grad_fn is None
    assert x.double().requires_grad and x.float().grad_fn is not None


def _pair(values, chunks, grad=True):
    return dg.from_array(values, chunks=chunks, requires_grad=grad), torch.tensor(values, requires_grad=grad)


def _same(got, want):
    assert got.shape == tuple(want.shape)
    np.testing.assert_array_equal(got.detach().numpy(), want.detach().numpy())


@pytest.mark.parametrize("index", [(1, slice(None), [0, 2]), (-1, slice(None), [0, 2]), (1, 1, slice(None), [0, 2]),
                                   (1, slice(None), 1, [0, 2]), (1, slice(None), slice(None), [0, 2]),
                                   ([0, 1], slice(None), 1), (slice(None), 1, [0, 2]), (None, 1, slice(None), [2, 0]),
                                   ([1, 0], 2)])
def test_ints_among_array_indices_apply_first_as_torch_s(index):
    """torch reads ints as basic indexing, before the arrays: ``x[1, :, [0, 2]]`` is ``x[1][:, [0, 2]]``
    ((3, 2, 5) here), where NumPy's rule puts the array's axis first ((2, 3, 5)): a silent transposition."""
    a = np.arange(120.0).reshape(2, 3, 4, 5)
    xd, xt = _pair(a, (1, 2, 3, 2))
    _same(xd[index], xt[index])
    g = np.random.default_rng(0).standard_normal(tuple(xt[index].shape))
    (xd[index] * dg.tensor(g)).sum().backward()
    (xt[index] * torch.tensor(g)).sum().backward()
    np.testing.assert_array_equal(xd.grad.numpy(), xt.grad.numpy())
    if None in index:  # (a write through a None and an array: refused, as before)
        return
    yd, yt = xd.detach() * 1.0, xt.detach() * 1.0  # and written in the same places
    yd[index] = dg.tensor(g)
    yt[index] = torch.tensor(g)
    _same(yd, yt)


@pytest.mark.parametrize("index", [True, False, (slice(None), True), (slice(None), False), (None, True, 1),
                                   (Ellipsis, False), (1, True, slice(1, 3)), (True, Ellipsis, 2), (True, True),
                                   (True, slice(None), True), (True, Ellipsis, False), (slice(None), True, False)])
def test_a_python_bool_index_is_a_new_axis_of_one_or_none_as_torch_s(index):
    a = np.arange(24.0).reshape(2, 3, 4)
    xd, xt = _pair(a, (1, 2, 3))
    got, want = xd[index], xt[index]
    _same(got, want)
    got.add_(1.0)  # (a copy, as torch's: the base is not written)
    np.testing.assert_array_equal(xd.detach().numpy(), a)


@pytest.mark.parametrize("where", ["last", "after an int", "after an ellipsis"])
def test_a_tensor_mask_after_the_first_index_selects_along_its_own_axis(where):
    """``x[:, :, mask]`` selected rows (the first axis) with a tensor mask: a mask anywhere selects along
    its own axes, as torch's (lazily, as ``x[mask]``: the selected length is known once computed)."""
    a = np.arange(24.0).reshape(2, 3, 4)
    m = np.array([True, False, True, False])
    xd, xt = _pair(a, (1, 2, 3))
    md, mt = dg.from_array(m, chunks=2), torch.tensor(m)
    make = {"last": lambda mm: (slice(None), slice(None), mm), "after an int": lambda mm: (1, slice(None), mm),
            "after an ellipsis": lambda mm: (Ellipsis, mm)}[where]
    np.testing.assert_array_equal(xd[make(md)].detach().numpy(), xt[make(mt)].detach().numpy())
    (xd[make(md)] * 2.0).sum().backward()
    (xt[make(mt)] * 2.0).sum().backward()
    np.testing.assert_array_equal(xd.grad.numpy(), xt.grad.numpy())


@pytest.mark.parametrize("number", [1, 3, 2.5, -1])
def test_a_number_over_a_tensor_is_torch_s_reciprocal_times_the_number(number):
    """torch's ``c / t`` is ``t.reciprocal() * c``: its value bit for bit (``3 / 7`` and ``(1 / 7) * 3``
    differ), its node, and its gradient reads the reciprocal, so a later write to ``t`` does not make
    the backward refuse (it raised torch's "modified by an inplace operation" where torch computes)."""
    v = np.array([1.0, 2.0, 7.0, 3.3, -0.0, np.inf])
    wd, wt = _pair(v, 2)
    yd, yt = wd * 1.0, wt * 1.0
    od, ot = number / yd, number / yt
    _same(od, ot)
    assert od.grad_fn.name() == ot.grad_fn.name() == "MulBackward0"
    yd.add_(1.0)
    yt.add_(1.0)
    od.sum().backward()
    ot.sum().backward()
    np.testing.assert_array_equal(wd.grad.numpy(), wt.grad.numpy())
    assert (1 / dg.tensor([1, 2])).tolist() == [1.0, 0.5]  # (an integer tensor: true division)


@pytest.mark.parametrize("values", [[1.0, 3.0, 2.0, 2.0, 5.0], [1.0, np.nan, 2.0, np.nan, 0.0], [4.0, 4.0, 4.0, 1.0],
                                    [[2.0, 1.0], [2.0, 1.0]], [np.inf, 1.0, np.inf]])
@pytest.mark.parametrize("fn", ["median", "nanmedian"])
def test_a_median_of_all_elements_shares_its_gradient_by_the_tied_positions_as_torch(fn, values):
    """torch's median() (no dim) shares the gradient evenly by the positions holding the value (NaN ones
    where it is NaN), as max() does; it all went to one of them."""
    xd, xt = _pair(np.array(values), 2)
    rd, rt = getattr(xd, fn)(), getattr(xt, fn)()
    np.testing.assert_array_equal(rd.detach().numpy(), rt.detach().numpy())
    assert rd.grad_fn.name() == rt.grad_fn.name()
    rd.backward()
    rt.backward()
    np.testing.assert_array_equal(xd.grad.numpy(), xt.grad.numpy())


@pytest.mark.parametrize("index", [(1, [[0, 1], [1, 2]]), ([[0, 1], [1, 0]], 1), (1, slice(None), [0, 2]),
                                   ("t1", slice(None), "t02"), ("t1",)])
def test_more_mixed_indices_as_torch_s(index):
    """An int beside a 2-d index (NumPy's points, torch's too: they sit side by side), and a 0-d
    integer tensor read as the int it holds (torch selects with it first)."""
    a = np.arange(24.0).reshape(2, 3, 4)
    xd, xt = _pair(a, (1, 2, 3))
    sub = {"t1": (dg.tensor(1), torch.tensor(1)), "t02": (dg.tensor([0, 2]), torch.tensor([0, 2]))}
    ours = tuple(sub[i][0] if isinstance(i, str) else i for i in index)
    theirs = tuple(sub[i][1] if isinstance(i, str) else i for i in index)
    _same(xd[ours], xt[theirs])


@pytest.mark.parametrize("correction", [2, 3, 4])
@pytest.mark.parametrize("fn", ["var", "std"])
def test_a_variance_along_a_dim_whose_correction_reaches_its_count_is_torch_s(fn, correction):
    """Along a dim torch's formula holds (2 / (n - c), signed; 2 / 0 is inf); over all elements its
    own rule (inf, nan where x is its mean): a review found the first version used the second for both."""
    a = np.array([[1.0, 2.0, 3.0], [4.0, 4.0, 4.0]])
    xd, xt = _pair(a, (1, 2))
    with np.errstate(all="ignore"):
        getattr(xd, fn)(1, correction=correction).sum().backward()
        getattr(xt, fn)(1, correction=correction).sum().backward()
        np.testing.assert_array_equal(xd.grad.numpy(), xt.grad.numpy())


def test_a_variance_of_masked_rows_along_a_dim_keeps_its_lazy_count():
    a = np.array([[1.0, 2.0], [-1.0, 5.0], [3.0, 0.5]])
    xd, xt = _pair(a, (2, 2))
    yd, yt = xd[xd.sum(1) > 0], xt[xt.sum(1) > 0]
    yd.var(0, correction=1).sum().backward()
    yt.var(0, correction=1).sum().backward()
    np.testing.assert_allclose(xd.grad.numpy(), xt.grad.numpy(), rtol=1e-14)


def test_abs_s_gradient_at_nan_passes_a_nan_cotangent_on():
    ad, at = _pair(np.array([np.nan, 1.0]), 1)
    bd, bt = _pair(np.array([np.nan, 2.0]), 1)
    (ad.abs() * bd).sum().backward()
    (at.abs() * bt).sum().backward()
    np.testing.assert_array_equal(ad.grad.numpy(), at.grad.numpy())


def test_sign_of_nan_is_torch_s_zero_and_abs_s_gradient_reads_it():
    a = np.array([np.nan, -0.0, 0.0, 2.0, -np.inf, -3.0])
    for dtype in (np.float64, np.float32, np.float16):
        np.testing.assert_array_equal(dg.from_array(a.astype(dtype), chunks=4).sign().numpy(),
                                      torch.tensor(a.astype(dtype)).sign().numpy())
    assert dg.tensor([3, -2, 0]).sign().tolist() == [1, -1, 0]


@pytest.mark.parametrize("call", ["mean()", "mean(0)", "nanmean()", "var()", "std(0)", "var(correction=0)"])
@pytest.mark.parametrize("dtype", ["int64", "int32", "bool", "uint8"])
def test_a_mean_or_variance_method_of_integers_raises_torch_s_error(call, dtype):
    """torch's methods refuse integer and bool inputs (NumPy's module functions compute float64, and so do
    daskgrad's: ``daskgrad.mean(x)``)."""
    a = np.array([1, 0, 1]).astype(dtype)
    with pytest.raises(RuntimeError) as theirs:
        eval(f"x.{call}", {"x": torch.tensor(a)})
    with pytest.raises(RuntimeError) as ours:
        eval(f"x.{call}", {"x": dg.tensor(a)})
    assert str(ours.value) == str(theirs.value)
    assert dg.mean(dg.tensor(a)).dtype == np.mean(a).dtype


def test_add_and_sub_scale_a_number_by_alpha():
    for lib in (dg, torch):
        x = lib.tensor([1.0, 2.0])
        assert x.add(2, alpha=2).tolist() == [5.0, 6.0] and x.sub(1, alpha=3).tolist() == [-2.0, -1.0]


def test_positive_as_a_method_or_unary_plus_is_the_tensor_itself_as_torch_s():
    a = np.array([1.0, -2.0])
    xd, xt = dg.from_array(a, chunks=1, requires_grad=True).clone(), torch.tensor(a, requires_grad=True).clone()
    for yd, yt in ((+xd, +xt), (xd.positive(), xt.positive())):
        assert (yd is xd) == (yt is xt) is True
    (+xd).mul_(3.0)  # a write into the result is a write into x
    (+xt).mul_(3.0)
    np.testing.assert_array_equal(xd.detach().numpy(), xt.detach().numpy())
    assert type(xd.grad_fn).__name__ == type(xt.grad_fn).__name__ == "MulBackward0"
    fd = dg.positive(xd)  # the module-level function is NumPy's: a new tensor
    assert fd is not xd and np.array_equal(fd.detach().numpy(), xd.detach().numpy())
    with pytest.raises(RuntimeError, match="The `\\+` operator, on a bool tensor is not supported."):
        +dg.tensor([True])


# found by the differential fuzz of s61 (random chains of methods, several chunkings, against torch)
@pytest.mark.parametrize("values", [[0.0, 0.0, 2.0], [-0.0, 0.0, 2.0, 1.0], [0.0, -0.5, 3.0], [[0.0, 1.0], [2.0, 0.0]]])
@pytest.mark.parametrize("after", ["sqrt", "reciprocal", "mul_inf"])
def test_a_product_of_all_elements_with_two_zeros_gives_torch_s_zero_gradient_whatever_the_cotangent(values, after):
    """torch's ProdBackward0 over all elements returns zeros where two elements or more are 0 (unless
    create_graph), so an infinite cotangent (``sqrt`` at 0) does not make them NaN; along a dim its
    formula, NaN, as here."""
    a = np.array(values)
    for chunks in (1, 2):
        xd, xt = _pair(a, chunks)
        for x, lib in ((xd, dg), (xt, torch)):
            p = x.prod()
            (p * float("inf") if after == "mul_inf" else getattr(p, after)()).backward()
        np.testing.assert_array_equal(xd.grad.numpy(), xt.grad.numpy())
    xd, xt = _pair(a, 1)
    gd, = dg.autograd.grad(xd.prod().sqrt(), xd, create_graph=True)
    gt, = torch.autograd.grad(xt.prod().sqrt(), xt, create_graph=True)
    np.testing.assert_array_equal(gd.detach().numpy(), gt.detach().numpy())


@pytest.mark.parametrize("eps", [None, 0.1, 0.0, -1.0])
@pytest.mark.parametrize("cotangent", [1.0, np.inf, 0.0])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_logit_s_gradient_is_torch_s_outside_zero_one_and_at_its_ends(eps, cotangent, dtype):
    """The chain rule through ``log(x / (1 - x))`` gave numbers outside [0, 1], where torch's gradient is NaN
    (0 outside ``[eps, 1 - eps]``), and NaN at 0 and 1, where torch's is ``g * inf``; the node is torch's."""
    a = np.array([-0.5, 0.0, 0.05, 0.1, 0.3, 0.9, 1.0, 1.5, np.nan, -0.0], dtype=dtype)
    xd, xt = _pair(a, 3)
    yd, yt = xd.logit(eps), xt.logit(eps)
    _same(yd, yt)
    assert yd.grad_fn.name() == yt.grad_fn.name() == "LogitBackward0"
    yd.backward(dg.full_like(yd, cotangent))
    yt.backward(torch.full_like(yt, cotangent))
    np.testing.assert_array_equal(xd.grad.numpy(), xt.grad.numpy())
    assert xd.grad.dtype == np.dtype(dtype)


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
def test_trigamma_is_torch_s_formula_for_polygamma_one_and_digamma_s_gradient(dtype):
    """torch's trigamma differs from SciPy's (more exact) polygamma(1, x) by up to 1e-9 relatively and at the
    poles (7e32 at -2, not inf): digamma's gradient was not torch's to 1e-12."""
    a = np.concatenate([np.random.default_rng(0).standard_normal(200) * 5,
                        [0.0, -0.0, -1.0, -2.0, 1.0, 0.5, np.inf, -np.inf, np.nan, 1e30, -3.5]]).astype(dtype)
    rtol = {"float64": 1e-14, "float32": 1e-5, "float16": 1e-3}[dtype]
    np.testing.assert_allclose(dg.from_array(a, chunks=64).polygamma(1).numpy(),
                               torch.polygamma(1, torch.tensor(a)).numpy(), rtol=rtol)
    if dtype == "float64":
        xd, xt = _pair(a[:200], 64)
        xd.digamma().sum().backward()
        xt.digamma().sum().backward()
        np.testing.assert_allclose(xd.grad.numpy(), xt.grad.numpy(), rtol=1e-14)


@pytest.mark.parametrize("equation, n", [("ij->", 1), ("ij->i", 1), ("ii->", 1), ("ij->ji", 1), ("ii->i", 1),
                                         ("i,j->ij", 2), ("ij,j->i", 2), ("i,i->", 2)])
@pytest.mark.parametrize("dtype", ["bool", "uint8", "int32", "float32"])
def test_einsum_of_bools_and_small_integers_sums_as_torch_s(equation, n, dtype):
    """NumPy's einsum of bools is a logical or: ``einsum("ij->", bools)`` said 1 as int64 where torch counts (it
    sums one operand, int64 for integer types) and raises for a contraction of several bool operands."""
    a = np.array([[True, False], [True, True]]).astype(dtype)
    v = np.array([True, True]).astype(dtype)
    ops = [a] if n == 1 else ([v, v] if equation.startswith("i,") else [a, v])
    try:
        want = torch.einsum(equation, *[torch.tensor(o) for o in ops])
    except NotImplementedError as e:
        with pytest.raises(NotImplementedError, match=str(e).replace('"', '.')):
            dg.einsum(equation, *[dg.from_array(o, chunks=1) for o in ops])
        return
    got = dg.einsum(equation, *[dg.from_array(o, chunks=1) for o in ops])
    assert str(got.dtype) == str(want.dtype).split(".")[-1]
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("call", ["lib.cat([x, x])", "lib.cat([x.reshape(1), x], 0)", "x.split(1)", "x.split([1])",
                                  "x.chunk(1)", "x.tensor_split(1)", "x.unbind()", "x.unbind(1)", "x.kthvalue(2)",
                                  "x.kthvalue(0)", "x.reshape(1).kthvalue(3)"])
def test_zero_dimensional_joins_and_splits_and_a_k_out_of_range_raise_torch_s_errors(call):
    """These raised IndexError ``tuple index out of range`` (kthvalue: IndexError with torch's words) where
    torch raises RuntimeError."""
    with pytest.raises(Exception) as theirs:
        eval(call, {"x": torch.tensor(1.5), "lib": torch})
    with pytest.raises(Exception) as ours:
        eval(call, {"x": dg.tensor(1.5), "lib": dg})
    assert type(ours.value) is type(theirs.value)
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_erf_of_a_computed_zero_dimensional_nan_is_nan(dtype):
    """A 0-d result's chunk is a NumPy scalar, so erf ran its ufunc fallback, which said 1.0 for NaN."""
    for lib in (dg, torch):
        x = lib.tensor(np.array([1.0, np.nan], dtype=dtype))
        got = [x[:1].std(0).erf().item(), x[1].erf().item(), x.sum().erf().item()]
        assert np.isnan(got).all(), (lib.__name__, got)


@pytest.mark.parametrize("values", [[2.0, 0.0, 3.0], [2.0, 0.0, 0.0, 3.0], [1.5, 0.0, -1.0, 2.0, 0.0], [0.0, 2.0, 3.0]])
@pytest.mark.parametrize("after", ["log", "sqrt", "reciprocal"])
def test_cumprod_s_gradient_with_zeros_leaves_out_the_zero_products_as_torch(values, after):
    """An infinite cotangent where the running product is 0 (``log`` of it) made the gradient before the first
    zero, and at it, NaN (0 * inf); torch's sums run over the products that are not 0 only."""
    a = np.array([values])
    for chunks in ((1, 2), (1, len(values))):
        xd, xt = _pair(a, chunks)
        getattr(xd.cumprod(1), after)().sum().backward()
        getattr(xt.cumprod(1), after)().sum().backward()
        np.testing.assert_array_equal(xd.grad.numpy(), xt.grad.numpy())


@pytest.mark.parametrize("values", [1.5, np.inf, np.nan, [1.0, np.inf], [1.0, 2.0, np.nan],
                                    [[1.0, 3.0], [np.inf, 2.0]]])
@pytest.mark.parametrize("correction", [1, 2, 3])
def test_a_variance_whose_correction_reaches_its_count_compares_x_with_its_mean_as_torch(values, correction):
    """torch's rule is ``g * where(x == mean, nan, inf)``: an infinite x (x - mean NaN) is NaN, a NaN x inf; the
    rule read ``x - mean == 0`` and gave inf and NaN there."""
    a = np.array(values, dtype=float)
    with np.errstate(all="ignore"):
        for cotangent in (1.0, -2.0):
            xd, xt = _pair(a, 1)
            xd.var(correction=correction).backward(dg.tensor(cotangent))
            xt.var(correction=correction).backward(torch.tensor(cotangent, dtype=torch.float64))
            np.testing.assert_array_equal(xd.grad.numpy(), xt.grad.numpy())


@pytest.mark.parametrize("values", [[-np.inf, 1.0], [-np.inf, -np.inf, 2.0], [np.nan, 1.0], [1.0, 2.0, -np.inf],
                                    [1.0, np.inf], [0.5, -1.0, 3.0]])
@pytest.mark.parametrize("after", ["exp", "rsqrt", "sin"])
def test_logcumsumexp_s_gradient_at_minus_inf_and_nan_is_torch_s(values, after):
    """torch's rule holds the lowest float in the other sign's places before ``- r``: at an x of -inf (r -inf
    too) its gradient is NaN, and a NaN x's is NaN along the scan; the rule put -inf after ``- r`` and gave 0."""
    a = np.array(values)
    with np.errstate(all="ignore"):
        xd, xt = _pair(a, 2)
        for x in (xd, xt):
            y = x.logcumsumexp(0)
            (y.exp().sum() if after == "exp" else y.sum().rsqrt() if after == "rsqrt" else y.sin().sum()).backward()
        np.testing.assert_allclose(xd.grad.numpy(), xt.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("cotangent", [np.nan, 2.0, -np.inf])
def test_logcumsumexp_of_a_zero_dimensional_tensor_passes_its_cotangent_on_as_torch(cotangent):
    xd, xt = _pair(np.array(1.5), 1)
    with np.errstate(all="ignore"):
        xd.logcumsumexp(0).backward(dg.tensor(cotangent))
        xt.logcumsumexp(0).backward(torch.tensor(cotangent, dtype=torch.float64))
    np.testing.assert_array_equal(xd.grad.numpy(), xt.grad.numpy())


@pytest.mark.parametrize("make", ["view", "slice", "transpose"])
def test_an_in_place_op_on_a_detached_alias_of_a_view_records_its_history_as_torch(make):
    """``v.detach()`` of a view shares the view's storage; an in-place op with an operand that requires grad made
    the alias's value right but left it a leaf that does not require grad (the gradient through it was lost)."""
    def run(lib, t):
        b = t * 1
        v = {"view": lambda: b.view(2, 2), "slice": lambda: b[:], "transpose": lambda: b.T}[make]()
        y = v.detach()
        y.mul_(2).add_(t * 3)
        assert y.requires_grad and not y.is_leaf and y.grad_fn.name() == "AddBackward0"
        (y * lib.tensor([[1.0, -2.0], [0.5, 3.0]], dtype=t.dtype)).sum().backward()
        return b.detach().numpy(), y.detach().numpy(), t.grad.numpy()
    a = np.array([[1.0, 2.0], [3.0, 4.0]])
    for got, want in zip(run(dg, dg.from_array(a, chunks=1, requires_grad=True)),
                         run(torch, torch.tensor(a, requires_grad=True))):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_sinc_s_gradient_near_zero_is_torch_s_formula(dtype):
    """The chain rule through ``sin(pi x) / (pi x)`` cancelled badly near 0: at 1e-12 it said 2e-4 (torch's and
    the true derivative are about -3e-12), at 1e-8 it was 10% off; torch's formula, and its node."""
    a = np.array([1e-17, 3.9e-17, 1e-12, 1e-8, 1e-5, 1e-3, 0.3, 0.0, -0.0, 1e-170, 2.0, -1.5]).astype(dtype)
    if dtype == "complex128":
        a = a + 1j * np.linspace(-1, 1, a.size)
    xd, xt = _pair(a, 5)
    yd, yt = xd.sinc(), xt.sinc()
    assert yd.grad_fn.name() == yt.grad_fn.name() == "SincBackward0"
    np.testing.assert_allclose(yd.detach().numpy(), yt.detach().numpy(), rtol=1e-14)
    g = np.linspace(-2, 3, a.size).astype(dtype)
    yd.backward(dg.tensor(g))
    yt.backward(torch.tensor(g))
    np.testing.assert_allclose(xd.grad.numpy(), xt.grad.numpy(), rtol=1e-13, atol=1e-300)


def test_a_quotient_s_gradient_to_its_divisor_is_torch_s_at_extreme_magnitudes():
    """torch's is ``-g (a / b) / b``; ``a / (b * b)`` overflowed or underflowed where ``b * b`` does: at
    ``1e-300 / 1e-300`` it said inf (torch 1e300), at ``0 / 1e-300`` NaN (torch 0)."""
    a = np.array([1e-300, 0.0, -0.0, 1e300, 3.0, 1e-200, 2.5])
    b = np.array([1e-300, 1e-300, 1e-300, 1e300, 1e-160, 1e-160, 0.7])
    ad, at = _pair(a, 3)
    bd, bt = _pair(b, 4)
    w = np.linspace(-1.5, 2.0, a.size)
    (ad / bd * dg.tensor(w)).sum().backward()
    (at / bt * torch.tensor(w)).sum().backward()
    np.testing.assert_array_equal(bd.grad.numpy(), bt.grad.numpy())
    np.testing.assert_array_equal(ad.grad.numpy(), at.grad.numpy())
