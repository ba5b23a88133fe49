"""The op table the gradient tests share: one :class:`OpSpec` per differentiable case.

test_grad_ops gradchecks every spec (first and second order, every chunking), test_strict_backend
runs them on strict chunks, test_gpu on cupy chunks and test_op_table checks that together they
reach every primitive of daskgrad.graph.PRIMITIVES."""
from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

import daskgrad as dg
from daskgrad.nn import functional as F
from daskgrad.ops.elementwise import special_i1
from daskgrad.testing import gradcheck

from conftest import CHUNKINGS_2D, leaf

M = (6, 4)  # every chunking of CHUNKINGS_2D applies to it


@dataclasses.dataclass(frozen=True)
class OpSpec:
    """A differentiable case: ``fn`` of float64 leaf tensors of ``shapes``, drawn uniform in
    [low, high], the domain where ``fn`` is smooth (log, sqrt and division need low > 0; relu and
    abs stay off their kink at 0)."""

    name: str
    fn: Callable
    shapes: tuple
    low: float
    high: float

    def __post_init__(self):  # the table writes shapes as lists; a frozen spec must not share a mutable one
        object.__setattr__(self, "shapes", tuple(tuple(s) for s in self.shapes))

    def inputs(self, chunking, rng):
        """Leaves requiring grad: shape M chunked by CHUNKINGS_2D[chunking]; another shape in one
        chunk, chunks of 2, its last element alone ("uneven"; 3 + 1 for 4) or one element each."""
        out = []
        for shape in self.shapes:
            vals = rng.uniform(self.low, self.high, size=shape)
            if shape == M:
                chunks = CHUNKINGS_2D[chunking]
            else:
                chunks = {"one": -1, "even": 2, "size1": 1,
                          "uneven": tuple(((3, 1) if n == 4 else (n - 1, 1)) if n > 1 else (1,) for n in shape)
                          }[chunking]
            out.append(leaf(vals, chunks))
        return out

    def gradchecks(self, chunking, rng):
        """The float64 dot-product gradcheck on inputs of ``chunking``."""
        return gradcheck(self.fn, self.inputs(chunking, rng), eps=1e-6, atol=1e-6, rtol=1e-5)


def spec_id(spec):
    """A test id that is the op's name, so a failure names the op."""
    return spec.name


