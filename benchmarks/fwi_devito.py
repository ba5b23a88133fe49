"""Devito's own dask FWI tutorial (devito ``examples/seismic/tutorials/04_dask.ipynb``), run serially
as written, as the reference for examples/fwi.py: the model error ``||(m - m_true) / m_true||`` at
the starting model and after each of 5 L-BFGS-B iterations, for the tutorial's objective and for
the same objective relative to the observed data's ``0.5 ||d_obs||^2`` (what examples/fwi.py minimises).

    pip install devito pytest matplotlib scipy    (a separate environment: Devito compiles C with gcc)
    python benchmarks/fwi_devito.py               -> benchmarks/results/fwi_devito.json

Devito is not a dependency of daskgrad: this is an oracle written by others, not a test.  The
tutorial's scheme differs from the example's in small ways (off-grid sources and receivers,
its own CFL time step, records resampled to 4 ms and back, the adjoint-state gradient without the
source term's derivative), so the two give close, not equal, numbers.
"""
from __future__ import annotations

import json
import os
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def tutorial(relative, iterations=5):
    from devito import Function, configuration
    from examples.seismic import AcquisitionGeometry, Receiver, demo_model
    from examples.seismic.acoustic import AcousticWaveSolver
    from scipy import optimize

    configuration["log-level"] = "ERROR"
    shape, spacing, origin, nbl = (101, 101), (10.0, 10.0), (0.0, 0.0), 40
    model1 = demo_model("circle-isotropic", vp_circle=3.0, vp_background=2.5, origin=origin, shape=shape,
                        spacing=spacing, nbl=nbl)
    model0 = demo_model("circle-isotropic", vp_circle=2.5, vp_background=2.5, origin=origin, shape=shape,
                        spacing=spacing, nbl=nbl, grid=model1.grid)
    src = np.empty((5, 2))
    src[:, 1] = np.linspace(spacing[0], model1.domain_size[0] - spacing[0], num=5)
    src[:, 0] = 20.0
    rec = np.empty((101, 2))
    rec[:, 1] = np.linspace(spacing[1], model1.domain_size[0] - spacing[1], num=101)
    rec[:, 0] = 980.0
    geometry1 = AcquisitionGeometry(model1, rec, src, 0.0, 1000.0, f0=0.010, src_type="Ricker")
    geometry0 = AcquisitionGeometry(model0, rec, src, 0.0, 1000.0, f0=0.010, src_type="Ricker")

    def one_shot(geometry, i):
        return AcquisitionGeometry(geometry.model, geometry.rec_positions, geometry.src_positions[i, :],
                                   geometry.t0, geometry.tn, f0=geometry.f0, src_type=geometry.src_type)

    def observed(i):
        g = one_shot(geometry1, i)
        return AcousticWaveSolver(g.model, g, space_order=4).forward(vp=g.model.vp)[0].resample(4.0)

    d_obs = [observed(i) for i in range(5)]

    def objective(i):
        g = one_shot(geometry0, i)
        grad = Function(name="grad", grid=g.model.grid)
        residual = Receiver(name="rec", grid=g.model.grid, time_range=g.time_axis, coordinates=g.rec_positions)
        solver = AcousticWaveSolver(g.model, g, space_order=4)
        d_pred, u0 = solver.forward(vp=g.model.vp, save=True)[0:2]
        residual.data[:] = d_pred.data[:] - d_obs[i].resample(g.dt).data[:][0:d_pred.data.shape[0], :]
        solver.gradient(rec=residual, u=u0, vp=g.model.vp, grad=grad)
        return .5 * np.linalg.norm(residual.data.flatten()) ** 2, np.array(grad.data[:])[nbl:-nbl, nbl:-nbl]

    # the data at the predicted records' sampling, where the misfit sums them
    scale = 1.0 / (0.5 * sum(float(np.sum(d.resample(geometry0.dt).data[:] ** 2)) for d in d_obs)) if relative else 1.0

    def loss(x):
        geometry0.model.vp.data[nbl:-nbl, nbl:-nbl] = 1.0 / np.sqrt(x.reshape(shape))
        f, g = 0.0, np.zeros(shape)
        for i in range(5):
            fi, gi = objective(i)
            f, g = f + fi, g + gi
        return f * scale, (g * scale).flatten().astype(np.float64)

    vp = model1.vp.data[nbl:-nbl, nbl:-nbl]
    m = 1.0 / vp.reshape(-1).astype(np.float64) ** 2
    m0 = 1.0 / model0.vp.data[nbl:-nbl, nbl:-nbl].reshape(-1).astype(np.float64) ** 2
    errors = [float(np.linalg.norm((m0 - m) / m))]
    bounds = [(1.0 / 4.0 ** 2, 1.0 / 1.4 ** 2)] * m0.size
    # the tutorial's ftol=0.1 is relative to max(|f|, 1): on a relative misfit it would stop at once
    options = {"maxiter": iterations} | ({} if relative else {"ftol": 0.1})
    t0 = time.perf_counter()
    res = optimize.minimize(loss, m0, method="L-BFGS-B", jac=True, bounds=bounds, options=options,
                            callback=lambda xk: errors.append(float(np.linalg.norm((xk - m) / m))))
    return {"model_error": errors, "evaluations": int(res.nfev), "seconds": time.perf_counter() - t0,
            "dt_ms": float(geometry0.dt), "steps": int(geometry0.nt)}


def main():
    import devito

    report = {"devito": devito.__version__, "as_written": tutorial(False), "relative_misfit": tutorial(True)}
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "fwi_devito.json"), "w") as f:
        json.dump(report, f, indent=2)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
