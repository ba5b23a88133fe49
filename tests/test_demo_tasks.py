"""`make demo`'s training step as tasks: the scheduler's work per task (a LocalCluster's, ~1.5 ms of its CPU
on 2 cores) is most of a step at the demo's size, so the count of tasks a step submits is what to keep low."""
import collections

import dask
import numpy as np
import pytest
from dask._task_spec import DataNode, convert_legacy_graph
from dask.utils import key_split

import daskgrad as dg
from daskgrad import nn, optim

from conftest import example

torch = pytest.importorskip("torch")


def step_tasks(arrays):
    """The submitted graph's tasks, counted by name: what is in memory (data, a slot) is not one."""
    graph = convert_legacy_graph({k: v for a in arrays for k, v in a.dask.items()})
    return collections.Counter(key_split(k) for k, v in graph.items() if not isinstance(v, DataNode))


def test_a_step_of_the_demo_is_26_tasks_and_its_losses_are_torch_s():
    # examples/demo.py's loop body (benchmarks' demo_step, quick): minibatches of 4 chunks of 1,000 rows.
    # A step's tasks: Adam's update of the 4 parameters from the step before (3 each: the two moments and
    # the parameter, each kept), then per chunk the count of valid targets and the forward and VJP (2 x 4),
    # the count's sum, the loss's and the 4 gradients' sums.  It was 38: the VJP's seed (g / count) was a task
    # per chunk, the chunk's rows kept were handed on from the count's task (a getitem task per chunk), the
    # weights' transposes (W.T forward, (W.T).T backward) were tasks and the one-hot's class indices a task.
    demo = example("demo")
    features, classes, rows, chunk_rows, batch = 20, 3, 12_000, 1_000, 4_000
    X, y = demo.make_data(rows, features, classes, chunk_rows)
    Xn, yn = X.numpy(), y.numpy()
    dg.manual_seed(1)
    model = demo.model_for(features, classes)
    tmodel = torch.nn.Sequential(torch.nn.Linear(features, 64), torch.nn.ReLU(), torch.nn.Linear(64, classes))
    tmodel.load_state_dict({k: torch.from_numpy(np.array(v.detach().numpy())) for k, v in model.state_dict().items()})
    ours = model, nn.CrossEntropyLoss(), optim.Adam(model.parameters(), lr=0.01)
    theirs = tmodel, torch.nn.CrossEntropyLoss(), torch.optim.Adam(tmodel.parameters(), lr=0.01)

    def step(net, criterion, optimizer, xb, yb):
        loss = criterion(net(xb), yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()

    losses, tasks = [], []
    with dask.config.set(scheduler="threads"):
        for i in range(6):
            rows_i = slice(i % 3 * batch, (i % 3 + 1) * batch)
            with dg.testing.submissions(graphs=True) as seen:
                losses.append(step(*ours, X[rows_i], y[rows_i]))
            assert sum(seen.values()) == 1
            tasks.append(step_tasks(seen.graphs[0]))
    expected = [step(*theirs, torch.from_numpy(Xn[r]), torch.from_numpy(yn[r]))
                for r in (slice(i % 3 * batch, (i % 3 + 1) * batch) for i in range(6))]
    np.testing.assert_allclose(losses, expected, rtol=1e-5)
    for counts in tasks[2:]:  # (from the third step: Adam's state exists, the update is in the step)
        assert sum(counts.values()) == 26, counts
        assert counts["lerp"] == counts["addcmul"] == counts["addcdiv"] == 4, counts
        assert "transpose" not in counts and "getitem" not in counts, counts
