"""daskgrad: PyTorch's autograd on chunked, lazy Dask arrays.

Read the engine in data-flow order: ``_tensor`` -> ``graph`` (the op table) -> ``ops``
(primitives and rules) -> ``engine`` (the reverse pass); ``chunk`` holds the kernels and
``runtime`` is where graphs run.  ``daskgrad.tensor`` and ``daskgrad.backward`` are the
functions; the modules are ``daskgrad._tensor`` and ``daskgrad.engine``.
"""
import numpy as np

from . import autograd, func, functional, interop, ops, serialization, testing
from . import optimize
from . import cuda, linalg, nn, optim, return_types, utils  # noqa: E402,F401
from .engine import backward, grad
from .function import Function, map_blocks
from ._modes import (are_deterministic_algorithms_enabled, detect_anomaly, enable_grad, inference_mode,
                     is_anomaly_check_nan_enabled, is_anomaly_enabled, is_deterministic_algorithms_warn_only_enabled,
                     is_grad_enabled, is_inference_mode_enabled, no_grad, set_detect_anomaly, set_grad_enabled,
                     use_deterministic_algorithms)
from .ops import *  # noqa: F401,F403  (the op functions: daskgrad.exp, daskgrad.sum, ...)
from .ops import __all__ as _ops_all
from .ops.numpy_shape import c_, r_  # NumPy's index tricks (objects that join on indexing, not ops)
from .checkpoint import load, save
from .compiler import compile
from .cluster import connect
from .runtime import memory_report, release_graph, set_progress, values
from .memory import estimate_memory
from .lost import LostTensorError
from ._dask import step_cache_clear, step_cache_info
from ._tensor import (Tensor, arange, as_tensor, from_array, from_numpy, from_torch, full, manual_seed, ones, rand,
                      randn, tensor, zeros)
from ._data import (channels_last, channels_last_3d, contiguous_format, device, layout, memory_format,
                    preserve_format, strided)


def compute(*tensors, **kwargs):
    """Compute several tensors in one submission, so shared work runs once."""
    return tuple(values(tensors, **kwargs))


# dtypes under torch's names (NumPy dtypes: ``x.dtype == dg.float32``, ``dtype=dg.float64`` anywhere)
float16, float32, float64 = np.dtype("float16"), np.dtype("float32"), np.dtype("float64")
int8, int16, int32, int64, uint8 = (np.dtype(n) for n in ("int8", "int16", "int32", "int64", "uint8"))
complex64, complex128, bool = np.dtype("complex64"), np.dtype("complex128"), np.dtype("bool")
half, float, double, short, int, long = float16, float32, float64, int16, int32, int64
cfloat, cdouble = complex64, complex128

__version__ = "0.1.0"

_DTYPES = ["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "complex64", "complex128",
           "bool", "half", "float", "double", "short", "int", "long", "cfloat", "cdouble"]
# the public names: the ops, the names above them, the dtypes and the subpackages users import
__all__ = sorted(set(_ops_all) | set(_DTYPES) | {
    "Tensor", "Function", "LostTensorError", "tensor", "as_tensor", "from_array", "from_torch", "zeros", "ones",
    "full", "arange", "rand", "randn", "manual_seed", "backward", "grad", "map_blocks", "compile", "connect",
    "compute", "values", "save", "load", "estimate_memory", "memory_report", "release_graph", "set_progress",
    "step_cache_clear", "step_cache_info", "no_grad", "enable_grad", "set_grad_enabled", "inference_mode",
    "is_grad_enabled", "is_inference_mode_enabled", "detect_anomaly", "set_detect_anomaly", "is_anomaly_enabled",
    "is_anomaly_check_nan_enabled", "autograd", "func", "functional", "linalg", "nn", "optim", "optimize",
    "testing", "utils"})
