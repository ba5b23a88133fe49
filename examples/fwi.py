"""Acoustic full-waveform inversion of the "Camembert" model, as in Devito's dask FWI tutorial.

A 101 x 101 model at 10 m spacing (vp 2.5 km/s, a disk of radius 15 cells at 3.0 km/s in the
middle) inside a 40-cell absorbing layer (Devito's ``damp``); 5 Ricker sources (10 Hz) on the left,
101 receivers on the right, 1 s of recording.  The wave equation

    m u_tt + damp u_t = laplace(u) + q,        m = 1 / vp^2

is stepped second order in time, fourth order in space (the Laplacian is ``daskgrad.correlate``
with a 5 x 5 cross, across chunk boundaries).  The shots are a chunked axis of the wavefield, one
chunk per shot.  As in the tutorial, the unknown is the squared slowness ``m`` of the physical
101 x 101 domain (a chunked leaf, in s^2/km^2); the absorbing layer keeps the background velocity
and is not updated.  Time stepping goes through ``checkpoint_steps`` with the state
``(u_prev, u, misfit)``: the receivers are sampled each step and their misfit accumulated in the
state, since only the state leaves a checkpointed step.  The gradient of
``0.5 ||d - d_obs||^2``, relative to the observed data's ``0.5 ||d_obs||^2``, drives bounded L-BFGS
(``daskgrad.optimize.minimize``, SciPy's L-BFGS-B, ``1.4 <= vp <= 4.0`` as bounds on ``m``) from the
background (2.5 km/s); the model error is the tutorial's, ``||(m - m_true) / m_true||``.

    python examples/fwi.py                        # the tutorial's sizes (slow on a laptop)
    python examples/fwi.py --n 41 --nbl 10 --tn 400 --iterations 3 --out /tmp/fwi

writes ``vp_true.png``, ``vp_start.png``, ``vp_final.png`` and ``misfit.png`` into ``--out`` when
matplotlib is importable, and prints the misfit and the model error each iteration.
"""
from __future__ import annotations

import argparse
import math
import os
import tempfile
import time
from dataclasses import dataclass

import numpy as np

import daskgrad as dg
from daskgrad.utils.checkpoint import checkpoint_steps

# fourth-order second derivative, one axis; the Laplacian is the sum over both space axes
D2 = np.array([-1 / 12, 4 / 3, -5 / 2, 4 / 3, -1 / 12])


@dataclass
class Survey:
    """Everything but the velocity: grid, time axis, damping, sources and receivers (NumPy)."""

    n: int            # physical cells per side
    nbl: int          # absorbing-layer cells per side
    h: float          # spacing, m
    dt: float         # ms
    steps: int
    damp: np.ndarray  # (N, N), N = n + 2 nbl
    wavelet: np.ndarray  # (steps,)
    src: list         # (x, z) grid indices of each shot, on the extended grid
    rec_x: int        # the receivers' x index (one column of the extended grid)
    rec_z: tuple      # their z range (start, stop)

    @property
    def shape(self):
        return (self.n + 2 * self.nbl,) * 2

    @property
    def nshots(self):
        return len(self.src)

    def laplacian_kernel(self):
        """The 5 x 5 cross over the (x, z) axes, with a unit shot axis in front: shape (1, 5, 5)."""
        k = np.zeros((5, 5))
        k[2, :] += D2
        k[:, 2] += D2
        return (k / self.h ** 2)[None]

    def source_mask(self):
        """(nshots, N, N): 1 where each shot's source is."""
        s = np.zeros((self.nshots,) + self.shape)
        for j, (x, z) in enumerate(self.src):
            s[j, x, z] = 1.0
        return s


BACKGROUND = 2.5  # km/s: the starting model, and the absorbing layer's velocity throughout


