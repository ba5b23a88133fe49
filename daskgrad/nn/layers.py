"""Layers: ``Linear``, containers (``Sequential``, ``ModuleList``, ``ModuleDict``, ``ParameterList``,
``ParameterDict``), ``Identity``, ``Flatten``, ``Unflatten``, activations, ``Dropout`` (and its channel-wise and
alpha forms), ``Embedding``, ``LayerNorm``.

Parameters get torch's default initialisations, drawn lazily from daskgrad's
generator (reproducible with :func:`daskgrad.manual_seed`), in one chunk each.

>>> model = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 1))
>>> y = model(x)                     # x: (N, 4), chunked along N
"""
from __future__ import annotations

import math
import operator
import warnings
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from itertools import chain

from .._modes import no_grad
from .._tensor import Tensor, ones, rand, randn, zeros
from ..graph import type_repr
from . import functional as F
from .module import Module, Parameter


def _check_size(*shape):
    """torch's error for a negative size: its layers allocate their parameters with ``torch.empty``.
    dask would make an array of negative shape and fail later, far from the cause."""
    for n in shape:
        if n < 0:
            raise RuntimeError(f"Trying to create tensor with negative dimension {n}: {list(shape)}")


def _uniform(shape, bound, dtype, device):
    """U(-bound, bound): torch's kaiming_uniform(a=sqrt(5)) for a Linear weight, and its bias."""
    return Parameter(rand(*shape, dtype=dtype, chunks=-1, device=device) * (2 * bound) - bound)


def _affine(module, affine, shape, dtype, device, bias=True):
    """Weight ones and bias zeros, each None when not ``affine`` (the bias also when not ``bias``)."""
    module.register_parameter("weight", Parameter(ones(*shape, dtype=dtype, chunks=-1, device=device))
                              if affine else None)
    module.register_parameter("bias", Parameter(zeros(*shape, dtype=dtype, chunks=-1, device=device))
                              if affine and bias else None)


class Linear(Module):
    """``y = x @ weight.T + bias``."""

    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        _check_size(out_features, in_features)
        bound = 1 / math.sqrt(in_features) if in_features > 0 else 0
        self.weight = _uniform((out_features, in_features), bound, dtype, device)
        if bias:
            self.bias = _uniform((out_features,), bound, dtype, device)
        else:
            self.register_parameter("bias", None)

    def forward(self, input):
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Bilinear(Module):
    """``y = x1^T A x2 + b`` (torch's ``nn.Bilinear``; weight (out, in1, in2), both drawn from U(-k, k), ``k =
    1 / sqrt(in1_features)``)."""

    def __init__(self, in1_features, in2_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        self.in1_features, self.in2_features, self.out_features = in1_features, in2_features, out_features
        _check_size(out_features, in1_features, in2_features)
        if in1_features <= 0:
            raise ValueError(f"in1_features must be > 0, but got (in1_features={in1_features})")
        bound = 1 / math.sqrt(in1_features)
        self.weight = _uniform((out_features, in1_features, in2_features), bound, dtype, device)
        if bias:
            self.bias = _uniform((out_features,), bound, dtype, device)
        else:
            self.register_parameter("bias", None)

    def forward(self, input1, input2):
        return F.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self):
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")


_CONTAINER_DEPRECATED = ("`nn.Container` is deprecated. All of its functionality is now implemented in `nn.Module`. "
                         "Subclass that instead.")


class Container(Module):
    """torch's deprecated ``nn.Container``: a Module whose keyword arguments become its children.  Making one,
    or defining a subclass, warns (FutureWarning) as torch's.

    Parameters
    ----------
    **kwargs : Module
        The children, by name.
    """

    def __new__(cls, *args, **kwargs):
        if cls is Container:
            warnings.warn(_CONTAINER_DEPRECATED, FutureWarning, stacklevel=2)
        return super().__new__(cls)

    def __init_subclass__(cls, **kwargs):
        warnings.warn(_CONTAINER_DEPRECATED, FutureWarning, stacklevel=2)
        super().__init_subclass__(**kwargs)

    def __init__(self, **kwargs):
        super().__init__()
        for key, value in kwargs.items():
            self.add_module(key, value)


