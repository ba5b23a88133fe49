"""A step built once: a submission with the structure of an earlier one reuses its optimized graph.

A training loop submits the same graph every step; only the values it reads change (the data, the
parameters stored by the step before).  Optimizing and fusing that graph costs more than running
it on small chunks (0.3 ms a chunk), so the graph optimized once is kept as a *template*, and a
later submission whose graph is the same up to names and input values is the template with the new
inputs put in place of the old ones and the results named as the arrays asked for.

**The key** is the whole graph, names left out: every layer in the order the submission's arrays
hold them, each described by what its tasks compute (functions, constants, block structure, the
other layers it reads, by position), each layer of values in memory by its chunks' type, dtype
and shape, and each submitted array by its chunks, dtype and chunk type.  Two submissions with one
key compute the same functions of their inputs: a changed shape, chunking, dtype, op, constant,
hook, grad mode or ``retain_graph`` changes the graph, so it changes the key.  Anything not
described exactly (a layer type or task kind unknown here) makes no key, and the submission is
optimized as usual.  The key costs a walk over the layers (not the tasks of Blockwise layers).

**Where**: dask's local schedulers, whose graphs are a dict run in isolation, so a template keeps
its own keys from step to step (and a step of small chunks runs inline: :func:`run_inline`); and a
distributed client (:func:`_renamed`).  Its scheduler remembers keys across submissions (values
persisted or stored by earlier ones, retained graphs, the Keeper's copies), so there every task
of a replay gets a key of its own: the template's name with a token of that replay.  The input
slots are the keys of the values already in cluster memory (Futures, described by the dtype,
chunks and chunk type of the array daskgrad made them for, :func:`note_values`: a client never
fetches a value to describe it), and the results carry the names of the arrays asked for.

**Memory**: templates hold no input values (the slots are refilled each time), at most
``daskgrad.step-cache.entries`` templates (default 16) and ``daskgrad.step-cache.tasks`` tasks in
all (default 1,000,000), least recently used first out.  ``daskgrad.step-cache.enabled: False``
turns it off.
"""
from __future__ import annotations

import collections
import collections.abc
import contextlib
import functools
import threading
import uuid
import weakref
from dataclasses import dataclass

import dask
import dask.array as da
from dask.base import tokenize
from distributed import get_client

from .internals import (Alias, Blockwise, Callback, DataNode, GraphNode, HighLevelGraph, MaterializedLayer, Task,
                        TaskRef, convert_legacy_task, flatten, order)
from .freeze import Unfrozen, freeze
from .calls import fast
from .optimize import collect, holds_data, optimize_layers, per_layer


SMALL_CHUNK = 256 * 1024  # bytes: a replayed step whose chunks are all this small runs inline (see run_inline)


class _Undescribed(Exception):
    """Something in the graph this module cannot describe exactly: no key, no caching."""


@dataclass
class _Template:
    graph: dict             # the optimized graph, the input slots' values taken out
    slots: tuple            # per input layer (in key order): the template's keys of its chunks
    outputs: tuple          # the template's name of each submitted array
    names: frozenset        # every key name of the graph: a new output name must not be one
    readers: dict           # result key -> the keys of the tasks that read it
    small: bool             # its chunks are small: run inline, in order, in the calling thread
    annotated: tuple        # (annotations, keys) of each layer that carries annotations (a span's left out)
    name: str               # its own, for a replay's token on a cluster (its key may be a large structure)
    plan: tuple | None = None  # (keys in dask.order's order, key -> how many tasks read it, key -> its task as
    #                           a direct call: calls.fast), at its first replay


_lock = threading.Lock()
_templates = collections.OrderedDict()  # key -> _Template, least recently used first
_stats = {"hits": 0, "misses": 0, "uncached": 0}


