"""Values of a time step that depend on no state, rebuilt to wait for the state they meet.

:func:`daskgrad.utils.checkpoint.checkpoint_steps` runs ``step`` many times in one submission.  A
value ``step`` makes from no state (a dense source term ``wavelet[i] * src``) is ready from the
start and keeps one key across the sweep, the recomputations and the reversal, so dask computes
every step's at once and holds them.  :func:`stateless_waiting` rebuilds those values, and what is
computed from them, under new keys (as ``dask.graph_manipulation.bind`` would name them), each
waiting for a gate that exists once the state does (:func:`gate`).
"""
from __future__ import annotations

import dask.array as da
from dask.base import clone_key, tokenize
from dask.graph_manipulation import chunks

from .fold import Folded
from .internals import Blockwise, GraphNode, HighLevelGraph, MaterializedLayer, Task, TaskRef, flatten


def stateless_waiting(arrays, state, shared, make_gate, i):
    """``arrays`` (step ``i``'s outputs) with their layers that depend on no layer named in
    ``state`` rebuilt to wait for ``make_gate()`` (a dask array; made only when needed), the layers
    in ``shared`` (what every step reads: leaves, constants) left as they are; None when there is
    nothing to rebuild (:func:`_bind_step`)."""
    walked = _untouched(arrays, state, shared)
    if walked is None:
        return None
    keep = walked[0]
    gate = make_gate()
    # an output made only from the state is left as it is
    todo = [k for k, a in enumerate(arrays) if a.name not in keep]
    out = list(arrays)
    for k, b in zip(todo, _bind_step([arrays[k] for k in todo], walked, gate, (gate.name, i))):
        out[k] = b
    return out


def gate(arrays):
    """A 0-d dask array that exists once every chunk of ``arrays`` does: one task reading one element
    of each chunk (so on a cluster only those elements travel to it).  ``da.sum`` of the same
    elements builds a reduction tree per call, with its tokenizing and meta inference: a tenth of a
    checkpointed gradient's client time."""
    marks = [marks_of(a) for a in arrays]
    name = "gate-" + tokenize(*(m.name for m in marks))
    task = Task((name,), _first, *(TaskRef(k) for m in marks for k in flatten(m.__dask_keys__())))
    hlg = HighLevelGraph.from_collections(name, {(name,): task}, dependencies=marks)
    return da.Array(hlg, name, (), meta=marks[0]._meta)


def marks_of(a):
    """One element of each chunk of the dask array ``a``, one 1-element block per chunk: a cheap
    dependency on it."""
    index = tuple(range(a.ndim))
    return da.blockwise(_first_element, index, a, index, adjust_chunks={i: 1 for i in index}, dtype=a.dtype,
                        meta=a._meta, name="mark-" + tokenize(a.name))


def _first_element(block):
    return block.reshape(-1)[:1].reshape((1,) * block.ndim)


def _first(*marks):
    return marks[0].reshape(())


