"""dask.array's graph optimization, on one graph for a whole submission, and the tests of what
a graph already holds in memory."""
from __future__ import annotations

import functools
import graphlib
import weakref

import dask
import dask.array as da
import numpy as np
from dask.array.core import concatenate3

from .fold import Folded, flat_layers
from . import fuse
from .internals import (Blockwise, DataNode, GraphNode, HighLevelGraph, MaterializedLayer, dask_fuse, flatten,
                        optimize_blockwise)

# longest chain of Blockwise layers fused into one task (see optimize): fusing costs the square of a
# chain's length, so at 40 optimizing a 6,000-node backward took 2.3 s of CPU, at 20 1.9 s (chunk
# fusion then makes each chunk's chain one task all the same)
FUSE_DEPTH = 20


def optimize(arrays, fuse_chunks=None):
    """dask.array's graph optimization, done here on one graph for the whole submission.

    * A layer already in memory (held by another array of the submission: the saved values of
      retained or forced graphs) replaces the lazy layer of the same name, so nothing is computed
      again.
    * Blockwise fusion (an elementwise chain runs as one task per chunk), but not dask's
      low-level fusion: it drops layer annotations (GPU placement) and renames keys, and a key
      submitted once fused and once not makes the scheduler warn about changed run_specs.  Done
      on the client because a distributed scheduler would optimize with its own config.
    * Fusion cost grows with the square of a fused chain's length (dask's rewrite_blockwise), so
      every ``FUSE_DEPTH``-th layer of a long chain is made a plain layer, which stops fusion
      there: deep graphs (thousands of recorded ops) cost linear time.
    * Then the tasks of each chunk are fused into one (:func:`fuse.fuse_chunks`; config
      ``daskgrad.fuse-chunks``, default on), keeping annotations and deterministic keys.
    """
    layers, deps = collect(arrays)
    return optimize_layers(arrays, layers, deps, fuse_chunks)


def collect(arrays):
    """The layers of ``arrays`` as one graph (name -> layer, name -> dependencies): each name once,
    a layer in memory preferred to the lazy one of the same name (see :func:`optimize`)."""
    layers, deps = {}, {}
    for a in arrays:
        for name, layer, layer_deps in flat_layers(a.dask):
            if name not in layers or _empty(layers[name]) or (layer is not layers[name] and holds_data(layer)
                                                              and not holds_data(layers[name])):
                layers[name], deps[name] = layer, layer_deps
    for name, layer in layers.items():
        if holds_data(layer):
            deps[name] = set()
    # only the layers the arrays read: a graph also carries layers no result needs (a checkpointed
    # backward's, a third of them), which would keep a layer they read from fusing into its reader
    needed, stack = set(), [a.name for a in arrays]
    while stack:
        name = stack.pop()
        if name not in needed and name in layers:
            needed.add(name)
            stack.extend(deps[name])
    return {n: layers[n] for n in layers if n in needed}, {n: deps[n] & needed for n in layers if n in needed}


def optimize_layers(arrays, layers, deps, fuse_chunks=None):
    """:func:`optimize` of the graph :func:`collect` made of ``arrays``."""
    depth = {}
    for name in toposort_layers(deps):
        layer = layers[name]
        if not isinstance(layer, Blockwise):
            depth[name] = 0
            continue
        depth[name] = 1 + max((depth[d] for d in deps[name]), default=0)
        if depth[name] >= FUSE_DEPTH:
            layers[name], depth[name] = MaterializedLayer(dict(layer), annotations=layer.annotations), 0
    keys = [k for a in arrays for k in flatten(a.__dask_keys__())]
    hlg = HighLevelGraph(layers, deps)
    hlg = cull(_fuse_roots(optimize_blockwise(hlg, keys=keys), keys), keys)
    # ~0.3 ms a chunk on the client, less than the scheduler spends on the tasks it saves (a quarter remain)
    if dask.config.get("daskgrad.fuse-chunks", True) if fuse_chunks is None else fuse_chunks:
        loops = {n: layer for n, layer in hlg.layers.items() if isinstance(layer, ScanLayer)}
        rest = HighLevelGraph({n: layer for n, layer in hlg.layers.items() if n not in loops},
                              {n: d - loops.keys() for n, d in hlg.dependencies.items() if n not in loops})
        # (a time loop's tasks are fused step by step; what they read from the rest must stay a key)
        read = {d for layer in loops.values() for d in layer.reads}
        # (an array whose tasks fusion changed comes back under a name of its own: fuse._own_keys)
        fused, names = fuse.fuse_chunks(rest, keys + [k for k in read if k not in keys], arrays[0].name, loops)
        hlg = HighLevelGraph({**fused.layers, **loops}, {**fused.dependencies,
                                                          **{n: hlg.dependencies[n] for n in loops}})
        return [da.Array(hlg, names.get(a.name, a.name), a.chunks, meta=a._meta) for a in arrays]
    return [da.Array(hlg, a.name, a.chunks, meta=a._meta) for a in arrays]


def _fuse_roots(hlg, keys):
    """dask's ``fuse_roots`` (a Blockwise layer and the root layers only it reads, made one by
    dask's ``fuse``), but a value in memory stays a key of its own: fused, its chunk or Future would
    be inlined into the task -- shipped inside it, and, in a template (:mod:`.program`), the first
    instance's value read by every later one."""
    layers, deps = dict(hlg.layers), {n: set(d) for n, d in hlg.dependencies.items()}
    readers = {}
    for n, d in deps.items():
        for r in d:
            readers[r] = readers.get(r, 0) + 1
    for name, layer in hlg.layers.items():
        roots = hlg.dependencies[name]
        if (isinstance(layer, Blockwise) and len(roots) > 1 and not any(deps[r] for r in roots)
                and all(readers[r] == 1 for r in roots)
                and all(layer.annotations == hlg.layers[r].annotations for r in roots)
                and not any(holds_data(hlg.layers[r]) for r in roots)):
            new, _ = dask_fuse({**layer, **{k: v for r in roots for k, v in layers[r].items()}}, keys,
                               ave_width=len(roots))
            for r in roots:
                del layers[r], deps[r]
            layers[name], deps[name] = new, set()
    return HighLevelGraph(layers, deps)


