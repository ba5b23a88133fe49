"""The whole op gradcheck suite on StrictArray chunks, which fail like cupy does: code that would
copy a chunk to the host, or mix host arrays into device chunks, fails here on CPU."""
import dask
import dask.array as da
import numpy as np
import pytest

import daskgrad as dg
from daskgrad.testing import gradcheck

from strict_array import StrictArray, register, to_strict
from op_specs import SPECS, Cube, cube_block, cube_block_vjp, same_device, spec_id


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
@pytest.mark.parametrize("spec", SPECS, ids=spec_id)
def test_op_gradients_on_strict_chunks(spec, chunking, rng):
    inputs = [to_strict(t) for t in spec.inputs(chunking, rng)]
    assert gradcheck(spec.fn, inputs, eps=1e-6, atol=1e-6, rtol=1e-5)
    out = spec.fn(*inputs)
    assert isinstance(out.array._meta, StrictArray)
    out.sum().backward()
    for t in inputs:
        assert isinstance(t.grad.array._meta, StrictArray) and t.grad.chunks == t.chunks
        assert isinstance(t.grad.array.blocks[0].compute(), StrictArray)


def test_factories_create_chunks_of_the_requested_backend():
    register()
    for make in (lambda: dg.ones(4, 3, chunks=2, device="strict"), lambda: dg.zeros(5, device="strict"),
                 lambda: dg.randn(6, chunks=3, device="strict"), lambda: dg.arange(5, device="strict"),
                 lambda: dg.full((2, 2), 1.5, device="strict")):
        t = make()
        assert isinstance(t.array._meta, StrictArray), t
        assert isinstance(t.array.blocks[0].compute(), StrictArray)


def _backend_of(x):
    return "strict" if isinstance(x.array._meta, StrictArray) else None


DRAWS = {  # each on a (7, 5) float64 tensor in chunks (3, 2): a draw from daskgrad's generator
    "rand": lambda x: dg.rand(7, 5, chunks=(3, 2), dtype=dg.float64, device=_backend_of(x)),
    "randn": lambda x: dg.randn(7, 5, chunks=(3, 2), dtype=dg.float64, device=_backend_of(x)),
    "rand_like": dg.rand_like, "randn_like": dg.randn_like,
    "normal_": lambda x: (x * 1).normal_(2, 3), "random_": lambda x: (x * 1).random_(0, 9),
    "bernoulli_p": lambda x: (x * 0).bernoulli_(x / 2), "bernoulli": lambda x: (x / 2).bernoulli(),
    "dropout": lambda x: dg.nn.functional.dropout(x, 0.4), "complex": lambda x: (x * 1j).normal_(),
}


@pytest.mark.parametrize("draw", list(DRAWS))
def test_draws_make_chunks_of_the_tensor_s_type_with_the_values_of_numpy_chunks(draw):
    """The draws come from NumPy's generator for a chunk type without its own (cupy's draws on the device),
    copied next to the chunk: strict chunks, and the values the same seed draws for NumPy chunks."""
    register()
    base = dg.from_array(np.random.default_rng(0).uniform(0, 1, (7, 5)), chunks=(3, 2))
    strict = to_strict(base)
    dg.manual_seed(4)
    want = DRAWS[draw](base).numpy()
    dg.manual_seed(4)
    out = DRAWS[draw](strict)
    assert isinstance(out.array._meta, StrictArray) and out.chunks == base.chunks
    assert isinstance(out.array.blocks[1, 2].compute(), StrictArray)
    np.testing.assert_array_equal(out.array.compute().get(), want)


def _api_flows(make):
    """The autograd API beyond single ops, on tensors from ``make(values, chunks)``; returns checks."""
    from daskgrad import functional as F

    rng = np.random.default_rng(1)
    x = make(rng.uniform(0.5, 2, (6, 4)), (4, 3))
    w = make(rng.uniform(-1, 1, (4,)), 3)
    x.requires_grad_(), w.requires_grad_()
    # accumulation, gradient=v, retain_grad, hooks, retain_graph
    h = dg.tanh(x @ w)
    h.retain_grad()
    h.register_hook(lambda g: g * 2)
    h.backward(dg.ones_like(h), retain_graph=True)
    h.backward(dg.ones_like(h))
    # optimiser step and zero_ under no_grad, in-place ops
    with dg.no_grad():
        w -= 0.1 * w.grad
        x.mul_(1.0)
    w.grad.zero_()
    x.grad = None
    # custom Function and map_blocks with a chunk VJP
    y = Cube.apply(x) + dg.map_blocks(cube_block, x, vjp=cube_block_vjp)
    y.sum().backward()
    # functional API, double backward
    jac = F.jacobian(lambda t: dg.exp(t) * 2, w.detach())
    hv = F.hvp(lambda t: (t ** 3).sum(), w.detach(), dg.ones_like(w))[1]
    jv = F.jvp(lambda t: dg.sin(t), w.detach(), dg.ones_like(w))[1]
    (g,) = dg.grad((x ** 3).sum(), x, create_graph=True)
    with dg.detect_anomaly():
        g.sum().backward()
    assert float(dg.sum(x.detach())) > 0 and x.detach().max().item() > 0
    # setitem with a scalar and a tensor, boolean masks, integer targets
    z = x * 1.0
    z[0] = 0.0
    z[1:3] = w * 2
    loss = dg.cross_entropy(z, same_device(dg.tensor(np.array([0, 1, 2, 3, 0, 1])), x))
    loss.backward()
    return [x.grad, w.grad, h.grad, jac, hv, jv]


def _is_strict(t):
    return isinstance(t.array._meta, StrictArray)


@pytest.mark.filterwarnings("ignore:Anomaly Detection has been enabled")
def test_autograd_api_beyond_single_ops_keeps_chunks_on_the_device():
    """Hooks, retain_grad, accumulation, optimiser steps, Function, map_blocks, functional, double
    backward, setitem and losses with integer targets: same numbers on strict chunks as on NumPy,
    and every result on strict chunks."""
    host = _api_flows(lambda v, c: dg.from_array(v, chunks=c))
    device = _api_flows(lambda v, c: to_strict(dg.from_array(v, chunks=c)))
    for a, b in zip(host, device):
        assert _is_strict(b), b
        blocks = dask.compute(*b.array.to_delayed().ravel())
        assert all(isinstance(blk, StrictArray) for blk in blocks)
        np.testing.assert_allclose(a.numpy(), b.array.map_blocks(lambda s: s.get(), meta=np.empty(0)).compute())
