"""Gradients torch 2.13 computes, where daskgrad computed others silently (found by a seeded differential fuzz
of gradients against torch): each case runs one program in both libraries, on one chunk and on chunks of one
and two elements, and compares the forward value, every leaf's gradient (NaN, inf and signs included) and
whether it requires grad, or torch's error type and words."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import daskgrad as dg

torch = pytest.importorskip("torch")


def _leaf(lib, values, chunks):
    v = np.array(values, dtype=np.result_type(np.array(values).dtype, np.float64))
    if lib is torch:
        return torch.tensor(v, requires_grad=True)
    return (dg.from_array(v, chunks=chunks) if v.ndim else dg.tensor(v)).requires_grad_()


def _np(t):
    return None if t is None else (t.detach().numpy() if isinstance(t, torch.Tensor) else np.asarray(t.detach()))


def _var_dims_second(L, x, fn, dim, correction):
    v = getattr(x, fn)(dim, correction=correction) if dim is not None else getattr(x, fn)(correction=correction)
    (g,) = L.autograd.grad(v.sum(), [x], create_graph=True)
    return [v, g, g.requires_grad]


# each: (leaves, program(L, *leaves) -> list of outputs and Python values)
CASES = {
    # var/std with a dim that names every dim at correction >= n use torch's formula with that dim (2 / dof, a
    # negative dof flipping the sign; the gradient a function of x), not its branch without dim (inf everywhere)
    **{f"{fn}(dim={dim}, correction={c}) of {vals}": (
        [vals], lambda L, x, fn=fn, dim=dim, c=c: _var_dims_second(L, x, fn, dim, c))
       for fn in ("var", "std") for c in (1, 2, 3) for dim in (None, 0, -1, (0,))
       for vals in ([1.0, 2.0], [3.0], [2.0, 2.0])},
    **{f"{fn}(dim=(0, 1), correction={c}) of a row": (
        [[[1.0, 2.0]]], lambda L, x, fn=fn, c=c: _var_dims_second(L, x, fn, (0, 1), c))
       for fn in ("var", "std") for c in (2, 3)},
    # the fuzz's case: a size-1 dim at correction 1, then the second derivative through amax and where
    "var(0, correction=1, keepdim) of an amax, twice": (
        [[0.5, -1.0], [0.5]],
        lambda L, x, y: _second(L, [x, y], L.where(x > y, x, y * 2).amax((0,), keepdim=True).var(
            0, correction=1, keepdim=True).sum())),
    # cumprod over a dim of length one: torch's gradient is the cotangent itself (g * x / x was a last bit off,
    # and had a second derivative where torch's has none)
    "cumprod over a dim of one, twice": (
        [[[0.3, 0.7], [0.1, 3.0]]],
        lambda L, x: (lambda g: [g, g.requires_grad])(
            L.autograd.grad((x.sum().unsqueeze(0).cumprod(-1) * 1.7).sum(), [x], create_graph=True)[0])),
    # (over a dim of length one torch's gradient is the cotangent itself where the whole input holds a zero, else
    # g * result / x, which requires grad: a lazy choice here, whose result requires grad either way; see
    # test_torch_differences_4 for its values)
    **{f"prod({dims}) of a row{' with a zero' * zero}, twice": (
        [[[0.3, 0.7, 0.0 if zero else 1.5, 2.0]]], lambda L, x, dims=dims: (lambda g: [g, g.requires_grad])(
            L.autograd.grad((x.prod(*dims) * 1.7).sum(), [x], create_graph=True)[0]))
       for dims, zero in [((0,), False), ((0, True), False), ((), True), ((1,), True), ((), False), ((1,), False)]},
    "cumprod(0) of a row": (
        [[[0.3, 0.7]]], lambda L, x: (lambda g: [g, g.requires_grad])(
            L.autograd.grad((x.cumprod(0) * 1.7).sum(), [x], create_graph=True)[0])),
}


def _second(L, leaves, loss):
    gs = L.autograd.grad(loss, leaves, create_graph=True)
    sum((g * g).sum() for g in gs).backward()
    return [*gs, *(x.grad for x in leaves)]


@pytest.mark.parametrize("chunks", [-1, 1, 2], ids=str)
@pytest.mark.parametrize("case", CASES)
def test_gradients_are_torchs(case, chunks):
    leaves, program = CASES[case]
    results = []
    for lib in (torch, dg):
        xs = [_leaf(lib, v, chunks) for v in leaves]
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            results.append([_np(o) if isinstance(o, (torch.Tensor, dg.Tensor)) or o is None else o
                            for o in program(lib, *xs)])
    for t, d in zip(*results):
        if isinstance(t, np.ndarray):
            np.testing.assert_array_equal(d, t)
            np.testing.assert_array_equal(np.signbit(d) | np.isnan(d), np.signbit(t) | np.isnan(t))  # (-0.0 too)
        else:
            assert d == t


@pytest.mark.parametrize("chunks", [-1, 1], ids=str)
@pytest.mark.parametrize("out_complex", [True, False])
@pytest.mark.parametrize("call", ["backward", "grad"])
def test_a_gradient_of_the_other_kind_of_dtype_raises_torchs_error(call, out_complex, chunks):
    """A complex gradient for a real output (or a real one for a complex output) is refused with torch's words;
    it was taken silently (its real part, or a complex `.grad` of a real leaf)."""
    words = []
    for lib in (torch, dg):
        x = _leaf(lib, [1.0 + 2.0j, -1.0], chunks)
        out = x * 2 if out_complex else x.abs()
        g = _leaf(lib, [1.0, 3.0] if out_complex else [1.0 + 1j, 3.0], chunks).detach()
        with pytest.raises(RuntimeError) as e:
            out.backward(g) if call == "backward" else lib.autograd.grad(out, x, g)
        words.append(str(e.value).replace("torch.", "daskgrad."))
    assert words[1] == words[0]


@pytest.mark.parametrize("chunks", [-1, 1], ids=str)
@pytest.mark.parametrize("reps", [(1,), (1, 1), (0,), (2, 0), (1, 2)], ids=str)
def test_repeat_is_a_copy_even_of_ones(reps, chunks):
    """torch's (and NumPy's) ``repeat``/``tile`` copy always: ``x.repeat(1)`` was a view here, so an in-place op on
    it wrote into ``x`` (or was refused as a leaf's view), where torch computes."""
    results = []
    for lib in (torch, dg):
        x = _leaf(lib, [1.0, 2.0], chunks)
        y = x.repeat(*reps)
        y.mul_(3)
        (y * y).sum().backward()
        base = x.detach().clone()
        z = base.repeat(*reps)
        z.add_(1)
        z2 = base.tile(reps)
        z2.add_(1)
        results.append([_np(y), _np(x.grad), _np(base), y._base is None, z2._base is None])
    for t, d in zip(*results):
        np.testing.assert_array_equal(d, t)


def _chunked(lib, values, chunks):
    v = np.array(values, dtype=np.float64)
    return torch.tensor(v, requires_grad=True) if lib is torch else dg.from_array(v, chunks=chunks).requires_grad_()


INDEXINGS = {
    "index_select rows": lambda L, x: x.index_select(0, L.tensor(np.array([1, 1, 2, 0]))),
    "integer list on dim 1": lambda L, x: x[:, [1, 1, 0, 1]],
    "integer tensor of two dims": lambda L, x: x[L.tensor(np.array([[1, 1], [2, 2]]))],
}


@pytest.mark.parametrize("chunks", [-1, 1, 2, (2, 1)], ids=str)
@pytest.mark.parametrize("case", INDEXINGS)
def test_integer_index_gradient_with_inf_and_nan_stays_in_its_rows(case, chunks):
    """The gradient of an integer-array index is a scatter-add, as torch's: an inf or NaN of the cotangent reaches
    only the row it indexes (a one-hot contraction made NaN of 0 * inf in every row of its column); and again."""
    results = []
    for lib in (torch, dg):
        x = _chunked(lib, [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], chunks)
        y = INDEXINGS[case](lib, x)
        v = np.arange(1.0, 1.0 + y.numel()).reshape(tuple(y.shape))
        v.flat[0], v.flat[-1], v.flat[2] = np.inf, -np.inf, np.nan
        y.backward(lib.tensor(v))
        g1 = _np(x.grad)
        x.grad = None
        y = INDEXINGS[case](lib, x)
        (g,) = lib.autograd.grad((y * y.sum()).sum(), [x], create_graph=True)
        (g * g).sum().backward()
        results.append([g1, _np(g), _np(x.grad)])
    for t, d in zip(*results):
        np.testing.assert_array_equal(d, t)


@pytest.mark.parametrize("chunks", [-1, 1, 2], ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss_and_cross_entropy_with_masked_logits(reduction, chunks):
    """A logit of -inf at another class than the target (a masked class) leaves torch's loss finite; the loss
    multiplied the log-probabilities by the one-hot targets here, so -inf * 0 made it NaN."""
    import torch.nn.functional as F

    import daskgrad.nn.functional as DF

    logits = [[-np.inf, 0.0, -1.0], [0.5, -np.inf, 2.0], [0.1, 0.2, -np.inf]]
    results = []
    for lib, fn in ((torch, F), (dg, DF)):
        for loss in (fn.nll_loss, fn.cross_entropy):
            x = _chunked(lib, logits, chunks)
            out = loss(x, lib.tensor(np.array([1, 2, 0])), reduction=reduction)
            out.sum().backward()
            results.append([_np(out), _np(x.grad)])
    for t, d in zip(results[:2], results[2:]):
        for a, b in zip(t, d):
            np.testing.assert_allclose(b, a, rtol=1e-14, atol=0)


@pytest.mark.parametrize("chunks", [-1, 1, (1, 2)], ids=str)
def test_empty_views_of_several_chunks_reshape(chunks):
    """An empty tensor of several chunks (``narrow(1, 2, 0)`` of a chunked one) reshapes and views, and its
    gradient flows, as torch's (dask's reshape raised a TypeError)."""
    results = []
    for lib in (torch, dg):
        x = _chunked(lib, np.arange(6.0).reshape(2, 3), chunks)
        a = x.narrow(1, 2, 0) + 0
        a.view(-1)[::2].zero_()
        z = a.reshape(0, 2, 1)
        (z.sum() + (x * x).sum() + a.flatten().sum()).backward()
        results.append([tuple(z.shape), _np(x.grad)])
    assert results[1][0] == results[0][0]
    np.testing.assert_array_equal(results[1][1], results[0][1])


@pytest.mark.parametrize("chunks", [-1, 1, 5], ids=str)
def test_xlogy_gradient_where_x_is_zero(chunks):
    """torch's gradient of ``xlogy`` to ``x`` where ``x`` is 0 is ``log(y)`` (0 where ``y <= 0``): it was 0 for every
    ``y`` here (a ``where`` of a plain 0), and NaN at ``y = 0``; the second derivative follows."""
    import itertools

    pairs = np.array(list(itertools.product([0.0, -0.0, 2.0, -1.5, np.nan, 0.5], [0.0, 2.0, 0.5, np.nan, -1.0, 1.0])))
    g = np.linspace(0.5, 3.0, len(pairs))
    pos = pairs[:, 1] > 0
    results = []
    for lib in (torch, dg):
        x, y = (_chunked(lib, pairs[:, k], chunks) for k in (0, 1))
        out = x.xlogy(y)
        out.backward(lib.tensor(g))
        r = [_np(out), _np(x.grad), _np(y.grad)]
        x, y = (_chunked(lib, pairs[pos, k], chunks) for k in (0, 1))
        gx, gy = lib.autograd.grad((x.xlogy(y) * lib.tensor(g[pos])).sum(), [x, y], create_graph=True)
        (gx * gx * 1.5 + gy).sum().backward()
        results.append(r + [_np(x.grad), _np(y.grad)])
    for t, d in zip(*results):
        np.testing.assert_array_equal(d, t)


SAVED = {
    "prod": lambda L, x: x.prod(), "prod(1)": lambda L, x: x.prod(1), "erfinv": lambda L, x: x.erfinv(),
    "fmod(number)": lambda L, x: x.fmod(0.25), "remainder(number)": lambda L, x: x.remainder(0.2),
    "fmod(constant tensor)": lambda L, x: x.fmod(L.tensor(np.full((2, 3), 0.25))),
    "fmod(tensor)": lambda L, x: x.fmod(x.detach().requires_grad_() + 1),
    "lerp(number)": lambda L, x: x.lerp(x.detach() * 2, 0.3),
    "lerp(weight tensor)": lambda L, x: x.lerp(x.detach() * 2, L.tensor(np.full((2, 3), 0.3))),
}


@pytest.mark.parametrize("written", ["input", "output"])
@pytest.mark.parametrize("case", SAVED)
def test_a_write_after_the_op_raises_where_torchs_saved_tensor_was_written(case, written):
    """torch raises at backward where a tensor its node saved was written in place since, and computes otherwise:
    ``prod`` saves its result (a write to it computed here), ``erfinv`` its input, not its result (a write to the
    result raised here), ``fmod``/``remainder`` of a number and ``lerp`` of a number weight save nothing (a write
    to the input raised here)."""
    results = []
    for lib in (torch, dg):
        leaf = _chunked(lib, [[0.3, -0.6, 0.2], [0.5, 0.1, -0.7]], 2)
        x = leaf * 1
        y = SAVED[case](lib, x)
        (x if written == "input" else y).add_(0.125)
        try:
            (y * y).sum().backward()
            results.append(_np(leaf.grad))
        except RuntimeError as e:
            assert "modified by an inplace operation" in str(e)
            results.append("raises")
    if isinstance(results[0], str):
        assert results[1] == results[0]
    else:
        np.testing.assert_allclose(results[1], results[0], rtol=1e-12)


@pytest.mark.parametrize("chunks", [-1, 1], ids=str)
def test_copysign_gradient_to_the_sign_is_zeros(chunks):
    """torch's ``copysign`` gives the tensor whose sign it reads a gradient of zeros (an optimizer's weight decay
    steps on it); it got none here.  The value and the gradient to ``x`` are unchanged."""
    results = []
    for lib in (torch, dg):
        x = _chunked(lib, [[1.0, -2.0, 0.5], [3.0, -0.0, 2.0]], chunks)
        y = _chunked(lib, [-1.0, np.inf, -0.0], chunks)
        out = x.copysign(y)
        out.backward(lib.tensor(np.arange(1.0, 7.0).reshape(2, 3)))
        results.append([_np(out), _np(x.grad), _np(y.grad)])
    for t, d in zip(*results):
        np.testing.assert_array_equal(d, t)


def test_an_index_gradient_over_a_taken_axis_larger_than_a_chunk_is_a_contraction_of_bounded_blocks():
    """Where the scatter-add's task would hold the whole taken axis and that is larger than dask's
    ``array.chunk-size`` (an embedding table of millions of rows), the gradient is the one-hot contraction,
    a chunk of rows by a chunk of indices a block: the same numbers for finite cotangents."""
    import dask
    import torch

    rng = np.random.default_rng(3)
    xn, idx, v = rng.standard_normal((1000, 4)), rng.integers(0, 1000, 300), rng.standard_normal((300, 4))
    xt = torch.from_numpy(xn).requires_grad_()
    xt[torch.from_numpy(idx)].backward(torch.from_numpy(v))
    for size, layer in (("1KiB", "tensordot"), ("128MiB", "_scatter_add")):
        with dask.config.set({"array.chunk-size": size}):
            x = dg.from_array(xn, chunks=(100, 4), requires_grad=True)
            (g,) = dg.grad(x[idx], x, dg.tensor(v), lazy=True)
            assert any(str(k).startswith(layer) for k in g.array.__dask_graph__().layers)
            np.testing.assert_allclose(g.numpy(), xt.grad.numpy(), rtol=1e-13, atol=1e-13)
