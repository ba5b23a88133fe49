"""Step 4 of the data flow: the reverse pass, read as HIPS autograd's ``backward_pass``.

``backward``/``grad`` check their arguments on the client, then:

1. **plan** (:class:`Plan`): what the call asks for and the nodes that answer it, checked
   (freed nodes, version counters) so that bad input raises before anything is built or sent;
2. **walk** the nodes in reverse topological order (:func:`_reverse_pass`), summing the cotangents
   each receives, and **call** its VJP rule on lazy tensors (hooks see lazy gradients too);
3. **deliver** each node's cotangent (:class:`Delivery`): a ``.grad`` to write, or a gradient
   that ``grad()`` returns;
4. **submit once**: every ``.grad`` to write (and, with ``retain_graph``, every saved forward
   value) is persisted in a single dask submission, so the shared forward runs once; then
   ``.grad`` is written and the graph is released.
"""
from __future__ import annotations

import contextlib
import itertools
import sys
import threading
import warnings
import weakref
from dataclasses import dataclass, field
from typing import NamedTuple

import dask

from . import _dask as door, _state, chunk, graph, runtime
from .anomaly import nan_flags, raise_for_nan
from .graph import AccumulateGrad, FREED_MESSAGE, size_repr
from ._dask.program import CacheKey
from ._modes import carried, current_trace, is_anomaly_enabled, is_grad_enabled, set_grad_enabled
from ._tensor import Tensor, _ViewStorage, recorded
from .ops import ones_like, rechunk, stack, sum_to, zeros_like
from .ops.elementwise import real_part


# ------------------------------------------------------------------ the records a backward passes on
@dataclass(frozen=True, slots=True)
class Plan:
    """One ``backward``/``grad`` call: what it asks for, and the part of the graph that answers it."""

    roots: tuple            # the tensors differentiated
    grads: list             # their cotangents, checked (torch's _make_grads)
    inputs: tuple | None    # the tensors whose gradients are wanted; None: every leaf reached
    retain_graph: bool      # retain the saved values (pinned in memory) for another backward
    create_graph: bool      # the gradients are tensors of a graph, to differentiate again
    accumulate: bool        # backward(): sum into .grad; grad(): return the gradients
    lazy: bool              # grad(lazy=True): return them unsubmitted
    batch: list | None      # is_grads_batched: one tuple of root cotangents per pass
    nodes: list             # the roots' nodes
    order: list             # the nodes to visit, each after every node that reads it
    runs: set               # those whose rule runs
    targets: dict           # node -> the tensors whose gradient is the cotangent arriving there
    all_leaves: bool        # backward() without inputs=: write every leaf reached, and every retain_grad()


class GradWrite(NamedTuple):
    """A pending ``tensor.grad`` write: the gradient this backward adds (then the sum)."""

    tensor: Tensor
    grad: Tensor


class NanCheck(NamedTuple):
    """Anomaly mode's check of one rule output: ``node``'s cotangent for its input ``index``."""

    node: graph.Node
    index: int
    cotangent: Tensor


@dataclass(slots=True)
class Delivery:
    """What a reverse pass hands to the submission."""

    writes: dict = field(default_factory=dict)      # id(tensor) -> GradWrite: the .grad to write
    found: dict = field(default_factory=dict)       # id(input) -> its gradient: what grad() returns
    executed: list = field(default_factory=list)    # nodes whose rule ran, in order: released or retained
    nan_checks: list = field(default_factory=list)  # anomaly mode: a NanCheck per rule output
    arrived: list = field(default_factory=list)     # (node, its cotangent), in the order they arrived

    def deliver(self, plan, node, g):
        """``g`` arrived at ``node``: it is the gradient of the tensors ``node`` stands for."""
        for t in plan.targets.get(node, ()):
            self.found[id(t)] = g
            if plan.accumulate:
                self.writes[id(t)] = GradWrite(t, g)
        if plan.all_leaves:
            t = node.variable if isinstance(node, AccumulateGrad) else (
                node._retained() if node._retained is not None else None)
            if t is not None and t.requires_grad:  # (a leaf set to requires_grad=False since: torch's
                self.writes[id(t)] = GradWrite(t, g)  # AccumulateGrad skips it)


