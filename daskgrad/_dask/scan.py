"""Time loops: a step's recorded program lowered once, and instantiated for every step.

A :class:`Body` is a step's program: Lazy outputs reading the step's inputs through aliases
(:func:`.lazy.alias`), each input with a role: the *carry* (the state, and in a reversal the
adjoint), the step's own data ``x`` (a slice of a per-step array, :func:`step_slices`) and *fixed*
values (the leaves and constants every step reads).  Its template is lowered, optimized and
chunk-fused once per structure; a scan is that template instantiated for every step by renaming
its keys (:meth:`Body.instance`): the client's work per step is a renaming, whatever the step
computes.  What the body computes from fixed values alone is one instance for the whole loop (a
velocity model's padding, ``c ** 2``: computed once, not per step); what it computes from ``x``
alone waits for the step's carry (a dense source term ``x * src`` is ready from the start, and
dask would compute every step's early and hold them).

:func:`forward` runs the steps; :func:`revolve` runs Griewank & Walther's binomial schedule
backwards: the forward sweep keeping snapshots, then each step's reversal (the reverse body, which
recomputes the step from its state and applies its VJP), recomputing from snapshots, each
recomputation waiting for the adjoint where the schedule stands, each reversal's adjoint waiting
for its step's state.  The sweep is the forward's own tasks (the same keys), so a loss and its
gradient submitted together run it once.
"""
from __future__ import annotations

import operator
import threading

import dask
import dask.array as da
from dask.base import tokenize

from .fuse import inputs_first
from .internals import (Alias, GraphNode, HighLevelGraph, MaterializedLayer, Task, TaskRef, array, convert_legacy_task,
                        flatten)
from .lazy import rebind
from .optimize import ScanLayer
from .program import Program, _Chain, _Run, key_token, lowered, make_template

CARRY, X, FIXED = "carry", "x", "fixed"


class _Placeholder:
    """A slot's chunk in a body's template while it is lowered (taken out of the template made)."""

    __slots__ = ()
    nbytes = 0


_PLACEHOLDER = _Placeholder()


def _placeholder_slot(a, name):
    """A slot of ``a``'s chunks and meta whose graph holds a placeholder per chunk (described by the
    program key as a value in memory): what a body's inputs point at while it is keyed and lowered.
    Made once per name, chunks and meta (a step traced anew every step rebinds its inputs each time)."""
    try:  # (not under dask.annotate: a layer made there carries its annotations, for that program only)
        key = None if dask.get_annotations() else (name, a.chunks, a.dtype.str, type(a._meta), a._meta.ndim)
        hit = _placeholders.get(key)
    except TypeError:  # (an unhashable meta type)
        key = hit = None
    if hit is None:
        layer = MaterializedLayer({k: _PLACEHOLDER for k in _keys(name, a.chunks)})
        hit = array(HighLevelGraph({name: layer}, {name: set()}), name, a.chunks, a._meta)
        if key is not None:
            if len(_placeholders) >= 1024:
                _placeholders.clear()
            _placeholders[key] = hit
    return hit


_placeholders = {}  # (name, chunks, dtype, meta type, ndim) -> a placeholder slot (never changed once made)


def row_placeholder(xs):
    """A placeholder slot of one row of the per-step array ``xs`` (its chunks and meta without the first axis)."""
    from dask.array.utils import meta_from_array

    meta = meta_from_array(xs._meta, ndim=xs.ndim - 1)
    row = da.Array(HighLevelGraph({}, {}), "row", xs.chunks[1:], meta=meta)
    return _placeholder_slot(row, f"row-{tokenize(xs.chunks)}")


def _keys(name, chunks):
    import itertools

    return [(name,) + idx for idx in itertools.product(*(range(len(c)) for c in chunks))]


