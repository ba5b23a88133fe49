"""The 3-d layers and the pooling family against torch (installed), in float64: F.conv3d/Conv3d,
F.max_pool3d/MaxPool3d, F.avg_pool3d/AvgPool3d, F.adaptive_avg_pool3d/AdaptiveAvgPool3d, max pooling's
``return_indices`` and ``F.max_pool1d/2d/3d_with_indices``, BatchNorm3d, F.adaptive_max_pool1d/2d/3d (and
``_with_indices``)/AdaptiveMaxPool1d/2d/3d, F.max_unpool1d/2d/3d/MaxUnpool1d/2d/3d, F.lp_pool1d/2d/3d/LPPool1d/2d/3d,
Softmax2d, F.channel_shuffle/ChannelShuffle, F.interpolate(mode='area') of 5-D inputs.  Inputs in one chunk, in
even chunks (the 3-d layers) and in uneven chunks (along the batch and the spatial axes, some smaller than a window):
values, indices, the input's (and parameters') gradients for a random cotangent, reprs, and torch's errors (type and
text)."""
import math
import warnings

import numpy as np
import pytest

import daskgrad as dg
from daskgrad import nn
from daskgrad.nn import functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional

SHAPE_3D = (2, 4, 6, 5, 7)  # (N, C, D, H, W)
CHUNKINGS_3D = {"one chunk": SHAPE_3D, "even": (1, 2, 3, 5, 7), "uneven": ((1, 1), (3, 1), (1, 5), (2, 3), (4, 2, 1))}
SHAPE_2D = (2, 3, 7, 6)
CHUNKINGS_2D = {"one chunk": SHAPE_2D, "even": (1, 3, 7, 3), "uneven": ((1, 1), (2, 1), (4, 2, 1), (5, 1))}
SHAPE_1D = (3, 4, 9)
CHUNKINGS_1D = {"one chunk": SHAPE_1D, "even": (3, 2, 3), "uneven": ((2, 1), (1, 3), (4, 1, 4))}
CHUNKINGS = {3: CHUNKINGS_3D, 2: CHUNKINGS_2D, 1: CHUNKINGS_1D}
SHAPES = {3: SHAPE_3D, 2: SHAPE_2D, 1: SHAPE_1D}


def _np(t):
    return t.detach().numpy() if hasattr(t, "detach") else np.asarray(t)


def _close(ours, theirs):
    np.testing.assert_allclose(_np(ours), _np(theirs), rtol=1e-10, atol=1e-12)


def _inputs(shape, chunks, seed=0, positive=False, values=None):
    a = np.random.default_rng(seed).standard_normal(shape) if values is None else values
    a = np.abs(a) + 0.1 if positive else a
    return dg.from_array(a, chunks=chunks, requires_grad=True), torch.tensor(a, requires_grad=True)


def _same(ours_of, theirs_of, shape, chunks, positive=False, params=(), values=None):
    """``ours_of(x)`` and ``theirs_of(t)`` on the same values (random ones unless ``values``): outputs (and integer
    indices) equal, and the input's (and ``params``' pairs') gradients for a random cotangent of the first output."""
    x, t = _inputs(shape, chunks, positive=positive, values=values)
    ours, theirs = ours_of(x), theirs_of(t)
    if isinstance(theirs, tuple):
        (ours, idx), (theirs, t_idx) = ours, theirs
        assert idx.dtype == np.int64 and not idx.requires_grad
        np.testing.assert_array_equal(idx.numpy(), t_idx.numpy())
    assert tuple(ours.shape) == tuple(theirs.shape)
    _close(ours, theirs)
    w = np.random.default_rng(1).standard_normal(tuple(theirs.shape))
    (ours * dg.from_array(w)).sum().backward()
    (theirs * torch.tensor(w)).sum().backward()
    _close(x.grad, t.grad)
    for p_ours, p_theirs in params:
        _close(p_ours.grad, p_theirs.grad)
    return ours


