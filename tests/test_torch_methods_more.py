"""More of torch's Tensor methods (predicates, in-place forms, ``allclose``/``equal``, running scans,
``cross``/``erfc``/``renorm``/``heaviside`` and the writes at indices: ``scatter``, ``index_add`` ...), each
against torch on float64 tensors in uneven chunks: values, dtypes, named tuples, gradients of a weighted
sum, and torch's errors.  (tests/test_torch_op_db.py runs torch's own samples over them too.)"""
import pickle
import warnings

import numpy as np
import pytest

import daskgrad as dg
from daskgrad.ops import methods

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(7)
A = RNG.standard_normal((5, 7))
B = RNG.standard_normal((5, 7))
CHUNKS = ((2, 3), (4, 1, 2))  # uneven, on both dims


def dg_of(values, chunks=None, requires_grad=None):
    values = np.asarray(values)
    grad = values.dtype.kind == "f" if requires_grad is None else requires_grad
    if chunks is None:
        chunks = CHUNKS if values.shape == A.shape else tuple(max((n + 1) // 2, 1) for n in values.shape)
    return dg.from_array(values, chunks=chunks, requires_grad=grad)


def pair(values, chunks=None, requires_grad=None):
    """The same values as a daskgrad tensor in uneven chunks and a torch tensor, both leaves."""
    values = np.asarray(values)
    grad = values.dtype.kind == "f" if requires_grad is None else requires_grad
    return dg_of(values, chunks, grad), torch.tensor(values, requires_grad=grad)


def same(ours, theirs, rtol=1e-12, atol=1e-14):
    theirs = theirs.detach().numpy() if isinstance(theirs, torch.Tensor) else np.asarray(theirs)
    ours = ours.detach().numpy() if isinstance(ours, dg.Tensor) else np.asarray(ours)
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype, (ours, theirs)
    np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=atol, equal_nan=True)


def weights(shape):
    return np.arange(1.0, 1.0 + np.prod(shape, dtype=int)).reshape(shape) / 7 - 1


def grads(leaves, ours, theirs, rtol=1e-10):
    """Backward of the same weighted sum on both; each pair of leaves' gradients agree."""
    w = weights(tuple(theirs.shape))
    (ours * w).sum().backward()
    (theirs * torch.tensor(w)).sum().backward()
    for x, t in leaves:
        if t.grad is None:
            assert x.grad is None or not np.any(x.grad.numpy())
        else:  # (a leaf the result does not read: None here, zeros in torch)
            same(np.zeros(tuple(t.shape)) if x.grad is None else x.grad, t.grad, rtol=rtol)


def both(fn, *values, rtol=1e-12, grad_rtol=1e-10, backward=True):
    """``fn`` on daskgrad and on torch tensors of ``values``: values, dtype and gradients agree."""
    leaves = [pair(v) for v in values]
    ours, theirs = fn(*(x for x, _ in leaves)), fn(*(t for _, t in leaves))
    same(ours, theirs, rtol=rtol)
    if backward and theirs.requires_grad:
        grads(leaves, ours, theirs, grad_rtol)
    return ours, theirs


def raises_as_torch(fn, *values, index_type=None, match=None):
    """``fn`` raises torch's exception type (and, where given, text) on both."""
    with pytest.raises(Exception) as theirs:
        fn(*(torch.tensor(np.asarray(v)) for v in values))
    with pytest.raises(type(theirs.value), match=match) as ours:
        out = fn(*(dg_of(v, requires_grad=False) for v in values))
        if isinstance(out, dg.Tensor):  # (a lazy index is checked in the tasks that read it)
            out.numpy()
    return str(ours.value), str(theirs.value)


def idx_of(lib, values):
    """An index tensor of ``lib`` (daskgrad's: lazy, in chunks of 2)."""
    values = np.asarray(values)
    if lib == "torch":
        return torch.tensor(values)
    return dg.from_array(values, chunks=tuple(max(1, min(2, n)) for n in values.shape))


def lib_of(x):
    return "torch" if isinstance(x, torch.Tensor) else "dg"


# ------------------------------------------------------------------- predicates
@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "int64", "int8", "uint8", "bool", "complex64",
                                   "complex128"])
