"""Pooling with ``ceil_mode=True`` against torch (installed), in float64: F.max_pool1d/2d/3d (``dilation``,
``return_indices``), F.avg_pool1d/2d/3d (``count_include_pad`` both ways, ``divisor_override``), F.lp_pool1d/2d/3d
and the modules' ``ceil_mode`` argument.  Sizes, strides and paddings are picked so that the last window is partial:
it starts inside the input or its left padding and runs past the right padding (where torch divides an average by the
window clipped there).  Each on inputs in one chunk, in even chunks and in uneven chunks (some smaller than a
window): values, indices and the input's gradient for a random cotangent, rtol 1e-10, and torch's errors."""
import itertools
import warnings

import numpy as np
import pytest

import daskgrad as dg
from daskgrad import nn
from daskgrad.nn import functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional

SHAPES = {1: (2, 3, 9), 2: (2, 2, 7, 8), 3: (1, 2, 5, 6, 7)}
CHUNKINGS = {1: {"one chunk": (2, 3, 9), "even": (1, 3, 3), "uneven": ((1, 1), 3, (4, 1, 4))},
             2: {"one chunk": (2, 2, 7, 8), "even": (1, 2, 7, 4), "uneven": (2, (1, 1), (3, 4), (5, 2, 1))},
             3: {"one chunk": (1, 2, 5, 6, 7), "even": (1, 1, 5, 3, 7), "uneven": (1, 2, (2, 3), (1, 5), (4, 3))}}
# (kernel, stride, padding): every one leaves a partial last window on some axis of every shape above
WINDOWS = [(2, 2, 0), (3, 2, 1), (3, 3, 0), (2, 3, 1), (3, 4, 1)]


def _np(t):
    return t.detach().numpy()


