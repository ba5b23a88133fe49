"""Tensor methods take torch's call forms: its keyword names (``x.add(other=y)``, ``x.roll(shifts=1, dims=0)``),
a size as one keyword (``x.view(size=(4, 3))``), its ignored flags (``gather(sparse_grad=False)``,
``copy_(non_blocking=False)``, ``clone(memory_format=...)``) and ``x.tile(2, 1)``; each call is made on torch and
on daskgrad, positionally and by keyword, and the values and dtypes compared.  The module-level functions keep
NumPy's names (``daskgrad.add(a, b)``, ``daskgrad.roll(x, shift, axis)``)."""
from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

import daskgrad as dg

BASE = np.arange(12.0).reshape(3, 4) + 1
OTHER = BASE[::-1].copy()
VEC = np.arange(4.0) + 1
SQUARE = BASE[:3, :3].copy()


def _operands(lib):
    make = torch.tensor if lib is torch else dg.tensor
    return dict(x=make(BASE), y=make(OTHER), v=make(VEC), s=make(SQUARE), lib=lib,
                idx=make(np.array([[0, 1, 2, 0]])), cols=make(np.array([0, 2])))


def _values(out):
    if isinstance(out, (tuple, list)):
        return [v for item in out for v in _values(item)]
    if isinstance(out, (torch.Tensor, dg.Tensor)):
        return [np.asarray(out.detach().numpy())]
    return [np.asarray(out)]


def _check(call):
    expected, got = _values(eval(call, {}, _operands(torch))), _values(eval(call, {}, _operands(dg)))
    assert len(expected) == len(got), call
    for e, g in zip(expected, got):
        assert str(e.dtype) == str(g.dtype), call
        assert e.shape == g.shape, call
        if e.dtype.kind == "b":
            np.testing.assert_array_equal(g, e, err_msg=call)
        else:
            np.testing.assert_allclose(g, e, rtol=1e-12, err_msg=call)


_OTHER = ["add", "sub", "mul", "div", "divide", "true_divide", "multiply", "subtract", "atan2", "arctan2",
          "copysign", "fmax", "fmin", "fmod", "remainder", "floor_divide", "hypot", "nextafter", "maximum",
          "minimum", "logaddexp", "logaddexp2", "logical_and", "logical_or", "logical_xor", "eq", "ne", "lt", "le",
          "gt", "ge", "greater", "greater_equal", "less", "less_equal", "not_equal", "kron", "inner"]
