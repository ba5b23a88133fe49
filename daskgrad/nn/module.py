"""``Module`` and ``Parameter``: torch's containers for trainable state.

>>> class Net(nn.Module):
...     def __init__(self):
...         super().__init__()
...         self.fc = nn.Linear(4, 2)   # registered as a child; its weight as "fc.weight"
...     def forward(self, x):
...         return self.fc(x)
"""
from __future__ import annotations

import contextvars
import functools
import warnings
import weakref
from collections import OrderedDict, namedtuple
from collections.abc import Mapping

import dask.array as da
import numpy as np

from .._modes import is_grad_enabled, no_grad
from ..function import Function
from ..graph import type_repr
from .._tensor import UNINITIALIZED, Tensor, _check_requires_grad, _Storage, zeros

def _typename(obj):
    """``torch.typename``: a tensor's type name, else the qualified name of the object or of its class."""
    if isinstance(obj, Tensor):
        return type_repr(obj.dtype)
    module, qualname = getattr(obj, "__module__", "") or "", ""
    if hasattr(obj, "__qualname__"):
        qualname = obj.__qualname__
    elif hasattr(obj, "__name__"):
        qualname = obj.__name__
    else:
        module, qualname = obj.__class__.__module__ or "", obj.__class__.__qualname__
    return qualname if module in {"", "builtins"} else f"{module}.{qualname}"


class RemovableHandle:
    """What the ``register_*_hook`` methods return: ``remove()`` unregisters the hook (also on leaving a
    ``with`` block), as ``torch.utils.hooks.RemovableHandle``."""

    next_id = 0

    def __init__(self, hooks_dict, *, extra_dict=None):
        self.hooks_dict_ref = weakref.ref(hooks_dict)
        self.id = RemovableHandle.next_id
        RemovableHandle.next_id += 1
        extras = [extra_dict] if isinstance(extra_dict, dict) else list(extra_dict or ())
        self.extra_dict_ref = tuple(weakref.ref(d) for d in extras)

    def remove(self):
        for ref in (self.hooks_dict_ref, *self.extra_dict_ref):
            table = ref()
            if table is not None:
                table.pop(self.id, None)

    def __enter__(self):
        return self

    def __exit__(self, type, value, tb):
        self.remove()


_DEVICES = ("cpu", "cuda")


def _as_dtype(value):
    """A dtype given as NumPy/daskgrad takes it (``"float64"``, ``np.float32``) or as a torch dtype."""
    if type(value).__module__.startswith("torch"):
        value = str(value).replace("torch.", "")
    return np.dtype(value)


def _as_device(value):
    """``"cpu"`` or ``"cuda"`` from a device string or ``torch.device``; the devices daskgrad has no chunks for
    are refused here rather than at the first op."""
    name = str(value)
    kind = name.split(":")[0]
    if kind not in _DEVICES:
        raise RuntimeError(f"daskgrad modules live on 'cpu' (NumPy chunks) or 'cuda' (cupy chunks); cannot move "
                           f"one to device '{name}'")
    return kind


def _is_device(value):
    if type(value).__name__ == "device" or isinstance(value, int):
        return True
    if isinstance(value, str):
        try:
            np.dtype(value)
        except TypeError:
            return True
    return False


def _parse_to(*args, device=None, dtype=None, non_blocking=False, **kwargs):
    """``(device, dtype)`` from ``Module.to``'s forms: ``(dtype)``, ``(device)``, ``(device, dtype)``,
    ``(tensor)`` or keywords.  ``non_blocking`` is a hint torch ignores on the host; it is accepted."""
    if kwargs:
        raise TypeError(f"to() got an unexpected keyword argument '{next(iter(kwargs))}'")
    if len(args) > 2:
        raise TypeError(f"to() received an invalid combination of arguments: {len(args)} positional arguments")
    for a in args:
        if isinstance(a, Tensor) or type(a).__module__.startswith("torch") and hasattr(a, "dtype") \
                and hasattr(a, "device"):
            device, dtype = a.device, a.dtype
        elif _is_device(a):
            device = a
        else:
            dtype = a
    if isinstance(device, int):
        device = f"cuda:{device}"
    device = None if device is None else _as_device(device)
    dtype = None if dtype is None else _as_dtype(dtype)
    if dtype is not None and dtype.kind not in "fc":
        raise TypeError(f"nn.Module.to only accepts floating point or complex dtypes, but got desired dtype={dtype}")
    if dtype is not None and dtype.kind == "c":
        warnings.warn("Complex modules are a new feature under active development whose design may change, and some "
                      "modules might not work as expected when using complex tensors as parameters or buffers.",
                      stacklevel=3)
    return device, dtype


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """torch's load_state_dict result: its repr (and str) says when every key matched."""

    __slots__ = ()

    def __repr__(self):
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


class Parameter(Tensor):
    """A leaf tensor that a :class:`Module` registers as trainable (``requires_grad=True``).
    Parameters are small: they live in one chunk."""

    __slots__ = ()

    def __new__(cls, data=None, requires_grad=True):
        if data is None:  # Tensor._make allocating one
            return Tensor.__new__(cls)
        if isinstance(data, Tensor):
            arr = data.array
        elif isinstance(data, da.Array):
            arr = data
        else:
            arr = da.from_array(data if hasattr(data, "__array_function__") else np.asarray(data), chunks=-1,
                                asarray=False)
        _check_requires_grad(arr.dtype, requires_grad)
        t = Tensor.__new__(cls)
        t._init(_Storage(arr.rechunk(arr.shape)), requires_grad=bool(requires_grad))
        return t

    def __init__(self, data=None, requires_grad=True):
        pass  # everything happens in __new__

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()

    def __deepcopy__(self, memo):
        """torch's: a new parameter of the same values and ``requires_grad``; its ``.grad`` and the user's
        attributes are not copied (``copy.deepcopy(model)`` has no gradients)."""
        if id(self) not in memo:
            memo[id(self)] = type(self)._make(self.array, requires_grad=self.requires_grad)
        return memo[id(self)]


