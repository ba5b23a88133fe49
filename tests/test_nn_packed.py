"""torch.nn.utils.rnn's packing (PackedSequence, pack_padded_sequence, pad_packed_sequence, pack_sequence,
unpack_sequence) and RNN, LSTM and GRU over packed input, against torch (installed): float64 values and the
gradients of the input, the initial states and every parameter equal torch's at rtol 1e-10, with the batch axis
in one chunk, even and uneven chunks, sorted and unsorted lengths, batch_first, and torch's errors."""
import numpy as np
import pytest

import daskgrad as dg
from daskgrad import nn
from daskgrad.nn.utils import rnn

torch = pytest.importorskip("torch")
trnn = torch.nn.utils.rnn

RNG = np.random.default_rng(0)
CHUNKINGS = {"one": -1, "even": 2, "uneven": (1, 3)}
LENGTHS = {True: [4, 3, 3, 1], False: [2, 4, 1, 3]}


def _padded(batch_first, chunking, trailing=(3,)):
    """A (4 steps, 4 sequences, *trailing) leaf, ours (the batch axis chunked as named) and torch's."""
    shape = (4, 4) + trailing
    a = RNG.standard_normal(shape)
    chunks = [-1] * len(shape)
    chunks[0 if batch_first else 1] = CHUNKINGS[chunking]
    if batch_first:
        a = a.swapaxes(0, 1)
    return dg.from_array(a, chunks=tuple(chunks), requires_grad=True), torch.tensor(a, requires_grad=True)


def _compare(ours, theirs, leaves):
    """Outputs, then the gradients of ``leaves`` after both backward with the same random cotangents."""
    ws = [RNG.standard_normal(tuple(t.shape)) for t in theirs]
    sum((d * dg.from_array(w)).sum() for d, w in zip(ours, ws)).backward()
    sum((t * torch.tensor(w)).sum() for t, w in zip(theirs, ws)).backward()
    got = dg.compute(*[d.detach() for d in ours], *[d.grad for d, _ in leaves])
    want = [t.detach() for t in theirs] + [t.grad for _, t in leaves]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-10, atol=1e-14)


def _same_packed(ours, theirs):
    assert ours.batch_sizes.tolist() == theirs.batch_sizes.tolist()
    for o, t in ((ours.sorted_indices, theirs.sorted_indices), (ours.unsorted_indices, theirs.unsorted_indices)):
        assert (o is None) == (t is None) and (o is None or o.tolist() == t.tolist())


@pytest.mark.parametrize("chunking", CHUNKINGS)
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("enforce_sorted", [True, False])
def test_packing_then_padding_gives_torch_s_values_and_gradients(chunking, batch_first, enforce_sorted):
    ours, theirs = _padded(batch_first, chunking)
    lengths = LENGTHS[enforce_sorted]
    d = rnn.pack_padded_sequence(ours, lengths, batch_first, enforce_sorted)
    t = trnn.pack_padded_sequence(theirs, lengths, batch_first, enforce_sorted)
    _same_packed(d, t)
    d_pad, d_len = rnn.pad_packed_sequence(d, batch_first, -2.5, total_length=6)
    t_pad, t_len = trnn.pad_packed_sequence(t, batch_first, -2.5, total_length=6)
    assert d_len.tolist() == t_len.tolist() and d_len.dtype == np.int64
    _compare([d.data, d_pad], [t.data, t_pad], [(ours, theirs)])


@pytest.mark.parametrize("enforce_sorted", [True, False])
def test_pack_sequence_and_unpack_sequence_are_torch_s(enforce_sorted):
    lengths = LENGTHS[enforce_sorted]
    arrays = [RNG.standard_normal((n, 2)) for n in lengths]
    leaves = [(dg.from_array(a, chunks=1, requires_grad=True), torch.tensor(a, requires_grad=True)) for a in arrays]
    d = rnn.pack_sequence([o for o, _ in leaves], enforce_sorted)
    t = trnn.pack_sequence([t for _, t in leaves], enforce_sorted)
    _same_packed(d, t)
    d_seqs, t_seqs = rnn.unpack_sequence(d), trnn.unpack_sequence(t)
    _compare([d.data] + d_seqs, [t.data] + t_seqs, leaves)


