"""``torch.nn.utils.parametrize``: a parameter or buffer seen through modules (``module.weight`` computed
from ``module.parametrizations.weight.original`` each time it is read).

As torch's, the module's class is replaced by a subclass ``Parametrized<Class>`` that holds one property
per parametrized name; its getter runs the :class:`ParametrizationList`, its setter the parametrizations'
``right_inverse``.  Reading ``module.weight`` builds a lazy graph: nothing is computed until asked.
"""
from __future__ import annotations

import collections.abc
import copyreg
from contextlib import contextmanager
from copy import deepcopy

from ..._modes import no_grad
from ..._tensor import Tensor
from ...graph import size_repr
from ..layers import ModuleDict, ModuleList
from ..module import Parameter

__all__ = ["cached", "ParametrizationList", "register_parametrization", "is_parametrized", "remove_parametrizations",
           "type_before_parametrizations", "transfer_parametrizations_and_params"]

_cache_enabled = 0
_cache: dict = {}


def _dtype(t):
    return f"daskgrad.{t.dtype.name}"


@contextmanager
def cached():
    """Compute each parametrized tensor once inside the block and reuse it (torch's ``parametrize.cached``).

    Useful when a parametrized weight is read several times in one forward (a recurrent kernel, tied
    weights); the cached values are forgotten when the outermost block is left.

    Examples
    --------
    >>> import daskgrad.nn.utils.parametrize as P
    >>> m = nn.Linear(2, 2)
    >>> _ = P.register_parametrization(m, "weight", nn.Tanh())
    >>> with P.cached():
    ...     same = m.weight is m.weight
    >>> same, m.weight is m.weight
    (True, False)
    """
    global _cache, _cache_enabled
    _cache_enabled += 1
    try:
        yield
    finally:
        _cache_enabled -= 1
        if not _cache_enabled:
            _cache = {}


def _register_parameter_or_buffer(module, name, X):
    if isinstance(X, Parameter):
        module.register_parameter(name, X)
    else:
        module.register_buffer(name, X)


def _maybe_set(dest, src):
    """torch's ``dest.set_(src)``: ``dest`` (the same object, so optimizers keep it) takes ``src``'s value;
    a Parameter's stays one chunk."""
    arr = src.detach().array
    if isinstance(dest, Parameter):
        arr = arr.rechunk(arr.shape)
    dest.data = arr


