"""torch's spellings beside NumPy's: ``dim=``/``keepdim=`` wherever ``axis=``/``keepdims=`` is taken,
``cat``, and dtypes under torch's names."""
import numpy as np
import pytest

import daskgrad as dg
from daskgrad import ops


def test_dim_and_keepdim_are_taken_wherever_axis_and_keepdims_are():
    torch = pytest.importorskip("torch")
    v = np.random.default_rng(0).standard_normal((3, 4))
    x = dg.from_array(v, chunks=2, requires_grad=True)
    t = torch.tensor(v, requires_grad=True)
    for name in ("sum", "mean", "prod", "logsumexp"):
        np.testing.assert_allclose(getattr(dg, name)(x, dim=1, keepdim=True).detach().numpy(),
                                   getattr(torch, name)(t, dim=1, keepdim=True).detach().numpy(), rtol=1e-12)
        np.testing.assert_allclose(getattr(x, name)(dim=0).detach().numpy(),
                                   getattr(t, name)(dim=0).detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(dg.softmax(x, dim=1).detach().numpy(), torch.softmax(t, dim=1).detach().numpy())
    np.testing.assert_allclose(dg.cat([x, x], dim=1).detach().numpy(), torch.cat([t, t], dim=1).detach().numpy())
    dg.sum(x, dim=0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.ones((3, 4)))


def test_every_public_op_taking_axis_takes_dim_too():
    import inspect

    for name in ops.__all__:
        fn = getattr(ops, name)
        params = inspect.signature(fn).parameters  # (functools.wraps shows the NumPy signature)
        if "axis" in params:
            assert hasattr(fn, "__wrapped__") or "dim" in params, name


def test_axis_and_dim_together_are_refused():
    x = dg.ones((2, 3))
    with pytest.raises(TypeError, match="got both 'axis' and 'dim'"):
        dg.sum(x, axis=0, dim=0)


def test_dtypes_under_torch_s_names():
    assert dg.float32 == np.float32 and dg.float == dg.float32 and dg.double == dg.float64
    assert dg.long == np.int64 and dg.int == np.int32 and dg.half == np.float16 and dg.bool == np.bool_
    assert dg.cfloat == np.complex64 and dg.cdouble == np.complex128
    x = dg.zeros(3, dtype=dg.float64)
    assert x.dtype == dg.float64 and dg.tensor([1, 2], dtype=dg.long).dtype == np.int64


def test_numpy_scalars_are_weakly_typed_as_torch_takes_them():
    torch = pytest.importorskip("torch")
    t, tt = dg.ones(2), torch.ones(2)
    for s in (np.float64(2.0), np.int64(3), np.float32(0.5)):
        assert str((t + s).dtype) == str(tt.add(s).dtype).replace("torch.", "")
        assert str((s * t).dtype) == str((s * tt).dtype).replace("torch.", "")


def test_size_is_numpy_s_attribute_and_torch_s_method():
    torch = pytest.importorskip("torch")
    x, t = dg.ones((3, 4)), torch.ones(3, 4)
    assert x.size == np.ones((3, 4)).size == 12 and isinstance(x.size, int)
    assert tuple(x.size()) == tuple(t.size()) and x.size(1) == t.size(1) and x.size(-2) == t.size(-2)


@pytest.mark.parametrize("args, kwargs", [((), {}), ((1,), {}), ((3,), {"dim": 1, "keepdim": True}),
                                          (("fro",), {"dim": (0, 1)}), (("nuc",), {}), ((float("inf"),), {"dim": 0}),
                                          ((2,), {"dim": -1})])
def test_the_norm_method_is_torch_s_while_dg_norm_is_numpy_s(args, kwargs):
    """``x.norm(1)`` of a matrix is torch's vector norm of the elements; ``dg.norm(x, 1)`` NumPy's
    matrix 1-norm: each spelling gives its owner's number, with torch's gradient."""
    torch = pytest.importorskip("torch")
    v = np.random.default_rng(0).standard_normal((4, 5))
    x = dg.from_array(v, chunks=2, requires_grad=True)
    t = torch.tensor(v, requires_grad=True)
    ours, theirs = x.norm(*args, **kwargs), t.norm(*args, **kwargs)
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-12)
    ours.sum().backward()
    theirs.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-10)
    assert dg.norm(dg.ones((3, 3)), 1).item() == np.linalg.norm(np.ones((3, 3)), 1) == 3.0
    assert x.norm(axis=1).shape == (4,)  # NumPy's keyword names work on the method too
