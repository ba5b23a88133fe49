"""Tensor methods that speak torch where daskgrad's function of the same name speaks NumPy.

daskgrad's module-level functions are NumPy's (``dg.std(x)`` has ddof=0, ``dg.max(x, 0)`` gives the values,
``dg.sort(x)`` the sorted values, ``dg.median`` the mean of the two middle values); a Tensor's methods are
torch's (``x.std()`` has ``correction=1``, ``x.max(0)`` and ``x.sort()`` are the named tuple ``(values,
indices)``, ``x.median()`` is the lower middle value, ``x.sum(dim=())`` sums everything).  Where the two
agree the method is the op itself, installed by the op table (``@public("name")``), or under torch's
name by :data:`ALIASES` (``x.lt``, ``x.subtract``); the methods below are those that differ, or that NumPy
arrays do not have (``narrow``, ``topk``, ``addmm`` ...), each a thin call of the ops (views where torch's
are: ``narrow``, ``select``, ``t``, ``view_as``, ``expand_as``).  They are installed on
:class:`~daskgrad.Tensor` from :data:`METHODS`; the "Methods speak torch" table of docs/user-guide/torch.md
lists them, and tests/test_torch_op_db.py checks every one against torch's ``op_db``.
"""
from __future__ import annotations

import builtins
import contextlib
import functools
import math
import numbers
import warnings

import dask.array as da
import numpy as np

from .._dask import unknown as _unknown
from .. import _dask as door, _data, _tensor as _tensor_module, chunk, return_types
from ..graph import View, guard, mark, named, primitive, promoted, relabel
from .._modes import is_grad_enabled
from .._repr import in_memory_values
from .._tensor import Tensor, _ViewStorage, _backend, _current_backend, full, ones, tensor, zeros
from ._util import (accumulates_in, as_tensor, check_broadcast, check_same_device, constant_like, is_empty, norm_axes,
                    norm_axis, tensor_operand, tensor_or_scalar, value)
from .composite import (array_split, corrcoef, cov, cross, dsplit, hsplit, isnan, nanmean, nansum, ravel, tile,
                        vsplit)
from .elementwise import (abs, astype, clip, clone, conj, conj_view_p, exp, log, maximum, minimum, reciprocal, sign,
                          ones_like, sqrt, to_device, trunc, where, zeros_like)
from .indexing import _meta, argsort, getitem, getitem_p
from .layers import _TWO_OVER_SQRT_PI, _erf_ufuncs, special_layer
from .linalg import cholesky as linalg_cholesky, det, inv, matrix_power, pinv, slogdet, vector_norm
from .numpy_extra import diag_embed, take, take_along_axis, values_at
from .numpy_index import _no_derivative, argwhere, count_nonzero, isclose, nonzero
from .products import matmul, mm, outer, same_dtype, tril, triu
from .reductions import _max_local, _refuse_complex_extreme, amax, amin, argmax, argmin, max, mean, min, std, sum, var
from .shape import broadcast_to, flip, movedim, pad, permuted, reshape, squeeze, squeeze_p, swapaxes
from .spectral import matrix_exp
from .triangular import cholesky_solve, solve_triangular


def _dim(dim, axis, name="dim"):
    """torch's ``dim=``, or NumPy's spelling ``axis=`` (torch accepts it too), not both."""
    if axis is not None:
        if dim is not None:
            raise TypeError(f"got both 'axis' and '{name}' (the same argument)")
        return axis
    return dim


def _all_if_empty(dim):
    """torch reads an empty ``dim`` (``x.sum(dim=())``) as every dimension, NumPy as none."""
    return None if isinstance(dim, (tuple, list)) and not len(dim) else dim


# ------------------------------------------------------------------ reductions
def _sum(self, dim=None, keepdim=False, *, dtype=None, axis=None, keepdims=None):
    """torch's ``sum``: over ``dim`` (an int or a tuple; None or ``()``: every dim), in ``dtype`` when given."""
    return sum(self, _all_if_empty(_dim(dim, axis)), keepdim if keepdims is None else keepdims,
               dtype=accumulates_in(self, dtype))  # (torch's int64 of unsigned integers; NumPy's is uint64)


def _float_dtype_given(name, dtype):
    """torch's refusal of a mean in an integer or bool ``dtype``."""
    if dtype is not None and _data.np_dtype(dtype).kind not in "fc":
        d = _data.np_dtype(dtype).name
        raise RuntimeError(f"{name}(): could not infer output dtype. Optional dtype must be either a floating point or "
                           f"complex dtype. Got: {_data.TORCH_TYPE_NAMES.get(d, d)}")


def _mean(self, dim=None, keepdim=False, *, dtype=None, axis=None, keepdims=None):
    """torch's ``mean``: over ``dim`` (an int or a tuple; None or ``()``: every dim), in ``dtype`` when given;
    of integers or bools it raises, as torch's (NumPy's ``daskgrad.mean`` gives float64)."""
    if dtype is None and self.dtype.kind in "biu":
        raise RuntimeError("mean(): could not infer output dtype. Input dtype must be either a floating point or "
                           f"complex dtype. Got: {_data.TORCH_TYPE_NAMES.get(self.dtype.name, self.dtype.name)}")
    _float_dtype_given("mean", dtype)
    x = self if dtype is None else astype(self, _data.np_dtype(dtype))
    return mean(x, _all_if_empty(_dim(dim, axis)), keepdim if keepdims is None else keepdims)


def _nansum(self, dim=None, keepdim=False, *, dtype=None, axis=None, keepdims=None):
    """torch's ``nansum``: the sum with NaN read as 0, over ``dim`` (None or ``()``: every dim)."""
    dtype = accumulates_in(self, None if dtype is None else _data.np_dtype(dtype))  # (torch's int64 of unsigned)
    x = self if dtype is None else astype(self, dtype)
    out = nansum(x, _all_if_empty(_dim(dim, axis)), keepdim if keepdims is None else keepdims)
    return out if dtype is None or out.dtype == x.dtype else astype(out, x.dtype)  # (NumPy's int64 of small ints)


def _nanmean(self, dim=None, keepdim=False, *, dtype=None, axis=None, keepdims=None):
    """torch's ``nanmean``: the mean of the values that are not NaN, over ``dim`` (None or ``()``: every dim)."""
    if dtype is None and self.dtype.kind in "biu":
        raise RuntimeError("nanmean(): expected input to have floating point or complex dtype but got "
                           f"{_data.TORCH_TYPE_NAMES.get(self.dtype.name, self.dtype.name)}")
    _float_dtype_given("nanmean", dtype)
    x = self if dtype is None else astype(self, _data.np_dtype(dtype))
    return nanmean(x, _all_if_empty(_dim(dim, axis)), keepdim if keepdims is None else keepdims)


def _amax(self, dim=None, keepdim=False, *, axis=None, keepdims=None):
    """torch's ``amax``: the largest values over ``dim`` (None or ``()``: every dim), the gradient shared by ties."""
    return amax(self, _all_if_empty(_dim(dim, axis)), keepdim if keepdims is None else keepdims)


def _amin(self, dim=None, keepdim=False, *, axis=None, keepdims=None):
    """torch's ``amin``: the smallest values over ``dim`` (None or ``()``: every dim), the gradient shared by ties."""
    return amin(self, _all_if_empty(_dim(dim, axis)), keepdim if keepdims is None else keepdims)


def _count_nonzero(self, dim=None, *, axis=None):
    """torch's ``count_nonzero``: how many elements are not zero, over ``dim`` (None or ``()``: every dim)."""
    dim = _all_if_empty(_dim(dim, axis))
    if self.ndim == 0 and dim is not None:  # (a 0-d tensor's dim 0 or -1, as torch's: its one element)
        for d in (dim if isinstance(dim, (tuple, list)) else (dim,)):
            norm_axis(d, 0)
        dim = None
    return count_nonzero(self, dim)


def _variance(fn):
    """torch's ``var``/``std``: ``correction=1`` by default, ``unbiased=``, and ``x.var(True)`` (unbiased)."""
    def method(self, dim=None, unbiased=None, keepdim=False, *, correction=None, axis=None, keepdims=None,
               ddof=None):
        if self.dtype.kind in "biu":
            raise RuntimeError("std and var only support floating point and complex dtypes")
        dim = _dim(dim, axis)
        if isinstance(dim, bool):  # torch's var(unbiased) overload
            dim, unbiased = None, dim
        correction = _dim(correction, ddof, "correction")  # NumPy's spelling too
        if unbiased is None and correction is None:
            correction = 1
        dim = _all_if_empty(dim)
        axes = norm_axes(dim, self.ndim)
        n = math.prod(self.shape[a] for a in axes)
        ddof = correction if correction is not None else int(bool(unbiased))
        if n == n and n - ddof <= 0:  # (a length known: torch's warning, at the call)
            warnings.warn(f"{fn.__name__}(): degrees of freedom is <= 0. Correction should be strictly less than "
                          "the reduction factor (input numel divided by output numel).", UserWarning, stacklevel=2)
        return fn(self, dim, keepdims=keepdim if keepdims is None else keepdims, correction=correction,
                  unbiased=unbiased)
    method.__name__ = method.__qualname__ = fn.__name__
    method.__doc__ = (f"torch's ``{fn.__name__}``: with ``correction=1`` (Bessel's) by default, ``unbiased=`` "
                      f"(``correction`` 1 or 0); ``daskgrad.{fn.__name__}`` is NumPy's, ddof=0.")
    return method


# -------------------------------------------------- named results: (values, indices)
def _is_dim(dim):
    return isinstance(dim, numbers.Integral) and not isinstance(dim, bool)


def _scalar_result(x, result):
    """A 0-d tensor's (values, indices) along dim 0: itself and index 0."""
    return result(reshape(x, ()), zeros_like(x, dtype=np.int64))


def _extreme(name, reduce_all, binary, arg, result):
    def method(self, dim=None, keepdim=False, *, other=None, axis=None, keepdims=None):
        dim, keepdim = _dim(dim, axis), keepdim if keepdims is None else keepdims
        if other is not None or (dim is not None and not _is_dim(dim)):  # max(other): elementwise, as maximum
            return binary(self, dim if other is None else other)
        x = as_tensor(self)
        if dim is None:  # over every element: the value, its gradient shared by ties (MaxBackward1)
            return reduce_all(x)
        _refuse_complex_extreme(x, name, False, dim)
        if x.ndim == 0:
            norm_axis(dim, 0)
            return _scalar_result(x, result)
        dim = norm_axis(dim, x.ndim)
        if not x.shape[dim]:
            raise IndexError(f"{name}(): Expected reduction dim {dim} to have non-zero size.")
        idx = arg(x, dim, keepdims=True)  # the first extreme (a NaN, if any), as torch's index
        values = values_at(x, idx, dim, keepdim, f"{name.capitalize()}Backward0")  # the gradient goes to it alone
        return result(values, idx if keepdim else squeeze(idx, dim))
    method.__name__ = method.__qualname__ = name
    method.__doc__ = (f"torch's ``{name}``: over every element the value; ``{name}(dim, keepdim=False)`` the "
                      f"named tuple ``(values, indices)`` (the gradient goes to the index); ``{name}(other)`` "
                      f"the elementwise ``{binary.__name__}``.  ``daskgrad.{name}`` is NumPy's, values only.")
    return method


