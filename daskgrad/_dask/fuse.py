"""Chunk fusion: after Blockwise fusion, the tasks of one chunk run as one task.

A reverse graph reads each forward chunk twice (the forward ``X_i @ w`` and the VJP ``X_i.T @ g_i``),
and Blockwise fusion stops where a value has two readers.  :func:`fuse_chunks` merges the tasks of
one chunk into one task that reads the chunk once and frees its temporaries inside, while chunks
stay separate tasks and reductions stay trees.  Called by :func:`.optimize.optimize` on every
submission (config ``daskgrad.fuse-chunks``, default on).

This module is the pass only: which tasks fuse, decided once per submission on the client.  How a
fused task then runs, on every chunk and on workers, is :mod:`.calls`; it knows nothing of the
grouping, so an instance run inline or a memory estimate reads fused tasks without the pass.
"""
from __future__ import annotations

import collections
import hashlib
import operator

import numpy as np

from dask.array import chunk as da_chunk
from dask.base import tokenize
from dask.utils import key_split

from .calls import _Call, _Subgraph, _run_fused
from .labels import part_name
from .internals import (Alias, DataNode, GraphNode, HighLevelGraph, MaterializedLayer, Task, TaskRef, _fuse_annotations,
                        convert_legacy_task)

FUSE_WIDTH = 8  # a value read by more tasks than this is shared (a parameter), never a chunk's own
_REACH_CAP = 32  # groups tracked upstream of a task; beyond it, treat every group as upstream


def fuse_chunks(hlg, keys, name, loops=None):
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
    Returned: the graph, and the new name of each requested array whose tasks fusion changed
    (:func:`_own_keys`: a key names one computation).

    ``loops``: the time loops (name -> :class:`.optimize.ScanLayer`) left out of ``hlg``, their keys read
    as data; a path through one is still a path (:meth:`_Tasks.through`).
    """
    requested = set(keys)
    tasks = _Tasks(hlg, requested)
    tasks.through(loops or {})
    if not tasks.nodes:
        return hlg, {}
    groups = _Groups(tasks, requested)
    fused = groups.fused()
    if not fused and not tasks.inlined and not any(_Subgraph.applies(n) for n in tasks.nodes.values()):
        return hlg, {}
    fixed = {d for loop in (loops or {}).values() for d in loop.reads}
    return _build_fused(hlg, tasks, fused, requested, groups.gathers, name, fixed)


class _Tasks:
    """``hlg``'s tasks as fusion reads them: each task's node (legacy tuples converted once), its
    inputs and readers (in graph order, whatever the order of a task's inputs: the same groups every
    run), its layer and that layer's annotations, and the values too widely read to join a group.
    Views of one value read by several tasks go into their readers (:func:`_inline_views`): ``inlined``,
    the tasks rewritten so."""

    def __init__(self, hlg, requested=()):
        self.raw, self.layer_of, self.annotated = {}, {}, {}
        for name, layer in hlg.layers.items():
            if layer.annotations:
                self.annotated[name] = layer.annotations
            for k, v in layer.items():
                self.raw[k] = v
                self.layer_of[k] = name
        self.nodes, self.deps, self.readers, self.stand_ins = {}, {}, {}, set()
        for k, v in self.raw.items():
            node = v if isinstance(v, GraphNode) else convert_legacy_task(k, v, self.raw)
            if isinstance(node, Task) or isinstance(node, Alias) and node.target != k:
                self.nodes[k] = node
                self.deps[k] = node.dependencies
        self.inlined = _inline_views(self.nodes, self.deps, self.layer_of, self.annotated, requested)
        for k in self.inlined:
            if k not in self.nodes:
                del self.raw[k]
        for k, ds in self.deps.items():
            for d in ds:
                self.readers.setdefault(d, []).append(k)
        # values read by many tasks, or by several tasks of one layer (a parameter every chunk reads)
        # and a number read as a value (:class:`.lazy.Constant`): one value, no chunk of anything (a forward's
        # ``u * 1.0`` and a VJP's ``g * 1.0`` read one; grouped as siblings they made a cycle)
        self.shared = {d for d, rs in self.readers.items()
                       if len(rs) > FUSE_WIDTH or len({self.layer(r) for r in rs}) < len(rs)
                       or _one_value(self.raw.get(d))}

    def layer(self, k):
        return self.layer_of.get(k) or (k[0] if isinstance(k, tuple) else k)

    def through(self, loops):
        """Stand-ins for the time loops left out of the pass: each key of a loop that a task reads, a
        task of its own (never fused, never built) reading the keys of the pass that key depends on
        through the loop.  Without them a path through a loop went unseen: a forward chunk that feeds
        a loop and the VJP reading the loop's gradient, siblings of one input chunk, fused into one
        task that waited on itself.  (Per key, not per loop: a loop's backward reads what the rest
        made of its forward.)"""
        for name, loop in loops.items():
            made = {d for ds in self.deps.values() for d in ds if d in loop}
            if made:
                reach = _reach_in(loop, [r for r in loop.reads if r in self.nodes], made)
                for k in made:
                    self._stand_in(k, name, reach[k])

    def _stand_in(self, k, layer, deps):
        self.nodes[k] = Task(k, _unreachable, *(TaskRef(d) for d in deps))
        self.deps[k], self.layer_of[k] = frozenset(deps), layer
        self.stand_ins.add(k)
        for d in deps:
            self.readers.setdefault(d, []).append(k)


def _reach_in(loop, reads, wanted):
    """For each key of ``wanted`` (keys of ``loop``), the keys of ``reads`` it depends on through the
    loop's tasks: one pass in the loop's order with each task's set as the bits of an int."""
    bit = {r: 1 << i for i, r in enumerate(reads)}
    sets = {}
    deps = {k: getattr(t, "dependencies", ()) for k, t in loop.items()}
    for k in inputs_first(loop, deps):
        b = 0
        for d in deps[k]:
            b |= sets.get(d, 0) if d in loop else bit.get(d, 0)
        sets[k] = b
    return {k: [r for r in reads if sets[k] & bit[r]] for k in wanted}


