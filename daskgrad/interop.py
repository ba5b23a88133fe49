"""NumPy's dispatch protocols on Tensor: ``np.exp(t)``, ``np.sum(t, axis=0)``, ``ndarray + t``.

NEP 13 (``__array_ufunc__``) and NEP 18 (``__array_function__``) hand a NumPy call that involves a
Tensor to the daskgrad op of the same name in the op table (``daskgrad.ops.__all__``), looked up at
call time, so an op added to the table is reachable from NumPy with no change here.  The result is
a lazy Tensor that records the op, as if the op had been called.  A NumPy function that has no op
raises a TypeError naming it: never an object array, and never a silent compute (``np.asarray(t)``
and ``t.numpy()`` compute, when asked).  NumPy's own arguments that an op does not take (``out=``,
``where=``) raise the same way.

``numpy.linalg`` functions run :mod:`daskgrad.linalg`'s op of the same name where its answer is
NumPy's (``np.linalg.solve(A, b)``, ``inv``, ``det``, ``slogdet``, ``cholesky``, ``eigh`` ...); those
whose NumPy answer differs (``eig``'s real dtype for real eigenvalues, ``lstsq``'s residuals of a
rank-deficient matrix) raise, naming daskgrad's (torch's) function.

Dask's own functions (``dask.array.sum(t)``, ``da.concatenate([t, t])``) have no dispatch protocol: each
converts its arguments with ``da.asarray``, which calls ``to_dask_array()``, and builds a plain dask
array from there, so no Tensor can come back.  A tensor that requires grad therefore refuses that
conversion inside a dask function, with a TypeError naming the function and daskgrad's op of that
name (``daskgrad.sum(t)``, ``t.sum()``, ``np.sum(t)``), rather than lose its gradient; ``da.asarray(t)``
called by itself is the explicit ``to_dask()``.  (Dask's ufuncs, ``da.exp(t)``, call NumPy's, so they
run the ops.)

xarray asks whether an array is a dask collection to pick, for some operations (``rolling``,
``interp``, ``apply_ufunc``), dask.array's functions over NumPy's.  A Tensor (``to_xarray()`` wraps
those that require grad, and what xarray computes from them) answers xarray's two questions as the
eager NEP 18 array it is to xarray (no dask graph, no chunks), so xarray runs NumPy's functions, which
run the ops, and the result stays differentiable; dask itself (``dask.compute(t)``, ``persist``) and
everything else still see the dask collection.

Installed on Tensor here, as :mod:`daskgrad.runtime` installs ``compute``: the tensor sits on a
floor below the ops.
"""
from __future__ import annotations

import dis
import inspect
import numbers
import sys

import dask.array as da
import numpy as np

from . import _data, ops
from ._modes import is_grad_enabled
from ._tensor import Tensor
from .ops._util import OPS
from .ops.inplace import write_out

# NumPy's name -> the op's, where they differ; any other name is looked up as it is
_ALIASES = {"multiply": "mul", "divide": "truediv", "true_divide": "truediv", "power": "pow",
            "negative": "neg", "absolute": "abs", "less": "lt", "less_equal": "le", "greater": "gt",
            "greater_equal": "ge", "equal": "eq", "not_equal": "ne", "copy": "clone"}
# where NumPy functions mean what the ops of that name do
_MODULES = {"numpy", "numpy.linalg", "numpy.lib.stride_tricks"}
# a ufunc argument left at NumPy's default asks nothing of the op
_UFUNC_DEFAULTS = {"out": None, "where": True, "casting": "same_kind", "order": "K", "dtype": None, "subok": True,
                   "signature": None}


def _shape_only(name):
    """NumPy functions that read only what a Tensor knows without computing."""
    def size(a, axis=None):
        return a.numel() if axis is None else a.shape[axis]

    def result_type(*arrays_and_dtypes):  # (of tensors and numbers: the dtype their ops give, torch's)
        if all(isinstance(x, (Tensor, int, float, complex)) for x in arrays_and_dtypes):
            return _data.result_type(*arrays_and_dtypes)
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


# A NumPy scalar's operator with a Tensor on its right (``np.float64(2) - t``, ``np.int32(1) < t``) calls the ufunc
# (NumPy's scalar defers only to an ``__array_ufunc__`` of None); torch's Tensor has none and a higher
# ``__array_priority__``, so NumPy defers and Python calls the Tensor's reflected operator: torch's rules (a
# NumPy bool read as a float, bool subtraction and complex comparisons refused ...), not NumPy's.  The ufunc ->
# the Tensor's method that Python would have called.
_REFLECTED = {"add": "__radd__", "subtract": "__rsub__", "multiply": "__rmul__", "divide": "__rtruediv__",
              "true_divide": "__rtruediv__", "floor_divide": "__rfloordiv__", "remainder": "__rmod__",
              "power": "__rpow__", "matmul": "__rmatmul__", "bitwise_and": "__rand__", "bitwise_or": "__ror__",
              "bitwise_xor": "__rxor__", "left_shift": "__rlshift__", "right_shift": "__rrshift__",
              "divmod": "__rdivmod__", "less": "__gt__", "less_equal": "__ge__", "greater": "__lt__",
              "greater_equal": "__le__", "equal": "__eq__", "not_equal": "__ne__"}