def test_dtype_predicates_and_sizes_are_torch_s(dtype):
    a = np.zeros((2, 3), dtype=dtype)
    x, t = dg.from_array(a, chunks=1), torch.from_numpy(a)
    for name in ("is_floating_point", "is_complex", "is_signed", "nelement", "element_size"):
        ours, theirs = getattr(x, name)(), getattr(t, name)()
        assert ours == theirs and type(ours) is type(theirs), (name, ours, theirs)


# --------------------------------------------------------------- in-place forms
INPLACE = {
    "masked_fill_": (lambda x, y, lib: x.masked_fill_(idx_of(lib, A > 0.3), 2.5)),
    "addcmul_": (lambda x, y, lib: x.addcmul_(y, y * 2, value=0.5)),
    "addcdiv_": (lambda x, y, lib: x.addcdiv_(y, y * y + 1, value=-2)),
    "lerp_": (lambda x, y, lib: x.lerp_(y, 0.3)),
    "triu_": (lambda x, y, lib: x.triu_(1)),
    "tril_": (lambda x, y, lib: x.tril_(diagonal=-1)),
    "clamp_min_": (lambda x, y, lib: x.clamp_min_(0.1)),
    "clamp_max_": (lambda x, y, lib: x.clamp_max_(-0.2)),
    "erfc_": (lambda x, y, lib: x.erfc_()),
    "renorm_": (lambda x, y, lib: x.renorm_(2, 0, 1.5)),
    "scatter_": (lambda x, y, lib: x.scatter_(1, idx_of(lib, np.argsort(A, 1)[:, :4]), y[:, :4])),
    "scatter_add_": (lambda x, y, lib: x.scatter_add_(0, idx_of(lib, [[1, 4, 1, 0, 2, 2, 3]]), y[:1])),
    "index_add_": (lambda x, y, lib: x.index_add_(1, idx_of(lib, [6, 0, 6]), y[:, :3], alpha=-2)),
    "index_copy_": (lambda x, y, lib: x.index_copy_(0, idx_of(lib, [3, 1]), y[:2])),
    "index_fill_": (lambda x, y, lib: x.index_fill_(1, idx_of(lib, [6, 2]), y[0, 0])),
    "masked_scatter_": (lambda x, y, lib: x.masked_scatter_(idx_of(lib, A > 0), y)),
}


@pytest.mark.parametrize("name", sorted(INPLACE))
def test_in_place_forms_write_torch_s_result_and_gradients(name):
    (x, t), (y, u) = pair(A), pair(B)
    xs, ts = x * 1, t * 1  # (non-leaves: in place is allowed)
    ours, theirs = INPLACE[name](xs, y, "dg"), INPLACE[name](ts, u, "torch")
    assert ours is xs and theirs is ts and xs._version == ts._version
    same(xs, ts)
    grads([(x, t), (y, u)], xs, ts)


@pytest.mark.parametrize("name", sorted(INPLACE))
def test_in_place_forms_refuse_a_leaf_that_requires_grad_as_torch(name):
    (x, t), (y, u) = pair(A), pair(B)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        INPLACE[name](t, u, "torch")
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        INPLACE[name](x, y, "dg")


def test_in_place_forms_keep_torch_s_errors():
    x, t = pair([0.0, 1.0])
    for lib, v in (("dg", x * 1), ("torch", t * 1)):
        mask = idx_of(lib, np.ones((3, 2), dtype=bool))
        with pytest.raises(RuntimeError, match=r"output with shape \[2\] doesn't match the broadcast shape \[3, 2\]"):
            v.masked_fill_(mask, 1.0)
    for v, w in ((dg.tensor([1, 2]), dg.tensor([1.0, 2.0])), (torch.tensor([1, 2]), torch.tensor([1.0, 2.0]))):
        with pytest.raises(RuntimeError):
            v.lerp_(w, 0.5)


