"""A lost worker costs a recompute, never the model: real `dask scheduler` / `dask worker`
processes on 127.0.0.1, workers killed with SIGKILL, training written as users write it.

Every value daskgrad keeps between submissions (parameters, optimizer state, ``.grad``, the
loss value, retained graphs) is held on two workers; the final parameters and optimizer state
must equal a run without faults exactly (float64, fixed seeds).
"""
import os
import signal
import threading
import time

import numpy as np
import pytest

import daskgrad as dg
from daskgrad import nn, optim

from test_cluster_processes import Processes

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420), pytest.mark.filterwarnings("ignore::UserWarning")]


@pytest.fixture
def three_workers():
    procs = Processes([[], [], []])
    client = procs.client()
    yield procs, client
    client.close()
    procs.close()


def worker_pids(client):
    """Worker process ids (the CLI process is the nanny: killing the worker lets it restart one)."""
    return client.run(os.getpid)


def kill_worker(client):
    """SIGKILL one worker process; returns once the scheduler has noticed."""
    pids = worker_pids(client)
    victim = sorted(pids)[0]
    os.kill(pids[victim], signal.SIGKILL)
    deadline = time.time() + 30
    while victim in client.scheduler_info()["workers"]:
        assert time.time() < deadline, "the scheduler did not notice the killed worker"
        time.sleep(0.05)
    return victim


def plain_loop(steps, on_step=lambda step: None, dtype=np.float64):
    """The README's loop: ``w -= lr * w.grad`` under no_grad, ``w.grad = None``, the loss logged.
    (float64 X and y: the float32 ``w`` is multiplied as ``w.double()``, torch multiplies no two dtypes.)"""
    rng = np.random.default_rng(0)
    X = dg.from_array(rng.standard_normal((400, 6)).astype(dtype), chunks=(100, 6))
    y = dg.from_array(rng.standard_normal(400).astype(dtype), chunks=100)
    w = dg.zeros(6, requires_grad=True)
    history = []
    for step in range(steps):
        on_step(step)
        loss = dg.mse_loss(X @ (w.double() if dtype == np.float64 else w), y)
        loss.backward()
        with dg.no_grad():
            w -= 0.1 * w.grad
        w.grad = None
        history.append(loss.item())
    return w.detach().numpy(), history


def adam_loop(steps, on_step=lambda step: None, built=lambda model, opt: None):
    """nn.Sequential + MSELoss + Adam, as in torch."""
    dg.manual_seed(0)
    rng = np.random.default_rng(0)
    X = dg.from_array(rng.standard_normal((200, 10)), chunks=(50, 10))
    y = dg.from_array(rng.standard_normal((200, 1)), chunks=(50, 1))
    model = nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 1)).double()
    opt = optim.Adam(model.parameters(), lr=1e-2)
    built(model, opt)
    for step in range(steps):
        on_step(step)
        opt.zero_grad()
        loss = nn.MSELoss()(model(X), y)
        loss.backward()
        opt.step()
    return model, opt


def state(model, opt):
    """Parameters and every optimizer state tensor, as NumPy arrays."""
    out = [p.detach().numpy() for p in model.parameters()]
    for s in opt.state_dict()["state"].values():
        out += [v.numpy() if isinstance(v, dg.Tensor) else np.float64(v) for _, v in sorted(s.items())]
    return out


def assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


@pytest.fixture(scope="module")
def adam_reference():
    import dask

    with dask.config.set(scheduler="sync"):
        return state(*adam_loop(30))


def test_plain_loop_survives_a_worker_killed_between_steps(three_workers):
    procs, client = three_workers
    with __import__("dask").config.set(scheduler="sync"):
        want_w, want_hist = plain_loop(20)
    got_w, got_hist = plain_loop(20, on_step=lambda s: s == 10 and kill_worker(client))
    np.testing.assert_array_equal(got_w, want_w)
    assert got_hist == want_hist


def test_float32_plain_loop_survives_a_worker_killed_bitwise_in_deterministic_mode(three_workers):
    """All float32: a product's chunk that arrived misaligned, or ran on BLAS threads, gives other last bits
    (3.7e-9 here without the mode); deterministic mode aligns every received buffer and runs BLAS on one thread,
    so the run with a killed worker equals the sync run bit for bit (docs: concepts, deterministic mode)."""
    procs, client = three_workers
    dg.use_deterministic_algorithms(True)
    try:
        with __import__("dask").config.set(scheduler="sync"):
            want_w, want_hist = plain_loop(20, dtype=np.float32)
        got_w, got_hist = plain_loop(20, on_step=lambda s: s == 10 and kill_worker(client), dtype=np.float32)
    finally:
        dg.use_deterministic_algorithms(False)
    assert got_w.dtype == np.float32
    np.testing.assert_array_equal(got_w, want_w)
    assert got_hist == want_hist


