"""Where graphs run: every compute goes through :func:`persist`, one submission each.

This floor knows tensors' storages and nodes; what it asks of Dask goes through :mod:`._dask`
(optimizing, submitting, storing, gathering).  It holds the process-wide state of what is
computed: the storages an in-place write left lazy (computed by the next submission), which
kept values (on two workers, :mod:`._dask.replicas`) a storage still holds (:func:`hold`), the
lazily made values read again that it holds (``_held_sources``), and the retained graphs.
"""
from __future__ import annotations

import contextlib
import threading
import weakref

import dask
import dask.array as da
from dask.utils import parse_bytes

from . import _dask as door, graph, lost
from ._tensor import Tensor
from . import _state
from ._state import hold, let_go, swap, take_pending, take_unkeep
from ._dask import current_client, dashboard
from ._modes import are_deterministic_algorithms_enabled, current_trace

_progress = {"enabled": False}
_observers = []  # callables told (phase, optimized arrays) of each submission: see daskgrad.testing


def set_progress(enabled: bool = True) -> None:
    """Show a progress bar for each backward submission (distributed's bar, or dask's locally)."""
    _progress["enabled"] = bool(enabled)


@contextlib.contextmanager
def observe(observer):
    """``observer(phase, arrays)`` is told of each submission meanwhile: its phase ("forward",
    "backward", "compute") and the arrays as submitted, optimized into one graph."""
    _observers.append(observer)
    try:
        yield observer
    finally:
        _observers.remove(observer)


def persist(values, **kwargs):
    """:func:`_persist` with Python's garbage collector held off while daskgrad works
    (:func:`daskgrad._dask.gc_paused`)."""
    with door.gc_paused():
        return _persist(values, **kwargs)


def _persist(values, *, phase: str = "compute", store=(), keep=slice(0, 0), optimized=False):
    """Persist ``values`` (Lazy values or dask arrays) in one submission and return them as dask
    arrays once they are in memory.

    The same submission computes the storages in ``store`` (values the user holds and will read
    again, e.g. the loss a backward computes) and every storage that an in-place write left lazy
    (:func:`mark_pending`), and swaps the results in: a parameter updated once per step never
    grows a lineage of updates (each step would recompute all earlier ones).  On a cluster the
    stored values and ``values[keep]`` (gradients, forced values, saved values of a retained graph)
    are held on two workers (:mod:`daskgrad._dask.replicas`).

    ``optimized``: ``values`` are dask arrays of one graph optimized already; it is submitted as it
    is, alone (pending values wait for the next submission).
    """
    values = list(values)
    trace = current_trace()
    if trace is not None:  # daskgrad.compile: a value computed inside is Python the replay would not run
        trace.broke("it computes a value (.item(), .numpy(), printing, backward(), ...)")
    let_go()
    client = current_client()
    # an update built on another client's values waits for that client (if it is closed, reading
    # the tensor raises LostTensorError): it cannot run here
    pending = [] if optimized else take_pending(lambda v: door.client_of(v) in (None, client))
    stores = {id(st): st for st in pending + list(store)}
    stores = [(st, st.value) for st in stores.values() if not in_memory(st.value)]
    if not values and not stores:
        return []
    submitted = values + [v for _, v in stores]
    kept = client is None
    try:
        out = _submit(submitted, phase, optimized=optimized and not stores)
        keys = [k for a in out[keep] for k in door.held_keys(a)]
        if client is not None and stores:  # (out[keep] held in the same call to the Keeper: see below)
            out[len(values):] = _store(client, out[len(values):], [st for st, _ in stores], also=keys,
                                       unkeep=take_unkeep())
            kept = True
    except Exception as e:  # kept values lost while the submission ran (both holders died, say):
        if client is not None and door.cancelled(e):  # name them, not dask's internal keys
            raise_if_lost(submitted, e)
        raise
    try:
        if not kept:  # before the swap lets go of the values they were computed from: a gradient on
            # one worker and with its lineage's inputs released is lost with that worker
            door.keep(client, keys, take_unkeep())
    finally:  # (the stores are computed: swapped in even if the Keeper could not be reached)
        for (st, old), new in zip(stores, out[len(values):]):
            swap(st, old, new)
    if client is not None:
        let_go()  # what this submission superseded (the pending updates that read it have run): the next call tells
    else:
        take_unkeep(send=False)  # no Keeper to tell: nothing is held twice
    return out[:len(values)]