# ------------------------------------------------------------- allclose, equal
def test_allclose_and_equal_are_python_bools_as_torch_s():
    (x, t), (y, u) = pair(A), pair(A + 1e-9)
    for args in [(), (1e-12, 1e-12), (0.0, 0.0)]:
        assert x.allclose(y, *args) is t.allclose(u, *args)
    (r, v), (c, w) = pair(A[:1]), pair(np.repeat(A[:1] + 1e-9, 3, 0))
    assert r.allclose(c) is v.allclose(w) is True  # broadcast
    assert c.allclose(r) is w.allclose(v) is True
    n, tn = pair([1.0, np.nan])
    assert n.allclose(n) is tn.allclose(tn) is False
    assert n.allclose(n, equal_nan=True) is tn.allclose(tn, equal_nan=True) is True
    assert x.equal(x * 1) is t.equal(t * 1) is True
    assert x.equal(y) is t.equal(u) is False
    assert x.equal(x[:1]) is t.equal(t[:1]) is False  # other shapes: False, not broadcast
    assert n.equal(n) is tn.equal(tn) is False  # NaN is not equal to itself
    assert dg.tensor([1.0, 2.0]).equal(dg.tensor([1, 2])) is torch.tensor([1.0, 2.0]).equal(torch.tensor([1, 2]))


def test_allclose_and_equal_raise_torch_s_errors():
    raises_as_torch(lambda a, b: a.allclose(b), np.ones(3), np.ones(3, np.int64), match="Double did not match Long")
    raises_as_torch(lambda a, b: a.allclose(b), np.ones(3), np.ones(4),
                    match="The size of tensor a")
    for lib in (dg, torch):
        with pytest.raises(TypeError, match="must be Tensor, not float"):
            lib.ones(2).allclose(1.0)
        with pytest.raises(TypeError, match="must be Tensor, not float"):
            lib.ones(2).equal(1.0)


# -------------------------------------------------------------------- heaviside
def test_heaviside_is_torch_s_and_has_no_derivative():
    v = np.array([-1.5, 0.0, 2.0, np.nan, 0.0, -0.0])
    (x, t), (y, u) = pair(v), pair(np.array([0.25]))
    ours, theirs = x.heaviside(y), t.heaviside(u)
    same(ours, theirs)  # (a NaN gives 0, as torch's)
    assert ours.requires_grad and theirs.requires_grad
    for out in (ours, theirs):
        with pytest.raises(RuntimeError, match="derivative for aten::heaviside is not implemented"):
            out.sum().backward()
    same(dg.tensor([-2, 0, 3]).heaviside(dg.tensor(7)), torch.tensor([-2, 0, 3]).heaviside(torch.tensor(7)))
    raises_as_torch(lambda a, b: a.heaviside(b), v, v.astype(np.float32), match="different dtypes")
    with pytest.raises(TypeError, match="must be Tensor, not float"):
        dg.ones(2).heaviside(1.0)


# ------------------------------------------------------------- running scans
def test_logcumsumexp_is_stable_at_any_magnitude_with_torch_s_gradient():
    big = A * 400  # exp overflows: a stable scan must not
    big[1, 2] = -np.inf
    for dim in (0, 1, -1):
        both(lambda x: x.logcumsumexp(dim), big)
    both(lambda x: x.logcumsumexp(1), A)
    both(lambda x: x.logcumsumexp(0), np.array(2.5))  # a 0-d tensor is itself
    inf = np.array([1.0, -np.inf, np.inf, 1.0, -np.inf])
    both(lambda x: x.logcumsumexp(0), inf, backward=False)


def test_logcumsumexp_refuses_integers_and_a_dim_out_of_range_as_torch():
    raises_as_torch(lambda a: a.logcumsumexp(0), np.array([1, 2]), match="not implemented for 'Long'")
    raises_as_torch(lambda a: a.logcumsumexp(2), A, match="Dimension out of range")


@pytest.mark.parametrize("name", ["cummax", "cummin"])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cummax_and_cummin_are_torch_s_named_values_and_indices(name, dim):
    v = np.round(A * 2) / 2  # (ties: the last index of the running extreme, torch's rule)
    (x, t) = pair(v)
    ours, theirs = getattr(x, name)(dim), getattr(t, name)(dim)
    assert type(ours).__name__ == type(theirs).__name__ == name
    assert ours._fields == type(theirs).__match_args__ == ("values", "indices")
    values, indices = ours
    assert ours.values is values and ours[1] is indices
    same(values, theirs.values)
    same(indices, theirs.indices)
    assert repr(ours).startswith(f"daskgrad.return_types.{name}(\nvalues=")
    assert type(pickle.loads(pickle.dumps(ours))).__name__ == name
    grads([(x, t)], values, theirs.values)


