"""Running graphs and holding their results.

One submission runs on the current distributed Client, or on dask's local scheduler when there is
none or dask's config names a local one (``dask.config.set(scheduler="threads")``, which wins over a
client in dask's own ``compute``).  A result the caller stores between submissions is re-keyed as
plain data (no lineage) and kept on two workers (:mod:`.replicas`); reading results back is a gather, with no new tasks.
"""
from __future__ import annotations

import atexit
import contextlib
import itertools
import weakref

import dask
import dask.array as da
from dask.base import tokenize

from . import deterministic, replicas
from .deterministic import on_cluster as deterministic_workers
from .lazy import Lazy
from .program import Program, gc_running, run_inline
from .fold import flat_layers
from .optimize import holds_data, per_layer
from .internals import (DataNode, HighLevelGraph, MaterializedLayer, TaskRef, clientless, flatten,
                        local_scheduler_asked, no_clients)


def current_client():
    """The distributed Client this thread would use, or ``None`` (then dask's local scheduler runs):
    as in dask's ``get_scheduler``, a local scheduler named in dask's config (``"threads"``, ``"sync"``,
    ``"processes"``, or an executor) wins over a client."""
    if clientless() or local_scheduler_asked():
        return None
    try:
        from distributed import get_client
    except ImportError:  # pragma: no cover - distributed is a core dependency
        return None
    try:
        return get_client()
    except ValueError:
        return None


def submit(arrays, phase, progress=False, deterministic=False):
    """Persist ``arrays`` (already optimized) and return them once in memory: on the current client
    in a span named ``phase`` (the dashboard groups its tasks under it), else on dask's local
    scheduler.  ``progress``: distributed's progress bar, or dask's locally.  ``deterministic``:
    the same bits wherever tasks run (:mod:`.deterministic`)."""
    client = current_client()
    if client is None:
        # a step run inline (one task at a time) keeps the BLAS threads it had, unless the mode asks for one
        with _one_blas_thread_per_task(always=True) if deterministic else contextlib.nullcontext():
            done = None if progress else run_inline(arrays)
            if done is not None:
                return done
            blas = contextlib.nullcontext() if deterministic else _one_blas_thread_per_task()
            with _local_progress(progress), blas, gc_running():
                return list(dask.persist(*arrays, optimize_graph=False))
    from distributed import span, wait

    deterministic_workers(client, deterministic)

    with gc_running():
        with span("daskgrad", phase):
            out = client.persist(arrays, optimize_graph=False)
        if progress:
            _cluster_progress(out, phase)
        wait(out)
    return list(out)


def _cluster_progress(arrays, phase):
    """A bar over the submission's output chunks until they are in memory: tqdm's (``tqdm.auto``: a
    widget in a notebook that has ipywidgets, text elsewhere) when installed, else distributed's
    text bar -- never its notebook widget, which needs ipywidgets and shows nothing from a call
    that blocks until the work is done."""
    from distributed import futures_of

    futures = futures_of(arrays)
    try:
        from tqdm.auto import tqdm
    except ImportError:
        from distributed import progress

        progress(futures, notebook=False)
        return
    from distributed import as_completed

    with tqdm(total=len(futures), desc=f"daskgrad {phase}", unit="chunk") as bar:
        for _ in as_completed(futures):
            bar.update()


def _one_blas_thread_per_task(always=False):
    """On dask's threaded scheduler each task's BLAS call would start a BLAS thread pool of its own,
    and 2 dask threads x 2 BLAS threads oversubscribe 2 cores (distributed's nanny sets one BLAS
    thread per worker process for the same reason).  Limit BLAS while the submission runs, when
    threadpoolctl is installed (it is an optional dependency); ``always`` (deterministic mode):
    on any scheduler, so that a product's bits do not depend on the threads (it needs threadpoolctl)."""
    if not always and dask.config.get("scheduler", None) not in (None, "threads", "threading"):
        return contextlib.nullcontext()
    controller = deterministic.controller() if always else deterministic.blas_controller()
    return contextlib.nullcontext() if controller is None else controller.limit(limits=1, user_api="blas")


