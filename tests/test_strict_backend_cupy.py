"""Every NumPy function and ufunc method the ops and their VJPs call on StrictArray chunks exists in
cupy's namespace (cupy imports without a GPU).  Its own file, apart from tests/test_strict_backend.py's
gradchecks: both are long, and `--dist loadfile` gives each file to one process."""
import pytest

import daskgrad as dg

from strict_array import to_strict
from op_specs import SPECS
from test_strict_backend import _api_flows


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


@pytest.mark.filterwarnings("ignore:Anomaly Detection has been enabled")
def test_every_numpy_call_that_reaches_a_chunk_exists_in_cupy(rng):
    """Every NumPy function and ufunc method the ops and their VJPs call on chunks, checked against
    cupy's namespace (cupy imports without a GPU), so a kernel cupy lacks fails here on CPU."""
    cupy = pytest.importorskip("cupy")
    import strict_array as strict

    strict.CALLS.clear()
    for spec in SPECS:
        inputs = [to_strict(t) for t in spec.inputs("uneven", rng)]
        spec.fn(*inputs).sum().backward()
        x = inputs[0]
        (g,) = dg.autograd.grad(spec.fn(*inputs).sum(), [x], create_graph=True)
        if g.requires_grad:  # double backward runs the VJP rules' own VJPs
            (g * g).sum().backward()
    _api_flows(lambda v, c: to_strict(dg.from_array(v, chunks=c)))
    assert len(strict.CALLS) > 20
    missing = sorted({why for call in strict.CALLS if (why := _missing_in_cupy(cupy, call))})
    assert not missing, missing