class _Container(Module):
    """What Sequential and ModuleList share: their children in ``_modules``, in order."""

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def pop(self, key):
        v = self[key]
        del self[key]
        return v


class Sequential(_Container):
    """Modules applied in order: ``Sequential(a, b)(x) == b(a(x))``."""

    def __init__(self, *args):
        super().__init__()
        items = args[0].items() if len(args) == 1 and isinstance(args[0], OrderedDict) else \
            ((str(i), m) for i, m in enumerate(args))
        for name, m in items:
            self.add_module(name, m)

    def __getitem__(self, idx):
        mods = list(self._modules.values())
        if isinstance(idx, slice):
            return Sequential(OrderedDict(list(self._modules.items())[idx]))
        if not -len(mods) <= idx < len(mods):
            raise IndexError(f"index {idx} is out of range")
        return mods[idx]

    def forward(self, input):
        for m in self:
            input = m(input)
        return input


class ModuleList(_Container):
    """Modules in a list, registered as children ``"0"``, ``"1"``, ... (no ``forward`` of its own)."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def _index(self, idx):
        idx = operator.index(idx)
        if not -len(self) <= idx < len(self):
            raise IndexError(f"index {idx} is out of range")
        return str(idx + len(self) if idx < 0 else idx)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(list(self._modules.values())[idx])
        return self._modules[self._index(idx)]

    def __setitem__(self, idx, module):
        setattr(self, self._index(idx), module)

    def __delitem__(self, idx):
        if isinstance(idx, slice):
            for k in range(len(self._modules))[idx]:
                delattr(self, str(k))
        else:
            delattr(self, self._index(idx))
        object.__setattr__(self, "_modules", OrderedDict((str(i), m) for i, m in enumerate(self._modules.values())))

    def __iadd__(self, modules):
        return self.extend(modules)

    def __add__(self, other):
        combined = ModuleList()
        for i, module in enumerate(chain(self, other)):
            combined.add_module(str(i), module)
        return combined

    def insert(self, index, module):
        for i in range(len(self._modules), index, -1):
            self._modules[str(i)] = self._modules[str(i - 1)]
        self._modules[str(index)] = module

    def extend(self, modules):
        if not isinstance(modules, Iterable):
            raise TypeError("ModuleList.extend should be called with an iterable, but got " + type(modules).__name__)
        offset = len(self)
        for i, module in enumerate(modules):
            self.add_module(str(offset + i), module)
        return self


class ModuleDict(Module):
    """Modules by name, registered as children, in insertion order (no ``forward`` of its own)."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key):
        return self._modules[key]

    def __setitem__(self, key, module):
        self.add_module(key, module)

    def __delitem__(self, key):
        del self._modules[key]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def __contains__(self, key):
        return key in self._modules

    def clear(self):
        self._modules.clear()

    def pop(self, key):
        v = self[key]
        del self[key]
        return v

    def keys(self):
        return self._modules.keys()

    def items(self):
        return self._modules.items()

    def values(self):
        return self._modules.values()

    def update(self, modules):
        if not isinstance(modules, Iterable):
            raise TypeError("ModuleDict.update should be called with an iterable of key/value pairs, but got "
                            + type(modules).__name__)
        if isinstance(modules, (Mapping, ModuleDict)):
            for key, module in modules.items():
                self[key] = module
            return
        for j, m in enumerate(modules):
            if not isinstance(m, Iterable):
                raise TypeError("ModuleDict update sequence element #" + str(j) + " should be Iterable; is"
                                + type(m).__name__)
            if not len(m) == 2:
                raise ValueError("ModuleDict update sequence element #" + str(j) + " has length " + str(len(m))
                                 + "; 2 is required")
            self[m[0]] = m[1]