@contextlib.contextmanager
def _local_progress(enabled):
    if enabled:
        from dask.diagnostics import ProgressBar

        with ProgressBar():
            yield
    else:
        yield


# ------------------------------------------------------------ stored values
def store(client, arrays, also=(), unkeep=()):
    """``arrays`` (persisted) under new keys that the scheduler holds as plain data, as if scattered,
    on two workers; an array itself where that could not be done (it keeps its keys and lineage).
    The same call to the Keeper holds the keys ``also`` on two workers and lets ``unkeep`` go
    (:func:`keep`'s): a step's gradients, kept beside its parameters, take no round trip of their own.

    The scheduler keeps the (released) tasks a key in memory was computed from, to recompute it if
    a worker dies; a parameter updated once per step would make that lineage grow by every step's
    tasks.  The chunks are not copied or moved: each worker files the same object under the new key
    (then one copy goes to a second worker).  The names are the client's own: two clients training
    identical models on one cluster must not release each other's values, and each call's names are
    its own: two threads storing equal values (the same graph name) would otherwise share keys that
    one lets go of while the other files them.  All of ``arrays`` take
    the same round trips (an optimizer's step stores every parameter and state: one round trip each
    was most of a small model's step on a LocalCluster).
    """
    from distributed import Future, wait

    graph, pairs, names = {}, {}, []  # pairs: (key held, stored key) -> None, in order
    call = next(_stores)  # (one per call: equal arrays in it, twin parameters, are one value under one name)
    for arr in arrays:
        graph.update(arr.dask)
        name = f"stored-{client_token(client)}-{call}-{arr.name}"
        names.append(name)
        for k in flat_keys(arr):
            f = graph[k]  # (the Future of another key where arr is whole chunks of a value: lazy._slice_in_memory)
            held_as = f.key if isinstance(f, Future) else k
            graph[held_as] = f
            pairs[held_as, (name,) + tuple(k[1:])] = None
    todo, held, who_has = list(pairs), set(), {}
    # a worker can die (its chunks are then recomputed from values still held) or a replica be
    # dropped between asking who holds a key and filing it: what no holder filed is asked again
    for _ in range(10):
        if any(graph[k].status != "finished" for k, _ in todo):  # (after a submission's wait: all are)
            wait([graph[k] for k, _ in todo])
        # every worker files what it holds of them (no round trip to ask who holds what)
        filed = client.run(_file_under, todo, on_error="return")
        who_has, nbytes = {}, {}
        for worker, sizes in filed.items():
            if isinstance(sizes, dict):
                for new, size in sizes.items():
                    who_has.setdefault(new, []).append(worker)
                    nbytes[new] = size
        filed = list(who_has)
        held.update(k for k, n in zip(filed, keep(client, filed + list(also), unkeep, who_has=who_has, nbytes=nbytes))
                    if n)
        also = unkeep = ()  # (sent once)
        todo = [(k, new) for k, new in todo if new not in held]
        if not todo:
            break
    out = []
    lost = {new[0] for _, new in todo}  # (stores whose chunks no worker filed: keep the computed keys)
    for arr, name in zip(arrays, names):
        if name in lost:
            out.append(arr)
            continue
        futures = {}
        for k in flat_keys(arr):
            new = (name,) + tuple(k[1:])
            futures[new] = Future(new, client)
            client.futures[new].finish()
        out.append(da.Array(HighLevelGraph.from_collections(name, futures, dependencies=()), name, arr.chunks,
                            meta=arr._meta))
    if lost:  # what was filed of them goes (their lineage keeps the values)
        undo = [new for new in held if new[0] in lost]
        for worker in {w for new in undo for w in who_has.get(new, ())}:
            client.run(_unfile, undo, workers=[worker])
    return out


def _file_under(pairs, dask_worker=None):
    """On a worker: the chunks of ``pairs`` (old key, new key) it holds, the same objects, under the
    new keys; their sizes."""
    from dask.sizeof import sizeof

    data = {new: dask_worker.data[old] for old, new in pairs if old in dask_worker.data}
    dask_worker.update_data(data=data)
    return {new: sizeof(v) for new, v in data.items()}


