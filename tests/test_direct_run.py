"""A repeated small step on dask's local scheduler runs its template directly (``program._ran``):
no instance graph is made and taken apart again.  The numbers are the instance path's, bit for bit
(``daskgrad.testing.submissions`` watches the submissions, which makes every one an instance)."""
import numpy as np

import daskgrad as dg
from daskgrad._dask import program
from daskgrad.testing import submissions


def _train(steps=6):
    rng = np.random.default_rng(0)
    X = dg.tensor(rng.standard_normal((40, 5)), chunks=((10, 30), 5))
    y = dg.tensor(rng.standard_normal(40))
    w = dg.tensor(rng.standard_normal(5), requires_grad=True)
    losses = []
    for _ in range(steps):
        loss = ((X @ w - y) ** 2).mean() + w.abs().sum() * 0.1
        loss.backward()
        with dg.no_grad():
            w -= 0.05 * w.grad
        w.grad = None
        losses.append(loss.item())
    g, v = dg.func.grad_and_value(lambda x: (x[0] - x[1] ** 2) ** 2)(w.detach())
    return np.array(losses), w.detach().numpy(), g.numpy(), v.item()


def _instances(monkeypatch):
    made = []

    class Counted(program.Instance):
        def __init__(self, *args, **kwargs):
            made.append(1)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(program, "Instance", Counted)
    return made


def test_direct_runs_make_no_instance_and_give_the_instance_paths_numbers(monkeypatch):
    made = _instances(monkeypatch)
    direct = _train()
    assert len(made) <= 2  # (the first run of each template makes its run order through an instance)
    made.clear()
    with submissions() as subs:
        watched = _train()
    assert len(subs) > 0 and len(made) >= 6
    for a, b in zip(direct, watched):
        np.testing.assert_array_equal(a, b)


def test_a_dask_diagnostic_sees_the_tasks():
    from dask.callbacks import Callback

    started = []
    _train(3)  # (templates made)
    with Callback(start_state=lambda dsk, state: started.append(len(dsk))):
        _train(3)
    assert started  # the submissions went to dask's scheduler, which told the callback
