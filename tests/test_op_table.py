"""The op table (daskgrad.graph.PRIMITIVES) is the source of truth: every public differentiable op
is an entry, every entry (and each of its torch node names) is reached by a float64 gradcheck case,
and a rule keeps no input alive once backward has released its node."""
import gc
import weakref

import numpy as np
import pytest

import daskgrad as dg
from daskgrad import graph, ops
from daskgrad.nn import functional as F
from daskgrad.ops.elementwise import conj, real_part

from conftest import CHUNKINGS_2D, leaf
from op_specs import M, SPECS, Cube, OpSpec, cube_block, cube_block_vjp, spec_id


class SquareAndDouble(dg.Function):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return a * a, a * 2

    @staticmethod
    def backward(ctx, g_square, g_double):
        (a,) = ctx.saved_tensors
        return 2 * a * g_square + 2 * g_double


def _filled(a, value):
    c = a * 2.0
    c.fill_(value)
    return c * a


def _zeroed(a):
    c = a * 2.0
    c.zero_()
    return c + a


def _random_filled(a):
    """Every random fill written into a result, each reached as torch's node (gradient zero), times ``a``:
    the seed set first, so that each call draws the same constants."""
    dg.manual_seed(0)
    fills = (("uniform_", ()), ("normal_", ()), ("exponential_", ()), ("cauchy_", ()), ("log_normal_", (0, 0.1)),
             ("geometric_", (0.5,)), ("random_", ()), ("random_", (5,)), ("random_", (1, 5)), ("bernoulli_", ()),
             ("bernoulli_", (dg.full_like(a.detach(), 0.5),)))
    out = (a * 0.0 + 0.5).bernoulli() * a
    for name, args in fills:
        c = a * 2.0
        getattr(c, name)(*args)
        out = out + (c * 2.0**-53 if args == () and name == "random_" else c) * a
    return out


def _copied(a, b):
    c = a * 2.0
    c.copy_(b)
    return c * a


def _written_through_view(a, b):
    """A write through a view rewrites its base (CopySlices) and the view's own history (AsStrided)."""
    c = a * 1.0
    v = c.T[1:3]
    v.mul_(b.T[1:3])
    return (v * c[:, 1:3].T).sum() + c * c


# entries the specs of op_specs.SPECS do not reach: custom ops, in-place writes, complex parts
# (reached from real float64 inputs through a complex intermediate) and both extremes over all axes
EXTRA = (
    OpSpec("conj_real", lambda a: real_part(conj(a * (1 + 2j)) * a), [M], -2, 2),
    OpSpec("clone", lambda a: dg.clone(a) * a, [M], -2, 2),
    OpSpec("min_full", dg.min, [M], -2, 2),
    OpSpec("amax", lambda a: dg.amax(a, axis=1), [M], -2, 2),
    OpSpec("amin_full", dg.amin, [M], -2, 2),
    OpSpec("fill_", lambda a: _filled(a, 1.5), [M], -2, 2),
    OpSpec("zero_", _zeroed, [M], -2, 2),
    OpSpec("copy_", _copied, [M, M], -2, 2),
    OpSpec("random_fills", _random_filled, [M], -2, 2),
    OpSpec("igamma", lambda x: dg.from_array(np.full(M, 1.5)).igamma(x) * dg.from_array(np.full(M, 2.5)).igammac(x),
           [M], 0.5, 2),
    OpSpec("write_through_view", _written_through_view, [M, M], -2, 2),
    OpSpec("alias", lambda a: a[...] * a, [M], -2, 2),
    OpSpec("getitem_none", lambda a: a[:, None] * 2.0, [M], -2, 2),
    OpSpec("unbind", lambda a: a.unbind(1)[2] * a[:, 0], [M], -2, 2),
    OpSpec("split", lambda a: a.split(2)[1] * a.split([1, 5])[1][1:3], [M], -2, 2),
    OpSpec("reshape_copy", lambda a: a.T.reshape(-1) * 2.0, [M], -2, 2),
    OpSpec("function", Cube.apply, [M], -2, 2),
    OpSpec("function_many_outputs", lambda a: (lambda s, d: s * d)(*SquareAndDouble.apply(a)), [M], -2, 2),
    OpSpec("map_blocks", lambda a: dg.map_blocks(cube_block, a, vjp=cube_block_vjp), [M], -2, 2),
    # (a log_softmax first: torch's CTC gradient is the derivative where the log-probabilities are normalised)
    # (no reflector: the op's node gives no gradient, as torch's; + a keeps the case differentiable)
    OpSpec("householder_product_empty", lambda a: dg.linalg.householder_product(a, a[0, :0]) + a, [(4, 3)], -2, 2),
    OpSpec("ctc_loss", lambda a: F.ctc_loss(F.log_softmax(a, 2), np.array([[1, 2], [3, 3], [4, 0]]), (4, 3, 4),
                                            (2, 2, 1), reduction="sum"), [(4, 3, 5)], -2, 2),
)
CASES = SPECS + EXTRA
GPU_ONLY = {"to_device"}  # moves chunks to cupy and back: gradchecked in tests/test_gpu.py where a GPU is
# torch's NotImplemented node (bincount with weights, floor_divide, a number's remainder by a tensor): its
# backward raises, as torch's
# (tests/test_numpy_extra.py), so no gradient can be checked
# and the history of a view torch refuses to differentiate once its base was written (tests/test_views.py)
# and torch's in-place acosh_/asinh_/atanh_, whose derivative torch does not implement
# (tests/test_tensor_methods_more.py), and torch's geqrf, which has none (tests/test_tensor_methods_2.py)
RAISES = {"not_implemented", "not_implemented_remainder", "refused_view", "no_inplace_derivative",
          "geqrf_no_derivative"}