def optimize_cached(arrays, reuse=None, fuse_chunks=None, *, local=True):
    """:func:`.optimize.optimize`, from a template when one has this graph's key.  ``local``: for
    dask's local schedulers (else every key of a replay is new, for a distributed scheduler)."""
    layers, deps = collect(arrays, reuse)
    if not local and _replayed:  # built anew unless replayed below: its results are no replay's
        _forget_replayed(arrays)
    captured = getattr(_capturing, "kept", None)  # daskgrad.compile asks for this graph's template
    if captured is None and not dask.config.get("daskgrad.step-cache.enabled", True):
        return optimize_layers(arrays, layers, deps, fuse_chunks)
    fuse = dask.config.get("daskgrad.fuse-chunks", True) if fuse_chunks is None else fuse_chunks
    if captured is None and not _seen_before(arrays, layers):  # a graph submitted once never pays for a key
        _stats["misses"] += 1
        return optimize_layers(arrays, layers, deps, fuse_chunks)
    try:
        key, inputs = _key(arrays, layers, (fuse, local))
    except _Undescribed:
        _stats["uncached"] += 1
        return optimize_layers(arrays, layers, deps, fuse_chunks)
    with _lock:
        template = _templates.get(key)
        if template is not None:
            _templates.move_to_end(key)
    if template is not None:
        out = (_replay if local else _renamed)(template, arrays, [layers[n] for n in inputs], inputs)
        if out is not None:
            _stats["hits"] += 1
            if captured is not None:
                captured.append((template, tuple(inputs)))
            return out
    _stats["misses"] += 1
    out = optimize_layers(arrays, layers, deps, fuse_chunks)
    # a template daskgrad.compile keeps is its own: the same graph submitted again without it is
    # optimized as it was, under the same keys (a result it holds in cluster memory is not
    # submitted again under a replay's keys, which the scheduler would warn of)
    template = _remember(key, out, inputs, share=captured is None)
    if captured is not None and template is not None:
        captured.append((template, tuple(inputs)))
    return out


_capturing = threading.local()


@contextlib.contextmanager
def capture_templates():
    """Within, each submission's graph is kept as a template even if it was never seen before (and
    the step cache is off): the list yielded gets ``(template, input layer names)`` of each (none
    for a graph that cannot be kept).  :mod:`daskgrad.compile` replays them with :func:`replay_template`."""
    kept, before = [], getattr(_capturing, "kept", None)
    _capturing.kept = kept
    try:
        yield kept
    finally:
        _capturing.kept = before


def replay_template(template, outputs, input_layers, inputs, *, local=True):
    """The arrays of ``template`` run on ``input_layers`` (the values of its slots, named
    ``inputs``), its results named and shaped as ``outputs``: one ``(name, chunks, meta)`` each;
    ``local``: for dask's local schedulers (else under keys of their own, for a distributed one).
    None where it cannot be (then the caller builds the graph anew)."""
    empty = HighLevelGraph({}, {})
    arrays = [da.Array(empty, name, chunks, meta=meta) for name, chunks, meta in outputs]
    return (_replay if local else _renamed)(template, arrays, input_layers, list(inputs))


_outlines = collections.OrderedDict()  # outlines of recent submissions (see _seen_before)


def _seen_before(arrays, layers):
    """Whether a recent submission had this graph's outline (its number of layers of each kind, and
    the chunks and dtypes of the arrays asked for): only then is the full key worth its cost (the
    walk over every layer costs about what optimizing does for a graph of thousands of layers)."""
    kinds = collections.Counter(type(layer).__name__ for layer in layers.values())
    outline = (tuple(sorted(kinds.items())), tuple((a.chunks, str(a.dtype)) for a in arrays))
    with _lock:
        seen = outline in _outlines
        _outlines[outline] = None
        _outlines.move_to_end(outline)
        while len(_outlines) > 4 * dask.config.get("daskgrad.step-cache.entries", 16):
            _outlines.popitem(last=False)
    return seen


def step_cache_info() -> dict:
    """The step cache's counts, as ``functools.lru_cache``'s ``cache_info``: ``hits``, ``misses``,
    ``uncached`` (graphs with no key), ``entries`` and ``tasks`` held."""
    with _lock:
        return dict(_stats, entries=len(_templates), tasks=sum(len(t.graph) for t in _templates.values()))


def step_cache_clear() -> None:
    """Drop every kept step and zero the counts."""
    with _lock:
        _templates.clear()
        _outlines.clear()
        _stats.update(hits=0, misses=0, uncached=0)


