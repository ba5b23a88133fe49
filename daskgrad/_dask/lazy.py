"""Arrays not built yet: what an op records instead of a dask graph.

An op's result is a :class:`Lazy`: the function that makes its dask array (the op's forward, which
takes dask arrays), what it reads (other Lazy values, dask arrays, Python numbers) and its plain
parameters -- and, known at once, its abstract value: shape, chunks, dtype and chunk type (meta).
Nothing is built while a program is recorded, so recording costs the same whatever its depth, and
what daskgrad caches and replays is the recorded program (:mod:`.program`), never dask's graph.

The abstract value comes from running the forward once on stand-ins, arrays with the real chunks
and meta but no graph (:func:`defer`), remembered per function, parameters and kinds of operands,
so a loop's ops infer it once; elementwise ops infer it as dask does, from their operands' dtypes
and metas, with no dask call.  A forward that needs its operands' values (unknown chunk sizes
after a boolean mask) runs on the real arrays at once, as before.

:meth:`Lazy.build` lowers a value to a dask array on request (``tensor.array``): each op's forward
on stand-ins named as its operands' arrays, every layer joined once (dask copies every input's
layers into each array it makes, which would cost O(N²) for a chain of N ops).
"""
from __future__ import annotations

import contextlib
import threading

import dask
import dask.array as da
from dask.utils import funcname

from .fold import fold
from .internals import GraphNode, HighLevelGraph, MaterializedLayer
from .layers import elementwise_aval, elementwise_layer

