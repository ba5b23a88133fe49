"""Dask's graph internals behind one door.

Everything here takes and returns dask arrays, keys and clients, and imports nothing of daskgrad
but :mod:`daskgrad.chunk`: the only package that imports ``dask.highlevelgraph``,
``dask.blockwise``, ``dask._task_spec`` or distributed's internals (one compatibility point, and
the reason dask is pinned to a tested range).  Read in this order:

* :mod:`.fold`: a long lineage held as one layer (graphs stay a few layers deep);
* :mod:`.labels`: which VJP rule made a layer (the dashboard's name for a fused task's part);
* :mod:`.arena`: stand-ins for the reverse pass's rules, joined once for what leaves the pass;
* :mod:`.elemwise`: elementwise and within-chunk layers built without dask's per-call inference;
* :mod:`.fuse`, :mod:`.optimize`: Blockwise fusion, chunk fusion, a linear-time cull;
* :mod:`.calls`: how a chunk-fused task runs (direct calls, one generated function a chunk);
* :mod:`.gating`: a time step's stateless values rebuilt to wait for the state (checkpoint_steps);
* :mod:`.halo`: stencils' halos, a task a chunk and axis;
* :mod:`.stepcache`: a graph with the structure of one optimized before reuses it (:mod:`.freeze`: its key;
  ``capture_templates``/``replay_template``: the templates ``daskgrad.compile`` keeps and replays);
* :mod:`.submit`: one submission on the current client, stored values, gathers, lost values;
* :mod:`.replicas`: the scheduler plugin keeping stored values on two workers;
* :mod:`.replay`: memory predicted by replaying a graph, and measured on a real run;
* :mod:`.dashboard`: daskgrad's page on the scheduler's dashboard.
"""
from .arena import Arena, one_chunk, prototype, relabel
from .elemwise import Pending, deferred, elemwise, within_chunks
from .fold import LINEAGE_LAYERS, Folded, flat_layers, fold
from .gating import gate, marks_of, stateless_waiting
from .halo import halo
from .optimize import FUSE_DEPTH, cull, holds_data, local_values, materialized, optimize, toposort_layers
from .stepcache import capture_templates, optimize_cached, replay_template, step_cache_clear, step_cache_info
from .replay import MemoryEstimate, PeakTracker, chunk_bytes, largest_chunk, recording, simulate
from .submit import (cancelled, client_of, current_client, data_futures, flat_keys, gather, keep, lost_keys,
                     reads_any, store, submit, task_room)

__all__ = ["Arena", "one_chunk", "prototype", "relabel", "Pending", "deferred", "elemwise", "within_chunks",
           "LINEAGE_LAYERS", "Folded", "flat_layers", "fold", "gate", "marks_of", "stateless_waiting", "halo",
           "FUSE_DEPTH", "cull", "holds_data", "local_values", "materialized", "optimize", "optimize_cached",
           "capture_templates", "replay_template",
           "step_cache_clear", "step_cache_info", "toposort_layers", "MemoryEstimate", "PeakTracker", "chunk_bytes",
           "largest_chunk", "recording", "simulate", "cancelled", "client_of", "current_client", "data_futures",
           "flat_keys", "gather", "keep",
           "lost_keys", "reads_any", "store", "submit", "task_room"]
