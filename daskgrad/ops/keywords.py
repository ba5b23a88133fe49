"""torch's keyword names for the Tensor methods whose op names an argument otherwise.

A method that is a NumPy op as it is (``x.add`` is :func:`daskgrad.add`, ``x.roll`` is :func:`daskgrad.roll`)
names its arguments as NumPy does (``add(a, b)``, ``roll(x, shift, axis)``), where torch's method takes
``x.add(other=y)`` and ``x.roll(shifts=1, dims=0)``; the methods that take a size as several ints
(``x.view(4, 3)``) take torch's keyword for the whole size too (``x.view(size=(4, 3))``).  Installed last
(:mod:`daskgrad.ops` imports this module after every other one), over the method on :class:`~daskgrad.Tensor`
and its in-place form (``add_``): the module-level functions keep NumPy's names.
"""
from __future__ import annotations

import functools
import inspect

from .._tensor import Tensor

# the methods whose second argument torch calls ``other`` (the op's ``b``, ``x2`` ... whatever it is named)
_OTHER = ("add", "sub", "mul", "div", "divide", "true_divide", "multiply", "subtract", "atan2", "arctan2",
          "copysign", "fmax", "fmin", "fmod", "remainder", "floor_divide", "hypot", "ldexp", "nextafter", "maximum",
          "minimum", "logaddexp", "logaddexp2", "logical_and", "logical_or", "logical_xor", "bitwise_and",
          "bitwise_or", "bitwise_xor", "eq", "ne", "lt", "le", "gt", "ge", "greater", "greater_equal", "less",
          "less_equal", "not_equal", "kron", "inner", "vdot")
# torch's name -> the second argument of the op (found by position)
_SECOND = {**{name: "other" for name in _OTHER}, "pow": "exponent", "float_power": "exponent", "mm": "mat2",
           "outer": "vec2", "ger": "vec2", "dot": "tensor"}
_SPLIT = {"sections": "indices_or_sections", "indices": "indices_or_sections"}
# torch's keyword -> the op's, for the methods that are not only ``(self, other)``
RENAMES = {
    "swapaxes": {"axis0": "axis1", "axis1": "axis2"}, "swapdims": {"dim0": "axis1", "dim1": "axis2"},
    "roll": {"shifts": "shift", "dims": "axis"}, "rot90": {"dims": "axes"}, "diag": {"diagonal": "k"},
    "take": {"index": "indices"}, "broadcast_to": {"size": "shape"},
    "split": {"split_size": "split_size_or_sections"},
    "hsplit": _SPLIT, "vsplit": _SPLIT, "dsplit": _SPLIT,
    "tensor_split": {**_SPLIT, "tensor_indices_or_sections": "indices_or_sections"},
}
# torch's keywords of the methods that take them positionally (a size as several ints: the keyword is the whole size)
POSITIONAL = {
    "view": ("size",), "reshape": ("shape",), "permute": ("dims",), "expand": ("size",), "repeat": ("repeats",),
    "tile": ("dims",), "new_zeros": ("size",), "new_ones": ("size",), "new_empty": ("size",),
    "new_full": ("size", "fill_value"), "new_tensor": ("data",),
}


_ONE_OF = " received an invalid combination of arguments - got (), but expected one of:\n"
# torch's errors for a method called with none of the arguments it needs (``x.permute()``), and the keywords that
# give one; daskgrad's ops read no argument as their NumPy default (``transpose(x)`` reverses the axes)
REQUIRED = {
    **{name: (("dim", "axis"), f'{name}() missing 1 required positional arguments: "dim"')
       for name in ("cumprod", "cumprod_", "cumsum", "cumsum_", "log_softmax", "logsumexp", "softmax", "unsqueeze")},
    **{name: (("size",), f'{name}() missing 1 required positional arguments: "size"')
       for name in ("expand", "new_empty", "new_ones", "new_zeros", "sum_to_size")},
    "new_full": (("size",), 'new_full() missing 2 required positional argument: "size", "fill_value"'),
    "flip": (("dims", "axis"), 'flip() missing 1 required positional arguments: "dims"'),
    "tile": (("dims", "reps"), 'tile() missing 1 required positional arguments: "dims"'),
    "permute": (("dims",), 'permute() missing 1 required positional arguments: "dims"'),
    "repeat": (("repeats",), 'repeat() missing 1 required positional arguments: "repeats"'),
    "reshape": (("shape",), 'reshape() missing 1 required positional arguments: "shape"'),
    "roll": (("shifts", "shift"), 'roll() missing 1 required positional arguments: "shifts"'),
    **{name: (("dim0", "axis1"), f'{name}() missing 2 required positional argument: "dim0", "dim1"')
       for name in ("transpose", "transpose_", "swapdims", "swapdims_")},
    **{name: (("axis0", "axis1"), f'{name}() missing 2 required positional argument: "axis0", "axis1"')
       for name in ("swapaxes", "swapaxes_")},
    "view": (("size", "dtype"), f"view(){_ONE_OF} * (torch.dtype dtype)\n * (tuple of ints size)\n"),
    **{name: (("source",), f"{name}(){_ONE_OF} * (int source, int destination)\n * (tuple of ints source, tuple of "
                           "ints destination)\n") for name in ("movedim", "moveaxis")},
    "narrow": (("dim",), f"narrow(){_ONE_OF} * (int dim, Tensor start, int length)\n * (int dim, int start, int "
                         "length)\n"),
}