def in_memory(value) -> bool:
    """Whether a tensor's value (a Lazy value or a dask array) is in (cluster) memory already."""
    return door.in_memory(value) is not None


def _store(client, arrays, storages, also=(), unkeep=()):
    """``arrays`` stored on the cluster with no lineage, on two workers (:func:`._dask.store`, which
    holds the keys ``also`` on two workers and lets ``unkeep`` go in the same call); the storage
    holding each is remembered by name, to name what a lost worker took."""
    out = door.store(client, arrays, also, unkeep)
    for arr, new, storage in zip(arrays, out, storages):
        if new is not arr and storage is not None:  # (None: a Lazy value's, held by no storage)
            _stored_names[new.name] = storage
    return out


_stored_names = weakref.WeakValueDictionary()  # stored name -> the storage holding it (to name losses)


def optimize(arrays):
    """``arrays`` (dask arrays) as one optimized graph (:func:`._dask.optimize`)."""
    return door.optimize(arrays)


def _submit(values, phase, optimized=False):
    """One submission of ``values``: their program instantiated from its template (lowered and
    optimized as one graph the first times it is seen); values in memory already are themselves."""
    out = [door.in_memory(v) for v in values]
    todo = [v for v, done in zip(values, out) if done is None]
    if not todo:
        return out
    again, sourced, sources = [], [], []
    if optimized:
        arrays = slots = todo
    else:
        with door.building:  # (no Lazy value of it computed by another thread meanwhile)
            prog, again, sourced, sources = _asking_also(door.Program.of(todo), todo)
            for node in prog.eqns:
                node.seen += 1
            slots = list(prog.slots.values())
            raise_if_lost(todo, slots=slots)  # before submitting: dask would name internal keys, later
            client = current_client()
            watched = _observers or _progress["enabled"] or are_deterministic_algorithms_enabled()
            arrays = door.instantiate(prog, local=client is None, run=client is None and not watched,
                                      room=None if client is None else door.task_room(client))
    for observer in list(_observers):
        observer(phase, arrays)
    if current_client() is not None and not optimized:
        _check_task_sizes(prog)
    try:
        done = door.submit(arrays, phase, progress=_progress["enabled"],
                           deterministic=are_deterministic_algorithms_enabled())
    except Exception as e:  # "lost dependencies": lost while the submission ran
        if current_client() is not None:
            raise_if_lost(todo, e, slots)
        raise
    if len(done) > len(todo):
        _hold(done[len(todo):], again, sourced, sources)
    done = iter(done[:len(todo)])
    return [next(done) if a is None else a for a in out]


# ------------------------------------------------------------ lazily made values read again
# A dataset generated or read chunk by chunk (``X = dg.randn(...)``, a Zarr array) and the values made
# from it alone (its labels) are computed again by every submission that reads them: a training loop
# over minibatches of it regenerates them at every step.  Read a second time, they are held like a
# computed value, as long as all held so fit in ``daskgrad.hold-sources`` (default 10% of the workers'
# memory, or of this machine's; 0 never holds one): larger ones stream from their source each time.
# On a cluster they are stored under keys of their own (``_dask.store``): the graph's keys name its
# recipe, not its values (a Zarr array's name is its path's, whatever the file holds when read).
_graphs_read = {}  # names of the lazy dask graphs recent submissions read (insertion order: oldest first)
_held_sources = weakref.WeakKeyDictionary()  # held Lazy value or storage -> (its held array's name, bytes)
_held_lock = threading.Lock()  # guards the two above (threads may submit at once)