def _unfile(keys, dask_worker=None):
    for k in keys:
        dask_worker.data.pop(k, None)


_tokens = {}  # client id -> the short token in its stored names
_stores = itertools.count()  # (next() is atomic under the GIL)
_installed = set()  # (client, scheduler) pairs whose scheduler has the Keeper


def client_token(client):
    if client.id not in _tokens:
        _tokens[client.id] = tokenize(client.id)[:8]
    return _tokens[client.id]


def keep(client, keys, unkeep=(), who_has=None, nbytes=None):
    """Hold ``keys`` on two workers and let ``unkeep`` go back to one (:class:`.replicas.Keeper`,
    installed on first use and after a scheduler restart); returns how many workers hold each key
    of ``keys``, in order."""
    if not keys and not unkeep:
        return []
    call = dict(keys=keys, who_has=who_has, nbytes=nbytes, client=client.id, unkeep=list(unkeep),
                copies=int(dask.config.get("daskgrad.copies", replicas.COPIES)))
    scheduler = (client.id, getattr(client, "_scheduler_identity", {}).get("id"))
    if scheduler not in _installed:
        replicas.install(client)
        if not any(c == client.id for c, _ in _installed):
            atexit.register(_close_before_its_cluster, weakref.ref(client))
        _installed.add(scheduler)
    try:
        held = client.sync(client.scheduler.daskgrad_keep, **call)
    except ValueError as e:  # "No handler daskgrad_keep found" (or None, depending on the version)
        held = None
        if "daskgrad_keep" not in str(e):
            raise
    if held is None:
        replicas.install(client)
        held = client.sync(client.scheduler.daskgrad_keep, **call)
    return list(held)


def _close_before_its_cluster(ref):
    """At exit, a client of an in-process cluster lets go of its values before the cluster stops.

    distributed closes such a cluster at exit before the client, and each worker it stops then
    "loses" the values still wanted: the scheduler logs an ERROR for every stored value (and a
    WARNING for computed ones) at the end of a script that never called ``client.close()``.
    The cluster is closed here too, in the order a script would (workers before the scheduler).
    Registered after distributed's own exit handlers, this runs first."""
    client = ref()
    cluster = getattr(client, "cluster", None)
    if client is not None and client.status == "running" and cluster is not None:
        client.close()
        cluster.close()  # then its workers, before the scheduler (worker processes log failed heartbeats otherwise)


# ------------------------------------------------------------ reading back, and what was lost
def gather(arr):
    """A materialized array's chunks assembled into one array, with no new tasks to run."""
    keys = arr.__dask_keys__()
    graph = dict(arr.dask)
    blocks = [b.value if isinstance(b, DataNode) else b for b in (graph[k] for k in flatten(keys))]
    futures = [b for b in blocks if type(b).__name__ == "Future"]
    if futures:
        got = dict(zip((f.key for f in futures), futures[0].client.gather(futures)))
        blocks = [got[b.key] if type(b).__name__ == "Future" else b for b in blocks]
    finalize, args = arr.__dask_postcompute__()
    return finalize(_nest(keys, iter(blocks)), *args)


def _nest(keys, it):
    return [_nest(k, it) for k in keys] if isinstance(keys, list) else next(it)


def flat_keys(arr):
    return list(flatten(arr.__dask_keys__()))


def held_keys(arr):
    """The keys a cluster holds ``arr``'s chunks under: its own keys, but a chunk that is another
    value's Future (whole chunks of a value in memory: :func:`.lazy._slice_in_memory`) under that
    value's key, which is what the scheduler knows."""
    keys = flat_keys(arr)
    layer = arr.dask.layers.get(arr.name)
    if len(arr.dask.layers) != 1 or type(layer) is not MaterializedLayer:
        return keys
    return [v.key if isinstance(v, TaskRef) else k for k, v in zip(keys, map(layer.get, keys))]


