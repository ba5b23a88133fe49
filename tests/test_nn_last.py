"""torch.nn's last modules against torch 2.13 in float64: ``SyncBatchNorm`` (and ``convert_sync_batchnorm``),
``DataParallel``, ``parallel.DistributedDataParallel``, ``AdaptiveLogSoftmaxWithLoss``, ``CrossMapLRN2d`` and
``FractionalMaxPool2d/3d``: outputs, gradients and buffers equal torch's over one chunk, even and uneven
chunkings of the batch axis; reprs, state_dicts and errors as torch's."""
import numpy as np
import pytest

import daskgrad as dg
import daskgrad.nn as nn
import daskgrad.nn.functional as F

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
    """``ours()`` raises the exception ``theirs()`` raises: its type and text (a shape named ``daskgrad.Size``)."""
    with pytest.raises(Exception) as want:
        theirs()
    with pytest.raises(want.type) as got:
        ours()
    assert str(got.value) == str(want.value).replace("torch.Size(", "daskgrad.Size(")


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


# ------------------------------------------------------------------------------------------- adaptive softmax
ASM_CASES = [((8, 10, [3, 6]), {}), ((8, 10, [2, 4, 8]), {"div_value": 2.0}), ((16, 20, [5]), {"head_bias": True})]
ASM_IDS = ["two-clusters", "three-clusters", "head-bias"]


def _asm_pair(args, kwargs):
    torch.manual_seed(2)
    theirs = torch.nn.AdaptiveLogSoftmaxWithLoss(*args, **kwargs).double()
    ours = nn.AdaptiveLogSoftmaxWithLoss(*args, **kwargs).double()
    with torch.no_grad():  # the head's cluster entries large: some rows' most probable class is a rare one
        theirs.head.weight[args[2][0]:] *= 3
    _load(ours, theirs)
    return ours, theirs


@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors is a no-op")
@pytest.mark.parametrize("chunking", list(CHUNKINGS))
@pytest.mark.parametrize("args,kwargs", ASM_CASES, ids=ASM_IDS)
def test_adaptive_log_softmax_gives_torchs_output_loss_and_gradients(args, kwargs, chunking):
    ours, theirs = _asm_pair(args, kwargs)
    assert repr(ours) == repr(theirs)
    assert [(k, tuple(v.shape)) for k, v in ours.state_dict().items()] == \
        [(k, tuple(v.shape)) for k, v in theirs.state_dict().items()]
    x = np.random.default_rng(0).standard_normal((6, args[0]))
    target = np.array(([0, *args[2], args[1] - 1] + [1, args[1] - 2, 2])[:6])  # each cluster's first, the last
    tx = torch.from_numpy(x).requires_grad_(True)
    dx = _from(x, chunking, requires_grad=True)
    t_out = theirs(tx, torch.from_numpy(target))
    d_out = ours(dx, _from(target, chunking))
    assert type(d_out).__name__ == "_ASMoutput" and d_out._fields == ("output", "loss")
    (t_out.output.sum() * 0.5 + t_out.loss).backward()
    (d_out.output.sum() * 0.5 + d_out.loss).backward()
    _close(d_out.output.detach().numpy(), t_out.output)
    _close(d_out.loss.detach().numpy(), t_out.loss)
    _close(dx.grad.numpy(), tx.grad)
    d_params = dict(ours.named_parameters())
    for k, p in theirs.named_parameters():
        _close(d_params[k].grad.numpy(), p.grad)


@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors is a no-op")
@pytest.mark.parametrize("chunking", list(CHUNKINGS))
@pytest.mark.parametrize("args,kwargs", ASM_CASES, ids=ASM_IDS)
def test_adaptive_log_softmax_log_prob_and_predict_are_torchs(args, kwargs, chunking):
    ours, theirs = _asm_pair(args, kwargs)
    x = np.random.default_rng(2).standard_normal((6, args[0])) * 3
    t_pred = theirs.predict(torch.from_numpy(x))
    assert (t_pred >= args[2][0]).any() and (t_pred < args[2][0]).any()  # both of torch's paths
    np.testing.assert_array_equal(ours.predict(_from(x, chunking)).numpy(), t_pred.numpy())
    tx, dx = torch.from_numpy(x).requires_grad_(True), _from(x, chunking, requires_grad=True)
    t_lp, d_lp = theirs.log_prob(tx), ours.log_prob(dx)
    w = np.random.default_rng(3).standard_normal(tuple(t_lp.shape))
    (t_lp * torch.from_numpy(w)).sum().backward()
    (d_lp * dg.from_array(w)).sum().backward()
    _close(d_lp.detach().numpy(), t_lp)
    _close(dx.grad.numpy(), tx.grad)