# what a view task runs: nothing but a view of its input (NumPy's and CuPy's alike, by dispatch)
_VIEWS = frozenset({np.transpose})


def _inline_views(nodes, deps, layer_of, annotated, requested):
    """Each view of a one-chunk value (a weight's transpose, ``W.T``) read by tasks of several chunks,
    written into those tasks (a nested task: each makes the view itself, for nothing) instead of a task
    of its own that the scheduler handles and every reader waits for: 3 tasks a step in ``make demo``,
    ``W.T`` of each weight in the forward and ``(W.T).T`` in the backward.  Not a requested key, nor a
    view of a chunk of rows (``X.T``: its readers are that chunk's), nor where a reader is not a task or
    its annotations differ.  ``nodes`` and ``deps`` are rewritten in place; returned: the view keys removed
    and the tasks rewritten.  A view of a view goes in whole."""
    views = {k for k, n in nodes.items() if type(n) is Task and n.func in _VIEWS and k not in requested}
    if not views:
        return set()
    readers = {}
    for k, ds in deps.items():
        for d in ds:
            if d in views:
                readers.setdefault(d, []).append(k)

    def note(k):
        return annotated.get(layer(k))

    def layer(k):
        return layer_of.get(k) or (k[0] if isinstance(k, tuple) else k)

    size = collections.Counter(map(layer, nodes))
    done = set()
    for v in inputs_first(sorted(views, key=repr), {v: deps[v] & views for v in views}):
        rs = readers.get(v, ())
        if (size[layer(v)] > 1 or len({_block(r) for r in rs}) < 2
                or any(type(nodes.get(r)) is not Task or note(r) != note(v) for r in rs)):
            continue
        inner = Task(None, nodes[v].func, *nodes[v].args, **nodes[v].kwargs)
        new = {r: nodes[r].substitute({v: inner}) for r in rs}
        if not all(_runs_alike(nodes[r], new[r]) for r in rs):
            continue
        for r in rs:
            nodes[r] = new[r]
            deps[r] = nodes[r].dependencies
        del nodes[v], deps[v]
        done.add(v)
        done.update(rs)
    return done


def _runs_alike(old, new):
    """Whether task ``new`` (``old`` with a view inside) runs as directly as ``old``: called as a
    :class:`.calls._Call` or ordered once as a :class:`.calls._Subgraph` (a view in a list of its
    arguments is neither: it would run as dask's task, and never over row blocks)."""
    if _Subgraph.applies(old):
        return _Subgraph.applies(new)
    return type(_Call.of(old)) is not _Call or type(_Call.of(new)) is _Call