# ------------------------------------------------------------------ the entry points
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
    _run(_plan(tensors, grads, inputs=inputs, retain_graph=retain_graph, create_graph=create_graph,
               accumulate=True))


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
    # in a function daskgrad.compile traces, the gradients join the function's one submission
    lazy = lazy or current_trace() is not None
    found = _run(_plan(outputs, grads, inputs=inputs, retain_graph=retain_graph, create_graph=create_graph,
                       accumulate=False, lazy=lazy, allow_unused=allow_unused, batch=batch))
    result = []
    for i, t in enumerate(inputs):
        g = found.get(id(t))
        if g is None and not allow_unused:  # (reached, but every rule on the way gave None: torch's check)
            raise RuntimeError(f"The differentiated Tensor at index {i} appears to not have been used in the graph. "
                               "Set allow_unused=True if this is the desired behavior.")
        if g is None and materialize_grads:
            g = zeros_like(t.detach()).requires_grad_(create_graph)
            if batch is not None:
                g = stack([g] * len(batch))
        result.append(g)
    return dict(zip(keys, result)) if keys is not None else tuple(result)


def _as_tuple(x):
    if isinstance(x, Tensor):
        return (x,)
    return tuple(x)


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
            if (out.dtype.kind == "c") != (g.dtype.kind == "c"):  # (torch's check: no silent real part)
                raise RuntimeError("For complex Tensors, both grad_output and output are required to have the same "
                                   f"dtype. Mismatch in dtype: grad_output[{i}] has a dtype of daskgrad.{g.dtype} "
                                   f"and output[{i}] has a dtype of daskgrad.{out.dtype}.")
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


def _implicit_ones(out):
    """The gradient of a one-element output: ones in one chunk of the output's array type."""
    v = recorded(out)
    if v.npartitions != 1:
        return ones_like(out)
    return Tensor._make(door.defer(_ones_chunk, (v,)))


def _ones_chunk(a):
    return door.one_chunk(a, chunk.ones, "ones_like")


def _unbatch(outputs, grad_outputs):
    """``is_grads_batched``: the first axis of every grad_output is a batch of cotangents.  Returns
    the first cotangent of each (for the checks) and the whole batch, one tuple per batch entry."""
    if grad_outputs is None:
        raise RuntimeError("is_grads_batched=True needs grad_outputs, batched along their first dimension")
    batched = _as_tuple(grad_outputs)
    for i, (out, g) in enumerate(zip(outputs, batched)):
        if isinstance(g, Tensor) and tuple(g.shape[1:]) != tuple(out.shape):
            # (torch 2.13 names the shape of grad[0] less its first dimension: grad's shape from the third)
            raise RuntimeError(
                "If `is_grads_batched=True`, we interpret the first dimension of each grad_output as the batch "
                "dimension. The sizes of the remaining dimensions are expected to match the shape of "
                f"corresponding output, but a mismatch was detected: grad_output[{i}] has a shape of "
                f"{size_repr(g.shape[2:])} and output[{i}] has a shape of {size_repr(out.shape)}. If you only want "
                "some tensors in `grad_output` to be considered batched, consider using vmap.")
    n = batched[0].shape[0]
    batch = [tuple(g[b] for g in batched) for b in range(n)]
    return batch[0], batch


# ------------------------------------------------------------------ plan
def _plan(roots, grads, *, inputs, retain_graph, create_graph, accumulate, lazy=False, allow_unused=True,
          batch=None):
    """The :class:`Plan` of a call whose arguments are checked; ``retain_graph`` defaults to
    ``create_graph``, as in torch."""
    nodes = [graph.edge(t) for t in roots]
    route = _route(nodes, inputs, allow_unused)
    return Plan(roots=roots, grads=grads, inputs=inputs,
                retain_graph=create_graph if retain_graph is None else retain_graph, create_graph=create_graph,
                accumulate=accumulate, lazy=lazy, batch=batch, nodes=nodes,
                order=route.order, runs=route.runs, targets=route.targets, all_leaves=accumulate and inputs is None)


class Route(NamedTuple):
    """The part of the graph a call walks (the fields of :class:`Plan` of the same names)."""

    order: list    # the nodes to visit, each after every node that reads it
    runs: set      # those whose rule runs
    targets: dict  # node -> the tensors whose gradient is the cotangent arriving there