@pytest.mark.parametrize("chunking", list(CHUNKINGS_2D))
@pytest.mark.parametrize("spec", EXTRA, ids=spec_id)
def test_extra_cases_match_central_differences(spec, chunking, rng):
    assert spec.gradchecks(chunking, rng)


def _nodes(tensors):
    return graph.toposort([t.grad_fn for t in tensors if t is not None and t.grad_fn is not None])


def _reached(spec, rng):
    """(primitive name, node name) of every node in a case's forward graph and in the graph of its
    gradient built with create_graph from a cotangent that requires grad, as gradgradcheck builds it
    (which reaches the rules' own ops: spread, scatter, mask_scatter, embedding_backward)."""
    inputs = spec.inputs("uneven", rng)
    out = spec.fn(*inputs)
    v = leaf(np.ones(out.shape), out.chunks)
    grads = dg.grad(out, inputs, v, create_graph=True, allow_unused=True, lazy=True)
    # (a composition's last node named as the torch op it stands for, graph.relabel: its primitive's own name)
    return {(n._prim.name, getattr(type(n), "composes", n.name())) for n in _nodes([out, *grads])
            if not isinstance(n, graph.AccumulateGrad)}


def test_every_primitive_and_each_of_its_node_names_has_a_gradcheck_case(rng):
    reached = set().union(*(_reached(spec, rng) for spec in CASES))
    for prim, node in reached:
        assert graph.PRIMITIVES[prim] is not None and (not graph.PRIMITIVES[prim].torch
                                                       or node in graph.PRIMITIVES[prim].torch), (prim, node)
    missing = {name for name in graph.PRIMITIVES if name not in {p for p, _ in reached}} - GPU_ONLY - RAISES
    assert not missing, f"primitives without a gradcheck case: {sorted(missing)}"
    names = {(p.name, t) for p in graph.PRIMITIVES.values() for t in p.torch if p.name not in GPU_ONLY}
    assert not names - reached, f"node names without a gradcheck case: {sorted(names - reached)}"


def test_every_entry_has_a_rule_and_torch_names_are_torch_style():
    for p in graph.PRIMITIVES.values():
        assert callable(p.rule), p
        assert all(t.endswith(("Backward0", "Backward1", "Backward2", "Backward4", "CopySlices", "Backwards"))
                   for t in p.torch), p


# public ops that are not differentiable: comparisons, index results and constants
NOT_DIFFERENTIABLE = {"argmax", "argmin", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or",
                      "logical_xor", "logical_not", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not",
                      "full_like", "ones_like", "zeros_like", "linspace", "argsort", "isnan", "isinf",
                      "isfinite", "signbit", "isreal", "isposinf", "isneginf", "equal", "not_equal", "greater",
                      "greater_equal", "less", "less_equal",
                      # searching, counting, sets, bins, logic and integers, factories (numpy_index.py)
                      "nanargmax", "nanargmin", "argtopk", "zeros", "ones", "full", "arange", "searchsorted",
                      "digitize", "count_nonzero", "argwhere", "nonzero", "flatnonzero", "unravel_index",
                      "ravel_multi_index", "isin", "unique", "union1d", "histogram", "histogram2d", "histogramdd",
                      "left_shift", "right_shift", "iscomplex", "isclose", "allclose", "spacing", "invert", "all",
                      "any", "rand_like", "randn_like", "eye", "identity", "tri", "empty", "empty_like", "indices",
                      "tril_indices", "triu_indices", "tril_indices_from", "triu_indices_from", "argpartition"}
