"""Dask's graph internals behind one door.

Everything here takes and returns dask arrays, keys and clients (and :class:`.lazy.Lazy` values, an
op's recorded result, not built yet), and imports nothing of daskgrad but :mod:`daskgrad.chunk`: the
only package that imports ``dask.highlevelgraph``, ``dask.blockwise``, ``dask._task_spec`` or
distributed's internals (one compatibility point, and the reason dask is pinned to a tested
range).  What daskgrad caches and instantiates is the program it recorded, never dask's graph.  Read in
the order of the data:

* :mod:`.internals`: every private dask and distributed name used, imported once;
* :mod:`.lazy`: what an op records -- its forward, operands, params and abstract value -- aliases,
  and the lowering of recorded ops to dask layers (elementwise chains fused: ``Fused``);
* :mod:`.layers`, :mod:`.labels`, :mod:`.fold`: small layers built directly, which VJP rule made a
  layer (the dashboard's name for it), an array's long graph held as one layer (``tensor.array``);
* :mod:`.program`: a submission's program (equations, slots, key), lowered once per key into a
  template and instantiated for every later run (the one cache: plain loops, compiled functions,
  time loops);
* :mod:`.optimize`, :mod:`.fuse`, :mod:`.calls`, :mod:`.rows`: Blockwise fusion and a linear-time
  cull, chunk fusion, how a chunk-fused task runs, row blocks;
* :mod:`.scan`: time loops, a step's program instantiated for every step (checkpoint_steps, scan);
* :mod:`.halo`: stencils' halos, a task a chunk and axis; rolls that keep the chunks;
* :mod:`.submit`, :mod:`.deterministic`, :mod:`.replicas`: one submission on the current client,
  stored values, gathers, lost values; the same bits wherever tasks run; kept values on two workers;
* :mod:`.peaks`: peak memory predicted by simulating a graph's run order, and measured on a real run;
* :mod:`.dashboard`: daskgrad's page on the scheduler's dashboard.
"""
from .layers import elemwise, exact, one_chunk, prototype, relabel, within_chunks
from .lazy import (Constant, Lazy, Piece, alias, basic_index, build, building, defer, defer_many, labelled,
                   on_alias_built, rebind, rule, through, value_of)
from .fold import LINEAGE_LAYERS, Folded, flat_layers, fold
from .halo import halo, rolled
from .internals import from_memory
from .optimize import FUSE_DEPTH, cull, holds_data, local_values, materialized, optimize, toposort_layers
from .scan import Body, ScanLayer, row_placeholder
from .scan import forward as scan_forward, revolve as scan_revolve
from .lazy import frozen_held
from .program import (NoKey, Program, frozen, gc_paused, in_memory, instantiate, is_data, cache_piece, cached_piece,
                      step_cache_clear, step_cache_info)
from .peaks import MemoryEstimate, PeakTracker, chunk_bytes, largest_chunk, recording, simulate
from .submit import (cancelled, client_of, current_client, data_futures, flat_keys, gather, held_keys, keep,
                     lost_keys, memory_total, reads_any, store, submit, task_room)

__all__ = ["Constant", "from_memory",
           "Body", "ScanLayer", "row_placeholder", "scan_forward", "scan_revolve", "elemwise", "exact", "one_chunk",
           "prototype",
           "relabel", "within_chunks", "Lazy", "Piece", "alias", "basic_index", "build", "building", "defer",
           "defer_many", "labelled", "on_alias_built", "rebind", "rule", "through", "value_of", "LINEAGE_LAYERS",
           "Folded", "flat_layers", "fold",
           "halo", "rolled", "FUSE_DEPTH", "cull", "holds_data", "local_values", "materialized", "optimize",
           "toposort_layers", "NoKey", "Program", "frozen", "frozen_held", "gc_paused", "in_memory", "instantiate",
           "is_data", "cache_piece", "cached_piece", "step_cache_clear", "step_cache_info", "MemoryEstimate",
           "PeakTracker", "chunk_bytes",
           "largest_chunk", "recording", "simulate", "cancelled", "client_of", "current_client", "data_futures",
           "flat_keys", "gather", "held_keys", "keep", "lost_keys", "memory_total", "reads_any", "store", "submit",
           "task_room"]
