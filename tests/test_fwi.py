"""examples/fwi.py: the acoustic FWI misfit and its gradient with respect to the squared slowness of the
physical domain equal the same scheme written in PyTorch (conv2d Laplacian, the absorbing layer padded
on), chunked over space and shots, with and without checkpoint_steps; and bounded L-BFGS lowers the
model error at every iteration."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conftest import example  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
fwi = example("fwi")


def torch_misfit(sv, m, d_obs):
    """The example's scheme in PyTorch: the shots are the batch, the Laplacian a 5 x 5 conv2d, the
    layer's slowness padded round the physical ``m``."""
    m = torch.nn.functional.pad(m, (sv.nbl,) * 4, value=1.0 / fwi.BACKGROUND ** 2)
    lap = torch.from_numpy(sv.laplacian_kernel()[None])  # (1, 1, 5, 5)
    damp = torch.from_numpy(sv.damp / (2 * sv.dt))
    src = torch.from_numpy(sv.source_mask())
    obs = torch.from_numpy(d_obs)
    u_prev = torch.zeros((sv.nshots,) + sv.shape, dtype=torch.float64)
    u, total = u_prev.clone(), torch.zeros((), dtype=torch.float64)
    a = m / sv.dt ** 2
    for i in range(sv.steps):
        laplace = torch.nn.functional.conv2d(u[:, None], lap, padding=2)[:, 0]
        new = (laplace + a * (2 * u - u_prev) + damp * u_prev) / (a + damp)
        new = new + sv.dt ** 2 * float(sv.wavelet[i]) * src / m
        u_prev, u = u, new
        r = u[:, sv.rec_x, sv.rec_z[0]:sv.rec_z[1]] - obs[i]
        total = total + 0.5 * (r * r).sum()
    return total


def _small(steps=7, nshots=2):
    sv = fwi.survey(n=13, nbl=4, nshots=nshots, tn=100.0, f0=0.04, steps=steps)
    return sv, fwi.camembert(13, radius=3)


@pytest.mark.parametrize("chunk,snapshots,unroll", [(None, None, 1), (8, None, 1), (8, 3, 1), (None, 2, 3), (8, 2, 2)])
def test_fwi_misfit_and_gradient_equal_pytorch_chunked_with_and_without_checkpoints(chunk, snapshots, unroll):
    sv, vp_true = _small()
    fwd = fwi.Modelling(sv, chunk)
    d_obs = fwd.shot_records(fwd.slowness(vp_true))
    start = np.full(vp_true.shape, 2.5) + 0.1 * np.random.default_rng(0).random(vp_true.shape)

    m_t = torch.tensor(1.0 / start ** 2, requires_grad=True)
    loss_t = torch_misfit(sv, m_t, d_obs)
    loss_t.backward()

    m = fwd.slowness(start, requires_grad=True)
    loss = fwd.misfit(m, d_obs, snapshots, unroll)  # (unroll: blocks of steps, 7 steps = 2 blocks of 3 and 1)
    loss.backward()
    assert loss_t.item() > 0
    np.testing.assert_allclose(loss.item(), loss_t.item(), rtol=1e-10)
    np.testing.assert_allclose(m.grad.numpy(), m_t.grad.numpy(), rtol=1e-10,
                               atol=1e-10 * np.abs(m_t.grad.numpy()).max())
    assert m.grad.chunks == m.chunks


def test_fwi_observed_data_equal_pytorch_records():
    sv, vp_true = _small(steps=6)
    fwd = fwi.Modelling(sv, chunk=8)
    d_obs = fwd.shot_records(fwd.slowness(vp_true))
    assert d_obs.shape == (sv.steps, sv.nshots, sv.n) and np.abs(d_obs).max() > 0
    # the PyTorch misfit against zero data is half the records' squared norm
    with torch.no_grad():
        zero = torch_misfit(sv, torch.from_numpy(1.0 / vp_true ** 2), np.zeros_like(d_obs))
    np.testing.assert_allclose(0.5 * (d_obs ** 2).sum(), zero.item(), rtol=1e-10)


def test_fwi_bounded_lbfgs_lowers_model_error_every_iteration():
    sv = fwi.survey(n=9, nbl=2, nshots=2, tn=30.0, f0=0.06)  # 22 steps, a 60 Hz wavelet on a 13 x 13 grid
    vp_true = fwi.camembert(9, radius=1)
    vp_start = np.full_like(vp_true, 2.5)
    final, misfits, errors = fwi.invert(sv, vp_true, vp_start, iterations=2, snapshots=3, log=lambda *_: None,
                                        misfits=False)
    assert len(errors) == 3
    assert all(b < a for a, b in zip(errors, errors[1:])), errors
    assert final.min() >= 1.4 and final.max() <= 4.0
    np.testing.assert_allclose(np.linalg.norm((1 / final ** 2 - 1 / vp_true ** 2) * vp_true ** 2), errors[-1])


def test_fwi_inversion_submits_once_per_evaluation_and_reports_misfits_without_a_run(monkeypatch):
    import daskgrad as dg

    calls = []
    misfit = fwi.Modelling.misfit
    monkeypatch.setattr(fwi.Modelling, "misfit", lambda *a, **k: calls.append(1) or misfit(*a, **k))
    sv = fwi.survey(n=9, nbl=2, nshots=2, tn=30.0, f0=0.06)
    vp_true = fwi.camembert(9, radius=1)
    with dg.testing.submissions() as count:
        _, misfits, errors = fwi.invert(sv, vp_true, np.full_like(vp_true, 2.5), iterations=2, snapshots=3,
                                        log=lambda *_: None)
    assert len(misfits) == len(errors) == 3 and misfits[-1] < misfits[0]
    assert count["compute"] == 1 + len(calls)  # the observed data, then one per L-BFGS-B evaluation


def test_the_example_runs_from_the_command_line_with_space_chunked_and_lowers_the_model_error(tmp_path):
    """README's ``python examples/fwi.py ... --out DIR`` at a tiny size, space split in 2 x 2 chunks."""
    out = tmp_path / "fwi"
    run = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "fwi.py"), "--n", "9", "--nbl", "2",
                          "--shots", "2", "--tn", "30", "--f0", "60", "--iterations", "1", "--chunk", "7",
                          "--out", str(out)], capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")))
    assert run.returncode == 0, run.stderr
    rows = re.findall(r"^iteration (\d+)  model error (\S+)  misfit (\S+)$", run.stdout, re.M)
    assert [int(i) for i, _, _ in rows] == [0, 1], run.stdout
    errors, misfits = [float(e) for _, e, _ in rows], [float(m) for _, _, m in rows]
    assert errors[1] < errors[0] and misfits[1] < misfits[0]
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return
    for name in ("vp_true", "vp_start", "vp_final", "misfit"):
        assert (out / f"{name}.png").stat().st_size > 0


def test_the_misfit_plot_labels_whole_iterations():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = fwi.misfit_figure([29974.0, 6128.0, 2053.0])  # 3 points: matplotlib's own ticks would be 0, 0.25, ...
    try:
        ax = fig.axes[0]
        lo, hi = ax.get_xlim()
        ticks = [t for t in ax.get_xticks() if lo <= t <= hi]
        assert ticks and all(float(t).is_integer() for t in ticks), ticks
    finally:
        plt.close(fig)
