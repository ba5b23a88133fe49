"""torch's refusals of operands by its Tensor methods, where the op daskgrad shares with the module-level function
(NumPy's) would compute; each method here raises torch's error, type and words, before anything is recorded.

``REFUSED``: complex operands (NumPy orders complex numbers, rounds and clamps their parts ...; ``{}`` in the
words is the complex dtype's torch name).  ``TENSOR_ONLY``: a number where torch's method takes only a tensor
(``t.maximum(2)``, ``t.logical_and(1)``: torch's ``TypeError``; arrays pass, as everywhere here).  The
module-level functions keep NumPy's answers."""
from __future__ import annotations

import functools
import inspect
import numbers

import numpy as np

from .. import _data
from .._tensor import Tensor
from ._util import norm_axis

# (generated from torch 2.13; tests/test_refusals.py checks every entry against torch)
REFUSED = {}
for _names, _error, _words in [  # complex operands
        ('clamp clamp_ clamp_max clamp_max_ clamp_min clamp_min_ clip clip_ relu relu_', NotImplementedError,
         'clamp is not supported for complex types'),
        ('sign sign_', NotImplementedError,
         'Unlike NumPy, torch.sign is not intended to support complex numbers. Please use torch.sgn instead.'),
        ('argsort msort sort', RuntimeError, ' Sort does not support complex dtypes on CPU'),
        ('topk', RuntimeError, ' topk does not support complex dtypes on CPU'),
        ('softmax', NotImplementedError, '"softmax_lastdim_kernel_impl" not implemented for \'{}\''),
        ('log_softmax', NotImplementedError, '"log_softmax_lastdim_kernel_impl" not implemented for \'{}\''),
        ('nansum', RuntimeError, 'nansum on CPU does not support complex inputs'),
        ('erf', NotImplementedError, '"erf_vml_cpu" not implemented for \'{}\''),
        ('logit', NotImplementedError, '"logit_cpu" not implemented for \'{}\''),
        ('deg2rad deg2rad_', RuntimeError, 'deg2rad is not supported for complex tensors.'),
        ('rad2deg rad2deg_', RuntimeError, 'rad2deg is not supported for complex tensors.'),
        ('abs_ absolute_', RuntimeError, 'In-place abs is not supported for complex tensors.'),
        ('floor', NotImplementedError, 'floor is not supported for complex inputs'),
        ('ceil', NotImplementedError, 'ceil is not supported for complex inputs'),
        ('fix fix_ trunc', NotImplementedError, 'trunc is not supported for complex inputs'),
        ('frac', NotImplementedError, '"frac_cpu" not implemented for \'{}\''),
        ('round', NotImplementedError, '"round_vml_cpu" not implemented for \'{}\''),
        ('signbit', NotImplementedError, 'signbit is not implemented for complex tensors.'),
        ('isposinf', RuntimeError, 'isposinf does not support complex inputs.'),
        ('isneginf', RuntimeError, 'isneginf does not support complex inputs.'),
        ('argmax', RuntimeError, 'argmax(): does not support complex input'),
        ('argmin', RuntimeError, 'argmin(): does not support complex input'),
        ('median nanmedian', NotImplementedError, '"median_cpu" not implemented for \'{}\''),
        ('kthvalue', NotImplementedError, '"kthvalue_cpu" not implemented for \'{}\''),
        ('nanquantile quantile', RuntimeError, 'quantile() input tensor must be either float or double dtype'),
        ('aminmax histc', NotImplementedError, '"aminmax_cpu" not implemented for \'{}\''),
        ('i0 i0_', NotImplementedError, '"i0_vml_cpu" not implemented for \'{}\''),
        ('__floordiv__ __ifloordiv__ floor_divide floor_divide_', NotImplementedError,
         '"div_floor_cpu" not implemented for \'{}\''),
        ('__ge__ ge ge_ greater_equal', NotImplementedError, '"ge_cpu" not implemented for \'{}\''),
        ('__gt__ greater gt gt_', NotImplementedError, '"gt_cpu" not implemented for \'{}\''),
        ('__imod__ __mod__ remainder remainder_', NotImplementedError, '"remainder_cpu" not implemented for \'{}\''),
        ('__le__ le le_ less_equal', NotImplementedError, '"le_cpu" not implemented for \'{}\''),
        ('__lt__ less lt lt_', NotImplementedError, '"lt_cpu" not implemented for \'{}\''),
        ('arctan2 atan2 atan2_', NotImplementedError, '"atan2_cpu" not implemented for \'{}\''),
        ('copysign', NotImplementedError, '"copysign_cpu" not implemented for \'{}\''),
        ('fmax', RuntimeError, 'fmax not implemented for complex tensors.'),
        ('fmin', RuntimeError, 'fmin not implemented for complex tensors.'),
        ('fmod fmod_', NotImplementedError, '"fmod_cpu" not implemented for \'{}\''),
        ('hypot hypot_', NotImplementedError, '"hypot_cpu" not implemented for \'{}\''),
        ('maximum', RuntimeError, 'maximum not implemented for complex tensors.'),
        ('minimum', RuntimeError, 'minimum not implemented for complex tensors.'),
        ('xlogy', NotImplementedError, '"xlogy_cpu" not implemented for \'{}\''),
]:
    for _name in _names.split():
        REFUSED.setdefault(_name, []).append(("c", _error, _words))
