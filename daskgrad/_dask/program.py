"""One program, many runs: a submission is the recorded program of the values it asks for, lowered
to an optimized dask graph once per structure and instantiated for every run.

:func:`Program.of` walks the :class:`~.lazy.Lazy` values a submission asks for: its *equations*
(each op, its parameters and what it reads, by position) and its *slots*, the dask arrays it reads:
values in memory (a parameter stored by the step before, a batch of data) described by their
chunks, dtype and chunk type only, and lazy dask graphs (a Zarr source) by their name, since their
graph is part of what runs.  The program's key is that description: two submissions with one key
compute the same functions of their slots, so the graph lowered, optimized and chunk-fused for the
first is a *template* the later ones instantiate with their own slot values
(:func:`instantiate`), without calling an op's forward or dask's optimizer.  A training loop, a
line search, a compiled function's calls and a time loop's steps all come through here; the
template is made the second time a key is seen (a graph submitted once never pays for one; a
program of ``LONG_PROGRAM`` equations or more, an unrolled time loop, at its first), and
runs at once on that submission's values; every later submission with that key is an *instance* of
it (a cache hit: nothing is lowered or optimized).

**Where**: dask's local schedulers run a graph in isolation, so an instance keeps the template's
keys (:func:`_local_instance`) and a step of small chunks runs inline (:func:`run_inline`); a
distributed scheduler remembers keys across submissions, so there every task of an instance gets a
key of its own, the template's name with a token of the instance (:func:`_renamed`): the same
program on the same values sends the same tasks, and nothing collides with an earlier step's keys.
An instance of small chunks whose working set is bounded goes to a cluster as one task that runs the
template inline on a worker (:func:`_one_task`): scheduling a task costs more than its NumPy work.

**Memory**: templates hold no slot values, at most ``daskgrad.step-cache.entries`` templates
(default 16) and ``daskgrad.step-cache.tasks`` tasks in all (default 1,000,000), least recently
used first out; ``daskgrad.step-cache.enabled: False`` lowers every submission anew.
"""
from __future__ import annotations

import collections
import collections.abc
import contextlib
import functools
import gc
import hashlib
import itertools
import operator
import threading
import uuid
from dataclasses import dataclass

import cloudpickle
import dask
import dask.array as da
from dask.utils import parse_bytes

from . import labels, peaks
from .calls import _Outputs, fast, shipped
from .internals import (Alias, Callback, DataNode, GraphNode, HighLevelGraph, MaterializedLayer, Task, TaskRef, array,
                        convert_legacy_task, flatten, order)
from .lazy import (Constant, Lazy, NoKey, _alias, _component as _component_fn, frozen, frozen_fixed, frozen_held,
                   is_stub, lower, through)
from .fold import flat_layers
from .optimize import ScanLayer, holds_data, materialized, optimize_layers

_NO_GRAPH = HighLevelGraph({}, {})  # (an output's name and chunks, before its graph is made)
SMALL_CHUNK = 256 * 1024  # bytes: an instance whose chunks are all this small runs inline (see run_inline)
# equations: a program this long keeps its template from its first submission, not its second.  Lowering
# it again costs seconds (an unrolled 200-step FWI gradient, ~20,000 ops: ~16 s), a template's making a
# pass over the graph; a short program (a .item() read) is lowered again rather than let one-off
# programs push the templates of a loop out of the cache.
LONG_PROGRAM = 1000


# ------------------------------------------------------------------ the program
@dataclass(frozen=True, eq=False)
class Program:
    """A submission's recorded program: ``eqns`` (Lazy values, each after what it reads), ``slots``
    (the dask arrays read, by name), ``outputs`` (the values asked for) and ``key``, its structure
    (None where a parameter or constant has no exact hashable form: then it is lowered anew)."""

    eqns: tuple
    slots: dict
    outputs: tuple
    key: object
    graphs: frozenset = frozenset()  # the names of the slots that are lazy dask graphs (not values in memory)
    hashes: tuple | None = None  # the hashes of the key's three parts (see instantiate: worked out once)

    @classmethod
    def of(cls, outputs):
        outputs = tuple(outputs)
        index, slots, eqns, desc = {}, {}, [], []
        slot_desc = []
        keyed = True

        def ref(s):
            nonlocal keyed
            s = through(s)
            t = type(s)
            if t is Lazy:
                if s.computed is None:
                    return index[id(s)]
                s = s.computed
            elif t is Constant:  # a number read as a value in memory: a slot, not part of the key
                s = s.array
            elif t in _PLAIN:  # (a Python number: frozen's key, which "held" does not change)
                return frozen(s)
            if isinstance(s, da.Array):
                j = slots.get(s.name)
                if j is None:
                    j = slots[s.name] = len(slot_desc)
                    slot_desc.append(_slot_desc(s))
                    slot_arrays.append(s)
                    if slot_desc[-1][0] == "graph":
                        graphs.add(s.name)
                return ("s", j)
            try:
                return frozen_held(s)
            except NoKey:
                keyed = False
                return None

        slot_arrays, graphs = [], set()
        for node in _order(outputs):
            # (an alias is what it stands for; a value of this program, the common case, is its position)
            srcs = tuple([index[id(s)] if type(s) is Lazy and s.computed is None and s.fn is not _alias else ref(s)
                          for s in node.srcs])
            try:
                params = node.frozen_params
                if params is None:  # (kept: a value read again, by the next step's program, is not frozen again,
                    params, fixed = frozen_fixed(node.params, held=True)  # unless a param can change in place)
                    if fixed:
                        node.frozen_params = params
            except NoKey:
                keyed, params = False, None
            index[id(node)] = ("e", len(eqns))
            eqns.append(node)
            if node.annotations:
                try:
                    params = (params, frozen(node.annotations))
                except NoKey:
                    keyed = False
            desc.append((node.fn, params, srcs, node.chunks, node.dtype, type(node._meta), node.elementwise, node.many,
                         node.label))
        outs = tuple(ref(o) for o in outputs)
        key = (tuple(desc), tuple(slot_desc), outs) if keyed else None
        hashes = None if key is None else _hashes(key)
        return cls(tuple(eqns), dict(zip(slots, slot_arrays)), outputs, key if hashes else None, frozenset(graphs),
                   hashes)

    def asking_also(self, values):
        """This program asking for ``values`` as well (its Lazy values and slots): the same equations,
        slots and order (:func:`_order` reaches them from the other outputs first), more outputs."""
        at = {id(n): ("e", j) for j, n in enumerate(self.eqns)}
        at.update((id(a), ("s", j)) for j, a in enumerate(self.slots.values()))
        extra = tuple(at[id(v)] for v in values)
        if self.key is None:
            return Program(self.eqns, self.slots, self.outputs + tuple(values), None, self.graphs)
        outs = self.key[2] + extra
        return Program(self.eqns, self.slots, self.outputs + tuple(values), self.key[:2] + (outs,), self.graphs,
                       self.hashes[:2] + (hash(outs),))

    def computed_again(self):
        """The values of this program that an earlier submission computed too and that a value new
        to this one reads, in two lists: those computed from values in memory alone, and those that
        read a lazy dask graph too (a dataset generated or read chunk by chunk).  The submission asks
        for the first as well and sets their :attr:`Lazy.computed`, so a functional update
        ``x = x - lr * g``, read again by the next step, is computed once and the program stays the
        size of one step; the second are held so only as long as they fit (``runtime``: they may
        not fit in memory, and are then streamed again at each step)."""
        # the values computed before (seen) that a value new to this program reads: most steps have
        # one or two, and only they need to know what they are made from (a walk down from each)
        read_by_new = set()
        for node in self.eqns:  # (the hot loop of a small step's submission: plain loops, no generators)
            if node.seen:
                continue
            for s in node.srcs:
                if type(s) is Lazy:
                    s = through(s)
                    if type(s) is Lazy and s.seen:
                        read_by_new.add(id(s))
        if not read_by_new:
            return [], []
        candidates = [n for n in self.eqns if n.seen and id(n) in read_by_new and not n.many
                      and n.fn is not _component_fn]
        if not candidates:
            return [], []
        made, in_program = {}, {id(n) for n in self.eqns}
        for n in candidates:
            _made_from(n, made, in_program, self.graphs)
        again = [n for n in candidates if made[id(n)]]
        return [n for n in again if made[id(n)] == 1], [n for n in again if made[id(n)] == 2]


