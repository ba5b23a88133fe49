"""Stored values are ordinary citizens: after training steps on a distributed cluster every tool
works on them, two clients never share their keys, and a script that never closes its client
exits quietly."""
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import daskgrad as dg

from test_cluster_processes import Processes

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOGGED = re.compile(r" - (ERROR|WARNING|CRITICAL) - |Traceback")


def adam_steps(steps=3):
    dg.manual_seed(0)
    rng = np.random.default_rng(0)
    X = dg.from_array(rng.standard_normal((200, 10)), chunks=(50, 10))
    y = dg.from_array(rng.standard_normal((200, 1)), chunks=(50, 1))
    model = dg.nn.Sequential(dg.nn.Linear(10, 16), dg.nn.Tanh(), dg.nn.Linear(16, 1)).double()
    opt = dg.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(steps):
        opt.zero_grad()
        loss = dg.nn.MSELoss()(model(X), y)
        loss.backward()
        opt.step()
    return model, opt, X, y


def test_estimate_memory_report_release_and_compute_work_after_training_steps(client):
    model, opt, X, y = adam_steps()
    loss = dg.nn.MSELoss()(model(X), y)
    est = dg.estimate_memory(loss, report=True)  # raised "Cycle detected ... stored-..." before
    assert est.peak > 0 and est.resident > 0  # the stored parameters count as held
    loss.backward(retain_graph=True)
    rows = dg.memory_report()
    assert rows and all(isinstance(r["bytes"], dict) for r in rows)
    assert sum(sum(r["bytes"].values()) for r in rows) > 0
    assert dg.release_graph(loss) > 0
    value, weight = dg.compute(loss, model[0].weight.detach())
    assert np.isfinite(value) and weight.shape == (16, 10)


def test_twin_parameters_stored_by_one_step_are_one_value_under_one_name(client):
    """Two parameters whose values stay equal (zeros, equal gradients) are one graph name: one
    store files them under one name (names drawn per array gave the first array the second's keys,
    and the next step lost its dependencies)."""
    def run():
        X = dg.tensor(np.ones((8, 3), dtype="float32"))
        w1, w2 = dg.zeros(3, requires_grad=True), dg.zeros(3, requires_grad=True)
        opt = dg.optim.SGD([w1, w2], lr=0.1)
        losses = []
        for _ in range(4):
            opt.zero_grad()
            loss = (X @ w1).sum() + (X @ w2).sum()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return w1.detach().numpy(), w2.detach().numpy(), losses

    w1, w2, losses = run()
    np.testing.assert_array_equal(w1, w2)
    np.testing.assert_allclose(w1, [-3.2] * 3, rtol=1e-6)  # (each step: w -= 0.1 * X.sum(0), X.sum(0) = 8)
    np.testing.assert_allclose(losses, [0, -38.4, -76.8, -115.2], rtol=1e-6)  # 2 * 8 * 3 * w


def test_whole_chunks_of_a_stored_value_stored_with_it_file_each_under_its_own_name(client):
    """Whole chunks of a value on the cluster (a minibatch of a held dataset) hold its chunks'
    Futures under keys of their own: a store files them from the keys the workers hold, and a store
    of both files each under its own name."""
    from daskgrad import _dask as door

    from daskgrad import runtime

    (whole,) = runtime.persist([(dg.from_array(np.arange(24.0).reshape(8, 3), chunks=(2, 3)) * 2).array])
    rows = dg.Tensor(whole)[2:6].array
    assert door.is_data(rows) and door.data_futures(rows.dask)
    stored = door.store(client, [rows, whole])
    assert all(a.name.startswith("stored-") for a in stored)
    np.testing.assert_array_equal(door.gather(stored[0]), np.arange(24.0).reshape(8, 3)[2:6] * 2)
    np.testing.assert_array_equal(door.gather(stored[1]), np.arange(24.0).reshape(8, 3) * 2)


def test_a_retained_graph_that_saved_a_minibatch_is_reported_and_its_dataset_keeps_two_copies(client):
    """A minibatch of a value held on the cluster holds that value's Futures: the memory report asks
    the scheduler for those keys (it asked for the minibatch's own, which it never heard of: a
    KeyError)."""
    from daskgrad import _dask as door

    a = np.arange(24.0).reshape(8, 3)
    w = dg.ones(3, requires_grad=True, dtype="float64")
    h = dg.from_array(a, chunks=(2, 3)) * w  # (a value of the graph)
    h.detach().numpy()  # (computed: h holds it on the cluster)
    hb = h[2:4]  # (whole chunks of it)
    assert door.is_data(hb.array) and set(door.held_keys(hb.array)) <= set(door.held_keys(h.array))
    loss = (hb ** 2).sum()
    loss.backward(retain_graph=True)  # (hb saved, kept on two workers)
    (row,) = [r for r in dg.memory_report() if r["node"] == "PowBackward0"]
    read = set(door.held_keys(hb.array))
    assert set(row["keys"]) == read and sum(row["bytes"].values()) > 0
    np.testing.assert_array_equal(w.grad.numpy(), (2 * a[2:4] ** 2).sum(0))
    assert dg.release_graph(loss) > 0