def _parameter_line(key, p, dtype):
    """One line of ParameterList's / ParameterDict's repr: a tensor's kind, type, size (and a GPU device),
    or the type of any other object (torch's text; ``dtype`` is the list's ``daskgrad.float64``, the dict's
    ``daskgrad.DoubleTensor``)."""
    if isinstance(p, Tensor):
        size = "x".join(str(n) for n in p.shape)
        device = f" ({p.device})" if p.device.type == "cuda" else ""
        return f"  ({key}): {'Parameter' if isinstance(p, Parameter) else 'Tensor'} containing: [{dtype(p)} of size " \
            f"{size}{device}]"
    return f"  ({key}): Object of type: {type(p).__name__}"


class ParameterList(Module):
    """Parameters in a list, registered as ``"0"``, ``"1"``, ...: a tensor put in (constructor, ``append``,
    ``extend``, ``l[i] = t``) becomes a :class:`Parameter`; other objects are kept as they are."""

    def __init__(self, values=None):
        super().__init__()
        self._size = 0
        if values is not None:
            self += values

    def _index(self, idx):
        idx = operator.index(idx)
        if not -len(self) <= idx < len(self):
            raise IndexError(f"index {idx} is out of range")
        return str(idx + len(self) if idx < 0 else idx)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            out = type(self)()
            for i in range(*idx.indices(len(self))):
                out.append(self[i])
            return out
        return getattr(self, self._index(idx))

    def __setitem__(self, idx, param):
        idx = self._index(idx)
        if isinstance(param, Tensor) and not isinstance(param, Parameter):
            param = Parameter(param)
        setattr(self, idx, param)

    def __len__(self):
        return self._size

    def __iter__(self):
        return iter(self[i] for i in range(len(self)))

    def __iadd__(self, parameters):
        return self.extend(parameters)

    def __dir__(self):
        return [k for k in super().__dir__() if not k.isdigit()]

    def append(self, value):
        self._size += 1
        self[self._size - 1] = value
        return self

    def extend(self, values):
        if not isinstance(values, Iterable) or isinstance(values, Tensor):
            raise TypeError("ParameterList.extend should be called with an iterable, but got " + type(values).__name__)
        for value in values:
            self.append(value)
        return self

    def extra_repr(self):
        return "\n".join(_parameter_line(k, p, lambda t: f"daskgrad.{t.dtype.name}") for k, p in enumerate(self))

    def __call__(self, *args, **kwargs):
        raise RuntimeError("ParameterList should not be called.")


