"""torch.nn's last modules against torch 2.13 in float64: ``SyncBatchNorm`` (and ``convert_sync_batchnorm``),
``DataParallel``, ``parallel.DistributedDataParallel``, ``AdaptiveLogSoftmaxWithLoss``, ``CrossMapLRN2d`` and
``FractionalMaxPool2d/3d``: outputs, gradients and buffers equal torch's over one chunk, even and uneven
chunkings of the batch axis; reprs, state_dicts and errors as torch's."""
import numpy as np
import pytest

import daskgrad as dg
import daskgrad.nn as nn

torch = pytest.importorskip("torch")

CHUNKINGS = {"one": 6, "even": 3, "uneven": 4}  # of a batch of 6


def _from(x, chunking, requires_grad=False):
    t = dg.from_array(x, chunks=(CHUNKINGS[chunking],) + x.shape[1:])
    return t.requires_grad_(True) if requires_grad else t


def _load(ours, theirs):
    ours.load_state_dict({k: v.detach().numpy().copy() for k, v in theirs.state_dict().items()})


def _close(ours, theirs):
    np.testing.assert_allclose(np.asarray(ours), theirs.detach().numpy(), rtol=1e-10, atol=1e-12)


def _raises_as_torch(ours, theirs):
    """``ours()`` raises the exception ``theirs()`` raises: its type and text."""
    with pytest.raises(Exception) as want:
        theirs()
    with pytest.raises(want.type) as got:
        ours()
    assert str(got.value) == str(want.value)


def _forward_backward(ours, theirs, x, chunking, *extra):
    """Outputs, the input's and parameters' gradients (for one random cotangent) and buffers of ``ours`` and
    ``theirs`` on ``x``, compared."""
    tx = torch.from_numpy(x).requires_grad_(True)
    dx = _from(x, chunking, requires_grad=True)
    t_out = theirs(tx, *[torch.from_numpy(e) for e in extra])
    d_out = ours(dx, *[_from(e, chunking) for e in extra])
    w = np.random.default_rng(1).standard_normal(tuple(t_out.shape))
    (t_out * torch.from_numpy(w)).sum().backward()
    (d_out * dg.from_array(w)).sum().backward()
    _close(d_out.detach().numpy(), t_out)
    _close(dx.grad.numpy(), tx.grad)
    d_params = dict(ours.named_parameters())
    for k, p in theirs.named_parameters():
        _close(d_params[k].grad.numpy(), p.grad)
    d_buffers = dict(ours.named_buffers())
    for k, b in theirs.named_buffers():
        _close(d_buffers[k].numpy(), b)


# ------------------------------------------------------------------------------------------------ SyncBatchNorm
SYNC_CASES = [((6, 3), {}), ((6, 3, 5), {"momentum": None}), ((6, 3, 4, 2), {"affine": False}),
              ((6, 3, 2, 2, 3), {"bias": False}), ((6, 3, 4), {"track_running_stats": False})]


