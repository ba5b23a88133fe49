"""How a chunk-fused task runs: the callables inside the tasks :mod:`.fuse` builds.

The fusion pass runs once per submission; what is here runs for every chunk of every step, on a
worker or inline in an instance of a template (:mod:`.program`), so it is kept apart from the pass and its
per-call cost is what matters.  On small chunks dask's own overhead per task (``Task.__call__``
walking its arguments, a Blockwise-fused task ordering its inner graph) costs more than the NumPy
work, hence direct calls (:class:`_Call`), subgraphs ordered once (:class:`_Subgraph`) and a fused
task generated as one function (:class:`_Kernel`, by :func:`fast`).  :func:`_run_fused` is the
path that meters parts for the dashboard and tells a memory tracker (:func:`observe_inner`);
:func:`fused_outputs` and :func:`inner_peak` read its task's layout for :mod:`.peaks`.  On a cluster an
instance ships each such task's parts pickled once (:class:`ShippedParts`, run by :func:`_run_shipped`).
"""
from __future__ import annotations

import collections
import functools
import operator
import threading
import time

import cloudpickle
import dask
import numpy as np
from dask.utils import key_split, parse_bytes

from . import rows
from .layers import _identity
from .labels import part_name

from .internals import (Alias, DataNode, GraphNode, List, Task, TaskRef, Tuple, _execute_subgraph, context_meter,
                        enforce_dtype, metering)


class _Outputs(tuple):
    """The values a fused task hands on; ``nbytes`` for the memory trackers that ask a result."""

    @property
    def nbytes(self):
        return sum(int(getattr(v, "nbytes", 0) or 0) for v in self)


_inner_observer = None  # peaks.PeakTracker's: told the most bytes a fused task held inside


def observe_inner(observer):
    """``observer(bytes)`` is told the most a fused task held inside while it ran (``None``: nobody)."""
    global _inner_observer
    _inner_observer = observer


class _Subgraph:
    """A Blockwise-fused task inside a group, with its inner tasks ordered once, on the client.

    Run as itself, such a task (``_execute_subgraph``) orders its inner graph with ``dask.order``
    on every call, about 0.3 ms a chunk on the worker; re-keying its inner tasks into the group
    instead cost ~0.5 ms a chunk on the client.  Here the inner tasks stay as they are and only
    their order is computed (a topological sort of a few tasks)."""

    __slots__ = ("key", "dependencies", "data_producer", "tasks", "outkey", "inputs", "drops", "names")

    def __init__(self, node):
        inner, self.outkey, inkeys = node.args[:3]
        self.key, self.dependencies, self.data_producer = node.key, node.dependencies, node.data_producer
        # (an input that is a task of references, a fused task's getitem, called directly too)
        self.inputs = tuple((k, _Call.of(a)) for k, a in zip(inkeys, node.args[3:]))
        order, seen, stack = [], set(), [(self.outkey, False)]  # depth-first post-order from the output
        while stack:
            k, done = stack.pop()
            if done:  # (a Blockwise-fused task inside: one too, or dask orders it on every call)
                order.append(_Subgraph(inner[k]) if _loose(inner[k]) else _Call.of(inner[k]))
            elif k not in seen:
                seen.add(k)
                stack.append((k, True))
                stack.extend((d, False) for d in inner[k].dependencies if d in inner and d not in seen)
        self.tasks = tuple(order)
        last = {}  # each value is dropped after its last reader: a long chain holds one or two chunks
        for i, t in enumerate(self.tasks):
            for d in t.dependencies:
                last[d] = i
        drops = [[] for _ in self.tasks]
        for d, i in last.items():
            if d != self.outkey:
                drops[i].append(d)
        self.drops = tuple(map(tuple, drops))
        self.names = tuple(part_name(t.key) for t in self.tasks)  # each inner task's, for the dashboard

    @staticmethod
    def applies(node):
        """Whether ``node`` is a Blockwise-fused task whose inputs are values, references, tasks
        (a time step's ``getitem`` of a fused task's values) or lists of references, nested or not (a
        contraction's blocks; a reduction's aggregate, a list per axis)."""
        return (isinstance(node, Task) and node.func is _execute_subgraph and not node.kwargs
                and all(isinstance(a, (TaskRef, DataNode)) or type(a) is Task or (type(a) is List and _refs_only(a))
                        for a in node.args[3:])
                and all(isinstance(t, (Task, Alias)) for t in node.args[0].values()))

    def __call__(self, cache, seconds=None):
        """The output; ``seconds`` (a dict), when given, gains the time of each inner task by name."""
        local = {k: _input(a, cache) for k, a in self.inputs}
        for t, drop, name in zip(self.tasks, self.drops, self.names):
            if seconds is None:
                local[t.key] = t(local)
            else:
                start = time.perf_counter()
                local[t.key] = t(local)
                seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - start
            for d in drop:
                local.pop(d, None)
        return local[self.outkey]

    def __reduce__(self):
        return (_Subgraph._restore, (self.key, self.dependencies, self.data_producer, self.tasks, self.outkey,
                                     self.inputs, self.drops, self.names))

    @staticmethod
    def _restore(*state):
        new = object.__new__(_Subgraph)
        for name, value in zip(_Subgraph.__slots__, state):
            setattr(new, name, value)
        return new


