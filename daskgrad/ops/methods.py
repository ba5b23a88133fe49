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

import numbers

import numpy as np

from .. import _data, return_types
from ..graph import primitive
from .._tensor import Tensor, _backend, _current_backend, full, ones, tensor, zeros
from ._util import as_tensor, norm_axes, norm_axis
from .composite import array_split, corrcoef, cov, dsplit, hsplit, isnan, nanmean, nansum, ravel, tile, vsplit
from .elementwise import (abs, astype, clip, clone, conj, log, maximum, minimum, reciprocal, sign, sqrt, to_device,
                          trunc, where, zeros_like)
from .indexing import _meta, argsort, getitem, getitem_p
from .linalg import det, inv, matrix_power, pinv, slogdet, vector_norm
from .numpy_extra import take, take_along_axis, values_at
from .numpy_index import argwhere, count_nonzero, nonzero
from .products import matmul, mm, outer
from .reductions import _max_local, _refuse_complex_extreme, amax, amin, argmax, argmin, max, mean, min, std, sum, var
from .shape import broadcast_to, flip, permuted, reshape, squeeze, swapaxes
from .spectral import matrix_exp


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
    return sum(self, _all_if_empty(_dim(dim, axis)), keepdim if keepdims is None else keepdims, dtype=dtype)


def _mean(self, dim=None, keepdim=False, *, dtype=None, axis=None, keepdims=None):
    """torch's ``mean``: over ``dim`` (an int or a tuple; None or ``()``: every dim), in ``dtype`` when given."""
    x = self if dtype is None else astype(self, _data.np_dtype(dtype))
    return mean(x, _all_if_empty(_dim(dim, axis)), keepdim if keepdims is None else keepdims)


def _nansum(self, dim=None, keepdim=False, *, dtype=None, axis=None, keepdims=None):
    """torch's ``nansum``: the sum with NaN read as 0, over ``dim`` (None or ``()``: every dim)."""
    x = self if dtype is None else astype(self, _data.np_dtype(dtype))
    return nansum(x, _all_if_empty(_dim(dim, axis)), keepdim if keepdims is None else keepdims)


def _nanmean(self, dim=None, keepdim=False, *, dtype=None, axis=None, keepdims=None):
    """torch's ``nanmean``: the mean of the values that are not NaN, over ``dim`` (None or ``()``: every dim)."""
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
    return count_nonzero(self, _all_if_empty(_dim(dim, axis)))


