"""Optimizers and schedulers against torch (float64), lazily: step() and zero_grad() submit nothing."""
import dask
import numpy as np
import pytest

import daskgrad as dg
from daskgrad import nn, optim

N, D, H, C = 24, 5, 6, 3


def _data(rng):
    x = rng.standard_normal((N, D))
    y = rng.integers(0, C, N)
    return x, y


def _weights(rng):
    return [rng.standard_normal((H, D)) * 0.5, rng.standard_normal(H) * 0.1,
            rng.standard_normal((C, H)) * 0.5, rng.standard_normal(C) * 0.1]


def _dg_model(ws):
    m = nn.Sequential(nn.Linear(D, H, dtype="float64"), nn.Tanh(), nn.Linear(H, C, dtype="float64"))
    m.load_state_dict(dict(zip(["0.weight", "0.bias", "2.weight", "2.bias"], ws)))
    return m


def _torch_model(torch, ws):
    m = torch.nn.Sequential(torch.nn.Linear(D, H), torch.nn.Tanh(), torch.nn.Linear(H, C)).double()
    m.load_state_dict({k: torch.tensor(w) for k, w in zip(["0.weight", "0.bias", "2.weight", "2.bias"], ws)})
    return m


CONFIGS = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.1, momentum=0.9)),
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)),
    ("SGD", dict(lr=0.05, momentum=0.5, dampening=0.3, maximize=True)),
    ("Adam", dict(lr=0.01)),
    ("Adam", dict(lr=0.01, betas=(0.8, 0.99), weight_decay=0.1, amsgrad=True)),
    ("AdamW", dict(lr=0.01)),
    ("AdamW", dict(lr=0.02, weight_decay=0.1, amsgrad=True, eps=1e-6)),
    ("RMSprop", dict()),
    ("RMSprop", dict(lr=0.005, momentum=0.9)),
    ("RMSprop", dict(lr=0.005, alpha=0.9, centered=True, weight_decay=0.05)),
    ("RMSprop", dict(lr=0.002, alpha=0.3, momentum=0.5, centered=True, eps=1e-4, maximize=True)),
    ("Adagrad", dict()),
    ("Adagrad", dict(lr=0.05, lr_decay=0.01, weight_decay=0.02)),
    ("Adagrad", dict(lr=0.1, initial_accumulator_value=0.5, eps=1e-6, maximize=True)),
]


def _train_dg(model, opt, x, y, steps):
    loss_fn = nn.CrossEntropyLoss()
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()


def _train_torch(torch, model, opt, x, y, steps):
    loss_fn = torch.nn.CrossEntropyLoss()
    for _ in range(steps):
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()


def _assert_same(model, tmodel, tmodel_reordered=None):
    """Equal to rtol 1e-9, or, where the trajectory amplifies rounding, to 10x the distance between two
    torch runs whose batch sums differ only in order (the rows reversed): a chunked sum's order is no closer."""
    reordered = (tmodel_reordered.parameters() if tmodel_reordered is not None
                 else [None] * len(list(tmodel.parameters())))
    for (name, p), tp, tq in zip(model.named_parameters(), tmodel.parameters(), reordered):
        tp = tp.detach().numpy()
        atol = 1e-12 if tq is None else max(1e-12, 10 * float(np.abs(tp - tq.detach().numpy()).max()))
        np.testing.assert_allclose(p.detach().numpy(), tp, rtol=1e-9, atol=atol, err_msg=name)


@pytest.mark.parametrize("name,kwargs", CONFIGS, ids=[f"{n}-{'-'.join(k)}" for n, k in CONFIGS])
def test_optimizer_matches_torch_over_20_steps_on_chunked_data(name, kwargs, rng):
    torch = pytest.importorskip("torch")
    xs, ys = _data(rng)
    ws = _weights(rng)
    x, y = dg.from_array(xs, chunks=7), dg.from_array(ys, chunks=7)  # four uneven chunks
    model, tmodel = _dg_model(ws), _torch_model(torch, ws)
    opt = getattr(optim, name)(model.parameters(), **kwargs)
    topt = getattr(torch.optim, name)(tmodel.parameters(), **kwargs)
    # maximize=True with centered RMSprop climbs the loss: rounding grows ~10x a step, so that torch
    # itself, summing the batch in another order, ends 5e-10 apart after 20 steps; the others 1e-13
    rmodel = _torch_model(torch, ws)
    ropt = getattr(torch.optim, name)(rmodel.parameters(), **kwargs)
    for _ in range(4):
        _train_dg(model, opt, x, y, 5)
        _train_torch(torch, tmodel, topt, torch.tensor(xs), torch.tensor(ys), 5)
        _train_torch(torch, rmodel, ropt, torch.tensor(xs[::-1].copy()), torch.tensor(ys[::-1].copy()), 5)
        _assert_same(model, tmodel, rmodel)