class Lazy:
    """An op's result not built yet (see the module docstring): ``fn(*srcs, **params)`` makes its
    dask array.  ``kept``: its value, once a submission computed it and something keeps it in
    memory (a later program reads that instead of computing it again)."""

    __slots__ = ("fn", "srcs", "params", "dtype", "_meta", "chunks", "shape", "ndim", "elementwise", "annotations",
                 "many", "kept", "_built", "__weakref__")

    def __init__(self, fn, srcs, params, dtype, meta, chunks, elementwise=False):
        self.fn, self.srcs, self.params, self.elementwise = fn, srcs, params, elementwise
        self.dtype, self._meta, self.chunks = dtype, meta, chunks
        self.shape = tuple(sum(c) for c in chunks)
        self.ndim = len(chunks)
        # dask.annotate's annotations where it was recorded (GPU placement of a rule's tasks), which its
        # layers carry when built, outside that context
        self.annotations = dask.get_annotations() or None
        self.many = 0  # a group: fn returns this many arrays, each read through a component (defer_many)
        self.kept = self._built = None

    def __repr__(self):
        return f"Lazy({funcname(self.fn)}, shape={self.shape}, dtype={self.dtype})"

    @property
    def numblocks(self):
        return tuple(len(c) for c in self.chunks)

    @property
    def npartitions(self):
        n = 1
        for c in self.chunks:
            n *= len(c)
        return n

    @property
    def size(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    def build(self):
        """The dask array (built once, with the Lazy values it reads: see :func:`build`)."""
        if self.fn is _alias:
            return value_of(through(self))
        if self.kept is not None:
            return self.kept
        if self._built is None:
            build([self])
        return self._built if self.kept is None else self.kept


def _alias(a):
    return a  # (never run: an alias is read through, see through)


def alias(value):
    """A Lazy value standing for ``value`` (a Lazy value or a dask array), to be rebound with
    :func:`rebind`: a compiled function's program reads its arguments through aliases, rebound to
    each call's values."""
    return Lazy(_alias, (value,), (), value.dtype, value._meta, value.chunks)


def rebind(node, value):
    """Point alias ``node`` at ``value`` (None: at nothing, an empty stand-in of its kind)."""
    node.srcs = (stand_in(node, "unbound") if value is None else value,)


def through(x):
    """``x``, or what the alias ``x`` stands for (followed to the end)."""
    while type(x) is Lazy and x.fn is _alias:
        x = x.srcs[0]
    return x


def value_of(x):
    """A Lazy value's dask array as it stands (kept, built, or built now); anything else as it is."""
    return x.build() if type(x) is Lazy else x


# ------------------------------------------------------------------ recording
def defer(fn, srcs, params=(), elementwise=False):
    """``fn(*srcs, **dict(params))`` not built yet: a :class:`Lazy` knowing its result's abstract
    value, or, where that cannot be known without the values (unknown chunk sizes), the dask array
    built now.  ``srcs``: Lazy values, dask arrays and constants; ``params``: ``(name, value)``
    pairs.  ``elementwise``: ``fn`` is an operator, a NumPy ufunc or a dask one (its dtype and meta
    are inferred as dask's ``elemwise`` infers them, with no dask call)."""
    srcs = tuple(srcs)
    if elementwise:
        aval = elementwise_aval(fn, srcs) if not params else None
        if aval is not None:
            return Lazy(fn, srcs, (), *aval, elementwise=True)
    aval = _aval(fn, srcs, params)
    if aval is None:  # the forward needs its operands' values: build it now, as dask would
        return fn(*[value_of(s) for s in srcs], **dict(params))
    return Lazy(fn, srcs, params, *aval)


def _component(group, *, i):
    return group[i]  # (never run: lowering names a component as its group's i-th array)


def defer_many(fn, srcs, params, avals):
    """``fn(*srcs, **dict(params))`` returning one dask array per ``(dtype, meta, chunks)`` of
    ``avals``, not built yet: one Lazy value each (components of one group, built together)."""
    group = Lazy(fn, tuple(srcs), tuple(params), *avals[0])
    group.many = len(avals)
    return [Lazy(_component, (group,), (("i", i),), *aval) for i, aval in enumerate(avals)]


_avals = {}  # (fn, params, kinds of srcs) -> (dtype, meta, chunks), or None where it must run on the values
_AVALS_MAX = 65536
_lock = threading.RLock()


def _kind(s):
    if isinstance(s, (Lazy, da.Array)):
        return ("array", s.chunks, s.dtype, type(s._meta), s._meta.ndim)
    t = type(s)
    if t is float:
        return (t, s.hex())
    if t is complex:
        return (t, s.real.hex(), s.imag.hex())
    return (t, s)  # ints and strings by value (NumPy's dtype rules read an int's value); others hashed


def _aval(fn, srcs, params):
    """The result's dtype, meta and chunks, from ``fn`` run once on stand-ins of ``srcs`` (remembered
    per ``fn``, ``params`` and operand kinds); None where the result's chunks are unknown."""
    try:
        key = (fn, params, tuple(_kind(s) for s in srcs))
        hash(key)
    except TypeError:  # an unhashable constant: inferred every time
        key = None
    if key is not None:
        hit = _avals.get(key, _avals)
        if hit is not _avals:
            return hit
    try:
        out = fn(*[stand_in(s, f"stand-in-{i}") if isinstance(s, (Lazy, da.Array)) else s
                   for i, s in enumerate(srcs)], **dict(params))
    except Exception:  # noqa: BLE001 - the forward on the real arrays raises its own error, or works
        out = fn(*[value_of(s) for s in srcs], **dict(params))
        return None if not isinstance(out, da.Array) else _known(out)
    aval = _known(out) if isinstance(out, da.Array) else None
    if key is not None and len(_avals) < _AVALS_MAX:
        _avals[key] = aval
    return aval


def _known(a):
    if any(n != n for c in a.chunks for n in c):
        return None
    return a.dtype, a._meta, a.chunks


class _Stub(MaterializedLayer):
    """The layer of a stand-in: an array known by its name, chunks and meta, with no tasks here."""

    def __init__(self):
        super().__init__({})


def stand_in(a, name):
    """An array with ``a``'s chunks and meta named ``name``, whose graph is one empty layer."""
    return da.Array(HighLevelGraph({name: _Stub()}, {name: set()}), name, a.chunks, meta=a._meta)


def is_stub(layer):
    return type(layer) is _Stub


# ------------------------------------------------------------------ lowering
def lower(order, slot_name=None):
    """The layers of the Lazy nodes ``order`` (each after the nodes of ``order`` it reads), with the
    name of each node's array: ``(layers, deps, names, slots)``.  A node's forward runs on stand-ins
    named as its operands' arrays, so it makes only its own layers; ``slots`` are the dask arrays
    read (kept or built values of nodes not in ``order``, arrays), by name, whose graphs the caller
    joins.  ``slot_name(array)``: the name a slot is read under (a template names them itself)."""
    layers, deps, names, slots = {}, {}, {}, {}
    for node in order:
        if node.fn is _component:  # the group's i-th array
            names[id(node)] = names[id(node.srcs[0])][node.params[0][1]]
            continue
        args = []
        for s in map(through, node.srcs):
            if type(s) is Lazy and id(s) in names:
                args.append(stand_in(s, names[id(s)]))
            elif isinstance(s, (Lazy, da.Array)):
                a = value_of(s) if type(s) is Lazy else s  # (a kept or built value: read as a slot)
                name = a.name if slot_name is None else slot_name(a)
                slots.setdefault(name, a)
                args.append(stand_in(a, name))
            else:
                args.append(s)
        with dask.annotate(**node.annotations) if node.annotations else _nothing:
            if node.elementwise:
                out = elementwise_layer(node.fn, args, node.dtype, node._meta, node.chunks)
            else:
                out = node.fn(*args, **dict(node.params))
        for o in (out if node.many else (out,)):
            for name, layer in o.dask.layers.items():
                if not is_stub(layer) and name not in layers:
                    layers[name], deps[name] = layer, set(o.dask.dependencies.get(name, ()))
                    if type(layer) is MaterializedLayer:  # dask's pad and setitem inline their operands'
                        deps[name] |= _layers_read(layer)  # graphs into one layer: of a stand-in, only the keys
        names[id(node)] = tuple(o.name for o in out) if node.many else out.name
    return layers, deps, names, slots


def _layers_read(layer):
    """Names of the layers whose keys the tasks of ``layer`` read."""
    return {k[0] if isinstance(k, tuple) else k for v in layer.mapping.values() if isinstance(v, GraphNode)
            for k in v.dependencies}


_nothing = contextlib.nullcontext()


def _postorder(outputs):
    """The Lazy nodes ``outputs`` read that are neither kept nor built, each after all it reads
    (iteratively: a recorded chain is as deep as the loop that made it)."""
    order, done = [], set()
    stack = [o for o in map(through, outputs) if type(o) is Lazy and o.kept is None and o._built is None]
    while stack:
        node = stack[-1]
        if id(node) in done:
            stack.pop()
            continue
        waiting = [s for s in map(through, node.srcs) if type(s) is Lazy and s.kept is None and s._built is None
                   and id(s) not in done]
        if waiting:
            stack.extend(reversed(waiting))
        else:
            stack.pop()
            done.add(id(node))
            order.append(node)
    return order


_building = threading.RLock()
_alias_hook = []  # told when a value read through an alias is built on its own (daskgrad.compile's traces)


def on_alias_built(hook):
    """``hook()`` is called whenever a value read through an alias is built as a dask array on its own
    (``tensor.array`` inside a recording): the array holds the values the aliases point at now, which a
    program recorded for other values would silently keep."""
    _alias_hook[:] = [hook]


def build(nodes):
    """Build ``nodes`` (Lazy values) as dask arrays with the real names, each node's array kept
    (``_built``): one join of every layer and of the slots' graphs."""
    with _building:  # (another thread may be building the same chain)
        todo = [n for n in nodes if n.kept is None and n._built is None]
        if not todo:
            return
        order = _postorder(todo)
        if _alias_hook and any(type(s) is Lazy and s.fn is _alias for n in order for s in n.srcs):
            _alias_hook[0]()
        layers, deps, names, slots = lower(order)
        for a in slots.values():
            for name, layer, layer_deps in _layers_of(a):
                if name not in layers or is_stub(layers[name]):
                    layers[name], deps[name] = layer, layer_deps
        hlg = HighLevelGraph(layers, {n: d & layers.keys() for n, d in deps.items()})
        for n in todo:
            n._built = fold(da.Array(hlg, names[id(n)], n.chunks, meta=n._meta))


def _layers_of(a):
    from .fold import flat_layers

    yield from flat_layers(a.dask)