class _Unfit(Exception):
    """An argument :class:`_Call` does not convert (a container of tasks other than a list or tuple)."""


class _Call:
    """A part of a fused task called directly: its function on its constants and the values it reads.

    dask's ``Task.__call__`` checks its inputs and walks every argument for nested tasks on each
    call (~10 us, and as much again for each task nested in it); a fused chunk runs a dozen parts,
    so on small chunks that walk cost more than the NumPy calls.  A task is converted (:meth:`of`)
    where each argument is a value, a reference (an alias: what it stands for), a task of those
    (``calls``, called first: a reduction's combine step reading ``getitem`` s of fused tasks), or a
    list or tuple of those (a contraction's blocks); others run as dask's tasks.  In ``seqs``
    each item is ``(kind, e)``: 0 a constant, 1 a reference, 2 a call."""

    __slots__ = ("key", "dependencies", "data_producer", "func", "args", "refs", "calls", "kwargs", "kwrefs",
                 "seqs")

    @classmethod
    def of(cls, task):
        """``task`` as a call, or ``task`` itself."""
        if type(task) is not Task:
            return task
        try:
            return cls._made(task)
        except _Unfit:
            return task

    @classmethod
    def _made(cls, task):
        new = object.__new__(cls)
        new.key, new.dependencies, new.func = task.key, task.dependencies, task.func
        new.data_producer = task.data_producer
        args, refs, calls, seqs = [], [], [], []
        for i, a in enumerate(task.args):
            if type(a) in (List, Tuple):
                items = tuple(_part(e) for e in a.args)
                if any(kind == 3 for kind, _ in items):
                    raise _Unfit  # (a list of lists)
                seqs.append((i, a.constructor, items))
                args.append(None)
                continue
            kind, v = _part(a)
            args.append(v if kind == 0 else None)
            if kind == 1:
                refs.append((i, v))
            elif kind == 2:
                calls.append((i, v))
            elif kind == 3:
                raise _Unfit
        new.args, new.refs, new.calls, new.seqs = tuple(args), tuple(refs), tuple(calls), tuple(seqs)
        kw = {k: _part(a) for k, a in task.kwargs.items()}
        if any(kind > 1 for kind, _ in kw.values()):
            raise _Unfit
        new.kwargs = {k: v for k, (kind, v) in kw.items() if kind == 0}
        new.kwrefs = tuple((k, v) for k, (kind, v) in kw.items() if kind == 1)
        return new

    def __call__(self, values):
        args = list(self.args)
        for i, k in self.refs:
            args[i] = values[k]
        for i, call in self.calls:
            args[i] = call(values)
        for i, make, items in self.seqs:
            args[i] = make(values[e] if kind == 1 else e(values) if kind == 2 else e for kind, e in items)
        if self.kwrefs:
            return self.func(*args, **self.kwargs, **{name: values[k] for name, k in self.kwrefs})
        return self.func(*args, **self.kwargs)

    def __dask_tokenize__(self):
        return ("fused-part", self.key, self.func, self.args, self.refs, self.calls, self.seqs, self.kwargs,
                self.kwrefs)


