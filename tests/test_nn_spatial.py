"""torch.nn's spatial functions (pad in its four modes, pixel_shuffle, pixel_unshuffle, instance_norm,
local_response_norm, interpolate in modes nearest, nearest-exact, area, linear, bilinear, bicubic and trilinear)
and their modules against torch (installed): float64 values and gradients equal to torch's at rtol 1e-12 (1e-15
absolutely where a sum adds in another order), in one chunk, even chunks (not every case) and uneven chunks along
every axis; torch's kernels' index rules and shortcuts (the backward's too); module reprs, running statistics and
errors are torch's."""
import numpy as np
import pytest

import daskgrad as dg
from daskgrad import nn
from daskgrad.nn import functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional
SHAPES = {3: (2, 4, 7), 4: (2, 4, 5, 6), 5: (1, 2, 3, 4, 5)}
CHUNKINGS = {"one": {3: -1, 4: -1, 5: -1}, "uneven": {3: ((2,), (1, 3), (3, 4)), 4: ((2,), (3, 1), (2, 3), (1, 5)),
                                                      5: (1, 1, 2, 3, 2)},
             "even": {3: (1, 2, 7), 4: (1, 2, 5, 3)}}
FEW = ["one", "uneven"]  # (the many pad and interpolate cases: even chunks are a case of uneven ones)