def _made_from(node, made, in_program, graphs):
    """What ``node`` (a value of a program) is made from, into ``made`` (id -> 1: from values in
    memory alone; 2: reading a lazy dask graph too; 0: from neither, a value not computed that the
    program does not compute), with what it reads, as far down as that takes (a walk, not recursion:
    a long chain must not exhaust the stack)."""
    stack = [node]
    while stack:
        n = stack[-1]
        if id(n) in made:
            stack.pop()
            continue
        how, waiting = 1, False
        for s in n.srcs:
            s = through(s)
            if type(s) is Lazy:
                if s.computed is not None:
                    h = 1
                elif id(s) not in in_program:
                    h = 0
                else:
                    h = made.get(id(s))
                    if h is None:  # (worked out first, then n again)
                        stack.append(s)
                        waiting = True
                        continue
            elif isinstance(s, da.Array):
                h = 2 if s.name in graphs else 1
            else:  # (a number, a parameter)
                continue
            if not h:
                how = 0
                break
            if h == 2:
                how = 2
        if how and waiting:
            continue
        made[id(n)] = how  # (popped at the top of the loop: what it pushed before a 0 may lie above it)


def _hashes(key):
    """The hashes of a program key's three parts (see instantiate), or None where one is unhashable
    (then the program has no key)."""
    try:
        return tuple(map(hash, key))
    except TypeError:
        return None


_PLAIN = frozenset({int, float, bool, complex, str, type(None)})  # (Program.of: a number's key, made directly)


class CacheKey:
    """A key of the caches here (templates, pieces) whose hash is worked out once: a program's key
    holds a description of every op of the step (hashing it costs a small step ~5 us, and a look-up
    in an ordered dict hashes it up to three times).  Equal when the keys are, compared in full: a
    hit is never a collision of hashes."""

    __slots__ = ("key", "hash")

    def __init__(self, key, hash_=None):
        self.key = key
        self.hash = hash(key) if hash_ is None else hash_  # (given: a function of the key's value alone)

    def __hash__(self):
        return self.hash

    def __eq__(self, other):
        if self is other:
            return True
        if type(other) is not CacheKey or self.hash != other.hash:
            return False
        if self.key is other.key:
            return True
        if self.key != other.key:
            return False
        # equal: both hold one of the two from now on, so the next comparison (a look-up in an ordered
        # dict compares twice: _lookup) is one of identities
        self.key = other.key
        return True

    def __repr__(self):
        return f"CacheKey({self.key!r})"


def _lookup(cache, key, default=None):
    """``cache[key]`` (``default`` where absent) made the most recently used.  Under ``_lock``.  (An
    ordered dict compares the keys twice here, three times to pop and put back; after the first,
    equal CacheKeys share their tuple: the second is a comparison of identities.)"""
    hit = cache.get(key, default)
    if hit is not default:
        cache.move_to_end(key)
    return hit


def _slot_desc(a):
    """A slot by what the program depends on: a value in memory by its chunks, dtype and chunk
    type; a lazy dask graph (whose tasks are part of what runs) by its name.  Remembered on the
    array (a parameter, a batch of data: read by every step's program) as long as its graph, name,
    chunks and meta are the objects it was made of (dask's ``__setitem__`` replaces them in place,
    ``compute_chunk_sizes`` the chunks)."""
    parts = (a.dask, a._name, a._chunks, a._meta)
    memo = a.__dict__.get("_daskgrad_slot")
    if memo is not None and all(map(operator.is_, memo[0], parts)):
        return memo[1]
    meta = type(a._meta)
    if is_data(a):
        desc = ("data", a.chunks, a.dtype.str, meta.__module__, meta.__name__)
    else:
        desc = ("graph", a.name, a.chunks, a.dtype.str, meta.__module__, meta.__name__)
    a.__dict__["_daskgrad_slot"] = (parts, desc)
    return desc


def is_data(a):
    """Whether dask array ``a`` holds its values (chunks or Futures), not tasks."""
    layers = a.dask.layers
    return len(layers) == 1 and a.name in layers and holds_data(layers[a.name])


def _order(outputs):
    """The Lazy nodes ``outputs`` read that are not computed, each after all it reads, in a fixed
    order: depth first from the outputs, each node's operands in their order."""
    out, done = [], set()
    stack = [(o, False) for o in map(through, reversed(outputs)) if type(o) is Lazy and o.computed is None]
    pop, push, add, append = stack.pop, stack.append, done.add, out.append  # (a small step's hot loop)
    while stack:
        node, expanded = pop()
        i = id(node)
        if i in done:
            continue
        if expanded:  # (what it reads is done: everything pushed after it was)
            add(i)
            append(node)
            continue
        push((node, True))
        srcs = node.srcs
        for s in (reversed(srcs) if len(srcs) > 1 else srcs):
            if type(s) is Lazy:
                if s.fn is _alias:
                    s = through(s)
                    if type(s) is not Lazy:
                        continue
                if s.computed is None and id(s) not in done:
                    push((s, False))
    return out