def _route(nodes, inputs, allow_unused):
    """The nodes below ``nodes`` that a gradient of ``inputs`` (of every leaf if None) passes through."""
    order = graph.toposort(nodes)
    targets = {}
    for t in inputs or ():
        targets.setdefault(graph.edge(t), []).append(t)
    if inputs is None:
        return Route(order, {n for n in order if not isinstance(n, AccumulateGrad)}, targets)
    reachable = set(order)
    for i, t in enumerate(inputs):
        if graph.edge(t) not in reachable and not allow_unused:
            raise RuntimeError(f"The differentiated Tensor at index {i} appears to not have been used in "
                               "the graph. Set allow_unused=True if this is the desired behavior.")
    needed = set(targets)  # nodes from which a wanted node can be reached
    runs = set()  # those reaching one through what they read: their rules run
    for n in reversed(order):  # (each after all it reads: whether they are needed is known)
        for c, _ in n.next_functions:
            if c in needed:
                needed.add(n)
                runs.add(n)
                break
    return Route([n for n in order if n in needed], runs, targets)


_claim_lock = threading.Lock()
_claimed = weakref.WeakSet()  # nodes that a running backward will free


@contextlib.contextmanager
def _claim(plan):
    """Check the graph, and take the nodes a backward will free: a second thread backpropagating
    through the same graph meanwhile gets torch's "second time" error, as if it came after."""
    with _claim_lock:
        _check(plan)
        mine = [] if plan.retain_graph else [n for n in plan.order if n in plan.runs and n._had_saved]
        if any(n in _claimed for n in mine):
            raise RuntimeError(FREED_MESSAGE)
        _claimed.update(mine)
    try:
        yield
    finally:
        with _claim_lock:
            for n in mine:
                _claimed.discard(n)


def _check(plan):
    """Freed nodes and in-place modified saved tensors raise before anything is built or sent."""
    trace = current_trace()
    if trace is not None and any(n._seq < trace.first_node for n in plan.runs):
        # a replay would not free them, nor raise the second time as a backward through them does
        trace.broke("it differentiates through ops recorded before it was called")
    for n in plan.order:
        if n in plan.runs:
            if n.freed:
                raise RuntimeError(FREED_MESSAGE)
            for v in n._saved.values():
                if isinstance(v, graph.SavedTensor):
                    v.check_version()
            for v in n._guards:
                v.check_version()


# ------------------------------------------------------------------ walk, call rules, deliver
def _run(plan):
    """:func:`_run_here`, on a new thread when this one's stack is deep: a backward called from a
    custom Function's backward, thousands of levels down, would exhaust the stack (torch's engine
    hops to a new thread too)."""
    if not _stack_is_deep():
        return _run_here(plan)
    done = {}
    run = carried(_run_here)  # the new thread runs under this thread's modes

    def target():
        try:
            done["value"] = run(plan)
        except BaseException as e:  # noqa: BLE001 - re-raised in the calling thread
            done["error"] = e

    thread = threading.Thread(target=target, name="daskgrad-reentrant-backward")
    thread.start()
    thread.join()
    if "error" in done:
        raise done["error"]
    return done["value"]


