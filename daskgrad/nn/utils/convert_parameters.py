"""``torch.nn.utils.parameters_to_vector`` and ``vector_to_parameters``."""
from __future__ import annotations

from ..._tensor import Tensor
from ...ops import concatenate, reshape


def _check_device(param, device):
    if device is not None and param.device != device:
        raise TypeError("Found two parameters on different devices, this is currently not supported.")
    return param.device


def parameters_to_vector(parameters):
    """The parameters flattened and joined into one vector (differentiable, as torch's)."""
    device, flat = None, []
    for p in parameters:
        device = _check_device(p, device)
        flat.append(reshape(p, (-1,)))
    return concatenate(flat)


def vector_to_parameters(vec, parameters):
    """Each parameter's ``data`` set to its slice of ``vec``, in order (no gradient recorded, as torch's)."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected torch.Tensor, but got: {type(vec).__name__}")
    device, at = None, 0
    for p in parameters:
        device = _check_device(p, device)
        n = p.numel()
        p.data = reshape(vec[at:at + n], tuple(p.shape)).data
        at += n