@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors is a no-op")
def test_adaptive_log_softmax_takes_one_unbatched_row_and_a_0d_target():
    ours, theirs = _asm_pair(*ASM_CASES[0])
    x = np.random.default_rng(4).standard_normal(8)
    t_out, d_out = theirs(torch.from_numpy(x), torch.tensor(7)), ours(dg.from_array(x), dg.tensor(np.int64(7)))
    assert d_out.output.shape == () and d_out.loss.shape == ()
    _close(d_out.output.detach().numpy(), t_out.output)
    _close(d_out.loss.detach().numpy(), t_out.loss)


@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors is a no-op")
@pytest.mark.parametrize("chunking", list(CHUNKINGS))
def test_a_tail_no_target_falls_in_gets_no_gradient_as_torchs_and_adam_leaves_it_alone(chunking):
    ours, theirs = _asm_pair(*ASM_CASES[0])
    target = np.array([0, 1, 2, 0, 7, 2])  # the shortlist and the second cluster only
    x = np.random.default_rng(5).standard_normal((6, 8))
    t_opt = torch.optim.Adam(theirs.parameters(), lr=0.1)
    d_opt = dg.optim.Adam(ours.parameters(), lr=0.1)
    for _ in range(2):  # a step with a zero gradient would move the first tail (Adam's moments): none must
        theirs(torch.from_numpy(x), torch.from_numpy(target)).loss.backward()
        ours(_from(x, chunking), _from(target, chunking)).loss.backward()
        t_opt.step()
        d_opt.step()
    assert theirs.tail[0][0].weight.grad is None and ours.tail[0][0].weight.grad is None
    d_params = dict(ours.named_parameters())
    for k, p in theirs.named_parameters():
        _close(d_params[k].detach().numpy(), p.detach())


@pytest.mark.parametrize("cutoffs", [[], [6, 3], [3, 3], [0, 4], [3, 10], [2.5]], ids=str)
def test_adaptive_log_softmax_refuses_bad_cutoffs_with_torchs_error(cutoffs):
    _raises_as_torch(lambda: nn.AdaptiveLogSoftmaxWithLoss(8, 10, cutoffs),
                     lambda: torch.nn.AdaptiveLogSoftmaxWithLoss(8, 10, cutoffs))


@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors is a no-op")
@pytest.mark.parametrize("x_shape,target", [((6, 8), [1, 2, 3]), ((6, 2, 8), [1] * 6), ((6, 8), 1),
                                            ((6, 8), [[1] * 6]), ((6, 8), [1.0] * 6)],
                         ids=["batch-sizes", "3d-input", "0d-target-2d-input", "2d-target", "float-target"])
def test_adaptive_log_softmax_refuses_mismatched_inputs_and_targets_with_torchs_error(x_shape, target):
    ours, theirs = _asm_pair(*ASM_CASES[0])
    target = np.array(target, dtype=np.float64 if isinstance(np.ravel(target)[0], float) else np.int64)
    _raises_as_torch(lambda: ours(dg.ones(*x_shape, dtype="float64"), dg.from_array(target)),
                     lambda: theirs(torch.ones(x_shape, dtype=torch.float64), torch.from_numpy(target)))


@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors is a no-op")
@pytest.mark.parametrize("target", [[1, 2, 12, 3, 4, 5], [-1, 2, 3, 4, 5, 9]], ids=["above", "below"])
def test_a_target_outside_the_classes_raises_torchs_error_in_the_forward(target):
    ours, theirs = _asm_pair(*ASM_CASES[0])
    x = np.ones((6, 8))
    _raises_as_torch(lambda: ours(_from(x, "uneven", requires_grad=True), _from(np.array(target), "uneven")),
                     lambda: theirs(torch.from_numpy(x), torch.tensor(target)))


# ------------------------------------------------------------------------------------------------ CrossMapLRN2d
LRN_CASES = [(2, {}), (3, {"alpha": 0.5, "beta": 0.75, "k": 1.5}), (5, {"alpha": 2.0, "beta": 0.5, "k": 2}),
             (9, {"alpha": 1.0})]


@pytest.mark.parametrize("chunking", list(CHUNKINGS))
@pytest.mark.parametrize("size,kwargs", LRN_CASES, ids=[f"size{s}" for s, _ in LRN_CASES])
def test_cross_map_lrn2d_gives_torchs_values_and_its_own_backwards_gradients(size, kwargs, chunking):
    # torch's legacy backward is not its forward's derivative (offset windows; channel 0 never leaves the
    # forward's running sum): these are its numbers, not LocalResponseNorm's
    theirs, ours = torch.nn.CrossMapLRN2d(size, **kwargs), nn.CrossMapLRN2d(size, **kwargs)
    assert repr(ours) == repr(theirs) and ours.state_dict() == {}
    _forward_backward(ours, theirs, np.random.default_rng(0).standard_normal((6, 7, 3, 2)), chunking)


