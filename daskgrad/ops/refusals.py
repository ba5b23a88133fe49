"""torch's refusals of operands by its Tensor methods, where the op daskgrad shares with the module-level function
(NumPy's) would compute; each method here raises torch's error, type and words, before anything is recorded.

``REFUSED``: complex operands (NumPy orders complex numbers, rounds and clamps their parts ...; ``{}`` in the
words is the complex dtype's torch name).  ``TENSOR_ONLY``: a number where torch's method takes only a tensor
(``t.maximum(2)``, ``t.logical_and(1)``: torch's ``TypeError``; arrays pass, as everywhere here).  The
module-level functions keep NumPy's answers."""
from __future__ import annotations

import functools
import numbers

import numpy as np

from .. import _data
from .._tensor import Tensor

# (generated from torch 2.13; tests/test_refusals.py checks every entry against torch)
REFUSED = {}
for _names, _error, _words in [
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
    REFUSED.update(dict.fromkeys(_names.split(), (_error, _words)))


# method: the name torch gives its tensor parameter (generated from torch 2.13 as REFUSED)
TENSOR_ONLY = {
    **dict.fromkeys("arctan2 arctan2_ atan2 atan2_ dist fmax fmin hypot hypot_ inner isclose kron ldexp ldexp_ "
                    "logaddexp logaddexp2 logical_and logical_and_ logical_or logical_or_ logical_xor logical_xor_ "
                    "maximum minimum nextafter nextafter_".split(), "other"),
    **dict.fromkeys("ger outer".split(), "vec2"), "masked_select": "mask",
}


def _tensor_only(method, name, param):
    @functools.wraps(method)
    def checked(self, *args, **kwargs):
        other = args[0] if args else kwargs.get(param)
        if isinstance(other, (numbers.Number, np.generic)):
            kind = type(other)
            kind = kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__name__}"
            raise TypeError(f"{name}(): argument '{param}' (position 1) must be Tensor, not {kind}")
        return method(self, *args, **kwargs)
    return checked


def _refusing(method, name, error, words):
    @functools.wraps(method)
    def refusing(self, *args, **kwargs):
        operands = [self, *(a for a in (*args, *kwargs.values()) if isinstance(a, (Tensor, complex)))]
        if any(isinstance(a, complex) or a.dtype.kind == "c" for a in operands):
            dtype = _data.result_type(*operands)
            message = words
            if name in ("softmax", "log_softmax"):  # (torch names the kernel of the last dim or of another)
                dim = args[0] if args else kwargs.get("dim", kwargs.get("axis", -1))
                if dim is not None and dim % max(self.ndim, 1) != self.ndim - 1:
                    message = message.replace("_lastdim", "")
            raise error(message.format(_data.TORCH_TYPE_NAMES.get(dtype.name, dtype.name)))
        return method(self, *args, **kwargs)
    return refusing


def install():
    for name, (error, words) in REFUSED.items():
        if hasattr(Tensor, name):
            setattr(Tensor, name, _refusing(getattr(Tensor, name), name, error, words))
    for name, param in TENSOR_ONLY.items():
        if hasattr(Tensor, name):
            setattr(Tensor, name, _tensor_only(getattr(Tensor, name), name, param))
