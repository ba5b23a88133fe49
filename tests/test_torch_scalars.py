"""Python numbers meet tensors as in torch, against torch itself: a half tensor times (or divided by) a
number computes in float32 and rounds once (NumPy rounds the number to half first: ``f16 * 1e5`` was
inf, torch's 49984); a Python int beyond an integer dtype's range wraps into it (NumPy refuses it);
a number an op converts with a check (``fill_``, ``clamp``'s bounds, ``alpha``, a ``pow`` exponent) and
that does not fit raises torch's error instead of becoming inf.  Also torch's refusals NumPy does not
have: matrix products of two dtypes, softmax of integers, a float or bool ``alpha`` for integers; and
dtypes: ``uint8.all()`` is uint8, l1 and mse losses broadcast a 0-d target first."""
import operator
import warnings

import numpy as np
import pytest

import daskgrad as dg

torch = pytest.importorskip("torch")

_HALVES = np.concatenate([np.linspace(-40, 40, 97), np.linspace(0, 65000, 61), [0.5, 1, 2, -3]]).astype(np.float16)


def _outcome(fn, x):
    """The value (as NumPy) and dtype name of ``fn(x)``, or its exception's type and text."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            r = fn(x)
        except (RuntimeError, NotImplementedError, TypeError, OverflowError, IndexError) as e:
            return type(e).__name__, str(e)
        r = r.detach() if hasattr(r, "detach") else r
        return np.asarray(r.numpy()), str(r.dtype).replace("torch.", "")


def _same(a, b):
    if isinstance(a[0], str) or isinstance(b[0], str):
        return a == b
    return a[1] == b[1] and a[0].shape == b[0].shape and np.array_equal(a[0], b[0], equal_nan=a[0].dtype.kind == "f")


_HALF_OPS = {"mul": operator.mul, "rmul": lambda t, s: s * t, "div": operator.truediv, "rdiv": lambda t, s: s / t,
             "floordiv": operator.floordiv, "rfloordiv": lambda t, s: s // t, "mul_": lambda t, s: t.clone().mul_(s),
             "mul 0-d float32": lambda t, s: t * _like(t, np.float32(s)),
             "0-d float32 times": lambda t, s: _like(t, np.float32(s)) * t,
             "add": operator.add, "sub": operator.sub, "rsub": lambda t, s: s - t}


def _like(t, v):
    return torch.tensor(v) if isinstance(t, torch.Tensor) else dg.tensor(v)


@pytest.mark.parametrize("number", [0.1, 3.3, 1 / 3, 1e5, 70000.0, 1e-8, 3, 100001])
@pytest.mark.parametrize("name", sorted(_HALF_OPS))
def test_half_with_a_number_is_torch_s_bit_for_bit(name, number):
    fn = _HALF_OPS[name]
    want = _outcome(lambda t: fn(t, number), torch.from_numpy(_HALVES.copy()))
    got = _outcome(lambda t: fn(t, number), dg.tensor(_HALVES, chunks=50))
    assert _same(got, want), (name, number)


def test_half_products_and_quotients_of_two_half_tensors_are_unchanged():
    """float32 then one rounding is NumPy's half arithmetic for two halves (the product is exact in
    float32; a float32 quotient rounded again to half is correctly rounded), so only numbers change."""
    a, b = _HALVES, _HALVES[::-1].copy()
    for fn in (operator.mul, operator.truediv, operator.floordiv):
        with np.errstate(all="ignore"):
            want = fn(a, b)
        got = fn(dg.tensor(a, chunks=40), dg.tensor(b, chunks=40)).numpy()
        assert got.dtype == np.float16 and np.array_equal(got, want, equal_nan=True)


_INTS = [("int8", lambda t: t + 1000), ("uint8", lambda t: t + 300), ("uint8", lambda t: t < -1),
         ("uint8", lambda t: t == 257), ("int8", lambda t: t * 1000), ("int8", lambda t: t == -24 + 1024),
         ("int16", lambda t: t - 70000), ("int32", lambda t: t + 2 ** 40),
         ("uint8", lambda t: t.maximum(_like(t, 3)) + 512),
         ("int8", lambda t: t.clamp(max=1000)), ("int8", lambda t: t.clone().fill_(1000)),
         ("float16", lambda t: t ** 1e5), ("float16", lambda t: t.clamp(max=1e5)),
         ("float16", lambda t: t.clamp(min=-1e5)),
         ("float16", lambda t: t.clamp_min(1e5)), ("float32", lambda t: t.clamp(max=1e300)),
         ("float16", lambda t: t.add(t, alpha=1e5)), ("float16", lambda t: t.sub(t, alpha=1e5)),
         ("float16", lambda t: t.clone().fill_(1e5)), ("float16", lambda t: t + 1e5), ("float16", lambda t: 1e5 ** t),
         ("float16", lambda t: (torch if isinstance(t, torch.Tensor) else dg).full_like(t, 1e5)),
         ("float16", lambda t: t.clamp(max=float("inf"))), ("int64", lambda t: t.add(t, alpha=2.5)),
         ("int64", lambda t: t.add(t, alpha=1.0)), ("int64", lambda t: t.add(t, alpha=True)),
         ("float32", lambda t: t.add(t, alpha=True)), ("bool", lambda t: t.add(t, alpha=2)),
         ("bool", lambda t: t.add(t, alpha=0)), ("bool", lambda t: t.add(t, alpha=2.5)),
         ("int64", lambda t: t.sub(2, alpha=3)),
         ("float32", lambda t: t.add(t, alpha=1.0))]


@pytest.mark.parametrize("case", range(len(_INTS)))
def test_a_number_beyond_a_dtype_s_range_wraps_or_raises_as_torch(case):
    dtype, fn = _INTS[case]
    x = np.array([1, 0, 3, 5], dtype)
    assert _same(_outcome(fn, dg.tensor(x, chunks=3)), _outcome(fn, torch.from_numpy(x.copy())))


@pytest.mark.parametrize("dtypes", [("float32", "float64"), ("float64", "float32"), ("int32", "float32"),
                                    ("float16", "float32"), ("int64", "int64")])
@pytest.mark.parametrize("shapes", [((3,), (3,)), ((2, 3), (3,)), ((2, 2, 3), (2, 3, 2)), ((2, 2, 3), (3, 2)),
                                    ((3,), (2, 3, 2)), ((3,), (3, 2)), ((2, 3), (3, 2)), ((2, 3), (2, 3, 2)),
                                    ((2, 2, 3), (3,))])
def test_a_matrix_product_of_two_dtypes_raises_torch_s_error(dtypes, shapes):
    (da, db), (sa, sb) = dtypes, shapes
    a, b = np.ones(sa, da), np.ones(sb, db)
    for fn in (operator.matmul, lambda x, y: x.matmul(y), lambda x, y: y.__rmatmul__(x)):
        want = _outcome(lambda _: fn(torch.from_numpy(a), torch.from_numpy(b)), None)
        got = _outcome(lambda _: fn(dg.tensor(a), dg.tensor(b)), None)
        assert _same(got, want), (dtypes, shapes)
    if len(sa) == len(sb) == 2:
        assert _same(_outcome(lambda _: dg.tensor(a).mm(dg.tensor(b)), None),
                     _outcome(lambda _: torch.from_numpy(a).mm(torch.from_numpy(b)), None))
    assert dg.matmul(dg.tensor(a), dg.tensor(b)).dtype == np.result_type(a, b)  # (NumPy's function promotes)


@pytest.mark.parametrize("dtype", ["int64", "int32", "uint8", "bool"])
@pytest.mark.parametrize("shape, dim", [((2, 3), 1), ((2, 3), 0), ((2, 3), -1), ((3,), 0), ((), 0)])
def test_softmax_of_integers_raises_torch_s_error_unless_a_dtype_is_given(dtype, shape, dim):
    x = np.ones(shape, dtype)
    for name in ("softmax", "log_softmax"):
        for call in (lambda L, t: getattr(L.nn.functional, name)(t, dim=dim), lambda L, t: getattr(t, name)(dim),
                     lambda L, t: getattr(L.nn.functional, name)(t, dim=dim, dtype=L.float64)):
            want = _outcome(lambda t: call(torch, t), torch.from_numpy(x.copy()))
            got = _outcome(lambda t: call(dg, t), dg.tensor(x))
            assert _same(got, want) if isinstance(want[0], str) else np.allclose(got[0], want[0]) and got[1] == want[1]


def test_all_and_any_of_uint8_are_uint8_as_torch_s():
    x = np.array([[1, 0], [2, 3]], np.uint8)
    for fn in (lambda t: t.all(), lambda t: t.any(1), lambda t: t.all(dim=0, keepdim=True), lambda t: t.any((0, 1)),
               lambda t: (t > 1).all()):
        assert _same(_outcome(fn, dg.tensor(x)), _outcome(fn, torch.from_numpy(x)))
    assert dg.all(dg.tensor(x)).dtype == bool  # (NumPy's function)


@pytest.mark.parametrize("name", ["l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss"])
@pytest.mark.parametrize("target", [((), "float64"), ((3,), "float64"), ((), "float32"), ((2, 1), "float64")])
def test_pointwise_losses_with_a_target_of_another_dtype_or_shape_are_torch_s(name, target):
    x, t = np.arange(3, dtype=np.float32) * 0.7, np.full(target[0], 0.5, target[1])
    for reduction in ("mean", "none"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = getattr(torch.nn.functional, name)(torch.from_numpy(x), torch.from_numpy(t), reduction=reduction)
            got = getattr(dg.nn.functional, name)(dg.tensor(x), dg.tensor(t), reduction=reduction)
        assert str(want.dtype) == f"torch.{got.dtype}" and np.allclose(got.numpy(), want.numpy())


_FUSED = np.random.default_rng(0).standard_normal((3, 2003)) * 10


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("case", ["lerp 0.3", "lerp 0.7", "lerp 1", "lerp tensor", "addcmul", "addcmul 0.3",
                                  "addcmul 2", "addcdiv 0.3"])
def test_lerp_and_addcmul_round_once_as_torch_s_fused_multiply_adds(case, dtype):
    """torch's lerp (two formulas, exact at both ends) and addcmul are fused multiply-adds, rounded once
    (float64 too: emulated here, NumPy has none); ``self + w * (end - self)`` differed in the last bit in
    a quarter of the elements, and ``lerp(a, b, 1)`` was not ``b``."""
    a, b, c = _FUSED.astype(dtype)
    w = np.random.default_rng(1).uniform(-0.2, 1.2, a.shape).astype(dtype)
    name, _, arg = case.partition(" ")

    def call(t, mk):
        x, y, z = mk(a), mk(b), mk(c)
        if name == "lerp":
            return x.lerp(y, mk(w) if arg == "tensor" else float(arg))
        return getattr(x, name)(y, z, **({"value": float(arg)} if arg else {}))
    want = call(None, torch.from_numpy).numpy()
    got = call(None, lambda v: dg.tensor(v, chunks=500)).numpy()
    assert got.dtype == want.dtype and np.array_equal(got, want, equal_nan=True)


def test_lerp_and_addcmul_gradients_and_refusals_are_torch_s():
    a, b, w = (np.random.default_rng(2).uniform(0, 1, (3, 4)) for _ in range(3))
    grads = []
    for mk in (lambda v: torch.tensor(v, requires_grad=True), lambda v: dg.tensor(v, requires_grad=True)):
        x, y, z = mk(a), mk(b), mk(w)
        r = x.lerp(y, z) * x.lerp(y, 0.7) + x.addcmul(y, z, value=0.5) * x.addcdiv(y, z + 1, value=0.3)
        assert r.grad_fn.name() == "AddBackward0"
        assert x.lerp(y, z).grad_fn.name() == "LerpBackward1" and x.lerp(y, 0.2).grad_fn.name() == "LerpBackward0"
        assert x.addcmul(y, z).grad_fn.name() == "AddcmulBackward0"
        assert x.addcdiv(y, z).grad_fn.name() == "AddcdivBackward0"
        (r ** 2).sum().backward()
        grads.append([t.grad.numpy() for t in (x, y, z)])
    assert all(np.allclose(g, h) for g, h in zip(*grads))
    for call in (lambda L, t: t.lerp(t.double(), 0.5), lambda L, t: t.long().lerp(t.long(), 0.5),
                 lambda L, t: t.lerp(t, t.double()), lambda L, t: t.long().lerp(t.long(), t.long()),
                 lambda L, t: t.mv(t[0].double()), lambda L, t: t[None].bmm(t[None].double()),
                 lambda L, t: t.half().masked_fill(t > 0, 1e5), lambda L, t: t.long().masked_fill(t > 0, float("nan")),
                 lambda L, t: t.long().addcdiv(t.long(), t.long())):
        want = _outcome(lambda t: call(torch, t), torch.ones(3, 3))
        assert _same(_outcome(lambda t: call(dg, t), dg.ones(3, 3)), want)
    assert np.array_equal(dg.ones(3).lerp(dg.ones(3) * 2, dg.tensor(np.float64(0.25))).numpy(), np.full(3, 1.25))


_SHIFTS = {"<<": lambda a, b: a << b, ">>": lambda a, b: a >> b, "<< 2": lambda a, b: a << 2,
           ">> 70": lambda a, b: a >> 70, "3 <<": lambda a, b: 3 << b.clamp(0, 5),
           "-16 >>": lambda a, b: -16 >> b.clamp(0, 5), "bitwise_left_shift": lambda a, b: a.bitwise_left_shift(b),
           "bitwise_right_shift": lambda a, b: a.bitwise_right_shift(1), "<<=": lambda a, b: a.clone().__ilshift__(b),
           "bitwise_right_shift_": lambda a, b: a.clone().bitwise_right_shift_(b),
           "float": lambda a, b: a.float() << 2, "<< 2.0": lambda a, b: a << 2.0, "bool": lambda a, b: (a > 0) << 1,
           "bool << bool": lambda a, b: (a > 0) << (a > 0)}


@pytest.mark.parametrize("dtype, values, counts", [("int64", [1, 2, -8, 5, 7], [0, 63, 64, -1, 3]),
                                                   ("int8", [1, -2, -128, 127, 3], [0, 7, 8, 9, 1]),
                                                   ("uint8", [1, 200, 255, 3, 9], [0, 7, 8, 1, 2]),
                                                   ("int32", [1, -1, 5, 9, -7], [31, 32, 2, -3, 1])])
@pytest.mark.parametrize("name", sorted(_SHIFTS))
def test_bit_shifts_are_torch_s_for_any_count(name, dtype, values, counts):
    """A count below 0 or of the width or more gives 0 (``<<``) or the sign (``>>``), as torch's; NumPy's
    is the count mod the width.  (Tensor methods had no shifts at all.)"""
    x, s = np.array(values, dtype), np.array(counts, dtype)
    fn = _SHIFTS[name]
    want = _outcome(lambda _: fn(torch.from_numpy(x.copy()), torch.from_numpy(s.copy())), None)
    got = _outcome(lambda _: fn(dg.tensor(x, chunks=2), dg.tensor(s, chunks=3)), None)
    assert _same(got, want)


@pytest.mark.parametrize("call", [lambda L, t: t.clamp(-3), lambda L, t: t.clamp(max=-3),
                                  lambda L, t: t.clone().fill_(-3), lambda L, t: t.clone().fill_(-256),
                                  lambda L, t: t.masked_fill(t > 2, -1),
                                  lambda L, t: L.full_like(t, -2), lambda L, t: t.add(t, alpha=-1),
                                  lambda L, t: t.clone().fill_(-3.0)])
def test_a_negative_int_into_an_unsigned_dtype_wraps_as_torch_s(call):
    x = np.array([1, 5, 200], np.uint8)
    assert _same(_outcome(lambda t: call(dg, t), dg.tensor(x)), _outcome(lambda t: call(torch, t), torch.from_numpy(x)))


def test_lerp_and_addcmul_with_infinities_are_torch_s_and_unwarned():
    inf = np.inf
    a, b = np.array([0.0, 1.0, -inf, inf, 1e308, np.nan, 2.0]), np.array([inf, -inf, 1.0, inf, -1e308, 1.0, 3.0])
    c = np.array([2.0, inf, 1.0, 0.0, 1e200, 1.0, 3.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for w in (0.3, 0.7, 1.0, 0.0):
            want = torch.from_numpy(a).lerp(torch.from_numpy(b), w).numpy()
            assert np.array_equal(dg.tensor(a, chunks=3).lerp(dg.tensor(b, chunks=3), w).numpy(), want, equal_nan=True)
        want = torch.from_numpy(a).addcmul(torch.from_numpy(b), torch.from_numpy(c)).numpy()
        assert np.array_equal(dg.tensor(a).addcmul(dg.tensor(b), dg.tensor(c)).numpy(), want, equal_nan=True)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("alpha", [0.3, -0.01, 2.5, 1e-3])
@pytest.mark.parametrize("name", ["add", "sub", "add_", "sub_"])
def test_add_and_sub_with_alpha_round_once_as_torch_s(name, alpha, dtype):
    """torch's ``add(b, alpha=)`` is one fused multiply-add (SGD's ``p.add_(g, alpha=-lr)``); ``b * alpha``
    then ``+`` rounded twice, differing in the last bit in a tenth to a third of the elements."""
    a, b = _FUSED[:2].astype(dtype)

    def call(mk):
        x, y = mk(a), mk(b)
        return getattr(x.clone() if name.endswith("_") else x, name)(y, alpha=alpha)
    got, want = call(lambda v: dg.tensor(v, chunks=700)).numpy(), call(torch.from_numpy).numpy()
    assert np.array_equal(got, want)


_REFUSED = [lambda L, t: t.clone().fill_(1 + 2j), lambda L, t: t.clone().fill_(3 + 0j), lambda L, t: t.clamp(min=1j),
            lambda L, t: t.add(t, alpha=1j), lambda L, t: t.float().add(t.float(), alpha=1j),
            lambda L, t: t.float().clone().fill_(1 + 2j), lambda L, t: t.addcmul(t, t, value=2.5),
            lambda L, t: t.bool().addcmul(t.bool(), t.bool()), lambda L, t: t.to(L.uint8) // 256,
            lambda L, t: t.to(L.uint8) % 256, lambda L, t: t.float().lerp(t.float(), 0.3 + 0.1j),
            lambda L, t: t.to(L.complex128).lerp(t.to(L.complex128) * 2, 0.3 + 0.1j), lambda L, t: t.dot(t.float()),
            lambda L, t: t[None].dot(t[None]), lambda L, t: t.dot(t), lambda L, t: t.dot(t[:2])]


@pytest.mark.parametrize("case", range(len(_REFUSED)))
def test_complex_numbers_integer_values_and_dot_are_checked_as_torch_s(case):
    call = _REFUSED[case]
    want = _outcome(lambda t: call(torch, t), torch.ones(3, dtype=torch.int64))
    assert _same(_outcome(lambda t: call(dg, t), dg.ones(3, dtype="int64")), want)


_MORE = [lambda L, b, t, x: b - True, lambda L, b, t, x: t - True, lambda L, b, t, x: t - b,
         lambda L, b, t, x: 1.5 - b, lambda L, b, t, x: t.sub(b), lambda L, b, t, x: t + (-2 ** 63 - 1),
         lambda L, b, t, x: t + 2 ** 64, lambda L, b, t, x: t + 2 ** 63, lambda L, b, t, x: t.to(L.uint8) + 2 ** 64,
         lambda L, b, t, x: x[t.to(L.uint8)], lambda L, b, t, x: x[t[0].to(L.uint8)],
         lambda L, b, t, x: x[:, L.cat([t, t[:1]]).to(L.uint8)], lambda L, b, t, x: _put(x.double(), [0, 1], x[0]),
         lambda L, b, t, x: _put(x, (b, slice(None)), x[:1].double()), lambda L, b, t, x: _put(x, slice(0, 1), x[:1])]


def _put(x, index, value):
    x = x.clone()
    x[index] = value
    return x


@pytest.mark.parametrize("case", range(len(_MORE)))
def test_bool_subtraction_huge_ints_byte_masks_and_index_put_dtypes_are_torch_s(case):
    """Subtracting bools raises torch's errors (``bool - 1`` computed); an int beyond int64/uint64 raises
    torch's OverflowError (it wrapped); a uint8 index tensor is torch's deprecated mask (it was read as
    integers: another shape); putting a tensor of another dtype at advanced indices raises torch's error."""
    call = _MORE[case]

    def run(L, mk):
        b, t = mk(np.array([True, False])), mk(np.array([1, 0]))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (torch's deprecation of byte masks)
            return call(L, b, t, mk(np.arange(6.0, dtype=np.float32).reshape(2, 3)))
    want = _outcome(lambda _: run(torch, torch.from_numpy), None)
    assert _same(_outcome(lambda _: run(dg, dg.tensor), None), want)


@pytest.mark.parametrize("case", ["1 - m", "m - 2.5", "m - m", "True - x", "x - m", "ufunc 1 - m", "ufunc m - m"])
def test_module_subtract_of_bools_is_numpy_s(case):
    """``daskgrad.subtract`` is NumPy's ``subtract``: a bool operand beside another computes (``1 - mask``, which
    torch's ``sub`` and the ``-`` operator refuse), two bools raise NumPy's TypeError; np.subtract of a Tensor too.
    Values are NumPy's; the dtype is torch's promotion, as for daskgrad's other functions (``m - 2.5`` float32)."""
    m0, x0 = np.array([True, False, True]), np.array([0.5, 1.5, -2.0], dtype=np.float32)
    a, b = case.split()[-3], case.split()[-1]

    def run(L, mk):
        sub = np.subtract if case.startswith("ufunc") else L.subtract
        named = {"1": 1, "m": mk(m0), "2.5": 2.5, "True": True, "x": mk(x0)}
        try:
            r = sub(named[a], named[b])
        except TypeError as e:
            return str(e)
        return np.asarray(r.numpy() if hasattr(r, "numpy") else r)
    want, got = run(np, np.array), run(dg, dg.tensor)
    if isinstance(want, str):
        assert got == want
        return
    np.testing.assert_array_equal(got, want)
    assert got.dtype == (np.float32 if case == "m - 2.5" else want.dtype)
    with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with a bool tensor is not supported"):
        (dg.tensor(m0) - 1) if a != "1" else (1 - dg.tensor(m0))  # (the operator and the method stay torch's)