def test_cross_map_lrn2d_with_size_one_computes_but_its_backward_raises_torchs_error():
    x = np.random.default_rng(0).standard_normal((6, 3, 2, 2))
    t_out, d_out = torch.nn.CrossMapLRN2d(1)(torch.from_numpy(x).requires_grad_(True)), \
        nn.CrossMapLRN2d(1)(_from(x, "uneven", requires_grad=True))
    _close(d_out.detach().numpy(), t_out)
    _raises_as_torch(lambda: d_out.sum().backward(), lambda: t_out.sum().backward())


@pytest.mark.parametrize("shape,size", [((2, 3, 4), 3), ((1, 2, 3, 4, 5), 3), ((2, 3, 2, 2), 0)],
                         ids=["3d", "5d", "size0"])
def test_cross_map_lrn2d_refuses_what_torchs_refuses_with_its_error(shape, size):
    _raises_as_torch(lambda: nn.CrossMapLRN2d(size)(dg.ones(*shape)),
                     lambda: torch.nn.CrossMapLRN2d(size)(torch.ones(shape)))


# ------------------------------------------------------------------------------------------ fractional max pool
FMP_CASES = [(2, (6, 3, 7, 6), 2, {"output_size": (4, 3)}), (2, (6, 3, 9, 11), (2, 3), {"output_ratio": (0.5, 0.5)}),
             (2, (6, 2, 9, 11), 2, {"output_size": (1, 10)}), (3, (6, 2, 5, 6, 7), 2, {"output_size": (3, 4, 2)}),
             (3, (6, 2, 5, 6, 7), (2, 1, 3), {"output_ratio": 0.5})]
FMP_IDS = ["2d-size", "2d-ratio", "2d-one-and-dense", "3d-size", "3d-ratio"]


def _fmp_data(nsp, shape, seed=0):
    rng = np.random.default_rng(seed)
    x = np.round(rng.standard_normal(shape), 1)  # (rounded: equal largest values in some windows)
    x[0, 0].flat[::5] = np.nan  # a plane with NaNs: torch's picks the last NaN of a window
    x[1, 0] = -np.inf  # windows of -inf only: their first cell
    return x, rng.random((shape[0], shape[1], nsp))


@pytest.mark.filterwarnings("ignore:invalid value encountered in reduce")  # (the test's loss: -inf times signs)
@pytest.mark.parametrize("chunking", list(CHUNKINGS))
@pytest.mark.parametrize("nsp,shape,kernel,kwargs", FMP_CASES, ids=FMP_IDS)
def test_fractional_max_pool_with_given_samples_gives_torchs_values_indices_and_gradients(nsp, shape, kernel, kwargs,
                                                                                          chunking):
    x, samples = _fmp_data(nsp, shape)
    f, g = getattr(torch.nn.functional, f"fractional_max_pool{nsp}d"), getattr(F, f"fractional_max_pool{nsp}d")
    tx, dx = torch.from_numpy(x).requires_grad_(True), _from(x, chunking, requires_grad=True)
    t_out, t_idx = f(tx, kernel, return_indices=True, _random_samples=torch.from_numpy(samples), **kwargs)
    d_out, d_idx = g(dx, kernel, return_indices=True, _random_samples=_from(samples, chunking), **kwargs)
    w = np.random.default_rng(1).standard_normal(tuple(t_out.shape))
    (t_out * torch.from_numpy(w)).sum().backward()
    (d_out * dg.from_array(w)).sum().backward()
    np.testing.assert_array_equal(d_out.detach().numpy(), t_out.detach().numpy())  # (NaNs in the same places)
    assert d_idx.dtype == np.int64
    np.testing.assert_array_equal(d_idx.numpy(), t_idx.numpy())
    _close(dx.grad.numpy(), tx.grad)