def _stack_is_deep():
    try:
        sys._getframe(sys.getrecursionlimit() // 3)
    except ValueError:
        return False
    return True


def _run_here(plan):
    """The reverse pass and its one submission, holding the nodes the call frees; returns the
    gradients of ``plan.inputs`` by ``id``."""
    with _claim(plan), door.gc_paused():
        if plan.batch is None:
            out = _reverse_pass_cached(plan)
        else:  # one reverse pass per cotangent, stacked, still one submission
            out = _stacked([_reverse_pass(plan, _make_grads(plan.roots, gs)) for gs in plan.batch])
        return _submit(plan, out)


def _reverse_pass(plan, seeds):
    """HIPS autograd's ``backward_pass``: each node, after every node that reads it, receives the sum
    of their cotangents, delivers it, and sends its rule's outputs on.  Builds lazy tensors only."""
    cot = _Cotangents()
    for node, g in zip(plan.nodes, seeds):
        if node is not None:
            cot.add(node, _conform(g, node._output_meta, "root", 0))
    out = Delivery()
    with set_grad_enabled(plan.create_graph):
        for node in plan.order:
            g = cot.pop(node)
            if g is None:
                continue
            out.arrived.append((node, g))
            g = _run_prehooks(node, g, cot, plan, out)
            if node not in plan.runs:
                continue
            cts = _call_rule(node, g, cot)
            out.executed.append(node)
            for i, ((parent, _), ct) in enumerate(zip(node.next_functions, cts)):
                if parent is None or ct is None:
                    continue
                ct = cot.add(parent, ct)
                if is_anomaly_enabled():
                    out.nan_checks.append(NanCheck(node, i, ct))
    return out


# ------------------------------------------------------------------ a reverse pass taken before
class _Walk(NamedTuple):
    """A reverse pass cached (:func:`daskgrad._dask.cached_piece`): its cotangents as a recorded ``piece``,
    made again on another graph of the same structure; ``arrived``, the position in ``plan.order`` of
    the node each cotangent arrived at; ``executed``, the positions of the nodes whose rule ran."""

    piece: door.Piece
    arrived: tuple
    executed: tuple


def _reverse_pass_cached(plan):
    """:func:`_reverse_pass`, or the one a graph of the same structure took, made again on this
    graph's values: a training loop's backward runs its VJP rules (and ``_conform``) the second time
    only, like a program's template its lowering.  The rules are pure functions of what the key
    holds -- ops, params, edges, and the abstract values of the saved tensors and seeds -- and read
    nothing else (a hook, a user's ``Function`` or ``create_graph`` has no key: its rules always run)."""
    key, values, where = _structure(plan)
    if key is None:
        return _reverse_pass(plan, plan.grads)
    cached, seen = door.cached_piece(key)
    if cached:
        return _walked_again(plan, cached, values)
    out = _reverse_pass(plan, plan.grads)
    if seen and cached is None:
        door.cache_piece(key, _walk_of(plan, out, where))
    return out


_NO_KEY = (None, None, None)  # (_structure: a pass whose rules run every time)


def _structure(plan):
    """``(key, values, where)``: the structure of ``plan``'s reverse pass, the values its rules may
    read (the seeds and saved tensors, each once, in order) and ``id(value) -> index``; a key of
    None where the pass has none."""
    if (plan.create_graph or plan.batch is not None or is_anomaly_enabled() or current_trace() is not None
            or dask.get_annotations() or not dask.config.get("daskgrad.step-cache.enabled", True)):
        return _NO_KEY
    values, where = [], {}

    def read(v):
        j = where.get(id(v))
        if j is None:
            j = where[id(v)] = len(values)
            values.append(v)
        return j

    def aval(v):  # (shape included: unknown chunk sizes have NaN in it)
        return v.shape, v.dtype, v.chunks, type(v._meta), type(v) is door.Lazy, read(v)

    at = {n: i for i, n in enumerate(plan.order)}
    runs, targets = plan.runs, plan.targets
    desc = [plan.accumulate, plan.all_leaves, repr(dask.config.get("daskgrad.vjp-resources", None))]
    desc += [(at.get(n), None if g is None else aval(recorded(g))) for n, g in zip(plan.nodes, plan.grads)]
    try:
        for node in plan.order:
            if node._hooks or node._prehooks or node._tensor_hooks:
                return _NO_KEY
            if type(node) is AccumulateGrad:
                if node.variable._hooks:
                    return _NO_KEY
                desc.append(len(targets.get(node, ())))
                continue
            if not node._prim.torch:  # a user's Function, map_blocks: its backward is the user's code
                return _NO_KEY
            saved = ()
            if node in runs:
                saved = []
                for k, v in node._saved.items():
                    if type(v) is not graph.SavedTensor:
                        saved.append((k, door.frozen(v)))
                        continue
                    leaf = v.leaf
                    if leaf is not None and type(leaf._storage) is _ViewStorage:
                        return _NO_KEY
                    x = v._data if leaf is None else leaf._storage.value  # (what unpacking gives)
                    saved.append((k, aval(x), v.requires_grad, leaf is not None, type(v.storage)))
            fparams = getattr(node, "_fparams", None)  # (frozen when recorded, where it could be)
            if fparams is None:
                fparams = door.frozen(tuple(node._params.items()))
            desc.append((type(node), node._prim, fparams,
                         tuple([-1 if p is None else at.get(p, -2) for p, _ in node.next_functions]),
                         node._input_meta, node._output_meta, node in runs, tuple(saved),
                         len(targets.get(node, ())), node._retained is not None))
        key = CacheKey(tuple(desc))  # (hashed once here, where an unhashable part raises TypeError)
    except (door.NoKey, TypeError):
        return _NO_KEY
    return key, values, where


def _walk_of(plan, out, where):
    """The :class:`_Walk` of a pass just taken, or False where a rule read something else (a value
    in memory, an array built now): then it is never cached."""
    if any(g.requires_grad or _delivers(plan, n) and id(recorded(g)) in where for n, g in out.arrived):
        return False  # (a cotangent given, handed on as it is: the caller's tensor, which a recipe cannot give)
    at = {n: i for i, n in enumerate(plan.order)}
    try:
        piece = door.Piece([recorded(g) for _, g in out.arrived], where)
    except door.NoKey:
        return False
    return _Walk(piece, tuple(at[n] for n, _ in out.arrived), tuple(at[n] for n in out.executed))


def _walked_again(plan, walk, values):
    """The :class:`Delivery` of ``walk`` made again on ``plan``'s ``values``."""
    out, order = Delivery(), plan.order
    for i, g in zip(walk.arrived, walk.piece.again(values)):
        if _delivers(plan, order[i]):
            out.deliver(plan, order[i], Tensor._make(g))
    out.executed.extend(order[i] for i in walk.executed)
    return out


def _delivers(plan, node):
    """Whether the cotangent arriving at ``node`` is a gradient the call hands out (:meth:`Delivery.deliver`)."""
    return node in plan.targets or plan.all_leaves and (type(node) is AccumulateGrad or node._retained is not None)


def _stacked(passes):
    """The passes of ``is_grads_batched`` as one: each gradient stacked along a new first axis."""
    return Delivery(found={k: stack([p.found[k] for p in passes]) for k in passes[0].found},
                    executed=list(dict.fromkeys(n for p in passes for n in p.executed)),
                    nan_checks=[c for p in passes for c in p.nan_checks])


class _Cotangents:
    """The cotangents in flight: per node, the sum of what the nodes reading it sent (recorded,
    not built: a backward through N ops costs O(N))."""

    __slots__ = ("_sums",)

    def __init__(self):
        self._sums = {}

    def add(self, node, g):
        """Sum ``g`` into ``node``'s cotangent; returns ``g``."""
        total = self._sums.get(node)
        self._sums[node] = g if total is None else total + g
        return g

    def pop(self, node):
        return self._sums.pop(node, None)


def _run_prehooks(node, g, cot, plan, out):
    """The tensor's hooks, then the node's prehooks where the node runs (and, in backward(), at a leaf
    or a node given as ``inputs=``: not in grad()), as torch orders them; ``g`` is delivered after the tensor's hooks
    for a non-leaf (what retain_grad sees), after the prehooks for a leaf.  User code sees whole
    tensors, which it may compute."""
    leaf = isinstance(node, AccumulateGrad)
    hooks = node.variable._hooks if leaf else node._tensor_hooks
    if (hooks or node._prehooks) and current_trace() is not None:
        current_trace().broke("it runs a hook in its backward (a replay would not call it)")
    if hooks:
        g = _tensor_hooks(hooks, g)
    if not leaf:
        out.deliver(plan, node, g)
    if node._prehooks and (node in plan.runs or (plan.accumulate and (leaf or node in plan.targets))):
        for hook in list(node._prehooks.values()):
            r = hook((g,))
            if r is not None:
                g = r[0]
    if leaf:
        out.deliver(plan, node, g)
    return g


def _tensor_hooks(hooks, g):
    for hook in list(hooks.values()):
        r = hook(g)
        if r is not None:
            if not isinstance(r, Tensor) or r.shape != g.shape:
                name = getattr(hook, "__name__", type(hook).__name__)
                raise RuntimeError(f"hook '{name}' has changed the size of value")
            g = r
    return g


def _call_rule(node, g, cot):
    """``node``'s VJP rule on ``g``, then the node's hooks: one cotangent per input, conformed to
    it (``None``: zero)."""
    with _placement(g), door.rule(f"{node._prim.label(node)}-vjp"):
        cts = node._prim.rule(g, graph._Saved(node), **node._params)
        cts = cts if isinstance(cts, tuple) else (cts,)
        if len(cts) != len(node.next_functions):
            raise RuntimeError(f"function {node.name()} returned an incorrect number of gradients "
                               f"(expected {len(node.next_functions)}, got {len(cts)})")
        cts = tuple(None if ct is None or m is None else _conform(ct, m, node.name(), i)
                    for i, (ct, m) in enumerate(zip(cts, node._input_meta)))
        if not is_grad_enabled():  # named for the dashboard; with create_graph they are the graph's own tensors
            cts = tuple(None if ct is None else _label(ct, node) for ct in cts)
    if node._hooks and current_trace() is not None:
        current_trace().broke("it runs a hook in its backward (a replay would not call it)")
    for hook in list(node._hooks.values()):
        r = hook(cts, (g,))
        if r is not None:  # (torch's: the hook's gradients replace the node's)
            cts = tuple(None if ct is None or m is None else _conform(ct, m, node.name(), i)
                        for i, (ct, m) in enumerate(zip(_hooked_gradients(hook, r, node._input_meta),
                                                        node._input_meta)))
    return cts


def _hooked_gradients(hook, r, metas):
    """What a node's post hook returned, checked as torch checks it (``metas``: the inputs' shapes ...)."""
    name = getattr(hook, "__name__", type(hook).__name__)
    if not isinstance(r, tuple):
        raise TypeError(f"expected tuple, but hook returned '{type(r).__name__}'")
    if len(r) != len(metas):
        raise RuntimeError(f"hook '{name}' has returned an incorrect number of values (got {len(r)}, but expected "
                           f"{len(metas)})")
    for new, m in zip(r, metas):
        if new is not None and m is not None and tuple(new.shape) != tuple(m[0]):
            raise RuntimeError(f"hook '{name}' has changed the size of value")
    return r


def _placement(g):
    """GPU work is pinned to GPU workers.  Every layer a rule makes (its rechunks too) carries the
    annotation, since Blockwise fusion gives a fused task the annotations of all its parts."""
    resources = dask.config.get("daskgrad.vjp-resources", None)
    if resources is None and g.device == "cuda":
        resources = {"GPU": 1}
    return dask.annotate(resources=resources) if resources else contextlib.nullcontext()


def _conform(g, meta, name, index):
    """Give a cotangent the primal's shape (summing broadcast axes), dtype and chunks."""
    shape, dtype, chunks = meta
    if not isinstance(g, Tensor):
        raise TypeError(f"function {name} returned a gradient of type {type(g).__name__}, not a Tensor")
    if any(n != n for n in (*shape, *g.shape)):  # unknown chunk sizes (after a boolean mask) cannot be checked;
        # the broadcast axes are summed (known ones, or an unknown length broadcast from 1)
        if g.ndim != len(shape) or any(a != b and not (a != a and b != b) for a, b in zip(g.shape, shape)):
            g = sum_to(g, shape)
        return g if g.dtype == dtype else g.astype(dtype)
    if g.shape != shape:
        if not _broadcastable(shape, g.shape):
            raise RuntimeError(f"Function {name} returned an invalid gradient at index {index} - got "
                               f"{list(g.shape)} but expected shape compatible with {list(shape)}")
        g = sum_to(g, shape)
    if g.dtype.kind == "c" and dtype.kind != "c":  # torch keeps the real part, and says nothing
        g = real_part(g)
    if g.dtype != dtype:
        g = g.astype(dtype)
    if g.chunks != chunks:
        g = rechunk(g, chunks)
    return g


def _broadcastable(shape, to_shape):
    if len(shape) > len(to_shape):
        return False
    return all(s == t or s == 1 for s, t in zip(shape[::-1], to_shape[::-1]))


def _label(t, node):
    """End the rule's output in a layer named ``<op>-vjp-<token>``: the dashboard shows which rule ran
    (a value the rule made carries it, :func:`daskgrad._dask.labelled`; another gets a relabel op)."""
    label = f"{node._prim.label(node)}-vjp"
    if door.labelled(recorded(t), label):
        return t
    return Tensor._make(door.defer(door.relabel, (recorded(t),), (("prefix", label),)))


# ------------------------------------------------------------------ submit
_grad_locks = weakref.WeakKeyDictionary()  # a tensor's node (compared by identity) -> its lock


def _submit(plan, out):
    """One persist for every gradient (and retained saved value), then ``.grad`` written, the
    post-accumulate hooks run and the graph released; returns the gradients by input ``id``."""
    with _grads_locked(w.tensor for w in out.writes.values()):
        if any(w.tensor._grad is not None for w in out.writes.values()):  # (else no sum to record: the
            with set_grad_enabled(plan.create_graph):                        # mode's switch costs a step's few us)
                out.writes = {k: _summed(plan, w) for k, w in out.writes.items()}
        if not plan.lazy:
            out = _persist(plan, out)
        for w in out.writes.values():
            _write_grad(plan, w)
    tensors = [w.tensor for w in out.writes.values()]
    if any(map(_post_hooked, tensors)):  # (no hook: no mode to switch)
        with set_grad_enabled(plan.create_graph):  # as the engine runs AccumulateGrad
            for t in tensors:
                _post_accumulate(t)
    if not plan.retain_graph:
        for n in out.executed:
            n.release()
    return out.found


def _post_hooked(t):
    """Whether ``t`` has hooks :func:`_post_accumulate` runs."""
    if t._post_hooks:
        return True
    node = t._accumulate_node() if t.grad_fn is None and t._accumulate_node is not None else None
    return node is not None and bool(node._hooks)


def _post_accumulate(t):
    """After ``.grad`` is written: the tensor's post-accumulate-grad hooks, then its AccumulateGrad
    node's posthooks (``hook((), (grad,))``), torch's order."""
    for hook in list(t._post_hooks.values()):
        if hook(t) is not None:
            raise RuntimeError("Tensor post accumulate grad hooks should return None.")
    node = t._accumulate_node() if t.grad_fn is None and t._accumulate_node is not None else None
    for hook in list(node._hooks.values()) if node is not None else ():
        hook((), (t._grad,))


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


def _summed(plan, w):
    """The write of the sum with what ``.grad`` holds: backward accumulates.  A leaf's ``.grad`` that
    is a view (``x.grad = G[1]``) takes the sum in place now, lazily: the write through it to its base
    is pending, so the backward's one submission computes it."""
    t, old = w.tensor, w.tensor._grad
    if old is None:
        return w
    if _in_place(plan, t, old) and type(old._storage) is _ViewStorage:
        old.add_(w.grad)
        return GradWrite(t, old)
    total = old + w.grad
    if total.chunks != old.chunks and _in_place(plan, t, old):  # (a .grad assigned in chunks of its own keeps them)
        total = rechunk(total, old.chunks)
    return GradWrite(t, total)


def _in_place(plan, t, old):
    """Whether backward adds into ``old``, the ``.grad`` leaf ``t`` holds, in place: torch's AccumulateGrad
    does (``variable_grad += new_grad``: a reference to the old ``.grad``, or the tensor assigned to it, sees
    the sum) unless grad mode is on (``create_graph``: ``grad = grad + new_grad``, a new tensor).  A retained
    non-leaf's ``.grad`` (``retain_grad()``, ``backward(inputs=[non_leaf])``) is always summed out of place."""
    return t.grad_fn is None and not plan.create_graph and not plan.lazy


def _persist(plan, out):
    """The submission.  It also computes the values the user holds and will ask for next: the
    roots (``loss.item()`` after ``backward()`` then runs nothing) and the leaves written to,
    whose values every later step reads; they are swapped into their storage."""
    writes = out.writes.items()
    returned = [] if plan.accumulate else out.found.items()  # backward(inputs=) writes .grad, returns nothing
    saved = [v for n in out.executed for v in n.saved_tensors()
             if v.leaf is None and not v.persisted] if plan.retain_graph else []
    flags = nan_flags(out.nan_checks)
    arrays = [recorded(w.grad) for _, w in writes] + [recorded(g) for _, g in returned] + [s.value for s in saved]
    done = runtime.persist(arrays + flags, phase="backward",
                           store=[t._storage for t in plan.roots] + [w.tensor._storage for _, w in writes],
                           keep=slice(0, len(arrays)))  # all the user holds
    grads_out, found_out, saved_out, flags_out = _split(done, writes, returned, saved, flags)
    raise_for_nan(out.nan_checks, flags_out)
    # (the Delivery is this call's own: set in place, not copied)
    out.writes = {k: GradWrite(w.tensor, _computed(w.grad, a)) for (k, w), a in zip(writes, grads_out)}
    if not plan.accumulate:
        out.found = {k: _computed(g, a) for (k, g), a in zip(returned, found_out)}
    for g in [w.grad for w in out.writes.values()] + ([] if plan.accumulate else list(out.found.values())):
        _state.hold(g._storage, door.held_keys(g.array))  # kept on two workers while held
    for s, a in zip(saved, saved_out):
        s.pin(a)
    if plan.retain_graph:
        for n in out.executed:
            runtime.retain(n)
    return out


def _split(seq, *parts):
    """``seq`` cut into consecutive pieces, one as long as each of ``parts``."""
    it = iter(seq)
    return [list(itertools.islice(it, len(p))) for p in parts]


def _computed(g, array):
    """The gradient ``g`` holding its persisted ``array``.  A leaf that requires grad (a cotangent
    passed through unchanged, e.g. ``grad(x + 0, x, v, create_graph=True)``) is returned as itself:
    a copy would cut double backward off from it, since a leaf is reached through its identity."""
    if g.grad_fn is None and g.requires_grad:
        return g
    return Tensor._make(array, g.grad_fn, g.requires_grad)


def _write_grad(plan, w):
    """``w.tensor.grad = w.grad``."""
    t, g = w.tensor, w.grad
    if current_trace() is not None:
        current_trace().broke("it writes .grad")
    if t.grad_fn is not None:
        t.retain_grad()  # backward(inputs=[non_leaf]) fills its .grad, as torch does
    old = t._grad
    if old is not None and _in_place(plan, t, old):  # torch accumulates in place: a reference to the old .grad,
        st = old._storage                              # or the tensor assigned to it, sees the sum
        if type(st) is _ViewStorage:  # written through already (_summed): the sum its base now holds, computed
            st.holds(g.array)
        else:
            st.array, st.version = g.array, st.version + 1
            _state.hold(st)
    else:
        if type(g._storage) is _ViewStorage:  # a rule's view of another cotangent: .grad aliases nothing
            g = Tensor._make(g.array, g.grad_fn, g.requires_grad)
        t._grad = g


# Tensor.backward, installed here: the tensor sits on a floor below the engine
def _tensor_backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
    """Compute the gradient of this tensor with respect to the graph's leaves, as torch's ``Tensor.backward``.

    The graph is differentiated by the chain rule. If this tensor has more than one element,
    ``gradient`` must be given: the gradient of the differentiated function with respect to ``self``
    (the ``v`` of the vector-Jacobian product), of this tensor's shape. The result is *added* into
    the ``.grad`` of each leaf that requires grad (and of each tensor that called ``retain_grad()``):
    zero ``.grad`` or set it to ``None`` between steps.

    Every check (shapes, released graphs, in-place versions, hooks) runs on the client first; then one
    dask graph computes every gradient (on the current distributed client, if any), and the call
    returns when they are in memory. A failing backward writes no ``.grad``.

    Parameters
    ----------
    gradient : Tensor, optional
        The gradient of the function being differentiated with respect to ``self``, of ``self``'s
        shape. May be omitted when ``self`` has one element. Defaults to ``None``.
    retain_graph : bool, optional
        If ``False``, the values the graph saved for its backward are released (a second backward
        through a node that saved values raises torch's error); if ``True``, they are kept. Defaults
        to ``None``: the value of ``create_graph``.
    create_graph : bool, optional
        If ``True``, the backward itself is recorded, so the gradients have a ``grad_fn`` and can be
        differentiated again (higher-order derivatives). Defaults to ``False``.
    inputs : Tensor or sequence of Tensor, optional
        The tensors into whose ``.grad`` the gradient is accumulated; all others are left alone.
        If not given, every leaf used to compute ``self``. Defaults to ``None``.

    Returns
    -------
    None

    Examples
    --------
    >>> x = dg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> ((2 * x) ** 3).backward(dg.tensor([1.0, 0.1, 0.5]))
    >>> x.grad
    tensor([ 24.0000,   9.6000, 108.0000])
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


_tensor_backward.__name__, _tensor_backward.__qualname__ = "backward", "Tensor.backward"  # help() shows it so
Tensor.backward = _tensor_backward
