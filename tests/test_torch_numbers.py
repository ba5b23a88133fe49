"""Numbers and dtypes torch 2.13 computes, where daskgrad computed others silently (found by a differential
fuzz of Tensor methods against torch): each case runs one program in both libraries, on one chunk and on
chunks of one and two elements, and compares the dtype and the values bit for bit (or torch's error)."""
from __future__ import annotations

import numpy as np
import pytest

import daskgrad as dg

torch = pytest.importorskip("torch")


def _t(lib, values, dtype, chunks):
    v = np.array(values, dtype=dtype)
    return torch.from_numpy(v) if lib is torch else dg.from_array(v, chunks=chunks)


CASES = {
    # integer division rounded toward zero is exact, not through float64 (past 2**53 it rounded)
    "int64 div trunc": lambda L, T: T([2**62 + 1, -(2**62 + 1), 2**63 - 1, -7, 7], "int64").div(
        3, rounding_mode="trunc"),
    "int64 div_ trunc by a tensor": lambda L, T: T([2**62 + 1, -7, 7, -6], "int64").div_(
        T([3, 2, -2, 3], "int64"), rounding_mode="trunc"),
    "int32 div trunc, negative divisor": lambda L, T: T([7, -7, 6, -6, 0], "int32").div(-4, rounding_mode="trunc"),
    # add/sub's alpha * other in the result's dtype, not other's
    "int64 add int8 alpha": lambda L, T: T([1, 2], "int64").add(T([100, 2], "int8"), alpha=3),
    "int32 add_ a NumPy uint8 alpha": lambda L, T: T([1, 2], "int32").add_(np.uint8(200), alpha=2),
    "uint8 add bool alpha": lambda L, T: T([1, 2], "uint8").add(T([True, False], "bool"), alpha=2),
    "int16 sub int8 alpha": lambda L, T: T([1, 2], "int16").sub(T([100, -100], "int8"), alpha=3),
    # prod, cumsum, cumprod, nansum in the dtype asked for (NumPy's are int64 for small integers)
    "prod int8": lambda L, T: T([100, 100], "int32").prod(dtype=L.int8),
    "prod bool": lambda L, T: T([2, 3], "int32").prod(dtype=L.bool),
    "cumsum int8": lambda L, T: T([100, 100, 100], "int32").cumsum(0, dtype=L.int8),
    "cumprod int16": lambda L, T: T([300, 300, 2], "int32").cumprod(0, dtype=L.int16),
    "nansum int8": lambda L, T: T([100, 100], "int32").nansum(dtype=L.int8),
    # float16 reductions accumulate in float32 and round once
    "float16 sum over chunks": lambda L, T: T([60000, 60000, -60000], "float16").sum(),
    "float16 cumsum of 3000 ones": lambda L, T: T([1.0] * 3000, "float16").cumsum(0)[-1:],
    "float16 norm": lambda L, T: T([300, 300], "float16").norm(),
    "float16 mean": lambda L, T: T([60000, 60000, 1000], "float16").mean(),
    "float16 var": lambda L, T: T([300, -300, 1], "float16").var(),
    "float16 std": lambda L, T: T([300, -300, 1, 7], "float16").std(),
    "float16 logsumexp": lambda L, T: T([10, 10.5, 11, -3], "float16").logsumexp(0),
    # addcmul of complex64 stays complex64
    "complex64 addcmul": lambda L, T: T([1j, 2], "complex64").addcmul(T([1j, 1], "complex64"),
                                                                      T([1j, 3j], "complex64")),
    # angle of a real NaN is NaN
    "angle of NaN": lambda L, T: T([float("nan"), -1.0, 0.0, -0.0, 2.0], "float32").angle(),
    # unary plus, and torch's refusal of it for bools; any/all over dim 0 of a 0-d tensor
    "unary plus": lambda L, T: +T([1, 2], "int32"),
    "unary plus of bool": lambda L, T: +T([True], "bool"),
    "negation of bool": lambda L, T: -T([True], "bool"),
    # a number converted to the dtype is range-checked, NumPy numbers too (they wrapped, or NaN became 0)
    "int8 where 2**40": lambda L, T: T([1, 2], "int8").where(T([True, False], "bool"), 2**40),
    "int8 where 100": lambda L, T: T([1, 2], "int8").where(T([True, False], "bool"), 100),
    "int16 fill_ NumPy NaN": lambda L, T: T([1, 2], "int16").fill_(np.float32("nan")),
    "int8 clamp_max NumPy 300": lambda L, T: T([1, 2], "int8").clamp_max(np.int16(300)),
    "int32 addcmul value 2**40": lambda L, T: T([1, 2], "int32").addcmul(T([1, 1], "int32"), T([1, 1], "int32"),
                                                                        value=2**40),
    "float32 addcmul value 2j": lambda L, T: T([1.0], "float32").addcmul(T([1.0], "float32"), T([1.0], "float32"),
                                                                        value=2j),
    "int64 masked_fill NumPy NaN": lambda L, T: T([1, 2], "int64").masked_fill(T([True, False], "bool"),
                                                                              np.float32("nan")),
    # diff of bools: whether neighbours differ; nan_to_num of complex: each part
    "diff of bool": lambda L, T: T([True, False, False, True], "bool").diff(),
    "complex nan_to_num": lambda L, T: T([complex(1, np.inf), complex(np.inf, 1), complex(np.nan, -np.inf)],
                                         "complex64").nan_to_num(),
    "float16 sum(dtype=float32)": lambda L, T: T([1000, 2000, 3000, 60000, 10000], "float16").sum(dtype=L.float32),
    "int8 0-d cumsum(dtype=int8)": lambda L, T: T(3, "int8").cumsum(0, dtype=L.int8),
    "bool // NumPy int": lambda L, T: T([True, False], "bool") // np.int64(2),
    "bool fmod NumPy float": lambda L, T: T([True, False], "bool").fmod(np.float32(2)),
    "int dist p=2.0": lambda L, T: T([1, 2], "int64").dist(T([3, 4], "int64"), 2.0),
    "float16 where 1e10 (torch: float32's range)": lambda L, T: T([0, 0], "float16").where(T([True, False], "bool"),
                                                                                           1e10),
    "float16 addcmul value 1e10": lambda L, T: T([0, 1], "float16").addcmul(T([1, 1], "float16"),
                                                                          T([1, 1], "float16"), value=1e10),
    "complex logdet": lambda L, T: T([[1 + 1j, 2], [3, 4 - 1j]], "complex128").logdet(),
    # addmm's family converts beta and alpha as torch's: a float truncated for integers (addr refuses it)
    "int64 addmm float beta, alpha": lambda L, T: T([[1, 2], [3, 4]], "int64").addmm(
        T([[1, 2], [3, 4]], "int64"), T([[1, 2], [3, 4]], "int64"), beta=-1.7, alpha=2.9),
    "int64 addmv float alpha": lambda L, T: T([1, 2], "int64").addmv(T([[1, 2], [3, 4]], "int64"), T([1, 2], "int64"),
                                                                     alpha=0.5),
    "int64 baddbmm float beta": lambda L, T: T([[[1, 2], [3, 4]]], "int64").baddbmm(
        T([[[1, 2], [3, 4]]], "int64"), T([[[1, 2], [3, 4]]], "int64"), beta=0.5),
    "int64 addbmm float beta": lambda L, T: T([[1, 2], [3, 4]], "int64").addbmm(
        T([[[1, 2], [3, 4]]], "int64"), T([[[1, 2], [3, 4]]], "int64"), beta=2.5),
    "int64 addr float alpha": lambda L, T: T([[1, 2], [3, 4]], "int64").addr(T([1, 2], "int64"), T([1, 2], "int64"),
                                                                            alpha=0.5),
    "int32 addmm beta 2**40": lambda L, T: T([[1, 2], [3, 4]], "int32").addmm(
        T([[1, 2], [3, 4]], "int32"), T([[1, 2], [3, 4]], "int32"), beta=2**40),
    "float32 addmm complex beta": lambda L, T: T([[1, 2], [3, 4]], "float32").addmm(
        T([[1, 2], [3, 4]], "float32"), T([[1, 2], [3, 4]], "float32"), beta=1j),
    # a complex64 value out of float32's range is refused (it gave NaNs)
    "complex64 addcmul value 1e40": lambda L, T: T([1j, 2], "complex64").addcmul(
        T([1j, 1], "complex64"), T([1j, 3j], "complex64"), value=1e40),
    "complex64 addcdiv value 1e39j": lambda L, T: T([1j, 2], "complex64").addcdiv(
        T([1j, 1], "complex64"), T([1j, 3j], "complex64"), value=1e39j),
    "float32 addcdiv value 1e39": lambda L, T: T([1, 2], "float32").addcdiv(T([1, 1], "float32"),
                                                                          T([1, 3], "float32"), value=1e39),
    # float16 round(decimals=) in float32, rounded once (as float16 it overflowed: 1000.5 * 100)
    "float16 round(decimals=2)": lambda L, T: T([1.2345, 0.005, 65.432, 1000.5], "float16").round(decimals=2),
    "float16 round(decimals=5)": lambda L, T: T([1.2345, 0.0051, 60000], "float16").round(decimals=5),
    "float16 round(decimals=-5)": lambda L, T: T([1.2345, 60000], "float16").round(decimals=-5),
    # complex logsumexp shifts by the max real part: the phase is the sum's
    "complex logsumexp": lambda L, T: T([[1 + 2j, 2 - 3j], [1j, 3]], "complex128").logsumexp(1),
    # bincount of float32 weights: float32, summed in order
    "bincount float32 weights": lambda L, T: T([0, 0, 0, 0, 1, 3], "int64").bincount(
        T([1e8, 1, 1, 1, 3, 0.5], "float32")),
    "bincount float16 weights": lambda L, T: T([0, 1, 1], "int64").bincount(T([0.5, 1, 2], "float16")),
    "bincount empty, weights": lambda L, T: T([], "int64").bincount(T([], "float32"), minlength=2),
    "bincount of a negative value": lambda L, T: T([0, -1, 2], "int64").bincount(T([1, 1, 1], "float32")),
    "bincount of a negative value, no weights": lambda L, T: T([0, 2, -1], "int32").bincount(),
    # isclose of two dtypes is refused, as torch's (it promoted)
    "isclose float32, float64": lambda L, T: T([1, 2], "float32").isclose(T([1, 2.0000001], "float64")),
    "isclose int64, float32": lambda L, T: T([1, 2], "int64").isclose(T([1, 2], "float32")),
    # angle of complex numbers with infinite parts (x * -1j made NaNs) and of a negative zero imaginary part
    "angle of complex infinities": lambda L, T: T([complex(np.inf, 0), complex(-np.inf, 1), complex(np.inf, np.inf),
                                                  complex(-np.inf, -np.inf), complex(1, np.inf), complex(-1, -0.0),
                                                  complex(np.nan, 1)], "complex64").angle(),
    # a NumPy bool is a float to torch's Scalar (it was a bool here: int32 + np.True_ was int32)
    "int32 + NumPy True": lambda L, T: T([1, 2], "int32") + np.True_,
    "bool + NumPy True": lambda L, T: T([True, False], "bool") + np.True_,
    "float64 - NumPy True": lambda L, T: T([1.5, 2], "float64") - np.True_,
    "int64 // NumPy True": lambda L, T: T([3, -2], "int64") // np.True_,
    "uint8 mul NumPy False": lambda L, T: T([3, 2], "uint8").mul(np.False_),
    "int32 & NumPy True": lambda L, T: T([3, 2], "int32") & np.True_,
    "int32 < NumPy True": lambda L, T: T([0, 2], "int32") < np.True_,
    # a Python int is torch's Scalar: an int64 or a uint64 (2**70 was taken as a float)
    "float64 fill_ 2**70": lambda L, T: T([1, 2], "float64").fill_(2**70),
    "float64 clamp(max=-2**70)": lambda L, T: T([1, 2], "float64").clamp(max=-2**70),
    "float32 masked_fill -2**63 - 5": lambda L, T: T([1, 2], "float32").masked_fill(T([True, False], "bool"),
                                                                                   -2**63 - 5),
    "float64 addcmul value 2**63 + 5": lambda L, T: T([1, 2], "float64").addcmul(T([1, 2], "float64"),
                                                                               T([1, 2], "float64"), value=2**63 + 5),
    "float64 add alpha 2**63 + 5": lambda L, T: T([1, 2], "float64").add(T([1, 2], "float64"), alpha=2**63 + 5),
    "int64 addcdiv value 2**70": lambda L, T: T([1, 2], "int64").addcdiv(T([1, 2], "int64"), T([1, 2], "int64"),
                                                                        value=2**70),
    "any(0) of 0-d": lambda L, T: T(True, "bool").any(0),
    "all(-1) of 0-d": lambda L, T: T(False, "bool").all(-1),
}