class ParametrizationList(ModuleList):
    """The parametrizations of one tensor and its original value(s): ``module.parametrizations[name]``.

    It holds the unparametrized tensor as ``original`` or, when the first parametrization's ``right_inverse``
    returns several tensors, as ``original0``, ``original1``, ...  Made by :func:`register_parametrization`,
    not by users (as torch's).

    Parameters
    ----------
    modules : sequence of Module
        The parametrizations, applied in order.
    original : Parameter or Tensor
        The parameter or buffer that is parametrized.
    unsafe : bool, default False
        Whether the parametrization may change the tensor's dtype and shape (then nothing is checked).
    """

    def __init__(self, modules, original, unsafe=False):
        if len(modules) == 0:
            raise ValueError("ParametrizationList requires one or more modules.")
        super().__init__(modules)
        self.unsafe = unsafe
        original_shape, original_dtype = original.shape, original.dtype
        with no_grad():
            new = original
            for module in reversed(self):
                if hasattr(module, "right_inverse"):
                    try:
                        new = module.right_inverse(new)
                    except NotImplementedError:
                        pass
        if not isinstance(new, (Tensor, collections.abc.Sequence)):
            raise ValueError("'right_inverse' must return a Tensor or a Sequence of tensors (list, tuple...). "
                             f"Got {type(new).__name__}")
        self.is_tensor = isinstance(new, Tensor)
        self.ntensors = 1 if self.is_tensor else len(new)
        if self.is_tensor:
            if original.dtype != new.dtype:
                raise ValueError("When `right_inverse` outputs one tensor, it may not change the dtype.\n"
                                 f"original.dtype: {_dtype(original)}\nright_inverse(original).dtype: {_dtype(new)}")
            if original.device != new.device:
                raise ValueError("When `right_inverse` outputs one tensor, it may not change the device.\n"
                                 f"original.device: {original.device}\nright_inverse(original).device: {new.device}")
            with no_grad():
                _maybe_set(original, new)
            _register_parameter_or_buffer(self, "original", original)
        else:
            for i, originali in enumerate(new):
                if not isinstance(originali, Tensor):
                    raise ValueError("'right_inverse' must return a Tensor or a Sequence of tensors (list, tuple...). "
                                     f"Got element {i} of the sequence with type {type(originali).__name__}.")
                if isinstance(original, Parameter):
                    originali = Parameter(originali, original.requires_grad)
                originali.requires_grad_(original.requires_grad)
                _register_parameter_or_buffer(self, f"original{i}", originali)
        if not self.unsafe:
            Z = self()
            if not isinstance(Z, Tensor):
                raise ValueError(f"A parametrization must return a tensor. Got {type(Z).__name__}.")
            if Z.dtype != original_dtype:
                raise ValueError("Registering a parametrization may not change the dtype of the tensor, unless "
                                 f"`unsafe` flag is enabled.\nunparametrized dtype: daskgrad.{original_dtype.name}\n"
                                 f"parametrized dtype: {_dtype(Z)}")
            if Z.shape != original_shape:
                raise ValueError("Registering a parametrization may not change the shape of the tensor, unless "
                                 f"`unsafe` flag is enabled.\nunparametrized shape: {size_repr(original_shape)}\n"
                                 f"parametrized shape: {size_repr(Z.shape)}")

    def right_inverse(self, value):
        """Run the parametrizations' ``right_inverse`` in reverse order on ``value`` and store the result in
        ``original`` (or ``original0``, ``original1``, ...) in place.

        Parameters
        ----------
        value : Tensor
            The value the parametrized tensor should take.
        """
        with no_grad():
            for module in reversed(self):
                if hasattr(module, "right_inverse"):
                    value = module.right_inverse(value)
                else:
                    raise RuntimeError(f"parametrization {type(module).__name__} does not implement right_inverse.")
            if self.is_tensor:
                if not isinstance(value, Tensor):
                    raise ValueError(f"`right_inverse` should return a tensor. Got {type(value).__name__}")
                if value.dtype != self.original.dtype:
                    raise ValueError(f"The tensor returned by `right_inverse` has dtype {_dtype(value)} while "
                                     f"`original` has dtype {_dtype(self.original)}")
                _maybe_set(self.original, value)
            else:
                if not isinstance(value, collections.abc.Sequence):
                    raise ValueError(f"'right_inverse' must return a sequence of tensors. Got {type(value).__name__}.")
                if len(value) != self.ntensors:
                    raise ValueError(f"'right_inverse' must return a sequence of tensors of length {self.ntensors}. "
                                     f"Got a sequence of length {len(value)}.")
                for i, tensor in enumerate(value):
                    original_i = getattr(self, f"original{i}")
                    if not isinstance(tensor, Tensor):
                        raise ValueError("'right_inverse' must return a sequence of tensors or reference-type "
                                         f"opaques. Got element {i} of type {type(tensor).__name__}.")
                    if original_i.dtype != tensor.dtype:
                        raise ValueError(f"Tensor {i} returned by `right_inverse` has dtype {_dtype(tensor)} while "
                                         f"`original{i}` has dtype {_dtype(original_i)}")
                    _maybe_set(original_i, tensor)

    def forward(self):
        """The parametrized tensor: the first parametrization on the original(s), then the others in turn."""
        if self.is_tensor:
            x = self[0](self.original)
        else:
            x = self[0](*(getattr(self, f"original{i}") for i in range(self.ntensors)))
        curr_idx = 1
        while hasattr(self, str(curr_idx)):
            x = self[curr_idx](x)
            curr_idx += 1
        return x


def _default_deepcopy(self, memo):
    """torch's deepcopy of a parametrized module: its ``__dict__`` (and slots), the class kept."""
    obj = memo.get(id(self), None)
    if obj is not None:
        return obj
    replica = self.__new__(self.__class__)
    memo[id(self)] = replica
    replica.__dict__ = deepcopy(self.__dict__, memo)
    for slot in copyreg._slotnames(self.__class__):
        if hasattr(self, slot):
            setattr(replica, slot, deepcopy(getattr(self, slot), memo))
    return replica


def _getstate(self):
    raise RuntimeError("Serialization of parametrized modules is only supported through state_dict(). See:\n"
                       "https://pytorch.org/tutorials/beginner/saving_loading_models.html"
                       "#saving-loading-a-general-checkpoint-for-inference-and-or-resuming-training")


def _inject_new_class(module):
    """Give ``module`` a class of its own, ``Parametrized<Class>``, to hold the properties."""
    cls = module.__class__
    dct = {"__getstate__": _getstate}
    if not hasattr(cls, "__deepcopy__"):
        dct["__deepcopy__"] = _default_deepcopy
    module.__class__ = type(f"Parametrized{cls.__name__}", (cls,), dct)