K33 = np.array([[0.5, -1.0, 0.25], [2.0, 1.0, -0.5], [0.0, 0.75, 1.5]])
K53 = np.arange(15.0).reshape(5, 3) / 10 - 0.6
SPECS = (
    OpSpec("add", lambda a, b: a + b, [M, M], -2, 2),
    OpSpec("add_broadcast_row", lambda a, b: a + b, [M, (4,)], -2, 2),
    OpSpec("add_broadcast_col", lambda a, b: a + b, [M, (6, 1)], -2, 2),
    OpSpec("sub", lambda a, b: a - b, [M, M], -2, 2),
    OpSpec("rsub_scalar", lambda a: 2.0 - a, [M], -2, 2),
    OpSpec("mul", lambda a, b: a * b, [M, M], -2, 2),
    OpSpec("mul_scalar", lambda a: a * 3.0, [M], -2, 2),
    OpSpec("truediv", lambda a, b: a / b, [M, M], 0.5, 2),
    OpSpec("rtruediv", lambda a: 2.0 / a, [M], 0.5, 2),
    # torch's methods that pick a value per slice (the gradient goes to its index), each under torch's node name
    OpSpec("max_dim", lambda a: a.max(1).values, [M], -2, 2),
    OpSpec("nextafter", lambda a, b: dg.nextafter(a, b) * b, [M, M], -2, 2),
    OpSpec("topk_method", lambda a: a.topk(2, 0).values * a.kthvalue(3, 1).values[:2, None], [M], -2, 2),
    OpSpec("min_dim", lambda a: a.min(0, keepdim=True).values, [M], -2, 2),
    OpSpec("median_method", lambda a: a.median() * a.median(0).values, [M], -2, 2),
    OpSpec("nanmedian_method", lambda a: a.nanmedian() * a.nanmedian(1).values, [M], -2, 2),
    OpSpec("sort_method", lambda a: a.sort(0, descending=True).values * a, [M], -2, 2),
    # torch's div(rounding_mode=): a zero gradient (through the product, b's own)
    OpSpec("rounded_div", lambda a, b: a.div(b, rounding_mode="floor") * b + a.div(b, rounding_mode="trunc"), [M, M],
           0.5, 2),
    OpSpec("pow_scalar", lambda a: a ** 3, [M], -2, 2),
    OpSpec("pow_tensor", lambda a, b: a ** b, [M, M], 0.5, 2),
    OpSpec("rpow", lambda a: 2.0 ** a, [M], -2, 2),
    OpSpec("neg", lambda a: -a, [M], -2, 2),
    OpSpec("exp", dg.exp, [M], -2, 2),
    OpSpec("log", dg.log, [M], 0.5, 3),
    OpSpec("log1p", dg.log1p, [M], 0.1, 3),
    OpSpec("expm1", dg.expm1, [M], -2, 2),
    OpSpec("sin", dg.sin, [M], -3, 3),
    OpSpec("cos", dg.cos, [M], -3, 3),
    OpSpec("tan", dg.tan, [M], -1, 1),
    OpSpec("tanh", dg.tanh, [M], -2, 2),
    OpSpec("sinh", dg.sinh, [M], -2, 2),
    OpSpec("cosh", dg.cosh, [M], -2, 2),
    OpSpec("arcsin", dg.arcsin, [M], -0.9, 0.9),
    OpSpec("arccos", dg.arccos, [M], -0.9, 0.9),
    OpSpec("arctan", dg.arctan, [M], -2, 2),
    OpSpec("arcsinh", dg.arcsinh, [M], -2, 2),
    OpSpec("arccosh", dg.arccosh, [M], 1.2, 3),
    OpSpec("arctanh", dg.arctanh, [M], -0.9, 0.9),
    OpSpec("log2", dg.log2, [M], 0.5, 3),
    OpSpec("log10", dg.log10, [M], 0.5, 3),
    OpSpec("exp2", dg.exp2, [M], -2, 2),
    OpSpec("reciprocal", dg.reciprocal, [M], 0.5, 2),
    OpSpec("floor_times", lambda a, b: dg.floor(a) * b + dg.ceil(a) + dg.trunc(b), [M, M], -2, 2),
    OpSpec("round_decimals", lambda a, b: dg.round(a, decimals=1) * b + dg.round(b), [M, M], -2, 2),
    OpSpec("arctan2", dg.arctan2, [M, M], 0.5, 2),
    OpSpec("hypot", dg.hypot, [M, M], 0.5, 2),
    OpSpec("ldexp", dg.ldexp, [M, M], -2, 2),
    OpSpec("logaddexp", dg.logaddexp, [M, M], -2, 2),
    OpSpec("logaddexp2", dg.logaddexp2, [M, M], -2, 2),
    OpSpec("fmod", lambda a, b: dg.fmod(a, b) + dg.fmod(a, 0.7), [M, M], 0.5, 2),
    OpSpec("mod", lambda a, b: a % b + dg.remainder(a, 0.7), [M, M], 0.5, 2),
    OpSpec("ravel", lambda a: dg.ravel(a) ** 3 - dg.ravel(dg.flip(a, 1)), [M], -2, 2),
    OpSpec("vstack_hstack", lambda a, b: dg.vstack([a, b]).sum(axis=0) * dg.hstack([a, b]).sum(axis=1)[:4],
           [M, M], -2, 2),
    OpSpec("dstack_column_stack", lambda a, b: dg.dstack([a, b]) * 2 + dg.column_stack([a[:, 0], b[:, :3]])[:, :, None],
           [M, M], -2, 2),
    OpSpec("append", lambda a, b: dg.append(a, b) ** 2, [M, (4,)], -2, 2),
    OpSpec("array_split", lambda a: dg.array_split(a, 4, axis=0)[1][:, :2] * dg.hsplit(a, 2)[1][:2], [M], -2, 2),
    OpSpec("repeat", lambda a: dg.repeat(a, [2, 0, 1, 1], axis=1) ** 2 + dg.repeat(a, 2)[:24].reshape(6, 4),
           [M], -2, 2),
    OpSpec("tile", lambda a: dg.tile(a, (2, 1, 3)) ** 2, [M], -2, 2),
    OpSpec("rot90_flips", lambda a: (dg.rot90(a)[:4, :4] * dg.fliplr(a)[:4]).sum() + dg.rot90(a, 3).T * dg.flipud(a),
           [M], -2, 2),
    OpSpec("imag_angle", lambda a, b: dg.imag(a + 1j * b) * dg.angle(a + 1j * b), [M, M], 0.5, 2),
    OpSpec("view_as_real_complex", lambda a, b: dg.view_as_real(dg.view_as_complex(dg.stack([a, b], -1)) * (1 + 2j))
           ** 2, [M, M], -2, 2),
    OpSpec("real_imag_written", lambda a, b: _parts_written(a + 1j * b), [M, M], -2, 2),
    OpSpec("sort", lambda a: dg.sort(a, axis=0) * dg.sort(a ** 2, axis=1) + dg.sort(a, axis=None)[:4], [M], -2, 2),
    OpSpec("float_power_deg2rad", lambda a, b: dg.float_power(a, b) + dg.deg2rad(a) * dg.rad2deg(b), [M, M], 0.5, 2),
    OpSpec("cbrt", dg.cbrt, [M], 0.5, 2),
    OpSpec("copysign", lambda a, b: dg.copysign(a, b) + dg.copysign(b, -1.0), [M, M], 0.5, 2),
    OpSpec("sinc", dg.sinc, [M], 0.1, 2),
    OpSpec("i0", dg.i0, [M], -3, 3),
    OpSpec("special_i1", special_i1, [M], -3, 3),
    OpSpec("nan_to_num", lambda a: dg.nan_to_num(a) * a, [M], -2, 2),
    OpSpec("nan_reductions", lambda a: dg.nansum(a, axis=0) * dg.nanmean(a, axis=0) + dg.nanmax(a, axis=0)
           - dg.nanmin(a, axis=0, keepdims=True)[0], [M], -2, 2),
    OpSpec("ptp_average", lambda a, w: dg.ptp(a, axis=1) + dg.average(a, axis=1, weights=w[0]), [M, M], 0.5, 2),
    OpSpec("quantile_median", lambda a: dg.quantile(a, [0.3, 0.9], axis=0) * dg.median(a, axis=0)
           + dg.percentile(a, 40), [M], -2, 2),
    OpSpec("cov_corrcoef", lambda a: dg.cov(a) + dg.corrcoef(a, rowvar=False).sum(), [M], -2, 2),
    OpSpec("sigmoid", dg.sigmoid, [M], -4, 4),
    OpSpec("relu", dg.relu, [M], 0.1, 2),
    OpSpec("softplus", dg.softplus, [M], -3, 3),
    OpSpec("abs", dg.abs, [M], 0.1, 2),
    OpSpec("sqrt", dg.sqrt, [M], 0.5, 3),
    OpSpec("square", dg.square, [M], -2, 2),
    OpSpec("maximum", dg.maximum, [M, M], -2, 2),
    OpSpec("minimum", dg.minimum, [M, M], -2, 2),
    OpSpec("maximum_scalar", lambda a: dg.maximum(a, 0.5), [M], -2, 2),
    OpSpec("minimum_scalar_first", lambda a: dg.minimum(0.5, a), [M], -2, 2),
    OpSpec("where", lambda a, b: dg.where(a > 0, a, b), [M, M], 0.1, 2),
    OpSpec("where_scalar_branches", lambda a: dg.where(a > 0, a, 0.0) + dg.where(a < 0.5, 2.0, a), [M], -2, 2),
    OpSpec("clip", lambda a: dg.clip(a, -1.0, 1.0), [M], -2, 2),
    OpSpec("clip_tensor_bounds", lambda a, lo: dg.clip(a, lo - 1.0, 1.5), [M, M], -2, 2),
    OpSpec("sign_times", lambda a, b: dg.sign(a) * b, [M, M], -2, 2),
    OpSpec("sum", dg.sum, [M], -2, 2),
    OpSpec("sum_axis0", lambda a: dg.sum(a, axis=0), [M], -2, 2),
    OpSpec("sum_axis1_keep", lambda a: dg.sum(a, axis=1, keepdims=True), [M], -2, 2),
    OpSpec("sum_tuple", lambda a: dg.sum(a, axis=(0, 1)), [M], -2, 2),
    OpSpec("mean", dg.mean, [M], -2, 2),
    OpSpec("mean_axis", lambda a: dg.mean(a, axis=-1), [M], -2, 2),
    OpSpec("max", dg.max, [M], -2, 2),
    OpSpec("max_axis", lambda a: dg.max(a, axis=0), [M], -2, 2),
    OpSpec("min_axis_keep", lambda a: dg.min(a, axis=1, keepdims=True), [M], -2, 2),
    OpSpec("prod", lambda a: dg.prod(a, axis=0), [M], 0.5, 1.5),
    OpSpec("prod_full", dg.prod, [M], 0.8, 1.2),
    OpSpec("var", lambda a: dg.var(a, axis=0, ddof=1), [M], -2, 2),
    OpSpec("var_full", lambda a: dg.var(a), [M], -2, 2),
    OpSpec("std", lambda a: dg.std(a, axis=1, ddof=1), [M], -2, 2),
    OpSpec("logsumexp", lambda a: dg.logsumexp(a, axis=1), [M], -2, 2),
    OpSpec("logsumexp_full", dg.logsumexp, [M], -2, 2),
    OpSpec("cumsum", lambda a: dg.cumsum(a, axis=0), [M], -2, 2),
    OpSpec("cumsum_axis1", lambda a: dg.cumsum(a, axis=1), [M], -2, 2),
    OpSpec("norm", dg.norm, [M], -2, 2),
    OpSpec("norm_p3_axis1", lambda a: dg.norm(a, 3, axis=1), [M], -2, 2),
    OpSpec("vector_norm_p1_5", lambda a: dg.linalg.vector_norm(a, 1.5), [M], 0.5, 2),
    OpSpec("norm_p1_axis0", lambda a: dg.norm(a, 1, axis=0), [M], 0.5, 2),
    OpSpec("norm_p0_5_keepdims", lambda a: dg.norm(a, 0.5, axis=1, keepdims=True), [M], 0.5, 2),
    OpSpec("norm_inf_axis1", lambda a: dg.norm(a, np.inf, axis=1), [M], -2, 2),
    OpSpec("norm_matrix_1", lambda a: dg.norm(a, 1), [M], -2, 2),
    OpSpec("norm_matrix_neg_inf", lambda a: dg.norm(a, -np.inf), [M], -2, 2),
    OpSpec("norm_matrix_2", lambda a: dg.norm(a, 2), [M], -2, 2),
    OpSpec("norm_matrix_nuc_keepdims", lambda a: dg.norm(a, "nuc", axis=(1, 0), keepdims=True), [M], -2, 2),
    OpSpec("prod_dtype", lambda a: dg.prod(a, axis=0, dtype="float64"), [M], 0.5, 2),
    OpSpec("matmul", lambda a, b: a @ b, [M, (4, 3)], -2, 2),
    OpSpec("matmul_mv", lambda a, b: a @ b, [M, (4,)], -2, 2),
    OpSpec("matmul_vm", lambda a, b: a @ b, [(6,), M], -2, 2),
    OpSpec("matmul_vv", lambda a, b: a @ b, [(4,), (4,)], -2, 2),
    OpSpec("matmul_contract_rows", lambda a, b: a.T @ b, [M, M], -2, 2),
    OpSpec("matmul_batched", lambda a, b: dg.reshape(a, (2, 3, 4)) @ b, [M, (4, 2)], -2, 2),
    OpSpec("dot", dg.dot, [(4,), (4,)], -2, 2),
    OpSpec("matmul_vector_batched", lambda v, a: v @ dg.reshape(a, (2, 3, 4)), [(3,), M], -2, 2),
    OpSpec("matmul_batched_vector", lambda a, v: dg.reshape(a, (2, 3, 4)) @ v, [M, (4,)], -2, 2),
    OpSpec("matmul_broadcast_batches", lambda a, b: dg.reshape(a, (2, 1, 3, 4)) @ dg.reshape(b, (2, 4, 3)),
           [M, M], -2, 2),
    OpSpec("dot_nd_vector", lambda a, v: dg.dot(dg.reshape(a, (2, 3, 4)), v), [M, (4,)], -2, 2),
    OpSpec("dot_nd_nd", lambda a, b: dg.dot(dg.reshape(a, (3, 2, 4)), dg.reshape(b, (2, 4, 3))), [M, M], -2, 2),
    OpSpec("inner", dg.inner, [M, (5, 4)], -2, 2),
    OpSpec("outer", dg.outer, [(6,), M], -2, 2),
    OpSpec("vdot", dg.vdot, [M, M], -2, 2),
    OpSpec("kron", dg.kron, [M, (2, 3)], -2, 2),
    OpSpec("tensordot_zero_axes", lambda a, b: dg.tensordot(a, b, axes=0), [M, (3,)], -2, 2),
    OpSpec("tensordot", lambda a, b: dg.tensordot(a, b, axes=([0], [0])), [M, (6, 2)], -2, 2),
    OpSpec("einsum_diagonal", lambda s: dg.einsum("ii->i", s), [(4, 4)], -2, 2),
    OpSpec("einsum_trace_implicit", lambda a, b: dg.einsum("ij,kj", a, b), [M, (3, 4)], -2, 2),
    OpSpec("einsum_ellipsis", lambda a, b: dg.einsum("...ij,jk->...ik", dg.reshape(a, (2, 3, 4)), b),
           [M, (4, 2)], -2, 2),
    OpSpec("einsum_sublist", lambda a, b: dg.einsum(a, [0, 1], b, [1, 2], [0, 2]), [M, (4, 3)], -2, 2),
    OpSpec("diagonal", lambda a: dg.diagonal(a, 1), [M], -2, 2),
    OpSpec("diagonal_axes_reversed", lambda a: dg.diagonal(dg.reshape(a, (2, 3, 4)), -1, 2, 1), [M], -2, 2),
    OpSpec("diag_of_vector", lambda v: dg.diag(v, -1), [(4,)], -2, 2),
    OpSpec("trace", lambda a: dg.trace(a, 1), [M], -2, 2),
    OpSpec("tril", lambda a: dg.tril(a, -1), [M], -2, 2),
    OpSpec("triu_batched", lambda a: dg.triu(dg.reshape(a, (2, 3, 4)), 1), [M], -2, 2),
    OpSpec("tensordot_int", lambda a, b: dg.tensordot(a, b, axes=2), [M, M], -2, 2),
    OpSpec("einsum_mm", lambda a, b: dg.einsum("ij,jk->ik", a, b), [M, (4, 3)], -2, 2),
    OpSpec("einsum_sum_index", lambda a, b: dg.einsum("ij,ik->k", a, b), [M, (6, 2)], -2, 2),
    OpSpec("transpose", lambda a: a.T, [M], -2, 2),
    OpSpec("t", lambda a: a.t(), [M], -2, 2),
    OpSpec("swapaxes", lambda a: a.transpose(0, 1), [M], -2, 2),
    OpSpec("permute", lambda a: dg.transpose(dg.reshape(a, (2, 3, 4)), (2, 0, 1)), [M], -2, 2),
    OpSpec("reshape", lambda a: dg.reshape(a, (4, 6)), [M], -2, 2),
    OpSpec("flatten", dg.flatten, [M], -2, 2),
    OpSpec("broadcast_to", lambda a: dg.broadcast_to(a, (3, 6, 4)), [M], -2, 2),
    OpSpec("expand_dims", lambda a: dg.expand_dims(a, 1), [M], -2, 2),
    OpSpec("squeeze", lambda a: dg.squeeze(dg.expand_dims(a, 0), 0), [M], -2, 2),
    OpSpec("squeeze_all", lambda a: dg.expand_dims(a, 0).squeeze(), [M], -2, 2),  # SqueezeBackward0
    OpSpec("squeeze_dims", lambda a: dg.expand_dims(a, 0).squeeze((0, 1)), [M], -2, 2),  # SqueezeBackward2
    OpSpec("concatenate", lambda a, b: dg.concatenate([a, b], axis=1), [M, M], -2, 2),
    OpSpec("stack", lambda a, b: dg.stack([a, b], axis=1), [M, M], -2, 2),
    OpSpec("split", lambda a: dg.split(a, [1, 4], axis=0)[1] * 2, [M], -2, 2),
    OpSpec("pad", lambda a: dg.pad(a, ((1, 2), (0, 1))), [M], -2, 2),
    OpSpec("flip", lambda a: dg.flip(a, 0), [M], -2, 2),
    OpSpec("roll", lambda a: dg.roll(a, 2, axis=0), [M], -2, 2),
    OpSpec("diff", lambda a: dg.diff(a, axis=0), [M], -2, 2),
    OpSpec("getitem_slice", lambda a: a[1:5, ::2], [M], -2, 2),
    OpSpec("getitem_step_of_flip", lambda a: dg.flip(a, 0)[::2, 1:], [M], -2, 2),
    OpSpec("getitem_int", lambda a: a[2], [M], -2, 2),
    OpSpec("getitem_none_ellipsis", lambda a: a[None, ..., 1], [M], -2, 2),
    OpSpec("getitem_int_array_repeats", lambda a: a[np.array([0, 2, 2, 5, 0])], [M], -2, 2),
    OpSpec("getitem_int_array_axis1", lambda a: a[:, [3, 3, 1]], [M], -2, 2),
    OpSpec("getitem_bool_mask", lambda a: a[a > 0].sum() + 0 * a.sum(), [M], -2, 2),
    OpSpec("setitem", lambda a, b: _setitem(a, b), [M, (2, 4)], -2, 2),
    OpSpec("getitem_mixed_none_int_list", lambda a: a[None, 1, [0, 2]] * a[[5, 0], None, 1:3], [M], -2, 2),
    OpSpec("getitem_arrays_apart", lambda a: a[None, [[0, 5], [2, 2]], None, [1, 3]] ** 2, [M], -2, 2),
    OpSpec("getitem_bool_scalar_list_mask", lambda a: a[True, [0, 3], 1:] * a[1:3, np.array([True, False, True, True])],
           [M], -2, 2),
    OpSpec("getitem_lazy_mask_axis1", lambda a: a[2:, a[0] > 0].sum() + 0 * a.sum(), [M], -2, 2),
    # rows of unknown count (a lazy mask): sorted along them in their blocks joined (join_blocks, its gradient
    # split_like), and F.pdist of them (pair_diff and its adjoint)
    # (each weighted by place through a running sum, so the order counts, and summed to a known shape)
    OpSpec("unknown_rows_sort", lambda a: dg.cumsum(dg.sort(a[_unknown_rows()], axis=0) ** 2, axis=0).sum(0),
           [M], -2, 2),
    OpSpec("unknown_rows_pdist", lambda a: dg.cumsum(F.pdist(a[_unknown_rows()] * a[_unknown_rows()]), 0).sum(),
           [M], -2, 2),
    OpSpec("setitem_mixed", lambda a, b: _mixed_setitem(a, b), [M, (1, 2)], -2, 2),
    OpSpec("softmax", lambda a: dg.softmax(a, axis=1), [M], -2, 2),
    OpSpec("log_softmax", lambda a: dg.log_softmax(a, axis=1), [M], -2, 2),
    OpSpec("cross_entropy", lambda a: dg.cross_entropy(a, same_device(dg.tensor(np.array([0, 3, 1, 1, 2, 0])), a)),
           [M], -2, 2),
    OpSpec("cross_entropy_probs", lambda a, p: dg.cross_entropy(a, dg.softmax(p, axis=1)), [M, M], -2, 2),
    OpSpec("mse_loss", dg.mse_loss, [M, M], -2, 2),
    OpSpec("bce_with_logits", dg.binary_cross_entropy_with_logits, [M, M], -2, 2),
    OpSpec("astype_roundtrip", lambda a: dg.astype(dg.astype(a, "float32"), "float64") * 0 + a, [M], -2, 2),
    OpSpec("rechunk", lambda a: dg.rechunk(a, (2, 4)), [M], -2, 2),
    OpSpec("erf", dg.erf, [M], -2.5, 2.5),
    OpSpec("erfc", lambda a: a.erfc(), [M], -2.5, 2.5),
    OpSpec("logcumsumexp", lambda a: a.logcumsumexp(1), [M], -2, 2),
    # (weights on both sides of 0.5: both of torch's formulas)
    OpSpec("lerp", lambda a, b, w: a.lerp(b, w) + a.lerp(b, 0.3) * b.lerp(a, 0.8), [M, M, M], 0.05, 0.95),
    OpSpec("addcmul", lambda a, b, c: a.addcmul(b, c, value=0.3) * a.addcmul(c[0], b), [M, M, M], -2, 2),
    OpSpec("scaled_add", lambda a, b: a.add(b, alpha=0.3) * a.sub(b[0], alpha=-1.7) + dg.sub(2.5, b, alpha=2.0),
           [M, M], -2, 2),
    # (distinct values: each row's mode is its smallest, which takes the gradient)
    OpSpec("mode", lambda a: a.mode(1).values * a[:, 0], [M], -2, 2),
    OpSpec("addcdiv", lambda a, b, c: a.addcdiv(b, c, value=0.3) * a.addcdiv(c[0], b), [M, M, M], 0.5, 2),
    OpSpec("digamma_lgamma", lambda a: a.digamma() * a.lgamma() + a.polygamma(2), [M], 0.5, 3),
    OpSpec("erfinv", lambda a: a.erfinv(), [M], -0.9, 0.9),
    OpSpec("logit", lambda a: a.logit() + a.logit(0.2) * a, [M], 0.05, 0.95),
    OpSpec("unfold", lambda a: a.unfold(0, 3, 2).sum(-1) * a.unfold(1, 2, 1)[:2, :, 1].sum(-1, keepdim=True), [M],
           -2, 2),
    # (a permutation of each row: scatter's written places are distinct, so its value is defined)
    OpSpec("scatter", lambda a, s: a.scatter(1, same_device(dg.tensor(np.array([[3, 0, 2, 1]] * 6)), a), s),
           [M, M], -2, 2),
    OpSpec("scatter_reduce", lambda a, s: _scatter_reduces(a, s), [M, M], 0.5, 2),
    OpSpec("gelu", lambda a: dg.nn.functional.gelu(a), [M], -3, 3),
    OpSpec("gelu_tanh", lambda a: dg.nn.functional.gelu(a, approximate="tanh"), [M], -3, 3),
    OpSpec("silu", lambda a: dg.nn.functional.silu(a), [M], -6, 6),
    OpSpec("layer_norm", lambda a, w: dg.nn.functional.layer_norm(a, 4, w[0], w[1]), [M, M], -2, 2),
    OpSpec("embedding",
           lambda w: dg.embedding(same_device(dg.tensor(np.array([[0, 5, 5], [3, 0, 2]]), chunks=(1, 2)), w), w),
           [M], -2, 2),
    OpSpec("dropout", lambda a: _seeded(lambda: dg.nn.functional.dropout(a, 0.4)), [M], -2, 2),
    # linalg: square solvers on well-conditioned matrices (entries in [0.5, 2] plus their row sums on the
    # diagonal), decompositions of M itself (its row chunks take the TSQR path)
    OpSpec("solve", lambda a, b: dg.linalg.solve(_dominant(a), b), [(6, 6), M], 0.5, 2),
    OpSpec("solve_vector", lambda a, b: dg.linalg.solve(_dominant(a), b), [(4, 4), (4,)], 0.5, 2),
    OpSpec("inv", lambda a: dg.linalg.inv(_dominant(a)), [(4, 4)], 0.5, 2),
    OpSpec("det", lambda a: dg.linalg.det(_dominant(a) * 0.3), [(4, 4)], 0.5, 2),
    OpSpec("slogdet", lambda a: _joined(dg.linalg.slogdet(_dominant(a))), [(4, 4)], 0.5, 2),
    OpSpec("cholesky", lambda a: dg.linalg.cholesky(a.T @ a), [M], -2, 2),
    OpSpec("cholesky_upper", lambda a: dg.linalg.cholesky(a.T @ a, upper=True), [M], -2, 2),
    OpSpec("qr", lambda a: _joined(dg.linalg.qr(a)), [M], -2, 2),
    OpSpec("qr_wide", lambda a: _joined(dg.linalg.qr(a.T)), [M], -2, 2),
    OpSpec("svd", lambda a: _joined(dg.linalg.svd(a, full_matrices=False)), [M], -2, 2),
    OpSpec("svd_wide", lambda a: _joined(dg.linalg.svd(a.T, full_matrices=False)), [M], -2, 2),
    OpSpec("svd_square_full", lambda a: _joined(dg.linalg.svd(a)), [(4, 4)], -2, 2),
    OpSpec("eigh", lambda a: _joined(dg.linalg.eigh(a + a.T)), [(4, 4)], -2, 2),
    OpSpec("eigh_upper", lambda a: _joined(dg.linalg.eigh(a + a.T, UPLO="U")), [(4, 4)], -2, 2),
    OpSpec("lstsq", lambda a, b: _joined(dg.linalg.lstsq(a, b)[:2]), [M, (6, 2)], -2, 2),
    OpSpec("lstsq_vector", lambda a, b: _joined(dg.linalg.lstsq(a, b)[:2]), [M, (6,)], -2, 2),
    OpSpec("pinv", dg.linalg.pinv, [M], -2, 2),
    OpSpec("pinv_wide", lambda a: dg.linalg.pinv(a.T), [M], -2, 2),
    OpSpec("matrix_power", lambda a: dg.linalg.matrix_power(a * 0.5, 3), [(4, 4)], -2, 2),
    OpSpec("matrix_power_negative", lambda a: dg.linalg.matrix_power(_dominant(a), -2), [(4, 4)], 0.5, 2),
    OpSpec("matrix_power_zero", lambda a: dg.linalg.matrix_power(a, 0) * a, [(4, 4)], -2, 2),
    OpSpec("lu", lambda a: _joined(dg.linalg.lu(a)[1:]), [(4, 4)], -2, 2),
    OpSpec("lu_tall", lambda a: _joined(dg.linalg.lu(a)[1:]), [M], -2, 2),
    OpSpec("lu_wide", lambda a: _joined(dg.linalg.lu(a.T)[1:]), [M], -2, 2),
    OpSpec("eig", lambda a: _joined([dg.real(dg.linalg.eigvals(a)), dg.imag(dg.linalg.eigvals(a)),
                                     dg.abs(dg.linalg.eig(a).eigenvectors)]), [(4, 4)], -2, 2),
    OpSpec("eig_complex", lambda a, b: _joined([dg.abs(dg.linalg.eig(a + 1j * b).eigenvectors),
                                                dg.real(dg.linalg.eigvals(a + 1j * b) ** 2)]), [(4, 4), (4, 4)], -2, 2),
    OpSpec("matrix_exp", lambda a: dg.linalg.matrix_exp(a), [(4, 4)], -1, 1),
    OpSpec("matrix_exp_complex_batched", lambda a, b: dg.real(dg.linalg.matrix_exp(dg.reshape(a + 1j * b, (2, 3, 4)
                                                                                              )[:, :, :3] * 2)),
           [M, M], -1, 1),
    OpSpec("lu_factor", lambda a: dg.linalg.lu_factor(a).LU, [(4, 4)], -2, 2),
    OpSpec("lu_factor_tall", lambda a: dg.linalg.lu_factor(a).LU, [M], -2, 2),
    OpSpec("lu_factor_wide", lambda a: dg.linalg.lu_factor(a.T).LU, [M], -2, 2),
    OpSpec("lu_solve", lambda a, b: dg.linalg.lu_solve(*dg.linalg.lu_factor(_dominant(a)), b), [(6, 6), M], 0.5, 2),
    OpSpec("lu_solve_adjoint_right", lambda a, b: dg.linalg.lu_solve(
        _dominant(a), dg.linalg.lu_factor(a.detach()).pivots, b, left=False, adjoint=True), [(4, 4), M], 0.5, 2),
    OpSpec("lu_solve_scipy_transposed_vector", lambda a, b: dg.linalg.lu_solve(dg.linalg.lu_factor(_dominant(a)), b,
                                                                               trans=1), [(4, 4), (4,)], 0.5, 2),
    OpSpec("solve_triangular", lambda a, b: dg.linalg.solve_triangular(_dominant(a), b, upper=True), [(6, 6), M],
           0.5, 2),
    OpSpec("solve_triangular_right_unit", lambda a, b: dg.linalg.solve_triangular(a, b, upper=False, left=False,
                                                                                  unitriangular=True),
           [(4, 4), M], -0.5, 0.5),
    OpSpec("solve_triangular_scipy_vector", lambda a, b: dg.linalg.solve_triangular(_dominant(a), b, lower=True),
           [(4, 4), (4,)], 0.5, 2),
    OpSpec("cholesky_solve", lambda a, b: dg.linalg.cholesky_solve(b, dg.tril(_dominant(a))), [(6, 6), M], 0.5, 2),
    OpSpec("multi_dot", lambda a, b: dg.linalg.multi_dot([a[:, 0], a, b, b[0]]), [M, (4, 4)], -2, 2),
    OpSpec("cross", lambda a, b: dg.linalg.cross(a[:, :3], b[:, 1:]), [M, M], -2, 2),
    OpSpec("cond", dg.linalg.cond, [M], -2, 2),
    OpSpec("cond_one_norm", lambda a: dg.linalg.cond(_dominant(a), 1), [(4, 4)], 0.5, 2),
    OpSpec("svd_compressed", lambda a: _joined(dg.linalg.svd_compressed(a, 2, n_power_iter=1)), [M], -2, 2),
    # stencils and shifts whose gradients cross chunk boundaries
    OpSpec("correlate_constant", lambda a: dg.correlate(a, K33, mode="constant", cval=0.5), [M], -2, 2),
    OpSpec("correlate_reflect", lambda a: dg.correlate(a, K33, mode="reflect"), [M], -2, 2),
    OpSpec("convolve_nearest_even_kernel", lambda a: dg.convolve(a, K33[:2], mode="nearest"), [M], -2, 2),
    OpSpec("convolve_wrap_wide_kernel", lambda a: dg.convolve(a, K53, mode="wrap"), [M], -2, 2),
    OpSpec("pad_both_axes", lambda a: dg.pad(a, ((2, 0), (1, 3))) * 1.5, [M], -2, 2),
    OpSpec("roll_both_axes", lambda a: dg.roll(a, (-1, 3), axis=(0, 1)), [M], -2, 2),
    OpSpec("diff_twice_axis1", lambda a: dg.diff(a, n=2, axis=1), [M], -2, 2),
    OpSpec("shifted_slices_difference", lambda a: a[1:, 1:] - a[:-1, :-1], [M], -2, 2),
    # the rest of dask.array's NumPy functions (daskgrad/ops/numpy_extra.py)
    OpSpec("cumprod", lambda a: dg.cumprod(a, axis=0) + dg.cumprod(a, axis=1), [M], -1.5, 1.5),
    OpSpec("cumprod_flat_with_zeros", lambda a: dg.cumprod(dg.where(dg.abs(a) < 0.3, 0.0, a)), [M], -1.5, 1.5),
    OpSpec("nan_cumulative_and_prod", lambda a: dg.nancumsum(a, axis=1) * dg.nancumprod(a, axis=0)
           + dg.nanprod(a, axis=0), [M], 0.5, 1.5),
    OpSpec("nanvar_nanstd", lambda a: dg.nanvar(a, axis=0, ddof=1) + dg.nanstd(a, axis=1, keepdims=True)[:4],
           [M], -2, 2),
    OpSpec("nanvar_with_nans", lambda a: dg.nanvar(dg.where(a > 1.5, np.nan, a), axis=0), [M], -2, 2),
    OpSpec("moment", lambda a: dg.moment(a, 3, axis=0) + dg.moment(a, 2), [M], -2, 2),
    OpSpec("gradient_uniform", lambda a: dg.concatenate(dg.gradient(a, 0.5), axis=0), [M], -2, 2),
    OpSpec("gradient_coordinates_edge2", lambda a: dg.concatenate(dg.gradient(
        a, np.array([0.0, 0.4, 1.1, 1.5, 2.6, 3.0]), np.array([1.0, 1.5, 2.5, 2.75]), edge_order=2), axis=0),
           [M], -2, 2),
    OpSpec("diff_prepend_append", lambda a, b: dg.diff(a, 2, axis=0, prepend=0.5, append=b[:1]), [M, M], -2, 2),
    OpSpec("take", lambda a: dg.take(a, [[1, 3], [3, 0]], axis=1) * dg.take(a, np.array([[5, 0], [23, 5]])),
           [M], -2, 2),
    OpSpec("take_along_axis", lambda a: dg.take_along_axis(a, np.array([[0, 2, 2], [1, 1, 0], [3, 3, 3], [0, 1, 2],
                                                                         [2, 2, 2], [3, 0, 1]]), axis=1), [M], -2, 2),
    OpSpec("take_along_axis_argsort", lambda a, b: dg.take_along_axis(b, dg.argsort(a, axis=0), axis=0) * a,
           [M, M], -2, 2),
    OpSpec("select_piecewise_choose", lambda a, b: dg.select([a > 1, a < -1], [a * b, b], default=a)
           + dg.piecewise(a, [a < 0, a > 1], [lambda t: t ** 2, lambda t: t * 3, lambda t: -t])
           + dg.choose((a > 0).astype("int64") + (b > 0).astype("int64"), [a, b, a * b]), [M, M], -2, 2),
    OpSpec("compress_extract", lambda a: dg.compress([True, False, True, True], a, axis=1) * 2
           + dg.extract(a > 0, a).sum() + 0 * a.sum(), [M], -2, 2),
    OpSpec("fmax_fmin", lambda a, b: dg.fmax(a, b) * dg.fmin(a, 0.5) + dg.fmin(dg.where(b > 1, np.nan, b), a),
           [M, M], -2, 2),
    OpSpec("broadcast_arrays_meshgrid", lambda a, b: dg.broadcast_arrays(a, b[0])[1] * a
           + dg.meshgrid(a[:, 0], b[0], indexing="ij")[0][:, :4] * dg.meshgrid(a[0], a[:, 1])[1], [M, M], -2, 2),
    OpSpec("ldexp_frexp_modf", lambda a: dg.ldexp(a, 3) + dg.frexp(a)[0] * dg.modf(a * 3)[0], [M], -2, 2),
    OpSpec("rollaxis_ediff1d", lambda a, b: dg.rollaxis(dg.reshape(a, (2, 3, 4)), 2)[:, 0] * dg.ediff1d(
        b, to_begin=2.0, to_end=b[0])[:3], [M, M], -2, 2),
    OpSpec("delete_insert", lambda a, b: dg.delete(a, [0, 2], axis=0) * dg.insert(a, 1, b[0], axis=0)[:4]
           + dg.insert(a, 2, 1.5, axis=1)[:4, :4], [M, M], -2, 2),
    OpSpec("insert_several", lambda a, b: dg.insert(a, [3, 1, 1, 6], b[:4, :1] * 2, axis=0)[:8]
           * dg.insert(a, slice(0, 4, 2), b[:2], axis=0) + dg.insert(a, [-1, 2], b[0, :2], axis=1).sum(),
           [M, M], -2, 2),
    OpSpec("nanquantile_nanmedian", lambda a: dg.nanquantile(dg.where(a > 1.2, np.nan, a), [0.3, 0.9], axis=0)
           * dg.nanmedian(a, axis=0) + dg.nanpercentile(dg.where(a < -1.5, np.nan, a), 40), [M], -2, 2),
    OpSpec("block_coarsen", lambda a, b: dg.block([[a, b[:, :1]], [b[:1], a[:1, :1]]])[:6, :4] * dg.coarsen(
        np.mean, a, {0: 2, 1: 2})[:, :1].sum() + dg.coarsen(np.max, b, {0: 3}, trim_excess=True).sum(), [M, M], -2, 2),
    OpSpec("topk", lambda a: dg.topk(a, 2, axis=0) * dg.topk(a, -3)[:2, :2].sum(), [M], -2, 2),
    # NumPy functions HIPS autograd's tests call (tests/hips_autograd)
    OpSpec("numpy_cross", lambda a, b: dg.cross(a[:, :3], b[:, 1:], axisc=0).T * dg.cross(a[:, :2], b[:, 1:]),
           [M, M], -2, 2),
    OpSpec("array_r_c", lambda a, b: dg.array([a[0], b[1] * 2])[1] * dg.r_[a[0, :2], 0:2]
           + dg.c_[a[:, :1], b][:4, :4].sum(0), [M, M], -2, 2),
    OpSpec("partition_diag_embed", lambda a: dg.partition(a, 2, axis=0)[:5] * dg.diag_embed(a[0], 1)[:, :4],
           [M], -2, 2),
    OpSpec("linspace_tensor_endpoints", lambda a: dg.linspace(a[0], a[1], 5) + dg.linspace(a[2, 0], a[3], 5,
                                                                                           endpoint=False), [M], -2, 2),
    OpSpec("max_min_complex", lambda a, b: dg.real(dg.max(a + 1j * b, axis=0) * dg.min(a - 1j * b)), [M, M], -2, 2),
    OpSpec("mixed_advanced_and_basic_index", lambda a: a[1:5, [0, 2, 2]] * a[[3, 1], 1:][:, :3].sum(), [M], -2, 2),
    # convolution and pooling windows (unfold/fold), halos across chunks of the spatial axes
    OpSpec("conv2d_strided_dilated", lambda a, w: F.conv2d(_image(a), w, stride=(2, 1), padding=1, dilation=(1, 2)),
           [M, (2, 1, 3, 2)], -2, 2),
    OpSpec("conv1d_groups_same", lambda a, w, b: F.conv1d(a[None], w, b, padding="same", groups=2),
           [M, (4, 3, 3), (4,)], -2, 2),
    OpSpec("conv_transpose2d_output_padding",
           lambda a, w, b: F.conv_transpose2d(_image(a), w, b, stride=(2, 1), padding=1, output_padding=(1, 0),
                                              dilation=(1, 2)), [M, (1, 2, 3, 2), (2,)], -2, 2),
    OpSpec("conv_transpose1d_groups", lambda a, w: F.conv_transpose1d(a[None], w, stride=2, groups=2),
           [M, (6, 1, 3)], -2, 2),
    OpSpec("unfold_fold", lambda a: F.fold(F.unfold(_image(a), (2, 3), padding=1, stride=(2, 1)) ** 2, M, (2, 3),
                                           padding=1, stride=(2, 1)), [M], -2, 2),
    OpSpec("max_pool2d_overlapping", lambda a: F.max_pool2d(_image(a), 3, 1, 1), [M], -2, 2),
    OpSpec("avg_pool2d_exclude_pad", lambda a: F.avg_pool2d(_image(a), 3, 2, 1, count_include_pad=False), [M], -2, 2),
    OpSpec("batch_norm_training", lambda a, w, b: F.batch_norm(a, None, None, w, b, training=True), [M, (4,), (4,)],
           -2, 2),
    OpSpec("group_norm", lambda a: F.group_norm(a[None], 2), [M], -2, 2),
    # torch's conj(): a view of the storage seen conjugated
    OpSpec("conj_view", lambda a, b: dg.real((a + 1j * b).conj() * (a - 2j * b)), [M, M], -2, 2),
    # nn.functional's activations and losses (the kernels of binary_cross_entropy and soft_margin_loss; compositions)
    OpSpec("binary_cross_entropy", lambda a, b: F.binary_cross_entropy(dg.sigmoid(a), dg.sigmoid(b)), [M, M], -2, 2),
    OpSpec("soft_margin_loss",
           lambda a: F.soft_margin_loss(a, same_device(dg.tensor(np.sign(np.arange(24.0) % 3 - 0.5).reshape(M)), a),
                                        reduction="sum"), [M], -2, 2),
    OpSpec("softplus_mish_logsigmoid", lambda a: F.softplus(a, beta=2.0) * F.mish(a) + F.logsigmoid(a), [M], -2, 2),
    OpSpec("selu_negative", lambda a: F.selu(a), [M], -2, -0.1),
    OpSpec("glu", lambda a: F.glu(a, 1), [M], -2, 2),
    OpSpec("kl_div", lambda a, b: F.kl_div(a, b, reduction="batchmean"), [M, M], 0.2, 2),
    OpSpec("cosine_similarity", lambda a, b: F.cosine_similarity(a, b), [M, M], 0.2, 2),
)
BY_NAME = {s.name: s for s in SPECS}
assert len(BY_NAME) == len(SPECS), "two specs share a name"