@pytest.mark.parametrize("chunks", [-1, 1, 2], ids=str)
@pytest.mark.parametrize("case", CASES)
def test_numbers_and_dtypes_are_torchs(case, chunks):
    results = []
    for lib in (torch, dg):
        try:
            with np.errstate(all="ignore"):
                out = CASES[case](lib, lambda v, d: _t(lib, v, d, chunks))
            values = out.detach().numpy() if lib is torch else out.numpy()
            results.append((str(out.dtype).replace("torch.", ""), values))
        except Exception as e:  # noqa: BLE001 - compared below
            results.append((type(e).__name__, str(e)))
    (dtype_t, vt), (dtype_d, vd) = results
    assert dtype_d == dtype_t, (results)
    if isinstance(vt, str):
        assert vd == vt
    else:
        np.testing.assert_array_equal(vd, vt)


def test_float16_sum_gradient_is_torchs():
    v = np.array([60000, 60000, -60000], dtype=np.float16)
    t = torch.from_numpy(v.copy()).requires_grad_()
    d = dg.from_array(v.copy(), chunks=1, requires_grad=True)
    t.sum().backward()
    d.sum().backward()
    assert d.grad.dtype == np.float16
    np.testing.assert_array_equal(d.grad.numpy(), t.grad.numpy())


