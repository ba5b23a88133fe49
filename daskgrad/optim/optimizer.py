"""``Optimizer``: torch's base class (param_groups, state, state_dict).

Steps are lazy: every update is an in-place daskgrad op under ``no_grad`` on the
parameters and on state tensors that live where the parameters live, so ``step()``
and ``zero_grad()`` compute and submit nothing; the next submission (a
``backward`` or a ``compute``) runs the pending updates.

>>> opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
>>> loss = loss_fn(model(x), y); loss.backward(); opt.step(); opt.zero_grad()
"""
from __future__ import annotations

import warnings
from copy import deepcopy

import numpy as np

from .. import _data
from .._modes import enable_grad, no_grad
from ..ops import zeros_like
from .._tensor import Tensor
from ..nn.module import _host, _on_device_of, _zero_in_place

_required = object()


def _snapshot(value):
    """A state value as state_dict hands it out: a Tensor gets its own storage (lazy, no copy), so later
    in-place steps do not change a saved dict."""
    return Tensor._make(value.array) if isinstance(value, Tensor) else deepcopy(value)


# state entries torch keeps as 0-d tensors on the host (NAdam's mu_product, ASGD's eta and mu): Python numbers here
_SCALAR_STATE = ("step", "mu_product", "eta", "mu")


def _float32(x):
    """A number as torch's 0-d float32 state tensor holds it (rounded to float32); a Tensor stays as it is."""
    return x if isinstance(x, Tensor) else float(np.float32(x))


def _state_value(key, value, param, like=None):
    """A loaded state value next to ``param``: counters as Python numbers, tensors with the parameter's
    dtype, chunks and device (torch tensors and arrays are copied in lazily).  ``like`` is what a tensor
    entry is shaped as, when not as the parameter (Adafactor's factored moments)."""
    like = param if like is None else like
    value = _host(value)
    if key in _SCALAR_STATE:
        return float(value.item() if hasattr(value, "item") else value)
    if isinstance(value, Tensor) or hasattr(value, "__array_function__"):
        if tuple(np.shape(value)) != like.shape:
            # torch loads it and fails at the next step; copy_ here would broadcast a (1,) moment silently
            raise ValueError(f"loaded state dict has {key} of shape {list(np.shape(value))} for a parameter "
                             f"of shape {list(param.shape)}")
        with no_grad():
            return zeros_like(like).copy_(_on_device_of(value, param))
    return deepcopy(value)


class _State(dict):
    """Per-parameter state, indexed by the parameter (``opt.state[p]``) as in torch; stored by ``id``
    because a Tensor's ``==`` is elementwise."""

    def _key(self, k):
        return id(k) if isinstance(k, Tensor) else k

    def __getitem__(self, k):
        k = self._key(k)
        if k not in self:
            dict.__setitem__(self, k, {})
        return dict.__getitem__(self, k)

    def __setitem__(self, k, v):
        dict.__setitem__(self, self._key(k), v)

    def __contains__(self, k):
        return dict.__contains__(self, self._key(k))