def _same_error(ours, theirs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(Exception) as expected:
            theirs()
        with pytest.raises(Exception) as got:
            ours()
    assert type(got.value) is type(expected.value), (got.value, expected.value)
    assert str(got.value) == str(expected.value)


def _pair(make, *args, **kw):
    """The same module in both libraries, torch's parameters and buffers copied into ours."""
    theirs = make(torch.nn, *args, **kw).double()
    ours = make(nn, *args, **kw).double()
    state = {k: v.detach().numpy().copy() for k, v in theirs.state_dict().items()}
    if state:
        ours.load_state_dict(state)
    return ours, theirs


# ------------------------------------------------------------------ conv3d
@pytest.mark.parametrize("chunking", CHUNKINGS_3D)
@pytest.mark.parametrize("kw", [dict(), dict(stride=(1, 2, 2), padding=1), dict(padding="same", dilation=(1, 2, 1)),
                                dict(groups=2, padding=(0, 1, 2), stride=2)],
                         ids=["plain", "strided", "same", "groups"])
def test_conv3d_gives_torchs_values_and_gradients_of_input_weight_and_bias(chunking, kw):
    rng = np.random.default_rng(3)
    w = rng.standard_normal((6, 4 // kw.get("groups", 1), 2, 3, 2))
    b = rng.standard_normal(6)
    wd, bd = dg.from_array(w, requires_grad=True), dg.from_array(b, requires_grad=True)
    wt, bt = torch.tensor(w, requires_grad=True), torch.tensor(b, requires_grad=True)
    _same(lambda x: F.conv3d(x, wd, bd, **kw), lambda t: TF.conv3d(t, wt, bt, **kw), SHAPE_3D, CHUNKINGS_3D[chunking],
          params=[(wd, wt), (bd, bt)])


def test_conv3d_module_gives_torchs_outputs_and_gradients_and_its_repr():
    ours, theirs = _pair(lambda lib: lib.Conv3d(4, 3, (2, 3, 1), stride=(2, 1, 1), padding=(1, 0, 0), bias=True))
    assert repr(ours) == repr(theirs)
    _same(ours, theirs, SHAPE_3D, CHUNKINGS_3D["uneven"], params=[(ours.weight, theirs.weight),
                                                                  (ours.bias, theirs.bias)])
    _same(ours, theirs, SHAPE_3D[1:], CHUNKINGS_3D["uneven"][1:])  # unbatched


# ------------------------------------------------------------------ max, average pooling
@pytest.mark.parametrize("chunking", CHUNKINGS_3D)
@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=(3, 2, 3), stride=(1, 2, 2), padding=(1, 0, 1)),
                                dict(kernel_size=2, stride=1, dilation=(2, 1, 2))], ids=["plain", "strided", "dilated"])
def test_max_pool3d_gives_torchs_values_indices_and_gradients(chunking, kw):
    _same(lambda x: F.max_pool3d(x, **kw, return_indices=True), lambda t: TF.max_pool3d(t, **kw, return_indices=True),
          SHAPE_3D, CHUNKINGS_3D[chunking])
    _same(lambda x: F.max_pool3d(x, **kw), lambda t: TF.max_pool3d(t, **kw), SHAPE_3D, CHUNKINGS_3D[chunking])


@pytest.mark.parametrize("nsp", [1, 2, 3])
@pytest.mark.parametrize("chunking", ["one chunk", "uneven"])
def test_max_pool_with_indices_gives_torchs_flat_indices_per_channel_batched_and_not(nsp, chunking):
    kw = dict(kernel_size=3, stride=2, padding=1)
    name = f"max_pool{nsp}d_with_indices"
    shape, chunks = SHAPES[nsp], CHUNKINGS[nsp][chunking]
    _same(lambda x: getattr(F, name)(x, **kw), lambda t: getattr(TF, name)(t, **kw), shape, chunks)
    _same(lambda x: getattr(F, name)(x, **kw), lambda t: getattr(TF, name)(t, **kw), shape[1:], chunks[1:])
    ours, theirs = _pair(lambda lib: getattr(lib, f"MaxPool{nsp}d")(**kw, return_indices=True))
    assert repr(ours) == repr(theirs)
    _same(ours, theirs, shape, chunks)