@pytest.mark.parametrize("name", ["cummax", "cummin"])
def test_cummax_and_cummin_follow_torch_at_ties_nan_integers_bools_and_0_d(name):
    rows = np.array([[1.0, 3, 3, 2, 3, 0, 0], [5, 1, np.nan, 2, np.nan, 9, 9], [2, 2, 2, 1, 1, 1, 2]])
    ints = np.array([[0, 1, 2, 0, 1, 2, 2], [5, -1, 5, 7, 7, -3, 8]])
    for v, chunks in ((rows, ((2, 1), (3, 4))), (ints, ((1, 1), (2, 5))),
                      (np.array([[True, False, True, False]]), ((1,), (3, 1)))):
        x, t = dg.from_array(v, chunks=chunks), torch.tensor(v)
        ours, theirs = getattr(x, name)(1), getattr(t, name)(1)
        same(ours.values, theirs.values)
        same(ours.indices, theirs.indices)
    ours, theirs = getattr(dg.tensor(5.0), name)(0), getattr(torch.tensor(5.0), name)(0)
    same(ours.values, theirs.values)
    same(ours.indices, theirs.indices)
    ours, theirs = getattr(dg.zeros(2, 0), name)(1), getattr(torch.zeros(2, 0), name)(1)
    same(ours.values, theirs.values)
    same(ours.indices, theirs.indices)
    raises_as_torch(lambda a: getattr(a, name)(0), np.array([1j, 2]), match="not implemented for 'Complex")
    raises_as_torch(lambda a: getattr(a, name)(1), np.array([1.0]), match="Dimension out of range")


# ---------------------------------------------------------------- elementwise
def test_erfc_is_accurate_far_into_the_tail_with_torch_s_gradient():
    v = np.array([-30.0, -5.0, -1.0, -1e-3, 0.0, 0.3, 1.0, 2.9, 3.0, 3.1, 6.0, 10.0, 26.0, 27.5, 40.0])
    both(lambda x: x.erfc(), v, rtol=1e-13)  # (SciPy's kernel: relative precision where 1 - erf has none)
    both(lambda x: x.erfc(), A)
    same(dg.tensor([1, 2]).erfc(), torch.tensor([1, 2]).erfc(), rtol=1e-6)  # an integer tensor: the default float
    same(dg.tensor([0.5, 4.0], dtype="float32").erfc(), torch.tensor([0.5, 4.0]).erfc(), rtol=1e-6)
    raises_as_torch(lambda a: a.erfc(), np.array([1j]), match="not implemented for 'ComplexDouble'")


def test_erfc_without_scipy_uses_ufuncs_exact_in_the_tail_and_one_minus_erf_below_three():
    from scipy.special import erfc

    below = np.linspace(-6, 2.99, 400)
    tail = np.linspace(3.0, 26.0, 400)
    np.testing.assert_allclose(methods._erfc_ufuncs(below), erfc(below), rtol=5e-11, atol=0)  # 1 - erf: honest
    np.testing.assert_allclose(methods._erfc_ufuncs(tail), erfc(tail), rtol=1e-13, atol=0)
    x = dg.from_array(np.array([0.5, 4.0, 20.0]), chunks=2)
    assert np.allclose(methods._erfc_ufuncs(x.numpy()), erfc(x.numpy()), rtol=1e-13)


def test_cross_takes_torch_s_default_dim_and_broadcasts():
    a3, b3 = RNG.standard_normal((4, 3, 2)), RNG.standard_normal((4, 3, 2))
    both(lambda x, y: x.cross(y, dim=1), a3, b3)
    both(lambda x, y: x.cross(y, dim=-2), a3, b3[:1])  # batch dims broadcast
    with pytest.warns(UserWarning, match="without specifying the dim arg is deprecated"):
        both(lambda x, y: x.cross(y), a3, b3)  # dim None: the first of length 3 (here 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        raises_as_torch(lambda x, y: x.cross(y), np.ones((2, 4)), np.ones((2, 4)), match="no dimension of size 3")
    raises_as_torch(lambda x, y: x.cross(y, dim=0), np.ones((2, 3)), np.ones((2, 3)),
                    match="inputs dimension 0 must have length 3. Got 2 and 2")
    raises_as_torch(lambda x, y: x.cross(y, dim=1), np.ones((2, 3)), np.ones(3), match="same number of dimensions")
    raises_as_torch(lambda x, y: x.cross(y, dim=0), np.ones(3), np.ones(3, dtype=np.float32),
                    match="expected scalar type Double but found Float")