_UNINIT_SHAPE = ("Can't access the shape of an uninitialized parameter or buffer. This error usually happens in "
                 "`load_state_dict` when trying to load an uninitialized parameter into an initialized one. Call "
                 "`forward` to initialize the parameters before accessing their attributes.")


class UninitializedTensorMixin:
    """What torch's ``UninitializedParameter`` and ``UninitializedBuffer`` share: no data yet (an empty
    one-chunk array keeps the dtype and device ``materialize`` will use), no shape, and no use in an op."""

    __slots__ = ()

    def materialize(self, shape, device=None, dtype=None):
        """Give the tensor ``shape`` (zeros; torch's are uninitialised memory) on ``device`` with ``dtype``
        (by default its own), and make it a :class:`Parameter` (a plain Tensor for a buffer), in place."""
        value = self._storage.value
        new = zeros(*shape, dtype=value.dtype if dtype is None else _as_dtype(dtype), chunks=-1,
                    device=self.device if device is None else _as_device(device))
        Tensor.data.fset(self, new)
        object.__setattr__(self, "__class__", self.cls_to_become)

    @property
    def shape(self):
        raise RuntimeError(_UNINIT_SHAPE)

    def share_memory_(self):
        raise RuntimeError("Can't share memory on an uninitialized parameter or buffer. Call `forward` to initialize "
                           "the parameters before calling `module.share_memory()`.")

    def __repr__(self):
        return f"<{type(self).__name__}>"

    def __deepcopy__(self, memo):
        if id(self) not in memo:
            memo[id(self)] = type(self)(self.requires_grad, dtype=self.dtype)
        return memo[id(self)]

    def __reduce_ex__(self, proto):
        return (type(self), (self.requires_grad,))


def _empty_storage(device, dtype):
    return _Storage(zeros(0, dtype=None if dtype is None else _as_dtype(dtype), chunks=-1, device=device).array)


class UninitializedParameter(UninitializedTensorMixin, Parameter):
    """A :class:`Parameter` whose shape is not known yet (torch's ``nn.parameter.UninitializedParameter``):
    a lazy module's, until its first forward calls :meth:`materialize`."""

    __slots__ = ()
    cls_to_become = Parameter

    def __new__(cls, requires_grad=True, device=None, dtype=None):
        t = Tensor.__new__(cls)
        t._init(_empty_storage(device, dtype), requires_grad=bool(requires_grad))
        return t

    def __init__(self, requires_grad=True, device=None, dtype=None):
        pass  # everything happens in __new__


class UninitializedBuffer(UninitializedTensorMixin, Tensor):
    """A buffer whose shape is not known yet (torch's ``nn.parameter.UninitializedBuffer``); it becomes a
    plain Tensor when materialized."""

    __slots__ = ()
    cls_to_become = Tensor

    def __new__(cls, requires_grad=False, device=None, dtype=None):
        t = Tensor.__new__(cls)
        t._init(_empty_storage(device, dtype), requires_grad=bool(requires_grad))
        return t

    def __init__(self, requires_grad=False, device=None, dtype=None):
        pass  # everything happens in __new__


UNINITIALIZED.update((UninitializedParameter, UninitializedBuffer))  # (an op on one raises, as torch's)


def is_lazy(param):
    """Whether ``param`` is an :class:`UninitializedParameter` or an :class:`UninitializedBuffer`."""
    return isinstance(param, UninitializedTensorMixin)


def _host(value):
    """A state_dict value as something ``copy_`` takes: daskgrad Tensors, NumPy/cupy arrays as they
    are; a torch tensor through NumPy (it is on the host already)."""
    if type(value).__module__.startswith("torch"):
        return value.detach().cpu().numpy()
    return value


def _on_device_of(value, param):
    """``value`` as a one-chunk tensor on ``param``'s device: loading a checkpoint saved on the host
    into a GPU model is an explicit copy the user asked for, as torch's load_state_dict does."""
    value = _host(value)
    t = value if isinstance(value, Tensor) else Tensor._make(da.from_array(value, chunks=-1, asarray=False))
    return t if t.device == param.device else t.to(param.device)


class _WrappedHook:
    """A load_state_dict pre-hook, given its module first when registered ``with_module`` (held weakly, as
    torch's, so that the hook does not keep the module alive)."""

    def __init__(self, hook, module=None):
        self.hook = hook
        functools.update_wrapper(self, hook)
        self.with_module = module is not None
        self.module = weakref.ref(module) if module is not None else None

    def __call__(self, *args, **kwargs):
        if self.with_module:
            module = self.module()
            if module is None:
                raise RuntimeError("You are trying to call the hook of a dead Module!")
            return self.hook(module, *args, **kwargs)
        return self.hook(*args, **kwargs)

    def __getstate__(self):
        return {"hook": self.hook, "with_module": self.with_module,
                "module": self.module() if self.with_module else None}

    def __setstate__(self, state):
        self.hook, self.with_module = state["hook"], state["with_module"]
        self.module = weakref.ref(state["module"]) if self.with_module else None


# copies that load_state_dict has checked but not made yet: made together once nothing failed
_PENDING_COPIES = contextvars.ContextVar("daskgrad_pending_copies", default=None)


def _copy_pending(copies):
    """Make the copies load_state_dict checked (and forget them)."""
    with no_grad():
        for p, value in copies:
            p.copy_(value)
    copies.clear()