@pytest.mark.parametrize("nsp,shape,kernel,kwargs", FMP_CASES[:1] + FMP_CASES[3:4], ids=["2d", "3d"])
def test_fractional_max_pool_modules_are_torchs_with_their_samples_buffer_batched_or_not(nsp, shape, kernel, kwargs):
    x, samples = _fmp_data(nsp, shape)
    name = f"FractionalMaxPool{nsp}d"
    theirs = getattr(torch.nn, name)(kernel, return_indices=True, _random_samples=torch.from_numpy(samples), **kwargs)
    ours = getattr(nn, name)(kernel, return_indices=True, _random_samples=dg.from_array(samples), **kwargs)
    assert repr(ours) == repr(theirs) == f"{name}()"
    assert list(ours.state_dict()) == list(theirs.state_dict()) == ["_random_samples"]
    assert ours.kernel_size == theirs.kernel_size and ours.output_size == theirs.output_size
    assert list(getattr(nn, name)(kernel, output_ratio=0.5).state_dict()) == []
    tx, dx = torch.from_numpy(x).requires_grad_(True), _from(x, "uneven", requires_grad=True)
    t_out, d_out = theirs(tx)[0], ours(dx)[0]
    t_out.sum().backward()
    d_out.sum().backward()
    np.testing.assert_array_equal(d_out.detach().numpy(), t_out.detach().numpy())
    _close(dx.grad.numpy(), tx.grad)
    for one in (x[2], x[0]):  # unbatched: the first plane samples
        t_out, t_idx = theirs(torch.from_numpy(one))
        d_out, d_idx = ours(dg.from_array(one))
        np.testing.assert_array_equal(d_out.numpy(), t_out.numpy())
        np.testing.assert_array_equal(d_idx.numpy(), t_idx.numpy())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fractional_max_pool_computes_its_windows_in_the_inputs_dtype_as_torch(dtype):
    # alpha = (n - k) / (o - 1) and (i + u) * alpha in float32 for a float32 input: other windows than float64's
    x, samples = _fmp_data(2, (6, 3, 31, 29), seed=3)
    x, samples = x.astype(dtype), samples.astype(dtype)
    t_out, t_idx = torch.nn.functional.fractional_max_pool2d(
        torch.from_numpy(x), 3, output_size=(13, 11), return_indices=True, _random_samples=torch.from_numpy(samples))
    d_out, d_idx = F.fractional_max_pool2d(_from(x, "even"), 3, output_size=(13, 11), return_indices=True,
                                           _random_samples=_from(samples, "even"))
    assert d_out.dtype == dtype
    np.testing.assert_array_equal(d_out.numpy(), t_out.numpy())
    np.testing.assert_array_equal(d_idx.numpy(), t_idx.numpy())


def test_fractional_max_pool_without_samples_draws_them_from_daskgrads_generator():
    x, _ = _fmp_data(2, (6, 3, 9, 11))
    dg.manual_seed(7)
    samples = dg.rand(6, 3, 2, dtype="float64")
    dg.manual_seed(7)
    d_out, d_idx = F.fractional_max_pool2d(_from(x, "uneven"), 2, output_ratio=(0.5, 0.5), return_indices=True)
    # the same draw as those samples: torch's windows for them
    t_out, t_idx = torch.nn.functional.fractional_max_pool2d(torch.from_numpy(x), 2, output_ratio=(0.5, 0.5),
                                                             return_indices=True,
                                                             _random_samples=torch.from_numpy(samples.numpy()))
    np.testing.assert_array_equal(d_out.numpy(), t_out.numpy())
    np.testing.assert_array_equal(d_idx.numpy(), t_idx.numpy())
    again = nn.FractionalMaxPool2d(2, output_ratio=0.5)
    dg.manual_seed(7)
    np.testing.assert_array_equal(again(_from(x, "one")).numpy(), d_out.numpy())


X4, S4 = np.ones((2, 3, 7, 6)), np.full((2, 3, 2), 0.5)
X5, S5 = np.ones((2, 3, 5, 6, 7)), np.full((2, 3, 3), 0.5)
FMP_ERRORS = {
    "samples-dtype": (2, X4, 2, {"output_size": 3, "_random_samples": S4.astype(np.float32)}),
    "samples-last-size": (2, X4, 2, {"output_size": 3, "_random_samples": np.full((2, 3, 3), 0.5)}),
    "samples-batch": (2, X4, 2, {"output_size": 3, "_random_samples": S4[:1]}),
    "samples-channels": (2, X4, 2, {"output_size": 3, "_random_samples": np.full((2, 4, 2), 0.5)}),
    "samples-2d": (2, X4, 2, {"output_size": 3, "_random_samples": S4[0]}),
    "pool-height": (2, X4, 2, {"output_size": (7, 3), "_random_samples": S4}),
    "pool-width": (2, X4, 2, {"output_size": (3, 6), "_random_samples": S4}),
    "kernel-length": (2, X4, (2, 2, 2), {"output_size": 3, "_random_samples": S4}),
    "output-length": (2, X4, 2, {"output_size": (3, 3, 3), "_random_samples": S4}),
    "2d-input": (2, X4[0, 0], 2, {"output_size": 3, "_random_samples": S4}),
    "empty-plane": (2, X4[:, :, :0], 2, {"output_size": 3, "_random_samples": S4}),
    "no-size": (2, X4, 2, {}),
    "ratio-length": (2, X4, 2, {"output_ratio": (0.5, 0.5, 0.5)}),
    "ratio-number": (2, X4, 2, {"output_ratio": 0.5}),
    "3d-samples-last-size": (3, X5, 2, {"output_size": 3, "_random_samples": S5[..., :2]}),
    "3d-pool-time": (3, X5, 2, {"output_size": (5, 3, 3), "_random_samples": S5}),
    "3d-pool-width": (3, X5, 2, {"output_size": (3, 3, 7), "_random_samples": S5}),
    "3d-input": (3, X5[0, 0], 2, {"output_size": 3, "_random_samples": S5}),
    "3d-kernel-length": (3, X5, (2, 2), {"output_size": 3, "_random_samples": S5}),
    "3d-no-size": (3, X5, 2, {}),
}