@pytest.mark.parametrize("p,dim,maxnorm", [(2, 0, 1.5), (1, 1, 0.8), (3, -1, 2.0), (np.inf, 0, 1.0), (2, 0, 100.0)])
def test_renorm_scales_the_slices_above_maxnorm_with_torch_s_gradient(p, dim, maxnorm):
    both(lambda x: x.renorm(p, dim, maxnorm), A)


def test_renorm_raises_torch_s_errors():
    raises_as_torch(lambda x: x.renorm(0, 0, 1.0), A, match="non-positive-norm not supported")
    raises_as_torch(lambda x: x.renorm(2, 0, -1.0), A, match="expected maxnorm to be >= 0")
    raises_as_torch(lambda x: x.renorm(2, 0, 1.0), A[0], match="input needs at least 2 dimensions, got 1")
    raises_as_torch(lambda x: x.renorm(2, 0, 1.0), np.ones((2, 2), dtype=np.int64), match="floating point")


def test_triu_and_tril_take_torch_s_diagonal_keyword():
    both(lambda x: x.triu(diagonal=2), A)
    both(lambda x: x.tril(diagonal=-1), A)
    both(lambda x: x.tril(1), A)


# --------------------------------------------------------- writes at indices
SCATTER_IDX = np.array([[3, 0, 4, 1, 2, 0, 4], [1, 2, 0, 4, 3, 3, 0]])  # into dim 0 of a (5, 7)


@pytest.mark.parametrize("lazy", [True, False])
def test_scatter_and_scatter_add_are_torch_s_with_torch_s_gradients(lazy):
    def index(x, v):
        return idx_of(lib_of(x), v) if lazy or lib_of(x) == "torch" else np.asarray(v)

    both(lambda x, s: x.scatter(0, index(x, SCATTER_IDX), s), A, B[:2])
    both(lambda x, s: x.scatter(1, index(x, np.argsort(B, 1)[:4, :5]), s), A, B[:4, :5])
    both(lambda x, s: x.scatter(-1, index(x, np.argsort(B, 1)), s), A, B)
    both(lambda x: x.scatter(0, index(x, SCATTER_IDX), -3.5), A)
    both(lambda x: x.scatter(0, index(x, SCATTER_IDX), value=2), A)
    both(lambda x, s: x.scatter_add(0, index(x, SCATTER_IDX), s), A, B[:2])  # repeats add up
    both(lambda x, s: x.scatter_add(1, index(x, SCATTER_IDX[:, :5] + 2), s), A, B[:2, :5])


def test_scatter_with_an_index_smaller_than_src_reads_src_where_it_reaches():
    """torch computes the values; its own backward refuses src's gradient there (a torch bug: "invalid
    gradient"), so the gradient is checked against its definition, the cotangent gathered at the index."""
    idx = np.array([[1, 3, 0], [4, 4, 2]])
    for name in ("scatter", "scatter_add"):
        (x, t), (s, u) = pair(A), pair(B[:3, :4])
        ours = getattr(x, name)(1, dg.tensor(idx), s)
        same(ours, getattr(t, name)(1, torch.tensor(idx), u))
        w = weights(A.shape)
        (ours * w).sum().backward()
        expected = np.zeros_like(B[:3, :4])
        expected[:2, :3] = np.take_along_axis(w[:2], idx, 1)
        same(s.grad, expected)
        mask = np.zeros(A.shape, bool)
        np.put_along_axis(mask[:2], idx, True, 1)
        same(x.grad, np.where(mask, 0, w) if name == "scatter" else w)


def test_scatter_repeats_keep_the_last_along_dim_as_torch_s_cpu_kernel():
    idx = np.array([[1, 1, 1, 2, 0, 3, 3], [1, 2, 1, 2, 0, 3, 4], [1, 1, 0, 2, 0, 3, 4]])
    both(lambda x, s: x.scatter(0, idx_of(lib_of(x), idx), s), A, B[:3])
    both(lambda x, s: x.index_copy(0, idx_of(lib_of(x), [4, 1, 4]), s), A, B[:3])


