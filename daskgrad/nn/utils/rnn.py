"""``torch.nn.utils.rnn``: sequences of different lengths as one padded batch (``pad_sequence``,
``unpad_sequence``) or packed step by step (``PackedSequence``, ``pack_padded_sequence``, ``pad_packed_sequence``,
``pack_sequence``, ``unpack_sequence``), and back.

Lengths and batch sizes are host values in torch; here they are read from their (tiny) tensors when given as
tensors.  Packing and padding are slices, reshapes, pads and concatenations, so gradients flow through them."""
from __future__ import annotations

import collections
import collections.abc
import math

import numpy as np

from ..._tensor import tensor
from ...ops import astype, concatenate, pad, reshape, stack


__all__ = ["PackedSequence", "invert_permutation", "pack_padded_sequence", "pad_packed_sequence", "pad_sequence",
           "unpad_sequence", "pack_sequence", "unpack_sequence"]


def pad_sequence(sequences, batch_first=False, padding_value=0.0, padding_side="right"):
    """``(max_len, batch, *)`` (``(batch, max_len, *)`` with ``batch_first``): each sequence ``(L_i, *)``
    padded with ``padding_value`` (cast to the first sequence's dtype, as torch's fill) on ``padding_side``."""
    if not isinstance(sequences, collections.abc.Iterable):
        raise RuntimeError("pad_sequence: Expected iterable for input sequences, but got arg of type: "
                           f"{type(sequences)}")
    sequences = tuple(sequences)
    if padding_side not in ("left", "right"):
        raise RuntimeError(f"Expected padding_side to be one of left or right, but got {padding_side}.")
    if not sequences:
        raise RuntimeError("received an empty list of sequences")
    first = sequences[0]
    trailing, dtype = tuple(first.shape[1:]), first.dtype
    longest = max(s.shape[0] for s in sequences)
    value = np.asarray(padding_value).astype(dtype).item()
    rows = []
    for s in sequences:
        for k, (a, b) in enumerate(zip(trailing, tuple(s.shape[1:]))):
            if a != b:
                raise RuntimeError(f"The size of tensor a ({a}) must match the size of tensor b ({b}) at "
                                   f"non-singleton dimension {k + 1}")
        s = s if s.dtype == dtype else astype(s, dtype)
        short = longest - s.shape[0]
        before, after = (short, 0) if padding_side == "left" else (0, short)
        rows.append(pad(s, ((before, after),) + ((0, 0),) * len(trailing), constant_values=value) if short else s)
    return stack(rows, axis=0 if batch_first else 1)


def unpad_sequence(padded_sequences, lengths, batch_first=False):
    """The sequences of a padded batch, each cut to its length.  As torch's, without ``batch_first`` it
    transposes ``padded_sequences`` in place first (the caller's tensor is left ``(batch, max_len, *)``)."""
    if not batch_first:
        padded_sequences.transpose_(0, 1)
    lengths = [int(n) for n in (lengths.tolist() if hasattr(lengths, "tolist") else lengths)]
    if len(lengths) != padded_sequences.shape[0]:
        raise ValueError(f"zip() argument 2 is {'shorter' if len(lengths) < padded_sequences.shape[0] else 'longer'}"
                         " than argument 1")
    return [padded_sequences[i, :n] for i, n in enumerate(lengths)]


# ------------------------------------------------------------------------------------------- packing
_PackedSequence = collections.namedtuple("PackedSequence_", ["data", "batch_sizes", "sorted_indices",
                                                             "unsorted_indices"])


