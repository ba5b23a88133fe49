"""Complex ``+`` and ``-`` as torch 2.13 computes them, bit for bit: its kernel is ``a + (alpha + 0j) * b``
(``alpha`` -1 for ``-``), so an infinite part of ``b`` makes the other part NaN (``z + inf`` is
``inf+nanj``) and signed zeros follow the product; a sum of parts (NumPy's) differs in about a third of the
special values.  Torch is the oracle over every pair of special values, with tensors and numbers on either
side; gradients with a complex ``alpha`` are conjugated, as torch's."""
from __future__ import annotations

import numpy as np
import pytest

import daskgrad as dg

torch = pytest.importorskip("torch")

_SPECIAL = [0.0, -0.0, 1.0, -2.5, np.inf, -np.inf, np.nan]
_VALUES = np.array([complex(r, i) for r in _SPECIAL for i in _SPECIAL])
A, B = (v.ravel() for v in np.meshgrid(_VALUES, _VALUES))

TENSOR_OPS = {"a + b": lambda x, y: x + y, "a - b": lambda x, y: x - y, "add alpha 2": lambda x, y: x.add(y, alpha=2),
              "sub alpha -3": lambda x, y: x.sub(y, alpha=-3), "sub alpha 1-2j": lambda x, y: x.sub(y, alpha=1 - 2j),
              "a += b": lambda x, y: x.__iadd__(y), "a -= b": lambda x, y: x.__isub__(y)}
NUMBERS = [complex(np.inf, 0), np.inf, -np.inf, complex(0, np.inf), -0.0, complex(-0.0, -0.0), 1j, 2]
NUMBER_OPS = {"a + s": lambda x, s: x + s, "a - s": lambda x, s: x - s, "s + a": lambda x, s: s + x,
              "s - a": lambda x, s: s - x, "add(s, alpha=2)": lambda x, s: x.add(s, alpha=2)}


def _same_bits(x, y):
    """Equal bits, or NaN in both (torch does not promise a NaN's sign or payload)."""
    x, y = np.ascontiguousarray(x), np.ascontiguousarray(y)
    parts_x, parts_y = x.view(x.real.dtype), y.view(y.real.dtype)
    bits = parts_x.view(f"u{parts_x.itemsize}") == parts_y.view(f"u{parts_y.itemsize}")
    return bool(np.all(bits | (np.isnan(parts_x) & np.isnan(parts_y))))


@pytest.mark.parametrize("dtype", ["complex128", "complex64"])
@pytest.mark.parametrize("op", TENSOR_OPS)
def test_complex_add_and_sub_of_tensors_are_torchs_bit_for_bit(op, dtype):
    a, b = A.astype(dtype), B.astype(dtype)
    with np.errstate(all="ignore"):
        expected = TENSOR_OPS[op](torch.from_numpy(a.copy()), torch.from_numpy(b.copy())).numpy()
        got = TENSOR_OPS[op](dg.from_array(a.copy(), chunks=50), dg.from_array(b.copy(), chunks=70)).numpy()
    assert got.dtype == expected.dtype and _same_bits(got, expected)


@pytest.mark.parametrize("dtype", ["complex128", "complex64", "float64"])
@pytest.mark.parametrize("op", NUMBER_OPS)
def test_complex_add_and_sub_with_numbers_are_torchs_bit_for_bit(op, dtype):
    a = A.astype(dtype) if dtype != "float64" else np.array(_SPECIAL)
    for s in NUMBERS:
        with np.errstate(all="ignore"):
            expected = NUMBER_OPS[op](torch.from_numpy(a.copy()), s).numpy()
            got = NUMBER_OPS[op](dg.from_array(a.copy(), chunks=3), s).numpy()
        assert got.dtype == expected.dtype and _same_bits(got, expected), s


def test_z_plus_inf_is_torchs():
    z = dg.from_array(np.array([1 + 2j]))
    assert str((z + float("inf")).numpy()[0]) == "(inf+nanj)"  # (torch's; NumPy's sum of parts: inf+2j)


@pytest.mark.parametrize("alpha", [1, -2.5, 1 - 2j])
def test_gradients_of_complex_add_and_sub_with_alpha_are_torchs(alpha):
    rng = np.random.default_rng(3)
    vals = [rng.standard_normal((4, 3)) + 1j * rng.standard_normal((4, 3)) for _ in range(2)]
    real = rng.standard_normal((4, 3))
    grads = []
    for lib in (torch, dg):
        x, y = (lib.tensor(v.copy(), requires_grad=True) for v in vals)
        r = lib.tensor(real.copy(), requires_grad=True)
        out = x.add(y, alpha=alpha) * (2 - 1j) + x.sub(y * 3, alpha=alpha) + (r + 1j * x).sub(r, alpha=2) + (2j - r)
        (out * out.conj()).real.sum().backward()
        grads.append([t.grad.numpy() for t in (x, y, r)])
    for got, expected in zip(grads[1], grads[0]):
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