# ------------------------------------------------------------------ the key
def _key(arrays, layers, options):
    """The graph's key and the names of its layers of values, in key order (the input slots)."""
    canon = _Numbering(layers)
    for a in arrays:
        canon[a.name]
    parts, inputs, done = [], [], 0
    while True:
        if done == len(canon.queue):  # a layer no description names (none: collect keeps the layers read)
            rest = next((n for n in layers if not dict.__contains__(canon, n)), None)
            if rest is None:
                break
            canon[rest]
        name = canon.queue[done]
        done += 1
        layer = layers[name]
        if holds_data(layer):
            inputs.append(name)
            parts.append(("data", canon[name], _values(layer)))
        elif isinstance(layer, Blockwise):
            parts.append(("blockwise", canon[name], _blockwise(layer, canon)))
        elif type(layer) is MaterializedLayer:
            for k in layer:  # keys of other names (rechunk's split keys) are named by position too
                n = k[0] if isinstance(k, tuple) else k
                if isinstance(n, str):
                    canon[n]
            parts.append(("tasks", canon[name], [(_canon(k, canon), _canon(v, canon)) for k, v in layer.items()],
                          _notes(layer)))
        else:
            raise _Undescribed(type(layer).__name__)
    parts.append([(canon.get(a.name), a.chunks, str(a.dtype), type(a._meta).__module__, type(a._meta).__name__)
                  for a in arrays])
    try:
        return freeze((parts, options)), inputs
    except (Unfrozen, RecursionError):  # an object with no frozen form here: dask's token of it
        pass
    try:
        return tokenize(parts, options, ensure_deterministic=True), inputs
    except Exception as e:  # an object dask tokenizes at random (no content hash): no key
        raise _Undescribed(repr(e)) from e


class _Numbering(dict):
    """The key's positions of the graph's names, each given when the description first meets it,
    from the arrays asked for: an order the program fixes, not the order dask merged the layers in,
    which follows their names, random tokens (every checkpointed evaluation missed the cache).  A
    layer's name, once numbered, joins the queue of layers to describe."""

    def __init__(self, layers):
        super().__init__()
        self.layers, self.queue = layers, []

    def __contains__(self, name):  # (what _canon asks: is this string a name of the graph)
        return dict.__contains__(self, name) or name in self.layers

    def __missing__(self, name):
        self[name] = n = len(self)
        if name in self.layers:
            self.queue.append(name)
        return n


_noted = {}  # id of a layer of distributed Futures daskgrad made -> (a weak reference to it, its description)


def note_values(arr):
    """Describe the layer of Futures of the persisted ``arr`` by the array daskgrad made it for
    (its chunks, dtype and chunk type): a client cannot ask a Future, and a step's key describes
    every value it reads.  (Cheap: one entry per array, the chunks as dask holds them.)"""
    layer = arr.dask.layers.get(arr.name)
    if layer is not None:
        meta = type(arr._meta)
        i = id(layer)  # (a layer is a Mapping, unhashable: by id, forgotten when the layer goes)
        _noted[i] = (weakref.ref(layer, lambda _: _noted.pop(i, None)),
                     repr(("noted", meta.__module__, meta.__name__, arr.dtype.str, arr.chunks)))


def _values(layer):
    """A layer of values by what the graph may depend on: each chunk's index, type, dtype, shape
    (for distributed Futures: of the array daskgrad made them for, see :func:`note_values`)."""
    ref, noted = _noted.get(id(layer), (None, None))
    if ref is not None and ref() is layer:
        return noted
    return _chunk_kinds(layer)


@per_layer
def _chunk_kinds(layer):
    kinds = {}  # (chunk type, dtype) -> [(index, shape)]: a dtype is named once, not per chunk
    for k, v in layer.items():
        v = v.value if isinstance(v, DataNode) else v
        dtype, shape = getattr(v, "dtype", None), getattr(v, "shape", None)
        if dtype is None or shape is None:  # a Python scalar, a distributed Future
            raise _Undescribed(type(v).__name__)
        kinds.setdefault((type(v), dtype), []).append((k[1:] if isinstance(k, tuple) else (), shape))
    return repr(sorted((t.__module__, t.__name__, getattr(d, "str", str(d)), sorted(chunks))
                       for (t, d), chunks in kinds.items()))


def _blockwise(layer, canon):
    for name in layer.io_deps:
        canon[name]
    return (_canon(layer.task, canon), layer.output_indices,
            [(_canon(n, canon), ind) if ind is not None else ("const", n) for n, ind in layer.indices],
            sorted((canon.get(n, n), nb) for n, nb in layer.numblocks.items()),
            layer.concatenate, layer.new_axes, sorted(layer.output_blocks or ()), _notes(layer),
            sorted((canon[n], dep) for n, dep in layer.io_deps.items()))


