"""Every op: float64 dot-product gradient check over one-chunk, even, uneven and size-1 chunkings,
and the gradient keeps the primal's chunks."""
import numpy as np
import pytest

import daskgrad as dg
from daskgrad.testing import gradcheck

from conftest import CHUNKINGS_2D, leaf

# name -> (function of tensors, input shapes, low, high); inputs are drawn uniform in [low, high]
# with random signs where low < 0.  Shapes use (6, 4) so every chunking above applies.
M = (6, 4)
K33 = np.array([[0.5, -1.0, 0.25], [2.0, 1.0, -0.5], [0.0, 0.75, 1.5]])
K53 = np.arange(15.0).reshape(5, 3) / 10 - 0.6
OPS = {
    "add": (lambda a, b: a + b, [M, M], -2, 2),
    "add_broadcast_row": (lambda a, b: a + b, [M, (4,)], -2, 2),
    "add_broadcast_col": (lambda a, b: a + b, [M, (6, 1)], -2, 2),
    "sub": (lambda a, b: a - b, [M, M], -2, 2),
    "rsub_scalar": (lambda a: 2.0 - a, [M], -2, 2),
    "mul": (lambda a, b: a * b, [M, M], -2, 2),
    "mul_scalar": (lambda a: a * 3.0, [M], -2, 2),
    "truediv": (lambda a, b: a / b, [M, M], 0.5, 2),
    "rtruediv": (lambda a: 2.0 / a, [M], 0.5, 2),
    "pow_scalar": (lambda a: a ** 3, [M], -2, 2),
    "pow_tensor": (lambda a, b: a ** b, [M, M], 0.5, 2),
    "rpow": (lambda a: 2.0 ** a, [M], -2, 2),
    "neg": (lambda a: -a, [M], -2, 2),
    "exp": (dg.exp, [M], -2, 2),
    "log": (dg.log, [M], 0.5, 3),
    "log1p": (dg.log1p, [M], 0.1, 3),
    "expm1": (dg.expm1, [M], -2, 2),
    "sin": (dg.sin, [M], -3, 3),
    "cos": (dg.cos, [M], -3, 3),
    "tan": (dg.tan, [M], -1, 1),
    "tanh": (dg.tanh, [M], -2, 2),
    "sigmoid": (dg.sigmoid, [M], -4, 4),
    "relu": (dg.relu, [M], 0.1, 2),
    "softplus": (dg.softplus, [M], -3, 3),
    "abs": (dg.abs, [M], 0.1, 2),
    "sqrt": (dg.sqrt, [M], 0.5, 3),
    "square": (dg.square, [M], -2, 2),
    "maximum": (dg.maximum, [M, M], -2, 2),
    "minimum": (dg.minimum, [M, M], -2, 2),
    "maximum_scalar": (lambda a: dg.maximum(a, 0.5), [M], -2, 2),
    "minimum_scalar_first": (lambda a: dg.minimum(0.5, a), [M], -2, 2),
    "where": (lambda a, b: dg.where(a > 0, a, b), [M, M], 0.1, 2),
    "where_scalar_branches": (lambda a: dg.where(a > 0, a, 0.0) + dg.where(a < 0.5, 2.0, a), [M], -2, 2),
    "clip": (lambda a: dg.clip(a, -1.0, 1.0), [M], -2, 2),
    "clip_tensor_bounds": (lambda a, lo: dg.clip(a, lo - 1.0, 1.5), [M, M], -2, 2),
    "sign_times": (lambda a, b: dg.sign(a) * b, [M, M], -2, 2),
    "sum": (dg.sum, [M], -2, 2),
    "sum_axis0": (lambda a: dg.sum(a, axis=0), [M], -2, 2),
    "sum_axis1_keep": (lambda a: dg.sum(a, axis=1, keepdims=True), [M], -2, 2),
    "sum_tuple": (lambda a: dg.sum(a, axis=(0, 1)), [M], -2, 2),
    "mean": (dg.mean, [M], -2, 2),
    "mean_axis": (lambda a: dg.mean(a, axis=-1), [M], -2, 2),
    "max": (dg.max, [M], -2, 2),
    "max_axis": (lambda a: dg.max(a, axis=0), [M], -2, 2),
    "min_axis_keep": (lambda a: dg.min(a, axis=1, keepdims=True), [M], -2, 2),
    "prod": (lambda a: dg.prod(a, axis=0), [M], 0.5, 1.5),
    "prod_full": (dg.prod, [M], 0.8, 1.2),
    "var": (lambda a: dg.var(a, axis=0, ddof=1), [M], -2, 2),
    "var_full": (lambda a: dg.var(a), [M], -2, 2),
    "std": (lambda a: dg.std(a, axis=1, ddof=1), [M], -2, 2),
    "logsumexp": (lambda a: dg.logsumexp(a, axis=1), [M], -2, 2),
    "logsumexp_full": (dg.logsumexp, [M], -2, 2),
    "cumsum": (lambda a: dg.cumsum(a, axis=0), [M], -2, 2),
    "cumsum_axis1": (lambda a: dg.cumsum(a, axis=1), [M], -2, 2),
    "norm": (dg.norm, [M], -2, 2),
    "norm_p3_axis1": (lambda a: dg.norm(a, 3, axis=1), [M], -2, 2),
    "norm_p1_5": (lambda a: dg.norm(a, 1.5), [M], 0.5, 2),
    "prod_dtype": (lambda a: dg.prod(a, axis=0, dtype="float64"), [M], 0.5, 2),
    "matmul": (lambda a, b: a @ b, [M, (4, 3)], -2, 2),
    "matmul_mv": (lambda a, b: a @ b, [M, (4,)], -2, 2),
    "matmul_vm": (lambda a, b: a @ b, [(6,), M], -2, 2),
    "matmul_vv": (lambda a, b: a @ b, [(4,), (4,)], -2, 2),
    "matmul_contract_rows": (lambda a, b: a.T @ b, [M, M], -2, 2),
    "matmul_batched": (lambda a, b: dg.reshape(a, (2, 3, 4)) @ b, [M, (4, 2)], -2, 2),
    "dot": (dg.dot, [(4,), (4,)], -2, 2),
    "tensordot": (lambda a, b: dg.tensordot(a, b, axes=([0], [0])), [M, (6, 2)], -2, 2),
    "tensordot_int": (lambda a, b: dg.tensordot(a, b, axes=2), [M, M], -2, 2),
    "einsum_mm": (lambda a, b: dg.einsum("ij,jk->ik", a, b), [M, (4, 3)], -2, 2),
    "einsum_sum_index": (lambda a, b: dg.einsum("ij,ik->k", a, b), [M, (6, 2)], -2, 2),
    "transpose": (lambda a: a.T, [M], -2, 2),
    "permute": (lambda a: dg.transpose(dg.reshape(a, (2, 3, 4)), (2, 0, 1)), [M], -2, 2),
    "reshape": (lambda a: dg.reshape(a, (4, 6)), [M], -2, 2),
    "flatten": (dg.flatten, [M], -2, 2),
    "broadcast_to": (lambda a: dg.broadcast_to(a, (3, 6, 4)), [M], -2, 2),
    "expand_dims": (lambda a: dg.expand_dims(a, 1), [M], -2, 2),
    "squeeze": (lambda a: dg.squeeze(dg.expand_dims(a, 0), 0), [M], -2, 2),
    "concatenate": (lambda a, b: dg.concatenate([a, b], axis=1), [M, M], -2, 2),
    "stack": (lambda a, b: dg.stack([a, b], axis=1), [M, M], -2, 2),
    "split": (lambda a: dg.split(a, [1, 4], axis=0)[1] * 2, [M], -2, 2),
    "pad": (lambda a: dg.pad(a, ((1, 2), (0, 1))), [M], -2, 2),
    "flip": (lambda a: dg.flip(a, 0), [M], -2, 2),
    "roll": (lambda a: dg.roll(a, 2, axis=0), [M], -2, 2),
    "diff": (lambda a: dg.diff(a, axis=0), [M], -2, 2),
    "getitem_slice": (lambda a: a[1:5, ::2], [M], -2, 2),
    "getitem_negative_step": (lambda a: a[::-2, 1:], [M], -2, 2),
    "getitem_int": (lambda a: a[2], [M], -2, 2),
    "getitem_none_ellipsis": (lambda a: a[None, ..., 1], [M], -2, 2),
    "getitem_int_array_repeats": (lambda a: a[np.array([0, 2, 2, 5, 0])], [M], -2, 2),
    "getitem_int_array_axis1": (lambda a: a[:, [3, 3, 1]], [M], -2, 2),
    "getitem_bool_mask": (lambda a: a[a > 0].sum() + 0 * a.sum(), [M], -2, 2),
    "setitem": (lambda a, b: _setitem(a, b), [M, (2, 4)], -2, 2),
    "softmax": (lambda a: dg.softmax(a, axis=1), [M], -2, 2),
    "log_softmax": (lambda a: dg.log_softmax(a, axis=1), [M], -2, 2),
    "cross_entropy": (lambda a: dg.cross_entropy(a, same_device(dg.tensor(np.array([0, 3, 1, 1, 2, 0])), a)),
                      [M], -2, 2),
    "cross_entropy_probs": (lambda a, p: dg.cross_entropy(a, dg.softmax(p, axis=1)), [M, M], -2, 2),
    "mse_loss": (dg.mse_loss, [M, M], -2, 2),
    "bce_with_logits": (dg.binary_cross_entropy_with_logits, [M, M], -2, 2),
    "astype_roundtrip": (lambda a: dg.astype(dg.astype(a, "float32"), "float64") * 0 + a, [M], -2, 2),
    "rechunk": (lambda a: dg.rechunk(a, (2, 4)), [M], -2, 2),
    "erf": (dg.erf, [M], -2.5, 2.5),
    "gelu": (lambda a: dg.nn.functional.gelu(a), [M], -3, 3),
    "gelu_tanh": (lambda a: dg.nn.functional.gelu(a, approximate="tanh"), [M], -3, 3),
    "layer_norm": (lambda a, w: dg.nn.functional.layer_norm(a, 4, w[0], w[1]), [M, M], -2, 2),
    "embedding": (lambda w: dg.embedding(same_device(dg.tensor(np.array([[0, 5, 5], [3, 0, 2]]), chunks=(1, 2)), w), w),
                  [M], -2, 2),
    "dropout": (lambda a: _seeded(lambda: dg.nn.functional.dropout(a, 0.4)), [M], -2, 2),
    # stencils and shifts whose gradients cross chunk boundaries
    "correlate_constant": (lambda a: dg.correlate(a, K33, mode="constant", cval=0.5), [M], -2, 2),
    "correlate_reflect": (lambda a: dg.correlate(a, K33, mode="reflect"), [M], -2, 2),
    "convolve_nearest_even_kernel": (lambda a: dg.convolve(a, K33[:2], mode="nearest"), [M], -2, 2),
    "convolve_wrap_wide_kernel": (lambda a: dg.convolve(a, K53, mode="wrap"), [M], -2, 2),
    "pad_both_axes": (lambda a: dg.pad(a, ((2, 0), (1, 3))) * 1.5, [M], -2, 2),
    "roll_both_axes": (lambda a: dg.roll(a, (-1, 3), axis=(0, 1)), [M], -2, 2),
    "diff_twice_axis1": (lambda a: dg.diff(a, n=2, axis=1), [M], -2, 2),
    "shifted_slices_difference": (lambda a: a[1:, 1:] - a[:-1, :-1], [M], -2, 2),
}


