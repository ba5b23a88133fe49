"""Peak memory: simulating a submission's run order to predict it, and measuring a real run's.

:func:`simulate` orders the graph with ``dask.order`` and simulates the order the scheduler that will
run it follows: dask's local scheduler walks it depth-first; a distributed worker runs the tasks
it holds before those their results make ready.  A task's output is held from when it runs until
its last dependent has run; the submission's results are held to the end.  Sizes are shape x
itemsize of each task's output chunk, read from the chunks of the dask arrays behind the graph
(:func:`recording` collects every array made while the reverse graph is built; the layers of the
graph note the others'); a chunk that is one value broadcast (``zeros_like``) is one item, as
``dask.sizeof`` counts it.  A task belonging to no array (inside a fused op, e.g. a reduction's
partial sums) is sized as its smallest input, an upper bound for the reductions that make them.
Chunks already in memory are counted as held throughout.
"""
from __future__ import annotations

import contextlib
import itertools
import math
import re
import threading
from dataclasses import dataclass, field

import dask.array as da
import numpy as np
from dask.sizeof import sizeof
from dask.utils import funcname

from . import calls
from .fold import flat_layers
from .internals import Callback, DataNode, GraphNode, TaskRef, broadcast_trick, flatten, get_deps, order

_record_lock = threading.Lock()


@dataclass
class MemoryEstimate:
    """The prediction: ``peak`` bytes (held throughout + the most held at once while running)."""

    peak: int
    resident: int  # chunks already in memory before the submission (persisted inputs)
    kept: int  # bytes of the submission's results, held to its end: gradients, roots, leaves written in place
    tasks: int
    peak_at: int  # how many tasks had run when the peak was reached
    unknown_sizes: int = 0  # tasks sized from their inputs (no array with their name)
    largest: list = field(default_factory=list)  # (bytes, key) of the largest outputs

    def __int__(self):
        return self.peak

    def __index__(self):
        return self.peak


@contextlib.contextmanager
def recording():
    """Every dask array created meanwhile (in this process) is recorded: their chunks size the tasks."""
    made = []
    real = da.Array.__new__

    def new(cls, *args, **kwargs):
        arr = real(cls, *args, **kwargs)
        made.append(arr)
        return arr

    with _record_lock:
        da.Array.__new__ = new
        try:
            yield made
        finally:
            da.Array.__new__ = real


def chunk_bytes(arrays, graphs=()):
    """{key: bytes} for every chunk of ``arrays`` (shape x itemsize; NaN sizes count as 0), and of
    every array whose layer is in the graphs of ``graphs`` (dask notes an array's chunks and dtype
    on its layer, folded or not: the arrays made before the sizes were recorded, e.g. a forward's)."""
    sizes, seen = {}, set()
    for a in arrays:
        if a.name not in seen:
            seen.add(a.name)
            _add_chunks(sizes, a.name, a.chunks, a.dtype)
    for a in graphs:
        for name, layer, _ in flat_layers(a.dask) if hasattr(a.dask, "layers") else ():
            notes = layer.collection_annotations or {}
            if name not in seen and "chunks" in notes and "dtype" in notes:
                seen.add(name)
                _add_chunks(sizes, name, notes["chunks"], notes["dtype"])
    return sizes


# The chunks of every layer a program was lowered to (noted as :func:`program.lowered` lowers one;
# optimizing it into a template merges the layers and their notes): an instance's key is its
# template's with a token appended ("<key>-<token>", a time step's twice), and is sized as the
# template's.  Layers are named by content, so one table serves every template.
_layer_chunks = {}
_LAYER_CHUNKS_MAX = 1 << 16


def note_layer_chunks(layers):
    """Note the chunks and dtype of each of ``layers`` (name -> layer) that dask annotated with them."""
    noted = {}
    for name, layer in layers.items():
        notes = getattr(layer, "collection_annotations", None) or {}
        if "chunks" in notes and "dtype" in notes:
            noted[name] = (notes["chunks"], notes["dtype"])
    with _record_lock:
        if len(_layer_chunks) > _LAYER_CHUNKS_MAX:
            _layer_chunks.clear()
        _layer_chunks.update(noted)


def _instance_size(k, sizes):
    """The bytes of instance key ``k``: its template key's (the instance tokens and fusion's stripped), or None."""
    if not isinstance(k, tuple) or not isinstance(k[0], str):
        return None
    name = k[0]
    while _TOKEN.search(name):
        name = _TOKEN.sub("", name)
        n = sizes.get((name,) + k[1:])
        if n is not None:
            return n
        noted = _layer_chunks.get(name)
        if noted is not None and len(noted[0]) == len(k) - 1:
            try:
                shape = [c[i] for c, i in zip(noted[0], k[1:])]
            except (IndexError, TypeError):
                return None
            n = math.prod(shape)
            return 0 if n != n else int(n) * (getattr(noted[1], "itemsize", 0) or 0)
    return None