def test_max_pool_ties_send_the_gradient_and_the_index_to_the_first_largest_cell():
    a = np.zeros((1, 1, 4, 4, 4))
    a[0, 0, 1:3, 1:3, 1:3] = 1.0
    x, t = dg.from_array(a, chunks=(1, 1, 3, 1, 2), requires_grad=True), torch.tensor(a, requires_grad=True)
    (o, i), (to, ti) = F.max_pool3d(x, 3, 1, return_indices=True), TF.max_pool3d(t, 3, 1, return_indices=True)
    np.testing.assert_array_equal(i.numpy(), ti.numpy())
    o.sum().backward()
    to.sum().backward()
    _close(x.grad, t.grad)


@pytest.mark.parametrize("chunking", CHUNKINGS_3D)
@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=(2, 1, 2), padding=1),
                                dict(kernel_size=3, padding=1, count_include_pad=False),
                                dict(kernel_size=(2, 3, 2), divisor_override=5)],
                         ids=["plain", "padded", "excluding-pad", "divisor"])
def test_avg_pool3d_gives_torchs_values_and_gradients(chunking, kw):
    _same(lambda x: F.avg_pool3d(x, **kw), lambda t: TF.avg_pool3d(t, **kw), SHAPE_3D, CHUNKINGS_3D[chunking])


@pytest.mark.parametrize("chunking", ["even", "uneven"])
@pytest.mark.parametrize("size", [1, (3, 2, 4), (4, None, 3)])
def test_adaptive_avg_pool3d_gives_torchs_values_and_gradients(chunking, size):
    _same(lambda x: F.adaptive_avg_pool3d(x, size), lambda t: TF.adaptive_avg_pool3d(t, size), SHAPE_3D,
          CHUNKINGS_3D[chunking])


@pytest.mark.parametrize("kw", [dict(size=(3, 4, 2)), dict(scale_factor=0.6), dict(scale_factor=(1.5, 1, 0.5))])
def test_interpolate_area_of_5d_inputs_is_torchs_adaptive_average_pooling(kw):
    _same(lambda x: F.interpolate(x, mode="area", **kw), lambda t: TF.interpolate(t, mode="area", **kw), SHAPE_3D,
          CHUNKINGS_3D["uneven"])


def test_3d_pooling_modules_give_torchs_outputs_and_reprs():
    for make in (lambda lib: lib.MaxPool3d(2, stride=1, padding=1), lambda lib: lib.AvgPool3d((2, 3, 2), 1, 1),
                 lambda lib: lib.AvgPool3d(2, count_include_pad=False, divisor_override=3),
                 lambda lib: lib.AdaptiveAvgPool3d((2, None, 3))):
        ours, theirs = _pair(make)
        assert repr(ours) == repr(theirs)
        _same(ours, theirs, SHAPE_3D, CHUNKINGS_3D["uneven"])
        _same(ours, theirs, SHAPE_3D[1:], CHUNKINGS_3D["uneven"][1:])


# ------------------------------------------------------------------ BatchNorm3d
@pytest.mark.parametrize("momentum", [0.1, None])
def test_batch_norm3d_trains_and_evaluates_as_torchs_with_its_buffers(momentum):
    ours, theirs = _pair(lambda lib: lib.BatchNorm3d(4, momentum=momentum))
    assert repr(ours) == repr(theirs)
    for step in range(2):
        _same(ours, theirs, SHAPE_3D, CHUNKINGS_3D["uneven"], params=[(ours.weight, theirs.weight),
                                                                      (ours.bias, theirs.bias)])
        ours.zero_grad()
        theirs.zero_grad()
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        np.testing.assert_allclose(getattr(ours, name).numpy(), getattr(theirs, name).numpy(), rtol=1e-10)
    ours.eval()
    theirs.eval()
    _same(ours, theirs, SHAPE_3D, CHUNKINGS_3D["even"])
    _same_error(lambda: ours(dg.zeros(2, 4, 3, 3)), lambda: theirs(torch.zeros(2, 4, 3, 3)))


# ------------------------------------------------------------------ adaptive max pooling
@pytest.mark.parametrize("nsp,size", [(1, 4), (1, 9), (2, (3, 4)), (2, (None, 5)), (2, 1), (3, (4, 3, 5)),
                                      (3, (2, None, 7))])
