"""torch's Tensor methods that refuse complex operands refuse them here with torch 2.13's error type and words
(they computed NumPy's answers: ``z < 1`` compared real parts first, ``z.clamp(0, 1)`` clamped the parts,
``z.sort()`` ordered lexicographically); the module-level functions keep NumPy's answers."""
from __future__ import annotations

import numpy as np
import pytest

import daskgrad as dg
from daskgrad.ops.refusals import REFUSED, TENSOR_ONLY

torch = pytest.importorskip("torch")

_BINARY = {"maximum", "minimum", "fmax", "fmin", "hypot", "hypot_", "atan2", "atan2_", "arctan2", "copysign", "xlogy",
           "lt", "le", "gt", "ge", "less", "less_equal", "greater", "greater_equal", "lt_", "le_", "gt_", "ge_",
           "__lt__", "__le__", "__gt__", "__ge__", "remainder", "remainder_", "fmod", "fmod_", "__mod__", "__imod__",
           "__floordiv__", "__ifloordiv__", "floor_divide", "floor_divide_"}
_ARGS = {"clamp": (0, 1), "clip": (0, 1), "clamp_": (0, 1), "clip_": (0, 1), "clamp_min": (0,), "clamp_max": (1,),
         "clamp_min_": (0,), "clamp_max_": (1,), "topk": (1,), "softmax": (-1,), "log_softmax": (-1,),
         "kthvalue": (1,), "quantile": (0.5,), "nanquantile": (0.5,)}


def _error(lib, name, dtype, other):
    values = np.array([[1 + 1j, 2], [3, -1j]], dtype=dtype)
    t = torch.from_numpy(values) if lib is torch else dg.from_array(values, chunks=1)
    if name in _BINARY:
        args = (t if other == "itself" else (other if other != "real" else t.real.clone()),)
    else:
        args = _ARGS.get(name, ())
    try:
        getattr(t, name)(*args)
    except Exception as e:  # noqa: BLE001 - compared
        return type(e), str(e)
    return None


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize("name", sorted(n for n, rules in REFUSED.items() if any(k == "c" for k, _, _ in rules)))
def test_a_method_torch_refuses_for_complex_refuses_with_torchs_words(name, dtype):
    for other in (("itself", 1.5, 2j, "real") if name in _BINARY else (None,)):
        expected = _error(torch, name, dtype, other)
        if expected[0] is TypeError and "must be Tensor" in expected[1]:
            continue  # (a number where torch's method takes tensors only: not this test's)
        assert _error(dg, name, dtype, other) == expected != None  # noqa: E711


def test_a_complex_number_with_a_real_tensor_is_refused_as_torchs():
    for name in ("lt", "maximum", "__ge__", "fmod"):
        for lib in (torch, dg):
            x = lib.ones(3) if lib is torch else dg.ones(3)
            with pytest.raises((RuntimeError, NotImplementedError, TypeError)) as e:
                getattr(x, name)(torch.tensor(1j) if lib is torch else dg.tensor(1j))
            if lib is torch:
                expected = (e.type, str(e.value))
        assert (e.type, str(e.value)) == expected


def test_softmax_over_another_dim_names_torchs_kernel():
    for lib in (torch, dg):
        z = lib.tensor(np.array([[1 + 1j, 2], [3, 4]]))
        with pytest.raises(NotImplementedError, match="\"softmax_kernel_impl\" not implemented for 'ComplexDouble'"):
            z.softmax(0)


def test_module_level_functions_keep_numpys_answers_for_complex():
    z = np.array([2 + 1j, 1 + 3j, 2 - 1j])
    d = dg.from_array(z, chunks=2)
    np.testing.assert_array_equal(dg.sort(d).numpy(), np.sort(z))
    np.testing.assert_array_equal(dg.maximum(d, 2).numpy(), np.maximum(z, 2))
    np.testing.assert_array_equal(dg.less(d, 2 + 0j).numpy(), np.less(z, 2 + 0j))
    np.testing.assert_array_equal(dg.sign(d).numpy(), np.sign(z))
    np.testing.assert_array_equal((d.real < 2).numpy(), z.real < 2)  # (real tensors: the methods as before)


@pytest.mark.parametrize("name", sorted(TENSOR_ONLY))
def test_a_number_where_torchs_method_takes_a_tensor_raises_torchs_type_error(name):
    for number in (2, 1.5, np.float64(2.0)):
        errors = []
        for lib in (torch, dg):
            x = lib.tensor(np.array([1.0, 2.0]))
            with pytest.raises(TypeError) as e:
                getattr(x, name)(number)
            errors.append(str(e.value))
        assert errors[1] == errors[0]
    x = dg.tensor(np.array([1.0, 2.0]))
    getattr(x, name)(dg.tensor(np.array([1.0, 3.0])) if name != "masked_select" else x > 1)  # (a tensor: computes)


_INTEGRAL_ARGS = {"quantile": (0.5,), "nanquantile": (0.5,), "topk": (1,), "kthvalue": (1,)}


