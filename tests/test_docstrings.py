"""Every public name a user reaches has a docstring (what it computes, its NumPy or torch name, how it
differs): the ops of ``daskgrad.ops.__all__`` (``help(dg.exp)``, an IDE's hover, the stubs), and the
public names of ``daskgrad.linalg``, ``daskgrad.nn`` and ``daskgrad.optim``, and the factories
(``daskgrad.tensor``, ``zeros``, ...)."""
import inspect

import pytest

import daskgrad as dg


def _own_doc(obj):
    """The docstring ``obj`` itself has: a class's own, not one inherited from a base."""
    if isinstance(obj, type):
        return vars(obj).get("__doc__")
    return inspect.unwrap(obj).__doc__


def _public(module):
    """``module.__all__``, or else the public functions and classes it defines, less submodules."""
    names = getattr(module, "__all__", None) or [
        n for n, v in vars(module).items() if not n.startswith("_")
        and getattr(v, "__module__", None) == module.__name__ and (inspect.isfunction(v) or inspect.isclass(v))]
    return [(f"{module.__name__}.{name}", getattr(module, name)) for name in names
            if not inspect.ismodule(getattr(module, name))]


@pytest.mark.parametrize("module", [dg._tensor, dg.ops, dg.linalg, dg.nn, dg.nn.functional, dg.nn.init, dg.nn.utils,
                                    dg.optim, dg.optim.lr_scheduler], ids=lambda m: m.__name__)
def test_every_public_name_has_a_docstring(module):
    missing = [name for name, obj in _public(module) if not (_own_doc(obj) or "").strip()]
    assert not missing, f"public names without a docstring: {missing}"