def test_a_key_two_kept_values_list_goes_back_to_one_copy_when_neither_holds_it():
    """A minibatch kept as a value (whole chunks of a stored dataset) lists its dataset's keys: let go
    first, it leaves the dataset its second copy; both let go, each key goes back to one copy once."""
    import gc

    from daskgrad import _state

    class Storage:  # (what _state reads of a tensor's storage: its array's name)
        def __init__(self, name):
            self.array = type("Array", (), {"name": name})()

    gc.collect()
    _state.let_go()
    _state.take_unkeep()  # (what earlier tests let go)
    whole, part = Storage("stored-whole"), Storage("getitem-part")
    _state.hold(whole, [("stored-whole", 0), ("stored-whole", 1)])
    _state.hold(part, [("stored-whole", 1)])
    del part
    gc.collect()
    _state.let_go()
    assert _state.take_unkeep() == []
    del whole
    gc.collect()
    _state.let_go()
    assert sorted(_state.take_unkeep()) == [("stored-whole", 0), ("stored-whole", 1)]


def test_two_clients_keep_their_values_under_their_own_names(client):
    from distributed import Client

    def step():
        w = dg.zeros(3, requires_grad=True)
        (w * 2.0).sum().backward()
        with dg.no_grad():
            w -= w.grad
        (w * 2.0).sum().backward()  # computes and stores the update
        return w

    other = Client(client.scheduler.address, set_as_default=False)
    try:
        w = step()
        with other.as_current():
            v = step()
            np.testing.assert_array_equal(v.detach().numpy(), [-2.0] * 3)
        assert w.detach().array.name.startswith("stored-") and v.detach().array.name.startswith("stored-")
        assert w.detach().array.name != v.detach().array.name  # identical values, stored apart
        other.close()  # releases the other client's values only
        np.testing.assert_array_equal(w.detach().numpy(), [-2.0] * 3)
        import time

        with dg.no_grad():
            w -= w.grad
        (w * 2.0).sum().backward()  # stores a new value, after the other client's first submission
        time.sleep(2.5)  # a memory-manager cycle: it must not drop the second copy
        assert copies_by_name(client)[w.detach().array.name] == {2}
    finally:
        other.close()


TRAIN = textwrap.dedent("""
    import sys
    import numpy as np
    import daskgrad as dg

    client = dg.connect(scheduler_file=sys.argv[1])
    dg.manual_seed(0)
    rng = np.random.default_rng(0)
    X = dg.from_array(rng.standard_normal((200, 10)), chunks=(50, 10))
    y = dg.from_array(rng.standard_normal((200, 1)), chunks=(50, 1))
    model = dg.nn.Sequential(dg.nn.Linear(10, 16), dg.nn.Tanh(), dg.nn.Linear(16, 1)).double()
    opt = dg.optim.Adam(model.parameters(), lr=1e-2)
    for step in range(25):
        opt.zero_grad()
        loss = dg.nn.MSELoss()(model(X), y)
        loss.backward()
        opt.step()
        loss.item()
    print(repr(float(model[0].weight.detach().numpy().sum())))
    client.close()
""")


