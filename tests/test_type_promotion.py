"""Type promotion is torch's, not NumPy's, against torch itself: a tensor with dimensions decides over a
0-d one, which decides over a Python number, unless the lower one is of a higher category (bool <
integer < float < complex); a Python float is the default float32; integer division and floating ops
of integers give the default float.  NumPy promotes every operand alike: float32 + int64 was float64,
an int64 tensor + 2.5 float64, ``int / int`` and ``exp(int)`` float64, all silently."""
import itertools
import operator
import warnings

import numpy as np
import pytest

import daskgrad as dg
from daskgrad._data import result_type

torch = pytest.importorskip("torch")

DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64", "complex64",
          "complex128"]
NUMBERS = [True, 3, 2.5, 1j]
OPERATORS = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "truediv": operator.truediv,
             "floordiv": operator.floordiv, "mod": operator.mod, "pow": operator.pow, "lt": operator.lt,
             "eq": operator.eq, "maximum": lambda a, b: a.maximum(b), "atan2": lambda a, b: a.atan2(b),
             "where": lambda a, b: (torch if isinstance(a, torch.Tensor) else dg).where(a != 1, a, b)}


def _pair(d1, s1, d2, s2):
    a = np.arange(1, 1 + int(np.prod(s1))).reshape(s1).astype(d1)
    b = (np.arange(int(np.prod(s2))).reshape(s2) % 2 + 1).astype(d2)
    return a, b