def _parts_written(z):
    """Writes through ``real``/``imag`` views (torch's CopySlices onto the complex base)."""
    z.imag.mul_(3)
    z.real[1:] = z.imag[:-1] * 2 - 1
    return dg.view_as_real(z) * z.real[..., None]


def _image(a):
    """A (6, 4) leaf as one (1, 1, 6, 4) image: its chunks become the spatial chunks."""
    return dg.reshape(a, (1, 1) + a.shape)


def _joined(outs):
    """A decomposition's outputs as one vector, so one cotangent weighs every output."""
    return dg.concatenate([dg.reshape(o, (-1,)) for o in outs])


def _dominant(a):
    """``a`` (entries > 0) plus its row sums on the diagonal: strictly diagonally dominant, so invertible."""
    return a + dg.diag(dg.sum(a, axis=1))


def _seeded(fn):
    dg.manual_seed(0)  # the same masks at every call gradcheck makes
    return fn()


def same_device(t, like):
    """Put a host constant on ``like``'s chunk type (as a user would move targets to the GPU)."""
    from strict_array import StrictArray, to_strict

    return to_strict(t) if isinstance(like.array._meta, StrictArray) else t.to(like.device)


def _unknown_rows():
    """A lazy row mask of M: the rows it selects are not counted until computed (dask's NaN chunk sizes)."""
    return dg.from_array(np.array([True, False, True, True, False, True]))


def _setitem(a, b):
    c = a * 1.0
    c[1:3] = b * 2.0
    return c


def _mixed_setitem(a, b):
    c = a * 1.0
    c[[0, 5], None, 1:3] = b  # (the list's axis, then None's, then the slice's: b broadcast)
    c[True, 2, [0, 3]] = b[0] * 2.0
    return c * c


# the custom ops (a Function and a map_blocks chunk VJP) of test_op_table's and test_strict_backend's cases
class Cube(dg.Function):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return a ** 3

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        return 3 * a ** 2 * g


def cube_block(b):
    return b ** 3


def cube_block_vjp(g, b):
    return (3 * b ** 2 * g,)


def _scatter_reduces(a, s):
    """scatter_reduce's five reductions, with and without self, at an index that repeats places."""
    idx = same_device(dg.tensor(np.array([[3, 0, 0, 1]] * 6)), a)
    return (a.scatter_reduce(1, idx, s, "prod") + a.scatter_reduce(1, idx, s, "mean", include_self=False)
            + a.scatter_reduce(1, idx, s, "amax") * a.scatter_reduce(1, idx, s, "amin", include_self=False)
            + a.scatter_reduce(1, idx, s * s, "sum"))