_TOKEN = re.compile(r"-[0-9a-f]{32}$|-[0-9a-f]{12}$")  # an instance's token, a key of fusion's own (fuse._own_keys)


def _add_chunks(sizes, name, chunks, dtype):
    item = getattr(dtype, "itemsize", 0) or 0
    for index, shape in zip(itertools.product(*(range(len(c)) for c in chunks)), itertools.product(*chunks)):
        n = math.prod(shape)
        sizes[(name, *index)] = 0 if n != n else int(n) * item


def largest_chunk(prog):
    """``(bytes, op name, chunk shape, dtype)`` of the largest chunk a task of the program ``prog``
    makes, or None: read from its values' abstract chunks (no task is looked at; values in memory
    are not made by a task, nor constants broadcast from one item)."""
    best = None
    for node in prog.eqns:
        itemsize = getattr(node.dtype, "itemsize", 0)
        if not itemsize:
            continue
        size = tuple(max(c, default=0) for c in node.chunks)
        n = math.prod(size) * itemsize
        if n != n or (best is not None and n <= best[0]) or _broadcast_made(node):
            continue
        best = (int(n), funcname(node.fn).lstrip("_"), size, node.dtype)
    return best


def _broadcast_made(node):
    """Whether ``node`` is a constant broadcast from one item (``zeros``, ``full``...): a view that
    takes one item of memory, as ``dask.sizeof`` and a worker count it."""
    made = dict(node.params).get("fn") if getattr(node.fn, "__name__", "") == "_created" else node.fn
    return made in (da.zeros, da.ones, da.full, da.empty, np.broadcast_to)


def simulate(arrays, known=(), graphs=(), distributed=False):
    """Simulate the order the graph behind ``arrays`` (already optimized) runs in: dask's local
    scheduler's, or (``distributed``) a distributed worker's.  The chunks of ``known`` arrays and of
    the arrays whose layers ``graphs`` hold size its tasks."""
    dsk = dict(arrays[0].dask) if len(arrays) == 1 else {}
    for a in arrays:
        dsk.update(a.dask)
    # a distributed Future is a reference to its own key (a TaskRef): as a graph value it is data
    # already in memory, not a task depending on itself
    dsk = {k: DataNode(k, None) if isinstance(v, TaskRef) and v.key == k else v for k, v in dsk.items()}
    sizes = chunk_bytes(list(known) + list(arrays), graphs)
    deps, dependents = get_deps(dsk)
    outputs = {k for a in arrays for k in flatten(a.__dask_keys__())}

    def is_data(v):
        return isinstance(v, DataNode) or not isinstance(v, (GraphNode, tuple, str))

    unknown = 0
    run = (_worker_order if distributed else _run_order)(dsk, deps, dependents, order(dsk))
    size = {}
    for k in dsk:
        if is_data(dsk[k]):
            size[k] = sizes.get(k, _nbytes(dsk[k]))
    run = [k for k in run if not is_data(dsk[k])]
    for k in run:
        if _broadcast(dsk[k]):
            size[k] = _broadcast(dsk[k])
        elif k in sizes:
            size[k] = sizes[k]
        elif calls.fused_outputs(dsk[k]) and all(e in sizes for e in calls.fused_outputs(dsk[k])):
            size[k] = sum(sizes[e] for e in calls.fused_outputs(dsk[k]))  # the values it hands on
        elif _instance_size(k, sizes) is not None:
            size[k] = _instance_size(k, sizes)
        else:
            unknown += 1  # (a time loop's step task: as large as the largest value it reads, a state's chunk)
            size[k] = max((size[d] for d in deps[k]), default=8) if isinstance(k, tuple) else min(
                (size[d] for d in deps[k]), default=8)
    resident = sum(size[k] for k in dsk if is_data(dsk[k]))
    inner = {k: calls.inner_peak(dsk[k], size, sizes) for k in run}
    remaining = {k: len(dependents[k]) for k in dsk}
    live = peak = resident
    peak_at = 0
    for i, k in enumerate(run):
        if live + max(inner[k], size[k]) > peak:
            peak, peak_at = live + max(inner[k], size[k]), i + 1
        live += size[k]
        for d in deps[k]:
            remaining[d] -= 1
            if remaining[d] == 0 and d not in outputs and not is_data(dsk[d]):
                live -= size[d]
        if not dependents[k] and k not in outputs:
            live -= size[k]
    largest = sorted(((size[k], k) for k in run), key=lambda t: -t[0])[:5]
    return MemoryEstimate(peak=int(peak), resident=int(resident), kept=int(sum(size.get(k, 0) for k in outputs)),
                          tasks=len(run), peak_at=peak_at, unknown_sizes=unknown, largest=largest)


