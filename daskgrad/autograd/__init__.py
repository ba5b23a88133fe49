"""``daskgrad.autograd``: the names torch users look for under ``torch.autograd``."""
from .. import functional
from .._modes import (detect_anomaly, enable_grad, inference_mode, is_grad_enabled, no_grad, set_detect_anomaly,
                      set_grad_enabled)
from ..engine import backward, grad
from ..function import Function, FunctionCtx, once_differentiable
from . import function, gradcheck as _gradcheck_module  # noqa: F401  (the modules torch users import from)
from ..testing import GradcheckError, gradcheck, gradgradcheck  # the package's names are the functions, as torch's

__all__ = ["functional", "function", "detect_anomaly", "set_detect_anomaly", "backward", "grad", "Function",
           "FunctionCtx", "once_differentiable", "enable_grad", "inference_mode", "is_grad_enabled", "no_grad",
           "set_grad_enabled", "gradcheck", "gradgradcheck", "GradcheckError"]