class Body:
    """A step's recorded program: Lazy ``outputs`` reading ``inputs`` (aliases), each input with a
    role in ``roles`` (:data:`CARRY`, :data:`X` or :data:`FIXED`).  Equal bodies (one structure,
    traced anew each call of a time loop) share one template."""

    def __init__(self, outputs, inputs, roles):
        self.outputs, self.inputs, self.roles = tuple(outputs), tuple(inputs), tuple(roles)
        self._names = [f"scan-in{j}" for j in range(len(inputs))]
        for a, name in zip(inputs, self._names):
            rebind(a, _placeholder_slot(a, name))
        prog = Program.of(self.outputs)
        canonical = set(self._names)
        # values the body made itself (a kernel's array): slots the template reads as they are
        self.constants = tuple(a for n, a in prog.slots.items() if n not in canonical)
        # the template holds the constants' values (every step reads them as they are): keyed by which
        # values they are (their names), and where they are (a value of a closed client is no other's)
        held = tuple((a.name, type(next(iter(a.dask.layers[a.name].values()), None)).__name__)
                     if a.name in a.dask.layers else (a.name,) for a in self.constants)
        # the program's key numbers its slots by first use: which input each is, is the body's too (two
        # steps reading (b, a) and (a, b) alike were one body, and one gave the other's values)
        order = tuple(n for n in prog.slots if n in canonical)
        self.key = None if prog.key is None else (prog.key, order, self.roles, held)
        self._prog = prog

    def __hash__(self):
        return hash(self.key) if self.key is not None else id(self)

    def __eq__(self, other):
        if not isinstance(other, Body):
            return NotImplemented
        return self is other or (self.key is not None and self.key == other.key)

    @property
    def out_avals(self):
        return tuple((o.dtype, o._meta, o.chunks) for o in self.outputs)

    def template(self):
        """The body lowered, optimized and fused once (per structure): ``_BodyTemplate``."""
        if self.key is not None:
            with _lock:
                hit = _bodies.get(self.key)
            if hit is not None:
                return hit
        for a, name in zip(self.inputs, self._names):
            rebind(a, _placeholder_slot(a, name))
        optimized = lowered(self._prog, lambda a: a.name, None)
        canonical = set(self._names)
        # values the body made itself (a constant's chunks): slots whose values every step reads as they are
        # (not dask's legacy tasks and aliases, tuples where chunks are not fused: a reduction's aggregate is
        # a task of every step, which make_template converts; as a value, each step read the tuple itself)
        data = {}
        graph = dict(optimized[0].__dask_graph__())
        for k, v in graph.items():
            name = k[0] if isinstance(k, tuple) else k
            if name not in canonical and not isinstance(v, GraphNode) and not (
                    type(v) is tuple and isinstance(convert_legacy_task(k, v, graph), GraphNode)):
                data.setdefault(name, {})[k] = v
        tmpl = make_template(optimized, self._names + list(data))
        if tmpl is None:
            raise RuntimeError("a time step's graph holds a value daskgrad cannot instantiate for every step")
        made = _BodyTemplate(tmpl, self.roles, len(self._names), data)
        if self.key is not None:
            with _lock:
                _bodies[self.key] = made
                while len(_bodies) > 32:
                    _bodies.pop(next(iter(_bodies)))
        return made


_lock = threading.Lock()
_bodies = {}  # body key -> _BodyTemplate (a few time loops' steps)


