"""Differences from torch a differential fuzz left (s63), each against torch: NumPy scalars meeting tensors (torch reads
them as its ``Scalar``: weakly typed, a NumPy bool as a float; a NumPy scalar's operator with a tensor on its right is
the tensor's reflected operator, as torch's ``__array_priority__`` makes it; ``t[0] = np.float32(1)`` refuses),
empty integer and bool tensors in ``softmax``/``median``/``quantile``/``kthvalue`` (torch's answer or its error
first), and torch's TypeErrors for a method given arguments it does not take."""
import operator
import warnings

import numpy as np
import pytest

import daskgrad as dg
from daskgrad.ops import arguments

torch = pytest.importorskip("torch")

_SCALARS = {"f64": np.float64(2.5), "f32": np.float32(2.5), "f16": np.float16(1.5), "i64": np.int64(2),
            "i32": np.int32(3), "u8": np.uint8(200), "bool": np.bool_(True)}
_TENSORS = {"bool": np.array([True, False, True]), "int32": np.array([1, 2, 3], np.int32),
            "int64": np.array([1, -2, 3]), "float32": np.array([1.5, -2, 3], np.float32),
            "float64": np.array([1.5, -2, 3]), "0-d float32": np.array(1.5, np.float32), "0-d int64": np.array(4)}


def _pair(values, grad=False):
    """The torch tensor and its daskgrad twin (chunks of one where it has an axis)."""
    t = torch.tensor(values)
    d = dg.from_array(values, chunks=1) if values.ndim else dg.tensor(values)
    if grad:
        t.requires_grad_(True)
        d.requires_grad_(True)
    return t, d


