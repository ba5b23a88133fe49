"""daskgrad: PyTorch's autograd on chunked, lazy Dask arrays.

Read the engine in data-flow order: ``_tensor`` -> ``graph`` (the op table) -> ``ops``
(primitives and rules) -> ``engine`` (the reverse pass); ``chunk`` holds the kernels and
``runtime`` is where graphs run.  ``daskgrad.tensor`` and ``daskgrad.backward`` are the
functions; the modules are ``daskgrad._tensor`` and ``daskgrad.engine``.
"""
from . import autograd, functional, ops, testing
from . import optimize
from . import linalg, nn, optim  # noqa: E402,F401
from .engine import backward, grad
from .function import Function, map_blocks
from ._modes import (detect_anomaly, enable_grad, inference_mode, is_anomaly_check_nan_enabled, is_anomaly_enabled,
                     is_grad_enabled, is_inference_mode_enabled, no_grad, set_detect_anomaly, set_grad_enabled)
from .ops import *  # noqa: F401,F403  (the op functions: daskgrad.exp, daskgrad.sum, ...)
from .ops import __all__ as _ops_all
from .checkpoint import load, save
from .cluster import connect
from .runtime import memory_report, release_graph, set_progress, values
from .memory import estimate_memory
from .lost import LostTensorError
from ._tensor import (Tensor, arange, from_array, full, manual_seed, ones, rand, randn, tensor, zeros)


def compute(*tensors, **kwargs):
    """Compute several tensors in one submission, so shared work runs once."""
    return tuple(values(tensors, **kwargs))


__version__ = "0.1.0"