def _same(ours_of, theirs_of, nsp, chunks, positive=False):
    """The same values through both: outputs, int64 indices (where a tuple comes back) and the input's gradient
    for a random cotangent of the first output."""
    a = np.random.default_rng(0).standard_normal(SHAPES[nsp])
    a = np.abs(a) + 0.1 if positive else a
    x, t = dg.from_array(a, chunks=chunks, requires_grad=True), torch.tensor(a, requires_grad=True)
    ours, theirs = ours_of(x), theirs_of(t)
    if isinstance(theirs, tuple):
        (ours, idx), (theirs, t_idx) = ours, theirs
        assert idx.dtype == np.int64
        np.testing.assert_array_equal(idx.numpy(), t_idx.numpy())
    assert tuple(ours.shape) == tuple(theirs.shape)
    w = np.random.default_rng(1).standard_normal(tuple(theirs.shape))
    (ours * dg.from_array(w)).sum().backward()
    (theirs * torch.tensor(w)).sum().backward()
    out, grad = dg.compute(ours.detach(), x.grad)
    np.testing.assert_allclose(out, _np(theirs), rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(grad, _np(t.grad), rtol=1e-10, atol=1e-14)


def _rotating(nsp, combinations):
    """Each combination once, the chunkings taken in turn (each chunking meets several windows)."""
    return zip(combinations, itertools.cycle(CHUNKINGS[nsp].values()))


@pytest.mark.parametrize("nsp", (1, 2, 3))
def test_max_pooling_with_ceil_mode_gives_torchs_values_indices_and_gradients(nsp):
    combinations = [(w, d) for w, d in itertools.product(WINDOWS, (1, 2)) if w[2] <= (d * (w[0] - 1) + 1) // 2]
    for i, (((k, s, p), dilation), chunks) in enumerate(_rotating(nsp, combinations)):
        kw = dict(kernel_size=k, stride=s, padding=p, dilation=dilation, ceil_mode=True, return_indices=i % 3 > 0)
        _same(lambda x: getattr(F, f"max_pool{nsp}d")(x, **kw), lambda t: getattr(TF, f"max_pool{nsp}d")(t, **kw),
              nsp, chunks)


@pytest.mark.parametrize("nsp", (1, 2, 3))
def test_average_pooling_with_ceil_mode_divides_the_edge_windows_as_torch_does(nsp):
    combinations = [(w, include, None) for w, include in itertools.product(WINDOWS, (True, False))]
    if nsp > 1:  # (avg_pool1d has no divisor_override)
        combinations += [((3, 2, 1), True, 5), ((2, 3, 1), False, 4)]
    for ((k, s, p), include, override), chunks in _rotating(nsp, combinations):
        kw = dict(kernel_size=k, stride=s, padding=p, ceil_mode=True, count_include_pad=include)
        if override:
            kw["divisor_override"] = override
        _same(lambda x: getattr(F, f"avg_pool{nsp}d")(x, **kw), lambda t: getattr(TF, f"avg_pool{nsp}d")(t, **kw),
              nsp, chunks)


@pytest.mark.parametrize("nsp", (1, 2, 3))
def test_power_average_pooling_with_ceil_mode_gives_torchs_values_and_gradients(nsp):
    for i, ((k, s, _), chunks) in enumerate(_rotating(nsp, WINDOWS)):
        kw = dict(norm_type=2.0 + i % 2, kernel_size=k, stride=s, ceil_mode=True)
        _same(lambda x: getattr(F, f"lp_pool{nsp}d")(x, **kw), lambda t: getattr(TF, f"lp_pool{nsp}d")(t, **kw),
              nsp, chunks, positive=True)


MODULES = [("MaxPool{}d", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
           ("MaxPool{}d", dict(kernel_size=2, stride=3, dilation=2, ceil_mode=True, return_indices=True)),
           ("AvgPool{}d", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
           ("AvgPool{}d", dict(kernel_size=2, stride=3, padding=1, ceil_mode=True, count_include_pad=False)),
           ("LPPool{}d", dict(norm_type=2, kernel_size=3, stride=2, ceil_mode=True))]


@pytest.mark.parametrize("nsp", (1, 2, 3))
def test_pooling_modules_take_ceil_mode_as_torchs_do(nsp):
    for name, kw in MODULES:
        ours, theirs = getattr(nn, name.format(nsp))(**kw), getattr(torch.nn, name.format(nsp))(**kw)
        assert repr(ours) == repr(theirs)
        _same(ours, theirs, nsp, CHUNKINGS[nsp]["uneven"], positive=name.startswith("LP"))


def test_a_ceil_mode_window_that_would_start_in_the_right_padding_is_dropped_as_torchs():
    # 6 cells, kernel 2, stride 2, padding 1: a 5th window would start at cell 7, past the input and its left padding
    for nsp in (1, 2):
        kw = dict(kernel_size=2, stride=2, padding=1, ceil_mode=True)
        shape = (1, 1) + (6,) * nsp
        x, t = dg.ones(shape), torch.ones(shape)
        for fn in ("max_pool", "avg_pool"):
            ours, theirs = getattr(F, f"{fn}{nsp}d")(x, **kw), getattr(TF, f"{fn}{nsp}d")(t, **kw)
            assert tuple(ours.shape) == tuple(theirs.shape) == (1, 1) + (4,) * nsp
            np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-10)


def _same_error(ours, theirs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(Exception) as expected:
            theirs()
        with pytest.raises(Exception) as got:
            ours()
    assert type(got.value) is type(expected.value), (got.value, expected.value)
    assert str(got.value) == str(expected.value)


def test_ceil_mode_keeps_torchs_errors_and_torchs_sizes_for_inputs_smaller_than_a_window():
    a = np.random.default_rng(0).standard_normal((1, 2, 2, 2))
    x, t = dg.from_array(a), torch.tensor(a)
    # a window longer than the input: one window with ceil_mode (torch computes it), an error without
    for fn in ("max_pool2d", "avg_pool2d"):
        for ceil in (False, True):
            def ours(fn=fn, ceil=ceil):
                return getattr(F, fn)(x, 3, stride=3, ceil_mode=ceil)

            def theirs(fn=fn, ceil=ceil):
                return getattr(TF, fn)(t, 3, stride=3, ceil_mode=ceil)
            try:
                expected = theirs()
            except RuntimeError:
                _same_error(ours, theirs)
            else:
                np.testing.assert_allclose(ours().numpy(), expected.numpy(), rtol=1e-10)
    _same_error(lambda: F.max_pool2d(x, 2, padding=2, ceil_mode=True),
                lambda: TF.max_pool2d(t, 2, padding=2, ceil_mode=True))
    _same_error(lambda: F.max_pool1d(x[0], 3, padding=2, ceil_mode=True),
                lambda: TF.max_pool1d(t[0], 3, padding=2, ceil_mode=True))
