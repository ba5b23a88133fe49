"""What :func:`daskgrad.load` may build from a checkpoint's structure: torch.serialization's
``weights_only`` allowlist, for daskgrad's checkpoints.

A checkpoint's structure is a pickle, and unpickling calls whatever functions the pickle names: a
crafted file runs a command on load.  ``daskgrad.load`` reads it by default (``weights_only=True``,
as ``torch.load`` since PyTorch 2.6) with an unpickler that builds only what a checkpoint of
tensors, state_dicts and training state holds: dicts (``OrderedDict``, ``Counter``), lists,
tuples, sets, numbers, strings, bytes, NumPy dtypes (daskgrad's ``dg.float32``...), and the
tensors themselves (each a reference to its Zarr array, never code).  Anything else (a whole
Module, a class of the user's) is refused with torch's words, before it is built; a user who trusts
the file allowlists it (:func:`add_safe_globals`, :func:`safe_globals`) or loads with
``weights_only=False``.
"""
from __future__ import annotations

import _codecs
import collections
import contextlib
import pickle

import numpy as np

UNSAFE_MESSAGE = ("daskgrad.load reads only tensors, containers, numbers and strings by default "
                  "(`weights_only=True`, as torch.load does since PyTorch 2.6). Re-running `daskgrad.load` "
                  "with `weights_only` set to `False` will likely succeed, but it can result in arbitrary code "
                  "execution. Do it only if you got the file from a trusted source.")
DOCS_MESSAGE = ("\n\nCheck the documentation of daskgrad.load (and of daskgrad.serialization) to learn more about "
                "types accepted by default with weights_only.")
_BLOCKED = ("sys", "os", "posix", "nt")  # torch's blocklist: never, even allowlisted


def _allowed():
    out = {"collections.OrderedDict": collections.OrderedDict, "collections.Counter": collections.Counter,
           "builtins.set": set, "builtins.frozenset": frozenset, "builtins.bytearray": bytearray,
           "builtins.complex": complex, "_codecs.encode": _codecs.encode,  # (bytes, protocols < 3)
           "numpy.dtype": np.dtype}  # daskgrad's dtypes are NumPy's: torch allows its dtypes too
    for t in set(type(np.dtype(c)) for c in np.typecodes["All"] if c not in "OV"):
        out[f"{t.__module__}.{t.__name__}"] = t
    return out


_ALLOWED = _allowed()
_user = {}  # "module.name" -> the object: add_safe_globals


def _path(obj):
    if isinstance(obj, tuple):  # (callable, "module.name"): torch's form for a renamed global
        return obj[1]
    return f"{obj.__module__}.{obj.__qualname__}"


def add_safe_globals(safe_globals) -> None:
    """Let :func:`daskgrad.load` build these classes and call these functions (each an object, or
    ``(object, "module.name")``) from a checkpoint with ``weights_only=True``: torch's
    ``torch.serialization.add_safe_globals``.  Only for objects you trust."""
    for g in safe_globals:
        _user[_path(g)] = g[0] if isinstance(g, tuple) else g


def get_safe_globals() -> list:
    """The objects :func:`add_safe_globals` allowed."""
    return list(_user.values())


def clear_safe_globals() -> None:
    """Forget what :func:`add_safe_globals` allowed."""
    _user.clear()


@contextlib.contextmanager
def safe_globals(safe_globals):
    """:func:`add_safe_globals` for the duration of a ``with`` block (torch's context manager)."""
    before = dict(_user)
    add_safe_globals(safe_globals)
    try:
        yield
    finally:
        _user.clear()
        _user.update(before)


def _shown(full_path):
    """A global's name as torch shows it in its message: builtins without their module."""
    return full_path[len("builtins."):] if full_path.startswith("builtins.") else full_path


class WeightsUnpickler(pickle.Unpickler):
    """An unpickler that builds only allowlisted globals; tensors come through ``persistent_load``."""

    def find_class(self, module, name):
        full_path = f"{module}.{name}"
        if module in _BLOCKED:
            raise pickle.UnpicklingError(f"Weights only load failed. {UNSAFE_MESSAGE}\n\n\nTrying to load unsupported "
                                         f"GLOBAL {full_path} whose module {module} is blocked.{DOCS_MESSAGE}")
        if full_path in _ALLOWED:
            return _ALLOWED[full_path]
        if full_path in _user:
            return _user[full_path]
        shown = _shown(full_path)
        raise pickle.UnpicklingError(
            "Weights only load failed. This file can still be loaded, to do so you have two options, do those "
            f"steps only if you trust the source of the checkpoint. \n\t(1) {UNSAFE_MESSAGE}\n\t(2) Alternatively, to "
            "load with `weights_only=True` please check the recommended steps in the following error message.\n\t"
            f"WeightsUnpickler error: Unsupported global: GLOBAL {shown} was not an allowed global by default. "
            f"Please use `daskgrad.serialization.add_safe_globals([{shown}])` or the "
            f"`daskgrad.serialization.safe_globals([{shown}])` context manager to allowlist this global if you trust "
            f"this class/function.{DOCS_MESSAGE}")
