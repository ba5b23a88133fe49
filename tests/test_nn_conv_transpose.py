"""F.conv_transpose1d/2d/3d and nn.ConvTranspose1d/2d/3d against torch (installed): values and the gradients of the
input, the weight and the bias equal torch's (float64, rtol 1e-10) for stride, padding, output_padding, groups,
dilation and bias, on inputs in one chunk, even and uneven chunks (batch and spatial axes; a chunk smaller than
the stride); gradcheck and gradgradcheck over those chunkings; forward's ``output_size``; torch's reprs, errors
and signatures."""
import inspect
import warnings

import numpy as np
import pytest

import daskgrad as dg
from daskgrad import nn
from daskgrad.nn import functional as F
from daskgrad.testing import gradcheck, gradgradcheck

torch = pytest.importorskip("torch")
TF = torch.nn.functional

# (input shape, weight shape, keywords)
CASES = {
    "1d-plain": ((3, 4, 7), (4, 3, 3), {}),
    "1d-stride2-pad1-outpad1": ((3, 4, 7), (4, 3, 3), dict(stride=2, padding=1, output_padding=1)),
    "1d-stride3-kernel2": ((3, 4, 7), (4, 2, 2), dict(stride=3)),
    "1d-dilated-outpad-past-stride": ((3, 4, 9), (4, 1, 2), dict(stride=2, dilation=3, output_padding=2, padding=3,
                                                                 groups=4)),
    "1d-groups2-nobias": ((3, 4, 7), (4, 3, 3), dict(groups=2, bias=False)),
    "1d-pad-past-output-padding": ((3, 4, 8), (4, 2, 5), dict(stride=2, padding=3, output_padding=1)),
    "2d-plain": ((2, 3, 5, 6), (3, 2, 3, 2), {}),
    "2d-mixed": ((2, 4, 6, 5), (4, 2, 3, 2), dict(stride=(2, 3), padding=(1, 0), output_padding=(1, 2), groups=2,
                                                  dilation=(1, 2))),
    "2d-stride2-pad2": ((2, 3, 5, 6), (3, 2, 4, 3), dict(stride=2, padding=2, dilation=(2, 1))),
    "3d-mixed": ((2, 2, 3, 4, 3), (2, 2, 2, 3, 2), dict(stride=(2, 1, 2), padding=(0, 1, 1), output_padding=(1, 0, 1),
                                                        dilation=(1, 1, 2))),
}
CHUNKINGS = ["one", "even", "uneven"]