class Optimizer:
    """Base class: subclasses define ``_update(group)``; ``step`` wraps it in ``no_grad``."""

    def __init__(self, params, defaults):
        self.defaults = defaults
        self.state = _State()
        self.param_groups = []
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of Tensors or dicts, "
                            f"but got {_typename(params)}")
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        for group in groups if isinstance(groups[0], dict) else [{"params": groups}]:
            self.add_param_group(group)

    def add_param_group(self, param_group):
        group = dict(param_group)
        params = group["params"]
        if isinstance(params, set):
            raise TypeError("optimizer parameters need to be organized in ordered collections, but the ordering "
                            "of tensors in sets will change between runs. Please use a list instead.")
        group["params"] = [params] if isinstance(params, Tensor) else list(params)
        # torch's named parameters: (name, tensor) pairs, the names kept as the group's "param_names"
        names = [p[0] for p in group["params"] if isinstance(p, tuple)]
        group["params"] = [p[1] if isinstance(p, tuple) else p for p in group["params"]]
        if names:
            if len(names) != len(group["params"]):
                raise ValueError("all optimizer params should be with/without names. Some param names are missing")
            group["param_names"] = names
        for p in group["params"]:
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer can only optimize Tensors, but one of the params is {_typename(p)}")
            if not p.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor")
        for name, default in self.defaults.items():
            if default is _required and name not in group:
                raise ValueError(f"parameter group didn't specify a value of required optimization parameter {name}")
            group.setdefault(name, default)
        if group.get("differentiable"):
            # torch records the step for autograd (meta-learning); daskgrad's steps run under no_grad
            raise NotImplementedError("differentiable=True is not supported by daskgrad: optimizer steps are not "
                                      "recorded by autograd; leave differentiable=False")
        if len({id(p) for p in group["params"]}) != len(group["params"]):
            warnings.warn("optimizer contains a parameter group with duplicate parameters; in future, this will cause "
                          "an error; see github.com/pytorch/pytorch/issues/40967 for more information", stacklevel=3)
        for g in self.param_groups:
            if ("param_names" in group) != ("param_names" in g):
                raise ValueError("all optimizer param groups should be with/without names. cannot add param group "
                                 f"{'with' if 'param_names' in group else 'without'} names to the optimizer")
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in group["params"]):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(group)

    def zero_grad(self, set_to_none=True):
        """Forget gradients; submits nothing.  ``set_to_none=False`` zeroes each ``.grad`` in place (lazily),
        as torch's: a reference to it sees the zeros, then what the next backward adds."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    if set_to_none:
                        p.grad = None
                    else:
                        _zero_in_place(p.grad)

    def step(self, closure=None):
        """One update of every parameter with a gradient; lazy.  ``closure`` re-evaluates the loss."""
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        with no_grad():
            for group in self.param_groups:
                self._update(group)
        return loss

    def _update(self, group):
        raise NotImplementedError

    def _grads(self, group, l2=True):
        """``(p, grad)`` for each parameter of ``group`` that has a gradient: the loop every
        update runs, with torch's ``maximize`` (the gradient negated) and, if ``l2``, its coupled
        weight decay (``grad.add(p, alpha=weight_decay)``, one rounding as torch's) applied."""
        wd = group.get("weight_decay", 0) if l2 else 0
        for p in group["params"]:
            if p.grad is None:
                continue
            grad = -p.grad if group.get("maximize") else p.grad
            if wd != 0:
                grad = grad.add(p, alpha=wd)
            yield p, grad

    # -------------------------------------------------------------- state dict
    def state_dict(self):
        """torch's layout: ``{"state": {index: {...}}, "param_groups": [{..., "params": [index, ...]}]}``."""
        index, groups = {}, []
        for group in self.param_groups:
            packed = {k: deepcopy(v) for k, v in group.items() if k != "params"}
            packed["params"] = [index.setdefault(id(p), len(index)) for p in group["params"]]
            groups.append(packed)
        state = {index[id(p)]: {k: _snapshot(v) for k, v in s.items()}
                 for p, s in self._state_items() if id(p) in index}
        return {"state": state, "param_groups": groups}

    def _state_items(self):
        by_id = {id(p): p for g in self.param_groups for p in g["params"]}
        return [(by_id[k], s) for k, s in self.state.items() if k in by_id]

    def load_state_dict(self, state_dict):
        """Load a dict from :meth:`state_dict` (ours or torch's); tensors land next to the parameters.
        All or nothing: on any error ``state`` and ``param_groups`` stay as they were."""
        saved = state_dict["param_groups"]
        if len(saved) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        if any(len(g["params"]) != len(s["params"]) for g, s in zip(self.param_groups, saved)):
            raise ValueError("loaded state dict contains a parameter group that doesn't match the size of "
                             "optimizer's group")
        by_index = {i: p for g, s in zip(self.param_groups, saved) for i, p in zip(s["params"], g["params"])}
        state = _State()  # built aside: a value that fails leaves the optimizer as it was
        for i, s in state_dict["state"].items():
            if i in by_index:
                p = by_index[i]
                state[p] = {k: _state_value(k, v, p, self._state_like(k, p)) for k, v in s.items()}
        groups = [{k: deepcopy(v) for k, v in s.items() if k != "params"} for s in saved]
        self.state = state
        for g, new in zip(self.param_groups, groups):
            g.update(new)

    def _state_like(self, key, param):
        """What state entry ``key`` of ``param`` is shaped like (None: like the parameter)."""
        return None

    def __repr__(self):
        lines = [type(self).__name__ + " ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines += [f"    {k}: {group[k]}" for k in sorted(group) if k != "params"]
        return "\n".join(lines) + "\n)"


def _typename(x):
    """``torch.typename``: a tensor's type as torch names it (``torch.FloatTensor``), else the qualified name."""
    if isinstance(x, Tensor):
        return f"torch.{_data.TORCH_TYPE_NAMES.get(x.dtype.name, x.dtype.name)}Tensor"
    module, name = getattr(x, "__module__", "") or "", getattr(x, "__qualname__", getattr(x, "__name__", ""))
    if not name:
        module, name = type(x).__module__ or "", type(x).__qualname__
    return name if module in ("", "builtins") else f"{module}.{name}"


def check_tensor_lr(lr, foreach=None, capturable=False):
    """torch's checks of a tensor ``lr``: not with ``foreach`` (unless ``capturable``), one element."""
    if isinstance(lr, Tensor):
        if foreach and not capturable:
            raise ValueError("lr as a Tensor is not supported for capturable=False and foreach=True")
        if lr.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")


def check_lr(lr, **nonnegative):
    """torch's checks of an optimizer's arguments: ``lr`` not negative, then each named value at least 0."""
    if isinstance(lr, Tensor) and lr.numel() != 1:
        raise ValueError("Tensor lr must be 1-element")
    if lr is not _required and lr < 0.0:
        raise ValueError(f"Invalid learning rate: {lr}")
    for name, value in nonnegative.items():
        if not 0.0 <= value:
            raise ValueError(f"Invalid {name} value: {value}")


