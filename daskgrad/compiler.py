"""``daskgrad.compile``: a function traced once per kind of call, then replayed without running it.

The step cache (:mod:`daskgrad._dask.stepcache`) already skips optimizing a graph it has seen,
but every call still runs the user's Python, records the ops, builds their dask layers and the
reverse pass's, and describes the whole graph to find it: on small chunks that is most of a step
(an L-BFGS evaluation on dask-glm's 1000 x 100 problem: ~3 of 5.5 ms).  ``compile(fn)`` says the
function may be *replayed*: the first call with arguments of a given kind (**guards**: each tensor
argument's shape, chunks, dtype, chunk type and ``requires_grad``, every other argument's value,
the grad/inference/anomaly modes, the client, and the tensors and numbers ``fn`` names from its
globals and closure) runs ``fn`` as usual and keeps its one submission's optimized graph; a later
call of that kind puts its arguments' chunks into the graph's input slots and runs it, as
``jax.jit`` and ``torch.compile`` do.

What the trace watches, so that a replay is never silently wrong:

* **values read from outside** (a tensor ``fn`` reads that is not an argument: data, a model's
  parameters): replayed only while each still holds the same value (an in-place update, an
  optimizer step, makes the next call trace again; after ``daskgrad.compile.cache-size``
  traces, 8 as torch's recompile limit, ``fn`` runs as usual, with a warning saying which value);
* **what a replay would not do again**: computing a value inside (``.item()``, printing,
  ``backward()``), writing ``.grad`` or a tensor in place, calling a hook, drawing random numbers,
  differentiating through ops recorded before the call, returning a tensor that requires grad (a
  replay gives values, not graphs: differentiate inside, e.g. with
  :func:`daskgrad.func.grad_and_value`).  Such a function runs as usual at every call, with one
  warning (``fullgraph=True``: the error is raised where it happens, as torch's);
* inside a trace ``daskgrad.autograd.grad`` joins the function's one submission (lazy).

Python values ``fn`` reads through objects (``self.scale``) are part of its trace, as under
``jax.jit``: pass what changes as an argument.
"""
from __future__ import annotations

import dataclasses
import functools
import types
import warnings
import weakref

import dask
from dask.base import tokenize

from . import _dask as door, _state, _tensor, graph, runtime
from ._dask.freeze import Unfrozen, freeze
from ._modes import is_anomaly_enabled, is_grad_enabled, is_inference_mode_enabled, set_trace
from ._tensor import Tensor

_CACHE_SIZE = 8  # traces of one function before it runs as usual (torch._dynamo's recompile_limit)


class _Break(Exception):
    """``fullgraph=True``: the traced function did what a replay cannot repeat."""


class _Trace:
    """What a traced call made, read from outside and did that a replay would not repeat."""

    __slots__ = ("first_node", "fresh", "reads", "breaks", "fullgraph")

    def __init__(self, fullgraph):
        self.first_node = next(graph._made)  # nodes made from here on are the function's
        self.fresh, self.reads, self.breaks, self.fullgraph = set(), {}, [], fullgraph

    def made(self, storage):
        self.fresh.add(id(storage))

    def read(self, storage):
        i = id(storage)
        if i not in self.fresh and i not in self.reads:
            self.reads[i] = (storage, storage.version)

    def broke(self, reason):
        if reason not in self.breaks:
            self.breaks.append(reason)
        if self.fullgraph:
            raise RuntimeError(f"daskgrad.compile(fullgraph=True): the function cannot be replayed: {reason}")


@dataclasses.dataclass
class _Entry:
    """One kind of call: its kept graph and where each of the graph's inputs comes from, or why it
    runs as usual (``reason``)."""

    reason: str | None = None
    template: object = None
    inputs: tuple = ()       # the template's input layer names at the trace
    sources: tuple = ()      # per input: the index of the tensor argument, or the layer (values read from outside)
    outputs: tuple = ()      # per result: (name, chunks, meta) at the trace
    structure: object = None  # how to put the results back into what fn returns
    reads: tuple = ()        # (weak reference to a storage read from outside, the value it held)
    pins: tuple = ()         # the objects guarded by identity, kept alive so that no other takes their id


