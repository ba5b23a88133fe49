"""Real GPU tests: run only where cupy can allocate on a device (importing cupy is not enough)."""
import numpy as np
import pytest

import daskgrad as dg

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")
try:
    cupy.zeros(1)
except Exception as exc:  # no device, no driver
    pytest.skip(f"cupy cannot allocate on a GPU here: {exc}", allow_module_level=True)

from test_grad_ops import OPS, _inputs  # noqa: E402


def to_gpu(t):
    return dg.Tensor(t.array.to_backend("cupy"), requires_grad=t.requires_grad)


@pytest.mark.parametrize("name", list(OPS))
def test_op_gradients_on_cupy_chunks_stay_on_the_gpu(name, rng):
    from daskgrad.testing import gradcheck

    fn, shapes, low, high = OPS[name]
    inputs = [to_gpu(t) for t in _inputs(shapes, low, high, "uneven", rng)]
    if name == "cross_entropy":
        pytest.skip("host target constant in the spec")
    assert gradcheck(fn, inputs, eps=1e-6, atol=1e-6, rtol=1e-5)
    fn(*inputs).sum().backward()
    for t in inputs:
        assert t.device == "cuda" and t.grad.device == "cuda"
        assert isinstance(t.grad.array.blocks[0].compute(), cupy.ndarray)


def test_to_cuda_and_back_is_differentiable_and_mixing_devices_raises():
    x = dg.from_array(np.arange(4.0), chunks=2, requires_grad=True)
    y = x.cuda()
    assert y.device == "cuda" and type(y.grad_fn).__name__ == "ToCopyBackward0"
    (y * 2).cpu().sum().backward()
    assert x.grad.device == "cpu"
    np.testing.assert_allclose(x.grad.numpy(), 2)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        y + x
