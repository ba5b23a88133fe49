"""Where the reverse pass keeps the layers its rules make, and the small layers it builds itself.

dask copies every layer of every input into each new array (``HighLevelGraph.from_collections``),
so rules called on arrays that carry their lineage cost time in proportion to the graph so far,
and a backward through N recorded ops O(N²) (a 1,000-op chain took 6 s).  Rules run on stand-ins
with the real names, chunks and meta but a one-layer graph; the :class:`Arena` collects the layers
they make as they come and joins everything once, for what leaves the pass.
"""
from __future__ import annotations

import dask.array as da
from dask.base import tokenize

from dask.utils import key_split

from .labels import made_by
from .optimize import holds_data
from .internals import GraphNode, HighLevelGraph, MaterializedLayer, blockwise


class _Stub(MaterializedLayer):
    """Stands in for a layer kept elsewhere: building on an array needs only its name, chunks and meta."""

    def __init__(self):
        super().__init__({})


class Arena:
    """The reverse graph's layers while the rules run: :meth:`stub` remembers a forward array by
    name and hands out its stand-in, :meth:`take` keeps the layers a rule's output made and hands
    it back on a stand-in, :meth:`full` gives an array its whole graph."""

    def __init__(self):
        self.layers, self.deps, self.forward, self._stubs, self._graph = {}, {}, {}, {}, None

    def stub(self, a):
        """A forward array as a stand-in (a one-layer array is cheap to merge as it is)."""
        if len(a.dask.layers) <= 1:
            return a
        if self.forward.setdefault(a.name, a) is not a and holds_data(a.dask.layers[a.name]):
            self.forward[a.name] = a  # a retained (persisted) value wins over a lazy twin
        self._graph = None
        return self._stub(a)

    def _stub(self, a):
        s = self._stubs.get(a.name)
        if s is None or s.chunks != a.chunks:
            s = self._stubs[a.name] = da.Array(HighLevelGraph({a.name: _Stub()}, {a.name: set()}), a.name,
                                               a.chunks, meta=a._meta)
        return s

    def take(self, a):
        """Keep the layers ``a``'s graph made; ``a`` back on a stand-in (``a`` itself if it is one)."""
        hlg = a.dask
        if len(hlg.layers) == 1 and isinstance(hlg.layers.get(a.name), _Stub):
            return a
        new = []
        for name, layer in hlg.layers.items():
            if not isinstance(layer, _Stub) and name not in self.layers:
                self.layers[name], self.deps[name] = layer, set(hlg.dependencies.get(name, ()))
                if type(layer) is MaterializedLayer:  # dask's setitem inlines its value's graph into
                    self.deps[name] |= _layers_read(layer)  # one layer: of a stand-in, only the keys
                self._graph = None
                new.append(name)
        rule = key_split(a.name)
        if new and rule.endswith("-vjp"):  # a rule's output (engine._label): the layers it made are its own
            made_by(new, rule)
        return self._stub(a)

    def full(self, a):
        """``a`` with its whole graph: the forward arrays' layers and every layer collected."""
        if self._graph is None:
            layers, deps = {}, {}
            for hlg in [f.dask for f in self.forward.values()] + [HighLevelGraph(self.layers, self.deps)]:
                for name, layer in hlg.layers.items():
                    if name not in layers or (layer is not layers[name] and holds_data(layer)
                                              and not holds_data(layers[name])):
                        layers[name], deps[name] = layer, hlg.dependencies.get(name, set())
            self._graph = HighLevelGraph(layers, {n: d & layers.keys() for n, d in deps.items()})
        return da.Array(self._graph, a.name, a.chunks, meta=a._meta)


def _layers_read(layer):
    """Names of the layers whose keys the tasks of ``layer`` read."""
    return {k[0] if isinstance(k, tuple) else k for v in layer.mapping.values() if isinstance(v, GraphNode)
            for k in v.dependencies}


def one_chunk(a, fill, prefix, dtype=None):
    """An array ``<prefix>-<token>`` of ``a``'s shape, chunk type and dtype (or ``dtype``) in one chunk,
    ``fill(meta, shape, dtype)`` making the block, built directly: ``da.ones`` spends ~2 ms a call on tokenizing and
    meta
    inference, a tenth of a small step's client time.  A Blockwise layer (not one materialized
    task): fused into the tasks that read it."""
    name, ind = f"{prefix}-" + tokenize(a.name), tuple(range(a.ndim))
    dtype = a.dtype if dtype is None else dtype
    layer = blockwise(fill, name, ind, prototype(a), None, a.shape, None, dtype, None,
                      numblocks={}, new_axes={i: 1 for i in ind})
    return da.Array(HighLevelGraph({name: layer}, {name: set()}), name, a.chunks, meta=a._meta.astype(dtype))


def prototype(a):
    """``a``'s meta as a task's prototype argument: a 0-d array's meta is a value (a computed
    scalar's own), which would make every step's graph a new one to the step cache; an empty
    1-d array of its type says the same (its array type and dtype)."""
    return a._meta.reshape(-1)[:0] if a.ndim == 0 else a._meta


def relabel(a, prefix):
    """``a`` ending in a layer named ``<prefix>-<token>``: fusion keeps the name of a chain's last
    layer, so the dashboard shows which rule ran.  The layer da.map_blocks would make, without its
    signature inspection and meta checks (a third of a rule's build time): it is fused away, only
    its name stays."""
    name, ind = f"{prefix}-{tokenize(a.name)}", tuple(range(a.ndim))
    layer = blockwise(_identity, name, ind, a.name, ind, numblocks={a.name: a.numblocks})
    return da.Array(HighLevelGraph.from_collections(name, layer, [a]), name, a.chunks, meta=a._meta)


def _identity(block):
    return block


_identity.row_rule = "elementwise"  # (runs on row blocks in a fused step: daskgrad._dask.rows)