def _check(fd, ft, ndim, chunking, seed=0):
    """``fd`` and ``ft`` of one random input: the values and the gradients of one random cotangent."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(SHAPES[ndim])
    xd = dg.from_array(x, chunks=CHUNKINGS[chunking][ndim], requires_grad=True)
    xt = torch.tensor(x, requires_grad=True)
    yd, yt = fd(xd), ft(xt)
    g = rng.standard_normal(tuple(yt.shape))
    yd.backward(dg.from_array(g, chunks=yd.chunks))
    yt.backward(torch.tensor(g))
    y, gx = dg.compute(yd.detach(), xd.grad)
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(gx, xt.grad.numpy(), rtol=1e-12, atol=1e-15)


PADS = [((1, 2), 3), ((3, 0), 3), ((-1, 2), 3), ((2, 1, 0, 3), 4), ((0, -2, 1, 1), 4), ((1, 1, 1, 1, 1, 0), 4)]


PAD_CASES = [(p, n, m) for p, n in PADS for m in ("constant", "reflect", "replicate", "circular")
             if m == "constant" or len(p) < 6]  # (torch pads 3 axes of a 4D input in constant mode only)


@pytest.mark.parametrize("chunking", FEW)
@pytest.mark.parametrize("pad,ndim,mode", PAD_CASES, ids=[f"{m}{p}" for p, _, m in PAD_CASES])
def test_pad_values_and_gradients_are_torch_s(pad, ndim, mode, chunking):
    kw = {"value": 1.5} if mode == "constant" else {}
    _check(lambda x: F.pad(x, pad, mode, **kw), lambda x: TF.pad(x, pad, mode, **kw), ndim, chunking)


@pytest.mark.parametrize("chunking", list(CHUNKINGS))
def test_pixel_shuffle_and_unshuffle_are_torch_s(chunking):
    _check(lambda x: F.pixel_shuffle(x, 2), lambda x: TF.pixel_shuffle(x, 2), 4, chunking)
    _check(lambda x: F.pixel_unshuffle(x[:, :, 1:], 2), lambda x: TF.pixel_unshuffle(x[:, :, 1:], 2), 4, chunking)
    _check(lambda x: F.pixel_shuffle(F.pixel_unshuffle(x[:, :, :4], 2), 2),
           lambda x: TF.pixel_shuffle(TF.pixel_unshuffle(x[:, :, :4], 2), 2), 4, chunking)


@pytest.mark.parametrize("chunking", list(CHUNKINGS))
@pytest.mark.parametrize("ndim", [3, 4])
def test_instance_norm_and_local_response_norm_are_torch_s(ndim, chunking):
    w, b = np.linspace(0.5, 2.0, 4), np.linspace(-1.0, 1.0, 4)
    _check(lambda x: F.instance_norm(x, weight=dg.tensor(w), bias=dg.tensor(b), eps=1e-3),
           lambda x: TF.instance_norm(x, weight=torch.tensor(w), bias=torch.tensor(b), eps=1e-3), ndim, chunking)
    _check(lambda x: F.local_response_norm(x, 3), lambda x: TF.local_response_norm(x, 3), ndim, chunking)
    _check(lambda x: F.local_response_norm(x, 2, alpha=0.5, beta=0.6, k=2.0),
           lambda x: TF.local_response_norm(x, 2, alpha=0.5, beta=0.6, k=2.0), ndim, chunking)


INTERP = [{"scale_factor": 2}, {"scale_factor": 1.7}, {"scale_factor": 0.6}, {"size": 3},
          {"scale_factor": 2.3, "recompute_scale_factor": True},
          {"scale_factor": 1.1}]  # (sizes unchanged: torch copies, whatever the scale)


INTERP_MODES = [("nearest", 3, None), ("nearest", 4, None), ("linear", 3, False), ("linear", 3, True),
                ("bilinear", 4, False), ("bilinear", 4, True), ("nearest-exact", 3, None), ("nearest-exact", 4, None),
                ("area", 3, None), ("area", 4, None)]
# (area: adaptive average pooling, slow to build for large upsamplings, which nobody asks of it: not those)
INTERP_CASES = [(*m, kw) for m in INTERP_MODES for kw in INTERP if m[0] != "area" or kw.get("scale_factor", 0) < 2]
INTERP_CASES += [(*m, kw) for m in (("bicubic", 4, False), ("bicubic", 4, True), ("trilinear", 5, False))
                 for kw in INTERP[1:4] + INTERP[5:]]
INTERP_CASES += [("bicubic", 4, False, {"scale_factor": (1.1, 1.5)})]  # (torch's backward copies only all-equal sizes)


@pytest.mark.parametrize("chunking", FEW)
@pytest.mark.parametrize("mode,ndim,align,kw", INTERP_CASES, ids=[f"{m}{n}-{a}-{k}" for m, n, a, k in INTERP_CASES])
def test_interpolate_values_and_gradients_are_torch_s(mode, ndim, align, kw, chunking):
    _check(lambda x: F.interpolate(x, mode=mode, align_corners=align, **kw),
           lambda x: TF.interpolate(x, mode=mode, align_corners=align, **kw), ndim, chunking)


@pytest.mark.parametrize("shape,chunks", [((2, 3, 7), (1, 2, 3)), ((1, 2, 3, 5, 4), (1, 1, 2, 3, 3))])
def test_nearest_gradient_takes_torch_s_backward_shortcuts(shape, chunks):
    """torch's 1-d and 3-d nearest kernels compute ``floor(i * s)`` forward, but their backward takes the shortcuts
    ``i`` (size unchanged) and ``i // 2`` (size doubled) whatever the scale: both are torch's."""
    x = np.random.default_rng(6).standard_normal(shape)
    for sf in (1.1, 2.05):
        xd, xt = dg.from_array(x, chunks=chunks, requires_grad=True), torch.tensor(x, requires_grad=True)
        yd, yt = F.interpolate(xd, scale_factor=sf), TF.interpolate(xt, scale_factor=sf)
        g = np.arange(yt.numel(), dtype=float).reshape(yt.shape)
        yd.backward(dg.tensor(g))
        yt.backward(torch.tensor(g))
        np.testing.assert_array_equal(yd.detach().numpy(), yt.detach().numpy())
        np.testing.assert_array_equal(xd.grad.numpy(), xt.grad.numpy())


@pytest.mark.parametrize("mode,shape,sf", [("nearest", (1, 2, 7), 1.1), ("nearest", (1, 2, 3, 4, 5), (2.05, 1.1, 1.0)),
                                           ("bicubic", (1, 1, 4, 5), 1.1), ("bilinear", (1, 1, 4, 5), 1.7)])
