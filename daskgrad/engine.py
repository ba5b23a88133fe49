"""Step 4 of the data flow: the reverse pass.

``backward``/``grad`` do three things, in this order:

1. **check** everything on the client (gradient shapes, requires_grad, freed
   nodes, version counters), so bad input raises before anything is submitted;
2. **build** the reverse graph by walking the nodes in topological order and
   calling each VJP rule on lazy tensors (hooks see lazy gradients too);
3. **submit once**: every ``.grad`` to write (and, with ``retain_graph``, every
   saved forward value) is persisted in a single dask submission, so the shared
   forward runs once; then ``.grad`` is written and the graph is released.
"""
from __future__ import annotations

import contextlib
import threading
import warnings
import weakref

import dask

from . import _dask as door, _state, chunk, graph, runtime
from .anomaly import nan_flags, raise_for_nan
from .graph import AccumulateGrad, FREED_MESSAGE, size_repr
from ._modes import is_anomaly_enabled, set_grad_enabled
from ._tensor import Tensor
from .ops import ones_like, rechunk, stack, sum_to, zeros_like
from .ops.elementwise import real


def _as_tuple(x):
    if isinstance(x, Tensor):
        return (x,)
    return tuple(x)


def _implicit_ones(out):
    """The gradient of a one-element output: ones in one chunk of the output's array type."""
    a = out.array
    if a.npartitions != 1:
        return ones_like(out)
    return Tensor._make(door.one_chunk(a, chunk.ones, "ones_like"))


def _make_grads(outputs, grad_outputs):
    """torch's ``_make_grads``: check given gradients, create implicit ones for scalars."""
    if grad_outputs is None:
        grad_outputs = (None,) * len(outputs)
    else:
        grad_outputs = _as_tuple(grad_outputs)
    if len(grad_outputs) != len(outputs):
        raise RuntimeError(f"got {len(outputs)} tensors and {len(grad_outputs)} gradients")
    grads = []
    for i, (out, g) in enumerate(zip(outputs, grad_outputs)):
        if any(n != n for n in out.shape):
            raise RuntimeError(
                f"output[{i}] has unknown chunk sizes (a NaN shape, e.g. after boolean-mask indexing), so its "
                "gradient cannot be checked before submitting; reduce it first (for example .sum()) and call "
                "backward on the result")
        if g is not None:
            if not isinstance(g, Tensor):
                raise TypeError(f"gradients can be either Tensors or None, but got {type(g).__name__}")
            if g.shape != out.shape:
                raise RuntimeError(f"Mismatch in shape: grad_output[{i}] has a shape of {size_repr(g.shape)} "
                                   f"and output[{i}] has a shape of {size_repr(out.shape)}.")
            grads.append(g)
        elif out.requires_grad:
            if out.numel() != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            if out.dtype.kind == "c":
                raise RuntimeError("grad can be implicitly created only for real scalar outputs but got "
                                   f"daskgrad.{out.dtype}")
            grads.append(_implicit_ones(out))
        else:
            grads.append(None)
    for i, out in enumerate(outputs):
        if not out.requires_grad:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not have a grad_fn")
    return grads


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """``torch.autograd.backward``: accumulate into ``.grad`` from several roots at once."""
    tensors = _as_tuple(tensors)
    grads = _make_grads(tensors, grad_tensors)
    if inputs is not None:
        inputs = _as_tuple(inputs)
        if not inputs:
            raise RuntimeError("`inputs` argument to `backward()` cannot be empty.")
        for t in inputs:
            if not t.requires_grad:
                raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
    _run(tensors, grads, retain_graph, create_graph, inputs, accumulate=True)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, allow_unused=None,
         is_grads_batched=False, materialize_grads=False, lazy=False):
    """``torch.autograd.grad``: return d(outputs)/d(inputs) without touching ``.grad``.

    ``lazy=True`` returns gradients that are not computed yet (nothing is
    submitted), for composing into further dask graphs.
    """
    if materialize_grads and allow_unused is False:
        raise ValueError("Expected allow_unused to be True or not passed when materialize_grads=True, "
                         "but got: allow_unused=False.")
    allow_unused = bool(allow_unused) or materialize_grads
    keys = list(inputs) if isinstance(inputs, dict) else None
    inputs = _as_tuple(inputs.values() if keys is not None else inputs)
    outputs = _as_tuple(outputs)
    if not inputs:
        raise RuntimeError("`inputs` argument to `grad()` cannot be empty.")
    batch = None
    if is_grads_batched:
        grad_outputs, batch = _unbatch(outputs, grad_outputs)
    grads = _make_grads(outputs, grad_outputs)
    for t in inputs:
        if not t.requires_grad:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
    found = _run(outputs, grads, retain_graph, create_graph, inputs, accumulate=False, lazy=lazy,
                 allow_unused=allow_unused, batch=batch)
    result = []
    for t in inputs:
        g = found.get(id(t))
        if g is None and materialize_grads:
            g = zeros_like(t.detach())
            if batch is not None:
                g = stack([g] * len(batch))
        result.append(g)
    return dict(zip(keys, result)) if keys is not None else tuple(result)