# the bytecodes of Python's binary operators and comparisons (3.11+: BINARY_OP; 3.10: BINARY_ADD, INPLACE_ADD ...)
_OPERATOR_CODES = frozenset(code for name, code in dis.opmap.items()
                            if name == "COMPARE_OP" or name.startswith(("BINARY_", "INPLACE_"))
                            and name not in ("BINARY_SUBSCR", "BINARY_SLICE"))


def _called_by_an_operator(depth):
    """Whether the Python frame ``depth`` levels up is running an operator (``s - t``), not a call
    (``np.subtract(s, t)``, which keeps NumPy's rules)."""
    try:
        frame = sys._getframe(depth + 1)
        return frame.f_code.co_code[frame.f_lasti] in _OPERATOR_CODES
    except (ValueError, IndexError, AttributeError):  # (no such frame, or an interpreter without them)
        return False


def _array_ufunc(self, ufunc, method, *inputs, **kwargs):
    if not all(_known(x) for x in inputs + tuple(kwargs.get("out") or ())):
        return NotImplemented  # another operand type may know this call (NEP 13)
    if (method == "__call__" and not kwargs and len(inputs) == 2 and isinstance(inputs[0], np.generic)
            and inputs[1] is self and ufunc.__name__ in _REFLECTED and _called_by_an_operator(1)):
        return getattr(self, _REFLECTED[ufunc.__name__])(inputs[0])
    what = f"numpy.{ufunc.__name__}"
    if method != "__call__":
        raise _missing(f"{what}.{method}", f"{ufunc.__name__}.{method}")
    asked = {k: v for k, v in kwargs.items() if not _default(k, v)}
    out = asked.pop("out", None)
    if out is not None and not all(isinstance(o, Tensor) for o in out):
        raise TypeError(f"{what}(..., out=...) cannot write a daskgrad Tensor's lazy result into an array: "
                        "assign the result instead, or give Tensors as out")
    name = _ALIASES.get(ufunc.__name__, ufunc.__name__)
    if name not in OPS:
        raise _missing(what, name)
    if asked:
        raise TypeError(f"{what}: daskgrad.{name} takes no {', '.join(sorted(asked))} argument")
    result = OPS[name][0](*map(_operand, inputs))
    return result if out is None else write_out(ufunc.__name__, out if len(out) > 1 else out[0], result, inputs)


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
    if module == "numpy.linalg" and func.__name__ in _LINALG:
        return _LINALG[func.__name__](*args, **kwargs)
    name = _ALIASES.get(func.__name__, func.__name__)
    if name not in OPS:
        raise _missing(what, name)
    op = OPS[name][0]
    sig = inspect.signature(op)
    takes_any = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
    out = kwargs.pop("out", None) if "out" not in sig.parameters else None
    # NumPy's own options left at None (out=None) ask nothing
    kwargs = {k: v for k, v in kwargs.items() if takes_any or k in sig.parameters or v is not None}
    try:
        sig.bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"{what}: daskgrad.{name}{sig} does not take these arguments ({e})") from None
    result = op(*args, **kwargs)
    return result if out is None else write_out(func.__name__, out, result, (*args, *kwargs.values()))


# ------------------------------------------------------------------ numpy.linalg
def _refused(name, why):
    def refuse(*args, **kwargs):
        raise TypeError(f"numpy.linalg.{name} on a daskgrad Tensor: {why}; call daskgrad.linalg.{name} "
                        "(torch's), or NumPy's on computed values")
    return refuse


def _np_solve(a, b):
    """NumPy 2's ``solve``: ``b`` is a vector only when 1-D, else a stack of matrices (torch reads a
    ``b`` of one dimension less than ``a`` as a batch of vectors: that case is refused, not guessed)."""
    b_ndim = getattr(b, "ndim", np.ndim(b))
    if b_ndim != 1 and b_ndim != getattr(a, "ndim", np.ndim(a)):
        raise TypeError("numpy.linalg.solve on a daskgrad Tensor: b must be 1-d or have a's number of dimensions "
                        "(NumPy 2 and torch read the other shapes differently); call daskgrad.linalg.solve")
    return ops.linalg.solve(a, b)


def _np_svd(a, full_matrices=True, compute_uv=True, hermitian=False):
    return ops.linalg.svd(a, full_matrices=full_matrices) if compute_uv else ops.linalg.svdvals(a)


