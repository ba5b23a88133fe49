"""Every op: float64 dot-product gradient check over one-chunk, even, uneven and size-1 chunkings,
and the gradient keeps the primal's chunks."""
import numpy as np
import pytest

import daskgrad as dg

from conftest import CHUNKINGS_2D, leaf
from op_specs import BY_NAME, SPECS, Cube, spec_id


@pytest.mark.parametrize("chunking", list(CHUNKINGS_2D))
@pytest.mark.parametrize("spec", SPECS, ids=spec_id)
def test_gradient_matches_central_differences(spec, chunking, rng):
    assert spec.gradchecks(chunking, rng)


@pytest.mark.parametrize("chunking", list(CHUNKINGS_2D))
@pytest.mark.parametrize("name", ["mul", "add_broadcast_row", "sum_axis0", "matmul", "getitem_slice",
                                  "concatenate", "reshape", "transpose", "max_axis", "softmax", "setitem"])
def test_leaf_grad_keeps_shape_dtype_and_chunks(name, chunking, rng):
    spec = BY_NAME[name]
    inputs = spec.inputs(chunking, rng)
    spec.fn(*inputs).sum().backward()
    for t in inputs:
        assert t.grad.shape == t.shape and t.grad.dtype == t.dtype and t.grad.chunks == t.chunks


@pytest.mark.parametrize("spec", SPECS, ids=spec_id)
def test_second_derivatives_match_central_differences(spec, rng):
    """gradgradcheck: every VJP rule is itself differentiable (create_graph) and right."""
    from daskgrad.testing import gradgradcheck

    assert gradgradcheck(spec.fn, spec.inputs("uneven", rng), eps=1e-6, atol=1e-5, rtol=1e-4)


def test_gradgradcheck_catches_a_backward_that_is_not_differentiable():
    from daskgrad.testing import GradcheckError, gradcheck, gradgradcheck

    class DetachedCube(Cube):
        @staticmethod
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            return 3 * a.detach() ** 2 * g  # right first derivative, no second one

    x = leaf(np.linspace(0.5, 2, 6), 4)
    assert gradcheck(DetachedCube.apply, [x])
    assert gradgradcheck(DetachedCube.apply, [x], raise_exception=False) is False
    with pytest.raises(GradcheckError, match="Jacobian mismatch"):
        dg.autograd.gradgradcheck(DetachedCube.apply, [x])
