"""``torch.nn.utils.weight_norm``: the deprecated weight normalization by a forward pre-hook (``weight_g``,
``weight_v`` parameters; ``weight`` recomputed before each forward).  :func:`.parametrizations.weight_norm`
replaces it."""
from __future__ import annotations

import warnings

from ..module import Module, Parameter, UninitializedParameter
from .parametrizations import _norm_except_dim, _weight_norm

__all__ = ["WeightNorm", "weight_norm", "remove_weight_norm"]


class WeightNorm:
    """The forward pre-hook of :func:`weight_norm`: ``module.<name>`` set from ``<name>_g`` and ``<name>_v``.

    Parameters
    ----------
    name : str
        The parameter's name.
    dim : int or None
        The axis kept by the norm (None: -1, the whole tensor's norm).
    """

    def __init__(self, name, dim):
        self.name = name
        self.dim = -1 if dim is None else dim

    def compute_weight(self, module):
        """``v * g / ||v||`` from the module's ``<name>_g`` and ``<name>_v``."""
        return _weight_norm(getattr(module, self.name + "_v"), getattr(module, self.name + "_g"), self.dim)

    @staticmethod
    def apply(module, name, dim):
        """Replace ``module.<name>`` by ``<name>_g`` and ``<name>_v`` and register the hook (torch's
        FutureWarning: the function is deprecated)."""
        warnings.warn("`torch.nn.utils.weight_norm` is deprecated in favor of "
                      "`torch.nn.utils.parametrizations.weight_norm`.", FutureWarning, stacklevel=3)
        for hook in module._forward_pre_hooks.values():
            if isinstance(hook, WeightNorm) and hook.name == name:
                raise RuntimeError(f"Cannot register two weight_norm hooks on the same parameter {name}")
        dim = -1 if dim is None else dim
        fn = WeightNorm(name, dim)
        weight = getattr(module, name)
        if isinstance(weight, UninitializedParameter):
            raise ValueError("The module passed to `WeightNorm` can't have uninitialized parameters. Make sure to run "
                             "the dummy forward before applying weight normalization")
        del module._parameters[name]
        module.register_parameter(name + "_g", Parameter(_norm_except_dim(weight, 2, dim).data))
        module.register_parameter(name + "_v", Parameter(weight.data))
        setattr(module, name, fn.compute_weight(module))
        module.register_forward_pre_hook(fn)
        return fn

    def remove(self, module):
        """Give ``module`` back a parameter ``<name>`` with the current normalized value."""
        weight = self.compute_weight(module)
        delattr(module, self.name)
        del module._parameters[self.name + "_g"]
        del module._parameters[self.name + "_v"]
        setattr(module, self.name, Parameter(weight.data))

    def __call__(self, module, inputs):
        setattr(module, self.name, self.compute_weight(module))


def weight_norm(module: Module, name="weight", dim=0):
    """Weight normalization by a forward pre-hook (torch's deprecated ``nn.utils.weight_norm``):
    ``weight = g * v / ||v||`` from the parameters ``<name>_g`` and ``<name>_v``.

    Parameters
    ----------
    module : Module
        The module holding the weight.
    name : str, default "weight"
        The parameter's name.
    dim : int or None, default 0
        The axis kept by the norm; None: the norm of the whole tensor.

    Returns
    -------
    Module
        ``module``.
    """
    WeightNorm.apply(module, name, dim)
    return module


def remove_weight_norm(module: Module, name="weight"):
    """Undo :func:`weight_norm`: ``module.<name>`` a parameter again, with its current value.

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
    return _remove_hook(module, WeightNorm, name, "weight_norm")


def _remove_hook(module, hook_type, name, kind):
    """Undo the hook-based ``kind`` (``"weight_norm"``, ``"spectral_norm"``) of ``module.<name>``: its forward
    pre-hook of ``hook_type`` restores the parameter and is unregistered (torch's error when there is none)."""
    for k, hook in module._forward_pre_hooks.items():
        if isinstance(hook, hook_type) and hook.name == name:
            hook.remove(module)
            del module._forward_pre_hooks[k]
            return module
    raise ValueError(f"{kind} of '{name}' not found in {module}")