class ParameterDict(Module):
    """Parameters by (string) name, in insertion order: a tensor put in (constructor, ``update``, ``d[k] = t``)
    becomes a :class:`Parameter`; other objects are kept as they are.  A plain ``dict`` given to the constructor or
    ``update`` goes in sorted by key, as torch's (an ``OrderedDict``, a ParameterDict or pairs keep their order)."""

    def __init__(self, parameters=None):
        super().__init__()
        self._keys = {}
        if parameters is not None:
            self.update(parameters)

    @staticmethod
    def _key_to_attr(key):
        if not isinstance(key, str):
            raise TypeError("Index given to ParameterDict cannot be used as a key as it is not a string (type is "
                            f"'{type(key).__name__}'). Open an issue on github if you need non-string keys.")
        return key

    def __getitem__(self, key):
        return getattr(self, self._key_to_attr(key))

    def __setitem__(self, key, value):
        self._keys[key] = None
        attr = self._key_to_attr(key)
        if isinstance(value, Tensor) and not isinstance(value, Parameter):
            value = Parameter(value)
        setattr(self, attr, value)

    def __delitem__(self, key):
        del self._keys[key]
        delattr(self, self._key_to_attr(key))

    def __len__(self):
        return len(self._keys)

    def __iter__(self):
        return iter(self._keys)

    def __reversed__(self):
        return reversed(self._keys)

    def __contains__(self, key):
        return key in self._keys

    def copy(self):
        return ParameterDict(OrderedDict((k, self[k]) for k in self._keys))

    def setdefault(self, key, default=None):
        if key not in self:
            self[key] = default
        return self[key]

    def clear(self):
        for k in self._keys.copy():
            del self[k]

    def pop(self, key):
        v = self[key]
        del self[key]
        return v

    def popitem(self):
        k, _ = self._keys.popitem()
        self._keys[k] = None
        v = self[k]
        del self[k]
        return k, v

    def get(self, key, default=None):
        return self[key] if key in self else default

    def fromkeys(self, keys, default=None):
        return ParameterDict((k, default) for k in keys)

    def keys(self):
        return self._keys.keys()

    def items(self):
        return ((k, self[k]) for k in self._keys)

    def values(self):
        return (self[k] for k in self._keys)

    def update(self, parameters):
        if not isinstance(parameters, Iterable):
            raise TypeError("ParametersDict.update should be called with an iterable of key/value pairs, but got "
                            + type(parameters).__name__)
        if isinstance(parameters, (OrderedDict, ParameterDict)):
            for key, parameter in parameters.items():
                self[key] = parameter
        elif isinstance(parameters, Mapping):
            for key, parameter in sorted(parameters.items()):
                self[key] = parameter
        else:
            for j, p in enumerate(parameters):
                if not isinstance(p, Iterable):
                    raise TypeError("ParameterDict update sequence element #" + str(j) + " should be Iterable; is"
                                    + type(p).__name__)
                if not len(p) == 2:
                    raise ValueError("ParameterDict update sequence element #" + str(j) + " has length "
                                     + str(len(p)) + "; 2 is required")
                self[p[0]] = p[1]

    def extra_repr(self):
        return "\n".join(_parameter_line(k, p, lambda t: type_repr(t.dtype)) for k, p in self.items())

    def __call__(self, input):
        raise RuntimeError("ParameterDict should not be called.")

    def __or__(self, other):
        copy = self.copy()
        copy.update(other)
        return copy

    def __ror__(self, other):
        copy = other.copy()
        copy.update(self)
        return copy

    def __ior__(self, other):
        self.update(other)
        return self


class Identity(Module):
    """Returns its input; takes (and ignores) any arguments, as torch's."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


class Flatten(Module):
    """Merge the axes ``start_dim..end_dim`` (by default all but the batch axis)."""

    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, input):
        return F.flatten(input, self.start_dim, self.end_dim)

    def extra_repr(self):
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Split axis ``dim`` into the axes ``unflattened_size`` (a tuple or list of ints; one may be -1)."""

    def __init__(self, dim, unflattened_size):
        super().__init__()
        if not isinstance(unflattened_size, (tuple, list)):
            raise TypeError("unflattened_size must be a tuple of ints, but found type "
                            f"{type(unflattened_size).__name__}")
        for idx, elem in enumerate(unflattened_size):
            if not isinstance(elem, int):
                raise TypeError(f"unflattened_size must be tuple of ints, but found element of type "
                                f"{type(elem).__name__} at pos {idx}")
        self.dim, self.unflattened_size = dim, unflattened_size

    def forward(self, input):
        return input.unflatten(self.dim, self.unflattened_size)

    def extra_repr(self):
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"


class Softmax(Module):
    """``softmax`` along ``dim`` (torch's ``nn.Softmax``; ``dim=None`` picks an axis with torch's warning)."""
    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.softmax(input, self.dim, _stacklevel=5)

    def extra_repr(self):
        return f"dim={self.dim}"


class Softmax2d(Module):
    """``softmax`` over the channels of each location: ``(N, C, H, W)`` or ``(C, H, W)`` (torch's
    ``nn.Softmax2d``, axis -3)."""

    def forward(self, input):
        if input.ndim not in (3, 4):
            raise ValueError(f"Softmax2d: expected input to be 3D or 4D, got {input.ndim}D instead")
        return F.softmax(input, -3, _stacklevel=5)


class ChannelShuffle(Module):
    """The channels, seen as a ``(groups, C / groups)`` grid, transposed (torch's ``nn.ChannelShuffle``,
    :func:`~daskgrad.nn.functional.channel_shuffle`)."""

    def __init__(self, groups):
        super().__init__()
        self.groups = groups

    def forward(self, input):
        return F.channel_shuffle(input, self.groups)

    def extra_repr(self):
        return f"groups={self.groups}"


