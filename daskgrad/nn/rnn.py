"""Recurrent layers: ``RNNCell``, ``LSTMCell``, ``GRUCell`` (one step) and ``RNN``, ``LSTM``, ``GRU`` (a
sequence, stacked layers, either direction), torch's parameters (names, shapes, U(-1/sqrt(hidden),
1/sqrt(hidden)) initialisation), arguments, return tuples and errors.

Each step is composed of daskgrad ops as torch's CPU kernels compose theirs (aten's ``RNN.cpp``): the
input's projection ``x @ weight_ih.T + bias_ih`` for the whole sequence at once, then for each step in a
Python loop ``h @ weight_hh.T + bias_hh`` and the gates.  The time axis may be chunked (each step reads
its row).  A ``PackedSequence`` input runs as aten's packed layers: each step on the sequences still
running (longest first), the final states each sequence's own.

>>> lstm = nn.LSTM(4, 8, num_layers=2)
>>> output, (h_n, c_n) = lstm(x)       # x: (seq_len, batch, 4)
"""
from __future__ import annotations

import math
import numbers
import warnings

from .. import ops
from .._tensor import zeros
from . import functional as F
from . import init
from .layers import _check_size, _uniform
from .module import Module
from .utils.rnn import PackedSequence

# ---------------------------------------------------------------------------------------------- steps
# ``gi``: the step's input projection ``x @ w_ih.T + b_ih``; ``h``: the state; torch's ``linear_hh(h) + gi``


def _simple_step(activation):
    def step(gi, h, w_hh, b_hh):
        return activation(F.linear(h, w_hh, b_hh) + gi)
    return step


def _gates(t, n):
    size = t.shape[-1] // n
    return [t[..., k * size:(k + 1) * size] for k in range(n)]


def _lstm_step(gi, state, w_hh, b_hh, w_hr=None):
    """torch's LSTMCell: gates i, f, g, o; ``c' = f * c + i * g``, ``h' = o * tanh(c')`` (then ``@ w_hr.T``)."""
    h, c = state
    i, f, g, o = _gates(F.linear(h, w_hh, b_hh) + gi, 4)
    c = ops.sigmoid(f) * c + ops.sigmoid(i) * ops.tanh(g)
    h = ops.sigmoid(o) * ops.tanh(c)
    return (h if w_hr is None else h @ w_hr.T), c


def _gru_step(gi, h, w_hh, b_hh):
    """torch's GRUCell: ``r, z`` from both projections, ``n = tanh(i_n + r * h_n)``, ``h' = (h - n) * z + n``."""
    i_r, i_z, i_n = _gates(gi, 3)
    h_r, h_z, h_n = _gates(F.linear(h, w_hh, b_hh), 3)
    r, z = ops.sigmoid(h_r + i_r), ops.sigmoid(h_z + i_z)
    n = ops.tanh(i_n + h_n * r)
    return (h - n) * z + n


_STEPS = {"RNN_TANH": _simple_step(ops.tanh), "RNN_RELU": _simple_step(ops.relu), "LSTM": _lstm_step,
          "GRU": _gru_step}


# ---------------------------------------------------------------------------------------------- cells
def _check_cell_input(input, input_size):
    """aten's ``check_rnn_cell_forward_input``."""
    if input.shape[1] != input_size:
        raise RuntimeError(f"input has inconsistent input_size: got {input.shape[1]} expected {input_size}")


def _check_cell_hidden(input, hx, hidden_size, label):
    """aten's ``check_rnn_cell_forward_hidden``."""
    if input.shape[0] != hx.shape[0]:
        raise RuntimeError(f"Input batch size {input.shape[0]} doesn't match hidden{label} batch size "
                           f"{hx.shape[0]}")
    if hx.shape[1] != hidden_size:
        raise RuntimeError(f"hidden{label} has inconsistent hidden_size: got {hx.shape[1]}, expected {hidden_size}")


def _check_dims(name, what, t):
    if t.ndim not in (1, 2):
        raise ValueError(f"{name}: Expected {what} to be 1D or 2D, got {t.ndim}D instead")


