"""Where graphs run: one submission, on the current distributed Client if any.

Everything daskgrad computes goes through :func:`persist`, so the choice of
scheduler, the dashboard span and the progress bar live in one place.
"""
from __future__ import annotations

import atexit
import contextlib
import threading
import weakref

import dask
import dask.array as da
from dask.highlevelgraph import HighLevelGraph, Layer

from . import dashboard, fusion, graph


def current_client():
    """The distributed Client this thread would use, or ``None`` (then dask's local scheduler runs)."""
    try:
        from distributed import get_client
    except ImportError:  # pragma: no cover - distributed is a core dependency
        return None
    try:
        return get_client()
    except ValueError:
        return None


_progress = {"enabled": False}


def set_progress(enabled: bool = True) -> None:
    """Show a progress bar for each backward submission (distributed's bar, or dask's locally)."""
    _progress["enabled"] = bool(enabled)


def persist(arrays, *, phase: str = "compute", store=(), keep=slice(0, 0)):
    """Persist ``arrays`` in one submission and return them once they are in memory.

    The same submission computes the storages in ``store`` (values the user holds and will read
    again, e.g. the loss a backward computes) and every storage that an in-place write left lazy
    (:func:`mark_pending`), and swaps the results in: a parameter updated once per step never
    grows a lineage of updates (each step would recompute all earlier ones).  On a cluster the
    stored values and ``arrays[keep]`` (gradients, forced values, saved values of a retained graph)
    are held on two workers (:mod:`daskgrad.replicas`).
    """
    arrays = list(arrays)
    _let_go()
    client = current_client()
    with _lock:
        # an update built on another client's values waits for that client (if it is closed,
        # reading the tensor raises LostTensorError): it cannot run here
        pending = [st for st in _pending if _client_of(st.array) in (None, client)]
        _pending.difference_update(pending)
        stores = {id(st): st for st in pending + list(store)}
    stores = [(st, st.array) for st in stores.values() if not materialized(st.array)]
    if not arrays and not stores:
        return []
    out = _submit(arrays + [a for _, a in stores], phase)
    if client is not None and stores:
        out[len(arrays):] = [_without_lineage(client, a, st) for (st, _), a in zip(stores, out[len(arrays):])]
    for (st, old), new in zip(stores, out[len(arrays):]):
        with _lock:
            if st.array is old:  # unless another thread wrote it meanwhile
                st.array = new
                hold(st)
            else:
                _pending.add(st)
    if client is not None:
        _let_go()  # what this submission superseded: the pending updates that read it have run
        _keep(client, [k for a in out[keep] for k in _flat_keys(a)])
    else:
        with _lock:
            _unkeep.clear()  # no Keeper to tell: nothing is held twice
    return out[:len(arrays)]


# ------------------------------------------------------------ who holds a kept value
# A kept value (a stored parameter, a .grad) goes on being referenced by lazy graphs after its
# tensor has let go of it: the loop's `residual = A(u) - f`, built on a pending update, pins the
# previous u and u.grad until it is dropped.  Those need no second copy: once no storage holds a
# value, the Keeper is told (with the next submission's call, so pending updates that read it have
# run) and distributed's memory manager drops the extra copy.  Saved values of retained graphs are
# not registered here: they keep both copies until released.
_holders = {}  # kept array name -> [WeakSet of storages holding it, its keys]
_held = weakref.WeakKeyDictionary()  # storage -> the kept name it holds
_unkeep = []  # keys of values no storage holds any more, for the Keeper's next call


def hold(storage, keys=None):
    """``storage`` holds its (kept) array; ``keys`` registers the array as kept (else it is
    registered only if it already is)."""
    name = storage.array.name
    with _lock:
        entry = _holders.get(name)
        if entry is None:
            if keys is None and not name.startswith("stored-"):
                return
            entry = _holders[name] = [weakref.WeakSet(), keys or _flat_keys(storage.array)]
        prev = _held.get(storage)
        if prev is not None and prev != name and prev in _holders:
            _holders[prev][0].discard(storage)
        _held[storage] = name
        entry[0].add(storage)