def minibatch_loop(steps, on_step=lambda step: None):
    """Minibatches of a lazily made dataset and labels made from it (held once read again: stored, no
    lineage, on two workers like a parameter)."""
    from daskgrad import _dask as door

    dg.manual_seed(0)
    X = dg.randn(400, 6, chunks=(100, 6), dtype=dg.float64)
    y = dg.tanh(X @ dg.from_array(np.arange(6.0), chunks=6))
    w = dg.zeros(6, dtype=dg.float64, requires_grad=True)
    history = []
    for step in range(steps):
        on_step(step)
        rows = slice(100 * (step % 4), 100 * (step % 4) + 100)
        loss = dg.mse_loss(X[rows] @ w, y[rows])
        loss.backward()
        history.append(loss.item())
        with dg.no_grad():
            w -= 0.1 * w.grad
        w.grad = None
    return w.detach().numpy(), history, door.is_data(X.array)


def test_a_held_dataset_survives_a_worker_killed(three_workers):
    """(Deterministic mode: a held chunk's second copy arrives misaligned on its worker, where NumPy
    sums it in another order: the bits of a run then depend on which copy a task read.)"""
    procs, client = three_workers
    dg.use_deterministic_algorithms(True)
    try:
        with __import__("dask").config.set(scheduler="sync"):
            want_w, want_hist, _ = minibatch_loop(12)
        got_w, got_hist, held = minibatch_loop(12, on_step=lambda s: s == 6 and kill_worker(client))
    finally:
        dg.use_deterministic_algorithms(False)
    assert held
    np.testing.assert_array_equal(got_w, want_w)
    assert got_hist == want_hist


def test_adam_loop_survives_a_worker_killed_between_steps(three_workers, adam_reference):
    procs, client = three_workers
    got = state(*adam_loop(30, on_step=lambda s: s == 15 and kill_worker(client)))
    assert_same(got, adam_reference)


def test_adam_loop_survives_a_worker_killed_during_a_backward(three_workers, adam_reference):
    procs, client = three_workers
    killed, killer = [], threading.Timer(0.15, lambda: killed.append(kill_worker(client)))

    def arm(step):
        if step == 10:  # SIGKILL from another thread while the steps run
            killer.start()

    got = state(*adam_loop(30, on_step=arm))
    killer.join()
    assert killed and killed[0] not in client.scheduler_info()["workers"]  # (a nanny starts a new one)
    assert_same(got, adam_reference)


def test_retained_graph_and_held_grad_survive_a_killed_worker(three_workers):
    procs, client = three_workers
    rng = np.random.default_rng(1)
    x = dg.from_array(rng.standard_normal(40), chunks=5, requires_grad=True)
    w = dg.from_array(rng.standard_normal(40), chunks=5, requires_grad=True)
    z = (dg.exp(x * w) * x).sum()
    z.backward(retain_graph=True)
    kill_worker(client)  # while the retained graph and both .grad values are held
    xv, wv = x.detach().numpy(), w.detach().numpy()
    gx, gw = x.grad.numpy(), w.grad.numpy()
    np.testing.assert_allclose(gx, np.exp(xv * wv) * (1 + xv * wv))
    np.testing.assert_allclose(gw, np.exp(xv * wv) * xv * xv)
    z.backward()  # through the graph retained before the kill
    np.testing.assert_allclose(x.grad.numpy(), 2 * gx)
    np.testing.assert_allclose(w.grad.numpy(), 2 * gw)
    assert z.item() == pytest.approx(float((np.exp(xv * wv) * xv).sum()))


@pytest.fixture(scope="module")
def adam_reference_100():
    """The 100-step run without faults, made before the test's cluster starts: daskgrad submits to any live
    Client whatever dask's scheduler setting, so made inside the test it ran on that cluster (as long again)."""
    import dask

    with dask.config.set(scheduler="sync"):
        return state(*adam_loop(100))


