"""How a Tensor shows itself: torch's text, and in Jupyter dask's chunk table with the autograd fields.

``repr(t)`` is torch's (``tensor([1., 2.], requires_grad=True)``) when the values are few (at most
torch's summarization threshold, 1000 elements) and already in this process's memory as NumPy
chunks: a leaf made from data, a persisted or computed tensor, a gradient after ``backward()`` on
the local schedulers.  Reading them is a concatenation of the chunks the graph holds.  Any other
tensor (lazy, large, on a cluster's workers, cupy chunks) shows dask's summary instead: a repr
never computes, gathers or copies from a GPU.

The formatting rules are torch's ``torch._tensor_str`` (precision 4; scientific notation when the
nonzero finite magnitudes span more than 1000x, exceed 1e8 or go below 1e-4; floats that are all
integers print as ``1.``; columns padded to one width; lines wrapped at 80 characters), on the same
Python float formatting, so the text is torch's character for character, with ``daskgrad.`` where
torch writes ``torch.`` in a dtype.
"""
from __future__ import annotations

import html
import math

import numpy as np

from . import _dask as door, _data

PRECISION, THRESHOLD, LINEWIDTH = 4, 1000, 80  # torch's default print options
_DEFAULT_DTYPES = (_data.DEFAULT_FLOAT, _data.DEFAULT_COMPLEX, np.dtype("int64"), np.dtype("bool"))


def text(t) -> str:
    """``repr(t)``: torch's, with the values when they are few and in memory, else dask's summary."""
    values = in_memory_values(t.array)
    if values is None:
        return _summary(t)
    prefix = "tensor("
    suffixes = []
    if values.size == 0:
        body = "[]"
        if values.ndim != 1:
            suffixes.append(f"size={values.shape}")
        if values.dtype != _data.DEFAULT_FLOAT:
            suffixes.append(f"dtype=daskgrad.{values.dtype.name}")
    else:
        body = _values_text(values, len(prefix))
        if values.dtype not in _DEFAULT_DTYPES:
            suffixes.append(f"dtype=daskgrad.{values.dtype.name}")
    suffixes += _autograd_suffix(t)
    return _add_suffixes(prefix + body, suffixes, len(prefix))


def _summary(t) -> str:
    a = t.array
    kind = f"{type(a._meta).__module__.split('.')[0]}.{type(a._meta).__name__}"
    extra = "".join(", " + s for s in _autograd_suffix(t))
    return f"tensor(dask.array<shape={a.shape}, dtype={a.dtype}, chunksize={a.chunksize}, chunktype={kind}>{extra})"


def _autograd_suffix(t) -> list:
    if t.grad_fn is not None:
        return [f"grad_fn=<{t.grad_fn.name()}>"]
    return ["requires_grad=True"] if t.requires_grad else []


def in_memory_values(arr):
    """The values of dask array ``arr`` as one NumPy array if they are at most ``THRESHOLD`` elements held
    as NumPy chunks in this process (its graph holds the chunks themselves), else None.  Never computes."""
    if type(arr._meta) is not np.ndarray or any(math.isnan(n) for n in arr.shape):
        return None
    if math.prod(arr.shape) > THRESHOLD:
        return None
    return door.local_values(arr)


