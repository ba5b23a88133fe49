"""A long lineage held as one layer: graphs stay a few layers deep however many ops are recorded."""
from __future__ import annotations

import dask.array as da
from .internals import HighLevelGraph, Layer

LINEAGE_LAYERS = 64  # an array's graph holds at most this many layers before its history is folded


class Folded(Layer):
    """An array's graph held as one layer under the array's name (see :func:`fold`): a complete
    mapping of its tasks, materialized only if dask itself is asked to run it."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self._tasks = inner, None

    def _mapping(self):
        if self._tasks is None:
            tasks = {}
            for _, layer, _ in flat_layers(self.inner):
                tasks.update(layer)
            self._tasks = tasks
        return self._tasks

    def __getitem__(self, key):
        return self._mapping()[key]

    def __iter__(self):
        return iter(self._mapping())

    def __len__(self):
        return len(self._mapping())

    def __contains__(self, key):
        return key in self._mapping()

    def is_materialized(self):
        return self._tasks is not None

    def get_output_keys(self):
        return self._mapping().keys()


def fold(array):
    """``array`` with its graph folded into one layer, under its own name, when it has many layers.

    dask copies every layer of every input into each array it makes (``from_collections``), so a
    chain of N recorded ops costs O(N²) to build: 4,000 ops took 6 s, 100,000 would take hours.
    Folding keeps every graph to a few layers.  Arrays built on a folded one depend on its name,
    as before; :func:`flat_layers` unfolds it for our own optimization, so fusion sees exactly
    the layers it would have seen, and dask used directly sees one opaque, complete layer.
    """
    hlg = array.dask
    if len(hlg.layers) <= LINEAGE_LAYERS or array.name not in hlg.layers:
        return array
    return da.Array(HighLevelGraph({array.name: Folded(hlg)}, {array.name: set()}), array.name, array.chunks,
                    meta=array._meta)


def flat_layers(hlg):
    """``(name, layer, dependencies)`` of every layer of ``hlg``, folds unfolded (iteratively: they
    nest once per ``LINEAGE_LAYERS`` ops, and a chain's tensors share them).

    Each fold is unfolded once, told apart by identity, not name: an array whose own layer is a
    fold is folded again, under the same name, when more layers join its graph, and that fold's
    inner graph holds the first fold under that name; skipping it by name dropped the array's
    tasks from the graph (dask's blockwise optimization then failed with a KeyError: 51 steps of
    ``checkpoint_steps`` on a one-chunk state were enough)."""
    stack, unfolded = [hlg], set()
    while stack:
        g = stack.pop()
        for name, layer in g.layers.items():
            if isinstance(layer, Folded):
                if id(layer) not in unfolded:
                    unfolded.add(id(layer))
                    stack.append(layer.inner)
                continue
            yield name, layer, set(g.dependencies.get(name, ()))