@pytest.mark.parametrize("nsp,x,kernel,kwargs", FMP_ERRORS.values(), ids=list(FMP_ERRORS))
def test_fractional_max_pool_refuses_bad_arguments_with_torchs_error(nsp, x, kernel, kwargs):
    f, g = getattr(torch.nn.functional, f"fractional_max_pool{nsp}d"), getattr(F, f"fractional_max_pool{nsp}d")
    samples = kwargs.get("_random_samples")
    t_kw = dict(kwargs, _random_samples=None if samples is None else torch.from_numpy(samples))
    d_kw = dict(kwargs, _random_samples=None if samples is None else dg.from_array(samples))
    _raises_as_torch(lambda: g(dg.from_array(x), kernel, **d_kw), lambda: f(torch.from_numpy(x), kernel, **t_kw))


@pytest.mark.parametrize("args,kwargs", [((2,), {}), ((2, 3, 0.5), {}), ((2,), {"output_ratio": 1.0}),
                                         ((2,), {"output_ratio": (0.5, 0)})],
                         ids=["neither", "both", "ratio-1", "ratio-0"])
@pytest.mark.parametrize("nsp", [2, 3])
def test_fractional_max_pool_modules_refuse_bad_arguments_with_torchs_error(nsp, args, kwargs):
    name = f"FractionalMaxPool{nsp}d"
    _raises_as_torch(lambda: getattr(nn, name)(*args, **kwargs), lambda: getattr(torch.nn, name)(*args, **kwargs))


def test_fractional_max_pool3d_refuses_a_kernel_of_no_cells_as_torchs_module_and_so_does_2d():
    _raises_as_torch(lambda: nn.FractionalMaxPool3d(0, output_ratio=0.5),
                     lambda: torch.nn.FractionalMaxPool3d(0, output_ratio=0.5))
    # torch's 2-d one reads outside the input (its windows start at n - 0): refused here, with the 3-d text
    with pytest.raises(ValueError, match=r"kernel_size must be greater than 0, but got \(0, 0\)"):
        F.fractional_max_pool2d(dg.from_array(X4), 0, output_size=3, _random_samples=dg.from_array(S4))


# ------------------------------------------------------------------------------------------------ device chunks
def test_cross_map_lrn2d_and_fractional_max_pool_keep_chunks_that_refuse_host_arrays_as_cupys_do():
    from strict_array import StrictArray, register, to_strict

    register()
    x = to_strict(_from(np.random.default_rng(0).standard_normal((6, 3, 7, 6)), "uneven")).requires_grad_(True)
    samples = to_strict(_from(np.random.default_rng(1).random((6, 3, 2)), "uneven"))
    outs = [nn.CrossMapLRN2d(3)(x), *F.fractional_max_pool2d(x, 2, output_size=3, return_indices=True,
                                                               _random_samples=samples),
            F.fractional_max_pool2d(x, 2, output_ratio=(0.5, 0.5))]  # (samples drawn, moved to the chunk type)
    (outs[0].sum() + outs[1].sum()).backward()
    for t in outs + [x.grad]:
        assert isinstance(t.array.blocks[0].compute(), StrictArray)


@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors is a no-op")
@pytest.mark.parametrize("method", ["log_prob", "predict"])
def test_adaptive_log_softmax_log_prob_and_predict_refuse_one_row_with_torchs_error(method):
    ours, theirs = _asm_pair(*ASM_CASES[0])
    _raises_as_torch(lambda: getattr(ours, method)(dg.ones(8, dtype="float64")),
                     lambda: getattr(theirs, method)(torch.ones(8, dtype=torch.float64)))