class RNNCellBase(Module):
    """What the cells share: ``weight_ih`` (num_chunks * hidden_size, input_size), ``weight_hh``
    (num_chunks * hidden_size, hidden_size), ``bias_ih`` and ``bias_hh`` (or None), U(-k, k), k = 1/sqrt(hidden)."""

    def __init__(self, input_size, hidden_size, bias, num_chunks, device=None, dtype=None):
        super().__init__()
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        _check_size(num_chunks * hidden_size, input_size)
        _check_size(num_chunks * hidden_size, hidden_size)
        k = 1.0 / math.sqrt(hidden_size) if hidden_size > 0 else 0
        self.weight_ih = _uniform((num_chunks * hidden_size, input_size), k, dtype, device)
        self.weight_hh = _uniform((num_chunks * hidden_size, hidden_size), k, dtype, device)
        if bias:
            self.bias_ih = _uniform((num_chunks * hidden_size,), k, dtype, device)
            self.bias_hh = _uniform((num_chunks * hidden_size,), k, dtype, device)
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s

    def reset_parameters(self):
        """Every parameter drawn again from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))."""
        k = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -k, k)

    def _batched(self, name, input, hx, states):
        """torch's dimension checks; the input and the states as a batch (zeros where ``hx`` is None)."""
        _check_dims(name, "input", input)
        for i, h in enumerate(hx if states == 2 and hx is not None else ()):
            _check_dims(name, f"hx[{i}]", h)
        if states == 1 and hx is not None:
            _check_dims(name, "hidden", hx)
        batched = input.ndim == 2
        if not batched:
            input = input.unsqueeze(0)
        if hx is None:
            h = zeros(input.shape[0], self.hidden_size, dtype=input.dtype, chunks=-1, device=input.device)
            hx = h if states == 1 else (h, h)
        elif not batched:
            hx = hx.unsqueeze(0) if states == 1 else (hx[0].unsqueeze(0), hx[1].unsqueeze(0))
        _check_cell_input(input, self.weight_ih.shape[1])
        for i, h in enumerate((hx,) if states == 1 else hx):
            _check_cell_hidden(input, h, self.weight_hh.shape[1], i)
        return batched, input, hx

    def _step(self, mode, input, hx):
        return _STEPS[mode](F.linear(input, self.weight_ih, self.bias_ih), hx, self.weight_hh, self.bias_hh)


class RNNCell(RNNCellBase):
    """``h' = tanh(x @ weight_ih.T + bias_ih + h @ weight_hh.T + bias_hh)`` (or relu), torch's ``nn.RNNCell``."""

    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, num_chunks=1, device=device, dtype=dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None):
        batched, input, hx = self._batched("RNNCell", input, hx, 1)
        if self.nonlinearity not in ("tanh", "relu"):
            raise RuntimeError(f"Unknown nonlinearity: {self.nonlinearity}")
        ret = self._step("RNN_TANH" if self.nonlinearity == "tanh" else "RNN_RELU", input, hx)
        return ret if batched else ret.squeeze(0)


class LSTMCell(RNNCellBase):
    """One LSTM step: ``(h', c')`` from ``x`` and ``(h, c)``, gates (i, f, g, o), torch's ``nn.LSTMCell``."""

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, num_chunks=4, device=device, dtype=dtype)

    def forward(self, input, hx=None):
        batched, input, hx = self._batched("LSTMCell", input, hx, 2)
        h, c = self._step("LSTM", input, hx)
        return (h, c) if batched else (h.squeeze(0), c.squeeze(0))


class GRUCell(RNNCellBase):
    """One GRU step, gates (r, z, n), torch's ``nn.GRUCell``."""

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, num_chunks=3, device=device, dtype=dtype)

    def forward(self, input, hx=None):
        batched, input, hx = self._batched("GRUCell", input, hx, 1)
        ret = self._step("GRU", input, hx)
        return ret if batched else ret.squeeze(0)