class LogSoftmax(Softmax):
    """``log_softmax`` along ``dim`` (torch's ``nn.LogSoftmax``; ``dim=None`` picks an axis with torch's
    warning)."""
    def forward(self, input):
        return F.log_softmax(input, self.dim, _stacklevel=5)


class SiLU(Module):
    """``x * sigmoid(x)``."""

    def __init__(self, inplace=False):
        super().__init__()
        F._refuse_inplace("SiLU", inplace)
        self.inplace = inplace

    def forward(self, input):
        return F.silu(input)

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class LeakyReLU(Module):
    """``x`` for ``x > 0``, else ``negative_slope * x``."""

    def __init__(self, negative_slope=0.01, inplace=False):
        super().__init__()
        self.negative_slope, self.inplace = negative_slope, inplace

    def forward(self, input):
        return F.leaky_relu(input, self.negative_slope, self.inplace)

    def extra_repr(self):
        return f"negative_slope={self.negative_slope}" + (", inplace=True" if self.inplace else "")


class RReLU(Module):
    """torch's ``nn.RReLU``: training, each negative element times its own draw from U(``lower``, ``upper``); in
    eval mode ``leaky_relu`` with the mean slope."""

    def __init__(self, lower=1.0 / 8, upper=1.0 / 3, inplace=False):
        super().__init__()
        self.lower, self.upper, self.inplace = lower, upper, inplace

    def forward(self, input):
        return F.rrelu(input, self.lower, self.upper, self.training, self.inplace)

    def extra_repr(self):
        return f"lower={self.lower}, upper={self.upper}" + (", inplace=True" if self.inplace else "")


class ELU(Module):
    """``x`` for ``x > 0``, else ``alpha * (exp(x) - 1)`` (torch's ``nn.ELU``)."""

    def __init__(self, alpha=1.0, inplace=False):
        super().__init__()
        self.alpha, self.inplace = alpha, inplace

    def forward(self, input):
        return F.elu(input, self.alpha, self.inplace)

    def extra_repr(self):
        return f"alpha={self.alpha}" + (", inplace=True" if self.inplace else "")