CALLS = [
    *[(f"x.{name}(y)", f"x.{name}(other=y)") for name in _OTHER],
    ("x.add(y, alpha=2)", "x.add(other=y, alpha=2)"), ("x.sub(y, alpha=2)", "x.subtract(other=y, alpha=2)"),
    ("x.div(y, rounding_mode='floor')", "x.div(other=y, rounding_mode='floor')"),
    ("x.ldexp(y.to(lib.int64))", "x.ldexp(other=y.to(lib.int64))"),
    ("x.to(lib.int64).bitwise_and(y.to(lib.int64))", "x.to(lib.int64).bitwise_and(other=y.to(lib.int64))"),
    ("x.to(lib.int64).bitwise_or(y.to(lib.int64))", "x.to(lib.int64).bitwise_or(other=y.to(lib.int64))"),
    ("x.to(lib.int64).bitwise_xor(y.to(lib.int64))", "x.to(lib.int64).bitwise_xor(other=y.to(lib.int64))"),
    ("x.pow(2)", "x.pow(exponent=2)"),
    ("x.pow(y)", "x.pow(exponent=y)"), ("x.float_power(2)", "x.float_power(exponent=2)"),
    ("v.vdot(v)", "v.vdot(other=v)"), ("v.dot(v)", "v.dot(tensor=v)"), ("x.mm(y.T)", "x.mm(mat2=y.T)"),
    ("v.outer(v)", "v.outer(vec2=v)"), ("v.ger(v)", "v.ger(vec2=v)"),
    ("x.isclose(y, 0.1)", "x.isclose(other=y, rtol=0.1, atol=0.0, equal_nan=True)"),
    ("x.clone().add_(y)", "x.clone().add_(other=y)"),
    ("x.clone().sub_(y, alpha=2)", "x.clone().sub_(other=y, alpha=2)"),
    ("x.clone().mul_(y)", "x.clone().mul_(other=y)"), ("x.clone().div_(y)", "x.clone().div_(other=y)"),
    ("x.clone().pow_(2)", "x.clone().pow_(exponent=2)"),
    ("x.swapaxes(0, 1)", "x.swapaxes(axis0=0, axis1=1)"), ("x.swapaxes(0, 1)", "x.swapaxes(0, axis1=1)"),
    ("x.swapdims(0, 1)", "x.swapdims(dim0=0, dim1=1)"),
    ("x.roll(1, 0)", "x.roll(shifts=1, dims=0)"),
    ("x.roll((1, 2), (0, 1))", "x.roll(1, dims=0).roll(shifts=2, dims=1)"),
    ("x.roll(1)", "x.roll(shifts=1)"),
    ("x.rot90(1, [0, 1])", "x.rot90(k=1, dims=[0, 1])"), ("x.rot90(1, [1, 0])", "x.rot90(dims=[1, 0])"),
    ("x.diag(1)", "x.diag(diagonal=1)"), ("v.diag(-1)", "v.diag(diagonal=-1)"),
    ("x.take(cols)", "x.take(index=cols)"),
    ("v.broadcast_to((3, 4))", "v.broadcast_to(size=(3, 4))"),
    ("x.split(2)", "x.split(split_size=2)"), ("x.split([1, 2])", "x.split(split_size=[1, 2])"),
    ("x.split(3, 1)", "x.split(split_size=3, dim=1)"),
    ("x.hsplit(2)", "x.hsplit(sections=2)"), ("x.hsplit([1])", "x.hsplit(indices=[1])"),
    ("x.vsplit(3)", "x.vsplit(sections=3)"),
    ("x.tensor_split(2)", "x.tensor_split(sections=2)"),
    ("x.tensor_split([1], 1)", "x.tensor_split(indices=[1], dim=1)"),
    ("x.tensor_split(lib.tensor([1]))", "x.tensor_split(tensor_indices_or_sections=lib.tensor([1]))"),
    ("x.view(4, 3)", "x.view(size=(4, 3))"), ("x.view(-1)", "x.view(size=(-1,))"),
    ("x.reshape(4, 3)", "x.reshape(shape=(4, 3))"), ("x.permute(1, 0)", "x.permute(dims=(1, 0))"),
    ("x.expand(2, 3, 4)", "x.expand(size=(2, 3, 4))"), ("x.repeat(2, 1)", "x.repeat(repeats=(2, 1))"),
    ("x.tile((2, 1))", "x.tile(2, 1)"),
    ("x.tile((2,))", "x.tile(dims=(2,))"), ("x.tile((2, 1))", "x.tile(dims=(2, 1))"),
    ("x.new_zeros((2,))", "x.new_zeros(size=(2,))"), ("x.new_ones((2, 3))", "x.new_ones(size=(2, 3))"),
    ("tuple(x.new_empty((2,)).shape)", "tuple(x.new_empty(size=(2,)).shape)"),
    ("x.new_full((2,), 3.0)", "x.new_full(size=(2,), fill_value=3.0)"),
    ("x.new_full((2,), 3.0)", "x.new_full((2,), fill_value=3.0)"),
    ("x.new_tensor([1.0, 2.0])", "x.new_tensor(data=[1.0, 2.0])"),
    ("x.gather(1, idx)", "x.gather(1, idx, sparse_grad=False)"),
    ("x.clone().copy_(y)", "x.clone().copy_(y, non_blocking=False)"),
    ("x.clone().copy_(y)", "x.clone().copy_(y, True)"),
    ("x.clone()", "x.clone(memory_format=lib.preserve_format)"),
]


@pytest.mark.parametrize("positional, keyword", CALLS, ids=[k for _, k in CALLS])
def test_torch_call_forms(positional, keyword):
    _check(positional)
    _check(keyword)


def _shape(out):
    return tuple(out.shape) if not isinstance(out, (tuple, list)) else [tuple(o.shape) for o in out]


