"""How much memory a ``backward()`` will hold, predicted before anything runs.

:func:`estimate_memory` builds the reverse graph the way ``loss.backward()`` would (lazily, with
nothing submitted and nothing freed), optimizes the whole submission as :mod:`runtime` does,
orders it with ``dask.order`` and simulates the order the scheduler that will run it follows (dask's
local scheduler: a depth-first walk; a distributed client's workers: the tasks a worker holds
first, those their results make ready a round trip later): a task's output is held from when it
runs until its last dependent has run; the results the submission keeps (the gradients, the loss,
leaves written in place) are held to the end.

Sizes are shape x itemsize of each task's output chunk, read from the chunks of the dask arrays
behind the graph: the forward values the nodes saved, the leaves, the roots, every array the
reverse pass creates, and every array whose layer the graph holds (a checkpointed forward's
states); a chunk that is one value broadcast (``zeros_like``, a stencil's zero padding) counts one
item, as a distributed worker counts it.  A task belonging to no array (inside a fused op, e.g. a
reduction's partial sums) is sized as its smallest input, an upper bound for the reductions that
make them.  Chunks already in memory (persisted data) are counted as held throughout.
"""
from __future__ import annotations

from . import _dask as door, _state, graph, runtime
from ._dask import MemoryEstimate, PeakTracker
from .engine import grad
from ._modes import no_grad

__all__ = ["estimate_memory", "MemoryEstimate", "PeakTracker"]


def estimate_memory(*roots, report=False):
    """Peak bytes that ``backward()`` of ``roots`` (scalar losses) would hold in (cluster) memory.

    Nothing is computed and the graph stays usable: the same ``loss.backward()`` can follow.
    Tensor hooks run, as they would during the backward.  Returns an ``int`` or, with
    ``report=True``, a :class:`~daskgrad._dask.MemoryEstimate`.
    """
    roots = list(roots[0]) if len(roots) == 1 and isinstance(roots[0], (list, tuple)) else list(roots)
    leaves = {}
    for node in graph.toposort([r.grad_fn for r in roots if r.grad_fn is not None]):
        var = getattr(node, "variable", None)
        if isinstance(node, graph.AccumulateGrad) and var is not None:
            leaves[id(var)] = var
    leaves = list(leaves.values())
    if not leaves:
        raise RuntimeError("element 0 of tensors does not require grad and does not have a grad_fn")
    with door.recording() as made:
        grads = grad(roots, leaves, allow_unused=True, retain_graph=True, lazy=True)
        with no_grad():
            writes = [g if t.grad is None else t.grad + g for t, g in zip(leaves, grads) if g is not None]
    arrays = [g.array for g in writes] + [r.array for r in roots if not door.materialized(r.array)]
    arrays += [door.value_of(v) for v in _state.pending_values(lambda v: door.in_memory(v) is not None)]
    known = list(made) + [a for a in arrays]
    for node in graph.toposort([r.grad_fn for r in roots if r.grad_fn is not None]):
        known += [v.data for v in node.saved_tensors()]
        var = getattr(node, "variable", None)
        if var is not None:
            known.append(var.array)
    est = door.simulate(runtime.optimize(arrays), known, graphs=arrays, distributed=door.current_client() is not None)
    return est if report else est.peak
