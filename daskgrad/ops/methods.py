"""Tensor methods that speak torch where daskgrad's function of the same name speaks NumPy.

daskgrad's module-level functions are NumPy's (``dg.std(x)`` has ddof=0, ``dg.max(x, 0)`` gives the values,
``dg.sort(x)`` the sorted values, ``dg.median`` the mean of the two middle values); a Tensor's methods are
torch's (``x.std()`` has ``correction=1``, ``x.max(0)`` and ``x.sort()`` are the named tuple ``(values,
indices)``, ``x.median()`` is the lower middle value, ``x.sum(dim=())`` sums everything).  Where the two
agree the method is the op itself, installed by the op table (``@public("name")``); the methods below are
those that differ, or that NumPy has no function for, each a thin call of the ops.  They are installed on
:class:`~daskgrad.Tensor` from :data:`METHODS`, which the README's table lists.
"""
from __future__ import annotations

import numbers

import numpy as np

from .. import _data, return_types
from .._tensor import Tensor, _backend, _current_backend, full, ones, tensor, zeros
from ._util import as_tensor, norm_axes, norm_axis
from .composite import isnan, nanmean, nansum, ravel
from .elementwise import astype, clone, maximum, minimum, to_device, where, zeros_like
from .indexing import argsort, getitem
from .numpy_extra import take_along_axis, values_at
from .numpy_index import count_nonzero
from .reductions import _refuse_complex_extreme, amax, amin, argmax, argmin, max, mean, min, std, sum, var
from .shape import flip, reshape, squeeze, swapaxes


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
    return sum(self, _all_if_empty(_dim(dim, axis)), keepdim if keepdims is None else keepdims, dtype=dtype)


def _mean(self, dim=None, keepdim=False, *, dtype=None, axis=None, keepdims=None):
    x = self if dtype is None else astype(self, _data.np_dtype(dtype))
    return mean(x, _all_if_empty(_dim(dim, axis)), keepdim if keepdims is None else keepdims)


def _nansum(self, dim=None, keepdim=False, *, dtype=None, axis=None, keepdims=None):
    x = self if dtype is None else astype(self, _data.np_dtype(dtype))
    return nansum(x, _all_if_empty(_dim(dim, axis)), keepdim if keepdims is None else keepdims)


def _nanmean(self, dim=None, keepdim=False, *, dtype=None, axis=None, keepdims=None):
    x = self if dtype is None else astype(self, _data.np_dtype(dtype))
    return nanmean(x, _all_if_empty(_dim(dim, axis)), keepdim if keepdims is None else keepdims)


def _amax(self, dim=None, keepdim=False, *, axis=None, keepdims=None):
    return amax(self, _all_if_empty(_dim(dim, axis)), keepdim if keepdims is None else keepdims)


def _amin(self, dim=None, keepdim=False, *, axis=None, keepdims=None):
    return amin(self, _all_if_empty(_dim(dim, axis)), keepdim if keepdims is None else keepdims)


def _count_nonzero(self, dim=None, *, axis=None):
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


def _median(name, ignore_nan, result):
    def method(self, dim=None, keepdim=False, *, axis=None, keepdims=None):
        dim, keepdim = _dim(dim, axis), keepdim if keepdims is None else keepdims
        x = as_tensor(self)
        if dim is None:  # the value only
            if not x.numel():
                return full((), np.nan, dtype=x.dtype, device=x.device)
            return _median_at(ravel(x), 0, False, ignore_nan, result, f"{name.capitalize()}Backward0").values
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
    """torch's ``narrow``: ``length`` entries from ``start`` along ``dim``."""
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
    return getitem(self, (slice(None),) * dim + (slice(start, start + length),))


def _select(self, dim, index):
    """torch's ``select``: the slice at ``index`` along ``dim`` (``daskgrad.select`` is NumPy's choice
    by conditions)."""
    if self.ndim == 0:
        raise IndexError("select() cannot be applied to a 0-dim tensor.")
    dim = norm_axis(dim, self.ndim)
    n, index = self.shape[dim], int(index)
    if not -n <= index < n:
        raise IndexError(f"select(): index {index} out of range for tensor of size {list(self.shape)} at "
                         f"dimension {dim}")
    return getitem(self, (slice(None),) * dim + (index,))


def _t(self):
    """torch's ``t``: a matrix transposed; a 0-d or 1-d tensor as it is."""
    if self.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {self.ndim}D")
    return swapaxes(self, 0, -1)


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
}
for _name, _fn in METHODS.items():
    setattr(Tensor, _name, _fn)
