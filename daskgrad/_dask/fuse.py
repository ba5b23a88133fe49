"""Chunk fusion: after Blockwise fusion, the tasks of one chunk run as one task.

A reverse graph reads each forward chunk twice (the forward ``X_i @ w`` and the VJP ``X_i.T @ g_i``),
and Blockwise fusion stops where a value has two readers.  :func:`fuse_chunks` merges the tasks of
one chunk into one task that reads the chunk once and frees its temporaries inside, while chunks
stay separate tasks and reductions stay trees.  Called by :func:`.optimize.optimize` on every
submission (config ``daskgrad.fuse-chunks``, default on).
"""
from __future__ import annotations

import hashlib
import operator

from dask.base import tokenize
from dask.utils import key_split

from .internals import (Alias, DataNode, GraphNode, HighLevelGraph, MaterializedLayer, Task, TaskRef,
                        _execute_subgraph, _fuse_annotations, convert_legacy_task)

FUSE_WIDTH = 8  # a value read by more tasks than this is shared (a parameter), never a chunk's own
_REACH_CAP = 32  # groups tracked upstream of a task; beyond it, treat every group as upstream


def fuse_chunks(hlg, keys, name):
    """Sibling fusion of the low-level tasks of one chunk, after Blockwise fusion.

    Blockwise fusion stops where a value has two readers: the forward ``X_i @ w`` and the VJP
    ``X_i.T @ g_i`` both read chunk ``X_i``, so each chunk of X is read by two tasks and the
    intermediates are stored between them.  Here a task joins the group of the tasks it reads
    "chunk-aligned" (one value of a layer for one task of a layer, read by at most
    ``FUSE_WIDTH`` tasks), and tasks reading the same aligned input chunk are grouped, so a
    chunk's forward and its VJP run as one task that reads the chunk once and frees its
    temporaries inside.  What is read by several tasks of one layer (a parameter every chunk
    reads) or reads several tasks of one layer from different groups (a reduction) is a
    boundary: chunks stay separate tasks and reductions stay trees.

    A group is one task returning the values the rest of the graph reads; those keys stay
    available (``getitem`` tasks, or inlined into the reductions that read them), requested keys
    always as tasks.  Groups never form a cycle (a task joins a group only if none of its other
    inputs depends on that group), carry the annotations of their parts (GPU ``resources``), and
    are named by a token of their parts, so the same graph fuses to the same keys every time.
    """

    raw, layer_of, annotated = {}, {}, {}
    for name, layer in hlg.layers.items():
        if layer.annotations:
            annotated[name] = layer.annotations
        for k, v in layer.items():
            raw[k] = v
            layer_of[k] = name
    nodes, deps = {}, {}
    for k, v in raw.items():
        node = v if isinstance(v, GraphNode) else convert_legacy_task(k, v, raw)
        if isinstance(node, Task) or isinstance(node, Alias) and node.target != k:
            nodes[k] = node
            deps[k] = node.dependencies
    if not nodes:
        return hlg
    readers = {}  # in graph order, whatever the order of a task's inputs: the same groups every run
    for k, ds in deps.items():
        for d in ds:
            readers.setdefault(d, []).append(k)

    def layer(k):
        return layer_of.get(k) or (k[0] if isinstance(k, tuple) else k)

    shared = set()  # values read by many tasks, or by several tasks of one layer
    for d, rs in readers.items():
        if len(rs) > FUSE_WIDTH or len({layer(r) for r in rs}) < len(rs):
            shared.add(d)

    parent, members, outside, notes, closed = [], [], [], [], []

    def find(g):
        while parent[g] != g:
            parent[g] = parent[parent[g]]
            g = parent[g]
        return g

    def new_group(k, note, can_join=True):
        parent.append(len(parent))
        members.append([k])
        outside.append([])
        notes.append(note)
        closed.append(not can_join)
        return len(parent) - 1

    # A value the submission keeps and other tasks read stays a task of its own, read like data
    # in memory: fused, it would be held twice (in the group's result and under its own key).
    requested = set(keys)
    kept = {k for k in requested if k in readers}
    group, anchor, reach, position = {}, {}, {}, {}
    gathers = {}  # task -> the layers it reads several chunks of (a reduction's or a rechunk's)
    for k in _toposort_keys(deps, nodes, readers):
        position[k] = len(position)
        node = nodes[k]
        r = frozenset()
        for d in deps[k]:
            if d in group:
                rd = reach[d]
                if rd is None or r is None:
                    r = None
                    continue
                g = group[d]
                if g not in rd:
                    rd = rd | {g}
                r = rd if not r else r | rd
                if len(r) > _REACH_CAP:
                    r = None
        reach[k] = r
        note = annotated.get(layer(k))
        if k in kept or node.block_fusion or note is not None and any(callable(v) for v in note.values()):
            group[k] = new_group(k, note, can_join=False)
            continue
        per_layer = {}
        for d in deps[k]:
            per_layer.setdefault(layer(d), []).append(d)
        cand, external, sources, reduction = set(), [], [], False
        for dl, ds in per_layer.items():
            if len(ds) > 1:
                gathers.setdefault(k, set()).add(dl)
                gs = {find(group[d]) if d in group else None for d in ds}
                if len(gs) > 1 or None in gs:
                    reduction = True
                    external += [d for d in ds if d in group]
                    continue
            for d in ds:
                if d in group:
                    g = find(group[d])
                    if d in shared or closed[g] or notes[g] != note and not _annotations_fuse(notes[g], note):
                        external.append(d)
                    else:
                        cand.add(g)
                    if d not in kept:
                        continue
                if d not in shared:
                    sources.append(d)
                    if d in anchor:
                        g = find(anchor[d])
                        if notes[g] == note or _annotations_fuse(notes[g], note):
                            cand.add(g)
        target = None
        if cand and not reduction:
            union = set(cand)
            # the groups' own outside inputs were checked against each group alone when they joined
            checks = external + [y for g in cand for y in outside[g]] if len(cand) > 1 else external
            if all(not _upstream_of(reach[y], union, find) for y in checks if find(group[y]) not in union):
                target = min(cand)
                for g in cand:
                    if g != target:
                        parent[g] = target
                        members[target] += members[g]
                        outside[target] += outside[g]
                        notes[target] = _merge_annotations(notes[target], notes[g])
                        members[g] = outside[g] = None
                members[target].append(k)
                outside[target] += [y for y in external if reach[y] is None or reach[y]]
                notes[target] = _merge_annotations(notes[target], note)
        if target is None:
            target = new_group(k, note)
            outside[target] += [y for y in external if reach[y] is None or reach[y]]
        group[k] = target
        if not reduction:
            for d in sources:
                anchor.setdefault(d, target)

    for g in _groups_on_cycles(deps, group, find, members):
        for m in members[g]:
            group[m] = new_group(m, None, can_join=False)
        members[g] = None
    groups = [(sorted(ms, key=position.__getitem__), notes[g]) for g, ms in enumerate(members)
              if ms is not None and len(ms) > 1]
    if not groups:
        return hlg
    return _build_fused(hlg, raw, nodes, readers, layer_of, groups, requested, shared, gathers, name)