def test_adam_loop_survives_workers_killed_repeatedly_while_nannies_restart_them(three_workers, adam_reference_100):
    procs, client = three_workers
    want = adam_reference_100
    killed = []

    def every_20th(step):
        if step and step % 20 == 0:
            pids = worker_pids(client)
            victim = sorted(pids)[(step // 20) % len(pids)]
            os.kill(pids[victim], signal.SIGKILL)
            killed.append(victim)

    got = state(*adam_loop(100, on_step=every_20th))
    assert len(killed) == 4  # each of the three positions at least once, one twice
    assert_same(got, want)


def test_gradients_survive_their_holder_dying_as_they_are_kept(adam_reference):
    """A backward's gradients are made on one worker; the Keeper is then asked for their second
    copy.  The worker dies in that moment (here: as the Keeper takes the call).  The gradients
    must be computable again then -- the values they were computed from (the previous step's
    parameters and gradients, which the step's stores supersede) still held by the client -- and
    be copied once computed again.  Before, the stores' swap let go of those first: a loaded
    machine lost the gradients, and the next step raised LostTensorError (7 runs in 258 of the
    real-process test above, with three CPU burners)."""
    from distributed import Client, LocalCluster

    from daskgrad import _dask as door

    with LocalCluster(n_workers=3, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        scheduler, victims, armed, recomputed, model = cluster.scheduler, [], [], [], []
        swapped_in_first = []  # (the client waits for this call: what its storages hold is as it was)

        def on_step(step):
            if step == 3:
                keep = scheduler.handlers["daskgrad_keep"]

                async def dying_holder(keys, who_has=None, **kwargs):
                    # (asked with the step's stored values, or alone: a step without stores)
                    grads = [k for k in keys if "-vjp-" in str(k) and "stored-" not in str(k)]
                    if armed and grads:
                        armed.clear()
                        swapped_in_first.extend(door.in_memory(p._storage.value) is not None
                                                for p in model[0].parameters())
                        holders = {ws.address for k in grads for ws in scheduler.tasks[k].who_has or ()}
                        victims.append(sorted(holders)[0])
                        await scheduler.remove_worker(address=victims[0], stimulus_id="test-holder-died", close=True)
                        recomputed.extend(grads)
                    return await keep(keys=keys, who_has=who_has, **kwargs)

                scheduler.handlers["daskgrad_keep"], armed[:] = dying_holder, [True]
            if step == 4:  # computed again, they are copied to a second worker, as kept values are
                assert swapped_in_first == [False] * len(swapped_in_first) and recomputed, \
                    "the Keeper was asked for the gradients' copies after the step's stores were swapped in"
                deadline = time.time() + 30
                while min(len(getattr(scheduler.tasks.get(k), "who_has", None) or ()) for k in recomputed) < 2:
                    assert time.time() < deadline, "the gradients computed again have one copy (or were lost)"
                    time.sleep(0.05)

        got = state(*adam_loop(30, on_step=on_step, built=lambda m, opt: model.append(m)))
        assert len(victims) == 1 and victims[0] not in client.scheduler_info()["workers"]
    assert_same(got, adam_reference)


def _a_pair_holding_both_copies(dask_scheduler=None):
    """The addresses of the two workers holding a value the client keeps in two copies."""
    both = next(ts for ts in dask_scheduler.tasks.values() if ts.who_has and len(ts.who_has) == 2)
    return sorted(ws.address for ws in both.who_has)


def test_losing_both_copies_names_the_lost_tensors_and_the_checkpoint_recipe(three_workers):
    procs, client = three_workers
    model, opt = adam_loop(3)
    pids = worker_pids(client)
    # the two workers holding both copies of a kept value (a step of small chunks runs as one task:
    # every value it makes is made on one worker, so any "two of three" may miss every pair)
    pair = client.run_on_scheduler(_a_pair_holding_both_copies)
    for address in sorted(pair):
        os.kill(pids[address], signal.SIGKILL)
    deadline = time.time() + 30
    while len(client.scheduler_info()["workers"]) > 1 and time.time() < deadline:
        time.sleep(0.05)
    with pytest.raises(dg.LostTensorError, match="Checkpoint and resume") as info:
        for _ in range(3):  # the loop goes on as users write it
            X = dg.from_array(np.ones((4, 10)))
            loss = model(X).sum()
            loss.backward()
            opt.step()
            opt.zero_grad()
    text = str(info.value)
    assert "parameter '" in text and "FutureCancelledError" not in text
    assert all(name.startswith(("parameter '", "Adam state", "a tensor", "cluster data", "0.", "2."))
               or "computed from" in name for name in info.value.names)


def test_a_restarted_scheduler_raises_lost_tensor_error_on_next_use():
    procs = Processes([[], []])
    try:
        client = procs.client()
        w = dg.zeros(6, requires_grad=True)
        (w * 2.0).sum().backward()
        w.grad.numpy()
        procs.procs[0].send_signal(signal.SIGKILL)  # the scheduler
        procs.procs[0].wait()
        deadline = time.time() + 30
        while client.status == "running" and time.time() < deadline:
            time.sleep(0.05)
        with pytest.raises(dg.LostTensorError, match=r"\.grad|a tensor of shape \(6,\)"):
            w.grad.numpy()
        client.close(timeout=5)
    finally:
        procs.close()


# ------------------------------------------------------------------ values gone mid-run: LostTensorError, never dask's
def assert_names_what_was_lost(error):
    """The user's words, not distributed's: parameters and optimizer state, no FuturesCancelledError,
    no internal key, in the message or anywhere in the traceback shown."""
    import traceback

    shown = "".join(traceback.format_exception(error))
    assert "parameter '" in str(error) and "Adam state" in str(error)
    assert "Cancelled" not in shown and "stored-" not in shown and "-vjp-" not in shown, shown[-3000:]


def _slow_then(marker):
    def slow(block):
        open(marker, "a").close()  # the submission is running
        time.sleep(1.0)
        return block
    return slow


def test_both_holders_dying_while_a_submission_runs_raise_lost_tensor_error(tmp_path):
    procs = Processes([[], []])
    try:
        client = procs.client()
        model, opt = adam_loop(3)
        X = dg.from_array(np.random.default_rng(2).standard_normal((200, 10)), chunks=(50, 10))
        marker = tmp_path / "running"
        slow = _slow_then(str(marker))
        pids = worker_pids(client)

        def kill_both_once_running():
            while not marker.exists():
                time.sleep(0.02)
            for pid in pids.values():  # every holder of every kept value, mid-submission
                os.kill(pid, signal.SIGKILL)

        killer = threading.Thread(target=kill_both_once_running)
        killer.start()
        with pytest.raises(dg.LostTensorError) as info:
            for _ in range(3):  # the loop goes on as users write it
                opt.zero_grad()
                loss = (model(X) + dg.map_blocks(slow, X[:, :1]) * 0).sum()
                loss.backward()
                opt.step()
                loss.item()
        killer.join()
        assert_names_what_was_lost(info.value)
        client.close()
    finally:
        procs.close()


def _hungry(block):
    """Allocates more than a worker may hold inside the task: no chunk shows it beforehand."""
    big = np.ones(60_000_000)  # 480 MB
    return block + big[:1].sum() - 1


@pytest.fixture
def limited_workers():
    """Two workers at 400 MB each (a worker process itself takes about 200 MB here)."""
    procs = Processes([["--memory-limit", "400MB"], ["--memory-limit", "400MB"]])
    client = procs.client()
    yield procs, client
    client.close()
    procs.close()


def test_every_worker_restarted_at_its_memory_limit_raises_lost_tensor_error(limited_workers):
    procs, client = limited_workers
    model, opt = adam_loop(3)
    X = dg.from_array(np.random.default_rng(2).standard_normal((200, 10)), chunks=(50, 10))
    with pytest.raises(dg.LostTensorError) as info:
        for _ in range(3):
            opt.zero_grad()
            loss = (model(X) + dg.map_blocks(_hungry, X[:, :1]) * 0).sum()  # restarts each worker in turn
            loss.backward()
            opt.step()
            loss.item()
    assert_names_what_was_lost(info.value)


def test_a_task_whose_chunk_cannot_fit_a_worker_is_refused_before_it_runs(limited_workers):
    procs, client = limited_workers
    import dask

    with dask.config.set(scheduler="sync"):
        want = state(*adam_loop(4))
    pids = worker_pids(client)
    refused = []

    def oversized_step(step):
        if step == 2:
            v = dg.ones(10_000, dtype="float64")  # one chunk
            with pytest.raises(RuntimeError, match=r"^mul: one task would make a chunk of 762\.94 MiB \(shape "
                                                   r"\(10000, 10000\), float64\), more than a worker can hold") as e:
                (v[:, None] * v[None, :]).sum().item()  # an outer product: 800 MB in one chunk
            assert "Rechunk into smaller chunks" in str(e.value)
            refused.append(True)

    got = state(*adam_loop(4, on_step=oversized_step))
    assert refused and worker_pids(client) == pids  # no worker was restarted
    assert_same(got, want)  # and training went on with every value it keeps


def test_a_save_after_every_holder_died_raises_lost_tensor_error_and_keeps_the_last_checkpoint(tmp_path):
    procs = Processes([[], []])
    try:
        client = procs.client()
        model, opt = adam_loop(2)
        dg.save({"model": model.state_dict(), "step": 2}, tmp_path / "ck")
        saved = {k: v.numpy() for k, v in dg.load(tmp_path / "ck")["model"].items()}
        model, opt = adam_loop(3)
        pids = worker_pids(client)
        for pid in pids.values():
            os.kill(pid, signal.SIGKILL)
        deadline = time.time() + 30
        while set(client.scheduler_info()["workers"]) & set(pids) and time.time() < deadline:
            time.sleep(0.05)
        with pytest.raises(dg.LostTensorError) as info:
            dg.save({"model": model.state_dict(), "step": 3}, tmp_path / "ck")
        assert "parameter '" in str(info.value)
        client.close()
    finally:
        procs.close()
    got = dg.load(tmp_path / "ck")  # (here, without the cluster)
    assert got["step"] == 2 and {k: v.numpy() for k, v in got["model"].items()}.keys() == saved.keys()
    for k, v in got["model"].items():
        np.testing.assert_array_equal(v.numpy(), saved[k])