def _run_order(dsk, deps, dependents, prio):
    """The order dask's local scheduler runs tasks in on one thread: ``dask.order``'s priorities
    steer a depth-first walk (ready tasks are a stack; a finished task pushes the dependents it
    made ready, lowest priority on top), not a global sort.  Distributed workers run by priority
    too; with several threads or workers the order differs a little."""
    waiting = {k: len(deps[k]) for k in dsk}
    ready = sorted((k for k in dsk if not deps[k]), key=prio.__getitem__, reverse=True)
    run = []
    while ready:
        k = ready.pop()
        run.append(k)
        for d in sorted(dependents[k], key=prio.__getitem__, reverse=True):
            waiting[d] -= 1
            if waiting[d] == 0:
                ready.append(d)
    return run


def _worker_order(dsk, deps, dependents, prio):
    """The order a distributed worker runs tasks in: those it holds, lowest priority first; the
    tasks their results make ready reach it only after a round trip through the scheduler (a few
    milliseconds, several tasks of small chunks), so it first runs what it already holds.  Run in
    waves: every task ready at the start by priority, then every task those made ready, and so on.
    On benchmarks/bench_fwi.py's checkpointed FWI gradient (one worker thread) the simulation predicts
    1.05x the worker's peak managed memory; ``_run_order``'s depth-first walk predicted 2.5x."""
    waiting = {k: len(deps[k]) for k in dsk}
    wave = [k for k in dsk if not deps[k]]
    run = []
    while wave:
        wave.sort(key=prio.__getitem__)
        run += wave
        after = []
        for k in wave:
            for d in dependents[k]:
                waiting[d] -= 1
                if waiting[d] == 0:
                    after.append(d)
        wave = after
    return run


_BROADCAST = getattr(broadcast_trick, "func", broadcast_trick)  # dask curries it


def _broadcast(task):
    """The bytes of a chunk that is one value broadcast (``zeros_like``, ``full``...): one item, as
    ``dask.sizeof`` and a distributed worker count it; ``0`` for other tasks."""
    func = inner = getattr(task, "func", None)
    while inner is not None and inner is not _BROADCAST:  # a partial of a curried function
        inner = getattr(inner, "func", None)
    if inner is None:
        return 0
    return getattr(getattr(func, "keywords", {}).get("dtype"), "itemsize", 0) or 8


def _nbytes(v):
    """The memory a result holds, as a distributed worker counts it (``dask.sizeof``: a broadcast
    view counts its one value); the values of a fused task added up."""
    v = v.value if isinstance(v, DataNode) else v
    if isinstance(v, tuple):
        return sum(_nbytes(x) for x in v)
    if 0 in (getattr(v, "strides", None) or ()):  # a broadcast view; other duck arrays by their nbytes
        return int(sizeof(v))
    return int(getattr(v, "nbytes", 0) or 0)


class PeakTracker(Callback):
    """A dask local-scheduler callback measuring the most result bytes held at once.

    A result's bytes are ``dask.sizeof``'s (a distributed worker's managed memory counts the same);
    it is counted from when its task finishes until its last dependent has finished (as
    the local scheduler releases it), the final results until the end.  ``peak`` is in bytes.
    """

    def __init__(self):
        super().__init__()
        self.peak = self.live = 0
        self._lock = threading.Lock()

    def _start_state(self, dsk, state):
        self._deps = {k: set(v) for k, v in state["dependencies"].items()}
        self._remaining = {k: len(v) for k, v in state["dependents"].items()}
        self._size = {}
        with self._lock:
            for k in state["cache"]:
                self._size[k] = _nbytes(state["cache"][k])
                self.live += self._size[k]
            self.peak = max(self.peak, self.live)

    def _posttask(self, key, result, dsk, state, worker_id):
        with self._lock:
            self._size[key] = _nbytes(result)
            self.live += self._size[key]
            self.peak = max(self.peak, self.live)
            for d in self._deps.get(key, ()):
                self._remaining[d] -= 1
                if self._remaining[d] == 0 and d in self._size:
                    self.live -= self._size.pop(d)

    def __enter__(self):
        super().__enter__()
        calls.observe_inner(self._inside)
        return self

    def __exit__(self, *args):
        calls.observe_inner(None)
        super().__exit__(*args)

    def _inside(self, held):  # a fused task's own peak, on top of what was held before it
        with self._lock:
            self.peak = max(self.peak, self.live + held)