def test_interpolate_double_backward_is_torch_s(mode, shape, sf):
    """The gradient of the gradient with respect to the cotangent: torch's double backward is its forward (not the
    transpose of its backward, where that took a shortcut)."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal(shape)
    xd, xt = dg.from_array(x, chunks=2, requires_grad=True), torch.tensor(x, requires_grad=True)
    yd, yt = F.interpolate(xd, scale_factor=sf, mode=mode), TF.interpolate(xt, scale_factor=sf, mode=mode)
    g, w = rng.standard_normal(tuple(yt.shape)), rng.standard_normal(shape)
    gd, gt = dg.from_array(g, chunks=3, requires_grad=True), torch.tensor(g, requires_grad=True)
    (ad,), (at,) = dg.autograd.grad(yd, xd, gd, create_graph=True), torch.autograd.grad(yt, xt, gt, create_graph=True)
    (bd,) = dg.autograd.grad((ad * dg.tensor(w)).sum(), gd)
    (bt,) = torch.autograd.grad((at * torch.tensor(w)).sum(), gt)
    np.testing.assert_allclose(ad.detach().numpy(), at.detach().numpy(), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(bd.detach().numpy(), bt.numpy(), rtol=1e-12, atol=1e-15)


def test_linear_source_positions_just_below_a_cell_round_as_torch_s():
    """torch rounds the source position to float32 before its floor, and clamps the weight to [0, 1]: a position
    1e-12 below a cell is that cell."""
    x = np.array([[[1.0, 10.0, 100.0, 1000.0, 1e4]]])
    for sf in (1.5 / (1.5 - 1e-12), 1.5 / (1.5 + 1e-12), 1.0000001):
        for ac in (False, True):
            kw = {"scale_factor": sf, "mode": "linear", "align_corners": ac}
            np.testing.assert_allclose(F.interpolate(dg.tensor(x), **kw).numpy(),
                                       TF.interpolate(torch.tensor(x), **kw).numpy(), rtol=1e-15)


def test_deprecated_upsample_functions_warn_and_interpolate_as_torch_s():
    x = np.random.default_rng(7).standard_normal((1, 2, 3, 4))
    for name, kw in (("upsample", {"scale_factor": 1.5, "mode": "bilinear"}), ("upsample_nearest", {"size": 5}),
                     ("upsample_bilinear", {"scale_factor": 2})):
        with pytest.warns(UserWarning, match=f"`nn.functional.{name}` is deprecated"):
            ours = getattr(F, name)(dg.from_array(x, chunks=2), **kw)
        with pytest.warns(UserWarning):
            theirs = getattr(TF, name)(torch.tensor(x), **kw)
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("f", [lambda F, x: F.pad(x, (0, 0)), lambda F, x: F.pad(x, (0, 0), "reflect"),
                               lambda F, x: F.pad(x, (-1, 0)), lambda F, x: F.pad(x, (-1, 0), "circular"),
                               lambda F, x: F.pixel_shuffle(x[None], 1), lambda F, x: F.pixel_unshuffle(x[None], 1),
                               lambda F, x: F.interpolate(x, size=4, mode="linear"),
                               lambda F, x: F.interpolate(x, size=4, mode="area")])
def test_results_are_new_tensors_as_torch_s(f):
    """No result is its input or a view of it: an in-place write to it leaves the input (torch's copies)."""
    for m in (torch, dg):
        x = m.zeros((2, 3, 4), dtype=m.float64)
        f(m.nn.functional, x).add_(1)
        assert not x.numpy().any(), m.__name__


def test_modes_not_built_are_refused():
    x = dg.from_array(np.zeros((1, 1, 4, 4)), chunks=2)
    with pytest.raises(NotImplementedError, match="antialias=True is not supported"):
        F.interpolate(x, size=3, mode="bilinear", antialias=True)
    with pytest.raises(NotImplementedError, match="mode='lanczos' is not supported"):
        F.interpolate(x, size=3, mode="lanczos")


def test_interpolate_in_float32_is_torch_s_to_float32_rounding():
    """torch's float32 linear kernel computes the weights in float32, as daskgrad; its sums may round otherwise."""
    x = np.random.default_rng(5).standard_normal((2, 3, 7)).astype("float32")
    for kw in ({"size": 17, "mode": "linear"}, {"scale_factor": 1.3, "mode": "linear", "align_corners": True},
               {"scale_factor": 1.7}):
        y = F.interpolate(dg.from_array(x, chunks=(1, 2, 3)), **kw)
        assert y.dtype == np.float32
        np.testing.assert_allclose(y.numpy(), TF.interpolate(torch.tensor(x), **kw).numpy(), rtol=1e-6,
                                   atol=1e-7)


def test_local_response_norm_of_integers_is_torch_s():
    """torch's average pooling of the integer squares divides as integers; the result is float32."""
    a = np.arange(24).reshape(2, 3, 4) - 7
    for kw in ({"size": 2, "alpha": 1.0}, {"size": 3}):
        y = F.local_response_norm(dg.from_array(a, chunks=2), **kw)
        assert y.dtype == np.float32
        np.testing.assert_allclose(y.numpy(), TF.local_response_norm(torch.tensor(a), **kw).numpy(), rtol=1e-6)


def test_instance_norm_modules_running_statistics_and_eval_are_torch_s():
    x = np.random.default_rng(2).standard_normal((3, 4, 5, 6))
    for kw in ({"affine": True, "track_running_stats": True}, {"momentum": None, "track_running_stats": True}, {}):
        ours, theirs = nn.InstanceNorm2d(4, **kw).double(), torch.nn.InstanceNorm2d(4, **kw).double()
        assert repr(ours) == repr(theirs) and set(ours.state_dict()) == set(theirs.state_dict())
        for _ in range(2):
            yd, yt = ours(dg.from_array(x, chunks=(2, 3, 5, 4))), theirs(torch.tensor(x))
            np.testing.assert_allclose(yd.detach().numpy(), yt.detach().numpy(), rtol=1e-12, atol=1e-15)
        ours.eval(), theirs.eval()
        np.testing.assert_allclose(ours(dg.from_array(x[0], chunks=2)).detach().numpy(),
                                   theirs(torch.tensor(x[0])).detach().numpy(),
                                   rtol=1e-12, atol=1e-15)
        for k, v in theirs.state_dict().items():
            np.testing.assert_allclose(np.asarray(ours.state_dict()[k].numpy()), v.numpy(), rtol=1e-12, err_msg=k)
    y = nn.InstanceNorm1d(4)(dg.from_array(x[0, :, 0], chunks=2))
    np.testing.assert_allclose(y.detach().numpy(), torch.nn.InstanceNorm1d(4)(torch.tensor(x[0, :, 0])).numpy(),
                               rtol=1e-12)


MODULES = [("ConstantPad1d", ((1, 2), 3.5)), ("ConstantPad2d", (1, 0.5)), ("ZeroPad2d", (1,)),
           ("ZeroPad2d", ((1, 0, 2, 3),)), ("ReflectionPad1d", (2,)), ("ReflectionPad2d", ((1, 2, 0, 1),)),
           ("ReplicationPad1d", ((1, 2),)), ("ReplicationPad2d", (1,)), ("CircularPad1d", (2,)),
           ("CircularPad2d", ((1, 0, 2, 1),)), ("PixelShuffle", (2,)), ("PixelUnshuffle", (2,)),
           ("LocalResponseNorm", (2,)), ("InstanceNorm1d", (4,)), ("InstanceNorm2d", (4, 1e-3, None, True, True)),
           ("Upsample", ()), ("Upsample", (None, 2)), ("Upsample", ((3, 4), None, "bilinear", True)),
           ("Upsample", (None, (2, 3), "bilinear")), ("ZeroPad1d", (2,)), ("ZeroPad3d", (1,)),
           ("ConstantPad3d", ((1, 0, 2, 1, 0, 1), 2.0)), ("ReflectionPad3d", ((1, 2, 1, 0, 1, 1),)),
           ("ReplicationPad3d", (2,)), ("CircularPad3d", ((1, 2, 3, 0, 1, -1),)), ("InstanceNorm3d", (4,)),
           ("UpsamplingNearest2d", (None, 2)), ("UpsamplingBilinear2d", ((5, 7),))]


@pytest.mark.parametrize("name,args", MODULES, ids=[f"{n}{a}" for n, a in MODULES])
def test_module_reprs_and_outputs_are_torch_s(name, args):
    ours, theirs = getattr(nn, name)(*args).double(), getattr(torch.nn, name)(*args).double()
    assert repr(ours) == repr(theirs)
    if name != "Upsample" or args[2:3] == ("bilinear",):
        x = np.random.default_rng(3).standard_normal((2, 4, 3, 4, 6))
        x = x[:, :, 0, 0] if name.endswith("1d") else x if name.endswith("3d") else x[:, :, 0]
        np.testing.assert_allclose(ours(dg.from_array(x, chunks=(1, 3, 2, 2, 4)[-x.ndim:])).detach().numpy(),
                                   theirs(torch.tensor(x)).detach().numpy(),
                                   rtol=1e-12, atol=1e-15)


ERRORS = [
    (lambda m, x: m.nn.functional.pad(x, (1,)), RuntimeError, "Padding length must be divisible by 2"),
    (lambda m, x: m.nn.functional.pad(x, (1,) * 8), RuntimeError, "Padding length should be less than or equal to "
     "two times the input dimension but got padding length 8 and input of dimension 3"),
    (lambda m, x: m.nn.functional.pad(x, (5, 1), "reflect"), RuntimeError, "Argument #4: Padding size should be "
     "less than the corresponding input dimension, but got: padding (5, 1) at dimension 2 of input [2, 4, 5]"),
    (lambda m, x: m.nn.functional.pad(x, (1, 1, 1, 1, 1, 1), "replicate"), NotImplementedError,
     "Padding size 6 is not supported for 3D input tensor."),
    (lambda m, x: m.nn.functional.pad(x, (1, 1), "foo"), NotImplementedError, "Unrecognised padding mode foo"),
    (lambda m, x: m.nn.functional.pad(x, (1, 1), "reflect", 1.0), RuntimeError,
     'Padding mode "reflect" doesn\'t take in value argument'),
    (lambda m, x: m.nn.functional.pad(x, (6, 1), "circular"), RuntimeError,
     "Padding value causes wrapping around more than once."),
    (lambda m, x: m.nn.functional.pixel_shuffle(x, 3), RuntimeError, "pixel_shuffle expects its input's 'channel' "
     "dimension to be divisible by the square of upscale_factor, but input.size(-3)=2 is not divisible by 9"),
    (lambda m, x: m.nn.functional.pixel_unshuffle(x, 3), RuntimeError, "pixel_unshuffle expects height to be "
     "divisible by downscale_factor, but input.size(-2)=4 is not divisible by 3"),
    (lambda m, x: m.nn.functional.local_response_norm(x[0], 2), ValueError, "Expected 3D or higher dimensionality"),
    (lambda m, x: m.nn.functional.interpolate(x, scale_factor=2, mode="bilinear"), NotImplementedError,
     "Got 3D input, but bilinear mode needs 4D input"),
    (lambda m, x: m.nn.functional.interpolate(x, scale_factor=2, align_corners=True), ValueError,
     "align_corners option can only be set with the interpolating modes"),
    (lambda m, x: m.nn.functional.interpolate(x, size=3, scale_factor=2), ValueError,
     "only one of size or scale_factor should be defined"),
    (lambda m, x: m.nn.functional.interpolate(x, size=3, mode="trilinear"), NotImplementedError,
     "Got 3D input, but trilinear mode needs 5D input"),
    (lambda m, x: m.nn.functional.interpolate(x, scale_factor=2, antialias=True), ValueError,
     "Anti-alias option is restricted to bilinear, bicubic, and lanczos modes and requires a 4-D tensor as input"),
    (lambda m, x: m.nn.functional.interpolate(x, size=0, mode="linear"), RuntimeError,
     "Input and output sizes should be greater than 0, but got input (W: 5) and output (W: 0)"),
    (lambda m, x: m.nn.functional.interpolate(x.long(), size=3), NotImplementedError,
     "\"compute_indices_weights_nearest\" not implemented for 'Long'"),
    (lambda m, x: m.nn.functional.instance_norm(x, use_input_stats=False), RuntimeError,
     "Expected running_mean and running_var to be defined when use_input_stats is false"),
    (lambda m, x: m.nn.functional.pad(x, (-3, -3), "replicate"), RuntimeError,
     "input (W: 5) is too small. Calculated output W: -1"),
    (lambda m, x: m.nn.functional.pad(x, (-3, -3), "circular"), RuntimeError,
     "Negative padding value is resulting in an empty dimension"),
    (lambda m, x: m.nn.functional.pad(x, (1, 1, 4, 1), "reflect"), RuntimeError, "Argument #6: Padding size should "
     "be less than the corresponding input dimension, but got: padding (4, 1) at dimension 1 of input [2, 4, 5]"),
    (lambda m, x: m.nn.InstanceNorm2d(4)(x[0]), ValueError, "expected 3D or 4D input (got 2D input)"),
    (lambda m, x: m.nn.InstanceNorm1d(3, affine=True)(x), ValueError,
     "expected input's size at dim=1 to match num_features (3), but got: 4."),
]


@pytest.mark.parametrize("k", range(len(ERRORS)))
def test_errors_are_torch_s(k):
    f, kind, text = ERRORS[k]
    x = np.random.default_rng(4).standard_normal((2, 4, 5)).reshape(2, 4, 5)
    for m, t in ((torch, torch.tensor(x)), (dg, dg.from_array(x, chunks=2))):
        with pytest.raises(kind) as err:
            f(m, t)
        assert text in str(err.value), (m.__name__, str(err.value))