# elementwise ops cheaper to compute again in a task than to hand on from another (:meth:`_Groups._again`)
_CHEAP = frozenset({operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge, operator.invert,
                    np.equal, np.not_equal, np.less, np.less_equal, np.greater, np.greater_equal, np.logical_not,
                    da_chunk.astype})


def _cheap(node):
    """Whether task ``node`` is a cheap elementwise op (:data:`_CHEAP`) of references and constants."""
    return (type(node) is Task and node.func in _CHEAP
            and all(isinstance(a, (TaskRef, DataNode)) or not isinstance(a, (GraphNode, list, tuple, dict))
                    for a in (*node.args, *node.kwargs.values())))


def _unreachable(*_):  # pragma: no cover - a stand-in (_Tasks.through) is never built
    raise AssertionError("a time loop's stand-in ran")


def _one_value(v):
    """Whether graph value ``v`` is data of one item (a NumPy scalar or 0-d array), not a chunk."""
    v = v.value if isinstance(v, DataNode) else v
    return isinstance(v, np.generic) or (isinstance(v, np.ndarray) and v.ndim == 0)


class _Groups:
    """The chunk groups, made in one pass over the tasks in graph order (a union-find).

    Each task either joins the groups of the chunk-aligned inputs it reads (merging them) or
    starts a group.  Per group: its ``members``, the inputs it reads from other groups
    (``outside``: a merge must not make a group depend on itself), its annotations (``notes``)
    and whether it is ``closed`` to new members (a result of the submission, a task that
    blocks fusion).  Per task: its group, the groups upstream of it (``reach``; ``None`` when
    too many to track, read as "all"), and for an input chunk the group that first read it
    (``anchor``: tasks reading the same chunk meet there)."""

    def __init__(self, tasks, requested):
        self.tasks = tasks
        # a result of the submission that other tasks read stays a task of its own, read like data
        # in memory: fused, it would be held twice (in the group's result and under its own key)
        self.results_read = {k for k in requested if k in tasks.readers}
        self.parent, self.members, self.outside, self.notes, self.closed = [], [], [], [], []
        self.group, self.anchor, self.reach, self.position = {}, {}, {}, {}
        self.gathers = {}  # task -> the layers it reads several chunks of (a reduction's or a rechunk's)
        for k in _toposort_keys(tasks.deps, tasks.nodes, tasks.readers):
            self.position[k] = len(self.position)
            self.reach[k] = self._upstream(k)
            self.group[k] = self._place(k)
        cycles = _groups_on_cycles(tasks.deps, self.group, self.find, self.members)
        if cycles:
            for comp in cycles:
                for g in comp:
                    self._peel(g, set(comp))
            cycles = _groups_on_cycles(tasks.deps, self.group, self.find, self.members)
            self._split_by_level([g for comp in cycles for g in comp if len(self.members[g] or ()) > 1])
            self._absorb()
            self._again()

    def _peel(self, g, comp):
        """Split from group ``g`` (on a cycle with the other groups of ``comp``) the members that
        must run before the cycle's other groups: those feeding one, and what they read in ``g``.
        CrossEntropyLoss's count of valid targets is summed over all chunks, and each chunk's VJP
        reads that sum: peeled, the count is a small task of its own, and the chunk's forward and
        VJP stay one task (its activations handed on inside it, not sent between workers).  Left
        alone where a peeled member reads a group of ``comp`` itself (then the cycle runs through
        the peeled part: :meth:`_split_by_level` splits it)."""
        members = self.members[g]
        if members is None or len(members) < 2:
            return
        inside = set(members)

        def on_cycle(k):
            h = self.find(self.group[k]) if k in self.group else None
            return h is not None and h != g and h in comp

        stack = [m for m in members if any(on_cycle(r) for r in self.tasks.readers.get(m, ()))]
        before = set()
        while stack:
            m = stack.pop()
            if m not in before:
                before.add(m)
                stack.extend(d for d in self.tasks.deps[m] if d in inside)
        if not before or len(before) == len(members) or any(on_cycle(d) for m in before for d in self.tasks.deps[m]):
            return
        first, *rest = sorted(before, key=self.position.__getitem__)
        h = self._new(first, self.notes[g], can_join=False)
        self.members[h].extend(rest)
        for m in before:
            self.group[m] = h
        self.members[g] = [m for m in members if m not in before]

    def _absorb(self):
        """Merge each group whose values only one other group reads, a chunk's, into that group, after
        the cycles were cut.  Cutting leaves a chunk's part that waited for a reduction of all chunks (the
        seed of CrossEntropyLoss's VJP, ``g / count``) a task of its own, read by the rest of that chunk
        only: 4 tasks a step in ``make demo``.  A group with one successor cannot come back to itself
        through another group, so no merge makes a cycle.  Never where a task stays alone (a result read
        by others, a time loop's stand-in, a task blocking fusion), into a reduction of the group's values,
        across chunks, or across annotations that do not fuse."""
        tasks = self.tasks
        for k in sorted(self.position, key=self.position.__getitem__, reverse=True):
            g = self.find(self.group[k])
            members = self.members[g]
            if members is None or k != members[0] or any(map(self._alone, members)):
                continue
            block = {_block(m) for m in members}
            succ, reads = set(), []
            for m in members:
                for r in tasks.readers.get(m, ()):
                    h = self.find(self.group[r])
                    if h != g:
                        succ.add(h)
                        reads.append((m, r))
            if len(succ) != 1 or len(block) != 1 or None in block:
                continue
            (h,) = succ
            if (any(map(self._alone, self.members[h])) or not self._fits(h, self.notes[g])
                    or any(_block(r) not in block or tasks.layer(m) in self.gathers.get(r, ()) for m, r in reads)):
                continue
            self.parent[g] = h
            self.members[h] += members
            self.notes[h] = _merge_annotations(self.notes[h], self.notes[g])
            self.members[g] = None

    def _alone(self, k):
        """Whether task ``k`` stays a task of its own (:meth:`_place`'s first test)."""
        note = self.tasks.annotated.get(self.tasks.layer(k))
        return (k in self.results_read or k in self.tasks.stand_ins or self.tasks.nodes[k].block_fusion
                or note is not None and any(callable(v) for v in note.values()))

    def _again(self):
        """Where a group hands on values to reductions and to one group of its chunk, and what that group
        reads of it is cheap elementwise ops (:data:`_CHEAP`) of what the group reads: copies of those in
        the reader, so the group hands on only what is reduced.  CrossEntropyLoss's rows kept (``target !=
        ignore_index`` as floats) feed the count of valid targets (peeled off the chunk's task) and the
        chunk's loss and VJP: handed on from the count's task as well, its partial count was a ``getitem``
        task of its own per chunk (4 a step in ``make demo``) and the chunk's task waited for the count's."""
        tasks = self.tasks
        for g, members in enumerate(self.members):
            if members is None or any(map(self._alone, members)):
                continue
            inside, reduced, handed, readers = set(members), False, [], set()
            for m in members:
                outside = [r for r in tasks.readers.get(m, ()) if r not in inside]
                if not outside:
                    continue
                if m in tasks.shared or all(tasks.layer(m) in self.gathers.get(r, ()) for r in outside):
                    reduced = True
                    continue
                handed.append(m)
                readers.update(r for r in outside if tasks.layer(m) not in self.gathers.get(r, ()))
            groups = {self.find(self.group[r]) for r in readers}
            if not reduced or len(groups) != 1 or len({_block(m) for m in members} | set(map(_block, readers))) != 1:
                continue
            (h,) = groups
            if any(map(self._alone, self.members[h])) or not self._fits(h, self.notes[g]):
                continue
            copy, stack = set(), list(handed)
            while stack:
                m = stack.pop()
                if m not in copy:
                    copy.add(m)
                    stack.extend(d for d in tasks.deps[m] if d in inside)
            if not all(_cheap(tasks.nodes[m]) for m in copy):
                continue
            names = {m: (f"{m[0]}-again",) + m[1:] if isinstance(m, tuple) else f"{m}-again" for m in copy}
            for m in sorted(copy, key=self.position.__getitem__):
                c = names[m]
                node = tasks.nodes[m].substitute({d: names[d] for d in tasks.deps[m] if d in names}, key=c)
                tasks.nodes[c] = tasks.raw[c] = node
                tasks.deps[c] = node.dependencies
                if m in tasks.layer_of:
                    tasks.layer_of[c] = tasks.layer_of[m]
                for d in node.dependencies:
                    tasks.readers.setdefault(d, []).append(c)
                self.group[c] = h
                self.members[h].append(c)
                self.position[c] = self.position[m]  # (before its readers: a group's parts run in this order)
            for m in copy:
                moved = [r for r in tasks.readers.get(m, ()) if r in readers]
                for r in moved:
                    tasks.nodes[r] = tasks.nodes[r].substitute({m: names[m]})
                    tasks.deps[r] = tasks.nodes[r].dependencies
                tasks.readers[m] = [r for r in tasks.readers[m] if r not in readers]
                tasks.readers.setdefault(names[m], []).extend(moved)

    def _split_by_level(self, cyclic):
        """Split each group of ``cyclic`` (groups on a cycle of the graph of groups) into parts by
        its members' *level*: the most group boundaries on a path into the task from a member of
        such a group.  A reader's level is at least its input's, and higher when the input is
        another group's, so every edge between two parts raises the level and no cycle is left.
        (A chunk's forward and its VJP that waits for a reduction of all chunks -- a loss's
        normalizer -- are two tasks, not a dozen.)  Paths from elsewhere (a parameter's update)
        count no boundary: they cannot lead back into a group."""
        members = {m for g in cyclic for m in self.members[g]}
        level = {}
        for k in self.position:  # (in graph order: each after what it reads)
            gk = self.find(self.group[k])
            lv = [level[d] + (self.find(self.group[d]) != gk) for d in self.tasks.deps[k] if d in level]
            if lv or k in members:
                level[k] = max(lv, default=0)
        for g in cyclic:
            parts = {}
            for m in self.members[g]:
                h = parts.get(level[m])
                if h is None:
                    parts[level[m]] = self._new(m, self.notes[g], can_join=False)
                else:
                    self.members[h].append(m)
                self.group[m] = parts[level[m]]
            self.members[g] = None

    def fused(self):
        """``(members in graph order, annotations)`` of every group of more than one task."""
        return [(sorted(ms, key=self.position.__getitem__), self.notes[g]) for g, ms in enumerate(self.members)
                if ms is not None and len(ms) > 1]

    def find(self, g):
        while self.parent[g] != g:
            self.parent[g] = self.parent[self.parent[g]]
            g = self.parent[g]
        return g

    def _new(self, k, note, can_join=True):
        self.parent.append(len(self.parent))
        self.members.append([k])
        self.outside.append([])
        self.notes.append(note)
        self.closed.append(not can_join)
        return len(self.parent) - 1

    def _upstream(self, k):
        r = frozenset()
        for d in self.tasks.deps[k]:
            if d in self.group:
                rd = self.reach[d]
                if rd is None or r is None:
                    r = None
                    continue
                g = self.group[d]
                if g not in rd:
                    rd = rd | {g}
                r = rd if not r else r | rd
                if len(r) > _REACH_CAP:
                    r = None
        return r

    def _fits(self, g, note):
        return self.notes[g] == note or _annotations_fuse(self.notes[g], note)

    def _place(self, k):
        """The group task ``k`` joins, or a new one."""
        note = self.tasks.annotated.get(self.tasks.layer(k))
        if self._alone(k):
            return self._new(k, note, can_join=False)
        cand, external, sources, reduction = self._inputs(k, note)
        target = None
        if cand and not reduction:
            target = self._join(cand, k, note, external)
        if target is None:
            target = self._new(k, note)
            self.outside[target] += [y for y in external if self.reach[y] is None or self.reach[y]]
        if not reduction:
            for d in sources:
                self.anchor.setdefault(d, target)
        return target

    def _inputs(self, k, note):
        """What ``k``'s inputs say: the groups it may join (``cand``), the inputs from groups it
        may not (``external``), the chunks it reads (``sources``), and whether it gathers several
        chunks of one layer from different groups (a ``reduction``: it joins none)."""
        per_layer = {}
        for d in self.tasks.deps[k]:
            per_layer.setdefault(self.tasks.layer(d), []).append(d)
        cand, external, sources, reduction = set(), [], [], False
        for dl, ds in per_layer.items():
            if len(ds) > 1:
                self.gathers.setdefault(k, set()).add(dl)
                gs = {self.find(self.group[d]) if d in self.group else None for d in ds}
                if len(gs) > 1 or None in gs:
                    reduction = True
                    external += [d for d in ds if d in self.group]
                    continue
            for d in ds:
                if d in self.group:
                    g = self.find(self.group[d])
                    if d in self.tasks.shared or self.closed[g] or not self._fits(g, note):
                        external.append(d)
                    else:
                        cand.add(g)
                    if d not in self.results_read:
                        continue
                if d not in self.tasks.shared:
                    sources.append(d)
                    if d in self.anchor:
                        g = self.find(self.anchor[d])
                        if self._fits(g, note):
                            cand.add(g)
        return cand, external, sources, reduction

    def _join(self, cand, k, note, external):
        """Merge the groups ``cand`` and add ``k``, unless an outside input of the result depends
        on one of them (the group would read itself); the merged group, or ``None``."""
        union = set(cand)
        # the groups' own outside inputs were checked against each group alone when they joined
        checks = external + [y for g in cand for y in self.outside[g]] if len(cand) > 1 else external
        if any(_upstream_of(self.reach[y], union, self.find) for y in checks
               if self.find(self.group[y]) not in union):
            return None
        target = min(cand)
        for g in cand:
            if g != target:
                self.parent[g] = target
                self.members[target] += self.members[g]
                self.outside[target] += self.outside[g]
                self.notes[target] = _merge_annotations(self.notes[target], self.notes[g])
                self.members[g] = self.outside[g] = None
        self.members[target].append(k)
        self.outside[target] += [y for y in external if self.reach[y] is None or self.reach[y]]
        self.notes[target] = _merge_annotations(self.notes[target], note)
        return target