# ------------------------------------------------------------------------------------------ sequences
def _check_arguments(input_size, hidden_size, num_layers, bias, batch_first, dropout, proj_size):
    """torch's ``RNNBase`` checks, in its order and words."""
    if not isinstance(dropout, numbers.Number) or not 0 <= dropout <= 1 or isinstance(dropout, bool):
        raise ValueError("dropout should be a number in range [0, 1] representing the probability of an element "
                         "being zeroed")
    if dropout > 0 and num_layers == 1:
        warnings.warn("dropout option adds dropout after all but last recurrent layer, so non-zero dropout expects "
                      f"num_layers greater than 1, but got dropout={dropout} and num_layers={num_layers}",
                      stacklevel=4)
    for name, value, kind in (("bias", bias, bool), ("batch_first", batch_first, bool)):
        if not isinstance(value, kind):
            raise TypeError(f"{name} should be of type bool, got: {type(value).__name__}")
    for name, value in (("input_size", input_size), ("hidden_size", hidden_size)):
        if not isinstance(value, int):
            raise TypeError(f"{name} should be of type int, got: {type(value).__name__}")
        if value <= 0:
            raise ValueError(f"{name} must be greater than zero")
    if num_layers <= 0:
        raise ValueError("num_layers must be greater than zero")
    if proj_size < 0:
        raise ValueError("proj_size should be a positive integer or zero to disable projections")
    if proj_size >= hidden_size:
        raise ValueError("proj_size has to be smaller than hidden_size")


def _direction(step, gi, state, weights, reverse):
    """One layer in one direction over the steps of ``gi`` (time first): the outputs (stacked in time
    order) and the last state."""
    outs = [None] * gi.shape[0]
    for t in (reversed(range(len(outs))) if reverse else range(len(outs))):
        state = step(gi[t], state, *weights)
        outs[t] = state[0] if isinstance(state, tuple) else state
    return ops.stack(outs, 0), state


def _batch(module, input, batch_sizes):
    """The batch size: the first packed step's (read), or the input's batch axis."""
    if batch_sizes is not None:
        return int(batch_sizes.tolist()[0])
    return input.shape[0] if module.batch_first else input.shape[1]


def _permute(hx, indices):
    """``hx`` (a state, or LSTM's pair) in the order of ``indices`` along the batch axis, as torch's
    ``permute_hidden``; an index past the batch raises torch's error before anything is submitted."""
    order = indices.tolist()
    for h in hx if isinstance(hx, tuple) else (hx,):
        bad = [i for i in order if i >= h.shape[1]]
        if bad:
            raise RuntimeError(f"INDICES element is out of DATA bounds, id={bad[0]} axis_dim={h.shape[1]}")
    return tuple(h.index_select(1, indices) for h in hx) if isinstance(hx, tuple) else hx.index_select(1, indices)


def _rows(state, start, stop):
    return tuple(s[start:stop] for s in state) if isinstance(state, tuple) else state[start:stop]


def _join(states):
    if isinstance(states[0], tuple):
        return tuple(ops.concatenate(parts, 0) for parts in zip(*states))
    return ops.concatenate(states, 0)


def _packed_direction(step, gi, state, weights, sizes, reverse):
    """One layer in one direction over packed steps, as aten's packed layers: step ``t`` runs the first
    ``sizes[t]`` rows of the state (the sequences still running, longest first); forward, a sequence's
    final state is its state when it stops; in reverse, a sequence starts from its initial state at its own
    last step.  The packed outputs and the final states (full batch)."""
    offsets = [0]
    for n in sizes:
        offsets.append(offsets[-1] + n)
    outs, first, stopped = [None] * len(sizes), state, []
    if reverse:
        state = _rows(first, 0, sizes[-1]) if sizes[-1] < sizes[0] else first
    for t in (reversed(range(len(sizes))) if reverse else range(len(sizes))):
        rows = (state[0] if isinstance(state, tuple) else state).shape[0]
        if sizes[t] > rows:
            state = _join([state, _rows(first, rows, sizes[t])])
        elif sizes[t] < rows:
            stopped.append(_rows(state, sizes[t], rows))
            state = _rows(state, 0, sizes[t])
        state = step(gi[offsets[t]:offsets[t + 1]], state, *weights)
        outs[t] = state[0] if isinstance(state, tuple) else state
    if stopped:
        state = _join([state] + stopped[::-1])
    return ops.concatenate(outs, 0), state