class CELU(ELU):
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))`` (torch's ``nn.CELU``)."""

    def forward(self, input):
        return F.celu(input, self.alpha, self.inplace)


class Hardtanh(Module):
    """``x`` clamped to ``[min_val, max_val]`` (torch's ``nn.Hardtanh``)."""

    def __init__(self, min_val=-1.0, max_val=1.0, inplace=False):
        super().__init__()
        if not max_val > min_val:  # (torch's assert, its words)
            raise AssertionError(f"max_val ({max_val}) must be greater than min_val ({min_val})")
        self.min_val, self.max_val, self.inplace = min_val, max_val, inplace

    def forward(self, input):
        return F.hardtanh(input, self.min_val, self.max_val, self.inplace)

    def extra_repr(self):
        return f"min_val={self.min_val}, max_val={self.max_val}" + (", inplace=True" if self.inplace else "")


class ReLU6(Hardtanh):
    """``min(max(x, 0), 6)`` (torch's ``nn.ReLU6``)."""

    def __init__(self, inplace=False):
        super().__init__(0.0, 6.0, inplace)

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class Threshold(Module):
    """``value`` where ``x <= threshold``, else ``x`` (torch's ``nn.Threshold``)."""

    def __init__(self, threshold, value, inplace=False):
        super().__init__()
        self.threshold, self.value, self.inplace = threshold, value, inplace

    def forward(self, input):
        return F.threshold(input, self.threshold, self.value, self.inplace)

    def extra_repr(self):
        return f"threshold={self.threshold}, value={self.value}" + (", inplace=True" if self.inplace else "")


class ReLU(Module):
    """``max(x, 0)``; ``inplace=True`` writes the input, as torch's (``Tensor.relu_``)."""

    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return F.relu(input, inplace=self.inplace)

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class Tanh(Module):
    """``tanh(x)`` elementwise (torch's ``nn.Tanh``)."""
    def forward(self, input):
        return F.tanh(input)


class Sigmoid(Module):
    """``1 / (1 + exp(-x))`` elementwise (torch's ``nn.Sigmoid``)."""
    def forward(self, input):
        return F.sigmoid(input)


class _InplaceActivation(Module):
    """An activation whose only argument is torch's ``inplace`` (in its repr when True, where torch's shows it)."""
    _repr_inplace = True

    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def extra_repr(self):
        return "inplace=True" if self.inplace and self._repr_inplace else ""


class SELU(_InplaceActivation):
    """``scale * elu(x, alpha)`` with torch's constants (torch's ``nn.SELU``)."""

    def forward(self, input):
        return F.selu(input, self.inplace)


class Mish(_InplaceActivation):
    """``x * tanh(softplus(x))`` (torch's ``nn.Mish``)."""

    def forward(self, input):
        return F.mish(input, self.inplace)


class Hardswish(_InplaceActivation):
    """``x * relu6(x + 3) / 6`` (torch's ``nn.Hardswish``, whose repr shows no ``inplace``)."""
    _repr_inplace = False

    def forward(self, input):
        return F.hardswish(input, self.inplace)


class Hardsigmoid(_InplaceActivation):
    """``relu6(x + 3) / 6`` (torch's ``nn.Hardsigmoid``, whose repr shows no ``inplace``)."""
    _repr_inplace = False

    def forward(self, input):
        return F.hardsigmoid(input, self.inplace)


class Softplus(Module):
    """``log(1 + exp(beta * x)) / beta``, linear above ``threshold`` (torch's ``nn.Softplus``)."""

    def __init__(self, beta=1.0, threshold=20.0):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, input):
        return F.softplus(input, self.beta, self.threshold)

    def extra_repr(self):
        return f"beta={self.beta}, threshold={self.threshold}"


class LogSigmoid(Module):
    """``log(sigmoid(x))`` (torch's ``nn.LogSigmoid``)."""

    def forward(self, input):
        return F.logsigmoid(input)


class Softsign(Module):
    """``x / (1 + |x|)`` (torch's ``nn.Softsign``)."""

    def forward(self, input):
        return F.softsign(input)


class Tanhshrink(Module):
    """``x - tanh(x)`` (torch's ``nn.Tanhshrink``)."""

    def forward(self, input):
        return F.tanhshrink(input)


class _Shrink(Module):
    """A shrinkage by ``lambd`` (its repr, as torch's: the number alone)."""

    def __init__(self, lambd=0.5):
        super().__init__()
        self.lambd = lambd

    def extra_repr(self):
        return str(self.lambd)


class Softshrink(_Shrink):
    """``x -+ lambd`` outside ``[-lambd, lambd]``, else 0 (torch's ``nn.Softshrink``)."""

    def forward(self, input):
        return F.softshrink(input, self.lambd)


class Hardshrink(_Shrink):
    """``x`` outside ``[-lambd, lambd]``, else 0 (torch's ``nn.Hardshrink``)."""

    def forward(self, input):
        return F.hardshrink(input, self.lambd)


class GLU(Module):
    """``a * sigmoid(b)`` of the halves of the input along ``dim`` (torch's ``nn.GLU``)."""

    def __init__(self, dim=-1):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.glu(input, self.dim)

    def extra_repr(self):
        return f"dim={self.dim}"


class Softmin(Softmax):
    """``softmax(-x)`` along ``dim`` (torch's ``nn.Softmin``; ``dim=None`` picks an axis with torch's warning)."""

    def forward(self, input):
        return F.softmin(input, self.dim, _stacklevel=5)


class PReLU(Module):
    """``x`` where ``x > 0``, else ``weight * x``: one learned slope, or one per channel (axis 1), each
    ``init`` at first (torch's ``nn.PReLU``)."""

    def __init__(self, num_parameters=1, init=0.25, device=None, dtype=None):
        super().__init__()
        _check_size(num_parameters)
        self.num_parameters, self.init = num_parameters, init
        self.weight = Parameter(ones(num_parameters, dtype=dtype, chunks=-1, device=device) * init)

    def forward(self, input):
        return F.prelu(input, self.weight)

    def extra_repr(self):
        return f"num_parameters={self.num_parameters}"

