"""Views as torch's: a write through a view reaches its base, and every view of that base sees it.

A view op (a primitive declared with a :class:`~daskgrad.graph.View`: basic indexing, ``reshape``
where torch views, ``transpose``/``permute``, ``unsqueeze``/``squeeze``, ``expand``, ``diagonal``)
gives a tensor whose storage is a window onto its input's root storage (``_tensor._ViewStorage``):
the view ops from the root's value to its own, applied again when the root holds a new value, and
the shared version counter.  Dask arrays being immutable, a write is functionalized, as torch's own
functionalization pass does: ``v.mul_(3)`` computes the view's new value ``u``, then its base's new
value, ``base`` with the part ``v`` sees replaced by ``u`` (each view op's ``put``: a setitem for
an index, the inverse for a reshape or permutation, a ``where`` for a diagonal), recorded as
torch records it, a ``CopySlices`` node on the base, whose rule sends the cotangent outside the
view to the old base and the view's part to ``u``.  The view's history, and that of every other
live view of the base, becomes the view ops applied to the new base (torch's
``AsStridedBackward0``).  Nothing is computed: each write is one lazy layer over the base.
"""
from __future__ import annotations

import copy

import itertools
import numbers

from .. import _dask as door, _state
from ..graph import primitive, rebase
from .._modes import is_grad_enabled
from .._tensor import (OVERLAP_SELF, Tensor, _cast, _view_write_message, _rechunked,
                       _differentiable, _resave, _root, _ViewStorage, put_steps, recorded)
from ._util import norm_axis
from .elementwise import clone
from .indexing import _meta, getitem_p


def _apply(a, steps):
    for prim, _, params in steps:
        a = prim.impl(a, **params)
    return a


def _bind_steps(x, steps):
    """The view ops ``steps`` applied to tensor ``x``, each recorded as its own node."""
    for prim, node, params in steps:
        x = prim.bind(x, node=node, **params)
    return x


# base <- base with the part `steps` see replaced by value: torch's CopySlices
view_scatter_p = primitive("view_scatter", torch="CopySlices", args=("base", "value"),
                           impl=lambda base, value, *, steps, overlap: put_steps(base, steps, value))


@view_scatter_p.vjp
def _view_scatter_rule(g, s, *, steps, overlap):
    if overlap:  # (torch's CopySlices copies the view's gradient into an expanded view of the base's)
        raise RuntimeError(OVERLAP_SELF)
    needs = s.needs
    return (view_scatter_p.bind(g, 0, steps=steps, overlap=False) if needs[0] else None,
            _bind_steps(g, steps) if needs[1] else None)


# a view's history after a write to its base: the view ops on the new base, as one node
view_of_p = primitive("view_of", torch="AsStridedBackward0", impl=lambda a, *, steps: _apply(a, steps))


@view_of_p.vjp
def _view_of_rule(g, s, *, steps):
    for prim, _, params in reversed(steps):
        (g,) = prim.rule(g, None, **params)  # (a view op's rule reads nothing saved)
    return (g,)


# a view torch refuses to differentiate once its base was written: an output of an op returning
# several views, or one made under no_grad; torch raises where the view is next used, daskgrad when
# backward reaches it
refused_p = primitive("refused_view", impl=lambda a, *, steps, message: _apply(a, steps))


@refused_p.vjp
def _refused_rule(g, s, *, steps, message):
    raise RuntimeError(message)


def _step_over(node, old, stop):
    """torch's CopySlices steps over the written view's old node and those of the views between it and the
    base (a view of a view), whose hooks fire only for what used them before the write; here the write's
    ``node`` reads through them: it reads copies without hooks, as far as the last node that has some."""
    path, n = [], old
    while n is not None and n is not stop and len(path) < 64:
        path.append(n)
        n = n.next_functions[0][0] if len(n.next_functions) == 1 else None
    if n is not stop:  # (not a chain of views down to the base's node: the written view's own node only)
        path = path[:1]
    hooked = [i for i, v in enumerate(path) if v._tensor_hooks or v._hooks or v._prehooks or v._retained is not None]
    if not hooked:
        return
    copies = [copy.copy(v) for v in path[:hooked[-1] + 1]]
    for c in copies:
        c._tensor_hooks, c._hooks, c._prehooks, c._retained = {}, {}, {}, None
    for c, below in zip(copies, copies[1:]):
        c.next_functions = ((below, c.next_functions[0][1]),)
    node.next_functions = tuple((copies[0], i) if n is old else (n, i) for n, i in node.next_functions)


def _write_view(self, out, bump=True):
    """``self``, a view (or a detached alias of one), now holds ``out``: its base's value and history
    are rewritten, and the history of every live view of the base.  ``bump=False``: the write was
    counted already (a custom Function's forward wrote the view it marks dirty)."""
    st = self._storage
    root, base = st.root, self._base
    old = self.grad_fn
    if old is not None and base is not None and out.grad_fn is not None:
        _step_over(out.grad_fn, old, base.grad_fn)
    arr = recorded(out)
    if arr.dtype != self.dtype:
        arr = door.defer(_cast, (arr,), (("dtype", self.dtype),))
    if arr.chunks != self.chunks:
        arr = door.defer(_rechunked, (arr,), (("chunks", self.chunks),))
    if base is None or _root(base._storage) is not root:  # a detached alias (or its base's .data was set)
        st.write(arr)
        owner = self
        if out.grad_fn is not None and _differentiable(self.dtype):  # (its own history now: add_ of a tensor
            self._retain_moved(old, out.grad_fn)  # that requires grad makes it require grad, as torch's)
            self.grad_fn, self._requires_grad = out.grad_fn, True
    else:
        overlap = any(s == 0 and n > 1 for n, s in zip(self.shape, st.strides))  # (fill_ of an expanded view)
        new = view_scatter_p.bind(base, out, steps=self._view.steps, overlap=overlap)  # (a node if grad is needed)
        bst = base._storage
        if type(bst) is _ViewStorage:
            bst.write(recorded(new))
        else:
            bst.value = recorded(new)
        if new.grad_fn is not None:
            base._took(new, bst)
        owner = base
    root.version += bump
    if self._hidden_from is not None:  # (through .data: torch's .data counts it apart, autograd does not see it)
        root.hidden += bump
    st.holds(arr)  # (what this view reads now: no layer to take it out of the new base again)
    if out.grad_fn is not None:
        _resave(out.grad_fn, st, out._storage, self)
    if owner.grad_fn is None:  # a leaf's storage (a buffer, a parameter under no_grad): its next value is due
        _state.mark_pending(root)
    _rebase_views(root)
    return self