def _outcome(fn, x):
    """dtype, values, requires_grad and the gradient of ``fn(x)`` (x's own, of its sum), or the error's type and
    words (torch's ``torch.`` where daskgrad names its own types)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            r = fn(x)
        except Exception as e:  # noqa: BLE001 - compared
            return type(e).__name__, str(e).replace("daskgrad.", "torch.")
        grad = None
        if r.requires_grad:
            r.sum().backward()
            grad = x.grad.numpy().tolist()
        return str(r.dtype).replace("torch.", ""), np.asarray(r.detach().numpy()).tolist(), r.requires_grad, grad


def _same(fn, values, grad=False):
    t, d = _pair(values, grad)
    theirs, ours = _outcome(fn, t), _outcome(fn, d)
    if theirs[0] in ("float32", "float64") and ours[0] == theirs[0]:  # (NaN where torch has NaN)
        np.testing.assert_array_equal(np.array(ours[1]), np.array(theirs[1]))
        assert ours[2:] == theirs[2:]
    else:
        assert ours == theirs


# (Python's operators written out: ``operator.sub(s, t)`` is a call, which keeps NumPy's ufunc -- see the docs)
_OPERATORS = {
    "t + s": (lambda t, s: t + s, lambda t, s: s + t), "t - s": (lambda t, s: t - s, lambda t, s: s - t),
    "t * s": (lambda t, s: t * s, lambda t, s: s * t), "t / s": (lambda t, s: t / s, lambda t, s: s / t),
    "t // s": (lambda t, s: t // s, lambda t, s: s // t), "t < s": (lambda t, s: t < s, lambda t, s: s < t),
    "t == s": (lambda t, s: t == s, lambda t, s: s == t), "t & s": (lambda t, s: t & s, lambda t, s: s & t),
}


@pytest.mark.parametrize("tensor", sorted(_TENSORS))
@pytest.mark.parametrize("scalar", sorted(_SCALARS))
@pytest.mark.parametrize("op", sorted(_OPERATORS))
@pytest.mark.parametrize("side", [0, 1], ids=["tensor first", "scalar first"])
def test_a_numpy_scalar_meets_a_tensor_as_torch_s_scalar(op, scalar, tensor, side):
    """Both orders: ``np.float64(2.5) - t`` runs the tensor's ``__rsub__`` (torch's Tensor makes NumPy defer), so a
    bool tensor's subtraction refuses with torch's words, ``np.True_ - int_t`` is float32, ``np.float64(2.5) /
    int_t`` is torch's ``t.reciprocal() * 2.5`` bit for bit; NumPy's ufunc ran there before."""
    fn, s = _OPERATORS[op][side], _SCALARS[scalar]
    if op == "t // s" and side and tensor == "bool" and scalar in ("i32", "i64", "u8"):
        return  # (an integer divided by False: torch's ZeroDivisionError reads the values, which are lazy here)
    _same(lambda x: fn(x, s), _TENSORS[tensor])


@pytest.mark.parametrize("tensor", ["float32", "float64", "0-d float32"])
@pytest.mark.parametrize("scalar", sorted(_SCALARS))
@pytest.mark.parametrize("op", ["s - t", "s / t", "s * t", "t - s", "t / s"])
def test_gradients_through_a_numpy_scalar_s_operator_are_torch_s(op, scalar, tensor):
    s = _SCALARS[scalar]
    fn = {"s - t": lambda x: s - x, "s / t": lambda x: s / x, "s * t": lambda x: s * x, "t - s": lambda x: x - s,
          "t / s": lambda x: x / s}[op]
    _same(fn, _TENSORS[tensor], grad=True)


_METHODS = {
    "clamp(min=s)": lambda x, s: x.clamp(min=s), "clamp(max=s)": lambda x, s: x.clamp(max=s),
    "clamp_min(s)": lambda x, s: x.clamp_min(s), "x.where(x > 1, s)": lambda x, s: x.where(x > 1, s),
    "add(x, alpha=s)": lambda x, s: x.add(x, alpha=s), "sub(x, alpha=s)": lambda x, s: x.sub(x, alpha=s),
    "addcmul(value=s)": lambda x, s: x.addcmul(x, x, value=s), "masked_fill": lambda x, s: x.masked_fill(x > 1, s),
    "lerp(x, s)": lambda x, s: x.lerp(x * 2, s), "add(s)": lambda x, s: x.add(s), "mul(s)": lambda x, s: x.mul(s),
    "t += s": lambda x, s: operator.iadd(x.clone(), s), "fill_(s)": lambda x, s: x.detach().clone().fill_(s),
}


@pytest.mark.parametrize("tensor", sorted(_TENSORS))
@pytest.mark.parametrize("scalar", sorted(_SCALARS))
@pytest.mark.parametrize("method", sorted(_METHODS))
def test_methods_read_a_numpy_scalar_as_torch_s_scalar(method, scalar, tensor):
    """A NumPy bool is a float to torch's ``Scalar`` (``int_t.clamp(min=np.True_)`` is float32, ``alpha=np.True_``
    of integers refuses as a float alpha), a ``np.float32`` alpha of integers refuses as a float."""
    fn, s = _METHODS[method], _SCALARS[scalar]
    values = _TENSORS[tensor]
    if method == "lerp(x, s)" and tensor == "bool":
        return  # (torch's words name the C type, "long int": not matched, docs/user-guide/torch.md)
    _same(lambda x: fn(x, s), values, grad=values.dtype.kind == "f" and method not in ("fill_(s)", "t += s"))


@pytest.mark.parametrize("tensor", ["bool", "int64", "float32"])
@pytest.mark.parametrize("scalar", sorted(_SCALARS) + ["c64", "longdouble"])
def test_assigning_a_numpy_scalar_is_torch_s(scalar, tensor):
    """torch assigns Python numbers and NumPy integers (read through ``__index__``); a ``np.float32``, ``np.bool_``,
    ``np.float16`` ... raises its TypeError (``np.float64`` is a Python float, ``np.complex128`` a complex)."""
    s = {"c64": np.complex64(2), "longdouble": np.longdouble(2)}.get(scalar, _SCALARS.get(scalar))

    def write(x):
        x = x.clone()
        x[0] = s
        return x
    _same(write, _TENSORS[tensor])


@pytest.mark.parametrize("op", ["t < s", "s < t", "t // s", "t % s", "t.fmod(s)"])
def test_a_numpy_complex_scalar_is_refused_as_torch_s_complex_number(op):
    """``t < np.complex128(1j)`` raised nothing (the refusal looked for a Python complex only) and ``t // s`` named
    ComplexDouble where torch's result type of a float tensor and a complex number is ComplexFloat."""
    s = np.complex128(2 + 1j)
    fn = {"t < s": lambda x: x < s, "s < t": lambda x: x > s, "t // s": lambda x: x // s,
          "t % s": lambda x: x % s, "t.fmod(s)": lambda x: x.fmod(s)}[op]
    for values in (_TENSORS["float32"], _TENSORS["0-d float32"]):
        _same(fn, values)


def test_numpy_s_own_ufunc_called_by_name_keeps_numpy_s_rules():
    """Only Python's operator is torch's: ``np.subtract(np.float64(2), bool_t)`` is NumPy's ufunc (daskgrad's
    ``subtract``), which subtracts bools from a number."""
    b = dg.from_array(np.array([True, False]), chunks=1)
    np.testing.assert_array_equal(np.subtract(np.float64(2), b).numpy(), [1.0, 2.0])
    with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with a bool tensor is not supported"):
        np.float64(2) - b