def test_scatter_of_0_d_and_empty_indices_as_torch():
    both(lambda x, s: x.scatter(0, idx_of(lib_of(x), 0), s), np.array(1.5), np.array(-2.0))
    both(lambda x, s: x.scatter_add(0, idx_of(lib_of(x), np.zeros((0, 7), np.int64)), s), A, B[:0])
    both(lambda x, s: x.scatter(0, idx_of(lib_of(x), np.array([[2, 0]], np.int32)), s), A, B[:1, :2])


@pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter")
def test_scatter_reduce_add_has_no_derivative_as_torch_s():
    (x, t), (s, u) = pair(A), pair(B[:2])
    ours = x.scatter(0, idx_of("dg", SCATTER_IDX), s, reduce="add")
    theirs = t.scatter(0, torch.tensor(SCATTER_IDX), u, reduce="add")
    same(ours, theirs)
    for out in (ours, theirs):
        assert out.requires_grad
        with pytest.raises(RuntimeError, match="derivative for aten::scatter is not implemented"):
            out.sum().backward()
    same(x.detach().scatter(0, dg.tensor(SCATTER_IDX), 2.0, reduce="add"),
         t.detach().scatter(0, torch.tensor(SCATTER_IDX), 2.0, reduce="add"))
    with pytest.raises(RuntimeError, match="reduce argument must be either add or multiply"):
        x.scatter(0, dg.tensor(SCATTER_IDX), s, reduce="mean")


def test_scatter_refuses_a_fourth_positional_argument_as_torchs():
    # (x.scatter(0, i, src, "add") took "add" as the value, unread beside the src: a plain scatter, silently)
    for extra in ("add", "the src again"):
        texts = []
        for lib in ("dg", "torch"):
            x, s = (dg.tensor(A), dg.tensor(B[:2])) if lib == "dg" else (torch.tensor(A), torch.tensor(B[:2]))
            with pytest.raises(TypeError) as caught:
                x.scatter(0, idx_of(lib, SCATTER_IDX), s, extra if extra == "add" else s)
            texts.append(str(caught.value))
        assert texts[0] == texts[1]


def test_scatter_raises_torch_s_errors():
    cases = [
        (lambda x, s, i: x.scatter(0, i, s), A, B[:2], SCATTER_IDX.astype(np.int16), "Expected dtype int32/int64"),
        (lambda x, s, i: x.scatter(0, i, s), A, B[:2].astype(np.float32), SCATTER_IDX, "self.dtype to be equal"),
        (lambda x, s, i: x.scatter(0, i, s), A, B[:2], SCATTER_IDX[0], "same number of dimensions as self"),
        (lambda x, s, i: x.scatter(0, i, s), A, B[0], SCATTER_IDX, "Dimension out of range"),
        (lambda x, s, i: x.scatter(0, i, s), A, B[0, 0], SCATTER_IDX, "same number of dimensions as src"),
        (lambda x, s, i: x.scatter(0, i, s), A, B[:2, :3], SCATTER_IDX, r"Expected index \[2, 7\] to be no larger"),
        (lambda x, s, i: x.scatter(2, i, s), A, B[:2], SCATTER_IDX, "Dimension out of range"),
        (lambda x, s, i: x.scatter_add(0, i, s), A, B[:2], SCATTER_IDX + 1, "index 5 is out of bounds for dimension 0"),
        (lambda x, s, i: x.scatter(0, i, s), A, B[:2], SCATTER_IDX - 1, "index -1 is out of bounds for dimension 0"),
    ]
    for fn, *values, text in cases:
        raises_as_torch(fn, *values, match=text)
    for lib in ("dg", "torch"):
        x = dg.ones(2, 2) if lib == "dg" else torch.ones(2, 2)
        with pytest.raises(TypeError, match="must be Tensor, not float"):
            x.scatter_add(0, idx_of(lib, [[0, 1]]), 1.0)