class _BodyTemplate:
    """A body's template, with what varies per task: ``kind[k]`` is 0 for a task of fixed values only
    (one instance for the whole loop), 1 for one of the step's ``x`` but not its carry (it waits for
    the carry), 2 for one reading the carry."""

    def __init__(self, template, roles, n_inputs, data):
        self.template, self.roles, self.n_inputs = template, roles, n_inputs
        self.data = data  # name -> layer: the body's own values in memory (slots after the inputs)
        graph = template.graph
        kind = {}
        for j, keys in enumerate(template.slots):
            role = roles[j] if j < n_inputs else FIXED
            for k in keys:
                kind[k] = 2 if role == CARRY else 1 if role == X else 0
        order = inputs_first(graph, {k: t.dependencies if t is not None else () for k, t in graph.items()})
        for k in order:
            t = graph[k]
            if t is not None:
                kind[k] = max((kind.get(d, 0) for d in t.dependencies), default=0)
        self.kind = kind
        self.order = [k for k in order if graph[k] is not None]
        self.out_keys = [_out_keys(template, name) for name in template.outputs]
        self.runs = {k: _Run(graph[k]) for k in self.order}
        if template.small:  # (each task's scheduling costs more than a small chunk's work)
            self.order, self.runs = _chained(graph, self.order, self.runs, kind, self.out_keys)
        self.token = key_token(template.name)
        self.n_slots = n_inputs
        self.waits = any(kind[k] == 1 for k in self.order)  # x-only tasks: each step's wait for its carry

    def instance(self, tasks, inputs, token, fixed_token, gate=None, hoist=True):
        """Add the tasks of one step to ``tasks``: ``inputs`` the keys of each input slot (a list of
        chunk keys per input, in slot order), ``token`` this step's, ``fixed_token`` the loop's (the
        fixed values' tasks, made once); ``gate``: a key the step's ``x``-only tasks wait for;
        ``hoist=False``: the body is this step's only (one per step), so what it makes from fixed
        values is this step's too, and waits.  Returns the keys of each output (a list of chunk keys
        each)."""
        t = self.template
        subs = {}
        for keys, actual in zip(t.slots, inputs):
            by_index = {a[1:]: a for a in actual}  # (a template lists a slot's keys in its graph's order)
            for k in keys:
                subs[k] = by_index[k[1:]]
        for keys, layer in zip(t.slots[self.n_inputs:], self.data.values()):
            for k in keys:
                subs[k] = k
                if k not in tasks:
                    tasks[k] = layer[k]
        kind = self.kind
        if not hoist:  # a body of this step only: what it makes from fixed values is this step's, and waits
            kind = {k: v or 1 for k, v in kind.items()}
        for k in self.order:
            tok = token if kind[k] else fixed_token
            subs[k] = (f"{k[0]}-{tok}",) + k[1:] if isinstance(k, tuple) else f"{k}-{tok}"
        runs = self.runs
        for k in self.order:
            new = subs[k]
            if not kind[k] and new in tasks:  # made once for the loop
                continue
            run = runs[k]
            refs = [TaskRef(subs[d]) for d in run.deps]
            if kind[k] == 1 and gate is not None:  # it would be ready from the start: it waits for the step
                refs.append(TaskRef(gate))
            tasks[new] = Task(new, run, *refs)
        return [[subs[k] for k in keys] for keys in self.out_keys]


def _chained(graph, order, runs, kind, out_keys):
    """A small body's tasks as fewer: each task that one task of the step reads, and nothing else (not an
    output of the body, nor a task made once for the loop: ``kind`` 0), runs inside its reader's task
    (:class:`.program._Chain`), as a chunk-fused task runs its parts: a halo's one-cell strips, a
    fused VJP's ``getitem`` s.  Each step then runs a task per chunk of its outputs, about (a 1-D
    stencil's step on 4 chunks: 4 tasks, not 12; its reversal 16, not 42).  (Folding a task into its
    only reader makes no cycle: no other path joins them.)  Returns the order of the tasks left and
    their runs."""
    outs = {k for keys in out_keys for k in keys}
    readers = {}
    for k in order:
        for d in graph[k].dependencies:
            readers.setdefault(d, []).append(k)
    into = {}
    for k in order:
        r = readers.get(k, ())
        if k not in outs and len(r) == 1 and kind[k] and kind[r[0]] == kind[k]:
            into[k] = r[0]
    if not into:
        return order, runs
    members = {}
    for k in order:  # (a topological order: each chain's members in it run after what they read)
        root = k
        while root in into:
            root = into[root]
        members.setdefault(root, []).append(k)
    left = [k for k in order if k not in into]
    return left, {k: runs[k] if len(members[k]) == 1 else _Chain([runs[m] for m in members[k]]) for k in left}


def _out_keys(template, name):
    """The keys of output ``name`` of ``template`` (its chunks, in order)."""
    return sorted((k for k in template.graph if isinstance(k, tuple) and k[0] == name), key=lambda k: k[1:])


def _first(value, *_):
    return value


def _nothing(*_):
    return None


# ------------------------------------------------------------------ per-step data
def step_slices(tasks, xs, k, token):
    """The keys of ``xs[k]`` (a per-step array, steps along its first axis), one getitem task per
    chunk, added to ``tasks`` once."""
    import bisect
    import itertools

    starts = [0]
    for c in xs.chunks[0]:
        starts.append(starts[-1] + c)
    b = bisect.bisect_right(starts, k) - 1
    name = f"{xs.name}-row{k}"
    out = []
    for idx in itertools.product(*(range(len(c)) for c in xs.chunks[1:])):
        key = (name,) + idx
        if key not in tasks:
            tasks[key] = Task(key, operator.getitem, TaskRef((xs.name, b) + idx), k - starts[b])
        out.append(key)
    return out


