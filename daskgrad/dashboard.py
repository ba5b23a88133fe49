"""``dask scheduler --preload daskgrad.dashboard``: daskgrad's page on a CLI scheduler's dashboard.

The page and its scheduler plugin live with the rest of what speaks to Dask, in
:mod:`daskgrad._dask.dashboard`; this module is the preload's public name.
"""
from ._dask.dashboard import dask_setup  # noqa: F401
