"""daskgrad's optimizers against torch's own samples: every ``daskgrad.optim`` optimizer torch's ``optim_db``
(torch.testing._internal.common_optimizers) has runs each of its samples' keyword sets (a torch tensor
``lr`` passed as a daskgrad tensor, as a user would) on the same small classifier, with torch's weights and
a batch in two chunks, for a few steps: the parameters and the optimizer's state afterwards equal torch's
(float64).  A new optimizer option in a torch release is checked the day it appears."""
import functools

import numpy as np
import pytest

import daskgrad as dg

torch = pytest.importorskip("torch")

N, D, H, C = 12, 4, 5, 3
KEYS = ["0.weight", "0.bias", "2.weight", "2.bias"]
STEPS = {"LBFGS": 2}  # the others take 3
# keywords added to every sample, on both sides: LBFGS's samples keep their options but iterate at most 4
# times a step (torch's default 20, each a backward and a few scalars read back, took 15 s a sample)
EXTRA = {"LBFGS": {"max_iter": 4}}
# LBFGS's iterations read sums over chunks in another order than torch's: its state moves by ~1e-8
# relative over them (the other optimizers agree to 1e-12)
RTOL = {"LBFGS": 1e-6}


def _optimizers():
    return sorted(n for n in dir(dg.optim) if isinstance(getattr(dg.optim, n), type)
                  and issubclass(getattr(dg.optim, n), dg.optim.Optimizer) and n != "Optimizer"
                  and hasattr(torch.optim, n))


@functools.cache
def _optim_db():
    from torch.testing._internal.common_optimizers import optim_db  # slow to import: once, at first use

    return {o.optim_cls.__name__: o for o in optim_db}


def _problem():
    rng = np.random.default_rng(0)
    xs, ys = rng.standard_normal((N, D)), rng.integers(0, C, N)
    ws = [rng.standard_normal((H, D)) * 0.5, rng.standard_normal(H) * 0.1, rng.standard_normal((C, H)) * 0.5,
          rng.standard_normal(C) * 0.1]
    theirs = torch.nn.Sequential(torch.nn.Linear(D, H), torch.nn.Tanh(), torch.nn.Linear(H, C)).double()
    theirs.load_state_dict({k: torch.tensor(w) for k, w in zip(KEYS, ws)})
    ours = dg.nn.Sequential(dg.nn.Linear(D, H), dg.nn.Tanh(), dg.nn.Linear(H, C)).double()
    ours.load_state_dict(dict(zip(KEYS, ws)))
    data = (dg.from_array(xs, chunks=N // 2), dg.from_array(ys, chunks=N // 2))
    return theirs, ours, (torch.tensor(xs), torch.tensor(ys)), data


def _same_state(ours, theirs, what, rtol):
    """One state entry: numbers, tensors, lists of them; daskgrad's LBFGS keeps a vector as a tuple of
    per-parameter tensors where torch keeps one flat vector (its load_state_dict reads either)."""
    if isinstance(theirs, list):
        assert isinstance(ours, list) and len(ours) == len(theirs), f"{what}: {ours!r:.80} vs torch's {len(theirs)}"
        for j, (a, b) in enumerate(zip(ours, theirs)):
            _same_state(a, b, f"{what}[{j}]", rtol)
        return
    if theirs is None:
        assert ours is None, f"{what}: {ours!r:.80}, torch's None"
        return
    if isinstance(ours, tuple):
        ours = np.concatenate([np.ravel(p.detach().numpy()) for p in ours])
    elif isinstance(ours, dg.Tensor):
        ours = ours.detach().numpy()
    theirs = theirs.detach().numpy() if isinstance(theirs, torch.Tensor) else theirs
    np.testing.assert_allclose(np.asarray(ours, dtype=float), np.asarray(theirs, dtype=float), rtol=rtol,
                               atol=1e-12, err_msg=what)


def _check(name, info, sample):
    theirs, ours, (tx, ty), (x, y) = _problem()
    t_kwargs = {**sample.kwargs, **EXTRA.get(name, {})}
    kwargs = {k: dg.tensor(v.item()) if isinstance(v, torch.Tensor) else v for k, v in t_kwargs.items()}
    t_opt = info.optim_cls(theirs.parameters(), **t_kwargs)
    d_opt = getattr(dg.optim, name)(ours.parameters(), **kwargs)

    def t_closure():
        t_opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(theirs(tx), ty)
        loss.backward()
        return loss

    def d_closure():
        d_opt.zero_grad()
        loss = dg.nn.functional.cross_entropy(ours(x), y)
        loss.backward()
        return loss

    for _ in range(STEPS.get(name, 3)):
        t_opt.step(t_closure)
        d_opt.step(d_closure)
    rtol = RTOL.get(name, 1e-9)
    for (key, tp), dp in zip(theirs.named_parameters(), ours.parameters()):
        np.testing.assert_allclose(dp.detach().numpy(), tp.detach().numpy(), rtol=rtol, atol=1e-12, err_msg=key)
    t_state, d_state = t_opt.state_dict()["state"], d_opt.state_dict()["state"]
    assert set(d_state) == set(t_state), f"state of parameters {sorted(d_state)}, torch's {sorted(t_state)}"
    for i, entries in t_state.items():
        assert set(d_state[i]) == set(entries), f"parameter {i}: state {sorted(d_state[i])}, torch's {sorted(entries)}"
        for key, value in entries.items():
            _same_state(d_state[i][key], value, f"parameter {i}'s {key}", rtol)


@pytest.mark.parametrize("name", _optimizers())
def test_optimizer_gives_torchs_parameters_and_state_on_every_optim_db_sample(name):
    info = _optim_db().get(name)
    if info is None:
        pytest.skip(f"torch's optim_db has no {name}")
    samples = info.optim_inputs_func(device="cpu", dtype=torch.float64)
    failures = []
    for sample in samples:
        try:
            _check(name, info, sample)
        except Exception as e:  # noqa: BLE001  (each sample's failure is reported)
            failures.append(f"{sample.desc}: {type(e).__name__}: {e}")
    assert not failures, f"{len(failures)} of {len(samples)} samples:\n" + "\n".join(failures)