_INTS = np.array([0, 2, 1, 2, 3, 0])


def _probe(name, x, y):
    """Call public op ``name`` on float64 tensors (``x`` (6, 4) requiring grad) in its usual form."""
    fn = getattr(ops, name)
    special = {
        "einsum": lambda: fn("ij,ij->i", x, y), "where": lambda: fn(x > 0, x, y),
        "clamp": lambda: fn(x, -1.0, 1.0), "clip": lambda: fn(x, y, 1.0),
        "full_like": lambda: fn(x, 2.0), "concatenate": lambda: fn([x, y]), "stack": lambda: fn([x, y]),
        "split": lambda: fn(x, 2)[0], "reshape": lambda: fn(x, (4, 6)), "broadcast_to": lambda: fn(x, (2, 6, 4)),
        "expand_dims": lambda: fn(x, 0), "unsqueeze": lambda: fn(x, 0), "squeeze": lambda: fn(x[None], 0),
        "swapaxes": lambda: fn(x, 0, 1), "moveaxis": lambda: fn(x, 0, 1), "movedim": lambda: fn(x, 0, 1),
        "unflatten": lambda: fn(x, 1, (2, 2)), "mm": lambda: fn(x, y.T), "permute": lambda: fn(x, (1, 0)),
        "transpose": lambda: fn(x), "rechunk": lambda: fn(x, 2), "roll": lambda: fn(x, 1, 0),
        "pad": lambda: fn(x, 1), "getitem": lambda: fn(x, (slice(1, 3),)),
        "setitem": lambda: fn(x, (slice(1, 3),), y[:2]), "astype": lambda: fn(x, "float32"),
        "to_device": lambda: fn(x, "cpu") * 1, "sum_to": lambda: fn(x, (1, 4)),
        "matmul": lambda: fn(x, y.T), "dot": lambda: fn(x[0], y[0]), "tensordot": lambda: fn(x, y),
        "nll_loss": lambda: fn(x, dg.tensor(np.array([0, 1, 2, 3, 0, 1]))),
        "cross_entropy": lambda: fn(x, dg.tensor(np.array([0, 1, 2, 3, 0, 1]))),
        "embedding": lambda: fn(dg.tensor(np.array([0, 2])), x),
        "convolve": lambda: fn(x, np.ones((3, 3))), "correlate": lambda: fn(x, np.ones((3, 3))),
        "argmax": lambda: fn(x, 0), "argmin": lambda: fn(x, 0), "ones_like": lambda: fn(x),
        "zeros_like": lambda: fn(x), "logical_and": lambda: fn(x > 1, y > 1), "logical_or": lambda: fn(x > 1, y > 1),
        "logical_xor": lambda: fn(x > 1, y > 1), "logical_not": lambda: fn(x > 1),
        "bitwise_and": lambda: fn(x > 1, y > 1), "bitwise_or": lambda: fn(x > 1, y > 1),
        "bitwise_xor": lambda: fn(x > 1, y > 1), "bitwise_not": lambda: fn(x > 1),
        "atleast_1d": lambda: fn(x.sum()), "atleast_2d": lambda: fn(x[0]), "atleast_3d": lambda: fn(x),
        "vstack": lambda: fn([x, y]), "hstack": lambda: fn([x, y]), "dstack": lambda: fn([x, y]),
        "column_stack": lambda: fn([x, y]), "array_split": lambda: fn(x, 3)[0], "hsplit": lambda: fn(x, 2)[0],
        "vsplit": lambda: fn(x, 2)[0], "dsplit": lambda: fn(x[None], 2)[0], "linspace": lambda: fn(0, 1, 5),
        "repeat": lambda: fn(x, 2), "repeat_interleave": lambda: fn(x, 2), "tile": lambda: fn(x, 2),
        "rot90": lambda: fn(x), "real": lambda: fn(x + 1j), "view_as_real": lambda: fn(x + 1j),
        "view_as_complex": lambda: fn(dg.stack([x, y], -1)), "imag": lambda: fn(x + 1j), "conj": lambda: fn(x + 1j),
        "conjugate": lambda: fn(x + 1j), "angle": lambda: fn(x + 1j), "sort": lambda: fn(x), "argsort": lambda: fn(x),
        "quantile": lambda: fn(x, 0.3), "percentile": lambda: fn(x, 30), "average": lambda: fn(x),
        "float_power": lambda: fn(x, 2.0), "cov": lambda: fn(x), "corrcoef": lambda: fn(x),
        "nan_to_num": lambda: fn(x), "median": lambda: fn(x), "ptp": lambda: fn(x),
        "nanquantile": lambda: fn(x, 0.3), "nanpercentile": lambda: fn(x, 30), "block": lambda: fn([[x, y]]),
        "coarsen": lambda: fn(np.sum, x, {0: 2}), "moment": lambda: fn(x, 3), "gradient": lambda: fn(x)[0],
        "take": lambda: fn(x, [1, 2]),
        "take_along_axis": lambda: fn(x, np.zeros((6, 1), dtype=int), 1),
        "sliding_window_view": lambda: fn(x, 2, 0),
        "take_along_dim": lambda: fn(x, np.zeros((6, 1), dtype=int), 1), "select": lambda: fn([x > 1], [x]),
        "piecewise": lambda: fn(x, [x > 1], [lambda t: t * 2, 0.0]), "choose": lambda: fn(x > 1, [x, y]),
        "compress": lambda: fn([True, False], x, axis=1), "extract": lambda: fn(x > 1, x),
        "broadcast_arrays": lambda: fn(x, y[0])[1], "broadcast_tensors": lambda: fn(x, y[0])[1],
        "frexp": lambda: fn(x)[0], "modf": lambda: fn(x)[0], "rollaxis": lambda: fn(x, 1), "delete": lambda: fn(x, 1),
        "insert": lambda: fn(x, 1, 0.5), "topk": lambda: fn(x, 2), "argtopk": lambda: fn(x, 2),
        "zeros": lambda: fn(3), "ones": lambda: fn(3), "full": lambda: fn(3, 1.5), "arange": lambda: fn(3),
        "searchsorted": lambda: fn(x[:, 0], y), "digitize": lambda: fn(x, [1.0]), "count_nonzero": lambda: fn(x),
        "argwhere": lambda: fn(x), "nonzero": lambda: fn(x)[0], "flatnonzero": lambda: fn(x),
        "unravel_index": lambda: fn(dg.tensor(_INTS), (2, 3))[0],
        "ravel_multi_index": lambda: fn((dg.tensor(_INTS), dg.tensor(_INTS)), (4, 4)), "isin": lambda: fn(x, y),
        "unique": lambda: fn(x), "union1d": lambda: fn(x, y), "histogram": lambda: fn(x, 3, range=(0, 2))[0],
        "histogram2d": lambda: fn(x[:, 0], y[:, 0], 3, range=((0, 2), (0, 2)))[0],
        "histogramdd": lambda: fn(x[:, :2], 3, range=((0, 2), (0, 2)))[0],
        "bincount": lambda: fn(dg.tensor(_INTS), weights=x[:, 0]), "invert": lambda: fn(x > 1),
        "left_shift": lambda: fn(dg.tensor(_INTS), 1),
        "right_shift": lambda: fn(dg.tensor(_INTS), 1), "iscomplex": lambda: fn(x), "spacing": lambda: fn(x),
        "all": lambda: fn(x > 1), "any": lambda: fn(x > 1), "divmod": lambda: fn(x, y)[1], "eye": lambda: fn(3),
        "identity": lambda: fn(3), "tri": lambda: fn(3), "empty": lambda: fn(3), "empty_like": lambda: fn(x),
        "indices": lambda: fn((2, 3)), "meshgrid": lambda: fn(x[:, 0], y[0])[0],
        "fromfunction": lambda: fn(lambda i, j: i + j, (2, 3)) * x[:2, :3], "tril_indices": lambda: fn(3)[0],
        "triu_indices": lambda: fn(3)[0], "tril_indices_from": lambda: fn(x)[0], "triu_indices_from": lambda: fn(x)[0],
        "cross": lambda: fn(x[:, :3], y[:, :3]), "array": lambda: fn([x, y]), "row_stack": lambda: fn([x, y]),
        "partition": lambda: fn(x, 2, axis=0),
        "argpartition": lambda: fn(x, 2), "real_if_close": lambda: fn(x * (1 + 1e-20j)), "diag_embed": lambda: fn(x),
        "make_diagonal": lambda: fn(x), "rand_like": lambda: fn(x), "randn_like": lambda: fn(x),
    }
    if name in special:
        return special[name]()
    try:
        return fn(x, y)
    except TypeError:
        return fn(x)


