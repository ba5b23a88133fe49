"""torch's Tensor methods daskgrad gained late: the random fills (``uniform_``, ``normal_`` ... ``multinomial``),
checked by their statistics for a fixed daskgrad seed, shapes, dtypes, chunks and torch's errors; the in-place
forms (``cumsum_``, ``addmm_``, ``acosh_`` ...) and the others, against torch 2.13 in float64 over one, even and
uneven chunks: values, gradients of a weighted sum, and torch's errors."""
import warnings

import numpy as np
import pytest

import daskgrad as dg
from daskgrad.ops import methods

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(11)
CHUNKINGS = {"one": (6, 8), "even": (3, 4), "uneven": ((4, 2), (3, 5))}
N = 20000  # draws per statistics check: the bounds below are about 6 standard errors wide


def drawn(name, *args, dtype=np.float64, chunks=((3000, 7000), (1,)), **kwargs):
    """A (N//2, 2) tensor of zeros in uneven chunks filled in place by ``name``, for daskgrad's seed 0."""
    dg.manual_seed(0)
    x = dg.from_array(np.zeros((N // 2, 2), dtype=dtype), chunks=((3000, 7000), (1, 1)))
    assert getattr(x, name)(*args, **kwargs) is x
    assert x.dtype == dtype and x.chunks == ((3000, 7000), (1, 1)) and x._version == 1
    return x.numpy().ravel()


def error_of(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 (the type and text are compared)
        return type(e), str(e)
    return None


def same_error(ours, theirs):
    mine, torchs = error_of(ours), error_of(theirs)
    assert torchs is not None and mine == torchs, (mine, torchs)


# ------------------------------------------------------------------ random fills
@pytest.mark.parametrize("name, args, mean, var", [
    ("uniform_", (), 0.5, 1 / 12),
    ("uniform_", (-2.0, 4.0), 1.0, 3.0),
    ("normal_", (), 0.0, 1.0),
    ("normal_", (3.0, 0.5), 3.0, 0.25),
    ("exponential_", (2.0,), 0.5, 0.25),
    ("log_normal_", (0.0, 0.5), np.exp(0.125), (np.exp(0.25) - 1) * np.exp(0.25)),
    ("geometric_", (0.25,), 4.0, 0.75 / 0.0625),
    ("random_", (3, 9), 5.5, 35 / 12),
    ("random_", (4,), 1.5, 15 / 12),
    ("bernoulli_", (), 0.5, 0.25),
    ("bernoulli_", (0.2,), 0.2, 0.16),
])
def test_a_random_fill_draws_from_torchs_distribution_with_the_chunks_and_dtype_kept(name, args, mean, var):
    values = drawn(name, *args)
    assert abs(values.mean() - mean) < 6 * np.sqrt(var / N)
    assert abs(values.var() / var - 1) < 0.12
    again = drawn(name, *args)
    np.testing.assert_array_equal(values, again)  # (the same seed, the same values)


def test_the_fills_keep_to_their_support():
    u = drawn("uniform_", 2, 5)
    assert u.min() >= 2 and u.max() < 5
    r = drawn("random_", 3, 9)
    assert set(np.unique(r)) == set(range(3, 9))
    g = drawn("geometric_", 0.5)
    assert g.min() == 1 and np.all(g == np.round(g))
    assert set(np.unique(drawn("bernoulli_", 0.3))) == {0.0, 1.0}
    c = drawn("cauchy_", 1.0, 2.0)
    assert abs(np.median(c) - 1.0) < 0.1 and abs(np.median(np.abs(c - 1.0)) - 2.0) < 0.15  # (no mean: quartiles)


@pytest.mark.parametrize("dtype, top", [(np.float16, 2**11), (np.float32, 2**24), (np.float64, 2**53),
                                        (np.int8, 127), (np.uint8, 255), (np.int16, 2**15 - 1),
                                        (np.int32, 2**31 - 1), (np.int64, 2**63 - 1), (np.bool_, 1)])
def test_random_without_bounds_spans_the_dtypes_range_as_torchs(dtype, top):
    values = drawn("random_", dtype=dtype).astype(np.float64)
    assert values.min() >= 0 and values.max() <= top and values.max() > top * 0.99


def test_integer_tensors_take_the_discrete_fills():
    for name, args in (("random_", (10,)), ("geometric_", (0.5,)), ("bernoulli_", (0.5,))):
        values = drawn(name, *args, dtype=np.int64)
        assert values.dtype == np.int64 and values.min() >= 0


@pytest.mark.parametrize("call", [
    "x.uniform_(1, 0)", "x.uniform_(0, float('inf'))", "i.uniform_()", "x.normal_(0, -1)", "i.normal_()",
    "x.exponential_(0)", "x.exponential_(-1)", "i.exponential_()", "x.cauchy_(0, 0)", "i.cauchy_()",
    "x.log_normal_(1, 0)", "i.log_normal_()", "x.geometric_(0)", "x.geometric_(1)", "x.geometric_(1.5)",
    "x.random_(5, 2)", "x.random_(-1)", "x.random_(0)", "b.random_(-1, 3)", "c.random_(0, 200)",
    "x.bernoulli_(2)", "x.bernoulli_(-0.1)", "i.bernoulli()", "x.multinomial(2)", "o.multinomial(4)",
    "o.multinomial(0)", "cube.multinomial(1)", "i.multinomial(1)", "neg.multinomial(1)",
    "x.uniform_(from_=0)", "lib.rand_like(i)", "lib.randn_like(i)", "lib.randn_like(b)",
])
def test_random_fills_raise_torchs_errors(call):
    def run(lib, make):
        names = {"x": make(np.zeros(3)), "i": make(np.zeros(3, dtype=np.int64)), "o": make(np.ones(3)),
                 "b": make(np.zeros(3, dtype=np.uint8)), "c": make(np.zeros(3, dtype=np.int8)),
                 "cube": make(np.ones((2, 2, 2))), "neg": make(np.array([1.0, -1.0])), "lib": lib}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            eval(call, {}, names).numpy()
    same_error(lambda: run(dg, lambda a: dg.from_array(a, chunks=2)), lambda: run(torch, torch.tensor))


def test_a_random_fill_of_a_leaf_that_requires_grad_is_refused_outside_no_grad():
    x = dg.from_array(np.zeros(4), requires_grad=True)
    same_error(lambda: x.uniform_(), lambda: torch.zeros(4, requires_grad=True).uniform_())
    with dg.no_grad():
        x.normal_()
    assert x._version == 1 and x.grad_fn is None and x.requires_grad


@pytest.mark.parametrize("name, args, node", [
    ("uniform_", (), "UniformBackward0"), ("normal_", (), "NormalBackward0"),
    ("exponential_", (), "ExponentialBackward0"), ("cauchy_", (), "CauchyBackward0"),
    ("log_normal_", (), "LogNormalBackward0"), ("geometric_", (0.5,), "GeometricBackward0"),
    ("random_", (), "RandomBackward2"), ("random_", (5,), "RandomBackward1"), ("random_", (1, 5), "RandomBackward0"),
    ("bernoulli_", (), "BernoulliBackward2"),
])
def test_a_random_fill_of_a_result_records_torchs_node_and_a_zero_gradient(name, args, node):
    x = dg.from_array(np.ones((4, 3)), chunks=(3, 2), requires_grad=True)
    t = torch.ones((4, 3), dtype=torch.float64, requires_grad=True)
    y, u = x * 2, t * 2
    getattr(y, name)(*args), getattr(u, name)(*args)
    assert y.grad_fn.name() == u.grad_fn.name() == node
    (y * 3).sum().backward(), (u * 3).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), t.grad.numpy())


def test_bernoulli_draws_each_place_with_its_own_probability_and_gives_zero_gradient():
    p = np.tile([0.0, 0.25, 1.0], (N // 3, 1))
    x = dg.from_array(p, chunks=(2000, 2), requires_grad=True)
    dg.manual_seed(1)
    out = x.bernoulli()
    assert out.chunks == x.chunks and out.dtype == np.float64 and out.grad_fn.name() == "BernoulliBackward0"
    values = out.detach().numpy()
    assert not values[:, 0].any() and values[:, 2].all() and abs(values[:, 1].mean() - 0.25) < 0.02
    out.sum().backward()
    assert not x.grad.numpy().any()
    y = dg.from_array(np.zeros((N // 3, 3)), chunks=(2000, 2)).bernoulli_(x.detach())
    assert not y.numpy()[:, 0].any() and y.numpy()[:, 2].all()
    assert x.bernoulli(0.5).grad_fn.name() == "NotImplemented"
    same_error(lambda: dg.from_array(np.full(3, 2.0)).bernoulli().numpy(),
               lambda: torch.full((3,), 2.0).bernoulli())


def test_multinomial_draws_category_indices_as_torchs():
    w = np.array([[1.0, 2.0, 0.0, 5.0], [0.0, 0.0, 1.0, 3.0]])
    x = dg.from_array(w, chunks=(1, 3))
    dg.manual_seed(2)
    once = x.multinomial(2).numpy()
    assert once.dtype == np.int64 and once.shape == (2, 2)
    assert len(set(once[0])) == 2 and set(once[0]) <= {0, 1, 3} and set(once[1]) == {2, 3}
    rows = dg.from_array(np.tile(w, (2000, 1)), chunks=(700, 4))
    many = rows.multinomial(1, replacement=True).numpy().ravel()
    assert rows.multinomial(1, replacement=True).chunks == (rows.chunks[0], (1,))
    first = np.bincount(many[0::2], minlength=4) / 2000
    np.testing.assert_allclose(first, w[0] / w[0].sum(), atol=0.04)
    assert set(many[1::2]) <= {2, 3}
    assert dg.from_array(w[0]).multinomial(7, True).shape == (7,)
    assert sorted(dg.from_array(np.array([1.0, 0, 0])).multinomial(3).numpy()) == [0, 1, 2]  # (zeros last)


# ------------------------------------------------------------------ rand, randn: the fills' draws, as leaves
@pytest.mark.parametrize("factory, fill", [("rand", "uniform_"), ("randn", "normal_")])
def test_rand_and_randn_draw_as_zeros_filled_in_place_reproducibly_keeping_dtype_chunks_and_grad(factory, fill):
    make = getattr(dg, factory)
    dg.manual_seed(5)
    a = make(7, 5, chunks=(3, 2), dtype=dg.float64, requires_grad=True)
    b = make((7, 5), chunks=(3, 2), dtype=dg.float64)
    assert a.is_leaf and a.requires_grad and a.grad_fn is None and not b.requires_grad
    assert a.dtype == np.float64 and a.chunks == ((3, 3, 1), (2, 2, 1))
    dg.manual_seed(5)
    same = getattr(dg.zeros(7, 5, chunks=(3, 2), dtype=dg.float64), fill)()
    np.testing.assert_array_equal(a.detach().numpy(), same.numpy())  # (the same per-chunk draw, bit for bit)
    assert not np.array_equal(a.detach().numpy(), b.numpy())  # (each call draws its own seed)
    dg.manual_seed(5)
    np.testing.assert_array_equal(make(7, 5, chunks=(3, 2), dtype=dg.float64).numpy(), a.detach().numpy())
    assert make(4).dtype == np.float32 and make(4, dtype=dg.float16).dtype == np.float16
    (a * 3).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), 3.0)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.complex64, np.complex128])
def test_rand_and_randn_follow_torchs_distributions_in_every_floating_dtype(dtype):
    dg.manual_seed(0)
    u = dg.rand(N, dtype=dtype, chunks=7000).numpy()
    z = dg.randn(N, dtype=dtype, chunks=7000).numpy()
    assert u.dtype == z.dtype == dtype
    parts = (u.real, u.imag) if u.dtype.kind == "c" else (u,)
    for part in parts:  # each part of a complex draw uniform on [0, 1), as torch's
        part = part.astype(np.float64)
        assert part.min() >= 0 and part.max() < 1 and abs(part.mean() - 0.5) < 6 * np.sqrt(1 / 12 / N)
        if dtype in (np.float16, np.complex64, np.float32):  # (from the narrow type's own bits: never rounded to 1)
            bits = 11 if dtype == np.float16 else 24
            assert np.all(part * 2**bits == np.round(part * 2**bits))
    var = 0.5 if z.dtype.kind == "c" else 1.0  # (a complex standard normal: each part of variance 1/2, as torch's)
    for part in ((z.real, z.imag) if z.dtype.kind == "c" else (z,)):
        part = part.astype(np.float64)
        assert abs(part.mean()) < 6 * np.sqrt(var / N) and abs(part.var() - var) < 6 * var * np.sqrt(2 / N)


def test_complex_fills_draw_each_part_as_torchs():
    dg.manual_seed(0)
    x = dg.zeros(N, dtype=dg.complex128, chunks=7000).normal_(3, 2).numpy()
    for part in (x.real, x.imag):  # mean on each part, std / sqrt(2) each: torch's normal_ of the real view
        assert abs(part.mean() - 3) < 6 * np.sqrt(2 / N) and abs(part.var() - 2) < 6 * 2 * np.sqrt(2 / N)
    u = dg.zeros(N, dtype=dg.complex64, chunks=7000).uniform_(1, 3).numpy()
    for part in (u.real, u.imag):
        assert part.min() >= 1 and part.max() < 3 and abs(part.mean() - 2) < 6 * np.sqrt(4 / 12 / N)
    assert dg.randn_like(dg.zeros(3, dtype=dg.complex64)).dtype == np.complex64


@pytest.mark.parametrize("call", [
    "lib.rand(3, dtype=lib.int64)", "lib.randn(2, 2, dtype=lib.bool)", "lib.randn(3, dtype=lib.uint8)",
    "lib.rand(3, dtype=lib.int32, requires_grad=True)", "lib.rand(-1, dtype=lib.int64)",
    "lib.randn(2, -3, dtype=lib.bool)", "lib.zeros(3).uniform_(-3e38, 3e38)",
    "lib.zeros(3, dtype=lib.float16).uniform_(-6e4, 6e4)", "z.uniform_(0, 3.5e38)", "z.uniform_(0, float('inf'))",
    "z.log_normal_()", "z.exponential_()", "z.cauchy_()", "z.bernoulli_()", "z.bernoulli_(0.3)", "z.bernoulli_(2)",
    "z.bernoulli_(lib.full((3,), 0.5))", "lib.zeros(3).bernoulli_(z)", "z.bernoulli()", "z.bernoulli(0.5)",
    "z.geometric_(0.5)", "z.geometric_(1.5)", "z.random_()", "z.random_(5)", "z.random_(1, 5)", "z.random_(1, None)",
])
def test_rand_randn_and_complex_fills_raise_torchs_errors(call):
    def run(lib):
        out = eval(call, {}, {"lib": lib, "z": lib.zeros(3, dtype=lib.complex64)})
        return out.numpy() if lib is dg else out
    same_error(lambda: run(dg), lambda: run(torch))


# ------------------------------------------------------------------ in-place forms
def _torch_args(args):
    return [torch.tensor(a) if isinstance(a, np.ndarray) else a for a in args]


def _dg_args(args):
    return [dg.from_array(a, chunks=2) if isinstance(a, np.ndarray) else a for a in args]


X = RNG.random((6, 8)) * 0.3 + 0.3


@pytest.mark.parametrize("chunking", list(CHUNKINGS))
@pytest.mark.parametrize("name, args", [
    ("cumsum_", (1,)), ("cumsum_", (0,)), ("cumprod_", (0,)), ("cumprod_", (1,)), ("logit_", ()),
    ("logit_", (0.35,)), ("xlogy_", (X + 1,)), ("copysign_", (X - 0.5,)), ("conj_physical_", ()),
    ("addmm_", (X, X.T @ X)), ("addr_", (X[:, 0], X[0])),
    ("addmm_", (X[:, :3], X[:3], {"beta": 0.5, "alpha": 2.0})),
])
def test_an_inplace_form_writes_torchs_values_and_gradients(chunking, name, args):
    kwargs = args[-1] if args and isinstance(args[-1], dict) else {}
    args = args[:-1] if kwargs else args
    x = dg.from_array(X, chunks=CHUNKINGS[chunking], requires_grad=True)
    t = torch.tensor(X, requires_grad=True)
    y, u = x * 1.5, t * 1.5
    v = y._version
    assert getattr(y, name)(*_dg_args(args), **kwargs) is y
    getattr(u, name)(*_torch_args(args), **kwargs)
    assert y._version == v + 1 and y.chunks == x.chunks
    np.testing.assert_allclose(y.detach().numpy(), u.detach().numpy(), rtol=1e-12, equal_nan=True)
    w = np.arange(48.0).reshape(6, 8) / 10
    (y * y * w).sum().backward(), (u * u * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-10)


def test_baddbmm_addbmm_and_addmv_in_place_match_torchs():
    for name, shape, b1, b2 in (("baddbmm_", (3, 4, 5), RNG.random((3, 4, 2)), RNG.random((3, 2, 5))),
                                ("addbmm_", (4, 5), RNG.random((3, 4, 2)), RNG.random((3, 2, 5))),
                                ("addmv_", (4,), RNG.random((4, 3)), RNG.random(3))):
        s = RNG.random(shape)
        x = dg.from_array(s, chunks=2, requires_grad=True)
        t = torch.tensor(s, requires_grad=True)
        y, u = x * 2, t * 2
        getattr(y, name)(dg.from_array(b1, chunks=2), dg.from_array(b2, chunks=2), beta=0.5, alpha=3)
        getattr(u, name)(torch.tensor(b1), torch.tensor(b2), beta=0.5, alpha=3)
        np.testing.assert_allclose(y.detach().numpy(), u.detach().numpy(), rtol=1e-12)
        (y * y).sum().backward(), (u * u).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-10)


def test_addmv_of_a_matrix_input_raises_torchs_error():
    # (it broadcast the matrix with mat @ vec: a result where torch refuses)
    m, v = RNG.random((3, 3)), RNG.random(3)
    for inp, mat, vec in ((m, m, v), (m[:1], m, v), (v, m, m)):
        for name in ("addmv", "addmv_"):
            x = dg.from_array(inp.copy()) if name == "addmv" else dg.from_array(inp.copy()).clone()
            same_error(lambda: getattr(x, name)(dg.from_array(mat), dg.from_array(vec)),
                       lambda: getattr(torch.tensor(inp), name)(torch.tensor(mat), torch.tensor(vec)))


@pytest.mark.parametrize("name", ["acosh_", "arccosh_", "asinh_", "arcsinh_", "atanh_", "arctanh_"])
def test_inverse_hyperbolic_in_place_forms_write_torchs_values_and_refuse_backward_as_torchs(name):
    s = X + (1.0 if "cosh" in name else 0.0)
    x = dg.from_array(s, chunks=((4, 2), (3, 5)), requires_grad=True)
    t = torch.tensor(s, requires_grad=True)
    y, u = x * 1.0, t * 1.0
    getattr(y, name)(), getattr(u, name)()
    np.testing.assert_allclose(y.detach().numpy(), u.detach().numpy(), rtol=1e-12)
    assert y.grad_fn.name() == u.grad_fn.name() and y._version == u._version == 1
    same_error(lambda: y.sum().backward(), lambda: u.sum().backward())
    same_error(lambda: getattr(x, name)(), lambda: getattr(t, name)())
    plain = dg.from_array(s, chunks=3)
    assert getattr(plain, name)() is plain and plain.grad_fn is None


@pytest.mark.parametrize("name, args", [("cumsum_", (0,)), ("logit_", ()), ("addmm_", (X, X.T)),
                                        ("xlogy_", (X,)), ("copysign_", (X,))])
def test_an_inplace_form_on_a_leaf_that_requires_grad_raises_torchs_error(name, args):
    same_error(lambda: getattr(dg.from_array(X, requires_grad=True), name)(*_dg_args(args)),
               lambda: getattr(torch.tensor(X, requires_grad=True), name)(*_torch_args(args)))


# ------------------------------------------------------------------ more methods
def _pair(values, chunks):
    return dg.from_array(values, chunks=chunks, requires_grad=True), torch.tensor(values, requires_grad=True)


def _same_values_and_grads(fn, *values, chunks, rtol=1e-10):
    ours_in = [dg.from_array(v, chunks=(chunks(v.shape) if callable(chunks) else chunks) if v.ndim == 2 else 2,
                             requires_grad=True) for v in values]
    theirs_in = [torch.tensor(v, requires_grad=True) for v in values]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours, theirs = fn(*ours_in), fn(*theirs_in)
    ours = ours if isinstance(ours, tuple) else (ours,)
    theirs = theirs if isinstance(theirs, tuple) else (theirs,)
    assert len(ours) == len(theirs)
    total_o, total_t = 0, 0
    for o, t in zip(ours, theirs):
        assert tuple(o.shape) == tuple(t.shape) and o.dtype == np.dtype(str(t.dtype).split(".")[1])
        np.testing.assert_allclose(o.detach().numpy(), t.detach().numpy(), rtol=rtol, atol=1e-12)
        if t.requires_grad:
            w = np.arange(1.0, 1.0 + t.numel()).reshape(tuple(t.shape)) / 10
            total_o, total_t = total_o + (o * w).sum(), total_t + (t * torch.tensor(w)).sum()
    if not isinstance(total_t, int):
        total_o.backward(), total_t.backward()
        for a, b in zip(ours_in, theirs_in):
            if b.grad is not None:
                np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=rtol, atol=1e-12)


Y = RNG.random((6, 8)) - 0.5
SPD = (lambda a: a @ a.T + 6 * np.eye(6))(RNG.random((6, 6)))


@pytest.mark.parametrize("chunking", list(CHUNKINGS))
@pytest.mark.parametrize("case", [
    lambda x: x.sum_to_size(8), lambda x: x.sum_to_size(6, 1), lambda x: x.sum_to_size((1, 8)),
    lambda x: x.narrow_copy(1, 2, 5), lambda x: x.diagflat(),
    lambda x: x[0].diagflat(-2), lambda x: x.diag_embed(), lambda x: x.diag_embed(1, 0, 2),
    lambda x: x.split_with_sizes([1, 5]), lambda x: x.split_with_sizes([3, 0, 5], 1),
    lambda x: (x + 2).mvlgamma(3), lambda x: (x + 2).mvlgamma(p=1), lambda x: (x + 2).mvlgamma_(2),
    lambda x: x.hardshrink(), lambda x: x.hardshrink(0.3),
    lambda x: (x * 1.0).fill_diagonal_(2.5), lambda x: (x.T * 1.0).fill_diagonal_(-1, wrap=True),
    lambda x: (x * 1.0).fill_diagonal_(3, wrap=True),
    lambda x: x.diagonal_scatter(x[:, :6].diagonal() * 3), lambda x: x.diagonal_scatter(x[0, 1:7], 1),
    lambda x: x.diagonal_scatter(x[:6, 0], -1, 1, 0), lambda x: x.select_scatter(x[2] * 2, 0, -1),
    lambda x: x.select_scatter(x[:, 0] * 2, 1, 3), lambda x: x.slice_scatter(x[1:4] ** 2, 0, 1, 4),
    lambda x: x.slice_scatter(x[:, :4] * 2, 1, 0, 8, 2), lambda x: x.slice_scatter(x[:, 5:] - 1, 1, start=5),
], ids=lambda c: None)
def test_a_method_gives_torchs_values_and_gradients(chunking, case):
    _same_values_and_grads(case, Y, chunks=CHUNKINGS[chunking])


@pytest.mark.parametrize("chunking", list(CHUNKINGS))
def test_prelu_as_a_method_is_torchs(chunking):
    _same_values_and_grads(lambda x, w: x.prelu(w), Y, np.array([0.1, -0.2, 0.3, 0.4, 0.5, 2.0, 0.7, 0.8]),
                           chunks=CHUNKINGS[chunking])


@pytest.mark.parametrize("chunking", ["one", "even", "uneven"])
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_as_a_method_is_torchs_with_its_deprecation_warning(chunking, upper):
    chunks = {"one": 6, "even": 3, "uneven": ((4, 2), (1, 5))}[chunking]
    _same_values_and_grads(lambda a: a.cholesky(upper=upper), SPD, chunks=chunks, rtol=1e-8)
    with warnings.catch_warnings(record=True) as ours:  # (torch warns once a process: its text is copied here)
        warnings.simplefilter("always")
        dg.from_array(SPD).cholesky()
    assert [str(w.message) for w in ours] == [methods._DEPRECATED["cholesky"]]


@pytest.mark.parametrize("chunks", [1, 2, 5])
def test_gcd_and_lcm_are_torchs_and_their_in_place_forms_write(chunks):
    a, b = np.array([12, 18, -4, 0, 7]), np.array([8, 27, 6, 5, 0])
    x, y = dg.from_array(a, chunks=chunks), dg.from_array(b, chunks=chunks)
    np.testing.assert_array_equal(x.gcd(y).numpy(), torch.tensor(a).gcd(torch.tensor(b)).numpy())
    np.testing.assert_array_equal(x.lcm(y).numpy(), torch.tensor(a).lcm(torch.tensor(b)).numpy())
    np.testing.assert_array_equal(x.gcd(dg.from_array(np.array([6]))).numpy(), np.gcd(a, 6))
    z = dg.from_array(a, chunks=chunks)
    assert z.lcm_(y) is z and z._version == 1
    np.testing.assert_array_equal(z.numpy(), np.lcm(a, b))
    same_error(lambda: dg.from_array(Y).gcd(dg.from_array(Y)), lambda: torch.tensor(Y).gcd(torch.tensor(Y)))


def test_the_predicates_and_sizes_are_torchs():
    x, t = dg.from_array(Y, chunks=(4, 3)), torch.tensor(Y)
    assert x.itemsize == t.itemsize == 8 and dg.from_array(np.zeros(2, np.int16)).itemsize == 2
    assert x.ndimension() == t.ndimension() == 2
    assert x.is_neg() is t.is_neg() is False
    assert x.is_same_size(dg.from_array(Y * 2)) and not x.is_same_size(x.T)
    assert dg.from_array(np.array([0.0])).is_nonzero() is False and dg.from_array(np.array(3)).is_nonzero() is True
    same_error(lambda: x.is_nonzero(), lambda: t.is_nonzero())
    same_error(lambda: x[:0].is_nonzero(), lambda: t[:0].is_nonzero())


@pytest.mark.parametrize("call", [
    "x.sum_to_size(3)", "x.sum_to_size(5, 6, 8)", "x.split_with_sizes([1, 2])", "x.split_with_sizes([1, 2], 1)",
    "x.fill_diagonal_(1) if False else cube.fill_diagonal_(1)", "x[0].fill_diagonal_(1)", "x.eig()", "x.symeig()",
    "x.lstsq(x)", "x.lstsq()", "x.solve(x)", "x.solve()", "x.diagonal_scatter(x[0])",
])
def test_the_methods_raise_torchs_errors(call):
    def run(make):
        names = {"x": make(Y), "cube": make(np.zeros((3, 4, 5)))}
        out = eval(call, {}, names)
        return out
    same_error(lambda: run(lambda a: dg.from_array(a, chunks=2)), lambda: run(torch.tensor))


IDX = np.array([0, 47, -1, 13, 5])


@pytest.mark.parametrize("chunking", list(CHUNKINGS))
@pytest.mark.parametrize("case", [
    lambda x, s: x.put(torch.tensor(IDX) if isinstance(x, torch.Tensor) else dg.from_array(IDX, chunks=2), s),
    lambda x, s: x.T.put(torch.tensor(IDX) if isinstance(x, torch.Tensor) else dg.from_array(IDX, chunks=2), s * 2),
    lambda x, s: x.put(torch.tensor([3, 3, 4, 3, 9]) if isinstance(x, torch.Tensor) else
                       dg.from_array(np.array([3, 3, 4, 3, 9])), s, accumulate=True),
    lambda x, s: (x * 1.0).put_(torch.tensor(IDX) if isinstance(x, torch.Tensor) else dg.from_array(IDX), s),
], ids=lambda c: None)
def test_put_writes_at_flat_indices_as_torchs(chunking, case):
    _same_values_and_grads(case, Y, RNG.random(5), chunks=CHUNKINGS[chunking])


@pytest.mark.parametrize("chunking", list(CHUNKINGS))
@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_index_reduce_is_torchs(chunking, reduce, include_self):
    rows, cols = np.array([0, 2, 2, 5, 0, 1, 2]), np.array([7, 0, 0, 3])
    src_rows, src_cols = RNG.random((7, 8)) - 0.5, RNG.random((6, 4)) - 0.5

    def case(x, a, b):
        lib_idx = (lambda v: torch.tensor(v)) if isinstance(x, torch.Tensor) else (lambda v: dg.from_array(v, chunks=3))
        return (x.index_reduce(0, lib_idx(rows), a, reduce, include_self=include_self),
                (x * 1.0).index_reduce_(1, lib_idx(cols), b, reduce, include_self=include_self))
    _same_values_and_grads(case, Y, src_rows, src_cols,
                           chunks=lambda shape: CHUNKINGS[chunking] if shape == (6, 8) else (3, 2))


@pytest.mark.parametrize("call", [
    "x.put(i.double(), x[0])", "x.put(i, x[0, :2])", "x.index_reduce(0, i, x, 'sum')",
    "x.index_reduce(0, i.double(), x, 'prod')", "x.index_reduce(0, i[None], x[:5], 'prod')",
    "x.index_reduce(0, i, x, 'prod')", "x.index_reduce(0, i, x[:5, :3], 'prod')",
])
def test_put_and_index_reduce_raise_torchs_errors(call):
    def run(make, index):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return eval(call, {}, {"x": make(Y), "i": index(np.array([0, 1, 2, 3, 4]))})
    same_error(lambda: run(lambda a: dg.from_array(a, chunks=2), dg.from_array),
               lambda: run(torch.tensor, torch.tensor))


@pytest.mark.parametrize("chunking", list(CHUNKINGS))
@pytest.mark.parametrize("name, args", [("t_", ()), ("transpose_", (0, 1)), ("swapaxes_", (1, 0)),
                                        ("swapdims_", (0, -1)), ("unsqueeze_", (1,)), ("unsqueeze_", (-1,)),
                                        ("squeeze_", ()), ("squeeze_", (0,)), ("squeeze_", (1,))])
def test_a_shape_changed_in_place_is_torchs_and_keeps_sharing_its_storage(chunking, name, args):
    x = dg.from_array(Y, chunks=CHUNKINGS[chunking], requires_grad=True)
    t = torch.tensor(Y, requires_grad=True)
    y, u = (x[None] * 2, t[None] * 2) if name == "squeeze_" else (x * 2, t * 2)
    alias, torch_alias = y.detach(), u.detach()
    assert getattr(y, name)(*args) is y
    getattr(u, name)(*args)
    assert tuple(y.shape) == tuple(u.shape) and y._version == u._version == 1 and y._base is None
    np.testing.assert_array_equal(y.detach().numpy(), u.detach().numpy())
    with dg.no_grad():  # (a write through either name reaches the other, as torch's shared storage)
        y.mul_(3)
        alias.add_(1)
    with torch.no_grad():
        u.mul_(3)
        torch_alias.add_(1)
    np.testing.assert_array_equal(y.detach().numpy(), u.detach().numpy())
    np.testing.assert_array_equal(alias.numpy(), torch_alias.numpy())
    assert y._version == u._version and alias._version == torch_alias._version
    w = np.arange(y.numel(), dtype=float).reshape(tuple(y.shape))
    (y * y * w).sum().backward(), (u * u * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-12)


def test_a_view_changed_in_place_stays_a_view_of_its_base():
    x, t = _pair(Y, (4, 3))
    y, u = x * 2, t * 2
    v, w = y[1:2], u[1:2]
    v.squeeze_(0), w.squeeze_(0)
    assert v._base is y and w._base is u and tuple(v.shape) == tuple(w.shape)
    with dg.no_grad():
        v.mul_(10)
    with torch.no_grad():
        w.mul_(10)
    np.testing.assert_array_equal(y.detach().numpy(), u.detach().numpy())
    (y * y).sum().backward(), (u * u).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-12)


