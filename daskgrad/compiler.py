"""``daskgrad.compile``: a function traced once per kind of call, then replayed without running it.

Every submission already reuses the template of a program it has seen (:mod:`daskgrad._dask.program`),
but every call still runs the user's Python and records its ops and reverse pass: on small chunks
that is most of a step.  ``compile(fn)`` says the function may be *replayed*: the first call of a
kind runs ``fn`` as usual, recording its program, in which every tensor it reads (its arguments,
and tensors it reaches through a guarded name or module) is an *alias*; a later call of that kind
points each alias at the tensor's value now (the call's arguments, a parameter an optimizer has
updated since) and submits the same program, without running ``fn``, as ``jax.jit`` and
``torch.compile`` do.  The caller's tensors are never written while tracing.

**A kind of call** (the guards): each tensor argument's shape, chunks, dtype, chunk type,
``requires_grad``, leafness, inference flag, which arguments share a value, and a view's strides
(``is_contiguous()``, ``stride()``, ``view(-1)``) and, where the trace read one (``storage_offset()``,
``view(dtype)``), the arguments' storage offsets (a minibatch view ``X[i:i + b]`` otherwise replays
for every ``i``); other arguments by
value (containers and NumPy arrays by content, other objects by identity and their attributes'
values, as torch.compile guards ``self.scale``; a module by its parameters, buffers, ``training``
and plain attributes, submodules' too); the modes, the client and the dask settings a graph
depends on; and what ``fn`` (a compiled module: its ``forward``) names from its globals and
closure, in the same way, following what of the user's it reaches (:func:`_names_guard`: functions,
their defaults, classes' attributes and methods, user modules' values of the names read), not
libraries'.  An attribute that changes between calls traces again, even one the function does not
read: a retrace, never a stale replay; a function reading names it computes (``globals()[name]``)
runs as usual.

**What the trace watches**, so that a replay is never silently wrong:

* a tensor read from outside must be one named directly (a guarded name, a guarded module's
  parameter or buffer): it is read anew at each replay; one reached through a container or an
  object, or a ``.grad``, makes the function run as usual (the name could later hold another);
  one read by value, outside the recorded ops, is replayed only while it holds that value;
* what a replay would not do again makes the function run as usual, with one warning
  (``fullgraph=True``: an error where it happens): computing a value inside (``.item()``, printing,
  ``backward()``), changing a tensor it did not make (in place, ``.grad``, ``requires_grad``, a
  hook), calling a hook, drawing random numbers (daskgrad's, NumPy's and Python's global generators,
  and a NumPy ``Generator``/``RandomState``/bit generator, a ``random.Random``, an iterator or a
  generator that the guards reach: an argument, a name it reads, their attributes -- their state is
  compared after the trace, a file's by its position; one made inside without a seed, one held
  where the guards do not look (a library's module), an iterator whose state cannot be read, is
  not seen), differentiating through ops recorded before the call, returning a tensor that
  requires grad (a replay gives values, not graphs: differentiate inside, e.g. with
  :func:`daskgrad.func.grad_and_value`), returning a view of a tensor read from outside or of an
  argument that is a view itself (a replay would return a copy that the caller's writes do not
  write through);
* results that share memory (``y, y[1:], y.T``; ``y, y``; a view of a tensor made inside; ``x[1:]``
  of an argument ``x``) are views of each other (of ``x``) on every call, with torch's strides, as
  eagerly;
* inside a trace ``daskgrad.autograd.grad`` joins the function's one submission (lazy); anomaly
  mode runs the function as usual.

A kind seen ``daskgrad.compile.cache-size`` times (8, torch's recompile limit) with other values
read by value from outside, or more kinds than that, run as usual, with a warning saying why.
"""
from __future__ import annotations

import collections
import contextlib
import copy
import dataclasses
import functools
import itertools
import operator
import os
import random
import site
import sys
import sysconfig
import threading
import types
import warnings
import weakref

import dask
import numpy as np

from . import _dask as door, _state, _tensor, graph, runtime
from ._modes import (current_trace, is_anomaly_enabled, is_grad_enabled, is_inference_mode_enabled, set_trace)
from ._tensor import Tensor, _ViewInfo, _ViewStorage