@pytest.mark.parametrize("chunking", ["one chunk", "uneven"])
def test_adaptive_max_pool_gives_torchs_values_indices_and_gradients(nsp, size, chunking):
    shape, chunks = SHAPES[nsp], CHUNKINGS[nsp][chunking]
    name = f"adaptive_max_pool{nsp}d"
    _same(lambda x: getattr(F, name)(x, size, return_indices=True),
          lambda t: getattr(TF, name)(t, size, return_indices=True), shape, chunks)
    _same(lambda x: getattr(F, name + "_with_indices")(x, size), lambda t: getattr(TF, name + "_with_indices")(t, size),
          shape[1:], chunks[1:])
    out = _same(lambda x: getattr(F, name)(x, size), lambda t: getattr(TF, name)(t, size), shape, chunks)
    assert out.chunks[0] == dg.from_array(np.zeros(shape), chunks=chunks).chunks[0]  # (the batch's chunks kept)


def test_adaptive_pooling_to_size_zero_gives_torchs_empty_output():
    x = dg.zeros(3, 4, 4, 5)
    for ours, theirs in ((F.adaptive_avg_pool3d(x, (0, 2, 2)), TF.adaptive_avg_pool3d(torch.zeros(3, 4, 4, 5),
                                                                                      (0, 2, 2))),
                         (F.adaptive_max_pool2d(x[0], 0, True)[1], TF.adaptive_max_pool2d(torch.zeros(4, 4, 5), 0,
                                                                                          True)[1])):
        assert tuple(ours.shape) == tuple(theirs.shape)
        assert ours.numpy().shape == tuple(theirs.shape)


def test_adaptive_max_pool_ties_pick_torchs_cell():
    a = np.zeros((1, 2, 5, 7))
    a[:, :, 2:4, 1:6] = 3.0
    for size in ((2, 3), (3, 2)):
        x, t = dg.from_array(a, chunks=(1, 1, 3, 4), requires_grad=True), torch.tensor(a, requires_grad=True)
        (o, i), (to, ti) = F.adaptive_max_pool2d(x, size, True), TF.adaptive_max_pool2d(t, size, True)
        np.testing.assert_array_equal(i.numpy(), ti.numpy())
        o.sum().backward()
        to.sum().backward()
        _close(x.grad, t.grad)


@pytest.mark.parametrize("nsp", [1, 2, 3])
def test_adaptive_max_pool_modules_give_torchs_outputs_and_reprs(nsp):
    size = (3,) * nsp if nsp > 1 else 3
    for return_indices in (False, True):
        ours, theirs = _pair(lambda lib: getattr(lib, f"AdaptiveMaxPool{nsp}d")(size, return_indices))
        assert repr(ours) == repr(theirs)
        _same(ours, theirs, SHAPES[nsp], CHUNKINGS[nsp]["uneven"])