# ------------------------------------------------------------------ templates
@dataclass
class _Template:
    graph: dict             # the optimized graph, the data slots' values taken out
    slots: tuple            # per data slot (in slot order): the template's keys of its chunks
    outputs: tuple          # the template's name of each output
    names: frozenset        # every key name of the graph
    readers: dict           # result key -> the keys of the tasks that read it
    small: bool             # its chunks are small: run inline, in order, in the calling thread
    annotated: tuple        # (annotations, keys) of each layer that carries annotations (a span's left out)
    name: str               # its own, for an instance's token
    run_order: tuple | None = None  # (keys in dask.order's order, key -> how many tasks read it, key -> its task as
    #                           a direct call: calls.fast), made the first time it runs locally (_local_instance)
    rules: dict | None = None  # layer name -> the VJP rule that made it (the dashboard's names, labels.made_by)
    chunk_bytes: int = 0    # the largest chunk a task makes or reads whole
    held: int | None = None  # the most values an inline run holds at once (slots and results included)
    looped: bool = False    # it holds a time loop (a ScanLayer): run in the order the loop made its tasks
    shipped: object = None  # the graph pickled once, for a worker that runs it as one task (_one_task)
    for_workers: dict | None = None  # the graph with its chunk-fused tasks' parts pickled once (_renamed)
    slot_at: dict | None = None  # a slot's name -> its position in ``slots``, made once (_instance)


_lock = threading.Lock()
_templates = collections.OrderedDict()  # program key -> _Template, least recently used first
_seen = collections.OrderedDict()  # keys of recent programs without a template (see _seen_twice)
_stats = {"hits": 0, "misses": 0, "uncached": 0, "piece_hits": 0}


def instantiate(prog, *, local=True, fuse_chunks=None, room=None, run=False):
    """The optimized dask arrays of the outputs of ``prog`` (a :class:`Program` whose outputs are
    not in memory), ready to submit: an instance of the template of the program (made the second
    time its key is seen, the first where the program is long), or the program lowered and
    optimized with its own names.
    ``local``: for dask's local schedulers (else every key of an instance is its own, for a
    distributed scheduler, whose worker with the least room has ``room`` bytes for a task, where
    known: :func:`.submit.task_room`).  ``run``: nothing watches the submission (no observer,
    progress bar or deterministic mode): an instance that :func:`run_inline` would run is run here
    already, its outputs arrays holding their values (:func:`_ran`)."""
    enabled = dask.config.get("daskgrad.step-cache.enabled", True)
    fuse = dask.config.get("daskgrad.fuse-chunks", True) if fuse_chunks is None else fuse_chunks
    key = None
    if prog.key is not None and enabled:  # (its hash from the parts' hashes, which Program.of worked out)
        key = CacheKey((prog.key, fuse, local), hash((prog.hashes, fuse, local)))
    template = None
    if key is not None:
        with _lock:
            template = _lookup(_templates, key)
    if template is not None:
        _stats["hits"] += 1
        if run and local and template.small and template.run_order is not None and _inline_now():
            return _ran(template, prog)
        return _instance(template, prog, local, room)
    _stats["uncached" if key is None and enabled else "misses"] += 1
    if key is None or (len(prog.eqns) < LONG_PROGRAM and not _seen_twice(key)):
        return lowered(prog, lambda a: a.name, fuse)
    data = [a for a in prog.slots.values() if is_data(a)]
    names = {a.name: f"slot{j}-{key_token(key)}" for j, a in enumerate(data)}
    with labels.collecting() as rules:
        optimized = lowered(prog, lambda a: names.get(a.name, a.name), fuse)
    template = _remember(key, optimized, [names[a.name] for a in data], _task_bytes(prog), _whole_arrays(prog))
    if template is None:
        return lowered(prog, lambda a: a.name, fuse)
    template.rules = rules
    return _instance(template, prog, local, room)


def in_memory(v):
    """``v``'s value in memory if it is one (a computed Lazy value, a dask array holding its chunks), else None."""
    v = through(v)
    if type(v) is Lazy:
        return v.computed
    return v if materialized(v) else None


def key_token(key):
    """A short token of a program key (it names the template's slots)."""
    return f"{hash(key) & 0xFFFFFFFFFFFF:012x}"


def _seen_twice(key):
    """Whether ``key`` was seen before, lately (then a template is made for it); notes it as seen."""
    with _lock:
        if key in _seen:
            del _seen[key]
            return True
        _seen[key] = None
        while len(_seen) > 4 * dask.config.get("daskgrad.step-cache.entries", 16):
            _seen.popitem(last=False)
    return False


def lowered(prog, slot_name, fuse):
    """``prog`` lowered to dask (its slots read under ``slot_name(array)``) and optimized as one
    graph: the arrays of its outputs."""
    layers, deps, names, slots = lower(prog.eqns, slot_name, [through(o) for o in prog.outputs])
    for a in prog.slots.values():
        slots.setdefault(slot_name(a), a)
    for name, a in slots.items():
        if name != a.name:  # a value in memory read under the template's name of its slot
            keys = list(flatten(a.__dask_keys__()))
            graph = dict(a.dask)
            renamed = [(name,) + k[1:] if isinstance(k, tuple) else name for k in keys]
            # (as data: a Future under another key would be an alias, which fusion inlines)
            layers[name] = MaterializedLayer({new: DataNode(new, v.value if isinstance(v, DataNode) else v)
                                              for new, v in zip(renamed, map(graph.__getitem__, keys))})
            deps[name] = set()
            continue
        for n, layer, layer_deps in flat_layers(a.dask):
            if n not in layers or is_stub(layers[n]):
                layers[n], deps[n] = layer, layer_deps
    for name, layer in layers.items():
        if holds_data(layer):
            deps[name] = set()
    outs = []
    for o in map(through, prog.outputs):
        if type(o) is Lazy and o.computed is None:
            outs.append(da.Array(HighLevelGraph({}, {}), names[id(o)], o.chunks, meta=o._meta))
        else:
            a = o.computed if type(o) is Lazy else o
            name = slot_name(a)
            outs.append(da.Array(HighLevelGraph({}, {}), name, a.chunks, meta=a._meta))
    deps = {n: d & layers.keys() for n, d in deps.items() if n in layers}
    needed, stack = set(), [a.name for a in outs]
    while stack:  # only the layers the outputs read
        name = stack.pop()
        if name not in needed and name in layers:
            needed.add(name)
            stack.extend(deps[name])
    peaks.note_layer_chunks({n: layers[n] for n in needed})  # (estimate_memory sizes instances' tasks so)
    return optimize_layers(outs, {n: layers[n] for n in layers if n in needed},
                           {n: deps[n] & needed for n in layers if n in needed}, fuse)