def _required(method, keys, message):
    """``method`` raising torch's TypeError ``message`` when called with no argument (none of ``keys`` either)."""
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        if not args and not any(key in kwargs for key in keys):
            raise TypeError(message)
        return method(self, *args, **kwargs)
    call.__required__ = method  # (tools/make_stubs.py shows the method's own signature)
    return call


def _renamed_signature(method, renames):
    """``method``'s signature with torch's names (``self`` first), or None where it has none to rename."""
    try:
        sig = inspect.signature(method)
    except (TypeError, ValueError):
        return None
    params = list(sig.parameters.values())
    if not params or params[0].kind not in (params[0].POSITIONAL_ONLY, params[0].POSITIONAL_OR_KEYWORD):
        return None  # (self, *args, **kwargs): an in-place form, shown as it is
    targets = list(renames.values())
    back = {op: torch for torch, op in renames.items() if targets.count(op) == 1}  # one torch name: shown
    return sig.replace(parameters=[params[0].replace(name="self")]
                       + [p.replace(name=back.get(p.name, p.name)) for p in params[1:]])


def _torch_keywords(method, name, renames=None, positional=()):
    """``method`` also taking torch's keywords: ``renames`` (torch's name -> the op's) are passed under the
    op's name, ``positional`` (torch's names of the leading arguments, in order) in their place."""
    renames = renames or {}
    try:  # where the op takes each renamed argument positionally (after self)
        params = list(inspect.signature(method).parameters.values())[1:]
    except (TypeError, ValueError):
        params = []
    places = {p.name: i for i, p in enumerate(params) if p.kind == p.POSITIONAL_OR_KEYWORD}

    @functools.wraps(method)
    def call(self, *args, **kwargs):
        if positional and any(key in kwargs for key in positional):
            args = list(args)
            for i, key in enumerate(positional):
                if key in kwargs:
                    if len(args) != i:
                        raise TypeError(f"{name}() got {'multiple values for' if len(args) > i else 'no value before'}"
                                        f" argument '{key}'")
                    args.append(kwargs.pop(key))
        if renames and any(key in kwargs for key in renames):
            given = {}
            for key, value in kwargs.items():
                op_key = renames.get(key, key)
                if op_key in given or places.get(op_key, len(args)) < len(args):
                    raise TypeError(f"{name}() got multiple values for argument '{key}'")
                given[op_key] = value
            kwargs = given
        return method(self, *args, **kwargs)
    signature = _renamed_signature(method, renames) if renames else None
    if signature is not None:
        call.__signature__ = signature
    return call


def install():
    """Put the methods taking torch's keywords on :class:`~daskgrad.Tensor`, each over the one there (and its
    in-place form ``name_`` where the Tensor has one)."""
    table = {name: (dict(RENAMES.get(name, {})), POSITIONAL.get(name, ())) for name in {*RENAMES, *POSITIONAL}}
    for name, torch_name in _SECOND.items():
        params = list(inspect.signature(getattr(Tensor, name)).parameters)
        table[name] = ({torch_name: params[1]}, ())
    for name, (renames, positional) in table.items():
        for method_name in (name, f"{name}_"):
            method = Tensor.__dict__.get(method_name)
            if method is None:
                continue
            call = _torch_keywords(method, method_name, renames, positional)
            if method_name != name and hasattr(Tensor.__dict__[name], "__signature__"):
                call.__signature__ = Tensor.__dict__[name].__signature__  # (the in-place form's is *args, **kwargs)
            setattr(Tensor, method_name, call)
    for name, (keys, message) in REQUIRED.items():
        method = Tensor.__dict__.get(name)
        if method is not None:
            setattr(Tensor, name, _required(method, keys, message))
