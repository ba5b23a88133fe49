"""The whole op gradcheck suite on StrictArray chunks, which fail like cupy does: code that would
copy a chunk to the host, or mix host arrays into device chunks, fails here on CPU."""
import dask.array as da
import numpy as np
import pytest

import daskgrad as dg
from daskgrad.strict import StrictArray, to_strict
from daskgrad.testing import gradcheck

from test_grad_ops import OPS, _inputs


def test_strict_array_refuses_host_conversion_and_host_operands():
    s = StrictArray(np.ones(3))
    with pytest.raises(TypeError, match="Implicit conversion to a NumPy array is not allowed"):
        np.asarray(s)
    with pytest.raises(TypeError, match="Unsupported type"):
        s * np.ones(3)
    assert isinstance(s * np.ones(3, like=s), StrictArray)
    x = to_strict(dg.ones(4, chunks=2))
    with pytest.raises(TypeError, match="Implicit conversion"):
        da.map_blocks(lambda b: np.asarray(b) * 2, x.array, dtype=float).compute()


@pytest.mark.parametrize("chunking", ["uneven", "size1"])
@pytest.mark.parametrize("name", list(OPS))
def test_op_gradients_on_strict_chunks(name, chunking, rng):
    fn, shapes, low, high = OPS[name]
    inputs = [to_strict(t) for t in _inputs(shapes, low, high, chunking, rng)]
    wrapped = _constants_on_strict(fn)
    assert gradcheck(wrapped, inputs, eps=1e-6, atol=1e-6, rtol=1e-5)
    out = wrapped(*inputs)
    assert isinstance(out.array._meta, StrictArray)
    out.sum().backward()
    for t in inputs:
        assert isinstance(t.grad.array._meta, StrictArray) and t.grad.chunks == t.chunks
        assert isinstance(t.grad.array.blocks[0].compute(), StrictArray)


def _constants_on_strict(fn):
    def run(*xs):
        return fn(*xs)
    return run


def test_factories_create_chunks_of_the_requested_backend():
    from daskgrad.strict import register

    register()
    for make in (lambda: dg.ones(4, 3, chunks=2, device="strict"), lambda: dg.zeros(5, device="strict"),
                 lambda: dg.randn(6, chunks=3, device="strict"), lambda: dg.arange(5, device="strict"),
                 lambda: dg.full((2, 2), 1.5, device="strict")):
        t = make()
        assert isinstance(t.array._meta, StrictArray), t
        assert isinstance(t.array.blocks[0].compute(), StrictArray)