def test_a_lazy_index_out_of_range_raises_torch_s_error_from_the_tasks_before_any_gradient():
    x, s = dg_of(A), dg_of(B[:2])
    bad = dg.from_array(SCATTER_IDX * 2, chunks=1)  # a lazy index: checked where it is read
    out = x.scatter(0, bad, s)
    with pytest.raises(RuntimeError, match="index [5-8] is out of bounds for dimension 0 with size 5"):
        out.sum().backward()
    assert x.grad is None and s.grad is None
    with pytest.raises(IndexError, match=r"index_copy_\(\): index 9 is out of bounds"):
        x.detach().index_copy(1, dg.from_array(np.array([0, 9]), chunks=1), dg.tensor(B[:, :2])).numpy()
    with pytest.raises(IndexError, match="index -8 is out of bounds for dimension 1 with size 7"):
        x.detach().index_fill(1, dg.from_array(np.array([0, -8]), chunks=1), 1.0).numpy()


@pytest.mark.parametrize("lazy", [True, False])
def test_index_add_copy_fill_are_torch_s_with_torch_s_gradients(lazy):
    def index(x, v):
        return idx_of(lib_of(x), v) if lazy or lib_of(x) == "torch" else list(v)

    both(lambda x, s: x.index_add(1, index(x, [6, 0, 6, 2]), s), A, B[:, :4])  # repeats add up
    both(lambda x, s: x.index_add(0, index(x, [4, 1]), s, alpha=2.5), A, B[:2])
    both(lambda x, s: x.index_copy(1, index(x, [5, 0, 3]), s), A, B[:, :3])
    both(lambda x, s: x.index_copy(-2, index(x, [2]), s), A, B[:1])
    both(lambda x: x.index_fill(1, index(x, [6, 2, 2]), -4.0), A)
    both(lambda x: x.index_fill(1, index(x, [-1, 2]), -4.0), A, backward=False)  # (torch's backward fails at -1)
    both(lambda x, v: x.index_fill(0, index(x, [0, 3]), v), A, np.array(0.75))  # a 0-d tensor gets the gradient
    both(lambda x, s: x.index_add(0, index(x, [0]), s), np.array(1.0), np.array(2.0))  # 0-d: as 1-d
    both(lambda x, s: x.index_copy(0, index(x, [0]), s), np.array([1.0]), np.array([2.0]))


def test_index_add_copy_fill_raise_torch_s_errors():
    cases = [
        (lambda x, s, i: x.index_add(0, i, s), A, B[:2], np.array([0.0, 1.0]), RuntimeError, "int32/int64"),
        (lambda x, s, i: x.index_add(0, i, s), A, B[:2], np.array([[0, 1]]), IndexError, "supposed to be a vector"),
        (lambda x, s, i: x.index_add(0, i, s), A, B[:3], np.array([0, 1]), RuntimeError, r"Number of indices \(2\)"),
        (lambda x, s, i: x.index_add(0, i, s), A, B[:2, :3], np.array([0, 1]), RuntimeError, "source tensor shape"),
        (lambda x, s, i: x.index_add(0, i, s), A, B[:2].astype(np.float32), np.array([0, 1]), RuntimeError,
         "same scalar type"),
        (lambda x, s, i: x.index_add(0, i, s), A, B[:2], np.array([0, 5]), RuntimeError, "index 5 is out of bounds"),
        (lambda x, s, i: x.index_copy(0, i, s), A, B[:2], np.array([0, 1], np.int32), RuntimeError,
         "Expected a long tensor for index"),
        (lambda x, s, i: x.index_copy(0, i, s), A, B[:2], np.array([[0, 1]]), IndexError, "dimension 1 or 0"),
        (lambda x, s, i: x.index_copy(0, i, s), A, B[:3], np.array([0, 1]), IndexError, r"Number of indices \(2\)"),
        (lambda x, s, i: x.index_copy(0, i, s), A, B[:2, :3], np.array([0, 1]), RuntimeError, "same slice shapes"),
        (lambda x, s, i: x.index_copy(0, i, s), A, B[:2], np.array([-1, 1]), IndexError, "index -1 is out of bounds"),
        (lambda x, s, i: x.index_fill(0, i, s), A, B[0, :2], np.array([0, 1]), RuntimeError, "0-dimensional value"),
        (lambda x, s, i: x.index_fill(0, i, 1.0), A, B[0, :2], np.array([0, 1], np.int32), IndexError,
         "Expected dtype int64"),
        (lambda x, s, i: x.index_fill(0, i, 1.0), A, B, np.array([[0, 1]]), RuntimeError, "vector/scalar"),
        (lambda x, s, i: x.index_fill(1, i, 1.0), A, B, np.array([7]), IndexError, "index 7 is out of bounds"),
    ]
    for fn, a, b, i, kind, text in cases:
        with pytest.raises(kind, match=text):
            fn(torch.tensor(a), torch.tensor(b), torch.tensor(i))
        with pytest.raises(kind, match=text):
            fn(dg_of(a, requires_grad=False), dg_of(b, requires_grad=False), i)  # host index: checked now


