"""``torch.nn.utils.rnn.pad_sequence`` and ``unpad_sequence``: sequences of different lengths as one padded batch,
and back."""
from __future__ import annotations

import collections.abc

import numpy as np

from ...ops import astype, pad, stack


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
