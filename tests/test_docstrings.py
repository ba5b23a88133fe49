"""Every public name a user reaches has a docstring (what it computes, its NumPy or torch name, how it
differs): ``daskgrad.__all__`` (the ops, ``help(dg.exp)``, an IDE's hover, the stubs; the factories,
``connect``, the modes), every public method and property of ``Tensor``, and the public names of
``nn``, ``optim``, ``functional``, ``linalg``, ``func``, ``autograd``, ``optimize``, ``utils`` and
``testing``.  Methods installed on Tensor at import time are named as the method they are."""
import inspect
import pydoc

import numpy as np
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
            if not inspect.ismodule(getattr(module, name)) and not isinstance(getattr(module, name), np.dtype)]


@pytest.mark.parametrize("module", [dg, dg._tensor, dg.ops, dg.linalg, dg.nn, dg.nn.functional, dg.nn.init,
                                    dg.nn.utils, dg.optim, dg.optim.lr_scheduler, dg.functional, dg.func,
                                    dg.autograd, dg.autograd.function, dg.optimize, dg.utils, dg.utils.checkpoint,
                                    dg.testing], ids=lambda m: m.__name__)
def test_every_public_name_has_a_docstring(module):
    missing = [name for name, obj in _public(module) if not (_own_doc(obj) or "").strip()]
    assert not missing, f"public names without a docstring: {missing}"


def _tensor_attributes():
    """Tensor's public methods and properties, as Python finds them on the class."""
    for name in sorted(dir(dg.Tensor)):
        if name.startswith("_"):
            continue
        attr = inspect.getattr_static(dg.Tensor, name)
        if isinstance(attr, (staticmethod, classmethod)):
            attr = attr.__func__
        if callable(attr) or isinstance(attr, property):
            yield name, attr


def test_every_public_tensor_method_and_property_has_a_docstring():
    missing = [name for name, attr in _tensor_attributes() if not (attr.__doc__ or "").strip()]
    assert not missing, f"Tensor methods and properties without a docstring: {missing}"


def test_methods_installed_on_tensor_are_named_as_the_method_not_as_their_helper():
    wrong = [(name, attr.__name__) for name, attr in _tensor_attributes() if not isinstance(attr, property)
             and (attr.__name__.startswith("_") or attr.__name__ == "<lambda>")]
    assert not wrong, f"help() would show these under another name: {wrong}"
    assert dg.Tensor.add_.__qualname__ == "Tensor.add_" and "In-place version" in dg.Tensor.add_.__doc__
    assert dg.Tensor.compute.__name__ == "compute" and dg.Tensor.persist.__name__ == "persist"


def test_help_of_backward_shows_backward_with_its_arguments_documented_as_torch_s_are():
    text = pydoc.render_doc(dg.Tensor.backward, renderer=pydoc.plaintext)
    assert "backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None)" in text
    assert "_tensor_backward" not in text
    torch = pytest.importorskip("torch")
    for argument in inspect.signature(torch.Tensor.backward).parameters:
        if argument != "self":
            assert f"{argument} : " in dg.Tensor.backward.__doc__, f"backward's {argument} is not documented"
