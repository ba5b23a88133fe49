"""``Module`` and ``Parameter``: torch's containers for trainable state.

>>> class Net(nn.Module):
...     def __init__(self):
...         super().__init__()
...         self.fc = nn.Linear(4, 2)   # registered as a child; its weight as "fc.weight"
...     def forward(self, x):
...         return self.fc(x)
"""
from __future__ import annotations

from collections import OrderedDict, namedtuple
from collections.abc import Mapping

import dask.array as da
import numpy as np

from .._modes import no_grad
from ..ops import zeros_like
from .._tensor import Tensor, _check_requires_grad, _Storage

_IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


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


class Module:
    """Base class of layers and models: attributes that are Parameters or Modules get registered."""

    training: bool

    def __init__(self):
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required "forward" function')

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    # ------------------------------------------------------------ registration
    def __setattr__(self, name, value):
        params, modules = self.__dict__.get("_parameters"), self.__dict__.get("_modules")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            self.__dict__.pop(name, None)
            modules.pop(name, None)
            params[name] = value
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as parameter '{name}' "
                                "(torch.nn.Parameter or None expected)")
            params[name] = None
        elif isinstance(value, Module):
            if modules is None:
                raise AttributeError("cannot assign module before Module.__init__() call")
            self.__dict__.pop(name, None)
            params.pop(name, None)
            modules[name] = value
        elif modules is not None and name in modules:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as child module '{name}' "
                                "(torch.nn.Module or None expected)")
            modules[name] = None
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name):
        for table in ("_parameters", "_modules"):
            d = self.__dict__.get(table)
            if d is not None and name in d:
                return d[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        for table in ("_parameters", "_modules"):
            if name in self.__dict__.get(table, ()):
                del self.__dict__[table][name]
                return
        object.__delattr__(self, name)

    def register_parameter(self, name, param):
        if param is None:
            self._parameters[name] = None
        else:
            setattr(self, name, param)

    def add_module(self, name, module):
        self._modules[name] = module

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

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        seen = set()  # ids: a Tensor's == is elementwise
        mods = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse else [(prefix, self)]
        for mprefix, m in mods:
            for name, p in m._parameters.items():
                if p is None or id(p) in seen:
                    continue
                if remove_duplicate:
                    seen.add(id(p))
                yield mprefix + ("." if mprefix else "") + name, p

    def parameters(self, recurse=True):
        return (p for _, p in self.named_parameters(recurse=recurse))

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
        """Forget gradients; lazy (``set_to_none=False`` gives lazy zeros)."""
        for p in self.parameters():
            if p.grad is not None:
                p.grad = None if set_to_none else zeros_like(p.grad.detach())

    def _cast(self, dtype):
        with no_grad():
            for p in self.parameters():
                p.data = p.array.astype(dtype)
        return self

    def double(self):
        return self._cast(np.float64)

    def float(self):
        return self._cast(np.float32)

    # -------------------------------------------------------------- state dict
    def state_dict(self, destination=None, prefix="", keep_vars=False):
        """Name -> parameter, detached (sharing storage, as torch's) unless ``keep_vars``.  As in torch, a
        tied parameter or a shared module is listed under each of its names."""
        out = OrderedDict() if destination is None else destination
        for name, p in self._parameters.items():
            if p is not None:
                out[prefix + name] = p if keep_vars else p.detach()
        for name, m in self._modules.items():
            if m is not None:
                m.state_dict(destination=out, prefix=prefix + name + ".", keep_vars=keep_vars)
        return out

    def load_state_dict(self, state_dict, strict=True, assign=False):
        """Copy values (daskgrad Tensors, NumPy/cupy arrays or torch tensors) into the parameters, lazily.
        All or nothing: every value is checked before the first copy (torch copies the ones that fit,
        then raises).  Copying in place keeps tied parameters tied."""
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        own = self.state_dict(keep_vars=True)
        missing = [k for k in own if k not in state_dict]
        unexpected = self._unexpected_keys(list(state_dict))
        errors, copies = [], []
        for key, p in own.items():
            if key not in state_dict:
                continue
            value = _host(state_dict[key])
            if not (isinstance(value, Tensor) or hasattr(value, "__array_function__")):
                errors.append(f'While copying the parameter named "{key}", expected torch.Tensor or Tensor-like '
                              f"object from checkpoint but received {type(state_dict[key])}")
            elif tuple(np.shape(value)) != p.shape:
                errors.append(f"size mismatch for {key}: copying a param with shape "
                              f"torch.Size({list(np.shape(value))}) from checkpoint, the shape in current model "
                              f"is torch.Size({list(p.shape)}).")
            else:
                try:
                    copies.append((p, _on_device_of(value, p)))
                except Exception as ex:
                    errors.append(f'While copying the parameter named "{key}", whose dimensions in the model are '
                                  f"torch.Size({list(p.shape)}) and whose dimensions in the checkpoint are "
                                  f"torch.Size({list(np.shape(value))}), an exception occurred : {ex.args}.")
        if strict:
            if unexpected:
                errors.insert(0, "Unexpected key(s) in state_dict: {}. ".format(
                    ", ".join(f'"{k}"' for k in unexpected)))
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: {}. ".format(", ".join(f'"{k}"' for k in missing)))
        if errors:
            raise RuntimeError("Error(s) in loading state_dict for {}:\n\t{}".format(type(self).__name__,
                                                                                      "\n\t".join(errors)))
        with no_grad():
            for p, value in copies:
                p.copy_(value)
        return _IncompatibleKeys(missing, unexpected)

    def _unexpected_keys(self, keys, prefix=""):
        """The keys no parameter takes, in torch's order: this module's own, then each child's.  As in
        torch, a key under a child set to None is not reported."""
        out = []
        for key in keys:
            name, dot, _ = key[len(prefix):].partition(".")
            if (name not in self._modules) if dot else self._parameters.get(name) is None:
                out.append(key)
        for name, m in self._modules.items():
            if m is not None:
                sub = prefix + name + "."
                out += m._unexpected_keys([k for k in keys if k.startswith(sub)], sub)
        return out

    # ------------------------------------------------------------------- repr
    def extra_repr(self):
        return ""

    def __repr__(self):
        lines = [f"({name}): " + repr(m).replace("\n", "\n  ") for name, m in self._modules.items()]
        extra = self.extra_repr()
        if not lines:
            return f"{type(self).__name__}({extra})"
        body = ([extra] if extra else []) + lines
        return f"{type(self).__name__}(\n  " + "\n  ".join(body) + "\n)"