def _groups_on_cycles(deps, group, find, members):
    """The strongly connected components (lists of groups) of the graph of groups that hold a
    cycle through a group of more than one task.

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
    return [comp for comp in _strong_components(left, succ)
            if len(comp) > 1 and any(members[g] is not None and len(members[g]) > 1 for g in comp)]


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


def _build_fused(hlg, tasks, groups, requested, gathers, name, fixed=frozenset()):
    """The graph with each group as one task (:func:`.calls._run_fused`) and the values the rest of the
    graph reads of it handed on, re-layered by annotations (:func:`_by_annotations`), and the new names
    of the requested arrays renamed (:func:`_own_keys`; ``fixed``: keys that keep theirs)."""
    nodes, readers = tasks.nodes, tasks.readers
    out = {k: nodes.get(k, v) for k, v in tasks.raw.items()}  # converted once here, not again downstream
    notes = {k: layer.annotations for k, layer in hlg.layers.items() if layer.annotations}
    note_of = {k: notes[n] for k, n in tasks.layer_of.items() if n in notes} if notes else {}
    substitutions, built, made = {}, [], set()
    for ms, note in groups:
        inside = set(ms)
        # (a task nobody reads, left by a cull that keeps whole blocks, stays a key as well)
        exports = [m for m in ms if m in requested or m not in readers
                   or any(r not in inside for r in readers[m])]
        exports.sort(key=repr)
        fkey = _fused_key(ms, exports, inside, readers)
        inline = _inlined(exports, inside, requested, tasks, gathers)
        for m in ms:
            if m != fkey:
                del out[m]
        for i, e in enumerate(exports if len(exports) > 1 else ()):
            if e in inline:
                ref = Task(None, operator.getitem, TaskRef(fkey), i)
                for r in readers.get(e, ()):
                    if r not in inside:
                        substitutions.setdefault(r, {})[e] = ref
            else:
                out[e] = Task(e, operator.getitem, TaskRef(fkey), i)
                made.add(e)
        built.append((fkey, ms, exports))
        if note:
            note_of[fkey] = note
        elif fkey in note_of:
            del note_of[fkey]
    fused = {m for ms, _ in groups for m in ms}
    made.update(k for k in tasks.inlined if k in out and k not in fused)  # (a view went in: computed anew, a new key)
    for r, subs in substitutions.items():
        nodes[r] = nodes[r].substitute(subs)
        if r not in fused:
            out[r] = nodes[r]
            made.add(r)
    renamed = _own_keys(out, built, nodes, made, requested, fixed)
    for fkey, ms, exports in built:
        out[fkey] = _fused_task(renamed.get(fkey, fkey), [nodes[m] for m in ms], exports)
    # a Blockwise-fused task left alone runs its inner tasks in an order found once, here: as
    # itself it would order them with dask.order at every call (~0.1 ms, more than small chunks' work)
    for k, node in out.items():
        if k not in fused and _Subgraph.applies(node):
            out[k] = _fused_task(renamed.get(k, k), [node], [k])
    out = {renamed.get(k, k): t if renamed.get(k, k) == k or t.key != k else t.substitute({}, key=renamed[k])
           for k, t in out.items()}
    names = {k[0] if isinstance(k, tuple) else k: v[0] if isinstance(v, tuple) else v
             for k, v in renamed.items() if k in requested}
    return _by_annotations(out, {renamed.get(k, k): v for k, v in note_of.items()}, name), names


def _inlined(exports, inside, requested, tasks, gathers):
    """The group's ``exports`` that go to their readers inside them, not as getitem tasks.

    The values handed on are getitem tasks: they run right after the group, which then dies, so a
    value is held once and only as long as before, and a reader elsewhere fetches only its value.
    Where every value goes to a reduction across chunks (a partial sum of a gradient: small) and
    none is a result, they are all inlined into the reductions, saving a task per value.  Where the
    values not reduced all go to tasks of one chunk (a chunk's VJP after its forward, split by a
    normalizer of all chunks that they all wait for), those are inlined into them: the group's values
    are then held until those readers ran, about as long as before, and they run where the group
    did.  (A reduction reading a group's value inline would fetch all its values.)"""
    if len(exports) < 2 or any(e in requested for e in exports):
        return set()
    reduced, blocks = set(), set()
    for e in exports:
        outside = [r for r in tasks.readers.get(e, ()) if r not in inside]
        if not all(isinstance(tasks.nodes.get(r), Task) for r in outside):
            return set()
        if all(e in tasks.shared or tasks.layer_of.get(e) in gathers.get(r, ()) for r in outside):
            reduced.add(e)
        else:
            blocks.update(map(_block, outside))
    if len(reduced) == len(exports):
        return reduced
    return set(exports) - reduced if len(blocks) == 1 and None not in blocks else set()


def _block(k):
    """The chunk task ``k`` makes, as an index without trailing zeros (``(5,)`` for ``(name, 5, 0)``:
    a row block's logits and its row sums are one chunk's), or None for a key of no chunk."""
    if not isinstance(k, tuple):
        return None
    index = k[1:]
    while index and index[-1] == 0:
        index = index[:-1]
    return index


def _own_keys(out, built, nodes, made, requested, fixed=frozenset()):
    """New keys for every task fusion made or rewrote (``made``: the groups of ``built``, the values
    they hand on, the tasks an inlined value went into), and every task reading one; ``out``'s tasks
    and the groups' parts rewritten to read them.  One key, one computation: a key kept with another
    computation fails on a cluster.  (The same data fused with one step's parameters and then with
    the next step's is two groups under one key, and a worker that still knew the key from the first
    step waited for that step's group, which nobody computes again.)

    A result of the submission is such a task too: a saved value a retained graph keeps, computed
    from one grouping, and the same value asked for by a later submission that groups otherwise (the
    scheduler logged "Detected different `run_spec`").  Its whole array takes one new name, as results
    of one array share a name, and what reads it takes one of its own (:func:`_new_names`).  Keys
    ``fixed`` (read by a time loop left out of the pass), and the arrays holding one, keep theirs."""
    reads = {k: getattr(t, "dependencies", ()) for k, t in out.items()}
    for fkey, ms, _ in built:
        inside = set(ms)
        reads[fkey] = {d for m in ms for d in nodes[m].dependencies if d not in inside}
        made.add(fkey)
    readers = {}
    for k, ds in reads.items():
        for d in ds:
            readers.setdefault(d, []).append(k)
    arrays = {}  # a result's array name -> its results
    for k in requested:
        arrays.setdefault(_name(k), []).append(k)
    kept = {n for n, ks in arrays.items() if any(k in fixed or k not in reads for k in ks)}
    to_rename, stack = set(), list(made)
    while stack:
        k = stack.pop()
        if k in to_rename:
            continue
        if k in requested:
            if _name(k) in kept:  # (what reads it reads the same)
                continue
            for r in arrays[_name(k)]:  # (the whole array: its chunks share a name)
                to_rename.add(r)
                stack += readers.get(r, ())
            continue
        to_rename.add(k)
        stack += readers.get(k, ())
    renamed = _new_names(to_rename, to_rename & requested, reads)
    for k, t in out.items():
        if isinstance(t, GraphNode) and not renamed.keys().isdisjoint(reads[k]):
            out[k] = t.substitute(renamed)
    for _, ms, _ in built:  # (what a part reads inside its group keeps its name there)
        inside = set(ms)
        for m in ms:
            if not renamed.keys().isdisjoint(nodes[m].dependencies):
                nodes[m] = nodes[m].substitute({d: renamed[d] for d in nodes[m].dependencies
                                                if d in renamed and d not in inside})
    return renamed


def _new_names(keys, results, reads):
    """A new key for each of ``keys``: its name with a token of what it is and the new names of what
    it reads, each key after those it reads; the ``results`` (keys of requested arrays) an array at a
    time, one token of all its chunks (what a chunk reads of its own array by the old names).  A key or
    array on a cycle through an array (a fused group reading one chunk of it, read by another), and
    all that reads one, take one token of them all (what they read of each other by the old names)."""
    unit = {k: (_name(k), _ARRAY) if k in results else k for k in keys} if results else dict(zip(keys, keys))
    members, deps = {}, {}
    for k in keys:
        u = unit[k]
        members.setdefault(u, []).append(k)
        deps.setdefault(u, set()).update(unit[d] for d in reads[k] if d in unit)
    readers = {}
    for u, ds in deps.items():
        ds.discard(u)
        for d in ds:
            readers.setdefault(d, []).append(u)
    waiting = {u: len(ds) for u, ds in deps.items()}
    ready = [u for u, n in waiting.items() if not n]
    renamed = {}
    while ready:
        u = ready.pop()
        ks = members[u]
        if len(ks) == 1 and ks[0] is u:
            k = u
            _rename(renamed, ks, repr((k, sorted(repr(renamed.get(d, d)) for d in reads[k]))))
        else:
            _rename(renamed, ks, repr(sorted((repr(k), sorted(repr(renamed.get(d, d)) for d in reads[k])) for k in ks)))
        for r in readers.get(u, ()):
            waiting[r] -= 1
            if not waiting[r]:
                ready.append(r)
    left = [k for k in keys if k not in renamed]
    if left:
        _rename(renamed, left, repr(sorted((repr(k), sorted(repr(renamed.get(d, d)) for d in reads[k])) for k in left)))
    return renamed


_ARRAY = object()  # (a unit of _new_names: an array's chunks)


def _rename(renamed, keys, what):
    """``keys`` under new keys, their names with a token of ``what``, into ``renamed``."""
    token = hashlib.md5(what.encode()).hexdigest()[:12]
    for k in keys:
        renamed[k] = (f"{k[0]}-{token}",) + k[1:] if isinstance(k, tuple) else f"{k}-{token}"


def _name(k):
    """A key's array name."""
    return k[0] if isinstance(k, tuple) else k


def inputs_first(keys, reads):
    """``keys`` in an order where each comes after those of them it reads (``reads[k]``), depth
    first from each key in ``keys``' order (a time step's tasks: :mod:`.scan`)."""
    out, done = [], set()
    for root in keys:
        stack = [root]
        while stack:
            k = stack[-1]
            if k in done:
                stack.pop()
                continue
            waiting = [d for d in reads[k] if d in keys and d not in done]
            if waiting:
                stack += waiting
            else:
                done.add(stack.pop())
                out.append(k)
    return out


def _fused_key(ms, exports, inside, readers):
    """A group's key: its one exported value's, else named after a VJP rule's task that no other task
    of the group reads (or any such task) with a token of its parts: "mm-vjp-fused" on the dashboard,
    the same every run.  The group's order of independent tasks follows set order (the hash seed), so
    the name is chosen by what the tasks are, the greatest key among those last tasks, not by position."""
    if len(exports) == 1:
        return exports[0]
    token = hashlib.md5(repr((sorted(map(repr, ms)), exports)).encode()).hexdigest()
    last = [m for m in ms if not any(r in inside for r in readers.get(m, ()))] or list(ms)
    last = [m for m in last if key_split(m).endswith("-vjp")] or last
    named = max(last, key=repr)
    return (f"{key_split(named)}-fused-{token}",) + (tuple(named[1:]) if isinstance(named, tuple) else ())


def _fused_task(fkey, parts, exports):
    """One task running ``parts`` in order, each temporary dropped after its last reader."""
    order = tuple(_Subgraph(n) if _Subgraph.applies(n) else _Call.of(n) for n in parts)
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
    outputs = list(exports) if len(exports) > 1 else exports[0]
    names = tuple(part_name(t.key) for t in order)  # (the dashboard's: a rule's layers under its name)
    return Task(fkey, _run_fused, order, tuple(map(tuple, drops)), tuple(inputs), outputs, names,
                *(TaskRef(d) for d in inputs), _data_producer=any(n.data_producer for n in order))


def _by_annotations(out, note_of, name):
    """The tasks ``out`` as layers that only carry annotations now: one per distinct set (the
    scheduler reads annotations by layer), everything else in one layer named after ``name``."""
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