def _as_method(name):
    """``np.<name>`` called as the ndarray's method on an ndarray: NumPy's reductions check every
    argument before calling it (2 us a call, more than summing a chunk of a few rows takes)."""
    fn = getattr(np, name)

    def reduction(a, *args, **kwargs):
        return getattr(a, name)(*args, **kwargs) if type(a) is np.ndarray else fn(a, *args, **kwargs)
    reduction.__name__ = reduction.__qualname__ = name
    return fn, reduction


_methods = {id(fn): reduction for fn, reduction in map(_as_method, ("sum", "prod", "max", "min"))}


def _faster(func):
    """``func``, or the same reduction called as a method on ndarrays (dask's reductions call
    ``partial(np.sum, dtype=...)``), for a generated kernel (the parts keep their functions: rows.py
    knows the reductions by them)."""
    if type(func) is functools.partial and id(func.func) in _methods:
        return functools.partial(_methods[id(func.func)], *func.args, **func.keywords)
    return _methods.get(id(func), func)


def _part(a):
    """``(kind, v)`` of a task's argument: 0 a value ``v``, 1 a reference to key ``v``, 2 a task
    (``v``: its :class:`_Call`), 3 a list or tuple (its items not converted)."""
    t = type(a)
    if t is TaskRef:
        return 1, a.key
    if t is Alias:
        return 1, a.target
    if t is DataNode:
        return 0, a.value
    if t is Task:
        return 2, _Call._made(a)
    if t is List or t is Tuple:
        return 3, a
    if isinstance(a, GraphNode) or (isinstance(a, (tuple, list, dict, set)) and _holds_node(a)):
        raise _Unfit
    return 0, a


def fast(task):
    """``task`` as a direct call where it can be (an instance run inline calls it so): a chunk-fused
    task as one generated function (:class:`_Kernel`)."""
    if type(task) is Task and task.func is _run_fused:
        try:
            return _Kernel(task)
        except SyntaxError:  # (a part this generator cannot write down: run as dask's task)
            return task
    if _loose(task):  # a Blockwise-fused task left alone: its inner order found once
        return _Subgraph(task)
    call = _Call.of(task)
    if type(call) is _Call and (call.calls or any(kind == 2 for _, _, items in call.seqs for kind, _ in items)):
        return _Expr(call)
    return call


class _Expr:
    """A direct call with calls inside it as one generated function: a reduction's combine step
    over its chunks' results (``sum(concatenate([getitem(p0, 1), ..., getitem(p199, 1)]))``) made
    a :class:`_Call` per item on every run, a fifth of a 200-chunk step."""

    __slots__ = ("key", "dependencies", "run")

    def __init__(self, call):
        self.key, self.dependencies = call.key, call.dependencies
        env = {}

        def const(value):
            name = f"c{len(env)}"
            env[name] = value
            return name

        scope = {k: f"v{j}" for j, k in enumerate(call.dependencies)}
        lines = [f"    {v} = values[{const(k)}]\n" for k, v in scope.items()]
        source = "def kernel(values):\n" + "".join(lines) + f"    return {_call_source(call, scope, const)}\n"
        self.run = _generated(source, f"<daskgrad call {key_split(call.key)}>", env)

    def __call__(self, values):
        return self.run(values)


_compiled = {}  # generated source -> its code: every chunk of a layer has the same source, other constants