def step_cache_info() -> dict:
    """The program cache's counts, as ``functools.lru_cache``'s ``cache_info``: ``hits`` (instances
    of a cached template), ``misses`` (programs lowered), ``uncached`` (programs with no key),
    ``entries`` and ``tasks`` held; ``pieces``, ``piece_hits``: recorded pieces held (reverse
    passes, see :func:`cached_piece`) and made again."""
    with _lock:
        return dict(_stats, entries=len(_templates), tasks=sum(len(t.graph) for t in _templates.values()),
                    pieces=sum(bool(p) for p in _pieces.values()))


def step_cache_clear() -> None:
    """Drop every cached template and piece, and zero the counts."""
    with _lock:
        _templates.clear()
        _seen.clear()
        _pieces.clear()
        _stats.update(hits=0, misses=0, uncached=0, piece_hits=0)


# ------------------------------------------------------------------ pieces: code that records a program, cached
_pieces = collections.OrderedDict()  # CacheKey -> Piece, or None where seen once; least recently used first
_ABSENT = object()


def cached_piece(key):
    """``(the Piece cached under key, False where its code records none, or None; whether key was seen
    before)``; notes ``key`` as seen.
    What records a program (a reverse pass) is cached, like a template, the second time its key is
    seen, in the same cache: ``daskgrad.step-cache.entries`` pieces at most (16 by default), and
    none when ``daskgrad.step-cache.enabled`` is False."""
    if not dask.config.get("daskgrad.step-cache.enabled", True):
        return None, False
    if type(key) is not CacheKey:
        key = CacheKey(key)
    with _lock:
        p = _lookup(_pieces, key, _ABSENT)
        if p is not _ABSENT:
            if p:
                _stats["piece_hits"] += 1
            return p, True
        _pieces[key] = None
        while len(_pieces) > 4 * dask.config.get("daskgrad.step-cache.entries", 16):
            _pieces.popitem(last=False)
        return None, False


def cache_piece(key, p):
    """Cache ``p`` (a :class:`~.lazy.Piece`, or False: none can be recorded) under ``key``, dropping the
    least recently used past the bound."""
    if type(key) is not CacheKey:
        key = CacheKey(key)
    with _lock:
        _pieces[key] = p
        _pieces.move_to_end(key)
        bound = dask.config.get("daskgrad.step-cache.entries", 16)
        while sum(v is not None for v in _pieces.values()) > bound:
            oldest = next(k for k, v in _pieces.items() if v is not None)
            del _pieces[oldest]


def _notes(layer):
    """A layer's annotations (GPU ``resources``) but a span's: distributed's ``span()`` annotates the
    layers of each submission with its own, and a template is instantiated in the span of its run."""
    return {n: v for n, v in (layer.annotations or {}).items() if n != "span"}


def _remember(key, optimized, inputs, task_bytes, whole):
    """Cache the optimized graph as the template of ``key`` (see :func:`make_template`)."""
    limit = dask.config.get("daskgrad.step-cache.tasks", 1_000_000)
    template = make_template(optimized, inputs, limit, task_bytes, whole)
    if template is None:
        return None
    with _lock:
        _templates[key] = template
        _templates.move_to_end(key)
        entries = dask.config.get("daskgrad.step-cache.entries", 16)
        while len(_templates) > entries or sum(len(t.graph) for t in _templates.values()) > limit:
            _templates.popitem(last=False)
    return template


def make_template(optimized, inputs, limit=None, task_bytes=None, whole=False):
    """The optimized graph of ``optimized`` (dask arrays of one graph) as a template: the values of
    the slots named ``inputs`` taken out (each instance puts its own in), dask's legacy tasks
    converted, what an instance renames noted; None where it cannot be one (more tasks than
    ``limit``, a value or legacy task outside the slots).  ``task_bytes``: the largest chunk a task
    makes or reads whole (:func:`_task_bytes`), where known; else its slots' largest chunk.
    ``whole``: every array of the program is one chunk (:func:`_whole_arrays`): its tasks are whole
    ops, one after another as in an eager framework, so it runs inline whatever its chunks' size."""
    graph = dict(optimized[0].__dask_graph__())
    if limit is not None and len(graph) > limit:
        return None
    by_name = {}  # one pass over the graph, not one per slot
    for k in graph:
        by_name.setdefault(k[0] if isinstance(k, tuple) else k, []).append(k)
    slots, largest = [], 0
    for name in inputs:
        keys = tuple(by_name.get(name, ()))
        for k in keys:
            v = graph[k]
            if task_bytes is None:
                largest = max(largest, getattr(v.value if isinstance(v, DataNode) else v, "nbytes", 0))
            graph[k] = None  # the values are put back at each instance: a template holds no data
        slots.append(keys)
    legacy = [k for k, t in graph.items() if type(t) is tuple]  # dask's legacy tasks (a reduction's aggregate)
    for k in legacy:  # (converted after the slots are out: converting a graph drops its Futures' keys)
        graph[k] = convert_legacy_task(k, graph[k], graph)
    for k, t in graph.items():  # a constant an op made from its parameters (a NumPy array): part of the key
        if t is not None and not isinstance(t, (GraphNode, tuple)):
            graph[k] = DataNode(k, t)
    if not all(t is None or isinstance(t, GraphNode) for t in graph.values()):
        return None  # a legacy task outside the slots: not renamed here
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
    largest = max([largest, task_bytes or 0] + [a.dtype.itemsize * _chunk_elements(a) for a in optimized])
    return _Template(graph, tuple(slots), tuple(a.name for a in optimized),
                     frozenset(k[0] if isinstance(k, tuple) else k for k in graph), readers,
                     whole or largest <= SMALL_CHUNK, tuple(annotated), uuid.uuid4().hex, chunk_bytes=largest,
                     looped=any(type(v) is ScanLayer for v in optimized[0].dask.layers.values()))


def _task_bytes(prog):
    """Bytes of the largest chunk a task of ``prog`` makes or reads whole: each op's result chunks and
    its operands', but for a time loop's per-step data (``xs``), which a step reads a row of.  (A
    loop's observed traces are one chunk of all steps' rows: counted whole, 715 steps of them made
    an FWI gradient's small tasks go through dask's threaded scheduler, 2x slower.)"""
    largest = 0
    for node in prog.eqns:
        srcs = tuple(map(through, node.srcs))
        rows = {id(srcs[j]) for j in dict(node.params).get("xs_at", ())}  # (a time loop's: scan.forward, revolve)
        for v in (node,) + srcs:
            if id(v) not in rows and isinstance(v, (Lazy, da.Array)):
                largest = max(largest, _chunk_elements(v) * v.dtype.itemsize)
    return largest


