"""How a Tensor shows itself: torch's text (values included when they are few and already in memory,
never computed for a repr) and Jupyter's HTML view (dask's chunk table with the autograd fields).
torch's own repr is the oracle of the text."""
import re

import dask
import dask.array as da
import numpy as np
import pytest

import daskgrad as dg

torch = pytest.importorskip("torch")

_RNG = np.random.default_rng(0)
CASES = {
    "ints": [1, 2, 3], "negative ints": [-5, 100, 7], "bools": [True, False], "int32": np.array([1, 2], np.int32),
    "uint8": np.array([255, 0], np.uint8), "big int64": np.array([2**40, 3]),
    "integral floats": [1.0, 2.0], "floats": [0.1, 2.5, -3.25], "mixed magnitudes": [1e-5, 1.0, 1e5],
    "over 1e8": [1e9, 1.0], "integral over 1e8": [1e10, 2.0], "ratio 1000": [0.5, 501.0], "at 1e-4": [1e-4, 1.0],
    "negative zero": [-0.0, 0.0, 1.0], "only negative zero": [-0.0], "nan and inf": [np.nan, np.inf, -np.inf, 1.5],
    "nan and an int": [np.nan, 1.0], "zeros": [0.0, 0.0], "only nan": [np.nan],
    "2-d float64": np.arange(12.0).reshape(3, 4), "3-d": np.arange(24).reshape(2, 3, 4) / 7,
    "0-d float": 3.5, "0-d int": 7, "0-d tiny float64": np.float64(1e-7), "0-d negative zero": np.array(-0.0),
    "wrapped lines": list(np.linspace(-1, 1, 100)), "1000 elements": np.arange(1000.0),
    "float16": np.ones(30, np.float16) / 3, "complex": np.array([1 + 2j, 3.5 - 1e-6j]),
    "normal 2-d": _RNG.standard_normal((5, 7)), "3-d scaled": _RNG.standard_normal((4, 3, 2)) * 1e4,
    "int columns": np.arange(30).reshape(5, 6) * 1000000, "float32 normal": _RNG.standard_normal(40).astype(np.float32),
    "empty": np.zeros((0,)), "empty 2-d int": np.zeros((0, 3), np.int64), "empty 3-d": np.zeros((2, 0, 1), np.float32),
}


def torch_text(t):
    """torch's repr in daskgrad's words: ``daskgrad.float64`` for ``torch.float64``; a suffix that
    torch's shorter dtype name left on the last line may wrap here, so suffix line breaks are ignored."""
    return _unwrap_suffixes(repr(t).replace("torch.", "daskgrad."))


def _unwrap_suffixes(text):
    return re.sub(r",\n {7}(?=[a-z_]+=)", ", ", text)


def _forbid_compute(dsk, keys, **kwargs):
    raise AssertionError("a repr computed the tensor")


def _inexact(data):
    return np.asarray(data).dtype.kind in "fc"


@pytest.mark.parametrize("name,requires_grad", [(name, False) for name in CASES] +
                         [(name, True) for name, data in CASES.items() if _inexact(data)])
def test_repr_of_a_small_tensor_in_memory_is_torchs_with_its_values(name, requires_grad):
    data = CASES[name]
    expected = torch.tensor(data).requires_grad_(requires_grad)
    assert _unwrap_suffixes(repr(dg.tensor(data, requires_grad=requires_grad))) == torch_text(expected)


def test_repr_joins_the_chunks_of_a_chunked_tensor_in_order():
    x = np.arange(20.0).reshape(4, 5) / 3
    assert repr(dg.from_array(x, chunks=(3, 2))) == torch_text(torch.tensor(x))


def test_repr_of_a_gradient_after_backward_and_of_a_persisted_result_shows_values_and_grad_fn():
    x = np.array([[1.0, -2.0], [0.5, 3.0]])
    w, tw = dg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    y, ty = (w * w).persist(), tw * tw
    (y.sum()).backward()
    ty.sum().backward()
    assert repr(w.grad) == torch_text(tw.grad)
    assert repr(y) == torch_text(ty)  # grad_fn=<MulBackward0>, values
    assert repr(dg.nn.Parameter(dg.tensor(x))) == torch_text(torch.nn.Parameter(torch.tensor(x)))
    s, ts = dg.tensor(1.5, requires_grad=True), torch.tensor(1.5, requires_grad=True)  # (its chunk: a NumPy scalar)
    (s * 2).backward()
    (ts * 2).backward()
    assert repr(s.grad) == torch_text(ts.grad) == "tensor(2.)"


def test_repr_of_a_lazy_tensor_is_dasks_summary_and_computes_nothing():
    def boom():
        raise AssertionError("computed")

    never = dg.from_array(da.from_delayed(dask.delayed(boom)(), shape=(3,), dtype=np.float64), requires_grad=True)
    with dask.config.set(scheduler=_forbid_compute):
        assert repr(never) == ("tensor(dask.array<shape=(3,), dtype=float64, chunksize=(3,), "
                               "chunktype=numpy.ndarray>, requires_grad=True)")
        assert repr(never * 2).endswith("grad_fn=<MulBackward0>)")
        assert "&lt;MulBackward0&gt;" in (never * 2)._repr_html_()


def test_repr_of_more_than_1000_elements_is_the_summary_even_in_memory():
    # torch would summarize with "..."; the chunk summary says more about a chunked array
    assert repr(dg.tensor(np.arange(1001.0))).startswith("tensor(dask.array<shape=(1001,)")


def test_html_repr_shows_dasks_chunk_table_and_the_autograd_fields():
    w = dg.from_array(np.ones((4, 6)), chunks=(2, 3), requires_grad=True)
    html = (w * 2)._repr_html_()
    assert w.array._repr_html_() in w._repr_html_()  # dask's table and grid, as dask draws them
    for row in ("grad_fn</th>", "&lt;MulBackward0&gt;", "requires_grad</th>", "is_leaf</th>", "daskgrad.float64",
                "device</th>", "cpu", "Chunk", "Dask graph"):
        assert row in html
    assert "<pre>tensor([[1., 1., 1., 1., 1., 1.]," in w._repr_html_()  # the values, as repr shows them