class RNNBase(Module):
    """What RNN, LSTM and GRU share: per layer and direction ``weight_ih_l{k}{_reverse}``,
    ``weight_hh_l{k}``, ``bias_ih_l{k}``, ``bias_hh_l{k}`` (and LSTM's ``weight_hr_l{k}``), torch's names,
    shapes, order and initialisation; ``forward`` as torch's (time-major unless ``batch_first``; unbatched
    inputs; ``dropout`` between layers while training)."""

    def __init__(self, mode, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, proj_size=0, device=None, dtype=None):
        super().__init__()
        self.mode, self.input_size, self.hidden_size, self.num_layers = mode, input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, float(dropout)
        self.bidirectional, self.proj_size = bidirectional, proj_size
        _check_arguments(input_size, hidden_size, num_layers, bias, batch_first, dropout, proj_size)
        gate_size = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}.get(mode)
        if gate_size is None:
            raise ValueError("Unrecognized RNN mode: " + mode)
        self._flat_weights_names, self._all_weights = [], []
        k, gates = 1.0 / math.sqrt(hidden_size), gate_size * hidden_size
        real_hidden = proj_size if proj_size > 0 else hidden_size
        directions = 2 if bidirectional else 1
        for layer in range(num_layers):
            for suffix in ("", "_reverse")[:directions]:
                shapes = {"weight_ih": (gates, input_size if layer == 0 else real_hidden * directions),
                          "weight_hh": (gates, real_hidden)}
                if bias:
                    shapes.update(bias_ih=(gates,), bias_hh=(gates,))
                if proj_size > 0:
                    shapes["weight_hr"] = (proj_size, hidden_size)
                names = [f"{name}_l{layer}{suffix}" for name in shapes]
                for name, shape in zip(names, shapes.values()):
                    setattr(self, name, _uniform(shape, k, dtype, device))
                self._flat_weights_names.extend(names)
                self._all_weights.append(names)

    @property
    def all_weights(self):
        """The parameters per layer and direction, as torch's ``all_weights``."""
        return [[getattr(self, name) for name in names] for names in self._all_weights]

    @property
    def _flat_weights(self):
        return [getattr(self, name) for name in self._flat_weights_names]

    def reset_parameters(self):
        """Every parameter drawn again from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))."""
        k = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -k, k)

    def flatten_parameters(self):
        """A no-op, as torch's off cuDNN."""

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size != 0:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first is not False:
            s += f", batch_first={self.batch_first}"
        if self.dropout != 0:
            s += f", dropout={self.dropout}"
        if self.bidirectional is not False:
            s += f", bidirectional={self.bidirectional}"
        return s

    # ------------------------------------------------------------------ torch's checks
    def check_input(self, input, batch_sizes=None):
        """torch's: the weights' dtype, three dimensions (two for packed ``data``), ``input_size`` features."""
        w = self._flat_weights[0].dtype
        if input.dtype != w:
            raise ValueError(f"RNN input dtype (torch.{input.dtype}) does not match weight dtype (torch.{w}). "
                             f"Convert input: input.to(torch.{w}), or convert model: model.to(torch.{input.dtype})")
        want = 2 if batch_sizes is not None else 3
        if input.ndim != want:
            raise RuntimeError(f"input must have {want} dimensions, got {input.ndim}")
        if self.input_size != input.shape[-1]:
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected {self.input_size}, "
                               f"got {input.shape[-1]}")

    def get_expected_hidden_size(self, input, batch_sizes=None):
        """(num_layers * directions, batch, proj_size or hidden_size)."""
        batch = _batch(self, input, batch_sizes)
        return (self.num_layers * (2 if self.bidirectional else 1), batch, self.proj_size or self.hidden_size)

    def check_hidden_size(self, hx, expected_hidden_size, msg="Expected hidden size {}, got {}"):
        """torch's: ``hx``'s shape is ``expected_hidden_size``."""
        if tuple(hx.shape) != tuple(expected_hidden_size):
            raise RuntimeError(msg.format(expected_hidden_size, list(hx.shape)))

    def check_forward_args(self, input, hidden, batch_sizes=None):
        """torch's checks of the input and the initial state."""
        self.check_input(input, batch_sizes)
        self.check_hidden_size(hidden, self.get_expected_hidden_size(input, batch_sizes))

    # ------------------------------------------------------------------ the loop
    def _batched(self, input, hx, name):
        """torch's dimension checks; the input as a batch, and whether it was one."""
        if input.ndim not in (2, 3):
            raise ValueError(f"{name}: Expected input to be 2D or 3D, got {input.ndim}D" +
                             (" tensor instead" if name == "RNN" else " instead"))
        batched = input.ndim == 3
        return batched, input if batched else input.unsqueeze(0 if self.batch_first else 1)

    def _zeros(self, input, size, batch=None):
        batch = (input.shape[0] if self.batch_first else input.shape[1]) if batch is None else batch
        return zeros(self.num_layers * (2 if self.bidirectional else 1), batch, size, dtype=input.dtype, chunks=-1,
                     device=input.device)

    def _layers(self, input, states, sizes=None):
        """The stacked layers over time-major ``input`` (packed ``data`` when ``sizes``, the packed batch
        sizes, are given), from ``states`` (one per layer and direction): the last layer's output and the
        final states."""
        step, finals = _STEPS[self.mode], []
        directions = 2 if self.bidirectional else 1
        for layer in range(self.num_layers):
            outs = []
            for d in range(directions):
                w = self.all_weights[layer * directions + d]
                b_ih, b_hh = (w[2], w[3]) if self.bias else (None, None)
                weights = (w[1], b_hh) + ((w[-1],) if self.proj_size > 0 else ())
                gi, hx = F.linear(input, w[0], b_ih), states[layer * directions + d]
                out, state = (_direction(step, gi, hx, weights, d == 1) if sizes is None else
                              _packed_direction(step, gi, hx, weights, sizes, d == 1))
                outs.append(out)
                finals.append(state)
            input = outs[0] if directions == 1 else ops.concatenate(outs, -1)
            if layer < self.num_layers - 1:
                input = F.dropout(input, self.dropout, self.training)
        return input, finals

    def _packed(self, input, hx):
        """Packed input: ``hx`` (zeros when None, else permuted into packed order) checked and run as
        torch's; the packed output and the final states in the caller's batch order."""
        data, batch_sizes, sorted_indices, unsorted_indices = input
        sizes = [int(n) for n in batch_sizes.tolist()]
        if hx is None:
            h = self._zeros(data, self.proj_size or self.hidden_size, sizes[0])
            hx = h if self.mode != "LSTM" else (h, self._zeros(data, self.hidden_size, sizes[0]))
        elif sorted_indices is not None:
            hx = _permute(hx, sorted_indices)
        self.check_forward_args(data, hx, batch_sizes)
        count = (hx[0] if self.mode == "LSTM" else hx).shape[0]
        states = [(hx[0][k], hx[1][k]) if self.mode == "LSTM" else hx[k] for k in range(count)]
        output, finals = self._layers(data, states, sizes)
        if self.mode == "LSTM":
            hidden = (ops.stack([h for h, _ in finals], 0), ops.stack([c for _, c in finals], 0))
        else:
            hidden = ops.stack(finals, 0)
        if unsorted_indices is not None:
            hidden = _permute(hidden, unsorted_indices)
        return PackedSequence(output, batch_sizes, sorted_indices, unsorted_indices), hidden

    def _run(self, input, states):
        if self.batch_first:
            input = input.transpose(0, 1)
        output, finals = self._layers(input, states)
        return (output.transpose(0, 1) if self.batch_first else output), finals


