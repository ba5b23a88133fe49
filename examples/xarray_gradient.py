"""The gradient of a loss over a Zarr-backed xarray DataArray, written back to Zarr with its coords.

    python examples/xarray_gradient.py [output directory]

A field u(time, x) is stored in Zarr; the loss is its variance about the time mean, written with
xarray's own operations on the daskgrad leaf (dims and names, not axis numbers).  The gradient
comes back as a DataArray with u's dims and coords and is saved chunk by chunk with ``to_zarr``:
at no point is the field read onto the client as a whole.
"""
import os
import sys
import tempfile

import numpy as np
import xarray as xr

import daskgrad as dg


def main(out_dir):
    rng = np.random.default_rng(0)
    field = xr.Dataset({"u": (("time", "x"), rng.standard_normal((48, 100)))},
                       coords={"time": np.arange(48), "x": np.linspace(0.0, 1.0, 100)}).chunk({"time": 12})
    field.to_zarr(os.path.join(out_dir, "field.zarr"), mode="w", consolidated=False)

    u = xr.open_zarr(os.path.join(out_dir, "field.zarr"), consolidated=False)["u"]  # lazy, 4 chunks
    w = dg.from_array(u, requires_grad=True)                  # a leaf over the Zarr chunks
    a = w.to_xarray()                                         # a DataArray over the leaf: dims, coords
    loss = ((a - a.mean("time")) ** 2).mean()                 # xarray's operations, differentiable
    loss.data.backward()

    grad = w.grad.to_xarray()                                 # dims and coords of u, dask-backed
    grad.to_dataset(name="du").to_zarr(os.path.join(out_dir, "grad.zarr"), mode="w", consolidated=False)
    saved = xr.open_zarr(os.path.join(out_dir, "grad.zarr"), consolidated=False)["du"]
    print(f"loss {float(loss.data.item()):.6f}; gradient {dict(saved.sizes)} in {saved.chunks} chunks, "
          f"x from {float(saved.x[0]):.2f} to {float(saved.x[-1]):.2f}")
    return u, saved


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp())