# ------------------------------------------------------------------ empty integer and bool tensors
_EMPTY_OPS = {
    "softmax(0)": lambda x: x.softmax(0), "softmax(-1)": lambda x: x.softmax(-1),
    "log_softmax(0)": lambda x: x.log_softmax(0), "log_softmax(-1)": lambda x: x.log_softmax(-1),
    "softmax(5)": lambda x: x.softmax(5), "softmax(0, dtype=float64)": lambda x: x.softmax(0, dtype=_dtype(x)),
    "median()": lambda x: x.median(), "median(0)": lambda x: x.median(0)[0], "median(-1)": lambda x: x.median(-1)[0],
    "nanmedian()": lambda x: x.nanmedian(), "nanmedian(-1)": lambda x: x.nanmedian(-1)[0],
    "kthvalue(1)": lambda x: x.kthvalue(1)[0], "kthvalue(1, 0)": lambda x: x.kthvalue(1, 0)[0],
    "quantile(0.5)": lambda x: x.quantile(0.5), "quantile(0.5, dim=0)": lambda x: x.quantile(0.5, dim=0),
"nanquantile(0.5)": lambda x: x.nanquantile(0.5),
    "var()": lambda x: x.var(), "std(-1)": lambda x: x.std(-1), "prod()": lambda x: x.prod(),
    "prod(0)": lambda x: x.prod(0), "cumprod(0)": lambda x: x.cumprod(0), "max()": lambda x: x.max(),
    "max(-1)": lambda x: x.max(-1)[0], "argmax()": lambda x: x.argmax(), "argmax(0)": lambda x: x.argmax(0),
    "amax(-1)": lambda x: x.amax(-1), "logsumexp(0)": lambda x: x.logsumexp(0), "mode(-1)": lambda x: x.mode(-1)[0],
}


def _dtype(x):
    return torch.float64 if isinstance(x, torch.Tensor) else dg.float64


@pytest.mark.parametrize("dtype", ["bool", "int32", "int64", "uint8", "float32"])
@pytest.mark.parametrize("shape", [(0,), (2, 0), (0, 3), (2, 3)])
@pytest.mark.parametrize("op", sorted(_EMPTY_OPS))
def test_empty_integer_and_bool_tensors_in_reductions_are_torch_s(op, shape, dtype):
    """torch's softmax of an empty integer tensor returns it, ``median()`` of no bools is True, ``quantile`` of
    an empty integer tensor says it is empty and ``median``/``kthvalue`` of bools along an empty dim say so, each
    before the dtype's refusal (which named the kernel of the whole tensor, ``median_cpu``, where torch's
    reduction along a dim names ``median_out``)."""
    if shape == (2, 3) and dtype == "float32":
        return  # (of floats the ops compute: compared elsewhere)
    _same(_EMPTY_OPS[op], np.arange(int(np.prod(shape))).reshape(shape).astype(dtype) % 2)


# ------------------------------------------------------------------ TypeErrors of the arguments
_WRONG = {"a string": (("a",), {}), "two": ((0, 1.5), {}), "a list": (([1, 2],), {}), "a keyword": ((), {"foo": 1})}


def _torch_methods(names):
    return sorted(n for n in names if hasattr(torch.Tensor, n) and hasattr(dg.Tensor, n))


@pytest.mark.parametrize("wrong", sorted(_WRONG))
@pytest.mark.parametrize("name", _torch_methods(arguments.NO_ARGUMENTS | arguments.KEYWORDS_ONLY))
def test_a_method_given_arguments_it_does_not_take_raises_torch_s_type_error(name, wrong):
    """torch's methods that take no argument (``x.angle(1.5)`` computed here) or keywords only (``x.float(1)``)."""
    args, kwargs = _WRONG[wrong]

    def call(lib):
        x = (torch.arange(6.0).reshape(2, 3) if lib is torch else dg.from_array(np.arange(6.0).reshape(2, 3),
                                                                               chunks=1)) + 1
        try:
            getattr(x, name)(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - compared
            return type(e), str(e).split("\n")[0]
        return "ok"
    theirs = call(torch)
    if theirs == "ok" or theirs[0] is not TypeError:
        return  # (a keyword a keyword-only method takes, or a refusal of another kind: not this table's)
    ours = call(dg)
    if name in arguments.KEYWORDS_ONLY and kwargs:
        assert ours[0] is TypeError  # (Python's words for an unexpected keyword: the op's own)
    else:
        assert ours == theirs


@pytest.mark.parametrize("keepdim", [1.5, 1, np.True_, "a", None, True])
@pytest.mark.parametrize("by", ["position", "keyword"])
@pytest.mark.parametrize("name", _torch_methods(arguments.KEEPDIM))
def test_keepdim_is_a_python_bool_as_torch_s(name, by, keepdim):
    """``x.argmax(0, 1.5)`` computed here; torch's parser refuses all but a bool, with its words."""
    def call(lib):
        x = torch.arange(6.0).reshape(2, 3) if lib is torch else dg.from_array(np.arange(6.0, dtype=np.float32).reshape(
            2, 3), chunks=1)
        try:
            out = getattr(x, name)(0, keepdim) if by == "position" else getattr(x, name)(0, keepdim=keepdim)
        except Exception as e:  # noqa: BLE001 - compared
            return type(e), str(e).split("\n")[0]
        out = out[0] if isinstance(out, tuple) else out
        return np.asarray(out.detach().numpy()).tolist()
    assert call(dg) == call(torch)
