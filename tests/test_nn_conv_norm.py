"""Convolution, pooling and normalisation layers against torch (installed): Conv1d/2d (stride, padding ints,
'same', 'valid', dilation, groups, bias), MaxPool1d/2d, AvgPool1d/2d, AdaptiveAvgPool1d/2d, BatchNorm1d/2d
(train/eval, momentum incl. None, affine, track_running_stats, buffers and state_dict), GroupNorm, RMSNorm,
F.one_hot, ReLU/Dropout(inplace=True).  Batches are chunked along the batch axis and, for the spatial layers,
the spatial axes too (uneven chunks, a chunk smaller than the kernel's halo); values and gradients equal
torch's at rtol 1e-9 in float64, over 20 optimizer steps for the training loops."""
import math
import warnings

import dask
import numpy as np
import pytest

import daskgrad as dg
from daskgrad import nn
from daskgrad.nn import functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional

CHUNKS_2D = ((2, 1, 3), (3,), (3, 1, 4), (5, 3))  # (6, 3, 8, 8): batch and both spatial axes chunked
CHUNKS_1D = ((2, 4), (4,), (1, 5, 5))  # (6, 4, 11)


def _close(a, b, **kw):
    a = a.detach().numpy() if hasattr(a, "detach") else a
    b = b.detach().numpy() if hasattr(b, "detach") else b
    np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12, **kw)