def _unbatch(outputs, grad_outputs):
    """``is_grads_batched``: the first axis of every grad_output is a batch of cotangents.  Returns
    the first cotangent of each (for the checks) and the whole batch, one tuple per batch entry."""
    if grad_outputs is None:
        raise RuntimeError("is_grads_batched=True needs grad_outputs, batched along their first dimension")
    batched = _as_tuple(grad_outputs)
    for i, (out, g) in enumerate(zip(outputs, batched)):
        if isinstance(g, Tensor) and tuple(g.shape[1:]) != tuple(out.shape):
            raise RuntimeError(
                "If `is_grads_batched=True`, we interpret the first dimension of each grad_output as the batch "
                "dimension. The sizes of the remaining dimensions are expected to match the shape of "
                f"corresponding output, but a mismatch was detected: grad_output[{i}] has a shape of "
                f"{size_repr(g.shape)} and output[{i}] has a shape of {size_repr(out.shape)}. If you only want "
                "some tensors in `grad_output` to be considered batched, consider using vmap.")
    n = batched[0].shape[0]
    batch = [tuple(g[b] for g in batched) for b in range(n)]
    return batch[0], batch


def _run(roots, root_grads, retain_graph, create_graph, inputs, accumulate, lazy=False,
         allow_unused=True, batch=None):
    if retain_graph is None:
        retain_graph = create_graph
    root_nodes = [graph.edge(t) for t in roots]
    order, runs, targets = _plan(root_nodes, inputs, allow_unused)
    with _claim(order, runs, retain_graph):
        if batch is not None:  # one reverse pass per cotangent, stacked, still one submission
            passes = [_build(order, runs, targets, root_nodes, _make_grads(roots, gs), create_graph, False, False)
                      for gs in batch]
            found = {k: stack([p[1][k] for p in passes]) for k in passes[0][1]}
            executed = list({n: None for p in passes for n in p[2]})
            return _submit([], found, executed, [c for p in passes for c in p[3]], retain_graph, False, lazy, roots,
                           create_graph)
        writes, found, executed, nan_checks = _build(order, runs, targets, root_nodes, root_grads, create_graph,
                                                     accumulate and inputs is None, accumulate)
        return _submit(writes, found, executed, nan_checks, retain_graph, accumulate, lazy, roots, create_graph)


_claim_lock = threading.Lock()
_claimed = weakref.WeakSet()  # nodes that a running backward will free


@contextlib.contextmanager
def _claim(order, runs, retain_graph):
    """Check the graph, and take the nodes a backward will free: a second thread backpropagating
    through the same graph meanwhile gets torch's "second time" error, as if it came after."""
    with _claim_lock:
        _check(order, runs)
        mine = [] if retain_graph else [n for n in order if n in runs and n._had_saved]
        if any(n in _claimed for n in mine):
            raise RuntimeError(FREED_MESSAGE)
        _claimed.update(mine)
    try:
        yield
    finally:
        with _claim_lock:
            for n in mine:
                _claimed.discard(n)


