"""Real GPU tests: run only where cupy can allocate on a device (importing cupy is not enough)."""
import contextlib

import dask
import numpy as np
import pytest

import daskgrad as dg

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")
try:
    cupy.zeros(1)
except Exception as exc:  # no device, no driver
    pytest.skip(f"cupy cannot allocate on a GPU here: {exc}", allow_module_level=True)

from conftest import example  # noqa: E402
from op_specs import SPECS, spec_id  # noqa: E402


def to_gpu(t):
    return dg.Tensor(t.array.to_backend("cupy"), requires_grad=t.requires_grad)


@pytest.mark.parametrize("spec", SPECS, ids=spec_id)
def test_op_gradients_on_cupy_chunks_stay_on_the_gpu(spec, rng):
    from daskgrad.testing import gradcheck

    inputs = [to_gpu(t) for t in spec.inputs("uneven", rng)]
    assert gradcheck(spec.fn, inputs, eps=1e-6, atol=1e-6, rtol=1e-5)
    spec.fn(*inputs).sum().backward()
    for t in inputs:
        assert t.device == "cuda" and t.grad.device == "cuda"
        assert isinstance(t.grad.array.blocks[0].compute(), cupy.ndarray)


def test_to_cuda_and_back_is_differentiable_and_mixing_devices_raises():
    x = dg.from_array(np.arange(4.0), chunks=2, requires_grad=True)
    y = x.cuda()
    assert y.device == "cuda" and type(y.grad_fn).__name__ == "ToCopyBackward0"
    (y * 2).cpu().sum().backward()
    assert x.grad.device == "cpu"
    np.testing.assert_allclose(x.grad.numpy(), 2)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        y + x


def test_grad_of_a_cuda_leaf_keeps_device_dtype_chunks_and_cupy_chunks():
    x = dg.randn(50, 4, chunks=(20, 4), device="cuda", dtype="float32", requires_grad=True)
    (dg.tanh(x) * 2).sum().backward()
    assert x.grad.device == "cuda" and x.grad.dtype == x.dtype and x.grad.chunks == x.chunks
    assert all(isinstance(b, cupy.ndarray) for b in dask.compute(*x.grad.array.to_delayed().ravel()))


@contextlib.contextmanager
def gpu_and_cpu_worker():
    """One in-process worker that declares a GPU and one that does not."""
    from distributed import Client, Scheduler, SpecCluster, Worker

    workers = {"gpu-worker": {"cls": Worker, "options": {"nthreads": 1, "resources": {"GPU": 1}}},
               "cpu-worker": {"cls": Worker, "options": {"nthreads": 1}}}
    with SpecCluster(workers=workers, scheduler={"cls": Scheduler, "options": {"dashboard_address": ":0"}}) \
            as cluster, Client(cluster) as client:
        yield client


def test_vjp_tasks_of_cuda_tensors_run_only_on_the_gpu_worker():
    from distributed import get_task_stream

    with gpu_and_cpu_worker() as client:
        names = {addr: info["name"] for addr, info in client.scheduler_info()["workers"].items()}
        X = dg.randn(400, 8, chunks=(50, 8), device="cuda")
        w = dg.zeros(8, device="cuda", requires_grad=True)
        with get_task_stream(client) as ts:
            dg.binary_cross_entropy_with_logits(X @ w, dg.ones(400, chunks=50, device="cuda")).backward()
        vjp = [t for t in ts.data if "-vjp" in str(t["key"])]
        assert vjp and {names[t["worker"]] for t in vjp} == {"gpu-worker"}
        assert w.grad.device == "cuda"
        np.testing.assert_allclose(cupy.asnumpy(w.grad.array.compute()),
                                   cupy.asnumpy((X.array.sum(axis=0) * (0.5 - 1) / 400).compute()), rtol=1e-5)


def test_numpy_of_a_cuda_tensor_asks_for_cpu_first_as_torch_does():
    x = dg.ones(3, device="cuda")
    with pytest.raises(TypeError, match=r"^can't convert cuda:0 device type tensor to numpy\. Use Tensor\.cpu\(\)"):
        x.numpy()
    np.testing.assert_allclose(x.cpu().numpy(), 1)


def test_checkpointed_fwi_gradient_on_cupy_chunks_equals_numpy_chunks_and_stays_on_the_gpu():
    fwi = example("fwi")
    sv = fwi.survey(n=13, nbl=4, nshots=2, tn=100.0, f0=0.04, steps=9)
    vp_true = fwi.camembert(13, radius=3)
    start = np.full(vp_true.shape, 2.5) + 0.1 * np.random.default_rng(0).random(vp_true.shape)
    got = {}
    for device in ("cpu", "cuda"):
        fwd = fwi.Modelling(sv, chunk=8, device=device)
        d_obs = fwd.shot_records(fwd.slowness(vp_true))
        m = fwd.slowness(start, requires_grad=True)
        loss = fwd.misfit(m, d_obs, snapshots=3)
        loss.backward()
        assert m.grad.device == device and m.grad.chunks == m.chunks
        got[device] = d_obs, loss.item(), m.grad
    assert all(isinstance(b, cupy.ndarray) for b in dask.compute(*got["cuda"][2].array.to_delayed().ravel()))
    np.testing.assert_allclose(got["cuda"][0], got["cpu"][0], rtol=1e-12, atol=1e-12 * np.abs(got["cpu"][0]).max())
    np.testing.assert_allclose(got["cuda"][1], got["cpu"][1], rtol=1e-12)
    cpu_grad = got["cpu"][2].numpy()
    np.testing.assert_allclose(got["cuda"][2].cpu().numpy(), cpu_grad, rtol=1e-10, atol=1e-12 * np.abs(cpu_grad).max())


def test_bounded_lbfgs_fwi_on_the_gpu_takes_the_cpu_iterates():
    fwi = example("fwi")
    sv = fwi.survey(n=9, nbl=2, nshots=2, tn=30.0, f0=0.06)
    vp_true = fwi.camembert(9, radius=1)
    vp_start = np.full_like(vp_true, 2.5)
    runs = {device: fwi.invert(sv, vp_true, vp_start, iterations=2, snapshots=3, log=lambda *_: None, device=device)
            for device in ("cpu", "cuda")}
    np.testing.assert_allclose(runs["cuda"][0], runs["cpu"][0], rtol=1e-8)
    np.testing.assert_allclose(runs["cuda"][2], runs["cpu"][2], rtol=1e-8)
    assert all(b < a for a, b in zip(runs["cuda"][2], runs["cuda"][2][1:]))