def camembert(n=101, radius=15, vp_background=BACKGROUND, vp_circle=3.0):
    """True velocity (km/s) of the physical n x n domain: the background, and a disk in the middle."""
    x, z = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    vp = np.full((n, n), vp_background)
    vp[(x - n // 2) ** 2 + (z - n // 2) ** 2 <= radius ** 2] = vp_circle
    return vp


def damp_profile(n, nbl, h):
    """Devito's ``initialize_damp``: 0 inside, rising through the layer (1/ms per m of spacing)."""
    size = n + 2 * nbl
    one = np.zeros(size)
    if nbl:
        coeff = 1.5 * math.log(1.0 / 0.001) / nbl
        pos = np.abs((nbl - np.arange(nbl) + 1) / nbl)
        val = coeff * (pos - np.sin(2 * np.pi * pos) / (2 * np.pi)) / h
        one[:nbl] = val
        one[size - nbl:] = val[::-1]
    return one[:, None] + one[None, :]


def ricker(f0, t):
    """Devito's Ricker wavelet (f0 in kHz, t in ms), centred at 1 / f0."""
    r = (np.pi * f0 * (t - 1.0 / f0)) ** 2
    return (1 - 2 * r) * np.exp(-r)


def survey(n=101, nbl=40, h=10.0, nshots=5, tn=1000.0, f0=0.010, vmax=3.0, steps=None):
    """The tutorial's acquisition: sources at x = 20 m, receivers at x = (n - 3) h, all depths."""
    dt = float(f"{0.42 * h / vmax:.3e}")  # Devito's critical_dt for 2-D, space order 4
    if steps is None:
        steps = int(math.ceil((tn + dt) / dt)) - 1
    t = np.arange(steps) * dt
    src_z = np.linspace(0, n - 1, nshots).round().astype(int)
    return Survey(n=n, nbl=nbl, h=h, dt=dt, steps=steps, damp=damp_profile(n, nbl, h), wavelet=ricker(f0, t),
                  src=[(nbl + 2, nbl + int(z)) for z in src_z], rec_x=nbl + n - 3, rec_z=(nbl, nbl + n))


# --------------------------------------------------------------------------- modelling
class Modelling:
    """The time stepping for one survey, with the wavefield chunked ``(1, chunk, chunk)``; ``device="cuda"``
    puts every chunk on the GPU (cupy)."""

    def __init__(self, sv, chunk=None, device="cpu"):
        self.sv, self.device = sv, device
        size = sv.shape[0]
        self.chunks = (1, chunk or size, chunk or size)
        self.model_chunks = (chunk or sv.n,) * 2
        self.lap = sv.laplacian_kernel()
        self.damp = self.tensor(sv.damp / (2 * sv.dt), self.chunks[1:])
        mask = sv.source_mask()
        self.src = self.tensor(mask, self.chunks)
        self.at_src = self.tensor(mask > 0, self.chunks)

    def tensor(self, values, chunks, requires_grad=False):
        """A NumPy array as a Tensor on this modelling's device."""
        t = dg.from_array(values, chunks=chunks).to(self.device)
        return t.requires_grad_() if requires_grad else t

    def slowness(self, vp, requires_grad=False):
        """The squared slowness ``1 / vp^2`` of the physical domain (vp a NumPy array, km/s) as a leaf."""
        m = 1.0 / np.asarray(vp, dtype=np.float64) ** 2
        return self.tensor(m, self.model_chunks, requires_grad)

    def extended(self, m):
        """``m`` inside the absorbing layer, which keeps the background's slowness (not updated, as
        the tutorial's), chunked like the wavefield's space axes."""
        nbl = self.sv.nbl
        return dg.rechunk(dg.pad(m, nbl, constant_values=1.0 / BACKGROUND ** 2), self.chunks[1:])

    def update(self, m, u_prev, u, amplitude):
        """u at the next step from the last two (``m`` the extended squared slowness, ``amplitude`` the
        source wavelet's value at this step, a number or a 0-d tensor):
        (m/dt^2 + damp/2dt) u+ = lap u + m/dt^2 (2u - u-) + damp/2dt u-, then the source injected
        as Devito's, ``dt^2 / m`` times the wavelet.

        The injection adds to ``new`` at the source points only (``where``), not a dense field
        ``wavelet[i] * src / m``: such a field depends on no state, so dask would compute every
        step's at once, early, and hold them until their step runs -- a whole wavefield per step,
        which no checkpointing removes.  The per-step amplitudes here are one number per shot."""
        sv = self.sv
        a = m / sv.dt ** 2
        lap = dg.correlate(u, self.lap, mode="constant")
        new = (lap + a * (2 * u - u_prev) + self.damp * u_prev) / (a + self.damp)
        v2_at_src = dg.sum(self.src / m, axis=(1, 2), keepdims=True)  # the same for every step: computed once
        return dg.where(self.at_src, new + (sv.dt ** 2 * amplitude) * v2_at_src, new)

    def receivers(self, u):
        sv = self.sv
        return u[:, sv.rec_x, sv.rec_z[0]:sv.rec_z[1]]

    def zeros(self):
        return dg.zeros((self.sv.nshots,) + self.sv.shape, dtype="float64", chunks=self.chunks, device=self.device)

    def shot_records(self, m):
        """The receivers' data, (steps, nshots, nrec), without gradient (the observed data); ``m`` the
        physical domain's squared slowness."""
        with dg.no_grad():
            m = self.extended(m)
            u_prev, u, traces = self.zeros(), self.zeros(), []
            for i in range(self.sv.steps):
                u_prev, u = u, self.update(m, u_prev, u, float(self.sv.wavelet[i]))
                traces.append(self.receivers(u))
            return dg.stack(traces).cpu().numpy()

    def misfit(self, m, d_obs, snapshots=None, unroll=1):
        """0.5 ||d - d_obs||^2 summed over shots, steps and receivers; ``snapshots=None``: no checkpoints;
        ``unroll``: steps a body of ``checkpoint_steps`` (each chunk a shot: ``unroll`` steps a task).

        The layer is put round ``m`` inside ``step`` (a checkpointed step reads leaves, not values made
        outside it; recorded once, it is computed once for all steps).  Each step's own data, the
        wavelet's value and the observed traces, enter as rows of ``xs``, so ``step`` is recorded once
        for every step."""
        sv = self.sv
        obs = self.tensor(d_obs, (sv.steps, 1, d_obs.shape[2]))
        wavelet = self.tensor(sv.wavelet, sv.steps)

        def step(state, x):
            u_prev, u, acc = state
            amplitude, observed = x
            new = self.update(self.extended(m), u_prev, u, amplitude)
            r = self.receivers(new) - observed
            return u, new, acc + 0.5 * dg.sum(r * r, axis=1)

        state = (self.zeros(), self.zeros(), self.tensor(np.zeros(sv.nshots), 1))
        if snapshots is None:
            for i in range(sv.steps):
                state = step(state, (wavelet[i], obs[i]))
        else:
            state = checkpoint_steps(step, state, sv.steps, snapshots=snapshots, xs=(wavelet, obs), unroll=unroll)
        return dg.sum(state[2])


def default_snapshots(steps):
    """About sqrt(steps) snapshots: each step runs about twice forward."""
    return max(2, int(math.isqrt(max(steps, 1))))


# --------------------------------------------------------------------------- inversion
def invert(sv, vp_true, vp_start, iterations=5, chunk=None, snapshots=None, bounds=(1.4, 4.0), log=print,
           misfits=True, device="cpu", unroll=1):
    """Bounded L-BFGS on the squared slowness from ``vp_start`` (physical domain, km/s), minimising the
    misfit relative to the observed data's energy; returns (final vp, misfit per iteration, model error per
    iteration), both lists starting with the starting model's (the misfit unscaled).  The model
    error is the tutorial's, ``||(m - m_true) / m_true||``.  ``bounds``: on the velocity, km/s (on
    ``m``: ``1 / vmax^2 .. 1 / vmin^2``).  ``snapshots=0``: no checkpoints; ``misfits=False``: the
    misfit is not reported (the list is empty).  The misfit reported at an iteration is the one
    L-BFGS-B's evaluation at that model computed: no forward run is added.  ``device="cuda"``: the
    wavefields and the model as cupy chunks; ``unroll``: checkpoint_steps' steps a body."""
    import scipy.optimize as so

    from daskgrad import optimize

    fwd = Modelling(sv, chunk, device)
    d_obs = fwd.shot_records(fwd.slowness(vp_true))
    m_true = 1.0 / vp_true ** 2
    snapshots = default_snapshots(sv.steps) if snapshots is None else snapshots or None
    track, misfits, errors = misfits, [], []
    evaluated = {}  # model bytes -> the misfit tensor L-BFGS-B's evaluation there computed (and keeps)

    # L-BFGS-B's first step is the projected gradient at unit length, so its size is in the misfit's
    # units: on the raw misfit it sent the model to the bounds and the model error rose at iteration 1
    # (as in Devito's tutorial run as written: 11.77 -> 12.24).  The relative misfit, over the observed
    # data's own 0.5 ||d_obs||^2, has no units and the same minimiser.
    scale = 0.5 * float(np.sum(d_obs ** 2)) or 1.0

    def fun(m):
        loss = fwd.misfit(m, d_obs, snapshots, unroll) / scale
        if track:
            evaluated[m.detach().cpu().numpy().tobytes()] = loss
        return loss

    def report(m):
        errors.append(float(np.linalg.norm((m - m_true) / m_true)))
        if track:  # SciPy calls back at a model it evaluated: its misfit is known, nothing runs again
            loss = evaluated.get(m.tobytes())
            if loss is None:
                with dg.no_grad():
                    loss = fwd.misfit(fwd.tensor(m, fwd.model_chunks), d_obs, snapshots, unroll) / scale
            misfits.append(float(loss.item()) * scale)
        tail = f"  misfit {misfits[-1]:.6g}" if track else ""
        log(f"iteration {len(errors) - 1}  model error {errors[-1]:.6g}{tail}")

    m_start = fwd.slowness(vp_start)

    def callback(m):
        if not errors:  # the starting model's line, once its evaluation (SciPy's first) has run
            report(m_start.cpu().numpy())
        report(m.detach().cpu().numpy())
        evaluated.clear()

    vmin, vmax = bounds
    res = optimize.minimize(fun, m_start, method="L-BFGS-B", bounds=so.Bounds(1.0 / vmax ** 2, 1.0 / vmin ** 2),
                            callback=callback, options={"maxiter": iterations})
    if not errors:  # no iteration completed
        report(m_start.cpu().numpy())
    return 1.0 / np.sqrt(res.x.detach().cpu().numpy()), misfits, errors


def save_figures(out, sv, vp_true, vp_start, vp_final, misfits):
    """PNG images of the models (physical domain) and the misfit curve, if matplotlib is importable."""
    try:
        import matplotlib
    except ImportError:
        return []
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out, exist_ok=True)
    paths = []
    for name, vp in (("vp_true", vp_true), ("vp_start", vp_start), ("vp_final", vp_final)):
        fig, ax = plt.subplots(figsize=(4, 3.4))
        im = ax.imshow(vp.T, vmin=2.4, vmax=3.1, cmap="jet", extent=(0, sv.n * sv.h, sv.n * sv.h, 0))
        fig.colorbar(im, ax=ax, label="vp (km/s)")
        ax.set_xlabel("x (m)")
        ax.set_ylabel("depth (m)")
        ax.set_title(name)
        fig.tight_layout()
        paths.append(os.path.join(out, f"{name}.png"))
        fig.savefig(paths[-1], dpi=90)
        plt.close(fig)
    fig = misfit_figure(misfits)
    paths.append(os.path.join(out, "misfit.png"))
    fig.savefig(paths[-1], dpi=90)
    plt.close(fig)
    return paths


def misfit_figure(misfits):
    """The misfit at each iteration (0: the starting model), on whole-iteration ticks."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(4, 3))
    ax.semilogy(range(len(misfits)), misfits, marker="o")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # iterations are whole: no 0.5, 1.5, ...
    ax.set_xlabel("iteration")
    ax.set_ylabel("misfit")
    fig.tight_layout()
    return fig


def _unroll(text):
    """``--unroll``'s value: a number of steps, or ``"auto"``."""
    return text if text == "auto" else int(text)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=101, help="physical cells per side")
    p.add_argument("--nbl", type=int, default=40, help="absorbing-layer cells")
    p.add_argument("--radius", type=int, default=None, help="disk radius in cells (default 15 n / 101)")
    p.add_argument("--shots", type=int, default=5)
    p.add_argument("--tn", type=float, default=1000.0, help="recording time, ms")
    p.add_argument("--f0", type=float, default=10.0, help="the Ricker wavelet's peak frequency, Hz")
    p.add_argument("--chunk", type=int, default=None, help="space chunk side (default: one chunk per shot)")
    p.add_argument("--snapshots", type=int, default=None,
                   help="checkpoint_steps snapshots (default ~sqrt(steps); 0: no checkpoints)")
    p.add_argument("--unroll", type=_unroll, default=1,
                   help="steps a checkpoint_steps body (one task a shot runs them; snapshots then count blocks); "
                        "'auto': chosen from the state's chunks")
    p.add_argument("--iterations", type=int, default=5)
    p.add_argument("--device", default="cpu", help='"cuda": the wavefields and the model on the GPU (cupy chunks)')
    p.add_argument("--out", default=None, help="folder for the PNGs (default: a new temporary folder)")
    args = p.parse_args(argv)

    radius = args.radius if args.radius is not None else max(1, round(15 * args.n / 101))
    sv = survey(n=args.n, nbl=args.nbl, nshots=args.shots, tn=args.tn, f0=args.f0 / 1000)
    vp_true = camembert(args.n, radius)
    vp_start = np.full_like(vp_true, BACKGROUND)
    print(f"grid {sv.shape[0]}x{sv.shape[1]} ({args.n} + 2 x {args.nbl}), {sv.nshots} shots, {sv.steps} steps "
          f"of {sv.dt} ms")
    t0 = time.perf_counter()
    vp_final, misfits, errors = invert(sv, vp_true, vp_start, args.iterations, args.chunk, args.snapshots,
                                       device=args.device, unroll=args.unroll)
    print(f"{time.perf_counter() - t0:.1f} s")
    out = args.out or tempfile.mkdtemp(prefix="fwi-")
    for path in save_figures(out, sv, vp_true, vp_start, vp_final, misfits):
        print("wrote", path)
    return misfits, errors


if __name__ == "__main__":
    main()