def _generated(source, filename, env):
    """The function ``kernel`` that ``source`` defines, its names read from ``env`` (compiled once per source)."""
    code = _compiled.get(source)
    if code is None:
        if len(_compiled) >= 4096:
            _compiled.clear()
        code = _compiled[source] = compile(source, filename, "exec")
    exec(code, env)
    return env["kernel"]


class _Kernel:
    """A chunk-fused task as one Python function, generated once: its parts called one after the
    other on local variables, each deleted after its last reader, instead of :func:`_run_fused`
    looking every value up in a dict (on chunks of a few rows that lookup costs more than NumPy).

    Parts that are not direct calls (:class:`_Call`) are called as they are, on a dict of the values
    they read.  While the dashboard meters parts or a memory tracker listens, :func:`_run_fused` runs
    instead."""

    __slots__ = ("key", "dependencies", "task", "run")

    def __init__(self, task):
        self.key, self.dependencies, self.task = task.key, task.dependencies, task
        order, drops, inputs, outputs = task.args[:4]
        env, lines, var = {"_Outputs": _Outputs}, [], {}

        def const(value):
            name = f"c{len(env)}"
            env[name] = value
            return name

        def new(key, scope):
            scope[key] = f"v{len(lines)}_{len(scope)}"
            return scope[key]

        def call(part, scope):
            return _call_source(part, scope, const)

        once = {}  # key -> the value of a part computed here, once (see _made_once)
        for k in inputs:
            lines.append(f"{new(k, var)} = values[{const(k)}]")
        for node, drop in zip(order, drops):
            value = _made_once(node, once, outputs)
            if value is not None:
                once[node.key] = value
                var[node.key] = const(value)
            elif type(node) is _Subgraph:
                inner = {k: var[a.key] if isinstance(a, TaskRef) else _listed(a, var, call) if type(a) is List
                         else call(a, var) if type(a) in (_Call, Task) else const(a.value)
                         for k, a in node.inputs}
                made = set()
                known = {**once, **{k: a.value for k, a in node.inputs if type(a) is DataNode}}
                for t, tdrop in zip(node.tasks, node.drops):
                    value = _made_once(t, known, [node.outkey])
                    if value is not None:
                        known[t.key] = value
                        inner[t.key] = const(value)
                        continue
                    lines.append(f"{new(t.key, inner)} = {call(t, inner)}")
                    made.add(t.key)
                    gone = [inner[d] for d in tdrop if d in made]
                    if gone:
                        lines.append(f"del {', '.join(gone)}")
                var[node.key] = inner[node.outkey]
            else:
                lines.append(f"{new(node.key, var)} = {call(node, var)}")
            gone = [var[d] for d in drop if d not in once]
            if gone:
                lines.append(f"del {', '.join(gone)}")
        result = (f"_Outputs(({', '.join(var[k] for k in outputs)},))" if isinstance(outputs, list)
                  else var[outputs])
        source = "def kernel(values):\n" + "".join(f"    {line}\n" for line in lines) + f"    return {result}\n"
        self.run = _generated(source, f"<daskgrad fused {key_split(task.key)}>", env)

    def __call__(self, values):
        if _inner_observer is not None or metering():
            return self.task(values)
        return self.run(values)


def _made_once(node, made, outputs):
    """The value of ``node`` where the kernel can make it once instead of on every call: a part of
    the pure functions below reading constants and such values only, whose value is a NumPy scalar
    or 0-d array (made read-only: every call shares it); None otherwise.  The gradient of a mean is
    ``ones(()) / n`` in every chunk's task: three calls a chunk, a tenth of a small chunk's step.
    Not an output of the task (a chunk handed on must be the task's own), nor a random draw or
    anything on a device (only these functions; only NumPy results)."""
    if type(node) is not _Call or node.kwrefs or node.key in (outputs if isinstance(outputs, list) else (outputs,)):
        return None
    func = node.func
    if func is enforce_dtype:
        func = node.kwargs.get("enforce_dtype_function")
    if not _pure(func) or any(k not in made for _, k in node.refs) or node.calls or any(
            kind != 0 for _, _, items in node.seqs for kind, _ in items):
        return None
    try:
        with np.errstate(all="raise"):  # (a warning stays each call's)
            value = node(made)
    except Exception:  # (raised where it is called, as before)
        return None
    if isinstance(value, np.generic):  # (a NumPy scalar: immutable)
        return value
    if type(value) is not np.ndarray or value.ndim:
        return None
    value = value.copy()
    value.setflags(write=False)
    return value


