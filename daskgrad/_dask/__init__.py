"""Dask's graph internals behind one door.

Everything here takes and returns dask arrays, keys and clients (and :class:`.lazy.Lazy` values, an
op's result not built yet), and imports nothing of daskgrad but :mod:`daskgrad.chunk`: the only
package that imports ``dask.highlevelgraph``, ``dask.blockwise``, ``dask._task_spec`` or
distributed's internals (one compatibility point, and the reason dask is pinned to a tested
range).  Read in this order:

* :mod:`.labels`: which VJP rule made a layer (the dashboard's name for a fused task's part);
* :mod:`.layers`: small layers built directly (elementwise, within chunks, one chunk, a relabel);
* :mod:`.lazy`: what an op records -- its forward, operands and abstract value -- and its lowering;
* :mod:`.fuse`, :mod:`.optimize`: Blockwise fusion, chunk fusion, a linear-time cull;
* :mod:`.calls`: how a chunk-fused task runs (direct calls, one generated function a chunk);
* :mod:`.program`: a submission's program, lowered once per structure into a template and
  instantiated for every run (the one cache: plain loops, compiled functions, time loops);
* :mod:`.scan`: time loops, a step's program instantiated for every step (checkpoint_steps);
* :mod:`.halo`: stencils' halos, a task a chunk and axis;
* :mod:`.submit`: one submission on the current client, stored values, gathers, lost values;
* :mod:`.replicas`: the scheduler plugin keeping stored values on two workers;
* :mod:`.replay`: memory predicted by replaying a graph, and measured on a real run;
* :mod:`.dashboard`: daskgrad's page on the scheduler's dashboard.
"""
from .layers import elemwise, one_chunk, prototype, relabel, within_chunks
from .lazy import Lazy, alias, build, defer, defer_many, on_alias_built, rebind, rule, through, value_of
from .fold import LINEAGE_LAYERS, Folded, flat_layers, fold
from .halo import halo
from .optimize import FUSE_DEPTH, cull, holds_data, local_values, materialized, optimize, toposort_layers
from .scan import Body, ScanLayer, row_stand_in
from .scan import forward as scan_forward, revolve as scan_revolve
from .program import NoKey, Program, frozen, in_memory, instantiate, is_data, step_cache_clear, step_cache_info
from .replay import MemoryEstimate, PeakTracker, chunk_bytes, largest_chunk, recording, simulate
from .submit import (cancelled, client_of, current_client, data_futures, flat_keys, gather, keep, lost_keys,
                     reads_any, store, submit, task_room)

__all__ = ["Body", "ScanLayer", "row_stand_in", "scan_forward", "scan_revolve", "elemwise", "one_chunk", "prototype",
           "relabel", "within_chunks", "Lazy", "alias", "build", "defer", "defer_many", "on_alias_built", "rebind",
           "rule", "through", "value_of", "LINEAGE_LAYERS", "Folded", "flat_layers", "fold", "halo",
           "FUSE_DEPTH", "cull", "holds_data", "local_values", "materialized", "optimize", "toposort_layers",
           "NoKey", "Program", "frozen", "in_memory", "instantiate", "is_data", "step_cache_clear", "step_cache_info",
           "MemoryEstimate", "PeakTracker", "chunk_bytes", "largest_chunk", "recording", "simulate", "cancelled",
           "client_of", "current_client", "data_futures", "flat_keys", "gather", "keep", "lost_keys", "reads_any",
           "store", "submit", "task_room"]