def _same_error(ours, theirs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(Exception) as expected:
            theirs()
        with pytest.raises(Exception) as got:
            ours()
    assert type(got.value) is type(expected.value), (got.value, expected.value)
    assert str(got.value) == str(expected.value)


def _x(shape, chunks, seed=0):
    a = np.random.default_rng(seed).standard_normal(shape)
    return dg.from_array(a, chunks=chunks, requires_grad=True), torch.tensor(a, requires_grad=True)


def _pair(make, **kw):
    """The same module in both libraries, torch's initial values copied into ours."""
    ours, theirs = make(nn, **kw), make(torch.nn, **kw).double()
    ours.double().load_state_dict({k: v.clone() for k, v in theirs.state_dict().items()})
    return ours, theirs


def _check_layer(ours, theirs, xd, xt):
    """Output, input gradient and parameter gradients equal torch's; the output keeps the input's batch chunks."""
    out, tout = ours(xd), theirs(xt)
    _close(out, tout)
    assert out.chunks[0] == xd.chunks[0]
    w = np.random.default_rng(1).standard_normal(tout.shape)
    (out * dg.from_array(w, chunks=out.chunks)).sum().backward()
    (tout * torch.tensor(w)).sum().backward()
    _close(xd.grad, xt.grad)
    assert xd.grad.chunks == xd.chunks
    for (name, p), tp in zip(ours.named_parameters(), theirs.parameters()):
        _close(p.grad, tp.grad, err_msg=name)
    assert repr(ours) == repr(theirs)
    return out


# ------------------------------------------------------------------------------------------------ convolutions
CONV2D = {
    "plain": dict(),
    "stride2-pad1": dict(stride=2, padding=1),
    "stride3-across-chunks": dict(stride=3, padding=2),
    "tuple-stride-pad": dict(stride=(2, 1), padding=(0, 2)),
    "dilation2": dict(dilation=2, padding=1),
    "same-dilated": dict(padding="same", dilation=(2, 1)),
    "valid": dict(padding="valid"),
    "groups3": dict(groups=3, out_channels=6),
    "no-bias": dict(bias=False, stride=2),
    "kernel-4x2-same": dict(kernel_size=(4, 2), padding="same"),
    "padding-past-kernel": dict(padding=4, kernel_size=2),
}


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel lengths")  # torch's, about its copy
@pytest.mark.parametrize("case", list(CONV2D))
def test_conv2d_values_and_gradients_equal_torch_on_chunked_batch_and_spatial_axes(case):
    kw = dict(dict(in_channels=3, out_channels=4, kernel_size=3), **CONV2D[case])
    ours, theirs = _pair(lambda m: m.Conv2d(**kw))
    _check_layer(ours, theirs, *_x((6, 3, 8, 8), CHUNKS_2D))


CONV1D = {
    "plain": dict(),
    "stride3-pad2-groups4": dict(stride=3, padding=2, groups=4, out_channels=8),
    "same-dilation3": dict(padding="same", dilation=3),
    "no-bias-kernel5": dict(kernel_size=5, bias=False),
}


@pytest.mark.parametrize("case", list(CONV1D))
def test_conv1d_values_and_gradients_equal_torch(case):
    kw = dict(dict(in_channels=4, out_channels=2, kernel_size=3), **CONV1D[case])
    ours, theirs = _pair(lambda m: m.Conv1d(**kw))
    _check_layer(ours, theirs, *_x((6, 4, 11), CHUNKS_1D))


def test_functional_conv_takes_unbatched_input_and_chunked_weight():
    xd, xt = _x((3, 8, 8), CHUNKS_2D[1:])
    wd, wt = _x((5, 3, 2, 3), ((2, 3), (3,), (2,), (3,)), seed=2)
    out, tout = F.conv2d(xd, wd, stride=(1, 2), padding=1), TF.conv2d(xt, wt, stride=(1, 2), padding=1)
    _close(out, tout)
    out.sum().backward()
    tout.sum().backward()
    _close(xd.grad, xt.grad)
    _close(wd.grad, wt.grad)
    xd, xt = _x((4, 11), CHUNKS_1D[1:])
    _close(F.conv1d(xd, dg.ones(2, 4, 3, dtype="float64")), TF.conv1d(xt, torch.ones(2, 4, 3, dtype=torch.float64)))


def test_conv_second_derivative_equals_torch():
    xd, xt = _x((2, 2, 5, 5), ((1, 1), (2,), (2, 3), (3, 2)))
    wd, wt = _x((3, 2, 3, 3), -1, seed=3)
    g, = dg.grad(F.conv2d(xd, wd, padding=1).pow(2).sum(), [wd], create_graph=True)
    tg, = torch.autograd.grad(TF.conv2d(xt, wt, padding=1).pow(2).sum(), [wt], create_graph=True)
    _close(g, tg)
    (g * g).sum().backward()
    (tg * tg).sum().backward()
    _close(xd.grad, xt.grad)


def test_conv_and_pool_are_lazy_and_their_output_chunks_follow_the_input():
    calls = []

    def counting(dsk, keys, **kw):
        calls.append(keys)
        return dask.get(dsk, keys, **kw)

    conv = nn.Conv2d(3, 4, 3, padding=1, dtype="float64")
    with dask.config.set(scheduler=counting):
        xd, _ = _x((6, 3, 8, 8), CHUNKS_2D)
        out = F.max_pool2d(conv(xd), 2, 1)
        assert calls == []
    assert out.chunks == ((2, 1, 3), (4,), (3, 1, 3), (5, 2))


def _input_blocks_read(out, x):
    """For each output block, the blocks of ``x`` its task reads (through the graph)."""
    graph, reads = dict(out.array.__dask_graph__()), []
    for key in dask.core.flatten(out.array.__dask_keys__()):
        seen, stack, hits = set(), [key], set()
        while stack:
            k = stack.pop()
            if k in seen:
                continue
            seen.add(k)
            if isinstance(k, tuple) and k[0] == x.array.name:
                hits.add(k)
            elif k in graph:
                stack.extend(dask.core.get_dependencies(graph, k))
        reads.append(hits)
    return reads


@pytest.mark.parametrize("fn", [lambda x: F.conv2d(x, dg.ones(2, 1, 3, 3, dtype="float64"), padding=1),
                                lambda x: F.conv2d(x, dg.ones(2, 1, 3, 3, dtype="float64"), stride=2, dilation=2),
                                lambda x: F.max_pool2d(x, 3, 2, 1)], ids=["conv", "conv-stride2-dilation2", "maxpool"])
def test_each_output_chunk_reads_only_its_neighbours_halos(fn):
    x = dg.zeros(1, 1, 40, 40, chunks=(1, 1, 5, 5), dtype="float64")
    reads = _input_blocks_read(fn(x), x)
    assert max(len(r) for r in reads) <= 9  # its own chunk and at most its 8 neighbours, of 64
    for r in reads:
        rows, cols = {k[3] for k in r}, {k[4] for k in r}
        assert max(rows) - min(rows) <= 2 and max(cols) - min(cols) <= 2


def test_conv_errors_as_torch():
    xd, xt = _x((2, 4, 5, 5), -1)
    wd, wt = dg.zeros(6, 4, 3, 3, dtype="float64"), torch.zeros(6, 4, 3, 3, dtype=torch.float64)
    for kw in (dict(padding="same", stride=2), dict(padding="foo"), dict(stride=0), dict(padding=-1)):
        _same_error(lambda: F.conv2d(xd, wd, **kw), lambda: TF.conv2d(xt, wt, **kw))
    _same_error(lambda: F.conv2d(xd[:, :3], wd), lambda: TF.conv2d(xt[:, :3], wt))
    _same_error(lambda: F.conv2d(xd[:, :, :2, :2], wd), lambda: TF.conv2d(xt[:, :, :2, :2], wt))
    _same_error(lambda: F.conv2d(xd[0, 0], wd), lambda: TF.conv2d(xt[0, 0], wt))
    for kw in (dict(groups=3), dict(groups=4), dict(padding="same", stride=2)):
        _same_error(lambda: nn.Conv2d(4, 6, 3, **kw), lambda: torch.nn.Conv2d(4, 6, 3, **kw))
    with pytest.raises(ValueError, match="^padding_mode must be one of .*, but got padding_mode='foo'$"):
        nn.Conv2d(4, 6, 3, padding_mode="foo")
    # (the other modes are built: tests/test_conv_padding_modes.py)


def test_conv_weight_init_has_torchs_bounds():
    dg.manual_seed(0)
    conv = nn.Conv2d(6, 40, (3, 5), groups=2, dtype="float64")
    bound = 1 / math.sqrt(3 * 3 * 5)  # kaiming_uniform(a=sqrt(5)) on fan_in = in/groups * kernel
    w, b = conv.weight.detach().numpy(), conv.bias.detach().numpy()
    assert w.shape == (40, 3, 3, 5) and np.abs(w).max() <= bound and np.abs(w).max() > 0.95 * bound
    assert np.abs(b).max() <= bound and w.std() == pytest.approx(bound / math.sqrt(3), rel=0.05)


# ----------------------------------------------------------------------------------------------------- pooling
POOLS = {
    "MaxPool2d-2": (lambda m: m.MaxPool2d(2), 2),
    "MaxPool2d-3-s2-p1": (lambda m: m.MaxPool2d(3, 2, 1), 2),
    "MaxPool2d-dilated": (lambda m: m.MaxPool2d((2, 3), stride=(1, 2), dilation=2, padding=(1, 0)), 2),
    "AvgPool2d-2": (lambda m: m.AvgPool2d(2), 2),
    "AvgPool2d-3-s2-p1": (lambda m: m.AvgPool2d(3, 2, 1), 2),
    "AvgPool2d-exclude-pad": (lambda m: m.AvgPool2d(3, 2, 1, count_include_pad=False), 2),
    "AvgPool2d-divisor": (lambda m: m.AvgPool2d((3, 2), 1, (1, 0), divisor_override=4), 2),
    "AdaptiveAvgPool2d-1": (lambda m: m.AdaptiveAvgPool2d(1), 2),
    "AdaptiveAvgPool2d-3xNone": (lambda m: m.AdaptiveAvgPool2d((3, None)), 2),
    "AdaptiveAvgPool2d-uneven": (lambda m: m.AdaptiveAvgPool2d((5, 3)), 2),
    "MaxPool1d-3-s2": (lambda m: m.MaxPool1d(3, 2, 1), 1),
    "AvgPool1d-4-exclude-pad": (lambda m: m.AvgPool1d(4, 3, 2, count_include_pad=False), 1),
    "AdaptiveAvgPool1d-4": (lambda m: m.AdaptiveAvgPool1d(4), 1),
}


@pytest.mark.parametrize("name", list(POOLS))
def test_pooling_values_and_gradients_equal_torch(name):
    make, nsp = POOLS[name]
    xd, xt = _x((6, 3, 8, 8), CHUNKS_2D) if nsp == 2 else _x((6, 4, 11), CHUNKS_1D)
    _check_layer(make(nn), make(torch.nn), xd, xt)


def test_max_pool_gradient_goes_to_the_first_largest_cell_of_a_tie_as_torch():
    x = np.array([[[[1.0, 3.0, 3.0, 0.0], [3.0, 2.0, 3.0, 3.0], [0.0, 0.0, 0.0, 0.0], [-1.0, -1.0, -2.0, -1.0]]]])
    for kw in (dict(kernel_size=2), dict(kernel_size=3, stride=1, padding=1)):
        xd = dg.from_array(x, chunks=(1, 1, (1, 3), (3, 1)), requires_grad=True)
        xt = torch.tensor(x, requires_grad=True)
        out, tout = F.max_pool2d(xd, **kw), TF.max_pool2d(xt, **kw)
        _close(out, tout)
        g = np.arange(1.0, tout.numel() + 1).reshape(tout.shape)
        (out * dg.from_array(g)).sum().backward()
        (tout * torch.tensor(g)).sum().backward()
        _close(xd.grad, xt.grad)


def test_functional_pooling_unbatched_and_global():
    xd, xt = _x((3, 8, 8), CHUNKS_2D[1:])
    _close(F.max_pool2d(xd, 3, padding=1), TF.max_pool2d(xt, 3, padding=1))
    _close(F.avg_pool2d(xd, 2, 3), TF.avg_pool2d(xt, 2, 3))
    _close(F.adaptive_avg_pool2d(xd, 1), TF.adaptive_avg_pool2d(xt, 1))
    xd, xt = _x((6, 4, 11), CHUNKS_1D)
    _close(F.max_pool1d(xd, 2), TF.max_pool1d(xt, 2))
    _close(F.avg_pool1d(xd, 3, 1, 1), TF.avg_pool1d(xt, 3, 1, 1))
    _close(F.adaptive_avg_pool1d(xd, 1), TF.adaptive_avg_pool1d(xt, 1))


@pytest.mark.parametrize("unbatched", [False, True])
def test_adaptive_pooling_to_the_same_size_is_a_new_tensor_as_torch_s(unbatched):
    """Every size kept: torch's result is a copy, so a write to it leaves the input as it was (it was the input)."""
    shape = (2, 3, 4, 5)[unbatched:]
    for lib, F_ in ((dg, F), (torch, TF)):
        x = lib.ones(*shape, dtype=lib.float64)
        y = F_.adaptive_avg_pool2d(x, (4, 5))
        y.add_(1.0)
        assert float(x.sum()) == np.prod(shape)
        y1 = F_.adaptive_avg_pool1d(x[..., 0, :] if not unbatched else x[0], 5)
        y1.mul_(0.0)
        assert float(x.sum()) == np.prod(shape)


def test_pooling_errors_as_torchs():
    xd, xt = _x((2, 4, 5, 5), -1)
    _same_error(lambda: F.max_pool2d(xd, 3, padding=2), lambda: TF.max_pool2d(xt, 3, padding=2))
    _same_error(lambda: F.avg_pool2d(xd, 3, padding=2), lambda: TF.avg_pool2d(xt, 3, padding=2))
    _same_error(lambda: F.max_pool2d(xd[:, :, :2, :2], 3), lambda: TF.max_pool2d(xt[:, :, :2, :2], 3))
    _same_error(lambda: F.avg_pool2d(xd[:, :, :2, :2], 3), lambda: TF.avg_pool2d(xt[:, :, :2, :2], 3))
    _same_error(lambda: F.max_pool1d(xd[:, :, 0], 6), lambda: TF.max_pool1d(xt[:, :, 0], 6))
    _same_error(lambda: F.max_pool1d(xd[:, :, 0], 3, padding=2), lambda: TF.max_pool1d(xt[:, :, 0], 3, padding=2))
    _same_error(lambda: F.avg_pool1d(xd[:, :, 0], 6), lambda: TF.avg_pool1d(xt[:, :, 0], 6))


# --------------------------------------------------------------------------------------------------- BatchNorm
def _bn_net(m, conv=True, **kw):
    """A small CNN (or, cheaper, BatchNorm straight on the input) ending in a linear classifier."""
    if not conv:
        return m.Sequential(m.Identity(), m.BatchNorm2d(3, **kw), m.Flatten(), m.Linear(192, 3))
    return m.Sequential(m.Conv2d(3, 4, 3, padding=1), m.BatchNorm2d(4, **kw), m.ReLU(), m.MaxPool2d(2),
                        m.Flatten(), m.Linear(64, 3))


def _train(ours, theirs, batches, steps=20, lr=0.05):
    """``steps`` SGD steps of both models on the same batches; the losses agree at every step."""
    opt = dg.optim.SGD(ours.parameters(), lr=lr, momentum=0.9)
    topt = torch.optim.SGD(theirs.parameters(), lr=lr, momentum=0.9)
    for step in range(steps):
        x, y = batches(step)
        chunks = CHUNKS_2D if x.ndim == 4 else ((2, 1, 3),) + tuple((n,) for n in x.shape[1:])
        loss = F.cross_entropy(ours(dg.from_array(x, chunks=chunks)), dg.from_array(y, chunks=((2, 1, 3),)))
        tloss = TF.cross_entropy(theirs(torch.tensor(x)), torch.tensor(y))
        opt.zero_grad(), topt.zero_grad()
        loss.backward(), tloss.backward()
        opt.step(), topt.step()
        _close(loss, tloss, err_msg=f"step {step}")


def _batch(shape):
    def batches(step):
        rng = np.random.default_rng(step)
        return rng.standard_normal(shape) * 2 + 1, rng.integers(0, 3, shape[0])
    return batches


def _same_state(ours, theirs):
    sd, tsd = ours.state_dict(), theirs.state_dict()
    assert list(sd) == list(tsd)
    for k, v in tsd.items():
        assert sd[k].dtype == v.numpy().dtype and sd[k].shape == tuple(v.shape), k
        _close(sd[k].numpy(), v.numpy(), err_msg=k)


BN = {  # the conv net once; the options on BatchNorm alone (same reductions, a quarter of the work)
    "default-after-conv": dict(),
    "momentum-None-cumulative": dict(momentum=None, conv=False),
    "momentum-0.3-no-affine": dict(momentum=0.3, affine=False, conv=False),
    "no-bias": dict(bias=False, conv=False),
    "no-running-stats": dict(track_running_stats=False, conv=False),
}


@pytest.mark.parametrize("case", list(BN))
def test_batchnorm2d_trains_20_steps_as_torch_then_evaluates_with_its_running_stats(case):
    ours, theirs = _pair(_bn_net, **BN[case])
    _train(ours, theirs, _batch((6, 3, 8, 8)))
    _same_state(ours, theirs)
    if BN[case].get("track_running_stats", True):
        # updated in the forward, stored by the backward's submission: no lineage grows over the steps
        assert all(len(b.array.dask) == 1 for b in ours[1].buffers())
        assert int(ours[1].num_batches_tracked.item()) == 20 and ours[1].num_batches_tracked.dtype == np.int64
    ours.eval(), theirs.eval()
    x = np.random.default_rng(99).standard_normal((6, 3, 8, 8))
    _close(ours(dg.from_array(x, chunks=CHUNKS_2D)), theirs(torch.tensor(x)))
    assert repr(ours) == repr(theirs)


@pytest.mark.parametrize("shape", [(6, 5), (6, 5, 4)], ids=["NC", "NCL"])
@pytest.mark.parametrize("momentum", [0.1, None])
def test_batchnorm1d_trains_20_steps_as_torch(shape, momentum):
    def make(m):
        return m.Sequential(m.BatchNorm1d(5, momentum=momentum), m.Flatten(), m.Linear(math.prod(shape[1:]), 3))
    ours, theirs = _pair(make)
    _train(ours, theirs, _batch(shape))
    _same_state(ours, theirs)
    ours.eval(), theirs.eval()
    _close(ours(dg.from_array(_batch(shape)(50)[0], chunks=2)), theirs(torch.tensor(_batch(shape)(50)[0])))


def test_batchnorm_state_dict_round_trips_with_torch():
    bn, tbn = _pair(lambda m: m.BatchNorm2d(3, momentum=None))
    xd, xt = _x((4, 3, 2, 2), ((1, 3), (3,), (1, 1), (2,)))
    bn(xd), tbn(xt)
    bn(xd * 2), tbn(xt * 2)
    _same_state(bn, tbn)
    back = torch.nn.BatchNorm2d(3, momentum=None).double()
    back.load_state_dict({k: torch.tensor(v.numpy()) for k, v in bn.state_dict().items()})
    assert back.num_batches_tracked.dtype == torch.int64 and int(back.num_batches_tracked) == 2
    again = nn.BatchNorm2d(3, dtype="float64")
    again.load_state_dict(back.state_dict())
    _same_state(again, back)
    again.reset_running_stats()
    assert int(again.num_batches_tracked.item()) == 0 and float(again.running_var.sum().item()) == 3.0


def test_batchnorm_leaves_buffers_alone_in_eval_and_uses_batch_stats_without_them():
    bn, tbn = _pair(lambda m: m.BatchNorm1d(3))
    bn.eval(), tbn.eval()
    xd, xt = _x((5, 3), ((2, 3), (3,)))
    _check_layer(bn, tbn, xd, xt)
    _same_state(bn, tbn)
    assert int(bn.num_batches_tracked.item()) == 0
    free, tfree = _pair(lambda m: m.BatchNorm1d(3, track_running_stats=False))
    free.eval(), tfree.eval()
    _check_layer(free, tfree, *_x((5, 3), ((2, 3), (3,))))
    assert free.running_mean is None and list(free.state_dict()) == ["weight", "bias"]


def test_batchnorm_errors_as_torch():
    for cls, shape in (("BatchNorm1d", (2, 3, 4, 5)), ("BatchNorm2d", (2, 3, 4)), ("BatchNorm2d", (2, 4, 2, 2))):
        _same_error(lambda: getattr(nn, cls)(3)(dg.zeros(*shape)),
                    lambda: getattr(torch.nn, cls)(3)(torch.zeros(shape)))
    with pytest.raises(ValueError, match=r"^Expected more than 1 value per channel when training, got input size "):
        nn.BatchNorm1d(3)(dg.zeros(1, 3))
    _same_error(lambda: F.batch_norm(dg.zeros(2, 3), None, None), lambda: TF.batch_norm(torch.zeros(2, 3), None, None))


# ---------------------------------------------------------------------------------------- GroupNorm, RMSNorm
@pytest.mark.parametrize("kw", [dict(), dict(affine=False), dict(bias=False), dict(eps=1e-2)],
                         ids=["default", "no-affine", "no-bias", "eps"])
def test_groupnorm_values_and_gradients_equal_torch(kw):
    gn, tgn = _pair(lambda m: m.GroupNorm(2, 4, **kw))
    _check_layer(gn, tgn, *_x((6, 4, 8, 8), ((2, 1, 3), (4,), (3, 1, 4), (5, 3))))
    gn, tgn = _pair(lambda m: m.GroupNorm(3, 6, **kw))
    _check_layer(gn, tgn, *_x((6, 6, 11), ((2, 4), (6,), (1, 5, 5))))


def test_groupnorm_trains_20_steps_as_torch():
    def make(m):
        return m.Sequential(m.Conv2d(3, 4, 3, padding=1), m.GroupNorm(2, 4), m.SiLU(), m.AvgPool2d(2),
                            m.Flatten(), m.Linear(64, 3))
    ours, theirs = _pair(make)
    _train(ours, theirs, _batch((6, 3, 8, 8)))
    _same_state(ours, theirs)


@pytest.mark.parametrize("kw", [dict(normalized_shape=5), dict(normalized_shape=[3, 5], eps=1e-3),
                                dict(normalized_shape=(5,), elementwise_affine=False)],
                         ids=["int", "two-axes-eps", "no-affine"])
def test_rmsnorm_values_and_gradients_equal_torch(kw):
    rms, trms = _pair(lambda m: m.RMSNorm(**kw))
    with torch.no_grad():  # a weight that is not all ones
        for p in trms.parameters():
            p.uniform_(0.5, 1.5)
    rms.load_state_dict({k: v.clone() for k, v in trms.state_dict().items()})
    _check_layer(rms, trms, *_x((6, 3, 5), ((2, 4), (1, 2), (5,))))


def test_norm_errors_as_torch():
    _same_error(lambda: nn.GroupNorm(4, 6), lambda: torch.nn.GroupNorm(4, 6))
    _same_error(lambda: nn.GroupNorm(2, 6)(dg.zeros(2, 4, 3)), lambda: torch.nn.GroupNorm(2, 6)(torch.zeros(2, 4, 3)))
    _same_error(lambda: F.group_norm(dg.zeros(2, 5, 3), 2), lambda: TF.group_norm(torch.zeros(2, 5, 3), 2))
    _same_error(lambda: nn.RMSNorm([3, 4])(dg.zeros(2, 3)), lambda: torch.nn.RMSNorm([3, 4])(torch.zeros(2, 3)))
    assert repr(nn.RMSNorm(3, eps=1e-3, elementwise_affine=False)) == \
        repr(torch.nn.RMSNorm(3, eps=1e-3, elementwise_affine=False))


# ----------------------------------------------------------------------------------------------------- one_hot
def test_one_hot_values_dtype_and_class_inference_as_torch():
    y = np.array([[0, 3, 1], [2, 2, 0]])
    ours, theirs = F.one_hot(dg.from_array(y, chunks=1), 5), TF.one_hot(torch.tensor(y), 5)
    assert ours.dtype == np.int64 and ours.shape == tuple(theirs.shape) and ours.chunks[:2] == ((1, 1), (1, 1, 1))
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    np.testing.assert_array_equal(F.one_hot(dg.from_array(y, chunks=2)).numpy(), TF.one_hot(torch.tensor(y)).numpy())


def test_one_hot_errors_as_torch_the_lazy_ones_from_the_submission():
    calls = []

    def counting(dsk, keys, **kw):
        calls.append(keys)
        return dask.get(dsk, keys, **kw)

    for bad, classes in (([1, -1], 3), ([1, 3], 3)):
        with dask.config.set(scheduler=counting):
            out = F.one_hot(dg.from_array(np.array(bad), chunks=1), classes)
            assert calls == []
        _same_error(lambda: out.numpy(), lambda: TF.one_hot(torch.tensor(bad), classes))
    _same_error(lambda: F.one_hot(dg.tensor(np.array([1.0, 3.0]))), lambda: TF.one_hot(torch.tensor([1.0, 3.0])))
    _same_error(lambda: F.one_hot(dg.zeros(0, dtype="int64")), lambda: TF.one_hot(torch.zeros(0, dtype=torch.int64)))


# ------------------------------------------------------------------------------------------------- inplace=True
def test_relu_and_dropout_inplace_write_their_input_as_torch():
    for m in (nn, torch.nn):
        assert repr(m.ReLU(inplace=True)) == "ReLU(inplace=True)" and repr(m.ReLU()) == "ReLU()"
    xd, xt = _x((6, 4), ((2, 4), (4,)))
    hd, ht = xd * 2, xt * 2
    version = hd._version
    out, tout = nn.ReLU(inplace=True)(hd), torch.nn.ReLU(inplace=True)(ht)
    assert out is hd and tout is ht and hd._version == version + 1
    _close(hd, ht)
    (out * out).sum().backward()
    (tout * tout).sum().backward()
    _close(xd.grad, xt.grad)
    _same_error(lambda: nn.ReLU(inplace=True)(xd), lambda: torch.nn.ReLU(inplace=True)(xt))
    sd, st = dg.sigmoid(xd), torch.sigmoid(xt)  # sigmoid saves its output: writing it breaks its gradient
    nn.ReLU(inplace=True)(sd), torch.nn.ReLU(inplace=True)(st)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        st.sum().backward()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        sd.sum().backward()
    _same_error(lambda: nn.Dropout(0.5, inplace=True)(xd), lambda: torch.nn.Dropout(0.5, inplace=True)(xt))
    dg.manual_seed(0)
    h = dg.ones(40, 5, chunks=(10, 5), dtype="float64", requires_grad=True) * 1.0
    drop = nn.Dropout(0.25, inplace=True)
    assert drop(h) is h and h._version == 1
    kept = h.detach().numpy()
    assert set(np.unique(kept)) <= {0.0, 1 / 0.75} and 0 < (kept == 0).mean() < 0.5
    drop.eval()
    assert drop(h) is h and h._version == 1
    with dg.no_grad():
        assert F.relu(dg.from_array(np.array([-1.0, 2.0])), inplace=True).numpy().tolist() == [0.0, 2.0]
