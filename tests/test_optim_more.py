"""Adadelta, Adamax, NAdam, RAdam, Rprop, ASGD beyond torch's optim_db samples (tests/test_optim_db.py): a
parameter in 3 uneven chunks over 8 steps (RAdam's rectified branch from step 6, ASGD's averaging past t0),
lazy steps, torch's state dicts loaded mid-training, torch's argument errors."""
import dask
import numpy as np
import pytest

import daskgrad as dg
from daskgrad import optim

torch = pytest.importorskip("torch")

CASES = [("Adadelta", dict(lr=0.5, rho=0.8, weight_decay=0.1)),
         ("Adamax", dict(lr=0.05, weight_decay=0.1, maximize=True)),
         ("NAdam", dict(lr=0.05, weight_decay=0.1, decoupled_weight_decay=True)),
         ("RAdam", dict(lr=0.05, weight_decay=0.1)),
         ("Rprop", dict(lr=0.05, etas=(0.4, 1.3), step_sizes=(1e-3, 0.2))),
         ("ASGD", dict(lr=0.05, lambd=0.1, t0=3, weight_decay=0.1))]
IDS = [c[0] for c in CASES]
CHUNKS = (3, 3, 4)


def _loss(w, a):
    return ((w - a) ** 4).sum()  # gradients change sign as w crosses a: Rprop's three cases all occur


def _same_state(ours, theirs):
    for key, value in theirs.items():
        mine = ours[key]
        mine = mine.detach().numpy() if isinstance(mine, dg.Tensor) else mine
        np.testing.assert_allclose(np.asarray(mine, dtype=float), np.asarray(value, dtype=float), rtol=1e-9,
                                   atol=1e-12, err_msg=key)
    assert set(ours) == set(theirs)


@pytest.mark.parametrize("name,kwargs", CASES, ids=IDS)
def test_a_three_uneven_chunk_parameter_follows_torch_lazily_with_chunked_state(name, kwargs):
    rng = np.random.default_rng(1)
    w0, a = rng.standard_normal(10), rng.standard_normal(10)
    w, tw = dg.from_array(w0, chunks=CHUNKS, requires_grad=True), torch.tensor(w0, requires_grad=True)
    opt, topt = getattr(optim, name)([w], **kwargs), getattr(torch.optim, name)([tw], **kwargs)
    target = dg.from_array(a, chunks=CHUNKS)
    calls = []

    def counting_scheduler(dsk, keys, **kw):
        calls.append(keys)
        return dask.get(dsk, keys, **kw)

    for _ in range(8):
        opt.zero_grad()
        _loss(w, target).backward()
        with dask.config.set(scheduler=counting_scheduler):
            opt.step()
        topt.zero_grad()
        _loss(tw, torch.tensor(a)).backward()
        topt.step()
    assert calls == [], "step() submitted work"
    state = [v for v in opt.state[w].values() if isinstance(v, dg.Tensor)]
    assert state and all(s.chunks == w.chunks and s.dtype == w.dtype for s in state)
    np.testing.assert_allclose(w.detach().numpy(), tw.detach().numpy(), rtol=1e-9, atol=1e-12)
    _same_state(opt.state_dict()["state"][0], topt.state_dict()["state"][0])
    assert set(opt.state_dict()["param_groups"][0]) == set(topt.state_dict()["param_groups"][0])


@pytest.mark.parametrize("name,kwargs", CASES, ids=IDS)
def test_torchs_state_dict_loaded_mid_training_continues_as_torch(name, kwargs):
    """torch's state (0-d tensors for step, NAdam's mu_product, ASGD's eta and mu) loads, and training goes on
    as torch's does; our own state_dict loads into a fresh optimizer the same way."""
    rng = np.random.default_rng(2)
    w0, a = rng.standard_normal(10), rng.standard_normal(10)
    tw = torch.tensor(w0, requires_grad=True)
    topt = getattr(torch.optim, name)([tw], **kwargs)

    def t_step():
        topt.zero_grad()
        _loss(tw, torch.tensor(a)).backward()
        topt.step()

    for _ in range(4):
        t_step()
    w = dg.from_array(tw.detach().numpy().copy(), chunks=CHUNKS, requires_grad=True)
    opt = getattr(optim, name)([w], **kwargs)
    opt.load_state_dict(topt.state_dict())
    opt2 = getattr(optim, name)([w], **kwargs)
    opt2.load_state_dict(opt.state_dict())
    target = dg.from_array(a, chunks=CHUNKS)
    for _ in range(3):
        opt2.zero_grad()
        _loss(w, target).backward()
        opt2.step()
        t_step()
    np.testing.assert_allclose(w.detach().numpy(), tw.detach().numpy(), rtol=1e-9, atol=1e-12)
    _same_state(opt2.state_dict()["state"][0], topt.state_dict()["state"][0])


@pytest.mark.parametrize("name,kwargs", [
    ("Adadelta", dict(lr=-1.0)), ("Adadelta", dict(rho=1.5)), ("Adadelta", dict(eps=-1.0)),
    ("Adadelta", dict(weight_decay=-1.0)), ("Adamax", dict(eps=-1.0)), ("Adamax", dict(betas=(0.9, 1.0))),
    ("Adamax", dict(weight_decay=-0.1)), ("NAdam", dict(betas=(1.0, 0.9))), ("NAdam", dict(momentum_decay=-1.0)),
    ("RAdam", dict(lr=-0.1)), ("RAdam", dict(betas=(0.9, -0.1))), ("Rprop", dict(etas=(1.1, 1.2))),
    ("Rprop", dict(etas=(0.5, 0.9))), ("ASGD", dict(weight_decay=-1.0)), ("ASGD", dict(lr=-1.0))])
def test_bad_arguments_raise_torchs_error(name, kwargs):
    with pytest.raises(ValueError) as theirs:
        getattr(torch.optim, name)([torch.zeros(2, requires_grad=True)], **kwargs)
    with pytest.raises(ValueError) as ours:
        getattr(optim, name)([dg.zeros(2, requires_grad=True)], **kwargs)
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("name", IDS)
def test_flags_accepted_and_differentiable_refused(name):
    p = dg.zeros(2, requires_grad=True)
    getattr(optim, name)([p], foreach=True, capturable=True)
    with pytest.raises(NotImplementedError, match="^differentiable=True is not supported by daskgrad"):
        getattr(optim, name)([p], differentiable=True)