class PackedSequence(_PackedSequence):
    """torch's ``nn.utils.rnn.PackedSequence``: the steps of sequences of different lengths, packed.

    A namedtuple ``(data, batch_sizes, sorted_indices, unsorted_indices)``: ``data`` holds, step after step,
    the rows of the sequences still running at that step (longest first); ``batch_sizes`` (int64) how many
    rows each step has; ``sorted_indices`` the batch order the sequences were packed in and
    ``unsorted_indices`` its inverse (both None when the batch was packed as given).  Made by
    :func:`pack_padded_sequence` and :func:`pack_sequence`; RNN, LSTM and GRU take and return one.

    Parameters
    ----------
    data : Tensor
        The packed rows, ``(sum(batch_sizes), *)``; or the pair ``(data, batch_sizes)`` as torch accepts.
    batch_sizes : Tensor, optional
        The rows at each step.
    sorted_indices, unsorted_indices : Tensor, optional
        The permutation into packed order and back (``unsorted_indices`` is derived when not given).
    """

    def __new__(cls, data, batch_sizes=None, sorted_indices=None, unsorted_indices=None):
        if unsorted_indices is None:
            unsorted_indices = invert_permutation(sorted_indices)
        if batch_sizes is None:
            if not (isinstance(data, (list, tuple)) and len(data) == 2):
                raise AssertionError("Expected data to be a list or tuple of length 2")
            data, batch_sizes = data
        elif batch_sizes.device.type != "cpu":
            raise ValueError("batch_sizes should always be on CPU. Instances of PackedSequence should never be "
                             "created manually. They should be instantiated by functions like pack_sequence and "
                             "pack_padded_sequences in nn.utils.rnn. "
                             "https://pytorch.org/docs/stable/nn.html#torch.nn.utils.rnn.pack_sequence")
        return super().__new__(cls, data, batch_sizes, sorted_indices, unsorted_indices)

    def to(self, *args, **kwargs):
        """``data`` converted as ``Tensor.to`` converts (the indices follow its device, ``batch_sizes`` stays
        on the CPU); ``self`` when ``data`` is unchanged, as torch's."""
        data = self.data.to(*args, **kwargs)
        if data is self.data:
            return self
        def move(t):
            return None if t is None else t.to(data.device)
        return type(self)(data, self.batch_sizes, move(self.sorted_indices), move(self.unsorted_indices))

    def cpu(self):
        """The sequence with ``data`` (and the indices) on the CPU."""
        return self.to("cpu")

    def cuda(self):
        """The sequence with ``data`` (and the indices) on the GPU."""
        return self.to("cuda")

    def double(self):
        """``data`` as float64."""
        return self.to(np.dtype("float64"))

    def float(self):
        """``data`` as float32."""
        return self.to(np.dtype("float32"))

    def half(self):
        """``data`` as float16."""
        return self.to(np.dtype("float16"))

    def long(self):
        """``data`` as int64."""
        return self.to(np.dtype("int64"))

    def int(self):
        """``data`` as int32."""
        return self.to(np.dtype("int32"))

    def short(self):
        """``data`` as int16."""
        return self.to(np.dtype("int16"))

    def char(self):
        """``data`` as int8."""
        return self.to(np.dtype("int8"))

    def byte(self):
        """``data`` as uint8."""
        return self.to(np.dtype("uint8"))

    def pin_memory(self):
        """torch's ``pin_memory``: a new packed sequence of the same tensors.  daskgrad pins no memory (dask
        moves the chunks; cupy's are on the device already), so :meth:`is_pinned` stays False."""
        return type(self)(self.data, self.batch_sizes, self.sorted_indices, self.unsorted_indices)

    def is_pinned(self):
        """Whether ``data`` is in pinned host memory: never in daskgrad."""
        return False

    @property
    def is_cuda(self):
        """Whether ``data`` is on a GPU."""
        return self.data.is_cuda


def invert_permutation(permutation):
    """The inverse of a 1-D index tensor ``permutation`` (None for None), torch's
    ``nn.utils.rnn.invert_permutation``; the values are read (a permutation is a batch's size)."""
    if permutation is None:
        return None
    order = np.asarray(permutation.tolist(), dtype=np.int64)
    inverse = np.empty_like(order)
    inverse[order] = np.arange(order.size)
    return tensor(inverse, device=permutation.device)


def _host_lengths(lengths):
    """``lengths`` (a list, an array or a tensor) as an int64 NumPy array, read as torch reads them, and
    checked as aten's ``checkLongTensor``."""
    device = getattr(lengths, "device", "cpu")
    values = lengths.tolist() if hasattr(lengths, "tolist") else lengths
    values = np.asarray(values).astype(np.int64)
    if values.ndim != 1 or device != "cpu":
        where = "cpu" if device == "cpu" else "cuda:0"
        raise RuntimeError(f"'lengths' argument should be a 1D CPU int64 tensor, but got {values.ndim}D {where} "
                           "Long tensor")
    return values


def _batch_sizes(lengths):
    """How many of the (decreasing) ``lengths`` reach past each step."""
    return np.array([int((lengths > t).sum()) for t in range(int(lengths[0]))], dtype=np.int64)


def _runs(sizes):
    """``(first step, steps, rows)`` for each run of equal batch sizes."""
    runs, start = [], 0
    for t in range(1, len(sizes) + 1):
        if t == len(sizes) or sizes[t] != sizes[start]:
            runs.append((start, t - start, int(sizes[start])))
            start = t
    return runs