_grad_locks = weakref.WeakKeyDictionary()  # a tensor's node (compared by identity) -> its lock


@contextlib.contextmanager
def _grads_locked(tensors):
    """Hold the ``.grad`` of each tensor from reading it to writing the sum, so that threads
    accumulating into a shared leaf add up (ordered by id: no two threads wait on each other)."""
    with _claim_lock:
        nodes = {id(n): n for n in map(graph.edge, tensors)}
        locks = [_grad_locks.setdefault(n, threading.Lock()) for _, n in sorted(nodes.items())]
    with contextlib.ExitStack() as stack:
        for lock in locks:
            stack.enter_context(lock)
        yield


def _plan(root_nodes, inputs, allow_unused):
    """The nodes to visit in order, those whose rule runs, and the nodes whose cotangent is wanted."""
    order = graph.toposort(root_nodes)
    targets = {}  # node -> tensors whose gradient is the cotangent arriving at that node
    for t in inputs or ():
        targets.setdefault(graph.edge(t), []).append(t)
    if inputs is None:
        return order, {n for n in order if not isinstance(n, AccumulateGrad)}, targets
    reachable = set(order)
    for i, t in enumerate(inputs):
        if graph.edge(t) not in reachable and not allow_unused:
            raise RuntimeError(f"The differentiated Tensor at index {i} appears to not have been used in "
                               "the graph. Set allow_unused=True if this is the desired behavior.")
    needed = set(targets)  # nodes from which a wanted node can be reached
    for n in reversed(order):
        if any(c in needed for c, _ in n.next_functions):
            needed.add(n)
    order = [n for n in order if n in needed]
    return order, {n for n in order if any(c in needed for c, _ in n.next_functions)}, targets


def _check(order, runs):
    """Freed nodes and in-place modified saved tensors raise before anything is built or sent."""
    for n in order:
        if n in runs:
            if n.freed:
                raise RuntimeError(FREED_MESSAGE)
            for v in n._saved.values():
                if isinstance(v, graph.SavedTensor):
                    v.check_version()


def _build(order, runs, targets, root_nodes, root_grads, create_graph, all_leaves, accumulate):
    """Walk the nodes, calling hooks and VJP rules on lazy tensors; returns what to write."""
    # with create_graph the cotangents are user-visible tensors of the graph, so they keep their lineage
    lin = _Arena() if not create_graph else None
    take = lin.take if lin else (lambda t: t)
    cot = {}
    for n, g in zip(root_nodes, root_grads):
        if n is not None:
            g = take(_conform(g, n._output_meta, "root", 0))
            cot[n] = take(cot[n] + g) if n in cot else g
    writes, found, executed, nan_checks = {}, {}, [], []
    with set_grad_enabled(create_graph):
        for n in order:
            g = cot.pop(n, None)
            if g is None:
                continue
            sink = isinstance(n, AccumulateGrad)
            hooks = n.variable._hooks if sink else n._tensor_hooks
            if (hooks or n._prehooks) and lin:  # user code sees whole tensors it can compute
                g = lin.full(g)
            g = _tensor_hooks(hooks, g)
            for hook in list(n._prehooks.values()):
                r = hook((g,))
                if r is not None:
                    g = r[0]
            g = take(g)
            for t in targets.get(n, ()):
                found[id(t)] = g
                if accumulate:
                    writes[id(t)] = (t, g)
            retained = n.variable if sink else (n._retained() if n._retained is not None else None)
            if all_leaves and retained is not None:
                writes[id(retained)] = (retained, g)
            if n not in runs:
                continue
            outs = _call_rule(n, g, create_graph, lin)
            executed.append(n)
            for i, ((child, _), o) in enumerate(zip(n.next_functions, outs)):
                if child is None or o is None:
                    continue
                o = take(o)
                if is_anomaly_enabled():
                    nan_checks.append((n, i, o))
                cot[child] = take(cot[child] + o) if child in cot else o
    writes = list(writes.values())
    if lin:
        writes = [(t, lin.full(g)) for t, g in writes]
        found = {k: lin.full(g) for k, g in found.items()}
        nan_checks = [(n, i, lin.full(o)) for n, i, o in nan_checks]
    return writes, found, executed, nan_checks


