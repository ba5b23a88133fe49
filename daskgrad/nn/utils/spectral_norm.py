"""``torch.nn.utils.spectral_norm``: spectral normalization by a forward pre-hook (``weight_orig``
parameter, ``weight_u`` and ``weight_v`` buffers; ``weight`` recomputed before each forward).
:func:`.parametrizations.spectral_norm` replaces it.

torch's state_dict hooks that record a version number and convert checkpoints of torch < 1.1 are not
ported: a state_dict has the same keys and values, and old checkpoints are not read."""
from __future__ import annotations

from ..._modes import no_grad
from ...ops import dot
from .. import functional as F
from ..conv import ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from ..module import Module, Parameter, UninitializedParameter
from .weight_norm import _remove_hook

__all__ = ["SpectralNorm", "spectral_norm", "remove_spectral_norm"]


class SpectralNorm:
    """The forward pre-hook of :func:`spectral_norm`: ``module.<name>`` set to ``<name>_orig / sigma``.

    Parameters
    ----------
    name : str, default "weight"
        The parameter's name.
    n_power_iterations : int, default 1
        Power-iteration steps per forward in training.
    dim : int, default 0
        The output axis.
    eps : float, default 1e-12
        The smallest norm divided by when normalizing ``u`` and ``v``.
    """

    _version = 1

    def __init__(self, name="weight", n_power_iterations=1, dim=0, eps=1e-12):
        self.name = name
        self.dim = dim
        if n_power_iterations <= 0:
            raise ValueError("Expected n_power_iterations to be positive, but got "
                             f"n_power_iterations={n_power_iterations}")
        self.n_power_iterations = n_power_iterations
        self.eps = eps

    def reshape_weight_to_matrix(self, weight):
        """The weight as a matrix: ``dim`` first, the other axes flattened."""
        weight_mat = weight
        if self.dim != 0:
            weight_mat = weight_mat.permute(self.dim, *[d for d in range(weight_mat.ndim) if d != self.dim])
        return weight_mat.reshape(weight_mat.shape[0], -1)

    def compute_weight(self, module, do_power_iteration):
        """``<name>_orig / sigma``; with ``do_power_iteration``, ``u`` and ``v`` are updated in place first."""
        weight = getattr(module, self.name + "_orig")
        u = getattr(module, self.name + "_u")
        v = getattr(module, self.name + "_v")
        weight_mat = self.reshape_weight_to_matrix(weight)
        if do_power_iteration:
            with no_grad():
                for _ in range(self.n_power_iterations):
                    v.copy_(F.normalize(weight_mat.t().mv(u), dim=0, eps=self.eps))
                    u.copy_(F.normalize(weight_mat.mv(v), dim=0, eps=self.eps))
                # cloned: a later forward's in-place update must not change what this one's backward reads
                u, v = u.clone(), v.clone()
        sigma = dot(u, weight_mat.mv(v))
        return weight / sigma

    def remove(self, module):
        """Give ``module`` back a parameter ``<name>`` with the current normalized value."""
        with no_grad():
            weight = self.compute_weight(module, do_power_iteration=False)
        delattr(module, self.name)
        delattr(module, self.name + "_u")
        delattr(module, self.name + "_v")
        delattr(module, self.name + "_orig")
        module.register_parameter(self.name, Parameter(weight.detach()))

    def __call__(self, module, inputs):
        setattr(module, self.name, self.compute_weight(module, do_power_iteration=module.training))

    @staticmethod
    def apply(module, name, n_power_iterations, dim, eps):
        """Move ``module.<name>`` to ``<name>_orig``, add the ``u``/``v`` buffers and register the hook."""
        for hook in module._forward_pre_hooks.values():
            if isinstance(hook, SpectralNorm) and hook.name == name:
                raise RuntimeError(f"Cannot register two spectral_norm hooks on the same parameter {name}")
        fn = SpectralNorm(name, n_power_iterations, dim, eps)
        weight = module._parameters[name]
        if weight is None:
            raise ValueError(f"`SpectralNorm` cannot be applied as parameter `{name}` is None")
        if isinstance(weight, UninitializedParameter):
            raise ValueError("The module passed to `SpectralNorm` can't have uninitialized parameters. Make sure to "
                             "run the dummy forward before applying spectral normalization")
        with no_grad():
            weight_mat = fn.reshape_weight_to_matrix(weight)
            h, w = weight_mat.shape
            u = F.normalize(weight.new_empty(h).normal_(0, 1), dim=0, eps=fn.eps)
            v = F.normalize(weight.new_empty(w).normal_(0, 1), dim=0, eps=fn.eps)
        delattr(module, fn.name)
        module.register_parameter(fn.name + "_orig", weight)
        setattr(module, fn.name, weight.data)
        module.register_buffer(fn.name + "_u", u)
        module.register_buffer(fn.name + "_v", v)
        module.register_forward_pre_hook(fn)
        return fn


def spectral_norm(module: Module, name="weight", n_power_iterations=1, eps=1e-12, dim=None):
    """Spectral normalization by a forward pre-hook (torch's ``nn.utils.spectral_norm``): the weight
    divided by its largest singular value, estimated by power iteration on the buffers ``<name>_u`` and
    ``<name>_v`` (updated at each forward in training mode).

    Parameters
    ----------
    module : Module
        The module holding the weight.
    name : str, default "weight"
        The parameter's name.
    n_power_iterations : int, default 1
        Power-iteration steps per forward in training.
    eps : float, default 1e-12
        The smallest norm divided by when normalizing ``u`` and ``v``.
    dim : int, optional
        The output axis: 1 for ConvTranspose modules, else 0.

    Returns
    -------
    Module
        ``module``.
    """
    if dim is None:
        dim = 1 if isinstance(module, (ConvTranspose1d, ConvTranspose2d, ConvTranspose3d)) else 0
    SpectralNorm.apply(module, name, n_power_iterations, dim, eps)
    return module


def remove_spectral_norm(module: Module, name="weight"):
    """Undo :func:`spectral_norm`: ``module.<name>`` a parameter again, with its current normalized value.

    Parameters
    ----------
    module : Module
        The module.
    name : str, default "weight"
        The parameter's name.

    Returns
    -------
    Module
        ``module``.
    """
    return _remove_hook(module, SpectralNorm, name, "spectral_norm")