def _notes(layer):
    """A layer's annotations (GPU ``resources``) but a span's: distributed's ``span()`` annotates the
    layers of each submission with its own, and a kept step is replayed in the span of its replay."""
    return {n: v for n, v in (layer.annotations or {}).items() if n != "span"}


def _canon(obj, canon):
    """``obj`` with every name of the graph replaced by its position."""
    t = type(obj)
    if t is str:
        return ("§", canon[obj]) if obj in canon else obj
    if t is tuple:
        if obj and type(obj[0]) is str and obj[0] in canon:
            return ("§", canon[obj[0]]) + obj[1:]
        return tuple(_canon(o, canon) for o in obj)
    if t is list:
        return [_canon(o, canon) for o in obj]
    if t is dict:
        return {k: _canon(v, canon) for k, v in obj.items()}
    if t is TaskRef:
        return ("ref", _canon(obj.key, canon))
    if isinstance(obj, Task):
        # dask tokenizes a module's function by its name: the id of its code tells a function
        # redefined under that name (a template holds its functions, so the id is not reused)
        return (t.__name__, _canon(obj.key, canon), obj.func, id(getattr(obj.func, "__code__", None)),
                _canon(obj.args, canon), _canon(obj.kwargs, canon))
    if t is Alias:
        return ("alias", _canon(obj.key, canon), _canon(obj.target, canon))
    if t is DataNode:
        return ("value", _canon(obj.key, canon), obj.value)
    if isinstance(obj, GraphNode):
        raise _Undescribed(t.__name__)
    return obj


# ------------------------------------------------------------------ templates
def _remember(key, optimized, inputs, share=True):
    """Keep the optimized graph as the template of ``key``: the values of the input layers taken
    out (each replay puts its own in), dask's legacy tasks converted, what a replay renames noted."""
    graph = dict(optimized[0].__dask_graph__())
    limit = dask.config.get("daskgrad.step-cache.tasks", 1_000_000)
    if len(graph) > limit:
        return
    by_name = {}  # one pass over the graph, not one per input layer
    for k in graph:
        by_name.setdefault(k[0] if isinstance(k, tuple) else k, []).append(k)
    slots, largest = [], 0
    for name in inputs:
        keys = tuple(by_name.get(name, ()))
        for k in keys:
            v = graph[k]
            largest = max(largest, getattr(v.value if isinstance(v, DataNode) else v, "nbytes", 0))
            graph[k] = None  # the values are put back at each replay: a template holds no data
        slots.append(keys)
    legacy = [k for k, t in graph.items() if type(t) is tuple]  # dask's legacy tasks (a reduction's aggregate)
    for k in legacy:  # (converted after the slots are out: converting a graph drops its Futures' keys)
        graph[k] = convert_legacy_task(k, graph[k], graph)
    if not all(t is None or isinstance(t, GraphNode) for t in graph.values()):
        return  # a value or legacy task outside the input layers: not renamed here
    annotated = []  # a span's annotation is the submission's own (distributed's span() sets it anew)
    for layer in optimized[0].dask.layers.values():
        note = _notes(layer)
        keys = tuple(k for k in layer if graph.get(k) is not None)
        if note and keys:
            annotated.append((note, keys))
    results = {k for a in optimized for k in flatten(a.__dask_keys__())}
    readers = {}
    for k, t in graph.items():
        for d in (t.dependencies if t is not None else ()):
            if d in results:
                readers.setdefault(d, []).append(k)
    largest = max([largest] + [a.dtype.itemsize * _chunk_elements(a) for a in optimized])
    template = _Template(graph, tuple(slots), tuple(a.name for a in optimized),
                         frozenset(k[0] if isinstance(k, tuple) else k for k in graph), readers,
                         largest <= SMALL_CHUNK, tuple(annotated), uuid.uuid4().hex)
    if not share:
        return template
    with _lock:
        _templates[key] = template
        _templates.move_to_end(key)
        entries = dask.config.get("daskgrad.step-cache.entries", 16)
        while len(_templates) > entries or sum(len(t.graph) for t in _templates.values()) > limit:
            _templates.popitem(last=False)
    return template


def _chunk_elements(a):
    """Elements of ``a``'s largest chunk."""
    n = 1
    for c in a.chunks:
        n *= max(c, default=1)
    return n