_PURE = {operator.add, operator.sub, operator.mul, operator.truediv, operator.neg, operator.pow, _identity}
_PURE_CHUNK = {"ones", "filled"}  # daskgrad.chunk's (a floor this one does not import)


def _pure(func):
    try:
        return func in _PURE or (func.__module__ == "daskgrad.chunk" and func.__qualname__ in _PURE_CHUNK)
    except (AttributeError, TypeError):  # (no such attributes; unhashable)
        return False


def _call_source(part, scope, const):
    """The source of an expression calling ``part`` on the variables of ``scope`` (key -> variable
    name); ``const(value)`` names a constant of the generated function."""
    if type(part) is not _Call:
        reads = ", ".join(f"{const(d)}: {scope[d]}" for d in part.dependencies)
        return f"{const(part)}({{{reads}}})"
    if part.func is _identity and len(part.refs) == 1 and len(part.args) == 1 and not part.kwargs and not part.kwrefs:
        return scope[part.refs[0][1]]  # (a relabelled layer's no-op: the variable itself)
    args = [const(a) for a in part.args]
    for i, k in part.refs:
        args[i] = scope[k]
    for i, inner in part.calls:
        args[i] = _call_source(inner, scope, const)
    for i, make, items in part.seqs:
        inner = ", ".join(scope[e] if kind == 1 else _call_source(e, scope, const) if kind == 2 else const(e)
                          for kind, e in items)
        args[i] = f"[{inner}]" if make is list else f"({inner},)" if items else "()"
    if part.func is enforce_dtype and part.kwargs.keys() == _ENFORCED and not part.kwrefs:
        # dask's elemwise wraps each function to cast its result: called here as itself, the
        # result checked after (the keywords' dict copied and popped on every call cost more)
        inner = f"{const(part.kwargs['enforce_dtype_function'])}({', '.join(args)})"
        return f"{const(_as_dtype)}({inner}, {const(part.kwargs['enforce_dtype'])})"
    kwargs = [f"**{const(part.kwargs)}"] if part.kwargs else []
    if part.kwrefs:  # (by a dict: a keyword need not be an identifier)
        kwargs.append("**{" + ", ".join(f"{const(name)}: {scope[k]}" for name, k in part.kwrefs) + "}")
    return f"{const(_faster(part.func))}({', '.join(args + kwargs)})"


_ENFORCED = {"enforce_dtype", "enforce_dtype_function"}


def _as_dtype(result, dtype):
    """dask's ``_enforce_dtype`` on a result made already: itself where it has ``dtype``."""
    if getattr(result, "dtype", dtype) == dtype:
        return result
    # (dask's, which leaves a result alone where dtype is object, and refuses a cast across kinds)
    return enforce_dtype(result, enforce_dtype=dtype, enforce_dtype_function=_itself)


def _itself(x):
    return x


def _listed(seq, var, call):
    """The source of a (nested) list of references, each read from its variable in ``var``, or of
    direct calls of those (a weight's transpose among a contraction's blocks: ``call(part, var)``)."""
    return "[" + ", ".join(var[e.key] if type(e) is TaskRef else call(_Call.of(e), var) if type(e) is Task
                           else _listed(e, var, call) for e in seq.args) + "]"


def _input(a, cache):
    """The value of an argument of a Blockwise-fused task: a reference, a value, a (nested) list of
    references (a contraction's blocks), or (a task :func:`fast` runs) tasks made of references."""
    t = type(a)
    if t is TaskRef:
        return cache[a.key]
    if t is List:
        return [cache[e.key] if type(e) is TaskRef else _input(e, cache) for e in a.args]
    if t is DataNode:
        return a.value
    return a(cache)