def _chunks(shape, chunking):
    if chunking == "one":
        return -1
    if chunking == "even":
        return tuple(max(1, n // 2) if i != 1 else n for i, n in enumerate(shape))
    return tuple(((1, n - 1) if i != 1 else (n,)) if n > 1 else (n,) for i, n in enumerate(shape))


def _inputs(shape, wshape, groups, bias, chunking, seed=0):
    rng = np.random.default_rng(seed)
    x, w = rng.standard_normal(shape), rng.standard_normal(wshape)
    b = rng.standard_normal(wshape[1] * groups) if bias else None
    ours = [dg.from_array(x, chunks=_chunks(shape, chunking), requires_grad=True), dg.from_array(w, requires_grad=True),
            None if b is None else dg.from_array(b, requires_grad=True)]
    theirs = [None if a is None else torch.tensor(a, requires_grad=True) for a in (x, w, b)]
    return ours, theirs


def _close(a, b):
    np.testing.assert_allclose(a, b.detach().numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("chunking", CHUNKINGS)
@pytest.mark.parametrize("case", list(CASES))
def test_values_and_gradients_are_torch_s(case, chunking):
    shape, wshape, kw = CASES[case]
    kw = dict(kw)
    bias = kw.pop("bias", True)
    name = f"conv_transpose{len(shape) - 2}d"
    ours, theirs = _inputs(shape, wshape, kw.get("groups", 1), bias, chunking)
    yd, yt = getattr(F, name)(*ours, **kw), getattr(TF, name)(*theirs, **kw)
    g = np.random.default_rng(1).standard_normal(tuple(yt.shape))
    yd.backward(dg.from_array(g, chunks=yd.chunks))
    yt.backward(torch.tensor(g))
    wanted = [yd.detach()] + [t.grad for t in ours if t is not None]
    got = dg.compute(*wanted)
    for value, t in zip(got, [yt] + [t.grad for t in theirs if t is not None]):
        _close(value, t)
    assert yd.chunks[0] == ours[0].chunks[0] and ours[0].grad.chunks == ours[0].chunks


@pytest.mark.parametrize("chunking", CHUNKINGS)
@pytest.mark.parametrize("case", ["1d-stride2-pad1-outpad1", "1d-dilated-outpad-past-stride", "2d-mixed",
                                  "3d-mixed"])
def test_gradcheck_and_gradgradcheck(case, chunking):
    shape, wshape, kw = CASES[case]
    name = f"conv_transpose{len(shape) - 2}d"
    (x, w, b), _ = _inputs(shape, wshape, kw.get("groups", 1), True, chunking)

    def f(x, w, b):
        return getattr(F, name)(x, w, b, **kw)

    assert gradcheck(f, (x, w, b))
    assert gradgradcheck(f, (x, w, b))


def test_unbatched_input_and_empty_batch_are_torch_s():
    ours, theirs = _inputs((4, 7), (4, 3, 3), 1, True, "even")
    yd, yt = F.conv_transpose1d(*ours, stride=2), TF.conv_transpose1d(*theirs, stride=2)
    _close(yd.detach().numpy(), yt)
    x = np.zeros((0, 4, 5))
    assert F.conv_transpose1d(dg.from_array(x), dg.ones(4, 3, 3, dtype="float64")).shape == \
        tuple(TF.conv_transpose1d(torch.tensor(x), torch.ones(4, 3, 3, dtype=torch.float64)).shape)


def _error(f):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            f()
        except Exception as e:  # noqa: BLE001  (compared with torch's)
            return type(e).__name__, str(e).replace("torch.", "daskgrad.")
    return None


ERRORS = [((2, 4, 5), (3, 3, 3), {}), ((2, 4, 5), (4, 3, 3), dict(stride=2, output_padding=2)),
          ((2, 4, 5), (4, 3, 3), dict(output_padding=1)), ((2, 4, 5, 5), (4, 3, 3, 3), dict(output_padding=(0, 1))),
          ((2, 4, 5, 5), (4, 3, 3, 3), dict(output_padding=1, stride=(2, 1))),
          ((2, 4, 5), (4, 3, 3), dict(padding=-1)), ((2, 4, 5), (4, 3, 3), dict(output_padding=-1)),
          ((2, 4, 5), (4, 3, 3), dict(stride=0)), ((2, 4, 5), (4, 3, 3), dict(groups=3)),
          ((2, 4, 5), (4, 3, 3), dict(groups=0)), ((2, 4, 5), (4, 3, 3), dict(padding="same")),
          ((5,), (4, 3, 3), {}), ((2, 4, 5), (4, 3), {}), ((2, 4, 5), (4, 3, 3), dict(stride=(1, 2))),
          ((2, 4, 5), (4, 3, 3), dict(bias=2)), ((2, 4, 3, 3, 3), (4, 2, 2, 2, 2), dict(output_padding=1)),
          ((2, 4, 3, 3, 3), (4, 2, 2, 2, 2), dict(output_padding=(0, 0, 1), stride=(2, 1, 1))),
          ((2, 4, 3, 3, 3), (3, 2, 2, 2, 2), {}), ((3, 3, 3), (4, 2, 2, 2, 2), {})]


@pytest.mark.parametrize("shape,wshape,kw", ERRORS, ids=[f"{s}-{w}-{k}" for s, w, k in ERRORS])
def test_bad_arguments_raise_torch_s_errors(shape, wshape, kw):
    kw = dict(kw)
    nbias = kw.pop("bias", None)
    name = f"conv_transpose{max(len(wshape), 3) - 2}d"
    x, w = np.ones(shape), np.ones(wshape)
    b = None if nbias is None else np.ones(nbias)
    ours = _error(lambda: getattr(F, name)(dg.from_array(x), dg.from_array(w),
                                           None if b is None else dg.from_array(b), **kw))
    theirs = _error(lambda: getattr(TF, name)(torch.tensor(x), torch.tensor(w),
                                              None if b is None else torch.tensor(b), **kw))
    assert ours == theirs and ours is not None


def test_an_output_that_would_be_empty_raises():
    """(torch's oneDNN kernel raises its own text here; a RuntimeError both.)"""
    with pytest.raises(RuntimeError, match="Output size is too small"):
        F.conv_transpose1d(dg.ones(2, 4, 5), dg.ones(4, 3, 3), padding=5)
    with pytest.raises(RuntimeError):
        TF.conv_transpose1d(torch.ones(2, 4, 5), torch.ones(4, 3, 3), padding=5)


def _pair(cls, *args, **kw):
    theirs = getattr(torch.nn, cls)(*args, **kw).double()
    ours = getattr(nn, cls)(*args, **kw).double()
    ours.load_state_dict({k: v.detach().numpy().copy() for k, v in theirs.state_dict().items()})
    return ours, theirs


MODULES = [("ConvTranspose1d", (4, 6, 3), dict(stride=2, padding=1, output_padding=1, groups=2), (3, 4, 7)),
           ("ConvTranspose1d", (4, 2, 2), dict(bias=False, dilation=2), (3, 4, 7)),
           ("ConvTranspose2d", (3, 4, (3, 2)), dict(stride=(2, 1), padding=(1, 0)), (2, 3, 5, 6)),
           ("ConvTranspose2d", (4, 2, 3), dict(stride=3, output_padding=(2, 1), groups=2, bias=False), (2, 4, 4, 3))]


@pytest.mark.parametrize("cls,args,kw,shape", MODULES, ids=[f"{c}-{k}" for c, _, k, _ in MODULES])
def test_modules_are_torch_s(cls, args, kw, shape):
    ours, theirs = _pair(cls, *args, **kw)
    assert repr(ours) == repr(theirs)
    assert ours.weight.shape == tuple(theirs.weight.shape)
    x = np.random.default_rng(0).standard_normal(shape)
    xd, xt = dg.from_array(x, chunks=_chunks(shape, "uneven"), requires_grad=True), torch.tensor(x, requires_grad=True)
    yd, yt = ours(xd), theirs(xt)
    (yd * yd).sum().backward()
    (yt * yt).sum().backward()
    _close(yd.detach().numpy(), yt)
    _close(xd.grad.numpy(), xt.grad)
    for (k, p), tp in zip(ours.named_parameters(), theirs.parameters()):
        _close(p.grad.numpy(), tp.grad)


def test_forward_output_size_picks_torch_s_output_padding_and_checks_it():
    ours, theirs = _pair("ConvTranspose2d", 3, 2, 3, stride=(3, 2), padding=1)
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5))
    xd, xt = dg.from_array(x, chunks=(1, 3, 2, 3)), torch.tensor(x)
    for size in ([10, 9], [12, 10], (2, 2, 11, 9), [3, 11, 10]):
        got, expected = _error(lambda: ours(xd, size)), _error(lambda: theirs(xt, size))
        if expected is None:
            _close(ours(xd, output_size=size).detach().numpy(), theirs(xt, output_size=size))
        else:
            assert got == expected
    assert _error(lambda: ours(xd, [13, 9])) == _error(lambda: theirs(xt, [13, 9]))
    assert _error(lambda: ours(xd, [9, 9])) == _error(lambda: theirs(xt, [9, 9]))


@pytest.mark.parametrize("cls", ["ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"])
def test_constructor_checks_defaults_and_signatures_are_torch_s(cls):
    for args, kw in [((4, 6, 3), dict(groups=4)), ((4, 6, 3), dict(groups=0)), ((4, 5, 3), dict(groups=2)),
                     ((4, 6, 3), dict(padding_mode="reflect")), ((4, 6, 3), dict(padding_mode="bad"))]:
        assert _error(lambda: getattr(nn, cls)(*args, **kw)) == _error(lambda: getattr(torch.nn, cls)(*args, **kw))
    sig = [(n, p.default) for n, p in inspect.signature(getattr(nn, cls)).parameters.items()]
    assert sig == [(n, p.default) for n, p in inspect.signature(getattr(torch.nn, cls)).parameters.items()]
    name = f"conv_transpose{cls[-2]}d"
    assert list(inspect.signature(getattr(F, name)).parameters) == \
        ["input", "weight", "bias", "stride", "padding", "output_padding", "groups", "dilation"]
    dg.manual_seed(0)
    m = getattr(nn, cls)(4, 6, 3, groups=2)
    bound = 1 / np.sqrt(3 * 3 ** int(cls[-2]))  # 1 / sqrt(out_channels / groups * kernel cells)
    w = m.weight.detach().numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.8 * bound
