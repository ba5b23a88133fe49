"""torch.nn's last pieces against torch 2.13 in float64: ``nn.LinearCrossEntropyLoss`` and
``F.linear_cross_entropy`` (values and gradients over one, even and uneven chunkings of the batch, state_dict,
repr, errors), the deprecated ``nn.Container`` (its warning and children) and ``PackedSequence.pin_memory``."""
import warnings

import numpy as np
import pytest

import daskgrad as dg
import daskgrad.nn as nn
import daskgrad.nn.functional as F

torch = pytest.importorskip("torch")

CHUNKINGS = {"one": 6, "even": 3, "uneven": 4}  # of a batch of 6


def _from(x, chunking):
    return dg.from_array(x, chunks=(CHUNKINGS[chunking],) + x.shape[1:])


def _close(ours, theirs):
    ours = ours.detach() if isinstance(ours, dg.Tensor) else ours
    np.testing.assert_allclose(np.asarray(ours), theirs.detach().numpy(), rtol=1e-10, atol=1e-12)


def _raises_as_torch(ours, theirs):
    with pytest.raises(Exception) as want:
        theirs()
    with pytest.raises(want.type) as got:
        ours()
    assert str(got.value) == str(want.value)


def _load(ours, theirs):
    ours.load_state_dict({k: v.detach().numpy().copy() for k, v in theirs.state_dict().items()})