def test_a_shape_change_in_place_refuses_a_leaf_that_requires_grad_and_a_tensor_with_views():
    same_error(lambda: dg.from_array(Y, requires_grad=True).t_(), lambda: torch.tensor(Y, requires_grad=True).t_())
    x = dg.from_array(Y, requires_grad=True)
    with dg.no_grad():
        x.unsqueeze_(0)
    assert x.shape == (1, 6, 8) and x.is_leaf and x.requires_grad and x._version == 1
    (x * 2).sum().backward()
    assert x.grad.shape == (1, 6, 8)
    y = dg.from_array(Y) * 2
    view = y[0]
    with pytest.raises(NotImplementedError, match="has views"):
        y.t_()
    assert view.shape == (8,)


U = np.random.default_rng(5).integers(0, 3, (4, 5)).astype(float)
U[2] = U[1]


@pytest.mark.parametrize("chunks", [(4, 5), (2, 3), (3, 2)])
@pytest.mark.parametrize("name", ["unique", "unique_consecutive"])
@pytest.mark.parametrize("dim", [None, 0, 1, -1])
@pytest.mark.parametrize("extras", [{}, {"return_inverse": True}, {"return_counts": True},
                                    {"return_inverse": True, "return_counts": True}])
def test_unique_and_unique_consecutive_are_torchs(chunks, name, dim, extras):
    ours = getattr(dg.from_array(U, chunks=chunks), name)(dim=dim, **extras)
    theirs = getattr(torch.tensor(U), name)(dim=dim, **extras)
    ours = ours if isinstance(ours, tuple) else (ours,)
    theirs = theirs if isinstance(theirs, tuple) else (theirs,)
    assert len(ours) == len(theirs)
    for o, t in zip(ours, theirs):
        o = o.numpy()
        assert o.shape == tuple(t.shape) and o.dtype == t.numpy().dtype
        np.testing.assert_array_equal(o, t.numpy())