def _loose(node):
    """Whether a Blockwise-fused task left alone (not in a chunk-fused group) may run as a
    :class:`_Subgraph` when an instance run inline calls it: its inputs may also be tasks of references."""
    return (type(node) is Task and node.func is _execute_subgraph and not node.kwargs
            and all(isinstance(t, (Task, Alias)) for t in node.args[0].values())
            and all(isinstance(a, (TaskRef, DataNode, Task)) or type(a) is List for a in node.args[3:]))


def _refs_only(seq):
    """Whether a (nested) list holds references, or direct calls of references (a view of a weight that
    chunk fusion wrote in: :func:`.fuse._inline_views`)."""
    return all(isinstance(e, TaskRef) or (type(e) is List and _refs_only(e))
               or (type(e) is Task and type(_Call.of(e)) is _Call) for e in seq.args)


def _holds_node(obj):
    """Whether a container holds a task or a reference anywhere inside (dask would evaluate it)."""
    items = obj.values() if isinstance(obj, dict) else obj
    return any(isinstance(a, (GraphNode, TaskRef)) or (isinstance(a, (tuple, list, dict, set)) and _holds_node(a))
               for a in items)


def _run_fused(order, drops, inputs, outputs, names, *values):
    """Run a fused group: its tasks in ``order``, each temporary dropped after its last reader.

    On a distributed worker the seconds of each part are told to distributed's fine performance
    metrics under the part's name (``names``: "mm-vjp", "sum", ...), so the dashboard attributes a
    fused task's time to the rules inside it instead of one ``add-vjp-fused`` bar."""
    observe, live, peak = _inner_observer, 0, 0
    seconds = {} if metering() else None
    if observe is None and (names, len(inputs)) not in _whole:
        done = _in_rows(order, names, inputs, values, outputs, seconds)
        if done is not None:
            return done
    cache = dict(zip(inputs, values))
    for node, drop, part in zip(order, drops, names):
        if seconds is None:
            cache[node.key] = value = node(cache)
        elif isinstance(node, _Subgraph):
            cache[node.key] = value = node(cache, seconds)
        elif type(node) is DataNode:  # a constant does no work: a stall of the thread while it is read
            cache[node.key] = value = node(cache)  # (the GIL held elsewhere) is no part's seconds
        else:
            start = time.perf_counter()
            cache[node.key] = value = node(cache)
            seconds[part] = seconds.get(part, 0.0) + time.perf_counter() - start
        if observe is not None:
            live += int(getattr(value, "nbytes", 0) or 0)
            peak = max(peak, live)
        for k in drop:
            if observe is not None:
                live -= int(getattr(cache[k], "nbytes", 0) or 0)
            del cache[k]
    if observe is not None:
        observe(peak)
    for part, spent in (seconds or {}).items():
        context_meter.digest_metric(part, spent, "seconds")
    if isinstance(outputs, list):
        return _Outputs(cache[k] for k in outputs)
    return cache[outputs]


class ShippedParts:
    """A chunk-fused task's parts (:func:`_run_fused`'s arguments before the values it reads) as a
    scheduler and a worker receive them: pickled once per template on the client (each task's own:
    its parts name its chunk), travelling as those bytes, unpickled once in each worker process that
    runs them (while the last 32 MiB of them unpickled there fit).  The scheduler unpickles
    every task of every submission: the 38 tasks of ``make demo``'s step, their parts as objects,
    were 50 kB of small objects, 1.3 ms of its event loop a step (10 times that while the workers
    held the CPUs), on the path of every step."""

    __slots__ = ("blob", "_args")

    def __init__(self, blob, args=None):
        self.blob, self._args = blob, args

    @classmethod
    def of(cls, task):
        args = task.args[:5]
        return cls(cloudpickle.dumps(args), args)

    def __reduce__(self):
        return ShippedParts, (self.blob,)

    def args(self):
        """``(order, drops, inputs, outputs, names)``."""
        if self._args is None:
            with _parts_lock:  # (by the bytes themselves: no two templates' parts can be mistaken)
                got = _worker_parts.get(self.blob)
                if got is not None:
                    _worker_parts.move_to_end(self.blob)
            if got is None:
                got = cloudpickle.loads(self.blob)
                with _parts_lock:
                    if self.blob not in _worker_parts:
                        _worker_parts[self.blob] = got
                        _worker_bytes[0] += len(self.blob)
                    while _worker_bytes[0] > _WORKER_PARTS_BYTES:
                        _worker_bytes[0] -= len(_worker_parts.popitem(last=False)[0])
            self._args = got
        return self._args


