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

    # (asked of the scheduler itself: the client's scheduler_info() is a copy refreshed now and then, which
    # may not list a worker that registered after the client connected)
    addresses = cli_cluster.run_on_scheduler(lambda dask_scheduler: {ws.name: addr for addr, ws in
                                                                     dask_scheduler.workers.items()})
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


def _wave_gradient(steps=12):
    """A checkpointed 2-D wave equation's gradient: two shots, a chunk each (small chunks)."""
    from daskgrad.utils.checkpoint import checkpoint_steps

    rng = np.random.default_rng(5)
    lap = np.array([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]])
    c = dg.from_array(0.2 + 0.05 * rng.random((16, 16)), chunks=16, requires_grad=True)
    u0 = dg.from_array(rng.standard_normal((2, 16, 16)), chunks=(1, 16, 16))

    def step(state, i):
        prev, u = state
        return u, 2 * u - prev + c ** 2 * dg.correlate(u, lap[None], mode="constant")

    prev, u = checkpoint_steps(step, (u0 * 1.0, u0), steps, snapshots=3)
    (u ** 2).sum().backward()
    return c.grad.numpy()


def test_a_local_cluster_s_worker_processes_serve_chunks_from_the_heap_and_a_small_loop_is_one_task():
    """distributed's nanny sets MALLOC_TRIM_THRESHOLD_, which freezes glibc's mmap threshold: every
    chunk over 128 kB was a fresh mmap, NumPy 4x slower in a worker than in the client.  The local
    cluster of ``dg.connect`` starts its workers with MALLOC_MMAP_THRESHOLD_ (glibc's own ceiling)
    unless the user's dask config names one.  There a checkpointed time loop of small chunks, run
    again, is one task, with the numbers of dask's threads."""
    from distributed import get_task_stream

    from daskgrad.cluster import MMAP_THRESHOLD, _worker_malloc

    key = "distributed.nanny.pre-spawn-environ"
    with _worker_malloc():
        assert dask.config.get(key)["MALLOC_MMAP_THRESHOLD_"] == MMAP_THRESHOLD
        assert dask.config.get(key)["MALLOC_TRIM_THRESHOLD_"] == 65536  # distributed's own, kept
    with dask.config.set({key + ".MALLOC_MMAP_THRESHOLD_": 1 << 20}), _worker_malloc():
        assert dask.config.get(key)["MALLOC_MMAP_THRESHOLD_"] == 1 << 20
    assert "MALLOC_MMAP_THRESHOLD_" not in dask.config.get(key)

    want = _wave_gradient()
    client = dg.connect("local", n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None)
    try:
        assert list(client.run(os.environ.get, "MALLOC_MMAP_THRESHOLD_").values()) == [str(MMAP_THRESHOLD)]
        got = [_wave_gradient() for _ in range(2)]
        with get_task_stream(client) as ts:
            got.append(_wave_gradient())
    finally:
        client.close()
        client.cluster.close()
    for g in got:
        np.testing.assert_array_equal(g, want)
    runs = [t for t in ts.data if str(t["key"][0] if isinstance(t["key"], tuple) else t["key"]).startswith("instance-")]
    assert len(runs) == 1


_GLOBAL_READ = '''
import sys
import numpy as np

SCALE = 1.0
PARAMS = {"s": 1.0}
ARR = np.ones(1)


class Cfg:
    t = 1.0


def kernel(block):
    return block * SCALE * PARAMS["s"] * Cfg.t * ARR[0]


def factor(k):  # three steps each (the third an instance of a template), then one global changes
    b = k // 3
    return (1.0 + (b >= 1)) * (1.0 + 2 * (b >= 2)) * (1.0 + 4 * (b >= 3)) * (1.0 + 8 * (b >= 4))


def steps(X, n=15):
    global SCALE
    import daskgrad as dg
    out = []
    for k in range(n):
        b = k // 3
        SCALE = 1.0 + (b >= 1)  # a global set anew
        PARAMS["s"] = 1.0 + 2 * (b >= 2)  # a dict, an attribute of a class, an array changed in place
        Cfg.t = 1.0 + 4 * (b >= 3)
        ARR[0] = 1.0 + 8 * (b >= 4)
        out.append(float(((dg.map_blocks(kernel, X) + 1.0) * 2.0).sum().item()))
    return out


if __name__ == "__main__":
    import dask
    import daskgrad as dg
    from distributed import Client, LocalCluster
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \\
            Client(cluster):
        a = np.arange(40.0).reshape(10, 4)
        want = [float(((a * factor(k) + 1.0) * 2.0).sum()) for k in range(15)]
        for one_task in ("512 MiB", 0):
            with dask.config.set({"daskgrad.step-cache.one-task-bytes": one_task}):
                X = dg.from_array(a, chunks=(5, 4)) * 1.0
                X.numpy()
                got = steps(X)
            assert got == want, (one_task, got, want)
            assert dg.step_cache_info()["hits"] > 0
    print("ok")
'''


def test_a_kernel_of_main_reading_a_global_set_before_each_step_gives_each_step_s_values(tmp_path):
    """A script's kernel that reads module globals, set anew or changed in place (a dict's item, a
    class's attribute, an array's element) before each step: cloudpickle sends a function of
    ``__main__`` to worker processes by value with the globals it reads, and a template ships its
    tasks once, so steps after the template gave the values of the step it was shipped at (where a
    local scheduler calls the function itself).  What such globals pickle to is part of the
    program's key.  Runs on worker processes, as one task and as the template's tasks renamed
    (their chunk-fused parts pickled once, unpickled on the workers)."""
    script = tmp_path / "global_read.py"
    script.write_text(_GLOBAL_READ)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
