"""``daskgrad.autograd``: the names torch users look for under ``torch.autograd``."""
from . import functional
from .anomaly import detect_anomaly, set_detect_anomaly
from .engine import backward, grad
from .function import Function, FunctionCtx
from .graph import enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled
from .testing import GradcheckError, gradcheck, gradgradcheck

__all__ = ["functional", "detect_anomaly", "set_detect_anomaly", "backward", "grad", "Function", "FunctionCtx",
           "enable_grad", "inference_mode", "is_grad_enabled", "no_grad", "set_grad_enabled", "gradcheck",
           "gradgradcheck", "GradcheckError"]