_worker_parts = collections.OrderedDict()  # pickled parts -> the parts, in a process that ran them
_worker_bytes = [0]  # the bytes of the pickled parts it holds
# (a template's fused tasks on a 1,100-chunk dataset: 2.8 MB pickled; a bound by count, 1,024, unpickled
# them again at every step)
_WORKER_PARTS_BYTES = 32 * 2**20
_parts_lock = threading.Lock()


def _run_shipped(parts, *values):
    return _run_fused(*parts.args(), *values)


def shipped(task):
    """A chunk-fused task as it goes to a cluster: its parts pickled once (:class:`ShippedParts`),
    the values it reads still the task's references (renamed by an instance)."""
    if not (type(task) is Task and task.func is _run_fused):
        return task
    return Task(task.key, _run_shipped, ShippedParts.of(task), *task.args[5:], _data_producer=task.data_producer)


def _fused_args(task):
    """``(order, drops, inputs, outputs, names)`` of a chunk-fused task, shipped or not; else None."""
    if not isinstance(task, Task):
        return None
    if task.func is _run_fused:
        return task.args[:5]
    if task.func is _run_shipped:
        return task.args[0].args()
    return None


# fused tasks whose parts cannot run in row blocks, by their parts' names: a task that could but
# shares them only runs whole (slower, never wrong), and nothing of a graph is held here
_whole = set()


def _in_rows(order, names, inputs, values, outputs, seconds):
    """The fused task's result computed over blocks of rows (:mod:`.rows`), or ``None``: not worth
    it, or not possible (then remembered, and the task runs whole)."""
    block = dask.config.get("daskgrad.row-block-bytes", 0)  # (off: see README, "Row blocks")
    if not block:
        return None
    keys = outputs if isinstance(outputs, list) else [outputs]
    try:
        done = rows.run(lambda: _row_parts(order, names), inputs, values, keys, parse_bytes(block), seconds)
    except Exception:  # (rows.Refused, or an error the whole run raises as it should)
        if len(_whole) >= 4096:
            _whole.clear()
        _whole.add((names, len(inputs)))
        if seconds:
            seconds.clear()  # (the first block's, run again whole)
        return None
    if done is None:
        return None
    if seconds:
        for part, spent in seconds.items():
            context_meter.digest_metric(part, spent, "seconds")
    return _Outputs(done[k] for k in outputs) if isinstance(outputs, list) else done[outputs]