class Compiled:
    """What :func:`compile` returns: call it as ``fn``.  ``cache_info()`` counts replays and traces."""

    def __init__(self, fn, *, fullgraph=False, guarded=()):
        functools.update_wrapper(self, fn, updated=())
        self._fn, self._fullgraph = fn, fullgraph
        self._guarded = tuple(guarded) or (fn,)
        self._names = [_free_names(f) for f in self._guarded]
        self._entries = {}
        self._traces = 0
        self._warned = set()
        self._stats = {"replays": 0, "traces": 0, "eager": 0}

    def cache_info(self) -> dict:
        """``replays``, ``traces`` and ``eager`` calls so far, and ``entries``: kinds of call kept."""
        return dict(self._stats, entries=len(self._entries))

    def __get__(self, obj, objtype=None):  # a compiled method binds as a function does
        return self if obj is None else types.MethodType(self, obj)

    def __call__(self, *args, **kwargs):
        tensors, pins = [], []
        try:
            key = self._key(args, kwargs, tensors, pins)
        except Unfrozen:
            return self._eager(args, kwargs, "an argument has no exact description (pass tensors, numbers, ...)")
        entry = self._entries.get(key)
        if entry is not None and entry.reason is not None:
            self._stats["eager"] += 1
            return self._fn(*args, **kwargs)
        if entry is not None:
            stale = _stale(entry)
            if stale is None:
                return self._replay(entry, tensors)
            reason = f"a tensor it reads without taking it as an argument changed ({stale}): pass it as an argument"
        else:
            reason = "too many kinds of call (shapes, chunks, dtypes or other arguments)"
        if self._traces >= dask.config.get("daskgrad.compile.cache-size", _CACHE_SIZE):
            return self._eager(args, kwargs, f"it was traced {self._traces} times, the limit "
                               f"(daskgrad.compile.cache-size): {reason}")
        return self._trace(key, args, kwargs, tensors, pins)

    # ------------------------------------------------------------------ guards
    def _key(self, args, kwargs, tensors, pins):
        seen = {}
        described = (_describe(args, tensors, pins, seen), _describe(kwargs, tensors, pins, seen))
        names = tuple(_describe(_names_now(f, names), [], pins, {}) for f, names in zip(self._guarded, self._names))
        client = door.current_client()
        if client is not None:
            pins.append(client)
        return (described, names, is_grad_enabled(), is_inference_mode_enabled(), is_anomaly_enabled(),
                None if client is None else id(client), dask.config.get("daskgrad.fuse-chunks", True))

    # ------------------------------------------------------------------ the first call of a kind
    def _trace(self, key, args, kwargs, tensors, pins):
        self._traces += 1
        self._stats["traces"] += 1
        _computed(tensors, pending=True)  # the graph's slots hold values, and what it reads is not pending
        rng = (_tensor._rng, _tensor._rng.bit_generator.state)
        trace = _Trace(self._fullgraph)
        before = set_trace(trace)
        try:
            out = self._fn(*args, **kwargs)
        finally:
            set_trace(before)
        if _tensor._rng is not rng[0] or _tensor._rng.bit_generator.state != rng[1]:
            trace.broke("it draws random numbers (each call must draw new ones)")
        for storage, version in trace.reads.values():
            if storage.version != version:
                trace.broke("it writes a tensor in place")
        results, structure = [], _flatten(out, trace)
        if not any(True for _ in _leaves(out)):
            trace.broke("it returns no tensor")
        for t in _leaves(out):
            if t.requires_grad:
                trace.broke("its result requires grad (a replay gives values, not graphs): return .detach(), or "
                            "differentiate inside, e.g. with daskgrad.func.grad_and_value")
            elif door.materialized(t.array):
                trace.broke("it returns a tensor held in memory already (an argument, a value read from outside)")
            results.append(t)
        arg_names = {}
        for i, t in enumerate(tensors):
            arg_names.setdefault(t.array.name, i)
        reads = [st for st, _ in trace.reads.values() if not any(st is t._storage for t in tensors)]
        if any(st.array.name in arg_names for st in reads):
            trace.broke("it reads a value that is also an argument's, from outside")
        if trace.breaks:
            self._entries[key] = _Entry(reason="; ".join(trace.breaks))
            self._warn(self._entries[key].reason)
            return out
        layers = {name: layer for t in results for name, layer, _ in door.flat_layers(t.array.dask)}
        with door.capture_templates() as kept:
            done = runtime.persist([t.array for t in results], keep=slice(0, len(results)))
        values = _wrap(done)
        if len(kept) != 1:
            self._entries[key] = _Entry(reason="its graph cannot be kept (a step cache limit, or a task it cannot "
                                               "describe)")
            self._warn(self._entries[key].reason)
        else:
            template, inputs = kept[0]
            sources = tuple(arg_names[n] if n in arg_names else _values_of(n, layers, reads) for n in inputs)
            if any(s is None for s in sources):
                self._entries[key] = _Entry(reason="a value it reads could not be found to keep")
                self._warn(self._entries[key].reason)
            else:
                self._entries[key] = _Entry(
                    template=template, inputs=inputs, sources=sources,
                    outputs=tuple((a.name, a.chunks, a._meta) for a in done), structure=structure,
                    reads=tuple((weakref.ref(st), st.value) for st in reads), pins=tuple(pins))
        return _unflatten(structure, iter(values))

    def _eager(self, args, kwargs, reason):
        self._stats["eager"] += 1
        self._warn(reason)
        return self._fn(*args, **kwargs)

    def _warn(self, reason):
        if reason not in self._warned:
            self._warned.add(reason)
            name = getattr(self._fn, "__qualname__", repr(self._fn))
            warnings.warn(f"daskgrad.compile: {name} runs without replay: {reason}", UserWarning, stacklevel=4)

    # ------------------------------------------------------------------ a later call of the same kind
    def _replay(self, entry, tensors):
        _computed(tensors)
        layers, names = [], []
        for name, source in zip(entry.inputs, entry.sources):
            if type(source) is int:
                a = tensors[source].array
                layers.append(a.dask.layers[a.name])
                names.append(a.name)
            else:
                layers.append(source)
                names.append(name)
        local = door.current_client() is None
        token = tokenize(entry.template.name, names)
        outputs = [(f"{n}-{token}", c, m) for n, c, m in entry.outputs]
        arrays = door.replay_template(entry.template, outputs, layers, names, local=local)
        if arrays is None:  # (cannot happen with fresh names; the template is kept anyway)
            raise RuntimeError("daskgrad.compile: a kept graph could not be replayed")
        self._stats["replays"] += 1
        done = runtime.persist(arrays, keep=slice(0, len(arrays)), optimized=True)
        return _unflatten(entry.structure, iter(_wrap(done)))