@pytest.mark.parametrize("name", ops.__all__)
def test_every_public_differentiable_op_binds_table_entries(name, rng):
    x = leaf(rng.uniform(0.5, 2, M), (3, 2))
    y = leaf(rng.uniform(0.5, 2, M), (3, 2))
    out = _probe(name, x, y)
    if name in NOT_DIFFERENTIABLE:
        assert not out.requires_grad
        return
    nodes = [n for n in _nodes([out]) if not isinstance(n, graph.AccumulateGrad)]
    assert nodes, f"{name} recorded nothing"
    for n in nodes:
        assert graph.PRIMITIVES.get(n._prim.name) is n._prim  # every node comes from the table


def test_tensor_methods_are_public_ops_or_wrap_them():
    public = {id(getattr(ops, name)) for name in ops.__all__}
    for method, fn in ops._METHODS.items():
        if isinstance(fn, property):  # an attribute, e.g. t.real: torch's and NumPy's spelling
            continue
        wrapped = getattr(fn, "__wrapped__", None)
        made_here = fn.__qualname__ == f"Tensor.{method}"  # a wrapper ops/__init__ made and named (_named)
        assert made_here or id(fn) in public or getattr(wrapped, "__name__", None) in ops.__all__, method


def test_a_node_holds_no_tensor_outside_its_saved_values(rng):
    """Params are plain values (numbers, tuples, strings, dtypes, shapes, chunks, a user's class and
    ctx): releasing the saved values frees every tensor a rule could read."""
    for spec in CASES:
        out = spec.fn(*spec.inputs("even", rng))
        for n in _nodes([out]):
            for k, v in getattr(n, "_params", {}).items():
                assert not isinstance(v, dg.Tensor), (spec.name, n.name(), k)
                if isinstance(v, tuple):
                    assert not any(isinstance(e, dg.Tensor) for e in v), (spec.name, n.name(), k)