def test_lengths_given_as_a_tensor_are_read_as_torch_reads_them():
    ours, theirs = _padded(False, "even", ())
    d = rnn.pack_padded_sequence(ours, dg.tensor([3.9, 2.0, 2.0, 1.0]))
    t = trnn.pack_padded_sequence(theirs, torch.tensor([3.9, 2.0, 2.0, 1.0]))
    _same_packed(d, t)
    np.testing.assert_array_equal(d.data.detach().numpy(), t.data.detach().numpy())


def test_packed_sequence_conversions_and_construction_are_torch_s():
    a = RNG.standard_normal((4, 3))
    d = rnn.pack_padded_sequence(dg.from_array(a), [4, 2, 1], enforce_sorted=False)
    t = trnn.pack_padded_sequence(torch.tensor(a), [4, 2, 1], enforce_sorted=False)
    assert d.to(dg.float64) is d and t.to(torch.float64) is t
    assert d.float().data.dtype == np.float32 and d.float().sorted_indices.tolist() == [0, 1, 2]
    assert d.is_cuda is t.is_cuda is False
    assert isinstance(d, tuple) and d._fields == t._fields
    assert rnn.PackedSequence((d.data, d.batch_sizes)).batch_sizes is d.batch_sizes
    assert rnn.PackedSequence(d.data, d.batch_sizes, dg.tensor([2, 0, 1])).unsorted_indices.tolist() == \
        trnn.PackedSequence(t.data, t.batch_sizes, torch.tensor([2, 0, 1])).unsorted_indices.tolist()


def _errors(call):
    """The exception ``call`` raises with torch's module and with ours: (type, text) each."""
    out = []
    for m, new in ((torch, torch.tensor), (dg, dg.tensor)):
        with pytest.raises(Exception) as info:
            call(m.nn.utils.rnn, new)
        out.append((type(info.value), str(info.value)))
    return out


@pytest.mark.parametrize("call", [
    lambda r, new: r.pack_padded_sequence(new(np.ones((4, 3, 2))), [2, 3, 1]),
    lambda r, new: r.pack_padded_sequence(new(np.ones((4, 3, 2))), [3, 2, 0]),
    lambda r, new: r.pack_padded_sequence(new(np.ones((4, 3, 2))), [3, -1, 2], enforce_sorted=False),
    lambda r, new: r.pack_padded_sequence(new(np.ones((4, 3, 2))), [3, 2]),
    lambda r, new: r.pack_padded_sequence(new(np.ones((4, 3, 2))), [3, 2, 1, 1]),
    lambda r, new: r.pack_padded_sequence(new(np.ones((4, 3, 2))), [2, 3, 1, 1], enforce_sorted=False),
    lambda r, new: r.pack_padded_sequence(new(np.ones((4, 3, 2))), [[3, 2, 1]]),
    lambda r, new: r.pack_padded_sequence(new(np.ones((4, 0, 2))), []),
    lambda r, new: r.pack_padded_sequence(new(np.ones(4)), [3]),
    lambda r, new: r.pad_packed_sequence(r.pack_sequence([new([1.0, 2.0, 3.0])]), total_length=2),
    lambda r, new: r.pack_sequence([]),
    lambda r, new: r.pack_sequence([new([1.0]), new([1.0, 2.0])]),
    lambda r, new: r.pack_sequence([new(np.ones((2, 2))), new(np.ones((2, 3)))]),
    lambda r, new: r.PackedSequence(new([1.0])),
], ids=["unsorted", "zero-length", "negative-length", "too-few-lengths", "too-many-lengths",
        "too-many-unsorted-lengths", "2-D-lengths", "empty", "1-D-input", "short-total-length", "no-sequences",
        "unsorted-sequences", "mismatched-features", "no-batch-sizes"])
def test_packing_errors_are_torch_s(call):
    theirs, ours = _errors(call)
    assert ours == theirs


# ---------------------------------------------------------------------------------------- packed RNNs
def _pair(name, **kwargs):
    """torch's module and ours (float64, input_size 3, hidden_size 4), with torch's parameters copied in."""
    theirs = getattr(torch.nn, name)(3, 4, **kwargs).double()
    ours = getattr(nn, name)(3, 4, **kwargs).double()
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    return ours, theirs