# --------------------------------------------------------- torch._tensor_str, on NumPy values
class _Formatter:
    """torch's ``_Formatter``: one width and one notation for all the values of a tensor."""

    def __init__(self, values):
        self.floating = values.dtype.kind == "f"
        self.int_mode, self.sci_mode, self.width = True, False, 1
        if not self.floating:
            self.width = max(len(f"{v}") for v in values.reshape(-1).tolist())
            return
        flat = values.reshape(-1)
        finite = flat[np.isfinite(flat) & (flat != 0)]
        if finite.size == 0:
            return
        magnitude = np.abs(finite).astype(np.float64)
        low, high = magnitude.min(), magnitude.max()
        self.int_mode = bool(np.all(finite == np.ceil(finite)))
        self.sci_mode = bool(high / low > 1000.0 or high > 1.0e8 or low < 1.0e-4)
        for v in finite.tolist():
            if self.sci_mode:
                width = len(f"{v:.{PRECISION}e}")
            elif self.int_mode:
                width = len(f"{v:.0f}") + 1  # the "." that marks a float
            else:
                width = len(f"{v:.{PRECISION}f}")
            self.width = max(self.width, width)

    def format(self, v) -> str:
        if not self.floating:
            s = f"{v}"
        elif self.sci_mode:
            s = f"{v:{self.width}.{PRECISION}e}"
        elif self.int_mode:
            s = f"{v:.0f}" + ("" if math.isinf(v) or math.isnan(v) else ".")
        else:
            s = f"{v:.{PRECISION}f}"
        return s.rjust(self.width)


def _values_text(values, indent):
    if values.dtype.kind == "c":
        real, imag = _Formatter(values.real), _Formatter(values.imag)

        def fmt(v):
            i = (imag.format(v.imag) + "j").lstrip()
            return real.format(v.real) + ("" if i[0] in "+-" else "+") + i
        width = real.width + 2 + imag.width + 1
    else:
        formatter = _Formatter(values)
        fmt, width = formatter.format, formatter.width + 2
    return _nested(values.tolist(), values.ndim, indent, fmt, width)


def _nested(values, ndim, indent, fmt, width):
    """torch's ``_tensor_str_with_formatter``: rows of a vector wrapped at ``LINEWIDTH``, and each further
    dimension one more blank line between its slices."""
    if ndim == 0:
        return fmt(values)
    if ndim == 1:
        per_line = max(1, math.floor((LINEWIDTH - indent) / width))
        items = [fmt(v) for v in values]
        lines = [", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line)]
        return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"
    slices = [_nested(row, ndim - 1, indent + 1, fmt, width) for row in values]
    return "[" + ("," + "\n" * (ndim - 1) + " " * (indent + 1)).join(slices) + "]"


def _add_suffixes(body, suffixes, indent):
    """torch's ``_add_suffixes``: each ``key=value`` on the last line, or on a new one past ``LINEWIDTH``."""
    parts = [body]
    last_line = len(body) - body.rfind("\n") + 1
    for suffix in suffixes:
        if last_line + len(suffix) + 2 > LINEWIDTH:
            parts.append(",\n" + " " * indent + suffix)
            last_line = indent + len(suffix)
        else:
            parts.append(", " + suffix)
            last_line += len(suffix) + 2
    return "".join(parts) + ")"


# ------------------------------------------------------------------------------ Jupyter
def html_repr(t) -> str:
    """``t._repr_html_()``: the autograd fields, the values when ``repr`` shows them, and dask's own
    chunk table and grid of the underlying array."""
    grad_fn = "None" if t.grad_fn is None else f"<{t.grad_fn.name()}>"
    rows = [("grad_fn", grad_fn), ("requires_grad", t.requires_grad), ("is_leaf", t.is_leaf),
            ("dtype", f"daskgrad.{t.dtype.name}"), ("device", t.device)]
    table = "".join(f"<tr><th style=\"text-align: left\">{k}</th><td style=\"text-align: left\">"
                    f"<code>{html.escape(str(v))}</code></td></tr>" for k, v in rows)
    dask_html = t.array._repr_html_()
    if not dask_html.lstrip().startswith("<"):  # dask without jinja2 answers its text repr
        dask_html = f"<pre>{html.escape(dask_html)}</pre>"
    values = ""
    if in_memory_values(t.array) is not None:
        values = f"<pre>{html.escape(text(t))}</pre>"
    return (f"<div class=\"daskgrad-tensor\"><strong>daskgrad.Tensor</strong>{values}"
            f"<table style=\"border-collapse: collapse\">{table}</table>{dask_html}</div>")
