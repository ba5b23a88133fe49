"""Step 3 of the data flow: the ops, each a table entry (primitive) with its VJP rule beside it.

``elementwise`` (the rule contract is at its top), ``reductions``, ``shape``,
``indexing``, ``products``, ``linalg``, ``nn``.  Each public op is marked :func:`~._util.public` where it is
defined, with the :class:`~daskgrad.Tensor` methods that call it: ``__all__`` and the methods
come from those marks, so a method is easy to trace to its op.
"""
from __future__ import annotations

import builtins
import functools
import inspect

import numpy as np

from .. import _data, _modes
from ..graph import mark as _mark, relabel as _relabel  # (private: not ops' own names)
from .._tensor import Tensor, recorded
from . import _util
from ._util import OPS
from . import (conv, elementwise, indexing, layers, linalg, nn, products, reductions,  # noqa: F401  (each marks its ops)
               shape, stencil)
from . import spectral, triangular  # noqa: F401  (daskgrad.linalg's eig, matrix_exp, triangular factors and solves)
from . import composite, numpy_extra, numpy_index, numpy_shape  # noqa: F401,E402  (NumPy functions built from the ops above)
from .layers import dropout_mask, embedding_backward  # noqa: F401  (for nn and functional; not public)
from .reductions import sum_to  # noqa: F401  (for the engine; not public)
from .shape import swapaxes, transpose
from .inplace import write_out