def _inject_property(module, tensor_name):
    """The property ``tensor_name`` on the module's own class (its tensor moved out already)."""
    if hasattr(module, tensor_name):
        raise AssertionError(f"Module already has an attribute named '{tensor_name}'")

    def get_parametrized(self):
        parametrization = self.parametrizations[tensor_name]
        if not _cache_enabled:
            return parametrization()
        key = (id(module), tensor_name)
        tensor = _cache.get(key)
        if tensor is None:
            tensor = _cache[key] = parametrization()
        return tensor

    def set_original(self, value):
        self.parametrizations[tensor_name].right_inverse(value)

    setattr(module.__class__, tensor_name, property(get_parametrized, set_original))


def _check_consistent(module, tensor_name, parametrization):
    """torch's checks of one more parametrization on a parametrized tensor: same dtype and shape out of
    ``forward`` and ``right_inverse``."""
    Y = getattr(module, tensor_name)
    X = parametrization(Y)
    if not isinstance(X, Tensor):
        raise ValueError(f"A parametrization must return a tensor. Got {type(X).__name__}.")
    if X.dtype != Y.dtype:
        raise ValueError("Registering a parametrization may not change the dtype of the tensor, unless the `unsafe` "
                         f"flag is enabled.\nmodule.{tensor_name}.dtype: {_dtype(Y)}\n"
                         f"parametrization(module.{tensor_name}).dtype: {_dtype(X)}")
    if X.shape != Y.shape:
        raise ValueError("Registering a parametrization may not change the shape of the tensor, unless the `unsafe` "
                         f"flag is enabled.\nmodule.{tensor_name}.shape: {size_repr(Y.shape)}\n"
                         f"parametrization(module.{tensor_name}).shape: {size_repr(X.shape)}")
    if not hasattr(parametrization, "right_inverse"):
        return
    try:
        Z = parametrization.right_inverse(X)
    except NotImplementedError:
        return
    if not isinstance(Z, Tensor):
        raise ValueError(f"parametrization.right_inverse must return a tensor. Got: {type(Z).__name__}")
    if Z.dtype != Y.dtype:
        raise ValueError("The tensor returned by parametrization.right_inverse must have the same dtype as "
                         f"module.{tensor_name}, unless the `unsafe` flag is enabled.\n"
                         f"module.{tensor_name}.dtype: {_dtype(Y)}\nreturned dtype: {_dtype(Z)}")
    if Z.shape != Y.shape:
        raise ValueError("The tensor returned by parametrization.right_inverse must have the same shape as "
                         f"module.{tensor_name}, unless the `unsafe` flag is enabled.\n"
                         f"module.{tensor_name}.shape: {size_repr(Y.shape)}\nreturned shape: {size_repr(Z.shape)}")


def register_parametrization(module, tensor_name, parametrization, *, unsafe=False):
    """Make ``module.<tensor_name>`` read as ``parametrization(original)`` (torch's).

    The first parametrization of a module gives it a ``parametrizations`` ModuleDict; the tensor's
    original value lives in ``module.parametrizations.<tensor_name>.original`` (or ``original0``,
    ``original1``, ... when ``right_inverse`` returns several tensors).  Registering more parametrizations
    on the same name stacks them; assigning to ``module.<tensor_name>`` calls their ``right_inverse``.

    Parameters
    ----------
    module : Module
        The module holding the parameter or buffer.
    tensor_name : str
        The name of the parameter or buffer (or of a tensor parametrized already).
    parametrization : Module
        Its ``forward`` maps the original to the parametrized tensor; an optional ``right_inverse`` maps back.
    unsafe : bool, default False
        Let the parametrization change dtype and shape (nothing is checked).

    Returns
    -------
    Module
        ``module``, whose class is now ``Parametrized<Class>``.

    Raises
    ------
    ValueError
        If ``module`` has no parameter, buffer or parametrized tensor ``tensor_name``, or (unless ``unsafe``)
        the parametrization changes its dtype or shape.

    Examples
    --------
    >>> import daskgrad.nn.utils.parametrize as P
    >>> class Symmetric(nn.Module):
    ...     def forward(self, X):
    ...         return X.triu() + X.triu(1).T
    >>> m = P.register_parametrization(nn.Linear(3, 3), "weight", Symmetric())
    >>> type(m).__name__, list(m.state_dict())
    ('ParametrizedLinear', ['bias', 'parametrizations.weight.original'])
    """
    parametrization.train(module.training)
    if is_parametrized(module, tensor_name):
        if not unsafe:
            _check_consistent(module, tensor_name, parametrization)
        module.parametrizations[tensor_name].append(parametrization)
        module.parametrizations[tensor_name].unsafe |= unsafe
    elif tensor_name in module._buffers or tensor_name in module._parameters:
        original = getattr(module, tensor_name)
        parametrizations = ParametrizationList([parametrization], original, unsafe=unsafe)
        delattr(module, tensor_name)
        if not is_parametrized(module):
            _inject_new_class(module)
            module.parametrizations = ModuleDict()
        _inject_property(module, tensor_name)
        module.parametrizations[tensor_name] = parametrizations
    else:
        raise ValueError(f"Module '{module}' does not have a parameter, a buffer, or a parametrized element with name "
                         f"'{tensor_name}'")
    return module