@pytest.mark.parametrize("call", ["x.add(y, other=y)", "x.swapaxes(0, axis0=1)", "x.roll(1, shifts=1)",
                                  "x.view((4, 3), size=(4, 3))", "x.new_full((2,), size=(2,))",
                                  "x.new_full(fill_value=2.0)", "x.pow(2, exponent=2)"])
def test_a_value_given_twice_is_refused_as_torch_does(call):
    with pytest.raises(TypeError):
        eval(call, {}, _operands(torch))
    with pytest.raises(TypeError):
        eval(call, {}, _operands(dg))


def test_gather_sparse_grad_refused():
    x = dg.tensor(BASE)
    with pytest.raises(NotImplementedError, match="sparse"):
        x.gather(1, dg.tensor(np.array([[0]])), sparse_grad=True)


def test_gradients_through_torch_keywords():
    tx, ty = (torch.tensor(a, requires_grad=True) for a in (BASE, OTHER))
    dx, dy = (dg.tensor(a, requires_grad=True) for a in (BASE, OTHER))
    for x, y in ((tx, ty), (dx, dy)):
        (x.mul(other=y).pow(exponent=2).roll(shifts=1, dims=0).sum() + x.atan2(other=y).sum()).backward()
    for t, d in ((tx, dx), (ty, dy)):
        np.testing.assert_allclose(d.grad.numpy(), t.grad.numpy(), rtol=1e-12)


def test_signatures_are_torchs_and_the_functions_numpys():
    sig = {name: list(inspect.signature(getattr(dg.Tensor, name)).parameters) for name in
           ("add", "add_", "pow", "mm", "roll", "rot90", "diag", "swapaxes", "swapdims", "split", "isclose",
            "gather", "copy_", "clone")}
    assert sig["add"] == sig["add_"] == ["self", "other", "alpha"]
    assert sig["pow"] == ["self", "exponent"] and sig["mm"] == ["self", "mat2"]
    assert sig["roll"] == ["self", "shifts", "dims"] and sig["rot90"] == ["self", "k", "dims"]
    assert sig["diag"] == ["self", "diagonal"] and sig["split"] == ["self", "split_size", "dim"]
    assert sig["swapaxes"] == ["self", "axis0", "axis1"] and sig["swapdims"] == ["self", "dim0", "dim1"]
    assert sig["isclose"] == ["self", "other", "rtol", "atol", "equal_nan"]
    assert sig["gather"][-1] == "sparse_grad" and sig["copy_"][-1] == "non_blocking"
    assert sig["clone"] == ["self", "memory_format"]
    # NumPy's functions are untouched
    assert list(inspect.signature(dg.add).parameters)[:2] == ["a", "b"]
    assert list(inspect.signature(dg.roll).parameters) == ["x", "shift", "axis"]
    assert list(inspect.signature(dg.swapaxes).parameters) == ["x", "axis1", "axis2"]
    a = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(dg.swapaxes(dg.tensor(a), axis1=0, axis2=1).numpy(), np.swapaxes(a, 0, 1))
    np.testing.assert_array_equal(dg.roll(dg.tensor(a), shift=1, axis=1).numpy(), np.roll(a, 1, axis=1))


def test_cpu_and_cuda_take_torch_s_arguments():
    """``cpu(memory_format=)`` and ``cuda(device, non_blocking, memory_format)`` as torch's: accepted, never a
    TypeError (without a GPU, ``cuda`` raises its no-GPU error whatever the arguments)."""
    assert list(inspect.signature(dg.Tensor.cuda).parameters) == ["self", "device", "non_blocking", "memory_format"]
    assert list(inspect.signature(dg.Tensor.cpu).parameters) == ["self", "memory_format"]
    x = dg.tensor(BASE)
    np.testing.assert_array_equal(x.cpu(memory_format=dg.preserve_format).numpy(), BASE)
    for call in (lambda: x.cuda(0, non_blocking=True), lambda: x.cuda(device="cuda:0", memory_format=None)):
        try:
            y = call()
        except TypeError:
            raise
        except RuntimeError as e:  # (no GPU here)
            assert "GPU" in str(e) or "CUDA" in str(e)
        else:
            assert y.device == "cuda"
