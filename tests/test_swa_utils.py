"""``optim.swa_utils`` (AveragedModel with SWA and EMA averages, update_bn, the averaging functions) and
``optim.Adafactor`` against torch 2.13 in float64: the averaged parameters and buffers after several updates,
the recomputed BatchNorm statistics, Adafactor's parameters and state step for step, state_dict layouts and
errors.  SWALR's learning rates are checked with the other schedulers in tests/test_lr_schedulers.py, and
Adafactor on torch's own optim_db samples in tests/test_optim_db.py."""
import numpy as np
import pytest

import daskgrad as dg
from daskgrad import optim
from daskgrad.optim import swa_utils

torch = pytest.importorskip("torch")
tsu = torch.optim.swa_utils

CHUNKS = {"one-chunk": 6, "even": 3, "uneven": (4, 2)}


def _nets():
    """The same small net with a BatchNorm (its buffers include an int64 counter) in torch and daskgrad."""
    theirs = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.BatchNorm1d(3), torch.nn.Tanh(),
                                 torch.nn.Linear(3, 2)).double()
    ours = dg.nn.Sequential(dg.nn.Linear(2, 3), dg.nn.BatchNorm1d(3), dg.nn.Tanh(), dg.nn.Linear(3, 2)).double()
    ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    return theirs, ours


def _same(ours, theirs, what=""):
    # (atol: a running mean near 0 is a difference of O(1) batch means, summed in another order than torch's: it
    # may differ by a few ulps of those, 1e-14; the order of dask's sums is not torch's)
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-12, atol=1e-13,
                               err_msg=what)


def _same_dicts(ours, theirs):
    assert list(ours) == list(theirs)
    for k in theirs:
        assert ours[k].dtype == str(theirs[k].dtype).removeprefix("torch."), k
        _same(ours[k], theirs[k], k)


def _train_steps(theirs, ours, n, chunks, rng, then):
    """``n`` rounds of: new random weights in both nets, a training-mode forward (the BatchNorm buffers
    move), then ``then()``."""
    for _ in range(n):
        weights = {k: rng.standard_normal(v.shape) for k, v in theirs.named_parameters()}
        theirs.load_state_dict({k: torch.tensor(v) for k, v in weights.items()}, strict=False)
        ours.load_state_dict(weights, strict=False)
        x = rng.standard_normal((6, 2))
        theirs(torch.tensor(x))
        ours(dg.from_array(x, chunks=(chunks, 2)))
        then()


AVERAGES = {
    "swa-default": lambda su: {},
    "ema-avg_fn": lambda su: {"avg_fn": su.get_ema_avg_fn(0.9)},
    "swa-avg_fn": lambda su: {"avg_fn": su.get_swa_avg_fn()},
    "swa-multi_avg_fn": lambda su: {"multi_avg_fn": su.get_swa_multi_avg_fn()},
    "ema-multi_avg_fn": lambda su: {"multi_avg_fn": su.get_ema_multi_avg_fn(0.75)},
}
CASES = [(a, b, c) for a in AVERAGES for b in (False, True) for c in CHUNKS
         if not (a == "swa-multi_avg_fn" and b)]  # torch's integer addcdiv raises there: see below


@pytest.mark.parametrize("average,use_buffers,chunks", CASES,
                         ids=[f"{a}-{'buffers' if b else 'params'}-{c}" for a, b, c in CASES])
def test_averaged_model_equals_torchs_after_four_updates(average, use_buffers, chunks):
    """Parameters (and with ``use_buffers`` the BatchNorm buffers, the int64 counter included) averaged
    as torch's; without it the buffers are copied.  The state_dict has torch's keys, order and dtypes."""
    theirs, ours = _nets()
    t_avg = tsu.AveragedModel(theirs, use_buffers=use_buffers, **AVERAGES[average](tsu))
    d_avg = swa_utils.AveragedModel(ours, use_buffers=use_buffers, **AVERAGES[average](swa_utils))
    _train_steps(theirs, ours, 4, CHUNKS[chunks], np.random.default_rng(1),
                 lambda: (t_avg.update_parameters(theirs), d_avg.update_parameters(ours)))
    _same_dicts(d_avg.state_dict(), t_avg.state_dict())
    assert int(d_avg.n_averaged.item()) == 4