def is_parametrized(module, tensor_name=None):
    """Whether ``module`` has a parametrization on ``tensor_name`` (on anything when it is None).

    Parameters
    ----------
    module : Module
        The module to ask.
    tensor_name : str, optional
        The name of a parameter or buffer.

    Returns
    -------
    bool
    """
    parametrizations = getattr(module, "parametrizations", None)
    if parametrizations is None or not isinstance(parametrizations, ModuleDict):
        return False
    if tensor_name is None:
        return len(parametrizations) > 0
    return tensor_name in parametrizations


def remove_parametrizations(module, tensor_name, leave_parametrized=True):
    """Take the parametrizations off ``module.<tensor_name>`` (torch's).

    With ``leave_parametrized=True`` the tensor keeps its current parametrized value (written into the
    original Parameter object, so optimizers keep it); otherwise it goes back to ``original`` (possible only
    when there is one original tensor).  The last one removed gives the module its class back.

    Parameters
    ----------
    module : Module
        The parametrized module.
    tensor_name : str
        The parametrized tensor's name.
    leave_parametrized : bool, default True
        Keep the parametrized value rather than the original.

    Returns
    -------
    Module
        ``module``.

    Raises
    ------
    ValueError
        If ``tensor_name`` is not parametrized, or ``leave_parametrized=False`` with several original tensors.
    """
    if not is_parametrized(module, tensor_name):
        raise ValueError(f"Module {module} does not have a parametrization on {tensor_name}")
    parametrizations = module.parametrizations[tensor_name]
    if parametrizations.is_tensor:
        original = parametrizations.original
        if leave_parametrized:
            with no_grad():
                t = getattr(module, tensor_name)
                _maybe_set(original, t)
    else:
        if not leave_parametrized:
            raise ValueError("Cannot leave unparametrized (`leave_parametrized=False`) a tensor that is parametrized "
                             "in terms of a sequence of tensors.")
        t = getattr(module, tensor_name)
        original = Parameter(t) if t.requires_grad else t
    delattr(module.__class__, tensor_name)
    del module.parametrizations[tensor_name]
    _register_parameter_or_buffer(module, tensor_name, original)
    if not is_parametrized(module):
        delattr(module, "parametrizations")
        module.__class__ = module.__class__.__bases__[0]
    return module


def type_before_parametrizations(module):
    """The module's class before it was parametrized (its class if it is not).

    Parameters
    ----------
    module : Module

    Returns
    -------
    type
    """
    if is_parametrized(module):
        return module.__class__.__bases__[0]
    return type(module)


def transfer_parametrizations_and_params(from_module, to_module, tensor_name=None):
    """Register ``from_module``'s parametrizations (of ``tensor_name``, or of all) on ``to_module`` and share
    their original tensors; a name ``to_module`` lacks is made a Parameter first.

    Parameters
    ----------
    from_module : Module
        The parametrized module.
    to_module : Module
        The module to parametrize the same way.
    tensor_name : str, optional
        The one tensor to transfer; all when None.

    Returns
    -------
    Module
        ``to_module``.
    """
    if not is_parametrized(from_module):
        return to_module
    names = from_module.parametrizations if tensor_name is None else [tensor_name]
    for name in names:
        if not hasattr(to_module, name):
            setattr(to_module, name, Parameter(getattr(from_module, name)))
        for param_func in from_module.parametrizations[name]:
            register_parametrization(to_module, name, param_func)
        source, dest = from_module.parametrizations[name], to_module.parametrizations[name]
        if hasattr(source, "original"):
            dest.original = source.original
        else:
            num = 0
            while hasattr(source, f"original{num}"):
                setattr(dest, f"original{num}", getattr(source, f"original{num}"))
                num += 1
    return to_module