def share(storage):
    """A new storage over an array that may be kept (a snapshot, a detached view) holds it too."""
    if storage.array.name in _holders:
        hold(storage)


def _let_go():
    """Queue the keys of kept values no storage holds any more; they are sent with the next call
    to the Keeper, which comes after a submission has run."""
    with _lock:
        gone = [n for n, (holders, _) in _holders.items() if not holders]
        for n in gone:
            _unkeep.extend(_holders.pop(n)[1])


def _without_lineage(client, arr, storage):
    """``arr`` (persisted) under new keys that the scheduler holds as plain data, as if scattered,
    on two workers.

    The scheduler keeps the (released) tasks a key in memory was computed from, to recompute it if
    a worker dies; a parameter updated once per step would make that lineage grow by every step's
    tasks.  The chunks are not copied or moved: each worker files the same object under the new key
    (then one copy goes to a second worker).  The names are the client's own: two clients training
    identical models on one cluster must not release each other's values.
    """
    from distributed import Future, wait

    keys = _flat_keys(arr)
    graph = dict(arr.dask)
    name = f"stored-{_client_token(client)}-{arr.name}"
    renamed = {k: (name,) + tuple(k[1:]) for k in keys}
    futures = [graph[k] for k in keys]
    todo, held = keys, set()
    # a worker can die (its chunks are then recomputed from values still held) or a replica be
    # dropped between asking who holds a key and filing it: what no holder filed is asked again
    for _ in range(10):
        wait([f for f in futures if f.key in todo])
        owners = client.who_has([graph[k] for k in todo])
        by_worker = {}
        for k in todo:
            for worker in owners.get(k, ()):
                by_worker.setdefault(worker, []).append((k, renamed[k]))
        filed = client.run(_file_under, by_worker, workers=list(by_worker), on_error="return")
        who_has, nbytes = {}, {}
        for worker, sizes in filed.items():
            if isinstance(sizes, dict):
                for new, size in sizes.items():
                    who_has.setdefault(new, []).append(worker)
                    nbytes[new] = size
        filed = list(who_has)
        held.update(k for k, n in zip(filed, _keep(client, filed, who_has, nbytes)) if n)
        todo = [k for k in todo if renamed[k] not in held]
        if not todo:
            break
    else:  # keep the computed keys (and their lineage) rather than lose a value
        for worker in {w for ws in who_has.values() for w in ws}:
            client.run(_unfile, list(who_has), workers=[worker])
        return arr
    futures = {}
    for new in renamed.values():
        futures[new] = Future(new, client)
        client.futures[new].finish()
    _kept_names[name] = storage
    return da.Array(HighLevelGraph.from_collections(name, futures, dependencies=()), name, arr.chunks, meta=arr._meta)


def _file_under(pairs_by_worker, dask_worker=None):
    """On a worker: the chunks it still holds, the same objects, under new keys; their sizes."""
    from dask.sizeof import sizeof

    pairs = pairs_by_worker.get(dask_worker.address, ())
    data = {new: dask_worker.data[old] for old, new in pairs if old in dask_worker.data}
    dask_worker.update_data(data=data)
    return {new: sizeof(v) for new, v in data.items()}


def _unfile(keys, dask_worker=None):
    for k in keys:
        dask_worker.data.pop(k, None)