def test_update_parameters_submits_nothing_and_forward_is_the_copys():
    theirs, ours = _nets()
    t_avg, d_avg = tsu.AveragedModel(theirs), swa_utils.AveragedModel(ours)
    x = np.random.default_rng(2).standard_normal((6, 2))
    with dg.testing.submissions() as subs:
        for _ in range(3):
            d_avg.update_parameters(ours)
    assert sum(subs.values()) == 0
    for _ in range(3):
        t_avg.update_parameters(theirs)
    t_avg.eval()
    d_avg.eval()
    assert d_avg.module is not ours and d_avg.module[0].weight is not ours[0].weight
    dx, tx = dg.from_array(x, chunks=(4, 2)).requires_grad_(), torch.tensor(x, requires_grad=True)
    d_out, t_out = d_avg(dx), t_avg(tx)
    _same(d_out, t_out)
    (d_out * d_out).sum().backward()
    (t_out * t_out).sum().backward()
    _same(dx.grad, tx.grad)
    _same(d_avg.module[0].weight.grad, t_avg.module[0].weight.grad)
    assert ours[0].weight.grad is None
    assert repr(d_avg) == repr(t_avg)


def test_loaded_n_averaged_is_read_as_torch_reads_it():
    """A state dict saved after two updates, loaded into a fresh AveragedModel: the next update averages
    (it does not copy), as torch's."""
    theirs, ours = _nets()
    t_avg = tsu.AveragedModel(theirs)
    rng = np.random.default_rng(3)
    _train_steps(theirs, ours, 2, 3, rng, lambda: t_avg.update_parameters(theirs))
    d_avg = swa_utils.AveragedModel(ours)
    d_avg.load_state_dict({k: v.numpy() for k, v in t_avg.state_dict().items()})
    _train_steps(theirs, ours, 2, (4, 2), rng, lambda: (t_avg.update_parameters(theirs),
                                                       d_avg.update_parameters(ours)))
    _same_dicts(d_avg.state_dict(), t_avg.state_dict())


def test_integer_buffers_with_the_swa_multi_avg_fn_raise_torchs_error():
    theirs, ours = _nets()
    t_avg = tsu.AveragedModel(theirs, multi_avg_fn=tsu.get_swa_multi_avg_fn(), use_buffers=True)
    d_avg = swa_utils.AveragedModel(ours, multi_avg_fn=swa_utils.get_swa_multi_avg_fn(), use_buffers=True)
    t_avg.update_parameters(theirs)
    d_avg.update_parameters(ours)
    with pytest.raises(RuntimeError) as expected:
        t_avg.update_parameters(theirs)
    with pytest.raises(RuntimeError) as got:
        d_avg.update_parameters(ours)
    assert str(got.value) == str(expected.value)


@pytest.mark.parametrize("make", [
    lambda su, net: su.AveragedModel(net, avg_fn=su.get_swa_avg_fn(), multi_avg_fn=su.get_swa_multi_avg_fn()),
    lambda su, net: su.get_ema_avg_fn(1.5),
    lambda su, net: su.get_ema_multi_avg_fn(-0.1),
], ids=["both-avg-fns", "ema-decay", "ema-multi-decay"])
def test_bad_arguments_raise_torchs_error(make):
    theirs, ours = _nets()
    with pytest.raises(Exception) as expected:
        make(tsu, theirs)
    with pytest.raises(Exception) as got:
        make(swa_utils, ours)
    assert type(got.value) is type(expected.value) and str(got.value) == str(expected.value)


