"""Shared helpers for the op modules: coercing operands and normalising axes."""
from __future__ import annotations

import functools
import numbers

import dask.array as da
import numpy as np
from dask.array.utils import meta_from_array

from .. import _dask as door, chunk
from .._dask import unknown as _unknown
from ..graph import PRIMITIVES
from .._tensor import Tensor, recorded
from .._data import TORCH_TYPE_NAMES
from .._modes import is_grad_enabled

SCALARS = (numbers.Number,)

# The public ops, by name: ``daskgrad.ops.__all__`` and the Tensor methods come from here
OPS: dict[str, tuple] = {}


def public(*methods, name=None):
    """Decorator: the op is public (in ``daskgrad.ops.__all__`` under ``name``, its own by default)
    and ``methods`` are the Tensor methods that call it.  A method name ``__rX__`` swaps the operands,
    ``__iX__`` and ``X_`` write in place; ``(name, wrap)`` installs ``wrap(op)`` instead."""
    def register(fn):
        OPS[name or fn.__name__] = (fn, methods)
        return fn
    return register


def shape_args(fn):
    """torch style ``x.reshape(2, 3)`` and ``x.expand(3)`` as well as NumPy style ``x.reshape((2, 3))``."""
    return lambda self, *shape: fn(self, shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape)


def tensor_or_scalar(x):
    """Tensors and Python scalars pass through (scalars stay weakly typed, as in torch);
    NumPy, cupy and dask arrays become constant tensors."""
    if isinstance(x, np.generic):  # weakly typed, as torch takes it: t + np.float64(2) keeps t's dtype
        return x.item()
    if isinstance(x, Tensor) or isinstance(x, SCALARS):
        return x
    if isinstance(x, da.Array):
        return Tensor._make(x)
    if hasattr(x, "__array_function__"):
        return Tensor._make(door.from_memory(x, -1))
    raise TypeError(f"unsupported operand type: {type(x).__name__}")


def tensor_operand(x, refuse=None):
    """A unary op's operand as a tensor; ``refuse``: the op's name in torch's error for complex inputs."""
    x = as_tensor(x)
    if refuse:
        refuse_complex(refuse, x)
    return (x,)


def torch_scalar(x):
    """A NumPy scalar as torch's ``Scalar`` argument reads it: a NumPy bool is the float 1.0 or 0.0, any other
    NumPy number its Python value (``np.float32(2.5)`` a float: ``alpha=`` of integers refuses it); anything
    else as it is."""
    if isinstance(x, np.generic):
        return float(x) if isinstance(x, np.bool_) else x.item()
    return x


def torch_scalars(method):
    """``method`` (a Tensor method) reading its NumPy scalar arguments as torch's ``Scalar`` does
    (:func:`torch_scalar`):
    ``t.clamp(min=np.True_)`` of integers is float32, as torch's, where NumPy's ``clip`` keeps them integers."""
    def call(self, *args, **kwargs):
        if any(isinstance(v, np.generic) for v in (*args, *kwargs.values())):
            args = tuple(torch_scalar(v) for v in args)
            kwargs = {k: torch_scalar(v) for k, v in kwargs.items()}
        return method(self, *args, **kwargs)
    functools.update_wrapper(call, method)
    return call


def numpy_bool_as_float(x):
    """A NumPy bool as torch's Scalar reads it: the float 1.0 or 0.0 (a Python bool stays a bool)."""
    return float(x) if isinstance(x, np.bool_) else x


def binary_operands(a, b, refuse=None):
    """Two operands that broadcast, on one device; a Python number stays a number (a NumPy bool is a float,
    as torch's Scalar reads it: ``int_t + np.True_`` is float32)."""
    ta, tb = type(a), type(b)
    if ta in _PLAIN_OPERANDS and tb in _PLAIN_OPERANDS and not refuse:  # (the common case: each stays as it is)
        if (ta is int and not _INT_LOW <= a < _INT_HIGH) or (tb is int and not _INT_LOW <= b < _INT_HIGH):
            v = a if ta is int and not _INT_LOW <= a < _INT_HIGH else b
            raise OverflowError("int too big to convert" if v > 0 else "can't convert negative int to unsigned")
        if ta is Tensor and tb is Tensor:
            va, vb = a._storage.value, b._storage.value
            if type(va._meta) is not type(vb._meta):  # (one chunk type is one device)
                check_same_device(a, b)
            if va.shape != vb.shape:
                check_broadcast(va.shape, vb.shape)
        return a, b
    a, b = numpy_bool_as_float(a), numpy_bool_as_float(b)
    if refuse:
        refuse_complex(refuse, a, b)
    a, b = tensor_or_scalar(a), tensor_or_scalar(b)
    for v in (a, b):
        if type(v) is int and not -(1 << 63) <= v < 1 << 64:  # (torch's Scalar holds int64 or uint64)
            raise OverflowError("int too big to convert" if v > 0 else "can't convert negative int to unsigned")
    if isinstance(a, Tensor) and isinstance(b, Tensor):  # (a number is on every device, and broadcasts)
        check_same_device(a, b)
        if a.shape != b.shape:
            check_broadcast(a.shape, b.shape)
    return a, b


