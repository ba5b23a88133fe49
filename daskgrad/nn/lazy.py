"""torch.nn's lazy modules: ``LazyLinear``, ``LazyConv*``, ``LazyConvTranspose*``, ``LazyBatchNorm*`` and
``LazyInstanceNorm*``, whose input size (``in_features``, ``in_channels``, ``num_features``) is read from the
first input. Until then their parameters are :class:`~daskgrad.nn.parameter.UninitializedParameter` s; the
first forward materializes them with the real module's initialisation and the module becomes that module
(``type(m) is nn.Linear`` afterwards).

>>> lazy = nn.LazyLinear(3)
>>> lazy
LazyLinear(in_features=0, out_features=3, bias=True)
>>> _ = lazy(dg.ones(2, 5))
>>> lazy
Linear(in_features=5, out_features=3, bias=True)
"""
from __future__ import annotations

import itertools

from .._modes import no_grad
from .conv import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from .layers import Linear
from .module import UninitializedBuffer, UninitializedParameter, _LazyLoad, is_lazy
from .normalization import BatchNorm1d, BatchNorm2d, BatchNorm3d, InstanceNorm1d, InstanceNorm2d, InstanceNorm3d

__all__ = ["LazyModuleMixin", "LazyLinear", "LazyConv1d", "LazyConv2d", "LazyConv3d", "LazyConvTranspose1d",
           "LazyConvTranspose2d", "LazyConvTranspose3d", "LazyBatchNorm1d", "LazyBatchNorm2d", "LazyBatchNorm3d",
           "LazyInstanceNorm1d", "LazyInstanceNorm2d", "LazyInstanceNorm3d"]


class LazyModuleMixin(_LazyLoad):
    """torch's mixin for modules whose parameter shapes come from their first input: a forward pre-hook
    calls :meth:`initialize_parameters` with that input, then the module becomes ``cls_to_become``."""

    cls_to_become = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._initialize_hook = self.register_forward_pre_hook(self._infer_parameters, with_kwargs=True)

    def _lazy_load_hook(self, state_dict, prefix):
        """Before ``load_state_dict`` copies: an uninitialized parameter or buffer whose checkpoint value is
        initialized takes that value's shape, so that a lazy module loads a trained one's state."""
        for name, param in itertools.chain(self._parameters.items(), self._buffers.items()):
            key = prefix + name
            if key in state_dict and param is not None and is_lazy(param) and not is_lazy(state_dict[key]):
                with no_grad():
                    param.materialize(tuple(state_dict[key].shape))

    def initialize_parameters(self, *args, **kwargs):
        """Materialize the parameters from the first input (each lazy module defines it)."""
        raise NotImplementedError(f"initialize_parameters is not implemented for {type(self).__name__}")

    def has_uninitialized_params(self):
        """Whether a parameter or buffer of this module (not its children) is still uninitialized."""
        return any(is_lazy(p) for p in itertools.chain(self._parameters.values(), self._buffers.values()))

    def _infer_parameters(self, module, args, kwargs=None):
        module.initialize_parameters(*args, **(kwargs or {}))
        if module.has_uninitialized_params():
            raise RuntimeError(f"module {type(self).__name__} has not been fully initialized")
        module._initialize_hook.remove()
        delattr(module, "_initialize_hook")
        if module.cls_to_become is not None:
            module.__class__ = module.cls_to_become

    def _replicate_for_data_parallel(self):
        raise RuntimeError("Modules with uninitialized parameters can't be used with `DataParallel`. Run a dummy "
                           "forward pass to correctly initialize the modules")


class _LazyReal(LazyModuleMixin):
    """The lazy form of a real module ``cls_to_become(size, *args, **kwargs)``: built with ``size`` 0, its
    parameters (and running statistics) then swapped for uninitialized ones; the first forward builds the
    real module once more with the inferred size and moves its freshly initialised tensors in, so the
    initialisation is exactly the real module's (daskgrad's modules initialise in ``__init__``)."""

    _size_attr = ""

    def __init__(self, *args, device=None, dtype=None, **kwargs):
        super().__init__(0, *args, device=device, dtype=dtype, **kwargs)
        self._lazy_args = (args, kwargs)
        for name, p in self._parameters.items():
            if p is not None:
                self._parameters[name] = UninitializedParameter(p.requires_grad, device=p.device, dtype=p.dtype)
        for name in ("running_mean", "running_var"):
            b = self._buffers.get(name)
            if b is not None:
                self._buffers[name] = UninitializedBuffer(device=b.device, dtype=b.dtype)

    def _infer_size(self, input):
        return input.shape[1]

    def initialize_parameters(self, input, *args, **kwargs):
        """Read the input size from ``input`` and materialize the uninitialized parameters and buffers with
        the real module's initialisation."""
        if not self.has_uninitialized_params():
            return
        size = self._infer_size(input)
        lazy = [t for t in itertools.chain(self._parameters.values(), self._buffers.values()) if is_lazy(t)]
        args, kwargs = self._lazy_args
        with no_grad():
            real = self.cls_to_become(size, *args, device=lazy[0].device, dtype=lazy[0].dtype, **kwargs)
            setattr(self, self._size_attr, size)
            for table, fresh in ((self._parameters, real._parameters), (self._buffers, real._buffers)):
                for name, t in table.items():
                    if is_lazy(t):
                        t.materialize(fresh[name].shape, dtype=t.dtype)
                        t.data = fresh[name].detach()