class _Arena(door.Arena):
    """:class:`._dask.Arena` for tensors: the rules' outputs go in on stand-ins, come out whole."""

    def take(self, t):
        a = super().take(t.array)
        return t if a is t.array else Tensor._make(a, t.grad_fn, t.requires_grad)

    def full(self, t):
        return Tensor._make(super().full(t.array), t.grad_fn, t.requires_grad)


def _call_rule(n, g, create_graph, lin=None):
    user = lin is not None and n._prim.user_code
    if user:  # a custom Function's backward is user code: it may compute or keep what it is given
        g = lin.full(g)
    with _placement(g):
        outs = n._prim.rule(g, graph._Saved(n, None if lin is None or user else lin.stub), **n._params)
        outs = outs if isinstance(outs, tuple) else (outs,)
        if len(outs) != len(n.next_functions):
            raise RuntimeError(f"function {n.name()} returned an incorrect number of gradients "
                               f"(expected {len(n.next_functions)}, got {len(outs)})")
        outs = tuple(None if o is None or m is None else _conform(o, m, n.name(), i)
                     for i, (o, m) in enumerate(zip(outs, n._input_meta)))
        if not create_graph:
            outs = tuple(None if o is None else _label(o, n) for o in outs)
    if n._hooks and lin is not None:
        outs, g = tuple(None if o is None else lin.full(lin.take(o)) for o in outs), lin.full(g)
    for hook in list(n._hooks.values()):
        hook(outs, (g,))
    return outs


def _submit(writes, found, executed, nan_checks, retain_graph, accumulate, lazy, roots, create_graph):
    """One persist for every gradient (and retained saved value), then write ``.grad`` and free."""
    with _grads_locked(t for t, _ in writes):
        with set_grad_enabled(create_graph):
            new_grads = [(t, g if t._grad is None else t._grad + g) for t, g in writes]
        if not lazy:
            new_grads, found = _persist(new_grads, found, executed, nan_checks, retain_graph, accumulate, roots)
        for t, g in new_grads:
            if t.grad_fn is not None:
                t.retain_grad()  # backward(inputs=[non_leaf]) fills its .grad, as torch does
            old = t._grad
            if old is not None and not create_graph and not old.requires_grad and not lazy:
                # torch accumulates in place: a reference to the old .grad sees the sum
                old._storage.array, old._storage.version = g.array, old._storage.version + 1
                _state.hold(old._storage)
            else:
                t._grad = g
    for t, _ in new_grads:
        for hook in list(t._post_hooks.values()):
            hook(t)
    if not retain_graph:
        for n in executed:
            n.release()
    return found


def _persist(new_grads, found, executed, nan_checks, retain_graph, accumulate, roots):
    """The submission.  It also computes the values the user holds and will ask for next: the
    roots (``loss.item()`` after ``backward()`` then runs nothing) and the leaves written to,
    whose values every later step reads; they are swapped into their storage."""
    saved = []
    if retain_graph:
        saved = [v for n in executed for v in n.saved_tensors() if v.leaf is None and not v.persisted]
    arrays = [g.array for _, g in new_grads] + ([] if accumulate else [t.array for t in found.values()])
    flags = nan_flags(nan_checks)
    out = runtime.persist(arrays + [s.data for s in saved] + flags, phase="backward",
                          store=[t._storage for t in list(roots) + [t for t, _ in new_grads]],
                          keep=slice(0, len(arrays) + len(saved)))  # all the user holds
    raise_for_nan(nan_checks, out[len(out) - len(flags):])
    grads_out, found_out, saved_out = (out[:len(new_grads)], out[len(new_grads):len(arrays)],
                                       out[len(arrays):len(arrays) + len(saved)])
    new_grads = [(t, _computed(g, a)) for (t, g), a in zip(new_grads, grads_out)]
    if not accumulate:
        found = {k: _computed(g, a) for (k, g), a in zip(found.items(), found_out)}
    for g in [g for _, g in new_grads] + ([] if accumulate else list(found.values())):
        _state.hold(g._storage, door.flat_keys(g.array))  # kept on two workers while held
    for s, a in zip(saved, saved_out):
        s.pin(a)
    if retain_graph:
        for n in executed:
            runtime.retain(n)
    return new_grads, found