@pytest.mark.parametrize("mask_shape", [(5, 7), (7,), (1, 7), ()])
def test_masked_scatter_takes_source_in_order_with_torch_s_gradients(mask_shape):
    mask = RNG.random(mask_shape) > 0.4
    both(lambda x, s: x.masked_scatter(idx_of(lib_of(x), mask), s), A, B)
    both(lambda x, s: x.masked_scatter(idx_of(lib_of(x), mask), s), A, np.arange(40.0) / 9)  # longer: the rest unread


def test_masked_scatter_broadcasts_self_and_raises_torch_s_errors():
    mask = RNG.random((5, 7)) > 0.4
    both(lambda x, s: x.masked_scatter(idx_of(lib_of(x), mask), s), A[0], B)  # self broadcast to the mask
    raises_as_torch(lambda x, m, s: x.masked_scatter(m, s), A, mask.astype(np.int64), B, match="boolean masks")
    raises_as_torch(lambda x, m, s: x.masked_scatter(m, s), A, mask, B.astype(np.float32), match="same dtypes")
    raises_as_torch(lambda x, m, s: x.masked_scatter(m, s), A, mask[:, :3], B, match="The size of tensor a")
    with pytest.raises(TypeError, match="must be Tensor, not float"):
        dg_of(A).masked_scatter(dg.tensor(mask), 1.0)
    with pytest.raises(RuntimeError, match="Number of elements of source < number of ones in mask"):
        torch.tensor(A).masked_scatter(torch.ones(5, 7, dtype=torch.bool), torch.tensor(B[:2]))
    lazy = dg_of(A, requires_grad=False).masked_scatter(dg.ones(5, 7, dtype=bool), dg_of(B[:2], requires_grad=False))
    with pytest.raises(RuntimeError, match="Number of elements of source < number of ones in mask"):
        lazy.numpy()  # (a lazy mask: counted in its tasks)
    same(dg.zeros(3).masked_scatter(dg.zeros(3, dtype=bool), dg.zeros(0)),
         torch.zeros(3).masked_scatter(torch.zeros(3, dtype=torch.bool), torch.zeros(0)))


def test_gather_out_of_range_raises_torch_s_error_rather_than_wrapping():
    for index in ([[5], [0]], [[0], [-1]]):
        raises_as_torch(lambda x, i: x.gather(1, i), A[:2, :3], np.array(index), match="out of bounds for dimension 1")
        with pytest.raises(RuntimeError, match="is out of bounds for dimension 1 with size 3"):
            dg_of(A[:2, :3]).gather(1, np.array(index))  # a host index: checked now


@pytest.mark.parametrize("name", ["logcumsumexp", "erfc", "renorm", "cummax", "scatter_add", "index_copy"])
def test_second_derivatives_are_torch_s(name):
    fns = {"logcumsumexp": lambda x, lib: x.logcumsumexp(1), "erfc": lambda x, lib: x.erfc(),
           "renorm": lambda x, lib: x.renorm(2, 0, 1.0), "cummax": lambda x, lib: x.cummax(0).values ** 2,
           "scatter_add": lambda x, lib: x.scatter_add(1, idx_of(lib, [[0, 0, 4]] * 5), x[:, :3] ** 2),
           "index_copy": lambda x, lib: x.index_copy(1, idx_of(lib, [6, 1]), x[:, :2] ** 3)}
    (x, t), w = pair(A * 2), weights(A.shape)
    (g,) = dg.grad((fns[name](x, "dg") * w).sum(), x, create_graph=True)
    (u,) = torch.autograd.grad((fns[name](t, "torch") * torch.tensor(w)).sum(), t, create_graph=True)
    same(g, u, rtol=1e-10)
    same(dg.grad((g * g).sum(), x)[0], torch.autograd.grad((u * u).sum(), t)[0], rtol=1e-10)