class LazyLinear(_LazyReal, Linear):
    """:class:`~daskgrad.nn.Linear` whose ``in_features`` is the last axis of the first input."""

    cls_to_become = Linear
    _size_attr = "in_features"

    def __init__(self, out_features, bias=True, device=None, dtype=None):
        super().__init__(out_features, bias, device=device, dtype=dtype)

    def _infer_size(self, input):
        return input.shape[-1]

    def initialize_parameters(self, input, *args, **kwargs):
        """As the other lazy modules; and, as torch's, ``in_features`` is read from the input also after
        ``load_state_dict`` materialized the weight (checked against it)."""
        super().initialize_parameters(input)
        if self.in_features == 0:
            if input.shape[-1] != self.weight.shape[-1]:
                raise AssertionError(f"The in_features inferred from input: {input.shape[-1]} is not equal to "
                                     f"in_features from self.weight: {self.weight.shape[-1]}")
            self.in_features = input.shape[-1]


class _LazyConvMixin(_LazyReal):
    _size_attr = "in_channels"

    def _infer_size(self, input):
        batched, unbatched = self._nsp + 2, self._nsp + 1
        if input.ndim not in (unbatched, batched):
            raise RuntimeError(f"Expected {unbatched}D (unbatched) or {batched}D (batched) input to "
                               f"{type(self).__name__}, but got input of size: torch.Size({list(input.shape)})")
        return input.shape[1] if input.ndim == batched else input.shape[0]


def _lazy_conv(real, doc):
    """``LazyConv{1,2,3}d``: torch's arguments without ``in_channels``."""
    def __init__(self, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True,
                 padding_mode="zeros", device=None, dtype=None):
        _LazyReal.__init__(self, out_channels, kernel_size, stride, padding, dilation, groups, bias, padding_mode,
                           device=device, dtype=dtype)
    return type("Lazy" + real.__name__, (_LazyConvMixin, real),
                {"__init__": __init__, "cls_to_become": real, "__doc__": doc, "__module__": __name__})


def _lazy_conv_transpose(real, doc):
    """``LazyConvTranspose{1,2,3}d``: torch's arguments without ``in_channels``."""
    def __init__(self, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1, bias=True,
                 dilation=1, padding_mode="zeros", device=None, dtype=None):
        _LazyReal.__init__(self, out_channels, kernel_size, stride, padding, output_padding, groups, bias, dilation,
                           padding_mode, device=device, dtype=dtype)
    return type("Lazy" + real.__name__, (_LazyConvMixin, real),
                {"__init__": __init__, "cls_to_become": real, "__doc__": doc, "__module__": __name__})


def _lazy_norm(real, doc, affine=True, track_running_stats=True):
    """``LazyBatchNorm*`` / ``LazyInstanceNorm*``: torch's arguments without ``num_features`` (both lazy
    families default to ``affine=True, track_running_stats=True``, as torch's)."""
    def __init__(self, eps=1e-5, momentum=0.1, affine=affine, track_running_stats=track_running_stats, device=None,
                 dtype=None, *, bias=True):
        _LazyReal.__init__(self, eps, momentum, affine, track_running_stats, device=device, dtype=dtype, bias=bias)
    return type("Lazy" + real.__name__, (_LazyReal, real),
                {"__init__": __init__, "cls_to_become": real, "_size_attr": "num_features", "__doc__": doc,
                 "__module__": __name__})


LazyConv1d = _lazy_conv(Conv1d, """:class:`~daskgrad.nn.Conv1d` whose ``in_channels`` comes from the first input.""")
LazyConv2d = _lazy_conv(Conv2d, """:class:`~daskgrad.nn.Conv2d` whose ``in_channels`` comes from the first input.""")
LazyConv3d = _lazy_conv(Conv3d, """:class:`~daskgrad.nn.Conv3d` whose ``in_channels`` comes from the first input.""")
LazyConvTranspose1d = _lazy_conv_transpose(
    ConvTranspose1d, """:class:`~daskgrad.nn.ConvTranspose1d` whose ``in_channels`` comes from the first input.""")
LazyConvTranspose2d = _lazy_conv_transpose(
    ConvTranspose2d, """:class:`~daskgrad.nn.ConvTranspose2d` whose ``in_channels`` comes from the first input.""")
LazyConvTranspose3d = _lazy_conv_transpose(
    ConvTranspose3d, """:class:`~daskgrad.nn.ConvTranspose3d` whose ``in_channels`` comes from the first input.""")
LazyBatchNorm1d = _lazy_norm(BatchNorm1d, """:class:`~daskgrad.nn.BatchNorm1d` whose ``num_features`` is the
first input's axis 1.""")
LazyBatchNorm2d = _lazy_norm(BatchNorm2d, """:class:`~daskgrad.nn.BatchNorm2d` whose ``num_features`` is the
first input's axis 1.""")
LazyBatchNorm3d = _lazy_norm(BatchNorm3d, """:class:`~daskgrad.nn.BatchNorm3d` whose ``num_features`` is the
first input's axis 1.""")
LazyInstanceNorm1d = _lazy_norm(InstanceNorm1d, """:class:`~daskgrad.nn.InstanceNorm1d` whose ``num_features`` is
the first input's axis 1.""")
LazyInstanceNorm2d = _lazy_norm(InstanceNorm2d, """:class:`~daskgrad.nn.InstanceNorm2d` whose ``num_features`` is
the first input's axis 1.""")
LazyInstanceNorm3d = _lazy_norm(InstanceNorm3d, """:class:`~daskgrad.nn.InstanceNorm3d` whose ``num_features`` is
the first input's axis 1.""")
