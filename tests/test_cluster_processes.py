"""Real `dask scheduler` / `dask worker` processes on 127.0.0.1: gradients, GPU placement, failures."""
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import dask
import numpy as np
import pytest

import daskgrad as dg

pytestmark = [pytest.mark.cluster, pytest.mark.filterwarnings("ignore::UserWarning")]
HERE = os.path.dirname(os.path.abspath(__file__))
DASK = [sys.executable, "-m", "distributed.cli.dask_scheduler"], [sys.executable, "-m", "distributed.cli.dask_worker"]


class Processes:
    """A scheduler and workers started from the CLI; stopped (killed if need be) on close."""

    def __init__(self, workers):
        self.dir = tempfile.mkdtemp()
        self.file = os.path.join(self.dir, "scheduler.json")
        env = dict(os.environ, PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.procs = [subprocess.Popen(DASK[0] + ["--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                                  "--scheduler-file", self.file],
                                       env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
        deadline = time.time() + 60
        while not os.path.exists(self.file):
            assert time.time() < deadline, "scheduler did not start"
            time.sleep(0.1)
        self.workers = []
        for extra in workers:
            p = subprocess.Popen(DASK[1] + ["--scheduler-file", self.file, "--nthreads", "1", "--no-dashboard",
                                            "--host", "127.0.0.1", "--memory-limit", "0"] + extra,
                                 env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.procs.append(p)
            self.workers.append(p)

    def client(self):
        from distributed import Client

        c = Client(scheduler_file=self.file, set_as_default=True)
        c.wait_for_workers(len(self.workers), timeout=60)
        return c

    def close(self):
        for p in self.procs[::-1]:
            p.kill()
            p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def cli_cluster():
    procs = Processes([["--resources", "GPU=1", "--name", "gpu-worker"], ["--name", "cpu-worker"]])
    client = procs.client()
    yield client
    client.close()
    procs.close()


def _problem(chunks):
    rng = np.random.default_rng(7)
    X = dg.from_array(rng.standard_normal((40, 6)), chunks=(chunks, 6))
    w = dg.from_array(rng.standard_normal(6), chunks=3, requires_grad=True)
    return X, w, dg.binary_cross_entropy_with_logits(X @ w, (X[:, 0] > 0).astype("float64"))


def test_cli_processes_give_the_local_schedulers_gradient(cli_cluster):
    X, w, loss = _problem(10)
    loss.backward()
    remote = w.grad.numpy()
    X, w, loss = _problem(10)
    (g,) = dg.grad(loss, w, lazy=True)
    np.testing.assert_allclose(remote, g.array.compute(scheduler="sync"), rtol=1e-10)


def test_vjp_tasks_of_gpu_tensors_run_only_on_the_gpu_worker(cli_cluster):
    from distributed import get_task_stream

    addresses = {info["name"]: addr for addr, info in cli_cluster.scheduler_info()["workers"].items()}
    X, w, loss = _problem(5)
    with dask.config.set({"daskgrad.vjp-resources": {"GPU": 1}}), get_task_stream(cli_cluster) as ts:
        loss.backward()
    vjp = [t for t in ts.data if "-vjp" in str(t["key"])]
    assert vjp and {t["worker"] for t in vjp} == {addresses["gpu-worker"]}


def slow_square(block):
    time.sleep(0.3)
    return block * block


def slow_square_vjp(g, block):
    time.sleep(0.3)
    return (2 * block * g,)


def test_killing_a_worker_during_backward_still_returns_the_same_gradient():
    procs = Processes([["--name", "a"], ["--name", "b"]])
    try:
        client = procs.client()
        x = dg.from_array(np.arange(16.0), chunks=1, requires_grad=True)
        loss = dg.map_blocks(slow_square, x, vjp=slow_square_vjp).sum()
        killer = threading.Timer(1.0, procs.workers[1].kill)
        killer.start()
        loss.backward()
        killer.join()
        np.testing.assert_allclose(x.grad.numpy(), 2 * np.arange(16.0))
        assert len(client.scheduler_info()["workers"]) == 1
        client.close()
    finally:
        procs.close()


def test_retained_graph_survives_a_lost_worker():
    procs = Processes([["--name", "a"], ["--name", "b"]])
    try:
        client = procs.client()
        x = dg.from_array(np.arange(8.0), chunks=1, requires_grad=True)
        z = dg.exp(dg.map_blocks(slow_square, x, vjp=slow_square_vjp) / 100).sum()
        z.backward(retain_graph=True)
        procs.workers[1].kill()
        z.backward()
        want = 2 * 2 * np.arange(8.0) * np.exp(np.arange(8.0) ** 2 / 100) / 100
        np.testing.assert_allclose(x.grad.numpy(), want)
        client.close()
    finally:
        procs.close()