def _keep(client, keys, who_has=None, nbytes=None):
    """Hold ``keys`` on two workers (:class:`daskgrad.replicas.Keeper`, installed on first use and
    after a scheduler restart); returns how many workers hold each, in order."""
    from . import replicas

    if not keys and not _unkeep:
        return []
    with _lock:
        unkeep, _unkeep[:] = list(_unkeep), []
    call = dict(keys=keys, who_has=who_has, nbytes=nbytes, client=client.id, unkeep=unkeep,
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


_tokens = {}
_installed = set()  # (client, scheduler) pairs whose scheduler has the Keeper


def _client_token(client):
    from dask.base import tokenize

    if client.id not in _tokens:
        _tokens[client.id] = tokenize(client.id)[:8]
    return _tokens[client.id]


_kept_names = weakref.WeakValueDictionary()  # stored name -> the storage holding it (to name losses)


def _submit(arrays, phase):
    given, arrays = arrays, _optimize(arrays)
    client = current_client()
    if client is None:
        _raise_if_lost(given, arrays[0].dask)  # values a closed client held
        with _local_progress(), _one_blas_thread_per_task():
            return list(dask.persist(*arrays, optimize_graph=False))
    from distributed import span, wait

    _raise_if_lost(given, arrays[0].dask)  # before submitting: dask would name internal keys, later
    with span("daskgrad", phase):
        out = client.persist(arrays, optimize_graph=False)
    if _progress["enabled"]:
        from distributed import progress

        progress(out)
    try:
        wait(out)
    except Exception as e:  # "lost dependencies": lost while the submission ran
        _raise_if_lost(given, arrays[0].dask, e)
        raise
    return list(out)


def _data_futures(hlg):
    """The distributed Futures that ``hlg``'s in-memory layers hold (a submission's inputs)."""
    from dask._task_spec import DataNode

    for layer in hlg.layers.values():
        if _holds_data(layer):
            for v in layer.values():
                v = v.value if isinstance(v, DataNode) else v
                if type(v).__name__ == "Future":
                    yield v


def _client_of(arr):
    """The client whose values ``arr`` is computed from, or ``None``."""
    return next((f.client for f in _data_futures(arr.dask)), None)


def _raise_if_lost(arrays, hlg, cause=None):
    """:class:`~daskgrad.lost.LostTensorError` naming what the cluster lost of ``hlg`` (the
    submission of ``arrays``): the kept values, and the ``arrays`` (a parameter's pending update,
    say) that can no longer be computed from them."""
    from dask.highlevelgraph import HighLevelGraph

    from . import lost

    futures = list(_data_futures(hlg))
    dead = {f.key for f in futures if lost.dead(f)}
    if cause is not None and futures:  # the client may not have heard yet: ask who holds them
        held = futures[0].client.who_has(futures)
        dead |= {f.key for f in futures if not held.get(f.key)}
    if not dead:
        return
    names = {k[0] if isinstance(k, tuple) else k for k in dead}
    for a in arrays:
        layers = {n: layer for n, layer, _ in _flat_layers(a.dask)}
        if any(f.key in dead for f in _data_futures(HighLevelGraph(layers, {n: set() for n in layers}))):
            names.add(a.name)
    shapes = {n: st.array for n in names if (st := _kept_names.get(n)) is not None}
    shapes.update((a.name, a) for a in arrays if a.name in names)
    raise lost.LostTensorError(lost.describe(names, shapes)) from cause


_blas = {}


def _one_blas_thread_per_task():
    """On dask's threaded scheduler each task's BLAS call would start a BLAS thread pool of its own,
    and 2 dask threads x 2 BLAS threads oversubscribe 2 cores (distributed's nanny sets one BLAS
    thread per worker process for the same reason).  Limit BLAS while the submission runs, when
    threadpoolctl is installed (it is an optional dependency)."""
    if dask.config.get("scheduler", None) not in (None, "threads", "threading"):
        return contextlib.nullcontext()
    if "controller" not in _blas:
        try:
            from threadpoolctl import ThreadpoolController

            _blas["controller"] = ThreadpoolController()
        except ImportError:
            _blas["controller"] = None
    controller = _blas["controller"]
    return contextlib.nullcontext() if controller is None else controller.limit(limits=1, user_api="blas")


@contextlib.contextmanager
def _local_progress():
    if _progress["enabled"]:
        from dask.diagnostics import ProgressBar

        with ProgressBar():
            yield
    else:
        yield


FUSE_DEPTH = 40  # longest chain of Blockwise layers fused into one task (see _optimize)


def _optimize(arrays, fuse_chunks=None):
    """dask.array's graph optimization, done here on one graph for the whole submission.

    * A layer already in memory (held by another array of the submission, or by a retained or
      forced graph) replaces the lazy layer of the same name, so nothing is computed again.
    * Blockwise fusion (an elementwise chain runs as one task per chunk), but not dask's
      low-level fusion: it drops layer annotations (GPU placement) and renames keys, and a key
      submitted once fused and once not makes the scheduler warn about changed run_specs.  Done
      on the client because a distributed scheduler would optimize with its own config.
    * Fusion cost grows with the square of a fused chain's length (dask's rewrite_blockwise), so
      every ``FUSE_DEPTH``-th layer of a long chain is made a plain layer, which stops fusion
      there: deep graphs (thousands of recorded ops) cost linear time.
    * Then the tasks of each chunk are fused into one (:func:`fusion.fuse_chunks`; config
      ``daskgrad.fuse-chunks``, default on), keeping annotations and deterministic keys.
    """
    from dask.array.optimization import fuse_roots
    from dask.blockwise import Blockwise, optimize_blockwise
    from dask.core import flatten
    from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

    stored = {s.data.name: s.data.dask.layers[s.data.name] for node in list(_retained)
              for s in (node._saved or {}).values() if isinstance(s, graph.SavedTensor) and s.persisted}
    layers, deps = {}, {}
    for a in arrays:
        for name, layer, layer_deps in _flat_layers(a.dask):
            if name not in layers or (layer is not layers[name] and _holds_data(layer)
                                      and not _holds_data(layers[name])):
                layers[name], deps[name] = layer, layer_deps
    for name in layers.keys() & stored.keys():
        if layers[name] is not stored[name] and not _holds_data(layers[name]):
            layers[name] = stored[name]
    for name, layer in layers.items():
        if _holds_data(layer):
            deps[name] = set()
    deps = {n: d & layers.keys() for n, d in deps.items()}
    depth = {}
    for name in _toposort_layers(deps):
        layer = layers[name]
        if not isinstance(layer, Blockwise):
            depth[name] = 0
            continue
        depth[name] = 1 + max((depth[d] for d in deps[name]), default=0)
        if depth[name] >= FUSE_DEPTH:
            layers[name], depth[name] = MaterializedLayer(dict(layer), annotations=layer.annotations), 0
    keys = [k for a in arrays for k in flatten(a.__dask_keys__())]
    hlg = HighLevelGraph(layers, deps)
    hlg = _cull(fuse_roots(optimize_blockwise(hlg, keys=keys), keys=keys), keys)
    # ~0.3 ms a chunk on the client, less than the scheduler spends on the tasks it saves (a quarter remain)
    if dask.config.get("daskgrad.fuse-chunks", True) if fuse_chunks is None else fuse_chunks:
        hlg = fusion.fuse_chunks(hlg, keys, arrays[0].name)
    return [da.Array(hlg, a.name, a.chunks, meta=a._meta) for a in arrays]


# ------------------------------------------------------------ bounded lineage
LINEAGE_LAYERS = 64  # an array's graph holds at most this many layers before its history is folded


class Folded(Layer):
    """An array's graph held as one layer under the array's name (see :func:`bounded`): a complete
    mapping of its tasks, materialized only if dask itself is asked to run it."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self._tasks = inner, None

    def _mapping(self):
        if self._tasks is None:
            tasks = {}
            for _, layer, _ in _flat_layers(self.inner):
                tasks.update(layer)
            self._tasks = tasks
        return self._tasks

    def __getitem__(self, key):
        return self._mapping()[key]

    def __iter__(self):
        return iter(self._mapping())

    def __len__(self):
        return len(self._mapping())

    def __contains__(self, key):
        return key in self._mapping()

    def is_materialized(self):
        return self._tasks is not None

    def get_output_keys(self):
        return self._mapping().keys()


def bounded(array):
    """``array`` with its graph folded into one layer, under its own name, when it has many layers.

    dask copies every layer of every input into each array it makes (``from_collections``), so a
    chain of N recorded ops costs O(N²) to build: 4,000 ops took 6 s, 100,000 would take hours.
    Folding keeps every graph to a few layers.  Arrays built on a folded one depend on its name,
    as before; :func:`_flat_layers` unfolds it for our own optimization, so fusion sees exactly
    the layers it would have seen, and dask used directly sees one opaque, complete layer.
    """
    hlg = array.dask
    if len(hlg.layers) <= LINEAGE_LAYERS or array.name not in hlg.layers:
        return array
    return da.Array(HighLevelGraph({array.name: Folded(hlg)}, {array.name: set()}), array.name, array.chunks,
                    meta=array._meta)


def _flat_layers(hlg):
    """``(name, layer, dependencies)`` of every layer of ``hlg``, folds unfolded (iteratively: they
    nest once per ``LINEAGE_LAYERS`` ops, and a chain's tensors share them)."""
    stack, unfolded = [hlg], set()
    while stack:
        g = stack.pop()
        for name, layer in g.layers.items():
            if isinstance(layer, Folded):
                if name not in unfolded:
                    unfolded.add(name)
                    stack.append(layer.inner)
                continue
            yield name, layer, set(g.dependencies.get(name, ()))


def _cull(hlg, keys):
    """``hlg.cull(keys)`` in time linear in the graph.

    dask's version hands every layer the whole set of keys still wanted and each Blockwise layer
    scans all of them for its own: quadratic when a long reverse graph wants the values of a long
    forward one (8,000 recorded ops: 10 s).  Here each layer gets only its own keys.
    """
    from dask.highlevelgraph import MaterializedLayer

    def key_name(k):
        return k[0] if isinstance(k, tuple) else k

    owner = {}
    for name, layer in hlg.layers.items():
        owner[name] = name
        if isinstance(layer, MaterializedLayer):  # may hold keys of other names (rechunk's split keys)
            for k in layer:
                owner.setdefault(key_name(k), name)
    external = (hlg.get_all_external_keys() if any(lay.has_legacy_tasks for lay in hlg.layers.values())
                else set())
    wanted = {}
    for k in keys:
        wanted.setdefault(owner[key_name(k)], set()).add(k)
    layers, deps = {}, {}
    for name in reversed(hlg._toposort_layers()):
        ks = wanted.pop(name, None)
        if not ks:
            continue
        layers[name], key_deps = hlg.layers[name].cull(ks, external)
        deps[name] = hlg.dependencies.get(name, set())
        for d in key_deps.values():
            for k in d:
                o = owner.get(key_name(k))
                if o is not None and o != name:
                    wanted.setdefault(o, set()).add(k)
    return HighLevelGraph(layers, {n: d & layers.keys() for n, d in deps.items()})


def _toposort_layers(deps):
    import graphlib

    return graphlib.TopologicalSorter(deps).static_order()


def _holds_data(layer):
    from dask._task_spec import DataNode, GraphNode
    from dask.highlevelgraph import MaterializedLayer

    return isinstance(layer, MaterializedLayer) and all(
        isinstance(v, DataNode) or not isinstance(v, (GraphNode, tuple, str)) for v in layer.values())


# ------------------------------------------------------------ pending storages
_pending = weakref.WeakSet()  # storages holding a lazy value that an in-place write made
_lock = threading.RLock()  # (hold() runs inside the swap)


def mark_pending(storage) -> None:
    """``storage`` (a leaf's, after an in-place write) holds a lazy value built on its old one;
    the next submission computes it.  Held weakly: a value nobody can reach is never computed."""
    with _lock:
        _pending.add(storage)


def materialized(arr) -> bool:
    """Whether every chunk of ``arr`` is already in (cluster) memory: a persisted array's graph
    holds its chunks themselves (or distributed Futures), one per key and nothing else."""
    from dask._task_spec import DataNode, GraphNode

    graph = arr.dask
    if len(graph.layers) != 1 or len(graph) != arr.npartitions:  # (len of a fold would materialize it)
        return False
    return all(isinstance(v, DataNode) or not isinstance(v, (GraphNode, tuple, str)) for v in dict(graph).values())


def values(tensors, **kwargs):
    """The in-memory values of ``tensors``: one submission for those not yet computed (their
    results are swapped into their storage, so asking again computes nothing), then a gather."""
    if kwargs:  # an explicit scheduler or compute option: dask's own compute, as asked
        return list(dask.compute(*[t.array for t in tensors], **kwargs))
    todo = [t for t in tensors if not materialized(t.array)]
    if todo:
        nodes = graph.toposort([n for t in todo for r in (t,) + t._origin if (n := r.grad_fn) is not None])
        # `while y.norm() < 1000`: the values y's backward saved are persisted by this same
        # submission, so that backward does not compute them again; released with the graph
        saved = [v for n in nodes for v in (n._saved or {}).values()
                 if isinstance(v, graph.SavedTensor) and v.leaf is None and not v.persisted]
        olds = [t.array for t in todo]
        out = persist(olds + [s.data for s in saved], phase="forward" if saved else "compute",
                      keep=slice(0, len(olds) + len(saved)))
        for s, arr in zip(saved, out[len(todo):]):
            if s.storage.array.name == s.data.name:  # the tensor it was saved from still holds that
                s.storage.array = arr                 # value: later ops on it build on memory
            s.data, s.persisted = arr, True
        for node in nodes:
            if node._saved:
                retain(node)
        for t, old, new in zip(todo, olds, out):
            if t._storage.array is old:
                t._storage.array = new
                hold(t._storage, _flat_keys(new))
    return [_gather(t.array) for t in tensors]


def _gather(arr):
    """A materialized array's chunks assembled into one array, with no new tasks to run."""
    from dask._task_spec import DataNode
    from dask.core import flatten

    keys = arr.__dask_keys__()
    graph = dict(arr.dask)
    blocks = [b.value if isinstance(b, DataNode) else b for b in (graph[k] for k in flatten(keys))]
    futures = [b for b in blocks if type(b).__name__ == "Future"]
    if futures:
        _raise_if_lost([arr], arr.dask)
        got = dict(zip((f.key for f in futures), futures[0].client.gather(futures)))
        blocks = [got[b.key] if type(b).__name__ == "Future" else b for b in blocks]
    it = iter(blocks)
    nested = _nest(keys, it)
    finalize, args = arr.__dask_postcompute__()
    return finalize(nested, *args)


def _nest(keys, it):
    return [_nest(k, it) for k in keys] if isinstance(keys, list) else next(it)


def force(t, **kwargs):
    """Compute tensor ``t`` for the user (``item()``, ``float()``, a ``while`` test, ...)."""
    return values([t], **kwargs)[0]


# ------------------------------------------------------------ retained graphs
_retained = weakref.WeakSet()  # nodes whose saved values are pinned in (cluster) memory


def retain(node) -> None:
    _retained.add(node)
    dashboard.publish_retained(node)  # the scheduler cannot tell which keys are retained graphs


def release_graph(t) -> int:
    """Release the saved values of every node behind tensor ``t`` (a graph kept with
    ``retain_graph=True`` or forced by ``item()``); returns how many nodes let go.

    A later backward through a released node raises torch's "second time" error."""
    count = 0
    for node in graph.toposort([t.grad_fn] if t.grad_fn is not None else []):
        if node._saved:
            node.release()
            _retained.discard(node)
            dashboard.publish_retained(node, released=True)
            count += 1
    return count


def memory_report():
    """The retained graphs: for each node holding pinned values, its keys and bytes per worker."""
    client = current_client()
    rows = []
    for node in list(_retained):
        if node._saved is None:
            continue
        keys = [k for v in node._saved.values() if isinstance(v, graph.SavedTensor) and v.persisted
                for k in _flat_keys(v.data)]
        row = {"node": node.name(), "keys": keys, "bytes": {}}
        if client is not None and keys:
            sizes = client.nbytes(keys, summary=False)
            where = client.who_has()  # (a list of keys is not accepted here, only futures)
            for key in keys:
                for w in where.get(key, ()):
                    row["bytes"][w] = row["bytes"].get(w, 0) + sizes.get(key, 0)
        rows.append(row)
    return rows


def _flat_keys(arr):
    from dask.core import flatten

    return list(flatten(arr.__dask_keys__()))