@pytest.mark.parametrize("chunks", list(CHUNKS))
def test_update_bn_recomputes_running_stats_as_cumulative_averages(chunks):
    """Batches as tensors and as (input, target) tuples; the stats are reset first, the momentum and the
    training mode are restored; an InstanceNorm is not touched (torch's is not a _BatchNorm)."""
    theirs = torch.nn.Sequential(torch.nn.Linear(2, 4), torch.nn.BatchNorm1d(4, momentum=0.3), torch.nn.ReLU(),
                                 torch.nn.Unflatten(1, (2, 2)), torch.nn.InstanceNorm1d(2, track_running_stats=True),
                                 torch.nn.Flatten(), torch.nn.BatchNorm1d(4)).double()
    ours = dg.nn.Sequential(dg.nn.Linear(2, 4), dg.nn.BatchNorm1d(4, momentum=0.3), dg.nn.ReLU(),
                            dg.nn.Unflatten(1, (2, 2)), dg.nn.InstanceNorm1d(2, track_running_stats=True),
                            dg.nn.Flatten(), dg.nn.BatchNorm1d(4)).double()
    ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    rng = np.random.default_rng(4)
    warm = rng.standard_normal((6, 2))
    theirs(torch.tensor(warm))  # stale statistics that update_bn must reset
    ours(dg.from_array(warm, chunks=(3, 2)))
    theirs.eval()
    ours.eval()
    batches = [rng.standard_normal((6, 2)) * (i + 1) + i for i in range(3)]
    tsu.update_bn([torch.tensor(batches[0]), (torch.tensor(batches[1]), 0), [torch.tensor(batches[2])]], theirs)
    swa_utils.update_bn([dg.from_array(batches[0], chunks=(CHUNKS[chunks], 2)),
                         (dg.from_array(batches[1], chunks=(CHUNKS[chunks], 2)), 0),
                         [dg.from_array(batches[2], chunks=(CHUNKS[chunks], 2))]], ours)
    _same_dicts(ours.state_dict(), theirs.state_dict())
    assert not ours.training and ours[1].momentum == 0.3 and ours[6].momentum == 0.1


def test_update_bn_on_an_averaged_model_with_a_device_and_on_a_model_without_batchnorm():
    theirs, ours = _nets()
    t_avg, d_avg = tsu.AveragedModel(theirs), swa_utils.AveragedModel(ours)
    rng = np.random.default_rng(5)
    _train_steps(theirs, ours, 3, 3, rng, lambda: (t_avg.update_parameters(theirs), d_avg.update_parameters(ours)))
    batches = [rng.standard_normal((6, 2)) for _ in range(2)]
    tsu.update_bn([torch.tensor(b) for b in batches], t_avg, device="cpu")
    swa_utils.update_bn([dg.from_array(b, chunks=(4, 2)) for b in batches], d_avg, device="cpu")
    _same_dicts(d_avg.state_dict(), t_avg.state_dict())
    plain = dg.nn.Linear(2, 2)
    assert swa_utils.update_bn([dg.ones(3, 2)], plain) is None and plain.training


def test_swalr_state_dict_layout_is_torchs():
    ours = optim.SGD([dg.zeros(2, dtype="float64", requires_grad=True)], lr=0.1)
    theirs = torch.optim.SGD([torch.zeros(2, dtype=torch.float64, requires_grad=True)], lr=0.1)
    sd = swa_utils.SWALR(ours, swa_lr=0.05, anneal_strategy="linear").state_dict()
    tsd = tsu.SWALR(theirs, swa_lr=0.05, anneal_strategy="linear").state_dict()
    assert sorted(sd) == sorted(tsd) and "anneal_func" not in sd
    assert {k: sd[k] for k in ("_anneal_strategy", "anneal_epochs", "base_lrs", "last_epoch")} == \
        {k: tsd[k] for k in ("_anneal_strategy", "anneal_epochs", "base_lrs", "last_epoch")}
    assert ours.param_groups[0]["swa_lr"] == theirs.param_groups[0]["swa_lr"] == 0.05
    resumed = swa_utils.SWALR(ours, swa_lr=0.05)
    resumed.load_state_dict(sd)
    assert resumed.anneal_func is swa_utils.SWALR._linear_anneal


# ------------------------------------------------------------------------------------------------ Adafactor
ADAFACTOR = {
    "defaults": {},
    "weight-decay-maximize": dict(lr=0.05, weight_decay=0.1, maximize=True),
    "eps-d-beta2": dict(eps=(1e-20, 1e-2), d=1.5, beta2_decay=-0.5),
}