class GELU(Module):
    """Exact GELU (``approximate="none"``, via erf) or the tanh approximation."""

    def __init__(self, approximate="none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, input):
        return F.gelu(input, self.approximate)

    def extra_repr(self):
        return f"approximate='{self.approximate}'"


class _DropoutNd(Module):
    """What the dropouts share: ``p`` (checked) and ``inplace``, and their repr."""

    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        if p < 0 or p > 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p, self.inplace = p, inplace

    def extra_repr(self):
        return f"p={self.p}, inplace={self.inplace}"


class Dropout(_DropoutNd):
    """Random zeros with probability ``p`` while training (one mask per chunk); identity in eval."""

    def forward(self, input):
        return F.dropout(input, self.p, self.training, self.inplace)


class Dropout1d(_DropoutNd):
    """Whole channels of ``(N, C, L)`` (or ``(C, L)``) input zeroed with probability ``p`` while training;
    identity in eval."""

    def forward(self, input):
        return F.dropout1d(input, self.p, self.training, self.inplace)


class Dropout2d(_DropoutNd):
    """Whole channels of ``(N, C, H, W)`` input zeroed with probability ``p`` while training; identity in eval
    (a 3-D input is taken as ``(N, C, L)``, with torch's warning)."""

    def forward(self, input):
        return F.dropout2d(input, self.p, self.training, self.inplace)


class Dropout3d(_DropoutNd):
    """Whole channels of ``(N, C, D, H, W)`` (or ``(C, D, H, W)``) input zeroed with probability ``p`` while
    training; identity in eval."""

    def forward(self, input):
        return F.dropout3d(input, self.p, self.training, self.inplace)


class AlphaDropout(_DropoutNd):
    """:func:`~daskgrad.nn.functional.alpha_dropout` while training (for SELU networks; ``inplace`` is
    kept and shown, but not used, as torch's); identity in eval."""

    def forward(self, input):
        return F.alpha_dropout(input, self.p, self.training)


class FeatureAlphaDropout(_DropoutNd):
    """:func:`~daskgrad.nn.functional.feature_alpha_dropout` (whole channels) while training (``inplace`` is
    kept and shown, but not used, as torch's); identity in eval."""

    def forward(self, input):
        return F.feature_alpha_dropout(input, self.p, self.training)


class Embedding(Module):
    """A lookup table of ``num_embeddings`` rows of size ``embedding_dim``, initialised N(0, 1); the
    ``padding_idx`` row starts at zero and gets no gradient."""

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, max_norm=None, norm_type=2.0,
                 scale_grad_by_freq=False, sparse=False, _weight=None, _freeze=False, device=None, dtype=None):
        super().__init__()
        F._refuse_embedding_options(max_norm, scale_grad_by_freq, sparse)
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx = F._padding_index(padding_idx, num_embeddings)
        self.max_norm, self.norm_type, self.scale_grad_by_freq, self.sparse = max_norm, norm_type, False, False
        if _weight is None:
            _check_size(num_embeddings, embedding_dim)
            self.weight = Parameter(randn(num_embeddings, embedding_dim, dtype=dtype, chunks=-1, device=device),
                                    requires_grad=not _freeze)
            if self.padding_idx is not None:
                with no_grad():
                    self.weight[self.padding_idx] = 0.0
        else:
            assert list(_weight.shape) == [num_embeddings, embedding_dim], \
                "Shape of weight does not match num_embeddings and embedding_dim"
            self.weight = Parameter(_weight, requires_grad=not _freeze)

    @classmethod
    def from_pretrained(cls, embeddings, freeze=True, padding_idx=None, max_norm=None, norm_type=2.0,
                        scale_grad_by_freq=False, sparse=False):
        assert embeddings.dim() == 2, "Embeddings parameter is expected to be 2-dimensional"
        rows, cols = embeddings.shape
        return cls(rows, cols, _weight=embeddings, _freeze=freeze, padding_idx=padding_idx, max_norm=max_norm,
                   norm_type=norm_type, scale_grad_by_freq=scale_grad_by_freq, sparse=sparse)

    def forward(self, input):
        return F.embedding(input, self.weight, self.padding_idx)

    def extra_repr(self):
        return f"{self.num_embeddings}, {self.embedding_dim}" + \
            ("" if self.padding_idx is None else f", padding_idx={self.padding_idx}")