def _states(name, kwargs, chunking):
    """Initial state leaves (ours, torch's), one or LSTM's two, the batch axis chunked as named."""
    count = (2 if kwargs.get("bidirectional") else 1) * kwargs.get("num_layers", 1)
    sizes = [kwargs.get("proj_size") or 4] + ([4] if name == "LSTM" else [])
    leaves = []
    for size in sizes:
        a = RNG.standard_normal((count, 4, size))
        leaves.append((dg.from_array(a, chunks=(-1, CHUNKINGS[chunking], -1), requires_grad=True),
                       torch.tensor(a, requires_grad=True)))
    return leaves


# each module once or twice, so that every chunking of the batch axis, sorted and unsorted lengths and
# batch_first (the uneven cases) meet every feature
CASES = [("RNN", {}, "one", True), ("RNN", {}, "uneven", False),
         ("RNN", {"nonlinearity": "relu", "bias": False}, "even", False),
         ("GRU", {}, "even", True), ("GRU", {}, "uneven", False), ("LSTM", {}, "one", False),
         ("RNN", {"bidirectional": True, "num_layers": 2}, "uneven", True),
         ("GRU", {"bidirectional": True}, "even", False),
         ("LSTM", {"bidirectional": True, "num_layers": 2}, "uneven", False),
         ("LSTM", {"proj_size": 2, "bidirectional": True}, "even", False)]


@pytest.mark.parametrize("name,kwargs,chunking,enforce_sorted", CASES, ids=[
    "-".join([name] + [f"{k}={w}" for k, w in kwargs.items()] + [chunking, "sorted" if s else "unsorted"])
    for name, kwargs, chunking, s in CASES])
def test_a_packed_batch_gives_torch_s_outputs_final_states_and_gradients(name, kwargs, chunking, enforce_sorted):
    batch_first = chunking == "uneven"
    ours_module, theirs_module = _pair(name, batch_first=batch_first, **kwargs)
    ours, theirs = _padded(batch_first, chunking)
    lengths = LENGTHS[enforce_sorted]
    states = _states(name, kwargs, chunking) if chunking != "one" else []
    d_in = rnn.pack_padded_sequence(ours, lengths, batch_first, enforce_sorted)
    t_in = trnn.pack_padded_sequence(theirs, lengths, batch_first, enforce_sorted)
    d_hx = None if not states else states[0][0] if name != "LSTM" else tuple(d for d, _ in states)
    t_hx = None if not states else states[0][1] if name != "LSTM" else tuple(t for _, t in states)
    d_out, d_hidden = ours_module(d_in, d_hx)
    t_out, t_hidden = theirs_module(t_in, t_hx)
    assert isinstance(d_out, rnn.PackedSequence)
    _same_packed(d_out, t_out)
    d_pad, _ = rnn.pad_packed_sequence(d_out, batch_first)
    t_pad, _ = trnn.pad_packed_sequence(t_out, batch_first)
    d_hidden = list(d_hidden) if name == "LSTM" else [d_hidden]
    t_hidden = list(t_hidden) if name == "LSTM" else [t_hidden]
    params = [(p, q) for (_, p), (_, q) in zip(ours_module.named_parameters(), theirs_module.named_parameters())]
    _compare([d_pad] + d_hidden, [t_pad] + t_hidden, [(ours, theirs)] + states + params)


@pytest.mark.parametrize("call", [
    lambda m, new: m.nn.GRU(3, 4).double()(m.nn.utils.rnn.pack_sequence([new(np.ones((2, 5)))])),
    lambda m, new: m.nn.RNN(3, 4).double()(m.nn.utils.rnn.pack_sequence([new(np.ones((2, 3)))]),
                                           new(np.ones((1, 2, 4)))),
    lambda m, new: m.nn.RNN(3, 4)(m.nn.utils.rnn.pack_sequence([new(np.ones((2, 3)))])),
    lambda m, new: m.nn.LSTM(3, 4).double()(m.nn.utils.rnn.pack_sequence(
        [new(np.ones((2, 3))), new(np.ones((3, 3))), new(np.ones((1, 3)))], enforce_sorted=False),
        (new(np.ones((1, 2, 4))), new(np.ones((1, 2, 4))))),
], ids=["input-size", "hidden-batch", "dtype", "unsorted-hidden-batch"])
def test_packed_rnn_errors_are_torch_s(call):
    theirs, ours = [], []
    for m, new, out in ((torch, torch.tensor, theirs), (dg, dg.tensor, ours)):
        with pytest.raises(Exception) as info:
            call(m, new)
        out.append((type(info.value), str(info.value).replace("torch.", "")))
    assert ours == theirs