@pytest.mark.parametrize("chunking", list(CHUNKINGS))
@pytest.mark.parametrize("shape,kwargs", SYNC_CASES, ids=[str(len(s)) + "d-" + "-".join(k) for s, k in SYNC_CASES])
def test_sync_batch_norm_normalises_over_the_whole_batch_as_torchs_in_training_and_eval(shape, kwargs, chunking):
    x = np.random.default_rng(0).standard_normal(shape)
    theirs = torch.nn.SyncBatchNorm(3, **kwargs).double()
    ours = nn.SyncBatchNorm(3, **kwargs).double()
    assert repr(ours) == repr(theirs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    with torch.no_grad():
        theirs.weight.uniform_() if theirs.weight is not None else None
    _load(ours, theirs)
    for _ in range(2):  # twice: the running statistics (momentum None: the cumulative average) move on
        _forward_backward(ours, theirs, x, chunking)
    ours.eval(), theirs.eval()
    _forward_backward(ours, theirs, x, chunking)


def test_sync_batch_norm_takes_torchs_arguments_and_keeps_its_process_group():
    ours = nn.SyncBatchNorm(4, 1e-3, 0.2, True, True, "group", None, "float64", bias=False)
    assert ours.process_group == "group" and ours.bias is None and ours.weight.dtype == np.float64
    assert repr(ours) == repr(torch.nn.SyncBatchNorm(4, 1e-3, 0.2, True, True, None, None, torch.float64,
                                                     bias=False))


@pytest.mark.parametrize("shape", [(3,), ()])
def test_sync_batch_norm_refuses_fewer_than_two_dimensions_with_torchs_error(shape):
    _raises_as_torch(lambda: nn.SyncBatchNorm(3)(dg.ones(*shape)), lambda: torch.nn.SyncBatchNorm(3)(torch.ones(shape)))


def test_sync_batch_norm_refuses_zero_channels_with_torchs_error():
    _raises_as_torch(lambda: nn.SyncBatchNorm(0)(dg.ones(4, 0)), lambda: torch.nn.SyncBatchNorm(0)(torch.ones(4, 0)))


def _bn_net(lib):
    net = lib.nn.Sequential(lib.nn.Conv2d(2, 3, 1), lib.nn.BatchNorm2d(3),
                            lib.nn.Sequential(lib.nn.BatchNorm1d(3, momentum=None, affine=False),
                                              lib.nn.InstanceNorm1d(3, affine=True)),
                            lib.nn.BatchNorm3d(3, bias=False))
    net[1].eval()
    net[3].weight.requires_grad_(False)
    return net


def test_convert_sync_batchnorm_replaces_every_batch_norm_sharing_its_state_as_torchs():
    theirs, ours = _bn_net(torch), _bn_net(dg)
    old = [ours[1].weight, ours[1].running_mean, ours[1].num_batches_tracked, ours[3].weight]
    theirs = torch.nn.SyncBatchNorm.convert_sync_batchnorm(theirs)
    ours = nn.SyncBatchNorm.convert_sync_batchnorm(ours, "group")
    assert repr(ours) == repr(theirs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert [type(m).__name__ for m in ours.modules()] == [type(m).__name__ for m in theirs.modules()]
    assert [m.training for m in ours.modules()] == [m.training for m in theirs.modules()]
    assert [p.requires_grad for p in ours.parameters()] == [p.requires_grad for p in theirs.parameters()]
    # the very parameters and buffers, not copies
    assert [ours[1].weight, ours[1].running_mean, ours[1].num_batches_tracked, ours[3].weight] == old
    assert ours[1].process_group == ours[2][0].process_group == "group"


def test_convert_sync_batchnorm_of_a_batch_norm_is_a_new_module_and_of_anything_else_the_module_itself():
    bn = nn.BatchNorm1d(3).double()
    sync = nn.SyncBatchNorm.convert_sync_batchnorm(bn)
    assert type(sync) is nn.SyncBatchNorm and sync is not bn and sync.weight is bn.weight
    assert sync.weight.dtype == np.float64
    lin = nn.Linear(2, 3)
    assert nn.SyncBatchNorm.convert_sync_batchnorm(lin) is lin
    inorm = nn.InstanceNorm2d(3)
    assert nn.SyncBatchNorm.convert_sync_batchnorm(inorm) is inorm  # not a batch norm, as in torch


# ------------------------------------------------------------------------------------------------ data parallel
@pytest.mark.parametrize("chunking", list(CHUNKINGS))
def test_data_parallel_is_its_module_under_module_as_torchs(chunking):
    theirs = torch.nn.DataParallel(torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))).double()
    ours = nn.DataParallel(nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3)), device_ids=[0], dim=0).double()
    assert repr(ours) == repr(theirs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert ours.device_ids == theirs.device_ids == []
    _load(ours, theirs)
    _forward_backward(ours, theirs, np.random.default_rng(0).standard_normal((6, 4)), chunking)


def test_data_parallel_passes_keyword_arguments_on():
    class Scale(nn.Module):
        def forward(self, x, *, by=1.0):
            return x * by

    out = nn.DataParallel(Scale())(dg.ones(2), by=3.0)
    np.testing.assert_array_equal(out.numpy(), [3.0, 3.0])


@pytest.mark.parametrize("chunking", list(CHUNKINGS))
def test_distributed_data_parallel_is_its_module_and_accumulates_gradients_in_no_sync(chunking):
    inner = torch.nn.Linear(4, 3).double()
    theirs = torch.nn.Sequential()
    theirs.add_module("module", inner)  # torch's needs a process group: its state layout, without one
    ours = nn.parallel.DistributedDataParallel(nn.Linear(4, 3), device_ids=None, find_unused_parameters=True).double()
    assert repr(ours) == repr(theirs).replace("Sequential", "DistributedDataParallel")
    assert list(ours.state_dict()) == list(theirs.state_dict())
    _load(ours, theirs)
    x = np.random.default_rng(0).standard_normal((6, 4))
    with ours.no_sync():
        assert ours.require_backward_grad_sync is False
        ours(_from(x, chunking)).sum().backward()
    assert ours.require_backward_grad_sync is True
    ours(_from(x, chunking)).sum().backward()
    for _ in range(2):
        inner(torch.from_numpy(x)).sum().backward()
    _close(ours.module.weight.grad.numpy(), inner.weight.grad)
    _close(ours.module.bias.grad.numpy(), inner.bias.grad)
