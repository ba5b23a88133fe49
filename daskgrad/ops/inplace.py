"""In-place writes on tensors that run an op: ``t[i] = v``, ``fill_``/``zero_``, ``copy_``, and the
functions' ``out=``.

Installed on :class:`~daskgrad.Tensor` here (the tensor sits on a floor below the ops); the
tensor's own ``_assign`` rebinds it to the op's result and bumps its version.
"""
from __future__ import annotations

import warnings

import numpy as np

from .. import _state
from .._data import can_cast
from ..graph import mark, relabel, type_repr
from .._modes import is_grad_enabled
from .._tensor import Tensor, _ViewStorage
from ._util import TORCH_TYPE_NAMES, check_broadcast
from .elementwise import copy_to, fill
from .indexing import getitem, region, setitem


def _one_value(value):
    """Whether a write puts one value everywhere (a number, a 0-d array or tensor): its result is the same
    in any order of visits, through overlapping windows too."""
    return not hasattr(value, "ndim") or value.ndim == 0


def _setitem(self, index, value):
    if isinstance(value, np.generic) and (isinstance(value, np.bool_) or not isinstance(value, (float, complex,
                                                                                                np.integer))):
        # (torch's: a NumPy scalar that is not a Python number, nor an integer it reads through __index__)
        raise TypeError(f"can't assign a numpy.{type(value).__name__} to a {type_repr(self.dtype)}")
    part = region(self, index)  # (what torch writes to: self[index], or all of self)
    advanced = any(isinstance(i, (Tensor, list, np.ndarray)) for i in (index if isinstance(index, tuple) else (index,)))
    checked = ((value,), not advanced)  # (torch's index_put_ takes a gradient into integers too: it checks)
    if part is not None and type(self._storage) is _ViewStorage:  # torch's self[index].copy_(value): only
        target = getitem(self, index)  # that part goes through to the base (of an expanded view, one copy)
        target._check_inplace(*checked)
        target._check_overlap((value,), one_value=_one_value(value), copies=True)
        target._assign(copy_to(target, value))
        return
    if is_grad_enabled() and self.grad_fn is None and self.requires_grad:  # torch writes through a view
        raise RuntimeError("a view of a leaf Variable that requires grad is being used in an in-place operation.")
    self._check_inplace(*checked)
    self._check_overlap((value,), *(part or ()), one_value=_one_value(value), copies=True)
    self._assign(setitem(self, index, value))

def _fill(self, name, value):
    """Overwrite with a constant; what the old value came from gets a zero gradient.  A 0-d tensor ``value``
    is copied, and gets the whole gradient, recorded as torch's ``fill_`` of a tensor (``FillBackward3``)."""
    if isinstance(value, Tensor):
        self._check_inplace((value,))  # (torch's fill_ takes a gradient into integers too: it checks)
        since = mark()
        return relabel(self.copy_(value), "FillBackward3", since)
    self._check_inplace()
    return self._assign(fill(self, value, name))

def copy_(self, src, non_blocking=False):
    """Overwrite with ``src`` (broadcast); the old value gets no gradient, ``src`` gets it all
    (``non_blocking`` ignored, as torch's between tensors of one device)."""
    shape = getattr(src, "shape", None)
    if shape is not None and all(n == n for n in (*shape, *self.shape)):  # torch's errors, before dask's
        check_broadcast(self.shape, shape)
        wide = np.broadcast_shapes(self.shape, shape)
        if tuple(wide) != tuple(self.shape):
            raise RuntimeError(f"output with shape {list(self.shape)} doesn't match the broadcast shape {list(wide)}")
    return self._inplace(copy_to, src, one_value=_one_value(src), copies=True)


def write_out(name, out, result, inputs=()):
    """``name(..., out=out)``: ``result`` written into ``out``, which is returned, as torch's ``out=``: an op
    recorded for autograd refuses (torch's words), a result that cannot be cast to ``out``'s dtype
    (``same_kind``) refuses, an ``out`` that partly overlaps one of the op's ``inputs`` refuses (torch's
    words), and an ``out`` of another shape takes the result's (with torch's warning when it held
    elements).  A tuple ``out`` takes a tuple result, item by item."""
    if isinstance(out, tuple) and isinstance(result, tuple) and len(out) == len(result):
        return tuple(write_out(name, o, r, inputs) for o, r in zip(out, result))
    if not isinstance(out, Tensor):
        kind = type(out).__qualname__
        kind = kind if type(out).__module__ == "builtins" else f"{type(out).__module__}.{kind}"
        raise TypeError(f"{name}(): argument 'out' must be Tensor, not {kind}")
    if not isinstance(result, Tensor):
        raise TypeError(f"{name}() returns a {type(result).__name__}: out= takes a tensor result only")
    if is_grad_enabled() and (result.requires_grad or out.requires_grad):
        raise RuntimeError(f"{name}(): functions with out=... arguments don't support automatic differentiation, "
                           "but one of the arguments requires grad.")
    if not can_cast(result.dtype, out.dtype):
        raise RuntimeError(f"result type {TORCH_TYPE_NAMES.get(str(result.dtype), result.dtype)} can't be cast to "
                           f"the desired output type {TORCH_TYPE_NAMES.get(str(out.dtype), out.dtype)}")
    out._check_overlap([t for x in inputs for t in (x if isinstance(x, (list, tuple)) else (x,))])
    if out.shape == result.shape:
        return out._assign(result)
    st = out._storage
    if type(st) is _ViewStorage or st.views:  # (torch resizes the shared memory: the base and its views change)
        raise NotImplementedError(f"{name}(): out= of shape {list(out.shape)} shares its storage with views (it is "
                                  f"one, or their base): it cannot be resized to the result's shape "
                                  f"{list(result.shape)} here; pass an out of that shape")
    if out.numel():
        warnings.warn(f"An output with one or more elements was resized since it had shape {list(out.shape)}, which "
                      f"does not match the required output shape {list(result.shape)}. This behavior is deprecated, "
                      "and in a future PyTorch release outputs will not be resized unless they have zero elements.",
                      UserWarning, stacklevel=3)
    # resized: the result's shape, in out's dtype
    st.array, st.version = result.array.astype(out.dtype), st.version + 1
    if out._hidden_from is not None:
        st.hidden += 1
    if out.grad_fn is None:
        _state.mark_pending(st)
    return out


Tensor.__setitem__, Tensor._fill, Tensor.copy_ = _setitem, _fill, copy_
