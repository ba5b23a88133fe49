"""dask.array's public functions against daskgrad's ops: each is an op (``daskgrad.ops.__all__``) or
deliberately absent for a stated reason, and the user guide's NumPy-surface page names every one.
A dask release that adds a function fails here until it is built or listed below."""
import inspect
import pathlib
import re

import dask.array as da

import daskgrad as dg

# why a group of dask.array functions is not an op (the user guide's table gives the same reasons)
REASONS = {
    "io": "constructors and storage, not ops: daskgrad.from_array / tensor / as_tensor read arrays (Zarr, "
          "HDF5, dask), Tensor.array is the dask array to store (daskgrad.array is NumPy's array of tensors)",
    "machinery": "dask's graph-building machinery, not NumPy functions: daskgrad.map_blocks with a vjp is the "
                 "differentiable custom kernel",
    "attributes": "answered without computing: t.shape, t.ndim, and np.shape/np.ndim/np.result_type of a Tensor",
    "dask_only": "dask-specific data operations with no NumPy or torch counterpart to follow",
}
ABSENT = {
    **dict.fromkeys(["asarray", "asanyarray", "from_array", "from_delayed", "from_npy_stack",
                     "from_tiledb", "from_zarr", "to_hdf5", "to_npy_stack", "to_tiledb", "to_zarr", "store"], "io"),
    **dict.fromkeys(["map_blocks", "map_overlap", "blockwise", "atop", "reduction", "apply_gufunc", "as_gufunc",
                     "frompyfunc", "apply_along_axis", "apply_over_axes", "reshape_blockwise", "unify_chunks",
                     "register_chunk_type", "array_expr_enabled", "assert_eq", "compute", "optimize"], "machinery"),
    **dict.fromkeys(["shape", "ndim", "result_type"], "attributes"),
    **dict.fromkeys(["push", "shuffle", "isnull", "notnull"], "dask_only"),
}


def dask_functions():
    """dask.array's public functions (classes such as dtypes and modules such as random left out)."""
    return sorted(n for n in dir(da) if not n.startswith("_") and callable(getattr(da, n))
                  and not inspect.isclass(getattr(da, n)) and not inspect.ismodule(getattr(da, n)))


def test_every_dask_array_function_is_an_op_or_deliberately_absent():
    ops = set(dg.ops.__all__)
    unaccounted = [n for n in dask_functions() if n not in ops and n not in ABSENT]
    assert not unaccounted, f"dask.array functions neither ops nor listed in ABSENT: {unaccounted}"
    assert set(ABSENT.values()) <= set(REASONS)


def test_the_absent_list_holds_no_op_and_no_stale_name():
    functions = set(dask_functions())
    assert not set(ABSENT) & set(dg.ops.__all__), "an op is listed as absent"
    assert set(ABSENT) <= functions, f"not dask.array functions: {sorted(set(ABSENT) - functions)}"


def dask_linalg_functions():
    """dask.array.linalg's own functions (the names it imports from elsewhere left out)."""
    return sorted(n for n in dir(da.linalg) if not n.startswith("_") and inspect.isfunction(getattr(da.linalg, n))
                  and getattr(da.linalg, n).__module__ == "dask.array.linalg")


def test_every_dask_array_linalg_function_is_in_daskgrad_linalg():
    missing = [n for n in dask_linalg_functions() if n not in dg.linalg.__all__]
    assert not missing, f"dask.array.linalg functions missing from daskgrad.linalg: {missing}"


def _surface_section():
    page = (pathlib.Path(__file__).parents[1] / "docs" / "user-guide" / "numpy.md").read_text()
    return page[page.index("# The NumPy surface"):]


def test_the_readme_numpy_surface_names_every_dask_array_function():
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", _surface_section()))
    missing = [n for n in dask_functions() + dask_linalg_functions() if n not in words]
    assert not missing, f"the user guide's NumPy surface (docs/user-guide/numpy.md) does not name: {missing}"
