"""``torch.nn.utils``' gradient clipping: ``clip_grad_norm_``, ``clip_grad_value_``, ``get_total_norm``,
``clip_grads_with_norm_``.

Lazy like an optimizer step: the gradients are scaled in place (pending writes computed by the next
submission, so ``.grad`` keeps a flat lineage) and the returned total norm is a lazy 0-d tensor, unless
``error_if_nonfinite=True``, which needs its value (torch syncs there too).

>>> loss.backward()
>>> total = nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
>>> opt.step()
"""
from __future__ import annotations

import math
import types
import warnings

from ..._modes import no_grad
from ..._tensor import Tensor, tensor
from ...ops import astype, minimum, stack
from ...ops.linalg import vector_norm

__all__ = ["clip_grad_norm_", "clip_grad_norm", "clip_grad_value_", "clip_grads_with_norm_", "get_total_norm"]


def _as_list(tensors):
    return [tensors] if isinstance(tensors, Tensor) else list(tensors)


def _vector_norm(x, p):
    """torch's ``linalg.vector_norm`` over all elements (``norm`` of a matrix is a matrix norm, as NumPy's)."""
    return vector_norm(x, ord=p)


def get_total_norm(tensors, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """The ``norm_type``-norm of the norms of ``tensors`` (the norm of them all concatenated).  ``foreach``
    picks torch's kernels and changes no number; it is accepted, as on torch's CPU."""
    tensors = _as_list(tensors)
    norm_type = float(norm_type)
    if not tensors:
        return tensor(0.0)
    with no_grad():
        norms = [_vector_norm(t, norm_type) for t in tensors]
        dtype = tensors[0].dtype
        total = _vector_norm(stack([n if n.dtype == dtype else astype(n, dtype) for n in norms]), norm_type)
    if error_if_nonfinite and not math.isfinite(total.item()):
        raise RuntimeError(f"The total norm of order {norm_type} for gradients from `parameters` is non-finite, so it "
                           "cannot be clipped. To disable this error and scale the gradients by the non-finite norm "
                           "anyway, set `error_if_nonfinite=False`")
    return total


def clip_grads_with_norm_(parameters, max_norm, total_norm, foreach=None):
    """Scale the gradients by ``min(1, max_norm / (total_norm + 1e-6))`` in place."""
    grads = [p.grad for p in _as_list(parameters) if p.grad is not None]
    if not grads:
        return
    with no_grad():
        coef = minimum(float(max_norm) / (total_norm + 1e-6), 1.0)
        for g in grads:
            g.mul_(coef if coef.dtype == g.dtype else astype(coef, g.dtype))


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """Rescale the gradients of ``parameters`` so that their total ``norm_type``-norm is at most ``max_norm``;
    returns the total norm before clipping (lazy)."""
    is_generator = isinstance(parameters, types.GeneratorType)
    parameters = _as_list(parameters)
    if is_generator and not parameters:
        warnings.warn("`parameters` is an empty generator, no gradient clipping will occur.", stacklevel=2)
    grads = [p.grad for p in parameters if p.grad is not None]
    total = get_total_norm(grads, norm_type, error_if_nonfinite, foreach)
    clip_grads_with_norm_(parameters, max_norm, total, foreach)
    return total


def clip_grad_norm(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """torch's deprecated spelling of :func:`clip_grad_norm_` (with its FutureWarning)."""
    warnings.warn("`torch.nn.utils.clip_grad_norm` is now deprecated in favor of `torch.nn.utils.clip_grad_norm_`.",
                  FutureWarning, stacklevel=2)
    return clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite, foreach)


def clip_grad_value_(parameters, clip_value, foreach=None):
    """Clamp every gradient element into ``[-clip_value, clip_value]`` in place."""
    clip_value = float(clip_value)
    with no_grad():
        for p in _as_list(parameters):
            if p.grad is not None:
                p.grad.clamp_(-clip_value, clip_value)

