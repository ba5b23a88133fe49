"""A retained graph on a cluster: its saved values are results of the backward's submission, computed
from tasks chunk fusion made; the same values asked for again by a submission that fuses otherwise
take keys of their own (the scheduler logged "Detected different `run_spec`": one key, two tasks)."""
import logging

import numpy as np
import pytest
import torch

import daskgrad as dg


class _Messages(logging.Handler):
    def __init__(self):
        super().__init__(level=logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture
def distributed_log():
    """The messages the ``distributed`` loggers log meanwhile, at WARNING and above."""
    handler = _Messages()
    logger = logging.getLogger("distributed")
    logger.addHandler(handler)
    try:
        yield handler.messages
    finally:
        logger.removeHandler(handler)


def _loss(X, W, extra):
    """A loss of a hidden layer; ``extra``: reading it once more (then fused otherwise)."""
    h = X @ W.T
    h = h - h.mean(0)
    h = h * (h > 0).float()
    loss = (h ** 2).sum() / (h.abs().sum() + 1)
    return loss + h.mean() if extra else loss


def _run(X0, W0, retain):
    """Each loss's backward twice, the first retaining its graph (or once each on two recordings of
    it: ``retain`` False), ``.grad`` accumulating over both losses; the losses and the grads."""
    X = dg.tensor(X0, chunks=((40, 160, 40), 5))
    W = dg.tensor(W0, requires_grad=True)
    got = []
    for _ in range(2):
        for extra in (False, True):
            if retain:
                loss = _loss(X, W, extra)
                loss.backward(retain_graph=True)
                loss.backward()
            else:
                for _ in range(2):
                    loss = _loss(X, W, extra)
                    loss.backward()
            got.append((loss.item(), W.grad.numpy()))
        W.grad = None
    return got


def test_a_retained_graph_then_a_program_fused_otherwise_logs_no_run_spec_warning(client, distributed_log):
    rng = np.random.default_rng(0)
    X0, W0 = rng.standard_normal((240, 5)), rng.standard_normal((5, 5))
    got = _run(X0, W0, retain=True)
    assert not [m for m in distributed_log if "run_spec" in m]
    want = _run(X0, W0, retain=False)
    assert len(got) == len(want) == 4
    for (loss, g), (loss_want, g_want) in zip(got, want):
        assert loss == loss_want
        np.testing.assert_allclose(g, g_want, rtol=1e-12, atol=0)
    # torch, the oracle
    W = torch.tensor(W0, requires_grad=True)
    for extra, (loss, g) in zip((False, True), got):
        t_loss = _loss(torch.tensor(X0), W, extra)
        t_loss.backward(retain_graph=True)
        t_loss.backward()
        np.testing.assert_allclose(loss, t_loss.item(), rtol=1e-12)
        np.testing.assert_allclose(g, W.grad.numpy(), rtol=1e-10)


def test_fusion_names_a_result_array_by_what_its_chunks_read_even_on_a_cycle_through_it():
    from daskgrad._dask.fuse import _new_names

    # ("A", 1) reads a group that reads ("A", 0); r reads ("A", 1); ("B", 0) reads x alone
    reads = {("A", 0): {"x"}, "g": {("A", 0)}, ("A", 1): {"g"}, "r": {("A", 1)}, ("B", 0): {"x"}}
    keys, results = set(reads), {("A", 0), ("A", 1), ("B", 0)}
    names = _new_names(keys, results, reads)
    assert names == _new_names(set(sorted(keys, key=repr, reverse=True)), results, reads)
    assert set(names) == keys and len(set(names.values())) == len(keys)
    assert names[("A", 0)][0] == names[("A", 1)][0] != "A" and names[("A", 0)][1:] == (0,)
    assert names[("B", 0)][0].startswith("B-")
    # a different task under ("A", 1): every key on the cycle and after it is another
    other = _new_names(keys, results, {**reads, ("A", 1): {"g", "x"}})
    assert all(other[k] != names[k] for k in (("A", 0), ("A", 1), "g", "r")) and other[("B", 0)] == names[("B", 0)]