def _asking_also(prog, todo):
    """``prog`` asking also for the values it holds this time; the Lazy values an earlier submission
    computed too (:meth:`Program.computed_again`), those made from lazy graphs that fit, and the
    ``(graph, storages)`` of the lazily made leaves read again that fit."""
    again, sourced = prog.computed_again()
    sources = _sources_read_again(prog, todo)
    if sourced or sources:
        sourced, sources = _within_room([n for n in sourced if not any(n is v for v in todo)], sources)
    again = [n for n in again if not any(n is v for v in todo)]
    if again or sourced or sources:
        prog = prog.asking_also(again + sourced + [a for a, _ in sources])
    return prog, again, sourced, sources


def _hold(values, again, sourced, sources):
    """Hold ``values``, the computed ``again``, ``sourced`` and ``sources`` (:func:`_asking_also`): on
    two workers on a cluster, the lazily made ones under keys of their own."""
    client = current_client()
    n = len(again)
    if client is not None:
        door.keep(client, [k for a in values[:n] for k in door.held_keys(a)])
        if len(values) > n:
            values = values[:n] + _store(client, values[n:], [None] * len(sourced) + [sts[0] for _, sts in sources])
    for node, value in zip(again + sourced, values):
        node.becomes(value)
    held = list(zip(sourced, values[n:]))
    for (old, storages), value in zip(sources, values[n + len(sourced):]):
        held += [(st, value) for st in storages if swap(st, old, value, pending=False)]  # (unless written meanwhile)
    with _held_lock:  # (a lock held for nothing else: a swap waits for programs being made, which read this)
        for v, value in held:
            _held_sources[v] = (value.name, value.nbytes)


def _sources_read_again(prog, todo):
    """The lazy dask graphs ``prog`` reads that an earlier submission read too and tensors hold as
    their value (a leaf made lazily, such as ``dg.randn``'s), each with those tensors' storages;
    notes the graphs it reads."""
    out = []
    for a in [a for name, a in prog.slots.items() if name in prog.graphs] if prog.graphs else ():
        with _held_lock:
            again = _graphs_read.pop(a.name, False) is None
            _graphs_read[a.name] = None
            while len(_graphs_read) > 256:
                del _graphs_read[next(iter(_graphs_read))]
        storages = _state.sources(a) if again and not any(a is v for v in todo) else ()
        if storages:
            out.append((a, storages))
    return out


def _within_room(sourced, sources):
    """Of the Lazy values ``sourced`` and the ``(graph, storages)`` ``sources``, those that fit, in
    order, in what ``daskgrad.hold-sources`` (a share of the memory: ``"10%"`` or ``0.1``; bytes:
    ``"2 GiB"``; 0: none) leaves beside the values held so already (each counted as many times as
    it has copies)."""
    setting = dask.config.get("daskgrad.hold-sources", "10%")
    if not setting:
        return [], []
    client = current_client()
    if isinstance(setting, str) and setting.strip().endswith("%"):
        room = door.memory_total(client) * float(setting.strip()[:-1]) / 100
    elif isinstance(setting, float) and setting <= 1:
        room = door.memory_total(client) * setting
    else:
        room = parse_bytes(setting) if isinstance(setting, str) else setting
    copies = 1 if client is None else max(1, int(dask.config.get("daskgrad.copies", door.replicas.COPIES)))
    with _held_lock:
        for held, (name, nbytes) in list(_held_sources.items()):
            if getattr(held.computed if type(held) is door.Lazy else held.value, "name", None) == name:
                room -= nbytes * copies
    fit = []
    for v in sourced + [a for a, _ in sources]:
        nbytes = v.size * v.dtype.itemsize * copies  # (NaN where its chunks are unknown: not held)
        fit.append(nbytes <= room)
        room -= nbytes if fit[-1] else 0
    return ([v for v, ok in zip(sourced, fit) if ok],
            [p for p, ok in zip(sources, fit[len(sourced):]) if ok])