_LINALG = {  # numpy.linalg's name -> the op answering as NumPy does
    **{name: getattr(ops.linalg, name) for name in (
        "cholesky", "cond", "det", "eigh", "eigvalsh", "inv", "matmul", "matrix_norm", "matrix_power", "matrix_rank",
        "norm", "pinv", "qr", "slogdet", "svdvals", "tensorinv", "vector_norm")},
    "solve": _np_solve, "svd": _np_svd,
    "tensorsolve": lambda a, b, axes=None: ops.linalg.tensorsolve(a, b, axes),
    "diagonal": lambda x, offset=0: ops.products.diagonal(x, offset, -2, -1),  # NumPy's: the last two axes
    "trace": lambda x, offset=0: ops.products.trace(x, offset, -2, -1),
    "multi_dot": lambda arrays, out=None: ops.products.multi_dot(arrays) if out is None else _refused(
        "multi_dot", "out= cannot write a lazy result into an array")(),
    "cross": ops.products.cross, "vecdot": ops.products.vecdot, "outer": ops.products.outer,
    "tensordot": ops.products.tensordot,
    "eig": _refused("eig", "NumPy's dtype depends on the values (real when every eigenvalue is real)"),
    "eigvals": _refused("eigvals", "NumPy's dtype depends on the values (real when every eigenvalue is real)"),
    "lstsq": _refused("lstsq", "NumPy's residuals and rcond differ from torch's for rank-deficient matrices"),
}


# ------------------------------------------------------------------- dask.array
def _dask_entry(frame):
    """The dask function user code called (``sum`` of ``dask.array.sum``): the outermost of the dask
    frames from ``frame`` up."""
    entry = None
    while frame is not None and frame.f_globals.get("__name__", "").startswith("dask."):
        entry, frame = frame, frame.f_back
    return entry


def _refuse_in_dask(entry):
    name = entry.f_code.co_name
    hint = (f"daskgrad.{name}(t) (or NumPy's, which runs it)" if name in OPS else
            f"daskgrad has no op named {name!r}: write it with daskgrad's ops or daskgrad.map_blocks, or call "
            f"dask.array.{name}(t.detach().to_dask()) for values without a gradient")
    return TypeError(f"dask.array.{name}() of a Tensor that requires grad would return a dask array without its "
                     f"gradient: call {hint}")


def _to_dask_array(self):
    """``da.asarray(t)`` is ``t.to_dask()``; inside another dask function (``da.sum(t)``), a tensor that
    requires grad refuses: dask would return a plain array without its gradient."""
    if self._requires_grad and is_grad_enabled():
        entry = _dask_entry(sys._getframe(1))
        if entry is not None and entry.f_code.co_name not in ("asarray", "asanyarray"):
            raise _refuse_in_dask(entry)
    return self.array


# ------------------------------------------------------------------------ xarray
_XARRAY_CHECKS = ("is_duck_dask_array", "is_chunked_array")


def _xarray_asks(depth):
    """Whether xarray's duck-array checks (``is_duck_dask_array``, ``is_chunked_array``) are asking, within
    ``depth`` frames above the caller."""
    frame = sys._getframe(2)
    for _ in range(depth):
        if frame is None:
            return False
        if frame.f_code.co_name in _XARRAY_CHECKS and frame.f_globals.get("__name__", "").startswith("xarray."):
            return True
        frame = frame.f_back
    return False


_dask_graph, _chunks = Tensor.__dask_graph__, Tensor.chunks


def _graph_unless_xarray_asks(self):
    """The dask graph, as to dask itself; none to xarray's checks (see the module's docstring); and to
    dask.array's functions that take a collection as an array-like constant (``da.dot(t, t)`` through
    ``from_array``, ``da.around`` through ``map_blocks``), for a tensor that requires grad, a TypeError
    naming the function, as :func:`_to_dask_array` gives."""
    # (xarray -> its is_dask_collection -> dask's is_dask_collection -> here: within 3 frames)
    if _xarray_asks(3):
        return None
    if self._requires_grad and is_grad_enabled():
        asker = sys._getframe(1)  # dask's is_dask_collection, and who asked it
        if asker.f_code.co_name == "is_dask_collection" and asker.f_back is not None \
                and asker.f_back.f_globals.get("__name__", "").startswith("dask.array"):
            raise _refuse_in_dask(_dask_entry(asker))
    return _dask_graph(self)


def _chunks_unless_xarray_asks(self):
    if _xarray_asks(1):  # (hasattr(x, "chunks") in is_chunked_array)
        raise AttributeError("a Tensor is no chunked array to xarray: xarray runs NumPy's functions on it")
    return _chunks.fget(self)


Tensor.__array_ufunc__, Tensor.__array_function__ = _array_ufunc, _array_function
_to_dask_array.__name__, _to_dask_array.__qualname__ = "to_dask_array", "Tensor.to_dask_array"
Tensor.to_dask_array = _to_dask_array
Tensor.__dask_graph__ = _graph_unless_xarray_asks
Tensor.chunks = property(_chunks_unless_xarray_asks, doc=_chunks.__doc__)