def _variance(fn):
    """torch's ``var``/``std``: ``correction=1`` by default, ``unbiased=``, and ``x.var(True)`` (unbiased)."""
    def method(self, dim=None, unbiased=None, keepdim=False, *, correction=None, axis=None, keepdims=None,
               ddof=None):
        dim = _dim(dim, axis)
        if isinstance(dim, bool):  # torch's var(unbiased) overload
            dim, unbiased = None, dim
        correction = _dim(correction, ddof, "correction")  # NumPy's spelling too
        if unbiased is None and correction is None:
            correction = 1
        return fn(self, _all_if_empty(dim), keepdims=keepdim if keepdims is None else keepdims, correction=correction,
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
    if x.dtype.kind in "fc":
        nans = sum(isnan(x), dim, keepdims=True)
        pos = where(nans < n, (n - 1 - nans) // 2, 0) if ignore_nan else where(nans > 0, n - nans, (n - 1) // 2)
        pos = astype(pos, np.int64)
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
            if not x.numel():
                return full((), np.nan, dtype=x.dtype, device=x.device)
            value = _median_at(ravel(x.detach()), 0, False, ignore_nan, result, f"{name.capitalize()}Backward1").values
            return _median_all_p.bind(x, value, node=f"{name.capitalize()}Backward0")
        if x.ndim == 0:
            norm_axis(dim, 0)
            return _scalar_result(x, result)
        dim = norm_axis(dim, x.ndim)
        if not x.shape[dim]:
            raise IndexError(f"{name}(): Expected reduction dim {dim} to have non-zero size.")
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
    torch leaves it (``daskgrad.squeeze`` is NumPy's, which raises there)."""
    if dim is None:
        return squeeze(self)
    axes = norm_axes(dim, self.ndim)
    return squeeze(self, tuple(a for a in axes if self.shape[a] == 1))


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
    return broadcast_to(self, other.shape)


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
        value = astype(value, self.dtype)
    return where(mask, value, self)


def _masked_select(self, mask):
    """torch's ``masked_select``: the elements where the broadcast ``mask`` is True, as one 1-d tensor."""
    mask = as_tensor(mask)
    shape = np.broadcast_shapes(self.shape, mask.shape)
    x = self if self.shape == shape else broadcast_to(self, shape)
    return getitem(ravel(x), ravel(mask if mask.shape == shape else broadcast_to(mask, shape)))


def _gather(self, dim, index):
    """torch's ``gather``: ``out[i][j] = self[index[i][j]][j]`` along ``dim``; ``index`` no larger than
    ``self`` on the other dims (read from their start), not broadcast."""
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
    out = take_along_axis(x, idx, dim)
    return out if out.shape == index.shape else reshape(out, index.shape)


def _index_select(self, dim, index):
    """torch's ``index_select``: the slices at the 1-d (or 0-d) integer ``index`` along ``dim``."""
    index = as_tensor(index)
    if index.ndim > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    return take(self, reshape(index, (-1,)) if index.ndim == 0 else index, norm_axis(dim, self.ndim or 1)) \
        if self.ndim else reshape(take(reshape(self, (1,)), reshape(index, (-1,)), 0), ())


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
    if not 0 <= k <= x.shape[dim]:
        raise RuntimeError("selected index k out of range")
    idx = getitem(argsort(x, dim, descending=largest), (slice(None),) * dim + (slice(0, k),))
    return return_types.topk(values_at(x, idx, dim, True, "TopkBackward0"), idx)


def _kthvalue(self, k, dim=-1, keepdim=False):
    """torch's ``kthvalue``: the named ``(values, indices)`` of the ``k``-th smallest along ``dim``."""
    x = as_tensor(self)
    if x.ndim == 0:
        norm_axis(dim, 0)
        if k != 1:
            raise IndexError("kthvalue(): selected number k out of range for dimension 0")
        return _scalar_result(x, return_types.kthvalue)
    dim = norm_axis(dim, x.ndim)
    if not 1 <= k <= x.shape[dim]:
        raise IndexError(f"kthvalue(): selected number k out of range for dimension {dim}")
    idx = getitem(argsort(x, dim), (slice(None),) * dim + (slice(k - 1, k),))
    values = values_at(x, idx, dim, keepdim, "KthvalueBackward0")
    return return_types.kthvalue(values, idx if keepdim else squeeze(idx, dim))


def _aminmax(self, *, dim=None, keepdim=False):
    """torch's ``aminmax``: the named ``(min, max)`` over ``dim`` (every element when None)."""
    return return_types.aminmax(amin(self, dim, keepdim), amax(self, dim, keepdim))


def _tensor_split(self, indices_or_sections, dim=0):
    """torch's ``tensor_split`` (NumPy's ``array_split``), a tuple."""
    if isinstance(indices_or_sections, Tensor):
        indices_or_sections = indices_or_sections.detach().numpy().tolist()
    return tuple(array_split(self, indices_or_sections, norm_axis(dim, self.ndim)))


def _np_split(fn, name):
    def method(self, indices_or_sections):
        return tuple(fn(self, indices_or_sections))
    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"torch's ``{name}``: NumPy's, as a tuple."
    return method


def _repeat(self, *sizes):
    """torch's ``repeat``: the tensor tiled ``sizes`` times (NumPy's ``tile``; ``daskgrad.repeat`` is NumPy's
    element-wise repeat, torch's ``repeat_interleave``)."""
    sizes = tuple(sizes[0]) if len(sizes) == 1 and not isinstance(sizes[0], numbers.Integral) else sizes
    if len(sizes) < self.ndim:
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number of dimensions of "
                           "tensor")
    return tile(self, sizes)


def _where(self, condition, other):
    """torch's ``x.where(condition, other)``: ``where(condition, x, other)``."""
    return where(condition, self, other)


def _check_ndim(x, n, what):
    if x.ndim != n:
        raise RuntimeError(f"{what} must be a {n}D tensor" if n != 2 else f"{what} must be a matrix")


def _mv(self, vec):
    """torch's ``mv``: a matrix times a vector."""
    if self.ndim != 2 or as_tensor(vec).ndim != 1:
        raise RuntimeError(f"vector + matrix @ vector expected, got 1, {self.ndim}, {as_tensor(vec).ndim}")
    return matmul(self, vec)


def _bmm(self, mat2):
    """torch's ``bmm``: batches of matrices multiplied, both 3-d."""
    mat2 = as_tensor(mat2)
    _check_ndim(self, 3, "batch1")
    _check_ndim(mat2, 3, "batch2")
    return matmul(self, mat2)


def _scaled_sum(self, product, beta, alpha):
    """``beta * self + alpha * product``, ``self`` ignored when ``beta`` is 0 (torch: its NaNs too)."""
    product = product if alpha == 1 else product * alpha
    if beta == 0:
        return broadcast_to(product * 1, np.broadcast_shapes(self.shape, product.shape))
    return (self if beta == 1 else self * beta) + product


def _addmm(self, mat1, mat2, *, beta=1, alpha=1):
    """torch's ``addmm``: ``beta * self + alpha * (mat1 @ mat2)``."""
    return _scaled_sum(self, mm(mat1, mat2), beta, alpha)


def _addmv(self, mat, vec, *, beta=1, alpha=1):
    """torch's ``addmv``: ``beta * self + alpha * (mat @ vec)``."""
    return _scaled_sum(self, _mv(as_tensor(mat), vec), beta, alpha)


def _addr(self, vec1, vec2, *, beta=1, alpha=1):
    """torch's ``addr``: ``beta * self + alpha * outer(vec1, vec2)``."""
    return _scaled_sum(self, outer(vec1, vec2), beta, alpha)


def _baddbmm(self, batch1, batch2, *, beta=1, alpha=1):
    """torch's ``baddbmm``: ``beta * self + alpha * (batch1 @ batch2)``."""
    return _scaled_sum(self, _bmm(as_tensor(batch1), batch2), beta, alpha)


def _addbmm(self, batch1, batch2, *, beta=1, alpha=1):
    """torch's ``addbmm``: ``beta * self + alpha * sum_b(batch1[b] @ batch2[b])``."""
    return _scaled_sum(self, sum(_bmm(as_tensor(batch1), batch2), 0), beta, alpha)


def _addcmul(self, tensor1, tensor2, *, value=1):
    """torch's ``addcmul``: ``self + value * tensor1 * tensor2``."""
    return self + (tensor1 * tensor2 if value == 1 else value * tensor1 * tensor2)


def _addcdiv(self, tensor1, tensor2, *, value=1):
    """torch's ``addcdiv``: ``self + value * tensor1 / tensor2``."""
    return self + (tensor1 / tensor2 if value == 1 else value * tensor1 / tensor2)


def _rsqrt(self):
    """torch's ``rsqrt``: ``1 / sqrt(x)``."""
    return reciprocal(sqrt(self))


def _frac(self):
    """torch's ``frac``: ``x - trunc(x)``, the sign of ``x``; the gradient passes."""
    return self - trunc(self)


def _lerp(self, end, weight):
    """torch's ``lerp``: ``self + weight * (end - self)``."""
    return self + weight * (end - self)


def _logit(self, eps=None):
    """torch's ``logit``: ``log(x / (1 - x))``, ``x`` clamped to ``[eps, 1 - eps]`` when given."""
    x = self if self.dtype.kind in "fc" else self.astype(_data.DEFAULT_FLOAT)  # (1 - x of uint8 would wrap)
    x = x if eps is None else clip(x, eps, 1 - eps)
    return log(x / (1 - x))


def _xlogy(self, other):
    """torch's ``xlogy``: ``x * log(other)``, 0 where ``x`` is 0 (unless ``other`` is NaN)."""
    other = as_tensor(other)
    return where((self == 0) & ~isnan(other), 0, self * log(other))


def _cov(self, *, correction=1, fweights=None, aweights=None):
    """torch's ``cov``: the variables in the rows, ``correction=1`` (NumPy's ``cov(x, ddof=1)``), with
    frequency and observation weights as NumPy's ``cov``."""
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


def _adjoint(self):
    """torch's ``adjoint``: the last two dims swapped and conjugated."""
    return conj(swapaxes(matrices(self, "tensor.adjoint()"), -2, -1))


def _mH(self):
    return conj(swapaxes(matrices(self, "tensor.mH"), -2, -1))


def _H(self):
    if self.ndim not in (0, 2):
        raise RuntimeError(f"tensor.H is only supported on matrices (2-D tensors). Got {self.ndim}-D tensor.")
    return conj(swapaxes(self, 0, -1)) if self.ndim else self


def _itself(name):
    def method(self):
        return self
    method.__doc__ = f"torch's ``{name}``: the tensor itself (daskgrad keeps no lazy conjugate or negative bit)."
    return method


def _logdet(self):
    """torch's ``logdet``: ``log(det)``, NaN for a negative determinant, -inf for a zero one."""
    sign, logabsdet = slogdet(self)
    return where(sign < 0, np.nan, logabsdet)


def _pinverse(self, rcond=1e-15):
    """torch's ``pinverse``: the pseudo-inverse, singular values below ``rcond`` times the largest cut."""
    return pinv(self, rcond=rcond)


def _dist(self, other, p=2):
    """torch's ``dist``: the ``p``-norm of ``self - other``."""
    return vector_norm(self - other, p)


def _argwhere(self):
    """torch's ``argwhere``: the indices of the non-zero elements, one row each (an unknown count until
    computed); a 0-d tensor has rows of no index."""
    if self.ndim == 0:
        return getitem(argwhere(reshape(self, (1,))), (slice(None), slice(0, 0)))
    if not self.numel():  # (dask's argwhere of no elements fails)
        return zeros(0, self.ndim, dtype=np.int64, device=self.device)
    return argwhere(self)


def _nonzero(self, *, as_tuple=False):
    """torch's ``nonzero``: :func:`_argwhere`'s rows, or (``as_tuple``, NumPy's) one index tensor per dim
    (a 0-d tensor read as 1-d)."""
    if as_tuple:
        return tuple(nonzero(self if self.ndim else reshape(self, (1,))))
    return _argwhere(self)


def _sgn(self):
    """torch's ``sgn``: ``sign`` of a real tensor, ``z / |z|`` (0 at 0) of a complex one."""
    if self.dtype.kind != "c":
        return sign(self)
    r = abs(self)
    return where(r == 0, 0, self / where(r == 0, 1, r))


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
    "dsplit": _np_split(dsplit, "dsplit"), "repeat": _repeat, "where": _where,
    "mv": _mv, "bmm": _bmm, "addmm": _addmm, "addmv": _addmv, "addr": _addr, "baddbmm": _baddbmm,
    "addbmm": _addbmm, "addcmul": _addcmul, "addcdiv": _addcdiv, "ger": outer, "rsqrt": _rsqrt, "frac": _frac,
    "lerp": _lerp, "logit": _logit, "xlogy": _xlogy, "cov": _cov, "corrcoef": corrcoef, "msort": _msort,
    "adjoint": _adjoint, "resolve_conj": _itself("resolve_conj"), "resolve_neg": _itself("resolve_neg"),
    "conj_physical": conj,
    "matrix_power": matrix_power, "matrix_exp": matrix_exp, "det": det, "logdet": _logdet, "slogdet": slogdet,
    "inverse": inv, "pinverse": _pinverse, "dist": _dist,
    "nonzero": _nonzero, "argwhere": _argwhere, "sgn": _sgn,
}
# torch's methods that are an op as it is (torch's name -> the op's)
ALIASES = {"absolute": "abs", "negative": "neg", "multiply": "mul", "subtract": "sub", "divide": "truediv",
           "true_divide": "truediv", "greater": "gt", "greater_equal": "ge", "less": "lt", "less_equal": "le",
           "not_equal": "ne", "eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge", "diff": "diff",
           "fliplr": "fliplr", "flipud": "flipud", "float_power": "float_power", "nextafter": "nextafter",
           "isclose": "isclose", "tile": "tile", "swapdims": "swapaxes", "logical_not": "logical_not"}
for _name, _fn in METHODS.items():
    if _fn.__module__ == __name__:  # (helpers here are named as the method they are: help(t.std) shows std)
        _fn.__name__, _fn.__qualname__ = _name, f"Tensor.{_name}"
    setattr(Tensor, _name, _fn)
Tensor.mH = property(_mH, doc="torch's ``mH``: the last two dims swapped and conjugated.")
Tensor.H = property(_H, doc="torch's ``H``: a matrix transposed and conjugated.")