_WITH_OPERAND = {"__floordiv__", "floor_divide", "__mod__", "__pow__", "pow", "pow_", "__rpow__", "__rmod__",
                 "__rfloordiv__", "matmul", "mm", "inner", "logaddexp", "logaddexp2", "nextafter", "dist", "__matmul__",
                 "__rmatmul__", "dot", "vdot", "mv", "bmm"}


@pytest.mark.parametrize("dtype", ["bool", "int64", "int32", "uint8"])
@pytest.mark.parametrize("name", sorted(n for n, rules in REFUSED.items() if any(k != "c" for k, _, _ in rules)))
def test_a_method_torch_refuses_for_integers_or_bools_refuses_with_torchs_words(name, dtype):
    values = np.array([[1, 0], [1, 1]], dtype=dtype) if dtype == "bool" else np.array([[1, 2], [3, 0]], dtype=dtype)
    results = []
    for lib in (torch, dg):
        t = torch.from_numpy(values.copy()) if lib is torch else dg.from_array(values.copy(), chunks=1)
        args = (t,) if name in _BINARY or name in _WITH_OPERAND else _INTEGRAL_ARGS.get(name, ())
        try:
            out = getattr(t, name)(*args)
            if lib is dg:  # (an integer division by zero raises torch's error when computed)
                for v in (out if isinstance(out, tuple) else (out,)):
                    v.numpy()
            results.append(None)
        except Exception as e:  # noqa: BLE001 - compared
            results.append((type(e), str(e)))
    assert results[1] == results[0]


@pytest.mark.parametrize("name", ["matmul", "__matmul__", "__rmatmul__", "dot", "vdot", "inner", "mv", "mm", "bmm"])
def test_a_product_of_bools_names_torchs_kernel_by_the_dims(name):
    shapes = {1: (2,), 2: (2, 2), 3: (1, 2, 2)}
    for a, b in [(1, 1), (2, 1), (1, 2), (2, 2), (3, 3), (3, 1), (1, 3), (3, 2)]:
        results = []
        for lib in (torch, dg):
            x, y = (lib.tensor(np.ones(shapes[n], bool)) for n in (a, b))
            try:
                getattr(x, name)(y)
                results.append(None)
            except Exception as e:  # noqa: BLE001 - compared
                results.append((type(e), str(e)))
        assert results[1] == results[0], (a, b)


def test_keywords_of_a_tensor_only_method_are_checked_as_torchs():
    for lib in (torch, dg):
        x = lib.tensor(np.array([1.0, 2.0]))
        with pytest.raises(TypeError, match=r"^maximum\(\): argument 'other' must be Tensor, not int$"):
            x.maximum(other=2)
        with pytest.raises(TypeError, match=r"^dot\(\): argument 'tensor' must be Tensor, not float$"):
            x.dot(tensor=2.5)
        with pytest.raises(RuntimeError, match="1D tensors expected, but got 2D and 2D tensors"):
            lib.tensor(np.ones((2, 2))).vdot(lib.tensor(np.ones((2, 2))))


def test_integer_and_bool_operands_that_promote_to_float_still_compute():
    b = dg.tensor(np.array([True, False]))
    assert (b // 2).dtype == np.int64 and (b % 2.5).dtype == np.float32 and (b ** 2.0).dtype == np.float32
    assert dg.tensor(np.array([3, 4])).float().norm().item() == 5.0


@pytest.mark.parametrize("dtype", ["int32", "bool", "float16"])
def test_bitwise_with_a_float_raises_torchs_error_in_torchs_order(dtype):
    # (in place, the cast of the result type first; out of place, the kernel named with the result type)
    calls = [lambda t: t.__iand__(0.5), lambda t: t.__ior__(1.5), lambda t: t.__ixor__(np.float32(2.5)),
             lambda t: t.__ilshift__(1.5), lambda t: t.bitwise_and_(0.5), lambda t: t & 0.5, lambda t: 0.5 | t,
             lambda t: t ^ np.float64(1.5), lambda t: t.bitwise_or_(t.float()), lambda t: t.__iand__(1)]
    for i, call in enumerate(calls):
        results = []
        for lib in (torch, dg):
            t = lib.tensor(np.array([1, 0], dtype=dtype))
            try:
                call(t)
                results.append(None)
            except Exception as e:  # noqa: BLE001 - compared
                results.append((type(e), str(e)))
        assert results[1] == results[0], i


def test_complex_nan_to_num_under_autograd_is_refused_as_torchs():
    v = np.array([1 + 1j, complex(np.inf, 1)])
    for lib in (torch, dg):
        x = lib.tensor(v, requires_grad=True) if lib is torch else dg.tensor(v, requires_grad=True)
        with pytest.raises(RuntimeError, match="^nan_to_num does not support automatic differentiation for outputs "
                                               "with complex dtype.$"):
            x.nan_to_num()
        with lib.no_grad():
            assert x.nan_to_num().numpy()[1] == complex(np.finfo(np.float64).max, 1)