def _chunk_keys(a):
    return list(flatten(a.__dask_keys__()))


def _arrays(tasks, names_keys, avals, inputs, name, small=False):
    """Dask arrays over ``tasks`` (one layer) for outputs ``names_keys`` (chunk keys of each): each
    output a layer of its own under a name of its own, its chunks aliases of the keys it has in the
    loop (which later steps of the loop may read)."""
    import itertools

    token = tokenize(*[ks[0] for ks in names_keys])
    main = f"{name}-{token}"
    layers = {main: ScanLayer(tasks, small=small, reads=frozenset(k for a in inputs for k in _chunk_keys(a)))}
    deps = {main: {a.name for a in inputs}}
    out = []
    for j, (keys, (dtype, meta, chunks)) in enumerate(zip(names_keys, avals)):
        oname = f"{name}-out{j}-{token}"
        idx = list(itertools.product(*(range(len(c)) for c in chunks)))
        layers[oname] = MaterializedLayer({(oname,) + i: Alias((oname,) + i, k) for i, k in zip(idx, keys)})
        deps[oname] = {main} | {k[0] if isinstance(k, tuple) else k for k in keys if k not in tasks}
        out.append(oname)
    for a in inputs:
        for n, layer in a.dask.layers.items():
            layers.setdefault(n, layer)
            deps.setdefault(n, set(a.dask.dependencies.get(n, ())))
    hlg = HighLevelGraph(layers, deps)
    return [array(hlg, oname, chunks, meta) for oname, (dtype, meta, chunks) in zip(out, avals)]


# ------------------------------------------------------------------ the loops
def forward(*arrays, bodies, steps, n_carry, xs_at=(), fixed_at=None, ys_blocks=None):
    """The carry after ``steps`` steps from ``arrays[:n_carry]``, then each per-step output stacked
    (``ys_blocks``: steps per block of the stacked axis): step ``k`` runs ``bodies[k]`` (one body for
    all steps when there is one), whose outputs are the carry, then its per-step outputs, reading
    row ``k`` of each ``arrays[j]``, ``j`` in ``xs_at``, as its ``x`` and the fixed values ``arrays[j]``
    for ``j`` in its ``fixed_at`` (all the rest, in order, by default)."""
    loop = _Loop(arrays, bodies, n_carry, xs_at, fixed_at)
    carry, ys = [_chunk_keys(a) for a in arrays[:n_carry]], {}
    for k in range(steps):
        outs = loop.advance(carry, k)
        carry, ys[k] = outs[:n_carry], outs[n_carry:]
    avals = list(bodies[0].out_avals[:n_carry])
    outs = list(carry)
    for j, (dtype, meta, chunks) in enumerate(bodies[0].out_avals[n_carry:]):
        outs.append(_stacked(loop.tasks, {k: ys[k][j] for k in ys}, ys_blocks, chunks, f"ys{j}-{loop.token}"))
        avals.append((dtype, _stacked_meta(meta), (ys_blocks,) + chunks))
    return _arrays(loop.tasks, outs, avals, arrays, "scan", loop.small)


def _stacked_meta(meta):
    from dask.array.utils import meta_from_array

    return meta_from_array(meta, ndim=meta.ndim + 1)