def _whole_arrays(prog):
    """Whether every value and slot of ``prog`` is one chunk.  dask's threaded scheduler then has
    no chunks to run side by side, only independent whole ops (a matmul is parallel inside BLAS
    already), and it costs ~0.1 ms a task: a two-layer net's step on 64 x 1,000 rows ran 1.8x
    slower through it than inline."""
    return all(len(c) == 1 for v in prog.eqns + tuple(prog.slots.values()) for c in v.chunks)


def _chunk_elements(a):
    """Elements of ``a``'s largest chunk."""
    n = 1
    for c in a.chunks:
        n *= max(c, default=1)
    return n


# ------------------------------------------------------------------ instances
def _instance(template, prog, local, room=None):
    """The template run on ``prog``'s slot values: its outputs named for this run (an instance, or
    the submission that made the template)."""
    if template.rules:
        labels.remember(template.rules)
    graphs = prog.graphs  # (the slots Program.of found not is_data: each step's, not asked again)
    inputs = [name for name in prog.slots if name not in graphs]
    data = [prog.slots[name] for name in inputs]
    token = _token(template.name, inputs)
    slot_at = template.slot_at
    if slot_at is None:
        slot_at = template.slot_at = {(keys[0][0] if isinstance(keys[0], tuple) else keys[0]): j
                                      for j, keys in enumerate(template.slots) if keys}
    arrays, olds, outputs = [], [], []
    for o, name in zip(map(through, prog.outputs), template.outputs):
        if name in slot_at:  # an output that lowers to a slot (a rechunk to its own chunks): the value itself
            outputs.append(data[slot_at[name]])
            continue
        v = o.computed if type(o) is Lazy and o.computed is not None else o
        arrays.append(array(_NO_GRAPH, f"{name}-{token}", v.chunks, v._meta))
        olds.append(name)
        outputs.append(None)
    input_layers = [a.dask.layers[a.name] for a in data]
    make = _local_instance if local else _one_task if _fits_one_task(template, olds, room) else _renamed
    made = iter(make(template, arrays, olds, input_layers, inputs, token) if arrays else ())
    return [next(made) if a is None else a for a in outputs]


def _ran(template, prog):
    """:func:`_instance` and :func:`run_inline`'s run of it in one (on dask's local schedulers): the
    template's tasks run in the calling thread on ``prog``'s slot values, each output an array
    holding its chunks under the name an instance would give it.  A small step's submission makes
    no instance graph to take apart again (a few dozen arrays and mappings each step)."""
    if template.rules:
        labels.remember(template.rules)
    graphs = prog.graphs
    inputs = [name for name in prog.slots if name not in graphs]
    data = [prog.slots[name] for name in inputs]
    values = {}
    for keys, a, name in zip(template.slots, data, inputs):
        layer = a.dask.layers[a.name]
        for k in keys:
            v = layer[(name,) + k[1:] if isinstance(k, tuple) else name]
            values[k] = v.value if isinstance(v, DataNode) else v
    token = _token(template.name, inputs)
    slot_at = template.slot_at
    if slot_at is None:
        slot_at = template.slot_at = {(keys[0][0] if isinstance(keys[0], tuple) else keys[0]): j
                                      for j, keys in enumerate(template.slots) if keys}
    outputs, wanted = [], set()
    for o, name in zip(map(through, prog.outputs), template.outputs):
        if name in slot_at:  # an output that lowers to a slot (a rechunk to its own chunks): the value itself
            outputs.append((None, data[slot_at[name]]))
            continue
        v = o.computed if type(o) is Lazy and o.computed is not None else o
        olds = _block_keys(name, v.chunks)
        wanted.update(olds)
        outputs.append((olds, array(_NO_GRAPH, f"{name}-{token}", v.chunks, v._meta)))
    got = _run_in_order(template.run_order, values, frozenset(wanted))
    out = []
    for olds, a in outputs:
        if olds is None:
            out.append(a)
            continue
        new = a.name
        out.append(_holding(a, {(new,) + k[1:] if isinstance(k, tuple) else new: got[k] for k in olds}))
    return out


def _block_keys(name, chunks):
    """The keys of an array named ``name`` with ``chunks``, in ``__dask_keys__``'s order, flat."""
    if not chunks:
        return [(name,)]
    return [(name,) + idx for idx in itertools.product(*(range(len(c)) for c in chunks))]


def _inline_now():
    """Whether :func:`run_inline` may run a submission in this thread now: dask's local scheduler
    (or none asked) and no dask diagnostic listening."""
    return not Callback.active and dask.config.get("scheduler", None) in _INLINE_SCHEDULERS


def _token(name, inputs):
    """An instance's token: its template's name and its slots' names, hashed: 1 us where dask's
    ``tokenize`` of the same strings took 8 (a small program's step makes one or two instances)."""
    return hashlib.blake2b("\0".join((name, *inputs)).encode(), digest_size=16).hexdigest()


def _local_instance(template, arrays, olds, input_layers, inputs, token):
    """The template's graph reading ``input_layers`` and naming its results as ``arrays`` (for dask's
    local schedulers, which run a graph in isolation: the other keys stay the template's)."""
    values = {}
    for keys, layer, name in zip(template.slots, input_layers, inputs):
        for k in keys:
            v = layer[(name,) + k[1:] if isinstance(k, tuple) else name]
            values[k] = v.value if isinstance(v, DataNode) else v
    renamed, aliases, done = {}, {}, set()  # template key -> result key; result key -> its twin's
    for a, old in zip(arrays, olds):
        if a.name in done:  # (an array asked for twice is one result)
            continue
        done.add(a.name)
        for k in flatten(a.__dask_keys__()):
            was = (old,) + k[1:] if isinstance(k, tuple) else old
            if was in renamed:  # the same array asked for twice under two names
                aliases[k] = renamed[was]
            else:
                renamed[was] = k
    if template.run_order is None:  # worked out once, by the submission that made the template (its first run)
        # (only small chunks run inline: run_inline)
        template.run_order = _run_order(template.graph, calls=template.small, looped=template.looped)
    name = f"instance-{token}"
    hlg = HighLevelGraph({name: Instance(template, values, renamed, aliases)}, {name: set()})
    return [array(hlg, a.name, a.chunks, a._meta) for a in arrays]


