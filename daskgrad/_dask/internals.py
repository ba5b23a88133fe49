"""Every private name of dask and distributed that daskgrad uses, imported here once.

dask's task spec, high-level graph layers, blockwise rewriting, ordering and the scheduler's
plugin hooks have no stability promise.  Listing them in one module means a dask upgrade is
checked in one place: pyproject.toml pins the tested range (``dask>=2025.12.0,<2026.9``), and
if a name moves, this import fails at ``import daskgrad`` with dask's own message instead of
deep inside a backward.  (The dashboard page's imports of distributed's web internals stay in
:mod:`.dashboard`, imported only when a scheduler serves the page.)

``CHECKED`` names the oldest and the newest release of each that these names (and the whole suite)
were checked against; ``tests/test_dask_versions.py`` fails, saying what to do, when the installed
release lies outside that range or the pin in pyproject.toml does not cover it (CONTRIBUTING.md,
"Upgrading dask").
"""
import hashlib
import itertools
import uuid
from concurrent.futures import Executor

import dask
import dask.array as da
import numpy as np
from dask._task_spec import (  # noqa: F401  (re-exported)
    Alias, DataNode, GraphNode, List, Task, TaskRef, Tuple, _execute_subgraph, convert_legacy_graph,
    convert_legacy_task)
from dask.array.chunk import getitem as chunk_getitem  # noqa: F401  (a part of a chunk, as dask's task makes it)
from dask.array.core import _enforce_dtype as enforce_dtype  # noqa: F401
from dask.array.core import normalize_chunks, slices_from_chunks
from dask.array.core import elemwise  # noqa: F401  (an elementwise function on arrays whose chunks differ)
from dask.array.dispatch import concatenate_lookup  # noqa: F401
from dask.array.optimization import fuse_roots  # noqa: F401
from dask.optimization import fuse as dask_fuse  # noqa: F401
from dask.array.wrap import _broadcast_trick_inner as broadcast_trick  # noqa: F401
from dask.blockwise import Blockwise, _fuse_annotations, blockwise, optimize_blockwise  # noqa: F401
from dask.callbacks import Callback  # noqa: F401
from dask.core import flatten, get_deps  # noqa: F401
from dask.base import named_schedulers
from dask.utils import typename
from dask.highlevelgraph import HighLevelGraph, Layer, MaterializedLayer  # noqa: F401
from dask.order import order  # noqa: F401
from distributed.active_memory_manager import ReduceReplicas  # noqa: F401
from distributed.core import Status  # noqa: F401
from distributed.client import Client, _current_client, _global_clients
from distributed.diagnostics.plugin import SchedulerPlugin, WorkerPlugin  # noqa: F401
from distributed.metrics import context_meter  # noqa: F401
from distributed.worker import _worker_cvar

# the oldest and newest releases the names above (and the whole suite) were checked against
CHECKED = {"dask": ("2025.12.0", "2026.8.0"), "distributed": ("2025.12.0", "2026.8.0")}


def clientless() -> bool:
    """Whether ``distributed.get_client()`` would surely find no client: none made default, none
    set for this context, and not inside a worker's task.  It answers in a microsecond where
    ``get_client`` spends ~40 (reading its timeout from the config, resolving the worker), and a
    submission asks several times."""
    return not _global_clients and _current_client.get() is None and _worker_cvar.get(None) is None


def local_scheduler_asked() -> bool:
    """Whether dask's config names a local scheduler (``"threads"``, ``"sync"``, ``"processes"``, an
    executor), which in dask's ``get_scheduler`` wins over a distributed client."""
    scheduler = dask.config.get("scheduler", None)
    if isinstance(scheduler, str):
        return scheduler.lower() in named_schedulers
    return isinstance(scheduler, Executor)


def no_clients() -> bool:
    """Whether no distributed Client exists in this process, so no value is a Future (a Future holds
    its client)."""
    return not Client._instances