_CACHE_SIZE = 8  # torch._dynamo's recompile limit
_MODES = ("default", "lite", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune")  # torch's
_LIBRARIES = ("daskgrad", "dask", "distributed", "numpy", "scipy", "torch", "builtins", "functools", "toolz")
_names = itertools.count()


class _Trace:
    """What a traced call made, read and did that a replay would not repeat."""

    __slots__ = ("first_node", "fresh", "tensors", "reads", "inputs", "versions", "args", "allowed", "breaks",
                 "fullgraph", "offsets")

    def __init__(self, fullgraph, args, allowed):
        self.first_node = next(graph._made)  # nodes made from here on are the function's
        self.fresh, self.tensors, self.reads, self.breaks, self.fullgraph = set(), set(), {}, [], fullgraph
        self.args, self.allowed = args, allowed  # id(storage) -> argument index; -> a tensor named from outside
        self.inputs = {}  # id(storage) -> (alias, source: an argument's index or a weak reference to the storage)
        self.versions = {}  # id(storage) -> (the storage, its version when its alias was made)
        self.offsets = False  # whether it read the layout of a view of a tensor from outside (its offset)

    def made(self, storage):
        self.fresh.add(id(storage))

    def made_tensor(self, t):
        self.tensors.add(id(t))

    def value(self, storage):
        """What an op records for a tensor's value: its own for a tensor the function made, else an
        alias a replay points at the value then (:func:`daskgrad._dask.alias`)."""
        i = id(storage)
        if i in self.fresh:
            return storage.value
        hit = self.inputs.get(i)
        if hit is not None and storage.version != self.versions[i][1]:
            # written in place since its alias was made (the function runs as usual): its value now, which
            # reads the alias of the old one; the alias would give the value before the write
            self.wrote(storage)
            return storage.value
        if hit is None:
            if i in self.args:
                source = self.args[i]
            elif self.allowed is None or i in self.allowed:
                source = weakref.ref(storage)
            else:  # reached through an object or a container: the run ends as usual (_check)
                self.read(storage)
                return storage.value
            hit = self.inputs[i] = (door.alias(storage.value), source)
            self.versions[i] = (storage, storage.version)
        return hit[0]

    def laid_out(self, storage):
        """A view's strides and storage offset read (:func:`daskgrad._tensor.layout`): a view of a tensor
        from outside (an argument's) has its argument's offset in it, which the kind of call guards then."""
        if id(storage.root) not in self.fresh:
            self.offsets = True

    def read(self, storage):
        """A tensor's values read as a dask array, outside the recorded ops: guarded by value."""
        i = id(storage)
        if i not in self.fresh and i not in self.reads:
            if i in self.args or self.allowed is None:
                self.broke("an op reads a tensor's values outside the ops daskgrad records")
            self.reads[i] = (storage, storage.version)

    def wrote(self, storage):
        if id(storage) not in self.fresh:
            self.broke("it writes a tensor in place")
            self.fresh.add(id(storage))  # (its value is the function's now: later ops read it, not its alias)

    def touched(self, t, what):
        if id(t) not in self.tensors:
            self.broke(f"it {what} a tensor it did not make")

    def broke(self, reason):
        if reason not in self.breaks:
            self.breaks.append(reason)
        if self.fullgraph:
            raise RuntimeError(f"daskgrad.compile(fullgraph=True): the function cannot be replayed: {reason}")


@dataclasses.dataclass
class _Entry:
    """One kind of call: the program its trace recorded and where each alias points at a replay,
    or why it runs as usual (``reason``)."""

    reason: str | None = None
    outputs: tuple = ()       # the results' values as recorded (Lazy values reading the aliases)
    inputs: tuple = ()        # (alias, source): an argument's index, or a storage read from outside (weakly)
    structure: object = None  # how the results go back into what fn returns
    reads: tuple = ()         # (storage, its value at the trace), both weakly: read by value, guarded
    retraces: int = 0         # traces of this kind because a value read by value changed
    pins: tuple = ()          # objects guarded by identity that cannot be referenced weakly: held
    aliases: tuple = None     # how results that are views of each other are made again (:func:`_aliases`)


class Compiled:
    """What :func:`compile` returns: call it as the function.  ``cache_info()`` counts replays,
    traces and calls run as usual; other attributes are the wrapped object's (a module's
    ``parameters()``)."""

    def __init__(self, fn, *, fullgraph=False, guarded=()):
        functools.update_wrapper(self, fn, updated=())
        self._fn, self._fullgraph = fn, fullgraph
        self._guarded = tuple(guarded) or (fn,)
        self._entries = {}
        self._by_offset = set()  # kinds of call whose trace read a view argument's storage offset
        self._lock = threading.RLock()
        self._warned = set()
        self._stats = {"replays": 0, "traces": 0, "eager": 0}

    def cache_info(self) -> dict:
        """``replays``, ``traces`` and ``eager`` calls so far, and ``entries``: kinds of call cached."""
        return dict(self._stats, entries=len(self._entries))

    def __getattr__(self, name):
        if name.startswith("__") or name in ("_fn",):
            raise AttributeError(name)
        return getattr(self._fn, name)

    def __get__(self, obj, objtype=None):  # a compiled method binds as a function does
        return self if obj is None else types.MethodType(self, obj)

    def __call__(self, *args, **kwargs):
        if current_trace() is not None:  # inside another compiled function's trace: part of it
            return self._fn(*args, **kwargs)
        if is_anomaly_enabled():
            return self._eager(args, kwargs, "anomaly mode checks every rule's output as it runs")
        tensors, pins, allowed = [], [], {}
        try:
            key = self._key(args, kwargs, tensors, pins, allowed)
        except _Unguardable as e:
            return self._eager(args, kwargs, str(e))
        with self._lock:
            if self._by_offset and key in self._by_offset:  # (the offsets too: this kind's trace read one)
                key = (_OFFSETS, key, _offsets(tensors))
            entry = self._entries.get(key)
            if entry is not None and entry.reason is None and _stale(entry):
                retraces = entry.retraces + 1
                self._drop(key)
                if retraces >= dask.config.get("daskgrad.compile.cache-size", _CACHE_SIZE):
                    self._entries[key] = _Entry(reason=f"a tensor it reads without taking it as an argument "
                                                       f"changed {retraces} times: pass it as an argument")
                    self._pin(key, pins)
                    entry = self._entries[key]
                else:
                    entry = None
            else:
                retraces = 0
            if entry is None:
                if len(self._entries) >= dask.config.get("daskgrad.compile.cache-size", _CACHE_SIZE):
                    return self._eager(args, kwargs, f"it was traced for {len(self._entries)} kinds of call, the "
                                       "limit (daskgrad.compile.cache-size): shapes, chunks, dtypes or other "
                                       "arguments keep changing")
                return self._trace(key, args, kwargs, tensors, pins, allowed, retraces)
        if entry.reason is not None:
            self._stats["eager"] += 1
            self._warn(entry.reason)
            return self._fn(*args, **kwargs)
        return self._replay(entry, tensors)

    # ------------------------------------------------------------------ guards
    def _key(self, args, kwargs, tensors, pins, allowed):
        seen, follow = {}, _Walk()
        described = (_describe(args, tensors, pins, allowed, seen, follow),
                     _describe(kwargs, tensors, pins, allowed, seen, follow))
        names = _names_guard(self._guarded, pins, allowed, follow)
        client = door.current_client()
        if client is not None:
            pins.append(client)
        config = tuple(dask.config.get(k, None) for k in ("daskgrad.fuse-chunks", "daskgrad.vjp-resources",
                                                         "daskgrad.row-block-bytes", "array.backend"))
        return (described, names, is_grad_enabled(), is_inference_mode_enabled(),
                None if client is None else id(client),
                door.frozen(config, objects=False) if _frozen(config) else repr(config))

    def _pin(self, key, pins):
        """Objects guarded by identity: their entry goes when one of them goes (its id may be reused)."""
        me = weakref.ref(self)
        for obj in pins:
            try:
                weakref.finalize(obj, _forget, me, key)
            except TypeError:  # (not weakly referenceable: held while the entry lives)
                self._entries[key].pins += (obj,)

    def _drop(self, key):
        self._entries.pop(key, None)

    # ------------------------------------------------------------------ the first call of a kind
    def _trace(self, key, args, kwargs, tensors, pins, allowed, retraces):
        self._stats["traces"] += 1
        first = {}
        for i, t in enumerate(tensors):
            first.setdefault(id(t._storage), i)
        trace = _Trace(self._fullgraph, first, allowed)
        stateful = _stateful(pins)
        with _python_draws():
            rng = _random_states()
            before = set_trace(trace)
            try:
                out = self._fn(*args, **kwargs)
            finally:
                set_trace(before)
            if any(_state_of(obj) != state for obj, state in stateful):
                trace.broke("it draws from a random generator or advances an iterator it reaches (each call must "
                            "draw anew)")
            structure, results = self._check(trace, out, rng, (args, kwargs))
        if trace.offsets and not (key and key[0] is _OFFSETS):  # its arguments' offsets are guarded too
            self._by_offset.add(key)
            key = (_OFFSETS, key, _offsets(tensors))
        if trace.breaks:
            return self._cache(key, _Entry(reason="; ".join(trace.breaks)), pins, out)
        # what the function wrote in place on its own tensors is part of its results, not an update
        # for the next submission to store (that would set the recorded values' ``computed``)
        _state.forget_pending(trace.fresh)
        aliases = _aliases(results, trace.args)
        outputs = tuple(t._storage.value for t in results) if aliases is None else aliases[1]
        done = runtime.persist(outputs, keep=slice(0, len(outputs)))
        inputs = tuple(trace.inputs.values())
        for alias, _ in inputs:  # (an alias holds no value between calls)
            door.rebind(alias, None)
        reads = [st for st, _ in trace.reads.values()]
        entry = _Entry(outputs=outputs, inputs=inputs, structure=structure, retraces=retraces,
                       reads=tuple((weakref.ref(st), weakref.ref(st.value)) for st in reads),
                       aliases=None if aliases is None else aliases[0])
        return self._cache(key, entry, pins, _unflatten(structure, iter(_rebuild(entry.aliases, _wrap(done), tensors))))

    def _check(self, trace, out, rng, call=((), {})):
        """The trace's last checks; returns how the results go back into ``out``, and the results."""
        if _random_states(rng) != rng:
            trace.broke("it draws random numbers (each call must draw new ones)")
        if any(storage.version != version for storage, version in trace.versions.values()):
            trace.broke("it writes a tensor in place")  # (one read from outside, through any path)
        for i, (storage, version) in trace.reads.items():
            if storage.version != version:
                trace.broke("it writes a tensor in place")
            elif i not in trace.allowed and i not in trace.args:
                trace.broke("it reads a tensor through an object, a container or .grad (pass it as an argument, "
                            "or name it)")
        structure = _flatten(out, trace)
        results = list(_leaves(out))
        if not results:
            trace.broke("it returns no tensor")
        for t in results:
            if t.requires_grad:
                given = _requiring_grad(self._fn, *call)
                if given:  # the usual cause: the result keeps a graph back to an argument that requires grad
                    trace.broke(f"its result requires grad because {given} requires grad (a replay gives values, "
                                "not graphs): pass it detached (.detach(), or made without requires_grad=True)")
                else:
                    trace.broke("its result requires grad (a replay gives values, not graphs): return .detach(), "
                                "or differentiate inside, e.g. with daskgrad.func.grad_and_value")
            elif id(t._storage) not in trace.fresh or door.in_memory(t._storage.value) is not None:
                trace.broke("it returns a tensor held in memory already (an argument, a value read from outside)")
            elif type(t._storage) is _ViewStorage and (
                    id(t._storage.root) not in trace.fresh and id(t._storage.root) not in trace.args
                    or id(t._storage.root) in trace.fresh and door.in_memory(t._storage.root.value) is not None):
                trace.broke("it returns a view of a tensor read from outside or of an argument that is a view "
                            "itself (a replay would return a copy, which the caller's writes would not write "
                            "through)")
        return structure, results

    def _cache(self, key, entry, pins, returned):
        self._entries[key] = entry
        self._pin(key, pins)
        if entry.reason is not None:
            self._warn(entry.reason)
        return returned

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
        with self._lock:  # (the aliases are the entry's own: one call at a time points them)
            for alias, source in entry.inputs:
                st = tensors[source]._storage if type(source) is int else source()
                door.rebind(alias, st.value)
            try:
                done = runtime.persist(entry.outputs, keep=slice(0, len(entry.outputs)))
            finally:
                for alias, _ in entry.inputs:
                    door.rebind(alias, None)
        self._stats["replays"] += 1
        return _unflatten(entry.structure, iter(_rebuild(entry.aliases, _wrap(done), tensors)))


_OFFSETS = object()  # (a kind of call guarded by its view arguments' storage offsets too)


def _offsets(tensors):
    """The tensor arguments' storage offsets (torch's ``storage_offset()``; 0 but for a view)."""
    return tuple(t._storage.offset if type(t._storage) is _ViewStorage else 0 for t in tensors)


def _alias_built():
    trace = current_trace()
    if trace is not None:
        trace.broke("an op reads a tensor's values outside the ops daskgrad records")


door.on_alias_built(_alias_built)


@contextlib.contextmanager
def recording():
    """Record the ops run inside into a program whose every read of a tensor made outside goes
    through an alias (``trace.inputs``: storage -> (alias, weak reference to the storage)); yields the
    trace, whose ``breaks`` say what a program recorded once could not repeat.  A time loop's step
    is recorded so (:func:`daskgrad.utils.checkpoint.checkpoint_steps`)."""
    trace = _Trace(False, {}, None)
    with _python_draws():
        rng = _random_states()
        before = set_trace(trace)
        try:
            yield trace
        finally:
            set_trace(before)
            if _random_states(rng) != rng:
                trace.broke("it draws random numbers")
            _state.forget_pending(trace.fresh)


def compile(model=None, *, fullgraph=False, dynamic=None, backend="daskgrad", mode=None, options=None,
            disable=False):
    """Trace ``model`` (a function) once per kind of call and replay its graph after (see the module
    docstring): ``torch.compile``'s signature, usable as ``@daskgrad.compile`` or
    ``daskgrad.compile(fn, fullgraph=True)``.

    ``fullgraph=True`` raises where the function does what a replay cannot repeat (else it runs as
    usual, with a warning); ``disable=True`` returns ``model`` itself.  ``dynamic``, ``backend``,
    ``mode`` and ``options`` are checked as torch checks them and change nothing here: every kind
    of call is traced on its own, and the graph runs on dask.

    >>> import daskgrad as dg
    >>> step = dg.compile(dg.func.grad_and_value(lambda w, x: ((x @ w) ** 2).sum()))
    >>> x = dg.ones((4, 2), chunks=2)
    >>> g, loss = step(dg.ones(2), x)
    >>> g, loss = step(dg.ones(2) * 2, x)   # replayed: the function does not run again
    >>> float(loss), step.cache_info()["replays"]
    (64.0, 1)
    """
    if mode is not None and options is not None:
        raise RuntimeError("Either mode or options can be specified, but both can't be specified at the same time.")
    if mode is not None and mode not in _MODES:
        raise RuntimeError(f"Unrecognized mode={mode}, should be one of: {', '.join(_MODES)}")
    if model is None:
        def decorate(model):
            if model is None:
                raise RuntimeError("Model can't be None")
            return compile(model, fullgraph=fullgraph, dynamic=dynamic, backend=backend, mode=mode,
                           options=options, disable=disable)
        return decorate
    if disable or isinstance(model, Compiled):
        return model
    if not callable(model):
        raise AssertionError(f"A callable function is expected, but {type(model)} is provided.")
    return Compiled(model, fullgraph=fullgraph, guarded=_wrapped(model))


# ------------------------------------------------------------------ guards
def _wrapped(fn):
    """``fn`` and the functions it wraps (``__wrapped__``: a :mod:`daskgrad.func` transform's)."""
    out = []
    while fn is not None and len(out) < 8:
        out.append(fn)
        fn = getattr(fn, "__wrapped__", None)
    return out


class _Unguardable(Exception):
    """What a function reads that no guard describes: it runs as usual (a replay could be stale)."""


_FOLLOW_MAX = 512  # the functions, classes and modules of the user's a guard follows in one call
_VALUES_MAX = 20_000  # the values it describes (a model holding a dataset of objects: run as usual)
_DEPTH = 8  # how far down an object's attributes a guard describes them (then by identity)


def _names_guard(functions, pins, allowed, follow):
    """What the names the functions read from their globals and closures hold now, described as
    arguments are, following what is the user's among them (:func:`_users`): the functions they
    name or hold (in a dict, an attribute, a default: what they read in turn), a class of the
    user's by its plain attributes and methods (``Cfg.scale``, a method reading a global), a module
    of the user's by the values of the names the code followed reads (``cfg.scale``,
    ``helpers.scale()``: an attribute read by name is among its code's names).  ``follow``: what
    describing the arguments found to follow.  Raises :class:`_Unguardable` where a function reads
    names it computes (``globals()[name]``) or where it reaches more than ``_FOLLOW_MAX`` of them."""
    out, seen, todo, modules, names = [], set(), follow, [], set()
    todo.extend(functions)
    while True:
        while todo:
            obj = todo.pop()
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            if len(seen) > _FOLLOW_MAX:
                raise _Unguardable(f"it reaches more than {_FOLLOW_MAX} functions, classes and modules of its "
                                   "own: too many to guard")
            if isinstance(obj, types.ModuleType):
                modules.append(obj)
            elif isinstance(obj, type):
                out.append((id(obj), _namespace(obj, pins, allowed, todo)))
            else:
                _function_guard(obj, pins, allowed, todo, out, names)
        # a module last, by the names read so far (the functions it holds may read more: again)
        if todo.any_name:
            names.add(_ALL)
        described = [(id(m), _namespace(m, pins, allowed, todo, frozenset(names))) for m in modules]
        if all(id(o) in seen for o in todo):
            return tuple(out + described)


def _function_guard(fn, pins, allowed, todo, out, names):
    """Add to ``out`` what a function (or a compiled one, a module's ``forward``, a bound method) reads
    from its globals and closure and its defaults hold; to ``names`` the names its code reads."""
    fn = getattr(fn, "_fn", fn) if isinstance(fn, Compiled) else fn
    if not isinstance(fn, (types.FunctionType, types.MethodType)) and callable(getattr(fn, "forward", None)):
        fn = types.MethodType(type(fn).forward, fn)  # compile(module): its forward, bound
    if isinstance(fn, types.MethodType):
        out.append(("self", _describe(fn.__self__, None, pins, allowed, {}, todo)))
        fn = fn.__func__
    if not isinstance(fn, types.FunctionType):
        return
    code, glob = fn.__code__, fn.__globals__
    if _computes_names(code):
        raise _Unguardable(f"{fn.__qualname__} reads names it computes (globals(), vars(), eval, exec): a replay "
                           "could not tell what it read")
    read = _global_names(code)
    names.update(read)
    if _ANY_NAME & set(read):  # getattr(module, name), attrgetter, __dict__: any of a module's names
        names.add(_ALL)
    values = [(n, glob[n]) for n in read if n in glob]
    for n, cell in zip(code.co_freevars, fn.__closure__ or ()):
        try:
            values.append((n, cell.cell_contents))
        except ValueError:  # a cell not filled yet
            values.append((n, _EMPTY))
    values += [("__defaults__", fn.__defaults__), ("__kwdefaults__", fn.__kwdefaults__)]
    for n, v in values:
        out.append((id(fn), n, _describe(v, None, pins, allowed, {}, todo)))


_EMPTY = object()


@functools.lru_cache(maxsize=1024)
def _global_names(code):
    """The global names ``code`` (and the code it nests) reads."""
    names, todo = set(), [code]
    while todo:
        c = todo.pop()
        names.update(c.co_names)
        todo.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    return tuple(sorted(names))


_COMPUTED = frozenset(("globals", "eval", "exec", "__import__"))  # (vars(): any of a module's names, _ANY_NAME)


@functools.lru_cache(maxsize=1024)
def _computes_names(code):
    """Whether ``code`` (or the code it nests) loads a builtin that reads names it computes as a
    global (not ``model.eval``, an attribute), or reads ``sys.modules``."""
    import dis

    todo = [code]
    while todo:
        c = todo.pop()
        if {"sys", "modules"} <= set(c.co_names):  # (sys.modules[name]: a module found by a name it computes)
            return True
        if _COMPUTED & set(c.co_names):
            for ins in dis.get_instructions(c):
                if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME") and ins.argval in _COMPUTED:
                    return True
        todo.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    return False


def _library(fn):
    fn = getattr(fn, "_fn", fn)
    return (getattr(fn, "__module__", None) or "").split(".")[0] in _LIBRARIES


def _users(obj):
    """Whether a function, class or module is the user's (followed by the guards), not a library's,
    the standard library's or an installed package's."""
    if isinstance(obj, types.ModuleType):
        name, file = obj.__name__, getattr(obj, "__file__", None)
        if name in sys.builtin_module_names or name.split(".")[0] in _LIBRARIES:
            return False
        if file is None:
            return True
        file = os.path.abspath(file)
        return not file.startswith(_INSTALLED) and not any(part in file for part in _PACKAGE_DIRS)
    module = getattr(getattr(obj, "_fn", obj), "__module__", None) or ""
    if module == "__main__":
        return True
    if module.split(".")[0] in _LIBRARIES or module == "builtins":
        return False
    mod = sys.modules.get(module)
    return mod is None or _users(mod)


_INSTALLED = tuple({os.path.abspath(p) + os.sep for p in [*(sysconfig.get_paths()[k] for k in (
    "stdlib", "platstdlib", "purelib", "platlib")), site.getuserbase()]})
_PACKAGE_DIRS = (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}")  # (an installed package's)


def _namespace(obj, pins, allowed, follow, names=None):
    """A class's own values (and its bases' of the user's): its plain attributes described, its
    functions followed (``follow``), a special method's too (``__call__``); or a module's values of
    ``names`` (those the code followed reads)."""
    if isinstance(obj, types.ModuleType):
        items = [(n, v) for n, v in list(vars(obj).items())
                 if n in names or (_ALL in names and not (n.startswith("__") and n.endswith("__")))]
    else:
        items = [(n, v) for c in obj.__mro__ if c is obj or _users(c) for n, v in list(vars(c).items())
                 if not (n.startswith("__") and n.endswith("__"))
                 or isinstance(v, (types.FunctionType, staticmethod, classmethod))]
    out = []
    for name, v in items:
        if isinstance(v, (staticmethod, classmethod)):
            v = v.__func__
        elif isinstance(v, property):
            v = (v.fget, v.fset, v.fdel)
        out.append((name, _describe(v, None, pins, allowed, {}, follow)))
    return tuple(out)


_ALL = object()  # (in the names read: any)
_ANY_NAME = frozenset(("getattr", "attrgetter", "__dict__", "vars"))  # (vars(module)[name] too)


def _describe(obj, tensors, pins, allowed, seen, follow, depth=_DEPTH):
    """A hashable description of an argument or (``tensors`` None) a name's value: a tensor argument
    by its kind (and which argument shares its value), a tensor a name holds by its identity (its
    value is guarded where it is read), a module by its parameters, buffers and ``training``,
    numbers, strings, containers and NumPy arrays by value, other objects by identity and their
    attributes (:func:`_attributes`); a function, class or module of the user's by identity, and
    added to ``follow`` (:func:`_names_guard` describes what it reads or holds)."""
    t = type(obj)
    follow.left -= 1
    if follow.left < 0:
        raise _Unguardable(f"it reaches more than {_VALUES_MAX} values (a container of objects, a deep object): "
                           "too many to guard; pass what it reads as arguments")
    if isinstance(obj, Tensor):
        return _describe_tensor(obj, tensors, pins, allowed, seen, follow, depth)
    if isinstance(obj, (tuple, list, dict, set, frozenset, collections.deque)) and not hasattr(obj, "_fields"):
        return _container(obj, tensors, pins, allowed, seen, follow, depth)
    if isinstance(obj, operator.attrgetter):  # (reads attributes by names it holds: any of a module's)
        follow.any_name = True
        return ("attrgetter", obj.__reduce__()[1])
    if isinstance(obj, functools.partial):
        return ("partial", _describe(obj.func, None, pins, allowed, {}, follow, depth),
                _describe(obj.args, None, pins, allowed, {}, follow, depth),
                _describe(obj.keywords, None, pins, allowed, {}, follow, depth))
    if not isinstance(obj, type) and callable(getattr(obj, "named_parameters", None)) and callable(
            getattr(obj, "named_buffers", None)):
        pins.append(obj)  # a module: the tensors it holds now, and whether each part trains
        held = [*obj.named_parameters(), *obj.named_buffers()]
        for _, p in held:
            allowed[id(p._storage)] = p
        parts = list(obj.modules()) if callable(getattr(obj, "modules", None)) else [obj]
        follow.extend(type(m) for m in parts if _users(type(m)))
        return ("module", id(obj), tuple((n, id(p)) for n, p in held), tuple(m.training for m in parts),
                tuple(_attributes(m, pins, allowed, follow, depth - 1) for m in parts))
    if isinstance(obj, (types.ModuleType, types.FunctionType, type, Compiled, types.MethodType)):
        pins.append(obj)
        if isinstance(obj, types.MethodType):
            return ("method", _describe(obj.__func__, None, pins, allowed, {}, follow, depth),
                    _describe(obj.__self__, None, pins, allowed, {}, follow, depth))
        if _users(obj):
            follow.append(obj)
        return ("id", id(obj))
    try:  # (a writeable NumPy array by its identity too: the trace reads that array, as a kernel's keyword)
        return door.frozen_held(obj, objects=False)
    except (door.NoKey, RecursionError):
        pins.append(obj)
        if _users(t):
            follow.append(t)
        if id(obj) in follow.active:  # (an object reached again from inside itself)
            return ("cycle", id(obj))
        follow.active.add(id(obj))
        try:
            return ("id", id(obj), _attributes(obj, pins, allowed, follow, depth - 1))
        finally:
            follow.active.discard(id(obj))


def _describe_tensor(obj, tensors, pins, allowed, seen, follow, depth):
    """:func:`_describe` of a tensor: an argument by its kind, a name's value by its identity; either with the
    user's attributes (``x.scale``), as an object's."""
    allowed[id(obj._storage)] = obj
    attributes = (_attributes(obj, pins, allowed, follow, depth - 1),) if obj.__dict__ else ()
    if tensors is None:
        pins.append(obj)
        return ("id", id(obj), *attributes)
    tensors.append(obj)
    st = obj._storage
    v = st.value
    return ("tensor", v.chunks, v.dtype, type(v._meta), obj._requires_grad, obj.grad_fn is None,
            st.inference, seen.setdefault(id(st), len(tensors) - 1),
            st.strides if type(st) is _ViewStorage else None, *attributes)  # (a view's layout: torch's strides)


def _container(obj, tensors, pins, allowed, seen, follow, depth):
    """A container of any of these kinds by what it holds (a subclass's attributes and class too; one
    holding itself by identity where it does)."""
    t = type(obj)
    if id(obj) in follow.active:  # (a container holding itself)
        return ("cycle", id(obj))
    follow.active.add(id(obj))
    try:
        if isinstance(obj, dict):
            out = (t, *((_describe(k, None, pins, allowed, {}, follow, depth),
                         _describe(v, tensors, pins, allowed, seen, follow, depth)) for k, v in obj.items()))
        elif isinstance(obj, (set, frozenset)):
            out = (t, frozenset(_describe(o, None, pins, allowed, {}, follow, depth) for o in obj))
        else:
            out = (t, *(_describe(o, tensors, pins, allowed, seen, follow, depth) for o in obj))
    finally:
        follow.active.discard(id(obj))
    if t not in (tuple, list, dict, set, frozenset, collections.deque):  # (a subclass: its attributes too)
        out += (_attributes(obj, pins, allowed, follow, depth - 1),)
        if _users(t):
            follow.append(t)
    return out


class _Walk(list):
    """What the guards of one call follow (:func:`_names_guard`), the values they may still
    describe (``left``) and the containers and objects being described (``active``: a cycle)."""

    def __init__(self):
        super().__init__()
        self.left, self.active, self.any_name = _VALUES_MAX, set(), False


_MODULE_TABLES = frozenset(("training", "_parameters", "_buffers", "_non_persistent_buffers_set", "_modules",
                            "_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_forward_hooks",
                            "_forward_hooks_with_kwargs", "_forward_hooks_always_called"))


def _attributes(obj, pins, allowed, follow, depth):
    """An object's attributes as a trace may have read them (``self.scale``, ``cfg.a.b.lr``, a
    ``__slots__`` attribute, an object in a list), as torch.compile's guards check them: described
    as a name's value is (:func:`_describe`), ``depth`` levels down (then by identity).  A module's
    registered parameters, buffers and submodules are described with the module."""
    if depth < 0:
        return ()
    d = getattr(obj, "__dict__", None)
    items = list(d.items()) if type(d) is dict else []
    if isinstance(obj, Tensor):  # (a tensor's own fields are guarded as its kind: the user's attributes only)
        return _described_items(items, pins, allowed, follow, depth)
    for cls in type(obj).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:  # (a tuple, a list, a dict's keys ...)
            if not isinstance(name, str) or name in ("__dict__", "__weakref__"):
                continue
            if name.startswith("__") and not name.endswith("__"):  # (a private name, mangled)
                name = f"_{cls.__name__.lstrip('_')}{name}"
            try:
                items.append((name, getattr(obj, name)))
            except AttributeError:  # (not set)
                pass
    return _described_items(items, pins, allowed, follow, depth)


def _described_items(items, pins, allowed, follow, depth):
    out = []
    for name, v in items:
        if name in _MODULE_TABLES:
            continue
        if isinstance(v, Tensor):
            pins.append(v)
            allowed[id(v._storage)] = v
            out.append((name, "tensor", id(v)))
            continue
        out.append((name, _describe(v, None, pins, allowed, {}, follow, depth)))
    return tuple(out)


def _frozen(value):
    try:
        door.frozen(value, objects=False)
    except door.NoKey:
        return False
    return True


def _forget(compiled_ref, key):
    compiled = compiled_ref()
    if compiled is not None:
        with compiled._lock:
            compiled._drop(key)


def _stale(entry):
    """Whether a tensor read from outside is gone, or (read by value) holds another value than at the trace."""
    for _, source in entry.inputs:
        if type(source) is not int and source() is None:
            return True
    for storage, value in entry.reads:
        st, v = storage(), value()
        if st is None or v is None or st.value is not v:
            return True
    return False


def _random_states(before=None):
    """daskgrad's and NumPy's global generators' states and the draws from Python's made on this
    thread while it records (:func:`_python_draws`): a trace that draws from one would replay the
    same numbers.  ``before``: the states read before the trace, which the cheaper read after it
    may lean on (:func:`_legacy_state`)."""
    return (_tensor._rng, repr(_tensor._rng.bit_generator.state), *_legacy_state(before and before[2:6]),
            _draws.get(threading.get_ident()))


def _legacy_state(before=None):
    """``(the first 4 words of its key as bytes, its position, whether a second normal is cached, that
    normal)`` of NumPy's global (legacy) generator, whose ``randn`` answers every other draw from that
    cache without moving its position.  Read from ``np.random.get_state()`` (a copy of all 624 words,
    ~35 us) except after a trace (``before``: the state read before it) that began with no normal
    cached: then a draw of any kind moved the position (or regenerated the key), so the key's first
    words and the position, read in place (:func:`_legacy_view`, where its memory was checked to be
    laid out so), tell whether it drew."""
    if before is not None and not before[2]:
        view = _legacy_view()
        if view is not None:
            key, pos = view
            key, pos = bytes(key), pos.value
            return (key, pos) + tuple(before[2:]) if (key, pos) == tuple(before[:2]) else (key, pos, None, None)
    legacy = np.random.get_state(legacy=False)
    if legacy["bit_generator"] != "MT19937":  # (another bit generator set as the global one: its whole state)
        return repr(legacy), None, None, None
    return legacy["state"]["key"][:4].tobytes(), legacy["state"]["pos"], legacy["has_gauss"], legacy["gauss"]


_legacy = [None, None]  # [the bit generator viewed, (key's first 4 words, position) in its memory] or None


def _legacy_view():
    """The first 4 words of the key and the position of NumPy's global MT19937, as ctypes objects over
    its state (``bit_generator.ctypes.state_address``: MT19937's ``{uint32 key[624]; int pos}``), made
    once per generator and used only where they read what ``get_state()`` gives (checked when made);
    None where that is not so (another NumPy: ``get_state()`` is read instead)."""
    try:
        bg = np.random.mtrand._rand._bit_generator
    except AttributeError:
        return None
    if _legacy[0] is bg:
        return _legacy[1]
    view = None
    try:
        import ctypes

        if type(bg).__name__ == "MT19937":
            address = bg.ctypes.state_address
            key = (ctypes.c_uint32 * 4).from_address(address)
            pos = ctypes.c_int.from_address(address + 624 * 4)
            legacy = np.random.get_state(legacy=False)["state"]
            if bytes(key) == legacy["key"][:4].tobytes() and pos.value == legacy["pos"]:
                view = (key, pos)
    except Exception:  # (no ctypes interface: read get_state())
        view = None
    _legacy[:] = [bg, view]
    return view


_GENERATORS = (np.random.Generator, np.random.RandomState, np.random.BitGenerator, random.Random)


def _stateful(objects):
    """The objects among those guarded by identity (what the function reaches: its arguments, the names
    it reads, their attributes ...) whose state a call may advance: a NumPy ``Generator``,
    ``RandomState`` or bit generator, a ``random.Random``, an iterator or a generator; with their state
    now (:func:`_state_of`), which a trace compares after the call: one that drew makes the function
    run as usual."""
    out, seen = [], set()
    for obj in objects:
        if id(obj) not in seen and (isinstance(obj, _GENERATORS) or _iterator(obj)):
            seen.add(id(obj))
            state = _state_of(obj)
            if state is not None:
                out.append((obj, state))
    return out


def _iterator(obj):
    """An iterator whose state is not in attributes the guards describe: one of C's (``itertools.count``,
    a list's iterator) or a generator (a class of the user's keeps its state in its attributes)."""
    t = type(obj)
    step = getattr(t, "__next__", None)
    return step is not None and not isinstance(step, types.FunctionType) and not isinstance(obj, type)


def _state_of(obj, depth=4):
    """What a draw or a ``next()`` changes of ``obj`` (a value compared with ``==``); None for an iterator
    whose state cannot be read (a closed file, an object ``__reduce__`` refuses): not watched."""
    import io
    import pickle

    try:
        if isinstance(obj, np.random.Generator):
            return pickle.dumps(obj.bit_generator.state)
        if isinstance(obj, np.random.RandomState):
            return pickle.dumps(obj.get_state(legacy=False))
        if isinstance(obj, np.random.BitGenerator):
            return pickle.dumps(obj.state)
        if isinstance(obj, random.Random):
            return obj.getstate()
        if isinstance(obj, types.GeneratorType):  # (where it stopped and what its locals hold, by identity)
            frame = obj.gi_frame
            return None if frame is None else ("generator", frame.f_lasti,
                                                tuple((k, id(v)) for k, v in frame.f_locals.items()))
        if isinstance(obj, io.IOBase):  # (a file read line by line: its position)
            return ("file", obj.tell())
        with warnings.catch_warnings():  # (an iterator of the standard library's: its state from __reduce__)
            warnings.simplefilter("ignore", DeprecationWarning)
            return tuple(_shallow(v, depth) for v in obj.__reduce__())
    except Exception:
        return None


def _shallow(v, depth):
    """``v`` compared by value where it is a number or a string (a tuple's items so), by its state where it is
    an iterator (``zip``'s, ``map``'s: ``depth`` levels down), else by identity."""
    if isinstance(v, tuple):
        return tuple(_shallow(o, depth) for o in v)
    if isinstance(v, (int, float, str, bytes, type(None))):
        return v
    if depth > 0 and _iterator(v):
        return ("iterator", id(v), _state_of(v, depth - 1))
    return ("id", id(v))


# Python's ``random`` is drawn from by other threads of the process too (tornado's periodic callbacks
# with jitter, the scheduler of a LocalCluster): its global state changing while a trace ran does not
# say the traced function drew.  While a trace records, the module's functions count the draws made
# on each recording thread instead.
_PYTHON_DRAWS = ("random", "uniform", "randint", "randrange", "choice", "choices", "shuffle", "sample", "gauss",
                 "normalvariate", "lognormvariate", "expovariate", "vonmisesvariate", "gammavariate",
                 "betavariate", "paretovariate", "weibullvariate", "triangular", "getrandbits", "randbytes",
                 "binomialvariate")
_draws = {}  # recording thread's id -> draws it made from Python's random while recording
_draws_depth = {}  # recording thread's id -> nested recordings
_draws_lock = threading.Lock()
_draws_originals = {}


def _counted_draw(fn):
    @functools.wraps(fn)
    def draw(*args, **kwargs):
        me = threading.get_ident()
        if me in _draws:
            _draws[me] += 1
        return fn(*args, **kwargs)

    return draw


@contextlib.contextmanager
def _python_draws():
    """Count this thread's draws from Python's ``random`` module while inside."""
    me = threading.get_ident()
    with _draws_lock:
        if not _draws_depth:
            for name in _PYTHON_DRAWS:
                if hasattr(random, name):
                    _draws_originals[name] = getattr(random, name)
                    setattr(random, name, _counted_draw(_draws_originals[name]))
        _draws_depth[me] = _draws_depth.get(me, 0) + 1
        _draws.setdefault(me, 0)
    try:
        yield
    finally:
        with _draws_lock:
            _draws_depth[me] -= 1
            if not _draws_depth[me]:
                del _draws_depth[me], _draws[me]
            if not _draws_depth:
                for name, fn in _draws_originals.items():
                    setattr(random, name, fn)
                _draws_originals.clear()


# ------------------------------------------------------------------ values in, results out
def _leaves(out):
    if isinstance(out, Tensor):
        yield out
    elif type(out) in (tuple, list):
        for o in out:
            yield from _leaves(o)
    elif type(out) is dict:
        for o in out.values():
            yield from _leaves(o)


_TENSOR = object()  # in a structure: a result tensor goes here


def _flatten(out, trace):
    """How ``out``'s tensors go back into it: ``_TENSOR`` where a result goes, a constant as itself."""
    if isinstance(out, Tensor):
        return _TENSOR
    t = type(out)
    if t in (tuple, list):
        return (t, [_flatten(o, trace) for o in out])
    if t is dict:
        return (dict, {k: _flatten(v, trace) for k, v in out.items()})
    if not _frozen(out):
        trace.broke(f"it returns a {t.__name__}, not tensors, numbers or containers of them")
    return (None, out)


def _unflatten(structure, values):
    if structure is _TENSOR:
        return next(values)
    kind, inner = structure
    if kind is None:
        return copy.deepcopy(inner)  # (a returned NumPy array the caller may write to is its own)
    if kind is dict:
        return {k: _unflatten(v, values) for k, v in inner.items()}
    return kind(_unflatten(s, values) for s in inner)


def _aliases(results, args):
    """How results that share memory (``y, y[1:], y.T``; ``y, y``; a view ``y.T`` of a tensor made
    inside, ``x[1:]`` of an argument) come back as they do from the function: ``(plan, values)``, the
    values to compute (each storage's once: a view's, and its root's) and, per result, ``("same", i)``
    (result ``i`` again), ``("plain", k)`` (a tensor over value ``k``'s storage, shared by the results
    over it) or ``("view", root, value k, its layout ...)``: ``root`` a value's index, or ``("arg", i)``
    for argument ``i`` (``args``: an argument's storage's id -> its index; one that is no view, whose
    layout the guards fix); None where no result is a view and none shares a storage (as before)."""
    storages = [t._storage for t in results]
    if len({id(st) for st in storages}) == len(storages) and not any(type(st) is _ViewStorage for st in storages):
        return None
    values, slots, plan, first = [], {}, [], {}

    def slot(st):
        k = slots.get(id(st))
        if k is None:
            k = slots[id(st)] = len(values)
            values.append(st.value)
        return k

    for t in results:
        if id(t) in first:
            plan.append(("same", first[id(t)]))
            continue
        first[id(t)] = len(plan)
        st = t._storage
        if type(st) is _ViewStorage:
            view = t._view
            root = ("arg", args[id(st.root)]) if id(st.root) in args else slot(st.root)
            plan.append(("view", root, slot(st), st.steps, st.strides, st.offset, t._base is not None,
                         None if view is None else (view.steps, view.creation)))
        else:
            plan.append(("plain", slot(st)))
    return tuple(plan), tuple(values)


def _rebuild(plan, tensors, arguments):
    """The results from the tensors holding their computed values, made views of each other (or of
    the call's tensor ``arguments``) as ``plan`` (:func:`_aliases`) says."""
    if plan is None:
        return tensors
    bases, given, out = {}, set(), []

    def base(k):
        if type(k) is tuple:
            return arguments[k[1]]
        if k not in bases:
            bases[k] = tensors[k]
        return bases[k]

    for item in plan:
        kind = item[0]
        if kind == "same":
            out.append(out[item[1]])
        elif kind == "plain":
            b = base(item[1])
            if id(b) in given:  # (another tensor over the same storage: y and y.detach())
                b = Tensor.__new__(Tensor)
                b._init(bases[item[1]]._storage)
            given.add(id(b))
            out.append(b)
        else:
            _, root, k, steps, strides, offset, has_base, view = item
            b, t = base(root), tensors[k]
            a = t._storage.value
            st = _ViewStorage(b._storage, steps, strides, offset, a)
            t._storage = st
            _state.hold(st, door.held_keys(a))
            if has_base:
                t._base = b
                if view is not None:
                    t._view = _ViewInfo(*view)
            if b._storage.views is None:
                b._storage.views = weakref.WeakSet()
            b._storage.views.add(t)
            out.append(t)
    return out


def _wrap(arrays):
    """Computed arrays as tensors holding them (kept on two workers of a cluster while held)."""
    out = []
    for a in arrays:
        t = Tensor._make(a)
        _state.hold(t._storage, door.held_keys(a))
        out.append(t)
    return out


def _requiring_grad(fn, args, kwargs):
    """The arguments of a call of ``fn`` that are tensors requiring grad, named for a message: "argument
    'w'" (its parameter's name where ``fn``'s signature gives one), or "" where there is none."""
    import inspect

    try:
        names = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        names = []
    given = [f"'{names[i]}'" if i < len(names) else f"{i}" for i, a in enumerate(args)
             if isinstance(a, Tensor) and a.requires_grad]
    given += [f"'{k}'" for k, a in kwargs.items() if isinstance(a, Tensor) and a.requires_grad]
    return f"argument{'s' if len(given) > 1 else ''} {', '.join(given)}" if given else ""