@pytest.mark.parametrize("name,kwargs", [CONFIGS[2], CONFIGS[5], CONFIGS[11], CONFIGS[13]],
                         ids=["SGD", "Adam", "RMSprop-centered-momentum", "Adagrad-lr_decay"])
def test_state_dict_round_trip_continues_like_uninterrupted_training(name, kwargs, rng):
    xs, ys = _data(rng)
    ws = _weights(rng)
    x, y = dg.from_array(xs, chunks=7), dg.from_array(ys, chunks=7)
    a = _dg_model(ws)
    opt_a = getattr(optim, name)(a.parameters(), **kwargs)
    _train_dg(a, opt_a, x, y, 3)
    saved_model, saved_opt = a.state_dict(), opt_a.state_dict()
    b = _dg_model(ws)
    b.load_state_dict({k: v.numpy() for k, v in saved_model.items()})
    opt_b = getattr(optim, name)(b.parameters(), **kwargs)
    opt_b.load_state_dict(saved_opt)
    _train_dg(a, opt_a, x, y, 4)
    _train_dg(b, opt_b, x, y, 4)
    for pa, pb in zip(a.parameters(), b.parameters()):
        np.testing.assert_array_equal(pa.detach().numpy(), pb.detach().numpy())


def test_state_dict_has_torch_layout_and_loads_torch_state(rng):
    torch = pytest.importorskip("torch")
    xs, ys = _data(rng)
    ws = _weights(rng)
    kwargs = dict(lr=0.01, amsgrad=True)
    tmodel = _torch_model(torch, ws)
    topt = torch.optim.Adam(tmodel.parameters(), **kwargs)
    _train_torch(torch, tmodel, topt, torch.tensor(xs), torch.tensor(ys), 3)
    model = _dg_model(ws)
    model.load_state_dict(tmodel.state_dict())
    opt = optim.Adam(model.parameters(), **kwargs)
    opt.load_state_dict(topt.state_dict())
    sd = opt.state_dict()
    assert sorted(sd) == ["param_groups", "state"] and sd["param_groups"][0]["params"] == [0, 1, 2, 3]
    assert sorted(sd["state"][0]) == sorted(topt.state_dict()["state"][0])
    assert set(sd["param_groups"][0]) == set(topt.state_dict()["param_groups"][0])
    x, y = dg.from_array(xs, chunks=7), dg.from_array(ys, chunks=7)
    _train_dg(model, opt, x, y, 3)
    _train_torch(torch, tmodel, topt, torch.tensor(xs), torch.tensor(ys), 3)
    _assert_same(model, tmodel)


def _lrs(sched, opt, n):
    out = list(sched.get_last_lr())
    for _ in range(n):
        opt.step()
        sched.step()
        out += sched.get_last_lr()
    return out