def pack_padded_sequence(input, lengths, batch_first=False, enforce_sorted=True):
    """A padded batch packed into a :class:`PackedSequence`, torch's ``nn.utils.rnn.pack_padded_sequence``.

    Parameters
    ----------
    input : Tensor
        ``(T, B, *)`` (``(B, T, *)`` with ``batch_first``), sequence ``b`` in its first ``lengths[b]`` steps.
    lengths : list of int or Tensor
        The length of each sequence; its values are read (they are host values in torch).
    batch_first : bool
        Whether the batch is the first axis.
    enforce_sorted : bool
        If True, ``lengths`` must be decreasing; else the batch is sorted (stably) first and the order kept
        in ``sorted_indices``.

    Returns
    -------
    PackedSequence
    """
    lengths = _host_lengths(lengths)
    if input.ndim < 2:
        raise IndexError(f"Dimension out of range (expected to be in range of [-{max(input.ndim, 1)}, "
                         f"{max(input.ndim, 1) - 1}], but got 1)")
    batch_dim = 0 if batch_first else 1
    sorted_indices = None
    if not enforce_sorted:
        order = np.argsort(-lengths, kind="stable")
        lengths = lengths[order]
        if len(order) and order.max() >= input.shape[batch_dim]:
            bad = int(order[order >= input.shape[batch_dim]][0])
            raise RuntimeError(f"INDICES element is out of DATA bounds, id={bad} axis_dim={input.shape[batch_dim]}")
        sorted_indices = tensor(order, device=input.device)
        input = input.index_select(batch_dim, sorted_indices)
    if batch_first:
        input = input.transpose(0, 1)
    steps, batch = input.shape[0], input.shape[1]
    if math.prod(input.shape) == 0:
        raise RuntimeError("Cannot pack empty tensors.")
    if len(lengths) != batch:
        raise RuntimeError(f"Expected `len(lengths)` to be equal to batch_size, but got {len(lengths)} "
                           f"(batch_size={batch})")
    if lengths[-1] <= 0:
        raise RuntimeError("Length of all samples has to be greater than 0, but found an element in 'lengths' "
                           "that is <= 0")
    if (np.diff(lengths) > 0).any():
        raise RuntimeError("`lengths` array must be sorted in decreasing order when `enforce_sorted` is True. You "
                           "can pass `enforce_sorted=False` to pack_padded_sequence and/or pack_sequence to "
                           "sidestep this requirement if you do not need ONNX exportability.")
    if lengths[0] > steps:
        # torch reads past the end of the input here; we refuse rather than pack garbage
        raise RuntimeError(f"Expected every length to be at most the padded sequence length {steps}, but got "
                           f"{int(lengths[0])}")
    sizes = _batch_sizes(lengths)
    trailing = tuple(input.shape[2:])
    # a run of steps with the same batch size is one slice, in packed (step, then batch) order already
    data = concatenate([reshape(input[t:t + n, :rows], (n * rows,) + trailing) for t, n, rows in _runs(sizes)])
    return PackedSequence(data, tensor(sizes), sorted_indices, None)


def pad_packed_sequence(sequence, batch_first=False, padding_value=0.0, total_length=None):
    """A :class:`PackedSequence` as a padded batch and its lengths, torch's ``nn.utils.rnn.pad_packed_sequence``.

    Parameters
    ----------
    sequence : PackedSequence
    batch_first : bool
        Whether the padded batch is ``(B, T, *)`` rather than ``(T, B, *)``.
    padding_value : float
        The value of the padding (cast to ``data``'s dtype).
    total_length : int, optional
        Pad to this many steps (at least the longest sequence's length).

    Returns
    -------
    (Tensor, Tensor)
        The padded batch, in the order the sequences were given to packing, and their int64 lengths.
    """
    sizes = np.asarray(sequence.batch_sizes.tolist(), dtype=np.int64)
    steps = len(sizes)
    if total_length is not None:
        if total_length < steps:
            raise ValueError("Expected total_length to be at least the length of the longest sequence in input, "
                             f"but got total_length={total_length} and max sequence length being {steps}")
        steps = total_length
    data = sequence.data
    value = np.asarray(padding_value).astype(data.dtype).item()
    trailing = tuple(data.shape[1:])
    batch, blocks, offset = int(sizes[0]), [], 0
    for _, n, rows in _runs(sizes):
        block = reshape(data[offset:offset + n * rows], (n, rows) + trailing)
        offset += n * rows
        blocks.append(pad(block, ((0, 0), (0, batch - rows)) + ((0, 0),) * len(trailing), constant_values=value)
                      if rows < batch else block)
    padded = concatenate(blocks) if len(blocks) > 1 else blocks[0]
    if steps > len(sizes):
        padded = pad(padded, ((0, steps - len(sizes)),) + ((0, 0),) * (1 + len(trailing)), constant_values=value)
    if batch_first:
        padded = padded.transpose(0, 1)
    lengths = np.array([int((sizes > b).sum()) for b in range(batch)], dtype=np.int64)
    if sequence.unsorted_indices is not None:
        order = np.asarray(sequence.unsorted_indices.tolist(), dtype=np.int64)
        return padded.index_select(0 if batch_first else 1, sequence.unsorted_indices), tensor(lengths[order])
    return padded, tensor(lengths)


def pack_sequence(sequences, enforce_sorted=True):
    """Sequences ``(L_i, *)`` packed into a :class:`PackedSequence` (``pad_sequence`` then
    ``pack_padded_sequence``), torch's ``nn.utils.rnn.pack_sequence``.

    Parameters
    ----------
    sequences : list of Tensor
    enforce_sorted : bool
        If True, the sequences must come longest first.

    Returns
    -------
    PackedSequence
    """
    lengths = [v.shape[0] for v in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)


def unpack_sequence(packed_sequences):
    """The sequences of a :class:`PackedSequence`, each ``(L_i, *)``, in their original order, torch's
    ``nn.utils.rnn.unpack_sequence``.

    Parameters
    ----------
    packed_sequences : PackedSequence

    Returns
    -------
    list of Tensor
    """
    padded_sequences, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded_sequences, lengths, batch_first=True)
