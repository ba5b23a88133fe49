"""Values of a time step that depend on no state, rebuilt to wait for the state they meet.

:func:`daskgrad.utils.checkpoint.checkpoint_steps` runs ``step`` many times in one submission.  A
value ``step`` makes from no state (a dense source term ``wavelet[i] * src``) is ready from the
start and keeps one key across the sweep, the recomputations and the reversal, so dask computes
every step's at once and holds them.  :func:`stateless_waiting` rebuilds those values, and what is
computed from them, under new keys (``dask.graph_manipulation.bind``), each waiting for a gate that
exists once the state does.
"""
from __future__ import annotations

import dask.array as da
from dask.base import clone_key
from dask.graph_manipulation import bind, chunks

from .fold import Folded
from .internals import Blockwise, GraphNode, HighLevelGraph, MaterializedLayer, Task, TaskRef


def stateless_waiting(arrays, state, shared, make_gate, i):
    """``arrays`` (step ``i``'s outputs) with their layers that depend on no layer named in
    ``state`` rebuilt to wait for ``make_gate()`` (a dask array; made only when needed), the layers
    in ``shared`` (what every step reads: leaves, constants) left as they are; None when there is
    nothing to rebuild.  Blockwise layers (elementwise ops, ``map_blocks``) are rebuilt by dask's
    ``bind``; the others (a stencil's overlap, a slicing, a concatenation) are materialized first
    (:class:`_Rebuilt`), so that every key they hold gets a new name."""
    keep = _untouched(arrays, state, shared)
    if keep is None:
        return None
    gate = make_gate()
    # an output made only from the state is left as it is: bind renames the top layer of every
    # array it is given, and that layer, kept, is only an empty stand-in in the cut graph
    todo = [k for k, a in enumerate(arrays) if a.name not in keep]
    out = list(arrays)
    for k, b in zip(todo, _bind_step([arrays[k] for k in todo], keep, gate, (gate.name, i))):
        out[k] = b
    return out


def _bind_step(arrays, keep, gate, seed):
    """``bind(arrays, gate, omit=keep)`` on graphs cut at the layers ``keep`` (empty stand-ins
    there, the real graphs put back after): ``bind`` would otherwise walk the whole history, and a
    folded lineage (:mod:`daskgrad._dask.fold`) among the kept layers lists the keys of the layers
    it holds as its own, which ``bind`` then leaves unrenamed in the layers it rebuilds."""
    cut, real = [], {}
    for a in arrays:
        layers, deps, todo, graphs = {}, {}, [a.name], [a.dask]
        while todo:
            name = todo.pop()
            if name in layers:
                continue
            if name in keep:
                real[name] = next(g for g in graphs if name in g.layers)
                layers[name], deps[name] = MaterializedLayer({}), set()
                continue
            layers[name], deps[name] = _find(graphs, name)
            if not isinstance(layers[name], Blockwise):
                layers[name] = _Rebuilt(dict(layers[name]))
            todo.extend(deps[name])
        cut.append(da.Array(HighLevelGraph(layers, deps), a.name, a.chunks, meta=a._meta))
    bound = []
    for b in bind(cut, gate, omit=_Layers(keep), seed=seed):
        layers, deps = {}, {}
        for name in b.dask.layers.keys() & real.keys():
            layers.update(real[name].layers)
            deps.update(real[name].dependencies)
        for name, layer in b.dask.layers.items():
            if name in real:
                continue
            if isinstance(layer, Blockwise) and any(i is None and isinstance(k, TaskRef) for k, i in layer.indices):
                layer = MaterializedLayer(dict(layer))  # waits for the blocker: Blockwise fusion cannot rewrite it
            layers[name], deps[name] = layer, b.dask.dependencies[name]
        bound.append(da.Array(HighLevelGraph(layers, deps), b.name, b.chunks, meta=b._meta))
    return bound


def _untouched(arrays, state, shared):
    """The layers of ``arrays``' graphs that need no rebuilding: all but the step's values that
    depend on no layer of ``state`` and what is computed from them (constants made from nothing
    excepted); None where there are none.

    A walk over the step's own layers (down to ``state`` and ``shared``), not the whole history."""
    deps, layers, todo = {}, {}, [a.name for a in arrays]
    graphs = [a.dask for a in arrays]
    while todo:
        name = todo.pop()
        if name in deps or name in state or name in shared:
            continue
        layers[name], deps[name] = _find(graphs, name)
        todo.extend(deps[name])
    # constants (made from nothing: a constant-boundary stencil's zero halo strips, in the step and
    # in its VJP) have the same keys at every step, computed once: they are left as they are
    stateful, tainted, constant = set(state), set(), set()
    for name in _topological(deps):
        if deps[name] <= constant:
            constant.add(name)
        elif deps[name] & stateful and not deps[name] & tainted:
            stateful.add(name)
        else:
            tainted.add(name)
    rebuilt = tainted - stateful
    if not rebuilt:
        return None
    return set(state) | set(shared) | (set(deps) - rebuilt)


def _find(graphs, name):
    """(layer, dependencies) of the layer ``name`` in one of the graphs ``graphs``, a folded lineage
    (:class:`daskgrad._dask.fold.Folded`, one layer holding an array's whole graph) opened: its
    graph is added to ``graphs``."""
    g = next(g for g in graphs if name in g.layers)
    while isinstance(g.layers[name], Folded):
        g = g.layers[name].inner
        graphs.append(g)
    return g.layers[name], g.dependencies[name]


def _topological(deps):
    """The names of ``deps`` (name -> names it depends on) with every name after those it depends on."""
    order, seen = [], set()
    for root in deps:
        stack = [(root, False)]
        while stack:
            name, done = stack.pop()
            if done:
                order.append(name)
            elif name not in seen and name in deps:
                seen.add(name)
                stack.append((name, True))
                stack.extend((d, False) for d in deps[name])
    return order


class _Rebuilt(MaterializedLayer):
    """A layer other than Blockwise (an overlap's, a slicing's, a concatenation's) materialized for
    ``bind``, which renames the keys its layers list as output: a materialized layer lists every key
    it holds, where an overlap layer lists its chunks but not the inner keys it holds besides
    (``("getitem-…", 0.9)``, a halo strip), which ``bind`` would leave under their old names, shared
    by every step.  Tasks in dask's task spec are renamed here too (``Layer.clone`` renames only
    legacy tuples)."""

    def clone(self, keys, seed, bind_to=None):
        legacy = {k: v for k, v in self.mapping.items() if not isinstance(v, GraphNode)}
        layer, bound = MaterializedLayer(legacy).clone(keys, seed, bind_to)
        out = dict(layer)
        for key, node in self.mapping.items():
            if not isinstance(node, GraphNode):
                continue  # renamed above
            if key not in keys:
                out[key] = node
                continue
            new = clone_key(key, seed)
            renamed = {d: clone_key(d, seed) for d in node.dependencies if d in keys}
            node = node.substitute(renamed, key=new)
            if bind_to is not None and not renamed:  # a leaf of the rebuilt values: it waits
                node, bound = Task(new, chunks.bind, node, TaskRef(bind_to)), True
            out[new] = node
        return MaterializedLayer(out), bound


class _Layers:
    """Layer names as a dask collection: what ``bind``'s ``omit`` reads (``__dask_layers__``)."""

    def __init__(self, names):
        self.names = tuple(sorted(names))

    def __dask_graph__(self):
        return {}

    def __dask_layers__(self):
        return self.names

    def __dask_keys__(self):
        return []

    def __dask_tokenize__(self):
        return self.names