@pytest.mark.parametrize("chunks", list(CHUNKS))
@pytest.mark.parametrize("kwargs", list(ADAFACTOR))
def test_adafactor_equals_torch_step_for_step(kwargs, chunks):
    """A 3-d parameter (batched row/column factors), a matrix and a vector, over chunkings: parameters after
    each of 4 steps and the state afterwards (keys, shapes, values) equal torch's; steps submit nothing."""
    rng = np.random.default_rng(6)
    values = [rng.standard_normal((2, 6, 3)), rng.standard_normal((6, 4)), rng.standard_normal(6)]
    chunking = [(1, CHUNKS[chunks], 3), (CHUNKS[chunks], 2), CHUNKS[chunks]]
    tps = [torch.tensor(v, requires_grad=True) for v in values]
    dps = [dg.from_array(v, chunks=c).requires_grad_() for v, c in zip(values, chunking)]
    t_opt = torch.optim.Adafactor(tps, **ADAFACTOR[kwargs])
    d_opt = optim.Adafactor(dps, **ADAFACTOR[kwargs])

    def loss(lib, ps):
        a, m, v = ps
        return (lib.tanh(a).sum(0) @ m.T[:3] * v.sin()[:, None]).square().mean() + (a * a).sum() * 0.01

    for _ in range(4):
        t_opt.zero_grad()
        loss(torch, tps).backward()
        t_opt.step()
        d_opt.zero_grad()
        loss(dg, dps).backward()
        with dg.testing.submissions() as subs:
            d_opt.step()
        assert sum(subs.values()) == 0
        for dp, tp in zip(dps, tps):
            np.testing.assert_allclose(dp.detach().numpy(), tp.detach().numpy(), rtol=1e-10, atol=1e-13)
    t_state, d_state = t_opt.state_dict(), d_opt.state_dict()
    assert d_state["param_groups"] == t_state["param_groups"]
    for i, entries in t_state["state"].items():
        assert list(d_state["state"][i]) == list(entries)
        assert d_state["state"][i]["step"] == entries["step"].item()
        for key in entries:
            if key != "step":
                assert d_state["state"][i][key].shape == tuple(entries[key].shape)
                np.testing.assert_allclose(d_state["state"][i][key].detach().numpy(), entries[key].numpy(),
                                           rtol=1e-10, atol=1e-15, err_msg=f"{i} {key}")


def test_adafactor_state_dict_resumes_like_torch():
    rng = np.random.default_rng(7)
    value = rng.standard_normal((4, 3))
    tp, dp = torch.tensor(value, requires_grad=True), dg.from_array(value, chunks=(2, 3)).requires_grad_()
    t_opt, d_opt = torch.optim.Adafactor([tp]), optim.Adafactor([dp])
    for lib, p, opt in ((torch, tp, t_opt), (dg, dp, d_opt)):
        for _ in range(2):
            opt.zero_grad()
            (p.sin() * p).sum().backward()
            opt.step()
    d2 = dg.from_array(dp.detach().numpy(), chunks=(3, 3)).requires_grad_()
    resumed = optim.Adafactor([d2])
    resumed.load_state_dict(t_opt.state_dict())
    for opt, p in ((t_opt, tp), (resumed, d2)):
        opt.zero_grad()
        (p.sin() * p).sum().backward()
        opt.step()
    np.testing.assert_allclose(d2.detach().numpy(), tp.detach().numpy(), rtol=1e-10)
    assert repr(resumed) == repr(t_opt)


@pytest.mark.parametrize("kwargs", [dict(lr=-1.0), dict(beta2_decay=0.5), dict(eps=(-1.0, 1e-3)),
                                    dict(eps=(None, -1e-3)), dict(d=0.5), dict(weight_decay=-0.1)],
                         ids=["lr", "beta2_decay", "eps1", "eps2", "d", "weight_decay"])
def test_adafactor_bad_arguments_raise_torchs_error(kwargs):
    with pytest.raises(ValueError) as expected:
        torch.optim.Adafactor([torch.zeros(2, requires_grad=True)], **kwargs)
    with pytest.raises(ValueError) as got:
        optim.Adafactor([dg.zeros(2, requires_grad=True)], **kwargs)
    assert str(got.value) == str(expected.value)


def test_adafactor_refuses_complex_parameters_as_torch():
    tp = torch.zeros(2, dtype=torch.complex128, requires_grad=True)
    dp = dg.zeros(2, dtype="complex128", requires_grad=True)
    tp.grad, dp.grad = torch.ones_like(tp), dg.ones(2, dtype="complex128")
    with pytest.raises(RuntimeError) as expected:
        torch.optim.Adafactor([tp]).step()
    with pytest.raises(RuntimeError) as got:
        optim.Adafactor([dp]).step()
    assert str(got.value) == str(expected.value)