def _run_order(graph, calls=True, looped=False):
    """How an inline run goes through a template's ``graph``: its keys in ``dask.order``'s order (in
    :func:`_made_order`'s where it holds a time loop: ``looped``), how many tasks read each key, and
    (``calls``) each task as a direct call (:func:`.calls.fast`)."""
    filled = {k: DataNode(k, None) if t is None else t for k, t in graph.items()}
    reads = collections.Counter(d for t in filled.values() for d in t.dependencies)
    if looped:
        keys = tuple(_made_order(graph, {k for k, t in graph.items() if t is None}))
    else:
        priority = order(filled)
        keys = tuple(sorted(filled, key=priority.__getitem__))
    return _RunOrder((keys, dict(reads), {k: _direct(graph[k]) for k in keys if graph[k] is not None} if calls else {}))


def _direct(task):
    """``task`` as a direct call (:func:`.calls.fast`); a time loop's step task (a :class:`_Run` of
    references) as :class:`_RunCall`."""
    if type(task) is Task and type(task.func) in _RUNS and not task.kwargs and all(type(a) is TaskRef
                                                                                   for a in task.args):
        return _RunCall(task)
    return fast(task)


class _RunCall:
    """A time loop's task ``_Run(*refs)`` as a direct call: the values it reads handed to the step's
    template task under its own keys, without a call of ``_Run`` on them in between (an inline run
    of a 1,000-step loop runs ~100,000 such tasks)."""

    __slots__ = ("key", "dependencies", "direct", "pairs")

    def __init__(self, task):
        self.key, self.dependencies, self.direct = task.key, task.dependencies, task.func.direct
        # (zip: a trailing gate's value is not the template task's)
        self.pairs = tuple(zip(task.func.deps, (a.key for a in task.args)))

    def __call__(self, values):
        return self.direct({d: values[k] for d, k in self.pairs})


class _RunOrder(tuple):
    """``(keys, reads, calls)`` of :func:`_run_order`, and the runs worked out from them (:meth:`run`)."""

    def run(self, wanted):
        """The tasks in order as ``(key, call, keys to drop after it)``, each value dropped after
        its last reader unless ``wanted`` (a frozenset): worked out once per set wanted, not counted
        down on every run (a template of 200 tiny chunks runs 200 such tasks a step)."""
        runs = self.__dict__.setdefault("runs", {})
        hit = runs.get(wanted)
        if hit is None:
            keys, reads, calls = self
            left, hit = dict(reads), []
            for k in keys:
                task = calls.get(k)
                if task is None:  # a slot: its value is in place
                    continue
                drops = []
                for d in task.dependencies:
                    left[d] -= 1
                    if not left[d] and d not in wanted:
                        drops.append(d)
                hit.append((k, task, tuple(drops)))
            if len(runs) >= 8:
                runs.clear()
            runs[wanted] = hit
        return hit


# ---- Python's garbage collector during a submission
class _GC(threading.local):
    paused = False  # this thread switched the collector off (gc_paused)


_gc = _GC()