# ------------------------------------------------------------------ max unpooling
@pytest.mark.parametrize("nsp", [1, 2, 3])
@pytest.mark.parametrize("chunking", ["one chunk", "uneven"])
@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1)], ids=["plain", "padded"])
def test_max_unpool_puts_torchs_pooled_values_back_with_torchs_gradient(nsp, chunking, kw):
    shape = SHAPES[nsp]
    a = np.random.default_rng(5).standard_normal(shape)
    pooled, idx = getattr(TF, f"max_pool{nsp}d")(torch.tensor(a), **kw, return_indices=True)
    pooled_chunks = {"one chunk": tuple(pooled.shape), "even": tuple(max(1, n // 2) for n in pooled.shape),
                     "uneven": tuple((n - 1, 1) if n > 2 else n for n in pooled.shape)}[chunking]
    d_idx = dg.from_array(idx.numpy(), chunks=pooled_chunks)
    # (the pooled values: where windows overlap, an index twice holds the same value, as in use; torch's order of
    # writes to one index is its own)
    values = pooled.numpy()
    for output_size in (shape[2:], shape):
        _same(lambda x: getattr(F, f"max_unpool{nsp}d")(x, d_idx, **kw, output_size=output_size),
              lambda t: getattr(TF, f"max_unpool{nsp}d")(t, idx, **kw, output_size=output_size),
              tuple(pooled.shape), pooled_chunks, values=values)
    ours, theirs = _pair(lambda lib: getattr(lib, f"MaxUnpool{nsp}d")(**kw))
    assert repr(ours) == repr(theirs)
    _same(lambda x: ours(x, d_idx, output_size=shape), lambda t: theirs(t, idx, output_size=shape),
          tuple(pooled.shape), pooled_chunks, values=values)
    _same(lambda x: ours(x, d_idx[0], shape[2:]), lambda t: theirs(t, idx[0], shape[2:]), tuple(pooled.shape[1:]),
          pooled_chunks[1:], values=values[0])


def test_max_pool_then_unpool_round_trip_keeps_the_maxima_in_place():
    x, t = _inputs(SHAPE_3D, CHUNKINGS_3D["uneven"])
    out, idx = F.max_pool3d(x, 2, return_indices=True)
    tout, tidx = TF.max_pool3d(t, 2, return_indices=True)
    _close(F.max_unpool3d(out, idx, 2, output_size=SHAPE_3D[2:]), TF.max_unpool3d(tout, tidx, 2,
                                                                                 output_size=SHAPE_3D[2:]))
    x, t = _inputs((2, 3, 8, 6), (1, 2, 3, 4))  # the default output size: the pooled input's
    (out, idx), (tout, tidx) = F.max_pool2d(x, 2, return_indices=True), TF.max_pool2d(t, 2, return_indices=True)
    _close(F.max_unpool2d(out, idx, 2), TF.max_unpool2d(tout, tidx, 2))
    _close(nn.MaxUnpool2d(2)(out, idx), torch.nn.MaxUnpool2d(2)(tout, tidx))


# ------------------------------------------------------------------ power-average pooling
@pytest.mark.parametrize("nsp", [1, 2, 3])
@pytest.mark.parametrize("chunking", ["one chunk", "uneven"])
@pytest.mark.parametrize("norm_type,kw", [(2, dict(kernel_size=2)), (3.0, dict(kernel_size=3, stride=1)),
                                          (1.5, dict(kernel_size=2, stride=1)), (math.inf, dict(kernel_size=2)),
                                          (-math.inf, dict(kernel_size=3, stride=2))],
                         ids=["p2", "p3", "p1.5", "inf", "-inf"])
def test_lp_pool_gives_torchs_values_and_gradients(nsp, chunking, norm_type, kw):
    shape, chunks = SHAPES[nsp], CHUNKINGS[nsp][chunking]
    name = f"lp_pool{nsp}d"
    _same(lambda x: getattr(F, name)(x, norm_type, **kw), lambda t: getattr(TF, name)(t, norm_type, **kw), shape,
          chunks, positive=not math.isinf(norm_type))


@pytest.mark.parametrize("nsp", [1, 2, 3])
def test_lp_pool_modules_give_torchs_outputs_and_reprs(nsp):
    ours, theirs = _pair(lambda lib: getattr(lib, f"LPPool{nsp}d")(2, 2, stride=1))
    assert repr(ours) == repr(theirs)
    _same(ours, theirs, SHAPES[nsp], CHUNKINGS[nsp]["uneven"], positive=True)
    _same(ours, theirs, SHAPES[nsp][1:], CHUNKINGS[nsp]["uneven"][1:], positive=True)


# ------------------------------------------------------------------ Softmax2d, channel shuffle
@pytest.mark.parametrize("chunking", CHUNKINGS_2D)
def test_softmax2d_and_channel_shuffle_give_torchs_values_and_gradients(chunking):
    chunks = CHUNKINGS_2D[chunking]
    ours, theirs = nn.Softmax2d(), torch.nn.Softmax2d()
    assert repr(ours) == repr(theirs)
    _same(ours, theirs, SHAPE_2D, chunks)
    _same(ours, theirs, SHAPE_2D[1:], chunks[1:])
    ours, theirs = nn.ChannelShuffle(2), torch.nn.ChannelShuffle(2)
    assert repr(ours) == repr(theirs)
    _same(ours, theirs, SHAPE_3D, CHUNKINGS_3D[chunking])
    for groups in (1, 3):
        _same(lambda x: F.channel_shuffle(x, groups), lambda t: TF.channel_shuffle(t, groups), (2, 6, 5), (1, 4, 3))


def test_channel_shuffle_returns_a_new_tensor_a_write_to_it_stays_in_it():
    x = dg.from_array(np.arange(12.0).reshape(1, 3, 4))
    y = F.channel_shuffle(x, 1)
    y.add_(1)
    np.testing.assert_array_equal(x.numpy(), np.arange(12.0).reshape(1, 3, 4))


# ------------------------------------------------------------------ errors
def _error_cases():
    x3 = np.zeros((2, 3, 4, 4, 4))
    i2 = np.zeros((1, 2, 2, 2), dtype=np.int64)
    return [
        ("conv3d of 2-d", lambda lib, f: f.conv3d(lib.zeros(2, 3), lib.zeros(2, 3, 1, 1, 1))),
        ("max_pool3d pad", lambda lib, f: f.max_pool3d(_t(lib, x3), 2, padding=2)),
        ("max_pool3d small", lambda lib, f: f.max_pool3d(_t(lib, x3), 5)),
        ("max_pool3d 2-d", lambda lib, f: f.max_pool3d(lib.zeros(3, 4), 2)),
        ("max_pool3d empty", lambda lib, f: f.max_pool3d(lib.zeros(3, 0, 4, 4), 2)),
        ("max_pool3d empty width", lambda lib, f: f.max_pool3d(lib.zeros(2, 3, 4, 4, 0), 2)),
        ("max_pool3d stride 0", lambda lib, f: f.max_pool3d(_t(lib, x3), 2, stride=0)),
        ("max_pool3d dilation 0", lambda lib, f: f.max_pool3d(_t(lib, x3), 2, dilation=0)),
        ("max_pool3d kernel pair", lambda lib, f: f.max_pool3d(_t(lib, x3), (2, 2))),
        ("avg_pool3d pad", lambda lib, f: f.avg_pool3d(_t(lib, x3), 2, padding=2)),
        ("avg_pool3d small", lambda lib, f: f.avg_pool3d(_t(lib, x3), 5, padding=2)),
        ("avg_pool3d 2-d", lambda lib, f: f.avg_pool3d(lib.zeros(3, 4), 2)),
        ("avg_pool3d empty", lambda lib, f: f.avg_pool3d(lib.zeros(3, 0, 4, 4), 2)),
        ("adaptive_avg_pool3d 2-d", lambda lib, f: f.adaptive_avg_pool3d(lib.zeros(3, 4), 2)),
        ("adaptive_avg_pool3d empty", lambda lib, f: f.adaptive_avg_pool3d(lib.zeros(3, 0, 4, 4), 2)),
        ("adaptive_avg_pool2d 1-d", lambda lib, f: f.adaptive_avg_pool2d(lib.zeros(3), 2)),
        ("adaptive_avg_pool1d 4-d", lambda lib, f: f.adaptive_avg_pool1d(lib.zeros(3, 4, 5, 6), 2)),
        ("adaptive_max_pool1d 4-d", lambda lib, f: f.adaptive_max_pool1d(lib.zeros(3, 4, 5, 6), 2)),
        ("adaptive_max_pool1d pair", lambda lib, f: f.adaptive_max_pool1d(lib.zeros(3, 4), (2, 2))),
        ("adaptive_max_pool1d empty", lambda lib, f: f.adaptive_max_pool1d(lib.zeros(3, 0), 2)),
        ("adaptive_max_pool2d 1-d", lambda lib, f: f.adaptive_max_pool2d(lib.zeros(3), 2)),
        ("adaptive_max_pool2d empty", lambda lib, f: f.adaptive_max_pool2d(lib.zeros(3, 0, 4), 2)),
        ("adaptive_max_pool2d long size", lambda lib, f: f.adaptive_max_pool2d(lib.zeros(3, 4, 4), (2, 3, 4))),
        ("adaptive_max_pool2d integers", lambda lib, f: f.adaptive_max_pool2d(lib.zeros((3, 4, 4), dtype=lib.int64),
                                                                              2)),
        ("adaptive_max_pool3d 2-d", lambda lib, f: f.adaptive_max_pool3d(lib.zeros(3, 4), 2)),
        ("max_unpool2d int32", lambda lib, f: f.max_unpool2d(lib.zeros(1, 2, 2, 2), _t(lib, i2.astype(np.int32)), 2)),
        ("max_unpool2d shapes", lambda lib, f: f.max_unpool2d(lib.zeros(1, 2, 2, 2), _t(lib, np.zeros((1, 2, 2, 3),
                                                                                                     np.int64)), 2)),
        ("max_unpool2d 2-d", lambda lib, f: f.max_unpool2d(lib.zeros(2, 2), _t(lib, i2[0, 0]), 2)),
        ("max_unpool1d 1-d", lambda lib, f: f.max_unpool1d(lib.zeros(2), _t(lib, i2[0, 0, 0]), 2)),
        ("max_unpool3d 3-d", lambda lib, f: f.max_unpool3d(lib.zeros(2, 2, 2), _t(lib, i2[0]), 2)),
        ("max_unpool3d stride", lambda lib, f: f.max_unpool3d(lib.zeros(1, 2, 2, 2), _t(lib, i2), 2, stride=0)),
        ("max_unpool2d size", lambda lib, f: f.max_unpool2d(lib.zeros(1, 2, 2, 2), _t(lib, i2), 2, output_size=(9, 9))),
        ("max_unpool2d size length", lambda lib, f: f.max_unpool2d(lib.zeros(1, 2, 2, 2), _t(lib, i2), 2,
                                                                   output_size=(4,))),
        ("lp_pool2d small", lambda lib, f: f.lp_pool2d(lib.ones(1, 2, 4, 4), 2, 5)),
        ("channel_shuffle divisible", lambda lib, f: f.channel_shuffle(lib.zeros(2, 6, 3), 4)),
        ("channel_shuffle 1-d", lambda lib, f: f.channel_shuffle(lib.zeros(6), 2)),
        ("channel_shuffle groups 0", lambda lib, f: f.channel_shuffle(lib.zeros(2, 6, 3), 0)),
        ("Softmax2d 2-d", lambda lib, f: lib.nn.Softmax2d()(lib.zeros(2, 3))),
        ("BatchNorm3d 4-d", lambda lib, f: lib.nn.BatchNorm3d(3)(lib.zeros(2, 3, 4, 4))),
    ]


def _t(lib, a):
    return torch.from_numpy(a) if lib is torch else dg.from_array(a)


@pytest.mark.parametrize("case", _error_cases(), ids=[c[0] for c in _error_cases()])
def test_bad_calls_raise_torchs_errors(case):
    _, call = case
    _same_error(lambda: call(dg, F), lambda: call(torch, TF))


@pytest.mark.parametrize("name, args", [("max_pool1d", (3,)), ("adaptive_max_pool1d", (4,)), ("max_pool2d", (2,)),
                                        ("max_pool2d", ((3, 2), 1)), ("adaptive_max_pool2d", ((2, 3),)),
                                        ("max_pool3d", (2,)), ("adaptive_max_pool3d", (2,))])
def test_a_window_holding_nan_picks_its_last_nan_as_torch_s(name, args):
    """torch's kernel keeps a tap when ``val > max or isnan(val)``: a window's last NaN (not NumPy's first)
    gets the gradient and is its index."""
    nsp = int(name[-2])
    shape = (2, 3) + (6, 7, 5)[:nsp]
    x = np.random.default_rng(5).standard_normal(shape)
    flat = x.reshape(-1)
    flat[[i for i in (1, 2, 9, 10, 11, 30, 31, 40, 41, 77, 150, 151) if i < flat.size]] = np.nan
    tx = torch.tensor(x, requires_grad=True)
    tv, ti = getattr(torch.nn.functional, name)(tx, *args, return_indices=True)
    tv.sum().backward()
    for chunks in (-1, (1, 2) + (3, 4, 2)[:nsp]):
        dx = dg.tensor(x, chunks=chunks, requires_grad=True)
        dv, di = getattr(F, name)(dx, *args, return_indices=True)
        dv.sum().backward()
        np.testing.assert_array_equal(di.numpy(), ti.numpy())
        np.testing.assert_array_equal(dv.detach().numpy(), tv.detach().numpy())  # (NaN where torch's is)
        np.testing.assert_array_equal(dx.grad.numpy(), tx.grad.numpy())