def test_unique_of_a_scalar_and_of_a_vector_is_torchs():
    for v in (np.array(3.0), np.array([2.0, 1.0, 2.0, 2.0])):
        ours = dg.from_array(v).unique(return_inverse=True, return_counts=True)
        theirs = torch.tensor(v).unique(return_inverse=True, return_counts=True)
        for o, t in zip(ours, theirs):
            np.testing.assert_array_equal(o.numpy(), t.numpy())
            assert o.numpy().shape == tuple(t.shape)


H = np.random.default_rng(6).standard_normal((7, 5))
HW = np.random.default_rng(7).random((7, 5))
EDGES = np.array([-2.0, -0.5, 0.0, 2.0])


@pytest.mark.parametrize("chunks", [(7, 5), (3, 2)])
@pytest.mark.parametrize("args, kwargs", [
    ((4,), {}), ((5,), {"range": (-1.0, 1.0)}), ((3,), {"density": True}), ((6,), {"weight": HW}),
    ((6,), {"weight": HW, "density": True}), ((EDGES,), {}), ((EDGES,), {"density": True, "weight": HW}),
])
def test_histogram_is_torchs(chunks, args, kwargs):
    def ours_of(v):
        return dg.from_array(v, chunks=chunks if v.ndim == 2 else -1) if isinstance(v, np.ndarray) else v

    def theirs_of(v):
        return torch.tensor(v) if isinstance(v, np.ndarray) else v
    ours = dg.from_array(H, chunks=chunks).histogram(*map(ours_of, args), **{k: ours_of(v) for k, v in kwargs.items()})
    theirs = torch.tensor(H).histogram(*map(theirs_of, args), **{k: theirs_of(v) for k, v in kwargs.items()})
    assert type(ours).__name__ == "histogram" and ours._fields == ("hist", "bin_edges")
    for o, t in zip(ours, theirs):
        assert o.dtype == np.float64 and o.shape == tuple(t.shape)
        np.testing.assert_allclose(o.numpy(), t.numpy(), rtol=1e-12)