def test_module_level_add_with_a_number_first_and_alpha_scales_the_second():
    # (NumPy's spelling a + alpha * b: the operands are swapped only for alpha 1, where torch's kernel reads the
    # tensor first)
    np.testing.assert_array_equal(dg.add(2.0, dg.tensor([1.0, 2.0]), alpha=3).numpy(), [5.0, 8.0])
    np.testing.assert_array_equal(dg.add(2.0, dg.tensor([1 + 1j, 2]), alpha=3).numpy(), [5 + 3j, 8])


def test_module_level_fmax_of_complex_keeps_numpys_order():
    z = np.array([1 + 1j, 2 - 1j, 1 + 2j])
    w = np.array([1 + 2j, 2 - 2j, 0 + 9j])
    np.testing.assert_array_equal(dg.fmax(dg.from_array(z), dg.from_array(w)).numpy(), np.fmax(z, w))


def test_module_level_bincount_keeps_numpys_float64():
    x, w = np.array([0, 1, 1]), np.array([0.5, 1, 2], dtype=np.float32)
    assert dg.bincount(dg.from_array(x, chunks=1), dg.from_array(w, chunks=1)).numpy().dtype == np.bincount(x, w).dtype


@pytest.mark.parametrize("convert", [float, int, complex])
def test_python_numbers_of_a_complex_0d_tensor_are_torchs(convert):
    # (the real part where the imaginary part is 0, else torch's overflow error; complex() computes)
    for v in (1 + 2j, 3 + 0j, -2.7 + 0j, complex(np.inf, 0), complex(np.nan, 0), complex(1e30, 0)):
        results = []
        for lib in (torch, dg):
            t = torch.from_numpy(np.array(v)) if lib is torch else dg.from_array(np.array(v), chunks=1)
            try:
                results.append(repr(convert(t)))
            except Exception as e:  # noqa: BLE001 - compared
                results.append((type(e).__name__, str(e)))
        assert results[1] == results[0], v
