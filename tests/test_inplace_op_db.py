"""torch's own ``op_db`` with a write in between: for every method call of ``tests/test_torch_op_db.py`` (and
every ``nn.functional`` OpInfo daskgrad has), each differentiable input is a non-leaf copy, the call is made,
one input is then written in place (``+= 1`` under ``no_grad``), and the backward runs.

Where torch's op saved that input, its backward raises "modified by an inplace operation"; daskgrad must
raise it too -- computing instead would give the gradient of the old values, silently (daskgrad composes
many of torch's ops from several, which save values made from the input, so a composite guards its inputs:
``daskgrad.graph.guard``).  Where torch computes, daskgrad computes the same gradient, or raises the
in-place error for the few calls listed in ``EXTRA_RAISES`` (an error, never a silent difference).
A new method is checked the day it is added.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("expecttest")
import test_torch_op_db as opdb  # noqa: E402

import daskgrad as dg  # noqa: E402

INPLACE_ERROR = "modified by an inplace operation"
# daskgrad raises where torch computes: its composition saves a value torch's op does not
EXTRA_RAISES = {
    "kron": "documented in docs/user-guide/torch.md: torch's _unsafe_view shares no version counter",
    "linear_cross_entropy": "documented in docs/user-guide/torch.md: torch's chunked path (options) saves no input",
}


# samples that draw random numbers (dropout_p=0.5 while training): torch's masks and daskgrad's differ, so whether
# each raises is compared, not the gradients' values
RANDOM_DRAWS = {"F.multi_head_attention_forward"}


# a result whose length daskgrad knows only when computed: no cotangent of a known shape meets it lazily
UNKNOWN_LENGTHS = {"masked_select", "nonzero", "argwhere", "unique", "unique_consecutive", "nonzero_static"}


def _functional_cases():
    return [(op, "F." + op.name.rsplit(".", 1)[1]) for op in opdb.op_db
            if op.name.startswith("nn.functional.") and hasattr(dg.nn.functional, op.name.rsplit(".", 1)[1])]


# casts to dtypes NumPy lacks: refused with NumPy's TypeError (tests/test_tensor_methods_2.py), nothing to write
NO_NUMPY_DTYPE = {"bfloat16", "chalf"}
CASES = [(op, name) for op, name in opdb.CASES if not name.endswith("_")] + _functional_cases()


def _call(lib, inp, name, args, kwargs):
    if name.startswith("F."):
        return getattr(lib.nn.functional, name[2:])(inp, *args, **kwargs)
    return opdb._apply(lib, inp, name, args, kwargs)


def _grad_outputs(lib, out):
    _, _, leaves = opdb._structure(out)
    if lib is torch:
        return [o for o in leaves if isinstance(o, torch.Tensor) and o.requires_grad and o.dtype.is_floating_point]
    return [o for o in leaves if isinstance(o, dg.Tensor) and o.requires_grad and o.dtype.kind == "f"]


def _run(lib, inp, args, kwargs, name, written, cotangents):
    """The leaves' gradients after input number ``written`` was written in place, or "raises"."""
    leaves = [x for x in opdb._leaves([inp, args, list(kwargs.values())])
              if isinstance(x, (torch.Tensor, dg.Tensor)) and x.requires_grad]
    copies = {id(x): x * 1.0 for x in leaves}

    def sub(x):
        return copies.get(id(x), x)

    out = _call(lib, sub(inp), name, opdb._tree_map(sub, args), opdb._tree_map(sub, kwargs))
    outs = _grad_outputs(lib, out)
    with lib.no_grad():
        list(copies.values())[written].add_(1.0)
    try:
        loss = sum((o * (torch.from_numpy(c) if lib is torch else c)).sum() for o, c in zip(outs, cotangents))
        grads = (torch.autograd.grad if lib is torch else dg.grad)(loss, leaves, allow_unused=True)
    except RuntimeError as e:
        if INPLACE_ERROR in str(e):
            return "raises"
        raise
    return [None if g is None else g.numpy(force=True) if lib is torch else g.numpy() for g in grads]


def _calls(op, name):
    """(sample index, written input) of the op's first sample whose call and backward torch makes."""
    for index, sample in opdb._samples(op)[:1]:
        t = [opdb._tree_map(opdb._torch_copy, v) for v in (sample.input, sample.args, sample.kwargs)]
        try:
            outs = _grad_outputs(torch, _call(torch, opdb._tree_map(opdb._torch_copy, t[0]), name, t[1], t[2]))
        except Exception:  # noqa: BLE001 - torch refuses the sample: test_torch_op_db's business
            continue
        shapes = [tuple(o.shape) for o in outs]
        if not outs or op.name in UNKNOWN_LENGTHS or name in NO_NUMPY_DTYPE:
            continue
        n = sum(1 for x in opdb._leaves([t[0], t[1], list(t[2].values())])
                if isinstance(x, torch.Tensor) and x.requires_grad)
        for written in range(n):
            yield index, sample, written, shapes


@pytest.mark.parametrize("op,name", CASES, ids=[f"{opdb._op_id(op)}:{name}" for op, name in CASES])
def test_a_write_before_the_backward_raises_where_torch_s_does(op, name):
    for index, sample, written, shapes in _calls(op, name):
        cotangents = [opdb._cotangent(f"{opdb.call_id(op, name, index)}/{i}", s) for i, s in enumerate(shapes)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t = [opdb._tree_map(opdb._torch_copy, v) for v in (sample.input, sample.args, sample.kwargs)]
            try:
                theirs = _run(torch, *t, name, written, cotangents)
            except Exception:  # noqa: BLE001 - torch's own refusal after the write (a view's base written)
                continue
            d = [opdb._tree_map(opdb._to_daskgrad, v) for v in t]
            try:
                ours = _run(dg, *d, name, written, cotangents)
            except Exception as e:  # noqa: BLE001
                pytest.fail(f"sample {index}, input {written} written: daskgrad raises {opdb._error(e)}")
        where = f"sample {index}, input {written} written"
        if theirs == "raises":
            assert ours == "raises", f"{where}: torch raises its in-place error, daskgrad computes"
        elif ours == "raises":
            assert name.removeprefix("F.") in EXTRA_RAISES, f"{where}: daskgrad raises, torch computes"
        elif name not in RANDOM_DRAWS:
            for tg, g in zip(theirs, ours):
                tv = np.zeros_like(g) if tg is None else tg
                gv = np.zeros_like(tv) if g is None else g
                assert opdb._close(tv, gv), f"{where}: gradients differ"