class _SingleState(RNNBase):
    """RNN and GRU: one state tensor."""

    def forward(self, input, hx=None):
        if isinstance(input, PackedSequence):
            return self._packed(input, hx)
        name = "RNN" if self.mode.startswith("RNN") else "GRU"
        batched, input = self._batched(input, hx, name)
        if hx is not None and not batched:
            if hx.ndim != 2:
                raise RuntimeError(f"For unbatched 2-D input, hx should also be 2-D but got {hx.ndim}-D tensor")
            hx = hx.unsqueeze(1)
        elif hx is not None and hx.ndim != 3:
            raise RuntimeError(f"For batched 3-D input, hx should also be 3-D but got {hx.ndim}-D tensor")
        if hx is None:
            hx = self._zeros(input, self.hidden_size)
        self.check_forward_args(input, hx)
        output, finals = self._run(input, [hx[k] for k in range(hx.shape[0])])
        hidden = ops.stack(finals, 0)
        if not batched:
            return output.squeeze(0 if self.batch_first else 1), hidden.squeeze(1)
        return output, hidden


class RNN(_SingleState):
    """Elman RNN layers, ``h_t = tanh(x_t @ W_ih.T + b_ih + h_{t-1} @ W_hh.T + b_hh)`` (or relu), torch's
    ``nn.RNN(input_size, hidden_size, num_layers=1, nonlinearity='tanh', bias=True, batch_first=False,
    dropout=0.0, bidirectional=False, device=None, dtype=None)``: ``(output, h_n)``."""

    def __init__(self, *args, **kwargs):
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        if len(args) > 3:
            self.nonlinearity = args[3]
            args = args[:3] + args[4:]
        else:
            self.nonlinearity = kwargs.pop("nonlinearity", "tanh")
        if self.nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity '{self.nonlinearity}'. Select from 'tanh' or 'relu'.")
        super().__init__("RNN_TANH" if self.nonlinearity == "tanh" else "RNN_RELU", *args, **kwargs)