# integers and bools: "b" bool, "iu" integers, "biu" both (torch's words name the dtype: Bool, Long ...)
for _names, _kinds, _error, _words in [
        ('abs abs_ absolute absolute_', 'b', NotImplementedError, '"abs_cpu" not implemented for \'{}\''),
        ('fix trunc', 'b', NotImplementedError, '"trunc_vml_cpu" not implemented for \'{}\''),
        ('floor', 'b', NotImplementedError, '"floor_vml_cpu" not implemented for \'{}\''),
        ('ceil', 'b', NotImplementedError, '"ceil_vml_cpu" not implemented for \'{}\''),
        ('round', 'b', NotImplementedError, '"round_vml_cpu" not implemented for \'{}\''),
        ('relu', 'b', RuntimeError, 'Boolean inputs not supported for relu'),
        ('argmax', 'b', RuntimeError, 'argmax(): does not support bool input'),
        ('argmin', 'b', RuntimeError, 'argmin(): does not support bool input'),
        ('median nanmedian', 'b', NotImplementedError, '"median_cpu" not implemented for \'{}\''),
        ('trace', 'b', NotImplementedError, '"trace" not implemented for \'{}\''),
        ('topk', 'b', RuntimeError, 'topk does not support bool dtypes on CPU'),
        ('kthvalue', 'b', NotImplementedError, '"kthvalue_cpu" not implemented for \'{}\''),
        ('__floordiv__ __rfloordiv__ floor_divide', 'b', NotImplementedError,
         '"div_floor_cpu" not implemented for \'{}\''),
        ('__mod__ __rmod__ remainder', 'b', NotImplementedError, '"remainder_cpu" not implemented for \'{}\''),
        ('fmod', 'b', NotImplementedError, '"fmod_cpu" not implemented for \'{}\''),
        ('__pow__ __rpow__ pow pow_', 'b', NotImplementedError, '"pow" not implemented for \'{}\''),
        ('matmul mm inner __matmul__ __rmatmul__ dot vdot mv bmm', 'b', NotImplementedError,
         '"addmm_impl_cpu_" not implemented for \'{}\''),  # (the kernel by the operands' dims: _product_kernel)
        ('hypot', 'biu', NotImplementedError, '"hypot_cpu" not implemented for \'{}\''),
        ('logaddexp', 'biu', NotImplementedError, '"logaddexp_cpu" not implemented for \'{}\''),
        ('logaddexp2', 'biu', NotImplementedError, '"logaddexp2_cpu" not implemented for \'{}\''),
        ('nextafter', 'biu', NotImplementedError, '"nextafter_cpu" not implemented for \'{}\''),
        ('norm', 'biu', RuntimeError,
         'linalg.vector_norm: Expected a floating point or complex tensor as input. Got {}'),
        ('frac', 'biu', NotImplementedError, '"frac_cpu" not implemented for \'{}\''),
        ('nanquantile quantile', 'biu', RuntimeError, 'quantile() input tensor must be either float or double dtype'),
        ('dist', 'iu', RuntimeError, 'norm(): input dtype should be either floating point or complex. Got {} instead.'),
]:
    for _name in _names.split():
        REFUSED.setdefault(_name, []).append((_kinds, _error, _words))
# (their other operand takes part in the result's dtype: bool // 2 is int64, which torch computes)
_OPERAND = set("__floordiv__ __rfloordiv__ floor_divide __mod__ __rmod__ remainder fmod __pow__ __rpow__ pow pow_ "
               "matmul mm inner hypot logaddexp logaddexp2 nextafter dist __matmul__ __rmatmul__ dot vdot mv "
               "bmm".split())