def _row_parts(order, names):
    """A fused task's parts as :class:`.rows.Part` s in running order, a subgraph's inner tasks
    included under keys of their own (its output under the subgraph's key)."""
    parts = []
    for node, name in zip(order, names):
        if type(node) is not _Subgraph:
            parts.append(_row_part(node, node.key, name, {}, {}, parts))
            continue
        if any(type(a) is Task for _, a in node.inputs):
            raise rows.Refused  # (an input computed by a task inside it that is not a direct call)
        local = {k: a.key for k, a in node.inputs if isinstance(a, TaskRef)}
        for k, a in node.inputs:  # (a call inside it, a weight's transpose: a part of its own before it)
            if type(a) is _Call:
                parts.append(_row_part(a, (node.key, k), name, {}, {}, parts))
                local[k] = (node.key, k)
        if any(type(e) is List for k, a in node.inputs if type(a) is List for e in a.args):
            raise rows.Refused  # (a list of lists: a reduction's aggregate over several axes)
        for k, a in node.inputs:  # (a call in a list, a weight's transpose among a product's blocks: a part too)
            if type(a) is List:
                items = []
                for j, e in enumerate(a.args):
                    if type(e) is Task:
                        parts.append(_row_part(_Call.of(e), (node.key, k, j), name, {}, {}, parts))
                        items.append((True, (node.key, k, j)))
                    else:
                        items.append((True, e.key))
                local[k] = ("s", list, tuple(items))
        constants = {k: a.value for k, a in node.inputs if not isinstance(a, TaskRef) and type(a) is not List}
        for t, inner_name in zip(node.tasks, node.names):
            key = node.key if t.key == node.outkey else (node.key, t.key)
            parts.append(_row_part(t, key, inner_name, local, constants, parts))
            local[t.key] = key
    return parts


def _row_part(t, key, name, local, constants, parts):
    """``t`` as a :class:`.rows.Part` under ``key``; a call in its arguments (a view of a weight inside
    a chunk's task) a part of its own, added to ``parts`` first."""
    def arg(k):  # what t reads under the name k: a value of the task, a list of them, or a constant
        if k in constants:
            return ("c", constants[k])
        found = local.get(k, k)
        return found if type(found) is tuple and found and found[0] == "s" else ("r", found)

    if type(t) is _Call and any(kind == 2 for _, _, items in t.seqs for kind, _ in items):
        raise rows.Refused  # (tasks inside its lists)
    if type(t) is not _Call:
        if any(arg(d)[0] == "s" for d in t.dependencies):
            raise rows.Refused  # (called on a dict: its lists would need building)
        names = {d: local.get(d, d) for d in t.dependencies if d not in constants}
        return rows.Part(key, name, None, (), {}, tuple(names.values()),
                         call=(t, names, {d: constants[d] for d in t.dependencies if d in constants}))
    args = [("c", a) for a in t.args]
    for i, k in t.refs:
        args[i] = arg(k)
    for i, call in t.calls:
        parts.append(_row_part(call, (key, i), name, local, constants, parts))
        args[i] = ("r", (key, i))
    for i, make, items in t.seqs:
        found = [arg(e) if kind else ("c", e) for kind, e in items]
        if any(a[0] == "s" for a in found):
            raise rows.Refused  # (a list of lists)
        args[i] = ("s", make, tuple((a[0] == "r", a[1]) for a in found))
    kwargs = {k: ("c", v) for k, v in t.kwargs.items()}
    kwargs.update((n, arg(k)) for n, k in t.kwrefs)
    specs = [*args, *kwargs.values()]
    reads = [a[1] for a in specs if a[0] == "r"] + [e for a in specs if a[0] == "s" for ref, e in a[2] if ref]
    return rows.Part(key, name, t.func, tuple(args), kwargs, tuple(reads))


def fused_outputs(task):
    """The keys of the values a chunk-fused task hands on, when it hands on several."""
    args = _fused_args(task)
    if args is not None and type(args[3]) is list:
        return tuple(args[3])  # several values (a single one is the task's own value)
    return ()


def inner_peak(task, size, sizes):
    """The most a chunk-fused task (:func:`_run_fused`) holds inside while it runs: its parts'
    outputs, each from when it is made to its last reader in the task.  0 for other tasks."""
    args = _fused_args(task)
    if args is None:
        return 0
    order, drops = args[0], args[1]
    made, live, peak = {}, 0, 0
    for node, drop in zip(order, drops):
        inputs = [made.get(d, size.get(d, 8)) for d in node.dependencies]
        made[node.key] = sizes.get(node.key, min(inputs, default=8))
        live += made[node.key]
        peak = max(peak, live)
        for d in drop:
            live -= made.get(d, 0)
    return peak