class EmbeddingBag(Module):
    """torch's ``nn.EmbeddingBag``: a lookup table of ``num_embeddings`` rows (initialised N(0, 1), the ``padding_idx``
    row zero) whose forward reduces each bag of rows (``mode`` ``'sum'``, ``'mean'`` or ``'max'``), see
    :func:`daskgrad.nn.functional.embedding_bag`."""

    def __init__(self, num_embeddings, embedding_dim, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
                 mode="mean", sparse=False, _weight=None, include_last_offset=False, padding_idx=None, device=None,
                 dtype=None):
        super().__init__()
        F._refuse_embedding_options(max_norm, scale_grad_by_freq, sparse)
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.max_norm, self.norm_type, self.scale_grad_by_freq = max_norm, norm_type, scale_grad_by_freq
        if padding_idx is not None and not -num_embeddings <= padding_idx < max(num_embeddings, 1):
            raise AssertionError("padding_idx must be within num_embeddings")
        self.padding_idx = None if padding_idx is None else padding_idx % num_embeddings
        if _weight is None:
            _check_size(num_embeddings, embedding_dim)
            self.weight = Parameter(randn(num_embeddings, embedding_dim, dtype=dtype, chunks=-1, device=device))
            if self.padding_idx is not None:
                with no_grad():
                    self.weight[self.padding_idx] = 0.0
        else:
            if list(_weight.shape) != [num_embeddings, embedding_dim]:
                raise AssertionError("Shape of weight does not match num_embeddings and embedding_dim")
            self.weight = Parameter(_weight)
        self.mode, self.sparse, self.include_last_offset = mode, sparse, include_last_offset

    @classmethod
    def from_pretrained(cls, embeddings, freeze=True, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
                        mode="mean", sparse=False, include_last_offset=False, padding_idx=None):
        if embeddings.dim() != 2:
            raise AssertionError("Embeddings parameter is expected to be 2-dimensional")
        rows, cols = embeddings.shape
        bag = cls(rows, cols, max_norm, norm_type, scale_grad_by_freq, mode, sparse, embeddings, include_last_offset,
                  padding_idx)
        bag.weight.requires_grad = not freeze
        return bag

    def forward(self, input, offsets=None, per_sample_weights=None):
        return F.embedding_bag(input, self.weight, offsets, self.max_norm, self.norm_type, self.scale_grad_by_freq,
                               self.mode, self.sparse, per_sample_weights, self.include_last_offset, self.padding_idx)

    def extra_repr(self):
        s = f"{self.num_embeddings!r}, {self.embedding_dim!r}"
        if self.max_norm is not None:
            s += f", max_norm={self.max_norm!r}"
        if self.norm_type != 2:
            s += f", norm_type={self.norm_type!r}"
        if self.scale_grad_by_freq is not False:
            s += f", scale_grad_by_freq={self.scale_grad_by_freq!r}"
        s += f", mode={self.mode!r}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx!r}"
        return s


class LayerNorm(Module):
    """Normalise the trailing ``normalized_shape`` axes; weight ones, bias zeros."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, device=None, dtype=None):
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.normalized_shape, self.eps, self.elementwise_affine = shape, eps, elementwise_affine
        if elementwise_affine:  # torch checks only what it allocates
            _check_size(*shape)
        _affine(self, elementwise_affine, shape, dtype, device, bias)

    def forward(self, input):
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"bias={self.bias is not None}")
