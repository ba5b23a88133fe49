"""The whole op gradcheck suite on StrictArray chunks, which fail like cupy does: code that would
copy a chunk to the host, or mix host arrays into device chunks, fails here on CPU."""
import dask.array as da
import numpy as np
import pytest

import daskgrad as dg
from daskgrad.strict import StrictArray, to_strict
from daskgrad.testing import gradcheck

from test_grad_ops import OPS, _inputs


def test_strict_array_refuses_host_conversion_and_host_operands():
    s = StrictArray(np.ones(3))
    with pytest.raises(TypeError, match="Implicit conversion to a NumPy array is not allowed"):
        np.asarray(s)
    with pytest.raises(TypeError, match="Unsupported type"):
        s * np.ones(3)
    assert isinstance(s * np.ones(3, like=s), StrictArray)
    x = to_strict(dg.ones(4, chunks=2))
    with pytest.raises(TypeError, match="Implicit conversion"):
        da.map_blocks(lambda b: np.asarray(b) * 2, x.array, dtype=float).compute()


@pytest.mark.parametrize("chunking", ["uneven", "size1"])
@pytest.mark.parametrize("name", list(OPS))
def test_op_gradients_on_strict_chunks(name, chunking, rng):
    fn, shapes, low, high = OPS[name]
    inputs = [to_strict(t) for t in _inputs(shapes, low, high, chunking, rng)]
    wrapped = _constants_on_strict(fn)
    assert gradcheck(wrapped, inputs, eps=1e-6, atol=1e-6, rtol=1e-5)
    out = wrapped(*inputs)
    assert isinstance(out.array._meta, StrictArray)
    out.sum().backward()
    for t in inputs:
        assert isinstance(t.grad.array._meta, StrictArray) and t.grad.chunks == t.chunks
        assert isinstance(t.grad.array.blocks[0].compute(), StrictArray)


def _constants_on_strict(fn):
    def run(*xs):
        return fn(*xs)
    return run


def test_factories_create_chunks_of_the_requested_backend():
    from daskgrad.strict import register

    register()
    for make in (lambda: dg.ones(4, 3, chunks=2, device="strict"), lambda: dg.zeros(5, device="strict"),
                 lambda: dg.randn(6, chunks=3, device="strict"), lambda: dg.arange(5, device="strict"),
                 lambda: dg.full((2, 2), 1.5, device="strict")):
        t = make()
        assert isinstance(t.array._meta, StrictArray), t
        assert isinstance(t.array.blocks[0].compute(), StrictArray)


# cupy's ufunc methods beyond __call__, from its docs (cupy/ufunc reference): anything else raises
# NotImplementedError on a GPU.
CUPY_UFUNC_METHODS = {"reduce": {"add", "multiply"}, "accumulate": {"add", "multiply"}, "reduceat": {"add"},
                      "at": {"add", "subtract", "maximum", "minimum", "bitwise_and", "bitwise_or", "bitwise_xor"}}


def _missing_in_cupy(cupy, call):
    """Why cupy could not run ``call`` (a NumPy function or ufunc method seen on a chunk), or None."""
    import functools
    import inspect

    qualname, method, kwargs = call
    *modules, name = qualname.split(".")
    if modules == ["ufunc"]:
        if not callable(getattr(cupy, name, None)):  # a cupy.ufunc, or matmul's gufunc
            return f"cupy has no ufunc {name}"
        if method == "outer" or method == "__call__":
            bad = set(kwargs) - {"out", "dtype", "casting"}
            return f"cupy.{name} takes no {sorted(bad)}" if bad else None
        return None if name in CUPY_UFUNC_METHODS.get(method, ()) else f"cupy.{name}.{method} is not supported"
    try:  # cupy's own __array_function__ lookup: numpy.<sub>.<name> -> cupy.<sub>.<name>
        func = getattr(functools.reduce(getattr, modules[1:], cupy), name)
    except AttributeError:
        return f"cupy has no {qualname.replace('numpy', 'cupy', 1)}"
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):  # a compiled function without a signature: the name is all we check
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return None
    bad = set(kwargs) - set(params)
    return f"cupy's {qualname} takes no {sorted(bad)}" if bad else None


def test_every_numpy_call_that_reaches_a_chunk_exists_in_cupy(rng):
    """Every NumPy function and ufunc method the ops and their VJPs call on chunks, checked against
    cupy's namespace (cupy imports without a GPU), so a kernel cupy lacks fails here on CPU."""
    cupy = pytest.importorskip("cupy")
    from daskgrad import strict

    strict.CALLS.clear()
    for name, (fn, shapes, low, high) in OPS.items():
        inputs = [to_strict(t) for t in _inputs(shapes, low, high, "uneven", rng)]
        fn(*inputs).sum().backward()
        x = inputs[0]
        (g,) = dg.autograd.grad(fn(*inputs).sum(), [x], create_graph=True)
        if g.requires_grad:  # double backward runs the VJP rules' own VJPs
            (g * g).sum().backward()
    assert len(strict.CALLS) > 20
    missing = sorted({why for call in strict.CALLS if (why := _missing_in_cupy(cupy, call))})
    assert not missing, missing