_PRODUCTS = {"matmul", "__matmul__", "__rmatmul__", "mm", "inner", "dot", "vdot", "mv", "bmm"}


def _product_kernel(name, self, other):
    """The kernel torch's product of bools names in its error, by the operands' dims; None where torch's shape
    error comes first (the method raises it)."""
    a, b = self.ndim, getattr(other, "ndim", 0)
    a, b = (b, a) if name == "__rmatmul__" else (a, b)
    sa, sb = (getattr(other, "shape", ()), self.shape) if name == "__rmatmul__" else (self.shape, getattr(
        other, "shape", ()))
    if a and b and name in ("matmul", "__matmul__", "__rmatmul__", "mm", "bmm", "mv") and sa[-1] != sb[-2 if b > 1
                                                                                                        else 0]:
        return None  # (the shapes do not meet: torch's shape error first)
    if name in ("dot", "vdot", "inner") and (a, b) == (1, 1):
        return "dot"
    if name == "inner":
        return "addmm_impl_cpu_" if a and b else None
    fixed = {"dot": None, "vdot": None, "mv": (2, 1), "bmm": (3, 3), "mm": (2, 2)}
    if name in fixed:
        return None if (a, b) != fixed[name] else {"mv": "addmv_impl_cpu", "bmm": "bmm", "mm": "addmm_impl_cpu_"}[name]
    if not a or not b:
        return None
    if (a, b) == (1, 1):
        return "dot"
    if b == 1:
        return "addmv_impl_cpu"
    return "addmm_impl_cpu_" if a <= 2 and b <= 2 or b == 2 else "bmm"


# method: the name torch gives its tensor parameter (generated from torch 2.13 as REFUSED)
TENSOR_ONLY = {
    **dict.fromkeys("arctan2 arctan2_ atan2 atan2_ dist fmax fmin hypot hypot_ inner isclose kron ldexp ldexp_ "
                    "logaddexp logaddexp2 logical_and logical_and_ logical_or logical_or_ logical_xor logical_xor_ "
                    "maximum minimum nextafter nextafter_ expand_as view_as reshape_as type_as is_same_size igamma "
                    "igammac".split(), "other"),
    **dict.fromkeys("ger outer".split(), "vec2"), "masked_select": "mask", "dot": "tensor", "matmul": "other",
    "vdot": "other",
}


def _tensor_only(method, name, param):
    try:  # (the op's name of the argument: torch's keyword is renamed to it by keywords.py, installed over this)
        own = list(inspect.signature(method).parameters)[1]
    except (TypeError, ValueError, IndexError):
        own = param

    @functools.wraps(method)
    def checked(self, *args, **kwargs):
        other = args[0] if args else kwargs.get(param, kwargs.get(own))
        if isinstance(other, (numbers.Number, np.generic)):
            kind = type(other)
            kind = kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__name__}"
            where = " (position 1)" if args else ""
            raise TypeError(f"{name}(): argument '{param}'{where} must be Tensor, not {kind}")
        return method(self, *args, **kwargs)
    return checked


def _refusing(method, name, rules):
    kinds = "".join(k for k, _, _ in rules)
    operand = name in _OPERAND
    pow_ = name in ("pow", "__pow__", "pow_")  # (of bools by a number torch computes: a tensor exponent is refused)

    def suspect(a):  # (a NumPy complex too: np.complex128(1j) < t refuses, as torch's)
        return isinstance(a, (complex, np.complexfloating)) or isinstance(a, Tensor) and a.dtype.kind in kinds

    @functools.wraps(method)
    def refusing(self, *args, **kwargs):  # (on every call of hot methods: matmul, pow, comparisons: kept lean)
        if self.dtype.kind in kinds or args and suspect(args[0]) or kwargs and any(map(suspect, kwargs.values())):
            values = (*args, *kwargs.values())
            operands = [self, *(a.item() if isinstance(a, np.generic) else a for a in values
                                if isinstance(a, (Tensor, complex, np.complexfloating)))]  # (a NumPy number: weak)
            if operand and args and not isinstance(args[0], (Tensor, bool)) and isinstance(
                    args[0], (numbers.Number, np.generic, np.ndarray)):  # (the other operand: bool // 2 is int64)
                operands.append(float(args[0]) if isinstance(args[0], np.bool_) else  # (torch's: a float)
                                args[0].item() if isinstance(args[0], np.generic) else args[0])
            dtype = _data.result_type(*operands)
            for k, error, words in rules:
                if dtype.kind in k and (k != "b" or not pow_ or isinstance(values[0], Tensor)):
                    if name in _PRODUCTS and k == "b":
                        kernel = _product_kernel(name, self, values[0] if values else None)
                        if kernel is None:
                            break
                        words = f'"{kernel}" not implemented for ' + "'{}'"
                    raise error(_words(name, words, self, args, kwargs).format(
                        _data.TORCH_TYPE_NAMES.get(dtype.name, dtype.name)))
        return method(self, *args, **kwargs)
    return refusing


