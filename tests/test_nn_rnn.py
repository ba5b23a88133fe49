"""torch.nn's recurrent layers (RNNCell, LSTMCell, GRUCell, RNN, LSTM, GRU) against torch (installed): with torch's
weights copied in, float64 outputs, final states and the gradients of the input, the initial state and every
parameter equal torch's at rtol 1e-12, batched and unbatched, inputs in one chunk, even and uneven chunks along
every axis; parameter names, shapes and initialisation bound, reprs, dropout between layers, and torch's errors."""
import warnings

import numpy as np
import pytest

import daskgrad as dg
from daskgrad import nn

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(0)
CHUNKINGS = {"one": lambda shape: -1, "even": lambda shape: tuple(max(1, n // 2) for n in shape),
             "uneven": lambda shape: tuple((1, n - 1) if n > 1 else (1,) for n in shape)}


def _pair(name, *args, **kwargs):
    """torch's module and ours (float64), with torch's parameters copied into ours."""
    theirs = getattr(torch.nn, name)(*args, **kwargs).double()
    ours = getattr(nn, name)(*args, **kwargs).double()
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    return ours, theirs


def _leaves(shape, chunking):
    a = RNG.standard_normal(shape)
    return dg.from_array(a, chunks=CHUNKINGS[chunking](shape), requires_grad=True), torch.tensor(a, requires_grad=True)


def _flat(out):
    return [out] if isinstance(out, (dg.Tensor, torch.Tensor)) else [t for o in out for t in _flat(o)]


def _same_values_and_gradients(ours, theirs, args):
    """Both modules on ``args`` ((ours, torch's) leaf pairs, or a tuple of pairs for LSTM's state), both
    backward with the same random cotangents: outputs, states, and every gradient in one submission, compared."""
    pairs = [p for a in args for p in (a if isinstance(a[0], tuple) else [a])]
    call = [tuple(d for d, _ in a) if isinstance(a[0], tuple) else a[0] for a in args]
    d_out, t_out = _flat(ours(*call)), _flat(theirs(*[tuple(t for _, t in a) if isinstance(a[0], tuple) else a[1]
                                                      for a in args]))
    assert [tuple(d.shape) for d in d_out] == [tuple(t.shape) for t in t_out]
    ws = [RNG.standard_normal(tuple(t.shape)) for t in t_out]
    sum((d * dg.from_array(w)).sum() for d, w in zip(d_out, ws)).backward()
    sum((t * torch.tensor(w)).sum() for t, w in zip(t_out, ws)).backward()
    d_params = dict(ours.named_parameters())
    names = [k for k, _ in theirs.named_parameters()]
    assert names == list(d_params)
    got = dg.compute(*[d.detach() for d in d_out], *[d.grad for d, _ in pairs], *[d_params[k].grad for k in names])
    want = t_out + [t.grad for _, t in pairs] + [p.grad for _, p in theirs.named_parameters()]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w.detach().numpy(), rtol=1e-12, atol=1e-15)


CELLS = [("RNNCell", {}), ("RNNCell", {"nonlinearity": "relu", "bias": False}), ("LSTMCell", {}),
         ("GRUCell", {}), ("GRUCell", {"bias": False})]


@pytest.mark.parametrize("chunking", list(CHUNKINGS))
@pytest.mark.parametrize("name,kwargs", CELLS, ids=[f"{n}-{k}" if k else n for n, k in CELLS])
def test_cell_values_and_gradients_are_torch_s(name, kwargs, chunking):
    ours, theirs = _pair(name, 3, 4, **kwargs)
    x = _leaves((5, 3), chunking)
    hx = (_leaves((5, 4), chunking), _leaves((5, 4), chunking)) if name == "LSTMCell" else _leaves((5, 4), chunking)
    _same_values_and_gradients(ours, theirs, [x, hx])


@pytest.mark.parametrize("name,kwargs", CELLS, ids=[f"{n}-{k}" if k else n for n, k in CELLS])
def test_cell_on_unbatched_input_and_without_a_state_is_torch_s(name, kwargs):
    ours, theirs = _pair(name, 3, 4, **kwargs)
    _same_values_and_gradients(ours, theirs, [_leaves((3,), "uneven")])
    hx = (_leaves((4,), "even"), _leaves((4,), "one")) if name == "LSTMCell" else _leaves((4,), "even")
    _same_values_and_gradients(ours, theirs, [_leaves((3,), "even"), hx])


# (module, constructor keywords, chunking): every option in some case, each chunking in some case
SEQUENCES = [("RNN", {"num_layers": 2, "bidirectional": True}, "uneven"),
             ("RNN", {"nonlinearity": "relu", "bias": False, "batch_first": True}, "even"),
             ("GRU", {"num_layers": 2, "bidirectional": True, "batch_first": True}, "even"),
             ("GRU", {"bias": False}, "one"),
             ("LSTM", {"num_layers": 2, "bidirectional": True, "proj_size": 2}, "uneven"),
             ("LSTM", {"bias": False, "batch_first": True}, "even"),
             ("LSTM", {"num_layers": 2}, "one")]


def _state(name, kwargs, batch, chunking):
    layers = kwargs.get("num_layers", 1) * (2 if kwargs.get("bidirectional") else 1)
    h = _leaves((layers, *batch, kwargs.get("proj_size") or 4), chunking)
    return (h, _leaves((layers, *batch, 4), chunking)) if name == "LSTM" else h


@pytest.mark.parametrize("name,kwargs,chunking", SEQUENCES, ids=[f"{n}-{k}-{c}" for n, k, c in SEQUENCES])
def test_sequence_values_and_gradients_are_torch_s(name, kwargs, chunking):
    ours, theirs = _pair(name, 3, 4, **kwargs)
    x = _leaves((2, 3, 3) if kwargs.get("batch_first") else (3, 2, 3), chunking)
    _same_values_and_gradients(ours, theirs, [x, _state(name, kwargs, (2,), chunking)])


UNBATCHED = [(*SEQUENCES[1], False), (*SEQUENCES[3], True), (*SEQUENCES[4], True), (*SEQUENCES[5], False)]


@pytest.mark.parametrize("name,kwargs,chunking,state", UNBATCHED,
                         ids=[f"{n}-{k}-{'state' if s else 'zeros'}" for n, k, _, s in UNBATCHED])
def test_sequence_on_unbatched_input_is_torch_s(name, kwargs, chunking, state):
    ours, theirs = _pair(name, 3, 4, **kwargs)
    x = _leaves((2, 3), chunking)
    _same_values_and_gradients(ours, theirs, [x, _state(name, kwargs, (), chunking)] if state else [x])


def test_dropout_acts_between_layers_while_training_only():
    """p=1 zeroes the first layer's output (deterministic: torch's too); eval ignores dropout; p=0.5 while
    training changes the output."""
    ours, theirs = _pair("LSTM", 3, 4, num_layers=2, dropout=1.0)
    _same_values_and_gradients(ours, theirs, [_leaves((2, 2, 3), "even")])
    ours.dropout = theirs.dropout = 0.5
    ours.eval(), theirs.eval()
    _same_values_and_gradients(ours, theirs, [_leaves((2, 2, 3), "uneven")])
    x = dg.from_array(RNG.standard_normal((2, 2, 3)), chunks=2)
    with dg.no_grad():
        assert not np.allclose(ours.train()(x)[0].numpy(), ours.eval()(x)[0].numpy())


@pytest.mark.parametrize("name,kwargs", [("RNNCell", {}), ("LSTMCell", {"bias": False}), ("GRUCell", {}),
                                         ("RNN", {"num_layers": 2, "bidirectional": True, "nonlinearity": "relu"}),
                                         ("GRU", {"bias": False, "batch_first": True}),
                                         ("LSTM", {"num_layers": 3, "bidirectional": True, "proj_size": 2})])
def test_parameter_names_shapes_initialisation_and_repr_are_torch_s(name, kwargs):
    ours, theirs = getattr(nn, name)(3, 4, **kwargs), getattr(torch.nn, name)(3, 4, **kwargs)
    assert [(k, tuple(p.shape)) for k, p in ours.named_parameters()] == \
        [(k, tuple(p.shape)) for k, p in theirs.named_parameters()]
    assert all(p.dtype == np.float32 for p in ours.parameters())
    values = np.concatenate([p.detach().numpy().ravel() for p in ours.parameters()])
    assert np.abs(values).max() <= 0.5 and np.abs(values).max() > 0.4  # U(-1/sqrt(4), 1/sqrt(4))
    assert repr(ours) == repr(theirs)
    if name in ("RNN", "GRU", "LSTM"):
        assert [[tuple(p.shape) for p in ps] for ps in ours.all_weights] == \
            [[tuple(p.shape) for p in ps] for ps in theirs.all_weights]


def test_repr_shows_the_options_as_torch_s():
    for name, kwargs in [("RNNCell", {"nonlinearity": "relu", "bias": False}), ("LSTM", {"dropout": 0.5,
                                                                                          "num_layers": 2}),
                         ("GRU", {"batch_first": True, "bidirectional": True})]:
        assert repr(getattr(nn, name)(3, 4, **kwargs)) == repr(getattr(torch.nn, name)(3, 4, **kwargs))


def _error(f):
    try:
        f()
    except Exception as e:  # noqa: BLE001
        return type(e), str(e)
    return None


BAD_CALLS = [
    ("RNNCell", (3, 4), lambda m: [m.zeros(2, 5)]),
    ("RNNCell", (3, 4), lambda m: [m.zeros(2, 3), m.zeros(5, 4)]),
    ("RNNCell", (3, 4), lambda m: [m.zeros(2, 3), m.zeros(2, 6)]),
    ("RNNCell", (3, 4), lambda m: [m.zeros(2, 2, 3)]),
    ("GRUCell", (3, 4), lambda m: [m.zeros(2, 3), m.zeros(1, 2, 4)]),
    ("LSTMCell", (3, 4), lambda m: [m.zeros(2, 3), (m.zeros(2, 4), m.zeros(2, 5))]),
    ("LSTMCell", (3, 4), lambda m: [m.zeros(2, 3), (m.zeros(2, 4), m.zeros(1, 2, 4))]),
    ("RNN", (3, 4), lambda m: [m.zeros(5, 2, 2)]),
    ("RNN", (3, 4), lambda m: [m.zeros(5, 2, 3, 1)]),
    ("RNN", (3, 4), lambda m: [m.zeros(5, 2, 3), m.zeros(1, 3, 4)]),
    ("RNN", (3, 4), lambda m: [m.zeros(5, 3), m.zeros(1, 1, 4)]),
    ("GRU", (3, 4), lambda m: [m.zeros(5, 2, 3), m.zeros(2, 4)]),
    ("GRU", (3, 4), lambda m: [m.zeros(5, 2, 3, dtype=m.float32)]),
    ("LSTM", (3, 4), lambda m: [m.zeros(5, 2, 3), (m.zeros(1, 2, 4), m.zeros(2, 2, 4))]),
    ("LSTM", (3, 4), lambda m: [m.zeros(5, 3), (m.zeros(1, 4), m.zeros(1, 1, 4))]),
    ("LSTM", (3, 4), lambda m: [m.zeros(5, 2, 3), (m.zeros(1, 2, 3), m.zeros(1, 2, 4))]),
]


@pytest.mark.parametrize("name,args,inputs", BAD_CALLS, ids=[f"{c[0]}-{i}" for i, c in enumerate(BAD_CALLS)])
def test_bad_input_sizes_raise_torch_s_errors(name, args, inputs):
    ours, theirs = getattr(nn, name)(*args).double(), getattr(torch.nn, name)(*args).double()
    mine = _error(lambda: ours(*inputs(dg)))
    assert mine is not None and mine == _error(lambda: theirs(*inputs(torch)))


@pytest.mark.parametrize("name,args,kwargs", [
    ("RNN", (3, 4), {"nonlinearity": "sigmoid"}), ("GRU", (3, 4), {"proj_size": 2}),
    ("LSTM", (3, 4), {"proj_size": 4}), ("LSTM", (3, 4), {"proj_size": -1}), ("LSTM", (3, 0), {}),
    ("LSTM", (3, 4), {"num_layers": 0}), ("LSTM", (3.0, 4), {}), ("GRU", (3, 4), {"dropout": 1.5}),
    ("GRU", (3, 4), {"bias": 1}), ("RNN", (3, 4), {"batch_first": None})])
def test_bad_arguments_raise_torch_s_errors(name, args, kwargs):
    mine = _error(lambda: getattr(nn, name)(*args, **kwargs))
    assert mine is not None and mine == _error(lambda: getattr(torch.nn, name)(*args, **kwargs))


def test_dropout_on_one_layer_warns_as_torch():
    with warnings.catch_warnings(record=True) as ours:
        warnings.simplefilter("always")
        nn.GRU(3, 4, dropout=0.5)
    with warnings.catch_warnings(record=True) as theirs:
        warnings.simplefilter("always")
        torch.nn.GRU(3, 4, dropout=0.5)
    assert [str(w.message) for w in ours] == [str(w.message) for w in theirs]
    assert ours[0].filename == __file__