def test_histogram_of_one_value_and_its_errors_are_torchs():
    ours, theirs = dg.from_array(np.full(4, 2.0)).histogram(3), torch.full((4,), 2.0, dtype=torch.float64).histogram(3)
    for o, t in zip(ours, theirs):
        np.testing.assert_allclose(o.numpy(), t.numpy())
    x, t = dg.from_array(H), torch.tensor(H)
    same_error(lambda: x.histogram(0), lambda: t.histogram(0))
    same_error(lambda: x.histogram(3, range=(1.0, 0.0)), lambda: t.histogram(3, range=(1.0, 0.0)))
    same_error(lambda: dg.from_array(np.arange(3)).histogram(2), lambda: torch.arange(3).histogram(2))
    same_error(lambda: x.histogram(dg.from_array(EDGES.astype(np.float32))),
               lambda: t.histogram(torch.tensor(EDGES, dtype=torch.float32)))


GA = np.random.default_rng(8).random((6, 8)) * 5 + 0.1
GX = np.random.default_rng(9).random((6, 8)) * 8


@pytest.mark.parametrize("chunking", list(CHUNKINGS))
@pytest.mark.parametrize("name", ["igamma", "igammac"])
def test_igamma_and_igammac_give_torchs_values_and_gradients_in_other(chunking, name):
    x = dg.from_array(GX, chunks=CHUNKINGS[chunking], requires_grad=True)
    t = torch.tensor(GX, requires_grad=True)
    ours = getattr(dg.from_array(GA, chunks=(3, 3)), name)(x)
    theirs = getattr(torch.tensor(GA), name)(t)
    assert ours.grad_fn.name() == theirs.grad_fn.name()
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-12, atol=1e-15)
    (ours * ours).sum().backward(), (theirs * theirs).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-10)
    a = dg.from_array(GA, requires_grad=True)
    same_error(lambda: getattr(a, name)(dg.from_array(GX)).sum().backward(),
               lambda: getattr(torch.tensor(GA, requires_grad=True), name)(torch.tensor(GX)).sum().backward())
    y = dg.from_array(GA.copy(), chunks=3)
    assert getattr(y, name + "_")(dg.from_array(GX)) is y and y._version == 1
    np.testing.assert_allclose(y.numpy(), theirs.detach().numpy(), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("upper", [False, True])
def test_the_incomplete_gamma_without_scipy_agrees_with_torch(upper):
    a = np.concatenate([GA.ravel(), [0.5, 3.0, 1.0]])  # (not a = 30, x = 31: torch's own is off by 5e-10 there,
    x = np.concatenate([GX.ravel(), [0.0, 4.0, np.inf]])  # where SciPy, mpmath and this agree)
    theirs = (torch.igammac if upper else torch.igamma)(torch.tensor(a), torch.tensor(x)).numpy()
    np.testing.assert_allclose(methods._igamma_fallback(a, x, upper), theirs, rtol=1e-11, atol=1e-14)


def test_igamma_of_integers_raises_torchs_error():
    same_error(lambda: dg.from_array(np.arange(3)).igamma(dg.from_array(np.arange(3))),
               lambda: torch.arange(3).igamma(torch.arange(3)))


CHOL = np.linalg.cholesky(SPD)
RHS = np.random.default_rng(10).random((6, 3))


@pytest.mark.parametrize("chunks", [6, 3, ((4, 2), (1, 5))])
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_solve_and_cholesky_inverse_give_torchs_values_and_gradients(chunks, upper):
    factor = CHOL.T.copy() if upper else CHOL
    rhs_chunks = chunks if not isinstance(chunks, tuple) else (chunks[0], (1, 2))
    L, B = dg.from_array(factor, chunks=chunks, requires_grad=True), dg.from_array(RHS, chunks=rhs_chunks,
                                                                                   requires_grad=True)
    Lt, Bt = torch.tensor(factor, requires_grad=True), torch.tensor(RHS, requires_grad=True)
    ours = (B.cholesky_solve(L, upper=upper), L.cholesky_inverse(upper=upper))
    theirs = (Bt.cholesky_solve(Lt, upper=upper), Lt.cholesky_inverse(upper=upper))
    for o, t in zip(ours, theirs):
        np.testing.assert_allclose(o.detach().numpy(), t.detach().numpy(), rtol=1e-10)
    sum((o * o).sum() for o in ours).backward()
    sum((t * t).sum() for t in theirs).backward()
    np.testing.assert_allclose(L.grad.numpy(), Lt.grad.numpy(), rtol=1e-8)
    np.testing.assert_allclose(B.grad.numpy(), Bt.grad.numpy(), rtol=1e-8)


@pytest.mark.parametrize("chunks", [6, 3, ((4, 2), (1, 5))])
@pytest.mark.parametrize("kwargs", [{}, {"upper": False}, {"transpose": True}, {"upper": False, "transpose": True},
                                    {"unitriangular": True}, {"upper": False, "unitriangular": True}])
def test_triangular_solve_is_torchs(chunks, kwargs):
    coefficient = SPD / 6 + np.eye(6)
    rhs_chunks = chunks if not isinstance(chunks, tuple) else (chunks[0], (1, 2))
    A, B = dg.from_array(coefficient, chunks=chunks, requires_grad=True), dg.from_array(RHS, chunks=rhs_chunks,
                                                                                        requires_grad=True)
    At, Bt = torch.tensor(coefficient, requires_grad=True), torch.tensor(RHS, requires_grad=True)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        ours = B.triangular_solve(A, **kwargs)
    assert [str(w.message) for w in seen] == [methods._DEPRECATED["triangular_solve"]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = Bt.triangular_solve(At, **kwargs)
    assert type(ours).__name__ == "triangular_solve" and ours._fields == ("solution", "cloned_coefficient")
    for o, t in zip(ours, theirs):
        np.testing.assert_allclose(o.detach().numpy(), t.detach().numpy(), rtol=1e-10)
    ((ours.solution ** 2).sum() + ours.cloned_coefficient.sum()).backward()
    ((theirs.solution ** 2).sum() + theirs.cloned_coefficient.sum()).backward()
    np.testing.assert_allclose(A.grad.numpy(), At.grad.numpy(), rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(B.grad.numpy(), Bt.grad.numpy(), rtol=1e-8)


# ------------------------------------------------------------------ on a cluster (last: its client stays up)
def test_rand_and_rand_like_chunks_are_made_on_every_worker_not_only_where_the_seed_is(client):
    # (each chunk reads the run seed, one small key on one worker: marked as data producers, as dask's
    # from_array, the scheduler spreads them as root tasks rather than running all where the seed is)
    from dask.core import flatten
    from distributed import wait

    x = dg.from_array(np.ones((400, 10)), chunks=(100, 10))
    for make in (lambda: dg.randn(400, 10, chunks=(100, 10), dtype=dg.float64), lambda: dg.rand_like(x)):
        a = client.persist(make().array)
        wait(a)
        where = client.who_has(a)
        assert {w for k in flatten(a.__dask_keys__()) for w in where[k]} == set(client.scheduler_info()["workers"])