def _words(name, words, self, args, kwargs):
    if name in ("median", "nanmedian") and (args or kwargs.get("dim", kwargs.get("axis")) is not None):
        return words.replace("median_cpu", "median_out")  # (torch's kernel of a reduction along a dim)
    if name in ("softmax", "log_softmax"):  # (torch names the kernel of the last dim or of another)
        dim = args[0] if args else kwargs.get("dim", kwargs.get("axis", -1))
        if dim is not None and dim % max(self.ndim, 1) != self.ndim - 1:
            return words.replace("_lastdim", "")
    return words


_EMPTY_FIRST = {"softmax", "log_softmax", "quantile", "nanquantile", "median", "nanmedian", "kthvalue"}


def _empty_first(method, name):
    """torch's answers for an empty integer or bool tensor, before its dtype refusal: ``softmax`` and
    ``log_softmax`` return it (empty, its dtype), ``quantile`` says it is empty, ``median``/``kthvalue`` of bools
    check the reduced dim's length (``median()`` of no bools is True: torch's NaN as a bool); the checks of the
    dims and arguments are the float method's (called on the empty tensor as floats), so their order is torch's."""
    kinds = "b" if name in ("median", "nanmedian", "kthvalue") else "biu"

    @functools.wraps(method)
    def checked(self, *args, **kwargs):
        if self.dtype.kind not in kinds or 0 not in self.shape or kwargs.get("dtype") is not None:
            return method(self, *args, **kwargs)
        floats = self.to(np.float32)
        if name in ("softmax", "log_softmax"):
            return method(floats, *args, **kwargs).to(self.dtype)
        if name in ("median", "nanmedian") and not args and kwargs.get("dim", kwargs.get("axis")) is None:
            return self.new_ones(())  # (torch's: its NaN read as a bool)
        method(floats, *args, **kwargs)  # (an empty reduced dim, or an empty input of quantile: torch's error)
        return method(self, *args, **kwargs)  # (else the dtype's refusal)
    return checked


def _quantile_q(method):
    """torch's checks of ``quantile``'s ``q`` (NumPy's ValueError is the module-level function's): a number
    outside ``[0, 1]`` (or NaN) first, in its words; a tensor's values after the input's emptiness and ``dim``."""
    @functools.wraps(method)
    def checked(self, q, *args, **kwargs):
        if isinstance(q, numbers.Real) and not isinstance(q, Tensor) and not 0 <= q <= 1:
            raise RuntimeError(f"quantile() q must be in the range [0, 1] but got {float(q):g}")
        if isinstance(q, Tensor) and q.dtype.kind == "f":
            qs = np.asarray(q.detach().numpy())
            if not ((qs >= 0) & (qs <= 1)).all():
                if self.numel() == 0:
                    raise RuntimeError("quantile() input tensor must be non-empty")
                dim = args[0] if args else kwargs.get("dim")
                if dim is not None:
                    norm_axis(dim, max(self.ndim, 1))
                raise RuntimeError("quantile() q values must be in the range [0, 1]")
        return method(self, q, *args, **kwargs)
    return checked


def install():
    for name in ("quantile", "nanquantile"):
        setattr(Tensor, name, _quantile_q(getattr(Tensor, name)))
    for name, rules in REFUSED.items():
        if hasattr(Tensor, name):
            setattr(Tensor, name, _refusing(getattr(Tensor, name), name, rules))
    for name in _EMPTY_FIRST:
        setattr(Tensor, name, _empty_first(getattr(Tensor, name), name))
    for name, param in TENSOR_ONLY.items():
        if hasattr(Tensor, name):
            setattr(Tensor, name, _tensor_only(getattr(Tensor, name), name, param))