class GRU(_SingleState):
    """Gated recurrent unit layers, torch's ``nn.GRU(input_size, hidden_size, num_layers=1, bias=True,
    batch_first=False, dropout=0.0, bidirectional=False, device=None, dtype=None)``: ``(output, h_n)``."""

    def __init__(self, *args, **kwargs):
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        super().__init__("GRU", *args, **kwargs)


class LSTM(RNNBase):
    """Long short-term memory layers (``proj_size > 0``: the hidden state projected by ``weight_hr``), torch's
    ``nn.LSTM(input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
    bidirectional=False, proj_size=0, device=None, dtype=None)``: ``(output, (h_n, c_n))``."""

    def __init__(self, *args, **kwargs):
        super().__init__("LSTM", *args, **kwargs)

    def get_expected_cell_size(self, input, batch_sizes=None):
        """(num_layers * directions, batch, hidden_size)."""
        batch = _batch(self, input, batch_sizes)
        return (self.num_layers * (2 if self.bidirectional else 1), batch, self.hidden_size)

    def check_forward_args(self, input, hidden, batch_sizes=None):
        """torch's checks of the input, ``h_0`` and ``c_0``."""
        self.check_input(input, batch_sizes)
        self.check_hidden_size(hidden[0], self.get_expected_hidden_size(input, batch_sizes),
                               "Expected hidden[0] size {}, got {}")
        self.check_hidden_size(hidden[1], self.get_expected_cell_size(input, batch_sizes),
                               "Expected hidden[1] size {}, got {}")

    def forward(self, input, hx=None):
        if isinstance(input, PackedSequence):
            return self._packed(input, None if hx is None else tuple(hx))
        batched, input = self._batched(input, hx, "LSTM")
        if hx is None:
            hx = (self._zeros(input, self.proj_size or self.hidden_size), self._zeros(input, self.hidden_size))
        else:
            want = 3 if batched else 2
            if hx[0].ndim != want or hx[1].ndim != want:
                raise RuntimeError(f"For {'batched 3-D' if batched else 'unbatched 2-D'} input, hx and cx should also "
                                   f"be {want}-D but got ({hx[0].ndim}-D, {hx[1].ndim}-D) tensors")
            if not batched:
                hx = (hx[0].unsqueeze(1), hx[1].unsqueeze(1))
        self.check_forward_args(input, hx)
        output, finals = self._run(input, [(hx[0][k], hx[1][k]) for k in range(hx[0].shape[0])])
        h_n, c_n = ops.stack([h for h, _ in finals], 0), ops.stack([c for _, c in finals], 0)
        if not batched:
            return output.squeeze(0 if self.batch_first else 1), (h_n.squeeze(1), c_n.squeeze(1))
        return output, (h_n, c_n)