@contextlib.contextmanager
def gc_paused():
    """Python's cyclic garbage collector held off while daskgrad builds and runs a submission in
    this thread.  A submission makes hundreds of thousands of small objects (a program, its graph,
    a backward's cotangents) that refcounting frees when it ends; collected meanwhile, they reached
    the collector's oldest generation, whose full collections -- of every object the process holds,
    cached templates included -- then came every run or two (0.4 s each in a 200-step FWI
    gradient).  User code keeps a collector: an inline run collects its youngest generation every
    1,024 tasks (:func:`_run_in_order`, the cycles its tasks dropped), and the collector runs as usual while
    dask's scheduler or a cluster runs the tasks (:func:`gc_running`).  A collector switched off
    by the user stays off; one switched off by another thread meanwhile is switched on again."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    _gc.paused = True
    try:
        yield
    finally:
        _gc.paused = False
        gc.enable()


@contextlib.contextmanager
def gc_running():
    """The collector on again within a :func:`gc_paused` of this thread (tasks run by dask's
    scheduler, or a wait on a cluster: user code, for as long as it takes)."""
    if not _gc.paused or gc.isenabled():
        yield
        return
    gc.enable()
    try:
        yield
    finally:
        gc.disable()


def _run_in_order(order, values, wanted):
    """``values`` (the slots') completed by running the tasks of ``order`` (a :class:`_RunOrder`), each
    value dropped after its last reader unless ``wanted``."""
    collect = _gc.paused
    for i, (k, task, drops) in enumerate(order.run(wanted)):
        if collect and i & 1023 == 1023:  # (the cycles its tasks dropped; the youngest generation: see gc_paused)
            gc.collect(0)
        values[k] = task(values)
        for d in drops:
            del values[d]
    return values


# ---- a small instance on a cluster: one task
def _fits_one_task(template, olds, room=None):
    """Whether an instance of ``template`` goes to a cluster as one task (:func:`_one_task`): its
    chunks are small, so each task's scheduling and transfer would cost more than its NumPy work
    (an FWI's step: ~100 tasks of ~0.2 ms), and the most it holds at once, counted as that many of
    its largest chunks, is within ``daskgrad.step-cache.one-task-bytes`` (default 512 MiB; 0: never)
    and a quarter of the ``room`` of the worker with the least.  A graph that carries other
    annotations (resources, a worker) keeps its tasks."""
    if not template.small or any(set(note) - {"span"} for note, _ in template.annotated):
        return False
    limit = parse_bytes(dask.config.get("daskgrad.step-cache.one-task-bytes", "512 MiB") or 0)
    if room is not None:
        limit = min(limit, room // 4)
    if limit <= 0:
        return False
    if template.held is None:  # (worked out once: its results are the template's outputs ``olds`` name)
        graph = template.graph
        names = set(olds)
        results = {k for k in graph if (k[0] if isinstance(k, tuple) else k) in names}
        keys, reads, _ = _run_order(graph, calls=False, looped=template.looped)
        left = dict(reads)
        live = held = sum(t is None for t in graph.values())  # the slots: held throughout (the task's inputs)
        for k in keys:
            t = graph[k]
            if t is None:
                continue
            live += 1
            held = max(held, live)
            for d in t.dependencies:
                left[d] -= 1
                if not left[d] and d not in results and graph.get(d, True) is not None:  # (a result: to the end)
                    live -= 1
        template.held = held
    return template.held * max(template.chunk_bytes, 1) <= limit


class _Shipped:
    """A template's graph as a worker receives it: pickled once on the client, and travelling as
    those bytes (the scheduler passes them on as they are); its run order worked out, its tasks made direct calls,
    once in each worker process that runs it (:meth:`run_order`)."""

    __slots__ = ("name", "blob", "looped")

    def __init__(self, name, blob, looped=False):
        self.name, self.blob, self.looped = name, blob, looped

    @classmethod
    def of(cls, template):
        return cls(template.name, cloudpickle.dumps(template.graph), template.looped)

    def __reduce__(self):
        return _Shipped, (self.name, self.blob, self.looped)

    def run_order(self):
        with _lock:
            order = _worker_run_orders.get(self.name)
            if order is not None:
                _worker_run_orders.move_to_end(self.name)
                return order
        order = _run_order(cloudpickle.loads(self.blob), looped=self.looped)
        with _lock:
            _worker_run_orders[self.name] = order
            while len(_worker_run_orders) > dask.config.get("daskgrad.step-cache.entries", 16):
                _worker_run_orders.popitem(last=False)
        return order


_worker_run_orders = collections.OrderedDict()  # template name -> its run order, in a process that ran it as one task


def _run_one_task(shipped, slot_keys, wanted, *values):
    values = _run_in_order(shipped.run_order(), dict(zip(slot_keys, values)), frozenset(wanted))
    return _Outputs(values[k] for k in wanted)


def _one_task(template, arrays, olds, input_layers, inputs, token):
    """A small template's instance for a distributed scheduler as one task running the template
    inline on a worker, as a local scheduler's instance runs in the client's thread, and a
    ``getitem`` task for each result key.  The scheduler sees the slots it already holds, one task
    and the results: what it would recompute if a worker were lost."""
    subs, slot_keys, graph = {}, [], {}
    for keys, name, layer in zip(template.slots, inputs, input_layers):
        for k in keys:
            new, value = _slot_key(layer, (name,) + k[1:] if isinstance(k, tuple) else name)
            slot_keys.append(k)
            subs[k] = _scalar(value) or new
            if subs[k] is new:  # (a scalar goes inside the task)
                graph[new] = value
    wanted, results = {}, []
    for a, old in zip(arrays, olds):
        for k in flatten(a.__dask_keys__()):
            was = (old,) + k[1:] if isinstance(k, tuple) else old
            results.append((k, wanted.setdefault(was, len(wanted))))
    if template.shipped is None:
        template.shipped = _Shipped.of(template)
    run = f"instance-{token}"
    graph[run] = Task(run, _run_one_task, template.shipped, tuple(slot_keys), tuple(wanted),
                      *(subs[k] if isinstance(subs[k], GraphNode) else TaskRef(subs[k]) for k in slot_keys))
    for k, i in results:
        if k not in graph:  # (an array asked for twice under one name is one result)
            graph[k] = Task(k, operator.getitem, TaskRef(run), i)
    name = f"{arrays[0].name}-{token}"
    hlg = HighLevelGraph({name: MaterializedLayer(graph)}, {name: set()})
    return [da.Array(hlg, a.name, a.chunks, meta=a._meta) for a in arrays]


def _slot_key(layer, key):
    """The key a cluster's task reads for a slot's chunk ``key`` in ``layer``, and its value there: the
    chunk's own, or, where the chunk is another value's Future (whole chunks of a value in memory:
    :func:`.lazy._slice_in_memory`), that value's key, not an alias task to it."""
    v = layer[key]
    return (v.key, v) if isinstance(v, TaskRef) and v.key != key else (key, v)


def _scalar(v):
    """A slot's value to put inside the tasks that read it where it is a scalar (an optimizer's step
    size this step), else None: a key of its own would be a task the scheduler runs and sends on."""
    return DataNode(None, v.value) if isinstance(v, DataNode) and getattr(v.value, "ndim", None) == 0 else None


def _renamed(template, arrays, olds, input_layers, inputs, token):
    """The template's graph under keys of its own for a distributed scheduler, which remembers keys
    across submissions: the slots are the values' own keys (already in cluster memory), the results
    the arrays asked for, every other key the template's name with the instance's token (the prefix
    the dashboard groups by stays)."""
    subs, values = {}, {}
    for keys, name, layer in zip(template.slots, inputs, input_layers):
        for k in keys:  # (an output that is a slot is the value itself: _instance)
            new, value = _slot_key(layer, (name,) + k[1:] if isinstance(k, tuple) else name)
            subs[k] = _scalar(value) or new
            values[new] = value
    for a, old in zip(arrays, olds):
        for k in flatten(a.__dask_keys__()):
            subs.setdefault((old,) + k[1:] if isinstance(k, tuple) else old, k)
    if template.for_workers is None:
        template.for_workers = {k: shipped(t) for k, t in template.graph.items() if t is not None}
    graph = {}
    for k, t in template.for_workers.items():
        new = subs.get(k)
        if new is None:
            new = subs[k] = (f"{k[0]}-{token}",) + k[1:] if isinstance(k, tuple) else f"{k}-{token}"
        graph[new] = t
    graph = {new: t.substitute(subs, key=new) for new, t in graph.items()}
    for keys in template.slots:
        for k in keys:
            if not isinstance(subs[k], GraphNode):
                graph[subs[k]] = values[subs[k]]
    for a in arrays:  # an output that is a slot itself: its value
        for k in flatten(a.__dask_keys__()):
            if k not in graph:
                graph[k] = Alias(k, subs.get(k, k))
    layers = {}
    for i, (note, keys) in enumerate(template.annotated):
        name = f"{arrays[0].name}-{token}-{i}"
        layers[name] = MaterializedLayer({subs[k]: graph.pop(subs[k]) for k in keys if subs[k] in graph},
                                         annotations=note)
    layers[f"{arrays[0].name}-{token}"] = MaterializedLayer(graph)
    hlg = HighLevelGraph(layers, {n: set() for n in layers})
    return [da.Array(hlg, a.name, a.chunks, meta=a._meta) for a in arrays]


class Instance(MaterializedLayer):
    """An instance of a template: the template, the slot values it reads this time and the names of
    its results.  Its tasks under the results' names (each task that reads a renamed result
    rewritten) are made only when a scheduler asks for them: :func:`run_inline` runs the template's
    own tasks."""

    def __init__(self, template, inputs, renamed, aliases):
        # (made by a plain function of the parts, not a method: no cycle holds the inputs)
        super().__init__(_MadeOnRead(functools.partial(_renamed_tasks, template, inputs, renamed, aliases)))
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


class _MadeOnRead(collections.abc.Mapping):
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
    """The results of an instance of small chunks (or of a graph whose time loops are all of small
    chunks), computed in the calling thread, as ``dask.persist`` would give them; None when it must
    go to dask's scheduler: large chunks (threads run them in parallel), another scheduler, or a dask
    diagnostic listening (a progress bar, a profiler, a callback).

    On small chunks dask's threaded scheduler spends more than the tasks: ordering the graph again
    (~0.1 ms a task) and handing each task to a thread, where NumPy holds the GIL anyway.  An
    instance runs in the order ``dask.order`` gave its template; a time loop in the order it was
    made (Revolve's: the order that holds the fewest states)."""
    if not arrays or not _inline_now():
        return None
    data = [is_data(a) for a in arrays]  # (asked once: _run_instance reads them too)
    made = [a for a, d in zip(arrays, data) if not d]
    if not made:  # (run already: _ran)
        return list(arrays)
    layers = made[0].dask.layers if made else {}
    layer = next(iter(layers.values())) if len(layers) == 1 else None
    if type(layer) is Instance:
        return _run_instance(arrays, layer, data) if layer.template.small else None
    loops = [v for v in layers.values() if isinstance(v, ScanLayer)]
    if not loops or not all(v.small for v in loops) or any(_chunk_elements(a) * a.dtype.itemsize > SMALL_CHUNK
                                                            for a in arrays):
        return None
    return _run_graph(arrays)


def _run_instance(arrays, layer, data):
    """The results of ``arrays``, of the Instance ``layer`` (``data``: whether each is a slot's value,
    which is its own result: see _instance), run inline."""
    template, aliases = layer.template, layer.aliases
    back = {new: old for old, new in layer.renamed.items()}  # a result's key -> the template's
    keys = []  # per array: (its keys, the template's), None for a slot's value
    for a, d in zip(arrays, data):
        if d:
            keys.append(None)
            continue
        ks = list(flatten(a.__dask_keys__()))
        keys.append((ks, [back.get(k, k) for k in map(aliases.get, ks, ks)]))  # (aliases.get(k, k) first)
    wanted = frozenset([k for pair in keys if pair is not None for k in pair[1]])
    values = _run_in_order(template.run_order, dict(layer.inputs), wanted)
    return [a if pair is None else _holding(a, dict(zip(pair[0], map(values.__getitem__, pair[1]))))
            for a, pair in zip(arrays, keys)]


def _holding(a, chunks):
    """``a`` as an array holding ``chunks`` (its keys -> their values), as ``dask.persist`` gives it."""
    return array(HighLevelGraph({a.name: MaterializedLayer(chunks)}, {a.name: set()}), a.name, a.chunks, a._meta)


class _Run:
    """A template's task as a function of its inputs' values, in ``deps`` order: a time loop's step
    is a task calling it on the step's own keys (made in microseconds, where renaming the keys inside
    a fused task costs a walk of all it holds; :mod:`.scan`)."""

    __slots__ = ("task", "deps", "_call")

    def __init__(self, task):
        # sorted: a set's order may differ where the task is unpickled (a worker), and the instance's
        # arguments were laid out in the client's order (a chunk read as another's: shapes mismatched)
        self.task, self.deps, self._call = task, tuple(sorted(task.dependencies, key=repr)), None

    def __call__(self, *values):
        return self.direct(dict(zip(self.deps, values)))  # (a trailing gate's value is not the task's)

    def direct(self, values):
        """The task on ``values`` (its dependencies' values by the template's keys)."""
        call = self._call
        if call is None:  # the task as a direct call (calls.fast), made once in each process it runs in:
            call = self._call = fast(self.task)  # a chunk-fused step as one generated function
        return call(values)

    def __reduce__(self):
        return _Run, (self.task,)


class _Chain:
    """Template tasks run as one task of a time loop's step, as :class:`_Run` runs one: ``runs`` in an
    order that runs each after what it reads, the last one's value the task's; each of the others has
    one reader, among the later ones (:func:`.scan._chained`: a halo's one-cell strip of a small chunk
    is not a task of its own, handed from task to task).  ``deps``: what they read from outside."""

    __slots__ = ("runs", "deps")

    def __init__(self, runs):
        self.runs = tuple(runs)
        made = {r.task.key for r in self.runs}
        self.deps = tuple(sorted({d for r in self.runs for d in r.task.dependencies if d not in made}, key=repr))

    def __call__(self, *values):
        return self.direct(dict(zip(self.deps, values)))  # (a trailing gate's value is not the task's)

    def direct(self, values):
        runs = self.runs
        for r in runs[:-1]:
            values[r.task.key] = r.direct(values)
        return runs[-1].direct(values)

    def __reduce__(self):
        return _Chain, (self.runs,)


_RUNS = (_Run, _Chain)


def _run_graph(arrays):
    """A graph run in the calling thread in the order :func:`_made_order` gives (a time loop's: the
    schedule's), each value dropped after its last reader."""
    graph = dict(arrays[0].__dask_graph__())
    wanted = {k for a in arrays for k in flatten(a.__dask_keys__())}
    for k in [k for k, t in graph.items() if type(t) is tuple]:  # dask's legacy tasks and aliases (a reduction's
        graph[k] = convert_legacy_task(k, graph[k], graph)  # aggregate, left where chunks are not fused): tasks
    values, left = {}, {}
    for k, t in graph.items():
        if not isinstance(t, GraphNode):
            values[k] = t
        elif isinstance(t, DataNode):
            values[k] = t.value
        else:
            for d in t.dependencies:
                if d in graph:
                    left[d] = left.get(d, 0) + 1
    collect = _gc.paused
    for i, k in enumerate(_made_order(graph, set(values))):
        t = graph[k]
        if collect and i & 1023 == 1023:  # (see gc_paused)
            gc.collect(0)
        if type(t) is Task and type(t.func) in _RUNS:  # a time loop's task: its inputs' values in order
            values[k] = t.func(*[values[a.key] for a in t.args])
        else:
            values[k] = values[t.target] if type(t) is Alias else fast(t)(values) if type(t) is Task else t(values)
        for d in t.dependencies:
            if d in left:
                left[d] -= 1
                if not left[d] and d not in wanted:
                    values.pop(d, None)
    return [_holding(a, {k: values[k] for k in flatten(a.__dask_keys__())}) for a in arrays]


def _made_order(graph, given):
    """The tasks of ``graph`` but ``given`` (keys whose values are there from the start), each as soon
    as what it reads is, in the graph's own order where several are: a time loop's tasks in the order
    its schedule made them (Revolve's, which holds the fewest states).  (``dask.order`` on a loop of
    a thousand steps cost seconds, and ordered it otherwise.)"""
    import heapq

    keys = list(graph)
    position = {k: i for i, k in enumerate(keys)}
    waiting, readers, ready = {}, {}, []
    for i, k in enumerate(keys):
        if k in given:
            continue
        n = 0
        for d in graph[k].dependencies:  # (a task, or a DataNode: none)
            if d in position and d not in given:
                n += 1
                r = readers.get(d)
                if r is None:
                    readers[d] = [k]
                else:
                    r.append(k)
        waiting[k] = n
        if not n:
            ready.append(i)  # (in increasing positions: a heap already)
    while ready:
        k = keys[heapq.heappop(ready)]
        yield k
        for r in readers.get(k, ()):
            waiting[r] -= 1
            if not waiting[r]:
                heapq.heappush(ready, position[r])