class _LazyLoad:
    """Marks a lazy module for ``load_state_dict`` (``nn.modules.lazy.LazyModuleMixin`` subclasses it)."""


def _zero_in_place(g):
    """torch's ``zero_grad(set_to_none=False)`` of one ``.grad``: out of any graph, then zeroed in place (lazily)."""
    if g.grad_fn is not None:
        g.detach_()
    else:
        g.requires_grad_(False)
    g.zero_()


class BackwardHookFunction(Function):
    """torch's ``nn.modules._functions.BackwardHookFunction``: the identity on a module's tensors (its
    inputs, or its outputs), one node whose hooks see all their gradients at once."""

    @staticmethod
    def forward(ctx, *args):
        ctx.mark_non_differentiable(*[a for a in args if not a.requires_grad])
        ctx.set_materialize_grads(False)  # (an output that gets no gradient: None, as torch's node sees it)
        return args

    @staticmethod
    def backward(ctx, *args):
        return args


class _BackwardHookFunctionOne(Function):
    """:class:`BackwardHookFunction` of one tensor: a node of its own, of any floating or complex dtype (a Function
    with several outputs packs real ones only)."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, g):
        return g


_BackwardHookFunctionOne.__name__ = "BackwardHookFunction"  # (torch's node name, BackwardHookFunctionBackward)


class _BackwardHook:
    """torch's ``torch.utils.hooks.BackwardHook``, for one call of a module: the full backward hooks run
    when the gradients of the module's (positional) inputs are computed, with those of its outputs,
    which the backward pre-hooks saw (and could replace) first; a hook's non-None result replaces the
    gradients.  Non-tensor arguments are ``None`` in what the hooks see."""

    def __init__(self, module, user_hooks, user_pre_hooks):
        self.user_hooks, self.user_pre_hooks, self.module = user_hooks, user_pre_hooks, module
        self.grad_outputs, self.n_outputs, self.output_tensors_index = None, -1, None
        self.n_inputs, self.input_tensors_index = -1, None

    @staticmethod
    def _pack_with_none(indices, values, size):
        res = [None] * size
        for idx, val in zip(indices, values):
            res[idx] = val
        return tuple(res)

    def _set_user_hook(self, node):
        def hook(grad_input, _):
            if self.grad_outputs is None:  # (the gradient reached the inputs without passing the outputs:
                return None                # a double backward)
            res = self._pack_with_none(self.input_tensors_index, grad_input, self.n_inputs)
            for user_hook in self.user_hooks:
                out = user_hook(self.module, res, self.grad_outputs)
                if out is None:
                    continue
                if len(out) != len(res):
                    raise RuntimeError("Backward hook returned an invalid number of grad_input, "
                                       f"got {len(out)}, but expected {len(res)}")
                res = out
            self.grad_outputs = None
            return tuple(res[i] for i in self.input_tensors_index)

        node.register_hook(hook)

    def _apply_on_tensors(self, fn, args):
        tensors_idx = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        tensors = [args[i] for i in tensors_idx]
        if not (any(t.requires_grad for t in tensors) and is_grad_enabled()):
            return args, None
        if len(tensors) == 1:
            new = (_BackwardHookFunctionOne.apply(tensors[0]),)
            fn(new[0].grad_fn)
        else:
            new = BackwardHookFunction.apply(*tensors)
            nodes = [t.grad_fn for t in new if t.grad_fn is not None
                     and t.grad_fn.name() == "BackwardHookFunctionBackward"]
            if not nodes:
                raise NotImplementedError("backward hooks of a module whose several tensors that require grad are "
                                          "complex are not supported (a Function with several outputs packs real "
                                          "ones only)")
            fn(nodes[0].next_functions[0][0])  # (the Function's one node, which its outputs' nodes slice)
        arg_list = list(args)
        for idx, val in zip(tensors_idx, new):
            arg_list[idx] = val
        return (tuple(arg_list) if type(args) is tuple else type(args)(*arg_list)), tensors_idx

    def setup_input_hook(self, args):
        res, self.input_tensors_index = self._apply_on_tensors(self._set_user_hook, args)
        self.n_inputs = len(args)
        return res

    def setup_output_hook(self, args):
        def fn(node):
            def hook(grad_output, _):  # (the identity's gradients: those of the module's outputs)
                self.grad_outputs = self._pack_with_none(self.output_tensors_index, grad_output, self.n_outputs)
                if self.user_pre_hooks:
                    expected_len = len(self.grad_outputs)
                    for user_pre_hook in self.user_pre_hooks:
                        hook_grad_outputs = user_pre_hook(self.module, self.grad_outputs)
                        if hook_grad_outputs is None:
                            continue
                        actual_len = len(hook_grad_outputs)
                        if actual_len != expected_len:
                            raise RuntimeError("Backward pre hook returned an invalid number of grad_output, "
                                               f"got {actual_len}, but expected {expected_len}")
                        self.grad_outputs = hook_grad_outputs
                local_grad_outputs = self.grad_outputs
                if self.input_tensors_index is None:  # no input requires grad: the hooks run here
                    warnings.warn("Full backward hook is firing when gradients are computed with respect to module "
                                  "outputs since no inputs require gradients. See https://docs.pytorch.org/docs/"
                                  "main/generated/torch.nn.Module.html#torch.nn.Module.register_full_backward_hook "
                                  "for more details.", stacklevel=5)
                    grad_inputs = self._pack_with_none([], [], self.n_inputs)
                    for user_hook in self.user_hooks:
                        res = user_hook(self.module, grad_inputs, self.grad_outputs)
                        if res is not None and not (isinstance(res, tuple) and all(el is None for el in res)):
                            raise RuntimeError("Backward hook for Modules where no input requires gradient should "
                                               "always return None or None for all gradients.")
                    self.grad_outputs = None
                if local_grad_outputs is not None:
                    return tuple(local_grad_outputs[i] for i in self.output_tensors_index)
                return None

            node.register_hook(hook)

        is_tuple = isinstance(args, tuple)
        args = args if is_tuple else (args,)
        res, self.output_tensors_index = self._apply_on_tensors(fn, args)
        self.n_outputs = len(args)
        return res if is_tuple else res[0]


class Module:
    """Base class of layers and models: attributes that are Parameters or Modules get registered."""

    training: bool
    _version = 1  # (torch's: recorded in a state_dict's ``_metadata``, read by load_state_dict hooks)

    def __init__(self):
        for name, value in (("training", True), ("_parameters", OrderedDict()), ("_buffers", OrderedDict()),
                            ("_non_persistent_buffers_set", set()), ("_modules", OrderedDict()),
                            ("_forward_pre_hooks", OrderedDict()), ("_forward_pre_hooks_with_kwargs", OrderedDict()),
                            ("_forward_hooks", OrderedDict()), ("_forward_hooks_with_kwargs", OrderedDict()),
                            ("_forward_hooks_always_called", OrderedDict()), ("_state_dict_hooks", OrderedDict()),
                            ("_state_dict_pre_hooks", OrderedDict()), ("_load_state_dict_pre_hooks", OrderedDict()),
                            ("_load_state_dict_post_hooks", OrderedDict()), ("_backward_pre_hooks", OrderedDict()),
                            ("_backward_hooks", OrderedDict()), ("_is_full_backward_hook", None)):
            object.__setattr__(self, name, value)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required "forward" function')

    # ------------------------------------------------------------------- hooks
    def __call__(self, *args, **kwargs):
        """``forward`` between the forward pre-hooks and the forward hooks, as torch's ``_call_impl``; with
        backward hooks, the inputs and the result pass through :class:`BackwardHookFunction`."""
        d = self.__dict__
        if not (d.get("_forward_pre_hooks") or d.get("_forward_hooks") or d.get("_backward_hooks")
                or d.get("_backward_pre_hooks")):
            return self.forward(*args, **kwargs)
        called, result = set(), None
        try:
            full, non_full = self._get_backward_hooks()
            pre = list(d["_backward_pre_hooks"].values()) if d.get("_backward_pre_hooks") else []
            args, kwargs = self._run_pre_hooks(args, kwargs)
            bw_hook = None
            if full or pre:
                bw_hook = _BackwardHook(self, full, pre)
                args = bw_hook.setup_input_hook(args)
            result = self.forward(*args, **kwargs)
            for hook_id, hook in self._forward_hooks.items():
                called.add(hook_id)
                out = hook(self, args, kwargs, result) if hook_id in self._forward_hooks_with_kwargs else \
                    hook(self, args, result)
                result = result if out is None else out
            if bw_hook:
                if not isinstance(result, (Tensor, tuple)):
                    warnings.warn("For backward hooks to be called, module output should be a Tensor or a tuple of "
                                  f"Tensors but received {type(result)}", stacklevel=2)
                result = bw_hook.setup_output_hook(result)
            if non_full:
                var = result
                while not isinstance(var, Tensor):
                    var = next(v for v in var.values() if isinstance(v, Tensor)) if isinstance(var, dict) else var[0]
                if var.grad_fn is not None:
                    for hook in non_full:
                        var.grad_fn.register_hook(_WrappedHook(hook, self))
                    self._maybe_warn_non_full_backward_hook(args, result, var.grad_fn)
            return result
        except Exception:
            self._run_always_called(called, args, kwargs, result)
            raise

    def _get_backward_hooks(self):
        """(full backward hooks, the deprecated others): the module's, of the kind it registered."""
        d = self.__dict__
        hooks = list(d["_backward_hooks"].values()) if d.get("_backward_hooks") else []
        full = d.get("_is_full_backward_hook")
        return (hooks if full is True else []), (hooks if full is False else [])

    def _maybe_warn_non_full_backward_hook(self, inputs, result, grad_fn):
        """torch's FutureWarnings where a deprecated backward hook would miss gradients."""
        if not isinstance(result, Tensor):
            if not (isinstance(result, tuple) and all(isinstance(r, Tensor) for r in result)):
                warnings.warn("Using non-full backward hooks on a Module that does not return a single Tensor or a "
                              "tuple of Tensors is deprecated and will be removed in future versions. This hook will "
                              "be missing some of the grad_output. Please use register_full_backward_hook to get the "
                              "documented behavior.", FutureWarning, stacklevel=3)
                return
        else:
            result = (result,)
        if not isinstance(inputs, Tensor):
            if not (isinstance(inputs, tuple) and all(isinstance(i, Tensor) for i in inputs)):
                warnings.warn("Using non-full backward hooks on a Module that does not take as input a single Tensor "
                              "or a tuple of Tensors is deprecated and will be removed in future versions. This hook "
                              "will be missing some of the grad_input. Please use register_full_backward_hook to get "
                              "the documented behavior.", FutureWarning, stacklevel=3)
                return
        else:
            inputs = (inputs,)
        out_grad_fn = {r.grad_fn for r in result if r.grad_fn is not None}
        if len(out_grad_fn) == 0 or (len(out_grad_fn) == 1 and grad_fn not in out_grad_fn):
            warnings.warn("Using a non-full backward hook when outputs are nested in python data structure is "
                          "deprecated and will be removed in future versions. This hook will be missing some "
                          "grad_output.", FutureWarning, stacklevel=3)
        elif len(out_grad_fn) > 1:
            warnings.warn("Using a non-full backward hook when outputs are generated by different autograd Nodes is "
                          "deprecated and will be removed in future versions. This hook will be missing some "
                          "grad_output. Please use register_full_backward_hook to get the documented behavior.",
                          FutureWarning, stacklevel=3)
        else:
            inputs_grad_fn = {i.grad_fn for i in inputs if i.grad_fn is not None}
            next_functions = {n[0] for n in grad_fn.next_functions}
            if inputs_grad_fn != next_functions:
                warnings.warn("Using a non-full backward hook when the forward contains multiple autograd Nodes is "
                              "deprecated and will be removed in future versions. This hook will be missing some "
                              "grad_input. Please use register_full_backward_hook to get the documented behavior.",
                              FutureWarning, stacklevel=3)

    def register_full_backward_pre_hook(self, hook, prepend=False):
        """``hook(module, grad_output) -> tuple of Tensors or None`` when the gradients of the module's outputs
        are computed; what it returns (not None) replaces ``grad_output`` (torch's
        ``Module.register_full_backward_pre_hook``; ``None`` for outputs that are not tensors)."""
        table = self._hooks("_backward_pre_hooks")
        handle = RemovableHandle(table)
        table[handle.id] = hook
        if prepend:
            table.move_to_end(handle.id, last=False)
        return handle

    def register_backward_hook(self, hook):
        """The deprecated form of :meth:`register_full_backward_hook`, as torch's: ``hook(module, grad_input,
        grad_output)`` on the node of the module's (first) output, whose inputs' gradients it sees."""
        if self.__dict__.get("_is_full_backward_hook") is True:
            raise RuntimeError("Cannot use both regular backward hooks and full backward hooks on a single Module. "
                               "Please use only one of them.")
        object.__setattr__(self, "_is_full_backward_hook", False)
        table = self._hooks("_backward_hooks")
        handle = RemovableHandle(table)
        table[handle.id] = hook
        return handle

    def register_full_backward_hook(self, hook, prepend=False):
        """``hook(module, grad_input, grad_output) -> tuple of Tensors or None`` when the gradients of the
        module's positional inputs are computed (or of its outputs, where no input requires grad); what it returns
        (not None) replaces ``grad_input`` (torch's ``Module.register_full_backward_hook``; ``None`` for arguments
        that are not tensors)."""
        if self.__dict__.get("_is_full_backward_hook") is False:
            raise RuntimeError("Cannot use both regular backward hooks and full backward hooks on a single Module. "
                               "Please use only one of them.")
        object.__setattr__(self, "_is_full_backward_hook", True)
        table = self._hooks("_backward_hooks")
        handle = RemovableHandle(table)
        table[handle.id] = hook
        if prepend:
            table.move_to_end(handle.id, last=False)
        return handle

    def _run_pre_hooks(self, args, kwargs):
        for hook_id, hook in self._forward_pre_hooks.items():
            if hook_id in self._forward_pre_hooks_with_kwargs:
                out = hook(self, args, kwargs)
                if out is not None:
                    if not (isinstance(out, tuple) and len(out) == 2):
                        raise RuntimeError("forward pre-hook must return None or a tuple of (new_args, new_kwargs), "
                                           f"but got {out}.")
                    args, kwargs = out
            else:
                out = hook(self, args)
                if out is not None:
                    args = out if isinstance(out, tuple) else (out,)
        return args, kwargs

    def _run_always_called(self, called, args, kwargs, result):
        """After an error in forward or a hook: the ``always_call`` hooks not run yet, their own errors
        turned into warnings (torch's texts)."""
        for hook_id, hook in self._forward_hooks.items():
            if hook_id in self._forward_hooks_always_called and hook_id not in called:
                try:
                    out = hook(self, args, kwargs, result) if hook_id in self._forward_hooks_with_kwargs else \
                        hook(self, args, result)
                    result = result if out is None else out
                except Exception as e:
                    warnings.warn("module forward hook with ``always_call=True`` raised an exception that was "
                                  f"silenced as another error was raised in forward: {str(e)}", stacklevel=3)

    def register_forward_pre_hook(self, hook, *, prepend=False, with_kwargs=False):
        """``hook(module, args)`` (or ``hook(module, args, kwargs)``) before ``forward``; what it returns
        (not None) replaces the arguments."""
        handle = RemovableHandle(self._forward_pre_hooks, extra_dict=self._forward_pre_hooks_with_kwargs)
        self._forward_pre_hooks[handle.id] = hook
        if with_kwargs:
            self._forward_pre_hooks_with_kwargs[handle.id] = True
        if prepend:
            self._forward_pre_hooks.move_to_end(handle.id, last=False)
        return handle

    def register_forward_hook(self, hook, *, prepend=False, with_kwargs=False, always_call=False):
        """``hook(module, args, output)`` (or ``hook(module, args, kwargs, output)``) after ``forward``; what it
        returns (not None) replaces the output."""
        handle = RemovableHandle(self._forward_hooks,
                                 extra_dict=[self._forward_hooks_with_kwargs, self._forward_hooks_always_called])
        self._forward_hooks[handle.id] = hook
        if with_kwargs:
            self._forward_hooks_with_kwargs[handle.id] = True
        if always_call:
            self._forward_hooks_always_called[handle.id] = True
        if prepend:
            self._forward_hooks.move_to_end(handle.id, last=False)
        return handle

    def _hooks(self, table):
        """One of the hook tables (a module unpickled from before it existed has none yet)."""
        if table not in self.__dict__:
            object.__setattr__(self, table, OrderedDict())
        return self.__dict__[table]

    def register_state_dict_pre_hook(self, hook):
        """``hook(module, prefix, keep_vars)`` before :meth:`state_dict` collects this module's state."""
        table = self._hooks("_state_dict_pre_hooks")
        handle = RemovableHandle(table)
        table[handle.id] = hook
        return handle

    def register_state_dict_post_hook(self, hook):
        """``hook(module, state_dict, prefix, local_metadata)`` after :meth:`state_dict` collected this module's
        state and its children's; it edits ``state_dict`` in place (returning anything else than None raises)."""
        hook._from_public_api = True
        return self._add_state_dict_hook(hook)

    def _register_state_dict_hook(self, hook):
        """torch's private form of :meth:`register_state_dict_post_hook`: what the hook returns (not None)
        replaces the state dict (the root module's).  A function registered through the public form raises, as
        torch's."""
        if getattr(hook, "_from_public_api", False):
            raise RuntimeError("Cannot register the same function as the state dict post hook that was "
                               "previously registered via register_state_dict_post_hook")
        return self._add_state_dict_hook(hook)

    def _add_state_dict_hook(self, hook):
        table = self._hooks("_state_dict_hooks")
        handle = RemovableHandle(table)
        table[handle.id] = hook
        return handle

    def _register_load_state_dict_pre_hook(self, hook, with_module=False):
        """``hook(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs)`` (the
        module first with ``with_module``) before :meth:`load_state_dict` reads this module's keys; it may edit
        ``state_dict`` (the load's own copy) and the lists."""
        table = self._hooks("_load_state_dict_pre_hooks")
        handle = RemovableHandle(table)
        table[handle.id] = _WrappedHook(hook, self if with_module else None)
        return handle

    def register_load_state_dict_pre_hook(self, hook):
        """``hook(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs)``
        before :meth:`load_state_dict` reads this module's keys."""
        return self._register_load_state_dict_pre_hook(hook, with_module=True)

    def register_load_state_dict_post_hook(self, hook):
        """``hook(module, incompatible_keys)`` after :meth:`load_state_dict` loaded this module and its children;
        it may edit ``incompatible_keys.missing_keys`` / ``unexpected_keys`` in place (which decides whether a
        strict load raises) and must return None."""
        table = self._hooks("_load_state_dict_post_hooks")
        handle = RemovableHandle(table)
        table[handle.id] = hook
        return handle

    # ------------------------------------------------------------ registration
    def __setattr__(self, name, value):
        d = self.__dict__
        params, modules, buffers = d.get("_parameters"), d.get("_modules"), d.get("_buffers")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            self._remove_name(name, d, buffers, modules, self._non_persistent_buffers_set)
            if name not in params and hasattr(type(self), name):  # a class attribute (a parametrization's
                raise KeyError(f"attribute '{name}' already exists")  # property) would hide it, as torch's
            params[name] = value
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{_typename(value)}' as parameter '{name}' "
                                "(torch.nn.Parameter or None expected)")
            params[name] = None
        elif isinstance(value, Module):
            if modules is None:
                raise AttributeError("cannot assign module before Module.__init__() call")
            self._remove_name(name, d, params, buffers, self._non_persistent_buffers_set)
            modules[name] = value
        elif modules is not None and name in modules:
            if value is not None:
                raise TypeError(f"cannot assign '{_typename(value)}' as child module '{name}' "
                                "(torch.nn.Module or None expected)")
            modules[name] = None
        elif buffers is not None and name in buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign '{_typename(value)}' as buffer '{name}' "
                                "(torch.nn.Buffer, torch.Tensor or None expected)")
            buffers[name] = value
        else:
            object.__setattr__(self, name, value)

    @staticmethod
    def _remove_name(name, *tables):
        for t in tables:
            if t is not None and name in t:
                t.discard(name) if isinstance(t, set) else t.pop(name)

    def __getattr__(self, name):
        for table in ("_parameters", "_buffers", "_modules"):
            d = self.__dict__.get(table)
            if d is not None and name in d:
                return d[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        for table in ("_parameters", "_buffers", "_modules"):
            if name in self.__dict__.get(table, ()):
                del self.__dict__[table][name]
                self.__dict__.get("_non_persistent_buffers_set", set()).discard(name)
                return
        object.__delattr__(self, name)

    def _check_new_name(self, kind, table, name):
        """torch's checks of a name given to ``register_parameter`` / ``register_buffer``."""
        if table not in self.__dict__:
            raise AttributeError(f"cannot assign {kind} before Module.__init__() call")
        if not isinstance(name, str):
            raise TypeError(f"{kind} name should be a string. Got {_typename(name)}")
        if "." in name:
            raise KeyError(f'{kind} name can\'t contain "."')
        if name == "":
            raise KeyError(f'{kind} name can\'t be empty string ""')
        if hasattr(self, name) and name not in self.__dict__[table]:
            raise KeyError(f"attribute '{name}' already exists")

    def register_parameter(self, name, param):
        self._check_new_name("parameter", "_parameters", name)
        if param is None:
            self._parameters[name] = None
        elif not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{_typename(param)}' object to parameter '{name}' "
                            "(torch.nn.Parameter or None required)")
        else:
            setattr(self, name, param)

    def register_buffer(self, name, tensor, persistent=True):
        """A tensor of the module's state that is not trained (running statistics, masks): in ``state_dict``
        unless ``persistent=False``, converted by ``to``/``double``/``float``, not in ``parameters()``."""
        self._check_new_name("buffer", "_buffers", name)
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{_typename(tensor)}' object to buffer '{name}' "
                            "(torch Tensor or None required)")
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def add_module(self, name, module):
        if not isinstance(module, Module) and module is not None:
            raise TypeError(f"{_typename(module)} is not a Module subclass")
        if not isinstance(name, str):
            raise TypeError(f"module name should be a string. Got {_typename(name)}")
        if hasattr(self, name) and name not in self._modules:
            raise KeyError(f"attribute '{name}' already exists")
        if "." in name:
            raise KeyError(f'module name can\'t contain ".", got: {name}')
        if name == "":
            raise KeyError('module name can\'t be empty string ""')
        self._modules[name] = module

    register_module = add_module

    # ----------------------------------------------------------------- walking
    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        memo = set() if memo is None else memo
        if self in memo:
            return
        if remove_duplicate:
            memo.add(self)
        yield prefix, self
        for name, m in self._modules.items():
            if m is not None:
                yield from m.named_modules(memo, prefix + ("." if prefix else "") + name, remove_duplicate)

    def modules(self, remove_duplicate=True):
        return (m for _, m in self.named_modules(remove_duplicate=remove_duplicate))

    def named_children(self):
        memo = set()
        for name, m in self._modules.items():
            if m is not None and m not in memo:
                memo.add(m)
                yield name, m

    def children(self):
        return (m for _, m in self.named_children())

    def _named_members(self, attr, prefix, recurse, remove_duplicate):
        seen = set()  # ids: a Tensor's == is elementwise
        mods = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse else [(prefix, self)]
        for mprefix, m in mods:
            for name, p in getattr(m, attr).items():
                if p is None or id(p) in seen:
                    continue
                if remove_duplicate:
                    seen.add(id(p))
                yield mprefix + ("." if mprefix else "") + name, p

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        return self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse=True):
        return (p for _, p in self.named_parameters(recurse=recurse))

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
        return self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse=True):
        return (b for _, b in self.named_buffers(recurse=recurse))

    def apply(self, fn):
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    # ------------------------------------------------------------------ modes
    def train(self, mode=True):
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, requires_grad=True):
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none=True):
        """Forget gradients; lazy.  ``set_to_none=False`` zeroes each ``.grad`` in place, as torch's: a
        reference to it sees the zeros, then what the next backward adds."""
        for p in self.parameters():
            if p.grad is not None:
                if set_to_none:
                    p.grad = None
                else:
                    _zero_in_place(p.grad)

    def _apply(self, fn):
        """``fn`` on every parameter (in place: optimizers keep their references, as with torch's default),
        its gradient, and every buffer (replaced), through the children first."""
        for m in self.children():
            m._apply(fn)
        with no_grad():
            for p in self._parameters.values():
                if p is None:
                    continue
                new = fn(p.detach())
                if new.array is not p._storage.value:  # an unchanged value is not rewritten (nor recomputed)
                    p.data = new
                if p.grad is not None:
                    p.grad = fn(p.grad.detach())
            for name, b in self._buffers.items():
                if is_lazy(b):  # converted in place: it stays uninitialized, as torch's
                    b.data = fn(b.detach())
                elif b is not None:
                    self._buffers[name] = fn(b)
        return self

    def to(self, *args, **kwargs):
        """``to(dtype)``, ``to(device)``, ``to(device, dtype)``, ``to(tensor)`` or keywords, as torch's: floating
        parameters and buffers take the dtype, all take the device (``"cpu"``: NumPy chunks, ``"cuda"``: cupy)."""
        device, dtype = _parse_to(*args, **kwargs)

        def convert(t):
            if dtype is not None and t.dtype.kind in "fc":
                t = t.astype(dtype)
            return t if device is None else t.to(device)
        return self._apply(convert)

    def cpu(self):
        return self.to("cpu")

    def cuda(self, device=None):
        return self.to("cuda" if device is None else device)

    def double(self):
        return self._apply(lambda t: t.astype(np.float64) if t.dtype.kind == "f" else t)

    def float(self):
        return self._apply(lambda t: t.astype(np.float32) if t.dtype.kind == "f" else t)

    def half(self):
        return self._apply(lambda t: t.astype(np.float16) if t.dtype.kind == "f" else t)

    # -------------------------------------------------------------- state dict
    def state_dict(self, destination=None, prefix="", keep_vars=False):
        """Name -> parameter, detached (sharing storage, as torch's) unless ``keep_vars``.  As in torch, a
        tied parameter or a shared module is listed under each of its names, the dict's ``_metadata`` holds
        each module's version, and the state_dict hooks run around each module's part."""
        out = destination
        if out is None:
            out = OrderedDict()
            out._metadata = OrderedDict()
        local_metadata = {"version": self._version}
        if hasattr(out, "_metadata"):
            out._metadata[prefix[:-1]] = local_metadata
        for hook in self._hooks("_state_dict_pre_hooks").values():
            hook(self, prefix, keep_vars)
        self._save_to_state_dict(out, prefix, keep_vars)
        for name, m in self._modules.items():
            if m is not None:
                m.state_dict(destination=out, prefix=prefix + name + ".", keep_vars=keep_vars)
        for hook in self._hooks("_state_dict_hooks").values():
            result = hook(self, out, prefix, local_metadata)
            if not getattr(hook, "_from_public_api", False):
                out = out if result is None else result
            elif result is not None:
                raise RuntimeError("state_dict post-hook must return None")
        return out

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        """torch's: this module's own parameters and persistent buffers (not its children's) into
        ``destination`` under ``prefix``; :meth:`state_dict` calls it on each module, and a subclass may
        override it (with :meth:`_load_from_state_dict`) to store its state in another form."""
        for name, p in self._own_state().items():
            destination[prefix + name] = p if keep_vars or is_lazy(p) else p.detach()

    def load_state_dict(self, state_dict, strict=True, assign=False):
        """Copy values (daskgrad Tensors, NumPy/cupy arrays or torch tensors) into the parameters, lazily, as
        torch's: module by module, each one's load_state_dict pre-hooks first, its post-hooks after its children.
        All or nothing where torch is not: every value is checked before the first copy (torch copies the ones
        that fit, then raises), except that the values checked so far are copied before a post-hook runs (it
        may read them) when nothing failed yet.  Copying in place keeps tied parameters tied."""
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        missing, unexpected, errors = [], [], []
        metadata = getattr(state_dict, "_metadata", None)
        state_dict = OrderedDict(state_dict)  # the hooks edit the load's copy, never the caller's dict
        if metadata is not None:
            state_dict._metadata = metadata
        pending = []
        token = _PENDING_COPIES.set(pending)
        try:
            self._load_tree(state_dict, "", metadata, assign, (missing, unexpected, errors), pending)
        finally:
            _PENDING_COPIES.reset(token)
        if strict:
            if unexpected:
                errors.insert(0, "Unexpected key(s) in state_dict: {}. ".format(
                    ", ".join(f'"{k}"' for k in unexpected)))
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: {}. ".format(", ".join(f'"{k}"' for k in missing)))
        if errors:
            raise RuntimeError("Error(s) in loading state_dict for {}:\n\t{}".format(type(self).__name__,
                                                                                      "\n\t".join(errors)))
        _copy_pending(pending)
        return _IncompatibleKeys(missing, unexpected)

    def _load_tree(self, local_state_dict, prefix, metadata, assign, lists, pending):
        """torch's ``load``: this module's keys, then each child's (a dict of the keys under its name), then
        this module's post-hooks."""
        local_metadata = {} if metadata is None else metadata.get(prefix[:-1], {})
        if assign:
            local_metadata["assign_to_params_buffers"] = assign
        self._load_from_state_dict(local_state_dict, prefix, local_metadata, True, *lists)
        for name, child in self._modules.items():
            if child is not None:
                child_prefix = prefix + name + "."
                child_state_dict = {k: v for k, v in local_state_dict.items() if k.startswith(child_prefix)}
                child._load_tree(child_state_dict, child_prefix, metadata, assign, lists, pending)
        post_hooks = self._hooks("_load_state_dict_post_hooks")
        if post_hooks and not lists[2]:
            _copy_pending(pending)
        incompatible_keys = _IncompatibleKeys(lists[0], lists[1])
        for hook in post_hooks.values():
            if hook(self, incompatible_keys) is not None:
                raise AssertionError("Hooks registered with ``register_load_state_dict_post_hook`` are not expected "
                                     "to return new values, if incompatible_keys need to be modified, it should be "
                                     "done inplace.")

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        """torch's: this module's own parameters and persistent buffers (not its children's) from
        ``state_dict``, after its load_state_dict pre-hooks; missing and unexpected keys and errors are added
        to the lists.  Within :meth:`load_state_dict` the copies wait until every value is checked."""
        if isinstance(self, _LazyLoad):  # a lazy module takes the checkpoint's shapes first (torch's first hook)
            self._lazy_load_hook(state_dict, prefix)
        for hook in self._hooks("_load_state_dict_pre_hooks").values():
            hook(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs)
        own = self._own_state()
        copies = []
        for name, p in own.items():
            key = prefix + name
            if key not in state_dict:
                if strict:
                    missing_keys.append(key)
                continue
            value = _host(state_dict[key])
            if is_lazy(p) and is_lazy(value):  # nothing to copy, as torch's (it copies no data)
                continue
            if not (isinstance(value, Tensor) or hasattr(value, "__array_function__")):
                error_msgs.append(f'While copying the parameter named "{key}", expected torch.Tensor or '
                                  f"Tensor-like object from checkpoint but received {type(state_dict[key])}")
                continue
            if not is_lazy(p) and p.ndim == 0 and tuple(np.shape(value)) == (1,):
                value = value[0]  # torch's compatibility: a 0.3 checkpoint's scalars are one-element vectors
            if tuple(np.shape(value)) != p.shape:
                error_msgs.append(f"size mismatch for {key}: copying a param with shape "
                                  f"torch.Size({list(np.shape(value))}) from checkpoint, the shape in current model "
                                  f"is torch.Size({list(p.shape)}).")
                continue
            try:
                copies.append((p, _on_device_of(value, p)))
            except Exception as ex:
                error_msgs.append(f'While copying the parameter named "{key}", whose dimensions in the model are '
                                  f"torch.Size({list(p.shape)}) and whose dimensions in the checkpoint are "
                                  f"torch.Size({list(np.shape(value))}), an exception occurred : {ex.args}.")
        pending = _PENDING_COPIES.get()
        if pending is None:  # called on its own: copied now, as torch's
            _copy_pending(copies)
        else:
            pending += copies
        if strict:
            for key in state_dict:
                if key.startswith(prefix):
                    name, dot, _ = key[len(prefix):].partition(".")
                    if (name not in self._modules) if dot else name not in own:
                        unexpected_keys.append(key)

    def _own_state(self):
        """This module's parameters and persistent buffers that are not None, by name (torch's local state)."""
        own = OrderedDict((k, p) for k, p in self._parameters.items() if p is not None)
        own.update((k, b) for k, b in self._buffers.items()
                   if b is not None and k not in self._non_persistent_buffers_set)
        return own

    # ------------------------------------------------------------------- repr
    def extra_repr(self):
        return ""

    def __repr__(self):
        """torch's: the extra repr's lines, then the children's (indented); on one line only an extra repr of
        one line with no children."""
        lines = [f"({name}): " + repr(m).replace("\n", "\n  ") for name, m in self._modules.items()]
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        if not lines and len(extra_lines) <= 1:
            return f"{type(self).__name__}({extra})"
        return f"{type(self).__name__}(\n  " + "\n  ".join(extra_lines + lines) + "\n)"