@pytest.mark.cluster
@pytest.mark.timeout(300)
def test_two_processes_training_identical_models_on_one_cluster_both_finish_alike(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    procs = Processes([[], []])
    try:
        runs = [subprocess.Popen([sys.executable, str(script), procs.file], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, cwd=ROOT) for _ in range(2)]
        outs = [r.communicate(timeout=240) for r in runs]
    finally:
        procs.close()
    assert [r.returncode for r in runs] == [0, 0], [e[-2000:] for _, e in outs]
    assert outs[0][0] == outs[1][0]
    assert not [line for _, err in outs for line in err.splitlines() if LOGGED.search(line)]


def readme_block(after, page="README.md", nth=0):
    """The ``nth`` ```python block after the line containing ``after`` in ``page`` (README.md or a docs page)."""
    text = open(os.path.join(ROOT, page)).read()
    start = text.index(after)
    for _ in range(nth + 1):
        start = text.index("```python", start) + len("```python")
    return textwrap.dedent(text[start:text.index("```", start)])


def test_readme_snippets_as_a_script_that_never_closes_its_client_exit_quietly(tmp_path):
    script = "\n".join([
        "import daskgrad as dg",
        'client = dg.connect("local")  # as the README says: connect first, the same code runs there',
        readme_block("## Quick start"),
        "steps, lr, history = 3, 0.1, []",
        readme_block("## Logging the loss without stalling the cluster", "docs/user-guide/concepts.md", nth=1),
        "print(len(history))",
    ])
    path = tmp_path / "snippets.py"
    path.write_text(script)
    out = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("3")
    assert not [line for line in out.stderr.splitlines() if LOGGED.search(line)], out.stderr[-3000:]


def copies_by_name(client):
    def count(dask_scheduler):
        out = {}
        for k, ts in dask_scheduler.tasks.items():
            if ts.state == "memory" and isinstance(k, tuple):
                out.setdefault(k[0], set()).add(len(ts.who_has))
        return out
    return client.run_on_scheduler(count)


def test_a_value_only_lazy_graphs_still_reference_keeps_one_copy(client):
    """The loop's `residual`, built on the pending update, pins the previous u and u.grad: they
    are no longer held by any tensor, so they need no second copy (memory ≤ 2x what is held)."""
    import time

    rng = np.random.default_rng(0)
    f = dg.from_array(rng.standard_normal((40, 40)), chunks=(20, 20))
    u = dg.zeros(40, 40, chunks=(20, 20), dtype="float64", requires_grad=True)
    for _ in range(3):
        residual = u * 2 - f
        loss = 0.5 * dg.sum(residual * residual)
        loss.backward()
        with dg.no_grad():
            u -= 0.1 * u.grad
        u.grad = None
    pending = u.detach().array  # u - 0.1 * grad, built on the kept u and grad
    from daskgrad import _dask as door  # the values in memory residual's program reads

    pinned = set(door.Program.of([residual._storage.value]).slots) - {n for n in pending.dask.layers}
    deadline = time.time() + 20  # distributed's memory manager drops extra copies every 2 s
    while True:
        copies = copies_by_name(client)
        held = {n: c for n, c in copies.items() if n in pending.dask.layers}
        only_pinned = {n: c for n, c in copies.items() if n in pinned}
        if all(c == {1} for c in only_pinned.values()) or time.time() > deadline:
            break
        time.sleep(0.1)
    assert held and all(c == {2} for c in held.values()), held  # what the pending update reads: two
    # (recorded as a program, residual reads the values the pending update reads: often nothing else)
    assert all(c == {1} for c in only_pinned.values()), only_pinned


def test_an_update_left_pending_by_a_closed_client_spares_the_next_local_run_and_reading_it_names_the_loss():
    """A loop on a cluster whose client closes after ``optimizer.step()`` leaves a lazy update built
    on values that client held: later work on the local scheduler must not try to run it, and
    reading the parameter names what was lost."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster):
        model = dg.nn.Linear(3, 1, dtype="float64")
        optimizer = dg.optim.Adam(model.parameters(), lr=0.01)
        X = dg.from_array(np.ones((8, 3)), chunks=(4, 3))
        for _ in range(2):
            optimizer.zero_grad()
            model(X).sum().backward()
            optimizer.step()
    x = dg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    ((2 * x) ** 3).backward(dg.tensor([1.0, 0.1, 0.5]))
    np.testing.assert_allclose(x.grad.numpy(), 24 * np.array([1.0, 4.0, 9.0]) * [1.0, 0.1, 0.5])
    with pytest.raises(dg.LostTensorError, match="parameter 'weight'.*client holding them was closed"
                                                 "|client holding them was closed.*parameter 'weight'"):
        model.weight.detach().numpy()



def test_values_lost_under_a_fused_step_are_named_before_it_is_submitted(client):
    """Chunk fusion moves the stored values a step reads inside its fused tasks: the check for
    lost values must still see them (it let dask's FuturesCancelledError through once, under load)."""
    from distributed import futures_of

    X = dg.from_array(np.ones((40, 3), dtype="float32"), chunks=(10, 3))
    w = dg.zeros(3, requires_grad=True)
    for _ in range(2):
        (X @ w).sum().backward()
        with dg.no_grad():
            w -= 0.1 * w.grad
        w.grad = None
    w.detach().numpy()  # the update is stored: w's next reads are inside the step's fused tasks
    client.cancel(futures_of(w.array))  # as if both workers holding its value died
    with pytest.raises(dg.LostTensorError, match="Checkpoint and resume") as info:
        (X @ w).sum().backward()
    assert "FutureCancelledError" not in str(info.value)
    assert "a tensor of shape (3,), float32" in info.value.names