_PLAIN_OPERANDS = frozenset({Tensor, float, int, bool})  # (binary_operands passes them as they are)
_INT_LOW, _INT_HIGH = -(1 << 63), 1 << 64  # (torch's Scalar holds int64 or uint64)


def as_tensor(x) -> Tensor:
    """One tensor from an op's array-like operand, as NumPy reads one: a tensor as it is, a number or
    array a constant, and nested lists and tuples as :func:`from_sequence` reads them."""
    if isinstance(x, (list, tuple)):
        return from_sequence(x)
    x = tensor_or_scalar(x)
    if isinstance(x, Tensor):
        return x
    return Tensor._make(door.from_memory(np.array(x), ()))


def _holds_tensor(seq):
    return any(isinstance(v, Tensor) or (isinstance(v, (list, tuple)) and _holds_tensor(v)) for v in seq)


def from_sequence(seq) -> Tensor:
    """Nested lists and tuples as NumPy's ``array`` reads them (``np.mean([x, x + 2])``): without
    tensors, a constant; holding tensors, their stack (the ``stack`` op, so it stays lazy and
    differentiable), numbers among them becoming constants on the tensors' chunk type."""
    if not _holds_tensor(seq):
        return Tensor._make(door.from_memory(np.array(seq), -1))
    like = next(v for v in _leaves(seq) if isinstance(v, Tensor)).array._meta
    items = [from_sequence(v) if isinstance(v, (list, tuple)) else v if isinstance(v, Tensor) else
             constant_like(v, like) for v in seq]
    shapes = {t.shape for t in items}
    if len(shapes) > 1:
        raise ValueError("setting an array element with a sequence. The requested array has an inhomogeneous "
                         f"shape after 1 dimensions. The detected shape was ({len(items)},) + inhomogeneous part.")
    return PRIMITIVES["stack"].bind(*items, axis=0, n=len(items))


def constant_like(value, like):
    """A host number or array as a one-chunk constant of NumPy's dtype for it, on the chunk type of the
    ``_meta`` array ``like`` (so it can meet device chunks)."""
    a = np.array(value)
    return Tensor._make(door.from_memory(a, -1).map_blocks(chunk.like, like, dtype=a.dtype,
                                                                meta=meta_from_array(like, a.ndim, a.dtype)))


def _leaves(seq):
    for v in seq:
        if isinstance(v, (list, tuple)):
            yield from _leaves(v)
        else:
            yield v


def raw(x):
    return x.array if isinstance(x, Tensor) else x


def accumulates_in(x, dtype):
    """The dtype a sum or product of ``x`` is taken in: ``dtype`` where given; torch's int64 for an unsigned
    integer ``x`` (NumPy's is uint64; signed integers and bools are int64 in both); else None, ``x``'s own."""
    if dtype is None and getattr(x, "dtype", None) is not None and x.dtype.kind == "u":
        return np.dtype(np.int64)
    return dtype


value = recorded  # a tensor's value as an op records it (a Lazy value not built yet, or a dask array)


def only_tensor(x):
    return x if isinstance(x, Tensor) else None


def check_same_device(*xs):
    devices = {x.device for x in xs if isinstance(x, Tensor) and x.ndim > 0}
    if len(devices) > 1:
        a, b = sorted(devices, reverse=True)[:2]
        a = f"{a}:0" if a == "cuda" else a
        raise RuntimeError("Expected all tensors to be on the same device, but found at least two devices, "
                           f"{a} and {b}!")


def _is_complex(x):
    return isinstance(x, complex) or (isinstance(x, Tensor) and x.dtype.kind == "c")


def refuse_complex(name, *xs):
    """Ops whose rule does not implement torch's complex convention (the conjugate Wirtinger
    derivative) refuse complex inputs under autograd rather than return a wrong gradient."""
    if (is_grad_enabled() and any(_is_complex(x) for x in xs)
            and any(isinstance(x, Tensor) and x.requires_grad for x in xs)):
        raise RuntimeError(f"{name} does not support automatic differentiation for outputs with complex dtype.")