def data_futures(hlg):
    """The distributed Futures that ``hlg``'s in-memory layers hold (a submission's inputs), folds
    unfolded.  Read it before :func:`.optimize`: chunk fusion moves them inside fused tasks."""
    for _, layer, _ in flat_layers(hlg):
        if holds_data(layer):
            yield from _futures(layer)


@per_layer
def _futures(layer):
    values = (v.value if isinstance(v, DataNode) else v for v in layer.values())
    return tuple(v for v in values if type(v).__name__ == "Future")


def client_of(value):
    """The client whose values ``value`` (a dask array or a Lazy value) is computed from, or ``None``."""
    if no_clients():  # (walking a Lazy value's program for its slots is most of a small step's pending update)
        return None
    arrays = Program.of([value]).slots.values() if type(value) is Lazy else [value]
    return next((f.client for a in arrays for f in data_futures(a.dask)), None)


def lost_keys(arrays, ask=False):
    """Keys of the values ``arrays`` read that the cluster no longer has (their client was closed,
    or every worker holding them died); ``ask``: ask the scheduler (the client may not have heard)."""
    if no_clients():  # (no Future without its client: nothing can be lost, and walking the layers costs a step)
        return set()
    futures = {f.key: f for a in arrays for f in data_futures(a.dask)}
    # (not "lost": the scheduler is computing it again; one that cannot be is then "cancelled")
    dead = {k for k, f in futures.items() if f.status in ("cancelled", "error")}
    if ask and futures:
        client = next(iter(futures.values())).client
        if client.status == "running":
            # by key: Client.who_has refuses a list holding a cancelled future (FuturesCancelledError)
            held = client.sync(client.scheduler.who_has, keys=list(futures))
            dead |= {k for k in futures if not held.get(k)}
    return dead


_rooms = {}  # client id -> (when asked, the room a task's output has on the tightest worker)


def task_room(client, every=5.0):
    """Bytes one task's output can take on the worker with the least room, or None when no worker
    has a memory limit: distributed's nanny restarts a worker whose process passes
    ``distributed.worker.memory.terminate`` (95%) of its limit, and the process itself (Python, its
    libraries: unmanaged memory) takes part of it; the data it holds can be spilled.  Asked of the
    scheduler at most once every ``every`` seconds."""
    import time

    now = time.monotonic()
    got = _rooms.get(client.id)
    if got is not None and now - got[0] < every:
        return got[1]
    terminate = dask.config.get("distributed.worker.memory.terminate", 0.95) or 1.0
    rooms = []
    for w in client.scheduler_info(n_workers=-1).get("workers", {}).values():
        limit, metrics = w.get("memory_limit") or 0, w.get("metrics") or {}
        if limit:
            rooms.append(int(limit * terminate) - max(0, metrics.get("memory", 0) - metrics.get("managed_bytes", 0)))
    room = min(rooms, default=None)
    _rooms[client.id] = (now, room)
    return room


def memory_total(client, every=5.0):
    """The memory daskgrad's values may use, in bytes: the workers' memory limits summed (asked of
    the scheduler at most once every ``every`` seconds), or this machine's memory where there is no
    client or no worker has a limit."""
    import time

    now = time.monotonic()
    got = _totals.get(None if client is None else client.id)
    if got is not None and now - got[0] < every:
        return got[1]
    total = 0
    if client is not None:
        total = sum(w.get("memory_limit") or 0 for w in client.scheduler_info(n_workers=-1).get("workers", {}).values())
    if not total:
        import psutil

        total = psutil.virtual_memory().total
    _totals[None if client is None else client.id] = (now, total)
    return total


_totals = {}  # client id (None: no client) -> (when asked, memory_total)


def cancelled(error) -> bool:
    """Whether ``error`` is distributed telling that values are gone: a future cancelled or lost
    (its data and any way to compute it), or a task whose every worker died."""
    from concurrent.futures import CancelledError

    return isinstance(error, CancelledError) or type(error).__name__ in ("KilledWorker", "FutureCancelledError")


def reads_any(arr, keys):
    """Whether ``arr`` is computed from any of the values ``keys`` (folds unfolded)."""
    return any(f.key in keys for f in data_futures(arr.dask))