def _check_task_sizes(prog):
    """Refuse, before it runs, a submission one of whose tasks makes a chunk larger than a worker
    can hold: each worker would be restarted in turn at its memory limit, losing the values it keeps."""
    client = current_client()
    if not dask.config.get("daskgrad.task-memory-check", True):
        return
    room = door.task_room(client)
    if room is None:
        return
    found = door.largest_chunk(prog)
    if found is None or found[0] <= room:
        return
    nbytes, name, shape, dtype = found
    from dask.utils import format_bytes, key_split

    raise RuntimeError(
        f"{key_split(name)}: one task would make a chunk of {format_bytes(nbytes)} (shape {shape}, {dtype}), more "
        f"than a worker can hold: the worker with the least room has {format_bytes(max(room, 0))} for it (its memory "
        "limit, up to where distributed restarts it, less what its process itself uses). Nothing was submitted: each "
        "worker would be restarted in turn, losing the values it keeps. Rechunk into smaller chunks (x.rechunk(...), "
        "or chunks= where the tensor is made) so that a chunk is a small part of a worker's memory, or give the "
        "workers more memory (dask config 'daskgrad.task-memory-check': False skips this check).")


def raise_if_lost(values, cause=None, slots=None):
    """:class:`~daskgrad.lost.LostTensorError` naming what the cluster lost of the values the
    ``values`` read (``slots``: the values in memory their program reads, found when not given):
    the kept values, and the ``values`` (a parameter's pending update, say) that can no longer be
    computed from them."""
    if slots is None:
        lazy = [v for v in values if isinstance(v, door.Lazy)]
        slots = [v for v in values if not isinstance(v, door.Lazy)]
        slots += list(door.Program.of(lazy).slots.values()) if lazy else []
    dead = door.lost_keys(slots, ask=cause is not None)
    if not dead:
        return
    names = {k[0] if isinstance(k, tuple) else k for k in dead}
    shapes = {n: st.array for n in names if (st := _stored_names.get(n)) is not None}
    for v in values:
        if isinstance(v, door.Lazy):  # (named as the array a parameter's .array gives)
            if names & set(door.Program.of([v]).slots):
                arr = v.build()
                names.add(arr.name)
                shapes[arr.name] = arr
            continue
        if v.name in names or door.reads_any(v, dead):
            names.add(v.name)
            shapes[v.name] = v
    error = lost.LostTensorError(lost.describe(names, shapes))
    error.dask_error = cause  # (distributed's own report, internal keys and all: not shown)
    raise error from None


def values(tensors, **kwargs):
    """The in-memory values of ``tensors``: one submission for those not yet computed (their
    results are swapped into their storage, so asking again computes nothing), then a gather."""
    if kwargs:  # an explicit scheduler or compute option: dask's own compute, as asked
        return list(dask.compute(*[t.array for t in tensors], **kwargs))
    todo = [t for t in tensors if not in_memory(t._storage.value)]
    if todo:
        nodes = graph.toposort([n for t in todo for r in (t,) + t._origin if (n := r.grad_fn) is not None])
        # `while y.norm() < 1000`: the values y's backward saved are persisted by this same
        # submission, so that backward does not compute them again; released with the graph
        saved = [v for n in nodes for v in n.saved_tensors() if v.leaf is None and not v.persisted]
        olds = [t._storage.value for t in todo]
        # and the recorded tensors it compares, which the same submission computes: a test such as
        # `if ctx.x < 0` in a nested backward, level after level, then builds on memory
        origins = [r._storage for t in todo for r in t._origin]
        out = persist(olds + [s.value for s in saved], phase="forward" if saved else "compute",
                      keep=slice(0, len(olds) + len(saved)), store=origins)
        for s, arr in zip(saved, out[len(todo):]):
            if s.storage.value is s.value:  # the tensor it was saved from still holds that
                s.storage.value = arr         # value: later ops on it build on memory
            s.pin(arr)
        for node in nodes:
            if node._saved:
                retain(node)
        for t, old, new in zip(todo, olds, out):
            if t._storage.value is old:
                t._storage.value = new
                if type(old) is door.Lazy:
                    old.becomes(new)
                hold(t._storage, door.held_keys(new))
    return [_gather(t.array) for t in tensors]