class _Loop:
    """The tasks of one time loop, made step by step (see :func:`forward`)."""

    def __init__(self, arrays, bodies, n_carry, xs_at, fixed_at):
        self.tasks, self.n_carry, self.bodies = {}, n_carry, bodies
        self.templates = [b.template() for b in bodies]
        xs_at = xs_at or ()
        self.xs = [arrays[j] for j in xs_at]  # the per-step arrays: step k reads row k of each
        rest = [j for j in range(n_carry, len(arrays)) if j not in xs_at]
        self.fixed_at = fixed_at or (tuple(range(len(rest))),) * len(bodies)
        self.fixed = [_chunk_keys(arrays[j]) for j in rest]
        self.token = tokenize([t.token for t in self.templates], [arrays[j].name for j in rest])
        self.small = all(t.template.small for t in self.templates)

    def body(self, k):
        return self.templates[k if len(self.templates) > 1 else 0]

    def inputs(self, tmpl, k, carry, x):
        """The keys of step ``k``'s inputs in ``tmpl``'s order: the carry's, ``x``'s, the fixed values'
        (a reverse body's adjoint inputs, which come last, are the caller's)."""
        fixed = [self.fixed[j] for j in self.fixed_at[k if len(self.fixed_at) > 1 else 0]]
        it_c, it_x, it_f = iter(carry), iter(x), iter(fixed)
        count = self.n_carry + len(self.xs) + len(fixed)
        return [next(it_c) if r == CARRY else next(it_x) if r == X else next(it_f) for r in tmpl.roles[:count]]

    def x(self, k):
        """The keys of row ``k`` of each per-step array."""
        return [step_slices(self.tasks, xs, k, self.token) for xs in self.xs]

    @property
    def hoist(self):
        """Whether what a body makes from fixed values alone is made once for the loop (one body for
        every step), not per step."""
        return len(self.templates) == 1

    def gate(self, tmpl, carry, token):
        """The key a step's tasks that read no carry wait for (None if it has none)."""
        return _gate(self.tasks, carry, token) if tmpl.waits or not self.hoist else None

    def advance(self, carry, k):
        """Step ``k`` from ``carry``: its output keys."""
        tmpl = self.body(k)
        token = tokenize(tmpl.token, k, _firsts(carry), self.token)
        return tmpl.instance(self.tasks, self.inputs(tmpl, k, carry, self.x(k)), token, self.token,
                             self.gate(tmpl, carry, token), self.hoist)


def _firsts(keys):
    """The first chunk key of each of a state's components: what names a step's tasks.  Every
    component's, not the first's alone: a component a step makes from fixed values only (``w * 1.0``)
    has one key for every step.  (A recomputation is named by its place in the schedule too: a state
    all made from fixed values is one state at every step, and two recomputations from it had one
    gate, each waiting for the other's adjoint, a cycle.)"""
    return tuple(ks[0] for ks in keys if ks)


def _gate(tasks, keys, token):
    """A task that exists once every chunk of ``keys`` (lists of chunk keys) does."""
    gate = f"gate-{token}"
    tasks[gate] = Task(gate, _nothing, *[TaskRef(k) for ks in keys for k in ks])
    return gate


def _waiting(tasks, keys, gate, token):
    """``keys`` (lists of chunk keys) read under new keys that wait for ``gate``."""
    out = []
    for j, ks in enumerate(keys):
        row = []
        for k in ks:
            new = (f"wait{j}-{token}",) + (k[1:] if isinstance(k, tuple) else ())
            tasks[new] = Task(new, _first, TaskRef(k), TaskRef(gate))
            row.append(new)
        out.append(row)
    return out