def refuse_dtype_kinds(kernel, kinds, *xs):
    """torch's NotImplementedError for a kernel without a dtype (``"bitwise_and_cpu" not implemented for
    'Double'``), where NumPy would fail inside a task or answer otherwise."""
    for x in xs:
        dtype = getattr(x, "dtype", None)
        if dtype is None and isinstance(x, numbers.Number) and not isinstance(x, (bool, int)):
            dtype = np.dtype(type(x))
        if dtype is not None and np.dtype(dtype).kind in kinds:
            name = TORCH_TYPE_NAMES.get(str(np.dtype(dtype)), str(dtype))
            raise NotImplementedError(f'"{kernel}_cpu" not implemented for \'{name}\'')


def check_broadcast(sa, sb):
    """torch's RuntimeError for shapes that do not broadcast (dask's ValueError otherwise)."""
    nd = max(len(sa), len(sb))
    sa, sb = (1,) * (nd - len(sa)) + tuple(sa), (1,) * (nd - len(sb)) + tuple(sb)
    for i in range(nd - 1, -1, -1):  # torch reports the last mismatching dimension
        a, b = sa[i], sb[i]
        if a != b and a != 1 and b != 1 and a == a and b == b:
            raise RuntimeError(f"The size of tensor a ({a}) must match the size of tensor b ({b}) "
                               f"at non-singleton dimension {i}")


def norm_axis(axis, ndim):
    """One axis in ``[0, ndim)``; out of range raises torch's IndexError rather than wrapping.
    A 0-d tensor accepts -1 and 0, as in torch."""
    n = ndim if ndim else 1
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"dim must be an int, not {type(axis).__name__}")
    if not -n <= axis < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {axis})")
    return int(axis) % n


def norm_axes(axis, ndim):
    """Sorted axes in ``[0, ndim)``: every op taking ``axis``/``axes`` validates through here, so a
    bad axis raises torch's error on the client instead of silently wrapping."""
    if axis is None:
        return tuple(range(ndim))
    if not isinstance(axis, (tuple, list)):
        axis = (axis,)
    axes = [norm_axis(a, ndim) for a in axis]
    for i, a in enumerate(axes):
        if a in axes[:i]:
            raise RuntimeError(f"dim {a} appears multiple times in the list of dims")
    return tuple(sorted(axes)) if ndim else ()


def is_empty(x) -> bool:
    """Whether ``x`` is known to hold no element (a length after a boolean mask, dask's NaN, is not known to be
    0: ``x.numel()`` would compute it, a submission, where an op only asks whether to take its empty path)."""
    return 0 in x.shape


def numel(shape, axes) -> int:
    n = 1
    for a in axes:
        n *= shape[a]
    return n


WIDE_FAN_IN = 32
SMALL_PARTIAL = 1 << 20  # bytes


def split_every(a, axes):
    """How many partial results one task of a reduction tree combines: dask's default (4 per
    level) suits large partials, but a loss or a row of gradient partials is a few bytes, and a
    tree of 4 made ~0.35 tasks per chunk of scheduling for nothing; 32 of them make one small task.
    ``None`` (dask's default) for partials over 1 MiB."""
    partial = a.dtype.itemsize
    for i, c in enumerate(a.chunks):
        if i not in axes:
            partial *= max(c, default=0) if all(n == n for n in c) else SMALL_PARTIAL
    return WIDE_FAN_IN if partial <= SMALL_PARTIAL else None


def reduce_array(a, fn, axes, keepdims=False):
    """``da.<fn>`` over ``axes``; when every reduced axis is a single chunk (softmax over classes,
    a row norm, a 0-d tensor's ``sum()``), one fusable blockwise task per chunk instead of a
    reduction tree."""
    axes = norm_axes(axes, a.ndim)
    if fn in ("max", "min") and _unknown.unknown(a, axes):  # (dask's max of an empty block fails to combine)
        a = _unknown.no_empty_blocks(a, axes, _unknown.identity_of(fn, a.dtype))
    if (not axes and a.ndim) or any(len(a.chunks[ax]) != 1 for ax in axes):
        return getattr(da, fn)(a, axis=axes, keepdims=keepdims, split_every=split_every(a, axes))
    ind = tuple(range(a.ndim))
    out_ind = ind if keepdims else tuple(i for i in ind if i not in axes)
    keep = keepdims or not a.ndim  # NumPy reduces a 0-d chunk to a scalar, not an array, without keepdims
    meta = getattr(np, fn)(a._meta, axis=axes, keepdims=keep) if a._meta.size else None
    dtype = getattr(np, fn)(np.ones((1,) * a.ndim, dtype=a.dtype), axis=axes).dtype
    chunks = tuple((1,) if i in axes else a.chunks[i] for i in out_ind)
    if meta is None:
        meta = meta_from_array(a._meta, ndim=len(out_ind), dtype=dtype)
    return door.within_chunks(chunk.reduce, a, out_ind, chunks, meta, prefix=fn, fn=fn, axis=axes, keepdims=keep)