def _bind_step(arrays, walked, gate, seed):
    """``arrays`` with their layers not in ``keep`` under new names (one ``clone_key`` per name, as
    ``dask.graph_manipulation.bind`` would give them), the tasks among them that read no renamed
    key waiting for ``gate`` (a 0-d dask array).  ``walked``: ``keep`` and what :func:`_untouched`'s
    walk found, so the step's layers are not looked up twice.

    ``bind`` itself tokenizes every key it renames and walks the whole history: ~1,500 tokenizes
    a step of a wave equation, a fifth of a checkpointed gradient's client time.  Blockwise layers
    that read renamed layers stay Blockwise (fused later); the others are materialized, so that
    every key they hold is renamed -- an overlap layer lists its chunks as output but not the halo
    strips it holds besides (``("getitem-…", 0.9)``), which would otherwise keep their names and
    be shared by every step."""
    keep, step_layers, step_deps, graphs = walked
    layers, deps, real = {}, {}, {}
    todo = [a.name for a in arrays]
    while todo:
        name = todo.pop()
        if name in layers or name in real:
            continue
        if name in keep:
            real[name] = next(g for g in graphs if name in g.layers)
            continue
        layers[name], deps[name] = step_layers[name], step_deps[name]
        todo.extend(deps[name])
    tasks = {name: None if isinstance(layer, Blockwise) and deps[name] - keep else dict(layer)
             for name, layer in layers.items()}
    names = set(layers).union(*(map(_key_name, t) for t in tasks.values() if t is not None))
    new = {n: clone_key(n, seed) for n in names}
    gate_key = gate.__dask_keys__()[0]
    out_layers, out_deps = dict(gate.dask.layers), dict(gate.dask.dependencies)
    for g in {id(g): g for g in real.values()}.values():
        out_layers.update(g.layers)
        out_deps.update(g.dependencies)
    for name, layer in layers.items():
        renamed = {new[d] if d in new else d for d in deps[name]}
        if tasks[name] is None:
            out_layers[new[name]], out_deps[new[name]] = _renamed_blockwise(layer, new), renamed
            continue
        mapping, bound = {}, False
        for key, node in tasks[name].items():
            key = _renamed_key(key, new)
            if isinstance(node, GraphNode):
                subs = {d: _renamed_key(d, new) for d in node.dependencies if _key_name(d) in new}
                node, reads = node.substitute(subs, key=key), bool(subs)
                if not reads:  # reads nothing rebuilt: it waits for the gate
                    node, bound = Task(key, chunks.bind, node, TaskRef(gate_key)), True
            else:  # a legacy tuple task: its keys are only known as keys once the whole graph is
                node, reads = _renamed_legacy(node, new)
                if not reads:
                    node, bound = (chunks.bind, node, gate_key), True
            mapping[key] = node
        out_layers[new[name]] = MaterializedLayer(mapping, annotations=layer.annotations)
        out_deps[new[name]] = renamed | ({gate.name} if bound else set())
    hlg = HighLevelGraph(out_layers, out_deps)
    return [da.Array(hlg, new[a.name], a.chunks, meta=a._meta) for a in arrays]


def _key_name(key):
    return key[0] if isinstance(key, tuple) else key


def _renamed_key(key, new):
    return (new[key[0]],) + key[1:] if isinstance(key, tuple) else new[key]


def _renamed_legacy(x, new):
    """A legacy task (tuples) with the keys of renamed layers in it renamed, and whether any was."""
    if isinstance(x, tuple) and x and isinstance(x[0], str) and x[0] in new:
        return (new[x[0]],) + x[1:], True
    if isinstance(x, str) and x in new:
        return new[x], True
    if isinstance(x, (tuple, list)):
        parts = [_renamed_legacy(y, new) for y in x]
        return type(x)(y for y, _ in parts), any(r for _, r in parts)
    if isinstance(x, dict):
        parts = {k: _renamed_legacy(y, new) for k, y in x.items()}
        return {k: y for k, (y, _) in parts.items()}, any(r for _, r in parts.values())
    return x, False


def _renamed_blockwise(layer, new):
    """A Blockwise layer reading renamed layers, renamed: ``Blockwise.clone`` with the names
    looked up instead of tokenized again."""
    indices = []
    for k, idx in layer.indices:
        if isinstance(k, TaskRef) and k.key in new:
            k = TaskRef(new[k.key])
        elif isinstance(k, str) and k in new:
            k = new[k]
        indices.append((k, idx))
    return Blockwise(output=new[layer.output], output_indices=layer.output_indices,
                     task=layer.task.substitute({}, key=new.get(layer.task.key) or clone_key(layer.task.key, 0)),
                     indices=indices, numblocks={new.get(k, k): v for k, v in layer.numblocks.items()},
                     concatenate=layer.concatenate, new_axes=layer.new_axes, output_blocks=layer.output_blocks,
                     annotations=layer.annotations, io_deps=layer.io_deps)


def _untouched(arrays, state, shared):
    """The layers of ``arrays``' graphs that need no rebuilding: all but the step's values that
    depend on no layer of ``state`` and what is computed from them (constants made from nothing
    excepted); None where there are none.  Returned with what the walk found (the step's layers,
    their dependencies, the graphs holding them), which :func:`_bind_step` reuses.

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
    return set(state) | set(shared) | (set(deps) - rebuilt), layers, deps, graphs


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