def _seeded(fn):
    dg.manual_seed(0)  # the same masks at every call gradcheck makes
    return fn()


def same_device(t, like):
    """Put a host constant on ``like``'s chunk type (as a user would move targets to the GPU)."""
    from strict_array import StrictArray, to_strict

    return to_strict(t) if isinstance(like.array._meta, StrictArray) else t.to(like.device)


def _setitem(a, b):
    c = a * 1.0
    c[1:3] = b * 2.0
    return c


def _inputs(shapes, low, high, chunking, rng):
    out = []
    for shape in shapes:
        vals = rng.uniform(low, high, size=shape)
        if shape == M:
            chunks = CHUNKINGS_2D[chunking]
        else:
            chunks = {"one": -1, "even": 2, "uneven": tuple(((3, 1) if n == 4 else (n - 1, 1)) if n > 1 else (1,)
                                                               for n in shape), "size1": 1}[chunking]
        out.append(leaf(vals, chunks))
    return out


def gradchecks(case, chunking, rng):
    """A case of the table above (or of test_op_table's) passes the float64 gradcheck."""
    fn, shapes, low, high = case
    return gradcheck(fn, _inputs(shapes, low, high, chunking, rng), eps=1e-6, atol=1e-6, rtol=1e-5)


# the custom ops' cases (a Function and a map_blocks chunk VJP), shared with test_op_table and
# test_strict_backend
class Cube(dg.Function):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return a ** 3

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        return 3 * a ** 2 * g