def test_tensordot_einsum_and_reshape_keep_torchs_node_name_but_name_their_rules_apart():
    # torch 2.13: tensordot and einsum end in a view, so all three report ViewBackward0
    a, b = leaf(np.ones((2, 3)), 1), leaf(np.ones((3, 2)), 1)
    nodes = [dg.tensordot(a, b, axes=1).grad_fn, dg.einsum("ij,jk->ik", a, b).grad_fn, dg.reshape(a, (3, 2)).grad_fn]
    assert [n.name() for n in nodes] == ["ViewBackward0"] * 3
    assert [n._prim.label(n) for n in nodes] == ["tensordot", "einsum", "reshape"]


# ------------------------------------------------------- nothing outlives backward
def _stack(x, y):
    return dg.stack([x, y], axis=0)


def _setitem_value(x, y):
    c = y * 1.0
    c[1:3] = x[1:3]
    return c


class _Scaled(dg.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        return g * b, g * a


def _mul_blocks(a, b):
    return a * b


def _mul_blocks_vjp(g, a, b):
    return g * b, g * a


KEEPERS = {
    "stack": _stack,
    "setitem": lambda x, y: ops.setitem(y * 1.0, (slice(1, 3),), x[1:3]),
    "setitem_method": _setitem_value,
    "Function.apply": _Scaled.apply,
    "map_blocks": lambda x, y: dg.map_blocks(_mul_blocks, x, y, vjp=_mul_blocks_vjp),
}


@pytest.mark.parametrize("name", list(KEEPERS))
def test_backward_keeps_no_input_alive(name):
    """After backward (no retain_graph) the graph is released: an input nobody else holds is freed,
    although the output (and so its grad_fn) is still alive."""
    w = leaf(np.ones(M), (3, 2))
    x = dg.from_array(np.full(M, 2.0), chunks=(3, 2)) * w  # a non-leaf input: only the graph could hold it
    y = dg.from_array(np.full(M, 3.0), chunks=(3, 2)) * w
    out = KEEPERS[name](x, y)
    ref = weakref.ref(x)
    del x, y
    out.sum().backward()
    gc.collect()
    assert ref() is None
    assert out.grad_fn is not None


# ------------------------------------------------------------------ module layout
def test_engine_and_tensor_modules_are_not_shadowed_by_the_functions():
    import importlib

    engine, tensor_module = importlib.import_module("daskgrad.engine"), importlib.import_module("daskgrad._tensor")
    assert callable(engine.backward) and tensor_module.Tensor is dg.Tensor
    assert dg.backward is engine.backward and dg.tensor is tensor_module.tensor  # the functions keep their names


def _module_level_imports(path):
    import ast

    tree = ast.parse(path.read_text())
    return {node.module or "" for node in tree.body if isinstance(node, ast.ImportFrom)} | {
        alias.name for node in tree.body if isinstance(node, ast.ImportFrom) and node.module is None
        for alias in node.names}
