"""NumPy's dispatch protocols on Tensor: ``np.exp(t)``, ``np.sum(t, axis=0)``, ``ndarray + t``.

NEP 13 (``__array_ufunc__``) and NEP 18 (``__array_function__``) hand a NumPy call that involves a
Tensor to the daskgrad op of the same name in the op table (``daskgrad.ops.__all__``), looked up at
call time, so an op added to the table is reachable from NumPy with no change here.  The result is
a lazy Tensor that records the op, as if the op had been called.  A NumPy function that has no op
raises a TypeError naming it: never an object array, and never a silent compute (``np.asarray(t)``
and ``t.numpy()`` compute, when asked).  NumPy's own arguments that an op does not take (``out=``,
``where=``) raise the same way.

Installed on Tensor here, as :mod:`daskgrad.runtime` installs ``compute``: the tensor sits on a
floor below the ops.
"""
from __future__ import annotations

import inspect
import numbers

import dask.array as da
import numpy as np

from ._tensor import Tensor
from .ops._util import OPS

# NumPy's name -> the op's, where they differ; any other name is looked up as it is
_ALIASES = {"subtract": "sub", "multiply": "mul", "divide": "truediv", "true_divide": "truediv", "power": "pow",
            "negative": "neg", "absolute": "abs", "less": "lt", "less_equal": "le", "greater": "gt",
            "greater_equal": "ge", "equal": "eq", "not_equal": "ne", "copy": "clone"}
_MODULES = {"numpy", "numpy.linalg"}  # where NumPy functions mean what the ops of that name do
# a ufunc argument left at NumPy's default asks nothing of the op
_UFUNC_DEFAULTS = {"out": None, "where": True, "casting": "same_kind", "order": "K", "dtype": None, "subok": True,
                   "signature": None}


def _shape_only(name):
    """NumPy functions that read only what a Tensor knows without computing."""
    def size(a, axis=None):
        return a.numel() if axis is None else a.shape[axis]

    def result_type(*arrays_and_dtypes):
        return np.result_type(*[x.dtype if isinstance(x, Tensor) else x for x in arrays_and_dtypes])

    return {"shape": lambda a: a.shape, "ndim": lambda a: a.ndim, "size": size, "result_type": result_type,
            "iscomplexobj": lambda x: x.dtype.kind == "c", "isrealobj": lambda x: x.dtype.kind != "c"}.get(name)


def _default(key, value):
    if key == "out" and isinstance(value, tuple):
        return all(v is None for v in value)
    default = _UFUNC_DEFAULTS.get(key, inspect.Parameter.empty)
    return value is default or (isinstance(value, (str, bool)) and value == default)


def _missing(what, name):
    return TypeError(f"daskgrad has no op for {what}: NumPy calls on a Tensor run daskgrad's differentiable ops "
                     f"(daskgrad.ops.__all__) and none is named {name!r}.  Compute the values explicitly first, "
                     f"e.g. {what}(t.detach().numpy()), or write it with daskgrad ops or daskgrad.map_blocks")


def _known(x):
    return (isinstance(x, (Tensor, np.ndarray, np.generic, numbers.Number, da.Array, list, tuple))
            or type(x).__module__.startswith("cupy"))


def _array_ufunc(self, ufunc, method, *inputs, **kwargs):
    if not all(_known(x) for x in inputs + tuple(kwargs.get("out") or ())):
        return NotImplemented  # another operand type may know this call (NEP 13)
    what = f"numpy.{ufunc.__name__}"
    if method != "__call__":
        raise _missing(f"{what}.{method}", f"{ufunc.__name__}.{method}")
    asked = {k: v for k, v in kwargs.items() if not _default(k, v)}
    if "out" in asked:
        raise TypeError(f"{what}(..., out=...) cannot write a daskgrad Tensor's lazy result into an array: "
                        "assign the result instead (a Tensor is written only by its in-place methods, add_ ...)")
    name = _ALIASES.get(ufunc.__name__, ufunc.__name__)
    if name not in OPS:
        raise _missing(what, name)
    if asked:
        raise TypeError(f"{what}: daskgrad.{name} takes no {', '.join(sorted(asked))} argument")
    return OPS[name][0](*map(_operand, inputs))


def _operand(x):
    """A list operand as NumPy takes it: host numbers become an array, tensors are stacked (lazily,
    never computed on the client as ``np.asarray`` of tensors would)."""
    if not isinstance(x, (list, tuple)):
        return x
    return OPS["stack"][0](list(x)) if any(isinstance(v, Tensor) for v in x) else np.asarray(x)


def _array_function(self, func, types, args, kwargs):
    if not all(issubclass(t, (Tensor, np.ndarray, da.Array)) or t.__module__.startswith("cupy") for t in types):
        return NotImplemented  # (NEP 18)
    module = func.__module__ or ""
    what = f"{module}.{func.__name__}"
    if module not in _MODULES:
        raise _missing(what, func.__name__)
    shape_only = _shape_only(func.__name__) if module == "numpy" else None
    if shape_only is not None:
        return shape_only(*args, **kwargs)
    name = _ALIASES.get(func.__name__, func.__name__)
    if name not in OPS:
        raise _missing(what, name)
    op = OPS[name][0]
    sig = inspect.signature(op)
    takes_any = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
    # NumPy's own options left at None (out=None) ask nothing
    kwargs = {k: v for k, v in kwargs.items() if takes_any or k in sig.parameters or v is not None}
    try:
        sig.bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"{what}: daskgrad.{name}{sig} does not take these arguments ({e})") from None
    return op(*args, **kwargs)


Tensor.__array_ufunc__, Tensor.__array_function__ = _array_ufunc, _array_function