def _median_at(x, dim, keepdim, ignore_nan, result, node):
    """torch's median along ``dim``: the lower middle value of the sorted slice, and its index.  A NaN
    sorts last: ``median`` gives the slice's first NaN, ``nanmedian`` the median of the other values."""
    n = x.shape[dim]
    order = argsort(x, dim)
    if n != n:  # (an unknown length, after a boolean mask: counted lazily, per slice)
        n = sum(ones_like(x, dtype=np.int64), dim, keepdims=True)
    if x.dtype.kind in "fc":
        nans = sum(isnan(x), dim, keepdims=True)
        pos = where(nans < n, (n - 1 - nans) // 2, 0) if ignore_nan else where(nans > 0, n - nans, (n - 1) // 2)
        pos = astype(pos, np.int64)
    elif isinstance(n, Tensor):
        pos = (n - 1) // 2
    else:
        pos = np.full(x.shape[:dim] + (1,) + x.shape[dim + 1:], (n - 1) // 2)
    idx = take_along_axis(order, pos, dim)
    values = values_at(x, idx, dim, keepdim, node)  # the gradient goes to the index, as torch's
    return result(values, idx if keepdim else squeeze(idx, dim))


# torch's median() and nanmedian() over all elements: the value, its gradient shared evenly by the
# positions holding it (NaN ones where it is NaN), as max() does -- not all to one of them
_median_all_p = primitive("median_all", torch=("MedianBackward0", "NanmedianBackward0"), impl=lambda x, v: v,
                          save=("x", "r"))
_median_all_p.vjp(lambda g, s: (_max_local(g, s.x, s.r, None), None))


def _median(name, ignore_nan, result):
    def method(self, dim=None, keepdim=False, *, axis=None, keepdims=None):
        dim, keepdim = _dim(dim, axis), keepdim if keepdims is None else keepdims
        x = as_tensor(self)
        if dim is None:  # the value only
            if is_empty(x):
                return full((), np.nan, dtype=x.dtype, device=x.device)
            value = _median_at(ravel(x.detach()), 0, False, ignore_nan, result, f"{name.capitalize()}Backward1").values
            return _median_all_p.bind(x, value, node=f"{name.capitalize()}Backward0")
        if x.ndim == 0:
            norm_axis(dim, 0)
            return _scalar_result(x, result)
        dim = norm_axis(dim, x.ndim)
        if not x.shape[dim]:  # (torch's text says median for nanmedian too)
            raise IndexError(f"median(): Expected reduction dim {dim} to have non-zero size.")
        return _median_at(x, dim, keepdim, ignore_nan, result, f"{name.capitalize()}Backward1")
    method.__name__ = method.__qualname__ = name
    method.__doc__ = (f"torch's ``{name}``: the lower of the two middle values for an even count (NumPy's, "
                      f"``daskgrad.{name}``, averages them); ``{name}(dim)`` the named tuple ``(values, "
                      "indices)``; the gradient goes to the value's index.")
    return method


def _sort(self, dim=-1, descending=False, stable=False):
    """torch's ``sort``: the named tuple ``(values, indices)``, stable, NaN largest (``descending=True``:
    first); the gradient goes back where each value came from.  ``daskgrad.sort`` is NumPy's, values only."""
    x = as_tensor(self)
    if x.ndim == 0:
        norm_axis(dim, 0)
        return _scalar_result(x, return_types.sort)
    idx = argsort(x, dim, descending=descending)
    return return_types.sort(values_at(x, idx, dim, True, "SortBackward0"), idx)


def _argsort(self, dim=-1, descending=False, stable=False):
    """torch's ``argsort(dim=-1, descending=False)`` (stable; NaN largest); ``daskgrad.argsort`` is NumPy's
    (``argsort(x, axis, kind)``)."""
    return argsort(self, dim, descending=descending)


# ----------------------------------------------------------------- shape methods
def _squeeze(self, dim=None):
    """torch's ``squeeze``: the length-1 axes of ``dim`` (an int or a tuple) removed, any other left, as
    torch leaves it (``daskgrad.squeeze`` is NumPy's, which raises there); a new view even where nothing is
    removed, its node named by the form, as torch's."""
    if dim is None:
        axes, node = tuple(i for i, n in enumerate(self.shape) if n == 1), "SqueezeBackward0"
    else:
        axes = tuple(a for a in norm_axes(dim, self.ndim) if self.shape[a] == 1)
        node = "SqueezeBackward2" if isinstance(dim, (tuple, list)) else "SqueezeBackward1"
    return squeeze_p.bind(as_tensor(self), node=node, axes=axes)


def _flip(self, *dims, **kwargs):
    """torch's ``flip(dims)``: reversed along each of ``dims`` (``x.flip(0, 1)``, ``x.flip((0, 1))``,
    ``x.flip(dims=(0, 1))``)."""
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = dims[0]
    if "dims" in kwargs:
        if dims:
            raise TypeError("flip() got multiple values for argument 'dims'")
        dims = kwargs.pop("dims")
    if kwargs:
        raise TypeError(f"flip() got an unexpected keyword argument {next(iter(kwargs))!r}")
    return flip(self, dims)


def _narrow(self, dim, start, length):
    """torch's ``narrow``: ``length`` entries from ``start`` along ``dim``, a view."""
    if isinstance(start, Tensor) and (start.ndim != 0 or start.dtype.kind not in "iu"):
        raise RuntimeError("start must be an 0-dim integral Tensor.")
    if self.ndim == 0:
        raise RuntimeError("narrow() cannot be applied to a 0-dim tensor.")
    dim = norm_axis(dim, self.ndim)
    n, start, length = self.shape[dim], int(start), int(length)
    if not -n <= start <= n:
        raise IndexError(f"start out of range (expected to be in range of [{-n}, {n}], but got {start})")
    if length < 0:
        raise RuntimeError("narrow(): length must be non-negative.")
    start = start + n if start < 0 else start
    if start + length > n:
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size ({n}).")
    index = (slice(None),) * dim + (slice(start, start + length),) + (slice(None),) * (self.ndim - dim - 1)
    return getitem_p.bind(self, node="SliceBackward0", index=index, meta=_meta(self))  # a view, even of all of it


def _select(self, dim, index):
    """torch's ``select``: the slice at ``index`` along ``dim``, a view (``daskgrad.select`` is NumPy's
    choice by conditions)."""
    if self.ndim == 0:
        raise IndexError("select() cannot be applied to a 0-dim tensor.")
    dim = norm_axis(dim, self.ndim)
    n, index = self.shape[dim], int(index)
    if not -n <= index < n:
        raise IndexError(f"select(): index {index} out of range for tensor of size {list(self.shape)} at "
                         f"dimension {dim}")
    return getitem(self, (slice(None),) * dim + (index,))


def _t(self):
    """torch's ``t``: a matrix transposed; a 0-d or 1-d tensor as it is (a view, TBackward0)."""
    if self.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {self.ndim}D")
    return permuted(self, tuple(range(self.ndim))[::-1], "TBackward0")


# ------------------------------------------------------------------ conversions
def _is_device(x):
    if isinstance(x, str):
        return x.partition(":")[0] in ("cpu", "cuda")
    return _data.package(x) == "torch" and type(x).__name__ == "device"


def _to(self, *args, **kwargs):
    """torch's ``to``: ``to(dtype)``, ``to(device, dtype=None)``, ``to(other)`` (its device and dtype), with
    ``non_blocking``, ``copy`` (a new tensor even when nothing changes) and ``memory_format`` (no strides
    here: ignored); differentiable; the tensor itself when nothing changes."""
    args = list(args)
    device, dtype = kwargs.pop("device", None), kwargs.pop("dtype", None)
    if args and isinstance(args[0], Tensor):
        other = args.pop(0)
        device, dtype = other.device, other.dtype
    elif args and (_is_device(args[0]) or isinstance(args[0], int) and not isinstance(args[0], bool)):
        device = args.pop(0)
        device = f"cuda:{device}" if isinstance(device, int) else device
    if args and not isinstance(args[0], bool) and args[0] is not None:
        dtype = args.pop(0)
    names = ["non_blocking", "copy", "memory_format"]
    given = dict(zip(names, args))
    if len(args) > len(names) or set(given) & set(kwargs) or set(kwargs) - set(names):
        raise TypeError(f"to() received an invalid combination of arguments - got {len(args)} more positional "
                        f"argument(s) and keywords {sorted(kwargs)}")
    given.update(kwargs)
    out = self
    if dtype is not None:
        out = astype(out, _data.np_dtype(dtype))
    if device is not None and _backend(_data.device(device)) != _current_backend(out.array):
        out = to_device(out, _data.device(device).type)
    return clone(out) if given.get("copy") and out is self else out


def _memory_format_cast(dtype):
    def method(self, memory_format=None):
        return astype(self, dtype)
    method.__doc__ = f"``to({dtype})`` (``memory_format`` ignored: no strides here)."
    return method


def _new(factory, name):
    """``self.new_zeros(size)`` etc.: a new leaf with ``self``'s dtype and device unless given."""
    def method(self, *args, dtype=None, device=None, requires_grad=False, layout=None, pin_memory=False):
        return factory(*args, dtype=self.dtype if dtype is None else _data.np_dtype(dtype),
                       device=self.device if device is None else device, requires_grad=requires_grad)
    method.__name__ = method.__qualname__ = name
    method.__doc__ = (f"torch's ``{name}``: a new leaf of ``self``'s dtype and device unless ``dtype``/``device`` are "
                      "given.")
    return method


def _new_full(size, fill_value, dtype, device, requires_grad):
    return full(tuple(size) if not isinstance(size, int) else (size,), fill_value, dtype=dtype,
                requires_grad=requires_grad, device=device)


def _new_tensor(data, dtype, device, requires_grad):
    return tensor(data, dtype=dtype, device=device, requires_grad=requires_grad)


# ------------------------------------------- torch's methods NumPy's arrays do not have
def _cast(dtype):
    def method(self, memory_format=None):
        return astype(self, np.dtype(dtype))
    method.__doc__ = f"``to({np.dtype(dtype)})``, differentiable where that dtype is."
    return method


def _clamp_min(self, min):
    """torch's ``clamp_min``: ``clamp(min=min)``."""
    return clip(self, min, None)


def _clamp_max(self, max):
    """torch's ``clamp_max``: ``clamp(max=max)``."""
    return clip(self, None, max)


def _expand_as(self, other):
    """torch's ``expand_as``: ``expand(other.shape)``, a view."""
    return Tensor.expand(self, other.shape)


def _reshape_as(self, other):
    """torch's ``reshape_as``: ``reshape(other.shape)``, a view where the elements allow it, else a copy."""
    return reshape(self, other.shape)


def _view_as(self, other):
    """torch's ``view_as``: ``view(other.shape)``, a view (torch's error where the elements cannot be
    walked so)."""
    return self.view(other.shape)


def _type_as(self, other):
    """``to(other.dtype)``."""
    return astype(self, other.dtype)


def _masked_fill(self, mask, value):
    """torch's ``masked_fill``: ``value`` (a number or a 0-d tensor, which gets the gradient there) where
    ``mask`` is True."""
    if isinstance(value, Tensor) and value.ndim:
        raise RuntimeError("masked_fill_ only supports a 0-dimensional value tensor, but got tensor with "
                           f"{value.ndim} dimension(s).")
    if isinstance(value, Tensor) and value.dtype != self.dtype:
        host = in_memory_values(value.array)
        if host is not None:  # (torch reads the value, item(): one out of self's dtype's range raises)
            _data.checked_scalar(host.item(), self.dtype)
        value = astype(value, self.dtype)
    value = _data.checked_scalar(value, self.dtype)
    out = where(mask, value, self)  # (a number of a higher category: written in self's dtype, as torch's)
    return out if out.dtype == self.dtype else astype(out, self.dtype)


@named("MaskedSelectBackward0")
def _masked_select(self, mask):
    """torch's ``masked_select``: the elements where the broadcast ``mask`` is True, as one 1-d tensor."""
    mask = as_tensor(mask)
    shape = np.broadcast_shapes(self.shape, mask.shape)
    x = self if self.shape == shape else broadcast_to(self, shape)
    # (torch's saves self: a write to it before the backward raises)
    return guard(getitem(ravel(x), ravel(mask if mask.shape == shape else broadcast_to(mask, shape))), self)


def _gather(self, dim, index, *, sparse_grad=False):
    """torch's ``gather``: ``out[i][j] = self[index[i][j]][j]`` along ``dim``; ``index`` no larger than
    ``self`` on the other dims (read from their start), not broadcast; out of range, torch's error (a
    lazy index's from its tasks).  ``sparse_grad=True`` (a sparse gradient for ``self``) is refused: no
    sparse tensors here."""
    if sparse_grad:
        raise NotImplementedError("gather(sparse_grad=True): daskgrad has no sparse tensors (the gradient is dense)")
    host = np.asarray(index) if isinstance(index, np.ndarray) else None
    index = as_tensor(index)
    dim = norm_axis(dim, self.ndim)
    if 0 in index.shape:  # torch checks nothing more of an empty index: an empty result of its shape
        return reshape(getitem(reshape(self, (-1,)), slice(0, 0)), index.shape)
    x = self if self.ndim else reshape(self, (1,))  # torch reads a 0-d tensor (or index) as 1-d
    idx = index if index.ndim else reshape(index, (1,))
    if idx.ndim != x.ndim:
        raise RuntimeError("Index tensor must have the same number of dimensions as input tensor")
    for d, (n, m) in enumerate(zip(idx.shape, x.shape)):
        if d != dim and n > m:
            raise RuntimeError(f"Size does not match at dimension {d} expected index {list(index.shape)} to be no "
                               f"larger than self {list(self.shape)} apart from dimension {dim}")
    x = getitem(x, tuple(slice(None) if d == dim else slice(0, n) for d, n in enumerate(idx.shape)))
    n = x.shape[dim]
    idx = _in_range(idx, None if host is None else host.reshape(idx.shape), n, RuntimeError,
                    f"index {{}} is out of bounds for dimension {dim} with size {n}")
    out = take_along_axis(x, idx, dim)
    return guard(out if out.shape == index.shape else reshape(out, index.shape), self, index)


@named("IndexSelectBackward0")
def _index_select(self, dim, index):
    """torch's ``index_select``: the slices at the 1-d (or 0-d) integer ``index`` along ``dim``."""
    index = as_tensor(index)
    if index.ndim > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    return take(self, reshape(index, (-1,)) if index.ndim == 0 else index, norm_axis(dim, self.ndim or 1)) \
        if self.ndim else reshape(take(reshape(self, (1,)), reshape(index, (-1,)), 0), ())


def _known_length(op, x, dim):
    """Refuses (before anything is submitted) an op whose result's shape or check needs the length of ``dim``,
    where that is not known until computed (rows after a boolean mask)."""
    if x.shape[dim] != x.shape[dim]:
        raise NotImplementedError(
            f"{op}() along dim {dim}, whose length is not known until computed (rows after a boolean mask: dask's "
            f"unknown chunk sizes): k is checked against it and the result's shape is read from it; select the rows "
            f"with a known count first, or take {op} along another dim")


def _topk(self, k, dim=-1, largest=True, sorted=True):
    """torch's ``topk``: the named ``(values, indices)`` of the ``k`` largest (``largest=False``:
    smallest) along ``dim``, in order (NaN largest); the gradient goes to their indices."""
    x = as_tensor(self)
    if x.ndim == 0:
        norm_axis(dim, 0)
        if k not in (0, 1):
            raise RuntimeError("selected index k out of range")
        return _scalar_result(x, return_types.topk)
    dim = norm_axis(dim, x.ndim)
    _known_length("topk", x, dim)
    if not 0 <= k <= x.shape[dim]:
        raise RuntimeError("selected index k out of range")
    idx = getitem(argsort(x, dim, descending=largest), (slice(None),) * dim + (slice(0, k),))
    return return_types.topk(values_at(x, idx, dim, True, "TopkBackward0"), idx)


def _ger(self, vec2):
    """torch's ``ger``: ``outer`` (its checks and words)."""
    return Tensor.outer(self, vec2)


def _kthvalue(self, k, dim=-1, keepdim=False):
    """torch's ``kthvalue``: the named ``(values, indices)`` of the ``k``-th smallest along ``dim``."""
    x = as_tensor(self)
    if x.ndim == 0:
        norm_axis(dim, 0)
        if k != 1:
            raise RuntimeError("kthvalue(): selected number k out of range for dimension 0")
        return _scalar_result(x, return_types.kthvalue)
    dim = norm_axis(dim, x.ndim)
    _known_length("kthvalue", x, dim)
    if not x.shape[dim]:
        raise IndexError(f"kthvalue(): Expected reduction dim {dim} to have non-zero size.")
    if not 1 <= k <= x.shape[dim]:
        raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {dim}")
    idx = getitem(argsort(x, dim), (slice(None),) * dim + (slice(k - 1, k),))
    values = values_at(x, idx, dim, keepdim, "KthvalueBackward0")
    return return_types.kthvalue(values, idx if keepdim else squeeze(idx, dim))


@named("AminmaxBackward0")
def _aminmax(self, *, dim=None, keepdim=False):
    """torch's ``aminmax``: the named ``(min, max)`` over ``dim`` (every element when None); torch's own
    errors for an empty input or reduction dim."""
    x = as_tensor(self)
    if dim is None and is_empty(x):
        raise RuntimeError("aminmax(): cannot compute aminmax over an empty dimension as the operation has no "
                           "identity.")
    if dim is not None and x.ndim and not x.shape[norm_axis(dim, x.ndim)]:
        raise IndexError(f"aminmax: Expected reduction dim {norm_axis(dim, x.ndim)} to have non-zero size.")
    return return_types.aminmax(amin(self, dim, keepdim), amax(self, dim, keepdim))


def _tensor_split(self, indices_or_sections, dim=0):
    """torch's ``tensor_split`` (NumPy's ``array_split``), a tuple."""
    if self.ndim == 0:
        raise RuntimeError("tensor_split expected at least a 1-dimensional tensor, but got a tensor with 0 dims")
    if isinstance(indices_or_sections, Tensor):
        indices_or_sections = indices_or_sections.detach().numpy().tolist()
    return tuple(array_split(self, indices_or_sections, norm_axis(dim, self.ndim)))


def _np_split(fn, name):
    need = {"hsplit": 1, "vsplit": 2, "dsplit": 3}[name]

    def method(self, indices_or_sections):
        # torch's checks: the dimensions, the argument's type, then sections that divide the dimension evenly
        if self.ndim < need:
            raise RuntimeError(f"torch.{name} requires a tensor with at least {need} dimension, but got a tensor with "
                               f"{self.ndim} dimensions!")
        arg = indices_or_sections
        if isinstance(arg, Tensor) and arg.ndim == 0 and arg.dtype.kind in "iu":
            arg = int(arg.item())
        if not isinstance(arg, (numbers.Integral, Tensor, list, tuple)) or isinstance(arg, bool):
            got = type(arg).__name__
            raise TypeError(f"{name}() received an invalid combination of arguments - got ({got}), but expected one "
                            f"of:\n * (int sections)\n      didn't match because some of the arguments have invalid "
                            f"types: (!{got}!)\n * (tuple of ints indices)\n      didn't match because some of the "
                            f"arguments have invalid types: (!{got}!)\n")
        if isinstance(arg, numbers.Integral):
            if arg < 0:
                raise RuntimeError(f"number of sections must be larger than 0, got {arg}")
            dim = 0 if name == "vsplit" or (name == "hsplit" and self.ndim == 1) else 1 if name == "hsplit" else 2
            if arg == 0 or self.shape[dim] % arg:
                raise RuntimeError(f"torch.{name} attempted to split along dimension {dim}, but the size of the "
                                   f"dimension {self.shape[dim]} is not divisible by the split_size {arg}!")
        return tuple(fn(self, arg))
    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"torch's ``{name}``: NumPy's, as a tuple."
    return method


@named("RepeatBackward0")
def _tile(self, *dims):
    """torch's ``tile``: NumPy's, the repetitions as several ints (``x.tile(2, 1)``) or one sequence."""
    return tile(self, dims[0] if len(dims) == 1 and not isinstance(dims[0], numbers.Integral) else dims)


def _isclose(self, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """torch's ``isclose``: ``|self - other| <= atol + rtol * |other|`` element-wise (NaNs equal with
    ``equal_nan``); one dtype, as torch requires."""
    if isinstance(other, Tensor) and self.dtype != other.dtype:
        raise RuntimeError(f"{_type_name(self.dtype)} did not match {_type_name(other.dtype)}")
    for name, tol in (("rtol", rtol), ("atol", atol)):
        if tol < 0:
            raise RuntimeError(f"{name} must be greater than or equal to zero, but got {_number(tol)}")
    return isclose(self, other, rtol, atol, equal_nan)


def _clone(self, *, memory_format=None):
    """torch's ``clone``: a copy recording ``CloneBackward0`` (``memory_format`` ignored: no strides here)."""
    return clone(self)


@named("RepeatBackward0")
def _repeat(self, *sizes):
    """torch's ``repeat``: the tensor tiled ``sizes`` times (NumPy's ``tile``; ``daskgrad.repeat`` is NumPy's
    element-wise repeat, torch's ``repeat_interleave``)."""
    sizes = tuple(sizes[0]) if len(sizes) == 1 and not isinstance(sizes[0], numbers.Integral) else sizes
    if len(sizes) < self.ndim:
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number of dimensions of "
                           "tensor")
    return tile(self, sizes)


def _where(self, condition, other):
    """torch's ``x.where(condition, other)``: ``where(condition, x, other)``; a number ``other`` converted to
    ``x``'s dtype with torch's range check (``int8.where(c, 2**40)`` raises, as not wraps)."""
    if isinstance(other, (int, float, np.generic)) and not isinstance(other, (bool, np.bool_)):
        dtype = _data.result_type(self, other)
        if dtype == self.dtype:  # (of half, torch checks float32's range: 1e10 becomes inf)
            other = _data.checked_scalar(other, np.float32 if dtype == np.float16 else dtype)
    return where(condition, self, other)


def _check_ndim(x, n, what):
    if x.ndim != n:
        raise RuntimeError(f"{what} must be a {n}D tensor" if n != 2 else f"{what} must be a matrix")


def _mv(self, vec):
    """torch's ``mv``: a matrix times a vector."""
    if self.ndim == 0:  # (torch reads the matrix's length first)
        raise IndexError("Dimension specified as 0 but tensor has no dimensions")
    if self.ndim != 2 or as_tensor(vec).ndim != 1:
        raise RuntimeError(f"vector + matrix @ vector expected, got 1, {self.ndim}, {as_tensor(vec).ndim}")
    return matmul(*same_dtype(self, vec))


def _bmm(self, mat2):
    """torch's ``bmm``: batches of matrices multiplied, both 3-d."""
    mat2 = as_tensor(mat2)
    _check_ndim(self, 3, "batch1")
    _check_ndim(mat2, 3, "batch2")
    return matmul(*same_dtype(self, mat2))


def _scaled_sum(self, product, beta, alpha, addr=False):
    """``beta * self + alpha * product``, ``self`` ignored when ``beta`` is 0 (torch: its NaNs too).  The numbers
    converted as torch's: for integers a float is truncated (``addr`` refuses it), one out of range raises."""
    dtype = _data.result_type(self, product)
    for name, number in (("beta", beta), ("alpha", alpha)):
        if isinstance(number, Tensor) or dtype.kind == "b":
            continue
        if dtype.kind in "iu" and isinstance(number, (float, np.floating)):
            if addr:
                raise RuntimeError(f"For integral input tensors, argument {name} must not be a floating point number.")
            number = int(_data.checked_scalar(number, dtype))
        else:
            number = _data.checked_scalar(number, np.float32 if dtype == np.float16 else dtype)
        beta, alpha = (number, alpha) if name == "beta" else (beta, number)
    product = product if alpha == 1 else product * alpha
    if beta == 0:
        return broadcast_to(product * 1, np.broadcast_shapes(self.shape, product.shape))
    return (self if beta == 1 else self * beta) + product


def _addmm(self, mat1, mat2, *, beta=1, alpha=1):
    """torch's ``addmm``: ``beta * self + alpha * (mat1 @ mat2)``."""
    return _scaled_sum(self, mm(mat1, mat2), beta, alpha)


def _addmv(self, mat, vec, *, beta=1, alpha=1):
    """torch's ``addmv``: ``beta * self + alpha * (mat @ vec)``; ``self`` a vector or a number (torch's check: a
    matrix would broadcast)."""
    mat, vec = as_tensor(mat), as_tensor(vec)
    if as_tensor(self).ndim > 1 or mat.ndim != 2 or vec.ndim != 1:
        raise RuntimeError(f"vector + matrix @ vector expected, got {as_tensor(self).ndim}, {mat.ndim}, {vec.ndim}")
    return _scaled_sum(self, _mv(mat, vec), beta, alpha)


def _addr(self, vec1, vec2, *, beta=1, alpha=1):
    """torch's ``addr``: ``beta * self + alpha * outer(vec1, vec2)``."""
    return _scaled_sum(self, outer(vec1, vec2), beta, alpha, addr=True)


def _baddbmm(self, batch1, batch2, *, beta=1, alpha=1):
    """torch's ``baddbmm``: ``beta * self + alpha * (batch1 @ batch2)``."""
    return _scaled_sum(self, _bmm(as_tensor(batch1), batch2), beta, alpha)


def _addbmm(self, batch1, batch2, *, beta=1, alpha=1):
    """torch's ``addbmm``: ``beta * self + alpha * sum_b(batch1[b] @ batch2[b])``."""
    return _scaled_sum(self, sum(_bmm(as_tensor(batch1), batch2), 0), beta, alpha)


def _addcmul_operands(a, t1, t2, value):
    a, t1, t2 = as_tensor(a), as_tensor(t1), as_tensor(t2)
    check_broadcast(t1.shape, t2.shape)
    check_broadcast(a.shape, np.broadcast_shapes(t1.shape, t2.shape))
    return a, t1, t2, value


_addcmul_p = primitive("addcmul", torch="AddcmulBackward0", impl=chunk.addcmul, args=("a", "t1", "t2", "value"),
                       save=(("t1", 2), ("t2", 1), "value"), consts=("value",), prepare=_addcmul_operands,
                       promote="common", elementwise=True)


@_addcmul_p.vjp
def _addcmul_rule(g, s):
    value = s.value
    return (g, (g * value * conj(s.t2) if s.needs[1] else None), (g * value * conj(s.t1) if s.needs[2] else None))


def _addcmul(self, tensor1, tensor2, *, value=1):
    """torch's ``addcmul``: ``self + value * tensor1 * tensor2``, one fused multiply-add as torch's (a 0-d
    tensor ``value``, whose value is not known here: the products)."""
    if isinstance(value, Tensor):
        return self + value * tensor1 * tensor2
    dtype = _data.result_type(self, tensor1, tensor2)
    if dtype.kind == "b":
        raise NotImplementedError("\"addcmul_cpu_out\" not implemented for 'Bool'")
    return _addcmul_p.bind(self, tensor1, tensor2, _data.checked_scalar(value, np.float32 if dtype == np.float16
                                                                          else dtype))


_addcdiv_p = primitive("addcdiv", torch="AddcdivBackward0", impl=chunk.addcdiv, args=("a", "t1", "t2", "value"),
                       save=(("t1", 2), "t2", "value"), consts=("value",), prepare=_addcmul_operands,
                       promote="common", elementwise=True)


@_addcdiv_p.vjp
def _addcdiv_rule(g, s):
    t2, value = conj(s.t2), s.value
    return (g, (g * value / t2 if s.needs[1] else None),
            (-g * value * conj(s.t1) / (t2 * t2) if s.needs[2] else None))


def _addcdiv(self, tensor1, tensor2, *, value=1):
    """torch's ``addcdiv``: ``self + value * tensor1 / tensor2`` (half in float32, as torch's)."""
    if type(value) is int:  # (torch's Scalar first: an int beyond int64 and uint64 is refused)
        _data.checked_scalar(value, np.float64)
    if as_tensor(tensor1).dtype.kind in "biu" and as_tensor(tensor2).dtype.kind in "biu":
        raise RuntimeError("Integer division with addcdiv is no longer supported, and in a future  release addcdiv "
                           "will perform a true division of tensor1 and tensor2. The historic addcdiv behavior can be "
                           "implemented as (input + value * torch.trunc(tensor1 / tensor2)).to(input.dtype) for "
                           "integer inputs and as (input + value * tensor1 / tensor2) for float inputs. The future "
                           "addcdiv behavior is just the latter implementation: (input + value * tensor1 / tensor2), "
                           "for all dtypes.")
    if isinstance(value, Tensor):  # (a 0-d tensor, whose value is not known here)
        return self + value * tensor1 / tensor2
    dtype = _data.result_type(self, tensor1, tensor2)
    return _addcdiv_p.bind(self, tensor1, tensor2, _data.checked_scalar(value, np.float32 if dtype == np.float16
                                                                          else dtype))


@named("RsqrtBackward0")
def _rsqrt(self):
    """torch's ``rsqrt``: ``1 / sqrt(x)``."""
    return reciprocal(sqrt(self))


@named("FracBackward0")
def _frac(self):
    """torch's ``frac``: ``x - trunc(x)``, the sign of ``x``; the gradient passes."""
    return self - trunc(self)


def _lerp_operands(a, b, w):
    a, b, w = as_tensor(a), as_tensor(b), tensor_or_scalar(w)
    for name, t in (("end", b), ("weight", w)):
        if isinstance(t, Tensor) and t.dtype != a.dtype and (name == "end" or t.ndim):
            raise RuntimeError(f"expected dtype {_LOWER_NAMES.get(a.dtype.name, a.dtype.name)} for `{name}` but got "
                               f"dtype {_LOWER_NAMES.get(t.dtype.name, t.dtype.name)}")
    if a.dtype.kind not in "fc":
        kernel = "lerp_kernel_tensor" if isinstance(w, Tensor) else "lerp_kernel_scalar"
        raise NotImplementedError(f'"{kernel}" not implemented for '
                                  f"'{_data.TORCH_TYPE_NAMES.get(a.dtype.name, a.dtype.name)}'")
    check_broadcast(a.shape, b.shape)
    if isinstance(w, Tensor):
        check_broadcast(np.broadcast_shapes(a.shape, b.shape), w.shape)
    if not isinstance(w, Tensor):
        w = _data.checked_scalar(w, a.dtype)  # (a complex weight for a real self: torch's error)
    if isinstance(w, Tensor) and w.dtype != a.dtype:  # (a 0-d weight of another dtype: read in self's)
        w = astype(w, a.dtype)
    return a, b, w


_LOWER_NAMES = {"float32": "float", "float64": "double", "float16": "c10::Half", "bfloat16": "c10::BFloat16",
                "complex64": "c10::complex<float>", "complex128": "c10::complex<double>", "bool": "bool",
                "uint8": "unsigned char", "int8": "signed char", "int16": "short int", "int32": "int",
                "int64": "long int"}  # (torch's words in lerp's dtype error: the C++ type names)
_lerp_p = primitive("lerp", torch=("LerpBackward0", "LerpBackward1"), impl=chunk.lerp, args=("a", "b", "w"),
                    save=(("a", 2), ("b", 2), "w"), prepare=_lerp_operands, elementwise=True)  # (as torch saves)


@_lerp_p.vjp
def _lerp_rule(g, s):
    # torch's: self takes g (1 - w)*, end g w*, a tensor weight g (end - self)*
    w = s.w
    return ((g * conj(1 - w) if s.needs[0] else None), (g * conj(w) if s.needs[1] else None),
            (g * conj(s.b - s.a) if len(s.needs) > 2 and s.needs[2] else None))


def _lerp(self, end, weight):
    """torch's ``lerp``: ``self + weight * (end - self)``, by torch's two formulas (exact at both ends)."""
    return _lerp_p.bind(self, end, weight, node="LerpBackward1" if isinstance(weight, Tensor) else "LerpBackward0")


def _logit_array(a, *, eps):
    a = a if eps is None else da.clip(a, eps, 1 - eps)
    return da.log(a / (1 - a))


def _logit_rule(g, s, *, eps):
    # torch's LogitBackward0: g / (x (1 - x)), g * inf at 0 and 1, and outside [0, 1] NaN (no eps) or 0
    # (outside [eps, 1 - eps]); the chain rule through log(x / (1 - x)) gave numbers where torch's are NaN
    x = s.x
    ends = (x == 0) | (x == 1)
    # (g masked before the product with inf: a double backward sends the zero cotangent of the branch not taken
    # through it, and 0 * inf there would be NaN everywhere)
    at = where(ends, where(ends, g, 0) * math.inf, g / (x * (1 - x)))
    if eps is None:
        return (where((x < 0) | (x > 1), math.nan, at),)
    return (where((x < eps) | (x > 1 - eps), 0, at),)


_logit_p = primitive("logit", torch="LogitBackward0", impl=_logit_array, save=("x",), prepare=tensor_operand)
_logit_p.vjp(_logit_rule)


def _logit(self, eps=None):
    """torch's ``logit``: ``log(x / (1 - x))``, ``x`` clamped to ``[eps, 1 - eps]`` when given (a negative
    ``eps`` is none); torch's gradient, NaN outside ``[0, 1]`` without ``eps``."""
    x = self if self.dtype.kind in "fc" else self.astype(_data.DEFAULT_FLOAT)  # (1 - x of uint8 would wrap)
    return _logit_p.bind(x, eps=None if eps is None or eps < 0 else float(eps))


def _xlogy_array(x, y):
    return da.where((x == 0) & (y == y), 0, x * da.log(y)).astype(x.dtype, copy=False)


def _xlogy_of(a, y):
    """torch's ``xlogy(a, y)`` in daskgrad ops: ``a * log(y)``, 0 where ``a`` is 0 and ``y`` no NaN."""
    return where((a == 0) & ~isnan(y), 0, a * log(y))


def _xlogy_rule(g, s):
    # torch's XlogyBackward0: self gets xlogy(g, y) masked to 0 where self is 0 and y <= 0 (a zero cotangent
    # gives 0 even where log(y) is infinite, an infinite one at self = 0 gives 0 there), other gets g * x / y
    x, y = s.x, s.y
    return where((x == 0) & (y <= 0), 0, _xlogy_of(g, y)), g * x / y


_xlogy_p = primitive("xlogy", torch="XlogyBackward0", impl=_xlogy_array, args=("x", "y"), save=("x", "y"))
_xlogy_p.vjp(_xlogy_rule)


def _xlogy(self, other):
    """torch's ``xlogy``: ``x * log(other)``, 0 where ``x`` is 0 (unless ``other`` is NaN), in torch's floating
    result type of the two (a number ``other`` weak, as in torch); torch's gradients."""
    other = tensor_or_scalar(other)
    dtype = _data.result_type(self, other, floating=True)
    x = self if self.dtype == dtype else astype(self, dtype)
    y = (constant_like(np.array(other, dtype), value(x)._meta) if not isinstance(other, Tensor) else
         other if other.dtype == dtype else astype(other, dtype))
    check_same_device(self, other)
    check_broadcast(x.shape, y.shape)
    return _xlogy_p.bind(x, y)


def _cov(self, *, correction=1, fweights=None, aweights=None):
    """torch's ``cov``: the variables in the rows, ``correction=1`` (NumPy's ``cov(x, ddof=1)``), with
    frequency and observation weights as NumPy's ``cov``; torch's checks of the input and the weights (a lazy
    weight's sign is checked in the tasks that read it)."""
    if self.ndim > 2:
        raise RuntimeError(f"cov(): expected input to have two or fewer dimensions but got an input with {self.ndim} "
                           "dimensions")
    if self.dtype == np.bool_:
        raise RuntimeError("cov(): bool dtype is not supported for input")
    observations = self.shape[-1] if self.ndim else 1
    checked = {}
    for name, w, kinds, what in (("fweights", fweights, "iu", "integral"), ("aweights", aweights, "f",
                                                                            "floating point")):
        if w is None:
            continue
        w = as_tensor(w)
        if w.ndim > 1:
            raise RuntimeError(f"cov(): expected {name} to have one or fewer dimensions but got {name} with "
                               f"{w.ndim} dimensions")
        if w.dtype.kind not in kinds:
            raise RuntimeError(f"cov(): expected {name} to have {what} dtype but got {name} with "
                               f"{_data.TORCH_TYPE_NAMES.get(w.dtype.name, w.dtype.name)} dtype")
        if w.numel() != observations:
            raise RuntimeError(f"cov(): expected {name} to have the same numel as there are observations in the "
                               f"input but got {w.numel()} != {observations}")
        if observations and not w.requires_grad:
            w = _in_range(w, in_memory_values(w.array), math.inf, RuntimeError, f"cov(): {name} cannot be negative")
        checked[name] = w
    fweights, aweights = checked.get("fweights"), checked.get("aweights")
    if fweights is None and aweights is None:
        return cov(self, ddof=correction)
    w = fweights if aweights is None else aweights if fweights is None else fweights * aweights
    w = astype(as_tensor(w), self.dtype if self.dtype.kind in "fc" else np.float64)
    v1 = sum(w)
    centered = self - sum(self * w, -1, keepdims=True) / v1
    fact = v1 - (correction if aweights is None else correction * sum(w * aweights) / v1)
    c = matmul(centered * w, conj(swapaxes(centered, 0, -1))) / fact
    return reshape(c, ()) if c.shape == (1, 1) else c  # (one variable: a 0-d tensor, as NumPy's and torch's)


def _msort(self):
    """torch's ``msort``: ``sort(dim=0).values``."""
    return _sort(self, 0).values


def matrices(x, what):
    """``x``, refused with torch's words where ``what`` (``"tensor.mT"``) needs matrices: a 1-d tensor."""
    if x.ndim == 1:
        raise RuntimeError(f"{what} is only supported on matrices or batches of matrices. Got 1-D tensor.")
    return x


def _conj(self):
    """torch's ``conj``: of a complex tensor, a view of its storage seen conjugated (``is_conj()``): a write
    through it writes the conjugate into the tensor; of a real one, the tensor itself."""
    return conj_view_p.bind(self) if self.dtype.kind == "c" else self


def _is_conj(self):
    """torch's ``is_conj``: whether this tensor sees its storage conjugated (a view through an odd number
    of ``conj()``)."""
    st = self._storage
    return type(st) is _ViewStorage and len([p for p, _, _ in st.steps if p is conj_view_p]) % 2 == 1


def _resolve_conj(self):
    """torch's ``resolve_conj``: a conjugated view's values as a new tensor (``is_conj()`` False); any
    other tensor itself."""
    return clone(self) if _is_conj(self) else self


def _adjoint(self):
    """torch's ``adjoint``: the last two dims swapped and conjugated, a view (of a 0-d tensor, its conjugate:
    a real one itself, as torch's)."""
    return _conj(self if self.ndim == 0 else swapaxes(matrices(self, "tensor.adjoint()"), -2, -1))


def _mH(self):
    return _conj(self if self.ndim == 0 else swapaxes(matrices(self, "tensor.mH"), -2, -1))


def _H(self):
    if self.ndim not in (0, 2):
        raise RuntimeError(f"tensor.H is only supported on matrices (2-D tensors). Got {self.ndim}-D tensor.")
    return conj(swapaxes(self, 0, -1)) if self.ndim else _conj(self)  # (0-d: its conjugate, as torch's)


def _itself(name):
    def method(self):
        return self
    method.__doc__ = f"torch's ``{name}``: the tensor itself (daskgrad keeps no lazy conjugate or negative bit)."
    return method


def _logdet(self):
    """torch's ``logdet``: ``log(det)``, NaN for a negative determinant, -inf for a zero one."""
    sign, logabsdet = slogdet(self)
    if sign.dtype.kind == "c":  # (a complex determinant's log: its sign's log, a phase, plus log|det|)
        return log(sign) + logabsdet
    return where(sign < 0, np.nan, logabsdet)


def _pinverse(self, rcond=1e-15):
    """torch's ``pinverse``: the pseudo-inverse, singular values below ``rcond`` times the largest cut."""
    return pinv(self, rcond=rcond)


@named("DistBackward0")
def _dist(self, other, p=2):
    """torch's ``dist``: the ``p``-norm of ``self - other``."""
    return guard(vector_norm(self - other, p), self, other)


def _argwhere(self):
    """torch's ``argwhere``: the indices of the non-zero elements, one row each (an unknown count until
    computed); a 0-d tensor has rows of no index."""
    if self.ndim == 0:
        return getitem(argwhere(reshape(self, (1,))), (slice(None), slice(0, 0)))
    if is_empty(self):  # (dask's argwhere of no elements fails)
        return zeros(0, self.ndim, dtype=np.int64, device=self.device)
    return argwhere(self)


def _nonzero(self, *, as_tuple=False):
    """torch's ``nonzero``: :func:`_argwhere`'s rows, or (``as_tuple``, NumPy's) one index tensor per dim
    (a 0-d tensor read as 1-d)."""
    if as_tuple:
        return tuple(nonzero(self if self.ndim else reshape(self, (1,))))
    return _argwhere(self)


@named("SgnBackward0")
def _sgn(self):
    """torch's ``sgn``: ``sign`` of a real tensor, ``z / |z|`` (0 at 0) of a complex one."""
    if self.dtype.kind != "c":
        return guard(sign(self), self)
    r = abs(self)
    return guard(where(r == 0, 0, self / where(r == 0, 1, r)), self)


# ------------------------------------------------------------------ bit shifts
def _shift_array(a, b, *, left):
    return da.core.elemwise(chunk.shift, a, b, left, dtype=(a if hasattr(a, "dtype") else b).dtype)


def _shift(left, swap=False, inplace=False):
    name = "lshift" if left else "rshift"

    def method(self, other):
        """torch's bit shift of integers: a count below 0 or of the width or more gives 0 (``<<``) or
        the sign (``>>``); floats and bools raise torch's error."""
        a, b = (other, self) if swap else (self, tensor_or_scalar(other))
        if isinstance(a, Tensor) and isinstance(b, Tensor):  # (shapes first, as torch's TensorIterator)
            check_broadcast(a.shape, b.shape)
            if inplace and np.broadcast_shapes(a.shape, b.shape) != a.shape:
                raise RuntimeError(f"output with shape {list(a.shape)} doesn't match the broadcast shape "
                                   f"{list(np.broadcast_shapes(a.shape, b.shape))}")
        dtype = _data.result_type(a, b)
        if inplace and not _data.can_cast(dtype, a.dtype):  # (torch's order: the cast before the kernel)
            raise RuntimeError(f"result type {_type_name(dtype)} can't be cast to the desired output type "
                               f"{_type_name(a.dtype)}")
        if dtype.kind not in "iu":
            raise NotImplementedError(f'"{name}_cpu" not implemented for '
                                      f"'{_data.TORCH_TYPE_NAMES.get(dtype.name, dtype.name)}'")
        operands, _ = promoted([value(a) if isinstance(a, Tensor) else a, value(b) if isinstance(b, Tensor) else b])
        return Tensor._make(door.defer(_shift_array, operands, (("left", left),)))
    return method


# ------------------------------------------------------- what a tensor is (torch's predicates)
def _type_name(dtype):
    return _data.TORCH_TYPE_NAMES.get(str(dtype), str(dtype))


def _is_floating_point(self):
    """torch's ``is_floating_point``: whether the dtype is a real floating one (float16/32/64)."""
    return self.dtype.kind == "f"


def _is_complex(self):
    """torch's ``is_complex``: whether the dtype is a complex one."""
    return self.dtype.kind == "c"


def _is_signed(self):
    """torch's ``is_signed``: whether the dtype holds negative values (not bool, not unsigned integers)."""
    return self.dtype.kind in "ifc"


def _nelement(self):
    """torch's ``nelement``: ``numel()``, the number of elements."""
    return self.numel()


def _element_size(self):
    """torch's ``element_size``: the bytes of one element (8 for float64 and complex64)."""
    return self.dtype.itemsize


def _tensor_arg(x, name, arg, position):
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}(): argument '{arg}' (position {position}) must be Tensor, not {type(x).__name__}")
    return x


def _allclose(self, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """torch's ``allclose``: a Python bool, whether ``|self - other| <= atol + rtol * |other|`` everywhere
    (broadcast; one dtype, as torch requires).  A bool is a value: this computes the comparison now."""
    other = _tensor_arg(other, "allclose", "other", 1)
    if self.dtype != other.dtype:
        raise RuntimeError(f"{_type_name(self.dtype)} did not match {_type_name(other.dtype)}")
    check_broadcast(self.shape, other.shape)
    return bool(isclose(self.detach(), other.detach(), rtol=rtol, atol=atol, equal_nan=equal_nan).all())


def _equal(self, other):
    """torch's ``equal``: a Python bool, True for one shape and equal elements (NaN is not equal to
    itself); False for different shapes without computing.  A bool is a value: this computes now."""
    other = _tensor_arg(other, "equal", "other", 1)
    if tuple(self.shape) != tuple(other.shape):
        return False
    return bool((self.detach() == other.detach()).all())


# ------------------------------------------------------------------ elementwise
def _heaviside(self, values):
    """torch's ``heaviside``: 0 where ``self < 0``, ``values`` where it is 0, 1 where it is greater (a NaN
    gives 0, as torch's); one dtype, broadcast.  As torch's, not differentiable: the result of inputs
    that require grad requires grad and backward raises."""
    values = _tensor_arg(values, "heaviside", "values", 1)
    if self.dtype.kind == "c" or values.dtype.kind == "c":
        raise RuntimeError("heaviside is not yet implemented for complex tensors.")
    if self.dtype != values.dtype:
        raise RuntimeError("heaviside is not yet implemented for tensors with different dtypes.")
    check_broadcast(self.shape, values.shape)
    x = self.detach()
    out = where(x == 0, values.detach(), astype(x > 0, x.dtype))
    return _no_derivative(out, "heaviside", self, values)


def _erfc_ufuncs(x):
    """erfc from ufuncs alone: the continued fraction for x >= 3 (full relative precision far into the
    tail), ``1 - erf`` below (relative error up to about 3e-11 near x = 3, where erfc is 2e-5)."""
    big = np.maximum(x, 3.0)
    frac = big
    for k in range(60, 0, -1):  # erfc x = e^{-x^2}/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + ...))))
        frac = big + (k / 2) / frac
    tail = np.exp(-big * big) / (math.sqrt(math.pi) * frac)
    return np.where(x < 3.0, 1 - _erf_ufuncs(x), tail).astype(x.dtype, copy=False)


_erfc_p = primitive("erfc", torch="ErfcBackward0", impl=special_layer("erfc", _erfc_ufuncs),
                    save=("x",), prepare=tensor_operand)
_erfc_p.vjp(lambda g, s: (g * (-_TWO_OVER_SQRT_PI * exp(-(s.x * s.x))),))


def _erfc(self):
    """torch's ``erfc``: ``1 - erf(x)`` computed without the cancellation (SciPy's kernel on NumPy
    chunks, cupyx's on cupy ones; else a continued fraction beyond 3, exact in relative terms, and
    ``1 - erf`` below); the gradient ``-2/sqrt(pi) exp(-x^2)``."""
    if self.dtype.kind == "c":
        raise NotImplementedError(f"\"erfc_vml_cpu\" not implemented for '{_type_name(self.dtype)}'")
    return _erfc_p.bind(self)


# ------------------------------------------------------------ gamma family, erfinv
# (ufunc-only fallbacks of SciPy's kernels, for chunks that are neither NumPy's nor cupy's)
_LANCZOS = (0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313, -176.61502916214059,
            12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7)
_B2K = (1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6, -3617 / 510)  # Bernoulli numbers B_2 .. B_16


def _quiet(fallback):
    """``fallback`` without NumPy's warnings at poles and infinities (the values are torch's)."""
    def quiet(x, *args):
        with np.errstate(all="ignore"):
            return fallback(x, *args)
    quiet.__name__ = fallback.__name__
    return quiet


@_quiet
def _lgamma_ufuncs(x):
    """log|Gamma(x)|: Lanczos (g = 7) from 1/2 up, the reflection formula below; inf at the poles and at
    both infinities (torch's)."""
    y = np.where(x < 0.5, 1 - x, x) - 1
    series = _LANCZOS[0]
    for k, c in enumerate(_LANCZOS[1:], 1):
        series = series + c / (y + k)
    t = y + 7.5
    right = 0.5 * math.log(2 * math.pi) + (y + 0.5) * np.log(t) - t + np.log(series)
    left = math.log(math.pi) - np.log(np.abs(np.sin(math.pi * (x - 2 * np.floor(x / 2))))) - right
    out = np.where(x < 0.5, left, right)
    return np.where((x == np.floor(x)) & (x <= 0) | np.isinf(x), np.inf, out).astype(x.dtype, copy=False)


@_quiet
def _polygamma_ufuncs(x, n=0):
    """psi^(n)(x): the recurrence up to 12 + n, then the asymptotic series; digamma reflected below 1/2."""
    if n == 0:
        z = np.where(x < 0.5, 1 - x, x)
        shift = np.zeros_like(z)
        for _ in range(12):
            shift, z = np.where(z < 12, shift + 1 / z, shift), np.where(z < 12, z + 1, z)
        zz = 1 / (z * z)
        out = np.log(z) - 0.5 / z - shift
        for k, b in enumerate(_B2K, 1):
            out = out - b / (2 * k) * zz ** k
        pole = x == np.floor(x)
        reflected = np.where(pole, np.nan, out - math.pi / np.tan(math.pi * (x - np.floor(x))))
        out = np.where(x == 0, -1 / x, np.where(x < 0.5, reflected, out))
        return np.where(x == np.inf, np.inf, out).astype(x.dtype, copy=False)
    z = np.where(np.isfinite(x), x, 12.0 + n)
    shift = np.zeros_like(z)
    while (z < 12 + n).any():  # (negative arguments: as many steps as they are far from 12 + n)
        term = np.where(z == 0, np.inf, z ** -(n + 1.0))
        shift, z = np.where(z < 12 + n, shift + term, shift), np.where(z < 12 + n, z + 1, z)
    series = math.factorial(n - 1) / z ** n + math.factorial(n) / (2 * z ** (n + 1))
    for k, b in enumerate(_B2K, 1):
        series = series + b * math.factorial(2 * k + n - 1) / math.factorial(2 * k) / z ** (2 * k + n)
    sign = (-1.0) ** (n + 1)
    out = sign * (series + math.factorial(n) * shift)
    out = np.where(x == np.inf, np.nan if n > 1 else 0.0, np.where(x == -np.inf, np.nan if n == 1 else sign * np.inf,
                                                                    out))
    return np.where(x != x, np.nan, out).astype(x.dtype, copy=False)


@_quiet
def _erfinv_ufuncs(y):
    """erfinv: Giles's single-precision approximation, then Newton steps on :func:`_erf_ufuncs`."""
    w = -np.log(np.maximum((1 - y) * (1 + y), 1e-300))
    central, tail = w - 2.5, np.sqrt(w) - 3
    p = np.full_like(central, 2.81022636e-08)
    for c in (3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503, -0.00417768164,
              0.246640727, 1.50140941):
        p = c + p * central
    q = np.full_like(tail, -0.000200214257)
    for c in (0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613, 0.00943887047,
              1.00167406, 2.83297682):
        q = c + q * tail
    x = np.where(w < 5, p, q) * y
    for _ in range(3):
        x = x - (_erf_ufuncs(x) - y) / (_TWO_OVER_SQRT_PI * np.exp(-x * x))
    x = np.where(np.abs(y) == 1, y * np.inf, np.where(np.abs(y) > 1, np.nan, x))
    return x.astype(y.dtype, copy=False)


@_quiet
def _trigamma_ufuncs(x):
    """torch's trigamma (its own formula, not SciPy's: they differ by up to about 1e-9 relatively, and at
    the poles): the reflection below 1/2, six recurrence steps, then the asymptotic series; a half input
    in float32, as torch's opmath."""
    dtype = x.dtype
    x = x.astype(np.float32) if dtype == np.float16 else x
    t = x.dtype.type
    flip = x < t(0.5)
    sin = np.sin(t(math.pi) * x)
    result = np.where(flip, -(t(math.pi) * t(math.pi)) / (sin * sin), t(0))
    z = np.where(flip, t(1) - x, x)
    for _ in range(6):
        result, z = result + t(1) / (z * z), z + t(1)
    ixx = t(1) / (z * z)
    result = result + (t(1) + t(1) / (t(2) * z) + ixx * (t(1 / 6) - ixx * (t(1 / 30) - ixx * t(1 / 42)))) / z
    return np.where(flip, -result, result).astype(dtype, copy=False)


def _matching_torch(out, x, n):
    """SciPy's polygamma where torch's differs: NaN at -inf for n = 1, and at inf for n >= 2."""
    if n == 1:
        return da.where(x == -np.inf, np.nan, out)
    return da.where(x == np.inf, np.nan, out) if n >= 2 else out


def _polygamma_array(a, *, n):
    out = (special_layer("psi", _polygamma_ufuncs) if n == 0 else special_layer("trigamma", _trigamma_ufuncs, own=True)
           if n == 1 else special_layer("polygamma", _polygamma_ufuncs, args=(n,)))(a)
    return _matching_torch(out, a, n)


def _lgamma_array(a):
    out = special_layer("gammaln", _lgamma_ufuncs)(a)
    return da.where(a == -np.inf, np.inf, out)  # (SciPy's is -inf there, torch's inf)


_polygamma_p = primitive("polygamma", torch=("PolygammaBackward0", "DigammaBackward0"), impl=_polygamma_array,
                         save=("x",), prepare=tensor_operand)
_polygamma_p.vjp(lambda g, s, *, n: (g * _polygamma_p.bind(s.x, n=n + 1),))
_lgamma_p = primitive("lgamma", torch="LgammaBackward0", impl=_lgamma_array, save=("x",), prepare=tensor_operand)
_lgamma_p.vjp(lambda g, s: (g * _polygamma_p.bind(s.x, n=0, node="DigammaBackward0"),))
_erfinv_p = primitive("erfinv", torch="ErfinvBackward0", impl=special_layer("erfinv", _erfinv_ufuncs),
                      save=("x",), prepare=tensor_operand)
# torch's saves the input (a write to it after raises; one to the result does not) and takes erfinv again
_erfinv_p.vjp(lambda g, s: (g * (math.sqrt(math.pi) / 2 * exp(_erfinv_p.bind(s.x) ** 2)),))


def _real(x, kernel):
    if x.dtype.kind == "c":
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{_type_name(x.dtype)}'")
    return x


def _digamma(self):
    """torch's ``digamma``: psi(x), the derivative of lgamma (-inf at +0, inf at -0, NaN at the negative
    integers); integers and bools in float32; the gradient ``polygamma(1, x)``."""
    return _polygamma_p.bind(_real(self, "digamma"), n=0, node="DigammaBackward0")


def _polygamma(self, n):
    """torch's ``polygamma(n)``: the ``n``-th derivative of digamma (SciPy's or cupyx's kernel; torch's NaN
    for ``n = 1`` at -inf and ``n >= 2`` at inf); the gradient ``polygamma(n + 1, x)``."""
    if not isinstance(n, numbers.Integral) or isinstance(n, bool):
        raise TypeError(f"polygamma(): argument 'n' (position 1) must be int, not {type(n).__name__}")
    if n < 0:
        raise RuntimeError("polygamma(n, x) does not support negative n.")
    _real(self, {0: "digamma", 1: "trigamma"}.get(n, "polygamma"))
    return _polygamma_p.bind(self, n=int(n))


def _lgamma(self):
    """torch's ``lgamma``: log|Gamma(x)| (inf at the poles and at both infinities); the gradient ``digamma``."""
    return _lgamma_p.bind(_real(self, "lgamma_vml_cpu"))


def _erfinv(self):
    """torch's ``erfinv``: the inverse error function on [-1, 1] (infinite at the ends, NaN beyond); the
    gradient ``sqrt(pi)/2 exp(erfinv(x)^2)``."""
    return _erfinv_p.bind(_real(self, "erfinv_vml_cpu"))


@named("LinalgCrossBackward0")
def _cross(self, other, dim=None):
    """torch's ``cross``: the cross product of the 3-vectors along ``dim`` (None: the first dim of
    ``self`` of length 3, with torch's deprecation warning), the other dims broadcast."""
    other = _tensor_arg(other, "cross", "other", 1)
    if dim is None:
        dim = next((d for d, n in enumerate(self.shape) if n == 3), None)
        if dim is None:
            raise RuntimeError("no dimension of size 3 in input")
        warnings.warn("Using torch.cross without specifying the dim arg is deprecated.\nPlease either pass the dim "
                      "explicitly or simply use torch.linalg.cross.\nThe default value of dim will change to agree "
                      "with that of linalg.cross in a future release.", UserWarning, stacklevel=2)
    if self.ndim != other.ndim:
        raise RuntimeError("linalg.cross: inputs must have the same number of dimensions.")
    dim = norm_axis(dim, self.ndim)
    if self.shape[dim] != 3 or other.shape[dim] != 3:
        raise RuntimeError(f"linalg.cross: inputs dimension {dim} must have length 3. Got {self.shape[dim]} and "
                           f"{other.shape[dim]}")
    check_broadcast(self.shape, other.shape)
    if self.dtype == np.bool_:  # (after the shapes, before the dtypes, as torch's kernel)
        raise NotImplementedError("\"cross\" not implemented for 'Bool'")
    if self.dtype != other.dtype:
        raise RuntimeError(f"expected scalar type {_type_name(self.dtype)} but found {_type_name(other.dtype)}")
    return cross(self, other, axis=dim)


def _renorm(self, p, dim, maxnorm):
    """torch's ``renorm``: each slice along ``dim`` whose ``p``-norm (over the other dims) exceeds
    ``maxnorm`` scaled to norm ``maxnorm`` (by ``maxnorm / (norm + 1e-7)``, torch's factor); the
    gradient goes through the norm too, as torch's."""
    if p <= 0:
        raise RuntimeError("renorm: non-positive-norm not supported")
    if maxnorm < 0:
        raise RuntimeError(f"renorm: expected maxnorm to be >= 0 but got {maxnorm}")
    if self.ndim < 2:
        raise RuntimeError(f"renorm: input needs at least 2 dimensions, got {self.ndim} dimensions")
    if self.dtype.kind not in "fc":
        raise RuntimeError("linalg.vector_norm: Expected a floating point or complex tensor as input. Got "
                           f"{_type_name(self.dtype)}")
    dim = norm_axis(dim, self.ndim)
    norm = vector_norm(self, p, tuple(d for d in range(self.ndim) if d != dim), keepdims=True)
    return self * where(norm > maxnorm, maxnorm / (norm + 1e-7), 1.0)


def _triangle(fn, name):
    def method(self, diagonal=0, *, k=None):
        return fn(self, diagonal if k is None else k)
    method.__doc__ = (f"torch's ``{name}(diagonal=0)``: the {'upper' if name == 'triu' else 'lower'} triangle of "
                      f"the last two dims (NumPy's ``k=`` taken too).")
    return method


# ------------------------------------------------------------------ sliding windows
def _unfold_array(a, *, axis, size, step, n):
    """The windows of ``size`` every ``step`` along ``axis``, a new last axis: dask's sliding window view
    (each chunk with the ``size - 1`` places after it), then every ``step``-th window."""
    if not size or not a.size:  # (no windows' elements to read; dask's view refuses an empty axis)
        shape = a.shape[:axis] + ((a.shape[axis] - size) // step + 1,) + a.shape[axis + 1:] + (size,)
        return da.zeros_like(a, shape=shape)
    w = da.lib.stride_tricks.sliding_window_view(a, size, axis=axis, automatic_rechunk=False)
    return w if step == 1 else w[(slice(None),) * axis + (slice(None, None, step),)]


def _unfold_layout(x_shape, x_strides, x_offset, out_shape, *, axis, size, step, n):
    """torch's ``unfold`` strides: windows ``step`` places apart along ``axis``, each window's elements one
    place apart, on the new last axis (windows with ``step < size`` share elements)."""
    strides = list(x_strides)
    strides[axis] = x_strides[axis] * step
    return tuple(strides) + (x_strides[axis],), x_offset


def _unfold_gather(a, new, written, *, axis, size, step, n):
    """The copies ``written`` of the windows ``new`` put back (a part of the view written: ``u[0] = v``),
    and where: each window's elements in runs of ``step`` (as the rule lays them out), the ``q``-th run of
    every window at ``(i + q) * step + r``, one copy of each place per run; a place takes the copy of the
    first run that wrote it (two copies written hold one value: ``fill_``, or ``Tensor._check_overlap``
    refused the write), by ``where`` alone: exact, signed zeros too."""
    count = new.shape[axis]
    if not size or not count:
        return a, da.zeros_like(a, dtype=bool)
    runs = -(-size // step)

    def placed(w):  # run q of every window at its places along axis (zeros or False elsewhere), q = 0, 1, ...
        w = da.moveaxis(w, -1, axis + 1)
        pre, lead, rest = (slice(None),) * axis, w.shape[:axis], w.shape[axis + 2:]
        for q in range(runs):
            end = (q + 1) * step if (q + 1) * step < size else size
            part = w[pre + (slice(None), slice(q * step, end))]
            widths = [(0, 0)] * part.ndim
            widths[axis + 1] = (0, step - (end - q * step))
            part = da.pad(part, widths).reshape(lead + (count * step,) + rest)
            widths = [(0, 0)] * part.ndim
            widths[axis] = (q * step, 0)
            part = da.pad(part, widths)
            length = part.shape[axis]
            if length >= n:
                part = part[pre + (slice(0, n),)]
            else:
                widths[axis] = (0, n - length)
                part = da.pad(part, widths)
            yield part

    out, hit = a, None
    for copy, mask in reversed(list(zip(placed(new), placed(written)))):  # (the first run's copy last: it wins)
        out = da.where(mask, copy, out)
        hit = mask if hit is None else hit | mask
    return out, hit


def _unfold_put(a, new, *, axis, size, step, n):
    """A write through all the windows: each copy written (overlapping windows are written with one value
    only, ``fill_``: ``Tensor._check_overlap`` refuses the other writes)."""
    return _unfold_gather(a, new, da.ones_like(new, dtype=bool), axis=axis, size=size, step=step, n=n)[0]


_unfold_p = primitive("sliding_windows", torch="UnfoldBackward0", impl=_unfold_array,
                      view=View(_unfold_layout, _unfold_put, _unfold_gather))


@_unfold_p.vjp
def _unfold_rule(g, s, *, axis, size, step, n):
    """Each window's cotangent added back at its places: the windows' elements in runs of ``step`` (the
    ``q``-th run of every window lies at ``(i + q) * step + r``), each run laid out along ``axis`` and
    shifted by ``q * step``; a sum of ``ceil(size / step)`` shifted copies (torch's ``unfold_backward``)."""
    m = g.shape[axis]
    g = movedim(g, -1, axis + 1)
    rest = g.shape[axis + 2:]
    if not size or not g.size:  # (windows of no elements, or none: zeros)
        return (zeros(g.shape[:axis] + (n,) + rest, dtype=g.dtype, device=g.device),)
    runs = -(-size // step)
    total = None
    for q in range(runs):
        end = (q + 1) * step if (q + 1) * step < size else size  # (min and max here are the ops)
        part = getitem(g, (slice(None),) * (axis + 1) + (slice(q * step, end),))
        if part.shape[axis + 1] < step:
            part = pad(part, [(0, step - part.shape[axis + 1]) if d == axis + 1 else (0, 0) for d in range(g.ndim)])
        part = reshape(part, g.shape[:axis] + (m * step,) + rest)
        part = pad(part, [(q * step, (runs - 1 - q) * step) if d == axis else (0, 0) for d in range(part.ndim)])
        total = part if total is None else total + part
    length = total.shape[axis]
    if length >= n:
        return (getitem(total, (slice(None),) * axis + (slice(0, n),)),)
    return (pad(total, [(0, n - length) if d == axis else (0, 0) for d in range(total.ndim)]),)


def _unfold(self, dimension, size, step):
    """torch's ``unfold(dimension, size, step)``: the windows of ``size`` elements every ``step`` along
    ``dimension``, as a new last dim (``dimension`` of length ``(n - size) // step + 1``); a 0-d tensor
    reads as 1-d.  Chunks: the input's along ``dimension`` (each with the ``size - 1`` places after it),
    the window dim in one chunk.  The gradient adds overlapping windows back.  A view, as torch's: writes
    through it reach ``self``; where windows overlap (``step < size``) only ``fill_``/``zero_`` may write
    (torch's other in-place ops there give what its kernel's order of visits gives: refused here)."""
    x = as_tensor(self)
    axis = norm_axis(dimension, x.ndim or 1)
    n = x.shape[axis] if x.ndim else 1
    if n != n:
        raise NotImplementedError(f"unfold: dimension {axis} has an unknown length (after a boolean mask, say); "
                                  "its windows cannot be laid out lazily")
    if size < 0:
        raise RuntimeError(f"size is {size} but must be >= 0")
    if size > n:
        raise RuntimeError(f"maximum size for tensor at dimension {axis} is {n} but size is {size}")
    if step <= 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    if not x.ndim:
        return reshape(_unfold_p.bind(reshape(x, (1,)), axis=0, size=size, step=step, n=1), (size,))
    return _unfold_p.bind(x, axis=axis, size=size, step=step, n=n)


# ------------------------------------------------------------------ mode, histc
def _mode_block(a, *, axis):
    """Where each slice's mode sits along ``axis`` (kept, length 1): the most frequent value (ties: the
    smallest, NaNs equal) from the sorted slice's runs counted with one bincount; its last place."""
    x = np.moveaxis(a, axis, -1)
    n = x.shape[-1]
    s = np.sort(x, axis=-1)
    new = np.ones_like(s, dtype=bool)
    new[..., 1:] = (s[..., 1:] != s[..., :-1]) & ~((s[..., 1:] != s[..., 1:]) & (s[..., :-1] != s[..., :-1]))
    run = np.cumsum(new, axis=-1) - 1
    rows = np.arange(run.size // n if n else 0, like=run).reshape(run.shape[:-1] + (1,)) * n
    counts = np.bincount((run + rows).reshape(-1), minlength=run.size).reshape(run.shape)
    first = np.argmax(run == np.argmax(counts, axis=-1)[..., None], axis=-1)[..., None]
    mode = np.take_along_axis(s, first, axis=-1)
    same = (x == mode) | ((x != x) & (mode != mode))
    where = n - 1 - np.argmax(same[..., ::-1], axis=-1)
    return np.expand_dims(where.astype(np.int64), axis)


def _mode_index_array(a, *, axis):
    a = _unknown.rechunk(a, {axis: -1})  # (rows of unknown count, after a boolean mask: their blocks joined)
    chunks = tuple((1,) if k == axis else c for k, c in enumerate(a.chunks))
    return da.map_blocks(_mode_block, a, axis=axis, chunks=chunks, dtype=np.int64, meta=a._meta.astype(np.int64))


def _mode(self, dim=-1, keepdim=False):
    """torch's ``mode``: the named ``(values, indices)`` of the most frequent value along ``dim`` (ties:
    the smallest) and its last place there, as torch's CPU kernel; the gradient goes to that place.
    ``dim`` is made one chunk: a sort, one bincount and two argmaxes per chunk."""
    x = as_tensor(self)
    if x.dtype.kind == "c":
        raise NotImplementedError(f"\"mode_cpu\" not implemented for '{_type_name(x.dtype)}'")
    if x.ndim == 0:
        norm_axis(dim, 0)
        return _scalar_result(x, return_types.mode)
    axis = norm_axis(dim, x.ndim)
    if not x.shape[axis]:
        raise IndexError(f"mode(): Expected reduction dim {axis} to have non-zero size.")
    idx = Tensor._make(door.defer(_mode_index_array, (value(x),), (("axis", axis),)))
    values = values_at(x, idx, axis, keepdim, "ModeBackward0")
    return return_types.mode(values, idx if keepdim else squeeze(idx, axis))


def _linspace(lo, hi, steps, like):
    """torch's ``linspace`` of 0-d ``lo`` and ``hi`` in their dtype: from both ends, meeting halfway."""
    i = np.arange(steps, like=like).astype(lo.dtype)
    step = (hi - lo) / (steps - 1)
    return np.where(i < steps // 2, lo + step * i, hi - step * (steps - 1 - i))


def _histc_block(x, lo, hi, *, bins, given):
    """One chunk's counts (1, bins) by torch's CPU rule, in the input's dtype: the edges are torch's
    ``linspace`` (whose ends are NaN where ``hi - lo`` overflows: nothing is counted), an element in
    ``[edges[0], edges[-1]]`` goes to bin ``int((x - left) * bins / (right - left))``, the top one to the
    last bin, an infinite or NaN quotient to bin 0 (torch's int64 cast of it, INT64_MIN, lands there);
    a data range made as torch does (widened by 1 each way in float64 when flat)."""
    x = x.reshape(-1)
    dtype = x.dtype.type
    if not given:
        if not (np.isfinite(lo) & np.isfinite(hi)):
            raise RuntimeError(f"torch.histc: range of [{float(lo):g}, {float(hi):g}] is not finite")
        if lo == hi:  # (half's 65504 + 1 overflows, as torch's)
            lo, hi = (dtype(_data.checked_scalar(float(v), x.dtype)) for v in (float(lo) - 1, float(hi) + 1))
    with np.errstate(all="ignore"):
        edges = _linspace(dtype(lo), dtype(hi), bins + 1, x)
        left, right = edges[0], edges[-1]
        inside = (x >= left) & (x <= right)
        x = x[inside]
        quotient = (x - left) * dtype(bins) / (right - left)
    found = np.where(np.isfinite(quotient), quotient, 0).astype(np.int64)
    found = np.where(found >= bins, bins - 1, found)
    return np.bincount(found, minlength=bins)[None, :bins].astype(x.dtype)


def _histc_array(a, *, bins, lo, hi):
    flat = a.reshape(-1)
    given = lo is not None
    if given:  # (numbers, the chunk's type's scalars in the block)
        lo, hi = a.dtype.type(lo), a.dtype.type(hi)
    else:
        lo, hi = flat.min(), flat.max()
    counts = da.map_blocks(_histc_block, flat, lo, hi, bins=bins, given=given, new_axis=1, dtype=a.dtype,
                           chunks=((1,) * flat.numblocks[0], (bins,)), meta=a._meta)
    return counts.sum(axis=0)


def _histc(self, bins=100, min=0, max=0):
    """torch's ``histc``: counts of the elements in ``bins`` equal bins over ``[min, max]`` (both 0, or
    equal: the data's own range, a lazy reduction; one value: widened by 1 each way), in ``self``'s
    floating dtype; elements outside are not counted.  As torch's, not differentiable (the result
    never requires grad).  Cost: one count per chunk, summed."""
    x = as_tensor(self).detach()
    if x.dtype.kind != "f":
        raise NotImplementedError(f"\"histogram_cpu\" not implemented for '{_type_name(x.dtype)}'")
    if bins <= 0:
        raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {bins} for dimension 0")
    lo, hi = float(min), float(max)
    if lo == hi and not is_empty(x):
        lo = hi = None
    else:  # (torch's order of checks: the range's finiteness first)
        lo, hi = (lo - 1, hi + 1) if lo == hi else (lo, hi)
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise RuntimeError(f"torch.histc: range of [{lo:g}, {hi:g}] is not finite")
        if lo > hi:
            raise RuntimeError("torch.histc: max must be larger than min")
        lo, hi = (_data.checked_scalar(v, x.dtype) for v in (lo, hi))
        if is_empty(x):
            return zeros(bins, dtype=x.dtype, device=x.device)
    return Tensor._make(door.defer(_histc_array, (value(x),), (("bins", int(bins)), ("lo", lo), ("hi", hi))))


# ---------------------------------------------------------------- running scans
def _logaddexp_accumulate(a, axis, dtype=None):
    with np.errstate(invalid="ignore"):  # (a NaN, as torch's, without NumPy's warning)
        if type(a) is np.ndarray:
            return np.logaddexp.accumulate(a, axis=axis)
        # cupy's ufuncs have no accumulate: the running logaddexp one place at a time along the axis
        out, at = a.copy(), [slice(None)] * a.ndim
        for i in range(1, a.shape[axis]):
            before, here = tuple(at[:axis] + [i - 1] + at[axis + 1:]), tuple(at[:axis] + [i] + at[axis + 1:])
            out[here] = np.logaddexp(out[before], a[here])
        return out


def _logaddexp_quiet(a, b):
    with np.errstate(invalid="ignore"):
        return np.logaddexp(a, b)


def _logcumsumexp_array(a, *, axis, scalar=False):
    return _unknown.cumreduction(_logaddexp_accumulate, _logaddexp_quiet, -np.inf, a, axis, dtype=a.dtype)


_logcumsumexp_p = primitive("logcumsumexp", torch="LogcumsumexpBackward0", impl=_logcumsumexp_array,
                            save=("x", "r"))


@_logcumsumexp_p.vjp
def _logcumsumexp_rule(g, s, *, axis, scalar=False):
    """torch's (TensorFlow's) stable rule: the cotangent's positive and negative parts in log space,
    each through a reversed logcumsumexp, so no ``exp`` overflows; the other part's places hold the lowest
    float before ``- r``, as torch's (so an x of -inf, where r is -inf too, is NaN there as in torch: -inf
    in their place after ``- r`` gave 0)."""
    if scalar:  # (a 0-d input: torch's rule passes the cotangent through, a NaN one too)
        return (g,)
    log_g = log(where(g == 0, 1, abs(g)))
    lowest = float(np.finfo(g.dtype).min)

    def reversed_scan(t):
        return flip(_logcumsumexp_p.bind(flip(t, axis), axis=axis), axis)
    positive = reversed_scan(where(g > 0, log_g, lowest) - s.r) + s.x
    negative = reversed_scan(where(g < 0, log_g, lowest) - s.r) + s.x
    return (exp(positive) - exp(negative),)


def _logcumsumexp(self, dim):
    """torch's ``logcumsumexp``: ``log(cumsum(exp(x)))`` along ``dim``, as a running ``logaddexp`` (stable
    for any magnitude; chunk by chunk, each chunk's last value carried to the next, as dask's cumsum);
    torch's stable gradient.  Real floating tensors (complex ones are not implemented here)."""
    x = as_tensor(self)
    if x.dtype.kind != "f":
        raise NotImplementedError(f"\"logcumsumexp_out_cpu\" not implemented for '{_type_name(x.dtype)}'")
    axis = norm_axis(dim, x.ndim)
    if x.ndim == 0:
        return reshape(_logcumsumexp_p.bind(reshape(x, (1,)), axis=0, scalar=True), ())
    return _logcumsumexp_p.bind(x, axis=axis)


def _running_index_array(a, *, axis, largest):
    """Where each running extreme along ``axis`` sits: the last index of it (ties and NaN: torch's rule,
    a new equal value or NaN takes the place), as two chunk-by-chunk running scans."""
    ufunc = np.maximum if largest else np.minimum
    kind = a.dtype.kind
    ident = (not largest) if kind == "b" else (np.iinfo(a.dtype).min if largest else np.iinfo(a.dtype).max) \
        if kind in "iu" else (-np.inf if largest else np.inf)
    running = _unknown.cumreduction(ufunc.accumulate, ufunc, ident, a, axis, dtype=a.dtype)
    taken = (a == running) | (a != a)
    shape = tuple(n if k == axis else 1 for k, n in enumerate(a.shape))
    place = (_unknown.positions(a, axis) if _unknown.unknown(a, axis) else
             da.arange(a.shape[axis], chunks=(a.chunks[axis],), dtype=np.int64, like=a._meta).reshape(shape))
    return _unknown.cumreduction(np.maximum.accumulate, np.maximum, 0, da.where(taken, place, 0), axis,
                                 dtype=np.int64)


def _running_extreme(name, largest):
    result = getattr(return_types, name)

    def method(self, dim):
        x = as_tensor(self)
        if x.dtype.kind == "c":
            raise NotImplementedError(f"\"{name}_cpu\" not implemented for '{_type_name(x.dtype)}'")
        axis = norm_axis(dim, x.ndim)
        if x.ndim == 0:
            return _scalar_result(x, result)
        if not x.shape[axis]:
            return result(clone(x), zeros_like(x, dtype=np.int64))
        idx = Tensor._make(door.defer(_running_index_array, (value(x),), (("axis", axis), ("largest", largest))))
        return result(guard(take_along_axis(x, idx, axis), x), idx)
    method.__doc__ = (f"torch's ``{name}(dim)``: the named tuple ``(values, indices)`` of the running "
                      f"{'maximum' if largest else 'minimum'} along ``dim`` and where it sits (the last place of "
                      f"equal values; NaN propagates, at its own place, as torch's); the gradient goes to those "
                      f"places.  The indices are two running scans, chunk by chunk; the values a gather along "
                      f"``dim`` (that dim in one chunk).")
    return named(f"{name.capitalize()}Backward0")(method)


# ------------------------------------------------------------------ random fills
# torch's in-place draws (``x.uniform_()``, ``x.normal_()`` ...): each chunk draws from its own generator, seeded by
# a draw from daskgrad's (:func:`daskgrad.manual_seed`) and the block id (:func:`daskgrad.chunk.random_block`, shared
# with ``rand``/``randn`` and dropout), so the values do not depend on the scheduler; the chunks, dtype and device
# stay, and the old value gets a zero gradient through torch's node.
_RANDOM_NODES = ("UniformBackward0", "NormalBackward0", "ExponentialBackward0", "CauchyBackward0",
                 "LogNormalBackward0", "GeometricBackward0", "RandomBackward0", "RandomBackward1", "RandomBackward2",
                 "BernoulliBackward0", "BernoulliBackward1", "BernoulliBackward2")
_random_p = primitive("random_fill", torch=_RANDOM_NODES)
_random_p.vjp(lambda g, s, *, kind: (zeros_like(g),))
_FLOAT_RANDOM_BITS = {"float16": 11, "float32": 24, "float64": 53}


def _drawn(self, kind, node, params=(), probs=None):
    """``self``'s shape, chunks and dtype drawn from ``kind``, recorded as torch's ``node`` on ``self``
    (whose gradient is zero).  The run seed is a 0-d value the program reads (``door.Constant``), not
    a param: a loop that draws every step (``eps = torch.randn_like(std)``) is one program, cached and
    instantiated, not a new one lowered every step."""
    srcs = (value(self),) + (() if probs is None else (value(probs),)) + (_tensor_module.run_seed(),)
    out = door.defer(_tensor_module.drawn_array, srcs, (("kind", kind), ("params", tuple(params))))
    return _random_p.record(out, self, node=node, kind=kind)


def _fill_random(self, kind, node, params=(), probs=None):
    return self._inplace(lambda x: _drawn(x, kind, node, params, probs))


def _check_generator(generator):
    if generator is not None:
        raise TypeError("generator= is not supported: daskgrad draws from its own generator; seed it with "
                        "daskgrad.manual_seed")


def _floating_draw(self, kernel, complex_ok=False):
    if self.dtype.kind not in ("fc" if complex_ok else "f"):
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{_data.TORCH_TYPE_NAMES[self.dtype.name]}'")


def _no_complex_draw(t, kernel):
    """torch's refusal of a draw its ``kernel`` makes for real dtypes only (the complex ones draw each part of
    the real view only in ``uniform_`` and ``normal_``)."""
    if t.dtype.kind == "c":
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{_data.TORCH_TYPE_NAMES[t.dtype.name]}'")


def _continuous(self, name, c_name=False):
    if self.dtype.kind != "f":
        kind = _data.C_TYPE_NAMES.get(self.dtype.name, self.dtype.name) if c_name else \
            _data.TORCH_TYPE_NAMES[self.dtype.name]
        kind = {"int64_t": "long int", "int": "int", "int16_t": "short int", "int8_t": "signed char",
                "uint8_t": "unsigned char"}.get(kind, kind)
        raise RuntimeError(f"{name} distribution is a continuous probability distribution. dtype must be a floating "
                           f"point but you specified {kind}")


def _number(v):
    """A number as torch prints it in its errors (``1`` for 1.0, as ``%g``)."""
    return f"{float(v):g}"


def _uniform_(self, *args, generator=None, **kwargs):
    """torch's ``uniform_(from=0, to=1)``: fill with draws from the continuous uniform distribution on
    ``[from, to)`` (a complex tensor: each part)."""
    _check_generator(generator)
    low, high = _from_to("uniform_", args, kwargs, 0, 1)
    _floating_draw(self, "check_uniform_bounds", complex_ok=True)
    real = np.finfo(self.dtype).dtype  # (a complex tensor: torch draws and checks its real view)
    top, c_name = float(np.finfo(real).max), _data.C_TYPE_NAMES[real.name]
    for name, v in (("from", low), ("to", high)):
        if not -top <= v <= top:
            raise RuntimeError(f"{name} is out of bounds for {c_name}")
    if low > high:
        raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found from={_number(low)} > "
                           f"to={_number(high)}")
    if high - low > top:
        raise RuntimeError(f"uniform_ expects to-from <= std::numeric_limits<{_data.TORCH_TYPE_NAMES[real.name]}>"
                           f"::max(), but found to={_number(high)} and from={_number(low)} which result in "
                           f"to-from to exceed the limit")
    return _fill_random(self, "uniform", "UniformBackward0", (float(low), float(high)))


def _from_to(name, args, kwargs, low, high):
    """torch's ``(from, to)`` (``from`` is a Python keyword: given by position or ``**{"from": ...}``)."""
    if len(args) > 2:
        raise TypeError(f"{name}() takes from 0 to 2 positional arguments but {len(args)} were given")
    bad = set(kwargs) - {"from", "to"}
    if bad:
        raise TypeError(f"{name}() got an unexpected keyword argument '{sorted(bad)[0]}'")
    values = [*args, *([low, high][len(args):])]
    values[0] = kwargs.get("from", values[0])
    values[1] = kwargs.get("to", values[1])
    return values


def _normal_(self, mean=0, std=1, *, generator=None):
    """torch's ``normal_(mean=0, std=1)``: fill with draws from N(mean, std**2) (a complex tensor: each part
    from N(mean, std**2 / 2), as torch's)."""
    _check_generator(generator)
    if std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {_number(std)}")
    _floating_draw(self, "normal_kernel_cpu", complex_ok=True)
    return _fill_random(self, "normal", "NormalBackward0", (float(mean), float(std)))


def _exponential_(self, lambd=1, *, generator=None):
    """torch's ``exponential_(lambd=1)``: fill with draws of density ``lambd * exp(-lambd * x)``."""
    _check_generator(generator)
    if not lambd > 0:
        raise RuntimeError(f"exponential_ expects lambda > 0.0, but found lambda={_number(lambd)}")
    _continuous(self, "Exponential")
    return _fill_random(self, "exponential", "ExponentialBackward0", (float(lambd),))


def _cauchy_(self, median=0, sigma=1, *, generator=None):
    """torch's ``cauchy_(median=0, sigma=1)``: fill with draws from the Cauchy distribution."""
    _check_generator(generator)
    if not sigma > 0:
        raise RuntimeError(f"cauchy_ expects sigma > 0.0, but found sigma={_number(sigma)}")
    _continuous(self, "Cauchy", c_name=True)
    return _fill_random(self, "cauchy", "CauchyBackward0", (float(median), float(sigma)))


def _log_normal_(self, mean=1, std=2, *, generator=None):
    """torch's ``log_normal_(mean=1, std=2)``: fill with ``exp`` of draws from N(mean, std**2)."""
    _check_generator(generator)
    if not std > 0:
        raise RuntimeError(f"log_normal_ expects std > 0.0, but found std={_number(std)}")
    _floating_draw(self, "log_normal_cpu")
    return _fill_random(self, "log_normal", "LogNormalBackward0", (float(mean), float(std)))


def _geometric_(self, p, *, generator=None):
    """torch's ``geometric_(p)``: fill with the number of Bernoulli(p) trials up to the first success."""
    _check_generator(generator)
    if not 0 < p < 1:
        raise RuntimeError(f"geometric_ expects p to be in (0, 1), but got p={_number(p)}")
    _no_complex_draw(self, "geometric_cpu")
    return _fill_random(self, "geometric", "GeometricBackward0", (float(p),))


def _random_bounds(dtype, low, high):
    """torch's checks of ``random_``'s ``[from, to)`` for ``dtype``; returns the inclusive ``(low, high)``."""
    c_name = _data.C_TYPE_NAMES.get(dtype.name, dtype.name)
    c_name = {"int8_t": "signed char", "uint8_t": "unsigned char", "int16_t": "short", "int64_t": "long",
              "c10::Half": "c10::Half"}.get(c_name, c_name)
    if dtype.kind == "b":
        lo, hi = 0, 1
    elif dtype.kind in "iu":
        lo, hi = _data.int_range(dtype)
    else:
        lo, hi = -(1 << _FLOAT_RANDOM_BITS[dtype.name]), 1 << _FLOAT_RANDOM_BITS[dtype.name]
    if not lo <= low <= hi and dtype.kind in "iub":
        raise RuntimeError(f"from is out of bounds for {c_name}")
    if high is None:
        if dtype.kind == "f" and low == 0:
            return 0, hi
        return low, hi
    if low >= high:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}")
    if not lo <= high - 1 <= hi and dtype.kind in "iub":
        raise RuntimeError(f"to - 1 is out of bounds for {c_name}")
    if dtype.kind == "f" and not (lo <= low and high - 1 <= hi):
        warnings.warn(f"{'from' if low < lo else 'to - 1'} is out of bounds [-(2^{_FLOAT_RANDOM_BITS[dtype.name]}), "
                      f"2^{_FLOAT_RANDOM_BITS[dtype.name]}]. Due to precision limitations {c_name} can support "
                      "discrete uniform distribution only within this range. This warning will become an error in "
                      "version 1.7 release, please fix the code in advance", UserWarning, stacklevel=3)
    return low, high - 1


def _random_(self, *args, generator=None, **kwargs):
    """torch's ``random_(from=0, to=None)``: fill with draws from the discrete uniform distribution on
    ``[from, to - 1]``; ``random_(to)`` is ``[0, to - 1]``, and without ``to`` the top is the dtype's
    largest integer (``2**mantissa`` for a floating type)."""
    _check_generator(generator)
    if len(args) == 1 and "to" not in kwargs and "from" not in kwargs:
        low, high, node = 0, args[0], "RandomBackward1"
        if high is None:
            node = "RandomBackward2"
    else:
        low, high = _from_to("random_", args, kwargs, 0, None)
        node = "RandomBackward2" if high is None and not args and "from" not in kwargs else "RandomBackward0"
    if self.dtype.kind not in "fiub":  # (complex: torch's words of the overload called)
        if node == "RandomBackward2" and high is None and not args:
            raise NotImplementedError(f"\"random_kernel_cpu\" not implemented for "
                                      f"'{_data.TORCH_TYPE_NAMES.get(self.dtype.name, self.dtype.name)}'")
        check = "check_random_bounds" if high is not None else "random_from_to_impl"
        raise RuntimeError(f"{check} handles only integral, floating-point and boolean types")
    low, high = _random_bounds(self.dtype, int(low), None if high is None else int(high))
    if self.dtype.kind == "u" and high > (1 << 63) - 1:
        high = (1 << 63) - 1  # (NumPy draws int64: a uint64's top half is not reached)
    return _fill_random(self, "random", node, (low, high))


def _bernoulli_(self, p=0.5, *, generator=None):
    """torch's ``bernoulli_(p=0.5)``: fill with 1 with probability ``p`` (a number, or a tensor of
    probabilities broadcast to this tensor's shape), else 0."""
    _check_generator(generator)
    if isinstance(p, Tensor):
        check_broadcast(self.shape, p.shape)
        wide = np.broadcast_shapes(self.shape, p.shape)
        if tuple(wide) != tuple(self.shape):
            raise RuntimeError(f"output with shape {list(self.shape)} doesn't match the broadcast shape {list(wide)}")
        _no_complex_draw(self, "bernoulli_tensor_cpu_self_")
        _no_complex_draw(p, "bernoulli_tensor_cpu_p_")
        return _fill_random(self, "bernoulli", "BernoulliBackward1", probs=p.detach())
    if not 0 <= p <= 1:
        raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={_number(p)}")
    _no_complex_draw(self, "bernoulli_scalar_cpu_")
    return _fill_random(self, "bernoulli", "BernoulliBackward2", (float(p),))


def _bernoulli(self, p=None, *, generator=None):
    """torch's ``bernoulli()``: a new tensor, 1 at each place with this tensor's value there as probability,
    else 0 (``bernoulli(p)``: with probability ``p`` everywhere); its gradient is zero."""
    _check_generator(generator)
    if p is not None:
        if not 0 <= p <= 1:
            raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={_number(p)}")
        _no_complex_draw(self, "bernoulli_scalar_cpu_")
        return _no_derivative(_drawn(self.detach(), "bernoulli", None, (float(p),)), "bernoulli.p", self)
    _no_complex_draw(self, "bernoulli_tensor_cpu_self_")  # (the result, of this dtype, is checked first)
    if self.dtype.kind != "f":
        raise NotImplementedError(f"\"bernoulli_tensor_cpu_p_\" not implemented for "
                                  f"'{_data.TORCH_TYPE_NAMES[self.dtype.name]}'")
    return _drawn(self, "bernoulli", "BernoulliBackward0", probs=self.detach())


def _multinomial_block(w, seed, num_samples, replacement, block_id=None):
    """Rows of category weights -> ``num_samples`` category indices each, as torch draws them: with
    replacement by the cumulative weights, without it the ``num_samples`` largest of ``w / E`` (E
    exponential draws), torch's own method."""
    if replacement:  # (torch's kernel reads row by row, entry by entry: a NaN fails its ``>= 0``)
        for row in w:
            bad = np.flatnonzero(~(row >= 0) | ~np.isfinite(row))
            if bad.size:
                raise RuntimeError("invalid multinomial distribution (encountering probability entry "
                                   f"{'< 0' if not row[bad[0]] >= 0 else '= infinity or NaN'})")
            if not row.sum() > 0:
                raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
    if ((w < 0) | ~np.isfinite(w)).any():
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    total = w.sum(axis=-1, keepdims=True)
    if (total <= 0).any():
        raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
    rng = chunk.block_rng(w, int(seed), block_id)
    if not replacement:
        keys = w / -np.log1p(-rng.random(w.shape))
        return np.argsort(-keys, axis=-1, kind="stable")[:, :num_samples].astype(np.int64)
    cdf = np.cumsum(w / total, axis=-1)
    u = rng.random((w.shape[0], num_samples))
    out = np.stack([np.searchsorted(cdf[i], u[i], side="right") for i in range(w.shape[0])]) if w.shape[0] else \
        np.zeros((0, num_samples), dtype=np.int64)
    return np.minimum(out, w.shape[1] - 1).astype(np.int64)


def _multinomial(self, num_samples, replacement=False, *, generator=None):
    """torch's ``multinomial(num_samples, replacement=False)``: for each row of category weights (this
    tensor, 1-d or 2-d), ``num_samples`` category indices (int64) drawn in proportion to the weights.
    A row is read whole (its chunks along the categories joined); its rows' chunks stay."""
    _check_generator(generator)
    if self.dtype.kind != "f":
        raise RuntimeError(f"multinomial only supports floating-point dtypes for input, got: "
                           f"{_data.TORCH_TYPE_NAMES[self.dtype.name]}")
    if num_samples <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    if self.ndim not in (1, 2):
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    if not replacement and num_samples > self.shape[-1]:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    if self.shape[-1] > 1 << 24:  # (torch's indices are floats: 2^24 the largest consecutive integer)
        raise RuntimeError("number of categories cannot exceed 2^24")
    # (the run seed a value the program reads, as the fills': a loop that samples every step is one program)
    return Tensor._make(door.defer(_multinomial_array, (value(self.detach()), _tensor_module.run_seed()),
                                   (("num_samples", int(num_samples)), ("replacement", bool(replacement)))))


def _multinomial_array(a, seed, *, num_samples, replacement):
    rows = (a if a.ndim == 2 else a[None]).rechunk({1: -1})
    out = da.map_blocks(_multinomial_block, rows, seed, num_samples=num_samples, replacement=replacement,
                        dtype=np.int64, chunks=(rows.chunks[0], (num_samples,)),
                        meta=np.empty((0, 0), dtype=np.int64) if type(a._meta) is np.ndarray else None)
    return out if a.ndim == 2 else out[0]


# ------------------------------------------------------------------ more of torch's methods
def _is_nonzero(self):
    """torch's ``is_nonzero``: whether the one value of this tensor is not zero."""
    if self.numel() == 0:
        raise RuntimeError("Boolean value of Tensor with no values is ambiguous")
    if self.numel() > 1:
        raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
    return bool(self)


def _is_same_size(self, other):
    """torch's ``is_same_size``: whether ``other`` has this tensor's shape."""
    return tuple(self.shape) == tuple(other.shape)


def _is_neg(self):
    """torch's ``is_neg``: whether this is a lazily negated view (never, here: negation is computed)."""
    return False


def _ndimension(self):
    """torch's ``ndimension``: ``dim()``, the number of dimensions."""
    return self.ndim


def _split_with_sizes(self, split_sizes, dim=0):
    """torch's ``split_with_sizes``: pieces of the given sizes along ``dim``, views (as ``split`` with a list)."""
    d = norm_axis(dim, self.ndim)
    sizes = [int(s) for s in split_sizes]
    if builtins.sum(sizes) != self.shape[d]:
        raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {self.shape[d]} (input tensor's "
                           f"size at dimension {dim}), but got split_sizes={sizes}")
    return self.split(sizes, dim)


def _sum_to_size(self, *size):
    """torch's ``sum_to_size``: summed down to ``size`` (which must broadcast to this tensor's shape), the
    reduction that undoes a broadcast."""
    size = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else tuple(size)
    lead = self.ndim - len(size)
    if lead < 0 or any(s != 1 and s != n for s, n in zip(size, self.shape[lead:])):
        raise RuntimeError(f"size {{{list(size)}}} is not expandable to size {{{list(self.shape)}}}.")
    out = sum(self, tuple(range(lead))) if lead else self
    ones_at = tuple(i for i, s in enumerate(size) if s == 1 and out.shape[i] != 1)
    return sum(out, ones_at, True) if ones_at else out


def _narrow_copy(self, dim, start, length):
    """torch's ``narrow_copy``: ``narrow`` copied (not a view), with its own kernel's checks (and words)."""
    if self.ndim == 0:
        raise RuntimeError("narrow() cannot be applied to a 0-dim tensor.")
    if dim >= 0 and dim >= self.ndim:
        raise RuntimeError("Expected dim < static_cast<int64_t>(self_sizes.size()) to be true, but got false.  (Could "
                           "this error message be improved?  If so, please report an enhancement request to PyTorch.)")
    n, start, length = self.shape[norm_axis(dim, self.ndim)], int(start), int(length)
    if not -n <= start <= n:
        raise IndexError(f"start out of range (expected to be in range of [{-n}, {n}], but got {start})")
    start = start + n if start < 0 else start
    if length < 0 or start > n - length:
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size ({n}).")
    return clone(_narrow(self, dim, start, length))


def _diag_embed(self, offset=0, dim1=-2, dim2=-1):
    """torch's ``diag_embed``: the last dimension put on the diagonal of the planes ``(dim1, dim2)``."""
    if self.ndim == 0:  # (torch reads the dims of a 1-d result: out of range, or one dim twice)
        norm_axis(dim1, 1), norm_axis(dim2, 1)
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    return diag_embed(self, offset, dim1, dim2)


@named("DiagEmbedBackward0")
def _diagflat(self, offset=0):
    """torch's ``diagflat``: the tensor flattened, put on the ``offset`` diagonal of a square matrix."""
    return diag_embed(ravel(self), offset, 0, 1)


def _integer_pair(name):
    kernel = da.ufunc.ufunc(getattr(np, name))  # (NumPy's ufunc over the chunks; dask.array names none)

    def method(self, other):
        other = _tensor_arg(other, name, "other", 1)
        dtype = _data.result_type(self, other)
        if dtype.kind not in "iu":
            raise NotImplementedError(f"\"{name}_cpu\" not implemented for '{_data.TORCH_TYPE_NAMES[dtype.name]}'")
        check_broadcast(self.shape, other.shape)
        return Tensor._make(kernel(self.detach().array.astype(dtype), other.detach().array.astype(dtype)))
    what = "greatest common divisor" if name == "gcd" else "least common multiple"
    method.__doc__ = f"torch's ``{name}``: the {what} of integer tensors, elementwise (broadcast; no gradient)."
    return method


def _mvlgamma(self, p):
    """torch's ``mvlgamma(p)``: the multivariate log-gamma of dimension ``p``,
    ``sum_i lgamma(x - i/2) + p (p - 1) / 4 log(pi)``; in the default floating type for an integer tensor."""
    if p < 1:
        raise RuntimeError("p has to be greater than or equal to 1")
    x = self if self.dtype.kind in "fc" else astype(self, _data.DEFAULT_FLOAT)
    out = _lgamma(x)
    for i in range(1, p):
        out = out + _lgamma(x - i / 2)
    return out + p * (p - 1) / 4 * math.log(math.pi)


def _fill_diagonal_(self, fill_value, wrap=False):
    """torch's ``fill_diagonal_``: ``fill_value`` written on the main diagonal (of a matrix, or of a tensor
    whose dimensions are all equal); ``wrap``: a tall matrix's diagonal starts again after a row gap, as
    torch's (and NumPy's ``fill_diagonal``)."""
    if self.ndim < 2:
        raise RuntimeError("dimensions must larger than 1")
    if self.ndim > 2 and len(set(self.shape)) > 1:
        raise RuntimeError("all dimensions of input must be of equal length")
    mask = np.zeros(self.shape, dtype=bool)
    np.fill_diagonal(mask, True, wrap=wrap)
    cond = Tensor._make(da.from_array(mask, chunks=self.chunks))
    value = np.array(_data.checked_scalar(fill_value, self.dtype)).astype(self.dtype).item()  # (2.5 in ints: 2)
    # (torch writes through a view of the diagonal: its node is CopySlices)
    return self._inplace(named("CopySlices")(lambda x: where(cond, value, x)), one_value=True)


def _scatter_into(self, src, write):
    """``self`` copied, its part ``write(copy)`` (a view) overwritten with ``src``: torch's ``*_scatter``
    ops, whose gradient reaches ``self`` outside the part and ``src`` inside it."""
    out = clone(self)
    part = write(out)
    src = as_tensor(src)
    if tuple(src.shape) != tuple(part.shape):
        raise RuntimeError(f"expected src to have a size equal to the slice of self. src size = {list(src.shape)}, "
                           f"slice size = {list(part.shape)}")
    part.copy_(src)
    return out


@named("DiagonalScatterBackward0")
def _diagonal_scatter(self, src, offset=0, dim1=0, dim2=1):
    """torch's ``diagonal_scatter``: this tensor with the diagonal ``(offset, dim1, dim2)`` replaced by ``src``."""
    return _scatter_into(self, src, lambda out: out.diagonal(offset, dim1, dim2))


@named("SelectScatterBackward0")
def _select_scatter(self, src, dim, index):
    """torch's ``select_scatter``: this tensor with ``select(dim, index)`` replaced by ``src``."""
    return _scatter_into(self, src, lambda out: _select(out, dim, index))


@named("SliceScatterBackward0")
def _slice_scatter(self, src, dim=0, start=None, end=None, step=1):
    """torch's ``slice_scatter``: this tensor with ``start:end:step`` along ``dim`` replaced by ``src``."""
    d = norm_axis(dim, self.ndim)
    return _scatter_into(self, src, lambda out: out[(slice(None),) * d + (slice(start, end, step),)])


_REMOVED = {
    "symeig": "This function was deprecated since version 1.9 and is now removed. The default behavior has changed "
              "from using the upper triangular portion of the matrix by default to using the lower triangular "
              "portion.\n\nL, _ = torch.symeig(A, upper=upper) should be replaced with:\nL = torch.linalg.eigvalsh(A, "
              "UPLO='U' if upper else 'L')\n\nand\n\nL, V = torch.symeig(A, eigenvectors=True) should be replaced "
              "with:\nL, V = torch.linalg.eigh(A, UPLO='U' if upper else 'L')",
    "eig": "This function was deprecated since version 1.9 and is now removed. `torch.linalg.eig` returns complex "
           "tensors of dtype `cfloat` or `cdouble` rather than real tensors mimicking complex tensors.\n\nL, _ = "
           "torch.eig(A) should be replaced with:\nL_complex = torch.linalg.eigvals(A)\n\nand\n\nL, V = torch.eig(A, "
           "eigenvectors=True) should be replaced with:\nL_complex, V_complex = torch.linalg.eig(A)",
    "lstsq": "This function was deprecated since version 1.9 and is now removed. `torch.lstsq` is deprecated in favor "
             "of `torch.linalg.lstsq`.\n`torch.linalg.lstsq` has reversed arguments and does not return the QR "
             "decomposition in the returned tuple (although it returns other information about the problem).\n\nTo "
             "get the QR decomposition consider using `torch.linalg.qr`.\n\nThe returned solution in `torch.lstsq` "
             "stored the residuals of the solution in the last m - n columns of the returned value whenever m > n. "
             "In torch.linalg.lstsq, the residuals are in the field 'residuals' of the returned named tuple.\n\nThe "
             "unpacking of the solution, as in\nX, _ = torch.lstsq(B, A).solution[:A.size(1)]\nshould be replaced "
             "with:\nX = torch.linalg.lstsq(A, B).solution",
    "solve": "This function was deprecated since version 1.9 and is now removed. `torch.solve` is deprecated in favor "
             "of `torch.linalg.solve`. `torch.linalg.solve` has its arguments reversed and does not return the LU "
             "factorization.\n\nTo get the LU factorization see `torch.lu`, which can be used with `torch.lu_solve` "
             "or `torch.lu_unpack`.\nX = torch.solve(B, A).solution should be replaced with:\nX = "
             "torch.linalg.solve(A, B)",
}


def _removed(name, arguments):
    def method(self, *args, **kwargs):
        if len(args) + len(kwargs) < len(arguments):  # (torch's binding: a missing argument first)
            missing = arguments[len(args):]
            raise TypeError(f"Tensor.{name}() missing 1 required positional argument: '{missing[0]}'")
        raise RuntimeError(_REMOVED[name])
    method.__doc__ = f"torch's ``{name}``, removed from torch: raises torch's error, naming what replaces it."
    return method


# ------------------------------------------------------------------ torch's older linear algebra methods
_DEPRECATED = {
    "cholesky": "torch.cholesky is deprecated in favor of torch.linalg.cholesky and will be removed in a future "
                "PyTorch release.\nL = torch.cholesky(A)\nshould be replaced with\nL = torch.linalg.cholesky(A)\n"
                "and\nU = torch.cholesky(A, upper=True)\nshould be replaced with\nU = torch.linalg.cholesky(A).mH\n"
                "This transform will produce equivalent results for all valid (symmetric positive definite) inputs.",
    "triangular_solve": "torch.triangular_solve is deprecated in favor of torch.linalg.solve_triangularand will be "
                        "removed in a future PyTorch release.\ntorch.linalg.solve_triangular has its arguments "
                        "reversed and does not return a copy of one of the inputs.\nX = torch.triangular_solve(B, "
                        "A).solution\nshould be replaced with\nX = torch.linalg.solve_triangular(A, B).",
}


@named("CholeskySolveBackward0")
def _cholesky_solve(self, input2, upper=False):
    """torch's ``cholesky_solve(input2, upper=False)``: ``X`` with ``A X = self``, ``A = L L^H`` given by its
    Cholesky factor ``input2`` (upper: ``U^H U``).  torch's node saves both operands and the result: a write
    to either before the backward is refused, as there."""
    return guard(cholesky_solve(self, input2, upper=upper), self, input2)


@named("CholeskyInverseBackward0")
def _cholesky_inverse(self, upper=False):
    """torch's ``cholesky_inverse(upper=False)``: the inverse of ``A = L L^H`` from its Cholesky factor (this
    tensor; upper: ``U^H U``)."""
    if self.ndim < 2:
        raise RuntimeError("cholesky_inverse: The input tensor A must have at least 2 dimensions.")
    if self.shape[-1] != self.shape[-2]:
        raise RuntimeError(f"cholesky_inverse: A must be batches of square matrices, but they are {self.shape[-2]} by "
                           f"{self.shape[-1]} matrices")
    n = self.shape[-1]
    eye = broadcast_to(Tensor._make(da.eye(n, dtype=self.dtype, chunks=-1)), self.shape)
    return guard(cholesky_solve(eye, self, upper=upper), self)


@named("TriangularSolveBackward0")
def _triangular_solve(self, A, upper=True, transpose=False, unitriangular=False):
    """torch's ``triangular_solve(A, upper=True, transpose=False, unitriangular=False)``: the named tuple
    ``(solution, cloned_coefficient)``, ``solution`` solving ``A X = self`` (``A^T X = self`` with ``transpose``)
    for ``A`` triangular (the other triangle unread); deprecated in torch for ``linalg.solve_triangular``, whose
    warning it gives.  torch's node saves both operands and the solution: a write to either is refused."""
    warnings.warn(_DEPRECATED["triangular_solve"], UserWarning, stacklevel=2)
    A = as_tensor(A)
    T = triu(A) if upper else tril(A)
    if transpose:
        T, upper = swapaxes(T, -1, -2), not upper
    batch = np.broadcast_shapes(tuple(self.shape[:-2]), tuple(A.shape[:-2]))
    if 0 in batch:  # (no matrix to solve: linalg.solve_triangular refuses an empty batch, torch gives it)
        solution = broadcast_to(self, batch + tuple(self.shape[-2:])) * 0
    else:
        solution = solve_triangular(T, self, upper=upper, unitriangular=unitriangular)
    return return_types.triangular_solve(guard(solution, self, A), clone(A))


def _cholesky(self, upper=False):
    """torch's ``cholesky(upper=False)``: the Cholesky factor, lower (or upper); deprecated in torch for
    ``linalg.cholesky``, whose warning it gives."""
    warnings.warn(_DEPRECATED["cholesky"], UserWarning, stacklevel=2)
    return linalg_cholesky(self, upper=upper)


# ------------------------------------------------ indices checked in range (gather, index_writes)
def _checked_index_block(idx, *, n, low, error, text):
    bad = (idx < low) | (idx >= n)
    if bad.any():
        raise error(text.format(int(idx[bad][0])))
    return idx


def _checked_index_array(a, *, n, low, error, text):
    return a.map_blocks(_checked_index_block, n=n, low=low, error=error, text=text, dtype=a.dtype, meta=a._meta)


def _in_range(idx, host, n, error, text, low=0):
    """``idx`` whose values must lie in ``[low, n)``, else ``error(text.format(value))``: host values are
    checked now, a lazy tensor's inside the tasks that read it (before any value comes back)."""
    if host is not None:
        bad = host[(host < low) | (host >= n)]
        if bad.size:
            raise error(text.format(int(bad.reshape(-1)[0])))
        return idx
    params = (("n", n), ("low", low), ("error", error), ("text", text))
    return Tensor._make(door.defer(_checked_index_array, (value(idx),), params))

# ------------------------------------------------------------------ writes at flat indices, reductions at indices
def _put(self, index, source, accumulate=False):
    """torch's ``put(index, source, accumulate=False)``: this tensor, read as if flattened, with ``source``
    written (or added, ``accumulate``) at ``index``; negative indices count from the end."""
    index, source = as_tensor(index), as_tensor(source)
    if index.dtype != np.int64:
        raise RuntimeError(f"put_(): Expected a long tensor for index, but got "
                           f"{_data.TORCH_TYPE_NAMES.get(index.dtype.name, index.dtype.name)}")
    if source.numel() != index.numel():
        raise IndexError(f"put_(): Expected source and index to have the same number of elements, but got "
                         f"source.numel() = {source.numel()}, index.numel() = {index.numel()}")
    # (the index as it is, a view: torch's node saves it, and a write to it before backward is refused;
    # index_put checks its range)
    out = reshape(self, (-1,)).index_put((reshape(index, (-1,)),), reshape(source, (-1,)).to(self.dtype), accumulate)
    return guard(reshape(out, self.shape), source)  # (torch's PutBackward0 saves source: a write to it is refused)


_INDEX_REDUCE_WARNED = []


def _index_reduce(self, dim, index, source, reduce, *, include_self=True):
    """torch's ``index_reduce(dim, index, source, reduce, include_self=True)``: the slices of ``source`` along
    ``dim`` reduced (``prod``, ``mean``, ``amax``, ``amin``) into this tensor's slices ``index`` names (torch's
    ``scatter_reduce`` with the index spread over the slices, whose gradient it has)."""
    if not _INDEX_REDUCE_WARNED:  # (torch warns once a process)
        _INDEX_REDUCE_WARNED.append(True)
        warnings.warn("index_reduce() is in beta and the API may change at any time.", UserWarning, stacklevel=2)
    if reduce not in ("prod", "mean", "amax", "amin"):
        raise RuntimeError(f"index_reduce(): Expected reduce to be one of prod, mean, amax or amin but got {reduce}.")
    index, source = as_tensor(index), as_tensor(source)
    if index.dtype not in (np.int32, np.int64):
        raise RuntimeError(f"index_reduce_(): Expected dtype int32/int64 for index but got: "
                           f"{_data.TORCH_TYPE_NAMES.get(index.dtype.name, index.dtype.name)}")
    if index.ndim > 1:
        raise IndexError(f"index_reduce_(): Index is supposed to be a vector, but got dim: {index.ndim} with type: "
                         f"{_data.TORCH_TYPE_NAMES[index.dtype.name]} and size: {list(index.shape)}")
    d = norm_axis(dim, builtins.max(self.ndim, 1))
    if self.ndim and source.ndim and index.numel() != source.shape[d]:
        raise RuntimeError(f"index_reduce_(): Number of indices ({index.numel()}) should be equal to "
                           f"source.size(dim): ({source.shape[d]}), for dim: {dim}")
    if self.ndim != source.ndim or any(a != b for i, (a, b) in enumerate(zip(self.shape, source.shape)) if i != d):
        raise RuntimeError(f"source tensor shape must match self tensor shape, excluding the specified dimension. "
                           f"Got self.shape = {list(self.shape)} source.shape = {list(source.shape)}")
    if not self.ndim:
        return _index_reduce(self.reshape(1), 0, index.reshape(1), source.reshape(1), reduce,
                             include_self=include_self).reshape(())
    index = _in_range(index.to(np.int64), None, self.shape[d], IndexError, "index out of range in self")
    spread = broadcast_to(reshape(index, tuple(-1 if i == d else 1 for i in range(source.ndim))), source.shape)
    return self.scatter_reduce(d, spread, source, reduce, include_self=include_self)


# ------------------------------------------------------------------ unique values (lengths known when computed)
def _consecutive_unique(a, axis):
    """NumPy's ``unique`` for runs: the first of each run of equal values (of equal slices along ``axis``), the
    run each element falls in, and the runs' lengths."""
    if axis is None:
        a = a.reshape(-1)
        axis = 0
    moved = np.moveaxis(a, axis, 0).reshape(a.shape[axis], -1)
    starts = np.ones(moved.shape[0], dtype=bool)
    starts[1:] = (moved[1:] != moved[:-1]).any(axis=1)
    first = np.flatnonzero(starts)
    counts = np.diff(np.append(first, moved.shape[0]))
    return np.take(a, first, axis=axis), np.cumsum(starts) - 1, counts


def _unique_part(block, *, axis, consecutive, part, shape):
    """One of ``unique``'s results (``part``: 0 the values, 1 the inverse, 2 the counts) of the whole array."""
    if consecutive:
        out = _consecutive_unique(block, axis)
    else:
        out = np.unique(block, axis=axis, return_inverse=True, return_counts=True,
                        **({} if axis is not None else {"equal_nan": False}))  # (torch's NaNs are each distinct)
    if part == 1:
        return out[1].reshape(shape).astype(np.int64)
    return out[part].astype(np.int64) if part == 2 else out[0]


def _unique_of(self, consecutive, return_inverse, return_counts, dim):
    x = self.detach()
    a = x.array
    if dim is not None:
        d = norm_axis(dim, builtins.max(x.ndim, 1))
        whole = _unknown.rechunk(a, -1)  # (rows of unknown count, after a boolean mask: their blocks joined)
        value_chunks = tuple((np.nan,) if i == d else (n,) for i, n in enumerate(a.shape))
        inverse_shape = (a.shape[d],)
    else:
        d, whole = None, _unknown.rechunk(a, -1)
        value_chunks, inverse_shape = ((np.nan,),), tuple(a.shape)
    kw = {"axis": d, "consecutive": consecutive, "shape": tuple(-1 if n != n else n for n in inverse_shape)}
    out = [Tensor._make(da.map_blocks(_unique_part, whole, part=0, chunks=value_chunks, dtype=a.dtype,
                                      drop_axis=list(range(1, a.ndim)) if d is None and a.ndim > 1 else [], **kw))]
    if return_inverse:
        out.append(Tensor._make(whole.map_blocks(_unique_part, part=1, dtype=np.int64,
                                                 chunks=tuple((n,) for n in inverse_shape),
                                                 drop_axis=list(range(len(inverse_shape), a.ndim)),
                                                 new_axis=list(range(a.ndim, len(inverse_shape))), **kw)))
    if return_counts:
        out.append(Tensor._make(whole.map_blocks(_unique_part, part=2, dtype=np.int64, chunks=((np.nan,),),
                                                 drop_axis=list(range(1, a.ndim)), new_axis=[] if a.ndim else [0],
                                                 **kw)))
    return out[0] if len(out) == 1 else tuple(out)


def _unique(self, sorted=True, return_inverse=False, return_counts=False, dim=None):
    """torch's ``unique``: the distinct values (slices along ``dim``), sorted, with the inverse indices and
    the counts when asked; the whole tensor is read in one task, and the result's length is known once
    computed (as a boolean mask's)."""
    return _unique_of(self, False, return_inverse, return_counts, dim)


def _unique_consecutive(self, return_inverse=False, return_counts=False, dim=None):
    """torch's ``unique_consecutive``: the first value (slice along ``dim``) of each run of equal ones, with the
    run of each element and the runs' lengths when asked; read whole in one task, its length known once
    computed."""
    return _unique_of(self, True, return_inverse, return_counts, dim)


def _histogram_block(x, lo, hi, *weight, bins, edges_given):
    """One chunk's counts (1, bins) over the whole tensor's edges (NumPy's rule, torch's too: the last bin
    closed), in the input's dtype; ``lo``, ``hi``: the data range (a flat one widened by 0.5 each way)."""
    x = x.reshape(-1)
    if edges_given:
        edges = np.asarray(bins)
    else:
        lo, hi = float(lo), float(hi)
        if lo == hi:
            lo, hi = lo - 0.5, hi + 0.5
        edges = np.linspace(lo, hi, bins + 1).astype(x.dtype)
    counts, _ = np.histogram(x, bins=edges, weights=weight[0].reshape(-1) if weight else None)
    return counts[None].astype(x.dtype)


def _histogram_edges(lo, hi, *, bins, out_dtype):
    lo, hi = float(lo), float(hi)
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    return np.linspace(lo, hi, bins + 1).astype(out_dtype)


def _histogram(self, bins=100, *, range=None, weight=None, density=False):
    """torch's ``histogram(bins=100, *, range=None, weight=None, density=False)``: the named tuple ``(hist,
    bin_edges)`` in this tensor's dtype; ``bins`` a count of equal bins over ``range`` (by default the data's,
    a lazy reduction) or a 1-d tensor of edges.  Not differentiable.  Cost: one count per chunk, summed."""
    x = as_tensor(self).detach()
    if x.dtype.kind != "f":
        raise NotImplementedError(f"\"histogramdd\" not implemented for '{_type_name(x.dtype)}'")
    a = x.array.reshape(-1)
    edges_given = isinstance(bins, Tensor)
    extra = ()
    if weight is not None:
        w = as_tensor(weight).detach().array
        extra = (w.reshape(-1).rechunk(a.chunks),)
    if edges_given:
        if bins.dtype != x.dtype:
            names = {"float64": "double", "float32": "float", "float16": "c10::Half"}
            raise RuntimeError(f"torch.histogramdd: input tensor and bins tensors should have the same dtype, but "
                               f"got input with dtype {names.get(x.dtype.name, x.dtype.name)} and bins for dimension "
                               f"0 with dtype {names.get(bins.dtype.name, bins.dtype.name)}")
        edge_values = bins.detach().array.rechunk(-1)
        lo = hi = 0.0
        n = edge_values.shape[0] - 1
        kw = {"bins": edge_values}
    else:
        n = int(bins)
        if n <= 0:
            raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {n} for dimension 0")
        lo, hi = (range if range is not None else (a.min(), a.max()))
        if range is not None and not lo <= hi:
            raise RuntimeError(f"torch.histogramdd: min should not exceed max, but got min {lo:g} max {hi:g} "
                               "for dimension 0")
        edge_values = da.map_blocks(_histogram_edges, da.asarray(lo), da.asarray(hi), bins=n, out_dtype=x.dtype,
                                    dtype=x.dtype,
                                    chunks=((n + 1,),), new_axis=[0])
        kw = {"bins": n}
    counts = da.map_blocks(_histogram_block, a, lo, hi, *extra, **kw, edges_given=edges_given, new_axis=1,
                           dtype=x.dtype, chunks=((1,) * a.numblocks[0], (n,)), meta=a._meta).sum(axis=0)
    if density:
        counts = counts / counts.sum() / da.diff(edge_values)
    return return_types.histogram(Tensor._make(counts), Tensor._make(edge_values))


# ------------------------------------------------------------------ regularized incomplete gamma
def _igamma_fallback(a, x, upper):
    """P(a, x) (Q with ``upper``) without SciPy: the series where ``x < a + 1``, Lentz's continued fraction
    elsewhere (Numerical Recipes' ``gser``/``gcf``), each to convergence in double precision."""
    a, x = np.broadcast_arrays(np.asarray(a, dtype=np.float64), np.asarray(x, dtype=np.float64))
    with np.errstate(all="ignore"):
        log_front = a * np.log(x) - x - np.vectorize(math.lgamma, otypes=[np.float64])(np.where(a > 0, a, 1.0))
        term = 1.0 / a
        total = term.copy()
        for n in range(1, 500):
            term = term * x / (a + n)
            total = total + term
        series = total * np.exp(log_front)
        b = x + 1.0 - a
        c, d = np.full_like(b, 1e300), 1.0 / b
        h = d.copy()
        for i in range(1, 500):
            an = -i * (i - a)
            b = b + 2.0
            d = an * d + b
            d = np.where(np.abs(d) < 1e-300, 1e-300, d)
            c = b + an / c
            c = np.where(np.abs(c) < 1e-300, 1e-300, c)
            d = 1.0 / d
            h = h * d * c
        fraction = np.exp(log_front) * h
        lower = np.where(x < a + 1, series, 1.0 - fraction)
        lower = np.where(x == 0, 0.0, lower)
        lower = np.where((a <= 0) | (x < 0) | np.isnan(a) | np.isnan(x), np.nan, lower)
        lower = np.where(np.isinf(x) & (x > 0) & (a > 0), 1.0, lower)
    return 1.0 - lower if upper else lower


def _igamma_special(a, x, out, upper):
    """torch's special cases of ``calc_igamma``/``calc_igammac``, in its order (a NaN fails each comparison:
    ``igamma(inf, nan)`` is 0, ``igamma(nan, inf)`` 1, as torch's)."""
    with np.errstate(all="ignore"):
        a, x = np.broadcast_arrays(a, x)
        one, zero = (0.0, 1.0) if upper else (1.0, 0.0)
        return np.select([(x < 0) | (a < 0), a == 0, x == 0, np.isinf(a), np.isinf(x)],
                         [np.nan, np.where(x > 0, one, np.nan), zero, np.where(np.isinf(x), np.nan, zero), one],
                         default=out)


def _igamma_block(a, x, *, upper):
    dtype = np.result_type(a, x)
    if type(a) is np.ndarray and type(x) is np.ndarray:
        try:
            import scipy.special as special
            out = (special.gammaincc if upper else special.gammainc)(a, x)
            return _igamma_special(a, x, out, upper).astype(dtype, copy=False)
        except ImportError:
            pass
    return _igamma_special(a, x, _igamma_fallback(a, x, upper), upper).astype(dtype, copy=False)


def _igamma_lower_block(a, x):
    return _igamma_block(a, x, upper=False)


def _igamma_upper_block(a, x):
    return _igamma_block(a, x, upper=True)


def _igamma_array(a, x, *, upper):
    return da.core.elemwise(_igamma_upper_block if upper else _igamma_lower_block, a, x)  # (broadcast, as a ufunc)


_igamma_p = primitive("igamma", torch=("IgammaBackward0", "IgammacBackward0"), impl=_igamma_array, args=("a", "x"),
                      save=("a", "x"), promote="common")


@_igamma_p.vjp
def _igamma_rule(g, s, *, upper):
    if s.needs[0]:
        raise NotImplementedError(f"the derivative for '{'igammac' if upper else 'igamma'}: input' is not implemented.")
    a, x = s.a, s.x
    density = exp(-x + (a - 1) * log(x) - _lgamma(a))  # (d/dx of P(a, x); Q's is its negative)
    return None, (-g if upper else g) * density


def _igammas(upper):
    name = "igammac" if upper else "igamma"

    def method(self, other):
        other = _tensor_arg(other, name, "other", 1)
        dtype = _data.result_type(self, other)
        if dtype.kind != "f":
            raise NotImplementedError(f"\"igamma{'c' if upper else ''}_cpu\" not implemented for "
                                      f"'{_data.TORCH_TYPE_NAMES[dtype.name]}'")
        check_broadcast(self.shape, other.shape)
        return _igamma_p.bind(self, other, node="IgammacBackward0" if upper else "IgammaBackward0", upper=upper)
    method.__doc__ = (f"torch's ``{name}(other)``: the regularized {'upper' if upper else 'lower'} incomplete gamma "
                      f"function {'Q' if upper else 'P'}(self, other), elementwise; differentiable in ``other`` only, "
                      "as torch's (the gradient of ``self`` raises).")
    return method



@contextlib.contextmanager
def named_errors(plain, name, kinds=(TypeError,)):
    """torch's errors of ``name`` (an in-place ``heaviside_``) where the out-of-place ``plain`` it runs raises
    one naming itself (``heaviside(): argument 'values' ...``): torch's argument parser names the variant called."""
    try:
        yield
    except kinds as e:
        text = str(e)
        if type(e) in kinds and e.args == (text,) and text.startswith(f"{plain}("):
            raise type(e)(name + text[len(plain):]) from None
        raise


def _in_place(fn, name, copy=False, node=None):
    """``name``, torch's in-place ``fn``; ``copy``: ``fn`` is a composition whose inner nodes save ``self``,
    so it reads a copy of it (torch saves the original ``self`` of an in-place op, which the write leaves).
    ``node``: torch's node name of the write (or a function of the call's arguments giving it), where ``fn``'s
    last node is named otherwise (a composition's, or the out-of-place op's overload)."""
    def write(x, *args, **kwargs):
        since = mark()
        out = fn(clone(x) if copy else x, *args, **kwargs)
        if node is None:
            return out
        return relabel(out, node(*args, **kwargs) if callable(node) else node, since)

    def method(self, *args, **kwargs):
        with named_errors(name[:-1], name):
            return self._inplace(write, *args, **kwargs)
    method.__doc__ = (f"In-place version of :meth:`Tensor.{name[:-1]}`: the result is written into this tensor, "
                      "which is returned; as torch's, a leaf that requires grad refuses it outside ``no_grad`` and "
                      "the version counter goes up.")
    return method



def _raise_inplace_derivative(g, s, *, op):
    raise NotImplementedError(f"the derivative for 'inplace version of {op}' is not implemented.")


# torch's in-place acosh_/asinh_/atanh_ record a node (``AcoshBackward1``) whose backward raises: named as it binds
_no_inplace_derivative_p = primitive("no_inplace_derivative")
_no_inplace_derivative_p.vjp(_raise_inplace_derivative)


def _no_inplace_derivative(op):
    """torch's ``{op}_``: the values written in place, and a node that refuses to be differentiated."""
    def method(self):
        def write(x):
            out = getattr(x.detach(), op)()
            if not (x.requires_grad and is_grad_enabled()):
                return out
            return _no_inplace_derivative_p.record(out.array, x, node=f"{op.capitalize()}Backward1", op=op)
        return self._inplace(write)
    method.__doc__ = (f"In-place version of :meth:`Tensor.{op}`: the result is written into this tensor, which is "
                      f"returned; as torch's, its gradient is not implemented (backward through it raises).")
    return method


def _shape_in_place(name, view, node):
    """torch's ``name``: this tensor becomes ``view(self, *args)`` (a transpose, a squeeze ...), its shape changed
    in place, sharing its storage and version counter as before (a detached alias of its storage, as torch's
    result is no view of a base it did not have), recorded as torch's node ``node`` (a name, or a function of the
    arguments giving it).  A tensor that others view (``_base`` of a live view) refuses: their recipes read its
    old shape."""
    def method(self, *args, **kwargs):
        self._check_inplace()
        st = self._storage
        root = st.root if type(st) is _ViewStorage else st
        if any(v._base is self for v in (root.views or ())):
            raise NotImplementedError(f"{name}() of a tensor that has views is not supported: their layouts "
                                      "would change under them")
        since = mark()
        with named_errors(name[:-1], name, (TypeError, RuntimeError)):
            out = view(self, *args, **kwargs)
        relabel(out, node(*args, **kwargs) if callable(node) else node, since)
        if type(out._storage) is not _ViewStorage:  # (no view was made: nothing shares the result's storage)
            raise NotImplementedError(f"{name}() did not make a view here")
        self._storage = out._storage
        if out._base is self:  # (this tensor was no view: it becomes an alias of its old storage, as torch's)
            self._base = self._view = None
        else:
            self._base, self._view = out._base, out._view
        if out.grad_fn is not None:
            self._retain_moved(self.grad_fn, out.grad_fn)
            self.grad_fn = out.grad_fn
        root.version += 1  # (a view before is one still, among its base's live views already)
        if self._hidden_from is not None:
            root.hidden += 1
        return self
    method.__doc__ = (f"In-place version of :meth:`Tensor.{name[:-1]}`: this tensor's shape changes and it is "
                      "returned; as torch's, a leaf that requires grad refuses it outside ``no_grad`` and the "
                      "version counter goes up.")
    return method

METHODS = {
    "sum": _sum, "mean": _mean, "nansum": _nansum, "nanmean": _nanmean, "amax": _amax, "amin": _amin,
    "count_nonzero": _count_nonzero, "var": _variance(var), "std": _variance(std),
    "max": _extreme("max", max, maximum, argmax, return_types.max),
    "min": _extreme("min", min, minimum, argmin, return_types.min),
    "median": _median("median", False, return_types.median),
    "nanmedian": _median("nanmedian", True, return_types.nanmedian),
    "sort": _sort, "argsort": _argsort, "squeeze": _squeeze, "flip": _flip, "narrow": _narrow, "select": _select,
    "t": _t,
    "to": _to, "double": _memory_format_cast(np.float64), "float": _memory_format_cast(np.float32),
    "new_zeros": _new(lambda *size, **kw: zeros(*size, **kw), "new_zeros"),
    "new_ones": _new(lambda *size, **kw: ones(*size, **kw), "new_ones"),
    "new_empty": _new(lambda *size, **kw: zeros(*size, **kw), "new_empty"),
    "new_full": _new(lambda size, fill_value, **kw: _new_full(size, fill_value, **kw), "new_full"),
    "new_tensor": _new(lambda data, **kw: _new_tensor(data, **kw), "new_tensor"),
    **{name: _cast(dtype) for name, dtype in (("bool", np.bool_), ("byte", np.uint8), ("char", np.int8),
                                              ("short", np.int16), ("int", np.int32), ("long", np.int64),
                                              ("half", np.float16), ("cfloat", np.complex64),
                                              ("cdouble", np.complex128))},
    "clamp_min": _clamp_min, "clamp_max": _clamp_max, "expand_as": _expand_as, "view_as": _view_as,
    "reshape_as": _reshape_as, "type_as": _type_as, "masked_fill": _masked_fill, "masked_select": _masked_select,
    "gather": _gather, "index_select": _index_select, "topk": _topk, "kthvalue": _kthvalue, "aminmax": _aminmax,
    "tensor_split": _tensor_split,
    "hsplit": _np_split(hsplit, "hsplit"), "vsplit": _np_split(vsplit, "vsplit"),
    "dsplit": _np_split(dsplit, "dsplit"), "repeat": _repeat, "tile": _tile, "isclose": _isclose, "clone": _clone,
    "where": _where,
    "mv": _mv, "bmm": _bmm, "addmm": _addmm, "addmv": _addmv, "addr": _addr, "baddbmm": _baddbmm,
    "addbmm": _addbmm, "addcmul": _addcmul, "addcdiv": _addcdiv, "ger": _ger, "rsqrt": _rsqrt, "frac": _frac,
    "lerp": _lerp, "logit": _logit, "xlogy": _xlogy, "cov": _cov, "corrcoef": corrcoef, "msort": _msort,
    "adjoint": _adjoint, "resolve_conj": _resolve_conj, "conj": _conj, "is_conj": _is_conj,
    "resolve_neg": _itself("resolve_neg"),
    "conj_physical": conj,
    "matrix_power": matrix_power, "matrix_exp": matrix_exp, "det": det, "logdet": _logdet, "slogdet": slogdet,
    "inverse": inv, "pinverse": _pinverse, "dist": _dist,
    "nonzero": _nonzero, "argwhere": _argwhere, "sgn": _sgn,
    "is_floating_point": _is_floating_point, "is_complex": _is_complex, "is_signed": _is_signed,
    "nelement": _nelement, "element_size": _element_size, "allclose": _allclose, "equal": _equal,
    "heaviside": _heaviside, "erfc": _erfc, "cross": _cross, "renorm": _renorm,
    "digamma": _digamma, "polygamma": _polygamma, "lgamma": _lgamma, "erfinv": _erfinv, "unfold": _unfold,
    "mode": _mode, "histc": _histc,
    "triu": _triangle(triu, "triu"), "tril": _triangle(tril, "tril"), "logcumsumexp": _logcumsumexp,
    "cummax": _running_extreme("cummax", True), "cummin": _running_extreme("cummin", False),
    "__lshift__": _shift(True), "__rshift__": _shift(False), "__rlshift__": _shift(True, swap=True),
    "__rrshift__": _shift(False, swap=True), "bitwise_left_shift": _shift(True), "bitwise_right_shift": _shift(False),
    "uniform_": _uniform_, "normal_": _normal_, "exponential_": _exponential_, "cauchy_": _cauchy_,
    "log_normal_": _log_normal_, "geometric_": _geometric_, "random_": _random_, "bernoulli_": _bernoulli_,
    "bernoulli": _bernoulli, "multinomial": _multinomial,
    "is_nonzero": _is_nonzero, "is_same_size": _is_same_size, "is_neg": _is_neg, "ndimension": _ndimension,
    "split_with_sizes": _split_with_sizes, "sum_to_size": _sum_to_size, "narrow_copy": _narrow_copy,
    "diag_embed": _diag_embed, "diagflat": _diagflat, "gcd": _integer_pair("gcd"), "lcm": _integer_pair("lcm"),
    "mvlgamma": _mvlgamma, "fill_diagonal_": _fill_diagonal_, "diagonal_scatter": _diagonal_scatter,
    "select_scatter": _select_scatter, "slice_scatter": _slice_scatter,
    "symeig": _removed("symeig", ()), "eig": _removed("eig", ()), "lstsq": _removed("lstsq", ("other",)),
    "solve": _removed("solve", ("other",)),
    "cholesky": _cholesky, "cholesky_solve": _cholesky_solve, "cholesky_inverse": _cholesky_inverse, "put": _put,
    "triangular_solve": _triangular_solve,
    "index_reduce": _index_reduce, "unique": _unique,
    "unique_consecutive": _unique_consecutive, "histogram": _histogram, "igamma": _igammas(False),
    "igammac": _igammas(True),
}
# torch's in-place forms of the methods above: the method's result written into the tensor


def _overload(name, tensor, number):
    """torch's node name of an op whose last argument (the last keyword one, if any) is a tensor (``tensor``) or a
    number (``number``)."""
    def node(*args, **kwargs):
        last = list(kwargs.values())[-1] if kwargs else args[-1]
        return f"{name}Backward{tensor if isinstance(last, Tensor) else number}"
    return node


# torch's node names of in-place writes where the method's last node is named otherwise; the out-of-place
# methods of the same names record the same, but for polygamma (PolygammaBackward0) and conj_physical (of a real
# tensor: none, the tensor itself)
_INPLACE_NODES = {"masked_fill": _overload("MaskedFill", 1, 0), "clamp_min": _overload("ClampMin", 1, 0),
                  "clamp_max": _overload("ClampMax", 1, 0), "polygamma": "PolygammaBackward1",
                  "addmm": "AddmmBackward0", "addmv": "AddmvBackward0", "addr": "AddrBackward0",
                  "baddbmm": "BaddbmmBackward0", "addbmm": "AddbmmBackward0", "conj_physical": "ConjPhysicalBackward1",
                  "logit": "LogitBackward0", "xlogy": _overload("Xlogy", 0, 2), "copysign": _overload("Copysign", 0, 1),
                  "cumprod": "CumprodBackward0", "cumsum": "CumsumBackward0", "renorm": "RenormBackward0",
                  "mvlgamma": "MvlgammaBackward0", "put": "PutBackward0", "index_reduce": "IndexReduceBackward0"}
METHODS.update({name: named(_INPLACE_NODES[name])(METHODS[name]) for name in (
    "masked_fill", "clamp_min", "clamp_max", "addmm", "addmv", "addr", "baddbmm", "addbmm", "logit", "xlogy",
    "renorm", "mvlgamma", "put", "index_reduce")})
METHODS.update({f"{name}_": _in_place(METHODS[name], f"{name}_", node=_INPLACE_NODES.get(name)) for name in (
    "masked_fill", "addcmul", "addcdiv", "lerp", "triu", "tril", "clamp_min", "clamp_max", "heaviside", "erfc",
    "digamma", "polygamma", "lgamma", "erfinv")})
METHODS["renorm_"] = _in_place(_renorm, "renorm_", copy=True, node=_INPLACE_NODES["renorm"])
METHODS["mvlgamma_"] = _in_place(_mvlgamma, "mvlgamma_", copy=True, node=_INPLACE_NODES["mvlgamma"])
METHODS.update({"igamma_": _in_place(METHODS["igamma"], "igamma_", copy=True),
                "igammac_": _in_place(METHODS["igammac"], "igammac_", copy=True)})


def _squeeze_node(*args, **kwargs):
    """torch's node of ``squeeze_()`` (all), ``squeeze_(dim)``, ``squeeze_((dims))``."""
    dim = args[0] if args else kwargs.get("dim")
    return "SqueezeBackward3" if dim is None else "SqueezeBackward5" if isinstance(dim, (tuple, list)) \
        else "SqueezeBackward4"


METHODS.update({name: _shape_in_place(name, view, node) for name, view, node in (
    ("t_", _t, "TBackward1"), ("squeeze_", _squeeze, _squeeze_node),
    ("unsqueeze_", lambda x, dim: x.unsqueeze(dim), "UnsqueezeBackward1"),
    ("transpose_", lambda x, dim0, dim1: swapaxes(x, dim0, dim1), "TransposeBackward1"),
    ("swapaxes_", lambda x, a, b: swapaxes(x, a, b), "TransposeBackward1"),
    ("swapdims_", lambda x, a, b: swapaxes(x, a, b), "TransposeBackward1"))})
METHODS.update({"put_": _in_place(_put, "put_", node=_INPLACE_NODES["put"]),
                "index_reduce_": _in_place(_index_reduce, "index_reduce_", copy=True,
                                           node=_INPLACE_NODES["index_reduce"])})
METHODS.update({f"{name}_": _in_place(METHODS[name], f"{name}_", node=_INPLACE_NODES[name]) for name in (
    "addmm", "addmv", "addr", "baddbmm", "addbmm")})
# (of a real tensor torch still records its node, the gradient passing as it is: a clone's, renamed)
METHODS["conj_physical_"] = _in_place(lambda x: conj(x) if x.dtype.kind == "c" else clone(x), "conj_physical_",
                                      node=_INPLACE_NODES["conj_physical"])
# (these rules read the input: the composition reads a copy of it, which the write leaves, as torch's saved input)
METHODS.update({f"{name}_": _in_place(fn, f"{name}_", copy=True, node=_INPLACE_NODES[name]) for name, fn in (
    ("logit", _logit), ("xlogy", _xlogy), ("copysign", Tensor.copysign), ("cumprod", Tensor.cumprod),
    ("cumsum", Tensor.cumsum))})
METHODS.update({name: _no_inplace_derivative(op) for name, op in (
    ("acosh_", "acosh"), ("arccosh_", "acosh"), ("asinh_", "asinh"), ("arcsinh_", "asinh"), ("atanh_", "atanh"),
    ("arctanh_", "atanh"))})
METHODS.update({"__ilshift__": _in_place(_shift(True, inplace=True), "__lshift___"),
                "__irshift__": _in_place(_shift(False, inplace=True), "__rshift___"),
                "bitwise_left_shift_": _in_place(_shift(True, inplace=True), "bitwise_left_shift_"),
                "bitwise_right_shift_": _in_place(_shift(False, inplace=True), "bitwise_right_shift_")})
# torch's methods that are an op as it is (torch's name -> the op's)
ALIASES = {"absolute": "abs", "negative": "neg", "multiply": "mul", "subtract": "sub", "divide": "truediv",
           "true_divide": "truediv", "greater": "gt", "greater_equal": "ge", "less": "lt", "less_equal": "le",
           "not_equal": "ne", "eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge", "diff": "diff",
           "fliplr": "fliplr", "flipud": "flipud", "float_power": "float_power", "nextafter": "nextafter",
           "swapdims": "swapaxes", "logical_not": "logical_not"}


def _checked(op, check):
    """The op as a method that first raises torch's error where ``check`` finds one (NumPy's module function, the
    op itself, raises its own, or computes)."""
    @functools.wraps(op)
    def method(self, *args, **kwargs):
        check(self, *args, **kwargs)
        return op(self, *args, **kwargs)
    method.__required__ = op  # (tools/make_stubs.py shows the op's signature)
    return method


def _at_least(n, words):
    def check(self, *args, **kwargs):
        if self.ndim < n:
            raise RuntimeError(words)
    return check


def _diff_check(self, n=1, *args, **kwargs):
    n = kwargs.get("n", n)
    if self.ndim < 1:
        raise RuntimeError("diff expects input to be at least one-dimensional")
    if n < 0:
        raise RuntimeError(f"order must be non-negative but got {n}")


def _roll_check(self, shift=None, axis=None, **kwargs):
    """torch's checks of ``roll(shifts, dims)``: shifts given, one per dim (or one with no dims), a dim of a
    tensor that has one."""
    shift, axis = kwargs.get("shifts", shift), kwargs.get("dims", axis)
    shifts = tuple(shift) if isinstance(shift, (tuple, list)) else () if shift is None else (shift,)
    dims = () if axis is None else tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    if not shifts:
        raise RuntimeError("`shifts` required")
    if not (not dims and len(shifts) == 1) and len(shifts) != len(dims):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)}")
    if self.ndim == 0 and dims:
        raise IndexError(f"Dimension specified as {dims[0]} but tensor has no dimensions")


def _rot90_check(self, k=1, axes=(0, 1)):
    axes = list(axes)
    if len(axes) != 2:
        raise RuntimeError(f"expected total rotation dims == 2, but got dims = {len(axes)}")
    if self.ndim < 2:
        raise RuntimeError(f"expected total dims >= 2, but got total dims = {self.ndim}")
    if norm_axis(axes[0], self.ndim) == norm_axis(axes[1], self.ndim):
        raise RuntimeError(f"expected rotation dims to be different, but got dim0 = {axes[0]} and dim1 = {axes[1]}")


def _operand(args, kwargs):
    """The method's second operand, given by position or by keyword (torch's name or the op's)."""
    return args[0] if args else next(iter(kwargs.values()), None)


def _ldexp_check(self, *args, **kwargs):
    other = _operand(args, kwargs)
    if isinstance(other, Tensor) and other.dtype == np.bool_ and self.dtype.kind == "f":  # (torch's kernel of
        # a floating base and bool exponents; of an integer or bool base it computes)
        raise NotImplementedError("\"ldexp_cpu_exp\" not implemented for 'Bool'")


def _inner_check(self, *args, **kwargs):
    other = _operand(args, kwargs)
    if isinstance(other, Tensor) and self.ndim and other.ndim and self.shape[-1] == other.shape[-1] and (
            self.dtype != other.dtype):
        raise RuntimeError("both inputs should have same dtype")


def _trace_check(self, *args, **kwargs):
    if args:
        raise TypeError(f"Tensor.trace() takes no arguments ({len(args)} given)")
    if self.ndim != 2:  # (NumPy's, the module function's, takes the first two axes of more)
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {self.ndim}")


# torch's checks before the op of the method (daskgrad/ops/__init__.py wraps the methods with them)
CHECKED = {"ldexp": _ldexp_check, "inner": _inner_check, "trace": _trace_check,
           "diff": _diff_check, "roll": _roll_check,
           "fliplr": _at_least(2, "Input must be >= 2-d."), "flipud": _at_least(1, "Input must be >= 1-d."),
           "rot90": _rot90_check}


def install(methods, module):
    """Put ``methods`` (torch's name -> function) on :class:`~daskgrad.Tensor`; those defined in ``module``
    or here (helpers named as the method they are: ``help(t.std)`` shows ``std``) renamed as the method."""
    for name, fn in methods.items():
        for f in (fn, getattr(fn, "__wrapped__", None)):  # (and a graph.named op's own: Python's errors name it)
            if f is not None and f.__module__ in (module, __name__):
                f.__name__, f.__qualname__ = name, f"Tensor.{name}"
        setattr(Tensor, name, fn)


install(METHODS, __name__)
Tensor.mH = property(_mH, doc="torch's ``mH``: the last two dims swapped and conjugated.")
Tensor.itemsize = property(_element_size, doc="torch's ``itemsize``: the bytes of one element.")
Tensor.H = property(_H, doc="torch's ``H``: a matrix transposed and conjugated.")
# torch's flags of layouts and devices daskgrad has none of: False, as torch's on a dense CPU tensor
for _flag in ("is_sparse", "is_sparse_csr", "is_quantized", "is_meta", "is_nested", "is_mkldnn", "is_xpu", "is_mps",
              "is_ipu", "is_xla", "is_vulkan", "is_maia", "is_mtia"):
    setattr(Tensor, _flag, property(lambda self: False, doc=f"torch's ``{_flag}``: False (dense chunks on a host or "
                                                            "a CUDA GPU)."))