def revolve(*arrays, fwd, rev, actions, steps, n_carry, n_leaves, xs_at=(), x_grad=False, fixed_at=None,
            n_ys=0):
    """The adjoints of the initial carry and the gradients of the leaves (fixed values that require
    grad), from the adjoint of the final carry and of the stacked per-step outputs: Revolve's
    ``actions`` over ``steps`` steps of the bodies ``fwd``, each step reversed by its body of ``rev``
    (inputs: the forward body's, then the carry's adjoint, then the step's rows of the per-step
    outputs' adjoints; outputs: the carry's adjoint, the leaves' gradients, then ``x``'s gradient if
    ``x_grad``).  ``arrays``: the forward's (see :func:`forward`), then the final carry's adjoint,
    then the ``n_ys`` stacked adjoints."""
    n = len(arrays) - n_carry - n_ys
    inputs = arrays[:n]
    loop = _Loop(inputs, fwd, n_carry, xs_at, fixed_at)
    back = _Loop(inputs, rev, n_carry, xs_at, fixed_at)
    adjoint = [_chunk_keys(a) for a in arrays[n:n + n_carry]]
    dys = arrays[n + n_carry:]
    tasks = back.tasks = loop.tasks
    snaps, cur, fresh = {}, [_chunk_keys(a) for a in inputs[:n_carry]], False
    state0 = cur
    totals, dxs = None, {}
    for at, a in enumerate(actions):
        kind = type(a).__name__
        if kind == "Takeshot":
            snaps[a.index] = state0 if a.index == 0 else cur
            continue
        if kind == "Restore":
            cur, fresh = snaps[a.index], True
            continue
        if fresh:  # a recomputation starts: it waits for the backward to have passed this point
            token = tokenize("recompute", back.token, at, _firsts(cur), _firsts(adjoint))
            gate = _gate(tasks, adjoint + (totals or []), token)
            cur, fresh = _waiting(tasks, cur, gate, token), False
        if kind == "Advance":
            for k in range(a.start, a.stop):
                cur = loop.advance(cur, k)[:n_carry]
            continue
        k = a.index  # a reversal of step k (the first one from the sweep's last state)
        tmpl = back.body(k)
        token = tokenize(tmpl.token, k, _firsts(cur), _firsts(adjoint), back.token)
        waited = _after_state(tasks, adjoint, cur, token)
        rows = [step_slices(tasks, dy, k, back.token) for dy in dys]
        outs = tmpl.instance(tasks, back.inputs(tmpl, k, cur, back.x(k)) + waited + rows, token, back.token,
                             back.gate(tmpl, cur, token), back.hoist)
        adjoint, got = outs[:n_carry], outs[n_carry:]
        if x_grad:
            dxs[k] = got[n_leaves:]
        leaves = got[:n_leaves]
        totals = leaves if totals is None else _summed(tasks, totals, leaves, token)
    outs = adjoint + (totals or [])
    avals = list(rev[0].out_avals[:n_carry + n_leaves])
    for j, xs in enumerate(loop.xs if x_grad else ()):
        outs.append(_stacked(tasks, {k: g[j] for k, g in dxs.items()}, xs.chunks[0], xs.chunks[1:],
                             f"dxs{j}-{back.token}"))
        avals.append((xs.dtype, xs._meta, xs.chunks))
    return _arrays(tasks, outs, avals, arrays, "revolve", loop.small and back.small)


def _after_state(tasks, adjoint, state, token):
    """The adjoint entering a step's reversal, under keys that wait for the step's state (a linear
    step's adjoint reads no state: workers would run it ahead and hold it): each chunk for the same
    chunk of every component where they line up, for all of them otherwise."""
    out = []
    aligned = all(len(s) == len(adjoint[0]) for s in state) and all(len(a) == len(adjoint[0]) for a in adjoint)
    gate = None if aligned else _gate(tasks, state, token)
    for j, ks in enumerate(adjoint):
        row = []
        for i, k in enumerate(ks):
            new = (f"adjoint{j}-{token}",) + (k[1:] if isinstance(k, tuple) else ())
            deps = [TaskRef(s[i]) for s in state] if aligned else [TaskRef(gate)]
            tasks[new] = Task(new, _first, TaskRef(k), *deps)
            row.append(new)
        out.append(row)
    return out


def _summed(tasks, totals, new, token):
    out = []
    for j, (ts, ns) in enumerate(zip(totals, new)):
        row = []
        for t, n in zip(ts, ns):
            key = (f"total{j}-{token}",) + (t[1:] if isinstance(t, tuple) else ())
            tasks[key] = Task(key, operator.add, TaskRef(t), TaskRef(n))
            row.append(key)
        out.append(row)
    return out


def _stacked(tasks, rows, blocks, chunks, name):
    """The per-step arrays ``rows[k]`` (chunk keys of each step's) stacked along a new first axis
    split in ``blocks`` (steps per block), as chunks of ``(blocks,) + chunks``: their keys."""
    import itertools

    out, start = [], 0
    for b, c in enumerate(blocks):
        for i, idx in enumerate(itertools.product(*(range(len(cc)) for cc in chunks))):
            key = (name, b) + idx
            tasks[key] = Task(key, _stack, *[TaskRef(rows[k][i]) for k in range(start, start + c)])
            out.append(key)
        start += c
    return out


def _stack(*rows):
    import numpy as np

    return np.stack(rows)  # (NumPy's dispatch hands cupy rows to cupy)