def metering() -> bool:
    """Whether the running task is metered: a distributed worker collects the seconds its code
    tells ``context_meter`` into fine performance metrics (nothing listens on other schedulers)."""
    return bool(context_meter._callbacks.get())


def array(graph, name, chunks, meta):
    """``da.Array(graph, name, chunks, meta=meta)`` for an array daskgrad describes itself: ``graph``
    a HighLevelGraph, ``chunks`` normalized, ``meta`` an empty chunk of its dtype and dimensions.
    dask's constructor checks and normalizes each of them again (~20 us); a step of small chunks
    makes a few dozen arrays, a tenth of a small program's iteration.  Where dask's
    ``array_plugins`` are configured, dask's constructor runs them."""
    if dask.config.config.get("array_plugins") or dask.config.config.get("array-plugins"):  # (dask.config.get's)
        return da.Array(graph, name, chunks, meta=meta)
    a = object.__new__(da.Array)
    a.dask, a._name, a._chunks, a._meta = graph, name, chunks, meta
    layer = graph.layers.get(name)
    if layer is not None and layer.collection_annotations is None:  # (as dask's constructor notes them)
        kind = type(meta)
        chunk_type = _typenames.get(kind)
        if chunk_type is None:
            chunk_type = _typenames[kind] = typename(kind)
        layer.collection_annotations = {"shape": tuple(sum(c) for c in chunks), "dtype": meta.dtype,
                                        "chunksize": tuple(max(c) for c in chunks), "chunks": chunks,
                                        "type": "dask.array.core.Array", "chunk_type": chunk_type}
    return a


_typenames = {}  # chunk type -> dask's typename of it (each array notes it)


def from_memory(x, chunks):
    """``dask.array.from_array`` of a NumPy array: a copy, named by a hash of its values, dtype and chunks
    (the same values make the same keys, as dask's), without dask's general hashing and constructor's
    checks, ~75% of the cost of a small batch made into a tensor at every step.  Other arrays (cupy)
    go to dask's, under a name of their own."""
    if type(x) is not np.ndarray:
        return da.from_array(x, chunks=chunks, asarray=False, name=False)
    chunks = _normalized_chunks(chunks, x.shape, x.dtype)
    x = x.copy()  # (one copy, C-contiguous, which the chunks view: as dask's)
    if x.dtype.hasobject:  # (no buffer to hash)
        name = f"array-{uuid.uuid4().hex}"
    else:
        h = hashlib.blake2b(repr((x.dtype.str, chunks)).encode(), digest_size=16)
        h.update(memoryview(x.reshape(-1)).cast("B"))
        name = f"array-{h.hexdigest()}"
    if all(len(c) == 1 for c in chunks):
        layer = {(name,) + (0,) * x.ndim: x}
    else:
        layer = dict(zip(itertools.product([name], *(range(len(c)) for c in chunks)),
                         [x[s] for s in slices_from_chunks(chunks)]))
    graph = HighLevelGraph.from_collections(name, layer, dependencies=())
    return array(graph, name, chunks, np.empty((0,) * x.ndim, dtype=x.dtype))


def _normalized_chunks(chunks, shape, dtype):
    """dask's ``normalize_chunks``, remembered for the chunks, shape, dtype and chunk-size setting it
    read (a loop making a batch of one shape into a tensor at every step asks the same each time)."""
    try:
        key = (chunks, shape, dtype, dask.config.get("array.chunk-size"))
        hash(key)
    except TypeError:  # (a list)
        return normalize_chunks(chunks, shape, dtype=dtype)
    got = _chunkings.get(key)
    if got is None:
        if len(_chunkings) >= 256:
            _chunkings.clear()  # (one call: another thread may be adding)
        got = _chunkings[key] = normalize_chunks(chunks, shape, dtype=dtype)
    return got


_chunkings = {}  # (chunks, shape, dtype, chunk-size setting) -> normalized chunks (see _normalized_chunks)