@pytest.mark.parametrize("make", [
    lambda m, o: m.StepLR(o, step_size=3, gamma=0.5),
    lambda m, o: m.CosineAnnealingLR(o, T_max=5, eta_min=0.01),
    lambda m, o: m.CosineAnnealingLR(o, T_max=4),
], ids=["StepLR", "Cosine-eta_min", "Cosine"])
def test_scheduler_lr_sequence_equals_torch(make):
    torch = pytest.importorskip("torch")
    import warnings

    opt = optim.SGD([dg.zeros(2, dtype="float64", requires_grad=True)], lr=0.3)
    topt = torch.optim.SGD([torch.zeros(2, requires_grad=True)], lr=0.3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = _lrs(make(torch.optim.lr_scheduler, topt), topt, 13)
    sched = make(optim.lr_scheduler, opt)
    assert _lrs(sched, opt, 13) == pytest.approx(expected, rel=1e-12)
    restored = make(optim.lr_scheduler, optim.SGD([dg.zeros(2, requires_grad=True)], lr=0.3))
    restored.load_state_dict(sched.state_dict())
    assert restored.last_epoch == sched.last_epoch and restored.get_last_lr() == sched.get_last_lr()


def test_model_forward_step_and_zero_grad_compute_nothing(rng):
    """Building a model, the forward pass, optimizer.step() and zero_grad() never run a task graph."""
    calls = []

    def counting_scheduler(dsk, keys, **kwargs):
        calls.append(keys)
        return dask.get(dsk, keys, **kwargs)

    xs, ys = _data(rng)
    with dask.config.set(scheduler=counting_scheduler):
        model = nn.Sequential(nn.Linear(D, H), nn.GELU(), nn.LayerNorm(H), nn.Dropout(0.1), nn.Linear(H, C))
        x, y = dg.from_array(xs.astype("float32"), chunks=7), dg.from_array(ys, chunks=7)
        opt = optim.AdamW(model.parameters(), lr=0.01)
        loss = nn.CrossEntropyLoss()(model(x), y)
        assert calls == []
        loss.backward()
        n = len(calls)
        opt.step()
        opt.zero_grad()
        sgd = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        for p in model.parameters():
            p.grad = dg.ones(p.shape, chunks=-1)
        sgd.step()
        sgd.zero_grad(set_to_none=False)
        assert len(calls) == n


def test_bad_arguments_raise_torch_errors():
    p = dg.zeros(2, requires_grad=True)
    with pytest.raises(ValueError, match="Invalid learning rate: -1"):
        optim.SGD([p], lr=-1)
    with pytest.raises(ValueError, match="Nesterov momentum requires a momentum and zero dampening"):
        optim.SGD([p], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="Invalid beta parameter at index 1: 1.0"):
        optim.Adam([p], betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="optimizer got an empty parameter list"):
        optim.Adam([])
    with pytest.raises(ValueError, match="can't optimize a non-leaf Tensor"):
        optim.SGD([p * 2], lr=0.1)
    opt = optim.SGD([p], lr=0.1)
    with pytest.raises(ValueError, match="some parameters appear in more than one parameter group"):
        opt.add_param_group({"params": [p]})
    q = dg.zeros(3, requires_grad=True)
    opt.add_param_group({"params": q, "lr": 0.5})
    assert opt.param_groups[1]["lr"] == 0.5 and opt.param_groups[1]["momentum"] == 0


@pytest.mark.parametrize("flag", ["foreach", "fused", "capturable"])
@pytest.mark.parametrize("make", [lambda ps, **kw: dg.optim.Adam(ps, lr=0.1, **kw),
                                  lambda ps, **kw: dg.optim.AdamW(ps, lr=0.1, **kw),
                                  lambda ps, **kw: dg.optim.SGD(ps, lr=0.1, momentum=0.9, **kw),
                                  lambda ps, **kw: dg.optim.RMSprop(ps, lr=0.1, momentum=0.9, centered=True, **kw),
                                  lambda ps, **kw: dg.optim.Adagrad(ps, lr=0.1, lr_decay=0.1, **kw)],
                         ids=["adam", "adamw", "sgd", "rmsprop", "adagrad"])
def test_torch_performance_flags_are_accepted_for_compatibility_and_change_no_number(make, flag):
    """foreach/fused/capturable choose torch kernels (or CUDA graphs); daskgrad has
    one implementation, so the flags are accepted and the numbers are the default's, exactly."""
    def run(**kw):
        w = dg.from_array(np.array([1.0, -2.0, 3.0]), requires_grad=True)
        try:
            opt = make([w], **kw)
        except TypeError:
            pytest.skip(f"{flag} is not an argument of this optimizer (nor of torch's)")
        for _ in range(3):
            opt.zero_grad()
            (w * w).sum().backward()
            opt.step()
        return w.detach().numpy()

    np.testing.assert_array_equal(run(**{flag: True}), run())


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad"])
def test_differentiable_true_is_refused_not_ignored(name):
    """torch's differentiable=True records the step for autograd; daskgrad's steps are not recorded, so the
    flag is refused (at construction and in an added group) rather than accepted with no graph."""
    with pytest.raises(NotImplementedError, match="^differentiable=True is not supported by daskgrad"):
        getattr(optim, name)([dg.zeros(2, requires_grad=True)], lr=0.1, differentiable=True)
    opt = getattr(optim, name)([dg.zeros(2, requires_grad=True)], lr=0.1)
    with pytest.raises(NotImplementedError, match="^differentiable=True is not supported by daskgrad"):
        opt.add_param_group({"params": [dg.zeros(2, requires_grad=True)], "differentiable": True})
    assert len(opt.param_groups) == 1


@pytest.mark.parametrize("name,kwargs", [("RMSprop", dict(lr=0.01, momentum=0.9, centered=True)),
                                         ("RMSprop", dict(lr=0.01, weight_decay=0.1, maximize=True)),
                                         ("Adagrad", dict(lr=0.1, lr_decay=0.01, initial_accumulator_value=0.1)),
                                         ("Adagrad", dict(lr=0.1, weight_decay=0.05)),
                                         ("Adam", dict(lr=0.01, amsgrad=True)),
                                         ("Adam", dict(lr=0.01, weight_decay=0.1)),
                                         ("AdamW", dict(lr=0.01, weight_decay=0.1, amsgrad=True)),
                                         ("SGD", dict(lr=0.01, momentum=0.9)),
                                         ("SGD", dict(lr=0.01, momentum=0.9, nesterov=True, weight_decay=0.1)),
                                         ("SGD", dict(lr=0.01, momentum=0.5, dampening=0.3, maximize=True))])
def test_state_of_a_many_chunk_parameter_is_chunked_like_it_and_equals_torch(name, kwargs):
    """A leaf in 3 x 2 chunks: every state tensor has its chunks, dtype and device, stays one stored value per
    chunk after each submission (no lineage), and the parameter follows torch's for 20 steps."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    w0, a = rng.standard_normal((9, 4)), rng.standard_normal((9, 4))
    w = dg.from_array(w0, chunks=((3, 3, 3), (2, 2)), requires_grad=True)
    tw = torch.tensor(w0, requires_grad=True)
    opt, topt = getattr(optim, name)([w], **kwargs), getattr(torch.optim, name)([tw], **kwargs)
    target = dg.from_array(a, chunks=((3, 3, 3), (2, 2)))
    for step in range(20):
        opt.zero_grad()
        ((w - target) ** 4).sum().backward()
        state = [v for v in opt.state[w].values() if isinstance(v, dg.Tensor)]
        # the last step's state, computed by this backward: one stored value per chunk, nothing built on them
        assert all(len(s.array.dask) == len(w.chunks[0]) * len(w.chunks[1]) for s in [w, *state])
        opt.step()
        topt.zero_grad()
        ((tw - torch.tensor(a)) ** 4).sum().backward()
        topt.step()
        state = [v for v in opt.state[w].values() if isinstance(v, dg.Tensor)]
        assert state and all(s.chunks == w.chunks and s.dtype == w.dtype and s.device == w.device for s in state)
    np.testing.assert_allclose(w.detach().numpy(), tw.detach().numpy(), rtol=1e-9, atol=1e-12)
    assert sorted(opt.state_dict()["state"][0]) == sorted(topt.state_dict()["state"][0])
    assert set(opt.state_dict()["param_groups"][0]) == set(topt.state_dict()["param_groups"][0])


def test_adagrad_state_exists_before_the_first_step_as_torch_and_loads_torchs(rng):
    torch = pytest.importorskip("torch")
    xs, ys = _data(rng)
    ws = _weights(rng)
    model, tmodel = _dg_model(ws), _torch_model(torch, ws)
    opt = optim.Adagrad(model.parameters(), lr=0.1, initial_accumulator_value=0.2)
    topt = torch.optim.Adagrad(tmodel.parameters(), lr=0.1, initial_accumulator_value=0.2)
    sd, tsd = opt.state_dict(), topt.state_dict()
    assert sorted(sd["state"]) == sorted(tsd["state"]) == [0, 1, 2, 3]
    np.testing.assert_array_equal(sd["state"][0]["sum"].numpy(), tsd["state"][0]["sum"].numpy())
    _train_torch(torch, tmodel, topt, torch.tensor(xs), torch.tensor(ys), 3)
    model.load_state_dict(tmodel.state_dict())
    opt.load_state_dict(topt.state_dict())
    x, y = dg.from_array(xs, chunks=7), dg.from_array(ys, chunks=7)
    _train_dg(model, opt, x, y, 4)
    _train_torch(torch, tmodel, topt, torch.tensor(xs), torch.tensor(ys), 4)
    _assert_same(model, tmodel)


@pytest.mark.parametrize("name,kwargs", [
    ("RMSprop", dict(lr=-0.1)), ("RMSprop", dict(eps=-1.0)), ("RMSprop", dict(momentum=-0.5)),
    ("RMSprop", dict(weight_decay=-1e-3)), ("RMSprop", dict(alpha=-0.9)),
    ("Adagrad", dict(lr=-0.1)), ("Adagrad", dict(lr_decay=-1.0)), ("Adagrad", dict(weight_decay=-1.0)),
    ("Adagrad", dict(initial_accumulator_value=-1.0)), ("Adagrad", dict(eps=-1e-10)),
    ("Adagrad", dict(fused=True, differentiable=True)), ("Adagrad", dict(fused=True, foreach=True)),
])
def test_rmsprop_adagrad_bad_arguments_raise_torchs_error(name, kwargs):
    torch = pytest.importorskip("torch")
    with pytest.raises(Exception) as expected:
        getattr(torch.optim, name)([torch.zeros(2, requires_grad=True)], **kwargs)
    with pytest.raises(Exception) as got:
        getattr(optim, name)([dg.zeros(2, requires_grad=True)], **kwargs)
    assert type(got.value) is type(expected.value) and str(got.value) == str(expected.value)


_TORCH_STEPS = [("SGD", dict(lr=0.1)), ("SGD", dict(lr=0.1, momentum=0.9)),
                ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
                ("SGD", dict(lr=0.05, momentum=0.5, dampening=0.3, maximize=True)),
                ("Adam", dict(lr=1e-2)), ("Adam", dict(lr=1e-2, weight_decay=0.1, amsgrad=True)),
                ("AdamW", dict(lr=1e-2)), ("RMSprop", dict(lr=1e-2)),
                ("RMSprop", dict(lr=1e-2, momentum=0.9, centered=True, weight_decay=0.01)),
                ("Adagrad", dict(lr=0.1, lr_decay=0.01, weight_decay=0.1))]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", range(len(_TORCH_STEPS)))
def test_updates_are_torch_s_single_tensor_ops_bit_for_bit(case, dtype):
    """Each update is torch's single-tensor code op for op (``add_(alpha=)``, ``lerp_``, ``addcmul_``,
    ``addcdiv_``: one fused multiply-add each, as torch's kernels): SGD's parameters equal torch's bit for
    bit after six steps of the same gradients; the others up to torch's vectorized square root, which is
    not correctly rounded (a last bit in a few elements)."""
    torch = pytest.importorskip("torch")
    name, kw = _TORCH_STEPS[case]
    rng = np.random.default_rng(case)
    p0 = rng.standard_normal((7, 5)).astype(dtype)
    grads = [rng.standard_normal((7, 5)).astype(dtype) for _ in range(6)]
    tp = torch.from_numpy(p0.copy()).requires_grad_()
    topt = getattr(torch.optim, name)([tp], **kw)
    p = dg.tensor(p0, chunks=(3, 5), requires_grad=True)
    opt = getattr(optim, name)([p], **kw)
    for g in grads:
        tp.grad = torch.from_numpy(g.copy())
        topt.step()
        p.grad = dg.tensor(g, chunks=(3, 5))
        opt.step()
    want, got = tp.detach().numpy(), p.detach().numpy()
    if name == "SGD":
        assert np.array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=64 * np.finfo(dtype).eps, atol=0)