def _cube_block(b):
    return b ** 3


def _cube_block_vjp(g, b):
    return (3 * b ** 2 * g,)


@pytest.mark.parametrize("chunking", list(CHUNKINGS_2D))
@pytest.mark.parametrize("name", list(OPS))
def test_gradient_matches_central_differences(name, chunking, rng):
    assert gradchecks(OPS[name], chunking, rng)


@pytest.mark.parametrize("chunking", list(CHUNKINGS_2D))
@pytest.mark.parametrize("name", ["mul", "add_broadcast_row", "sum_axis0", "matmul", "getitem_slice",
                                  "concatenate", "reshape", "transpose", "max_axis", "softmax", "setitem"])
def test_leaf_grad_keeps_shape_dtype_and_chunks(name, chunking, rng):
    fn, shapes, low, high = OPS[name]
    inputs = _inputs(shapes, low, high, chunking, rng)
    fn(*inputs).sum().backward()
    for t in inputs:
        assert t.grad.shape == t.shape and t.grad.dtype == t.dtype and t.grad.chunks == t.chunks


@pytest.mark.parametrize("name", list(OPS))
def test_second_derivatives_match_central_differences(name, rng):
    """gradgradcheck: every VJP rule is itself differentiable (create_graph) and right."""
    from daskgrad.testing import gradgradcheck

    fn, shapes, low, high = OPS[name]
    assert gradgradcheck(fn, _inputs(shapes, low, high, "uneven", rng), eps=1e-6, atol=1e-5, rtol=1e-4)


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