def _torch(fn, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (ComplexHalf is experimental)
        try:
            return fn(*args)
        except (RuntimeError, TypeError, ZeroDivisionError):
            return None


def _same(r, t):
    """``r`` (daskgrad) holds torch's ``t``: its dtype and its values."""
    assert str(r.dtype) == str(t.dtype).removeprefix("torch."), (r.dtype, t.dtype)
    np.testing.assert_allclose(r.numpy().astype(complex), t.numpy().astype(complex), rtol=1e-3)


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_two_tensors_of_any_dtypes_and_ranks_promote_as_torch(name):
    fn, checked = OPERATORS[name], 0
    for d1, d2 in itertools.product(DTYPES, DTYPES):
        for s1, s2 in (((3,), (3,)), ((3,), ()), ((), (3,)), ((2, 3), ())):
            a, b = _pair(d1, s1, d2, s2)
            t = _torch(fn, torch.tensor(a), torch.tensor(b))
            if t is None or t.dtype == torch.complex32:  # (torch raises; complex32 has no NumPy dtype)
                continue
            _same(fn(dg.tensor(a), dg.tensor(b)), t)
            checked += 1
    assert checked > 100


@pytest.mark.parametrize("name", sorted(set(OPERATORS) - {"where", "atan2", "maximum"}))
def test_a_tensor_and_a_python_number_promote_as_torch(name):
    fn = OPERATORS[name]
    for d, number, swap in itertools.product(DTYPES, NUMBERS, (False, True)):
        a, _ = _pair(d, (3,), d, ())
        args = (lambda x: (number, x)) if swap else (lambda x: (x, number))
        t = _torch(fn, *args(torch.tensor(a)))
        if t is None or t.dtype == torch.complex32:
            continue
        with np.errstate(all="ignore"):
            _same(fn(*args(dg.tensor(a))), t)


@pytest.mark.parametrize("dtype", ["bool", "uint8", "int16", "int64", "float16", "float32", "float64"])
@pytest.mark.parametrize("name", ["exp", "log1p", "sqrt", "rsqrt", "sin", "tanh", "sigmoid", "erf", "reciprocal",
                                  "i0", "deg2rad", "logit", "angle", "sinc", "atan", "neg", "abs", "square",
                                  "floor", "sum", "prod", "cumsum", "cumprod"])
def test_a_one_tensor_op_of_any_dtype_gives_torch_s_dtype(name, dtype):
    """Floating ops of integers are the default float (NumPy's float16, float32 or float64 by width; an
    integer ``reciprocal`` stayed integer, 1 // x); sums and products of unsigned integers int64 (NumPy's
    uint64); ``angle`` of float32 float32 (was float64); ``logit`` of uint8 no longer wraps ``1 - x``."""
    a = np.array([1, 2, 0, 3]).astype(dtype)
    args = (0,) if name in ("cumsum", "cumprod") else ()
    t = _torch(lambda x: getattr(x, name)(*args), torch.tensor(a))
    if t is None:
        pytest.skip(f"torch has no {name} of {dtype}")
    with np.errstate(all="ignore"):
        _same(getattr(dg.from_array(a, chunks=2), name)(*args), t)


def test_gradients_through_a_promotion_have_each_input_s_dtype_and_torch_s_values():
    """No cast node is recorded (torch's ``MulBackward0`` links the leaves themselves), and each leaf's
    gradient comes back in its own dtype."""
    w32, s64 = np.array([0.5, -1.5, 2.0], np.float32), np.array(3.0)
    labels = np.array([1, 0, 2])
    wd, sd = dg.tensor(w32, requires_grad=True), dg.tensor(s64, requires_grad=True)
    wt, st = torch.tensor(w32, requires_grad=True), torch.tensor(s64, requires_grad=True)
    yd = (wd * sd - dg.tensor(labels)) / 2
    yt = (wt * st - torch.tensor(labels)) / 2
    assert yd.dtype == np.float32 and yt.dtype == torch.float32
    assert [type(n).__name__ for n, _ in yd.grad_fn.next_functions[0][0].next_functions[0][0].next_functions] == \
        [type(n).__name__ for n, _ in yt.grad_fn.next_functions[0][0].next_functions[0][0].next_functions] == \
        ["AccumulateGrad", "AccumulateGrad"]
    (yd * yd).sum().backward()
    (yt * yt).sum().backward()
    assert wd.grad.dtype == np.float32 and sd.grad.dtype == np.float64
    np.testing.assert_allclose(wd.grad.numpy(), wt.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(sd.grad.numpy(), st.grad.numpy(), rtol=1e-6)


def test_an_in_place_op_whose_torch_result_type_cannot_be_written_raises_torch_s_error():
    x, t = dg.tensor([1, 2]), torch.tensor([1, 2])
    for op in (lambda v: v.add_(2.5), lambda v: v.div_(2)):
        with pytest.raises(RuntimeError) as theirs:
            op(t)
        with pytest.raises(RuntimeError) as ours:
            op(x)
        assert str(ours.value) == str(theirs.value)
    y = dg.tensor(np.array([1.0, 2.0], np.float32))
    y += dg.tensor(np.array([1, 2]))  # float32 with int64 is float32: written in place
    assert y.dtype == np.float32 and y.tolist() == [2.0, 4.0]


def test_result_type_is_torch_s_for_every_combination_of_classes():
    operands = [np.ones((3,) * nd, d) for d in DTYPES for nd in (0, 1)] + NUMBERS
    for a, b in itertools.product(operands, operands):
        if not (hasattr(a, "dtype") or hasattr(b, "dtype")):
            continue
        theirs = torch.result_type(*(torch.tensor(v) if hasattr(v, "dtype") else v for v in (a, b)))
        if theirs == torch.complex32:
            continue
        assert str(result_type(a, b)) == str(theirs).removeprefix("torch."), (a, b)


def test_where_of_two_numbers_is_torch_s_dtype():
    cond, theirs = dg.tensor([True, False]), torch.tensor([True, False])
    for a, b in ((1.0, 0.0), (1, 0), (1, 0.5), (True, False)):
        _same(dg.where(cond, a, b), torch.where(theirs, a, b))


def test_numpy_s_result_type_of_tensors_is_the_dtype_their_ops_give():
    a, b = dg.tensor(np.ones(3, np.float32)), dg.tensor(np.arange(3))
    assert np.result_type(a, b) == (a + b).dtype == np.float32
    assert np.result_type(b, 2.5) == (b * 2.5).dtype == np.float32
    assert np.result_type(a, np.float64) == np.float64  # (a NumPy dtype among them: NumPy's answer)


def _both(fn):
    """``fn(lib)`` for daskgrad and torch: (daskgrad's, torch's)."""
    return fn(dg), fn(torch)


@pytest.mark.parametrize("case", ["cat", "stack", "masked_fill", "masked_fill_bool", "nansum", "mse_loss", "copysign",
                                  "copysign_tensor", "xlogy", "xlogy_half", "ldexp", "ldexp_float"])
def test_ops_beyond_the_binary_table_give_torch_s_dtype_and_values(case):
    """A second review's cases: joins, masked_fill (self's dtype: a float number is truncated into an
    integer tensor), nansum of integers, mse_loss with an integer target, and the composites copysign,
    xlogy and ldexp (torch's floating result type)."""
    ints, f32 = np.array([0, 1, 2]), np.array([1.5, -2.0, 0.0], np.float32)

    def make(lib):
        i, f = lib.tensor(ints), lib.tensor(f32)
        mask = lib.tensor([False, True, True])
        nn_f = dg.nn.functional if lib is dg else torch.nn.functional
        return {"cat": lambda: lib.cat([i, f]), "stack": lambda: lib.stack([i, f]),
                "masked_fill": lambda: i.masked_fill(mask, 0.5),
                "masked_fill_bool": lambda: lib.tensor([True, False, True]).masked_fill(mask, 5),
                "nansum": lambda: i.nansum(), "mse_loss": lambda: nn_f.mse_loss(f, i),
                "copysign": lambda: i.copysign(-1.0),
                "copysign_tensor": lambda: f.copysign(lib.tensor(np.array([-1.0, 1.0, -0.0]))),
                "xlogy": lambda: i.xlogy(2.5), "xlogy_half": lambda: lib.tensor(f32.astype(np.float16)).xlogy(i),
                "ldexp": lambda: lib.ldexp(i, i), "ldexp_float": lambda: lib.ldexp(f, i)}[case]()

    ours, theirs = _both(make)
    with np.errstate(all="ignore"):
        _same(ours, theirs)


def test_in_place_writes_what_torch_s_can_cast_allows():
    """torch writes a signed integer result into uint8 (wrapping), NumPy's same_kind refused it; a float
    result into an integer, or anything but a bool into a bool, is refused with torch's words."""
    for lib in (dg, torch):
        u = lib.tensor(np.array([3, 0, 4], np.uint8))
        u += lib.tensor(np.array([1, 1, 1], np.int16))
        assert u.tolist() == [4, 1, 5] and str(u.dtype).endswith("uint8")
    for op in (lambda b: b.add_(1), lambda b: b.mul_(2.5)):
        with pytest.raises(RuntimeError) as theirs:
            op(torch.tensor([True, False]))
        with pytest.raises(RuntimeError) as ours:
            op(dg.tensor([True, False]))
        assert str(ours.value) == str(theirs.value)
    with pytest.raises(RuntimeError, match="value cannot be converted to type int64_t without overflow"):
        dg.tensor([1, 2]).masked_fill(dg.tensor([True, False]), float("-inf"))