def _computed(g, array):
    """The gradient ``g`` holding its persisted ``array``.  A leaf that requires grad (a cotangent
    passed through unchanged, e.g. ``grad(x + 0, x, v, create_graph=True)``) is returned as itself:
    a copy would cut double backward off from it, since a leaf is reached through its identity."""
    if g.grad_fn is None and g.requires_grad:
        return g
    return Tensor._make(array, g.grad_fn, g.requires_grad)


def _label(t, node):
    """End the rule's output in a layer named ``<op>-vjp-<token>``: the dashboard shows which rule ran."""
    return Tensor._make(door.relabel(t.array, f"{node._prim.label(node)}-vjp"))


def _placement(g):
    """GPU work is pinned to GPU workers.  Every layer a rule makes (its rechunks too) carries the
    annotation, since Blockwise fusion gives a fused task the annotations of all its parts."""
    resources = dask.config.get("daskgrad.vjp-resources", None)
    if resources is None and g.device == "cuda":
        resources = {"GPU": 1}
    return dask.annotate(resources=resources) if resources else contextlib.nullcontext()


def _tensor_hooks(hooks, g):
    for hook in list(hooks.values()):
        r = hook(g)
        if r is not None:
            if not isinstance(r, Tensor) or r.shape != g.shape:
                name = getattr(hook, "__name__", type(hook).__name__)
                raise RuntimeError(f"hook '{name}' has changed the size of value")
            g = r
    return g


def _conform(g, meta, name, index):
    """Give a cotangent the primal's shape (summing broadcast axes), dtype and chunks."""
    shape, dtype, chunks = meta
    if not isinstance(g, Tensor):
        raise TypeError(f"function {name} returned a gradient of type {type(g).__name__}, not a Tensor")
    if any(n != n for n in shape):  # unknown chunk sizes (after a boolean mask) cannot be checked
        return g if g.dtype == dtype else g.astype(dtype)
    if g.shape != shape:
        if not _broadcastable(shape, g.shape):
            raise RuntimeError(f"Function {name} returned an invalid gradient at index {index} - got "
                               f"{list(g.shape)} but expected shape compatible with {list(shape)}")
        g = sum_to(g, shape)
    if g.dtype.kind == "c" and dtype.kind != "c":  # torch keeps the real part, and says nothing
        g = real(g)
    if g.dtype != dtype:
        g = g.astype(dtype)
    if g.chunks != chunks:
        g = rechunk(g, chunks)
    return g


def _broadcastable(shape, to_shape):
    if len(shape) > len(to_shape):
        return False
    return all(s == t or s == 1 for s, t in zip(shape[::-1], to_shape[::-1]))


# Tensor.backward, installed here: the tensor sits on a floor below the engine
def _tensor_backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
    """Accumulate d(self)/d(leaf), weighted by ``gradient``, into every leaf's ``.grad``.

    Checks everything first, then submits one dask graph for all gradients and
    returns when they are in memory (on the current distributed Client if any).
    """
    if create_graph:
        warnings.warn(
            "Using backward() with create_graph=True will create a reference cycle between the "
            "parameter and its gradient which can cause a memory leak. We recommend using "
            "autograd.grad when creating the graph to avoid this. If you have to use this function, "
            "make sure to reset the .grad fields of your parameters to None after use to break the "
            "cycle and avoid the leak.", UserWarning, stacklevel=2)
    if gradient is not None and not isinstance(gradient, Tensor):
        if isinstance(gradient, (list, tuple)):
            raise TypeError(f"gradients can be either Tensors or None, but got {type(gradient[0]).__name__}")
        raise TypeError(f"'{type(gradient).__name__}' object is not iterable")
    backward([self], None if gradient is None else [gradient], retain_graph, create_graph, inputs)


Tensor.backward = _tensor_backward