class ScanLayer(MaterializedLayer):
    """The tasks of a time loop (:mod:`.scan`), already fused step by step, in the order the loop
    runs them: chunk fusion leaves them as they are (fusing them again would cost as much as making
    them).  ``small``: every chunk of the loop is small (it may run inline, in that order)."""

    def __init__(self, mapping, annotations=None, small=False, reads=frozenset()):
        super().__init__(mapping, annotations=annotations)
        self.small, self.reads = small, reads  # reads: the keys of other layers its tasks read

    @property
    def has_legacy_tasks(self):
        return False

    def cull(self, keys, all_hlg_keys):
        return self, {None: self.reads}  # a loop's tasks are all needed (culled, the loop is another one)


def cull(hlg, keys):
    """``hlg.cull(keys)`` in time linear in the graph.

    dask's version hands every layer the whole set of keys still wanted and each Blockwise layer
    scans all of them for its own: quadratic when a long reverse graph wants the values of a long
    forward one (8,000 recorded ops: 10 s).  Here each layer gets only its own keys.
    """
    def key_name(k):
        return k[0] if isinstance(k, tuple) else k

    owner = {}
    for name, layer in hlg.layers.items():
        owner[name] = name
        if isinstance(layer, MaterializedLayer):  # may hold keys of other names (rechunk's split keys)
            for k in layer:
                owner.setdefault(key_name(k), name)
    external = (hlg.get_all_external_keys() if any(lay.has_legacy_tasks for lay in hlg.layers.values())
                else set())
    wanted = {}
    for k in keys:
        wanted.setdefault(owner[key_name(k)], set()).add(k)
    layers, deps = {}, {}
    for name in reversed(hlg._toposort_layers()):
        ks = wanted.pop(name, None)
        if not ks:
            continue
        layers[name], key_deps = hlg.layers[name].cull(ks, external)
        deps[name] = hlg.dependencies.get(name, set())
        for d in key_deps.values():
            for k in d:
                o = owner.get(key_name(k))
                if o is not None and o != name:
                    wanted.setdefault(o, set()).add(k)
    return HighLevelGraph(layers, {n: d & layers.keys() for n, d in deps.items()})


def toposort_layers(deps):
    return graphlib.TopologicalSorter(deps).static_order()


def per_layer(fn):
    """``fn(layer)`` of a MaterializedLayer remembered while the layer lives: a loop's data and stored
    parameters are the same layers every step, and each walk over their chunks costs a step of
    small chunks 10 us a chunk.  (dask never changes a layer once made, nor does daskgrad.)"""
    memo = {}  # id(layer) -> (a weak reference to it, fn(layer)); its entry goes when the layer goes

    @functools.wraps(fn)
    def remembered(layer):
        i = id(layer)
        hit = memo.get(i)
        if hit is not None and hit[0]() is layer:
            return hit[1]
        value = fn(layer)
        memo[i] = (weakref.ref(layer, lambda _: memo.pop(i, None)), value)
        return value

    return remembered


def holds_data(layer):
    """Whether ``layer`` holds values (chunks, Futures), not tasks: a persisted array's layer."""
    return isinstance(layer, MaterializedLayer) and len(layer) > 0 and _holds_data(layer)


@per_layer
def _holds_data(layer):
    return all(isinstance(v, DataNode) or not isinstance(v, (GraphNode, tuple, str)) for v in layer.values())


def _empty(layer):
    """An empty layer: a stand-in's (:func:`.lazy.stand_in`: an array made by a forward run on
    stand-ins carries their layers), never the layer that computes the keys."""
    return isinstance(layer, MaterializedLayer) and len(layer) == 0


def materialized(arr) -> bool:
    """Whether every chunk of ``arr`` is already in (cluster) memory: a persisted array's graph
    holds its chunks themselves (or distributed Futures), one per key and nothing else."""
    graph = arr.dask
    if len(graph.layers) != 1:
        return False
    (layer,) = graph.layers.values()
    # a fold is a lineage held as one layer, never values; asking its len would build its whole mapping
    # (it did: a quarter of a small checkpointed FWI's client time, every loss value asked for)
    if isinstance(layer, Folded) or len(layer) != arr.npartitions:
        return False
    return all(isinstance(v, DataNode) or not isinstance(v, (GraphNode, tuple, str)) for v in dict(graph).values())


def local_values(arr):
    """The values of ``arr`` as one NumPy array if its graph holds them as NumPy chunks (persisted or
    computed on the local schedulers), else None (a lazy graph, distributed Futures): joining the
    chunks is all it does, never a compute or a gather."""
    if not materialized(arr):
        return None
    graph = dict(arr.dask)
    chunks = {k: v.value if isinstance(v, DataNode) else v for k, v in graph.items()}
    if arr.ndim == 0:  # (a 0-d op's task may give a NumPy scalar: `l.grad` of a 0-d leaf printed dask's summary)
        (c,) = chunks.values()
        return np.asarray(c).reshape(()) if type(c) is np.ndarray or isinstance(c, np.generic) else None
    if not all(type(c) is np.ndarray for c in chunks.values()):
        return None
    return concatenate3(_nested(arr.__dask_keys__(), chunks))


def _nested(keys, chunks):
    return [_nested(k, chunks) if isinstance(k, list) else chunks[k] for k in keys]