def _replay(template, arrays, input_layers, inputs):
    """The template's graph reading ``input_layers`` and naming its results as ``arrays``; None if a
    name of ``arrays`` is one of the template's other keys (then it is optimized as usual)."""
    for a, old in zip(arrays, template.outputs):
        if a.name != old and a.name in template.names:
            return None
    values = {}
    for keys, layer, name in zip(template.slots, input_layers, inputs):
        for k in keys:
            v = layer[(name,) + k[1:] if isinstance(k, tuple) else name]
            values[k] = v.value if isinstance(v, DataNode) else v
    renamed, aliases, done = {}, {}, set()  # template key -> result key; result key -> its twin's
    for a, old in zip(arrays, template.outputs):
        if a.name == old or a.name in done:  # (an array asked for twice is one result)
            continue
        done.add(a.name)
        for k in flatten(a.__dask_keys__()):
            was = (old,) + k[1:] if isinstance(k, tuple) else old
            if was in renamed:  # the same array asked for twice under two names
                aliases[k] = renamed[was]
            else:
                renamed[was] = k
    if template.plan is None:  # worked out once, when the step comes back (a graph run once never pays it)
        filled = {k: DataNode(k, None) if t is None else t for k, t in template.graph.items()}
        priority = order(filled)
        reads = collections.Counter(d for t in filled.values() for d in t.dependencies)
        keys = tuple(sorted(filled, key=priority.__getitem__))
        calls = {k: fast(template.graph[k]) for k in keys if template.graph[k] is not None} if template.small else {}
        template.plan = (keys, dict(reads), calls)  # (only a step of small chunks runs inline: run_inline)
    name = f"{arrays[0].name}-step"
    hlg = HighLevelGraph({name: Replayed(template, values, renamed, aliases)}, {name: set()})
    return [da.Array(hlg, a.name, a.chunks, meta=a._meta) for a in arrays]


def _renamed(template, arrays, input_layers, inputs):
    """The template's graph under keys of its own for a distributed scheduler, which remembers keys
    across submissions: the input slots are the new values' keys (already in cluster memory), the
    results the arrays asked for, every other key the template's name with a token of this replay
    (the prefix the dashboard groups by stays); None if that cannot be done (an array asked for
    twice under two names), then the submission is optimized as usual."""
    # named by what it computes, as dask names keys: the template, the values it reads and the
    # arrays it gives.  Each step has keys no earlier step had (its inputs and results are new), and the same
    # submission sent twice (a loop run again from the same start) is the same tasks, as without the
    # cache: the scheduler warns of a key it holds sent again with another task
    if _held_elsewhere(arrays, template):
        return None
    token = tokenize(template.name, [a.name for a in arrays], inputs)
    subs = {}
    for keys, name in zip(template.slots, inputs):
        for k in keys:
            subs[k] = (name,) + k[1:] if isinstance(k, tuple) else name
    for a, old in zip(arrays, template.outputs):
        for k in flatten(a.__dask_keys__()):
            subs.setdefault((old,) + k[1:] if isinstance(k, tuple) else old, k)
    graph = {}
    for k, t in template.graph.items():
        if t is None:
            continue
        new = subs.get(k)
        if new is None:
            new = subs[k] = (f"{k[0]}-{token}",) + k[1:] if isinstance(k, tuple) else f"{k}-{token}"
        graph[new] = t
    graph = {new: t.substitute(subs, key=new) for new, t in graph.items()}
    for keys, layer in zip(template.slots, input_layers):
        for k in keys:
            graph[subs[k]] = layer[subs[k]]
    for a in arrays:
        for k in flatten(a.__dask_keys__()):
            if k not in graph:
                return None
    layers = {}
    for i, (note, keys) in enumerate(template.annotated):
        name = f"{arrays[0].name}-{token}-{i}"
        layers[name] = MaterializedLayer({subs[k]: graph.pop(subs[k]) for k in keys if subs[k] in graph},
                                         annotations=note)
    layers[f"{arrays[0].name}-{token}"] = MaterializedLayer(graph)
    hlg = HighLevelGraph(layers, {n: set() for n in layers})
    return [da.Array(hlg, a.name, a.chunks, meta=a._meta) for a in arrays]


_replayed = collections.OrderedDict()  # name of an array a recent replay on a cluster gave -> its template's name