def _torch_keywords(fn):
    """``fn`` also taking torch's spellings ``dim=``/``keepdim=`` where it takes NumPy's ``axis=``/``keepdims=``,
    and ``out=`` (the result written into a given tensor, as torch's and NumPy's ``out=``: see
    :func:`~.inplace.write_out`)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return fn
    renames = {t: n for t, n in (("dim", "axis"), ("keepdim", "keepdims")) if n in params and t not in params}
    if "out" in params:
        return fn

    @functools.wraps(fn)
    def op(*args, **kwargs):
        if not kwargs:  # (the common case: an operator, a method called with its operands alone)
            return fn(*args)
        for torch_name, numpy_name in renames.items():
            if torch_name in kwargs:
                if numpy_name in kwargs:
                    raise TypeError(f"{fn.__name__}() got both {numpy_name!r} and {torch_name!r} (the same argument)")
                kwargs[numpy_name] = kwargs.pop(torch_name)
        out = kwargs.pop("out", None)
        result = fn(*args, **kwargs)
        return result if out is None else write_out(fn.__name__, out, result, (*args, *kwargs.values()))
    return op


_wrapped = {}
_PUBLIC = {name: _wrapped.setdefault(id(fn), _torch_keywords(fn)) for name, (fn, _) in OPS.items()}
globals().update(_PUBLIC)  # an op added by one table line needs no import here
__all__ = list(OPS)


_BINARY = {"add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or", "xor", "lshift",
           "rshift", "divmod"}  # the X of Python's __rX__ and __iX__ operator methods


def _method(fn, name):
    """``(name, method)``: ``__rX__`` swaps the operands, ``__iX__`` and ``X_`` write in place."""
    if not isinstance(name, str):
        name, wrap = name
        return name, _named(wrap(fn), name, f"``Tensor.{name}``, torch's method: :func:`daskgrad.{fn.__name__}`"
                                           f" with torch's arguments ({(wrap.__doc__ or '').strip()})\n\n"
                                           f"{_doc_of(fn)}")
    if name.startswith("__r") and name[3:-2] in _BINARY:  # (not __round__, __rshift__ ...)
        return name, _named(lambda self, other: fn(other, self), name,
                            f"``other {name[3:-2]} self``: :func:`daskgrad.{fn.__name__}` with the operands swapped.")
    if (name.startswith("__i") and name[3:-2] in _BINARY) or (name.endswith("_") and not name.endswith("__")):
        plain = name[3:-2] if name.startswith("__i") else name[:-1]
        return name, _named(lambda self, *args, **kwargs: self._inplace(fn, *args, **kwargs), name,
                            f"In-place version of :meth:`Tensor.{plain}` (:func:`daskgrad.{fn.__name__}`): the "
                            f"result is written into this tensor, which is returned; as torch's, a leaf that "
                            f"requires grad refuses it outside ``no_grad`` and the version counter goes up.")
    return name, fn


def _doc_of(fn):
    return inspect.cleandoc(fn.__doc__ or "")


def _named(method, name, doc):
    """``method`` named as the Tensor method it is (``help(t.add_)`` shows ``add_``), with ``doc``."""
    if isinstance(method, property):
        return property(method.fget, method.fset, method.fdel, method.__doc__ or doc)
    method.__name__, method.__qualname__, method.__doc__ = name, f"Tensor.{name}", doc
    return method


_METHODS = dict(_method(_PUBLIC[name], m) for name, (_, methods) in OPS.items() for m in methods)
for _name, _fn in _METHODS.items():
    setattr(Tensor, _name, _fn)
Tensor.T = property(lambda self: transpose(self), doc="The tensor with its axes reversed (torch's ``Tensor.T``; "
                                                          "for a matrix, its transpose).")
Tensor.mT = property(lambda self: self if self.ndim == 0 else swapaxes(methods.matrices(self, "tensor.mT"), -1, -2),
                     doc="The tensor with its last two axes swapped: a batch of matrices transposed (torch's "
                         "``Tensor.mT``; a 0-d tensor is itself, as torch's).")

from . import inplace  # noqa: E402,F401  (installs Tensor.__setitem__, fill_, copy_; write_out)
from . import methods  # noqa: E402  (installs the methods that speak torch where the ops speak NumPy)
from . import index_writes  # noqa: E402,F401  (and torch's writes at indices: scatter, index_add ...)
for _name, _op in methods.ALIASES.items():  # and torch's methods that are an op as it is
    setattr(Tensor, _name, _PUBLIC[_op])
for _name, _check in methods.CHECKED.items():  # (torch's checks first: a 0-d diff, a 1-d rot90 ...)
    setattr(Tensor, _name, methods._checked(getattr(Tensor, _name), _check))
from . import views  # noqa: E402,F401  (installs the writes through views, contiguous, unbind, chunk, split)
from . import methods_legacy  # noqa: E402  (torch's older and rarer methods: type, new, qr, svd, lu, apply_ ...)
methods_legacy.install()

# torch's in-place forms of methods that are here out of place: ``x.lt_(y)``, ``x.clip_(0, 1)``, and Python's
# ``x **= 2``, ``x %= 3``, ``m &= k``, which without ``__ipow__`` ... rebind ``x`` to a new tensor, silently
# writing nothing (a view's base kept its values).  Each writes the method's result as every ``X_`` does.
INPLACE_FORMS = {"__ipow__": "pow", "__imod__": "remainder", "__iand__": "bitwise_and", "__ior__": "bitwise_or",
                 "__ixor__": "bitwise_xor", **{f"{n}_": n for n in (
                     "remainder", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "lt", "le", "gt", "ge",
                     "eq", "ne", "less", "less_equal", "greater", "greater_equal", "not_equal", "logical_and",
                     "logical_or", "logical_xor", "logical_not", "fmod", "hypot", "atan2", "arctan2",
                     "true_divide", "multiply", "subtract", "divide", "ldexp", "nextafter", "igamma", "gcd",
                     "lcm", "i0", "sinc", "nan_to_num", "clip", "square", "sgn", "fix", "deg2rad", "rad2deg",
                     "negative", "absolute", "arccos", "arcsin", "arctan", "acos", "asin", "atan", "cosh", "sinh",
                     "tan", "exp2", "expm1", "log10", "log1p", "log2", "reciprocal", "rsqrt", "sign", "ceil", "floor",
                     "trunc", "frac", "round", "erf", "float_power")}}
# (not here: torch's arccosh_/arcsinh_/arctanh_ have no derivative, and copysign_/xlogy_/logit_ read the input
# they overwrite in their gradient, which daskgrad's rules saved: each would differ from torch)


_COMPARISONS = {"lt", "le", "gt", "ge", "eq", "ne", "less", "less_equal", "greater", "greater_equal", "not_equal"}


# torch's node of an in-place comparison: ``x.lt_(0.5)`` records ``LtBackward0``, ``x.lt_(y)`` ``LtBackward1``
_COMPARISON_NODES = {"lt": "Lt", "less": "Lt", "le": "Le", "less_equal": "Le", "gt": "Gt", "greater": "Gt",
                     "ge": "Ge", "greater_equal": "Ge", "eq": "Eq", "ne": "Ne", "not_equal": "Ne"}


def _zero_gradient(compare, plain):
    """A comparison written into a tensor that requires grad: torch records a node whose gradient is zero
    (``LtBackward0``); here ``sign``'s, whose rule gives zeros (no node, the old history would carry on),
    named as torch's (``Backward1`` where the other operand is a tensor)."""
    def op(self, *args, **kwargs):
        out = compare(self, *args, **kwargs)
        if not (self.requires_grad and _modes.is_grad_enabled()):
            return out
        since = _mark()
        out = elementwise.sign.primitive.record(recorded(out.to(self.dtype)), self)
        other = args[0] if args else kwargs.get("other")
        return _relabel(out, f"{_COMPARISON_NODES[plain]}Backward{int(isinstance(other, Tensor))}", since)
    return op