def _groups_on_cycles(deps, group, find, members):
    """The groups that lie on a cycle of the graph of groups (each then stays unfused).

    The check while grouping follows the tasks' own inputs; a group can still come to depend on
    itself through another group when two unrelated parts of it each meet that other group
    (a rechunk's split and merge can do this), so the graph of groups is checked once here."""
    succ, indegree = {}, {}
    for k, ds in deps.items():
        gk = find(group[k])
        indegree.setdefault(gk, 0)
        for d in ds:
            if d in group:
                gd = find(group[d])
                if gd != gk:
                    succ.setdefault(gd, []).append(gk)
                    indegree[gk] += 1
    ready = [g for g, n in indegree.items() if n == 0]
    done = 0
    while ready:
        g = ready.pop()
        done += 1
        for h in succ.get(g, ()):
            indegree[h] -= 1
            if indegree[h] == 0:
                ready.append(h)
    if done == len(indegree):
        return []
    left = {g for g, n in indegree.items() if n > 0}
    return [g for comp in _strong_components(left, succ) if len(comp) > 1 for g in comp
            if members[g] is not None and len(members[g]) > 1]


def _strong_components(vertices, succ):
    """Tarjan's strongly connected components of the subgraph on ``vertices``, without recursion."""
    index, low, on_stack, stack, comps = {}, {}, set(), [], []
    for root in vertices:
        if root in index:
            continue
        work = [(root, iter([h for h in succ.get(root, ()) if h in vertices]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter([h for h in succ.get(w, ()) if h in vertices])))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    comps.append(comp)
    return comps


def _upstream_of(r, union, find):
    """Whether a task with upstream groups ``r`` depends on one of the groups in ``union``."""
    return r is None or any(find(g) in union for g in r)


def _annotations_fuse(a, b):
    if a == b:
        return True
    fusable = {"retries", "priority", "resources"}
    return all(k in fusable for k in (a or {})) and all(k in fusable for k in (b or {}))


def _merge_annotations(a, b):
    if a == b or not b:
        return a
    if not a:
        return b

    return _fuse_annotations(a, b)


def _toposort_keys(deps, nodes, readers):
    """The tasks of ``nodes`` in an order where a task comes after all the tasks it reads."""
    waiting = {k: len(ds) if ds <= nodes.keys() else sum(1 for d in ds if d in nodes) for k, ds in deps.items()}
    ready = [k for k, n in waiting.items() if n == 0]
    ready.reverse()
    while ready:
        k = ready.pop()
        yield k
        for r in readers.get(k, ()):
            waiting[r] -= 1
            if waiting[r] == 0:
                ready.append(r)


class _Outputs(tuple):
    """The values a fused task hands on; ``nbytes`` for the memory trackers that ask a result."""

    @property
    def nbytes(self):
        return sum(int(getattr(v, "nbytes", 0) or 0) for v in self)


_inner_observer = None  # replay.PeakTracker's: told the most bytes a fused task held inside


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

    __slots__ = ("key", "dependencies", "data_producer", "tasks", "outkey", "inputs", "drops")

    def __init__(self, node):
        inner, self.outkey, inkeys = node.args[:3]
        self.key, self.dependencies, self.data_producer = node.key, node.dependencies, node.data_producer
        self.inputs = tuple(zip(inkeys, node.args[3:]))
        order, seen, stack = [], set(), [(self.outkey, False)]  # depth-first post-order from the output
        while stack:
            k, done = stack.pop()
            if done:
                order.append(inner[k])
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

    @staticmethod
    def applies(node):

        return (isinstance(node, Task) and node.func is _execute_subgraph and not node.kwargs
                and all(isinstance(a, (TaskRef, DataNode)) for a in node.args[3:])
                and all(isinstance(t, (Task, Alias)) for t in node.args[0].values()))

    def __call__(self, cache):

        local = {k: cache[a.key] if isinstance(a, TaskRef) else a.value for k, a in self.inputs}
        for t, drop in zip(self.tasks, self.drops):
            local[t.key] = t(local)
            for d in drop:
                local.pop(d, None)
        return local[self.outkey]

    def __reduce__(self):
        return (_Subgraph._restore, (self.key, self.dependencies, self.data_producer, self.tasks, self.outkey,
                                     self.inputs, self.drops))

    @staticmethod
    def _restore(*state):
        new = object.__new__(_Subgraph)
        for name, value in zip(_Subgraph.__slots__, state):
            setattr(new, name, value)
        return new


def _run_fused(order, drops, inputs, outputs, *values):
    """Run a fused group: its tasks in ``order``, each temporary dropped after its last reader."""
    cache = dict(zip(inputs, values))
    observe, live, peak = _inner_observer, 0, 0
    for node, drop in zip(order, drops):
        cache[node.key] = value = node(cache)
        if observe is not None:
            live += int(getattr(value, "nbytes", 0) or 0)
            peak = max(peak, live)
        for k in drop:
            if observe is not None:
                live -= int(getattr(cache[k], "nbytes", 0) or 0)
            del cache[k]
    if observe is not None:
        observe(peak)
    if isinstance(outputs, list):
        return _Outputs(cache[k] for k in outputs)
    return cache[outputs]


def fused_outputs(task):
    """The keys of the values a chunk-fused task hands on, when it hands on several."""
    if isinstance(task, Task) and task.func is _run_fused and task.args[3] != task.key:
        return tuple(task.args[3])  # several values (a single one is the task's own key)
    return ()


def inner_peak(task, size, sizes):
    """The most a chunk-fused task (:func:`_run_fused`) holds inside while it runs: its parts'
    outputs, each from when it is made to its last reader in the task.  0 for other tasks."""
    if not (isinstance(task, Task) and task.func is _run_fused):
        return 0
    order, drops = task.args[0], task.args[1]
    made, live, peak = {}, 0, 0
    for node, drop in zip(order, drops):
        inputs = [made.get(d, size.get(d, 8)) for d in node.dependencies]
        made[node.key] = sizes.get(node.key, min(inputs, default=8))
        live += made[node.key]
        peak = max(peak, live)
        for d in drop:
            live -= made.get(d, 0)
    return peak


def _build_fused(hlg, raw, nodes, readers, layer_of, groups, requested, shared, gathers, name):


    out = {k: nodes.get(k, v) for k, v in raw.items()}  # converted once here, not again downstream
    notes = {k: layer.annotations for k, layer in hlg.layers.items() if layer.annotations}
    note_of = {k: notes[n] for k, n in layer_of.items() if n in notes} if notes else {}
    substitutions, built = {}, []
    for ms, note in groups:
        inside = set(ms)
        # (a task nobody reads, left by a cull that keeps whole blocks, stays a key as well)
        exports = [m for m in ms if m in requested or m not in readers
                   or any(r not in inside for r in readers[m])]
        exports.sort(key=repr)
        if len(exports) == 1:
            fkey = exports[0]
        else:  # named after its last VJP rule's task, or its last task: "mm-vjp-fused" on the dashboard
            token = hashlib.md5(repr((sorted(map(repr, ms)), exports)).encode()).hexdigest()
            prefixes = [key_split(m) for m in ms]
            i = max((i for i, p in enumerate(prefixes) if p.endswith("-vjp")), default=len(ms) - 1)
            last = ms[i]
            fkey = (f"{prefixes[i]}-fused-{token}",) + (tuple(last[1:]) if isinstance(last, tuple) else ())
        # The values handed on are getitem tasks: they run right after the group, which then
        # dies, so a value is held once and only as long as before.  Where every value goes to a
        # reduction across chunks (a partial sum of a gradient) and none is kept, the getitem is
        # inlined into the reduction instead, saving a task per value (the values are small).
        inline = len(exports) > 1 and all(
            e not in requested and all(isinstance(nodes.get(r), Task)
                                       and (e in shared or layer_of.get(e) in gathers.get(r, ()))
                                       for r in readers.get(e, ()) if r not in inside)
            for e in exports)
        for m in ms:
            if m != fkey:
                del out[m]
        for i, e in enumerate(exports if len(exports) > 1 else ()):
            if inline and e not in requested:
                ref = Task(None, operator.getitem, TaskRef(fkey), i)
                for r in readers.get(e, ()):
                    if r not in inside:
                        substitutions.setdefault(r, {})[e] = ref
            else:
                out[e] = Task(e, operator.getitem, TaskRef(fkey), i)
        built.append((fkey, ms, exports))
        if note:
            note_of[fkey] = note
        elif fkey in note_of:
            del note_of[fkey]
    fused = {m for ms, _ in groups for m in ms}
    for r, subs in substitutions.items():
        nodes[r] = nodes[r].substitute(subs)
        if r not in fused:
            out[r] = nodes[r]
    for fkey, ms, exports in built:
        order = [_Subgraph(nodes[m]) if _Subgraph.applies(nodes[m]) else nodes[m] for m in ms]
        inside = {t.key for t in order}
        inputs, seen, last_read = [], set(), {}
        for i, t in enumerate(order):
            for d in t.dependencies:
                if d in inside:
                    last_read[d] = i
                elif d not in seen:
                    seen.add(d)
                    inputs.append(d)
        drops = [[] for _ in order]
        for d, i in last_read.items():
            if d not in exports:
                drops[i].append(d)
        order = tuple(order)
        outputs = list(exports) if len(exports) > 1 else exports[0]
        out[fkey] = Task(fkey, _run_fused, order, tuple(map(tuple, drops)), tuple(inputs), outputs,
                         *(TaskRef(d) for d in inputs),
                         _data_producer=any(n.data_producer for n in order))
    # The layers are only what carries annotations now: one per distinct set (the scheduler
    # reads annotations by layer), everything else in one layer named after the first array.
    if not note_of:
        return HighLevelGraph({name: MaterializedLayer(out)}, {name: set()})
    sigs, by_layer, layer_name = {}, {}, {}
    for k, v in out.items():
        note = note_of.get(k)
        sig = repr(sorted(note.items())) if note else ""
        if sig not in sigs:
            sigs[sig] = (f"{name}-{tokenize(sig)}" if sig else name, note)
        layer_name[k] = sigs[sig][0]
        by_layer.setdefault(layer_name[k], {})[k] = v
    layer_deps = {n: set() for n in by_layer}
    for k, v in out.items():
        n = layer_name.get(k, name)
        for d in getattr(v, "dependencies", ()):
            dn = layer_name.get(d, name)
            if dn != n and dn in by_layer:
                layer_deps[n].add(dn)
    layers = {n: MaterializedLayer(ts, annotations=note) for n, (ts, note) in
              ((n, (by_layer[n], note)) for n, note in sigs.values())}
    return HighLevelGraph(layers, layer_deps)