def _held_elsewhere(arrays, template):
    """Whether the client holds a result of ``arrays`` that a submission other than a replay of
    ``template`` gave (the same computation run again while its first results live: a loss kept in
    a list, or freed only by Python's cycle collector).  The replay's task for that key would differ
    from the one the scheduler holds, which it warns of ("Detected different run_spec"); built anew,
    the submission sends the same tasks again.  A replay of the same template sends the same tasks.
    (A result a replay gave, held while its template is evicted and the step built anew, still
    differs: the template's tasks are gone.)"""
    try:
        held = get_client().refcount  # (a replay for a cluster: its client is this thread's)
    except (ValueError, AttributeError):
        held = {}
    with _lock:
        anew = any(k in held for a in arrays if _replayed.get(a.name) != template.name
                   for k in flatten(a.__dask_keys__()))
        if not anew:
            for a in arrays:
                _replayed.pop(a.name, None)
                _replayed[a.name] = template.name
            while len(_replayed) > 65536:  # (names only: a few MB at most)
                _replayed.popitem(last=False)
    return anew


def _forget_replayed(arrays):
    with _lock:
        for a in arrays:
            _replayed.pop(a.name, None)


class Replayed(MaterializedLayer):
    """A replayed step: the template, the values it reads this time and the names of its results.

    Its tasks under the results' names (each task that reads a renamed result rewritten) are made
    only when a scheduler asks for them: :func:`run_inline` runs the template's own tasks."""

    def __init__(self, template, inputs, renamed, aliases):
        # (made by a plain function of the parts, not a method: no cycle holds the inputs)
        super().__init__(_Lazy(functools.partial(_renamed_tasks, template, inputs, renamed, aliases)))
        self.template, self.inputs, self.renamed, self.aliases = template, inputs, renamed, aliases


def _renamed_tasks(template, inputs, renamed, aliases):
    graph = dict(template.graph)
    for k, v in inputs.items():
        graph[k] = DataNode(k, v)
    for was, k in renamed.items():  # the results renamed in place, then the tasks that read them
        graph[k] = graph.pop(was).substitute({}, key=k)
    for was, k in renamed.items():  # (a reader may be a result itself, renamed above)
        for r in template.readers.get(was, ()):
            r = renamed.get(r, r)
            graph[r] = graph[r].substitute({was: k})
    for k, target in aliases.items():
        graph[k] = Alias(k, target)
    return graph


class _Lazy(collections.abc.Mapping):
    """A mapping made by ``make()`` when first read (once, whichever thread reads first)."""

    def __init__(self, make):
        self._make, self._made, self._lock = make, None, threading.Lock()

    @property
    def _graph(self):
        if self._made is None:
            with self._lock:
                if self._made is None:
                    self._made, self._make = self._make(), None
        return self._made

    def __getitem__(self, k):
        return self._graph[k]

    def __iter__(self):
        return iter(self._graph)

    def __len__(self):
        return len(self._graph)


_INLINE_SCHEDULERS = (None, "threads", "threading", "sync", "synchronous", "single-threaded")


def run_inline(arrays):
    """The results of a replayed step of small chunks, computed in the calling thread in dask.order's
    order (each value dropped after its last reader), as ``dask.persist`` would give them; None
    when it must go to dask's scheduler: large chunks (threads run them in parallel), another
    scheduler, or a dask diagnostic listening (a progress bar, a profiler, a callback).

    On small chunks dask's threaded scheduler spends more than the tasks: ordering the graph again
    (~0.1 ms a task) and handing each task to a thread, where NumPy holds the GIL anyway."""
    layers = arrays[0].dask.layers if arrays else {}
    layer = next(iter(layers.values())) if len(layers) == 1 else None
    if (type(layer) is not Replayed or not layer.template.small or Callback.active
            or dask.config.get("scheduler", None) not in _INLINE_SCHEDULERS):
        return None
    template, aliases = layer.template, layer.aliases
    back = {new: old for old, new in layer.renamed.items()}  # a result's key -> the template's

    def key(k):
        k = aliases.get(k, k)
        return back.get(k, k)

    wanted = {key(k) for a in arrays for k in flatten(a.__dask_keys__())}
    keys, reads, calls = template.plan
    left, values = dict(reads), dict(layer.inputs)
    for k in keys:
        task = calls.get(k)
        if task is None:  # an input slot: its value is in place
            continue
        values[k] = task(values)
        for d in task.dependencies:
            left[d] -= 1
            if not left[d] and d not in wanted:
                del values[d]
    return [a._rebuild({k: values[key(k)] for k in flatten(a.__dask_keys__())}) for a in arrays]