_BITWISE = {"bitwise_and", "bitwise_or", "bitwise_xor"}


def _inplace_form(name, plain):
    def method(self, *args, **kwargs):
        op = getattr(Tensor, plain)
        other = getattr(args[0], "shape", None) if args else None
        if other is not None and builtins.all(n == n for n in (*other, *self.shape)):  # (all: here the op's)
            try:
                wide = np.broadcast_shapes(self.shape, other)
            except ValueError:
                wide = None  # (the op raises torch's error for shapes that do not broadcast)
            if wide is not None and tuple(wide) != tuple(self.shape):  # (before the dtype: torch's order)
                raise RuntimeError(f"output with shape {list(self.shape)} doesn't match the broadcast shape "
                                   f"{list(wide)}")
        if plain in _BITWISE and args:  # (torch's order: the cast before the kernel's dtype)
            dtype = _data.result_type(self, _util.tensor_or_scalar(args[0]))
            if not _data.can_cast(dtype, self.dtype):
                raise RuntimeError(f"result type {_data.TORCH_TYPE_NAMES.get(dtype.name, dtype.name)} can't be cast "
                                   f"to the desired output type {_data.TORCH_TYPE_NAMES.get(self.dtype.name)}")
        with methods.named_errors(plain, name):
            return self._inplace(_zero_gradient(op, plain) if plain in _COMPARISONS else op, *args, **kwargs)
    return _named(method, name, f"In-place version of :meth:`Tensor.{plain}`: the result is written into this "
                                f"tensor, which is returned (torch's ``{name}``).")


for _name, _plain in INPLACE_FORMS.items():
    if _name not in vars(Tensor) and hasattr(Tensor, _plain):
        setattr(Tensor, _name, _inplace_form(_name, _plain))
from . import refusals  # noqa: E402  (torch's errors for operands its methods refuse: complex ones, numbers)
refusals.install()
# the methods taking a torch ``Scalar`` whose op reads a NumPy scalar as NumPy does (a NumPy bool as a bool)
for _name in ("clamp", "clamp_", "clip", "clip_", "clamp_min", "clamp_min_", "clamp_max", "clamp_max_", "where",
              "add", "add_", "sub", "sub_", "subtract", "subtract_", "addcmul", "addcmul_", "addcdiv", "addcdiv_",
              "masked_fill", "masked_fill_", "lerp", "lerp_", "__iadd__", "__isub__"):
    if _name in vars(Tensor):
        setattr(Tensor, _name, _util.torch_scalars(vars(Tensor)[_name]))
from . import keywords  # noqa: E402  (last: torch's keyword names over the methods above, x.add(other=y))
keywords.install()
from . import arguments  # noqa: E402  (after it: torch's TypeErrors for arguments a method does not take)
arguments.install()
