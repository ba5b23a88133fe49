"""Every lr scheduler gives torch's learning rates (and OneCycleLR torch's momenta) step for step over 30+
steps, for several parameterizations, on two param groups; state_dict resumes mid-schedule; bad arguments
raise torch's error types and texts (checked against the installed torch)."""
import math
import warnings

import numpy as np
import pytest

import daskgrad as dg
from daskgrad import optim

torch = pytest.importorskip("torch")

STEPS = 35


class Halving:
    """A callable object: LambdaLR saves its ``__dict__`` in state_dict (a plain function is not saved)."""

    def __init__(self, every):
        self.every = every

    def __call__(self, epoch):
        return 0.5 ** (epoch // self.every)


class _Decay:
    """A scale function that is an object (its attributes go into CyclicLR's state_dict, as torch's)."""

    def __init__(self):
        self.rate = 0.95

    def __call__(self, x):
        return self.rate ** x


_decay = _Decay()


def _swa(m):
    """SWALR lives in ``swa_utils``, beside ``lr_scheduler``: the one of the same library as ``m``."""
    return torch.optim.swa_utils if m is torch.optim.lr_scheduler else optim.swa_utils


# name -> make(lib, optimizer); lib is torch.optim.lr_scheduler or daskgrad.optim.lr_scheduler.  Inputs follow
# torch's documented examples and the cases of its test/optim/test_lrscheduler.py (warm-up + cosine, ...)
CASES = {
    "LambdaLR": lambda m, o: m.LambdaLR(o, lr_lambda=lambda e: 0.95 ** e),
    "LambdaLR-per-group": lambda m, o: m.LambdaLR(o, lr_lambda=[lambda e: e // 3 + 1, lambda e: 0.9 ** e]),
    "LambdaLR-callable-object": lambda m, o: m.LambdaLR(o, lr_lambda=Halving(4)),
    "MultiplicativeLR": lambda m, o: m.MultiplicativeLR(o, lr_lambda=lambda e: 0.95),
    "MultiplicativeLR-per-group": lambda m, o: m.MultiplicativeLR(o, [lambda e: 0.9, lambda e: 1.0 + 0.01 * e]),
    "StepLR": lambda m, o: m.StepLR(o, step_size=7, gamma=0.5),
    "MultiStepLR": lambda m, o: m.MultiStepLR(o, milestones=[5, 12, 20], gamma=0.3),
    "MultiStepLR-repeated-milestone": lambda m, o: m.MultiStepLR(o, milestones=[4, 10, 10], gamma=0.5),
    "ExponentialLR": lambda m, o: m.ExponentialLR(o, gamma=0.9),
    "LinearLR": lambda m, o: m.LinearLR(o),
    "LinearLR-warmup": lambda m, o: m.LinearLR(o, start_factor=0.05, total_iters=20),
    "LinearLR-decay": lambda m, o: m.LinearLR(o, start_factor=1.0, end_factor=0.1, total_iters=25),
    "ConstantLR": lambda m, o: m.ConstantLR(o),
    "ConstantLR-factor": lambda m, o: m.ConstantLR(o, factor=0.5, total_iters=12),
    "PolynomialLR": lambda m, o: m.PolynomialLR(o, total_iters=20, power=0.9),
    "CosineAnnealingLR": lambda m, o: m.CosineAnnealingLR(o, T_max=10, eta_min=0.001),
    "CosineAnnealingLR-long": lambda m, o: m.CosineAnnealingLR(o, T_max=40),
    "SequentialLR-warmup-cosine": lambda m, o: m.SequentialLR(
        o, [m.LinearLR(o, start_factor=0.1, total_iters=5), m.CosineAnnealingLR(o, T_max=25, eta_min=1e-4)],
        milestones=[5]),
    "SequentialLR-constant-exponential": lambda m, o: m.SequentialLR(
        o, [m.ConstantLR(o, factor=0.1, total_iters=8), m.ExponentialLR(o, gamma=0.9)], milestones=[8]),
    "SequentialLR-three": lambda m, o: m.SequentialLR(
        o, [m.ConstantLR(o, factor=0.5, total_iters=3), m.StepLR(o, 4, 0.5), m.ExponentialLR(o, 0.95)],
        milestones=[6, 18]),
    "ChainedScheduler": lambda m, o: m.ChainedScheduler(
        [m.ConstantLR(o, factor=0.1, total_iters=4), m.ExponentialLR(o, gamma=0.9)]),
    "CosineAnnealingWarmRestarts": lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=10),
    "CosineAnnealingWarmRestarts-mult": lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2,
                                                                                   eta_min=0.001),
    "OneCycleLR": lambda m, o: m.OneCycleLR(o, max_lr=1.0, total_steps=STEPS + 1),
    "OneCycleLR-linear-three-phase": lambda m, o: m.OneCycleLR(
        o, max_lr=[0.5, 0.2], epochs=6, steps_per_epoch=6, anneal_strategy="linear", three_phase=True,
        pct_start=0.25, div_factor=10.0, final_div_factor=100.0),
    "OneCycleLR-no-momentum": lambda m, o: m.OneCycleLR(o, max_lr=0.3, total_steps=40, cycle_momentum=False),
    "CyclicLR": lambda m, o: m.CyclicLR(o, 0.01, 0.1, step_size_up=4),
    "CyclicLR-triangular2": lambda m, o: m.CyclicLR(o, [0.01, 0.02], 0.2, step_size_up=3, step_size_down=5,
                                                    mode="triangular2"),
    "CyclicLR-exp_range": lambda m, o: m.CyclicLR(o, 0.01, 0.1, step_size_up=5, mode="exp_range", gamma=0.9,
                                                  base_momentum=0.7, max_momentum=0.95),
    "CyclicLR-scale_fn": lambda m, o: m.CyclicLR(o, 0.01, 0.1, step_size_up=2, scale_fn=_decay, scale_mode="iterations",
                                                 cycle_momentum=False),
    "SWALR": lambda m, o: _swa(m).SWALR(o, swa_lr=0.01),
    "SWALR-linear-per-group": lambda m, o: _swa(m).SWALR(o, swa_lr=[0.2, 0.001], anneal_epochs=7,
                                                         anneal_strategy="linear"),
    "SWALR-no-annealing": lambda m, o: _swa(m).SWALR(o, swa_lr=0.03, anneal_epochs=0),
    "SWALR-after-cosine": lambda m, o: m.SequentialLR(
        o, [m.CosineAnnealingLR(o, T_max=10), _swa(m).SWALR(o, swa_lr=0.02, anneal_epochs=4)], milestones=[10]),
}


def _optimizers(adam=False):
    """The same two param groups (lr 0.1 and 0.05) in daskgrad and torch."""
    kind = "Adam" if adam else "SGD"
    extra = {} if adam else {"momentum": 0.9}
    ours = getattr(optim, kind)([{"params": [dg.zeros(2, dtype="float64", requires_grad=True)]},
                                 {"params": [dg.zeros(3, dtype="float64", requires_grad=True)], "lr": 0.05}],
                                lr=0.1, **extra)
    theirs = getattr(torch.optim, kind)([{"params": [torch.zeros(2, requires_grad=True)]},
                                         {"params": [torch.zeros(3, requires_grad=True)], "lr": 0.05}],
                                        lr=0.1, **extra)
    return ours, theirs


def _momenta(opt):
    return [g["betas"][0] if "betas" in g else g.get("momentum") for g in opt.param_groups]


def _run(sched, opt, n):
    """lrs (and momenta) after construction and after each of ``n`` steps."""
    out = [(list(sched.get_last_lr()), _momenta(opt))]
    for _ in range(n):
        opt.step()
        sched.step()
        out.append((list(sched.get_last_lr()), _momenta(opt)))
    return out


def _assert_same(ours, theirs):
    assert len(ours) == len(theirs)
    for i, ((lr, m), (tlr, tm)) in enumerate(zip(ours, theirs)):
        np.testing.assert_allclose(lr, tlr, rtol=1e-9, atol=0, err_msg=f"lr at step {i}")
        assert m == pytest.approx(tm, rel=1e-9), f"momentum at step {i}"


RUNS = [(name, False) for name in CASES] + [(name, True) for name in CASES if name.startswith(("OneCycle", "Cyclic"))]


@pytest.mark.parametrize("name,adam", RUNS, ids=[n + ("-Adam-betas" if a else "") for n, a in RUNS])
def test_lr_sequence_equals_torch_over_35_steps(name, adam):
    """OneCycleLR also cycles momentum (SGD) or beta1 (Adam): those equal torch's too."""
    opt, topt = _optimizers(adam)
    expected = _run(CASES[name](torch.optim.lr_scheduler, topt), topt, STEPS)
    _assert_same(_run(CASES[name](optim.lr_scheduler, opt), opt, STEPS), expected)
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([g["lr"] for g in topt.param_groups], rel=1e-9)


@pytest.mark.parametrize("name", list(CASES))
def test_state_dict_resumes_mid_schedule_like_torch(name):
    """Save after 13 steps; a new optimizer and scheduler loading both go on as the uninterrupted one."""
    opt, topt = _optimizers()
    sched, tsched = CASES[name](optim.lr_scheduler, opt), CASES[name](torch.optim.lr_scheduler, topt)
    _run(sched, opt, 13)
    _run(tsched, topt, 13)
    saved, saved_opt = sched.state_dict(), opt.state_dict()
    assert set(saved) == set(tsched.state_dict())
    opt2, _ = _optimizers()
    sched2 = CASES[name](optim.lr_scheduler, opt2)
    opt2.load_state_dict(saved_opt)
    sched2.load_state_dict(saved)
    assert sched2.get_last_lr() == sched.get_last_lr()
    _assert_same(_run(sched2, opt2, 20)[1:], _run(tsched, topt, 20)[1:])


def test_lambda_state_dict_saves_callable_objects_not_functions():
    opt, topt = _optimizers()
    sd = optim.lr_scheduler.LambdaLR(opt, [Halving(3), lambda e: 1.0]).state_dict()
    tsd = torch.optim.lr_scheduler.LambdaLR(topt, [Halving(3), lambda e: 1.0]).state_dict()
    assert sd["lr_lambdas"] == tsd["lr_lambdas"] == [{"every": 3}, None]
    fresh = Halving(99)
    optim.lr_scheduler.LambdaLR(opt, [fresh, lambda e: 1.0]).load_state_dict(sd)
    assert fresh.every == 3


@pytest.mark.parametrize("mode,threshold_mode,kwargs", [
    ("min", "rel", {}),
    ("min", "abs", dict(patience=2, factor=0.5, threshold=0.05)),
    ("max", "rel", dict(patience=1, cooldown=2, factor=0.3, min_lr=0.004)),
    ("max", "abs", dict(patience=0, min_lr=[0.02, 0.001], eps=1e-3)),
], ids=["min-rel-defaults", "min-abs", "max-rel-cooldown", "max-abs-min_lrs"])
def test_reduce_lr_on_plateau_equals_torch(mode, threshold_mode, kwargs):
    rng = np.random.default_rng(0)
    metrics = np.concatenate([np.linspace(1, 0.5, 8), 0.5 + 0.02 * rng.standard_normal(40)])
    metrics = -metrics if mode == "max" else metrics
    opt, topt = _optimizers()
    sched = optim.lr_scheduler.ReduceLROnPlateau(opt, mode=mode, threshold_mode=threshold_mode, **kwargs)
    tsched = torch.optim.lr_scheduler.ReduceLROnPlateau(topt, mode=mode, threshold_mode=threshold_mode, **kwargs)
    for i, v in enumerate(metrics):
        sched.step(dg.tensor(v) if i % 2 else float(v))  # a 1-element tensor is a metric, as in torch
        tsched.step(float(v))
        assert sched.get_last_lr() == pytest.approx(tsched.get_last_lr(), rel=1e-12), i
        if i == 20:
            resumed = optim.lr_scheduler.ReduceLROnPlateau(opt, mode="min")
            resumed.load_state_dict(sched.state_dict())
            assert resumed._is_better(0.0, 1.0) == sched._is_better(0.0, 1.0)
            assert set(sched.state_dict()) == set(tsched.state_dict())
    assert sched.num_bad_epochs == tsched.num_bad_epochs and sched.best == tsched.best


@pytest.mark.parametrize("name", ["StepLR", "MultiStepLR", "ExponentialLR", "LinearLR-warmup", "ConstantLR-factor",
                                  "PolynomialLR", "CosineAnnealingLR", "CosineAnnealingWarmRestarts-mult"])
def test_deprecated_step_epoch_uses_torchs_closed_form_and_warns(name):
    """``step(epoch)``: torch's closed forms and its deprecation warning (CosineAnnealingWarmRestarts takes
    fractional epochs by design and does not warn, as in torch)."""
    opt, topt = _optimizers()
    sched, tsched = CASES[name](optim.lr_scheduler, opt), CASES[name](torch.optim.lr_scheduler, topt)
    opt.step()
    topt.step()
    for epoch in [3, 1, 17, 9, 30, 2, 4.5]:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            sched.step(epoch)
        deprecated = [w for w in seen if "The epoch parameter in `scheduler.step()`" in str(w.message)]
        assert len(deprecated) == (0 if name.startswith("CosineAnnealingWarm") else 1) and len(seen) == len(deprecated)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tsched.step(epoch)
        assert sched.get_last_lr() == pytest.approx(tsched.get_last_lr(), rel=1e-12)


def test_warnings_as_torch():
    opt, _ = _optimizers()
    sched = optim.lr_scheduler.StepLR(opt, 3)
    with pytest.warns(UserWarning, match="Detected call of `lr_scheduler.step\\(\\)` before `optimizer.step\\(\\)`"):
        sched.step()
    with pytest.warns(UserWarning, match="please use `get_last_lr\\(\\)`"):
        sched.get_lr()
    opt, _ = _optimizers()
    sched = optim.lr_scheduler.ExponentialLR(opt, 0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opt.step()
        sched.step()


def _steps(sched, n):
    for _ in range(n):
        sched.step()


BAD = {
    "not-an-optimizer": lambda m, o: m.StepLR(object(), 3),
    "lambda-count": lambda m, o: m.LambdaLR(o, [lambda e: 1.0]),
    "multiplicative-not-callable": lambda m, o: m.MultiplicativeLR(o, 0.9),
    "constant-factor": lambda m, o: m.ConstantLR(o, factor=1.5),
    "linear-start": lambda m, o: m.LinearLR(o, start_factor=0),
    "linear-end": lambda m, o: m.LinearLR(o, end_factor=2.0),
    "resume-without-initial_lr": lambda m, o: m.StepLR(o, 3, last_epoch=4),
    "sequential-empty": lambda m, o: m.SequentialLR(o, [], []),
    "sequential-milestones": lambda m, o: m.SequentialLR(o, [m.StepLR(o, 3), m.StepLR(o, 2)], [2, 5]),
    "sequential-plateau": lambda m, o: m.SequentialLR(o, [m.StepLR(o, 3), m.ReduceLROnPlateau(o)], [2]),
    "chained-empty": lambda m, o: m.ChainedScheduler([]),
    "plateau-factor": lambda m, o: m.ReduceLROnPlateau(o, factor=1.0),
    "plateau-mode": lambda m, o: m.ReduceLROnPlateau(o, mode="up"),
    "plateau-threshold-mode": lambda m, o: m.ReduceLROnPlateau(o, threshold_mode="pct"),
    "plateau-min_lrs": lambda m, o: m.ReduceLROnPlateau(o, min_lr=[0.1]),
    "warm-restarts-T_0": lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=0),
    "warm-restarts-T_mult": lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=2, T_mult=1.5),
    "warm-restarts-eta_min": lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=2, eta_min="0"),
    "warm-restarts-negative-epoch": lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=2).step(-1),
    "onecycle-no-length": lambda m, o: m.OneCycleLR(o, max_lr=0.1),
    "onecycle-total_steps": lambda m, o: m.OneCycleLR(o, max_lr=0.1, total_steps=0),
    "onecycle-epochs": lambda m, o: m.OneCycleLR(o, max_lr=0.1, epochs=0, steps_per_epoch=3),
    "onecycle-pct_start": lambda m, o: m.OneCycleLR(o, max_lr=0.1, total_steps=5, pct_start=1),
    "onecycle-anneal": lambda m, o: m.OneCycleLR(o, max_lr=0.1, total_steps=5, anneal_strategy="exp"),
    "onecycle-max_lr-count": lambda m, o: m.OneCycleLR(o, max_lr=[0.1], total_steps=5),
    "onecycle-past-the-end": lambda m, o: _steps(m.OneCycleLR(o, max_lr=0.1, total_steps=2), 3),
    "cyclic-mode": lambda m, o: m.CyclicLR(o, 0.01, 0.1, mode="square"),
    "cyclic-max_lr-count": lambda m, o: m.CyclicLR(o, 0.01, [0.1, 0.2, 0.3]),
    "swalr-swa_lr-count": lambda m, o: _swa(m).SWALR(o, swa_lr=[0.1]),
    "swalr-strategy": lambda m, o: _swa(m).SWALR(o, swa_lr=0.1, anneal_strategy="exp"),
    "swalr-negative-epochs": lambda m, o: _swa(m).SWALR(o, swa_lr=0.1, anneal_epochs=-1),
    "swalr-float-epochs": lambda m, o: _swa(m).SWALR(o, swa_lr=0.1, anneal_epochs=2.0),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_arguments_raise_torchs_error(name):
    opt, topt = _optimizers()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(Exception) as texpected:
            BAD[name](torch.optim.lr_scheduler, topt)
        with pytest.raises(Exception) as got:
            BAD[name](optim.lr_scheduler, opt)
    assert type(got.value) is type(texpected.value)
    assert str(got.value) == str(texpected.value)


def test_onecycle_needs_momentum_or_betas():
    opt = optim.SGD([dg.zeros(2, requires_grad=True)], lr=0.1)
    opt.defaults = {k: v for k, v in opt.defaults.items() if k != "momentum"}
    with pytest.raises(ValueError, match="optimizer must support momentum or beta1 with `cycle_momentum`"):
        optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=10)
    assert math.isclose(optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=10, cycle_momentum=False)
                        .get_last_lr()[0], 0.1 / 25)