def _gather(arr):
    raise_if_lost([arr])
    try:
        return door.gather(arr)
    except Exception as e:  # lost between the check and the gather
        if door.cancelled(e):
            raise_if_lost([arr], e)
        raise


def force(t, **kwargs):
    """Compute tensor ``t`` for the user (``item()``, ``float()``, a ``while`` test, ...)."""
    return values([t], **kwargs)[0]


# ------------------------------------------------------------ retained graphs
_retained = weakref.WeakSet()  # nodes whose saved values are pinned in (cluster) memory


def retain(node) -> None:
    _retained.add(node)
    # the scheduler cannot tell which keys are retained graphs
    dashboard.publish_retained(node, node.name(), [k for s in node.pinned() for k in door.held_keys(s.data)])


def release_graph(t) -> int:
    """Release the saved values of every node behind tensor ``t`` (a graph retained with
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
        keys = [k for s in node.pinned() for k in door.held_keys(s.data)]
        row = {"node": node.name(), "keys": keys, "bytes": {}}
        if client is not None and keys:
            sizes = client.nbytes(keys, summary=False)
            where = client.who_has()  # (a list of keys is not accepted here, only futures)
            for key in keys:
                for w in where.get(key, ()):
                    row["bytes"][w] = row["bytes"].get(w, 0) + sizes.get(key, 0)
        rows.append(row)
    return rows


# ------------------------------------------------------------ Tensor methods that compute
# installed here (as HIPS's numpy_boxes and tinygrad's register do): the tensor sits on a floor below
def _compute(self, **kwargs):
    """The values as one in-memory array of the chunk type (numpy or cupy).  The chunks stay
    in (cluster) memory while this tensor lives, so asking again computes nothing."""
    return force(self, **kwargs)

def _persist_tensor(self):
    """Keep this tensor's chunks in (cluster) memory; returns ``self``."""
    old = self._storage.value
    (self._storage.value,) = persist([old], keep=slice(0, 1))
    if type(old) is door.Lazy:
        old.becomes(self._storage.value)
    hold(self._storage, door.held_keys(self._storage.array))
    return self

def _reduce_ex(self, protocol):
    """Pickle the values (numpy or cupy), as torch does, not references to cluster data: the pickle
    loads in a process without that cluster.  Like torch, a non-leaf comes back as a leaf that
    keeps ``requires_grad``, and ``.grad`` is not pickled; the user's attributes are (``x.scale``)."""
    value = force(self.detach())
    if self.__dict__:
        return _rebuild, (type(self), value, self.chunks, self.requires_grad, self.__dict__)
    return _rebuild, (type(self), value, self.chunks, self.requires_grad)


def _rebuild(cls, value, chunks, requires_grad, attributes=None):
    """Unpickle a tensor: its values in the chunks it had, of the array type they were pickled as."""
    t = cls._make(da.from_array(value, chunks=chunks, asarray=False), requires_grad=requires_grad)
    if attributes:
        t.__dict__.update(attributes)
    return t


_compute.__name__, _compute.__qualname__ = "compute", "Tensor.compute"  # help(Tensor.compute) shows it so
_persist_tensor.__name__, _persist_tensor.__qualname__ = "persist", "Tensor.persist"
Tensor.compute, Tensor.persist, Tensor.__reduce_ex__ = _compute, _persist_tensor, _reduce_ex
