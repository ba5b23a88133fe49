"""In-place writes on tensors that run an op: ``t[i] = v``, ``fill_``/``zero_``, ``copy_``.

Installed on :class:`~daskgrad.Tensor` here (the tensor sits on a floor below the ops); the
tensor's own ``_assign`` rebinds it to the op's result and bumps its version.
"""
from __future__ import annotations

from .._modes import is_grad_enabled
from .._tensor import Tensor, _ViewStorage
from .elementwise import copy_to, fill
from .indexing import getitem, region, setitem


def _setitem(self, index, value):
    part = region(self, index)  # (what torch writes to: self[index], or all of self)
    if part is not None and type(self._storage) is _ViewStorage:  # torch's self[index].copy_(value): only
        target = getitem(self, index)  # that part goes through to the base (of an expanded view, one copy)
        target._check_inplace()
        target._check_overlap((value,))
        target._assign(copy_to(target, value))
        return
    if is_grad_enabled() and self.grad_fn is None and self.requires_grad:  # torch writes through a view
        raise RuntimeError("a view of a leaf Variable that requires grad is being used in an in-place operation.")
    self._check_inplace()
    self._check_overlap((value,), *(part or ()))
    self._assign(setitem(self, index, value))

def _fill(self, name, value):
    """Overwrite with a constant; what the old value came from gets a zero gradient."""
    self._check_inplace()
    return self._assign(fill(self, value, name))

def copy_(self, src):
    """Overwrite with ``src`` (broadcast); the old value gets no gradient, ``src`` gets it all."""
    return self._inplace(copy_to, src)


Tensor.__setitem__, Tensor._fill, Tensor.copy_ = _setitem, _fill, copy_