def _rebase_views(root):
    """Every live view of ``root`` whose base requires grad, or which has a history of its own, gets its
    history from the base's new one (torch regenerates it as ``AsStridedBackward0`` when the version
    counter moved: after the base's ``detach_()``, a node that leads nowhere)."""
    for v in list(root.views or ()):
        base = v._base
        if (not base.requires_grad and v.grad_fn is None) or _root(base._storage) is not root:  # (.data set since)
            continue
        info, st, old = v._view, v._storage, v.grad_fn
        if info.creation is None:
            node = rebase(v, "AsStridedBackward0", (base,), view_of_p, {"steps": info.steps}, st.meta)
        else:
            message = _view_write_message(v, info.creation, indirect=True)
            node = rebase(v, "AsStridedBackward0", (base,), refused_p, {"steps": info.steps, "message": message},
                          st.meta)
        v._retain_moved(old, node)


Tensor._write_view, Tensor._rebase_views = _write_view, staticmethod(_rebase_views)


def _contiguous(self, memory_format=None):
    """torch's ``contiguous()``: itself when contiguous, else a contiguous copy (``clone``)."""
    return self if self.is_contiguous() else clone(self)


_contiguous.__name__, _contiguous.__qualname__ = "contiguous", "Tensor.contiguous"
Tensor.contiguous = _contiguous


# ------------------------------------------------------------ ops that return several views
def _outputs(x, pieces, axis, node, op):
    """The views ``x[..., lo:hi]`` (or ``x[..., i]`` for an int) along ``axis``, each marked as an
    output of torch's multi-view ``op``: torch refuses to write into them in grad mode."""
    pre = (slice(None),) * axis
    rest = (slice(None),) * (x.ndim - axis - 1)
    outs = []
    for k, piece in enumerate(pieces):
        out = getitem_p.bind(x, node=node, index=pre + (piece,) + rest, meta=_meta(x))
        if out._view is not None and is_grad_enabled() and out._view.creation != "inference":  # (torch's own
            out._view.creation = (k, op)  # creation mode overrides one it inherits from a no_grad view)
        outs.append(out)
    return tuple(outs)


def _unbind(self, dim=0):
    """torch's ``unbind``: the slices along ``dim``, views that may not be written in place."""
    dim = norm_axis(dim, self.ndim)
    if self.ndim == 0:
        raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
    return _outputs(self, range(self.shape[dim]), dim, "UnbindBackward0", "Unbind")


def _split(self, split_size_or_sections, dim=0):
    """torch's ``split``: pieces of ``split_size`` along ``dim`` (the last one shorter), or of the
    given sizes, views that may not be written in place."""
    if self.ndim == 0:
        raise RuntimeError("split expects at least a 1-dimensional tensor")
    dim = norm_axis(dim, self.ndim)
    n = self.shape[dim]
    if isinstance(split_size_or_sections, numbers.Integral):  # (a NumPy int too)
        size = int(split_size_or_sections)
        if size < 0:
            raise RuntimeError(f"split expects split_size be non-negative, but got split_size={size}")
        if size == 0 and n:
            raise RuntimeError(f"split_size can only be 0 if dimension size is 0, but got dimension size of {n}")
        bounds = list(range(0, n, size)) + [n] if n else [0, 0]
        node, op = "SplitBackward0", "Split"
    else:
        sizes = [int(k) for k in split_size_or_sections]
        if sum(sizes) != n or any(k < 0 for k in sizes):
            raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {n} (input tensor's size at "
                               f"dimension {dim}), but got split_sizes={sizes}")
        bounds = [0, *itertools.accumulate(sizes)]
        node, op = "SplitWithSizesBackward0", "SplitWithSizes"
    return _outputs(self, [slice(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])], dim, node, op)


def _chunk(self, chunks, dim=0):
    """torch's ``chunk``: at most ``chunks`` pieces of ``ceil(n / chunks)`` along ``dim`` (``chunks``
    empty ones of an empty axis)."""
    if self.ndim == 0:
        raise RuntimeError("chunk expects at least a 1-dimensional tensor")
    if chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    dim = norm_axis(dim, self.ndim)
    n = self.shape[dim]
    if not n:
        return _outputs(self, [slice(0, 0)] * chunks, dim, "SplitBackward0", "Split")
    return _split(self, -(-n // chunks), dim)


for _fn, _name in ((_unbind, "unbind"), (_chunk, "chunk"), (_split, "split")):
    _fn.__name__, _fn.__qualname__ = _name, f"Tensor.{_name}"
Tensor.unbind, Tensor.chunk, Tensor.split = _unbind, _chunk, _split