CASES = {  # name: (module keywords, target maker (rng, batch) -> target)
    "indices": ({}, lambda rng: rng.integers(0, 5, 6)),
    "indices-bias-weight-smoothing": ({"bias": True, "weight": np.linspace(0.5, 2.0, 5), "label_smoothing": 0.2,
                                       "ignore_index": 2}, lambda rng: rng.integers(0, 5, 6)),
    "probabilities-sum": ({"reduction": "sum", "bias": True},
                          lambda rng: (lambda p: p / p.sum(1, keepdims=True))(rng.random((6, 5)))),
    "k-dimensional-none": ({"out_features": (2, 3), "bias": True, "reduction": "none"},
                           lambda rng: rng.integers(0, 5, (6, 2, 3))),
    "k-dimensional-probabilities": ({"out_features": (2,)},
                                    lambda rng: (lambda p: p / p.sum(1, keepdims=True))(rng.random((6, 5, 2)))),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("chunking", CHUNKINGS)
def test_linear_cross_entropy_loss_is_torchs(case, chunking):
    kwargs, make_target = CASES[case]
    rng = np.random.default_rng(0)
    x, target = rng.standard_normal((6, 4)), make_target(rng)
    tkw = dict(kwargs, weight=torch.tensor(kwargs["weight"])) if "weight" in kwargs else kwargs
    dkw = dict(kwargs, weight=dg.tensor(kwargs["weight"])) if "weight" in kwargs else kwargs
    t = torch.nn.LinearCrossEntropyLoss(4, 5, dtype=torch.float64, **tkw)
    d = nn.LinearCrossEntropyLoss(4, 5, dtype="float64", **dkw)
    assert repr(d) == repr(t)
    assert list(d.state_dict()) == list(t.state_dict())
    assert [(k, tuple(v.shape)) for k, v in d.state_dict().items()] == \
        [(k, tuple(v.shape)) for k, v in t.state_dict().items()]
    _load(d, t)
    tx = torch.tensor(x, requires_grad=True)
    dx = _from(x, chunking).requires_grad_(True)
    lt, ld = t(tx, torch.tensor(target)), d(dx, dg.tensor(target))
    _close(ld, lt)
    cot = rng.standard_normal(tuple(lt.shape))
    (lt * torch.tensor(cot)).sum().backward()
    (ld * dg.tensor(cot)).sum().backward()
    _close(dx.grad, tx.grad)
    _close(d.linear.weight.grad, t.linear.weight.grad)
    if kwargs.get("bias"):
        _close(d.linear.bias.grad, t.linear.bias.grad)


def test_linear_cross_entropy_of_one_sample_is_torchs():
    rng = np.random.default_rng(1)
    x, w, b = rng.standard_normal(4), rng.standard_normal((5, 4)), rng.standard_normal(5)
    _close(F.linear_cross_entropy(dg.tensor(x), dg.tensor(w), dg.tensor(3), linear_bias=dg.tensor(b)),
           torch.nn.functional.linear_cross_entropy(torch.tensor(x), torch.tensor(w), torch.tensor(3),
                                                    linear_bias=torch.tensor(b)))


def test_linear_cross_entropy_errors_are_torchs():
    def both(fn):
        _raises_as_torch(lambda: fn(dg), lambda: fn(torch))

    def call(x, w, t, **kw):
        return lambda m: m.nn.functional.linear_cross_entropy(m.ones(*x, dtype=m.float64),
                                                              m.ones(*w, dtype=m.float64), t(m), **kw)
    both(call((2, 3, 4), (5, 4), lambda m: m.zeros(2, dtype=m.int64)))
    both(call((2, 4), (5,), lambda m: m.zeros(2, dtype=m.int64)))
    both(call((2, 3), (5, 4), lambda m: m.zeros(2, dtype=m.int64)))
    both(call((4,), (5, 2, 4), lambda m: m.zeros((), dtype=m.int64)))
    both(call((2, 4), (5, 4), lambda m: m.ones(2, 5, dtype=m.float64), ignore_index=1))
    both(lambda m: m.nn.functional.linear_cross_entropy(m.ones(2, 4), m.ones(5, 4), m.zeros(2, dtype=m.int64),
                                                        linear_bias=m.ones(4)))
    both(lambda m: m.nn.LinearCrossEntropyLoss(4, 5, weight=m.ones(4)))
    both(lambda m: m.nn.LinearCrossEntropyLoss(4, 5, label_smoothing=1.5))
    # torch's chunking options change its memory, not the loss: daskgrad keeps them and computes the same loss
    x, w, y = np.random.default_rng(0).standard_normal((6, 4)), np.ones((5, 4)), np.array([0, 1, 2, 3, 4, 0])
    chunked = nn.LinearCrossEntropyLoss(4, 5, dtype="float64", options=object())
    assert chunked.options is not None
    chunked.load_state_dict({"linear.weight": w})
    np.testing.assert_allclose(chunked(dg.from_array(x, chunks=(3, 4)), dg.from_array(y)).item(),
                               torch.nn.functional.cross_entropy(torch.tensor(x) @ torch.tensor(w).T,
                                                                 torch.tensor(y)).item(), rtol=1e-12)


def test_container_warns_as_torch_and_registers_its_children():
    with warnings.catch_warnings(record=True) as want:
        warnings.simplefilter("always")
        t = torch.nn.Container(a=torch.nn.Linear(2, 3), b=torch.nn.ReLU())
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        d = nn.Container(a=nn.Linear(2, 3), b=nn.ReLU())
    assert [(w.category, str(w.message)) for w in got] == [(w.category, str(w.message)) for w in want]
    assert got[0].filename == __file__  # the caller's line, as torch's
    assert repr(d) == repr(t)
    assert list(d.state_dict()) == list(t.state_dict())

    def subclass_then_make(m):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")

            class Mine(m.nn.Container):
                pass
            Mine()
        return [str(w.message) for w in caught]
    assert subclass_then_make(dg) == subclass_then_make(torch)


def test_pin_memory_gives_an_equal_packed_sequence_and_pins_nothing():
    seqs = [np.arange(6.0).reshape(3, 2), np.ones((2, 2))]
    d = nn.utils.rnn.pack_sequence([dg.tensor(s) for s in seqs], enforce_sorted=False)
    pinned = d.pin_memory()
    assert type(pinned) is type(d) and pinned is not d
    for ours, theirs in zip(pinned, d):
        assert ours is theirs
    assert d.is_pinned() is False and pinned.is_pinned() is False
    assert torch.nn.utils.rnn.pack_sequence([torch.tensor(s) for s in seqs]).is_pinned() is False