def compile(model=None, *, fullgraph=False, dynamic=None, backend="daskgrad", mode=None, options=None,
            disable=False):
    """Trace ``model`` (a function) once per kind of call and replay its graph after (see the module
    docstring): ``torch.compile``'s signature, usable as ``@daskgrad.compile`` or
    ``daskgrad.compile(fn, fullgraph=True)``.

    ``fullgraph=True`` raises where the function does what a replay cannot repeat (else it runs as
    usual, with a warning); ``disable=True`` returns ``model`` itself.  ``dynamic``, ``backend``,
    ``mode`` and ``options`` are accepted for torch's signature and change nothing here: every shape
    is traced on its own, and the graph runs on dask.

    >>> import daskgrad as dg
    >>> step = dg.compile(dg.func.grad_and_value(lambda w, x: ((x @ w) ** 2).sum()))
    >>> x = dg.ones((4, 2), chunks=2)
    >>> g, loss = step(dg.ones(2), x)
    >>> g, loss = step(dg.ones(2) * 2, x)   # replayed: the function does not run again
    >>> float(loss), step.cache_info()["replays"]
    (64.0, 1)
    """
    if model is None:
        return functools.partial(compile, fullgraph=fullgraph, dynamic=dynamic, backend=backend, mode=mode,
                                 options=options, disable=disable)
    if not callable(model):
        raise RuntimeError("compile: expected a callable")
    if disable:
        return model
    if isinstance(model, Compiled):
        return model
    return Compiled(model, fullgraph=fullgraph, guarded=_functions_of(model))


# ------------------------------------------------------------------ helpers
def _functions_of(fn):
    """The Python functions whose globals and closure a call of ``fn`` reads directly: ``fn``, and
    the function a :func:`daskgrad.func` transform wraps (their names are guarded)."""
    out = []
    while fn is not None and len(out) < 8:
        if isinstance(fn, (types.FunctionType, types.MethodType)):
            out.append(fn)
        fn = getattr(fn, "__wrapped__", None)
    return out


def _free_names(fn):
    """The global names ``fn``'s code (its nested functions' too) reads, and its closure's names."""
    fn = getattr(fn, "__func__", fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return ((), ())
    names, todo = set(), [code]
    while todo:
        c = todo.pop()
        names.update(c.co_names)
        todo.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    return tuple(sorted(names)), code.co_freevars


def _names_now(fn, names):
    """The values ``fn``'s global and closure names hold now, as a guard."""
    fn = getattr(fn, "__func__", fn)
    gnames, free = names
    glob = getattr(fn, "__globals__", {})
    cells = getattr(fn, "__closure__", None) or ()
    out = [(n, _by_identity(glob[n])) for n in gnames if n in glob]
    for n, c in zip(free, cells):
        try:
            out.append((n, _by_identity(c.cell_contents)))
        except ValueError:  # a cell not filled yet
            out.append((n, None))
    return tuple(out)


class _Same:
    """An object guarded by identity (a module, a function, a tensor: another object is another trace)."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __eq__(self, other):
        return type(other) is _Same and other.obj is self.obj

    def __hash__(self):
        return id(self.obj)


def _by_identity(obj):
    if isinstance(obj, (bool, int, float, complex, str, bytes, type(None))):
        return obj
    return _Same(obj)


def _describe(obj, tensors, pins, seen):
    """A hashable description of an argument: tensors by their kind (and which argument shares its
    value), numbers by type and value (as the step cache's key), other objects by identity."""
    t = type(obj)
    if isinstance(obj, Tensor):
        tensors.append(obj)
        v = obj._storage.value
        return ("tensor", v.chunks, v.dtype, type(v._meta), obj._requires_grad, obj.grad_fn is None,
                seen.setdefault(id(obj._storage), len(tensors) - 1))
    if t is tuple or t is list:
        return (t, *(_describe(o, tensors, pins, seen) for o in obj))
    if t is dict:
        return (dict, *((k, _describe(v, tensors, pins, seen)) for k, v in obj.items()))
    if t is _Same:  # (a tensor's values are guarded where they are read)
        pins.append(obj.obj)
        return ("id", id(obj.obj))
    try:
        return freeze(obj)
    except Unfrozen:
        pins.append(obj)
        return ("id", id(obj))


def _stale(entry):
    """What a value read from outside holds now instead of what it held at the trace, or None."""
    for ref, value in entry.reads:
        st = ref()
        if st is not None and st.value is not value:
            return f"a value of shape {tuple(value.shape)}"
    return None


def _computed(tensors, pending=False):
    """Compute, in one submission, the tensor arguments whose values are not in memory yet (and, with
    ``pending``, what in-place writes left lazy, as any submission would), into their storages."""
    lazy = list({id(t._storage): t for t in tensors if not door.materialized(t.array)}.values())
    if not lazy and not pending:
        return
    olds = [t.array for t in lazy]
    for t, old, new in zip(lazy, olds, runtime.persist(olds, keep=slice(0, len(olds)))):
        if t._storage.array is old:  # (an argument that was pending is swapped in by the persist)
            t._storage.array = new
            _state.hold(t._storage, door.flat_keys(new))


def _leaves(out):
    if isinstance(out, Tensor):
        yield out
    elif type(out) in (tuple, list):
        for o in out:
            yield from _leaves(o)
    elif type(out) is dict:
        for o in out.values():
            yield from _leaves(o)


def _flatten(out, trace):
    """How ``out``'s tensors go back into it: a tensor is ``None``-marked, a constant is itself."""
    if isinstance(out, Tensor):
        return _TENSOR
    t = type(out)
    if t in (tuple, list):
        return (t, [_flatten(o, trace) for o in out])
    if t is dict:
        return (dict, {k: _flatten(v, trace) for k, v in out.items()})
    try:
        freeze(out)
    except Unfrozen:
        trace.broke(f"it returns a {t.__name__}, not tensors, numbers or containers of them")
    return (None, out)


_TENSOR = object()


def _unflatten(structure, values):
    if structure is _TENSOR:
        return next(values)
    kind, inner = structure
    if kind is None:
        return inner
    if kind is dict:
        return {k: _unflatten(v, values) for k, v in inner.items()}
    return kind(_unflatten(s, values) for s in inner)


def _wrap(arrays):
    """Computed arrays as tensors holding them (kept on two workers of a cluster while held)."""
    out = []
    for a in arrays:
        t = Tensor._make(a)
        _state.hold(t._storage, door.flat_keys(a))
        out.append(t)
    return out


def _values_of(name, layers, reads):
    """The layer of values ``name`` of the traced graph: read from outside (a storage's), or made by
    the function (a constant it builds each call, the same every time)."""
    layer = layers.get(name)
    if layer is not None and door.holds_data(layer):
        return layer
    for st in reads:
        a = st.array
        if a.name == name:
            return a.dask.layers[a.name]
    return None
